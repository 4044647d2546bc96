/*
 * Prints the README's table of H3SHIM_* variables from shim/config.def, so
 * the documentation and the parser share one list.  `make check-readme`
 * fails when README.md holds another table.
 */
#include <stdio.h>

int main(void)
{
    puts("| variable | default | meaning |");
    puts("|---|---|---|");
#define H3_CONFIG(name, type, field, def, help) \
    printf("| `%s` | %s%s%s | %s |\n", #name, def[0] ? "`" : "", def[0] ? def : "(unset)", def[0] ? "`" : "", help);
#include "config.def"
#undef H3_CONFIG
    return 0;
}
