/*
 * The weight_cache op: the FP32->FP16 casts of a block GEMM's weight and
 * bias, which autocast repeats on every call, are made once; the GEMM reads
 * the cached FP16 copies through its A pointer and bias attribute.
 *
 * Owns: the cache (per source, element count and stream), its invalidation,
 * and its counters.
 * Invariants:
 *   - A copy is made by PyTorch's own cast launch with its output pointer
 *     moved to the cache: the same kernel on the same input, so the same bits.
 *   - An entry is dropped whenever the shim sees anything that may write its
 *     source: a memcpy or memset into it, a stream write value into it, a
 *     free of the allocation holding it, a launch whose parameters point into
 *     it (other than the casts the op replaces, which read it), a cuBLAS or
 *     cuBLASLt output or any cuDNN pointer into it; every entry is dropped at
 *     a CUDA graph launch, a host function, and a batch of stream memory
 *     operations.  What the shim cannot see is in README.md ("weight_cache").
 *   - Copies are per stream, so a copy made on one stream is never read on
 *     another before it is complete.
 *   - Under stream capture the op falls back (a replayed graph would read
 *     the cache with no invalidation reaching it), unless graph mode is on
 *     (H3SHIM_WEIGHT_CACHE_GRAPHS=1, or unset on an SM where it is
 *     validated): then a captured GEMM reads a copy that is
 *     valid when captured, and every launch of a graph captured under the
 *     shim (graphs.c) first refills on its stream the copies it reads that
 *     were dropped, then drops what the graph's own calls may write; a graph
 *     not captured under the shim drops every copy, as before.  A copy read
 *     on another stream than the one it was last filled on is waited for
 *     (an event recorded after each fill).
 *   - A copy's memory is given back only at a program's free or unmap, with
 *     no capture open and no GEMM between taking its address and its issue.
 * Never: issues anything before every fallback has been ruled out.
 */
#include "h3shim.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

/* Where captured GEMMs read the copies by default: tests/evidence/2026-11-30-nvidia-h200-full-decode-graphs.md */
static const int h3_wc_graphs_validated[] = {90};

#define H3_WC_MAX 4096

/* How a copy was last filled: PyTorch's cast launch, output moved to the copy. */
struct h3_wc_recipe {
    enum h3_fn fn;
    const void *handle;
    dim3 grid, block;
    unsigned shmem;
    unsigned char n[4], functor[1], data[16];
};

struct h3_wc_entry {
    uint64_t src, n; /* FP32 source and element count */
    /* The memory a pointer into which may write the source: the allocator's
     * block holding it (a flat buffer's parameters are views of one block),
     * else its CUDA allocation, else the source itself. */
    uint64_t lo, hi;
    const void *stream;
    CUdeviceptr dst; /* FP16 copy; 0 once its memory went (h3_wc_reap) */
    bool valid;
    bool orphan;  /* the source's memory was freed: never used again; its memory goes at the next safe point */
    bool graphed; /* a capture read it: its slot outlives every graph record */
    CUcontext ctx; /* where it was made, and the device */
    int device;
    /* With graphs (h3_hot.graphs_on) only: */
    struct h3_wc_recipe recipe; /* handle NULL until the first fill (a valid copy has one) */
    const void *fill_stream; /* where the last fill was issued */
    CUevent event;           /* made with the entry (NULL: none could be made) */
    bool recorded;           /* the event was recorded after the last fill */
    bool fill_done;          /* the last fill was seen complete: no stream need wait for it */
};

static struct {
    pthread_mutex_t lock;
    struct h3_wc_entry e[H3_WC_MAX];
    unsigned n;
    size_t bytes, peak;
    unsigned orphans; /* entries whose source was freed and whose memory is still held */
    /* h3_wc_run's between taking copies' addresses (under the lock) and
     * their GEMM's return: while any runs, no copy's memory is given back
     * (another thread's free need not wait for this thread's group). */
    atomic_uint running;
    struct h3_span shared[64]; /* memory other processes can write (IPC) */
    unsigned nshared;
    bool shared_unknown;       /* some such memory whose extent is not known: no copy at all */
    uint64_t all_lo, all_hi; /* the sources of every entry with memory (h3_wcache_source_freed's test) */
    /* The 2 MiB pages that hold a source, hashed into 2^16 bits: set when an
     * entry is made, cleared only when every entry goes, so read without the
     * lock it never misses a source.  A launch's parameter word that falls
     * inside [lo, hi) takes the lock only where its page may hold one: the
     * activations' pointers fall between the weights, not on them. */
    _Atomic uint64_t pages[1024];
    unsigned order[H3_WC_MAX]; /* entry indices by source address */
    uint64_t maxlen;  /* the longest [lo, hi), in bytes */
    atomic_ulong hits, fills, drops, orphaned, reaped, pressed;
    atomic_ulong graph_launches, graph_refills; /* with graphs */
    /* The first call that dropped a copy, for the stats: which entry point,
     * and which kernel when a launch (drops are rare and each costs a refill,
     * or under a capture the copy's use). */
    _Atomic(const char *) first_drop_fn, first_drop_kernel;
} h3_wc = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void h3_wc_reap(bool compact, const uint64_t *named);
static void h3_wc_give_back(void);

/* Per signature, which calls are casts that the op replaces (they read a
 * source: their launches do not invalidate it). */
#define H3_WC_SIGS 32 /* as many as the engine has group tables */
static struct {
    const struct h3_sig *sig;
    uint64_t casts[8]; /* bitmap over calls 0..511 */
} h3_wc_casts[H3_WC_SIGS];

static void h3_wc_mark_cast(const struct h3_sig *sig, uint32_t j)
{
    for (unsigned i = 0; i < H3_WC_SIGS && j < 512; i++) {
        if (h3_wc_casts[i].sig == NULL)
            h3_wc_casts[i].sig = sig;
        if (h3_wc_casts[i].sig == sig) {
            h3_wc_casts[i].casts[j / 64] |= 1ull << (j % 64);
            return;
        }
    }
}

static bool h3_wc_is_cast(const struct h3_sig *sig, uint32_t j)
{
    for (unsigned i = 0; i < H3_WC_SIGS && j < 512; i++)
        if (h3_wc_casts[i].sig == sig)
            return (h3_wc_casts[i].casts[j / 64] >> (j % 64)) & 1;
    return false;
}

/* ---- planning ---- */

/* Whether call `j` is a vectorized float16_copy launch (N, closure, data =
 * {out, in}) whose output is slot `s` at (2, 0).  Its input, the FP32
 * source, is often no slot at all (parameters are far from the activations
 * the recorder finds pointers near); the op reads it from the launch. */
static bool h3_wc_cast_ok(const struct h3_sig *sig, uint32_t j, uint32_t s)
{
    const struct h3_sig_call *c = &sig->calls[j];
    return h3_sig_is_aten(c) && strstr(c->kernel, "float16_copy_kernel_cuda") != NULL &&
           strstr(c->kernel, "St5arrayIPcLm2EE") != NULL && c->nparams == 3 && c->param_sizes[0] == 4 &&
           c->param_sizes[1] == 1 && c->param_sizes[2] == 16 && (int)s == h3_sig_slot_at(c, 2, 0);
}

/* Whether slot (j, s) is read by no call of the signature but the GEMM `k`. */
static bool h3_wc_only_gemm_reads(const struct h3_sig *sig, uint32_t j, uint32_t s, uint32_t k)
{
    for (uint32_t c = j + 1; c < sig->ncalls; c++)
        for (uint32_t i = 0; i < sig->calls[c].nslots; i++) {
            const struct h3_sig_slot *x = &sig->calls[c].slots[i];
            if (x->ref == H3_REF_SLOT && x->ref_call == j && x->ref_slot == s && c != k)
                return false;
        }
    return true;
}

