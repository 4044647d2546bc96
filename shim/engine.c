/*
 * The engine: holds back the launches of an op's group until the group is
 * complete and then runs the op; issues them verbatim, in order, as soon as
 * anything else comes first.
 *
 * Owns: each thread's queue of deferred launches (parameter bytes copied),
 * the per-signature table of groups, the op table and the engine's counters.
 * Invariants:
 *   - A group is a maximal run of launches in a signature.  Library calls are
 *     never deferred: PyTorch destroys the cuBLASLt descriptors right after
 *     each call, so a held-back cublasLtMatmul would outlive them.
 *   - The queue holds calls of one thread, one stream and one instance of one
 *     signature, from its group's first call on.  Any observed call of the
 *     thread that is not that group's next call issues the queue first (a
 *     flush), before the call itself is forwarded; so does a call that
 *     submits work or synchronises (the SYNC entries of hooks.def), on any
 *     stream.
 *   - Every deferred call is issued exactly once: by its group's op, or by a
 *     flush, in the order it was made.
 * Never: defers what it cannot copy whole (extended launch configurations,
 * the driver's packed `extra` form), or issues one thread's calls from
 * another thread (see "Limits" in README.md).
 */
#include "h3shim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the groups of each signature ---- */

#define H3_ENGINE_MAX_SIGS 32

/* For every call of a signature, the first and last call of its group, or
 * -1 for a call in no group (library calls), and which range claims it (-1:
 * none), together: a call reads all three.  The ranges the enabled ops
 * replace. */
#define H3_ENGINE_MAX_RANGES 64
struct h3_group_call {
    int32_t first, last, claim_at;
};
struct h3_groups {
    const struct h3_sig *sig;
    unsigned index; /* the signature's index (the matcher's bits) */
    struct h3_group_call *at;
    struct h3_op_range ranges[H3_ENGINE_MAX_RANGES];
    unsigned nranges;
};
static struct h3_groups h3_groups[H3_ENGINE_MAX_SIGS];
/* Tables are added (learned signatures) but never removed or changed after
 * the count that publishes them. */
static atomic_uint h3_ngroups;

static const struct h3_groups *h3_groups_of(const struct h3_sig *sig)
{
    unsigned n = atomic_load_explicit(&h3_ngroups, memory_order_acquire);
    for (unsigned i = 0; i < n; i++)
        if (h3_groups[i].sig == sig)
            return &h3_groups[i];
    return NULL;
}

/* The anchored range that ends at the library call after group [.., last], or NULL. */
static const struct h3_op_range *h3_group_anchor(const struct h3_groups *g, uint32_t last)
{
    for (unsigned r = 0; r < g->nranges; r++)
        if (g->ranges[r].anchored && g->ranges[r].last == last + 1)
            return &g->ranges[r];
    return NULL;
}

/* The last call of range `r`'s group that it claims (its anchor aside). */
static uint32_t h3_range_last_claimed(const struct h3_op_range *r)
{
    return r->first + 63u - (uint32_t)__builtin_clzll(r->mask);
}

/* Whether range `r` of group [gfirst, glast] is well formed (a planner's
 * mask of 0 is every launch of [first, last] first) and its calls are free
 * of every range already planned. */
static bool h3_groups_claimable(const struct h3_groups *g, struct h3_op_range *r, uint32_t gfirst, uint32_t glast)
{
    uint32_t held_last = r->anchored ? r->last - 1 : r->last;
    if (r->first < gfirst || held_last > glast || held_last < r->first || held_last - r->first >= 64 ||
        (r->anchored && r->last != glast + 1))
        return false;
    if (r->mask == 0)
        r->mask = held_last - r->first == 63 ? ~0ull : (2ull << (held_last - r->first)) - 1;
    if ((r->mask & 1) == 0 || h3_range_last_claimed(r) > held_last) /* a mask within its range: loose calls lie outside */
        return false;
    for (uint32_t k = 0; k < 64; k++)
        if (((r->mask >> k) & 1) && g->at[r->first + k].claim_at >= 0)
            return false;
    return !r->anchored || h3_group_anchor(g, glast) == NULL;
}

static void h3_groups_claim(struct h3_groups *g, const struct h3_op_range *r)
{
    g->ranges[g->nranges] = *r;
    for (uint32_t k = 0; k < 64; k++)
        if ((r->mask >> k) & 1)
            g->at[r->first + k].claim_at = (int32_t)g->nranges;
    g->nranges++;
}

/* Asks every enabled op for the ranges it replaces in each group; fused ops
 * come first, and a call belongs to one range at most. */
static void h3_groups_plan(struct h3_groups *g)
{
    const struct h3_sig *sig = g->sig;
    for (uint32_t j = 0; j < sig->ncalls; j++)
        g->at[j].claim_at = -1;
    for (uint32_t j = 0; j < sig->ncalls; j++) {
        if (g->at[j].first != (int32_t)j)
            continue;
        uint32_t glast = (uint32_t)g->at[j].last;
        for (unsigned o = h3_ops_count(); o-- > 0;) {
            const struct h3_op *op = h3_ops_get(o);
            if (!h3_op_enabled(op))
                continue;
            struct h3_op_range found[8];
            unsigned n = op->plan(sig, j, glast, found, 8);
            for (unsigned k = 0; k < n && g->nranges < H3_ENGINE_MAX_RANGES; k++) {
                if (op->test_only) { /* the replay op takes each run of calls the fused ops left */
                    for (uint32_t c = found[k].first; c <= found[k].last && g->nranges < H3_ENGINE_MAX_RANGES;) {
                        uint32_t e = c;
                        while (e <= found[k].last && e - c < 64 && g->at[e].claim_at < 0)
                            e++;
                        struct h3_op_range run = {.op = op, .first = c, .last = e - 1};
                        if (e > c && h3_groups_claimable(g, &run, j, glast))
                            h3_groups_claim(g, &run);
                        c = e > c ? e : c + 1;
                    }
                    continue;
                }
                if (!h3_groups_claimable(g, &found[k], j, glast))
                    continue;
                h3_groups_claim(g, &found[k]);
                H3_INFO(H3_SUB_ENGINE, "signature %s/%s: op %s takes calls %u-%u (mask %#llx%s)", sig->model,
                        sig->group, op->name, found[k].first, found[k].last, (unsigned long long)found[k].mask,
                        found[k].anchored ? ", anchored" : "");
            }
        }
    }
}

