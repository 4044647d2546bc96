/*
 * h3sig: validates and pretty-prints h3shim signature files
 * (signatures/FORMAT.md).
 *
 *   h3sig [-q] FILE...
 *
 * Prints each valid file in canonical form on stdout (nothing with -q) and a
 * one-line summary on stderr; prints "FILE:LINE: problem" on stderr for an
 * invalid one.  Exit status: 0 when every file is valid, 1 when one is not,
 * 2 for a usage error.  It uses the same parser as the library.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3shim.h"

#define H3SIG_MAX_BYTES (16u << 20)

static int check_file(const char *path, bool quiet)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return 1;
    }
    char *text = malloc(H3SIG_MAX_BYTES);
    size_t len = text != NULL ? fread(text, 1, H3SIG_MAX_BYTES, f) : 0;
    bool too_big = text != NULL && len == H3SIG_MAX_BYTES && fgetc(f) != EOF;
    fclose(f);
    if (text == NULL || too_big) {
        fprintf(stderr, "%s: %s\n", path, text == NULL ? "out of memory" : "file too large");
        free(text);
        return 1;
    }
    char err[512];
    struct h3_sig *sig = h3_sig_parse(text, len, path, err, sizeof(err));
    free(text);
    if (sig == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    unsigned counts[3] = {0, 0, 0}, slots = 0, dead = 0;
    for (uint32_t i = 0; i < sig->ncalls; i++) {
        counts[sig->calls[i].kind]++;
        slots += sig->calls[i].nslots;
        for (uint32_t j = 0; j < sig->calls[i].nslots; j++)
            dead += sig->calls[i].slots[j].dead;
    }
    if (!quiet)
        h3_sig_print(stdout, sig);
    fprintf(stderr, "%s: valid: model %s, group %s, %u calls (%u launch, %u matmul, %u cudnn), %u pointer slots, "
                    "%u dead, torch %s, sm %s\n",
            path, sig->model, sig->group, sig->ncalls, counts[0], counts[1], counts[2], slots, dead, sig->torch,
            sig->sm);
    h3_sig_free(sig);
    return 0;
}

int main(int argc, char **argv)
{
    bool quiet = false;
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "-q") == 0) {
        quiet = true;
        first = 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: h3sig [-q] FILE...\n");
        return 2;
    }
    int status = 0;
    for (int i = first; i < argc; i++)
        status |= check_file(argv[i], quiet);
    return status;
}