static unsigned h3_wc_plan(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                           unsigned max)
{
    uint32_t k = last + 1;
    if (max == 0 || k >= sig->ncalls || sig->calls[k].kind != H3_SIG_MATMUL)
        return 0;
    const struct h3_sig_call *m = &sig->calls[k];
    int a = h3_sig_slot_at(m, 0, 0), bias = h3_sig_slot_at(m, 4, 0);
    if (a < 0 || bias < 0)
        return 0;
    const struct h3_sig_slot *sa = &m->slots[a], *sb = &m->slots[bias];
    if (sa->ref != H3_REF_SLOT || sb->ref != H3_REF_SLOT || sa->delta != 0 || sb->delta != 0)
        return 0;
    uint32_t w = sa->ref_call, b = sb->ref_call;
    if (w < first || w > last || b < first || b > last || w == b || !h3_wc_cast_ok(sig, w, sa->ref_slot) ||
        !h3_wc_cast_ok(sig, b, sb->ref_slot) || !h3_wc_only_gemm_reads(sig, w, sa->ref_slot, k) ||
        !h3_wc_only_gemm_reads(sig, b, sb->ref_slot, k))
        return 0;
    h3_wc_mark_cast(sig, w);
    h3_wc_mark_cast(sig, b);
    uint32_t lo = w < b ? w : b;
    out[0] = (struct h3_op_range){
        .op = &h3_op_weight_cache,
        .first = lo,
        .last = k,
        .mask = (1ull << (w - lo)) | (1ull << (b - lo)),
        .anchored = true,
        .arg = {w, b},
    };
    return 1;
}

/* ---- the cache ---- */