/* The ranges (a bit per index in g->ranges) of the group starting at call
 * `first` whose op can run on this device; 0: the group is not held back.
 * An op that cannot run is counted as a fallback here, once per group. */
static uint64_t h3_group_allowed(const struct h3_groups *g, uint32_t first, bool count)
{
    uint64_t allowed = 0;
    for (uint32_t c = first; c <= (uint32_t)g->at[first].last; c++) {
        int32_t r = g->at[c].claim_at;
        if (r < 0 || g->ranges[r].first != c)
            continue;
        const struct h3_op *op = g->ranges[r].op;
        const char *why = h3_op_check(op);
        if (why != NULL && count)
            h3_op_fallback(op, why);
        else if (why == NULL)
            allowed |= 1ull << r;
    }
    return allowed;
}

/* How many ranges the ops planned in the group starting at call `first`. */
static unsigned h3_group_ranges(const struct h3_groups *g, uint32_t first)
{
    unsigned n = 0;
    for (uint32_t c = first; c <= (uint32_t)g->at[first].last; c++) {
        int32_t r = g->at[c].claim_at;
        n += r >= 0 && g->ranges[r].first == c;
    }
    return n;
}

/*
 * Marks the launches that no planned range spans (from its first call to its
 * last, its anchor included) as loose: the matcher compares their identity and
 * wiring, not their bytes.  Such a launch is issued as the application made
 * it, before or after each op's range as in the unfused stream, so what it
 * computes is its own business; the bytes that would break on it are often
 * what its kernel never reads (PyTorch's ReduceOp holds uninitialised stack
 * in its unused OffsetCalculator entries and padding, equal in three
 * instances and different in the fourth).  A launch inside a range's span
 * stays compared in full: an op replaces it, or runs across it.  Set before
 * the signature is published to the matcher (setup, or h3_engine_learned
 * before h3_signatures_add), never after.
 */
static void h3_groups_loosen(struct h3_groups *g)
{
    struct h3_sig *sig = (struct h3_sig *)g->sig; /* not yet matched: see above */
    for (uint32_t j = 0; j < sig->ncalls; j++) {
        bool spanned = false;
        for (unsigned r = 0; r < g->nranges && !spanned; r++)
            spanned = g->ranges[r].first <= j && j <= g->ranges[r].last;
        sig->calls[j].loose = sig->calls[j].kind == H3_SIG_LAUNCH && !spanned;
    }
}

/* Fills and plans group table `g` of signature `s` (index `index`); false without memory. */
static bool h3_groups_make(struct h3_groups *g, const struct h3_sig *sig, unsigned index)
{
    memset(g, 0, sizeof(*g));
    g->at = calloc(sig->ncalls, sizeof(*g->at));
    if (g->at == NULL)
        return false;
    g->sig = sig;
    g->index = index;
    int32_t start = -1;
    for (uint32_t j = 0; j <= sig->ncalls; j++) {
        bool launch = j < sig->ncalls && sig->calls[j].kind == H3_SIG_LAUNCH;
        if (launch && start < 0)
            start = (int32_t)j;
        if (!launch && start >= 0) {
            for (uint32_t k = (uint32_t)start; k < j; k++)
                g->at[k].first = start, g->at[k].last = (int32_t)j - 1;
            start = -1;
        }
        if (j < sig->ncalls && !launch)
            g->at[j].first = g->at[j].last = -1;
    }
    h3_groups_plan(g);
    h3_groups_loosen(g);
    return true;
}

static void h3_groups_build(void)
{
    unsigned n = h3_signatures_count(), made = 0;
    for (unsigned s = 0; s < n && made < H3_ENGINE_MAX_SIGS; s++)
        made += h3_groups_make(&h3_groups[made], h3_signatures_get(s), s);
    atomic_store_explicit(&h3_ngroups, made, memory_order_release);
}

/* Whether every op that marks the block (h3_op.marks_block) plans a range in
 * one of the signature's runs of launches, enabled or not; else *missing
 * names the first that does not. */
static bool h3_engine_is_block(const struct h3_sig *sig, const char **missing, bool *resembles)
{
    bool all = true;
    *resembles = false;
    for (unsigned o = 0; o < h3_ops_count(); o++) {
        const struct h3_op *op = h3_ops_get(o);
        bool planned = !op->marks_block;
        for (uint32_t j = 0; j < sig->ncalls && !planned; j++) {
            if (sig->calls[j].kind != H3_SIG_LAUNCH || (j > 0 && sig->calls[j - 1].kind == H3_SIG_LAUNCH))
                continue;
            uint32_t last = j;
            while (last + 1 < sig->ncalls && sig->calls[last + 1].kind == H3_SIG_LAUNCH)
                last++;
            struct h3_op_range found[8];
            planned = op->plan(sig, j, last, found, 8) > 0;
        }
        if (!planned && all) {
            *missing = op->name;
            all = false;
        }
        *resembles |= planned && op->marks_block;
    }
    return all;
}

unsigned h3_engine_learned(const struct h3_sig *sig, const char **why, bool *resembles)
{
    unsigned n = atomic_load_explicit(&h3_ngroups, memory_order_acquire);
    *why = "the engine's tables are full";
    *resembles = true;
    if (!h3_hot.engine_on || n == H3_ENGINE_MAX_SIGS)
        return 0;
    const char *missing = NULL;
    if (!h3_engine_is_block(sig, &missing, resembles)) {
        *why = missing; /* the op that marks the block and plans nothing in it */
        return 0;
    }
    *why = "no op enabled plans a range in it";
    if (!h3_groups_make(&h3_groups[n], sig, h3_signatures_count()))
        return 0;
    unsigned planned = 0;
    for (unsigned r = 0; r < h3_groups[n].nranges; r++)
        planned += !h3_groups[n].ranges[r].op->test_only;
    if (planned == 0) {
        free(h3_groups[n].at);
        return 0;
    }
    atomic_store_explicit(&h3_ngroups, n + 1, memory_order_release);
    return planned;
}

/* ---- counters ---- */

enum h3_flush_why {
    H3_FLUSH_FOREIGN,        /* a call that submits work or synchronises */
    H3_FLUSH_BROKEN,         /* a call that is not the group's next */
    H3_FLUSH_OTHER_STREAM,   /* a call of this thread on another stream */
    H3_FLUSH_NOT_DEFERRABLE, /* the group's next call cannot be copied */
    H3_FLUSH_LIMIT,          /* H3SHIM_ENGINE_MAX_CALLS or _BYTES reached */
    H3_FLUSH_OTHER_THREAD,   /* another thread's call on the same stream (or the legacy stream) */
    H3_FLUSH_THREAD_EXIT,
    H3_FLUSH_EXIT,
    H3_FLUSH_COUNT
};
static const char *const h3_flush_names[H3_FLUSH_COUNT] = {
    "foreign_call", "group_broken", "other_stream", "not_deferrable", "limit", "other_thread", "thread_exit", "exit",
};

