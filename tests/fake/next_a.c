/*
 * libh3nexta.so and libh3nextb.so both
 * define h3t_probe.  A's h3t_next_probe looks h3t_probe up with RTLD_NEXT,
 * which must find B's: the test program links A then B, so the program's
 * scope is [program, shim (preloaded), ..., A, B].  That only holds when the
 * dlsym interposer forwards with the original caller's return address:
 * relative to the shim, RTLD_NEXT would find A's.
 */
#include <dlfcn.h>
#include <stddef.h>

__attribute__((visibility("default"))) int h3t_probe(void)
{
    return 1;
}

__attribute__((visibility("default"))) int h3t_next_probe(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "h3t_probe");
    return next != NULL ? next() : -1;
}