/* The first position in the source order whose source is at least `src`. Locked. */
static unsigned h3_wc_lower_bound(uint64_t src)
{
    unsigned a = 0, b = h3_wc.n;
    while (a < b) {
        unsigned m = a + (b - a) / 2;
        if (h3_wc.e[h3_wc.order[m]].src < src)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* Memory and events of orphaned copies taken out of the table, to give
 * back once the lock is let go (cuMemFree waits for the device: another
 * thread's launch, an NCCL peer's say, must not wait for the lock
 * meanwhile).  Until given back their bytes stay in h3_wc.bytes and they
 * count as held (h3_hot.wc_held), so that the next free still comes here. */
static struct {
    CUdeviceptr dst;
    CUevent event;
    CUcontext ctx;
    int device;
    size_t bytes;
} h3_wc_doomed[H3_WC_MAX];
static unsigned h3_wc_ndoomed;

static void h3_wc_bounds(void)
{
    uint64_t lo = UINT64_MAX, hi = 0, all_lo = UINT64_MAX, all_hi = 0;
    unsigned live = 0, held = 0;
    for (unsigned i = 0; i < h3_wc.n; i++) {
        const struct h3_wc_entry *e = &h3_wc.e[i];
        if (e->dst != 0) {
            held++;
            all_lo = e->src < all_lo ? e->src : all_lo;
            all_hi = e->src + 4 * e->n > all_hi ? e->src + 4 * e->n : all_hi;
        }
        if (!e->valid)
            continue;
        live++;
        lo = e->lo < lo ? e->lo : lo;
        hi = e->hi > hi ? e->hi : hi;
    }
    __atomic_store_n(&h3_wc.all_lo, all_lo, __ATOMIC_RELAXED); /* read without the lock too */
    __atomic_store_n(&h3_wc.all_hi, all_hi, __ATOMIC_RELAXED);
    atomic_store_explicit(&h3_hot.wc_lo, lo, memory_order_relaxed);
    atomic_store_explicit(&h3_hot.wc_hi, hi, memory_order_relaxed);
    atomic_store(&h3_hot.wc_live, live);
    atomic_store(&h3_hot.wc_held, held + h3_wc_ndoomed);
}

#define H3_WC_PAGE_SHIFT 21

static inline unsigned h3_wc_page_bit(uint64_t v)
{
    return (unsigned)(v >> H3_WC_PAGE_SHIFT) & (64 * H3_ARRAY_LEN(h3_wc.pages) - 1);
}

/* Whether address `v` may lie in a source (false: surely in none). */
static inline bool h3_wc_page_may_hold(uint64_t v)
{
    unsigned b = h3_wc_page_bit(v);
    return (atomic_load_explicit(&h3_wc.pages[b / 64], memory_order_relaxed) >> (b % 64)) & 1;
}

/* Marks the pages of [src, src + bytes) as holding a source. Locked. */
static void h3_wc_pages_add(uint64_t src, uint64_t bytes)
{
    uint64_t first = src >> H3_WC_PAGE_SHIFT, last = (src + bytes - 1) >> H3_WC_PAGE_SHIFT;
    for (uint64_t p = first; p <= last && p - first < 64 * H3_ARRAY_LEN(h3_wc.pages); p++) {
        unsigned b = h3_wc_page_bit(p << H3_WC_PAGE_SHIFT);
        atomic_fetch_or_explicit(&h3_wc.pages[b / 64], 1ull << (b % 64), memory_order_relaxed);
    }
}

/* Drops (marks invalid, keeping the copy's memory for its refill) every
 * entry whose source overlaps [lo, hi). */
static void h3_wc_drop(uint64_t lo, uint64_t hi, const struct h3_call *by)
{
    if (atomic_load_explicit(&h3_hot.wc_live, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&h3_wc.lock);
    bool any = false;
    /* Every entry whose [lo, hi) can overlap [lo, hi) has its source in
     * (lo - maxlen, hi + maxlen): a binary search finds the first. */
    /* (Each entry's lo <= src < hi, and hi - lo <= maxlen.) */
    for (unsigned p = h3_wc_lower_bound(lo > h3_wc.maxlen ? lo - h3_wc.maxlen : 0);
         p < h3_wc.n && h3_wc.e[h3_wc.order[p]].src < (hi > UINT64_MAX - h3_wc.maxlen ? UINT64_MAX : hi + h3_wc.maxlen);
         p++) {
        struct h3_wc_entry *e = &h3_wc.e[h3_wc.order[p]];
        if (e->valid && e->lo < hi && lo < e->hi) {
            e->valid = false;
            any = true;
            atomic_fetch_add_explicit(&h3_wc.drops, 1, memory_order_relaxed);
        }
    }
    if (any)
        h3_wc_bounds();
    pthread_mutex_unlock(&h3_wc.lock);
    const char *expected = NULL;
    if (any && atomic_compare_exchange_strong(&h3_wc.first_drop_fn, &expected, h3_hooks[by->fn].name))
        atomic_store(&h3_wc.first_drop_kernel, by->kernel != NULL ? by->kernel->pretty : NULL);
}

/* With graphs: records e's event on the stream it was just filled on. Locked. */
static void h3_wc_filled_on(struct h3_wc_entry *e, const void *stream)
{
    e->fill_stream = stream;
    e->fill_done = false;
    if (!h3_hot.graphs_on)
        return;
    __typeof__(&cuEventRecord) record = H3_LIB_FN(CUDA, cuEventRecord);
    e->recorded = e->event != NULL && record != NULL && record(e->event, (CUstream)(uintptr_t)stream) == CUDA_SUCCESS;
}

/* Makes work on `stream` wait for e's last fill when that was on another
 * stream and is not known to be complete.  A fill seen complete once is
 * remembered until the next: a graph that reads 288 copies would otherwise
 * make 288 stream waits at every launch.  The event is asked only while no
 * capture is open (another thread's capture in global mode forbids the
 * question and would be invalidated by it).  Locked. */
static unsigned h3_wc_issue_recipe(struct h3_wc_entry *e, const void *stream);

static void h3_wc_ready(struct h3_wc_entry *e, const void *stream)
{
    if (!h3_hot.graphs_on || e->fill_stream == stream || e->fill_done)
        return;
    __typeof__(&cuEventQuery) query = H3_LIB_FN(CUDA, cuEventQuery);
    if (e->recorded && query != NULL && h3_unsafe_begin()) {
        bool done = query(e->event) == CUDA_SUCCESS;
        h3_unsafe_end();
        if (done) {
            e->fill_done = true;
            return;
        }
    }
    __typeof__(&cuStreamWaitEvent) wait = H3_LIB_FN(CUDA, cuStreamWaitEvent);
    __typeof__(&cuStreamSynchronize) sync = H3_LIB_FN(CUDA, cuStreamSynchronize);
    if (e->recorded && wait != NULL && wait((CUstream)(uintptr_t)stream, e->event, 0) == CUDA_SUCCESS)
        return;
    /* No event to wait for: synchronise, unless a capture is open somewhere
     * (that would invalidate it); then fill the copy again on this stream. */
    bool synced = false;
    if (sync != NULL && h3_unsafe_begin()) {
        synced = sync((CUstream)(uintptr_t)e->fill_stream) == CUDA_SUCCESS;
        h3_unsafe_end();
    }
    if (synced)
        e->fill_done = true;
    else if (e->recipe.handle != NULL)
        h3_wc_issue_recipe(e, stream);
}

/* Issues e's recipe on `stream`: the cast with its output moved to e's copy. Locked. */
static unsigned h3_wc_issue_recipe(struct h3_wc_entry *e, const void *stream)
{
    const struct h3_wc_recipe *r = &e->recipe;
    unsigned char n[4], functor[1], data[16];
    memcpy(n, r->n, sizeof(n));
    memcpy(functor, r->functor, sizeof(functor));
    memcpy(data, r->data, sizeof(data));
    uint64_t out = (uint64_t)e->dst;
    memcpy(data, &out, 8);
    void *argv[3] = {n, functor, data};
    struct h3_deferred d = {
        .fn = r->fn, .handle = r->handle, .grid = r->grid, .block = r->block, .shmem = r->shmem, .stream = stream, .argv = argv};
    unsigned failed = h3_issue(&d, 1);
    h3_wc_filled_on(e, stream);
    return failed;
}

/* Fills e's copy with cast `d` (as PyTorch made it, output moved). Locked. */
static void h3_wc_fill(struct h3_wc_entry *e, const struct h3_deferred *d)
{
    struct h3_wc_recipe *r = &e->recipe;
    *r = (struct h3_wc_recipe){d->fn, d->handle, d->grid, d->block, d->shmem, {0}, {0}, {0}};
    memcpy(r->n, d->argv[0], sizeof(r->n));
    memcpy(r->functor, d->argv[1], sizeof(r->functor));
    memcpy(r->data, d->argv[2], sizeof(r->data));
    h3_wc_issue_recipe(e, d->stream);
}

/* The valid entry for (src, n) on any stream, preferring `stream`'s. Locked. */
static struct h3_wc_entry *h3_wc_valid_any(uint64_t src, uint64_t n, const void *stream)
{
    struct h3_wc_entry *found = NULL;
    for (unsigned p = h3_wc_lower_bound(src); p < h3_wc.n && h3_wc.e[h3_wc.order[p]].src == src; p++) {
        struct h3_wc_entry *e = &h3_wc.e[h3_wc.order[p]];
        if (e->n == n && e->valid && (found == NULL || e->stream == stream))
            found = e;
    }
    return found;
}

/* Where what a call may write goes: dropped now, or recorded for a graph. */
struct h3_wc_sink {
    void (*range)(void *arg, uint64_t lo, uint64_t hi); /* [lo, hi); [0, UINT64_MAX): anywhere */
    void (*word)(void *arg, uint64_t v);                 /* a parameter word that may point where it writes */
    void *arg;
    bool in_sources; /* only the words inside the valid sources' bounds are wanted */
};

/* The parameter buffer of a driver launch's `extra` list (pairs of a key
 * and a value up to CU_LAUNCH_PARAM_END); false for a list the shim does
 * not know every key of. */
static bool h3_wc_extra_buffer(void **extra, const void **buf, size_t *size)
{
    for (unsigned i = 0; i < 64; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_END)
            return *buf != NULL;
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            *buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL)
            *size = *(const size_t *)extra[i + 1];
        else
            return false;
    }
    return false;
}

/* The memory a freeing call (H3_P_FREES) gives back: an unmap's range, a
 * free's whole allocation (asked before the free is forwarded); false when
 * the allocation cannot be told. */
static bool h3_wc_freed_span(const struct h3_call *c, uint64_t *lo, uint64_t *hi)
{
    uint64_t dst = (uint64_t)(uintptr_t)c->u.sync.dst, bytes = c->u.sync.bytes;
    if (c->fn != H3_FN_cuMemUnmap) {
        __typeof__(&cuMemGetAddressRange_v2) range = H3_LIB_FN(CUDA, cuMemGetAddressRange_v2);
        CUdeviceptr base;
        size_t size;
        if (range == NULL || range(&base, &size, (CUdeviceptr)dst) != CUDA_SUCCESS)
            return false;
        dst = base, bytes = size;
    }
    *lo = dst, *hi = bytes > UINT64_MAX - dst ? UINT64_MAX : dst + bytes;
    return true;
}

/* Tells `k` what call `c` may write (its launch parameters' words, its
 * library outputs, its copy or memset destination, a free's memory). */
/* Inlined, so that at each call the sink is a constant (no indirect call per
 * launch parameter word on the hot path). */
static inline __attribute__((always_inline)) void h3_wc_each_write(const struct h3_call *c,
                                                                   const struct h3_wc_sink *k)
{
    if (c->kind == H3_KIND_SYNC) {
        if (h3_hooks[c->fn].props & H3_P_WRITES_ANYWHERE) { /* graphs, host functions, batches, cooperative */
            k->range(k->arg, 0, UINT64_MAX);
        } else if (c->u.sync.dst != NULL) {
            uint64_t lo = 0, hi = UINT64_MAX, dst = (uint64_t)(uintptr_t)c->u.sync.dst, bytes = c->u.sync.bytes;
            if (h3_hooks[c->fn].props & H3_P_FREES)
                (void)h3_wc_freed_span(c, &lo, &hi); /* unknown: anywhere */
            else
                lo = dst, hi = bytes > UINT64_MAX - dst ? UINT64_MAX : dst + bytes;
            k->range(k->arg, lo, hi);
        }
        return;
    }
    if (c->kind == H3_KIND_LAUNCH) {
        if (c->match_sig != NULL && h3_wc_is_cast(c->match_sig, c->match_call))
            return; /* a cast the op replaces: it reads the source */
        if (c->kernel != NULL && c->kernel->writes_unseen) {
            k->range(k->arg, 0, UINT64_MAX); /* an NCCL collective may write any weight */
            return;
        }
        /* The bounds are read once: a launch's parameters can be kilobytes
         * (the cat's input list), and another thread's change to them during
         * the scan is as if the launch had come before it. */
        uint64_t lo = 0, span = 0;
        if (k->in_sources) {
            lo = atomic_load_explicit(&h3_hot.wc_lo, memory_order_relaxed);
            span = atomic_load_explicit(&h3_hot.wc_hi, memory_order_relaxed) - lo;
        }
        if (c->args == NULL && c->extra != NULL) {
            /* The driver's packed form: one buffer of all the parameters. */
            const void *buf = NULL;
            size_t size = 0;
            bool known = h3_wc_extra_buffer(c->extra, &buf, &size);
            for (size_t off = 0; known && buf != NULL && off + 8 <= size; off += 8) {
                uint64_t v;
                memcpy(&v, (const char *)buf + off, 8);
                if (!k->in_sources || v - lo < span)
                    k->word(k->arg, v);
            }
            if (!known)
                k->range(k->arg, 0, UINT64_MAX); /* a form the shim cannot read: it may write anywhere */
            return;
        }
        uint32_t nparams = c->kernel != NULL && c->kernel->writes_first_param_only && c->nparams > 1 ? 1 : c->nparams;
        if (c->kernel == NULL || !c->kernel->params_known || (c->args == NULL && c->nparams > 0)) {
            k->range(k->arg, 0, UINT64_MAX); /* parameters it cannot read: it may write anywhere */
            return;
        }
        for (uint32_t p = 0; c->args != NULL && c->param_sizes != NULL && p < nparams; p++)
            for (uint32_t off = 0; off + 8 <= c->param_sizes[p]; off += 8) {
                uint64_t v;
                memcpy(&v, (const char *)c->args[p] + off, 8);
                if (!k->in_sources || v - lo < span)
                    k->word(k->arg, v);
            }
        return;
    }
    if (c->fn == H3_FN_cublasLtMatmul) {
        k->word(k->arg, (uint64_t)(uintptr_t)c->u.lt.C);
        k->word(k->arg, (uint64_t)(uintptr_t)c->u.lt.D);
    } else if (c->fn == H3_FN_cudnnBackendExecute) {
        for (int64_t i = 0; i < c->u.dnn.count && i < H3_CUDNN_MAX_TENSORS; i++)
            k->word(k->arg, (uint64_t)(uintptr_t)c->u.dnn.ptrs[i]);
    } else if (c->kind == H3_KIND_LIBCALL) {
        k->word(k->arg, (uint64_t)(uintptr_t)c->u.gemm.C);
    }
}

/* The dropping sink: its argument is the call that may write. */
static void h3_wc_drop_range(void *arg, uint64_t lo, uint64_t hi)
{
    h3_wc_drop(lo, hi, arg);
}

static inline __attribute__((always_inline)) void h3_wc_drop_word(void *arg, uint64_t v)
{
    if (v >= atomic_load_explicit(&h3_hot.wc_lo, memory_order_relaxed) &&
        v < atomic_load_explicit(&h3_hot.wc_hi, memory_order_relaxed) && h3_wc_page_may_hold(v))
        h3_wc_drop(v, v + 1, arg);
}

static void h3_wc_record_range(void *arg, uint64_t lo, uint64_t hi)
{
    struct h3_grec *r = arg;
    if (lo == 0 && hi == UINT64_MAX)
        r->all = true;
    else
        h3_grec_range(r, lo, hi);
}

static void h3_wc_record_word(void *arg, uint64_t v)
{
    h3_grec_word(arg, v);
}

/* At a launch of executable graph `exec` on `stream`, before it is
 * forwarded: refills the copies it reads that were dropped (on `stream`,
 * so before the graph), makes it wait for the ones last filled elsewhere,
 * then drops what it may write.  A graph not captured under the shim may
 * write anything: every copy is dropped.  A graph launched inside a
 * capture adds its record to that capture's. */
/* Before a graph that may read copy `e` is launched on `stream`: filled
 * again there if it was dropped (valid only once that was issued), else
 * waited for where it was last filled elsewhere.  A copy never filled, or
 * whose source is gone, has nothing to be filled from.  Returns whether it
 * was filled.  Locked. */
static bool h3_wc_ready_for_graph(struct h3_wc_entry *e, const void *stream)
{
    if (e->recipe.handle == NULL || e->orphan || e->dst == 0)
        return false;
    if (e->valid) {
        h3_wc_ready(e, stream);
        return false;
    }
    if (h3_wc_issue_recipe(e, stream) != 0)
        return false;
    e->valid = true;
    atomic_fetch_add_explicit(&h3_wc.graph_refills, 1, memory_order_relaxed);
    return true;
}

static void h3_wcache_graph_launch(struct h3_call *c)
{
    const void *exec = c->u.sync.graph_exec, *stream = c->stream;
    struct h3_grec *outer = h3_graphs_capture_lock(stream);
    if (outer != NULL) {
        h3_graphs_unlock();
        h3_graphs_merge_exec(stream, exec);
        c->op_how = "weight_cache_graph_in_capture";
        return;
    }
    struct h3_grec *rec = h3_graphs_exec_lock(exec);
    if (rec == NULL) {
        /* It may be one whose record was lost (updated, past the table's
         * room, forgotten at a context's end) and read copies: those a
         * capture read are made valid first, on its stream, as for a known
         * graph that reads every copy.  Then it may write anything. */
        __typeof__(&cuCtxGetCurrent) current = H3_LIB_FN(CUDA, cuCtxGetCurrent);
        CUcontext ctx = NULL;
        if (current == NULL || current(&ctx) != CUDA_SUCCESS)
            ctx = NULL;
        pthread_mutex_lock(&h3_wc.lock);
        bool filled = false;
        for (unsigned i = 0; i < h3_wc.n; i++) /* a graph reads the copies of its own context only */
            if (h3_wc.e[i].graphed && (ctx == NULL || h3_wc.e[i].ctx == NULL || h3_wc.e[i].ctx == ctx))
                filled |= h3_wc_ready_for_graph(&h3_wc.e[i], stream);
        if (filled)
            h3_wc_bounds();
        pthread_mutex_unlock(&h3_wc.lock);
        h3_wc_drop(0, UINT64_MAX, c);
        c->op_how = "weight_cache_graph_unknown"; /* every copy dropped */
        return;
    }
    pthread_mutex_lock(&h3_wc.lock);
    bool every = rec->nreads == UINT32_MAX, filled = false;
    for (uint32_t i = 0; i < (every ? h3_wc.n : rec->nreads); i++)
        filled |= h3_wc_ready_for_graph(&h3_wc.e[every ? i : rec->reads[i]], stream);
    if (filled)
        h3_wc_bounds();
    pthread_mutex_unlock(&h3_wc.lock);
    atomic_fetch_add_explicit(&h3_wc.graph_launches, 1, memory_order_relaxed);
    c->op_how = filled ? "weight_cache_graph_refilled" : "weight_cache_graph_known";
    if (rec->all) {
        h3_wc_drop(0, UINT64_MAX, c);
    } else {
        for (uint32_t i = 0; i < rec->nwords; i++)
            h3_wc_drop_word(c, rec->words[i]);
        for (uint32_t i = 0; i < rec->nranges; i++)
            h3_wc_drop(rec->ranges[i][0], rec->ranges[i][1], c);
    }
    h3_graphs_unlock();
}

void h3_wcache_observe(struct h3_call *c)
{
    if (h3_hot.graphs_on) {
        enum h3_capture_edge edge = h3_capture_edge_of(c->fn);
        if (edge != H3_CAPTURE_NONE) {
            if (edge == H3_CAPTURE_END)
                h3_graphs_end(c->stream);
            else
                h3_graphs_begin(c->stream, edge == H3_CAPTURE_BEGIN_INTO_GRAPH);
            return;
        }
        if (h3_is_graph_launch(c->fn)) {
            h3_wcache_graph_launch(c);
            return;
        }
        /* A captured call: what it may write is dropped again at every launch of its graph. */
        struct h3_grec *rec = h3_graphs_capture_lock(c->stream);
        if (rec != NULL) {
            struct h3_wc_sink k = {h3_wc_record_range, h3_wc_record_word, rec, false};
            h3_wc_each_write(c, &k);
            h3_graphs_unlock();
        }
    }
    if (c->kind == H3_KIND_SYNC && (h3_hooks[c->fn].props & H3_P_FREES) && c->u.sync.dst != NULL &&
        atomic_load_explicit(&h3_hot.wc_held, memory_order_relaxed) != 0) {
        /* CUDA memory given back (empty_cache's frees, or its unmaps with
         * expandable segments): the copies of sources in it are never used
         * again, and the program's free is a point where giving their memory
         * back costs nothing more. */
        uint64_t lo, hi;
        if (h3_wc_freed_span(c, &lo, &hi)) {
            h3_wcache_source_freed(lo, hi);
            /* An exported allocation freed: whatever is made there next is not shared. */
            pthread_mutex_lock(&h3_wc.lock);
            for (unsigned i = 0; i < h3_wc.nshared;)
                if (h3_wc.shared[i].lo >= lo && h3_wc.shared[i].hi <= hi)
                    h3_wc.shared[i] = h3_wc.shared[--h3_wc.nshared];
                else
                    i++;
            pthread_mutex_unlock(&h3_wc.lock);
        }
        /* PyTorch's allocator frees its cache when an allocation fails:
         * with the device low on memory, every copy no graph may read goes
         * too (made again at need), so that the program's retry finds it. */
        __typeof__(&cuMemGetInfo_v2) info = H3_LIB_FN(CUDA, cuMemGetInfo_v2);
        size_t free_b = 0, total_b = 0;
        bool low = false;
        if (info != NULL && h3_unsafe_begin()) {
            low = info(&free_b, &total_b) == CUDA_SUCCESS &&
                  (double)free_b < (double)total_b * (double)h3_config.weight_cache_min_free_pct / 100.0;
            h3_unsafe_end();
        }
        /* The copies graph records read, asked before weight_cache's lock is
         * taken (the graphs' lock comes first): a capture begun after it
         * reads only valid copies, never an orphan. */
        uint64_t named[H3_WC_MAX / 64] = {0};
        h3_graphs_reads(named, H3_WC_MAX);
        pthread_mutex_lock(&h3_wc.lock);
        for (unsigned i = 0; low && i < h3_wc.n; i++) {
            struct h3_wc_entry *e = &h3_wc.e[i];
            if (e->orphan || e->graphed || e->dst == 0)
                continue;
            e->orphan = true, e->valid = false;
            h3_wc.orphans++;
            atomic_fetch_add_explicit(&h3_wc.pressed, 1, memory_order_relaxed);
        }
        if (low)
            h3_wc_bounds();
        h3_wc_reap(true, named);
        pthread_mutex_unlock(&h3_wc.lock);
        h3_wc_give_back();
    }
    if (atomic_load_explicit(&h3_hot.wc_live, memory_order_relaxed) == 0)
        return;
    const struct h3_wc_sink dropper = {h3_wc_drop_range, h3_wc_drop_word, c, true};
    h3_wc_each_write(c, &dropper);
}

static struct h3_wc_entry *h3_wc_entry_new(uint64_t src, uint64_t n, const void *stream, const char **why);

/* The entry for (src, n, stream), added if new; NULL with *why when it cannot be. Locked. */
static struct h3_wc_entry *h3_wc_entry(uint64_t src, uint64_t n, const void *stream, const char **why)
{
    for (unsigned p = h3_wc_lower_bound(src); p < h3_wc.n && h3_wc.e[h3_wc.order[p]].src == src; p++) {
        struct h3_wc_entry *e = &h3_wc.e[h3_wc.order[p]];
        if (e->n == n && e->stream == stream && !e->orphan)
            return e;
    }
    uint64_t t0 = h3_hot.stats ? h3_stats_clock() : 0;
    struct h3_wc_entry *e = h3_wc_entry_new(src, n, stream, why);
    if (t0 != 0 && e != NULL)
        h3_stats_one_off(H3_ONE_OFF_COPY, h3_stats_clock() - t0);
    return e;
}

/* A new entry for (src, n, stream) with its copy's memory; NULL with *why when it cannot be. Locked. */
static struct h3_wc_entry *h3_wc_entry_make(uint64_t src, uint64_t n, const void *stream, const char **why);

static struct h3_wc_entry *h3_wc_entry_new(uint64_t src, uint64_t n, const void *stream, const char **why)
{
    /* Allocating, asking for free memory or making an event while a capture
     * is open in global mode, on any thread, would invalidate it. */
    if (!h3_unsafe_begin()) {
        *why = "capture_open_elsewhere";
        return NULL;
    }
    struct h3_wc_entry *e = h3_wc_entry_make(src, n, stream, why);
    h3_unsafe_end();
    return e;
}

static struct h3_wc_entry *h3_wc_entry_make(uint64_t src, uint64_t n, const void *stream, const char **why)
{
    size_t bytes = 2 * n;
    for (unsigned i = 0; i < h3_wc.nshared || h3_wc.shared_unknown; i++)
        if (h3_wc.shared_unknown || h3_spans_overlap(h3_wc.shared[i], (struct h3_span){src, src + 4 * n})) {
            *why = "shared_memory"; /* other processes may write it: their writes are not seen */
            return NULL;
        }
    if (h3_wc.n == H3_WC_MAX || h3_wc.bytes + bytes > (size_t)h3_config.weight_cache_max_mb << 20) {
        H3_WARN_ONCE(H3_SUB_ENGINE, "weight_cache: the copies reached H3SHIM_WEIGHT_CACHE_MAX_MB=%ld; the GEMMs "
                                    "of weights beyond it cast them on every call, as without the shim",
                     h3_config.weight_cache_max_mb);
        *why = "cache_full";
        return NULL;
    }
    __typeof__(&cuMemGetInfo_v2) info = H3_LIB_FN(CUDA, cuMemGetInfo_v2);
    size_t free_b = 0, total_b = 0;
    if (info == NULL || info(&free_b, &total_b) != CUDA_SUCCESS || free_b < bytes ||
        (double)(free_b - bytes) < (double)total_b * (double)h3_config.weight_cache_min_free_pct / 100.0) {
        H3_WARN_ONCE(H3_SUB_ENGINE, "weight_cache: a copy would leave less than H3SHIM_WEIGHT_CACHE_MIN_FREE_PCT=%ld%% "
                                    "of GPU memory free; GEMMs whose weights have no copy cast them on every call, "
                                    "as without the shim", h3_config.weight_cache_min_free_pct);
        *why = "low_memory";
        return NULL;
    }
    __typeof__(&cuMemAlloc_v2) alloc = H3_LIB_FN(CUDA, cuMemAlloc_v2);
    CUdeviceptr dst = 0;
    if (alloc == NULL || alloc(&dst, bytes) != CUDA_SUCCESS) {
        *why = "no_memory";
        return NULL;
    }
    CUevent event = NULL;
    __typeof__(&cuEventCreate) create = H3_LIB_FN(CUDA, cuEventCreate);
    if (h3_hot.graphs_on && (create == NULL || create(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS))
        event = NULL; /* a read on another stream then synchronises, or fills again */
    /* What a pointer may write the source through: its allocator block (all
     * of a flat buffer whose views the parameters are), else its CUDA
     * allocation, else the source alone. */
    uint64_t lo = src, hi = src + 4 * n;
    __typeof__(&cuMemGetAddressRange_v2) range = H3_LIB_FN(CUDA, cuMemGetAddressRange_v2);
    CUdeviceptr base;
    size_t size;
    if (!h3_released_block(src, &lo, &hi) && range != NULL &&
        range(&base, &size, (CUdeviceptr)src) == CUDA_SUCCESS && base <= src && src + 4 * n <= base + size)
        lo = base, hi = base + size;
    lo = lo < src ? lo : src, hi = hi > src + 4 * n ? hi : src + 4 * n;
    CUcontext ctx = NULL;
    CUdevice device = -1;
    __typeof__(&cuCtxGetCurrent) current = H3_LIB_FN(CUDA, cuCtxGetCurrent);
    __typeof__(&cuCtxGetDevice) get_device = H3_LIB_FN(CUDA, cuCtxGetDevice);
    if (current == NULL || current(&ctx) != CUDA_SUCCESS)
        ctx = NULL;
    if (get_device == NULL || get_device(&device) != CUDA_SUCCESS)
        device = -1;
    h3_wc.bytes += bytes;
    h3_wc.peak = h3_wc.bytes > h3_wc.peak ? h3_wc.bytes : h3_wc.peak;
    h3_wc.e[h3_wc.n] = (struct h3_wc_entry){
        .src = src, .n = n, .lo = lo, .hi = hi, .stream = stream, .dst = dst, .event = event, .ctx = ctx,
        .device = (int)device};
    h3_wc_pages_add(lo, hi - lo);
    unsigned p = h3_wc.n;
    while (p > 0 && h3_wc.e[h3_wc.order[p - 1]].src > src) {
        h3_wc.order[p] = h3_wc.order[p - 1];
        p--;
    }
    h3_wc.order[p] = h3_wc.n;
    h3_wc.maxlen = hi - lo > h3_wc.maxlen ? hi - lo : h3_wc.maxlen;
    h3_wc.n++;
    h3_wc_bounds(); /* held now, even if it is never filled (its partner's copy refused) */
    return &h3_wc.e[h3_wc.n - 1];
}

/* ---- running ---- */

/* What a range's check and run both read from its calls and its anchor. */
struct h3_wc_call {
    uint32_t w, b; /* the casts, relative to the range's first call */
    const void *stream;
    uint64_t src_w, src_b;
    int32_t n_w, n_b;
};

static const char *h3_wc_read(const struct h3_op_range *r, const struct h3_deferred *calls,
                              const struct h3_call *anchor, struct h3_wc_call *x)
{
    if (anchor == NULL || anchor->fn != H3_FN_cublasLtMatmul || anchor->u.lt.desc == NULL)
        return "no_anchor";
    x->w = (uint32_t)r->arg[0] - r->first, x->b = (uint32_t)r->arg[1] - r->first;
    x->stream = calls[x->w].stream;
    if (anchor->stream != x->stream || calls[x->b].stream != x->stream)
        return "streams_differ";
    memcpy(&x->src_w, (const char *)calls[x->w].argv[2] + 8, 8);
    memcpy(&x->src_b, (const char *)calls[x->b].argv[2] + 8, 8);
    memcpy(&x->n_w, calls[x->w].argv[0], 4);
    memcpy(&x->n_b, calls[x->b].argv[0], 4);
    /* The GEMM reads the casts' outputs, as planned: the matcher may have
     * let a reference to a freed buffer go (match.c). */
    uint64_t out_w, out_b;
    memcpy(&out_w, calls[x->w].argv[2], 8);
    memcpy(&out_b, calls[x->b].argv[2], 8);
    if ((uint64_t)(uintptr_t)anchor->u.lt.A != out_w || (uint64_t)(uintptr_t)anchor->u.lt.bias != out_b)
        return "layout";
    return x->n_w <= 0 || x->n_b <= 0 ? "empty" : NULL;
}

int h3_wcache_graphs_switch(void)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    return h3_config_switch("H3SHIM_WEIGHT_CACHE_GRAPHS", h3_config.weight_cache_graphs, "on where validated",
                            &warned);
}

/* Whether a GEMM captured on the current device may read the copies:
 * asked for, or on by default on an SM where that is validated. */
static bool h3_wcache_graphs_here(void)
{
    if (h3_wcache_graphs_switch() == 1)
        return true;
    int sm = h3_kernels_sm();
    for (unsigned i = 0; i < H3_ARRAY_LEN(h3_wc_graphs_validated); i++)
        if (h3_wc_graphs_validated[i] == sm)
            return true;
    return false;
}

/* Points the GEMM's bias attribute at `bias`, and tells lt_shadow.c (the
 * shim's own set goes to the real function, past the wrappers). */
static cublasStatus_t h3_wc_set_bias(cublasLtMatmulDesc_t desc, const void *bias)
{
    __typeof__(&cublasLtMatmulDescSetAttribute) set = H3_LIB_FN(CUBLASLT, cublasLtMatmulDescSetAttribute);
    cublasStatus_t r = set != NULL ? set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias))
                                   : CUBLAS_STATUS_NOT_INITIALIZED;
    if (r == CUBLAS_STATUS_SUCCESS)
        h3_lt_note_desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    return r;
}

