/*
 * Verify mode (H3SHIM_VERIFY=N): before an op replaces a range of a group,
 * its first N runs compare it with what it replaces, on the GPU, on the
 * program's own data.  For such a run the op's kernel writes into scratch
 * memory (h3_verify_outputs moves each output pointer there), the engine
 * issues the range's calls as the program made them (their outputs are what
 * the program gets), and after the range's last call kernels/verify.cu
 * compares every output bitwise and copies the result to pinned host memory,
 * behind an event.  The result is read when the event is seen complete at a
 * later run (cuEventQuery, never a wait), so the stream is not stalled.  A
 * range runs fused only after N of its runs were read equal; one difference
 * turns the op off in the process, with one warning naming the op, the
 * signature, the output, the first differing element and both values.
 *
 * Owns: the verification slots (result memory and event; at most
 * H3_VERIFY_SLOTS), the scratch of the runs in flight (stream-ordered:
 * allocated on the run's stream before it, freed there after its
 * comparison; at most H3SHIM_VERIFY_MAX_MB at once), the per-range counts
 * (a range is counted per context) and the per-op verdicts.
 * Invariants: while a range is not verified, the program's bits are the
 * unfused calls' by construction (its calls are issued as made, or it falls
 * back); a range runs fused only when N runs were read equal and none is
 * still in flight; a slot is reused only after its event was seen complete,
 * and never after a comparison that was not wholly issued.
 * Never: allocates, creates or asks an event while a capture is open
 * anywhere (h3_unsafe_begin); verifies inside a capture (falls back:
 * verify_capture); waits for the device, but at exit.
 */
#include "h3shim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/verify_params.h"

/* Runs compared at once, per process; ranges whose counts are kept. */
#define H3_VERIFY_SLOTS 16
#define H3_VERIFY_RANGES 1024
/* H3SHIM_VERIFY unset: runs compared where an op runs on an SM it is not validated on. */
#define H3_VERIFY_AUTO 3

const char h3_verify_running[] = "verifying";

struct h3_verify_slot {
    /* Bound to one context (and its device) at first use; the result words
     * and record are that context's. */
    CUcontext ctx;
    int device;
    CUevent event;
    CUdeviceptr first;
    struct h3_verify_record *record; /* pinned host memory */
    /* The run it holds: 0 free, 1 being filled by an op's run, 2 armed (the
     * op ran into scratch; the comparison follows the range's last call),
     * 3 compared (its event recorded; the result is read once complete),
     * 4 retired (a comparison not wholly issued, or its context broken:
     * the device may still write its memory, so it is never used again). */
    int state;
    /* This run's scratch, on its stream: allocated before the op's kernel,
     * freed after the comparison. */
    CUdeviceptr scratch;
    size_t cap;
    const void *stream;
    bool ptsz;
    struct h3_free_mark made[H3_VERIFY_OUTPUTS]; /* the thread's frees when each output's launch was held */
    unsigned compared;                           /* outputs whose comparison was issued */
    const void *owner; /* the thread whose run it holds (its h3_verify_filling's address) */
    const struct h3_op *op;
    const void *range;
    const struct h3_sig *sig;
    struct h3_verify_batch batch;
    /* Its context was let go while a thread's run held it: never used again
     * (its memory went with the context, or is left to it). */
    bool doomed;
};

struct h3_verify_range {
    _Atomic(const void *) key; /* the range */
    _Atomic(const void *) ctx; /* in this context */
    atomic_uint passed, inflight;
};