static atomic_ulong h3_flushes[H3_FLUSH_COUNT], h3_flushed_calls[H3_FLUSH_COUNT];
static atomic_ulong h3_deferred_calls;
static atomic_ulong h3_owed_issued, h3_owed_left_out;

/* ---- the per-thread queue ---- */

struct h3_queue {
    /* Read by every observed call of its thread: the first cache line. */
    pthread_mutex_t lock; /* its owner holds it while it uses the queue; another thread to flush it */
    uint32_t n;
    uint32_t next;        /* the signature call expected next */
    const void *stream;
    atomic_bool holding;  /* n > 0, for the other threads' unlocked test ... */
    bool awaiting;        /* the group is complete; an op waits for the library call after it */
    bool complete;        /* the group is complete; its ops run at this thread's next call (ops.c: the freed-outputs rule) */
    /* Read once calls are held. */
    _Alignas(64) const struct h3_groups *groups;
    uint64_t allowed;     /* the group's ranges whose op can run here (h3_group_allowed) */
    struct h3_deferred *calls;
    unsigned char *arena;
    size_t used, max_bytes;
    uint32_t max_calls;   /* H3SHIM_ENGINE_MAX_CALLS and _BYTES */
    atomic_bool in_use;   /* a thread has it (else a finished thread gave it back) */
    CUcontext ctx;        /* current when the held calls began: another thread issues them in it */
    _Atomic(const void *) held_stream; /* the stream of what it holds, for the same test */
    /* Launches an anchored op replaced that write a buffer PyTorch may still
     * read (h3_op_owe): issued at the thread's next observed call unless
     * the allocator freed their output first.  Their parameters stay in the
     * arena until then. */
    struct h3_owed {
        struct h3_deferred d;
        struct h3_span out;
    } owed[H3_OWED_MAX];
    uint32_t nowed;
};


/*
 * Every thread's queue, so that a call on one thread issues what another
 * holds on the same stream first: held launches were made earlier, and the
 * stream's order (and PyTorch's allocator, which gives memory freed on a
 * stream to the next allocation on it, whichever thread makes it) relies on
 * that.  The legacy default stream orders with every blocking stream, so a
 * call on it, or a held group on it, counts as the same stream as any.
 * A thread looks at the other queues without a lock (they are never freed;
 * a finished thread's is given to the next) and locks one only to issue it.
 */
#define H3_MAX_QUEUES 256
static pthread_mutex_t h3_queues_lock = PTHREAD_MUTEX_INITIALIZER; /* taken to add or claim a queue */
static _Atomic(struct h3_queue *) h3_queues[H3_MAX_QUEUES];
static pthread_key_t h3_queue_key;
static pthread_once_t h3_queue_once = PTHREAD_ONCE_INIT;

/* Whether a launch entry point's calls can be held back and issued later. */
static bool h3_fn_deferrable(enum h3_fn fn)
{
    return (h3_hooks[fn].props & H3_P_DEFERRABLE) != 0;
}

/* `holding` is set while the queue holds launches or owes writes: the
 * other threads flush it. */
static void h3_queue_hold(struct h3_queue *q, bool on)
{
    if (atomic_load_explicit(&q->holding, memory_order_relaxed) == on)
        return;
    atomic_store_explicit(&q->holding, on, memory_order_relaxed);
    if (on)
        atomic_fetch_add_explicit(&h3_hot.holding, 1, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(&h3_hot.holding, 1, memory_order_relaxed);
}

static void h3_queue_clear(struct h3_queue *q)
{
    q->n = 0;
    if (q->nowed == 0) {
        q->used = 0;
        h3_queue_hold(q, false);
    }
    q->groups = NULL;
    q->awaiting = false;
    q->complete = false;
    q->allowed = 0;
}

/* Issues the writes `q` owes whose output no free noted since overlaps,
 * and forgets the rest (their buffer is gone: nothing can read it).  Locked. */
static bool h3_queue_ctx_enter(const struct h3_queue *q);
static void h3_queue_ctx_leave(bool pushed);

static void h3_owed_settle(struct h3_queue *q)
{
    bool pushed = h3_queue_ctx_enter(q);
    for (uint32_t i = 0; i < q->nowed; i++) {
        /* A free on another thread's settling is not known: written. */
        if (h3_released_since(q->owed[i].d.made, q->owed[i].out)) {
            atomic_fetch_add_explicit(&h3_owed_left_out, 1, memory_order_relaxed);
        } else {
            h3_issue(&q->owed[i].d, 1);
            atomic_fetch_add_explicit(&h3_owed_issued, 1, memory_order_relaxed);
        }
    }
    h3_queue_ctx_leave(pushed);
    q->nowed = 0;
    if (q->n == 0) {
        q->used = 0;
        h3_queue_hold(q, false);
    }
}

/* Write `d` into `out`, which an op that replaced it owes the program
 * (h3_op_owe): held in `q` until the thread's next observed call, or issued
 * now when `q` cannot hold it or nothing can tell whether `out` is freed. */
static bool h3_queue_owe(struct h3_queue *q, const struct h3_deferred *d, struct h3_span out)
{
    if (q == NULL || q->nowed == H3_OWED_MAX || d < q->calls || d >= q->calls + q->n || !h3_released_on()) {
        h3_issue(d, 1); /* nothing can tell whether the buffer is freed: written now */
        atomic_fetch_add_explicit(&h3_owed_issued, 1, memory_order_relaxed);
        return false;
    }
    q->owed[q->nowed++] = (struct h3_owed){*d, out};
    return true;
}

/* Makes the context `q`'s calls were made in current, if another is
 * (a thread that moved to another device, a flush by another thread);
 * returns whether it was pushed, for h3_queue_ctx_leave. */
static bool h3_queue_ctx_enter(const struct h3_queue *q)
{
    __typeof__(&cuCtxGetCurrent) get = H3_LIB_FN(CUDA, cuCtxGetCurrent);
    __typeof__(&cuCtxPushCurrent_v2) push = H3_LIB_FN(CUDA, cuCtxPushCurrent_v2);
    CUcontext cur = NULL;
    return q->ctx != NULL && get != NULL && push != NULL && get(&cur) == CUDA_SUCCESS && cur != q->ctx &&
           push(q->ctx) == CUDA_SUCCESS;
}

static void h3_queue_ctx_leave(bool pushed)
{
    __typeof__(&cuCtxPopCurrent_v2) pop = H3_LIB_FN(CUDA, cuCtxPopCurrent_v2);
    CUcontext popped;
    if (pushed && pop != NULL)
        pop(&popped);
}

/* Issues every queued call untouched, in order, and empties the queue. */
static void h3_queue_issue(struct h3_queue *q)
{
    bool pushed = h3_queue_ctx_enter(q);
    h3_issue(q->calls, q->n);
    h3_queue_ctx_leave(pushed);
    h3_queue_clear(q);
}

/* Issues the queue untouched, counting why; records it on `c` if given.
 * Owed writes go first: they were owed before anything now held was made. */
static void h3_flush(struct h3_queue *q, enum h3_flush_why why, struct h3_call *c)
{
    if (q != NULL && q->nowed > 0)
        h3_owed_settle(q);
    if (q == NULL || q->n == 0)
        return;
    atomic_fetch_add_explicit(&h3_flushes[why], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_flushed_calls[why], q->n, memory_order_relaxed);
    if (c != NULL) {
        c->flushed = q->n;
        c->flush_reason = h3_flush_names[why];
    }
    H3_TRACE(H3_SUB_ENGINE, "flush: %u deferred calls issued (%s)", q->n, h3_flush_names[why]);
    h3_queue_issue(q);
}

/* At thread exit: issues what the thread holds and gives its queue back
 * for the next thread (queues are never freed: another thread may be
 * looking at it, without a lock, to see whether it holds anything). */
static void h3_queue_free(void *arg)
{
    struct h3_queue *q = arg;
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->lock);
    h3_flush(q, H3_FLUSH_THREAD_EXIT, NULL);
    atomic_store_explicit(&q->in_use, false, memory_order_release);
    pthread_mutex_unlock(&q->lock);
    h3_thread.queue = NULL;
}