/* Everything that can make the op fall back, before the group is issued:
 * the copies exist (made now if new) and the GEMM's bias attribute points
 * at the bias copy (it takes effect at the call; restored by run). */
static const char *h3_wc_check(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    struct h3_wc_call x;
    const char *why = h3_wc_read(r, calls, anchor, &x);
    if (why != NULL)
        return why;
    /* The op reads the casts' sources after the rest of the group was
     * issued (a fill, the owed writes): a source freed since its cast was
     * made may be memory a later launch of the group wrote.  Every free
     * that could have let one have it is noted by now. */
    const struct h3_free_mark now = h3_released_mark();
    if (h3_released_maybe_between(calls[x.w].made, now, (struct h3_span){x.src_w, x.src_w + 4 * (uint64_t)x.n_w}) ||
        h3_released_maybe_between(calls[x.b].made, now, (struct h3_span){x.src_b, x.src_b + 4 * (uint64_t)x.n_b}))
        return "freed_between";
    __typeof__(&cublasLtMatmulDescSetAttribute) set = H3_LIB_FN(CUBLASLT, cublasLtMatmulDescSetAttribute);
    if (h3_stream_capturing(x.stream)) {
        /* With graphs: copies made before the capture, read by the graph. */
        if (!h3_wcache_graphs_here())
            return "capturing";
        struct h3_grec *rec = h3_graphs_capture_lock(x.stream);
        if (rec == NULL)
            return "capturing";
        pthread_mutex_lock(&h3_wc.lock);
        struct h3_wc_entry *ew = h3_wc_valid_any(x.src_w, (uint64_t)x.n_w, x.stream);
        struct h3_wc_entry *eb = ew != NULL ? h3_wc_valid_any(x.src_b, (uint64_t)x.n_b, x.stream) : NULL;
        const void *bias = eb != NULL ? (const void *)(uintptr_t)eb->dst : NULL;
        pthread_mutex_unlock(&h3_wc.lock);
        h3_graphs_unlock();
        if (eb == NULL)
            return "capturing"; /* no copy made yet: the capture keeps the casts */
        if (h3_real_fn(H3_FN_cublasLtMatmul) == NULL || set == NULL)
            return "no_cublaslt";
        if (h3_wc_set_bias(anchor->u.lt.desc, bias) != CUBLAS_STATUS_SUCCESS)
            return "bias_attr";
        return NULL;
    }
    if (h3_real_fn(H3_FN_cublasLtMatmul) == NULL || set == NULL)
        return "no_cublaslt";
    pthread_mutex_lock(&h3_wc.lock);
    struct h3_wc_entry *ew = h3_wc_entry(x.src_w, (uint64_t)x.n_w, x.stream, &why);
    struct h3_wc_entry *eb = ew != NULL ? h3_wc_entry(x.src_b, (uint64_t)x.n_b, x.stream, &why) : NULL;
    const void *bias = eb != NULL ? (const void *)(uintptr_t)eb->dst : NULL;
    pthread_mutex_unlock(&h3_wc.lock);
    if (eb == NULL)
        return why;
    if (h3_wc_set_bias(anchor->u.lt.desc, bias) != CUBLAS_STATUS_SUCCESS)
        return "bias_attr";
    return NULL;
}