static struct {
    pthread_mutex_t lock;
    struct h3_verify_slot slot[H3_VERIFY_SLOTS];
    size_t bytes, peak; /* scratch held */
    struct h3_verify_range range[H3_VERIFY_RANGES];
    atomic_bool off[H3_OPS_MAX];                /* a difference was found: the op is off */
    atomic_ulong compared[H3_OPS_MAX], equal[H3_OPS_MAX], differed[H3_OPS_MAX], unread[H3_OPS_MAX];
    atomic_ulong ranges_verified[H3_OPS_MAX];
    atomic_ulong outputs[H3_OPS_MAX], freed[H3_OPS_MAX]; /* outputs compared, and left out (freed first) */
    atomic_ulong polls;
} h3_verify = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* N from H3SHIM_VERIFY: -1 unset (H3_VERIFY_AUTO where an op is unvalidated). */
static int h3_verify_n = -1;

/* The slot the op running on this thread fills (state 1), or NULL. */
static H3_TLS struct h3_verify_slot *h3_verify_filling;

void h3_verify_setup(void)
{
    h3_verify_n = -1;
    const char *v = h3_config.verify;
    if (v == NULL || *v == '\0')
        return;
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0 || n > 1000000) {
        H3_WARN(H3_SUB_CONFIG, "H3SHIM_VERIFY=%s is not a number of runs (0 to 1000000); using the default "
                               "(%d runs where an op runs on an SM it is not validated on, else none)",
                v, H3_VERIFY_AUTO);
        return;
    }
    h3_verify_n = (int)n;
}

/* Runs to compare for `op` (no driver call: an op run asks it). */
static unsigned h3_verify_runs(const struct h3_op *op)
{
    if (h3_verify_n >= 0)
        return (unsigned)h3_verify_n;
    return h3_op_runs_unvalidated(op) ? H3_VERIFY_AUTO : 0;
}

bool h3_verify_on(void)
{
    if (h3_verify_n > 0)
        return true;
    if (h3_verify_n == 0)
        return false;
    for (unsigned i = 0; i < h3_ops_count(); i++)
        if (h3_op_enabled(h3_ops_get(i)) && !h3_ops_get(i)->test_only && h3_verify_runs(h3_ops_get(i)) > 0)
            return true;
    return false;
}

/* The counts of `range` in context `ctx`, made at first sight (under the
 * lock); NULL when the table is full or, with `make` false, not there. */
static struct h3_verify_range *h3_verify_range_of(const void *range, const void *ctx, bool make)
{
    uintptr_t h = ((uintptr_t)range >> 4 ^ (uintptr_t)ctx >> 4) * 0x9e3779b97f4a7c15ull;
    for (unsigned k = 0; k < H3_VERIFY_RANGES; k++) {
        struct h3_verify_range *e = &h3_verify.range[(h + k) % H3_VERIFY_RANGES];
        const void *key = atomic_load_explicit(&e->key, memory_order_acquire);
        if (key == range && atomic_load_explicit(&e->ctx, memory_order_relaxed) == ctx)
            return e;
        if (key == NULL) {
            if (!make)
                return NULL;
            atomic_store_explicit(&e->ctx, ctx, memory_order_relaxed);
            atomic_store_explicit(&e->key, range, memory_order_release);
            return e;
        }
    }
    return NULL;
}

