/*
 * NVIDIA's C headers, plus prototypes of the interposed entry points that
 * those headers do not declare in C (the per-thread-stream forms, the
 * compiler's launch entry, the CUDA 11 form of cuGetProcAddress, cuBLAS'
 * half-precision GEMMs).  Shared by the shim and the fake CUDA stack, so both
 * are compiled against the same signatures; shim/driver.c checks the driver
 * ones against NVIDIA's PFN_* typedefs.
 */
#ifndef H3_NVAPI_H
#define H3_NVAPI_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cudnn.h>

/* cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; the table names both. */
#undef cuGetProcAddress

struct __half;
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *, const void *, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
cublasStatus_t cublasHgemm(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                           const struct __half *, const struct __half *, int, const struct __half *,
                           int, const struct __half *, struct __half *, int);
cublasStatus_t cublasHgemm_64(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t,
                              int64_t, int64_t, const struct __half *, const struct __half *,
                              int64_t, const struct __half *, int64_t, const struct __half *,
                              struct __half *, int64_t);

#endif
