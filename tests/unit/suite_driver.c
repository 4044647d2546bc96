/*
 * Driver entry points reached without link-time references: cuGetProcAddress
 * answers, dlsym on a libcuda handle (the runtime's and Triton's way), and
 * the dlsym traps: a library looking itself up on its own handle (cuDNN),
 * RTLD_NEXT from another library, a CUDA call from a library constructor.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "nvapi.h"
#include "t_common.h"

/* Whether `p` is a function of libh3shim.so named `name` (NULL: any). */
static bool in_shim(void *p, const char *name)
{
    Dl_info info;
    if (p == NULL || dladdr(p, &info) == 0 || strstr(info.dli_fname, "libh3shim") == NULL)
        return false;
    return name == NULL || (info.dli_sname != NULL && strcmp(info.dli_sname, name) == 0);
}

static bool in_fake(void *p, const char *lib)
{
    Dl_info info;
    return p != NULL && dladdr(p, &info) != 0 && strstr(info.dli_fname, lib) != NULL;
}

static void *libcuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "the framework did not load the fake libcuda.so.1");
    return h;
}

START_TEST(dlsym_on_libcuda_answers_wrappers)
{
    void *h = libcuda();
    ck_assert(in_shim(dlsym(h, "cuGetProcAddress_v2"), "cuGetProcAddress_v2"));
    ck_assert(in_shim(dlsym(h, "cuGetProcAddress"), "cuGetProcAddress"));
    ck_assert(in_shim(dlsym(h, "cuLaunchKernelEx"), "cuLaunchKernelEx"));
    ck_assert(in_shim(dlsym(h, "cuLaunchKernel_ptsz"), "cuLaunchKernel_ptsz"));
    /* Anything else is the library's own. */
    ck_assert(in_fake(dlsym(h, "cuKernelGetName"), "fake/libcuda.so.1"));
    ck_assert(dlsym(h, "cuNoSuchFunction") == NULL);
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    ck_assert(rt != NULL);
    ck_assert(dlsym(rt, "cuLaunchKernel") == NULL);
    ck_assert(in_fake(dlsym(rt, "cudaGetFuncBySymbol"), "fake/libcudart.so.13"));
}
END_TEST