/* Reads a compared slot's result (its event complete) and frees the slot.  Locked. */
static void h3_verify_settle(struct h3_verify_slot *s)
{
    unsigned i = h3_op_index_of(s->op);
    struct h3_verify_range *e = h3_verify_range_of(s->range, s->ctx, false);
    bool equal = true;
    for (unsigned k = 0; k < s->batch.n && equal; k++) {
        const struct h3_verify_record *r = &s->record[k];
        if (r->first == ~0ull)
            continue;
        equal = false;
        unsigned elem = s->batch.elem[k];
        uint64_t a = 0, b = 0;
        memcpy(&a, r->got, elem < 8 ? elem : 8);
        memcpy(&b, r->ref, elem < 8 ? elem : 8);
        if (!atomic_exchange(&h3_verify.off[i], true))
            H3_WARN(H3_SUB_ENGINE,
                    "verify: op %s differs from the calls it replaces (signature %s/%s, output %u of %u, %llu "
                    "bytes): element %llu is 0x%0*llx fused, 0x%0*llx unfused; the op is off in this process, "
                    "its calls run unfused",
                    s->op->name, s->sig != NULL ? s->sig->model : "?", s->sig != NULL ? s->sig->group : "?", k + 1,
                    s->batch.n, (unsigned long long)s->batch.bytes[k], r->first / (elem ? elem : 1), (int)(2 * elem),
                    (unsigned long long)a, (int)(2 * elem), (unsigned long long)b);
    }
    atomic_fetch_add(&h3_verify.outputs[i], s->compared);
    atomic_fetch_add(&h3_verify.freed[i], s->batch.n - s->compared);
    if (equal && s->compared == 0) {
        /* Every output was freed before it could be compared: nothing
         * learned, the run does not count (the range stays unverified). */
        atomic_fetch_add(&h3_verify.unread[i], 1);
        if (e != NULL)
            atomic_fetch_sub(&e->inflight, 1);
        s->state = 0;
        return;
    }
    atomic_fetch_add(equal ? &h3_verify.equal[i] : &h3_verify.differed[i], 1);
    if (e != NULL) {
        atomic_fetch_sub(&e->inflight, 1);
        if (equal && atomic_fetch_add(&e->passed, 1) + 1 == h3_verify_runs(s->op))
            atomic_fetch_add(&h3_verify.ranges_verified[i], 1);
    }
    s->state = 0;
}

/* Ends a run whose result will not be read, nothing learned from it; its
 * slot is retired (`retire`: the device may still write it) or freed.  Locked. */
static void h3_verify_drop(struct h3_verify_slot *s, bool retire)
{
    struct h3_verify_range *e = h3_verify_range_of(s->range, s->ctx, false);
    if (e != NULL && s->state >= 1 && s->state <= 3)
        atomic_fetch_sub(&e->inflight, 1);
    if (s->state >= 2 && s->state <= 3)
        atomic_fetch_add(&h3_verify.unread[h3_op_index_of(s->op)], 1);
    s->state = retire ? 4 : 0;
}

/* Reads every compared slot whose event is complete; with `wait`, waits
 * for them (at exit).  Only while no capture is open.  Locked. */
static void h3_verify_poll(bool wait)
{
    __typeof__(&cuEventQuery) query = H3_LIB_FN(CUDA, cuEventQuery);
    __typeof__(&cuEventSynchronize) sync = H3_LIB_FN(CUDA, cuEventSynchronize);
    bool any = false;
    for (unsigned k = 0; k < H3_VERIFY_SLOTS; k++)
        any |= h3_verify.slot[k].state == 3;
    if (!any || query == NULL || !h3_unsafe_begin())
        return;
    atomic_fetch_add_explicit(&h3_verify.polls, 1, memory_order_relaxed);
    for (unsigned k = 0; k < H3_VERIFY_SLOTS; k++) {
        struct h3_verify_slot *s = &h3_verify.slot[k];
        if (s->state != 3)
            continue;
        CUresult r = wait && sync != NULL ? sync(s->event) : query(s->event);
        if (r == CUDA_SUCCESS)
            h3_verify_settle(s);
        else if (r != CUDA_ERROR_NOT_READY)
            h3_verify_drop(s, true); /* the context is gone or broken: nothing to read */
    }
    h3_unsafe_end();
}

/* A free slot of context `ctx`, bound to it if new; NULL when none.
 * Locked, with no capture open (h3_unsafe_begin held). */
