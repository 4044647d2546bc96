/*
 * Fake libcublasLt.so.13: descriptors, layouts and algorithm configs with
 * readable attributes, and cublasLtMatmul, which like the real one launches
 * its kernel through the driver (found with dlsym on a libcuda handle).
 */
#include <dlfcn.h>
#include <stdlib.h>

#include "nvapi.h"
#include "attrs.h"
#include "fake.h"

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                    cudaDataType_t scale)
{
    struct fake_attrs *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    a->magic = FAKE_ATTRS_MAGIC;
    int32_t c = compute, s = scale, zero = 0;
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &c, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &s, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_TRANSA, &zero, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_TRANSB, &zero, 4);
    fake_attrs_set(a, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4);
    *d = (cublasLtMatmulDesc_t)a;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                          const void *buf, size_t size)
{
    return fake_attrs_set((struct fake_attrs *)d, attr, buf, size) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                          void *buf, size_t size, size_t *written)
{
    return fake_attrs_get((struct fake_attrs *)d, attr, buf, size, written) ? CUBLAS_STATUS_SUCCESS
                                                                            : CUBLAS_STATUS_INVALID_VALUE;
}

FAKE_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                      uint64_t cols, int64_t ld)
{
    struct fake_attrs *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
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
    *l = (cublasLtMatrixLayout_t)a;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                            void *buf, size_t size, size_t *written)
{
    return fake_attrs_get((struct fake_attrs *)l, attr, buf, size, written) ? CUBLAS_STATUS_SUCCESS
                                                                            : CUBLAS_STATUS_INVALID_VALUE;
}

FAKE_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
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

static long long fake_behave(const char *fn, void **argp)
{
    if (strcmp(fn, "cublasLtMatmul") != 0)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* What the GEMM reads as A and bias (the bias is a descriptor attribute),
     * logged as an entry "lt_operands". */
    uint64_t operands[2] = {(uint64_t)(uintptr_t)*(const void **)argp[3], 0};
    cublasLtMatmulDescGetAttribute(*(cublasLtMatmulDesc_t *)argp[1], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &operands[1],
                                   sizeof(operands[1]), NULL);
    fakelog_call("cublasLt", "lt_operands", 2, operands, 0);
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