/* After the rest of the group: refills the copies that are not valid (with
 * the casts as PyTorch made them, output moved), makes the GEMM on the
 * copies, and restores the bias attribute.  Entries are never removed, so
 * the ones the check made are there. */
static const char *h3_wc_run(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    struct h3_wc_call x;
    const char *why = h3_wc_read(r, calls, anchor, &x);
    if (why != NULL)
        return why;
    __typeof__(&cublasLtMatmul) matmul = h3_real_fn(H3_FN_cublasLtMatmul);
    __typeof__(&cublasLtMatmulDescSetAttribute) set = H3_LIB_FN(CUBLASLT, cublasLtMatmulDescSetAttribute);
    struct h3_grec *rec = h3_graphs_capture_lock(x.stream); /* NULL at once unless a capture is on */
    /* Held while refilling: a thread that finds a copy valid finds its
     * refill already issued (threads may share a stream). */
    pthread_mutex_lock(&h3_wc.lock);
    struct h3_wc_entry *ew, *eb;
    bool captured = rec != NULL; /* the graph launch orders the copies (h3_wcache_graph_launch) */
    if (captured) { /* captured: only copies that are valid now, never a fill */
        ew = h3_wc_valid_any(x.src_w, (uint64_t)x.n_w, x.stream);
        eb = ew != NULL ? h3_wc_valid_any(x.src_b, (uint64_t)x.n_b, x.stream) : NULL;
        why = eb == NULL ? "capturing" : NULL;
        if (eb != NULL) {
            h3_grec_read(rec, (uint32_t)(ew - h3_wc.e));
            h3_grec_read(rec, (uint32_t)(eb - h3_wc.e));
            ew->graphed = eb->graphed = true;
        }
        h3_graphs_unlock();
    } else {
        ew = h3_wc_entry(x.src_w, (uint64_t)x.n_w, x.stream, &why);
        eb = ew != NULL ? h3_wc_entry(x.src_b, (uint64_t)x.n_b, x.stream, &why) : NULL;
    }
    if (eb == NULL || matmul == NULL || set == NULL) {
        pthread_mutex_unlock(&h3_wc.lock);
        /* Unreachable once the check passed; if it were not, the GEMM the
         * caller then makes must read its own bias again. */
        const void *orig = anchor->u.lt.bias;
        if (set != NULL)
            h3_wc_set_bias(anchor->u.lt.desc, orig);
        return why != NULL ? why : "no_cublaslt";
    }
    struct h3_wc_entry *e[2] = {ew, eb};
    const uint32_t cast[2] = {x.w, x.b};
    bool filled = false;
    for (int i = 0; i < 2; i++) {
        if (!e[i]->valid)
            h3_wc_fill(e[i], &calls[cast[i]]), filled = true;
        else if (!captured)
            h3_wc_ready(e[i], x.stream);
        atomic_fetch_add_explicit(e[i]->valid ? &h3_wc.hits : &h3_wc.fills, 1, memory_order_relaxed);
        e[i]->valid = true;
    }
    if (filled)
        h3_wc_bounds();
    CUdeviceptr dst_w = ew->dst, dst_b = eb->dst;
    atomic_fetch_add_explicit(&h3_wc.running, 1, memory_order_relaxed); /* (ordered by the lock) */
    pthread_mutex_unlock(&h3_wc.lock);
    const struct h3_lt_desc *lt = &anchor->u.lt;
    const void *orig = lt->bias;
    /* The bias the check set may be another entry's (another thread made
     * one valid meanwhile): the GEMM reads the one used and recorded here. */
    if (h3_wc_set_bias(lt->desc, (const void *)(uintptr_t)dst_b) != CUBLAS_STATUS_SUCCESS) {
        atomic_fetch_sub_explicit(&h3_wc.running, 1, memory_order_release);
        h3_wc_set_bias(lt->desc, orig);
        return "bias_attr";
    }
    uint64_t t0 = h3_forward_begin();
    cublasStatus_t st = matmul(lt->handle, lt->desc, lt->alpha, (const void *)(uintptr_t)dst_w, lt->Adesc, lt->B,
                               lt->Bdesc, lt->beta, lt->C, lt->Cdesc, (void *)(uintptr_t)lt->D, lt->Ddesc, lt->algo,
                               (void *)(uintptr_t)lt->workspace_ptr, lt->workspace, (cudaStream_t)(uintptr_t)x.stream);
    h3_forward_end(t0);
    /* Issued: a cuMemFree of the copies from now on waits for the GEMM. */
    atomic_fetch_sub_explicit(&h3_wc.running, 1, memory_order_release);
    h3_wc_set_bias(lt->desc, orig);
    anchor->result = st;
    /* PyTorch's own FP16 tensors are still written, as it made them, unless
     * the allocator frees them first: autocast's cast cache keeps a leaf's
     * cast for the whole autocast region (parameters that require grad, in
     * no_grad as in grad mode), and autograd saves it for the backward. */
    for (int i = 0; i < 2; i++) {
        uint64_t out;
        memcpy(&out, calls[cast[i]].argv[2], 8);
        int32_t n = i == 0 ? x.n_w : x.n_b;
        h3_op_owe(&calls[cast[i]], (struct h3_span){out, out + 2 * (uint64_t)n});
    }
    return NULL;
}