static void h3_flush_other_threads(const struct h3_queue *self, const struct h3_call *c);

/* Set at process exit: a context the runtime then releases takes the shim's
 * copies with it, and the process ends, so nothing is freed one by one. */
static atomic_bool h3_exiting;

/* At process exit: what any thread still holds is issued (as by a call on the legacy stream). */
static void h3_engine_at_exit(void)
{
    atomic_store(&h3_exiting, true);
    struct h3_queue *q = h3_thread.queue;
    if (q != NULL) {
        pthread_mutex_lock(&q->lock);
        h3_flush(q, H3_FLUSH_EXIT, NULL);
        pthread_mutex_unlock(&q->lock);
    }
    static struct h3_call legacy; /* zero: stream NULL, which orders with every stream */
    if (atomic_load_explicit(&h3_hot.holding, memory_order_acquire) > 0)
        h3_flush_other_threads(q, &legacy);
}

static void h3_queue_key_make(void)
{
    pthread_key_create(&h3_queue_key, h3_queue_free);
    /* Registered at the first deferral, after the CUDA runtime registered its
     * own teardown, so this runs first. */
    atexit(h3_engine_at_exit);
}

/* This thread's queue, made at its first deferral; NULL without memory. */
static struct h3_queue *h3_queue_get(void)
{
    if (h3_thread.queue != NULL)
        return h3_thread.queue;
    pthread_once(&h3_queue_once, h3_queue_key_make);
    struct h3_queue *q = NULL;
    pthread_mutex_lock(&h3_queues_lock);
    unsigned i = 0;
    for (; i < H3_MAX_QUEUES; i++) { /* a queue a finished thread gave back, or the first free slot */
        struct h3_queue *r = atomic_load_explicit(&h3_queues[i], memory_order_acquire);
        if (r == NULL)
            break;
        if (!atomic_load_explicit(&r->in_use, memory_order_acquire)) {
            q = r;
            break;
        }
    }
    if (q == NULL && i < H3_MAX_QUEUES) {
        q = aligned_alloc(_Alignof(struct h3_queue), sizeof(*q));
        if (q != NULL) {
            memset(q, 0, sizeof(*q));
            q->max_calls = (uint32_t)h3_config.engine_max_calls;
            q->max_bytes = (size_t)h3_config.engine_max_bytes;
            q->calls = calloc(q->max_calls, sizeof(*q->calls));
            q->arena = malloc(q->max_bytes);
            if (q->calls == NULL || q->arena == NULL) {
                free(q->calls);
                free(q->arena);
                free(q);
                q = NULL;
            } else {
                pthread_mutex_init(&q->lock, NULL);
                atomic_store_explicit(&h3_queues[i], q, memory_order_release);
            }
        }
    }
    if (q != NULL)
        atomic_store_explicit(&q->in_use, true, memory_order_release);
    pthread_mutex_unlock(&h3_queues_lock);
    if (q == NULL) /* no memory, or more threads at once than the registry has room for: nothing held */
        return NULL;
    pthread_setspecific(h3_queue_key, q);
    return h3_thread.queue = q;
}

static bool h3_stream_is_legacy(const void *s)
{
    return s == NULL || s == (const void *)cudaStreamLegacy;
}

/* Whether work on stream a is ordered with work on stream b. */
static bool h3_streams_order(const void *a, const void *b)
{
    return a == b || h3_stream_is_legacy(a) || h3_stream_is_legacy(b);
}

/* Issues, before call `c`, what other threads hold on its stream. */
/* Issues queue `q` of another thread, in the CUDA context its calls were made in. Locked. */
static void h3_flush_in_context(struct h3_queue *q)
{
    h3_flush(q, H3_FLUSH_OTHER_THREAD, NULL); /* (in the context its calls were made in) */
}

static void h3_flush_other_threads(const struct h3_queue *self, const struct h3_call *c)
{
    for (unsigned i = 0; i < H3_MAX_QUEUES; i++) {
        struct h3_queue *q = atomic_load_explicit(&h3_queues[i], memory_order_acquire);
        if (q == NULL)
            break; /* slots fill in order */
        if (q == self)
            continue;
        /* Unlocked first, so that threads on other streams never wait for each other. */
        if (!atomic_load_explicit(&q->holding, memory_order_relaxed) ||
            !h3_streams_order(atomic_load_explicit(&q->held_stream, memory_order_relaxed), c->stream))
            continue;
        pthread_mutex_lock(&q->lock);
        if ((q->n > 0 || q->nowed > 0) && h3_streams_order(q->stream, c->stream))
            h3_flush_in_context(q);
        pthread_mutex_unlock(&q->lock);
    }
}

