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

bool h3_engine_on;

/* ---- the groups of each signature ---- */

#define H3_ENGINE_MAX_SIGS 8

/* For every call of a signature, the first and last call of its group, or
 * -1 for a call in no group (library calls). */
struct h3_groups {
    const struct h3_sig *sig;
    int32_t *first, *last;
};
static struct h3_groups h3_groups[H3_ENGINE_MAX_SIGS];
static unsigned h3_ngroups;

static const struct h3_groups *h3_groups_of(const struct h3_sig *sig)
{
    for (unsigned i = 0; i < h3_ngroups; i++)
        if (h3_groups[i].sig == sig)
            return &h3_groups[i];
    return NULL;
}

static void h3_groups_build(void)
{
    unsigned n = h3_signatures_count();
    for (unsigned s = 0; s < n && h3_ngroups < H3_ENGINE_MAX_SIGS; s++) {
        const struct h3_sig *sig = h3_signatures_get(s);
        struct h3_groups *g = &h3_groups[h3_ngroups];
        g->first = calloc(sig->ncalls, sizeof(int32_t));
        g->last = calloc(sig->ncalls, sizeof(int32_t));
        if (g->first == NULL || g->last == NULL) {
            free(g->first);
            free(g->last);
            continue;
        }
        g->sig = sig;
        int32_t start = -1;
        for (uint32_t j = 0; j <= sig->ncalls; j++) {
            bool launch = j < sig->ncalls && sig->calls[j].kind == H3_SIG_LAUNCH;
            if (launch && start < 0)
                start = (int32_t)j;
            if (!launch && start >= 0) {
                for (uint32_t k = (uint32_t)start; k < j; k++)
                    g->first[k] = start, g->last[k] = (int32_t)j - 1;
                start = -1;
            }
            if (j < sig->ncalls && !launch)
                g->first[j] = g->last[j] = -1;
        }
        h3_ngroups++;
    }
}

/* ---- counters ---- */

enum h3_flush_why {
    H3_FLUSH_FOREIGN,        /* a call that submits work or synchronises */
    H3_FLUSH_BROKEN,         /* a call that is not the group's next */
    H3_FLUSH_OTHER_STREAM,   /* a call of this thread on another stream */
    H3_FLUSH_NOT_DEFERRABLE, /* the group's next call cannot be copied */
    H3_FLUSH_LIMIT,          /* H3SHIM_ENGINE_MAX_CALLS or _BYTES reached */
    H3_FLUSH_THREAD_EXIT,
    H3_FLUSH_EXIT,
    H3_FLUSH_COUNT
};
static const char *const h3_flush_names[H3_FLUSH_COUNT] = {
    "foreign_call", "group_broken", "other_stream", "not_deferrable", "limit", "thread_exit", "exit",
};

static atomic_ulong h3_flushes[H3_FLUSH_COUNT], h3_flushed_calls[H3_FLUSH_COUNT];
static atomic_ulong h3_deferred_calls, h3_issue_errors;

/* ---- the ops ---- */

struct h3_queue;

struct h3_op {
    const char *name;
    const bool *enabled; /* its H3SHIM_OP_* switch */
    atomic_ulong runs, calls;
};

/* The built-in test op: issues the group's calls exactly as they were made. */
static struct h3_op h3_op_replay = {"replay", &h3_config.op_replay, 0, 0};

/* The op that takes the group starting at call `first` of `sig`, or NULL. */
static struct h3_op *h3_op_for(const struct h3_sig *sig, uint32_t first)
{
    (void)sig, (void)first;
    return h3_config.op_replay ? &h3_op_replay : NULL;
}

/* ---- the per-thread queue ---- */

struct h3_deferred {
    enum h3_fn fn;
    const void *handle;
    dim3 grid, block;
    unsigned shmem;
    const void *stream;
    void **argv; /* in the queue's arena, pointing at the copied parameters */
};

struct h3_queue {
    const struct h3_sig *sig;
    const struct h3_groups *groups;
    const void *stream;
    uint32_t next; /* the signature call expected next */
    uint32_t n;
    size_t used;
    struct h3_op *op;
    struct h3_deferred *calls;
    unsigned char *arena;
};

static _Thread_local struct h3_queue *h3_queue;
static pthread_key_t h3_queue_key;
static pthread_once_t h3_queue_once = PTHREAD_ONCE_INIT;

/* Whether a launch entry point's calls can be held back and issued later. */
static bool h3_fn_deferrable(enum h3_fn fn)
{
    switch (fn) {
    case H3_FN___cudaLaunchKernel:
    case H3_FN___cudaLaunchKernel_ptsz:
    case H3_FN_cudaLaunchKernel:
    case H3_FN_cudaLaunchKernel_ptsz:
    case H3_FN_cuLaunchKernel:
    case H3_FN_cuLaunchKernel_ptsz:
        return true;
    default:
        return false;
    }
}

