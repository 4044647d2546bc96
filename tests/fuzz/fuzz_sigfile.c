/* libFuzzer target for the signature parser (make fuzz). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "h3shim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct h3_sig *sig = h3_sig_parse((const char *)data, size, "fuzz", err, sizeof(err));
    if (sig != NULL) {
        /* A valid signature prints and re-parses to the same signature. */
        char *out = NULL;
        size_t outlen = 0;
        FILE *f = open_memstream(&out, &outlen);
        h3_sig_print(f, sig);
        fclose(f);
        struct h3_sig *again = h3_sig_parse(out, outlen, "fuzz-again", err, sizeof(err));
        if (again == NULL)
            __builtin_trap();
        h3_sig_free(again);
        free(out);
        h3_sig_free(sig);
    }
    return 0;
}