#define H3_ALIGN16(n) (((n) + 15u) & ~(size_t)15u)

/* Copies launch `c` to the end of the queue; false when it does not fit. */
static bool h3_queue_push(struct h3_queue *q, const struct h3_call *c)
{
    if (q->n >= q->max_calls)
        return false;
    size_t need = H3_ALIGN16(c->nparams * sizeof(void *));
    for (uint32_t i = 0; i < c->nparams; i++)
        need += H3_ALIGN16((size_t)c->param_sizes[i]);
    if (need > q->max_bytes - q->used)
        return false;
    unsigned char *p = q->arena + q->used;
    void **argv = (void **)(void *)p;
    p += H3_ALIGN16(c->nparams * sizeof(void *));
    for (uint32_t i = 0; i < c->nparams; i++) {
        memcpy(p, c->args[i], c->param_sizes[i]);
        argv[i] = p;
        p += H3_ALIGN16((size_t)c->param_sizes[i]);
    }
    q->used += need;
    if (q->n == 0) {
        atomic_store_explicit(&q->held_stream, c->stream, memory_order_relaxed);
        h3_queue_hold(q, true);
        __typeof__(&cuCtxGetCurrent) get = H3_LIB_FN(CUDA, cuCtxGetCurrent);
        if (get == NULL || get(&q->ctx) != CUDA_SUCCESS)
            q->ctx = NULL;
    }
    q->calls[q->n++] = (struct h3_deferred){
        .made = h3_released_mark(), /* frees before it cannot be of its output */
        .fn = c->fn,
        .handle = c->handle,
        .grid = {c->grid[0], c->grid[1], c->grid[2]},
        .block = {c->block[0], c->block[1], c->block[2]},
        .shmem = c->shmem,
        .stream = c->stream,
        .argv = argv,
    };
    return true;
}

/* Notes in `c` (the call that completed the group) that range `r`'s op ran. */
static void h3_group_note_op(struct h3_call *c, const struct h3_op_range *r)
{
    if (c->op == NULL || r->op != &h3_op_replay)
        c->op = r->op->name;
    c->op_calls += h3_op_range_calls(r);
    const char *how = h3_op_take_note();
    if (how != NULL)
        c->op_how = how;
    uint32_t left;
    uint64_t bytes;
    h3_op_take_left_out(&left, &bytes);
    c->op_left_out += left;
    c->op_left_out_bytes += bytes;
}

/* Whether range `r` (index `ri`) may run on the group held in `q`: its op
 * can run on this device, all its calls are held, and an anchored range's
 * library call has come. */
static bool h3_group_range_ready(const struct h3_queue *q, const struct h3_op_range *r, int32_t ri,
                                 uint32_t first, const struct h3_call *anchor)
{
    return ((q->allowed >> ri) & 1) && h3_range_last_claimed(r) - first < q->n &&
           (!r->anchored || anchor != NULL);
}

/*
 * The group in the queue is complete (and, with `anchor`, the library call
 * after it has come).  The calls are issued in order, except those of a range
 * whose op replaces them: an unanchored range's op runs where its first call
 * was made; an anchored range's op is checked there and runs after the rest
 * of the group, in place of the anchor too.  An op that cannot run leaves its
 * calls to be issued where they were made.  Returns whether an op made the
 * anchor call (else the caller forwards it).
 */
static bool h3_group_run_here(struct h3_queue *q, struct h3_call *c, struct h3_call *anchor);

/* Runs the group in the context its calls were made in: its launches and
 * the fused ops' kernels (loaded per context) go there. */
static bool h3_group_run(struct h3_queue *q, struct h3_call *c, struct h3_call *anchor)
{
    bool pushed = h3_queue_ctx_enter(q);
    bool done = h3_group_run_here(q, c, anchor);
    h3_queue_ctx_leave(pushed);
    return done;
}

/* The writes the op just run owes the program (h3_op_owe), held in `q`. */
static void h3_group_take_owed(struct h3_queue *q)
{
    struct h3_op_owed owed[H3_OWED_MAX];
    for (unsigned k = 0, n = h3_op_take_owed(owed, H3_OWED_MAX); k < n; k++)
        h3_queue_owe(q, owed[k].d, owed[k].out);
}

/* For range `r`, which begins at held call `i`: the first held launch after
 * that is not its own, or NULL (h3_op_later; ops.c's freed-outputs rule). */
static const struct h3_deferred *h3_group_next_reader(const struct h3_queue *q, const struct h3_op_range *r,
                                                       uint32_t i)
{
    for (uint32_t k = i + 1; k < q->n; k++)
        if (k - i >= 64 || ((r->mask >> (k - i)) & 1) == 0)
            return &q->calls[k];
    return NULL;
}

static bool h3_group_run_here(struct h3_queue *q, struct h3_call *c, struct h3_call *anchor)
{
    const struct h3_groups *g = q->groups;
    uint32_t first = (uint32_t)g->at[q->next - 1].first; /* next: the call after the group's last launch */
    uint64_t replaced = 0; /* a bit per range index whose op replaces its calls */
    const struct h3_op_range *pending = NULL;
    uint32_t pending_at = 0;
    /* Ranges whose op ran into scratch (verify mode): their calls are issued
     * as made, and the comparison follows the last of them. */
    const struct h3_op_range *verifying[8];
    unsigned nverifying = 0;
    for (uint32_t i = 0; i < q->n; i++) {
        int32_t ri = g->at[first + i].claim_at;
        const struct h3_op_range *r = ri >= 0 ? &g->ranges[ri] : NULL;
        if (r != NULL && r->first == first + i && h3_group_range_ready(q, r, ri, first, anchor)) {
            h3_op_later(h3_group_next_reader(q, r, i)); /* an anchored check leaves nothing out */
            const char *why = r->anchored ? h3_op_check_range(r, &q->calls[i], anchor)
                                          : h3_op_run(r, g->sig, &q->calls[i], NULL);
            h3_op_later(NULL);
            if (!r->anchored)
                h3_group_take_owed(q);
            if (why == h3_verify_running) {
                c->op_verify = r->op->name;
                if (nverifying < H3_ARRAY_LEN(verifying))
                    verifying[nverifying++] = r;
            } else if (why != NULL) {
                c->op_fallback = why;
            } else {
                replaced |= 1ull << ri;
                if (r->anchored)
                    pending = r, pending_at = i;
                else
                    h3_group_note_op(c, r);
            }
        }
        if (r == NULL || !((replaced >> ri) & 1))
            h3_issue(&q->calls[i], 1);
        for (unsigned v = 0; v < nverifying; v++)
            if (verifying[v]->last == first + i)
                h3_verify_finish(verifying[v], &q->calls[i]);
    }
    if (nverifying > 0)
        h3_verify_abandon(); /* none is left: each range's last call was issued above */
    bool anchor_done = false;
    if (pending != NULL) {
        const char *why = h3_op_run(pending, g->sig, &q->calls[pending_at], anchor);
        h3_group_take_owed(q);
        if (why == NULL) {
            anchor_done = true;
            h3_group_note_op(c, pending);
        } else { /* a broken promise: its calls now, after the rest of the group */
            c->op_fallback = why;
            H3_WARN_ONCE(H3_SUB_ENGINE, "op %s failed (%s) after its check passed; its calls were issued "
                                        "after the rest of their group", pending->op->name, why);
            for (uint32_t k = 0; k < 64; k++)
                if ((pending->mask >> k) & 1)
                    h3_issue(&q->calls[pending_at + k], 1);
        }
    }
    /* "op" when an op ran; else the group was issued as it was made. */
    c->decision = c->op != NULL ? "op" : anchor != NULL ? "passthrough" : "deferred";
    h3_queue_clear(q);
    return anchor_done;
}

