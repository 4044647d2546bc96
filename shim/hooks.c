/*
 * The exported wrappers, expanded from hooks.def.
 *
 * Owns: the table of hook names and the wrapper of every LAUNCH and LIBCALL
 * entry point (PROCADDR entry points have bodies in driver.c).
 * Invariants: a wrapper always returns exactly what the real function
 * returned; it forwards its arguments unchanged; it observes a call only when
 * the shim is active, the call is not nested inside another intercepted call
 * of this thread, and something (trace or stats) wants to see it.
 * Never: allocates on the fast path, or calls into CUDA before forwarding.
 */
#include "h3shim.h"

const struct h3_hook_info h3_hooks[H3_FN_COUNT] = {
#define H3_HOOK(lib, kind, ret, name, params, args, describe, ...) \
    [H3_FN_##name] = {#name, H3_LIB_##lib, H3_KIND_##kind, 0u __VA_OPT__(| (__VA_ARGS__))},
#include "hooks.def"
#undef H3_HOOK
};

/* What a wrapper returns when the real function cannot be found. */
#define H3_X(lib, so1, so2, fail) static const long long h3_fail_##lib = (long long)(fail);
H3_LIB_LIST(H3_X)
#undef H3_X

/*
 * Whether a call must be observed.  False when it must simply be forwarded:
 * shim disabled, nested inside another intercepted call of this thread
 * (cuBLAS launching its kernels, the runtime launching through the driver),
 * or nothing to observe.
 */
static inline bool h3_call_wanted(void)
{
    return H3_LIKELY(h3_thread.depth == 0) && h3_state_now() == 1 && h3_hot.observe &&
           !atomic_load_explicit(&h3_hot.paused, memory_order_relaxed);
}

/* h3_hot.idle_epoch + 1 when this thread's current call began (h3_idle_note). */
static H3_TLS unsigned h3_call_epoch;

/* Starts observing a call that h3_call_wanted() accepted. */
static inline void h3_call_begin(struct h3_call *c, enum h3_fn fn, enum h3_kind kind)
{
    /* Before the description and the idle decision read what a signature
     * begins with and what the handle names: a change after this read makes
     * an idle note of this call stale at once (h3_idle_note). */
    h3_call_epoch = atomic_load_explicit(&h3_hot.idle_epoch, memory_order_acquire) + 1;
    h3_thread.depth++;
    __builtin_memset(c, 0, offsetof(struct h3_call, u));
    c->fn = fn;
    c->kind = (uint8_t)kind;
    c->detail = h3_hot.trace_on || h3_hot.match_on;
    c->device = -1;
    if (h3_hot.trace_on || h3_hot.stats)
        c->t0_ns = h3_now_ns();
    c->stat_reads = h3_thread.stats_reads;
    h3_thread.forward_ns = 0;
}

/* The call is decided and about to be forwarded (or was handled): the
 * shim's own host time so far, less the real calls it made for the
 * application meanwhile, is counted in the stats. */
static inline void h3_call_decided(struct h3_call *c)
{
    if (h3_hot.stats)
        h3_stats_shim_time(c->fn, h3_now_ns() - c->t0_ns - h3_thread.forward_ns,
                           c->described_ns != 0 ? c->described_ns - c->t0_ns : 0, h3_thread.forward_ns,
                           h3_thread.stats_reads - c->stat_reads, c->part_ns);
}

/* The call is described: with stats, the time so far is the description's. */
static inline void h3_call_described(struct h3_call *c)
{
    if (h3_hot.stats)
        c->described_ns = c->mark_ns = h3_stats_clock();
}

/* Whether configuration calls must be remembered: the shim is active and
 * something observes (the engine will need them always). */
static inline bool h3_config_active(void)
{
    return h3_state_now() == 1 && h3_hot.observe;
}

/* Finishes observing a call that h3_call_begin() accepted and the engine
 * decided (h3_call_decide). */
static inline void h3_call_end(struct h3_call *c, long long result)
{
    c->result = result;
    if (H3_UNLIKELY(c->capture_edge != 0))
        h3_captures_after(c);
    if (H3_UNLIKELY(c->context_edge != 0))
        h3_engine_context_after(c);
    if (H3_UNLIKELY((h3_hooks[c->fn].props & H3_P_ENDS_CONTEXT) != 0))
        h3_record_modules_changed(); /* a context's modules may have gone with it: their handles may be reused */
    h3_stats_count(c);
    if (h3_hot.trace_on) {
        c->t1_ns = h3_now_ns();
        h3_trace_emit(c);
    }
    h3_thread.depth--;
}

/* The first entry of a handle's set in the thread's table (handles lie at
 * strides of a power of two: the product's top bits). */
_Static_assert(H3_IDLE_SETS == 64 && H3_IDLE_WAYS == 8, "h3_idle_set takes the product's top six bits, "
                                                        "h3_idle_note a random way from three bits");
static inline unsigned h3_idle_set(const void *key)
{
    return (unsigned)(((uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull) >> 58) * H3_IDLE_WAYS;
}

/* Whether `key` is in the thread's table (a set's ways fill in order). */
static inline bool h3_idle_has(const void *key)
{
    const void *const *set = &h3_idle_keys[h3_idle_set(key)];
    for (unsigned w = 0; w < H3_IDLE_WAYS && set[w] != NULL; w++)
        if (set[w] == key)
            return true;
    return false;
}

/*
 * A launch's kernel found idle on a thread whose learner does not look (off,
 * stopped, closed): it can begin no group, and nothing on the thread wants
 * it.  Its later launches on the thread are forwarded from the exported
 * wrapper (h3_launch_idle_fast) while that stays true: until what can begin
 * a group or what a handle names changes (h3_hot.idle_epoch), and while
 * nothing process-wide watches launches.
 */
static void h3_idle_note(const struct h3_call *c, unsigned epoch)
{
    if (epoch == 0)
        return; /* the epoch wrapped: 0 is no table's */
    if (h3_thread.idle_keys_epoch != epoch) {
        memset(h3_idle_keys, 0, sizeof(h3_idle_keys));
        h3_thread.idle_keys_epoch = epoch;
    }
    h3_thread.idle_epoch = epoch;
    if (c->handle == NULL || (h3_hooks[c->fn].props & H3_P_BY_CONFIG) != 0)
        return; /* an extended configuration's: its wrapper never looks a kernel up */
    const void **set = &h3_idle_keys[h3_idle_set(c->handle)];
    unsigned w = 0;
    for (; w < H3_IDLE_WAYS && set[w] != NULL; w++)
        if (set[w] == c->handle)
            return; /* noted already */
    if (w == H3_IDLE_WAYS) { /* full: a way at random (kernels that come in turn, more than it holds, keep most) */
        h3_thread.idle_victim = h3_thread.idle_victim * 6364136223846793005ull + 1442695040888963407ull;
        w = (unsigned)(h3_thread.idle_victim >> 61); /* 0..7 */
    }
    set[w] = c->handle;
}

/*
 * Whether this thread's calls may be forwarded unobserved where nothing can
 * want them: it noted idle kernels (its learner does not look) since what
 * can begin a group last changed, it has no attempt in progress, and
 * nothing process-wide watches calls: no held launch or owed write (a call
 * on their stream issues them first), no weight copy (a call may write its
 * source), no capture recording, no trace (it records every call).  Plain
 * loads only; the stats count such calls apart (h3_stats_idle_fast).
 */
static inline bool h3_thread_unwatched(void)
{
    return h3_thread.depth == 0 && !h3_thread.attempting &&
           atomic_load_explicit(&h3_hot.state, memory_order_acquire) == 1 && !h3_hot.trace_on && h3_hot.observe &&
           !atomic_load_explicit(&h3_hot.paused, memory_order_relaxed) &&
           atomic_load_explicit(&h3_hot.holding, memory_order_relaxed) == 0 &&
           atomic_load_explicit(&h3_hot.wc_live, memory_order_relaxed) == 0 &&
           atomic_load_explicit(&h3_hot.wc_held, memory_order_relaxed) == 0 &&
           atomic_load_explicit(&h3_hot.captures_recording, memory_order_relaxed) == 0;
}

static inline bool h3_thread_idle_fast(void)
{
    return h3_thread.idle_epoch != 0 &&
           h3_thread.idle_epoch == atomic_load_explicit(&h3_hot.idle_epoch, memory_order_relaxed) + 1 &&
           h3_thread_unwatched();
}

/* Whether launch `key` (its kernel handle; for the launches of extended
 * configurations their configuration, which no handle equals) is of a
 * kernel h3_idle_note noted, and the thread's calls may go unobserved. */
static inline bool h3_launch_idle_fast(const void *key)
{
    return key != NULL && h3_thread.idle_epoch != 0 && h3_idle_has(key) && h3_thread_idle_fast();
}

/* With stats: why idle launch `c` came this far, its thread's learner
 * quiet when the call began or not (its wrapper's tests). */
static enum h3_idle_slow h3_idle_slow_why(const struct h3_call *c, bool was_quiet)
{
    if ((h3_hooks[c->fn].props & H3_P_BY_CONFIG) != 0)
        return H3_SLOW_BY_CONFIG;
    if (h3_learn_looking() && !was_quiet)
        return H3_SLOW_LOOKING;
    if (h3_thread.idle_epoch == 0)
        return H3_SLOW_UNNOTED;
    if (h3_thread.idle_epoch != atomic_load_explicit(&h3_hot.idle_epoch, memory_order_relaxed) + 1)
        return H3_SLOW_EPOCH;
    if (c->handle == NULL || !h3_idle_has(c->handle))
        return H3_SLOW_TABLE;
    return H3_SLOW_WATCHED;
}

/* Whether a launch of `handle` with `dims`, on a thread whose learner looks,
 * is one of a refused group's that it noted after the same two calls
 * (h3_learn_fast_note), and the thread's calls may go unobserved. */
static inline bool h3_launch_refused_fast(const void *handle, const unsigned dims[H3_LAUNCH_DIMS])
{
    return h3_thread.refused_epoch != 0 && !h3_thread.learn_quiet && h3_thread_unwatched() && /* 0: nothing noted (learning off) */
           h3_learn_launch_refused(handle, dims, atomic_load_explicit(&h3_hot.idle_epoch, memory_order_relaxed) + 1);
}

/* h3_launch_refused_fast from a launch wrapper's arguments: the runtime's
 * (the grid and block as dim3), the driver's (as six integers); an extended
 * configuration's launch is never forwarded so. */
static inline bool h3_launch_refused_rt(const void *handle, dim3 grid, dim3 block, void **args, size_t shmem,
                                        cudaStream_t stream)
{
    (void)stream;
    const unsigned dims[H3_LAUNCH_DIMS] = {grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem};
    return args != NULL && h3_launch_refused_fast(handle, dims); /* no arguments: the learner's break */
}
static inline bool h3_launch_refused_drv(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                         unsigned by, unsigned bz, unsigned shmem, CUstream stream, void **params,
                                         void **extra)
{
    (void)stream, (void)extra;
    const unsigned dims[H3_LAUNCH_DIMS] = {gx, gy, gz, bx, by, bz, shmem};
    return params != NULL && h3_launch_refused_fast(f, dims); /* the packed form: a break for the learner */
}
static inline bool h3_launch_refused_ex(const void *config, ...)
{
    (void)config;
    return false;
}
#define H3_SECOND_(a, b, ...) b
#define H3_SECOND(...) H3_SECOND_(__VA_ARGS__, 0)
/* Picked by the type of the wrapper's second parameter (the grid's, or an
 * extended configuration's kernel). */
#define H3_LAUNCH_REFUSED(args)                                                                     \
    _Generic((H3_SECOND args), dim3: h3_launch_refused_rt, unsigned int: h3_launch_refused_drv,     \
             default: h3_launch_refused_ex) args

/* Whether library call `fn` may go unobserved: no signature has one but a
 * cuBLASLt GEMM or a cuDNN execution (h3_match_idle), so with the thread's
 * calls unwatched nothing wants it. */
static inline bool h3_libcall_idle_fast(enum h3_fn fn)
{
    return fn != H3_FN_cublasLtMatmul && fn != H3_FN_cudnnBackendExecute && h3_thread_idle_fast();
}

/* The thread's learner woke from its quiet (h3_learn_quiet_passes) at this
 * call, or follows a refused island: the launches noted idle while it was
 * quiet are looked at again (a woken learner forgets them; one quiet again
 * after the island gets them back at its next idle note). */
static inline void h3_idle_forget_if_woke(bool was_quiet)
{
    if (was_quiet && !h3_thread.learn_quiet)
        h3_thread.idle_epoch = 0;
}

/*
 * The pipeline for a described call: the engine's first look (captures,
 * matching off), then whether anything could depend on the call (idle),
 * then the matcher and the learner, then the engine's decision.  Returns true when the
 * call was deferred or executed by an op (the wrapper must not forward it).
 */
static bool h3_call_decide(struct h3_call *c)
{
    if (!h3_engine_begin(c))
        return false;
    if (c->kind == H3_KIND_SYNC)
        h3_learn_sync(); /* noted on the next call the learner keeps */
    /* Quiet and idle: no attempt in progress on the thread and no signature
     * begins with this call, so the matcher has nothing to do with it; only
     * the learner may want it. */
    bool quiet = h3_engine_quiet(c), unmatched = quiet && c->kind != H3_KIND_SYNC && h3_match_idle(c);
    const bool learn_quiet = h3_thread.learn_quiet;
    if (quiet && (c->kind == H3_KIND_SYNC || (unmatched && !h3_learn_wants(c)))) {
        c->reason = "idle";
        if (H3_UNLIKELY(h3_hot.stats) && c->kind == H3_KIND_LAUNCH)
            h3_stats_idle_slow(h3_idle_slow_why(c, learn_quiet));
        h3_idle_forget_if_woke(learn_quiet);
        if (c->kind == H3_KIND_LAUNCH && (!h3_learn_looking() || h3_thread.learn_quiet))
            h3_idle_note(c, h3_call_epoch);
        else if (c->kind == H3_KIND_LAUNCH)
            h3_learn_fast_note(c, h3_call_epoch);
        if (h3_hot.trace_on)
            c->learner = h3_learn_take_what();
        return false;
    }
    if (c->kind == H3_KIND_SYNC) {
        h3_match_interrupt(); /* a call that submits work or synchronises */
    } else {
        if (unmatched)
            c->reason = "no_match";
        else
            h3_match_call(c);
        h3_learn_observe(c);
        h3_idle_forget_if_woke(learn_quiet);
        if (h3_hot.trace_on)
            c->learner = h3_learn_take_what();
        if (h3_hot.stats) /* from the end of the description */
            h3_stats_part_end(c, H3_PART_MATCH);
    }
    return h3_engine_decide_call(c);
}

/* Every wrapper starts here: the real function, or the library's error. */
#define H3_REAL_OR_FAIL(lib, ret, name)                                          \
    __typeof__(&name) real_ = (__typeof__(&name))h3_real_fn(H3_FN_##name);       \
    if (H3_UNLIKELY(real_ == NULL))                                              \
        return (ret)h3_fail_##lib

/*
 * Whether a call can be forwarded at once, decided from plain loads only (no
 * function call, so the exported wrapper needs no frame): nested, disabled,
 * or active with nothing observing or observation paused (h3shim_pause).
 * Anything else takes the slow path.
 */
static inline bool h3_call_unwanted_fast(void)
{
    if (h3_thread.depth != 0)
        return true;
    int state = atomic_load_explicit(&h3_hot.state, memory_order_acquire);
    return state == 2 ||
           (state == 1 && (!h3_hot.observe || atomic_load_explicit(&h3_hot.paused, memory_order_relaxed)));
}

/*
 * Whether cuBLAS GEMM call `c` (its wrapper's `describe` runs on it as a
 * probe, the call record otherwise untouched) is a refused group's, on a
 * thread whose learner looks and whose calls may go unobserved: the GEMM
 * h3_call_decide would find idle (no signature has one).
 */
#define H3_GEMM_REFUSED_FAST(lib, name, describe)                                \
    (H3_LIB_##lib == H3_LIB_CUBLAS && h3_hot.learn_on && h3_hot.match_on && !h3_thread.learn_quiet &&    \
     h3_thread_unwatched() &&                                                    \
     h3_learn_looking() &&                                                       \
     (c->fn = H3_FN_##name, c->kind = H3_KIND_LIBCALL, c->detail = c->probe = true,  \
      (describe), c->probe = false, h3_learn_gemm_refused(c)))

/*
 * The exported wrapper forwards with a tail jump when nothing observes, so
 * the caller's arguments are never copied; the slow path (first call,
 * resolution, observation) lives in a function of its own.  The entry's kind
 * is a constant there, not a read of h3_hooks.
 */
#define H3_WRAP_OBSERVED(kind, lib, ret, name, params, args, describe, idle, pre) \
    __attribute__((noinline)) static ret h3_slow_##name params                   \
    {                                                                            \
        H3_REAL_OR_FAIL(lib, ret, name);                                         \
        struct h3_call call_;                                                    \
        struct h3_call *c = &call_;                                              \
        if (idle) { /* nested calls stay unobserved */                           \
            if (H3_UNLIKELY(h3_hot.stats))                                       \
                h3_stats_idle_fast(H3_FN_##name);                                \
            h3_thread.depth++;                                                   \
            ret r_ = real_ args;                                                 \
            h3_thread.depth--;                                                   \
            return r_;                                                           \
        }                                                                        \
        if (!h3_call_wanted())                                                   \
            return real_ args;                                                   \
        h3_call_begin(c, H3_FN_##name, H3_KIND_##kind);                          \
        describe;                                                                \
        h3_call_described(c);                                                    \
        /* Deferred or run by an op: the caller sees c->result: 0 for a     */  \
        /* held launch, the status of a library call an op made.            */  \
        bool handled_ = h3_call_decide(c);                                       \
        h3_call_decided(c);                                                      \
        ret r_ = handled_ ? (ret)c->result : real_ args;                         \
        h3_call_end(c, (long long)r_);                                           \
        return r_;                                                               \
    }                                                                            \
    H3_EXPORT ret name params                                                    \
    {                                                                            \
        pre;                                                                     \
        void *p_ = atomic_load_explicit(&h3_real[H3_FN_##name], memory_order_acquire); \
        if (H3_LIKELY(p_ != NULL && h3_call_unwanted_fast()))                    \
            return ((__typeof__(&name))p_) args;                                 \
        return h3_slow_##name args;                                              \
    }
#define H3_FIRST_(a, ...) a
#define H3_FIRST(...) H3_FIRST_(__VA_ARGS__, 0)
#define H3_WRAP_LAUNCH(lib, ret, name, params, args, describe)                                           \
    H3_WRAP_OBSERVED(LAUNCH, lib, ret, name, params, args, describe,                                       \
                     ((h3_hooks[H3_FN_##name].props & H3_P_BY_CONFIG) == 0 &&                               \
                      h3_launch_idle_fast((const void *)(H3_FIRST args))) ||                                   \
                         H3_LAUNCH_REFUSED(args),                                                              \
                     (void)0)
#define H3_WRAP_LIBCALL(lib, ret, name, params, args, describe)                                          \
    H3_WRAP_OBSERVED(LIBCALL, lib, ret, name, params, args, describe,                                      \
                     h3_libcall_idle_fast(H3_FN_##name) || H3_GEMM_REFUSED_FAST(lib, name, describe), (void)0)
/* A call that may end a context makes every handle stale before it is
 * forwarded, observed or not (paused too), and again once it returned
 * (h3_call_end): the context's modules go with it, and a handle may name
 * another kernel then. */
#define H3_WRAP_SYNC(lib, ret, name, params, args, describe)                                             \
    H3_WRAP_OBSERVED(SYNC, lib, ret, name, params, args, describe, false,                                  \
                     if ((h3_hooks[H3_FN_##name].props & H3_P_ENDS_CONTEXT) != 0) h3_record_modules_changed())
#define H3_WRAP_PROCADDR(lib, ret, name, params, args, describe)

/*
 * Whether configuration call `fn` (from code at `caller`) has anything to
 * remember; a constant `fn` in each wrapper folds this to the one test it
 * needs.  Before the shim is initialised it says yes (the slow path
 * initialises it).  Else the call is forwarded with a tail jump: another
 * model's cuBLASLt descriptors, which lt_shadow.c never remembers, cost it
 * a load or two.
 */
static inline bool h3_config_wanted(enum h3_fn fn, const void *caller)
{
    int state = atomic_load_explicit(&h3_hot.state, memory_order_acquire);
    if (state != 1)
        return state == 0;
    if (!h3_hot.observe)
        return false;
    return h3_lt_config_wanted(fn, caller) != 0; /* -1: not lt_shadow's, always wanted */
}

#define H3_UNPAREN(...) __VA_ARGS__
#define H3_WITH_CALLER(...) (caller_, __VA_ARGS__)

/* Remembers what a configuration call says, its time counted with stats. */
#define H3_CONFIG_NOTE(fn, describe)                                             \
    do {                                                                         \
        if (h3_config_active()) {                                                \
            uint64_t t0_ = h3_hot.stats ? h3_now_ns() : 0;                       \
            describe;                                                            \
            if (t0_ != 0)                                                        \
                h3_stats_config_time(fn, h3_now_ns() - t0_);                     \
        }                                                                        \
    } while (0)
/* Configuration calls: forwarded first; what succeeded is remembered (its
 * time counted in the shim's own, with stats).  One that forgets a handle
 * (FORGETS) forgets it first, then forwards: once the real call returns,
 * another thread's create may be given the same handle.  `caller_`, the code that
 * made the call, is there for `describe`. */
#define H3_WRAP_CONFIG(lib, ret, name, params, args, describe)                   \
    __attribute__((noinline)) static ret h3_slow_##name(const void *caller_, H3_UNPAREN params) \
    {                                                                            \
        (void)caller_;                                                           \
        H3_REAL_OR_FAIL(lib, ret, name);                                         \
        if ((h3_hooks[H3_FN_##name].props & H3_P_FORGETS) != 0) {                \
            H3_CONFIG_NOTE(H3_FN_##name, describe);                              \
            return real_ args;                                                   \
        }                                                                        \
        ret r_ = real_ args;                                                     \
        if (r_ == 0)                                                             \
            H3_CONFIG_NOTE(H3_FN_##name, describe);                              \
        return r_;                                                               \
    }                                                                            \
    H3_EXPORT ret name params                                                    \
    {                                                                            \
        const void *caller_ = __builtin_return_address(0);                       \
        void *p_ = atomic_load_explicit(&h3_real[H3_FN_##name], memory_order_acquire); \
        if (H3_LIKELY(p_ != NULL) && !h3_config_wanted(H3_FN_##name, caller_))   \
            return ((__typeof__(&name))p_) args;                                 \
        return h3_slow_##name H3_WITH_CALLER(H3_UNPAREN args);                   \
    }

#define H3_HOOK(lib, kind, ret, name, params, args, describe, ...) \
    H3_WRAP_##kind(lib, ret, name, params, args, describe)
#include "hooks.def"
#undef H3_HOOK

/* The driver needs the wrappers' addresses to answer cuGetProcAddress. */
void *h3_driver_wrapper(enum h3_fn fn)
{
    static void *const wrappers[H3_FN_COUNT] = {
#define H3_HOOK(lib, kind, ret, name, params, args, describe, ...) [H3_FN_##name] = (void *)&name,
#include "hooks.def"
#undef H3_HOOK
    };
    return (unsigned)fn < H3_FN_COUNT ? wrappers[fn] : NULL;
}