/* Rebuilds the source order, the longest range and the page bits from the
 * entries left.  A page bit a remaining entry needs is set in the old and
 * the new words alike, so a reader without the lock never misses one. Locked. */
static void h3_wc_rebuild(void)
{
    uint64_t pages[H3_ARRAY_LEN(h3_wc.pages)] = {0};
    h3_wc.maxlen = 0;
    for (unsigned i = 0; i < h3_wc.n; i++) {
        const struct h3_wc_entry *e = &h3_wc.e[i];
        h3_wc.maxlen = e->hi - e->lo > h3_wc.maxlen ? e->hi - e->lo : h3_wc.maxlen;
        uint64_t first = e->lo >> H3_WC_PAGE_SHIFT, last = (e->hi - 1) >> H3_WC_PAGE_SHIFT;
        for (uint64_t q = first; q <= last && q - first < 64 * H3_ARRAY_LEN(h3_wc.pages); q++) {
            unsigned b = h3_wc_page_bit(q << H3_WC_PAGE_SHIFT);
            pages[b / 64] |= 1ull << (b % 64);
        }
        unsigned p = i;
        while (p > 0 && h3_wc.e[h3_wc.order[p - 1]].src > e->src) {
            h3_wc.order[p] = h3_wc.order[p - 1];
            p--;
        }
        h3_wc.order[p] = i;
    }
    for (unsigned i = 0; i < H3_ARRAY_LEN(h3_wc.pages); i++)
        atomic_store_explicit(&h3_wc.pages[i], pages[i], memory_order_relaxed);
    h3_wc_bounds();
}

