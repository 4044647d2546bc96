/*
 * Fake libcublasLt.so.13: descriptors, layouts and algorithm configs with
 * readable attributes, and cublasLtMatmul, which like the real one launches
 * its kernel through the driver (found with dlsym on a libcuda handle).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "nvapi.h"
#include "attrs.h"
#include "fake.h"

/* A fresh descriptor, as NVIDIA's: compute and scale types as given, no
 * transposes, the default epilogue; bias type and pointer unset (their
 * reads fail). */
static cublasStatus_t fake_desc_init(struct fake_attrs *a, cublasComputeType_t compute, cudaDataType_t scale)
{
    memset(a, 0, sizeof(*a));
    a->magic = FAKE_ATTRS_MAGIC;
    int32_t c = compute, s = scale, zero = 0;
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &c, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &s, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_TRANSA, &zero, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_TRANSB, &zero, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4);
    return CUBLAS_STATUS_SUCCESS;
}

/* A fresh layout: column order, one matrix. */
static cublasStatus_t fake_layout_init(struct fake_attrs *a, cudaDataType type, uint64_t rows, uint64_t cols,
                                       int64_t ld)
{
    memset(a, 0, sizeof(*a));
    a->magic = FAKE_ATTRS_MAGIC;
    uint32_t t = (uint32_t)type;
    int32_t order = CUBLASLT_ORDER_COL, batch = 1;
    int64_t stride = 0;
    fake_attrs_set(a, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, 4);
    fake_attrs_set(a, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, 4);
    fake_attrs_set(a, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, 8);
    fake_attrs_set(a, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, 8);
    fake_attrs_set(a, CUBLASLT_MATRIX_LAYOUT_LD, &ld, 8);
    fake_attrs_set(a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, 4);
    fake_attrs_set(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, 8);
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                          void *buf, size_t size, size_t *written)
{
    return fake_attrs_get((struct fake_attrs *)d, attr, buf, size, written) ? CUBLAS_STATUS_SUCCESS
                                                                            : CUBLAS_STATUS_INVALID_VALUE;
}

FAKE_EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                            void *buf, size_t size, size_t *written)
{
    return fake_attrs_get((struct fake_attrs *)l, attr, buf, size, written) ? CUBLAS_STATUS_SUCCESS
                                                                            : CUBLAS_STATUS_INVALID_VALUE;
}

/* An algorithm keeps its config values in data[attr]; sizes as NVIDIA's. */
static size_t algo_attr_size(cublasLtMatmulAlgoConfigAttributes_t attr)
{
    return attr == CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID || attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID ? 2 : 4;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t *algo,
                                                                cublasLtMatmulAlgoConfigAttributes_t attr,
                                                                const void *buf, size_t size)
{
    if (algo == NULL || (unsigned)attr >= 8 * 2 || size != algo_attr_size(attr))
        return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t *slots = (uint32_t *)algo->data;
    slots[attr] = 0;
    memcpy(&slots[attr], buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                                                cublasLtMatmulAlgoConfigAttributes_t attr,
                                                                void *buf, size_t size, size_t *written)
{
    if (algo == NULL || (unsigned)attr >= 8 * 2 || size != algo_attr_size(attr))
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, &((const uint32_t *)algo->data)[attr], size);
    if (written != NULL)
        *written = size;
    return CUBLAS_STATUS_SUCCESS;
}

static void lt_kernel_fn(void **params)
{
    (void)params;
}
static struct fake_kernel lt_kernel;

/* Descriptors and layouts come from a pool, so that a test's made and never
 * destroyed handles are no leak; a freed handle is the next one made (as
 * malloc tends to: the shim must not mistake it for the old one). */
#define FAKE_HANDLES 256
static struct fake_attrs fake_handles[FAKE_HANDLES];
static bool fake_handle_used[FAKE_HANDLES];
static pthread_mutex_t fake_handles_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fake_attrs *fake_handle_new(void)
{
    struct fake_attrs *a = NULL;
    pthread_mutex_lock(&fake_handles_lock);
    for (int i = 0; i < FAKE_HANDLES && a == NULL; i++)
        if (!fake_handle_used[i])
            fake_handle_used[i] = true, a = &fake_handles[i];
    pthread_mutex_unlock(&fake_handles_lock);
    return a;
}

static void fake_handle_free(void *p)
{
    pthread_mutex_lock(&fake_handles_lock);
    for (int i = 0; i < FAKE_HANDLES; i++)
        if (p == &fake_handles[i])
            fake_handle_used[i] = false, memset(&fake_handles[i], 0, sizeof(fake_handles[i]));
    pthread_mutex_unlock(&fake_handles_lock);
}

