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

static void setup_env(const char *trace)
{
    char *sigs = t_repo_path("signatures");
    setenv("H3SHIM_SIGNATURES", sigs, 1);
    setenv("H3SHIM_MATCH", "1", 1);
    setenv("H3SHIM_TRACE", trace, 1);
    free(sigs);
}

/* Replays `replay_file` with matching on; checks that `blocks` block
 * instances were recognised whole; returns the trace and the calls made. */
static char *recognised_in(const char *replay_file, unsigned blocks, long *calls)
{
    char *trace = t_path("trace.jsonl");
    setup_env(trace);
    char *path = t_repo_path(replay_file);
    *calls = replay(path);
    char *text = t_read_file(trace, NULL);
    ck_assert_uint_eq(t_count(text, "\"reason\":\"group_complete\""), blocks);
    ck_assert_uint_eq(t_count(text, "\"reason\":\"group_call\""), blocks * 41);
    free(path);
    return text;
}

START_TEST(every_recorded_block_is_recognised)
{
    long calls;
    char *text = recognised_in(T_REPLAY, T_INSTANCES, &calls);
    ck_assert_uint_eq(t_count_lines(text), (size_t)calls);
    ck_assert_uint_eq(t_count(text, "\"group_call\":41"), T_INSTANCES);
    free(text);
}
END_TEST

/* Blocks whose closures hold other host left-overs than the recording's:
 * the captureless functors' byte (01 on cuda:1, 00 when recorded) and the
 * closure's tail word (a 0x7f... address in a second thread).  Before the
 * recorder masked them, neither process recognised a block. */
START_TEST(blocks_on_a_second_gpu_are_recognised)
{
    long calls;
    free(recognised_in("build/tests/h3-block1-cuda1-replay.txt", 2, &calls)); /* two calls of a one-block model */
}
END_TEST

START_TEST(blocks_in_a_second_thread_are_recognised)
{
    long calls;
    free(recognised_in("build/tests/h3-block1-thread-replay.txt", 4, &calls)); /* two in the main thread, two in another */
}
END_TEST

/* One edit of the replay: in the `nth` line (1-based; 0: every line)
 * containing `match`, token number `token` becomes `to`, or with `to` NULL
 * the pointer it holds plus 1 MiB. */
struct t_edit {
    const char *match;
    int nth, token;
    const char *to;
};
static struct t_edit t_edit;

static char *edited_replay(void)
{
    char *src = t_repo_path(T_REPLAY);
    char *text = t_read_file(src, NULL);
    ck_assert(text != NULL);
    char *out = t_path("edited-replay.txt");
    FILE *f = fopen(out, "w");
    int seen = 0;
    bool done = false;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if ((done && t_edit.nth != 0) || strstr(line, t_edit.match) == NULL ||
            (++seen != t_edit.nth && t_edit.nth != 0)) {
            fprintf(f, "%s\n", line);
            continue;
        }
        char *tok = line;
        for (int i = 0; i < t_edit.token && tok != NULL; i++)
            tok = strchr(tok, ' ') != NULL ? strchr(tok, ' ') + 1 : NULL;
        ck_assert_msg(tok != NULL, "line has no token %d", t_edit.token);
        size_t len = strcspn(tok, " ");
        char moved[32];
        if (t_edit.to == NULL)
            snprintf(moved, sizeof(moved), "%llx", strtoull(tok, NULL, 16) + 0x100000);
        fprintf(f, "%.*s%s%s\n", (int)(tok - line), line, t_edit.to != NULL ? t_edit.to : moved, tok + len);
        done = true;
    }
    fclose(f);
    ck_assert_msg(done, "no line to edit");
    free(text);
    free(src);
    return out;
}

static void replay_edited_child(void)
{
    setup_env(t_path("trace-edited.jsonl"));
    setenv("H3SHIM_STATS", "1", 1);
    replay(edited_replay());
}

/* Replays with the edit and checks that exactly one instance is no longer
 * complete and that the first break has the expected cause.  ("broken" can
 * count more: after a break, a later call that looks like the group's first
 * call, such as norm2 for norm1, starts an attempt that breaks at once.) */
static void expect_one_broken(const char *cause)
{
    const char *err = t_capture_stderr();
    ck_assert_int_eq(t_in_child(replay_edited_child), 0);
    char *trace = t_read_file(t_path("trace-edited.jsonl"), NULL);
    ck_assert_uint_eq(t_count(trace, "\"reason\":\"group_complete\""), T_INSTANCES - 1);
    char *stats = t_read_file(err, NULL);
    ck_assert_msg(strstr(stats, "8 complete, ") != NULL && strstr(stats, cause) != NULL, "%s", stats);
    free(stats);
    free(trace);
}

