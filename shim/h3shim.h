/*
 * h3shim internal umbrella header.
 *
 * Every shim/ source file includes this header and nothing else of its own.
 * Exported symbols are NVIDIA's names (and dlsym) only: everything declared
 * here is hidden (-fvisibility=hidden), named h3_<subsystem>_<verb>, and no
 * function here may be called before h3_init() except where its comment says
 * so.
 */
#ifndef H3SHIM_H
#define H3SHIM_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nvapi.h"

#define H3_EXPORT __attribute__((visibility("default")))
#define H3_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define H3_LIKELY(x) __builtin_expect(!!(x), 1)
/* For code that can run before the sanitizer runtimes are initialised: the
 * exported dlsym is called by those runtimes' own start-up. */
#define H3_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))
#define H3_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Thread-local data of the shim.  Initial-exec: the library is loaded at
 * start-up (LD_PRELOAD), and each access is then one load off the thread
 * pointer, not a call to __tls_get_addr (which every call of another model
 * would pay, on data it also touches). */
#define H3_TLS __attribute__((tls_model("initial-exec"))) _Thread_local

/*
 * Libraries, their sonames (newest first) and the value a wrapper returns when
 * the real function cannot be found (which only happens when the caller
 * reached our symbol without the real library being loaded).
 */
#define H3_LIB_LIST(X)                                                                        \
    X(CUDART, "libcudart.so.13", "libcudart.so.12", cudaErrorSharedObjectSymbolNotFound)      \
    X(CUDA, "libcuda.so.1", NULL, CUDA_ERROR_NOT_FOUND)                                       \
    X(CUBLASLT, "libcublasLt.so.13", "libcublasLt.so.12", CUBLAS_STATUS_NOT_INITIALIZED)      \
    X(CUBLAS, "libcublas.so.13", "libcublas.so.12", CUBLAS_STATUS_NOT_INITIALIZED)            \
    X(CUDNN, "libcudnn.so.9", NULL, CUDNN_STATUS_NOT_INITIALIZED)

enum h3_lib {
#define H3_X(lib, so1, so2, fail) H3_LIB_##lib,
    H3_LIB_LIST(H3_X)
#undef H3_X
    H3_LIB_COUNT
};

enum h3_kind { H3_KIND_LAUNCH, H3_KIND_LIBCALL, H3_KIND_PROCADDR, H3_KIND_CONFIG, H3_KIND_SYNC };

enum h3_fn {
#define H3_HOOK(lib, kind, ret, name, params, args, describe, ...) H3_FN_##name,
#include "hooks.def"
#undef H3_HOOK
    H3_FN_COUNT
};

/* What hooks.def's last column says of an entry point. */
enum h3_hook_prop {
    H3_P_DEFERRABLE = 1u << 0,         /* a launch the engine may hold back and issue later */
    H3_P_ENDS_CONTEXT = 1u << 1,       /* may end a context (a reset, a destroy, a primary release) */
    H3_P_CAPTURE_BEGIN = 1u << 2,      /* begins a stream capture */
    H3_P_CAPTURE_INTO_GRAPH = 1u << 3, /* begins one into an existing graph */
    H3_P_CAPTURE_END = 1u << 4,        /* ends one */
    H3_P_GRAPH_LAUNCH = 1u << 5,       /* launches a CUDA graph */
    H3_P_PER_THREAD = 1u << 6,         /* the per-thread default stream's form (_ptsz) */
    H3_P_WRITES_ANYWHERE = 1u << 7,    /* writes memory the shim cannot bound (graphs, host functions, batches, cooperative launches) */
    H3_P_FORGETS = 1u << 8,            /* CONFIG: forgets a handle, before the real call (which may let another thread's create reuse it) */
    H3_P_BY_CONFIG = 1u << 9,          /* LAUNCH: its first argument is an extended configuration, not the kernel */
    H3_P_FREES = 1u << 10,             /* SYNC: gives device memory back (a free: its allocation; an unmap: its range) */
};
struct h3_hook_info {
    const char *name;
    enum h3_lib lib;
    enum h3_kind kind;
    unsigned props; /* enum h3_hook_prop bits */
};
extern const struct h3_hook_info h3_hooks[H3_FN_COUNT];
/* Whether entry point `fn` is the per-thread default stream's form (its stream 0 is the thread's). */
static inline bool h3_fn_per_thread(enum h3_fn fn)
{
    return (h3_hooks[fn].props & H3_P_PER_THREAD) != 0;
}

/* ---- config.c ---- */

enum h3_level { H3_LEVEL_WARN = 0, H3_LEVEL_INFO = 1, H3_LEVEL_TRACE = 2 };
enum h3_format { H3_FORMAT_JSONL = 0, H3_FORMAT_CHROME = 1 };

/* The parsed values, one member per row of config.def, typed by its kind. */
#define H3_CONFIG_TYPE_BOOL bool
#define H3_CONFIG_TYPE_INT long
#define H3_CONFIG_TYPE_STR const char *
#define H3_CONFIG_TYPE_LEVEL int
#define H3_CONFIG_TYPE_FORMAT int
struct h3_config {
#define H3_CONFIG(name, type, field, def, help) H3_CONFIG_TYPE_##type field;
#include "config.def"
#undef H3_CONFIG
};
extern struct h3_config h3_config;

/* Parses every H3SHIM_* variable from `envp` into h3_config; warns on bad values
 * and unknown names.  Returns the number of problems found.  Called once by
 * h3_init(); tests call it directly with their own environment. */
int h3_config_load(char *const *envp);
/* Logs what h3_config_load() found (values set, problems); after h3_log_setup(). */
void h3_config_report(void);
/* A 1-or-0 switch held as a string: 1, 0, or -1 when unset; any other value
 * is -1 too, with a warning ("NAME=VALUE: expected 0 or 1; OTHERWISE") the
 * first time `warned` is found clear (every time if it is NULL). */
int h3_config_switch(const char *name, const char *value, const char *otherwise, atomic_flag *warned);

/* ---- log.c ---- */

enum h3_subsys {
    H3_SUB_INIT = 1u << 0,
    H3_SUB_RESOLVE = 1u << 1,
    H3_SUB_HOOK = 1u << 2,
    H3_SUB_DRIVER = 1u << 3,
    H3_SUB_TRACE = 1u << 4,
    H3_SUB_CONFIG = 1u << 5,
    H3_SUB_STATS = 1u << 6,
    H3_SUB_FORK = 1u << 7,
    H3_SUB_ENGINE = 1u << 8,
    H3_SUB_ALL = 0x1ffu
};

extern int h3_log_level;
extern unsigned h3_log_mask;

