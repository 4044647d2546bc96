/*
 * Call records: what an intercepted call is (kernel, launch configuration,
 * parameter layout, library description, fingerprint).
 *
 * Owns: the process-wide kernel cache (name and parameter layout per kernel
 * handle, looked up once with cuKernelGetName / cuFuncGetName and
 * cuKernelGetParamInfo / cuFuncGetParamInfo) and the h3_desc_* describers
 * named in hooks.def.
 * Invariants: describers only read; they call NVIDIA getters that neither
 * submit work nor synchronise, and never fail the call: what cannot be read
 * is left empty.  The cache is lock-free for readers; an entry, once
 * published, never changes except for its call counter and the learner's
 * copy of refused triples (learn.c, atomics only added to).
 * Never: touches device memory, allocates device memory, or synchronises.
 */
#include "h3shim.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define H3_KCACHE_SLOTS 8192u
#define H3_MAX_PARAMS 256u

static _Atomic(struct h3_kernel *) h3_kcache[H3_KCACHE_SLOTS];

/* Real getters, found once in the loaded libraries. */
#define H3_GETTER(lib, type, name)                                               \
    static type h3_get_##name(void)                                              \
    {                                                                            \
        static _Atomic(void *) p;                                                \
        return (type)h3_resolve_cached(H3_LIB_##lib, #name, &p);                 \
    }
H3_GETTER(CUDA, PFN_cuKernelGetName_v12030, cuKernelGetName)
H3_GETTER(CUDA, PFN_cuFuncGetName_v12030, cuFuncGetName)
H3_GETTER(CUDA, PFN_cuKernelGetParamInfo_v12040, cuKernelGetParamInfo)
H3_GETTER(CUDA, PFN_cuFuncGetParamInfo_v12040, cuFuncGetParamInfo)
H3_GETTER(CUDA, PFN_cuCtxGetDevice_v2000, cuCtxGetDevice)
H3_GETTER(CUDART, __typeof__(&cudaGetFuncBySymbol), cudaGetFuncBySymbol)
H3_GETTER(CUBLAS, __typeof__(&cublasGetStream_v2), cublasGetStream_v2)
H3_GETTER(CUDNN, __typeof__(&cudnnGetStream), cudnnGetStream)
#undef H3_GETTER

/* The device of the current context, for the trace. */
/* The current device, for the trace only. */
static void h3_call_device(struct h3_call *c)
{
    if (!h3_hot.trace_on)
        return;
    PFN_cuCtxGetDevice_v2000 gd = h3_get_cuCtxGetDevice();
    CUdevice dev;
    if (gd != NULL && gd(&dev) == CUDA_SUCCESS)
        c->device = (int)dev;
}

enum h3_handle_kind { H3_HANDLE_KERNEL, H3_HANDLE_FUNC, H3_HANDLE_HOST_STUB };

/* __cxa_demangle, when the process has a C++ runtime loaded. */
typedef char *(*h3_demangle_fn)(const char *, char *, size_t *, int *);

static char *h3_demangle(const char *mangled)
{
    static _Atomic(void *) fnp;
    static atomic_int looked;
    if (!atomic_load_explicit(&looked, memory_order_acquire)) {
        /* PyTorch loads the C++ runtime into a local scope: ask its copy. */
        void *f = h3_real_dlsym(RTLD_DEFAULT, "__cxa_demangle");
        void *cxx = f == NULL ? dlopen("libstdc++.so.6", RTLD_NOLOAD | RTLD_LAZY) : NULL;
        if (cxx != NULL)
            f = h3_real_dlsym(cxx, "__cxa_demangle");
        atomic_store_explicit(&fnp, f, memory_order_release);
        atomic_store_explicit(&looked, 1, memory_order_release);
    }
    h3_demangle_fn f = (h3_demangle_fn)atomic_load_explicit(&fnp, memory_order_acquire);
    if (f == NULL || mangled == NULL || strncmp(mangled, "_Z", 2) != 0)
        return NULL;
    int status = 0;
    return f(mangled, NULL, NULL, &status);
}

/* Builds the cache entry of a kernel handle; NULL on allocation failure. */
static struct h3_kernel *h3_kernel_build(const void *key, enum h3_handle_kind kind)
{
    const char *name = NULL;
    CUfunction func = NULL;
    if (kind == H3_HANDLE_HOST_STUB) {
        __typeof__(&cudaGetFuncBySymbol) get = h3_get_cudaGetFuncBySymbol();
        cudaFunction_t f = NULL;
        if (get != NULL && get(&f, key) == cudaSuccess)
            func = (CUfunction)f;
    } else if (kind == H3_HANDLE_FUNC) {
        func = (CUfunction)key;
    }
    uint16_t sizes[H3_MAX_PARAMS];
    uint32_t n = 0, bytes = 0;
    bool asked = false; /* the driver was asked for the parameters (else they are unknown) */
    if (kind == H3_HANDLE_KERNEL) {
        PFN_cuKernelGetName_v12030 gn = h3_get_cuKernelGetName();
        PFN_cuKernelGetParamInfo_v12040 gp = h3_get_cuKernelGetParamInfo();
        if (gn != NULL && gn(&name, (CUkernel)key) != CUDA_SUCCESS)
            name = NULL;
        size_t off, size;
        asked = gp != NULL;
        while (gp != NULL && n < H3_MAX_PARAMS && gp((CUkernel)key, n, &off, &size) == CUDA_SUCCESS) {
            sizes[n++] = (uint16_t)size;
            bytes = (uint32_t)(off + size);
        }
    } else if (func != NULL) {
        PFN_cuFuncGetName_v12030 gn = h3_get_cuFuncGetName();
        PFN_cuFuncGetParamInfo_v12040 gp = h3_get_cuFuncGetParamInfo();
        if (gn != NULL && gn(&name, func) != CUDA_SUCCESS)
            name = NULL;
        size_t off, size;
        asked = gp != NULL;
        while (gp != NULL && n < H3_MAX_PARAMS && gp(func, n, &off, &size) == CUDA_SUCCESS) {
            sizes[n++] = (uint16_t)size;
            bytes = (uint32_t)(off + size);
        }
    }
    /* The sizes follow the entry in its allocation: a launch reads both. */
    size_t bytes_all = (sizeof(struct h3_kernel) + n * sizeof(uint16_t) + 127) & ~(size_t)127;
    struct h3_kernel *k = aligned_alloc(128, bytes_all);
    if (k == NULL)
        return NULL;
    memset(k, 0, bytes_all);
    k->key = key;
    k->name = strdup(name != NULL ? name : "?");
    k->name_hash = k->name != NULL ? h3_hash(H3_HASH_SEED, k->name, strlen(k->name)) : H3_HASH_SEED;
    char *demangled = h3_demangle(name);
    k->pretty = demangled != NULL ? demangled : k->name;
    k->writes_unseen = k->name != NULL && strstr(k->name, "nccl") != NULL;
    /* at::native's CatArrayBatchedCopy kernels (all variants): (output, the
     * inputs' metadata by value, the output's sizes, the dimension, a stride);
     * they store through the output alone (aten/src/ATen/native/cuda/Shape.cu). */
    k->writes_first_param_only = k->name != NULL && strncmp(k->name, "_ZN2at6native", 13) == 0 &&
                                 strstr(k->name, "CatArrayBatchedCopy") != NULL;
    k->params_known = asked && n < H3_MAX_PARAMS;
    k->learnable = k->params_known && k->name != NULL && strcmp(k->name, "?") != 0;
    k->nparams = n;
    k->param_bytes = bytes;
    if (n > 0)
        k->param_sizes = memcpy(k->sizes, sizes, n * sizeof(uint16_t));
    return k;
}

static void h3_kernel_free(struct h3_kernel *k)
{
    if (k->pretty != k->name)
        free((void *)k->pretty);
    free((void *)k->name);
    free(k);
}

/* Bumped by every module or library unload, and around every call that may
 * end a context (hooks.c): its handles may be given to another module's
 * kernels. */
static atomic_uint h3_kernels_generation;

void h3_record_modules_changed(void)
{
    atomic_fetch_add_explicit(&h3_kernels_generation, 1, memory_order_release);
    atomic_fetch_add(&h3_hot.idle_epoch, 1); /* a handle may name another kernel now */
}

/* Whether two descriptions describe the same kernel (name and parameters). */
static bool h3_kernel_same(const struct h3_kernel *a, const struct h3_kernel *b)
{
    return strcmp(a->name, b->name) == 0 && a->nparams == b->nparams && a->params_known == b->params_known &&
           (a->nparams == 0 || memcmp(a->param_sizes, b->param_sizes, a->nparams * sizeof(uint16_t)) == 0);
}

/* Entry `k` of `slot` was described before a module unload: described again,
 * it is kept when it is the same kernel, else replaced (the old entry is
 * left to threads that may still read it: one per handle reused). */
static struct h3_kernel *h3_kernel_recheck(unsigned slot, struct h3_kernel *k, enum h3_handle_kind kind,
                                           unsigned gen)
{
    struct h3_kernel *fresh = h3_kernel_build(k->key, kind);
    if (fresh == NULL)
        return k;
    if (h3_kernel_same(fresh, k)) {
        h3_kernel_free(fresh);
        atomic_store_explicit(&k->generation, gen, memory_order_release);
        return k;
    }
    atomic_store_explicit(&fresh->generation, gen, memory_order_relaxed);
    struct h3_kernel *expected = k;
    if (atomic_compare_exchange_strong_explicit(&h3_kcache[slot], &expected, fresh, memory_order_acq_rel,
                                                memory_order_acquire))
        return fresh;
    h3_kernel_free(fresh);
    return expected;
}

/* The cached description of a kernel handle; built at first sight. */
static struct h3_kernel *h3_kernel_get(const void *key, enum h3_handle_kind kind)
{
    if (key == NULL)
        return NULL;
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull;
    for (unsigned i = 0; i < 64; i++) {
        unsigned slot = (unsigned)((h >> 40) + i) % H3_KCACHE_SLOTS;
        struct h3_kernel *k = atomic_load_explicit(&h3_kcache[slot], memory_order_acquire);
        if (k == NULL) {
            uint64_t t0 = h3_hot.stats ? h3_stats_clock() : 0;
            struct h3_kernel *fresh = h3_kernel_build(key, kind);
            if (t0 != 0)
                h3_stats_one_off(H3_ONE_OFF_KERNEL, h3_stats_clock() - t0);
            if (fresh == NULL)
                return NULL;
            atomic_store_explicit(&fresh->generation, atomic_load_explicit(&h3_kernels_generation,
                                                                           memory_order_acquire),
                                  memory_order_relaxed);
            struct h3_kernel *expected = NULL;
            if (atomic_compare_exchange_strong_explicit(&h3_kcache[slot], &expected, fresh,
                                                        memory_order_acq_rel, memory_order_acquire))
                return fresh;
            h3_kernel_free(fresh);
            k = expected;
        }
        if (k->key == key) {
            unsigned gen = atomic_load_explicit(&h3_kernels_generation, memory_order_acquire);
            if (H3_UNLIKELY(atomic_load_explicit(&k->generation, memory_order_relaxed) != gen))
                return h3_kernel_recheck(slot, k, kind, gen);
            return k;
        }
    }
    H3_WARN_ONCE(H3_SUB_HOOK, "kernel cache full: further kernels are traced without names");
    return NULL;
}

static void h3_record_each_kernel(void (*fn)(const struct h3_kernel *k, void *arg), void *arg)
{
    for (unsigned i = 0; i < H3_KCACHE_SLOTS; i++) {
        struct h3_kernel *k = atomic_load_explicit(&h3_kcache[i], memory_order_acquire);
        if (k != NULL)
            fn(k, arg);
    }
}

struct h3_kernel_row {
    const struct h3_kernel *k;
    unsigned long calls;
};
struct h3_kernel_rows {
    struct h3_kernel_row *rows;
    size_t n, cap;
};

static void h3_record_collect(const struct h3_kernel *k, void *arg)
{
    struct h3_kernel_rows *r = arg;
    unsigned long calls = atomic_load_explicit(&((struct h3_kernel *)k)->calls, memory_order_relaxed);
    if (calls == 0 || r->n == r->cap)
        return;
    r->rows[r->n++] = (struct h3_kernel_row){k, calls};
}

static int h3_record_by_name(const void *a, const void *b)
{
    const struct h3_kernel_row *x = a, *y = b;
    return strcmp(x->k->pretty, y->k->pretty);
}

static int h3_record_by_calls(const void *a, const void *b)
{
    const struct h3_kernel_row *x = a, *y = b;
    return x->calls < y->calls ? 1 : x->calls > y->calls ? -1 : strcmp(x->k->pretty, y->k->pretty);
}

/* One row per kernel name: a kernel reached through several handles (its
 * runtime handle, its host stub, its driver function) is counted once. */
static size_t h3_record_merge_names(struct h3_kernel_row *rows, size_t n)
{
    qsort(rows, n, sizeof(rows[0]), h3_record_by_name);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (out > 0 && strcmp(rows[out - 1].k->pretty, rows[i].k->pretty) == 0)
            rows[out - 1].calls += rows[i].calls;
        else
            rows[out++] = rows[i];
    }
    qsort(rows, out, sizeof(rows[0]), h3_record_by_calls);
    return out;
}

