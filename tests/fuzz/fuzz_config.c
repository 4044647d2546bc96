/*
 * libFuzzer target for the environment parser (make fuzz-config): the input
 * is split at newlines into an environment of H3SHIM_* variables.  Any value
 * must leave a configuration within its documented ranges.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h3shim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    char *envp[65];
    int n = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line != NULL && n < 64;
         line = strtok_r(NULL, "\n", &save))
        envp[n++] = line;
    envp[n] = NULL;
    h3_log_level = -1; /* quiet: the parser's warnings are not under test here */
    h3_config_load(envp);
    if (h3_config.trace_backtrace < 0 || h3_config.trace_backtrace > 64 || h3_config.debug_level < 0 ||
        h3_config.debug_level > 2 || h3_config.trace_format < 0 || h3_config.trace_format > 1 ||
        h3_config.trace_path == NULL || h3_config.debug_subsys == NULL || h3_config.lt_shadow < 0 ||
        h3_config.lt_shadow > 2)
        __builtin_trap();
    free(text);
    return 0;
}
