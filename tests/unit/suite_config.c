/*
 * Configuration and statistics: bad values and unknown names give one clear
 * message each and a safe default; values set are echoed at INFO; the debug
 * log goes to a file; the stats table is printed at exit.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t_common.h"

static char *stderr_of_calls(void)
{
    const char *err = t_capture_stderr();
    for (size_t i = 0; i < t_fw_nentries; i++)
        ck_assert_msg(t_call(t_fw_entries[i].name, i) == 0, "%s failed", t_fw_entries[i].name);
    return t_read_file(err, NULL);
}

START_TEST(bad_values_warn_and_use_defaults)
{
    setenv("H3SHIM_STATS", "maybe", 1);
    setenv("H3SHIM_TRACE_BACKTRACE", "-3", 1);
    setenv("H3SHIM_DEBUG", "LOUD", 1);
    setenv("H3SHIM_TRACE_FORMAT", "xml", 1);
    setenv("H3SHIM_TRACEE", "/tmp/x", 1);
    setenv("H3SHIM_LT_SHADOW", "7", 1);
    char *err = stderr_of_calls();
    static const char *const expected[] = {
        "invalid value 'maybe' for H3SHIM_STATS; using default 0",
        "invalid value '-3' for H3SHIM_TRACE_BACKTRACE; using default 0",
        "invalid value 'LOUD' for H3SHIM_DEBUG; using default WARN",
        "invalid value 'xml' for H3SHIM_TRACE_FORMAT; using default jsonl",
        "unknown variable H3SHIM_TRACEE is ignored",
        "H3SHIM_LT_SHADOW=7 is not 0, 1 or 2; using 1",
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
        ck_assert_msg(strstr(err, expected[i]) != NULL, "missing '%s' in: %s", expected[i], err);
    /* Each cause once, each line prefixed. */
    ck_assert_uint_eq(t_count_lines(err), 6);
    for (char *l = err; *l != '\0'; l = strchr(l, '\n') + 1)
        ck_assert(strncmp(l, "h3shim: ", 8) == 0);
    free(err);
}
END_TEST

START_TEST(values_set_are_echoed_at_info)
{
    setenv("H3SHIM_DEBUG", "INFO", 1);
    setenv("H3SHIM_TRACE_BACKTRACE", "0", 1);
    char *err = stderr_of_calls();
    ck_assert_msg(strstr(err, "H3SHIM_DEBUG set by environment to INFO") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "H3SHIM_TRACE_BACKTRACE set by environment to 0") != NULL, "%s", err);
    free(err);
}
END_TEST

START_TEST(subsystem_filter_and_debug_file)
{
    char *pattern = t_path("debug-%p.log");
    setenv("H3SHIM_DEBUG", "TRACE", 1);
    setenv("H3SHIM_DEBUG_SUBSYS", "^RESOLVE", 1);
    setenv("H3SHIM_DEBUG_FILE", pattern, 1);
    char *err = stderr_of_calls();
    ck_assert_uint_eq(strlen(err), 0);
    char name[64];
    snprintf(name, sizeof(name), "debug-%d.log", (int)getpid());
    char *log = t_read_file(t_path(name), NULL);
    ck_assert(log != NULL);
    ck_assert(strstr(log, "dlsym(libcuda, ") != NULL || strstr(log, "active:") != NULL);
    ck_assert_msg(strstr(log, " found libcu") == NULL, "RESOLVE lines were not filtered: %s", log);
    free(err);
    free(log);
}
END_TEST

static void stats_child(void)
{
    setenv("H3SHIM_STATS", "1", 1);
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < t_fw_nentries; i++)
            t_call(t_fw_entries[i].name, i);
}

START_TEST(stats_table_at_exit)
{
    const char *err = t_capture_stderr();
    ck_assert_int_eq(t_in_child(stats_child), 0);
    char *text = t_read_file(err, NULL);
    ck_assert_msg(strstr(text, " stats: ") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "cublasLtMatmul") != NULL, "%s", text);
    /* Ten launch entry points reach the framework's one kernel, three times
     * each: one row, whatever handle each launch named it by. */
    const char *row = strstr(text, "vectorized_elementwise_kernel");
    ck_assert_msg(row != NULL, "%s", text);
    ck_assert_msg(strstr(row + 1, "vectorized_elementwise_kernel") == NULL, "kernel listed twice: %s", text);
    const char *line = row;
    while (line > text && line[-1] != '\n')
        line--;
    unsigned long calls = 0;
    ck_assert(sscanf(line, "h3shim: %*d stats: %lu", &calls) == 1);
    ck_assert_uint_eq(calls, 30);
    ck_assert_msg(strstr(text, "passthrough") != NULL && strstr(text, "no_signatures") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "interposed") != NULL, "%s", text);
    free(text);
}
END_TEST

typedef int t_host_time_fn(unsigned long long *, unsigned long long *, unsigned long long *);

/* Exits 0 when h3shim_host_time says `want` (0: totals that grew with the calls; -1: not timed). */
static void host_time_child(int want)
{
    t_host_time_fn *fn = (t_host_time_fn *)dlsym(RTLD_DEFAULT, "h3shim_host_time");
    if (fn == NULL)
        exit(10);
    for (size_t i = 0; i < t_fw_nentries; i++)
        t_call(t_fw_entries[i].name, i);
    unsigned long long own = 0, calls = 0, issuing = 0;
    if (fn(&own, &calls, &issuing) != want || fn(NULL, &calls, &issuing) != -1)
        exit(11);
    if (want == 0 && (calls < t_fw_nentries / 2 || own == 0))
        exit(12);
    unsigned long long own2 = 0, calls2 = 0;
    for (size_t i = 0; i < t_fw_nentries; i++)
        t_call(t_fw_entries[i].name, i);
    if (want == 0 && (fn(&own2, &calls2, &issuing) != 0 || calls2 <= calls || own2 <= own))
        exit(13);
    exit(0);
}

static void host_time_on(void)
{
    setenv("H3SHIM_STATS", "1", 1);
    host_time_child(0);
}

static void host_time_off(void)
{
    setenv("H3SHIM_STATS", "0", 1);
    host_time_child(-1);
}

START_TEST(host_time_is_readable_while_running)
{
    ck_assert_int_eq(t_in_child(host_time_on), 0);
    ck_assert_int_eq(t_in_child(host_time_off), 0);
}
END_TEST

Suite *t_suite_config(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, t_setup, t_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bad_values_warn_and_use_defaults);
    tcase_add_test(tc, values_set_are_echoed_at_info);
    tcase_add_test(tc, subsystem_filter_and_debug_file);
    tcase_add_test(tc, stats_table_at_exit);
    tcase_add_test(tc, host_time_is_readable_while_running);
    suite_add_tcase(s, tc);
    return s;
}