/* Issues one deferred call through the real entry point it was made to. */
static long long h3_issue(const struct h3_deferred *d)
{
    void *real = h3_real_fn(d->fn);
    if (real == NULL)
        return -1;
    void *handle = (void *)(uintptr_t)d->handle;
    void *stream = (void *)(uintptr_t)d->stream;
    switch (d->fn) {
    case H3_FN___cudaLaunchKernel:
    case H3_FN___cudaLaunchKernel_ptsz:
        return ((__typeof__(&__cudaLaunchKernel))real)((cudaKernel_t)handle, d->grid, d->block, d->argv,
                                                        d->shmem, (cudaStream_t)stream);
    case H3_FN_cudaLaunchKernel:
    case H3_FN_cudaLaunchKernel_ptsz:
        return ((__typeof__(&cudaLaunchKernel))real)(handle, d->grid, d->block, d->argv, d->shmem,
                                                      (cudaStream_t)stream);
    case H3_FN_cuLaunchKernel:
    case H3_FN_cuLaunchKernel_ptsz:
        return ((__typeof__(&cuLaunchKernel))real)((CUfunction)handle, d->grid.x, d->grid.y, d->grid.z,
                                                    d->block.x, d->block.y, d->block.z, d->shmem,
                                                    (CUstream)stream, d->argv, NULL);
    default:
        return -1;
    }
}

/* Issues every queued call in order and empties the queue. */
static void h3_queue_issue(struct h3_queue *q)
{
    h3_depth++; /* the runtime launches through the driver: not a new call */
    for (uint32_t i = 0; i < q->n; i++) {
        long long r = h3_issue(&q->calls[i]);
        if (r != 0) {
            atomic_fetch_add_explicit(&h3_issue_errors, 1, memory_order_relaxed);
            H3_WARN_ONCE(H3_SUB_ENGINE,
                         "a deferred %s returned %lld when issued; the error surfaces at the "
                         "caller's next error check, not at the launch",
                         h3_hooks[q->calls[i].fn].name, r);
        }
    }
    h3_depth--;
    q->n = 0;
    q->used = 0;
    q->sig = NULL;
    q->op = NULL;
}

