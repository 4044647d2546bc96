/*
 * libh3fakeframework.so: plays PyTorch's part.  Like libtorch_cuda.so it has
 * DT_NEEDED entries on the (fake) CUDA libraries and is loaded RTLD_LOCAL by
 * the test program, the way Python loads torch.
 *
 * For every entry point of shim/hooks.def it has a caller, generated from the
 * table: the arguments are filled with distinctive bytes from a seed, those
 * the libraries dereference are pointed at valid objects, the words sent are
 * recorded, and the call is made.  Tests compare the words sent with the
 * words the fake library received.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "nvapi.h"
#include "fake.h"
#include "framework.h"
#include "attrs.h"

static void fw_fill(void *p, size_t n, uint64_t seed, int index)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)index * 0xbf58476d1ce4e5b9ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 31;
        x *= 0x94d049bb133111ebull;
        ((unsigned char *)p)[i] = (unsigned char)(x >> 56);
    }
}

static void fw_kernel_fn(void **params)
{
    (void)params;
}

static struct fake_kernel fw_kernel, fw_nccl_kernel, fw_cat_kernel;
static void fw_stub(void)
{
}
static void fw_nccl_stub(void)
{
}

/* Objects that arguments must point to. */
struct fw_objects {
    cudaLaunchConfig_t rt_config;
    CUlaunchConfig drv_config;
    void *params[4];
    uint64_t param_values[4];
    void *proc;
    CUdriverProcAddressQueryResult proc_status;
    cublasLtMatmulDesc_t lt_desc;
    cublasLtMatmulDesc_t lt_made;          /* what the descriptor entry points make... */
    cublasLtMatrixLayout_t lt_made_layout;
    struct fake_attrs lt_init;             /* ... and initialise */
    cublasLtMatrixLayout_t lt_layout[4];
    cublasLtMatmulAlgo_t lt_algo;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    cudnnBackendDescriptor_t pack;
    void *workspace;
    CUDA_MEMCPY2D copy2d; /* device-to-device copies of 0x800 bytes into 0x6000 */
    CUDA_MEMCPY3D copy3d;
    CUDA_MEMCPY3D_PEER copy3d_peer;
    void *graph_exec; /* where an instantiation writes its executable graph */
    void *graph;      /* where an end of capture writes its graph */
    uint64_t ipc_ptr; /* where an IPC handle's opening writes the pointer */
};
static _Thread_local struct fw_objects fw_obj;

FAKE_EXPORT void fw_setup(void)
{
    size_t sizes[3] = {8, 4, 16};
    fake_kernel_init(&fw_kernel, "_ZN2at6native29vectorized_elementwise_kernelILi8EEEviT_", 3, sizes, fw_kernel_fn);
    fake_cudart_register_stub((const void *)&fw_stub, &fw_kernel);
    size_t nccl_sizes[1] = {8};
    fake_kernel_init(&fw_nccl_kernel, "_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE", 1,
                     nccl_sizes, fw_kernel_fn);
    fake_cudart_register_stub((const void *)&fw_nccl_stub, &fw_nccl_kernel);
    /* PyTorch's cat (its inputs' metadata cut to two pointers). */
    size_t cat_sizes[2] = {8, 16};
    fake_kernel_init(&fw_cat_kernel,
                     "_ZN2at6native12_GLOBAL__N_130CatArrayBatchedCopy_vectorizedIN3c1010OpaqueTypeILj4EEEjLi2ELi128ELi"
                     "1ELi16ELi4EEEvPcNS1_25CatArrInputTensorMetadataIT_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEE"
                     "iS8_",
                     2, cat_sizes, fw_kernel_fn);
}