/* Sets up the debug log from h3_config (level, subsystems, file). */
void h3_log_setup(void);
/* Writes one line "h3shim: PID PREFIX..." to `fd` with a single write(2). */
void h3_write_line(int fd, const char *prefix, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* Writes one line "h3shim: PID LEVEL ..." to the debug log.  Use the macros. */
void h3_log_write(int level, unsigned subsys, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Expands %h (host name) and %p (pid) in `pattern` into `out`. */
void h3_log_expand_path(const char *pattern, char *out, size_t outlen);

/* The level is tested before the arguments are evaluated. */
#define H3_LOG(level, subsys, ...)                                                  \
    do {                                                                            \
        if (H3_UNLIKELY(h3_log_level >= (level) && (h3_log_mask & (subsys))))       \
            h3_log_write((level), (subsys), __VA_ARGS__);                           \
    } while (0)
#define H3_WARN(subsys, ...) H3_LOG(H3_LEVEL_WARN, subsys, __VA_ARGS__)
#define H3_INFO(subsys, ...) H3_LOG(H3_LEVEL_INFO, subsys, __VA_ARGS__)
#define H3_TRACE(subsys, ...) H3_LOG(H3_LEVEL_TRACE, subsys, __VA_ARGS__)
/* Warns once per call site: each cause is reported once. */
#define H3_WARN_ONCE(subsys, ...)                                                   \
    do {                                                                            \
        static atomic_flag h3__once_ = ATOMIC_FLAG_INIT;                            \
        if (!atomic_flag_test_and_set(&h3__once_))                                  \
            H3_WARN(subsys, __VA_ARGS__);                                           \
    } while (0)

/* ---- init.c ---- */

/*
 * What every intercepted call reads before it knows whether there is
 * anything to do, in one cache line.  In a real process the framework evicts
 * the shim's data between two calls, so each further line a call reads is a
 * miss: the shim's cost there is lines, not instructions (NOTES.md).  Each
 * field is written by the file named beside it, once at initialisation
 * unless said otherwise; every other file only reads it.
 */
struct h3_hot {
    atomic_int state;    /* init.c: 0 = not initialised, 1 = active, 2 = disabled */
    bool observe;        /* init.c: trace, stats or the matcher wants the calls */
    bool stats;          /* init.c: H3SHIM_STATS (h3_config.stats) */
    bool trace_on;       /* trace.c: a trace is being written */
    bool match_on;       /* init.c: calls are matched (H3SHIM_MATCH or the engine, and a signature or learning) */
    bool learn_on;       /* init.c: groups are learned in the process (H3SHIM_LEARN and the engine) */
    atomic_bool learn_closed; /* learn.c, once: learning is over for the process (its room spent) */
    bool engine_on;      /* engine.c: the engine may defer launches */
    bool graphs_on;      /* engine.c: weight copies are tracked into captures */
    atomic_uint holding; /* engine.c, per group: queues holding calls */
    atomic_uint wc_live; /* op_weight_cache.c, per copy: weight copies, for the "nothing cached" test */
    _Atomic uint64_t wc_lo, wc_hi; /* op_weight_cache.c, per copy: the bounds of their sources */
    atomic_uint captures_recording; /* graphs.c, per capture: captures begun and not ended */
    atomic_uint lt_live; /* lt_shadow.c, per handle: cuBLASLt handles remembered */
    atomic_uint wc_held; /* op_weight_cache.c, per copy: copies holding GPU memory, valid or not */
    bool lt_remember;    /* init.c: H3SHIM_LT_SHADOW on and calls matched */
    atomic_bool paused;  /* init.c: h3shim_pause: observed entry points forward unobserved */
    atomic_uint idle_epoch; /* match.c and record.c: what can begin a group, or what a handle names, changed */
} __attribute__((aligned(64)));
extern struct h3_hot h3_hot;
struct h3_queue;
struct h3_matcher;
/* What every observed call reads of this thread's, in one cache line (as
 * h3_hot for the process).  Initial-exec TLS: read with one load, no call
 * (the library is preloaded, so its TLS is in the initial block; with the
 * idle table it is more than the room glibc keeps for a library dlopened
 * later, which is not a way to load it). */
struct h3_thread {
    int depth;                  /* non-zero while this thread runs shim code or an intercepted call */
    uint64_t forward_ns;        /* the real calls made for the application in the observed call */
    uint64_t stats_reads;       /* stats.c: the stats' own clock reads inside the calls' parts */
    struct h3_queue *queue;     /* engine.c: this thread's held launches, once it has held one */
    struct h3_matcher *matcher; /* match.c: this thread's matcher, once it has matched a call */
    bool expects_matmul;        /* match.c: a signature expects a GEMM next (h3_match_wants_matmul, any stream) */
    bool learn_gemms;           /* learn.c: the learner would keep this thread's next GEMM (not inside a refused group) */
    bool learn_quiet;           /* learn.c: the learner passed by every call for H3SHIM_LEARN_QUIET calls (its launches idle) */
    bool attempting;            /* match.c: an attempt at a signature is in progress (any stream) */
    unsigned idle_epoch;        /* hooks.c: h3_hot.idle_epoch + 1 when h3_idle_keys were noted; 0: none */
    unsigned idle_keys_epoch;   /* hooks.c: the epoch h3_idle_keys were noted in (kept while idle_epoch is 0) */
    unsigned refused_epoch;     /* learn.c: the same, for the learner's refused launches (h3_learn_fast_note) */
    uint64_t idle_victim;       /* hooks.c: picks the way a full set of h3_idle_keys gives up */
} __attribute__((aligned(64)));
extern H3_TLS struct h3_thread h3_thread;
/* hooks.c: kernel handles whose launches this thread found idle while its
 * learner was not looking: sets of H3_IDLE_WAYS (one cache line) picked by
 * the handle, so that kernels whose handles fall in one set do not evict
 * each other at every forward while the set holds them all. */
#define H3_IDLE_WAYS 8
#define H3_IDLE_SETS 64
#define H3_IDLE_KEYS (H3_IDLE_WAYS * H3_IDLE_SETS)
extern H3_TLS const void *h3_idle_keys[H3_IDLE_KEYS] __attribute__((aligned(64)));

/* Whether this thread's next GEMM is wanted in full (a signature expects one,
 * or the learner would keep it): its descriptors are remembered as built. */
static inline bool h3_thread_wants_gemm(void)
{
    return h3_thread.expects_matmul || h3_thread.learn_gemms;
}

/* Idempotent, thread-safe lazy initialisation: reads the configuration, sets
 * up logging, trace and stats.  Touches no CUDA library. */
void h3_init(void);

/* The shim's state, initialising it first if this is the first call. */
static inline int h3_state_now(void)
{
    int state = atomic_load_explicit(&h3_hot.state, memory_order_acquire);
    if (__builtin_expect(state == 0, 0)) {
        h3_init();
        state = atomic_load_explicit(&h3_hot.state, memory_order_acquire);
    }
    return state;
}

/* ---- resolve.c ---- */

extern _Atomic(void *) h3_real[H3_FN_COUNT];

/* Finds the real function for `fn` in the copy of its library the process has
 * already loaded.  Returns NULL when none is loaded.  Thread-safe. */
void *h3_resolve_fn(enum h3_fn fn);
/* Finds `name` in the loaded copy of `lib` (not a hooked symbol). */
void *h3_resolve_sym(enum h3_lib lib, const char *name);
/* The same, remembered in *slot once found (a library not loaded yet is
 * looked for again at the next call). */
void *h3_resolve_cached(enum h3_lib lib, const char *name, _Atomic(void *) *slot);
/* A function of a loaded library that the shim calls itself (not an
 * interposed one), typed as the header declares it; NULL when absent.  Each
 * use has its own cache. */
#define H3_LIB_FN(lib, name)                                                                   \
    __extension__({                                                                            \
        static _Atomic(void *) h3_fn_slot_;                                                    \
        (__typeof__(&name))h3_resolve_cached(H3_LIB_##lib, #name, &h3_fn_slot_);               \
    })
/* The dlopen(RTLD_NOLOAD) handle of the loaded copy of `lib`, or NULL. */
void *h3_resolve_handle(enum h3_lib lib);
/* The soname that `lib` was found under, or NULL. */
const char *h3_resolve_soname(enum h3_lib lib);
/* libc's dlsym, for the shim's own lookups.  Safe before h3_init(). */
void *h3_real_dlsym(void *handle, const char *name);
/* libc's dlsym itself, for the exported dlsym's tail jump. */
void *(*h3_real_dlsym_ptr(void))(void *, const char *);

static inline void *h3_real_fn(enum h3_fn fn)
{
    void *p = atomic_load_explicit(&h3_real[fn], memory_order_acquire);
    return H3_LIKELY(p != NULL) ? p : h3_resolve_fn(fn);
}

/* ---- record.c: call records ---- */

/* What the shim knows about one kernel, cached per handle for the process. */
#define H3_KERNEL_REFUSED 16
struct h3_kernel {
    /* What a launch reads, in the entry's first cache line (it is 128-byte aligned). */
    const void *key;
    uint64_t name_hash; /* h3_hash of `name`, the start of a launch's fingerprint */
    uint32_t nparams;
    uint32_t param_bytes;
    uint16_t *param_sizes;
    atomic_uint generation; /* h3_kernels_generation when it was described (a module unload makes it stale) */
    /* Bit s: its name is not signature s's first call's, so it cannot begin
     * an attempt (the matcher's, set at the first look; signatures are
     * loaded once and kept). */
    atomic_ullong not_first;
    /* Finds the memory it writes through device memory, not its parameters
     * (NCCL's kernels): the weight cache cannot tell what it writes. */
    bool writes_unseen;
    /* Writes only through its first parameter (PyTorch's cat kernels: the
     * output; the inputs' list after it is read, and its unused slots hold
     * whatever the host stack held). */
    bool writes_first_param_only;
    /* Its parameters' sizes are all known (the driver answered for each;
     * not cut at the table's room): else what it writes cannot be bounded. */
    bool params_known;
    /* Its parameters known and its name read: the learner can keep its launches. */
    bool learnable;
    /* learn.c: a refused group has a launch of it, so a triple not in
     * `refused` must be asked of the process's table (set before the table
     * is written: a thread never sees the table say more than this entry
     * lets it ask). */
    atomic_bool in_refused;
    /* learn.c: the refused groups' triples (a launch of it after the two
     * calls before it, as a thread sees them once the groups are refused)
     * that the process's table holds, from the line after the one a launch
     * reads (the entry is 128-byte aligned: the two are fetched together),
     * so that another model's launch is told refused without a line of that
     * table. */
    _Alignas(64) atomic_ullong refused[H3_KERNEL_REFUSED];
    /* What traces and stats read. */
    const char *name;   /* as the driver returns it (mangled): what signatures match */
    const char *pretty; /* demangled when a C++ runtime is loaded, else `name` */
    atomic_ulong calls; /* launches seen, counted only with H3SHIM_STATS */
    uint16_t sizes[];   /* param_sizes points here */
};

struct h3_lt_layout {
    int32_t type, order;
    uint64_t rows, cols;
    int64_t ld, batch, stride;
};

struct h3_lt_desc {
    const void *A, *B, *C, *D, *workspace_ptr;
    int32_t compute, scale, transa, transb, epilogue, bias_type;
    const void *bias;
    struct h3_lt_layout a, b, c, d;
    int64_t m, n, k;
    size_t workspace;
    bool have_algo;
    int32_t algo_id, tile, stages, splitk, reduction, swizzle, custom, cluster, inner;
    /* The call's other arguments, for an op that makes the call itself. */
    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t desc;
    const void *alpha, *beta;
    cublasLtMatrixLayout_t Adesc, Bdesc, Cdesc, Ddesc;
    const cublasLtMatmulAlgo_t *algo;
};

struct h3_gemm_desc {
    const void *A, *B, *C;
    int32_t transa, transb, atype, btype, ctype, compute;
    int64_t m, n, k, lda, ldb, ldc, batch;
};

#define H3_CUDNN_MAX_TENSORS 16
struct h3_cudnn_desc {
    const void *plan;
    bool known; /* the pack's attributes were seen being set */
    int64_t count;
    int64_t uids[H3_CUDNN_MAX_TENSORS];
    void *ptrs[H3_CUDNN_MAX_TENSORS];
    void *workspace;
};

struct h3_sync_desc {
    const void *dst;
    size_t bytes;
    const void *graph_exec; /* cudaGraphLaunch / cuGraphLaunch: the executable graph */
    const void *ctx;        /* cuCtxDestroy: the context */
    int dev;                /* the primary-context calls: the device */
};

struct h3_procaddr_desc {
    const char *symbol;
    void **pfn;
    int version;
    uint64_t flags;
};

/* One intercepted call. */
/* The parts of an observed call the stats time apart (h3_stats_part_end). */
enum h3_part { H3_PART_MATCH, H3_PART_SCAN, H3_PARTS };

struct h3_call {
    enum h3_fn fn;
    uint8_t kind;     /* h3_hooks[fn].kind (an enum h3_kind), known to the wrapper */
    bool detail;      /* fill library descriptions (tracing) */
    bool probe;       /* a cuBLAS GEMM described for its identity alone: no query (hooks.c) */
    uint8_t capture_edge; /* a capture's begin or end: what h3_captures_after must settle */
    uint8_t context_edge; /* a primary context released: h3_engine_context_after asks whether it ended */
    bool per_thread;  /* a _ptsz entry point */
    int device;
    uint64_t seq;
    uint64_t t0_ns, t1_ns;
    uint64_t described_ns; /* with stats: when the call was described (before the engine saw it) */
    uint64_t mark_ns;      /* with stats: the end of the last part timed (h3_stats_part_end) */
    uint64_t part_ns[H3_PARTS]; /* with stats: the parts' times so far */
    uint64_t stat_reads;   /* with stats: h3_thread.stats_reads when the call began */
    const void *stream;
    const void *handle; /* launches: the kernel handle or host stub as passed */
    const struct h3_kernel *kernel;
    unsigned grid[3], block[3];
    unsigned shmem;
    uint32_t nparams;
    uint32_t param_bytes;
    const uint16_t *param_sizes;
    void **args;  /* launches: pointers to each parameter's value */
    void **extra; /* driver launches: the packed-buffer form */
    uint64_t fp;
    long long result;
    const char *decision;
    const char *reason;
    const struct h3_sig *match_sig; /* the group this call was matched into */
    uint32_t match_call;            /* its index in that group */
    uint32_t match_starts;          /* a bit per signature (by index) whose attempt the call began */
    uint32_t match_continues;       /* a bit per signature (by index) whose attempt the call continued */
    uint32_t flushed;               /* deferred calls issued before this one */
    const char *flush_reason;       /* why they were (a string literal) */
    const char *op;                 /* the op that ran at this call, or NULL */
    uint32_t op_calls;              /* the calls the ops replaced */
    const char *op_fallback;        /* why an op of this group could not run */
    const char *op_how;             /* how an op with more than one exact way ran (h3_op_note) */
    const char *op_verify;          /* an op of this group ran into scratch beside its calls (verify.c) */
    const char *learned;            /* the group this call made the learner learn (its signature's), or NULL */
    const char *learner;            /* traced: what the learner did with it ("kept", or why it was not), or NULL */
    uint32_t op_left_out;           /* outputs the ops left out: the allocator had freed them (ops.c) */
    uint64_t op_left_out_bytes;
    union {
        struct h3_lt_desc lt;
        struct h3_gemm_desc gemm;
        struct h3_cudnn_desc dnn;
        struct h3_procaddr_desc pa;
        struct h3_sync_desc sync;
    } u;
};

void h3_desc_rt_kernel(struct h3_call *c, cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                       size_t shmem, cudaStream_t stream);
void h3_desc_rt_func(struct h3_call *c, const void *func, dim3 grid, dim3 block, void **args,
                     size_t shmem, cudaStream_t stream);
void h3_desc_rt_exc(struct h3_call *c, const cudaLaunchConfig_t *config, const void *func, void **args);
void h3_desc_drv_launch(struct h3_call *c, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                        void **params, void **extra);
void h3_desc_drv_launch_ex(struct h3_call *c, const CUlaunchConfig *config, CUfunction f,
                           void **params, void **extra);
void h3_desc_lt_matmul(struct h3_call *c, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                       const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                       const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                       cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                       void *workspace, size_t workspace_size, cudaStream_t stream);
void h3_desc_gemm(struct h3_call *c, cublasHandle_t handle, int ta, int tb, int64_t m, int64_t n,
                  int64_t k, const void *A, int at, int64_t lda, const void *B, int bt, int64_t ldb,
                  const void *C, int ct, int64_t ldc, int compute, int64_t batch);
void h3_desc_cudnn_execute(struct h3_call *c, cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                           cudnnBackendDescriptor_t pack);
void h3_desc_procaddr(struct h3_call *c, const char *symbol, void **pfn, int version, uint64_t flags);
/* A call that submits work or synchronises: its stream, and the memory it
 * writes when it writes some (dst NULL otherwise; bytes 0 when unknown, as
 * for a free). */
void h3_desc_sync(struct h3_call *c, const void *stream, const void *dst, size_t bytes);
void h3_desc_graph_launch(struct h3_call *c, const void *stream, const void *graph_exec);
/* A module or library was unloaded: a kernel handle may now name another
 * kernel, so every description is checked again at its next launch. */
void h3_record_modules_changed(void);
/* A call that may end a context: cuCtxDestroy's `ctx`, or the primary context of `dev`. */
void h3_desc_context(struct h3_call *c, const void *ctx, int dev);
/* cudaStreamEndCapture: as a sync on `stream` (the graph it gives is asked for before, graphs.c). */
#define h3_desc_end_capture(c, stream, pgraph) h3_desc_sync(c, stream, NULL, 0)
/* The same for a 2-D, 3-D or 3-D peer copy: the device bytes it may write. */
void h3_desc_copy2d(struct h3_call *c, const void *stream, const CUDA_MEMCPY2D *p);
void h3_desc_copy3d(struct h3_call *c, const void *stream, const CUDA_MEMCPY3D *p);
void h3_desc_copy3d_peer(struct h3_call *c, const void *stream, const CUDA_MEMCPY3D_PEER *p);

/* ---- sigfile.c: signature files (signatures/FORMAT.md) ---- */

enum h3_sig_kind { H3_SIG_LAUNCH, H3_SIG_MATMUL, H3_SIG_CUDNN };
enum h3_ref_kind { H3_REF_FIRST, H3_REF_SLOT, H3_REF_NULL };

#define H3_SIG_DESC_KEYS 38
#define H3_SIG_ALGO_KEYS 9
#define H3_SIG_OPERANDS 5
extern const char *const h3_sig_desc_keys[H3_SIG_DESC_KEYS];
extern const char *const h3_sig_algo_keys[H3_SIG_ALGO_KEYS];
extern const char *const h3_sig_operands[H3_SIG_OPERANDS];

/* An 8-byte pointer of a call and where its value must come from. */
struct h3_sig_slot {
    uint16_t param;  /* launch: parameter index; matmul: operand (A B C D bias) */
    uint16_t offset; /* launch: byte offset in the parameter */
    int64_t uid;     /* cudnn: the variant pack's unique id */
    enum h3_ref_kind ref;
    uint32_t ref_call, ref_slot;
    uint32_t ref_value; /* H3_REF_SLOT: that slot's index in an instance's values (h3_sig_index) */
    int64_t delta;
    bool dead;       /* first slot of a buffer nobody reads after the group */
};

/* Bytes of a launch parameter that must match exactly. */
struct h3_sig_bytes {
    uint16_t param, offset, len;
    uint8_t *data;
};

struct h3_sig_call {
    enum h3_sig_kind kind;
    int line;
    char *kernel;
    uint64_t kernel_hash; /* h3_hash of `kernel`, as a launch's h3_kernel.name_hash: most names differ there */
    bool have_config, have_params, have_uids;
    unsigned grid[3], block[3], shmem;
    uint32_t nparams;
    uint16_t *param_sizes;
    uint32_t nbytes;
    struct h3_sig_bytes *bytes;
    /* A launch no op's range spans (engine.c sets it before the signature is
     * matched): its bytes are not compared, only its identity and wiring.
     * It is issued with its own bytes, before or after every op's range, as
     * in the unfused stream (docs/matching.md). */
    bool loose;
    uint32_t nslots;
    uint32_t value_base; /* its first slot's index in an instance's values: the slots before it */
    struct h3_sig_slot *slots;
    int64_t desc[H3_SIG_DESC_KEYS];
    uint64_t desc_present;
    int64_t algo[H3_SIG_ALGO_KEYS];
    uint64_t algo_present;
    uint32_t nuids;
    int64_t *uids;
};

#define H3_SIG_SHAPES 8

struct h3_sig {
    char *path;
    char *model, *group, *torch, *cuda, *sm, *created, *cublaslt, *cudnn, *source;
    int sm_number;
    bool have_magic;
    uint32_t ncalls;
    uint32_t nvalues; /* the slots of every call: an instance's values */
    struct h3_sig_call *calls;
    /* The calls' parameter sizes, compared bytes and slots, in call order in
     * one block (h3_sig_pack): what the matcher reads at a launch lies
     * together, and the next call's after it. NULL: each its own. */
    void *arena;
    /* The m, n, k of its cuBLASLt calls that record all three (the first
     * H3_SIG_SHAPES): what a GEMM outside any attempt is compared with. */
    uint32_t nshapes;
    int64_t shapes[H3_SIG_SHAPES][3];
};

/* Parses a signature file's text.  Returns the signature, or NULL with one
 * message "PATH:LINE: problem" in err. */
struct h3_sig *h3_sig_parse(const char *text, size_t len, const char *path, char *err, size_t errlen);
void h3_sig_free(struct h3_sig *s);
/* The index of call `c`'s slot at (param, offset), or -1. */
int h3_sig_slot_at(const struct h3_sig_call *c, uint16_t param, uint16_t offset);
/* Writes the signature in canonical form (what h3sig prints). */
void h3_sig_print(FILE *f, const struct h3_sig *s);

/* ---- signatures.c: the loaded signatures ---- */

/* Loads every *.sig file of H3SHIM_SIGNATURES (a file or a directory; by
 * default the signatures/ directory beside the library's build or install
 * directory).  A malformed file is reported once and ignored. */
void h3_signatures_load(void);
/* Number of signatures loaded and files rejected. */
unsigned h3_signatures_count(void);
unsigned h3_signatures_rejected(void);
/* Signature `i` (< h3_signatures_count()). */
const struct h3_sig *h3_signatures_get(unsigned i);
/* Adds a signature learned in the process (learn.c); false when the list is
 * full.  The list only grows: a signature is never freed or moved, and the
 * count is published after the entry. */
bool h3_signatures_add(struct h3_sig *sig);
/* A fork child's lock is usable again. */
void h3_signatures_after_fork_child(void);

/* ---- match.c: recognising the signatures' groups (H3SHIM_MATCH=1) ---- */

/* Most pointer slots one signature call may have (the parser's bound). */
#define H3_SIG_MAX_CALL_SLOTS 512
/* Places an observed call in the signatures' groups: sets c->reason
 * (group_call, group_complete, no_match) and c->match_*. */
void h3_match_call(struct h3_call *c);
/* Whether this thread's matcher would compare a cuBLASLt call on `stream`
 * with a signature's (an attempt in progress expects one next, or a
 * signature begins with one): only then does it need the call's full
 * description. */
bool h3_match_wants_matmul(const void *stream);

/* One stats line per signature: instances complete and broken. */
void h3_match_print_stats(void (*line)(const char *fmt, ...));
void h3_match_reset(void);
/* Ends every group in progress on this thread: a call that submits work or
 * synchronises came between its calls (counted as a break, cause "foreign"). */
void h3_match_interrupt(void);
/* Whether call `c` of a thread with no attempt in progress can neither
 * begin one nor be counted by the matcher: a launch of a kernel found to be
 * no signature's first call, a library call no signature begins with (a
 * cuBLASLt GEMM without any signature's shape). */
bool h3_match_idle(const struct h3_call *c);
/* Gathers what the signatures begin with, for h3_match_idle: from the
 * initialisation, after the signatures are loaded, and again after the
 * learner added one (under its lock); each thread's matcher takes a new
 * signature at its next call. */
void h3_match_setup(void);
/* A cuBLASLt call's description values in h3_sig_desc_keys order, and its
 * algorithm's in h3_sig_algo_keys order. */
void h3_match_lt_values(const struct h3_lt_desc *lt, int64_t *desc, int64_t *algo);

/* ---- learn.c: learning the groups a thread repeats (H3SHIM_LEARN) ---- */

/* Whether call `c` is one the learner keeps (on, this thread still looking,
 * an identity it can learn and not one of a refused group): such a call is
 * not idle. */
bool h3_learn_wants(const struct h3_call *c);
/* Whether this thread still looks for groups (it then remembers cuBLASLt
 * descriptors as they are built). */
bool h3_learn_looking(void);
/* A launch's grid, block and dynamic shared memory, as its wrapper has them. */
#define H3_LAUNCH_DIMS 7
/* Call `c`, a launch, was found idle (h3_call_decide): when the learner
 * passed it by as a refused group's, its wrapper may forward the same launch
 * after the same two calls while `epoch` (h3_hot.idle_epoch + 1, read as it
 * began) holds (h3_learn_launch_refused). */
void h3_learn_fast_note(const struct h3_call *c, unsigned epoch);
/* Whether the launch of `handle` with `dims` is one h3_learn_fast_note noted
 * at this thread's last two calls, `epoch` the current one: if so, it is
 * passed by as the learner would (counted, the last two calls moved on),
 * and its wrapper may forward it unobserved where the thread's calls may go
 * so (hooks.c). */
bool h3_learn_launch_refused(const void *handle, const unsigned dims[H3_LAUNCH_DIMS], unsigned epoch);
/* Whether cuBLAS GEMM `c`, described (a probe will do), is a refused
 * group's after this thread's last two calls, its learner looking: if so,
 * it is passed by as the learner would, and its wrapper may forward it
 * unobserved where the thread's calls may go so (hooks.c). */
bool h3_learn_gemm_refused(const struct h3_call *c);
/* Whether the learner needs the full description of a GEMM of this shape:
 * this thread looks, and no refused group (another model's) had a GEMM of it. */
bool h3_learn_wants_gemm(int32_t transa, int64_t m, int64_t n, int64_t k);
/* A call that submits work or synchronises came: a group may run across it
 * (the first instance's first GEMM at a shape may follow cuDNN's and
 * cuBLAS's own set-up), but not one that has it at one place in every
 * instance. */
void h3_learn_sync(void);
/* Keeps a matched call, and learns a group when the call completes its
 * third instance in a row. */
void h3_learn_observe(struct h3_call *c);
/* What the thread's learner did with its last call it saw ("kept", or why
 * it was not kept), for the trace; NULL when it saw none since the last ask. */
const char *h3_learn_take_what(void);
void h3_learn_print_stats(void (*line)(const char *fmt, ...));
/* A fork child's locks are usable again. */
void h3_learn_after_fork_child(void);

/* ---- engine.c: deferral, flush and the ops (H3SHIM_ENGINE) ---- */

/* A launch the engine holds back: what it takes to issue it again. */
/* A thread's place in the frees its allocator reported (released.c). */
struct h3_free_mark {
    uint32_t serial; /* the thread's; 0: none */
    uint32_t n;      /* its frees before this point */
    uint64_t all;    /* every thread's frees before this point */
};

struct h3_deferred {
    struct h3_free_mark made; /* the thread's frees when it was held */
    enum h3_fn fn;
    const void *handle;
    dim3 grid, block;
    unsigned shmem;
    const void *stream;
    void **argv; /* pointing at the copied parameters */
};

/* ---- issue.c: launches issued as the program made them ---- */

/* Issues launches through the entry points they were made to, in order;
 * returns how many failed (counted, with one warning). */
unsigned h3_issue(const struct h3_deferred *calls, uint32_t n);
/* Issued launches that returned an error so far; and that count set to 0. */
unsigned long h3_issue_errors(void);
void h3_issue_reset(void);

/* ---- engine.c: holding back, flushing, running the ops ---- */

/* Chooses the ops and builds the per-signature group tables; after the
 * signatures are loaded (sets h3_hot.engine_on: matching on, H3SHIM_ENGINE
 * on and an op enabled). */
void h3_engine_setup(void);
/* Plans the ops in a signature learned in the process and, when it is the
 * H3 block (every op that marks the block plans a range in it, enabled or
 * not) and an enabled op plans a range in it, adds its group table (before
 * the signature is published); returns the ranges planned (0: nothing
 * added, and *why says why: the name of an op that marks the block and
 * plans nothing there, or a sentence; *resembles whether an op that marks
 * the block plans a range in it: a variant of the block the ops do not
 * take, not another model). */
unsigned h3_engine_learned(const struct h3_sig *sig, const char **why, bool *resembles);
/* The engine's part of deciding an observed call (hooks.c runs them in
 * order, the matcher between them).  h3_engine_begin: the capture edges,
 * the passthrough defaults; false when nothing is matched.  h3_engine_quiet:
 * whether the engine's side lets the call pass with no more look.
 * h3_engine_decide_call, after the matcher: flushes this thread's deferred
 * launches when the call does not continue their group, defers it when it
 * belongs to an op's group, and runs the op when the group is complete;
 * true when the call was deferred or executed by an op (the wrapper must
 * not forward it and returns success). */
bool h3_engine_begin(struct h3_call *c);
bool h3_engine_quiet(const struct h3_call *c);
bool h3_engine_decide_call(struct h3_call *c);
/* One stats block: deferred calls, op runs, flushes by reason. */
void h3_engine_print_stats(void (*line)(const char *fmt, ...));
void h3_engine_reset(void);
/* Whether a SYNC call may end a context (cudaDeviceReset, cuCtxDestroy, ...). */
bool h3_ends_context(enum h3_fn fn);
/* After a call the engine marked (c->context_edge): a primary context
 * released, the shim's things in it are forgotten if that ended it. */
void h3_engine_context_after(const struct h3_call *c);
/* Before such a call is forwarded: drops what the shim made in contexts (op_how "context_ending"). */
void h3_engine_context_ending(struct h3_call *c);
/* In a fork child: the parent's deferred launches are dropped, not issued. */
void h3_engine_after_fork_child(void);

/* ---- ops.c: the fused ops, their switches and counters ---- */

struct h3_op;

/* The calls of a signature's group that an op replaces, and what its
 * planner read from the signature for it.  `mask` has bit k set when call
 * first+k is the op's (0 from a planner: every launch of [first, last]);
 * several ops may share a group as long as their calls differ. */
struct h3_op_range {
    const struct h3_op *op;
    uint32_t first, last;
    uint64_t mask;
    bool anchored; /* `last` is the library call right after the group, not in `mask` */
    int64_t arg[8];
};

struct h3_op {
    const char *name;          /* as in ops.def, where its switch and validated SMs are */
    bool test_only;            /* the replay op: not part of H3SHIM_OPS=all */
    /* Plans only in the H3 block (its q/k norm and RoPE, its SwiGLU): a
     * group learned in the process is taken only where every such op plans
     * a range, so another model's groups are never fused (h3_engine_learned). */
    bool marks_block;
    /* Launches no kernel of its own (weight_cache: its copies are PyTorch's
     * own cast launch): verify mode does not compare it. */
    bool unverified;
    /* Finds the ranges of group [first, last] of `sig` that this op can
     * replace; returns how many it wrote to out[0..max). */
    unsigned (*plan)(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                     unsigned max);
    /* Runs the op in place of its calls; calls[k] is call first+k.  An
     * unanchored range runs where its first call was made, so what it
     * launches may read only what the calls before that one wrote.  An
     * anchored range runs after the rest of the group was issued, in place
     * of its calls and of `anchor`, the library call itself (whose status
     * the op stores in anchor->result).  Returns NULL when it ran, else why
     * not; then nothing was launched and the engine issues the calls
     * untouched (and forwards the anchor).  An anchored op's run must not
     * fail once its check passed. */
    const char *(*run)(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor);
    /* Anchored ops only: decides, where the range's first call was made and
     * before anything of the group is issued past it, whether run will run;
     * NULL or why not (then the calls are issued where they were made). */
    const char *(*check)(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor);
};

/* Chooses the ops from H3SHIM_OPS, H3SHIM_OP_* and H3SHIM_SM_ALLOW. */
void h3_ops_setup(void);
/* Number of ops and op `i`; whether it is enabled. */
unsigned h3_ops_count(void);
const struct h3_op *h3_ops_get(unsigned i);
bool h3_op_enabled(const struct h3_op *op);
/* Why `op` cannot run on the current device (SM outside the allowlist, or
 * not validated there and not asked for), or NULL. */
const char *h3_op_check(const struct h3_op *op);
/* Counts a fallback of `op` for `why` (a string literal). */
void h3_op_fallback(const struct h3_op *op, const char *why);
/* Counts a run of `op` that took its other way `how` (a string literal; the
 * stats print "op NAME ran with HOW N"). */
void h3_op_note(const struct h3_op *op, const char *how);
/* The `how` of this thread's last h3_op_note since the last call, or NULL (and forgets it). */
const char *h3_op_take_note(void);
/* The outputs ops run by this thread left out (the freed-outputs rule) since the last take. */
void h3_op_take_left_out(uint32_t *outputs, uint64_t *bytes);
/* Runs `op` on a complete range that h3_op_check() allowed; counts the
 * outcome.  Returns NULL when the op ran, else the fallback reason. */
const char *h3_op_run(const struct h3_op_range *r, const struct h3_sig *sig, const struct h3_deferred *calls,
                      struct h3_call *anchor);
/* The op's index (h3_ops_get), and whether it was let run on an SM where it
 * is not validated (asked for by name; h3_op_check said so). */
unsigned h3_op_index_of(const struct h3_op *op);
bool h3_op_runs_unvalidated(const struct h3_op *op);
#define H3_OPS_MAX 8

/* ---- verify.c: verify mode (H3SHIM_VERIFY) ---- */

/* Reads H3SHIM_VERIFY (h3_ops_setup). */
void h3_verify_setup(void);
/* Whether any enabled op is compared before it runs. */
bool h3_verify_on(void);
/* What h3_verify_begin and h3_op_run return for a run that went into
 * scratch: the range's calls are to be issued as made, then h3_verify_finish. */
extern const char h3_verify_running[];
/* Before unanchored range `r` of `sig` runs, `at` its first call: NULL when
 * it runs as usual (verification off or done), h3_verify_running when its
 * op is to run into scratch (h3_verify_outputs), else a fallback reason. */
const char *h3_verify_begin(const struct h3_op_range *r, const struct h3_sig *sig, const struct h3_deferred *at);
/* For ops, just before their kernel launches: moves each output *ptr[k]
 * (bytes[k] bytes, elements of elem[k], written by held launch by[k]; 0:
 * not written) into scratch while the thread's run is verified.  NULL, or
 * why not (then launch nothing). */
const char *h3_verify_outputs(uint64_t *const *ptr, const uint64_t *bytes, const unsigned *elem,
                              const struct h3_deferred *const *by, unsigned n);
/* Whether this thread's op run is one going into scratch. */
bool h3_verify_active(void);
/* After the op's run under h3_verify_running: h3_verify_running when it ran
 * into scratch, else its fallback reason. */
const char *h3_verify_ran(const char *why);
/* After range r's last call was issued (`last`): the comparison, on its stream. */
void h3_verify_finish(const struct h3_op_range *r, const struct h3_deferred *last);
/* Drops this thread's runs that went into scratch and were not compared. */
void h3_verify_abandon(void);
/* Frees (alive) or forgets the slots of `device` (-1: any) or `ctx`; how many. */
unsigned h3_verify_release(int device, const void *ctx, bool alive);
void h3_verify_print_stats(void (*line)(const char *fmt, ...));
void h3_verify_reset(void);
void h3_verify_after_fork_child(void);

/* ---- ops.c: anchored checks, and what planners read from a signature ---- */

/* An anchored range's check (its op's `check`), the fallback counted. */
const char *h3_op_check_range(const struct h3_op_range *r, const struct h3_deferred *calls,
                              struct h3_call *anchor);
/* For planners: the u32 of a launch's recorded bytes at (param, offset),
 * false if those bytes are not recorded (compared). */
bool h3_sig_u32(const struct h3_sig_call *c, uint16_t param, uint16_t offset, uint32_t *out);
/* An elementwise_kernel<128,4> closure's 2-D layout: element count, sizes,
 * and each operand's element size and row stride in bytes. */
struct h3_ew2d {
    uint32_t n, width, rows;
    uint32_t elem[3], row[3];
};
/* Reads the closure with OffsetCalculator<nargs> at offset 0 of param 1. */
bool h3_ew2d_read(const struct h3_sig_call *c, unsigned nargs, struct h3_ew2d *l);
/* Offset in param 1 of that closure's data pointers (after the OffsetCalculator). */
#define H3_EW2D_DATA(nargs) ((4 + 25 * 12 + 25 * (nargs) * 4 + 7) & ~7)

/* A launch of any rank's elementwise_kernel<128,4> closure: element count,
 * sizes per dim and byte strides per dim and operand (OffsetCalculator<nargs>
 * at offset 0 of param 1, dims <= 3). */
struct h3_ew {
    uint32_t n, dims;
    uint32_t size[3];
    uint32_t stride[3][3]; /* [dim][operand] */
};
bool h3_ew_read(const struct h3_sig_call *c, unsigned nargs, struct h3_ew *l);
/* Whether call `c` launches one of PyTorch's own kernels (namespace at::native):
 * the planners take no other, whatever its name holds. */
bool h3_sig_is_aten(const struct h3_sig_call *c);
/* Whether the `n` bytes (u32s) recorded at (param, offset) of launch `c` are `want`. */
bool h3_sig_bytes_are(const struct h3_sig_call *c, uint16_t param, uint16_t offset, const void *want, unsigned n);
bool h3_sig_u32s_are(const struct h3_sig_call *c, uint16_t param, uint16_t offset, const uint32_t *want, unsigned n);
/* The buffer slot (param, offset) of call `call` points into: the first slot
 * its references lead to (*rc, *rs) and the byte offset from it; false when
 * the call has no slot there. */
bool h3_sig_root(const struct h3_sig *sig, uint32_t call, uint16_t param, uint16_t offset, uint32_t *rc,
                 uint32_t *rs, int64_t *delta);
/* A buffer's bytes [lo, hi) on the device. */
struct h3_span {
    uint64_t lo, hi;
};
static inline bool h3_spans_overlap(struct h3_span a, struct h3_span b)
{
    return a.lo < b.hi && b.lo < a.hi;
}

/* ---- ops.c: the freed-outputs rule ---- */

/* Whether fused ops leave out outputs the allocator freed: H3SHIM_SKIP_RELEASED
 * (unset: on where validated) and a report seen from the allocator.  While
 * it is on, the engine runs a complete group at the thread's next call. */
bool h3_released_on(void);
/* Of outputs out[0..n) of the group being run, output i made by the held
 * launch by[i], those nothing can read: a later one overlaps it
 * (h3_outputs_freed), or a free this thread's allocator reported after its
 * launch was held and before the first later held launch that may read it
 * was made does (h3_op_later; counted as left out).  A bit each. */
uint64_t h3_outputs_dead(const struct h3_span *out, const struct h3_deferred *const *by, unsigned n);
/* The first held launch after the first call of the range about to run that
 * is not one of the range's own (engine.c, before h3_op_run; NULL: none).  It
 * was made before the op runs and may read any output the op would leave out
 * (a weight cast reads its input through a word that is no slot, an
 * unclaimed launch through anything): an output freed after it was made is
 * written. */
void h3_op_later(const struct h3_deferred *next);
/* "freed_between" when an output the op writes (out[i], made by by[i], not
 * in `dead`) lies after a held launch that is not the range's own (h3_op_later)
 * and memory in it may have been freed between the two (released.c): written
 * ahead of that launch, it could be memory the launch reads or writes.  NULL
 * when every such output is clear. */
const char *h3_outputs_reused(const struct h3_span *out, const struct h3_deferred *const *by, unsigned n,
                              uint64_t dead);
/* For the stats: on, off, or why not. */
const char *h3_released_state(void);
/* For an anchored op's run: launch `d` of the group being run, which the op
 * replaced, writes `out`, a buffer the program may still read (autocast's
 * cast cache, autograd or a hook may keep it).  The write is owed: the
 * engine takes it after the run (h3_op_take_owed) and issues it, as the
 * program made it, at the thread's next observed call (or a flush) unless
 * the allocator reported `out` freed first (released.c), and at once when
 * that cannot be known. */
#define H3_OWED_MAX 8
struct h3_op_owed {
    const struct h3_deferred *d;
    struct h3_span out;
};
void h3_op_owe(const struct h3_deferred *d, struct h3_span out);
/* The writes the op run last on this thread owes (at most max), and forgets them. */
unsigned h3_op_take_owed(struct h3_op_owed *out, unsigned max);

/* ---- c10_report.c: PyTorch's caching allocator's reports, interposed ---- */

/* Finds the real report function in libc10.so, if it is loaded (at initialisation). */
void h3_c10_resolve(void);

/* ---- released.c: what the caching allocator told ---- */

/* A report about CUDA memory has come (c10_report.c), and whether one has. */
void h3_released_note_seen(void);
bool h3_released_seen(void);
/* The allocator handed out [ptr, ptr + size), or took back the block at ptr. */
void h3_released_block_add(uint64_t ptr, uint64_t size);
void h3_released_block_remove(uint64_t ptr);
/* In a fork child: the block table's lock may have been held by a thread the child lacks. */
void h3_released_after_fork_child(void);
/* The block of PyTorch's caching allocator that holds `addr`, as its reports
 * told ([*lo, *hi)); false when none is known to (no report, or the table
 * of live blocks overflowed). */
bool h3_released_block(uint64_t addr, uint64_t *lo, uint64_t *hi);
/* Whether `addr` is device memory for certain: the start of a block the
 * allocator reported live, or inside one this thread's allocator reported
 * freed lately (constant work: no scan of the live blocks). */
bool h3_released_device_address(uint64_t addr);
/* A free of [lo, hi) that this thread's allocator reported. */
void h3_released_note_free(uint64_t lo, uint64_t hi);
/* This thread's place in its frees now (struct h3_free_mark), and whether
 * a free it noted after `mark` overlaps `s` (false for another thread's
 * mark, or one older than the thread's ring of recent frees). */
struct h3_free_mark h3_released_mark(void);
bool h3_released_since(struct h3_free_mark mark, struct h3_span s);
/* Whether this thread's allocator reported memory in `s` freed between
 * marks `a` and `b` (a before b): 1 or 0, or -1 when those frees are no
 * longer (or never were) kept. */
int h3_released_between(struct h3_free_mark a, struct h3_free_mark b, struct h3_span s);
/* Whether memory in `s` may have been freed, on any thread, between marks
 * `a` and `b` (a before b): false only when every free noted in between is
 * still kept and none overlaps `s`; true too when no report has come (an
 * allocator that tells nothing may reuse memory unseen). */
bool h3_released_maybe_between(struct h3_free_mark a, struct h3_free_mark b, struct h3_span s);

/* ---- op_norm.c ---- */

/* PyTorch's FP32 RMSNorm launch (with or without weight; no beta, no mean;
 * 32x4 threads) and its vectorized float16_copy. */
bool h3_sig_is_rmsnorm(const struct h3_sig_call *c, bool weight);
bool h3_sig_is_half_cast(const struct h3_sig_call *c);

/* ---- ops.c: the op table, counts ---- */

/* Calls an op replaces in range `r`: its launches, and its anchor. */
static inline unsigned h3_op_range_calls(const struct h3_op_range *r)
{
    return (unsigned)__builtin_popcountll(r->mask) + (r->anchored ? 1u : 0u);
}
/* With stats: the host time of every op's checks and runs so far, less the calls they made. */
uint64_t h3_ops_own_ns(void);
void h3_ops_print_stats(void (*line)(const char *fmt, ...));
void h3_ops_reset(void);

extern const struct h3_op h3_op_replay; /* the test op (H3SHIM_OP_REPLAY), built into ops.c */
#define H3_OP(name, sw, validated, help) extern const struct h3_op h3_op_##name;
#include "ops.def"
#undef H3_OP

/* ---- graphs.c: which CUDA graphs were captured under the shim ---- */

/*
 * What a capture holds that weight_cache must act on when its graph is
 * launched: the copies its GEMMs read, and everything its calls may write
 * (every 8-byte word of its launches' parameters, library outputs, copy and
 * memset destinations), or `all` when something in it may write anywhere.
 * Shared by a capture, the graph it made and the executable graphs
 * instantiated from that graph; owned by graphs.c.
 */
struct h3_grec {
    unsigned refs;
    bool all;
    uint32_t nreads, nwords, nranges;
    uint32_t capreads, capwords, capranges;
    uint32_t *reads; /* weight_cache entry indices */
    uint64_t *words;
    uint64_t (*ranges)[2];
};

/* At cudaStreamBeginCapture on `stream`, before it is forwarded. */
void h3_graphs_begin(const void *stream, bool into_graph);
/* The record of the capture `stream` takes part in, or NULL when it is not
 * capturing (or graph tracking is off).  Locks the table: pair with
 * h3_graphs_unlock(), whatever it returned. */
struct h3_grec *h3_graphs_capture_lock(const void *stream);
/* Whether `stream` is being captured into a CUDA graph (unknown counts as
 * captured): no while no capture is open in the process (h3_captures_*),
 * else the driver's answer. */
bool h3_stream_capturing(const void *stream);
/* What a call does to stream capture: nothing, begin one (into a new graph
 * or into an existing one), or end one. */
enum h3_capture_edge { H3_CAPTURE_NONE, H3_CAPTURE_BEGIN, H3_CAPTURE_BEGIN_INTO_GRAPH, H3_CAPTURE_END };
enum h3_capture_edge h3_capture_edge_of(enum h3_fn fn);
/* Whether `fn` launches a CUDA graph. */
bool h3_is_graph_launch(enum h3_fn fn);
/* Whether no capture is open anywhere in the process, as far as the shim
 * can tell (then a query that global-mode capture forbids is safe). */
bool h3_captures_none(void);
/* Around a call of the shim's that a capture in global mode forbids (an
 * allocation, a memory or event query, a synchronisation, a module load):
 * false when a capture is open (then do without it); a capture that
 * begins meanwhile waits for h3_unsafe_end. */
bool h3_unsafe_begin(void);
void h3_unsafe_end(void);
/* Before a synchronising call is forwarded, and after (its result set):
 * counts the captures its begin or end opens or closes. */
void h3_captures_before(struct h3_call *c);
void h3_captures_after(const struct h3_call *c);
/* The record of executable graph `exec` (NULL: not captured under the
 * shim, or changed since), locked the same way. */
struct h3_grec *h3_graphs_exec_lock(const void *exec);
void h3_graphs_unlock(void);
/* Append to a locked record (out of memory: the record becomes `all`, its reads unknown). */
void h3_grec_read(struct h3_grec *r, uint32_t entry);
void h3_grec_word(struct h3_grec *r, uint64_t word);
void h3_grec_range(struct h3_grec *r, uint64_t lo, uint64_t hi);
/* A graph launched inside the capture `stream` takes part in: that capture's
 * record gets everything `exec`'s holds (all, if `exec` is not known). */
void h3_graphs_merge_exec(const void *stream, const void *exec);
/* At cudaStreamEndCapture on `stream`, before it is forwarded. */
void h3_graphs_end(const void *stream);
/* After a graph was instantiated, destroyed or changed (CONFIG hooks). */
/* `pexec` points at the executable graph an instantiation wrote (a
 * cudaGraphExec_t * or CUgraphExec *). */
void h3_graphs_instantiated_at(const void *pexec, const void *graph);
void h3_graphs_exec_gone(const void *exec);
void h3_graphs_graph_gone(const void *graph);
void h3_graphs_graphs_changed(void);
/* (h3_hot.graphs_on: weight_cache enabled and H3SHIM_WEIGHT_CACHE_GRAPHS not
 * 0; a captured GEMM reads copies only where h3_wcache_graphs_here.) */
void h3_graphs_reset(void);
/* Whether any capture, graph or executable graph is recorded (one may name
 * weight copies by their index). */
bool h3_graphs_live(void);
/* Sets bit e of `bits` (nbits of them) for every weight_cache entry e a
 * recorded capture, graph or executable graph reads.  Takes the graphs'
 * lock: not with weight_cache's held. */
void h3_graphs_reads(uint64_t *bits, unsigned nbits);
/* In a fork child: the lock may have been held by a thread the child lacks. */
void h3_graphs_after_fork_child(void);

/* ---- op_weight_cache.c ---- */

/* Drops the cached copies whose source observed call `c` may write; with
 * graphs, tracks captures and acts at graph launches (noted in c->op_how). */
void h3_wcache_observe(struct h3_call *c);
void h3_wcache_print_stats(void (*line)(const char *fmt, ...));
/* H3SHIM_WEIGHT_CACHE_GRAPHS: 1, 0, or -1 when unset (a bad value warns and counts as unset). */
int h3_wcache_graphs_switch(void);
/* Forgets the copies made on `device` (-1: any) or in context `ctx` (NULL:
 * any), freeing their memory and events first when `free_memory` (their
 * context is still alive), else leaving them (it is gone, and its memory
 * with it).  Returns how many it forgot. */
unsigned h3_wcache_release(int device, const void *ctx, bool free_memory);
/* CUDA memory at `ptr` can be written by other processes (its IPC handle
 * was made, or it is another process's, opened): the copies of sources in
 * its allocation are never used again, and none is made there; with
 * `pptr`, the pointer is read from where the call wrote it. */
void h3_wcache_shared(uint64_t ptr);
void h3_wcache_shared_at(const void *pptr);
/* The allocator freed [lo, hi) (released.c): a copy whose source it held
 * is never used again, and its memory goes at the next safe point. */
void h3_wcache_source_freed(uint64_t lo, uint64_t hi);
/* In a fork child: the cache's lock may have been held by a thread the child lacks. */
void h3_wcache_after_fork_child(void);

/* ---- kernels.c: the embedded kernels ---- */

/* Bytes of the embedded fatbin (0: built without nvcc). */
size_t h3_kernels_image_size(void);
/* Kernel `name` of the embedded fatbin in the current context, loading the
 * module at first use (never while `stream` is being captured); NULL with
 * *why set (a fallback reason). */
CUfunction h3_kernels_function(const char *name, const void *stream, const char **why);
/* Forgets the loaded modules and functions (their context may be ending); loaded again at need. */
void h3_kernels_forget(void);
/* Launches kernel `name` of the embedded fatbin with `args` on the stream of
 * the held launch `like`, through the driver entry point of its kind
 * (per-thread default stream or not); NULL, or a fallback reason when
 * nothing was launched ("launch_failed": the launch returned an error). */
const char *h3_kernels_launch(const char *name, const struct h3_deferred *like, const unsigned grid[3],
                              const unsigned block[3], void **args);
/* Launches kernel `name`, of 32x4 threads per block, cooperatively (every
 * block resident at once, so that it may wait for the whole grid) over
 * `rows` rows, each block taking rows blockIdx.x, + gridDim.x, ... and
 * `row_bytes` of dynamic shared memory per row it takes: the fewest rows per
 * block that fit on the device (at most 48 KiB a block).  NULL, or a
 * fallback reason when nothing was launched ("too_many_rows",
 * "no_cooperative_launch", "launch_failed", or h3_kernels_function's). */
const char *h3_kernels_launch_staged(const char *name, const struct h3_deferred *like, unsigned rows,
                                     unsigned row_bytes, void **args);
/* The current device's SM count (1 when the driver cannot say): grids sized to the device. */
unsigned h3_kernels_sm_count(void);
/* The current device's compute capability as major*10+minor, -1 unknown. */
int h3_kernels_sm(void);



/* ---- lt_shadow.c: cuBLASLt descriptors and layouts remembered as they are built ---- */

/* A cuBLASLt attribute getter, as the three of them are typed but for the object. */
typedef cublasStatus_t (*h3_lt_getter)(const void *obj, int attr, void *buf, size_t size, size_t *written);
/* A value of 2, 4 or 8 bytes, sign-extended. */
static inline int64_t h3_lt_widen(const void *buf, size_t size)
{
    if (size == 2) {
        int16_t v;
        memcpy(&v, buf, 2);
        return v;
    }
    if (size == 4) {
        int32_t v;
        memcpy(&v, buf, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, buf, 8);
    return v;
}
/* A pointer attribute as h3_lt_int reads it: -1 (unread or unset) is none. */
static inline const void *h3_lt_pointer(int64_t v)
{
    return v == -1 ? NULL : (const void *)(uintptr_t)v;
}
/* One integer attribute of `size` bytes read through `getter`, widened;
 * -1 when it cannot be read. */
static inline int64_t h3_lt_int(void *getter, const void *obj, int attr, size_t size)
{
    uint64_t v = 0;
    size_t written = 0;
    if (getter == NULL || obj == NULL || ((h3_lt_getter)getter)(obj, attr, &v, size, &written) != CUBLAS_STATUS_SUCCESS)
        return -1;
    return h3_lt_widen(&v, size);
}
/* Whether a descriptor or layout that code at `caller` creates now would be
 * remembered (the wrapper forwards at once when not). */
bool h3_lt_create_wanted(const void *caller);
/* Whether configuration call `fn` has anything for lt_shadow.c to remember:
 * 1 or 0, or -1 when `fn` is none of its entry points.  Inline, so that each
 * wrapper's constant `fn` folds it to its one test: a Create only while this
 * thread's matcher expects a GEMM, anything else only while a handle is
 * remembered. */
static inline int h3_lt_config_wanted(enum h3_fn fn, const void *caller)
{
    switch (fn) {
    case H3_FN_cublasLtMatmulDescCreate:
    case H3_FN_cublasLtMatrixLayoutCreate:
        return h3_hot.lt_remember && h3_thread_wants_gemm() && h3_lt_create_wanted(caller);
    case H3_FN_cublasLtMatmulDescSetAttribute:
    case H3_FN_cublasLtMatmulDescDestroy:
    case H3_FN_cublasLtMatmulDescInit_internal:
    case H3_FN_cublasLtMatrixLayoutSetAttribute:
    case H3_FN_cublasLtMatrixLayoutDestroy:
    case H3_FN_cublasLtMatrixLayoutInit_internal:
        return atomic_load_explicit(&h3_hot.lt_live, memory_order_relaxed) != 0;
    default:
        return -1;
    }
}
/* A descriptor or layout created by the code at `caller` (the wrapper's return address). */
void h3_lt_note_desc_create(const cublasLtMatmulDesc_t *desc, int compute, int scale, const void *caller);
void h3_lt_note_layout_create(const cublasLtMatrixLayout_t *layout, int type, uint64_t rows, uint64_t cols, int64_t ld,
                              const void *caller);
void h3_lt_note_desc_set(cublasLtMatmulDesc_t desc, int attr, const void *buf, size_t size);
void h3_lt_note_layout_set(cublasLtMatrixLayout_t layout, int attr, const void *buf, size_t size);
/* A handle destroyed, or a buffer initialised as one (it is not remembered). */
void h3_lt_note_gone(const void *handle);
#define h3_lt_note_init(handle, size) h3_lt_note_gone(handle)
/* Fills lt's descriptor and layout attributes (its handles set) and the
 * algorithm's config: from what was remembered, else read. */
void h3_lt_describe(struct h3_lt_desc *lt, const cublasLtMatmulAlgo_t *algo);
void h3_lt_print_stats(void (*line)(const char *fmt, ...));
void h3_lt_after_fork_child(void);
/* dlsym of a cuBLASLt function on a library handle, from code at `caller`:
 * calls made through what it returns bypass the wrappers, so descriptors
 * that the object holding `caller` creates are never remembered (cuDNN's
 * precompiled engines look cuBLASLt's descriptor functions up for their
 * own).  Safe before h3_init(). */
void h3_lt_note_lookup(const char *name, const void *caller);

/* ---- cudnn.c ---- */

/* Remembers a variant pack's unique ids, data pointers or workspace as
 * cudnnBackendSetAttribute sets them (other attributes are ignored). */
void h3_cudnn_note_set(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t attr,
                       cudnnBackendAttributeType_t type, int64_t count, const void *elements);
/* Fills `d` with what was set on variant pack `pack`; false if unknown. */
bool h3_cudnn_pack_get(cudnnBackendDescriptor_t pack, struct h3_cudnn_desc *d);

/* 64-bit FNV-1a, the fingerprint hash. */
static inline uint64_t h3_hash(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define H3_HASH_SEED 0xcbf29ce484222325ull

/* ---- record.c: the kernels seen ---- */

/* The stats' kernel table: calls per kernel name, most first; and its counts set to 0 (a fork child). */
void h3_record_print_kernels(void (*line)(const char *fmt, ...));
void h3_record_reset_counts(void);

/* ---- hooks.c: the exported wrappers ---- */

/* Our wrapper for hooked function `fn` (its exported address). */
void *h3_driver_wrapper(enum h3_fn fn);

/* ---- driver.c ---- */

/* After a real cuGetProcAddress succeeded, replaces *pfn by our wrapper when
 * it is the real function of an interposed driver entry point. */
void h3_driver_fix_procaddr(const struct h3_call *c, CUresult r);
/* The interposed answer to dlsym(handle, name), or NULL to forward. */
void *h3_driver_dlsym_answer(void *handle, const char *name, const void *caller);

/* ---- trace.c ---- */

/* Opens the trace from h3_config; a failure leaves tracing off with one
 * warning.  Returns whether tracing is on. */
bool h3_trace_open(void);
/* Emits one record for a completed call (one write, never torn). */
void h3_trace_emit(const struct h3_call *c);
/* Completes the file (closing bracket of the Chrome format). */
void h3_trace_close(void);
/* In a fork child: reopens the trace when its path depends on the pid. */
void h3_trace_after_fork_child(void);
/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t h3_now_ns(void);
/* This thread's kernel thread id (cached). */
int h3_tid(void);

/* ---- backtrace.c ---- */

/* Fills up to `max` return addresses of the calling thread; returns the
 * count, 0 when libunwind is unavailable (reported once). */
int h3_backtrace(void **frames, int max);

/* ---- stats.c ---- */

void h3_stats_count(const struct h3_call *c);
/* A call its wrapper forwarded unobserved, its thread idle (hooks.c). */
void h3_stats_idle_fast(enum h3_fn fn);
/* Why a launch that h3_call_decide found idle was not forwarded by its
 * wrapper (hooks.c): what to look at where a thread's idle launches cost. */
enum h3_idle_slow {
    H3_SLOW_WATCHED, H3_SLOW_UNNOTED, H3_SLOW_EPOCH, H3_SLOW_TABLE, H3_SLOW_LOOKING, H3_SLOW_BY_CONFIG, H3_SLOW_KINDS
};
void h3_stats_idle_slow(enum h3_idle_slow why);
/* Adds one observed call's host time in the shim before forwarding (call
 * record, matcher, engine, and any op it ran). */
/* One observed call: `own_ns` of the shim's own host time before it was
 * forwarded, `forward_ns` spent in real calls the shim made meanwhile on the
 * application's behalf (h3_forward_begin/end). */
void h3_stats_shim_time(enum h3_fn fn, uint64_t own_ns, uint64_t describe_ns, uint64_t forward_ns,
                        uint64_t reads, const uint64_t part_ns[H3_PARTS]);
/* With stats: the clock for the shim's timing of its own parts.  Each read
 * is counted on the thread, so that the stats can take the reads' own cost
 * out of the shim's time (the call's first and last reads, and those
 * around real calls, are left in: the figure stays an upper bound). */
static inline uint64_t h3_stats_clock(void)
{
    h3_thread.stats_reads++;
    return h3_now_ns();
}
/* With stats: call c's part `part` ends now; it began where the last part
 * ended (c->mark_ns), so consecutive parts cost one clock read each.  Kept
 * in the call, and added to the totals once it is decided, outside the time
 * it counts. */
static inline void h3_stats_part_end(struct h3_call *c, enum h3_part part)
{
    uint64_t now = h3_stats_clock();
    c->part_ns[part] += now - c->mark_ns;
    c->mark_ns = now;
}
/* With stats: one-off work inside the shim's own time, counted apart so
 * that the steady cost per call can be told from it. */
enum h3_one_off { H3_ONE_OFF_KERNEL, H3_ONE_OFF_COPY, H3_ONE_OFF_MODULE, H3_ONE_OFF_KINDS };
void h3_stats_one_off(enum h3_one_off kind, uint64_t ns);
/* With stats: one configuration call's own time (what the shim remembered
 * of it, one clock read in it), counted in the shim's own time but not as
 * an observed call. */
void h3_stats_config_time(enum h3_fn fn, uint64_t ns);
/* Exported: the shim's own host time, observed calls and time issuing for the
 * application so far (H3SHIM_STATS=1); 0, or -1 when not timed. */
int h3shim_host_time(unsigned long long *own_ns, unsigned long long *calls, unsigned long long *issuing_ns);
/* Exported, for measuring the shim inside one process: non-zero pauses
 * observation (every launch, library and sync call forwarded as with the
 * shim disabled; configuration calls are still remembered), zero resumes.
 * 0, or -1 with nothing changed: pausing while launches are held, a
 * capture is open, weight copies exist or a trace is written, or the shim
 * is not active. */
int h3shim_pause(int on);

/* Host time, during the current observed call of this thread, of the real
 * calls the shim made for the application: held launches issued, ops'
 * kernels and library calls.  That time replaces the application's own
 * calls, so the stats keep it apart from the shim's overhead. */

/* Brackets a real call the shim makes for the application: nested (the
 * wrappers forward it untouched) and timed when the stats are on. */
static inline uint64_t h3_forward_begin(void)
{
    h3_thread.depth++;
    return h3_hot.stats ? h3_now_ns() : 0;
}

/* With stats: host time since t0 (h3_now_ns) less the real calls made for
 * the application meanwhile (h3_thread.forward_ns was forward0 at t0). */
static inline uint64_t h3_own_ns_since(uint64_t t0, uint64_t forward0)
{
    return h3_stats_clock() - t0 - (h3_thread.forward_ns - forward0);
}

static inline void h3_forward_end(uint64_t t0)
{
    if (t0 != 0)
        h3_thread.forward_ns += h3_now_ns() - t0;
    h3_thread.depth--;
}
/* Prints the table to stderr (called at exit when H3SHIM_STATS=1). */
/* One stats line ("h3shim: PID stats: ..." on stderr), for every subsystem's printer. */
void h3_stats_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The stats' own parts of the table at exit: calls per API; the shim's own
 * host time (ops_ns: the ops' checks and runs, h3_ops_own_ns); decisions. */
void h3_stats_print_calls(void);
void h3_stats_print_time(uint64_t ops_ns);
void h3_stats_print_decisions(void);
void h3_stats_reset(void);

/* ---- fork.c ---- */

void h3_fork_setup(void);

/* ---- json.c: a small bounded string builder ---- */

struct h3_buf {
    char *p;
    size_t len, cap;
    bool overflow;
};
void h3_buf_putc(struct h3_buf *b, char ch);
void h3_buf_puts(struct h3_buf *b, const char *s);
void h3_buf_printf(struct h3_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends `s` as a JSON string literal, escaped. */
void h3_buf_json_str(struct h3_buf *b, const char *s);

#endif /* H3SHIM_H */
