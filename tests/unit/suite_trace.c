/*
 * The trace: JSON lines with the documented fields, Chrome format, many
 * threads, fork, backtraces, stderr, and an unwritable path.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvapi.h"
#include "t_common.h"

/* Checks every line of `text` is one valid JSON object; returns the count. */
static size_t check_lines(char *text)
{
    size_t n = 0;
    for (char *line = text; *line != '\0';) {
        char *nl = strchr(line, '\n');
        ck_assert_msg(nl != NULL, "trace ends in a torn line");
        ck_assert_msg(t_json_valid(line, (size_t)(nl - line)), "invalid JSON line: %.*s", (int)(nl - line), line);
        n++;
        line = nl + 1;
    }
    return n;
}

/* The record of the first line mentioning `api`, copied into buf. */
static const char *line_with(const char *text, const char *api, char *buf, size_t cap)
{
    char needle[128];
    snprintf(needle, sizeof(needle), "\"api\":\"%s\"", api);
    const char *at = strstr(text, needle);
    ck_assert_msg(at != NULL, "no record for %s", api);
    while (at > text && at[-1] != '\n')
        at--;
    const char *nl = strchr(at, '\n');
    size_t n = (size_t)(nl - at);
    ck_assert(n < cap);
    memcpy(buf, at, n);
    buf[n] = '\0';
    return buf;
}

static void expect_field(const char *rec, const char *key, const char *value)
{
    char got[4096];
    ck_assert_msg(t_json_get(rec, strlen(rec), key, got, sizeof(got)), "no field %s in %s", key, rec);
    if (value != NULL)
        ck_assert_msg(strcmp(got, value) == 0, "field %s is %s, expected %s", key, got, value);
}

START_TEST(jsonl_records_have_the_fields)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    for (size_t i = 0; i < t_fw_nentries; i++)
        t_call(t_fw_entries[i].name, 100 + i);
    char *text = t_read_file(trace, NULL);
    ck_assert(text != NULL);
    /* One record per call, the PROCADDR entries included; configuration
     * calls (CONFIG) are remembered, not traced. */
    size_t traced = 0;
    for (size_t i = 0; i < t_fw_nentries; i++)
        traced += strcmp(t_fw_entries[i].kind, "CONFIG") != 0;
    ck_assert_uint_eq(check_lines(text), traced);
    static const char *const common[] = {"seq", "t_ns", "dur_ns", "pid", "tid", "dev", "api", "stream",
                                         "fp", "result", "decision", "reason"};
    char rec[16384];
    for (size_t i = 0; i < t_fw_nentries; i++) {
        if (strcmp(t_fw_entries[i].kind, "CONFIG") == 0)
            continue;
        line_with(text, t_fw_entries[i].name, rec, sizeof(rec));
        for (size_t f = 0; f < sizeof(common) / sizeof(common[0]); f++)
            expect_field(rec, common[f], NULL);
    }
    line_with(text, "__cudaLaunchKernel", rec, sizeof(rec));
    expect_field(rec, "decision", "\"passthrough\"");
    expect_field(rec, "param_sizes", "[8,4,16]");
    expect_field(rec, "param_bytes", "28");
    expect_field(rec, "dev", "0");
    /* The name the driver gave, exactly: signatures match it. */
    expect_field(rec, "kernel", "\"_ZN2at6native29vectorized_elementwise_kernelILi8EEEviT_\"");
    expect_field(rec, "grid", NULL);
    expect_field(rec, "block", NULL);
    expect_field(rec, "shmem", NULL);

    line_with(text, "cublasLtMatmul", rec, sizeof(rec));
    char mm[4096];
    ck_assert(t_json_get(rec, strlen(rec), "matmul", mm, sizeof(mm)));
    expect_field(mm, "m", "6144");
    expect_field(mm, "n", "1797");
    expect_field(mm, "k", "2048");
    expect_field(mm, "transa", "1");
    expect_field(mm, "compute", "68"); /* CUBLAS_COMPUTE_32F */
    char epi[32];
    snprintf(epi, sizeof(epi), "%d", (int)CUBLASLT_EPILOGUE_BIAS);
    expect_field(mm, "epilogue", epi);
    char algo[1024];
    ck_assert(t_json_get(mm, strlen(mm), "algo", algo, sizeof(algo)));
    expect_field(algo, "id", "66");
    expect_field(algo, "stages", "21");
    expect_field(algo, "cluster", "2");
    char a[512];
    ck_assert(t_json_get(mm, strlen(mm), "a", a, sizeof(a)));
    expect_field(a, "ld", "2048");
    static const char *const ptrs[] = {"A", "B", "C", "D", "bias", "workspace_ptr"};
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
        expect_field(mm, ptrs[i], NULL);

    line_with(text, "cudnnBackendExecute", rec, sizeof(rec));
    char dnn[2048];
    ck_assert(t_json_get(rec, strlen(rec), "cudnn", dnn, sizeof(dnn)));
    expect_field(dnn, "pack_known", "true");
    expect_field(dnn, "uids", "[1,2,3,4]");
    expect_field(dnn, "ptrs", "[\"0x1000\",\"0x2000\",\"0x3000\",\"0x4000\"]");
    expect_field(dnn, "workspace", "\"0x5000\"");

    line_with(text, "cublasGemmEx", rec, sizeof(rec));
    char gemm[2048];
    ck_assert(t_json_get(rec, strlen(rec), "gemm", gemm, sizeof(gemm)));
    expect_field(gemm, "A", NULL);
    expect_field(gemm, "batch", "1");
    line_with(text, "cuGetProcAddress_v2", rec, sizeof(rec));
    expect_field(rec, "symbol", "\"cuLaunchKernel\"");
    expect_field(rec, "decision", "\"interposed\"");
    free(text);
}
END_TEST

