/*
 * swiglu: PyTorch's silu launch and the mul launch after it, as one kernel.
 *
 * For each element: s = rn16(g / (1 + expf(-g))) with g the gate (FP16, read
 * as FP32), then out = rn16(float(s) * float(u)).  That is exactly what
 * ActivationSiluKernel.cu (opmath float, c10::cuda::compat::exp, an IEEE
 * division) and the Half MulFunctor<float> compute, rounding at the same
 * points; no fast math, no contraction (there is nothing to contract).
 * The silu output is written too, as the unfused launches write it.
 *
 * Layout: `rows` rows of `width` elements.  Gate and up are row-strided
 * views (the two halves of one GEMM output); silu_out and out are dense.
 */
#include <cuda_fp16.h>

extern "C" __global__ void h3_swiglu_f16(const __half *__restrict__ gate, const __half *__restrict__ up,
                                         long long in_row_stride, __half *__restrict__ silu_out,
                                         __half *__restrict__ out, long long rows, long long width)
{
    long long n = rows * width;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long r = i / width, c = i - r * width;
        float g = __half2float(gate[r * in_row_stride + c]);
        __half s = __float2half_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
        silu_out[i] = s;
        out[i] = __float2half_rn(__fmul_rn(__half2float(s), __half2float(up[r * in_row_stride + c])));
    }
}