/* Takes entry e's memory and event out (its context alive): given back by
 * h3_wc_give_back, or at once when `now` (a context ending) or when no more
 * can wait.  False, leaving e as it is, when none can wait and a GEMM may
 * still read a copy given up (a later reap takes it).  Locked. */
static bool h3_wc_free_copy_as(struct h3_wc_entry *e, bool now)
{
    __typeof__(&cuMemFree_v2) release = H3_LIB_FN(CUDA, cuMemFree_v2);
    __typeof__(&cuEventDestroy_v2) destroy = H3_LIB_FN(CUDA, cuEventDestroy_v2);
    bool full = h3_wc_ndoomed == H3_WC_MAX;
    if (!now && full && atomic_load_explicit(&h3_wc.running, memory_order_acquire) != 0)
        return false;
    size_t bytes = e->dst != 0 ? 2 * e->n : 0;
    if (now || full) {
        if (e->dst != 0 && release != NULL)
            release(e->dst);
        if (e->event != NULL && destroy != NULL)
            destroy(e->event);
        if (e->orphan && e->dst != 0)
            atomic_fetch_add_explicit(&h3_wc.reaped, 1, memory_order_relaxed);
        h3_wc.bytes -= bytes;
    } else if (e->dst != 0 || e->event != NULL) {
        h3_wc_doomed[h3_wc_ndoomed++] = (__typeof__(h3_wc_doomed[0])){e->dst, e->event, e->ctx, e->device, bytes};
    }
    e->dst = 0, e->event = NULL, e->valid = false, e->recipe.handle = NULL;
    return true;
}

static void h3_wc_free_copy(struct h3_wc_entry *e)
{
    (void)h3_wc_free_copy_as(e, true);
}

/* Waits, with no lock held, for the GEMMs that took copies' addresses to be
 * issued: an enqueue's time, so at most 10 ms (a thread descheduled in
 * between); false if some still run then. */
static bool h3_wc_runs_done(void)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load_explicit(&h3_wc.running, memory_order_acquire) != 0) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 10000000L)
            return false;
        sched_yield();
    }
    return true;
}

/* Gives back what h3_wc_free_copy_as took out, a few at a time, with the
 * lock let go.  A run that took a copy's address before the copy was given
 * up may not have issued its GEMM yet: it is waited for, and while one is
 * still between the two the memory waits for a later free. */
static void h3_wc_give_back(void)
{
    __typeof__(&cuMemFree_v2) release = H3_LIB_FN(CUDA, cuMemFree_v2);
    __typeof__(&cuEventDestroy_v2) destroy = H3_LIB_FN(CUDA, cuEventDestroy_v2);
    for (;;) {
        __typeof__(h3_wc_doomed[0]) some[32];
        unsigned n = 0;
        pthread_mutex_lock(&h3_wc.lock);
        bool none = h3_wc_ndoomed == 0;
        pthread_mutex_unlock(&h3_wc.lock);
        if (none || !h3_wc_runs_done() || !h3_unsafe_begin())
            return; /* nothing, a GEMM still to issue, or a capture began: given back at a later free */
        pthread_mutex_lock(&h3_wc.lock);
        if (atomic_load_explicit(&h3_wc.running, memory_order_acquire) == 0) /* (runs begin only under the lock) */
            while (n < H3_ARRAY_LEN(some) && h3_wc_ndoomed > 0) {
                some[n++] = h3_wc_doomed[--h3_wc_ndoomed];
                h3_wc.bytes -= some[n - 1].bytes;
            }
        if (n > 0)
            h3_wc_bounds();
        pthread_mutex_unlock(&h3_wc.lock);
        for (unsigned i = 0; i < n; i++) {
            if (some[i].dst != 0 && release != NULL)
                release(some[i].dst);
            if (some[i].dst != 0)
                atomic_fetch_add_explicit(&h3_wc.reaped, 1, memory_order_relaxed);
            if (some[i].event != NULL && destroy != NULL)
                destroy(some[i].event);
        }
        h3_unsafe_end();
        if (n == 0)
            return;
    }
}

/* Removes the entries marked in `gone` (indices into e[]). Locked; only
 * while no graph record can name an entry by its index. */
static void h3_wc_compact(const bool *gone)
{
    unsigned k = 0;
    for (unsigned i = 0; i < h3_wc.n; i++)
        if (!gone[i])
            h3_wc.e[k++] = h3_wc.e[i];
    h3_wc.n = k;
    h3_wc_rebuild();
}

