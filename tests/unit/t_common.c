/* Helpers shared by the Check suites (see t_common.h). */
#include "t_common.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const struct fw_entry *t_fw_entries;
size_t t_fw_nentries;
fw_call_fn *t_fw_call;

const char *t_fake_dir(void)
{
    static char dir[PATH_MAX];
    if (dir[0] == '\0') {
        char exe[PATH_MAX - 16];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        ck_assert_int_gt(n, 0);
        exe[n] = '\0';
        *strrchr(exe, '/') = '\0';
        snprintf(dir, sizeof(dir), "%s/../fake", exe);
    }
    return dir;
}

char *t_repo_path(const char *rel)
{
    char *p = malloc(PATH_MAX);
    if (rel[0] == '/') /* already absolute (a file a test wrote) */
        snprintf(p, PATH_MAX, "%s", rel);
    else
        snprintf(p, PATH_MAX, "%s/../../%s", t_fake_dir(), rel);
    return p;
}

const char *t_shim_path(void)
{
    const char *p = getenv("H3TEST_SHIM");
    ck_assert_msg(p != NULL, "H3TEST_SHIM is not set: run the suites through `make check`");
    return p;
}

void *t_load(const char *name, int flags)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", t_fake_dir(), name);
    void *h = dlopen(path, flags);
    ck_assert_msg(h != NULL, "cannot load %s: %s", path, dlerror());
    return h;
}

void t_setup(void)
{
    /* No signatures unless a test asks for some: the release library would
     * otherwise load the committed ones and the asan one would not. */
    char *none = t_path("no-signatures");
    mkdir(none, 0755);
    setenv("H3SHIM_SIGNATURES", none, 1);
    free(none);
    /* No fused op unless a test asks for one (some are on by default). */
    setenv("H3SHIM_OPS", "none", 1);
    void *fw = t_load("libh3fakeframework.so", RTLD_NOW | RTLD_LOCAL);
    t_fw_entries = dlsym(fw, "fw_entries");
    const size_t *n = dlsym(fw, "fw_nentries");
    t_fw_call = (fw_call_fn *)dlsym(fw, "fw_call");
    fw_setup_fn *setup = (fw_setup_fn *)dlsym(fw, "fw_setup");
    ck_assert(t_fw_entries != NULL && n != NULL && t_fw_call != NULL && setup != NULL);
    t_fw_nentries = *n;
    setup();
    fakelog_clear();
    fakelog_reset_results();
}

void t_teardown(void)
{
}

long long t_call(const char *name, uint64_t seed)
{
    uint64_t sent[FAKE_MAX_ARGS];
    int nargs = 0;
    long long r = t_fw_call(name, seed, sent, &nargs);
    ck_assert_msg(r != LLONG_MIN, "framework has no caller for %s", name);
    return r;
}

const char *t_tmpdir(void)
{
    static char dir[64];
    if (dir[0] == '\0' || access(dir, F_OK) != 0) {
        snprintf(dir, sizeof(dir), "/tmp/h3test.XXXXXX");
        ck_assert(mkdtemp(dir) != NULL);
    }
    return dir;
}

char *t_path(const char *name)
{
    char *p = malloc(PATH_MAX);
    snprintf(p, PATH_MAX, "%s/%s", t_tmpdir(), name);
    return p;
}

char *t_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

const char *t_capture_stderr(void)
{
    static char *path;
    path = t_path("stderr.txt");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    close(fd);
    return path;
}

size_t t_count_lines(const char *text)
{
    size_t n = 0;
    for (const char *p = text; *p != '\0'; p++)
        n += *p == '\n';
    return n;
}

size_t t_count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = text != NULL ? strstr(text, needle) : NULL; p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

void t_said_once(const char *text, const char *what)
{
    const char *w = strstr(text, what);
    ck_assert_msg(w != NULL, "no '%s' in:\n%.2000s", what, text);
    ck_assert_msg(strstr(w + 1, what) == NULL, "said twice: %s", what);
}

/* A small recursive-descent JSON checker. */
struct t_json {
    const char *p, *end;
};

static void t_ws(struct t_json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static bool t_value(struct t_json *j, int depth);

static bool t_string(struct t_json *j)
{
    if (j->p >= j->end || *j->p != '"')
        return false;
    for (j->p++; j->p < j->end; j->p++) {
        unsigned char ch = (unsigned char)*j->p;
        if (ch == '"') {
            j->p++;
            return true;
        }
        if (ch < 0x20)
            return false;
        if (ch == '\\') {
            j->p++;
            if (j->p >= j->end || strchr("\"\\/bfnrtu", *j->p) == NULL)
                return false;
            if (*j->p == 'u') {
                for (int i = 0; i < 4; i++)
                    if (++j->p >= j->end || strchr("0123456789abcdefABCDEF", *j->p) == NULL)
                        return false;
            }
        }
    }
    return false;
}

static bool t_number(struct t_json *j)
{
    const char *start = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    while (j->p < j->end && strchr("0123456789.eE+-", *j->p) != NULL && *j->p != '\0')
        j->p++;
    return j->p > start;
}

static bool t_value(struct t_json *j, int depth)
{
    if (depth > 64)
        return false;
    t_ws(j);
    if (j->p >= j->end)
        return false;
    char ch = *j->p;
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        j->p++;
        t_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return true;
        }
        for (;;) {
            if (ch == '{') {
                t_ws(j);
                if (!t_string(j))
                    return false;
                t_ws(j);
                if (j->p >= j->end || *j->p++ != ':')
                    return false;
            }
            if (!t_value(j, depth + 1))
                return false;
            t_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                return true;
            }
            return false;
        }
    }
    if (ch == '"')
        return t_string(j);
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= n && strncmp(j->p, words[i], n) == 0) {
            j->p += n;
            return true;
        }
    }
    return t_number(j);
}

bool t_json_valid(const char *text, size_t len)
{
    struct t_json j = {text, text + len};
    if (!t_value(&j, 0))
        return false;
    t_ws(&j);
    return j.p == j.end;
}

bool t_json_get(const char *obj, size_t len, const char *key, char *out, size_t outlen)
{
    struct t_json j = {obj, obj + len};
    t_ws(&j);
    if (j.p >= j.end || *j.p++ != '{')
        return false;
    for (;;) {
        t_ws(&j);
        const char *ks = j.p;
        if (!t_string(&j))
            return false;
        size_t klen = (size_t)(j.p - ks) - 2;
        t_ws(&j);
        if (j.p >= j.end || *j.p++ != ':')
            return false;
        t_ws(&j);
        const char *vs = j.p;
        if (!t_value(&j, 1))
            return false;
        if (klen == strlen(key) && strncmp(ks + 1, key, klen) == 0) {
            size_t n = (size_t)(j.p - vs);
            if (n >= outlen)
                n = outlen - 1;
            memcpy(out, vs, n);
            out[n] = '\0';
            return true;
        }
        t_ws(&j);
        if (j.p < j.end && *j.p == ',') {
            j.p++;
            continue;
        }
        return false;
    }
}

int t_in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fn();
        exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
