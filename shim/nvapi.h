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

/* cuda.h maps cuGetProcAddress to cuGetProcAddress_v2, and cuStreamBeginCapture
 * to cuStreamBeginCapture_v2; the table names both forms of each (the first
 * cuStreamBeginCapture, of CUDA 10.0, takes the stream alone). */
#undef cuGetProcAddress
#undef cuStreamBeginCapture
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture_ptsz(CUstream hStream);

struct __half;
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *, const void *, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
/* The per-thread-stream forms of the synchronising calls: the same types. */
__typeof__(cudaLaunchCooperativeKernel) cudaLaunchCooperativeKernel_ptsz;
__typeof__(cuLaunchCooperativeKernel) cuLaunchCooperativeKernel_ptsz;
__typeof__(cuStreamWriteValue32_v2) cuStreamWriteValue32_v2_ptsz;
__typeof__(cuStreamWaitValue32_v2) cuStreamWaitValue32_v2_ptsz;
__typeof__(cuStreamWriteValue64_v2) cuStreamWriteValue64_v2_ptsz;
__typeof__(cuStreamWaitValue64_v2) cuStreamWaitValue64_v2_ptsz;
__typeof__(cuStreamBatchMemOp_v2) cuStreamBatchMemOp_v2_ptsz;
__typeof__(cudaMemcpyAsync) cudaMemcpyAsync_ptsz;
__typeof__(cudaMemcpy2DAsync) cudaMemcpy2DAsync_ptsz;
__typeof__(cudaMemcpyPeerAsync) cudaMemcpyPeerAsync_ptsz;
__typeof__(cudaMemsetAsync) cudaMemsetAsync_ptsz;
__typeof__(cudaEventRecord) cudaEventRecord_ptsz;
__typeof__(cudaEventRecordWithFlags) cudaEventRecordWithFlags_ptsz;
__typeof__(cudaStreamWaitEvent) cudaStreamWaitEvent_ptsz;
__typeof__(cudaStreamSynchronize) cudaStreamSynchronize_ptsz;
__typeof__(cudaStreamQuery) cudaStreamQuery_ptsz;
__typeof__(cudaFreeAsync) cudaFreeAsync_ptsz;
__typeof__(cudaStreamBeginCapture) cudaStreamBeginCapture_ptsz;
__typeof__(cudaStreamEndCapture) cudaStreamEndCapture_ptsz;
__typeof__(cudaStreamBeginCaptureToGraph) cudaStreamBeginCaptureToGraph_ptsz;
__typeof__(cudaLaunchHostFunc) cudaLaunchHostFunc_ptsz;
__typeof__(cudaGraphLaunch) cudaGraphLaunch_ptsz;
__typeof__(cuMemcpy) cuMemcpy_ptds;
__typeof__(cuMemcpyAsync) cuMemcpyAsync_ptsz;
__typeof__(cuMemcpyHtoD_v2) cuMemcpyHtoD_v2_ptds;
__typeof__(cuMemcpyDtoH_v2) cuMemcpyDtoH_v2_ptds;
__typeof__(cuMemcpyDtoD_v2) cuMemcpyDtoD_v2_ptds;
__typeof__(cuMemcpyHtoDAsync_v2) cuMemcpyHtoDAsync_v2_ptsz;
__typeof__(cuMemcpyDtoHAsync_v2) cuMemcpyDtoHAsync_v2_ptsz;
__typeof__(cuMemcpyDtoDAsync_v2) cuMemcpyDtoDAsync_v2_ptsz;
__typeof__(cuMemsetD8_v2) cuMemsetD8_v2_ptds;
__typeof__(cuMemsetD32_v2) cuMemsetD32_v2_ptds;
__typeof__(cuMemsetD8Async) cuMemsetD8Async_ptsz;
__typeof__(cuMemsetD32Async) cuMemsetD32Async_ptsz;
__typeof__(cuEventRecord) cuEventRecord_ptsz;
__typeof__(cuEventRecordWithFlags) cuEventRecordWithFlags_ptsz;
__typeof__(cuStreamWaitEvent) cuStreamWaitEvent_ptsz;
__typeof__(cuStreamSynchronize) cuStreamSynchronize_ptsz;
__typeof__(cuStreamQuery) cuStreamQuery_ptsz;
__typeof__(cuMemFreeAsync) cuMemFreeAsync_ptsz;
__typeof__(cuMemAllocAsync) cuMemAllocAsync_ptsz;
__typeof__(cuStreamBeginCapture_v2) cuStreamBeginCapture_v2_ptsz;
__typeof__(cuStreamEndCapture) cuStreamEndCapture_ptsz;
__typeof__(cuStreamBeginCaptureToGraph) cuStreamBeginCaptureToGraph_ptsz;
__typeof__(cuLaunchHostFunc) cuLaunchHostFunc_ptsz;
__typeof__(cuGraphLaunch) cuGraphLaunch_ptsz;
__typeof__(cuMemsetD16_v2) cuMemsetD16_v2_ptds;
__typeof__(cuMemsetD16Async) cuMemsetD16Async_ptsz;
__typeof__(cuMemsetD2D8_v2) cuMemsetD2D8_v2_ptds;
__typeof__(cuMemsetD2D16_v2) cuMemsetD2D16_v2_ptds;
__typeof__(cuMemsetD2D32_v2) cuMemsetD2D32_v2_ptds;
__typeof__(cuMemsetD2D8Async) cuMemsetD2D8Async_ptsz;
__typeof__(cuMemsetD2D16Async) cuMemsetD2D16Async_ptsz;
__typeof__(cuMemsetD2D32Async) cuMemsetD2D32Async_ptsz;
__typeof__(cuMemcpy2D_v2) cuMemcpy2D_v2_ptds;
__typeof__(cuMemcpy2DUnaligned_v2) cuMemcpy2DUnaligned_v2_ptds;
__typeof__(cuMemcpy2DAsync_v2) cuMemcpy2DAsync_v2_ptsz;
__typeof__(cuMemcpy3D_v2) cuMemcpy3D_v2_ptds;
__typeof__(cuMemcpy3DAsync_v2) cuMemcpy3DAsync_v2_ptsz;
__typeof__(cuMemcpy3DPeer) cuMemcpy3DPeer_ptds;
__typeof__(cuMemcpy3DPeerAsync) cuMemcpy3DPeerAsync_ptsz;
__typeof__(cuMemcpyPeer) cuMemcpyPeer_ptds;
__typeof__(cuMemcpyPeerAsync) cuMemcpyPeerAsync_ptsz;
__typeof__(cuMemcpyBatchAsync_v2) cuMemcpyBatchAsync_v2_ptsz;
__typeof__(cuMemcpy3DBatchAsync_v2) cuMemcpy3DBatchAsync_v2_ptsz;
__typeof__(cuStreamAddCallback) cuStreamAddCallback_ptsz;
__typeof__(cuMemcpyDtoA_v2) cuMemcpyDtoA_v2_ptds;
__typeof__(cuMemcpyAtoD_v2) cuMemcpyAtoD_v2_ptds;
__typeof__(cuMemcpyHtoA_v2) cuMemcpyHtoA_v2_ptds;
__typeof__(cuMemcpyAtoH_v2) cuMemcpyAtoH_v2_ptds;
__typeof__(cuMemcpyAtoA_v2) cuMemcpyAtoA_v2_ptds;
__typeof__(cuMemcpyHtoAAsync_v2) cuMemcpyHtoAAsync_v2_ptsz;
__typeof__(cuMemcpyAtoHAsync_v2) cuMemcpyAtoHAsync_v2_ptsz;
cublasStatus_t cublasHgemm(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                           const struct __half *, const struct __half *, int, const struct __half *,
                           int, const struct __half *, struct __half *, int);
cublasStatus_t cublasHgemm_64(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t,
                              int64_t, int64_t, const struct __half *, const struct __half *,
                              int64_t, const struct __half *, int64_t, const struct __half *,
                              struct __half *, int64_t);

#endif