/* Builds the valid objects for this thread, with values from `seed`. */
static void fw_objects_make(uint64_t seed)
{
    struct fw_objects *o = &fw_obj;
    fw_fill(&o->rt_config, sizeof(o->rt_config), seed, 100);
    o->rt_config.attrs = NULL;
    o->rt_config.numAttrs = 0;
    fw_fill(&o->drv_config, sizeof(o->drv_config), seed, 101);
    o->drv_config.attrs = NULL;
    o->drv_config.numAttrs = 0;
    for (int i = 0; i < 4; i++)
        o->params[i] = &o->param_values[i];
    if (o->lt_desc == NULL) {
        cublasLtMatmulDescCreate(&o->lt_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        int32_t t = CUBLAS_OP_T;
        cublasLtMatmulDescSetAttribute(o->lt_desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, 4);
        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        cublasLtMatmulDescSetAttribute(o->lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4);
        cublasLtMatrixLayoutCreate(&o->lt_layout[0], CUDA_R_16F, 2048, 6144, 2048);
        cublasLtMatrixLayoutCreate(&o->lt_layout[1], CUDA_R_16F, 2048, 1797, 2048);
        cublasLtMatrixLayoutCreate(&o->lt_layout[2], CUDA_R_16F, 6144, 1797, 6144);
        cublasLtMatrixLayoutCreate(&o->lt_layout[3], CUDA_R_16F, 6144, 1797, 6144);
        memset(&o->lt_algo, 0, sizeof(o->lt_algo));
        int32_t id = 66;
        uint32_t stages = 21;
        uint16_t cluster = 2;
        cublasLtMatmulAlgoConfigSetAttribute(&o->lt_algo, CUBLASLT_ALGO_CONFIG_ID, &id, 4);
        cublasLtMatmulAlgoConfigSetAttribute(&o->lt_algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, 4);
        cublasLtMatmulAlgoConfigSetAttribute(&o->lt_algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, 2);
        cublasCreate_v2(&o->blas);
        cudnnCreate(&o->dnn);
        cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &o->pack);
        int64_t uids[4] = {1, 2, 3, 4};
        void *ptrs[4] = {(void *)0x1000, (void *)0x2000, (void *)0x3000, (void *)0x4000};
        void *ws = (void *)0x5000;
        cudnnBackendSetAttribute(o->pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 4, uids);
        cudnnBackendSetAttribute(o->pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 4, ptrs);
        cudnnBackendSetAttribute(o->pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    }
    o->workspace = (void *)0x5000;
    o->copy2d = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = 0x9000, .srcPitch = 64,
                                .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = 0x6000, .dstPitch = 64,
                                .WidthInBytes = 64, .Height = 32};
    o->copy3d = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = 0x9000, .srcPitch = 64,
                                .srcHeight = 32, .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = 0x6000,
                                .dstPitch = 64, .dstHeight = 32, .WidthInBytes = 64, .Height = 32, .Depth = 1};
    o->copy3d_peer = (CUDA_MEMCPY3D_PEER){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = 0x9000,
                                          .srcPitch = 64, .srcHeight = 32, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                                          .dstDevice = 0x6000, .dstPitch = 64, .dstHeight = 32,
                                          .WidthInBytes = 64, .Height = 32, .Depth = 1};
    cublasSetStream_v2(o->blas, (cudaStream_t)(uintptr_t)(seed << 4));
    cudnnSetStream(o->dnn, (cudaStream_t)(uintptr_t)(seed << 4));
}

/*
 * The describe column of hooks.def names, for every entry point, the
 * arguments the shim reads; here the same names become the fix-ups that point
 * those arguments at valid objects.
 */
#define h3_desc_rt_kernel(c, kernel, grid, block, args, shmem, stream) \
    (kernel = (cudaKernel_t)&fw_kernel, args = fw_obj.params)
#define h3_desc_rt_func(c, func, grid, block, args, shmem, stream) \
    (func = (const void *)&fw_stub, args = fw_obj.params)
#define h3_desc_rt_exc(c, config, func, args) \
    (config = &fw_obj.rt_config, func = (const void *)&fw_stub, args = fw_obj.params)
#define h3_desc_drv_launch(c, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) \
    (f = (CUfunction)&fw_kernel, params = fw_obj.params, extra = NULL)
#define h3_desc_drv_launch_ex(c, config, f, params, extra) \
    (config = &fw_obj.drv_config, f = (CUfunction)&fw_kernel, params = fw_obj.params, extra = NULL)
#define h3_desc_procaddr(c, symbol, pfn, version, flags) \
    (symbol = "cuLaunchKernel", pfn = &fw_obj.proc, version = 12000, flags = CU_GET_PROC_ADDRESS_DEFAULT)
#define h3_desc_lt_matmul(c, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, ws, wss, stream) \
    (desc = fw_obj.lt_desc, Adesc = fw_obj.lt_layout[0], Bdesc = fw_obj.lt_layout[1],             \
     Cdesc = fw_obj.lt_layout[2], Ddesc = fw_obj.lt_layout[3], algo = &fw_obj.lt_algo)
#define h3_desc_gemm(c, handle, ...) (handle = fw_obj.blas)
#define h3_desc_cudnn_execute(c, handle, plan, pack) (handle = fw_obj.dnn, pack = fw_obj.pack)
/* A synchronising call's arguments are forwarded, never read, but for a
 * 2-D or 3-D copy's description, which must be a valid struct. */
#define h3_desc_sync(c, stream, dst, bytes) ((void)0)
#define h3_desc_graph_launch(c, stream, exec) ((void)0)
#define h3_desc_context(c, ctx, dev) ((void)0)
#define h3_desc_end_capture(c, stream, pgraph) ((pgraph) = (void *)&fw_obj.graph)
/* The graph hooks' own work needs valid out-pointers; the fakes write them. */
#define h3_graphs_instantiated_at(pexec, graph) ((pexec) = (void *)&fw_obj.graph_exec)
#define h3_graphs_exec_gone(exec) ((void)0)
#define h3_wcache_shared(ptr) ((void)0)
#define h3_record_modules_changed() ((void)0)
#define h3_wcache_shared_at(pptr) (pptr = (void *)&fw_obj.ipc_ptr)
#define h3_graphs_graph_gone(graph) ((void)0)
#define h3_graphs_graphs_changed() ((void)0)
#define h3_desc_copy2d(c, stream, p) (p = &fw_obj.copy2d)
#define h3_desc_copy3d(c, stream, p) (p = &fw_obj.copy3d)
#define h3_desc_copy3d_peer(c, stream, p) (p = &fw_obj.copy3d_peer)
#define h3_cudnn_note_set(desc, attr, type, count, elements)                                       \
    (desc = fw_obj.pack, attr = CUDNN_ATTR_VARIANT_PACK_WORKSPACE, type = CUDNN_TYPE_VOID_PTR, count = 1, \
     elements = &fw_obj.workspace)

/* Descriptors are made and given back with NULL handles (the fakes fail
 * them, so nothing leaks); a set changes only an attribute nobody reads. */