void h3_record_print_kernels(void (*line)(const char *fmt, ...))
{
    struct h3_kernel_rows r = {calloc(8192, sizeof(struct h3_kernel_row)), 0, 8192};
    if (r.rows == NULL)
        return;
    h3_record_each_kernel(h3_record_collect, &r);
    r.n = h3_record_merge_names(r.rows, r.n);
    line("%-12s %s", "calls", "kernel");
    for (size_t i = 0; i < r.n; i++)
        line("%12lu %.150s", r.rows[i].calls, r.rows[i].k->pretty);
    free(r.rows);
}

void h3_record_reset_counts(void)
{
    for (unsigned i = 0; i < H3_KCACHE_SLOTS; i++) {
        struct h3_kernel *k = atomic_load_explicit(&h3_kcache[i], memory_order_acquire);
        if (k != NULL)
            atomic_store(&k->calls, 0);
    }
}

/* Fills the fields every launch has, and the fingerprint of its shape. */
static void h3_desc_launch(struct h3_call *c, const void *handle, struct h3_kernel *k, unsigned gx,
                           unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, size_t shmem,
                           const void *stream, void **args, void **extra)
{
    c->handle = handle;
    c->kernel = k;
    c->args = args;
    c->extra = extra;
    c->grid[0] = gx, c->grid[1] = gy, c->grid[2] = gz;
    c->block[0] = bx, c->block[1] = by, c->block[2] = bz;
    c->shmem = (unsigned)shmem;
    c->stream = stream;
    if (k != NULL) {
        if (h3_hot.stats) /* only the stats read it: no shared cache line written per launch otherwise */
            atomic_fetch_add_explicit(&((struct h3_kernel *)k)->calls, 1, memory_order_relaxed);
        c->nparams = k->nparams;
        c->param_bytes = k->param_bytes;
        c->param_sizes = k->param_sizes;
    }
    /* The fingerprint, device and stream flavour are for the trace; the matcher compares fields. */
    if (!h3_hot.trace_on)
        return;
    c->per_thread = (h3_hooks[c->fn].props & H3_P_PER_THREAD) != 0;
    uint64_t h = k != NULL ? k->name_hash : h3_hash(H3_HASH_SEED, "?", 1);
    h = h3_hash(h, c->grid, sizeof(c->grid));
    h = h3_hash(h, c->block, sizeof(c->block));
    h = h3_hash(h, &c->shmem, sizeof(c->shmem));
    if (c->param_sizes != NULL)
        h = h3_hash(h, c->param_sizes, c->nparams * sizeof(uint16_t));
    c->fp = h;
    h3_call_device(c);
}