START_TEST(writes_show_their_destination)
{
    /* A call that writes memory records where and how much: what a cache of
     * device data must know, and what one debugging a changed result asks. */
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    uint64_t sent[FAKE_MAX_ARGS];
    int nargs = 0;
    t_fw_call("cudaMemsetAsync", 77, sent, &nargs);
    t_fw_call("cuMemsetD32Async", 78, sent + 8, &nargs);
    char *text = t_read_file(trace, NULL);
    char rec[8192], want[64];
    line_with(text, "cudaMemsetAsync", rec, sizeof(rec));
    snprintf(want, sizeof(want), "\"%#llx\"", (unsigned long long)sent[0]);
    expect_field(rec, "dst", want);
    snprintf(want, sizeof(want), "%llu", (unsigned long long)sent[2]);
    expect_field(rec, "bytes", want);
    line_with(text, "cuMemsetD32Async", rec, sizeof(rec));
    snprintf(want, sizeof(want), "%llu", (unsigned long long)(sent[8 + 2] * 4)); /* N words of 4 bytes */
    expect_field(rec, "bytes", want);
    free(text);
}
END_TEST

START_TEST(params_are_dumped_on_request)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    setenv("H3SHIM_TRACE_PARAMS", "1", 1);
    t_call("__cudaLaunchKernel", 77);
    char *text = t_read_file(trace, NULL);
    ck_assert_uint_eq(check_lines(text), 1);
    char params[512];
    ck_assert(t_json_get(text, strlen(text) - 1, "params", params, sizeof(params)));
    /* The framework's kernel takes 8, 4 and 16 bytes: 16, 8 and 32 hex digits. */
    char p0[64], p1[64], p2[64];
    ck_assert_msg(sscanf(params, "[\"%63[0-9a-f]\",\"%63[0-9a-f]\",\"%63[0-9a-f]\"]", p0, p1, p2) == 3, "%s", params);
    ck_assert_uint_eq(strlen(p0), 16);
    ck_assert_uint_eq(strlen(p1), 8);
    ck_assert_uint_eq(strlen(p2), 32);
    free(text);
}
END_TEST

#define T_THREADS 8
#define T_CALLS 200

static void *thread_body(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < T_CALLS; i++) {
        uint64_t sent[FAKE_MAX_ARGS];
        int nargs;
        t_fw_call(i % 2 ? "__cudaLaunchKernel" : "cublasLtMatmul", seed * 1000 + (uint64_t)i, sent, &nargs);
    }
    return NULL;
}

START_TEST(many_threads_one_line_per_call)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    pthread_t th[T_THREADS];
    for (int i = 0; i < T_THREADS; i++)
        pthread_create(&th[i], NULL, thread_body, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < T_THREADS; i++)
        pthread_join(th[i], NULL);
    char *text = t_read_file(trace, NULL);
    ck_assert_uint_eq(check_lines(text), T_THREADS * T_CALLS);
    /* Sequence numbers are unique. */
    static char seen[T_THREADS * T_CALLS];
    for (char *line = text; *line != '\0'; line = strchr(line, '\n') + 1) {
        char seq[32];
        ck_assert(t_json_get(line, (size_t)(strchr(line, '\n') - line), "seq", seq, sizeof(seq)));
        long v = atol(seq);
        ck_assert(v >= 0 && v < T_THREADS * T_CALLS && !seen[v]);
        seen[v] = 1;
    }
    free(text);
}
END_TEST