static const int32_t fw_lt_zero[2];
#define h3_lt_note_desc_create(desc, compute, scale, caller) (desc = &fw_obj.lt_made)
#define h3_lt_note_layout_create(layout, type, rows, cols, ld, caller) (layout = &fw_obj.lt_made_layout)
#define h3_lt_note_desc_set(desc, attr, buf, size)                                              \
    (desc = fw_obj.lt_desc, attr = CUBLASLT_MATMUL_DESC_POINTER_MODE, buf = fw_lt_zero, size = 4)
#define h3_lt_note_layout_set(layout, attr, buf, size)                                              \
    (layout = fw_obj.lt_layout[0], attr = CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, buf = fw_lt_zero, size = 8)
#define h3_lt_note_gone(handle) (handle = NULL)
#define h3_lt_note_init(handle, size) (handle = (void *)&fw_obj.lt_init, size = sizeof(fw_obj.lt_init))

#define FW_UNPAREN(...) __VA_ARGS__
#define FW_DECL(i, decl) decl;
/* The declarations of `params`, none for `(void)` (whose `args` are `()`). */
#define FW_DECLS(params, args) FW_DECLS_(params, FW_UNPAREN args)
#define FW_DECLS_(params, ...) __VA_OPT__(FAKE_FOR_EACH(FW_DECL, FW_UNPAREN params))
#define FW_FILL(i, x) fw_fill(&(x), sizeof(x), seed, i);
#define FW_WORD(i, x) sent[i] = fake_arg_word(&(x), sizeof(x));

#define H3_HOOK(lib, kind, ret, name, params, args, describe, ...)            \
    static long long fw_call_##name(uint64_t seed, uint64_t *sent, int *nargs) \
    {                                                                     \
        FW_DECLS(params, args)                                            \
        FAKE_FOR_EACH(FW_FILL, FW_UNPAREN args)                           \
        (void)sent;                                                       \
        fw_objects_make(seed);                                            \
        describe;                                                         \
        FAKE_FOR_EACH(FW_WORD, FW_UNPAREN args)                           \
        *nargs = FAKE_NARGS(FW_UNPAREN args);                             \
        return (long long)name args;                                      \
    }
#include "hooks.def"
#undef H3_HOOK

FAKE_EXPORT const struct fw_entry fw_entries[] = {
#define H3_HOOK(lib, kind, ret, name, params, args, describe, ...) {#name, #lib, #kind, fw_call_##name},
#include "hooks.def"
#undef H3_HOOK
};
FAKE_EXPORT const size_t fw_nentries = sizeof(fw_entries) / sizeof(fw_entries[0]);

FAKE_EXPORT long long fw_call(const char *name, uint64_t seed, uint64_t *sent, int *nargs)
{
    for (size_t i = 0; i < fw_nentries; i++)
        if (strcmp(fw_entries[i].name, name) == 0)
            return fw_entries[i].call(seed, sent, nargs);
    return LLONG_MIN;
}

/*
 * The CPU benchmark's loop: `n` calls of one entry point with fixed valid
 * arguments, made from this library (so through its PLT, like a real
 * framework).  Returns the number of failed calls.
 */
static long fw_replay_bench(const char *path, long n);

/* One FP16 GEMM through cuBLAS's own entry point (another model's, as PyTorch
 * makes for linears without an epilogue: a call the learner cannot keep):
 * fw_bench's "cublasGemmEx", and a replay's "G" line. */