void h3_desc_rt_kernel(struct h3_call *c, cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                       size_t shmem, cudaStream_t stream)
{
    h3_desc_launch(c, kernel, h3_kernel_get(kernel, H3_HANDLE_KERNEL), grid.x, grid.y, grid.z, block.x,
                   block.y, block.z, shmem, stream, args, NULL);
}

void h3_desc_rt_func(struct h3_call *c, const void *func, dim3 grid, dim3 block, void **args,
                     size_t shmem, cudaStream_t stream)
{
    h3_desc_launch(c, func, h3_kernel_get(func, H3_HANDLE_HOST_STUB), grid.x, grid.y, grid.z, block.x,
                   block.y, block.z, shmem, stream, args, NULL);
}

void h3_desc_rt_exc(struct h3_call *c, const cudaLaunchConfig_t *config, const void *func, void **args)
{
    if (config == NULL)
        return;
    h3_desc_launch(c, func, h3_kernel_get(func, H3_HANDLE_HOST_STUB), config->gridDim.x,
                   config->gridDim.y, config->gridDim.z, config->blockDim.x, config->blockDim.y,
                   config->blockDim.z, config->dynamicSmemBytes, config->stream, args, NULL);
}

void h3_desc_drv_launch(struct h3_call *c, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream stream,
                        void **params, void **extra)
{
    h3_desc_launch(c, f, h3_kernel_get(f, H3_HANDLE_FUNC), gx, gy, gz, bx, by, bz, shmem, stream,
                   params, extra);
}

