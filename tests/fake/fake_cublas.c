/*
 * Fake libcublas.so.13: handles that carry a stream, and the GEMM entry
 * points (log and return only).
 */
#include <stdlib.h>

#include "nvapi.h"
#include "fake.h"

#define FAKE_HANDLE_MAGIC 0x68616e64u
struct fake_handle {
    uint32_t magic;
    cudaStream_t stream;
};

FAKE_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    struct fake_handle *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    f->magic = FAKE_HANDLE_MAGIC;
    *h = (cublasHandle_t)f;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    struct fake_handle *f = (struct fake_handle *)h;
    if (f == NULL || f->magic != FAKE_HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    f->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s)
{
    struct fake_handle *f = (struct fake_handle *)h;
    if (f == NULL || f->magic != FAKE_HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = f->stream;
    return CUBLAS_STATUS_SUCCESS;
}

static long long fake_behave(const char *fn, void **argp)
{
    (void)fn;
    struct fake_handle *f = *(struct fake_handle **)argp[0];
    return f != NULL && f->magic == FAKE_HANDLE_MAGIC ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

#define FAKE_LIB_CUBLAS
#include "stubs.h"