static long long fw_replay_gemm(void)
{
    float alpha = 1, beta = 0;
    return cublasGemmEx(fw_obj.blas, CUBLAS_OP_T, CUBLAS_OP_N, 64, 64, 64, &alpha, (void *)0x1000, CUDA_R_16F, 64,
                        (void *)0x2000, CUDA_R_16F, 64, &beta, (void *)0x3000, CUDA_R_16F, 64, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
}

FAKE_EXPORT long fw_bench(const char *name, long n)
{
    fw_objects_make(1);
    long failed = 0;
    if (strcmp(name, "cublasGemmEx") == 0) {
        for (long i = 0; i < n; i++)
            failed += fw_replay_gemm() != 0;
    } else if (strcmp(name, "cuLaunchKernel") == 0) {
        for (long i = 0; i < n; i++)
            failed += cuLaunchKernel((CUfunction)&fw_kernel, 1, 1, 1, 32, 1, 1, 0, NULL, fw_obj.params, NULL) != 0;
    } else if (strcmp(name, "__cudaLaunchKernel") == 0) {
        dim3 g = {1, 1, 1}, b = {32, 1, 1};
        for (long i = 0; i < n; i++)
            failed += __cudaLaunchKernel((cudaKernel_t)&fw_kernel, g, b, fw_obj.params, 0, NULL) != 0;
    } else if (strncmp(name, "replay:", 7) == 0) {
        return fw_replay_bench(name + 7, n);
    } else {
        return -1;
    }
    return failed;
}

/*
 * Replays a call stream recorded on a GPU (scripts/trace_replay.py) through
 * the fake stack, call by call, the way PyTorch issued it: launches through
 * __cudaLaunchKernel with the recorded parameter bytes, cublasLtMatmul with
 * descriptors created and destroyed around each call, cudnnBackendExecute
 * with a variant pack built by cudnnBackendSetAttribute.  Returns the number
 * of calls made, or -1 (with the line number in *bad_line) on a malformed
 * line or a failed call.
 */
#define FW_REPLAY_KERNELS 128

static struct {
    char name[512];
    struct fake_kernel k;
} fw_replay_kernels[FW_REPLAY_KERNELS];
static int fw_replay_nkernels;
static pthread_mutex_t fw_replay_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fake_kernel *fw_replay_kernel(const char *name, unsigned nparams, const size_t *sizes)
{
    struct fake_kernel *k = NULL;
    pthread_mutex_lock(&fw_replay_lock);
    for (int i = 0; i < fw_replay_nkernels && k == NULL; i++)
        if (strcmp(fw_replay_kernels[i].name, name) == 0)
            k = &fw_replay_kernels[i].k;
    if (k == NULL && fw_replay_nkernels < FW_REPLAY_KERNELS && strlen(name) < sizeof(fw_replay_kernels[0].name)) {
        int i = fw_replay_nkernels++;
        snprintf(fw_replay_kernels[i].name, sizeof(fw_replay_kernels[i].name), "%s", name);
        fake_kernel_init(&fw_replay_kernels[i].k, fw_replay_kernels[i].name, nparams, sizes, fw_kernel_fn);
        k = &fw_replay_kernels[i].k;
    }
    pthread_mutex_unlock(&fw_replay_lock);
    return k;
}

static int fw_unhex(const char *hex, unsigned char *out, size_t n)
{
    if (strlen(hex) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* The stream a replayed call goes to: the recorded one unless overridden. */
static cudaStream_t fw_replay_stream(const char *tok, uintptr_t override)
{
    return (cudaStream_t)(override != 0 ? override : (uintptr_t)strtoull(tok, NULL, 16));
}

static long long fw_replay_launch(char **tok, int n, uintptr_t stream)
{
    if (n < 11)
        return -1;
    unsigned nparams = (unsigned)strtoul(tok[10], NULL, 10);
    if (nparams > 16 || (unsigned)n != 11 + 2 * nparams)
        return -1;
    size_t sizes[16];
    static _Thread_local unsigned char storage[16][4096];
    void *args[16];
    for (unsigned i = 0; i < nparams; i++) {
        sizes[i] = strtoul(tok[11 + i], NULL, 10);
        if (sizes[i] > sizeof(storage[0]) || fw_unhex(tok[11 + nparams + i], storage[i], sizes[i]) != 0)
            return -1;
        args[i] = storage[i];
    }
    struct fake_kernel *k = fw_replay_kernel(tok[1], nparams, sizes);
    if (k == NULL)
        return -1;
    dim3 g = {(unsigned)atoi(tok[2]), (unsigned)atoi(tok[3]), (unsigned)atoi(tok[4])};
    dim3 b = {(unsigned)atoi(tok[5]), (unsigned)atoi(tok[6]), (unsigned)atoi(tok[7])};
    return __cudaLaunchKernel((cudaKernel_t)k, g, b, args, strtoul(tok[8], NULL, 10), fw_replay_stream(tok[9], stream));
}

static void *fw_ptr(const char *s)
{
    return (void *)(uintptr_t)strtoull(s, NULL, 16);
}

/* Test knobs, read once: FW_LT_BEHIND=1 flips each GEMM's transb past the
 * wrappers (as a program whose descriptor calls the shim cannot see), and
 * FW_LT_BEHIND=bias moves its bias pointer so; FW_LT_DLSYM=1 first looks a
 * descriptor function up on cuBLASLt's handle. */
static int fw_lt_behind = -1; /* 0 no, 1 transb, 2 bias */

static long long fw_replay_matmul(char **tok, int n, uintptr_t stream)
{
    if (n != 14 + 4 * 7 + 9)
        return -1;
    if (fw_lt_behind < 0) {
        const char *behind = getenv("FW_LT_BEHIND");
        fw_lt_behind = behind == NULL ? 0 : strcmp(behind, "bias") == 0 ? 2 : 1;
        void *lt = getenv("FW_LT_DLSYM") != NULL ? dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_NOLOAD) : NULL;
        if (lt != NULL && dlsym(lt, "cublasLtMatmulDescSetAttribute") == NULL)
            return -1;
    }
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, (cublasComputeType_t)atoi(tok[2]), (cudaDataType_t)atoi(tok[3]));
    int32_t ta = atoi(tok[4]), tb = atoi(tok[5]);
    uint32_t epi = (uint32_t)atoi(tok[6]);
    void *bias = fw_ptr(tok[7]);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (fw_lt_behind == 1) {
        int32_t flipped = tb ^ 1;
        fake_attrs_set((struct fake_attrs *)desc, CUBLASLT_MATMUL_DESC_TRANSB, &flipped, 4);
    } else if (fw_lt_behind == 2 && bias != NULL) {
        void *moved = (char *)bias + 0x100;
        fake_attrs_set((struct fake_attrs *)desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &moved, sizeof(moved));
    }
    cublasLtMatrixLayout_t layout[4];
    for (int i = 0; i < 4; i++) {
        char **l = tok + 14 + 7 * i;
        cublasLtMatrixLayoutCreate(&layout[i], (cudaDataType)atoi(l[0]), strtoull(l[2], NULL, 10),
                                   strtoull(l[3], NULL, 10), strtoll(l[4], NULL, 10));
        /* As PyTorch: set only what differs from a fresh layout (batched GEMMs). */
        int32_t order = atoi(l[1]), batch = atoi(l[5]);
        int64_t stride = strtoll(l[6], NULL, 10);
        if (order != CUBLASLT_ORDER_COL)
            cublasLtMatrixLayoutSetAttribute(layout[i], CUBLASLT_MATRIX_LAYOUT_ORDER, &order, 4);
        if (batch != 1)
            cublasLtMatrixLayoutSetAttribute(layout[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, 4);
        if (stride != 0)
            cublasLtMatrixLayoutSetAttribute(layout[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, 8);
    }
    cublasLtMatmulAlgo_t algo;
    memset(&algo, 0, sizeof(algo));
    static const cublasLtMatmulAlgoConfigAttributes_t keys[9] = {
        CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_STAGES_ID,
        CUBLASLT_ALGO_CONFIG_SPLITK_NUM, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
        CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID};
    for (int i = 0; i < 9; i++) {
        uint32_t v = (uint32_t)strtoul(tok[42 + i], NULL, 10);
        uint16_t v16 = (uint16_t)v;
        bool small = keys[i] == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID || keys[i] == CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID;
        cublasLtMatmulAlgoConfigSetAttribute(&algo, keys[i], small ? (void *)&v16 : (void *)&v, small ? 2 : 4);
    }
    float alpha = 1, beta = 0;
    cublasStatus_t r = cublasLtMatmul((cublasLtHandle_t)0x1, desc, &alpha, fw_ptr(tok[10]), layout[0], fw_ptr(tok[11]),
                                      layout[1], &beta, fw_ptr(tok[12]), layout[2], fw_ptr(tok[13]),
                                      layout[3], &algo, fw_ptr(tok[8]), strtoull(tok[9], NULL, 10),
                                      fw_replay_stream(tok[1], stream));
    for (int i = 0; i < 4; i++)
        cublasLtMatrixLayoutDestroy(layout[i]);
    cublasLtMatmulDescDestroy(desc);
    return r;
}

static long long fw_replay_cudnn(char **tok, int n, uintptr_t stream)
{
    if (n < 5)
        return -1;
    int64_t count = strtoll(tok[4], NULL, 10);
    if (count < 0 || count > 16 || n != 5 + 2 * count)
        return -1;
    int64_t uids[16];
    void *ptrs[16];
    for (int64_t i = 0; i < count; i++) {
        uids[i] = strtoll(tok[5 + i], NULL, 10);
        ptrs[i] = fw_ptr(tok[5 + count + i]);
    }
    void *ws = fw_ptr(tok[3]);
    cudnnBackendDescriptor_t pack;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    /* In the order cuDNN's frontend uses: workspace, pointers, ids. */
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, ptrs);
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids);
    cudnnSetStream(fw_obj.dnn, fw_replay_stream(tok[1], stream));
    cudnnStatus_t r = cudnnBackendExecute(fw_obj.dnn, (cudnnBackendDescriptor_t)fw_ptr(tok[2]), pack);
    cudnnBackendDestroyDescriptor(pack);
    return r;
}

static void CUDA_CB fw_callback(CUstream stream, CUresult status, void *data)
{
    (void)stream, (void)status, (void)data;
}

struct fw_other_launch {
    cudaStream_t stream;
    long long result;
};

static void *fw_other_thread(void *arg)
{
    struct fw_other_launch *o = arg;
    uint64_t p0 = 0, p2[2] = {0, 0}; /* parameter sizes 8, 4, 16; nothing else made on this thread */
    uint32_t p1 = 0;
    void *params[3] = {&p0, &p1, p2};
    dim3 one = {1, 1, 1};
    o->result = __cudaLaunchKernel((cudaKernel_t)&fw_kernel, one, one, params, 0, o->stream);
    return NULL;
}

FAKE_EXPORT void fw_c10_report(uintptr_t ptr, long long size, int type);

/* Makes the call fw_replay_with() inserts before a call on `stream`. */
static long long fw_insert(enum fw_insert what, cudaStream_t stream, uintptr_t ptr)
{
    static char host[64];
    void *args[3] = {&fw_obj.param_values[0], &fw_obj.param_values[1], &fw_obj.param_values[2]};
    dim3 one = {1, 1, 1};
    switch (what) {
    case FW_INSERT_NONE: return 0;
    case FW_INSERT_STREAM_SYNC: return cudaStreamSynchronize(stream);
    case FW_INSERT_MEMSET: return cudaMemsetAsync((void *)(ptr != 0 ? ptr : 0x7000), 0, 64, stream);
    case FW_INSERT_EVENT: return cudaEventRecord((cudaEvent_t)0x8000, stream);
    case FW_INSERT_DRIVER_COPY: {
        /* Found the way the runtimes find the driver: through cuGetProcAddress. */
        PFN_cuMemcpyDtoHAsync_v3020 copy = NULL;
        CUdriverProcAddressQueryResult st;
        if (cuGetProcAddress_v2("cuMemcpyDtoHAsync", (void **)&copy, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != 0)
            return -1;
        return copy(host, (CUdeviceptr)0x9000, sizeof(host), (CUstream)stream);
    }
    case FW_INSERT_KERNEL: {
        /* With a pointer (insert_ptr): a kernel that may write there (parameter sizes 8, 4, 16). */
        uint64_t p0 = ptr, p2[2] = {0, 0};
        uint32_t p1 = 0;
        void *with_ptr[3] = {&p0, &p1, p2};
        return __cudaLaunchKernel((cudaKernel_t)&fw_kernel, one, one, ptr != 0 ? with_ptr : args, 0, stream);
    }
    case FW_INSERT_OTHER_STREAM:
        return __cudaLaunchKernel((cudaKernel_t)&fw_kernel, one, one, args, 0,
                                  (cudaStream_t)((uintptr_t)stream + 0x10000));
    case FW_INSERT_NCCL: return __cudaLaunchKernel((cudaKernel_t)&fw_nccl_kernel, one, one, args, 0, stream);
    case FW_INSERT_COPY_2D: {
        CUDA_MEMCPY2D copy = fw_obj.copy2d;
        copy.dstDevice = ptr != 0 ? (CUdeviceptr)ptr : copy.dstDevice;
        return cuMemcpy2DAsync_v2(&copy, (CUstream)stream);
    }
    case FW_INSERT_CALLBACK: return cuStreamAddCallback((CUstream)stream, fw_callback, NULL, 0);
    case FW_INSERT_OTHER_THREAD: {
        struct fw_other_launch o = {stream, -1};
        pthread_t t;
        if (pthread_create(&t, NULL, fw_other_thread, &o) != 0)
            return -1;
        pthread_join(t, NULL);
        return o.result;
    }
    case FW_INSERT_DEVICE_RESET: return cudaDeviceReset();
    case FW_INSERT_CTX_PAIR: {
        CUcontext ctx = NULL;
        if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS)
            return -1;
        return cuDevicePrimaryCtxRelease_v2(0);
    }
    case FW_INSERT_CTX_RELEASE: return cuDevicePrimaryCtxRelease_v2(0);
    case FW_INSERT_KERNEL_EXTRA: {
        uint64_t buf[4] = {ptr, 0, 0, 0}; /* sizes 8, 4 and 16: 32 bytes with the 16-byte alignment */
        size_t size = sizeof(buf);
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
        return cuLaunchKernel((CUfunction)&fw_kernel, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, NULL, extra);
    }
    case FW_INSERT_IPC_EXPORT: {
        cudaIpcMemHandle_t h;
        return cudaIpcGetMemHandle(&h, (void *)ptr);
    }
    case FW_INSERT_DEVICE_SWITCH: {
        if (cuCtxSetCurrent((CUcontext)FAKE_CTX_DEVICE_1) != CUDA_SUCCESS)
            return 1;
        long long r = __cudaLaunchKernel((cudaKernel_t)&fw_kernel, one, one, args, 0,
                                         (cudaStream_t)((uintptr_t)stream + 0x20000));
        return cuCtxSetCurrent((CUcontext)FAKE_CTX_DEVICE_0) != CUDA_SUCCESS ? 1 : r;
    }
    case FW_INSERT_MODULE_RELOAD: {
        static struct fake_kernel reused; /* one handle, two kernels in turn */
        static const size_t one[1] = {8};
        uint64_t p0 = 0;
        void *params[1] = {&p0};
        fake_kernel_init(&reused, "_Z14first_kernel_av", 1, one, fw_kernel_fn);
        if (cuLaunchKernel((CUfunction)&reused, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, params, NULL) != 0 ||
            cuModuleUnload((CUmodule)0x1) != CUDA_SUCCESS)
            return -1;
        fake_kernel_init(&reused, "_Z15second_kernel_bv", 1, one, fw_kernel_fn);
        return cuLaunchKernel((CUfunction)&reused, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, params, NULL);
    }
    case FW_INSERT_SWAP:
        fw_c10_report(ptr, -64, 1);
        return cudaFree((void *)ptr);
    case FW_INSERT_SWAP_UNMAP:
        fw_c10_report(ptr, -64, 1);
        return cuMemUnmap((CUdeviceptr)ptr, 64);
    case FW_INSERT_CAT:
    case FW_INSERT_CAT_INTO: {
        uint64_t out = what == FW_INSERT_CAT_INTO ? ptr : 0x7000, inputs[2] = {what == FW_INSERT_CAT ? ptr : 0x7100, 0};
        void *cat_args[2] = {&out, inputs};
        return cuLaunchKernel((CUfunction)&fw_cat_kernel, 1, 2, 1, 128, 1, 1, 0, (CUstream)stream, cat_args, NULL);
    }
    case FW_INSERT_COUNT: break;
    }
    return -1;
}

FAKE_EXPORT long fw_replay_with(const char *path, const struct fw_replay_opts *opts, long *bad_line);

/* PyTorch's caching allocator reporting a block (libc10_cuda.so calling
 * libc10.so): `size` bytes at `ptr`, negative for a free, on a device of
 * `type` (1: CUDA). */
struct fw_c10_device {
    int8_t type, index;
};
void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t size, size_t allocated, size_t reserved,
                                                           struct fw_c10_device d);