START_TEST(procaddr_answers_wrappers_by_pointer)
{
    PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(libcuda(), "cuGetProcAddress_v2");
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    ck_assert_int_eq(gpa("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuLaunchKernel"));
    ck_assert_int_eq(gpa("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st), CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuLaunchKernel_ptsz"));
    ck_assert_int_eq(gpa("cuLaunchKernelEx", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st), CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuLaunchKernelEx_ptsz"));
    ck_assert_int_eq(gpa("cuGetProcAddress", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuGetProcAddress_v2"));
    /* Calls that submit work or synchronise are answered too (they flush the engine). */
    ck_assert_int_eq(gpa("cuMemcpyDtoHAsync", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuMemcpyDtoHAsync_v2"));
    ck_assert_int_eq(gpa("cuMemcpyDtoHAsync", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                     CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuMemcpyDtoHAsync_v2_ptsz"));
    ck_assert_int_eq(gpa("cuStreamSynchronize", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuStreamSynchronize"));
    ck_assert_int_eq(gpa("cuKernelGetName", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
    ck_assert(in_fake(p, "fake/libcuda.so.1"));
    p = (void *)1;
    ck_assert_int_eq(gpa("cuNoSuchFunction", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_ERROR_NOT_FOUND);
    ck_assert(p == NULL);
    /* The CUDA 11 form answers the same way. */
    PFN_cuGetProcAddress_v11030 gpa1 = (PFN_cuGetProcAddress_v11030)dlsym(libcuda(), "cuGetProcAddress");
    ck_assert_int_eq(gpa1("cuLaunchKernelEx", &p, 11060, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_SUCCESS);
    ck_assert(in_shim(p, "cuLaunchKernelEx"));
}
END_TEST

START_TEST(runtime_launches_reach_driver_through_wrappers)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    unsigned long runs = fake_kernel_runs();
    ck_assert_int_eq(t_call("__cudaLaunchKernel", 3), 0);
    ck_assert_uint_eq(fake_kernel_runs(), runs + 1);
    /* The runtime's own driver launch is nested: one record, not two. */
    char *text = t_read_file(trace, NULL);
    ck_assert_uint_eq(t_count_lines(text), 1);
    ck_assert(strstr(text, "\"api\":\"__cudaLaunchKernel\"") != NULL);
    free(text);
}
END_TEST

typedef int triton_launch_fn(void **found);

START_TEST(triton_style_lookup_is_seen)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    void *h = t_load("libh3faketriton.so", RTLD_NOW | RTLD_LOCAL);
    triton_launch_fn *launch = (triton_launch_fn *)dlsym(h, "triton_launch");
    void *found = NULL;
    ck_assert_int_eq(launch(&found), CUDA_SUCCESS);
    ck_assert(in_shim(found, "cuLaunchKernelEx"));
    ck_assert_uint_eq(fakelog_count_fn("cuLaunchKernelEx"), 1);
    char *text = t_read_file(trace, NULL);
    ck_assert(strstr(text, "\"api\":\"cuLaunchKernelEx\"") != NULL);
    ck_assert(strstr(text, "triton_poi_fused_add_0") != NULL);
    ck_assert(strstr(text, "\"grid\":[64,1,1]") != NULL);
    free(text);
}
END_TEST

START_TEST(library_self_lookup_gets_its_own_symbol)
{
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    ck_assert(h != NULL);
    ck_assert(in_fake(dlsym(h, "cudnnBackendExecute"), "fake/libcudnn.so.9"));
    ck_assert(in_shim(dlsym(RTLD_DEFAULT, "cudnnBackendExecute"), "cudnnBackendExecute"));
    /* The fake cuDNN checks the same inside cudnnBackendExecute. */
    ck_assert_int_eq(t_call("cudnnBackendExecute", 9), CUDNN_STATUS_SUCCESS);
}
END_TEST

/* libh3nexta.so, linked into the test program (tests/tests.mk). */
int h3t_next_probe(void);

START_TEST(rtld_next_resolves_relative_to_the_caller)
{
    /* 2: libh3nextb.so's, the next after libh3nexta.so.  1 would be A's own
     * (the next after the shim), the answer of a dlsym that forwards from
     * its own frame. */
    ck_assert_int_eq(h3t_next_probe(), 2);
}
END_TEST

START_TEST(call_from_library_constructor)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    void *h = t_load("libh3fakector.so", RTLD_NOW | RTLD_LOCAL);
    int *result = dlsym(h, "h3t_ctor_result");
    ck_assert(result != NULL);
    ck_assert_int_eq(*result, 0);
    ck_assert_uint_eq(fakelog_count_fn("__cudaLaunchKernel"), 1);
    char *text = t_read_file(trace, NULL);
    ck_assert(text != NULL && strstr(text, "ctor_kernel") != NULL);
    free(text);
}
END_TEST

START_TEST(disabled_is_pure_passthrough)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_DISABLE", "1", 1);
    setenv("H3SHIM_TRACE", trace, 1);
    for (size_t i = 0; i < t_fw_nentries; i++) {
        uint64_t sent[FAKE_MAX_ARGS];
        int nargs;
        size_t before = fakelog_count();
        ck_assert_int_eq(t_fw_entries[i].call(i, sent, &nargs), 0);
        long at = fakelog_find(t_fw_entries[i].name, before);
        ck_assert(at >= 0);
        struct fakelog_entry got;
        fakelog_get((size_t)at, &got);
        ck_assert(memcmp(got.args, sent, (size_t)nargs * 8) == 0);
    }
    /* No driver wrappers handed out, no trace written. */
    ck_assert(in_fake(dlsym(libcuda(), "cuLaunchKernelEx"), "fake/libcuda.so.1"));
    ck_assert(t_read_file(trace, NULL) == NULL);
}
END_TEST

START_TEST(driver_interposition_can_be_switched_off)
{
    setenv("H3SHIM_INTERPOSE_DRIVER", "0", 1);
    ck_assert(in_fake(dlsym(libcuda(), "cuLaunchKernelEx"), "fake/libcuda.so.1"));
    PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(libcuda(), "cuGetProcAddress_v2");
    ck_assert(in_fake((void *)gpa, "fake/libcuda.so.1"));
    /* The exported entry points are still interposed. */
    ck_assert_int_eq(t_call("cuLaunchKernel", 1), 0);
    ck_assert_int_eq(t_call("cublasLtMatmul", 1), 0);
}
END_TEST

Suite *t_suite_driver(void)
{
    Suite *s = suite_create("driver");
    TCase *tc = tcase_create("driver");
    tcase_add_checked_fixture(tc, t_setup, t_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dlsym_on_libcuda_answers_wrappers);
    tcase_add_test(tc, procaddr_answers_wrappers_by_pointer);
    tcase_add_test(tc, runtime_launches_reach_driver_through_wrappers);
    tcase_add_test(tc, triton_style_lookup_is_seen);
    tcase_add_test(tc, library_self_lookup_gets_its_own_symbol);
    tcase_add_test(tc, rtld_next_resolves_relative_to_the_caller);
    tcase_add_test(tc, call_from_library_constructor);
    tcase_add_test(tc, disabled_is_pure_passthrough);
    tcase_add_test(tc, driver_interposition_can_be_switched_off);
    suite_add_tcase(s, tc);
    return s;
}