START_TEST(fork_child_gets_its_own_trace)
{
    char *pattern = t_path("trace-%p.jsonl");
    setenv("H3SHIM_TRACE", pattern, 1);
    t_call("__cudaLaunchKernel", 1);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 5; i++)
            t_call("cublasLtMatmul", (uint64_t)i);
        exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    t_call("__cudaLaunchKernel", 2);
    char name[64];
    snprintf(name, sizeof(name), "trace-%d.jsonl", (int)pid);
    char *child = t_read_file(t_path(name), NULL);
    ck_assert(child != NULL);
    ck_assert_uint_eq(check_lines(child), 5);
    snprintf(name, sizeof(name), "trace-%d.jsonl", (int)getpid());
    char *parent = t_read_file(t_path(name), NULL);
    ck_assert(parent != NULL);
    ck_assert_uint_eq(check_lines(parent), 2);
    free(child);
    free(parent);
}
END_TEST

static void chrome_child(void)
{
    setenv("H3SHIM_TRACE", t_path("trace.json"), 1);
    setenv("H3SHIM_TRACE_FORMAT", "chrome", 1);
    for (size_t i = 0; i < t_fw_nentries; i++)
        t_call(t_fw_entries[i].name, i);
}

START_TEST(chrome_format_is_one_json_array)
{
    ck_assert_int_eq(t_in_child(chrome_child), 0);
    size_t len;
    char *text = t_read_file(t_path("trace.json"), &len);
    ck_assert(text != NULL);
    ck_assert_msg(t_json_valid(text, len), "Chrome trace is not valid JSON");
    ck_assert(text[0] == '[');
    ck_assert(strstr(text, "\"ph\":\"X\"") != NULL);
    ck_assert(strstr(text, "\"cat\":\"cublasLtMatmul\"") != NULL);
    free(text);
}
END_TEST

START_TEST(trace_to_stderr)
{
    const char *err = t_capture_stderr();
    setenv("H3SHIM_TRACE", "-", 1);
    t_call("cudnnBackendExecute", 4);
    char *text = t_read_file(err, NULL);
    ck_assert_uint_eq(check_lines(text), 1);
    free(text);
}
END_TEST

START_TEST(unwritable_trace_warns_and_passes_through)
{
    const char *err = t_capture_stderr();
    setenv("H3SHIM_TRACE", "/nonexistent-h3shim-dir/trace.jsonl", 1);
    ck_assert_int_eq(t_call("cublasLtMatmul", 4), 0);
    ck_assert_int_eq(t_call("__cudaLaunchKernel", 4), 0);
    char *text = t_read_file(err, NULL);
    ck_assert_msg(strstr(text, "h3shim:") != NULL && strstr(text, "cannot open trace") != NULL, "stderr: %s", text);
    ck_assert_uint_eq(t_count_lines(text), 1);
    free(text);
}
END_TEST

START_TEST(backtrace_frames)
{
    const char *err = t_capture_stderr();
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    setenv("H3SHIM_TRACE_BACKTRACE", "4", 1);
    t_call("cublasLtMatmul", 4);
    char *text = t_read_file(trace, NULL);
    ck_assert_uint_eq(check_lines(text), 1);
    char bt[8192];
    bool have = t_json_get(text, strlen(text) - 1, "bt", bt, sizeof(bt));
    void *unw = dlopen("libunwind.so.8", RTLD_NOW | RTLD_NOLOAD);
    if (unw != NULL) {
        ck_assert(have);
        /* The first frame is the caller of cublasLtMatmul: the framework. */
        const char *first_end = strchr(bt, ',');
        const char *fw = strstr(bt, "libh3fakeframework.so+");
        ck_assert_msg(fw != NULL && (first_end == NULL || fw < first_end), "bt %s", bt);
    } else {
        char *e = t_read_file(err, NULL);
        ck_assert_msg(strstr(e, "libunwind") != NULL, "no notice about the missing libunwind: %s", e);
        fprintf(stdout, "SKIP backtrace frames: libunwind.so.8 is not installed\n");
        free(e);
    }
    free(text);
}
END_TEST

Suite *t_suite_trace(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_add_checked_fixture(tc, t_setup, t_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, jsonl_records_have_the_fields);
    tcase_add_test(tc, params_are_dumped_on_request);
    tcase_add_test(tc, writes_show_their_destination);
    tcase_add_test(tc, many_threads_one_line_per_call);
    tcase_add_test(tc, fork_child_gets_its_own_trace);
    tcase_add_test(tc, chrome_format_is_one_json_array);
    tcase_add_test(tc, trace_to_stderr);
    tcase_add_test(tc, unwritable_trace_warns_and_passes_through);
    tcase_add_test(tc, backtrace_frames);
    suite_add_tcase(s, tc);
    return s;
}