FAKE_EXPORT void fw_c10_report(uintptr_t ptr, long long size, int type)
{
    _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE((void *)ptr, size, 1u << 20, 1u << 21,
                                                          (struct fw_c10_device){(int8_t)type, 0});
}

FAKE_EXPORT long fw_replay(const char *path, long *bad_line)
{
    return fw_replay_with(path, NULL, bad_line);
}

static long fw_replay_file(const char *path, const struct fw_replay_opts *o, long *bad_line);

/* One block reported live once before the first replayed call (at an
 * address no replay uses), as PyTorch's caching allocator reports every
 * block it hands out from the first tensor on: no PyTorch process runs a
 * block before some report.  FAKE_C10_SILENT set: none, as an allocator
 * that reports nothing. */
#define FW_FIRST_BLOCK 0x100000u
static void fw_first_block_reported(void)
{
    static atomic_bool reported;
    if (getenv("FAKE_C10_SILENT") == NULL && !atomic_exchange(&reported, true))
        fw_c10_report(FW_FIRST_BLOCK, 4096, 1);
}

FAKE_EXPORT long fw_replay_with(const char *path, const struct fw_replay_opts *opts, long *bad_line)
{
    struct fw_replay_opts none = {-1, FW_INSERT_NONE, 0, 0, 0, 0};
    const struct fw_replay_opts *o = opts != NULL ? opts : &none;
    if (o->device == 1 && cuCtxSetCurrent((CUcontext)FAKE_CTX_DEVICE_1) != CUDA_SUCCESS)
        return -1;
    long n = fw_replay_file(path, o, bad_line);
    if (o->device == 1)
        cuCtxSetCurrent((CUcontext)FAKE_CTX_DEVICE_0);
    return n;
}

