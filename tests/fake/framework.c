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
#include <stdlib.h>

#include "nvapi.h"
#include "fake.h"
#include "framework.h"

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

static struct fake_kernel fw_kernel;
static void fw_stub(void)
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
    cublasLtMatrixLayout_t lt_layout[4];
    cublasLtMatmulAlgo_t lt_algo;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    cudnnBackendDescriptor_t pack;
    void *workspace;
};
static _Thread_local struct fw_objects fw_obj;

FAKE_EXPORT void fw_setup(void)
{
    size_t sizes[3] = {8, 4, 16};
    fake_kernel_init(&fw_kernel, "_ZN2at6native29vectorized_elementwise_kernelILi8EEEviT_", 3, sizes, fw_kernel_fn);
    fake_cudart_register_stub((const void *)&fw_stub, &fw_kernel);
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
#define h3_desc_lt_matmul(c, desc, A, Adesc, B, Bdesc, C, Cdesc, D, Ddesc, algo, ws, wss, stream) \
    (desc = fw_obj.lt_desc, Adesc = fw_obj.lt_layout[0], Bdesc = fw_obj.lt_layout[1],             \
     Cdesc = fw_obj.lt_layout[2], Ddesc = fw_obj.lt_layout[3], algo = &fw_obj.lt_algo)
#define h3_desc_gemm(c, handle, ...) (handle = fw_obj.blas)
#define h3_desc_cudnn_execute(c, handle, plan, pack) (handle = fw_obj.dnn, pack = fw_obj.pack)
#define h3_cudnn_note_set(desc, attr, type, count, elements)                                       \
    (desc = fw_obj.pack, attr = CUDNN_ATTR_VARIANT_PACK_WORKSPACE, type = CUDNN_TYPE_VOID_PTR, count = 1, \
     elements = &fw_obj.workspace)

#define FW_UNPAREN(...) __VA_ARGS__
#define FW_DECL(i, decl) decl;
#define FW_FILL(i, x) fw_fill(&(x), sizeof(x), seed, i);
#define FW_WORD(i, x) sent[i] = fake_arg_word(&(x), sizeof(x));

#define H3_HOOK(lib, kind, ret, name, params, args, describe)            \
    static long long fw_call_##name(uint64_t seed, uint64_t *sent, int *nargs) \
    {                                                                     \
        FAKE_FOR_EACH(FW_DECL, FW_UNPAREN params)                         \
        FAKE_FOR_EACH(FW_FILL, FW_UNPAREN args)                           \
        fw_objects_make(seed);                                            \
        describe;                                                         \
        FAKE_FOR_EACH(FW_WORD, FW_UNPAREN args)                           \
        *nargs = FAKE_NARGS(FW_UNPAREN args);                             \
        return (long long)name args;                                      \
    }
#include "hooks.def"
#undef H3_HOOK

FAKE_EXPORT const struct fw_entry fw_entries[] = {
#define H3_HOOK(lib, kind, ret, name, params, args, describe) {#name, #lib, #kind, fw_call_##name},
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
FAKE_EXPORT long fw_bench(const char *name, long n)
{
    fw_objects_make(1);
    long failed = 0;
    if (strcmp(name, "cublasGemmEx") == 0) {
        float alpha = 1, beta = 0;
        for (long i = 0; i < n; i++)
            failed += cublasGemmEx(fw_obj.blas, CUBLAS_OP_T, CUBLAS_OP_N, 64, 64, 64, &alpha, (void *)0x1000,
                                   CUDA_R_16F, 64, (void *)0x2000, CUDA_R_16F, 64, &beta, (void *)0x3000,
                                   CUDA_R_16F, 64, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != 0;
    } else if (strcmp(name, "cuLaunchKernel") == 0) {
        for (long i = 0; i < n; i++)
            failed += cuLaunchKernel((CUfunction)&fw_kernel, 1, 1, 1, 32, 1, 1, 0, NULL, fw_obj.params, NULL) != 0;
    } else if (strcmp(name, "__cudaLaunchKernel") == 0) {
        dim3 g = {1, 1, 1}, b = {32, 1, 1};
        for (long i = 0; i < n; i++)
            failed += __cudaLaunchKernel((cudaKernel_t)&fw_kernel, g, b, fw_obj.params, 0, NULL) != 0;
    } else {
        return -1;
    }
    return failed;
}
