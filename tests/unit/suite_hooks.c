/*
 * Interposition: every entry point of the table is exported, intercepted,
 * and forwarded with identical arguments and return values (error codes
 * too), from a framework loaded RTLD_LOCAL; nothing else is exported but
 * dlsym, c10's report of the caching allocator (released.c) and the shim's
 * own h3shim_host_time and h3shim_pause.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t_common.h"

START_TEST(exports_match_table)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", t_shim_path());
    FILE *p = popen(cmd, "r");
    ck_assert(p != NULL);
    char line[512];
    size_t exported = 0;
    while (fgets(line, sizeof(line), p) != NULL) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3 || strcmp(type, "T") != 0)
            continue;
        exported++;
        bool known = strcmp(name, "dlsym") == 0 || strcmp(name, "h3shim_host_time") == 0 ||
                     strcmp(name, "h3shim_pause") == 0 ||
                     strcmp(name, "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE") == 0;
        for (size_t i = 0; i < t_fw_nentries && !known; i++)
            known = strcmp(t_fw_entries[i].name, name) == 0;
        ck_assert_msg(known, "libh3shim.so exports %s, which is not in shim/hooks.def", name);
    }
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_uint_eq(exported, t_fw_nentries + 4);
}
END_TEST

/* Calls entry `i` and checks the fake received exactly the words sent. */
static long long call_and_compare(size_t i, uint64_t seed)
{
    const struct fw_entry *e = &t_fw_entries[i];
    uint64_t sent[FAKE_MAX_ARGS];
    int nargs = 0;
    size_t before = fakelog_count();
    long long r = e->call(seed, sent, &nargs);
    long at = fakelog_find(e->name, before);
    ck_assert_msg(at >= 0, "%s never reached the fake %s library", e->name, e->lib);
    struct fakelog_entry got;
    ck_assert(fakelog_get((size_t)at, &got));
    ck_assert_int_eq(got.nargs, nargs);
    for (int a = 0; a < nargs; a++)
        ck_assert_msg(got.args[a] == sent[a], "%s argument %d: sent %#llx, received %#llx", e->name, a,
                      (unsigned long long)sent[a], (unsigned long long)got.args[a]);
    return r;
}

START_TEST(forwards_identical_arguments)
{
    ck_assert_uint_gt(t_fw_nentries, 20);
    for (size_t i = 0; i < t_fw_nentries; i++)
        for (uint64_t seed = 1; seed <= 3; seed++)
            ck_assert_msg(call_and_compare(i, seed * 7919 + i) == 0, "%s failed", t_fw_entries[i].name);
}
END_TEST

START_TEST(forwards_identical_arguments_traced)
{
    setenv("H3SHIM_TRACE", t_path("trace.jsonl"), 1);
    for (size_t i = 0; i < t_fw_nentries; i++)
        ck_assert_msg(call_and_compare(i, 31 + i) == 0, "%s failed", t_fw_entries[i].name);
}
END_TEST

START_TEST(returns_error_codes_unchanged)
{
    setenv("H3SHIM_TRACE", t_path("trace.jsonl"), 1);
    static const long long codes[] = {1, 3, 7, 999, 0};
    for (size_t i = 0; i < t_fw_nentries; i++) {
        for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
            fakelog_set_result(t_fw_entries[i].name, codes[c]);
            long long r = call_and_compare(i, 5 + c);
            ck_assert_msg(r == codes[c], "%s returned %lld where the library returned %lld",
                          t_fw_entries[i].name, r, codes[c]);
        }
    }
}
END_TEST

START_TEST(nested_library_launch_is_one_call)
{
    char *trace = t_path("trace.jsonl");
    setenv("H3SHIM_TRACE", trace, 1);
    t_call("cublasLtMatmul", 11);
    /* The fake cuBLASLt launched its kernel through the driver ... */
    ck_assert_uint_eq(fakelog_count_fn("cuLaunchKernel"), 1);
    /* ... which the trace shows as part of the one library call. */
    char *text = t_read_file(trace, NULL);
    ck_assert(text != NULL);
    ck_assert_uint_eq(t_count_lines(text), 1);
    ck_assert(strstr(text, "\"api\":\"cublasLtMatmul\"") != NULL);
    free(text);
}
END_TEST

Suite *t_suite_hooks(void)
{
    Suite *s = suite_create("hooks");
    TCase *tc = tcase_create("forward");
    tcase_add_checked_fixture(tc, t_setup, t_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, exports_match_table);
    tcase_add_test(tc, forwards_identical_arguments);
    tcase_add_test(tc, forwards_identical_arguments_traced);
    tcase_add_test(tc, returns_error_codes_unchanged);
    tcase_add_test(tc, nested_library_launch_is_one_call);
    suite_add_tcase(s, tc);
    return s;
}
