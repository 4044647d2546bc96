/*
 * The matcher, on a real call stream: the H3 block trace recorded on the
 * H200 (tests/record/data, turned into a replay file by
 * scripts/trace_replay.py) is replayed through the fake stack with the shim
 * preloaded and H3SHIM_MATCH=1.  Every block instance must be recognised
 * against the committed signature; a changed byte, launch configuration or
 * pointer in one instance must break exactly that one.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t_common.h"

typedef long fw_replay_fn(const char *path, long *bad_line);


#define T_REPLAY "build/tests/h3-block3-replay.txt"
#define T_INSTANCES 9 /* a warm-up and two requests of three blocks */

static long replay(const char *path)
{
    void *fw = t_load("libh3fakeframework.so", RTLD_NOW | RTLD_LOCAL);
    fw_replay_fn *fn = (fw_replay_fn *)dlsym(fw, "fw_replay");
    ck_assert(fn != NULL);
    long bad = 0;
    long n = fn(path, &bad);
    ck_assert_msg(n > 0, "replay of %s failed at line %ld", path, bad);
    return n;
}

static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void setup_env(const char *trace)
{
    char *sigs = t_repo_path("signatures");
    setenv("H3SHIM_SIGNATURES", sigs, 1);
    setenv("H3SHIM_MATCH", "1", 1);
    setenv("H3SHIM_TRACE", trace, 1);
    free(sigs);
}

START_TEST(every_recorded_block_is_recognised)
{
    char *trace = t_path("trace.jsonl");
    setup_env(trace);
    char *path = t_repo_path(T_REPLAY);
    long calls = replay(path);
    char *text = t_read_file(trace, NULL);
    ck_assert_uint_eq(t_count_lines(text), (size_t)calls);
    ck_assert_uint_eq(count(text, "\"reason\":\"group_complete\""), T_INSTANCES);
    ck_assert_uint_eq(count(text, "\"reason\":\"group_call\""), T_INSTANCES * 41);
    ck_assert_uint_eq(count(text, "\"group_call\":41"), T_INSTANCES);
    free(text);
    free(path);
}
END_TEST

/* Writes a copy of the replay with line `nth` (1-based, counting only lines
 * that contain `match`) edited: `from` replaced by `to` once. */
static char *edited_replay(const char *match, int nth, const char *from, const char *to)
{
    char *src = t_repo_path(T_REPLAY);
    char *text = t_read_file(src, NULL);
    ck_assert(text != NULL);
    char *out = t_path("edited-replay.txt");
    FILE *f = fopen(out, "w");
    int seen = 0;
    bool done = false;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *at;
        if (!done && strstr(line, match) != NULL && ++seen == nth && (at = strstr(line, from)) != NULL) {
            fprintf(f, "%.*s%s%s\n", (int)(at - line), line, to, at + strlen(from));
            done = true;
        } else {
            fprintf(f, "%s\n", line);
        }
    }
    fclose(f);
    ck_assert_msg(done, "no line to edit");
    free(text);
    free(src);
    return out;
}

static const char *t_edit_match, *t_edit_from, *t_edit_to;
static int t_edit_nth;

static void replay_edited_child(void)
{
    setup_env(t_path("trace-edited.jsonl"));
    setenv("H3SHIM_STATS", "1", 1);
    replay(edited_replay(t_edit_match, t_edit_nth, t_edit_from, t_edit_to));
}

/* Replays with one edit; returns the stats and checks that one instance is
 * not complete.  ("broken" can count more: after a break, a later call that
 * looks like the group's first call, such as norm2 for norm1, starts an
 * attempt that breaks at the next call.) */
static char *replay_one_broken(void)
{
    const char *err = t_capture_stderr();
    ck_assert_int_eq(t_in_child(replay_edited_child), 0);
    char *trace = t_read_file(t_path("trace-edited.jsonl"), NULL);
    ck_assert_uint_eq(count(trace, "\"reason\":\"group_complete\""), T_INSTANCES - 1);
    free(trace);
    return t_read_file(err, NULL);
}

START_TEST(a_changed_launch_breaks_its_instance)
{
    /* The SiLU launch of the fifth block instance (call 35) gets another grid. */
    t_edit_match = "silu_kernel", t_edit_nth = 5, t_edit_from = " 28752 1 1 ", t_edit_to = " 28751 1 1 ";
    char *stats = replay_one_broken();
    ck_assert_msg(strstr(stats, "8 complete, ") != NULL && strstr(stats, "(first break: config at call 35)") != NULL,
                  "%s", stats);
    free(stats);
}
END_TEST

START_TEST(a_changed_stable_byte_breaks_its_instance)
{
    /* The q norm's epsilon (call 6, a layer_norm of 57504 rows) in the second instance. */
    t_edit_match = " 57504 1 1 ", t_edit_nth = 3, t_edit_from = " acc52737 ", t_edit_to = " acc52738 ";
    char *stats = replay_one_broken();
    ck_assert_msg(strstr(stats, "8 complete, ") != NULL && strstr(stats, "(first break: bytes at call 6)") != NULL,
                  "%s", stats);
    free(stats);
}
END_TEST

START_TEST(a_rewired_pointer_breaks_its_instance)
{
    /* The to_out GEMM (call 27, k = 2048 from 2048x2048 weights) of the third
     * instance reads a B that the recording says comes from nan_to_num: make
     * its address different from what nan_to_num wrote. */
    char *src = t_repo_path(T_REPLAY);
    char *text = t_read_file(src, NULL);
    /* Find the 10th matmul line (third instance's call 27) and change its B pointer. */
    int n = 0;
    char *line = text, *target = NULL;
    while (line != NULL && *line != '\0') {
        if (strncmp(line, "M ", 2) == 0 && ++n == 10)
            target = line;
        char *nl = strchr(line, '\n');
        line = nl != NULL ? nl + 1 : NULL;
    }
    ck_assert(target != NULL);
    char *tok = target;
    for (int i = 0; i < 11; i++)
        tok = strchr(tok, ' ') + 1; /* token 11 is B */
    char *end = strchr(tok, ' ');
    char b[64];
    snprintf(b, sizeof(b), "%.*s", (int)(end - tok), tok);
    t_edit_nth = 1, t_edit_from = b;
    static char moved[64];
    snprintf(moved, sizeof(moved), "%llx", strtoull(b, NULL, 16) + 0x100000);
    t_edit_to = moved;
    /* Edit the matmul line itself, found by its prefix up to B. */
    static char prefix[256];
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(end - target), target);
    t_edit_match = prefix;
    char *stats = replay_one_broken();
    ck_assert_msg(strstr(stats, "8 complete, ") != NULL && strstr(stats, "(first break: wiring at call 27)") != NULL,
                  "%s", stats);
    free(stats);
    free(text);
    free(src);
}
END_TEST

Suite *t_suite_match(void)
{
    Suite *s = suite_create("match");
    TCase *tc = tcase_create("match");
    tcase_add_checked_fixture(tc, t_setup, t_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_recorded_block_is_recognised);
    tcase_add_test(tc, a_changed_launch_breaks_its_instance);
    tcase_add_test(tc, a_changed_stable_byte_breaks_its_instance);
    tcase_add_test(tc, a_rewired_pointer_breaks_its_instance);
    suite_add_tcase(s, tc);
    return s;
}