/*
 * Frees the memory of the copies whose source was freed, at a point where
 * that is safe: no capture open anywhere (cuMemFree would invalidate it).
 * A copy a capture read keeps its slot while any graph record lives (they
 * name entries by index), and its memory too: a graph launched after its
 * weights were freed reads garbage with or without the shim, but never an
 * address the shim gave back.  Locked.
 */
static void h3_wc_reap(bool compact, const uint64_t *named)
{
    if (!h3_captures_none())
        return;
    bool records = !compact || h3_graphs_live(); /* slots stay while an index may be held */
    static bool gone[H3_WC_MAX]; /* (under the lock) */
    unsigned left = 0, dead = 0;
    for (unsigned i = 0; i < h3_wc.n; i++) {
        struct h3_wc_entry *e = &h3_wc.e[i];
        gone[i] = false;
        /* A copy a live graph record reads keeps its memory (the graph
         * embeds its address); one only read by graphs gone is freed. */
        bool read = e->graphed && records && (named == NULL || ((named[i / 64] >> (i % 64)) & 1));
        if (!e->orphan || read) {
            left += e->orphan && e->dst != 0;
            continue;
        }
        if (!h3_wc_free_copy_as(e, false)) {
            left++;
            continue;
        }
        gone[i] = !records;
        dead++;
    }
    h3_wc.orphans = left;
    if (!records && dead > 0)
        h3_wc_compact(gone);
    else if (dead > 0)
        h3_wc_bounds();
}

void h3_wcache_source_freed(uint64_t lo, uint64_t hi)
{
    if (atomic_load_explicit(&h3_hot.wc_held, memory_order_relaxed) == 0)
        return;
    /* Most frees are of activations outside every source's bounds: told
     * without the lock (the bounds are written under it; a source being
     * copied cannot be freed at the same time by a working program). */
    if (!(lo < __atomic_load_n(&h3_wc.all_hi, __ATOMIC_RELAXED) &&
          __atomic_load_n(&h3_wc.all_lo, __ATOMIC_RELAXED) < hi))
        return;
    pthread_mutex_lock(&h3_wc.lock);
    bool any = false;
    /* Every source overlapping [lo, hi) starts in (lo - maxlen, hi): a binary search finds the first. */
    for (unsigned p = h3_wc_lower_bound(lo > h3_wc.maxlen ? lo - h3_wc.maxlen : 0);
         p < h3_wc.n && h3_wc.e[h3_wc.order[p]].src < hi; p++) {
        struct h3_wc_entry *e = &h3_wc.e[h3_wc.order[p]];
        if (e->orphan || e->dst == 0 || !(e->src < hi && lo < e->src + 4 * e->n))
            continue;
        e->orphan = true, e->valid = false, any = true;
        h3_wc.orphans++;
        atomic_fetch_add_explicit(&h3_wc.orphaned, 1, memory_order_relaxed);
    }
    if (any)
        h3_wc_bounds();
    pthread_mutex_unlock(&h3_wc.lock);
}

void h3_wcache_shared(uint64_t ptr)
{
    __typeof__(&cuMemGetAddressRange_v2) range = H3_LIB_FN(CUDA, cuMemGetAddressRange_v2);
    CUdeviceptr base;
    size_t size;
    bool known = ptr != 0 && range != NULL && range(&base, &size, (CUdeviceptr)ptr) == CUDA_SUCCESS;
    pthread_mutex_lock(&h3_wc.lock);
    if (known && h3_wc.nshared < H3_ARRAY_LEN(h3_wc.shared))
        h3_wc.shared[h3_wc.nshared++] = (struct h3_span){base, base + size};
    else
        h3_wc.shared_unknown = true;
    pthread_mutex_unlock(&h3_wc.lock);
    H3_INFO(H3_SUB_ENGINE, "weight_cache: memory at %#llx can be written by other processes (IPC): no copy of "
                           "a source there", (unsigned long long)ptr);
    h3_wcache_source_freed(known ? base : 0, known ? base + size : UINT64_MAX);
}

void h3_wcache_shared_at(const void *pptr)
{
    uint64_t p = 0;
    if (pptr != NULL)
        memcpy(&p, pptr, sizeof(p));
    h3_wcache_shared(p);
}

unsigned h3_wcache_release(int device, const void *ctx, bool free_memory)
{
    pthread_mutex_lock(&h3_wc.lock);
    static bool gone[H3_WC_MAX]; /* (under the lock) */
    unsigned n = 0;
    for (unsigned i = 0; i < h3_wc.n; i++) {
        struct h3_wc_entry *e = &h3_wc.e[i];
        gone[i] = (device < 0 || e->device == device || e->device < 0) && (ctx == NULL || e->ctx == ctx);
        if (!gone[i])
            continue;
        n++;
        if (e->orphan && e->dst != 0)
            h3_wc.orphans--;
        if (free_memory) {
            h3_wc_free_copy(e);
        } else {
            h3_wc.bytes -= e->dst != 0 ? 2 * e->n : 0;
            e->dst = 0, e->event = NULL; /* gone with its context */
        }
    }
    /* Copies given up and not yet given back, of that context: freed now
     * while it lives, else gone with it (their addresses and events may be
     * the program's next). */
    __typeof__(&cuMemFree_v2) release = H3_LIB_FN(CUDA, cuMemFree_v2);
    __typeof__(&cuEventDestroy_v2) destroy = H3_LIB_FN(CUDA, cuEventDestroy_v2);
    for (unsigned i = 0; i < h3_wc_ndoomed;) {
        __typeof__(h3_wc_doomed[0]) *d = &h3_wc_doomed[i];
        if (!((device < 0 || d->device == device || d->device < 0) && (ctx == NULL || d->ctx == ctx))) {
            i++;
            continue;
        }
        if (free_memory && d->dst != 0 && release != NULL) {
            release(d->dst);
            atomic_fetch_add_explicit(&h3_wc.reaped, 1, memory_order_relaxed);
        }
        if (free_memory && d->event != NULL && destroy != NULL)
            destroy(d->event);
        h3_wc.bytes -= d->bytes;
        *d = h3_wc_doomed[--h3_wc_ndoomed];
    }
    h3_wc_compact(gone);
    pthread_mutex_unlock(&h3_wc.lock);
    return n;
}

void h3_wcache_after_fork_child(void)
{
    pthread_mutex_init(&h3_wc.lock, NULL);
    atomic_store(&h3_wc.running, 0); /* runs were the parent's other threads' */
}

void h3_wcache_print_stats(void (*line)(const char *fmt, ...))
{
    pthread_mutex_lock(&h3_wc.lock);
    unsigned n = h3_wc.n, doomed = h3_wc_ndoomed;
    size_t bytes = h3_wc.bytes, peak = h3_wc.peak;
    pthread_mutex_unlock(&h3_wc.lock);
    line("weight_cache: %u copies, %.1f MiB of GPU memory (peak %.1f MiB); %lu hits, %lu fills, %lu drops", n,
         (double)bytes / (1 << 20), (double)peak / (1 << 20), atomic_load(&h3_wc.hits), atomic_load(&h3_wc.fills),
         atomic_load(&h3_wc.drops));
    if (doomed > 0)
        line("weight_cache: %u copies given up whose memory (in the MiB above) waits for a later free", doomed);
    unsigned long orphaned = atomic_load(&h3_wc.orphaned), reaped = atomic_load(&h3_wc.reaped);
    unsigned long pressed = atomic_load(&h3_wc.pressed);
    if (orphaned + pressed != 0)
        line("weight_cache: %lu copies whose source the program freed and %lu given up with the device low on "
             "memory; %lu of them given back", orphaned, pressed, reaped);
    const char *fn = atomic_load(&h3_wc.first_drop_fn), *kernel = atomic_load(&h3_wc.first_drop_kernel);
    if (fn != NULL)
        line("weight_cache: the first drop was at %s%s%.160s", fn, kernel != NULL ? " of " : "",
             kernel != NULL ? kernel : "");
    if (h3_hot.graphs_on)
        line("weight_cache graphs: %lu launches of graphs captured under the shim, %lu copies refilled at them",
             atomic_load(&h3_wc.graph_launches), atomic_load(&h3_wc.graph_refills));
}

const struct h3_op h3_op_weight_cache = {
    .name = "weight_cache",
    .unverified = true,
    .plan = h3_wc_plan,
    .run = h3_wc_run,
    .check = h3_wc_check,
};
