/*
 * libh3fakelog.so: the call log of the fake CUDA stack, which tests read as
 * their oracle, the results tests inject, and the registry of fake kernels.
 * Thread-safe.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "fake.h"

#define FAKELOG_MAX 65536
#define FAKELOG_RESULTS 256

static struct fakelog_entry entries[FAKELOG_MAX];
static size_t count;
static struct {
    char fn[48];
    long long ret;
} results[FAKELOG_RESULTS];
static int nresults;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

FAKE_EXPORT void fakelog_call(const char *lib, const char *fn, int nargs, const uint64_t *args, long long ret)
{
    pthread_mutex_lock(&lock);
    if (count < FAKELOG_MAX) {
        struct fakelog_entry *e = &entries[count++];
        snprintf(e->lib, sizeof(e->lib), "%s", lib);
        snprintf(e->fn, sizeof(e->fn), "%s", fn);
        e->nargs = nargs > FAKE_MAX_ARGS ? FAKE_MAX_ARGS : nargs;
        memcpy(e->args, args, (size_t)e->nargs * sizeof(uint64_t));
        e->ret = ret;
    }
    pthread_mutex_unlock(&lock);
}

FAKE_EXPORT size_t fakelog_count(void)
{
    pthread_mutex_lock(&lock);
    size_t n = count;
    pthread_mutex_unlock(&lock);
    return n;
}

FAKE_EXPORT int fakelog_get(size_t i, struct fakelog_entry *out)
{
    pthread_mutex_lock(&lock);
    int ok = i < count;
    if (ok)
        *out = entries[i];
    pthread_mutex_unlock(&lock);
    return ok;
}

FAKE_EXPORT long fakelog_find(const char *fn, size_t from)
{
    long found = -1;
    pthread_mutex_lock(&lock);
    for (size_t i = from; i < count; i++)
        if (strcmp(entries[i].fn, fn) == 0)
            found = (long)i;
    pthread_mutex_unlock(&lock);
    return found;
}

FAKE_EXPORT size_t fakelog_count_fn(const char *fn)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count; i++)
        n += strcmp(entries[i].fn, fn) == 0;
    pthread_mutex_unlock(&lock);
    return n;
}

static void fake_capture_reset(void);

FAKE_EXPORT void fakelog_clear(void)
{
    pthread_mutex_lock(&lock);
    count = 0;
    pthread_mutex_unlock(&lock);
    fake_capture_reset();
}

FAKE_EXPORT void fakelog_set_result(const char *fn, long long ret)
{
    pthread_mutex_lock(&lock);
    int i;
    for (i = 0; i < nresults; i++)
        if (strcmp(results[i].fn, fn) == 0)
            break;
    if (i < FAKELOG_RESULTS) {
        snprintf(results[i].fn, sizeof(results[i].fn), "%s", fn);
        results[i].ret = ret;
        if (i == nresults)
            nresults++;
    }
    pthread_mutex_unlock(&lock);
}

FAKE_EXPORT long long fakelog_result(const char *fn, long long fallback)
{
    long long r = fallback;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nresults; i++)
        if (strcmp(results[i].fn, fn) == 0)
            r = results[i].ret;
    pthread_mutex_unlock(&lock);
    return r;
}

FAKE_EXPORT void fakelog_reset_results(void)
{
    pthread_mutex_lock(&lock);
    nresults = 0;
    pthread_mutex_unlock(&lock);
}

static struct fake_kernel *kernels[256];
static int nkernels;
static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ulong runs;

FAKE_EXPORT void fake_kernel_init(struct fake_kernel *k, const char *name, unsigned nparams,
                                  const size_t *sizes, void (*fn)(void **params))
{
    k->magic = FAKE_KERNEL_MAGIC;
    k->name = name;
    k->nparams = nparams > 16 ? 16 : nparams;
    for (unsigned i = 0; i < k->nparams; i++)
        k->sizes[i] = sizes[i];
    k->fn = fn;
    pthread_mutex_lock(&kernels_lock);
    int known = 0;
    for (int i = 0; i < nkernels; i++)
        known |= kernels[i] == k;
    if (!known && nkernels < 256)
        kernels[nkernels++] = k;
    pthread_mutex_unlock(&kernels_lock);
}

FAKE_EXPORT struct fake_kernel *fake_kernel_lookup(const void *handle)
{
    struct fake_kernel *k = NULL;
    pthread_mutex_lock(&kernels_lock);
    for (int i = 0; i < nkernels; i++)
        if ((const void *)kernels[i] == handle)
            k = kernels[i];
    pthread_mutex_unlock(&kernels_lock);
    return k;
}

FAKE_EXPORT void fake_kernel_run(struct fake_kernel *k, void **params)
{
    if (k->fn != NULL)
        k->fn(params);
    atomic_fetch_add(&runs, 1);
}

FAKE_EXPORT unsigned long fake_kernel_runs(void)
{
    return atomic_load(&runs);
}

static pthread_mutex_t fake_capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uintptr_t stream;
    uint64_t id;
    bool invalidated; /* a potentially unsafe call was made while it was open */
} fake_captures[8];
static uint64_t fake_capture_ids, fake_execs;