/* Whether launch `c`, matched as call `j` of a group, can be held back. */
static bool h3_call_deferrable(const struct h3_call *c)
{
    return h3_fn_deferrable(c->fn) && c->extra == NULL && c->param_sizes != NULL &&
           (c->args != NULL || c->nparams == 0);
}

static bool h3_engine_decide(struct h3_call *c, struct h3_queue *q);

/*
 * Signatures that share their first calls (the block as inference_mode
 * runs it, and as the serving pipeline's autocast cast cache leaves its
 * buffers) are matched side by side, and a held group belongs to the first
 * that matched its calls.  When that one breaks at call `j` and call `c`
 * continues another, `g`, at the same place, that one matched every held
 * call too (both advanced call by call from the same start): the queue is
 * its group now, with the ranges its ops planned.  Not while an anchored op
 * waits for its library call, unless `g` has one there too.  Locked.
 */
static bool h3_queue_adopt(struct h3_queue *q, const struct h3_call *c, const struct h3_groups *g, uint32_t j)
{
    if (g == NULL || c->match_sig == NULL || q->next != j || q->stream != c->stream || q->complete || j == 0)
        return false;
    int32_t first = q->groups->at[j - 1].first;
    if (first < 0 || g->at[j - 1].first != first || q->n != j - (uint32_t)first)
        return false;
    uint64_t allowed = h3_group_allowed(g, (uint32_t)first, false);
    if (q->awaiting) {
        const struct h3_op_range *anchored = h3_group_anchor(g, j - 1);
        if (anchored == NULL || !((allowed >> (anchored - g->ranges)) & 1))
            return false;
    }
    q->groups = g;
    q->allowed = allowed;
    return true;
}
static bool h3_engine_hold(struct h3_call *c, struct h3_queue *q, const struct h3_groups *g, uint32_t j, bool starts,
                           uint64_t allowed);

/*
 * Whether the engine's side lets call `c` be forwarded with no more look:
 * no launch is held (on any thread), no weight copy exists (nothing a call
 * writes can make one stale), no capture is open (nothing is recorded into
 * a graph) and this thread has no attempt in progress (a call it did not
 * expect would break it).  Capture edges, graph launches and calls that
 * may end a context always take the whole way.  For a launch or a library
 * call the matcher must also say that it can begin no attempt
 * (h3_match_idle; hooks.c asks).  Most of another model's calls end here,
 * and an H3 process's before its first block.
 */
bool h3_engine_quiet(const struct h3_call *c)
{
    if (h3_hot.trace_on || h3_thread.attempting ||
        atomic_load_explicit(&h3_hot.holding, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&h3_hot.wc_live, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&h3_hot.wc_held, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&h3_hot.captures_recording, memory_order_relaxed) != 0)
        return false;
    if (c->kind == H3_KIND_SYNC)
        return c->capture_edge == 0 && !h3_ends_context(c->fn) && !h3_is_graph_launch(c->fn);
    return true;
}

bool h3_engine_begin(struct h3_call *c)
{
    if (c->kind == H3_KIND_SYNC)
        h3_captures_before(c);
    c->decision = "passthrough";
    c->reason = "matching_off";
    if (!h3_hot.match_on) {
        if (h3_signatures_count() == 0)
            c->reason = "no_signatures";
        return false;
    }
    return true;
}

bool h3_engine_decide_call(struct h3_call *c)
{
    struct h3_queue *q = h3_thread.queue;
    /* Another thread holds calls: the count is more than this thread's.  (A
     * thread that holds calls on this stream made them before this call, so
     * they are counted, as far as the program ordered the two threads.) */
    unsigned mine = q != NULL && atomic_load_explicit(&q->holding, memory_order_relaxed) ? 1u : 0u;
    if (atomic_load_explicit(&h3_hot.holding, memory_order_acquire) > mine)
        h3_flush_other_threads(q, c);
    if (q == NULL)
        return h3_engine_decide(c, NULL);
    pthread_mutex_lock(&q->lock);
    bool held = h3_engine_decide(c, q);
    pthread_mutex_unlock(&q->lock);
    return held;
}

/* weight_cache's look at what call `c` may write, timed apart with stats. */
static void h3_engine_scan(struct h3_call *c)
{
    h3_wcache_observe(c);
    if (h3_hot.stats)
        h3_stats_part_end(c, H3_PART_SCAN);
}

/* Runs the complete group in `q` before call `c` (the thread's next call
 * after the group's last launch), noting its ops on `c`; c's own decision
 * comes after. */
static void h3_group_run_late(struct h3_queue *q, struct h3_call *c)
{
    const char *decision = c->decision;
    h3_group_run(q, c, NULL);
    c->decision = decision;
}

