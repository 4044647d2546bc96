/*
 * The loaded signatures.
 *
 * Owns: the list of signatures parsed at initialisation.
 * Invariants: loading never fails the shim: a file that cannot be read or
 * parsed is reported once (with its file:line message) and ignored; with no
 * signature at all the shim passes everything through.  After h3_init() the
 * list only grows, by signatures learned in the process (h3_signatures_add):
 * an entry is written before the count that publishes it, and never freed.
 * Never: touches CUDA (SM and library versions are checked when a group is
 * first matched, not here).
 */
#include "h3shim.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define H3_MAX_SIGNATURES 64
#define H3_MAX_SIG_BYTES (16u << 20)

static struct h3_sig *h3_sigs[H3_MAX_SIGNATURES];
static atomic_uint h3_nsigs;
static unsigned h3_nrejected;

/* Reads and parses one file; reports and counts a failure. */
static void h3_signatures_load_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        H3_WARN(H3_SUB_INIT, "cannot read signature file %s (%s); ignored", path, strerror(errno));
        h3_nrejected++;
        return;
    }
    char *text = malloc(H3_MAX_SIG_BYTES);
    size_t len = text != NULL ? fread(text, 1, H3_MAX_SIG_BYTES, f) : 0;
    bool too_big = text != NULL && len == H3_MAX_SIG_BYTES && fgetc(f) != EOF;
    fclose(f);
    char err[512];
    struct h3_sig *sig = NULL;
    if (text == NULL)
        snprintf(err, sizeof(err), "%s: out of memory", path);
    else if (too_big)
        snprintf(err, sizeof(err), "%s: larger than %u bytes", path, H3_MAX_SIG_BYTES);
    else
        sig = h3_sig_parse(text, len, path, err, sizeof(err));
    free(text);
    if (sig == NULL) {
        H3_WARN(H3_SUB_INIT, "signature file rejected, passing its calls through: %s", err);
        h3_nrejected++;
        return;
    }
    if (h3_nsigs == H3_MAX_SIGNATURES) {
        H3_WARN(H3_SUB_INIT, "more than %d signatures; %s ignored", H3_MAX_SIGNATURES, path);
        h3_sig_free(sig);
        h3_nrejected++;
        return;
    }
    H3_INFO(H3_SUB_INIT, "signature %s: model %s, group %s, %u calls, torch %s, sm %s", path, sig->model,
            sig->group, sig->ncalls, sig->torch, sig->sm);
    h3_sigs[h3_nsigs++] = sig;
}

static int h3_signatures_by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Loads the *.sig files of a directory, in name order. */
static void h3_signatures_load_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        H3_WARN(H3_SUB_INIT, "cannot open signature directory %s (%s)", dir, strerror(errno));
        return;
    }
    char *names[H3_MAX_SIGNATURES * 2];
    size_t n = 0;
    for (struct dirent *e = readdir(d); e != NULL && n < H3_ARRAY_LEN(names); e = readdir(d)) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".sig") == 0 && (names[n] = strdup(e->d_name)) != NULL)
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), h3_signatures_by_name);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        int len = snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (len > 0 && (size_t)len < sizeof(path))
            h3_signatures_load_file(path);
        free(names[i]);
    }
}

/* The default directory: signatures/ beside the build directory holding the
 * library (build/libh3shim.so -> signatures/), or share/h3shim/signatures
 * of an installation (PREFIX/lib/libh3shim.so). */
static bool h3_signatures_default(char *out, size_t outlen)
{
    Dl_info info;
    if (dladdr((void *)&h3_signatures_load, &info) == 0 || info.dli_fname == NULL)
        return false;
    char lib[PATH_MAX];
    if (realpath(info.dli_fname, lib) == NULL)
        return false;
    char *slash = strrchr(lib, '/');
    if (slash == NULL)
        return false;
    *slash = '\0';
    static const char *const tails[] = {"/../signatures", "/../share/h3shim/signatures"};
    for (size_t i = 0; i < H3_ARRAY_LEN(tails); i++) {
        struct stat st;
        int len = snprintf(out, outlen, "%s%s", lib, tails[i]);
        if (len > 0 && (size_t)len < outlen && stat(out, &st) == 0 && S_ISDIR(st.st_mode))
            return true;
    }
    return false;
}

void h3_signatures_load(void)
{
    char path[PATH_MAX];
    const char *where = h3_config.signatures;
    if (where == NULL || where[0] == '\0') {
        if (!h3_signatures_default(path, sizeof(path))) {
            H3_INFO(H3_SUB_INIT, "no signatures directory found; every call is passed through");
            return;
        }
        where = path;
    }
    struct stat st;
    if (stat(where, &st) != 0) {
        H3_WARN(H3_SUB_INIT, "H3SHIM_SIGNATURES=%s does not exist (%s); every call is passed through", where,
                strerror(errno));
        return;
    }
    if (S_ISDIR(st.st_mode))
        h3_signatures_load_dir(where);
    else
        h3_signatures_load_file(where);
    H3_INFO(H3_SUB_INIT, "%u signatures loaded, %u files rejected", h3_signatures_count(), h3_nrejected);
}

unsigned h3_signatures_count(void)
{
    return atomic_load_explicit(&h3_nsigs, memory_order_acquire);
}

static pthread_mutex_t h3_signatures_lock = PTHREAD_MUTEX_INITIALIZER;

void h3_signatures_after_fork_child(void)
{
    pthread_mutex_init(&h3_signatures_lock, NULL);
}

bool h3_signatures_add(struct h3_sig *sig)
{
    pthread_mutex_lock(&h3_signatures_lock);
    unsigned n = atomic_load_explicit(&h3_nsigs, memory_order_relaxed);
    bool room = n < H3_MAX_SIGNATURES;
    if (room) {
        h3_sigs[n] = sig;
        atomic_store_explicit(&h3_nsigs, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&h3_signatures_lock);
    return room;
}

unsigned h3_signatures_rejected(void)
{
    return h3_nrejected;
}

const struct h3_sig *h3_signatures_get(unsigned i)
{
    return i < h3_signatures_count() ? h3_sigs[i] : NULL;
}
