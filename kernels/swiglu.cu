/*
 * swiglu: PyTorch's silu launch and the mul launch after it, as one kernel.
 *
 * For each element: s = rn16(g / (1 + expf(-g))) with g the gate (FP16, read
 * as FP32), then out = rn16(float(s) * float(u)).  That is exactly what
 * ActivationSiluKernel.cu (opmath float, c10::cuda::compat::exp, an IEEE
 * division) and the Half MulFunctor<float> compute, rounding at the same
 * points; no fast math, no contraction (there is nothing to contract).
 * The product of two FP16 values is exact in FP32 (22 significant bits,
 * exponents well inside FP32's normal range), so rn16(float(s) * float(u))
 * is the FP16 product rounded once: __hmul_rn / __hmul2_rn compute it, two
 * elements at a time, without the conversions (and never contract it).
 * The silu output is written too, as the unfused launches write it, unless
 * silu_out is null (the op leaves it out once PyTorch freed it).
 *
 * Layout: `rows` rows of `width` elements.  Gate and up are row-strided
 * views (the two halves of one GEMM output); silu_out and out are dense.
 *
 * h3_swiglu_f16x8 computes the same, eight elements per thread with 16-byte
 * loads and stores; the op uses it when every pointer is 16-byte aligned and
 * width and stride are multiples of 8 (the H3 block's layout).  Both take
 * silu from h3_silu, so the two kernels' bits are equal.
 */
#include <cuda_fp16.h>

__device__ static inline float h3_silu(float g)
{
    return __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
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
        const __half s = __float2half_rn(h3_silu(__half2float(gate[at])));
        out[i] = __hmul_rn(s, up[at]);
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
            __half2 h[4]; /* h[k]: elements 2k (low) and 2k + 1 */
        } g, u, s, o;
        g.u = *reinterpret_cast<const uint4 *>(gate + at);
        u.u = *reinterpret_cast<const uint4 *>(up + at);
        for (int k = 0; k < 4; k++) {
            const float2 f = __half22float2(g.h[k]);
            s.h[k] = __floats2half2_rn(h3_silu(f.x), h3_silu(f.y));
            o.h[k] = __hmul2_rn(s.h[k], u.h[k]);
        }
        if (silu_out != nullptr)
            *reinterpret_cast<uint4 *>(silu_out + i) = s.u;
#ifdef H3_TEST_SWIGLU_ULP
        /* A test build only (make KERNEL_DEFS=-DH3_TEST_SWIGLU_ULP): element
         * 1000 of every product one unit in the last place off, what verify
         * mode must catch (tests/gpu/verify_decode.py). */
        if (i == 1000)
            o.u.x ^= 1u;
#endif
        *reinterpret_cast<uint4 *>(out + i) = o.u;
    }
}