/* The descriptor and layout entry points (interposed: hooks.def's CONFIG rows). */
static long long fake_behave_desc(const char *fn, void **argp)
{
#define ARG(i, type) (*(type *)argp[i])
    if (strcmp(fn, "cublasLtMatmulDescCreate") == 0 || strcmp(fn, "cublasLtMatrixLayoutCreate") == 0) {
        if (ARG(0, void *) == NULL)
            return CUBLAS_STATUS_INVALID_VALUE;
        struct fake_attrs *a = fake_handle_new();
        if (a == NULL)
            return CUBLAS_STATUS_ALLOC_FAILED;
        if (strcmp(fn, "cublasLtMatmulDescCreate") == 0) {
            fake_desc_init(a, ARG(1, cublasComputeType_t), ARG(2, cudaDataType_t));
            *ARG(0, cublasLtMatmulDesc_t *) = (cublasLtMatmulDesc_t)a;
        } else {
            fake_layout_init(a, ARG(1, cudaDataType), ARG(2, uint64_t), ARG(3, uint64_t), ARG(4, int64_t));
            *ARG(0, cublasLtMatrixLayout_t *) = (cublasLtMatrixLayout_t)a;
        }
        return CUBLAS_STATUS_SUCCESS;
    }
    if (strcmp(fn, "cublasLtMatmulDescInit_internal") == 0)
        return ARG(0, void *) == NULL || ARG(1, size_t) < sizeof(struct fake_attrs)
                   ? CUBLAS_STATUS_INVALID_VALUE
                   : fake_desc_init(ARG(0, void *), ARG(2, cublasComputeType_t), ARG(3, cudaDataType_t));
    if (strcmp(fn, "cublasLtMatrixLayoutInit_internal") == 0)
        return ARG(0, void *) == NULL || ARG(1, size_t) < sizeof(struct fake_attrs)
                   ? CUBLAS_STATUS_INVALID_VALUE
                   : fake_layout_init(ARG(0, void *), ARG(2, cudaDataType), ARG(3, uint64_t), ARG(4, uint64_t),
                                      ARG(5, int64_t));
    if (strcmp(fn, "cublasLtMatmulDescSetAttribute") == 0 || strcmp(fn, "cublasLtMatrixLayoutSetAttribute") == 0)
        return fake_attrs_set(ARG(0, struct fake_attrs *), ARG(1, int), ARG(2, const void *), ARG(3, size_t))
                   ? CUBLAS_STATUS_SUCCESS
                   : CUBLAS_STATUS_INVALID_VALUE;
    if (strcmp(fn, "cublasLtMatmulDescDestroy") == 0 || strcmp(fn, "cublasLtMatrixLayoutDestroy") == 0) {
        fake_handle_free(ARG(0, void *));
        return CUBLAS_STATUS_SUCCESS;
    }
#undef ARG
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* Another thread's stream-ordered free of device memory (cuMemFreeAsync of
 * 0x7000 on stream 0x2000, through the driver as a runtime would find it)
 * made while a GEMM runs: another library's pool on a stream of its own. */
static void *fake_lt_free_elsewhere(void *h)
{
    CUresult (*release)(CUdeviceptr, CUstream) = (CUresult(*)(CUdeviceptr, CUstream))dlsym(h, "cuMemFreeAsync");
    if (release != NULL)
        release((CUdeviceptr)0x7000, (CUstream)0x2000);
    return NULL;
}

/* With FAKE_LT_FREE_DURING=N, during the N-th GEMM of the process another
 * thread frees device memory and is joined before the GEMM reads its
 * operands; a GEMM whose A or bias is then no longer memory that
 * cuMemAlloc_v2 handed out logs "lt_read_freed" (its kernel would read
 * memory given back under it), and one whose free has not returned within
 * 5 s logs "lt_free_hung". */
static void fake_lt_free_during(const uint64_t operands[2])
{
    static atomic_long gemms;
    const char *during = getenv("FAKE_LT_FREE_DURING");
    if (during == NULL || atomic_fetch_add(&gemms, 1) + 1 != strtol(during, NULL, 10))
        return;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*live)(uintptr_t) = h != NULL ? (int (*)(uintptr_t))dlsym(h, "fake_device_memory_live") : NULL;
    pthread_t t;
    if (live == NULL || pthread_create(&t, NULL, fake_lt_free_elsewhere, h) != 0)
        return;
    /* A free that waited for this GEMM forever would hang the replay: fail fast instead. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    if (pthread_timedjoin_np(t, NULL, &until) != 0) {
        fakelog_call("cublasLt", "lt_free_hung", 1, operands, 0);
        pthread_detach(t);
        return;
    }
    for (int i = 0; i < 2; i++)
        if (operands[i] != 0 && !live((uintptr_t)operands[i]))
            fakelog_call("cublasLt", "lt_read_freed", 1, &operands[i], 0);
}

static long long fake_behave(const char *fn, void **argp)
{
    if (strcmp(fn, "cublasLtMatmul") != 0)
        return fake_behave_desc(fn, argp);
    /* What the GEMM reads as A and bias (the bias is a descriptor attribute),
     * logged as an entry "lt_operands". */
    uint64_t operands[2] = {(uint64_t)(uintptr_t)*(const void **)argp[3], 0};
    cublasLtMatmulDescGetAttribute(*(cublasLtMatmulDesc_t *)argp[1], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &operands[1],
                                   sizeof(operands[1]), NULL);
    fakelog_call("cublasLt", "lt_operands", 2, operands, 0);
    fake_lt_free_during(operands);
    /* Like cuBLAS: the GEMM kernel goes straight to the driver. */
    if (lt_kernel.magic == 0) {
        size_t sizes[1] = {8};
        fake_kernel_init(&lt_kernel, "fake_lt_gemm_kernel", 1, sizes, lt_kernel_fn);
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    PFN_cuLaunchKernel_v4000 launch = h != NULL ? (PFN_cuLaunchKernel_v4000)dlsym(h, "cuLaunchKernel") : NULL;
    if (launch == NULL)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    void *arg = NULL;
    void *params[1] = {&arg};
    CUresult r = launch((CUfunction)&lt_kernel, 1, 1, 1, 128, 1, 1, 0, NULL, params, NULL);
    return r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

#define FAKE_LIB_CUBLASLT
#include "stubs.h"