static long fw_replay_file(const char *path, const struct fw_replay_opts *o, long *bad_line)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    fw_setup();
    fw_objects_make(1);
    fw_first_block_reported();
    /* FAKE_CAPTURING: every stream reports a capture in progress (fake_cuda.c).
     * One is begun here, once, as the application that made it would have:
     * the shim asks the driver about streams only while it has seen a
     * capture begin and not end. */
    static atomic_bool begun;
    const char *capturing = getenv("FAKE_CAPTURING");
    if (capturing != NULL && strcmp(capturing, "unseen") != 0 && !atomic_exchange(&begun, true) &&
        (strcmp(capturing, "v1") == 0 ? cuStreamBeginCapture((CUstream)0x5000) != CUDA_SUCCESS /* CUDA 10.0's */
                                      : cudaStreamBeginCapture((cudaStream_t)0x5000, cudaStreamCaptureModeGlobal) !=
                                            cudaSuccess))
        return -1;
    static _Thread_local char line[1 << 16];
    char *tok[64];
    long calls = 0, lineno = 0;
    while ((o->stop_after == 0 || calls < o->stop_after) && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        int n = 0;
        char *save = NULL;
        for (char *t = strtok_r(line, " \n", &save); t != NULL && n < 64; t = strtok_r(NULL, " \n", &save))
            tok[n++] = t;
        if ((n == 3 || n == 4) && strcmp(tok[0], "F") == 0) { /* a free an allocator reports; not a call */
            fw_c10_report((uintptr_t)strtoull(tok[1], NULL, 0), -strtoll(tok[2], NULL, 0), n == 4 ? atoi(tok[3]) : 1);
            continue;
        }
        if (n == 3 && strcmp(tok[0], "A") == 0) { /* a block it hands out */
            fw_c10_report((uintptr_t)strtoull(tok[1], NULL, 0), strtoll(tok[2], NULL, 0), 1);
            continue;
        }
        long long r = -1;
        if (calls == o->insert_before && n > 1 &&
            fw_insert(o->insert, fw_replay_stream(tok[strcmp(tok[0], "L") == 0 ? 9 : 1], o->stream), o->insert_ptr) != 0) {
            *bad_line = lineno;
            fclose(f);
            return -1;
        }
        if (n > 0 && strcmp(tok[0], "L") == 0)
            r = fw_replay_launch(tok, n, o->stream);
        else if (n > 0 && strcmp(tok[0], "M") == 0)
            r = fw_replay_matmul(tok, n, o->stream);
        else if (n > 0 && strcmp(tok[0], "C") == 0)
            r = fw_replay_cudnn(tok, n, o->stream);
        else if (n > 0 && strcmp(tok[0], "G") == 0)
            r = fw_replay_gemm();
        if (r != 0) {
            *bad_line = lineno;
            fclose(f);
            return -1;
        }
        calls++;
    }
    fclose(f);
    return calls;
}

