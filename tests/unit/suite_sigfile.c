/*
 * Signature files: the parser accepts the committed signatures and a valid
 * test file (which round-trips through the printer), rejects each malformed
 * file of tests/sig/bad with the line and message its first line expects,
 * survives truncations and mutations, and the library reports a rejected
 * file once and passes through.
 */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "h3shim.h"
#include "t_common.h"


static struct h3_sig *parse_file(const char *path, char *err, size_t errlen)
{
    size_t len;
    char *text = t_read_file(path, &len);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    struct h3_sig *s = h3_sig_parse(text, len, path, err, errlen);
    free(text);
    return s;
}

static char *print_sig(const struct h3_sig *s, size_t *len)
{
    char *out = NULL;
    FILE *f = open_memstream(&out, len);
    h3_sig_print(f, s);
    fclose(f);
    return out;
}

START_TEST(valid_file_parses_and_round_trips)
{
    char err[512];
    char *path = t_repo_path("tests/sig/good/small.sig");
    struct h3_sig *s = parse_file(path, err, sizeof(err));
    ck_assert_msg(s != NULL, "%s", err);
    ck_assert_uint_eq(s->ncalls, 4);
    ck_assert_str_eq(s->model, "test-model");
    ck_assert_str_eq(s->source, "hand-written test file");
    ck_assert_int_eq(s->sm_number, 90);
    ck_assert_int_eq(s->calls[0].kind, H3_SIG_LAUNCH);
    ck_assert_uint_eq(s->calls[0].nparams, 8);
    ck_assert_uint_eq(s->calls[0].grid[0], 1797);
    ck_assert_uint_eq(s->calls[1].slots[1].ref, H3_REF_SLOT);
    ck_assert_uint_eq(s->calls[1].slots[1].ref_call, 0);
    ck_assert_uint_eq(s->calls[1].slots[1].ref_slot, 3);
    ck_assert(s->calls[0].slots[2].dead && s->calls[1].slots[0].dead && !s->calls[0].slots[3].dead);
    ck_assert_int_eq(s->calls[2].desc[8], 2048); /* k */
    ck_assert_int_eq(s->calls[3].slots[1].delta, 128);
    ck_assert_int_eq(s->calls[3].slots[1].uid, 1);
    size_t len1, len2;
    char *once = print_sig(s, &len1);
    struct h3_sig *again = h3_sig_parse(once, len1, "printed", err, sizeof(err));
    ck_assert_msg(again != NULL, "%s", err);
    char *twice = print_sig(again, &len2);
    ck_assert_str_eq(once, twice);
    free(once), free(twice), free(path);
    h3_sig_free(s);
    h3_sig_free(again);
}
END_TEST

START_TEST(committed_signatures_are_valid)
{
    char *dir = t_repo_path("signatures");
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "no signatures/ directory");
    int n = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".sig") != 0)
            continue;
        char path[PATH_MAX], err[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct h3_sig *s = parse_file(path, err, sizeof(err));
        ck_assert_msg(s != NULL, "%s", err);
        h3_sig_free(s);
        n++;
    }
    closedir(d);
    ck_assert_msg(n > 0, "signatures/ holds no .sig file");
    free(dir);
}
END_TEST

START_TEST(malformed_files_are_rejected_with_their_line)
{
    char *dir = t_repo_path("tests/sig/bad");
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    int n = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (strstr(e->d_name, ".sig") == NULL)
            continue;
        char path[PATH_MAX], err[512], want[256];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        char *text = t_read_file(path, NULL);
        int line = 0;
        ck_assert_msg(sscanf(text, "# expect %d: %255[^\n]", &line, want) == 2, "%s has no expectation", path);
        free(text);
        struct h3_sig *s = parse_file(path, err, sizeof(err));
        ck_assert_msg(s == NULL, "%s was accepted", path);
        char prefix[PATH_MAX + 32];
        snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
        ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "%s: got '%s', expected line %d", path, err, line);
        ck_assert_msg(strstr(err, want) != NULL, "%s: got '%s', expected '%s'", path, err, want);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 15);
    free(dir);
}
END_TEST