FAKE_EXPORT uintptr_t fake_capture_graph(uint64_t id)
{
    return 0x90000 + (uintptr_t)id * 16;
}

FAKE_EXPORT uint64_t fake_capture_begin(uintptr_t stream)
{
    pthread_mutex_lock(&fake_capture_lock);
    uint64_t id = 0;
    for (int i = 0; i < 8; i++)
        if (fake_captures[i].id == 0) {
            fake_captures[i].stream = stream;
            id = fake_captures[i].id = ++fake_capture_ids;
            break;
        }
    pthread_mutex_unlock(&fake_capture_lock);
    return id;
}

/* The slot capturing `stream`, or -1. Locked. */
static int fake_capture_slot(uintptr_t stream)
{
    for (int i = 0; i < 8; i++)
        if (fake_captures[i].id != 0 && fake_captures[i].stream == stream)
            return i;
    return -1;
}

FAKE_EXPORT int fake_capture_status(uintptr_t stream, uint64_t *id)
{
    pthread_mutex_lock(&fake_capture_lock);
    int i = fake_capture_slot(stream);
    if (i >= 0)
        *id = fake_captures[i].id;
    pthread_mutex_unlock(&fake_capture_lock);
    return i >= 0;
}

FAKE_EXPORT int fake_capture_end(uintptr_t stream, uintptr_t *graph)
{
    pthread_mutex_lock(&fake_capture_lock);
    int i = fake_capture_slot(stream), r = 0;
    if (i >= 0) {
        *graph = fake_capture_graph(fake_captures[i].id);
        fake_captures[i].id = 0;
        r = fake_captures[i].invalidated ? 2 : 1;
        fake_captures[i].invalidated = false;
    }
    pthread_mutex_unlock(&fake_capture_lock);
    return r;
}

/* The calls CUDA calls potentially unsafe during a capture in global mode,
 * from any thread: memory allocation and queries, event creation and
 * queries, synchronisation, module loading.  Each one made while a capture
 * is open invalidates it (its end then fails), as the real driver does. */
FAKE_EXPORT void fake_capture_unsafe(const char *fn)
{
    static const char *const unsafe[] = {
        "cuMemAlloc_v2", "cuMemGetInfo_v2", "cuEventCreate", "cuEventQuery", "cuStreamSynchronize",
        "cuCtxSynchronize", "cuModuleLoadData", "cuMemFree_v2", "cudaDeviceSynchronize", "cudaStreamSynchronize",
        "cudaFree", "cudaEventSynchronize", "cuEventSynchronize",
    };
    bool listed = false;
    for (size_t k = 0; k < sizeof(unsafe) / sizeof(unsafe[0]) && !listed; k++)
        listed = strncmp(fn, unsafe[k], strlen(unsafe[k])) == 0 &&
                 (fn[strlen(unsafe[k])] == '\0' || strcmp(fn + strlen(unsafe[k]), "_ptsz") == 0);
    if (!listed)
        return;
    pthread_mutex_lock(&fake_capture_lock);
    for (int i = 0; i < 8; i++)
        if (fake_captures[i].id != 0 && !fake_captures[i].invalidated) {
            fake_captures[i].invalidated = true;
            uint64_t words[1] = {fake_captures[i].stream};
            fakelog_call("fake", "capture_invalidated", 1, words, 0);
        }
    pthread_mutex_unlock(&fake_capture_lock);
}

FAKE_EXPORT uintptr_t fake_exec_new(void)
{
    pthread_mutex_lock(&fake_capture_lock);
    uintptr_t e = 0xa0000 + (uintptr_t)(++fake_execs) * 16;
    pthread_mutex_unlock(&fake_capture_lock);
    return e;
}

static void fake_capture_reset(void)
{
    pthread_mutex_lock(&fake_capture_lock);
    memset(fake_captures, 0, sizeof(fake_captures));
    pthread_mutex_unlock(&fake_capture_lock);
}