/* Issues the queue untouched, counting why; records it on `c` if given. */
static void h3_flush(struct h3_queue *q, enum h3_flush_why why, struct h3_call *c)
{
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

static void h3_queue_free(void *arg)
{
    struct h3_queue *q = arg;
    if (q == NULL)
        return;
    h3_flush(q, H3_FLUSH_THREAD_EXIT, NULL);
    free(q->calls);
    free(q->arena);
    free(q);
    h3_queue = NULL;
}

static void h3_engine_at_exit(void)
{
    h3_flush(h3_queue, H3_FLUSH_EXIT, NULL);
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
    if (h3_queue != NULL)
        return h3_queue;
    pthread_once(&h3_queue_once, h3_queue_key_make);
    struct h3_queue *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->calls = calloc((size_t)h3_config.engine_max_calls, sizeof(*q->calls));
    q->arena = malloc((size_t)h3_config.engine_max_bytes);
    if (q->calls == NULL || q->arena == NULL) {
        free(q->calls);
        free(q->arena);
        free(q);
        return NULL;
    }
    pthread_setspecific(h3_queue_key, q);
    return h3_queue = q;
}

#define H3_ALIGN16(n) (((n) + 15u) & ~(size_t)15u)

/* Copies launch `c` to the end of the queue; false when it does not fit. */
static bool h3_queue_push(struct h3_queue *q, const struct h3_call *c)
{
    if (q->n >= (uint32_t)h3_config.engine_max_calls)
        return false;
    size_t need = H3_ALIGN16(c->nparams * sizeof(void *));
    for (uint32_t i = 0; i < c->nparams; i++)
        need += H3_ALIGN16((size_t)c->param_sizes[i]);
    if (need > (size_t)h3_config.engine_max_bytes - q->used)
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
    q->calls[q->n++] = (struct h3_deferred){
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

/* Runs the queue's op on its complete group. */
static void h3_op_run(struct h3_queue *q, struct h3_call *c)
{
    struct h3_op *op = q->op;
    atomic_fetch_add_explicit(&op->runs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&op->calls, q->n, memory_order_relaxed);
    c->decision = "op";
    c->op = op->name;
    c->op_calls = q->n;
    /* The replay op: the calls exactly as they were made. */
    h3_queue_issue(q);
}

/* Whether launch `c`, matched as call `j` of a group, can be held back. */
static bool h3_call_deferrable(const struct h3_call *c)
{
    return h3_fn_deferrable(c->fn) && c->extra == NULL && c->param_sizes != NULL &&
           (c->args != NULL || c->nparams == 0);
}

bool h3_engine_before(struct h3_call *c)
{
    c->decision = "passthrough";
    c->reason = h3_signatures_count() == 0 ? "no_signatures" : "matching_off";
    if (!h3_match_on)
        return false;
    struct h3_queue *q = h3_queue;
    if (h3_hooks[c->fn].kind == H3_KIND_SYNC) {
        c->reason = "sync";
        h3_match_interrupt();
        h3_flush(q, H3_FLUSH_FOREIGN, c);
        return false;
    }
    h3_match_call(c);
    if (!h3_engine_on)
        return false;
    const struct h3_groups *g = c->match_sig != NULL ? h3_groups_of(c->match_sig) : NULL;
    uint32_t j = c->match_call;
    bool grouped = g != NULL && g->first[j] >= 0;
    if (q != NULL && q->n > 0) {
        bool continues = q->sig == c->match_sig && q->next == j && q->stream == c->stream;
        if (!continues)
            h3_flush(q, c->stream != q->stream ? H3_FLUSH_OTHER_STREAM : H3_FLUSH_BROKEN, c);
        else if (!grouped || !h3_call_deferrable(c))
            h3_flush(q, H3_FLUSH_NOT_DEFERRABLE, c);
    }
    if (!grouped)
        return false;
    bool starts = (uint32_t)g->first[j] == j;
    if (!starts && (q == NULL || q->n == 0))
        return false; /* the group's first calls were issued already */
    struct h3_op *op = starts ? h3_op_for(c->match_sig, j) : q->op;
    if (op == NULL || !h3_call_deferrable(c))
        return false;
    if (q == NULL && (q = h3_queue_get()) == NULL)
        return false;
    if (!h3_queue_push(q, c)) {
        h3_flush(q, H3_FLUSH_LIMIT, c);
        return false;
    }
    atomic_fetch_add_explicit(&h3_deferred_calls, 1, memory_order_relaxed);
    q->sig = c->match_sig;
    q->groups = g;
    q->stream = c->stream;
    q->next = j + 1;
    q->op = op;
    c->decision = "deferred";
    if ((uint32_t)g->last[j] == j)
        h3_op_run(q, c);
    return true;
}

void h3_engine_setup(void)
{
    h3_groups_build();
    bool any_op = h3_config.op_replay;
    h3_engine_on = h3_config.engine && any_op && h3_ngroups > 0;
}

void h3_engine_print_stats(void (*line)(const char *fmt, ...))
{
    if (!h3_engine_on) {
        line("engine: off (%s)", !h3_config.engine ? "H3SHIM_ENGINE=0" : "no op enabled");
        return;
    }
    unsigned long issue_errors = atomic_load(&h3_issue_errors);
    line("engine: %lu launches deferred; %lu issued with an error", atomic_load(&h3_deferred_calls), issue_errors);
    const struct h3_op *ops[] = {&h3_op_replay};
    for (size_t i = 0; i < H3_ARRAY_LEN(ops); i++)
        if (*ops[i]->enabled)
            line("op %-12s %lu groups run (%lu calls)", ops[i]->name, atomic_load(&ops[i]->runs),
                 atomic_load(&ops[i]->calls));
    for (int w = 0; w < H3_FLUSH_COUNT; w++) {
        unsigned long n = atomic_load(&h3_flushes[w]);
        if (n != 0)
            line("flush %-16s %lu groups issued untouched (%lu calls)", h3_flush_names[w], n,
                 atomic_load(&h3_flushed_calls[w]));
    }
}

void h3_engine_reset(void)
{
    for (int w = 0; w < H3_FLUSH_COUNT; w++) {
        atomic_store(&h3_flushes[w], 0);
        atomic_store(&h3_flushed_calls[w], 0);
    }
    atomic_store(&h3_deferred_calls, 0);
    atomic_store(&h3_issue_errors, 0);
    atomic_store(&h3_op_replay.runs, 0);
    atomic_store(&h3_op_replay.calls, 0);
}

void h3_engine_after_fork_child(void)
{
    /* The parent issues its own deferred calls; the child must not repeat them. */
    if (h3_queue != NULL) {
        h3_queue->n = 0;
        h3_queue->used = 0;
        h3_queue->sig = NULL;
    }
    h3_engine_reset();
}
