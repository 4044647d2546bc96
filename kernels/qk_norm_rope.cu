/*
 * qk_norm_rope: the H3 block's q/k path between to_qkv and attention as one
 * kernel.  PyTorch launches 18 kernels for it: per q and k, the strided
 * FP16->FP32 copy, RMSNorm over 64 without weight, the FP16 cast, and RoPE
 * (Half mul by cos, neg, cat, Half mul by sin, Half add, cat).  This kernel
 * computes every one of their outputs and writes those the parameter block
 * names (kernels/qk_params.h), each as PyTorch's launch would:
 *
 * For each token, head and q or k, a row x of 64 FP16 values (at head*192
 * and head*192 + 64 of the token's to_qkv output):
 *
 *   f32 = float(x);  y = rstd * f32;  n = rn16(y), where rstd = rsqrtf(sum /
 *       64 + eps) and sum is the sum of squares in the order
 *       vectorized_layer_norm_kernel<float, float, true> takes for rows of 64
 *       with its 32x4 launch: lanes 0..15 each fold the squares of 4
 *       consecutive values with fused multiply-adds, then a shuffle tree
 *       (offsets 8, 4, 2, 1; the reference's offset 16 and its other warps add
 *       exact zeros);
 *   a[d] = rn16(n[d] * c[d]) (d < 48);  neg[d] = -n[d + 24] (d < 24, __hneg);
 *   rot = cat(neg, n[0:24]);  b[d] = rn16(rot[d] * s[d]);
 *   sum[d] = rn16(float(a[d]) + float(b[d]));  out = cat(sum, n[48:64]),
 *
 * each product and sum in FP32 as PyTorch's Half MulFunctor, neg and add
 * compute them, and the concatenations copying bits.  One half-warp per row;
 * 16 rows per 256-thread block.
 */
#include <cuda_fp16.h>

#include "qk_params.h"

#define H3_QK_DIM 64
#define H3_QK_ROPE 48
#define H3_QK_HALF 24

__device__ static inline unsigned short h3_bits(__half h)
{
    return __half_as_ushort(h);
}

__device__ static inline float h3_f(unsigned short b)
{
    return __half2float(__ushort_as_half(b));
}

__device__ static inline unsigned short h3_h(float v)
{
    return __half_as_ushort(__float2half_rn(v));
}

__device__ static inline void h3_put16(void *base, long long i, unsigned short v)
{
    if (base != nullptr)
        reinterpret_cast<unsigned short *>(base)[i] = v;
}

__device__ static inline void h3_put32(void *base, long long i, float v)
{
    if (base != nullptr)
        reinterpret_cast<float *>(base)[i] = v;
}

extern "C" __global__ void __launch_bounds__(256) h3_qk_norm_rope_f16(const struct h3_qk_params p)
{
    const long long row = (long long)blockIdx.x * 16 + threadIdx.x / 16;
    const unsigned lane = threadIdx.x % 16;
    const long long rows = p.tokens * p.heads * 2;
    const bool live = row < rows;
    const long long r = live ? row : rows - 1; /* every lane takes part in the shuffles */
    const long long token = r / (2 * p.heads);
    const int head = (int)(r / 2 % p.heads), which = (int)(r % 2);
    const long long hr = token * p.heads + head; /* the row in the outputs */
    const __half *x = reinterpret_cast<const __half *>(p.qkv) + token * p.token_stride +
                      (long long)head * 3 * H3_QK_DIM + which * H3_QK_DIM;
    const struct h3_qk_side o = p.side[which];

    float v[4];
    for (int i = 0; i < 4; i++)
        v[i] = __half2float(x[4 * lane + i]);
    float s = 0.0f;
    for (int i = 0; i < 4; i++)
        s = __fmaf_rn(v[i], v[i], s);
    for (int off = 8; off > 0; off >>= 1)
        s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, off, 16));
    s = __shfl_sync(0xffffffffu, s, 0, 16);
    const float rstd = rsqrtf(__fadd_rn(__fdiv_rn(s, (float)H3_QK_DIM), p.eps));

    float y[4];
    unsigned short n[4], up[4], down[4];
    for (int i = 0; i < 4; i++) {
        y[i] = __fmul_rn(rstd, v[i]);
        n[i] = h3_h(y[i]);
    }
    /* The rotation partner of element d is d + 24 (lanes 0-5) or d - 24
     * (lanes 6-11), six lanes away; lanes 12-15 pass through. */
    for (int i = 0; i < 4; i++) {
        up[i] = (unsigned short)__shfl_down_sync(0xffffffffu, (int)n[i], 6, 16);
        down[i] = (unsigned short)__shfl_up_sync(0xffffffffu, (int)n[i], 6, 16);
    }
    if (!live)
        return;
    const __half *c = reinterpret_cast<const __half *>(p.cosv) + token * p.cs_stride;
    const __half *sn = reinterpret_cast<const __half *>(p.sinv) + token * p.cs_stride;
    if (lane == 0)
        h3_put32(o.rstd, hr, rstd);
    for (int i = 0; i < 4; i++) {
        const int d = 4 * (int)lane + i;
        h3_put32(o.f32, hr * H3_QK_DIM + d, v[i]);
        h3_put32(o.y, hr * H3_QK_DIM + d, y[i]);
        h3_put16(o.n16, hr * H3_QK_DIM + d, n[i]);
        unsigned short out = n[i];
        if (d < H3_QK_ROPE) {
            unsigned short a = h3_h(__fmul_rn(h3_f(n[i]), __half2float(c[d])));
            /* PyTorch's Half neg is c10::Half's unary minus: __hneg on the GPU. */
            unsigned short rot = d < H3_QK_HALF ? h3_bits(__hneg(__ushort_as_half(up[i]))) : down[i];
            unsigned short b = h3_h(__fmul_rn(h3_f(rot), __half2float(sn[d])));
            out = h3_h(__fadd_rn(h3_f(a), h3_f(b)));
            if (d < H3_QK_HALF)
                h3_put16(o.neg, hr * H3_QK_HALF + d, rot);
            h3_put16(o.a, hr * H3_QK_ROPE + d, a);
            h3_put16(o.rot, hr * H3_QK_ROPE + d, rot);
            h3_put16(o.b, hr * H3_QK_ROPE + d, b);
            h3_put16(o.sum, hr * H3_QK_ROPE + d, out);
        }
        h3_put16(o.out, hr * H3_QK_DIM + d, out);
    }
}