void h3_desc_drv_launch_ex(struct h3_call *c, const CUlaunchConfig *config, CUfunction f,
                           void **params, void **extra)
{
    if (config == NULL)
        return;
    h3_desc_launch(c, f, h3_kernel_get(f, H3_HANDLE_FUNC), config->gridDimX, config->gridDimY,
                   config->gridDimZ, config->blockDimX, config->blockDimY, config->blockDimZ,
                   config->sharedMemBytes, config->hStream, params, extra);
}

void h3_desc_lt_matmul(struct h3_call *c, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                       const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                       const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                       cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                       void *workspace, size_t workspace_size, cudaStream_t stream)
{
    c->stream = stream;
    if (!c->detail)
        return;
    struct h3_lt_desc *lt = &c->u.lt;
    memset(lt, 0, sizeof(*lt));
    lt->handle = handle, lt->desc = desc, lt->alpha = alpha, lt->beta = beta, lt->algo = algo;
    lt->Adesc = Adesc, lt->Bdesc = Bdesc, lt->Cdesc = Cdesc, lt->Ddesc = Ddesc;
    lt->A = A, lt->B = B, lt->C = C, lt->D = D, lt->workspace_ptr = workspace;
    if (!h3_hot.trace_on && !h3_match_wants_matmul(stream)) {
        /* No one reads more than the pointers and the shape (the matcher's
         * look-alike count): 5 attribute reads instead of about 44, which
         * is most of the shim's time on a GEMM of another model. */
        void *g = (void *)H3_LIB_FN(CUBLASLT, cublasLtMatmulDescGetAttribute);
        void *gl = (void *)H3_LIB_FN(CUBLASLT, cublasLtMatrixLayoutGetAttribute);
        lt->transa = (int32_t)h3_lt_int(g, desc, CUBLASLT_MATMUL_DESC_TRANSA, 4);
        lt->m = h3_lt_int(gl, Ddesc, CUBLASLT_MATRIX_LAYOUT_ROWS, 8);
        lt->n = h3_lt_int(gl, Ddesc, CUBLASLT_MATRIX_LAYOUT_COLS, 8);
        lt->k = h3_lt_int(gl, Adesc, lt->transa == CUBLAS_OP_N ? CUBLASLT_MATRIX_LAYOUT_COLS : CUBLASLT_MATRIX_LAYOUT_ROWS,
                          8);
        lt->workspace = workspace_size;
        h3_call_device(c);
        if (!h3_learn_wants_gemm(lt->transa, lt->m, lt->n, lt->k))
            return;
        /* The learner keeps it: described in full (its shape is no refused group's). */
    }
    h3_lt_describe(lt, algo); /* remembered descriptors (lt_shadow.c), else read */
    lt->m = (int64_t)lt->d.rows;
    lt->n = (int64_t)lt->d.cols;
    lt->k = (int64_t)(lt->transa == CUBLAS_OP_N ? lt->a.cols : lt->a.rows);
    lt->workspace = workspace_size;
    if (!h3_hot.trace_on)
        return;
    uint64_t h = h3_hash(H3_HASH_SEED, "cublasLtMatmul", 14);
    h = h3_hash(h, &lt->compute, offsetof(struct h3_lt_desc, bias));
    h = h3_hash(h, &lt->a, sizeof(lt->a) * 4);
    h = h3_hash(h, &lt->m, sizeof(int64_t) * 3);
    h = h3_hash(h, &lt->algo_id, sizeof(int32_t) * 9);
    c->fp = h;
    h3_call_device(c);
}

