/*
 * Runs a libFuzzer target over files, without libFuzzer: `make check` builds
 * each target with this main and the sanitizers and replays its corpus, so
 * that a target that stops building or an input that crashes the parser
 * again is found by CI (which has no clang).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            perror(argv[i]);
            return 2;
        }
        uint8_t *data = malloc(1 << 20);
        size_t size = data != NULL ? fread(data, 1, 1 << 20, f) : 0;
        fclose(f);
        if (data == NULL)
            return 2;
        LLVMFuzzerTestOneInput(data, size);
        free(data);
    }
    printf("%d inputs replayed\n", argc - 1);
    return 0;
}