/* The engine's decision on call `c` of this thread, whose queue `q` (if any) is locked. */
static bool h3_engine_decide(struct h3_call *c, struct h3_queue *q)
{
    if (q != NULL && q->nowed > 0)
        h3_owed_settle(q);
    if (q != NULL && q->complete)
        h3_group_run_late(q, c);
    if (c->kind == H3_KIND_SYNC) {
        c->reason = "sync"; /* the matcher's attempts were interrupted (hooks.c) */
        h3_flush(q, H3_FLUSH_FOREIGN, c);
        if (h3_ends_context(c->fn))
            h3_engine_context_ending(c);
        else
            h3_engine_scan(c);
        return false;
    }
    if (!h3_hot.engine_on)
        return false;
    h3_engine_scan(c);
    /* The signature the queue holds a group of continued too: the call is
     * its (a signature sorted before it matching the same calls changes
     * nothing), at the place the queue expects. */
    if (q != NULL && q->n > 0 && q->groups->sig != c->match_sig && q->groups->index < 32 &&
        ((c->match_continues >> q->groups->index) & 1)) {
        c->match_sig = q->groups->sig;
        c->match_call = q->next;
    }
    const struct h3_groups *g = c->match_sig != NULL ? h3_groups_of(c->match_sig) : NULL;
    uint32_t j = c->match_call;
    bool grouped = g != NULL && g->at[j].first >= 0;
    if (q != NULL && q->n > 0) {
        bool continues = (q->groups->sig == c->match_sig || h3_queue_adopt(q, c, g, j)) && q->next == j &&
                         q->stream == c->stream;
        if (continues && q->awaiting) /* the library call an op waited for */
            return h3_group_run(q, c, c);
        if (!continues)
            h3_flush(q, c->stream != q->stream ? H3_FLUSH_OTHER_STREAM : H3_FLUSH_BROKEN, c);
        else if (!grouped || !h3_call_deferrable(c))
            h3_flush(q, H3_FLUSH_NOT_DEFERRABLE, c);
    }
    if (!grouped)
        return false;
    bool starts = (uint32_t)g->at[j].first == j;
    if (!starts && (q == NULL || q->n == 0))
        return false; /* the group's first calls were issued already */
    uint64_t allowed = starts ? h3_group_allowed(g, j, false) : 0;
    /* The call begins several signatures' attempts (variants of one block):
     * the group is held for the first whose ops can take it (else for the
     * one whose ops plan the most there, whose fallbacks are counted); if
     * that one breaks later, another that matched the same calls adopts it. */
    unsigned planned = starts ? h3_group_ranges(g, j) : 0;
    for (unsigned s = 0; starts && allowed == 0 && j == 0 && s < 32 && s < h3_signatures_count(); s++) {
        const struct h3_groups *other = (c->match_starts >> s) & 1 ? h3_groups_of(h3_signatures_get(s)) : NULL;
        if (other == NULL || other == g || other->at[0].first != 0)
            continue;
        uint64_t a = h3_group_allowed(other, 0, false);
        unsigned p = h3_group_ranges(other, 0);
        if (a != 0 || p > planned)
            g = other, allowed = a, planned = p, c->match_sig = other->sig;
    }
    if (starts)
        h3_group_allowed(g, j, true); /* its ops that cannot run here are counted, once */
    if ((starts && allowed == 0) || !h3_call_deferrable(c))
        return false;
    bool created = q == NULL;
    if (created && (q = h3_queue_get()) == NULL)
        return false;
    if (created)
        pthread_mutex_lock(&q->lock);
    bool held = h3_engine_hold(c, q, g, j, starts, allowed);
    if (created)
        pthread_mutex_unlock(&q->lock);
    return held;
}

/* Holds launch `c` (call j of a group of g) in queue `q`, and runs the group when it is complete. */
static bool h3_engine_hold(struct h3_call *c, struct h3_queue *q, const struct h3_groups *g, uint32_t j, bool starts,
                           uint64_t allowed)
{
    if (!h3_queue_push(q, c)) {
        h3_flush(q, H3_FLUSH_LIMIT, c);
        return false;
    }
    if (h3_hot.stats) /* only the stats read it: no shared cache line written per held launch otherwise */
        atomic_fetch_add_explicit(&h3_deferred_calls, 1, memory_order_relaxed);
    q->groups = g;
    q->stream = c->stream;
    q->next = j + 1;
    if (starts)
        q->allowed = allowed;
    c->decision = "deferred";
    if ((uint32_t)g->at[j].last == j) {
        const struct h3_op_range *anchored = h3_group_anchor(g, j);
        if (anchored != NULL && ((q->allowed >> (anchored - g->ranges)) & 1))
            q->awaiting = true; /* held until the library call comes, or anything else */
        else if (h3_released_on())
            q->complete = true; /* run at the next call: the group's last outputs are freed after it returns */
        else
            h3_group_run(q, c, NULL);
    }
    return true;
}

void h3_engine_setup(void)
{
    h3_ops_setup();
    bool any_op = false;
    for (unsigned o = 0; o < h3_ops_count(); o++)
        any_op |= h3_op_enabled(h3_ops_get(o));
    if (!h3_config.engine || !any_op)
        return;
    if (!h3_config.interpose_driver) {
        /* A launch or copy made through the driver (Triton's, say) would not
         * be seen, so it could run before launches held back earlier. */
        H3_WARN(H3_SUB_ENGINE, "H3SHIM_INTERPOSE_DRIVER=0: calls made through the driver would not be seen, so "
                               "nothing is held back and no fused op runs");
        return;
    }
    h3_groups_build();
    for (unsigned i = 0; i < h3_ngroups; i++)
        h3_hot.engine_on |= h3_groups[i].nranges > 0;
    h3_hot.engine_on |= h3_config.learn; /* the learner may add groups */
    h3_hot.graphs_on = h3_hot.engine_on && h3_wcache_graphs_switch() != 0 && h3_op_enabled(&h3_op_weight_cache);
}

/* "plan MODEL/GROUP: op NAME takes calls 0,3" (", and the library call N" when anchored). */
static void h3_engine_print_plan(void (*line)(const char *fmt, ...), const struct h3_groups *g,
                                 const struct h3_op_range *r)
{
    char calls[512];
    size_t n = 0;
    calls[0] = '\0';
    for (uint32_t k = 0; k < 64 && n + 16 < sizeof(calls); k++)
        if ((r->mask >> k) & 1)
            n += (size_t)snprintf(calls + n, sizeof(calls) - n, "%s%u", n ? "," : "", r->first + k);
    if (r->anchored)
        snprintf(calls + n, sizeof(calls) - n, " and the library call %u", r->last);
    line("plan %s/%s: op %s takes calls %s", g->sig->model, g->sig->group, r->op->name, calls);
}