START_TEST(truncations_and_mutations_never_crash)
{
    char *path = t_repo_path("tests/sig/good/small.sig");
    size_t len;
    char *text = t_read_file(path, &len);
    char err[512];
    /* Every prefix: only the whole file is valid (it ends with 'end'). */
    for (size_t cut = 0; cut < len; cut++) {
        struct h3_sig *s = h3_sig_parse(text, cut, "cut", err, sizeof(err));
        ck_assert_msg(s == NULL || cut >= len - 1, "prefix of %zu bytes accepted", cut);
        h3_sig_free(s);
    }
    /* Deterministic byte mutations: anything may be rejected, nothing may crash. */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int iter = 0; iter < 20000; iter++) {
        char *m = malloc(len);
        memcpy(m, text, len);
        for (int k = 0; k < 1 + iter % 4; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            m[x % len] = (char)(x >> 40);
        }
        struct h3_sig *s = h3_sig_parse(m, len, "mutant", err, sizeof(err));
        ck_assert(s != NULL || strncmp(err, "mutant:", 7) == 0);
        h3_sig_free(s);
        free(m);
    }
    free(text);
    free(path);
}
END_TEST

START_TEST(h3sig_exit_status)
{
    char cmd[3 * PATH_MAX];
    char *tool = t_repo_path("build/h3sig");
    char *good = t_repo_path("tests/sig/good/small.sig");
    char *bad = t_repo_path("tests/sig/bad/overlap.sig");
    snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD '%s' -q '%s' 2>/dev/null", tool, good);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 0);
    snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD '%s' -q '%s' '%s' 2>/dev/null", tool, good, bad);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 1);
    snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD '%s' 2>/dev/null", tool);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
    free(tool), free(good), free(bad);
}
END_TEST

START_TEST(library_reports_a_rejected_file_once)
{
    const char *err = t_capture_stderr();
    char *bad = t_repo_path("tests/sig/bad/bad-hex.sig");
    setenv("H3SHIM_SIGNATURES", bad, 1);
    for (size_t i = 0; i < t_fw_nentries; i++)
        ck_assert_int_eq(t_call(t_fw_entries[i].name, i), 0);
    char *text = t_read_file(err, NULL);
    ck_assert_uint_eq(t_count_lines(text), 1);
    ck_assert_msg(strstr(text, "signature file rejected") != NULL && strstr(text, "bad-hex.sig:12:") != NULL,
                  "%s", text);
    free(text);
    free(bad);
}
END_TEST

START_TEST(library_loads_a_directory)
{
    const char *err = t_capture_stderr();
    char *dir = t_repo_path("tests/sig/good");
    setenv("H3SHIM_SIGNATURES", dir, 1);
    setenv("H3SHIM_DEBUG", "INFO", 1);
    setenv("H3SHIM_DEBUG_SUBSYS", "INIT", 1);
    ck_assert_int_eq(t_call("cublasLtMatmul", 1), 0);
    char *text = t_read_file(err, NULL);
    ck_assert_msg(strstr(text, "small.sig: model test-model, group block, 4 calls") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "1 signatures loaded, 0 files rejected") != NULL, "%s", text);
    free(text);
    free(dir);
}
END_TEST

Suite *t_suite_sigfile(void)
{
    Suite *s = suite_create("sigfile");
    TCase *tc = tcase_create("sigfile");
    tcase_add_checked_fixture(tc, t_setup, t_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, valid_file_parses_and_round_trips);
    tcase_add_test(tc, committed_signatures_are_valid);
    tcase_add_test(tc, malformed_files_are_rejected_with_their_line);
    tcase_add_test(tc, truncations_and_mutations_never_crash);
    tcase_add_test(tc, h3sig_exit_status);
    tcase_add_test(tc, library_reports_a_rejected_file_once);
    tcase_add_test(tc, library_loads_a_directory);
    suite_add_tcase(s, tc);
    return s;
}