void h3_desc_gemm(struct h3_call *c, cublasHandle_t handle, int ta, int tb, int64_t m, int64_t n,
                  int64_t k, const void *A, int at, int64_t lda, const void *B, int bt, int64_t ldb,
                  const void *C, int ct, int64_t ldc, int compute, int64_t batch)
{
    __typeof__(&cublasGetStream_v2) gs = c->probe ? NULL : h3_get_cublasGetStream_v2();
    cudaStream_t stream = NULL;
    if (gs != NULL && gs(handle, &stream) == CUBLAS_STATUS_SUCCESS)
        c->stream = stream;
    if (!c->detail)
        return;
    struct h3_gemm_desc *g = &c->u.gemm;
    *g = (struct h3_gemm_desc){A, B, C, ta, tb, at, bt, ct, compute, m, n, k, lda, ldb, ldc, batch};
    if (!h3_hot.trace_on) /* the fingerprint and device are for the trace; the matcher compares fields */
        return;
    uint64_t h = h3_hash(H3_HASH_SEED, h3_hooks[c->fn].name, strlen(h3_hooks[c->fn].name));
    c->fp = h3_hash(h, &g->transa, sizeof(*g) - offsetof(struct h3_gemm_desc, transa));
    h3_call_device(c);
}

void h3_desc_cudnn_execute(struct h3_call *c, cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                           cudnnBackendDescriptor_t pack)
{
    __typeof__(&cudnnGetStream) gs = h3_get_cudnnGetStream();
    cudaStream_t stream = NULL;
    if (gs != NULL && gs(handle, &stream) == CUDNN_STATUS_SUCCESS)
        c->stream = stream;
    if (!c->detail)
        return;
    struct h3_cudnn_desc *d = &c->u.dnn;
    memset(d, 0, sizeof(*d));
    d->plan = plan;
    d->known = h3_cudnn_pack_get(pack, d);
    if (!h3_hot.trace_on)
        return;
    uint64_t h = h3_hash(H3_HASH_SEED, "cudnnBackendExecute", 19);
    c->fp = h3_hash(h, d->uids, (size_t)d->count * sizeof(int64_t));
    h3_call_device(c);
}

