/*
 * The Check runner: every suite of T_SUITES, in fork mode (each test in its
 * own process, so each sees the shim initialise from its own environment),
 * with timeouts.  Refuses to run without the shim preloaded: every test here
 * is about the preloaded library.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t_common.h"

int main(void)
{
    void *self = dlsym(RTLD_DEFAULT, "cublasLtMatmul");
    Dl_info info;
    if (self == NULL || dladdr(self, &info) == 0 || strstr(info.dli_fname, "libh3shim") == NULL) {
        fprintf(stderr, "check_h3shim: libh3shim.so is not preloaded; run `make check`\n");
        return 2;
    }
    SRunner *sr = srunner_create(NULL);
#define T_ADD(name) srunner_add_suite(sr, t_suite_##name());
    T_SUITES(T_ADD)
#undef T_ADD
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