static struct h3_verify_slot *h3_verify_slot_get(CUcontext ctx)
{
    struct h3_verify_slot *fresh = NULL;
    unsigned mine = 0;
    for (unsigned k = 0; k < H3_VERIFY_SLOTS; k++) {
        struct h3_verify_slot *s = &h3_verify.slot[k];
        if (s->state == 0 && s->ctx == ctx && !s->doomed)
            return s;
        mine += s->ctx == ctx;
        if (s->state == 0 && s->ctx == NULL && fresh == NULL)
            fresh = s;
    }
    /* A context binds at most a quarter of the slots, so that others (a
     * second GPU) find some. */
    if (fresh == NULL || mine >= H3_VERIFY_SLOTS / 4)
        return NULL;
    __typeof__(&cuEventCreate) create = H3_LIB_FN(CUDA, cuEventCreate);
    __typeof__(&cuMemAlloc_v2) alloc = H3_LIB_FN(CUDA, cuMemAlloc_v2);
    __typeof__(&cuMemAllocHost_v2) host = H3_LIB_FN(CUDA, cuMemAllocHost_v2);
    __typeof__(&cuCtxGetDevice) device = H3_LIB_FN(CUDA, cuCtxGetDevice);
    __typeof__(&cuMemFree_v2) release = H3_LIB_FN(CUDA, cuMemFree_v2);
    CUevent ev = NULL;
    CUdeviceptr first = 0;
    void *record = NULL;
    CUdevice dev = -1;
    const size_t words = H3_VERIFY_OUTPUTS * sizeof(unsigned long long);
    if (create == NULL || alloc == NULL || host == NULL || release == NULL ||
        create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return NULL;
    if (alloc(&first, words) != CUDA_SUCCESS ||
        host(&record, H3_VERIFY_OUTPUTS * sizeof(struct h3_verify_record)) != CUDA_SUCCESS) {
        __typeof__(&cuEventDestroy_v2) destroy = H3_LIB_FN(CUDA, cuEventDestroy_v2);
        if (destroy != NULL)
            destroy(ev);
        if (first != 0)
            release(first);
        return NULL;
    }
    if (device != NULL && device(&dev) != CUDA_SUCCESS)
        dev = -1;
    *fresh = (struct h3_verify_slot){.ctx = ctx, .device = (int)dev, .event = ev, .first = first, .record = record};
    return fresh;
}

const char *h3_verify_begin(const struct h3_op_range *r, const struct h3_sig *sig, const struct h3_deferred *at)
{
    const struct h3_op *op = r->op;
    unsigned want = h3_verify_runs(op), i = h3_op_index_of(op);
    if (want == 0)
        return NULL;
    if (atomic_load_explicit(&h3_verify.off[i], memory_order_relaxed))
        return "verify_differed";
    __typeof__(&cuCtxGetCurrent) current = H3_LIB_FN(CUDA, cuCtxGetCurrent);
    CUcontext ctx = NULL;
    if (current == NULL || current(&ctx) != CUDA_SUCCESS || ctx == NULL)
        return "verify_no_context";
    struct h3_verify_range *e = h3_verify_range_of(r, ctx, false);
    if (e != NULL && atomic_load_explicit(&e->passed, memory_order_acquire) >= want &&
        atomic_load_explicit(&e->inflight, memory_order_acquire) == 0 &&
        !atomic_load_explicit(&h3_verify.off[i], memory_order_acquire))
        return NULL; /* verified, nothing still to read (and no difference found meanwhile) */
    pthread_mutex_lock(&h3_verify.lock);
    if (e == NULL)
        e = h3_verify_range_of(r, ctx, true);
    h3_verify_poll(false);
    const char *why = NULL;
    struct h3_verify_slot *s = NULL;
    if (e == NULL)
        why = "verify_full";
    else if (atomic_load(&h3_verify.off[i]))
        why = "verify_differed";
    else if (atomic_load(&e->passed) >= want)
        /* Verified meanwhile; while a run's result is still on its way (one
         * that may differ) the calls run as made. */
        why = atomic_load(&e->inflight) == 0 ? NULL : "verify_pending";
    else if (h3_stream_capturing(at->stream))
        why = "verify_capture";
    else if (!h3_unsafe_begin()) {
        H3_WARN_ONCE(H3_SUB_ENGINE, "verify: a capture is open on another stream, or one cannot be ruled out "
                                    "(H3SHIM_INTERPOSE_DRIVER=0, or a capture's begin not seen): runs are not "
                                    "compared meanwhile, and their calls run as made (verify_capture)");
        why = "verify_capture";
    } else {
        s = h3_verify_slot_get(ctx);
        h3_unsafe_end();
        why = s != NULL ? h3_verify_running : "verify_busy";
    }
    if (s != NULL) {
        s->state = 1;
        s->owner = &h3_verify_filling;
        s->op = op, s->range = r, s->sig = sig;
        s->batch.n = 0;
        s->scratch = 0, s->cap = 0;
        s->stream = at->stream;
        s->ptsz = h3_fn_per_thread(at->fn);
        atomic_fetch_add(&e->inflight, 1);
        h3_verify_filling = s;
    }
    pthread_mutex_unlock(&h3_verify.lock);
    return why;
}

const char *h3_verify_outputs(uint64_t *const *ptr, const uint64_t *bytes, const unsigned *elem,
                              const struct h3_deferred *const *by, unsigned n)
{
    struct h3_verify_slot *s = h3_verify_filling;
    if (s == NULL)
        return NULL;
    if (s->scratch != 0 || s->batch.n + n > H3_VERIFY_OUTPUTS)
        return "verify_outputs"; /* one call a run */
    size_t need = 0;
    for (unsigned k = 0; k < n; k++)
        if (*ptr[k] != 0)
            need += (bytes[k] + 511) / 256 * 256; /* each pointer's offset in 256 bytes kept, as its alignment */
    if (need == 0)
        return NULL;
    __typeof__(&cuMemAllocAsync) alloc = H3_LIB_FN(CUDA, cuMemAllocAsync);
    __typeof__(&cuMemAllocAsync_ptsz) alloc_ptsz = H3_LIB_FN(CUDA, cuMemAllocAsync_ptsz);
    __typeof__(&cuMemGetInfo_v2) info = H3_LIB_FN(CUDA, cuMemGetInfo_v2);
    __typeof__(&cuMemAllocAsync) get = s->ptsz ? alloc_ptsz : alloc;
    const size_t limit = (size_t)h3_config.verify_max_mb << 20;
    const char *why = NULL;
    pthread_mutex_lock(&h3_verify.lock);
    size_t free_b = 0, total_b = 0;
    CUdeviceptr p = 0;
    if (h3_verify.bytes + need > limit) {
        why = "verify_memory";
    } else if (get == NULL || info == NULL || !h3_unsafe_begin()) {
        why = "verify_capture";
    } else {
        /* As weight_cache's copies: never what leaves the application short. */
        if (info(&free_b, &total_b) != CUDA_SUCCESS ||
            (free_b - (free_b < need ? free_b : need)) * 100 < total_b * (size_t)h3_config.weight_cache_min_free_pct ||
            get(&p, need, (CUstream)(uintptr_t)s->stream) != CUDA_SUCCESS)
            why = "verify_memory";
        h3_unsafe_end();
    }
    if (why == NULL) {
        s->scratch = p, s->cap = need;
        h3_verify.bytes += need;
        if (h3_verify.bytes > h3_verify.peak)
            h3_verify.peak = h3_verify.bytes;
        size_t used = 0;
        for (unsigned k = 0; k < n; k++) {
            if (*ptr[k] == 0)
                continue;
            uint64_t got = p + used + (*ptr[k] & 255);
            used += (bytes[k] + 511) / 256 * 256;
            unsigned j = s->batch.n++;
            s->batch.ref[j] = (const void *)(uintptr_t)*ptr[k];
            s->batch.got[j] = (const void *)(uintptr_t)got;
            s->batch.elem[j] = elem[k];
            s->batch.bytes[j] = bytes[k];
            s->made[j] = by[k]->made;
            *ptr[k] = got;
        }
    }
    pthread_mutex_unlock(&h3_verify.lock);
    return why;
}

/* Frees a run's scratch on its stream, after what was queued there.  Locked. */
static void h3_verify_free_scratch(struct h3_verify_slot *s)
{
    if (s->scratch == 0)
        return;
    __typeof__(&cuMemFreeAsync) release = H3_LIB_FN(CUDA, cuMemFreeAsync);
    __typeof__(&cuMemFreeAsync_ptsz) release_ptsz = H3_LIB_FN(CUDA, cuMemFreeAsync_ptsz);
    __typeof__(&cuMemFreeAsync) put = s->ptsz ? release_ptsz : release;
    if (put != NULL)
        put(s->scratch, (CUstream)(uintptr_t)s->stream);
    h3_verify.bytes -= s->cap;
    s->scratch = 0, s->cap = 0;
}

bool h3_verify_active(void)
{
    return h3_verify_filling != NULL;
}

const char *h3_verify_ran(const char *why)
{
    struct h3_verify_slot *s = h3_verify_filling;
    h3_verify_filling = NULL;
    if (s == NULL)
        return why;
    pthread_mutex_lock(&h3_verify.lock);
    if (s->doomed) {
        /* Its context was let go meanwhile: nothing is compared, and the
         * calls run as made (if the context still takes them); its scratch
         * went with the context. */
        h3_verify.bytes -= s->cap;
        s->scratch = 0, s->cap = 0;
        h3_verify_drop(s, true);
        why = why != NULL ? why : "verify_released";
    } else if (why == NULL && s->batch.n > 0) {
        s->state = 2;
        why = h3_verify_running;
    } else {
        /* Not run (a fallback), or nothing written to compare: the calls run
         * as made; scratch allocated for a kernel that did not launch goes. */
        h3_verify_free_scratch(s);
        h3_verify_drop(s, false);
        if (why == NULL)
            why = "verify_nothing";
    }
    pthread_mutex_unlock(&h3_verify.lock);
    return why;
}

/* This thread's armed slot of `range`, or NULL.  Locked. */
static struct h3_verify_slot *h3_verify_armed(const void *range)
{
    for (unsigned k = 0; k < H3_VERIFY_SLOTS; k++)
        if (h3_verify.slot[k].state == 2 && h3_verify.slot[k].range == range &&
            h3_verify.slot[k].owner == (const void *)&h3_verify_filling)
            return &h3_verify.slot[k];
    return NULL;
}

void h3_verify_finish(const struct h3_op_range *r, const struct h3_deferred *last)
{
    pthread_mutex_lock(&h3_verify.lock);
    struct h3_verify_slot *s = h3_verify_armed(r);
    if (s != NULL && s->doomed) { /* its context was let go while its calls were issued */
        h3_verify.bytes -= s->cap;
        s->scratch = 0, s->cap = 0;
        h3_verify_drop(s, true);
        s = NULL;
    }
    if (s == NULL) {
        pthread_mutex_unlock(&h3_verify.lock);
        return;
    }
    s->batch.first = (unsigned long long *)(uintptr_t)s->first;
    s->batch.out = s->record;
    s->compared = 0;
    CUstream stream = (CUstream)(uintptr_t)s->stream;
    __typeof__(&cuMemsetD32Async) set = H3_LIB_FN(CUDA, cuMemsetD32Async);
    __typeof__(&cuMemsetD32Async_ptsz) set_ptsz = H3_LIB_FN(CUDA, cuMemsetD32Async_ptsz);
    __typeof__(&cuMemsetD32Async) clear = s->ptsz ? set_ptsz : set;
    /* The result words all ones, on this stream, before its comparisons. */
    const char *why = clear == NULL || clear(s->first, 0xffffffffu, 2 * H3_VERIFY_OUTPUTS, stream) != CUDA_SUCCESS
                          ? "memset"
                          : NULL;
    for (unsigned k = 0; k < s->batch.n && why == NULL; k++) {
        /* An output the allocator reported freed since the launch that
         * wrote it was held may hold another tensor by now (a weight cast
         * between a norm and its cast): not compared, its word stays all
         * ones.  (Memory freed before that launch and given to its output
         * is the output's: compared.) */
        struct h3_span out = {(uint64_t)(uintptr_t)s->batch.ref[k],
                              (uint64_t)(uintptr_t)s->batch.ref[k] + s->batch.bytes[k]};
        if (h3_released_since(s->made[k], out))
            continue;
        s->compared++;
        unsigned long long bytes = s->batch.bytes[k];
        unsigned long long *first = s->batch.first + k;
        void *args[] = {&s->batch.ref[k], &s->batch.got[k], &bytes, &first};
        unsigned blocks = (unsigned)((bytes / 16 + 255) / 256), cap = h3_kernels_sm_count() * 8u;
        if (blocks > cap)
            blocks = cap;
        if (blocks == 0)
            blocks = 1;
        const unsigned grid[3] = {blocks, 1, 1}, block[3] = {256, 1, 1};
        why = h3_kernels_launch("h3_verify_diff", last, grid, block, args);
    }
    if (why == NULL) {
        void *args[] = {&s->batch};
        const unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
        why = h3_kernels_launch("h3_verify_note", last, grid, block, args);
    }
    h3_verify_free_scratch(s); /* after the comparison, on its stream */
    __typeof__(&cuEventRecord) record = H3_LIB_FN(CUDA, cuEventRecord);
    __typeof__(&cuEventRecord_ptsz) record_ptsz = H3_LIB_FN(CUDA, cuEventRecord_ptsz);
    __typeof__(&cuEventRecord) rec = s->ptsz ? record_ptsz : record;
    if (why == NULL && (rec == NULL || rec(s->event, stream) != CUDA_SUCCESS))
        why = "event";
    atomic_fetch_add(&h3_verify.compared[h3_op_index_of(s->op)], 1);
    if (why != NULL) {
        /* Not wholly issued: the result cannot be trusted, and the device may
         * still write the slot's words, so the slot is retired (its memory is
         * freed with its context). */
        H3_WARN_ONCE(H3_SUB_ENGINE, "verify: the comparison of op %s could not be issued (%s); that run is "
                                    "not counted as verified", s->op->name, why);
        h3_verify_drop(s, true);
    } else {
        s->state = 3;
    }
    pthread_mutex_unlock(&h3_verify.lock);
}

void h3_verify_abandon(void)
{
    pthread_mutex_lock(&h3_verify.lock);
    for (unsigned k = 0; k < H3_VERIFY_SLOTS; k++)
        if (h3_verify.slot[k].state == 2 && h3_verify.slot[k].owner == (const void *)&h3_verify_filling) {
            h3_verify_free_scratch(&h3_verify.slot[k]);
            h3_verify_drop(&h3_verify.slot[k], false);
        }
    pthread_mutex_unlock(&h3_verify.lock);
}

/* Frees a slot's memory and event (its context alive) or forgets them.  Locked. */
static void h3_verify_unbind(struct h3_verify_slot *s, bool alive)
{
    if (alive) {
        __typeof__(&cuMemFree_v2) release = H3_LIB_FN(CUDA, cuMemFree_v2);
        __typeof__(&cuMemFreeHost) release_host = H3_LIB_FN(CUDA, cuMemFreeHost);
        __typeof__(&cuEventDestroy_v2) destroy = H3_LIB_FN(CUDA, cuEventDestroy_v2);
        if (release != NULL && s->first != 0)
            release(s->first);
        if (release_host != NULL && s->record != NULL)
            release_host(s->record);
        if (destroy != NULL && s->event != NULL)
            destroy(s->event);
    }
    *s = (struct h3_verify_slot){0};
}

unsigned h3_verify_release(int device, const void *ctx, bool alive)
{
    pthread_mutex_lock(&h3_verify.lock);
    unsigned n = 0;
    for (unsigned k = 0; k < H3_VERIFY_SLOTS; k++) {
        struct h3_verify_slot *s = &h3_verify.slot[k];
        if (s->ctx == NULL || s->doomed || (device >= 0 && s->device != device) ||
            (ctx != NULL && (const void *)s->ctx != ctx))
            continue; /* another's, or one let go already (never used again) */
        n++;
        if (s->state == 1 || s->state == 2) {
            s->doomed = true; /* a thread's group run holds it now; that run ends it */
            continue;
        }
        if (s->state == 3)
            h3_verify_drop(s, false);
        h3_verify_unbind(s, alive);
    }
    pthread_mutex_unlock(&h3_verify.lock);
    return n;
}

void h3_verify_print_stats(void (*line)(const char *fmt, ...))
{
    if (!h3_verify_on())
        return;
    pthread_mutex_lock(&h3_verify.lock);
    h3_verify_poll(true); /* at exit: the results still on their way */
    size_t bytes = h3_verify.bytes, peak = h3_verify.peak;
    pthread_mutex_unlock(&h3_verify.lock);
    line("verify: each op range's first runs compared with the calls it replaces (H3SHIM_VERIFY=%s); scratch "
         "%.1f MiB of GPU memory (peak %.1f MiB), %lu result reads",
         h3_config.verify != NULL && *h3_config.verify ? h3_config.verify : "unset", (double)bytes / (1 << 20),
         (double)peak / (1 << 20), atomic_load(&h3_verify.polls));
    for (unsigned i = 0; i < h3_ops_count() && i < H3_OPS_MAX; i++) {
        const struct h3_op *op = h3_ops_get(i);
        if (!h3_op_enabled(op) || op->test_only)
            continue;
        unsigned want = h3_verify_runs(op);
        line("verify: op %-12s %u runs a range; %lu compared, %lu equal, %lu differing, %lu not read; %lu ranges "
             "verified%s; %lu outputs compared, %lu not (freed first)",
             op->name, want, atomic_load(&h3_verify.compared[i]), atomic_load(&h3_verify.equal[i]),
             atomic_load(&h3_verify.differed[i]), atomic_load(&h3_verify.unread[i]),
             atomic_load(&h3_verify.ranges_verified[i]),
             atomic_load(&h3_verify.off[i]) ? "; off (a difference)" : op->unverified ? "; not compared (no kernel of its own)" : "",
             atomic_load(&h3_verify.outputs[i]), atomic_load(&h3_verify.freed[i]));
    }
}

void h3_verify_reset(void)
{
    for (unsigned i = 0; i < H3_OPS_MAX; i++) {
        atomic_store(&h3_verify.off[i], false);
        atomic_store(&h3_verify.compared[i], 0);
        atomic_store(&h3_verify.equal[i], 0);
        atomic_store(&h3_verify.differed[i], 0);
        atomic_store(&h3_verify.unread[i], 0);
        atomic_store(&h3_verify.ranges_verified[i], 0);
        atomic_store(&h3_verify.outputs[i], 0);
        atomic_store(&h3_verify.freed[i], 0);
    }
    for (unsigned k = 0; k < H3_VERIFY_RANGES; k++) {
        atomic_store(&h3_verify.range[k].key, NULL);
        atomic_store(&h3_verify.range[k].ctx, NULL);
        atomic_store(&h3_verify.range[k].passed, 0);
        atomic_store(&h3_verify.range[k].inflight, 0);
    }
    atomic_store(&h3_verify.polls, 0);
}

void h3_verify_after_fork_child(void)
{
    /* The parent's slots and their device memory are not the child's. */
    pthread_mutex_init(&h3_verify.lock, NULL);
    for (unsigned k = 0; k < H3_VERIFY_SLOTS; k++)
        h3_verify.slot[k] = (struct h3_verify_slot){0};
    h3_verify.bytes = 0;
    h3_verify_filling = NULL;
}