void h3_engine_print_stats(void (*line)(const char *fmt, ...))
{
    if (!h3_hot.engine_on) {
        line("engine: off (%s)", !h3_config.engine ? "H3SHIM_ENGINE=0" : "no op enabled takes a group");
        return;
    }
    unsigned long issue_errors = h3_issue_errors();
    line("engine: %lu launches deferred; %lu issued with an error", atomic_load(&h3_deferred_calls), issue_errors);
    for (unsigned i = 0; i < h3_ngroups; i++)
        for (unsigned r = 0; r < h3_groups[i].nranges; r++)
            if (!h3_groups[i].ranges[r].op->test_only)
                h3_engine_print_plan(line, &h3_groups[i], &h3_groups[i].ranges[r]);
    line("skip_released: %s", h3_released_state());
    unsigned long owed = atomic_load(&h3_owed_issued), owed_out = atomic_load(&h3_owed_left_out);
    if (owed + owed_out != 0)
        line("owed writes: %lu made into the program's buffers after the op (still referenced: autocast's "
             "cast cache, autograd, a hook), %lu not made (their buffer freed first)", owed, owed_out);
    h3_ops_print_stats(line);
    h3_verify_print_stats(line);
    if (h3_op_enabled(&h3_op_weight_cache))
        h3_wcache_print_stats(line);
    for (int w = 0; w < H3_FLUSH_COUNT; w++) {
        unsigned long n = atomic_load(&h3_flushes[w]);
        if (n != 0)
            line("flush %-16s %lu groups issued untouched (%lu calls)", h3_flush_names[w], n,
                 atomic_load(&h3_flushed_calls[w]));
    }
}

bool h3_ends_context(enum h3_fn fn)
{
    return (h3_hooks[fn].props & H3_P_ENDS_CONTEXT) != 0;
}

/* Forgets what the shim made on `device` (-1: the current one's) or in
 * `ctx`: weight_cache's copies (freed first when the context is alive),
 * the fused ops' modules and the graph records. */
static void h3_engine_forget(int device, const void *ctx, bool alive, struct h3_call *c)
{
    if (device < 0 && ctx == NULL) {
        __typeof__(&cuCtxGetDevice) get = H3_LIB_FN(CUDA, cuCtxGetDevice);
        __typeof__(&cudaGetDevice) rt = H3_LIB_FN(CUDART, cudaGetDevice);
        CUdevice d;
        int r = -1;
        device = get != NULL && get(&d) == CUDA_SUCCESS ? (int)d : rt != NULL && rt(&r) == cudaSuccess ? r : -1;
        if (device < 0)
            return; /* which device ends is not known: nothing is freed that may be another's */
    }
    unsigned made = h3_wcache_release(device, ctx, alive);
    made += h3_verify_release(device, ctx, alive);
    if (made == 0 && ctx != NULL)
        return; /* a context the shim made nothing in */
    h3_kernels_forget();
    h3_graphs_reset();
    if (c != NULL)
        c->op_how = "context_ending";
}

/*
 * Before a call that may end a context is forwarded (its held launches
 * issued): everything the shim made in that context goes while it is still
 * alive.  weight_cache frees its copies (a GEMM after a reset must not read
 * memory of the old context: the allocator may give the new weights the old
 * addresses); the fused ops' modules and the graph records are forgotten.
 * All of it is made again at need.  A release of a primary context ends it
 * only when it was the last reference (video codecs, Numba, cuda-python
 * retain and release it in pairs while PyTorch holds it): that is asked
 * after the release (h3_engine_context_after).  cuCtxDestroy of a context
 * the shim made nothing in changes nothing.  Not at process exit (the
 * runtime may release its contexts then): the process takes it all.
 */
void h3_engine_context_ending(struct h3_call *c)
{
    if (atomic_load(&h3_exiting))
        return;
    switch (c->fn) {
    case H3_FN_cuDevicePrimaryCtxRelease_v2:
        c->context_edge = 1;
        return;
    case H3_FN_cuCtxDestroy_v2:
        if (c->u.sync.ctx != NULL)
            h3_engine_forget(-1, c->u.sync.ctx, true, c);
        return;
    case H3_FN_cuDevicePrimaryCtxReset_v2:
        h3_engine_forget(c->u.sync.dev, NULL, true, c);
        return;
    default: /* cudaDeviceReset: the current device's primary context */
        h3_engine_forget(-1, NULL, true, c);
        return;
    }
}

void h3_engine_context_after(const struct h3_call *c)
{
    if (c->result != 0 || atomic_load(&h3_exiting))
        return;
    __typeof__(&cuDevicePrimaryCtxGetState) state = H3_LIB_FN(CUDA, cuDevicePrimaryCtxGetState);
    unsigned flags = 0;
    int active = 0;
    if (state != NULL && state((CUdevice)c->u.sync.dev, &flags, &active) == CUDA_SUCCESS && active)
        return; /* others still hold it: nothing ended */
    /* Ended (or unknown: then forgetting is the safe side; nothing is freed
     * that may belong to a new context at the same addresses). */
    h3_engine_forget(c->u.sync.dev, NULL, false, NULL);
}

void h3_engine_reset(void)
{
    for (int w = 0; w < H3_FLUSH_COUNT; w++) {
        atomic_store(&h3_flushes[w], 0);
        atomic_store(&h3_flushed_calls[w], 0);
    }
    atomic_store(&h3_deferred_calls, 0);
    h3_issue_reset();
    atomic_store(&h3_owed_issued, 0);
    atomic_store(&h3_owed_left_out, 0);
    h3_ops_reset();
    h3_verify_reset();
    h3_graphs_reset();
}

void h3_engine_after_fork_child(void)
{
    /* The parent issues its own deferred calls; the child must not repeat
     * them, nor wait for locks held by threads it does not have. */
    pthread_mutex_init(&h3_queues_lock, NULL);
    for (unsigned i = 0; i < H3_MAX_QUEUES; i++) {
        struct h3_queue *q = atomic_load(&h3_queues[i]);
        if (q == NULL)
            break;
        pthread_mutex_init(&q->lock, NULL);
        q->nowed = 0; /* the parent makes its own owed writes */
        h3_queue_clear(q);
        atomic_store(&q->in_use, q == h3_thread.queue); /* the other threads are not in the child */
    }
    atomic_store(&h3_hot.holding, 0);
    h3_wcache_after_fork_child();
    h3_graphs_after_fork_child();
    h3_engine_reset();
}