void h3_desc_procaddr(struct h3_call *c, const char *symbol, void **pfn, int version, uint64_t flags)
{
    c->u.pa = (struct h3_procaddr_desc){symbol, pfn, version, flags};
    c->fp = symbol != NULL ? h3_hash(H3_HASH_SEED, symbol, strlen(symbol)) : 0;
}

void h3_desc_sync(struct h3_call *c, const void *stream, const void *dst, size_t bytes)
{
    c->stream = stream;
    c->u.sync.dst = dst;
    c->u.sync.bytes = bytes;
    c->u.sync.graph_exec = NULL;
    c->u.sync.ctx = NULL;
    c->u.sync.dev = -1;
}

void h3_desc_context(struct h3_call *c, const void *ctx, int dev)
{
    h3_desc_sync(c, NULL, NULL, 0);
    c->u.sync.ctx = ctx;
    c->u.sync.dev = dev;
}

void h3_desc_graph_launch(struct h3_call *c, const void *stream, const void *graph_exec)
{
    h3_desc_sync(c, stream, NULL, 0);
    c->u.sync.graph_exec = graph_exec;
}

/* Device bytes a 2-D or 3-D copy may write, from its destination's base to
 * the end of its last row (a superset of what it writes); none when the
 * destination is host memory or an array. */
static void h3_desc_copy_dst(struct h3_call *c, const void *stream, CUmemorytype type, CUdeviceptr base,
                             size_t pitch, size_t rows_per_slice, size_t slices, size_t x, size_t y, size_t z,
                             size_t width)
{
    bool device = type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
    size_t span = pitch * (rows_per_slice * z + y) + x + width +
                  pitch * (rows_per_slice * (slices > 0 ? slices - 1 : 0) + (rows_per_slice > 0 ? rows_per_slice : 1));
    h3_desc_sync(c, stream, device ? (const void *)(uintptr_t)base : NULL, device ? span : 0);
}

void h3_desc_copy2d(struct h3_call *c, const void *stream, const CUDA_MEMCPY2D *p)
{
    c->stream = stream;
    if (p != NULL)
        h3_desc_copy_dst(c, stream, p->dstMemoryType, p->dstDevice, p->dstPitch, p->Height, 1, p->dstXInBytes,
                         p->dstY, 0, p->WidthInBytes);
}

void h3_desc_copy3d(struct h3_call *c, const void *stream, const CUDA_MEMCPY3D *p)
{
    c->stream = stream;
    if (p != NULL)
        h3_desc_copy_dst(c, stream, p->dstMemoryType, p->dstDevice, p->dstPitch, p->dstHeight, p->Depth,
                         p->dstXInBytes, p->dstY, p->dstZ, p->WidthInBytes);
}

void h3_desc_copy3d_peer(struct h3_call *c, const void *stream, const CUDA_MEMCPY3D_PEER *p)
{
    c->stream = stream;
    if (p != NULL)
        h3_desc_copy_dst(c, stream, p->dstMemoryType, p->dstDevice, p->dstPitch, p->dstHeight, p->Depth,
                         p->dstXInBytes, p->dstY, p->dstZ, p->WidthInBytes);
}