/* Replay line tokens: L NAME GX GY GZ BX BY BZ SHMEM STREAM N SIZES... HEX...
 * and M STREAM COMPUTE SCALE TRANSA TRANSB EPILOGUE BIAS WS WSSIZE A B ... */
START_TEST(a_changed_launch_breaks_its_instance)
{
    /* The SiLU launch of the fifth block instance (call 35) gets another grid. */
    t_edit = (struct t_edit){"silu_kernel", 5, 2, "28751"};
    expect_one_broken("(first break: config at call 35)");
}
END_TEST

START_TEST(a_changed_stable_byte_breaks_its_instance)
{
    /* The q norm's epsilon (call 6, a layer_norm of 57504 rows, 8 parameters:
     * parameter 1's bytes are token 11 + 8 + 1) in the second instance. */
    t_edit = (struct t_edit){" 57504 1 1 ", 3, 20, "acc52738"};
    expect_one_broken("(first break: bytes at call 6)");
}
END_TEST

START_TEST(a_rewired_pointer_breaks_its_instance)
{
    /* The to_out GEMM of the third instance (call 27, the tenth GEMM) reads B
     * from nan_to_num's output: move its B elsewhere. */
    t_edit = (struct t_edit){"M 0 ", 10, 11, NULL};
    expect_one_broken("(first break: wiring at call 27)");
}
END_TEST

/* Replays with t_edit; returns what the shim printed (stats included). */
static char *edited_replay_stderr(void)
{
    const char *err = t_capture_stderr();
    ck_assert_int_eq(t_in_child(replay_edited_child), 0);
    return t_read_file(err, NULL);
}

START_TEST(a_signature_that_never_matches_is_reported)
{
    /* Every SiLU launch gets another grid, as under another PyTorch build:
     * no instance completes, and the shim says so once, without stats. */
    t_edit = (struct t_edit){"silu_kernel", 0, 2, "28751"};
    char *text = edited_replay_stderr();
    ck_assert_msg(strstr(text, "0 complete, ") != NULL, "%s", text);
    t_said_once(text, "attempts to match it broke and none completed (first break: config at call 35)");
    free(text);
}
END_TEST

START_TEST(a_lookalike_whose_first_call_never_comes_is_reported)
{
    /* Another build's hash in the layer-norm kernel's name, as PyTorch's
     * anonymous namespaces give: no attempt ever begins, so nothing breaks,
     * but the block's GEMM shapes keep coming; the shim says so once. */
    t_edit = (struct t_edit){"_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_kernelIffLb1E", 0, 1,
                             "_ZN2at6native53_GLOBAL__N__0badc0de_20_layer_norm_kernel_cu_0badc0de28vectorized_"
                             "layer_norm_kernelIffLb1EEEviT0_PKT_S6_S6_PS3_S7_PS4_"};
    char *text = edited_replay_stderr();
    ck_assert_msg(strstr(text, "0 complete, 0 broken") != NULL, "%s", text);
    t_said_once(text, "GEMMs with its shapes were made but none of its instances began");
    free(text);
}
END_TEST

START_TEST(a_recognised_decode_gives_no_lookalike_warning)
{
    t_edit = (struct t_edit){"silu_kernel", 1, 2, "28752"}; /* the grid it has: an edit that changes nothing */
    char *text = edited_replay_stderr();
    ck_assert_msg(strstr(text, "9 complete, 0 broken") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "GEMMs with its shapes") == NULL, "%s", text);
    free(text);
}
END_TEST

Suite *t_suite_match(void)
{
    Suite *s = suite_create("match");
    TCase *tc = tcase_create("match");
    tcase_add_checked_fixture(tc, t_setup, t_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_recorded_block_is_recognised);
    tcase_add_test(tc, blocks_on_a_second_gpu_are_recognised);
    tcase_add_test(tc, blocks_in_a_second_thread_are_recognised);
    tcase_add_test(tc, a_changed_launch_breaks_its_instance);
    tcase_add_test(tc, a_changed_stable_byte_breaks_its_instance);
    tcase_add_test(tc, a_rewired_pointer_breaks_its_instance);
    tcase_add_test(tc, a_signature_that_never_matches_is_reported);
    tcase_add_test(tc, a_lookalike_whose_first_call_never_comes_is_reported);
    tcase_add_test(tc, a_recognised_decode_gives_no_lookalike_warning);
    suite_add_tcase(s, tc);
    return s;
}
