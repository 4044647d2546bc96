/*
 * swiglu: PyTorch's silu launch and the mul launch after it, as one kernel.
 *
 * For each element: s = rn16(g / (1 + expf(-g))) with g the gate (FP16, read
 * as FP32), then out = rn16(float(s) * float(u)).  That is exactly what
 * ActivationSiluKernel.cu (opmath float, c10::cuda::compat::exp, an IEEE
 * division) and the Half MulFunctor<float> compute, rounding at the same
 * points; no fast math, no contraction (there is nothing to contract).
 * The silu output is written too, as the unfused launches write it, unless
 * silu_out is null (the op leaves it out once PyTorch freed it).
 *
 * Layout: `rows` rows of `width` elements.  Gate and up are row-strided
 * views (the two halves of one GEMM output); silu_out and out are dense.
 *
 * h3_swiglu_f16x8 computes the same, eight elements per thread with 16-byte
 * loads and stores; the op uses it when every pointer is 16-byte aligned and
 * width and stride are multiples of 8 (the H3 block's layout).  Each element
 * goes through the same h3_swiglu_one, so the two kernels' bits are equal.
 */
#include <cuda_fp16.h>

/* silu(g) into *silu, and silu(g) * u into *out. */
__device__ static inline void h3_swiglu_one(__half g16, __half u16, __half *silu, __half *out)
{
    float g = __half2float(g16);
    __half s = __float2half_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
    *silu = s;
    *out = __float2half_rn(__fmul_rn(__half2float(s), __half2float(u16)));
}

extern "C" __global__ void h3_swiglu_f16(const __half *__restrict__ gate, const __half *__restrict__ up,
                                         long long in_row_stride, __half *__restrict__ silu_out,
                                         __half *__restrict__ out, long long rows, long long width)
{
    long long n = rows * width;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long r = i / width, c = i - r * width;
        long long at = r * in_row_stride + c;
        __half s;
        h3_swiglu_one(gate[at], up[at], &s, &out[i]);
        if (silu_out != nullptr)
            silu_out[i] = s;
    }
}

extern "C" __global__ void h3_swiglu_f16x8(const __half *__restrict__ gate, const __half *__restrict__ up,
                                           long long in_row_stride, __half *__restrict__ silu_out,
                                           __half *__restrict__ out, long long rows, long long width)
{
    const long long per_row = width / 8, n = rows * per_row;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n;
         v += (long long)gridDim.x * blockDim.x) {
        long long r = v / per_row, c = (v - r * per_row) * 8;
        long long at = r * in_row_stride + c, i = r * width + c;
        union {
            uint4 u;
            __half h[8];
        } g, u, s, o;
        g.u = *reinterpret_cast<const uint4 *>(gate + at);
        u.u = *reinterpret_cast<const uint4 *>(up + at);
        for (int k = 0; k < 8; k++)
            h3_swiglu_one(g.h[k], u.h[k], &s.h[k], &o.h[k]);
        if (silu_out != nullptr)
            *reinterpret_cast<uint4 *>(silu_out + i) = s.u;
        *reinterpret_cast<uint4 *>(out + i) = o.u;
    }
}