FAKE_EXPORT long fw_graph(const char *path, const struct fw_graph_opts *o, long *bad_line)
{
    cudaStream_t cs = (cudaStream_t)o->capture_stream, ls = (cudaStream_t)o->launch_stream;
    if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) != cudaSuccess)
        return -1;
    struct fw_replay_opts r = {-1, FW_INSERT_NONE, o->capture_stream, 0, 0, 0};
    if (o->captured_write != 0)
        r = (struct fw_replay_opts){0, FW_INSERT_KERNEL, o->capture_stream, 0, o->captured_write, 0};
    long n = fw_replay_with(path, &r, bad_line);
    cudaGraph_t g = NULL;
    if (cudaStreamEndCapture(cs, &g) != cudaSuccess || g == NULL || n <= 0)
        return -1;
    cudaGraphExec_t e = NULL;
    if (cudaGraphInstantiateWithFlags(&e, g, 0) != cudaSuccess || e == NULL)
        return -1;
    struct fw_replay_opts plain = {-1, FW_INSERT_NONE, 0, 0, 0, 0};
    if (o->replay_around && fw_replay_with(path, &plain, bad_line) <= 0)
        return -1;
    for (int i = 1; i <= o->launches; i++) {
        if (i == o->write_before && cudaMemsetAsync((void *)o->write_ptr, 0, 64, ls) != cudaSuccess)
            return -1;
        if (cudaGraphLaunch(e, ls) != cudaSuccess)
            return -1;
    }
    if (o->replay_around && fw_replay_with(path, &plain, bad_line) <= 0)
        return -1;
    for (int i = 0; i < o->unknown_launches; i++)
        if (cudaGraphLaunch((cudaGraphExec_t)0xbad0, ls) != cudaSuccess)
            return -1;
    if (cudaGraphExecDestroy(e) != cudaSuccess || cudaGraphDestroy(g) != cudaSuccess)
        return -1;
    return n;
}

