/*
 * Helpers shared by the Check suites: the fake framework (loaded RTLD_LOCAL,
 * the way Python loads torch), the fake call log, files, and a small JSON
 * checker for trace records.
 */
#ifndef H3_T_COMMON_H
#define H3_T_COMMON_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fake.h"
#include "framework.h"

/* Directory of the fake libraries (build/fake). */
const char *t_fake_dir(void);
/* A path inside the repository (caller frees). */
char *t_repo_path(const char *rel);
/* Path of the preloaded shim under test (H3TEST_SHIM). */
const char *t_shim_path(void);
/* dlopen()s a library of build/fake with `flags`; fails the test if absent. */
void *t_load(const char *name, int flags);

/* The fake framework, loaded RTLD_LOCAL by t_setup (a checked fixture). */
extern const struct fw_entry *t_fw_entries;
extern size_t t_fw_nentries;
extern fw_call_fn *t_fw_call;
void t_setup(void);
void t_teardown(void);
/* Calls entry point `name` through the framework; fails the test if the
 * framework does not know it. */
long long t_call(const char *name, uint64_t seed);

/* A fresh temporary directory for this test and a path inside it. */
const char *t_tmpdir(void);
char *t_path(const char *name);
/* Whole file as a NUL-terminated string (caller frees), or NULL. */
char *t_read_file(const char *path, size_t *len);
/* Redirects this process's stderr to a file; returns its path. */
const char *t_capture_stderr(void);
/* Number of lines of a text, and the i-th line (copied into buf). */
size_t t_count_lines(const char *text);
/* Number of times `needle` occurs in `text` (0 for a NULL text). */
size_t t_count(const char *text, const char *needle);
/* Checks that `text` says `what` exactly once. */
void t_said_once(const char *text, const char *what);

/* JSON: whether `text[0..len)` is exactly one valid JSON value. */
bool t_json_valid(const char *text, size_t len);
/* The raw text of top-level member `key` of a JSON object, copied into
 * `out`; false if absent. */
bool t_json_get(const char *obj, size_t len, const char *key, char *out, size_t outlen);

/* Suites, registered in one list (check_main.c). */
#define T_SUITES(X) X(hooks) X(driver) X(trace) X(config) X(sigfile) X(match) X(engine)
#define T_DECL(name) Suite *t_suite_##name(void);
T_SUITES(T_DECL)
#undef T_DECL



/* Runs fn() in a child process that then exit()s normally (so the shim's
 * exit work runs); returns the child's exit status. */
int t_in_child(void (*fn)(void));
#endif