/*
 * fw_bench("replay:PATH", n): makes n calls of a replay file's stream,
 * cycling through it, with its launches decoded once beforehand (so the time
 * is the libraries' and the shim's, not the parser's); library calls are
 * made as fw_replay makes them, and its frees (F lines) reported as
 * fw_replay reports them, each counted as a call.  Returns the number of
 * failed calls.
 */
struct fw_prepared {
    char kind;
    struct fake_kernel *k;
    dim3 g, b;
    size_t shmem;
    cudaStream_t s;
    void *args[16];
    size_t sizes[16];
    unsigned np;
    char *tok[64];
    int n;
};

static long fw_replay_bench(const char *path, long n)
{
    static struct fw_prepared *calls;
    static long ncalls;
    static char *text;
    if (calls == NULL) {
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return -1;
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        rewind(f);
        text = malloc((size_t)size + 1);
        calls = calloc((size_t)size / 16 + 1, sizeof(*calls));
        if (text == NULL || calls == NULL || fread(text, 1, (size_t)size, f) != (size_t)size) {
            fclose(f);
            return -1;
        }
        fclose(f);
        text[size] = '\0';
        char *save_line = NULL;
        for (char *line = strtok_r(text, "\n", &save_line); line != NULL; line = strtok_r(NULL, "\n", &save_line)) {
            struct fw_prepared *c = &calls[ncalls++];
            char *save = NULL;
            for (char *t = strtok_r(line, " ", &save); t != NULL && c->n < 64; t = strtok_r(NULL, " ", &save))
                c->tok[c->n++] = t;
            c->kind = c->tok[0][0];
            if (c->kind != 'L')
                continue;
            unsigned np = (unsigned)strtoul(c->tok[10], NULL, 10);
            size_t sizes[16];
            for (unsigned i = 0; i < np && i < 16; i++) {
                sizes[i] = c->sizes[i] = strtoul(c->tok[11 + i], NULL, 10);
                c->args[i] = malloc(sizes[i]);
                if (c->args[i] == NULL || fw_unhex(c->tok[11 + np + i], c->args[i], sizes[i]) != 0)
                    return -1;
            }
            c->np = np < 16 ? np : 16;
            c->k = fw_replay_kernel(c->tok[1], np, sizes);
            c->g = (dim3){(unsigned)atoi(c->tok[2]), (unsigned)atoi(c->tok[3]), (unsigned)atoi(c->tok[4])};
            c->b = (dim3){(unsigned)atoi(c->tok[5]), (unsigned)atoi(c->tok[6]), (unsigned)atoi(c->tok[7])};
            c->shmem = strtoul(c->tok[8], NULL, 10);
            c->s = fw_replay_stream(c->tok[9], 0);
        }
    }
    fw_objects_make(1);
    /* FW_BENCH_EVICT_KB=N: touch N KiB between calls, as a real process's
     * framework code does between two launches, so that the shim's per-call
     * cost includes the cache misses it meets there; then the launch's
     * parameters, which the framework has just built. */
    const char *evict_env = getenv("FW_BENCH_EVICT_KB");
    size_t evict = evict_env != NULL ? (size_t)strtoul(evict_env, NULL, 10) << 10 : 0;
    unsigned char *junk = evict != 0 ? malloc(evict) : NULL;
    long failed = 0;
    for (long i = 0; i < n; i++) {
        struct fw_prepared *c = &calls[i % ncalls];
        for (size_t o = 0; junk != NULL && o < evict; o += 64)
            junk[o]++;
        for (unsigned a = 0; junk != NULL && a < c->np; a++)
            for (size_t o = 0; o < c->sizes[a]; o += 64)
                junk[o % evict] += ((volatile unsigned char *)c->args[a])[o];
        if (c->kind == 'F') { /* a free the allocator reports (replay_frees.py) */
            fw_c10_report((uintptr_t)strtoull(c->tok[1], NULL, 0), -strtoll(c->tok[2], NULL, 0), 1);
            continue;
        }
        long long r = c->kind == 'L'   ? __cudaLaunchKernel((cudaKernel_t)c->k, c->g, c->b, c->args, c->shmem, c->s)
                      : c->kind == 'M' ? fw_replay_matmul(c->tok, c->n, 0)
                      : c->kind == 'G' ? fw_replay_gemm()
                                       : fw_replay_cudnn(c->tok, c->n, 0);
        failed += r != 0;
    }
    free(junk);
    return failed;
}
