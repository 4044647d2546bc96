/*
 * qk_norm_rope: the H3 block's q/k path between to_qkv and attention as one
 * kernel.  PyTorch launches 18 kernels for it: per q and k, the strided
 * FP16->FP32 copy, RMSNorm over 64 without weight, the FP16 cast, and RoPE
 * (Half mul by cos, neg, cat, Half mul by sin, Half add, cat).
 *
 * For each token, head and q or k, a row x of 64 FP16 values (at head*192
 * and head*192 + 64 of the token's to_qkv output):
 *
 *   n = rn16(rstd * float(x)), rstd = rsqrtf(sum / 64 + eps), where sum is
 *       the sum of squares in the order vectorized_layer_norm_kernel<float,
 *       float, true> takes for rows of 64 with its 32x4 launch: lanes 0..15
 *       each fold the squares of 4 consecutive values with fused
 *       multiply-adds, then a shuffle tree (offsets 8, 4, 2, 1; the reference's
 *       offset 16 and its other warps add exact zeros);
 *   out[d] = rn16(float(rn16(n[d] * c[d])) + float(rn16(r[d] * s[d]))) for
 *       d < 48, r[d] = -n[d + 24] (d < 24) or n[d - 24], each product and the
 *       sum in FP32 as PyTorch's Half MulFunctor and add compute them;
 *   out[d] = n[d] for d >= 48.
 *
 * out is written where the reference's final concatenation writes, dense
 * [token][head][64]; cos and sin are FP16 [token][48] (row stride given).
 * One half-warp per row; 16 rows per 256-thread block.
 */
#include <cuda_fp16.h>

#define H3_QK_DIM 64
#define H3_QK_ROPE 48
#define H3_QK_HALF 24

__device__ static inline float h3_rn16(float v)
{
    return __half2float(__float2half_rn(v));
}

extern "C" __global__ void __launch_bounds__(256)
    h3_qk_norm_rope_f16(const __half *__restrict__ qkv, long long token_stride, int heads,
                        const __half *__restrict__ cosv, const __half *__restrict__ sinv, long long cs_stride,
                        float eps, __half *__restrict__ q_out, __half *__restrict__ k_out, long long tokens)
{
    const long long row = (long long)blockIdx.x * 16 + threadIdx.x / 16;
    const unsigned lane = threadIdx.x % 16;
    const long long rows = tokens * heads * 2;
    const bool live = row < rows;
    const long long r = live ? row : rows - 1; /* every lane takes part in the shuffles */
    const long long token = r / (2 * heads);
    const int head = (int)(r / 2 % heads), which = (int)(r % 2);
    const __half *x = qkv + token * token_stride + (long long)head * 3 * H3_QK_DIM + which * H3_QK_DIM;

    float v[4];
    for (int i = 0; i < 4; i++)
        v[i] = __half2float(x[4 * lane + i]);
    float s = 0.0f;
    for (int i = 0; i < 4; i++)
        s = __fmaf_rn(v[i], v[i], s);
    for (int off = 8; off > 0; off >>= 1)
        s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, off, 16));
    s = __shfl_sync(0xffffffffu, s, 0, 16);
    const float rstd = rsqrtf(__fadd_rn(__fdiv_rn(s, (float)H3_QK_DIM), eps));

    float n[4];
    for (int i = 0; i < 4; i++)
        n[i] = h3_rn16(__fmul_rn(rstd, v[i]));
    /* The rotation partner of element d is d + 24 (lanes 0-5) or d - 24
     * (lanes 6-11), six lanes away; lanes 12-15 pass through. */
    float up[4], down[4];
    for (int i = 0; i < 4; i++) {
        up[i] = __shfl_down_sync(0xffffffffu, n[i], 6, 16);
        down[i] = __shfl_up_sync(0xffffffffu, n[i], 6, 16);
    }
    if (!live)
        return;
    __half out[4];
    const __half *c = cosv + token * cs_stride, *sn = sinv + token * cs_stride;
    for (int i = 0; i < 4; i++) {
        int d = 4 * (int)lane + i;
        if (d < H3_QK_ROPE) {
            float rot = d < H3_QK_HALF ? -up[i] : down[i];
            float a = h3_rn16(__fmul_rn(n[i], __half2float(c[d])));
            float b = h3_rn16(__fmul_rn(rot, __half2float(sn[d])));
            out[i] = __float2half_rn(__fadd_rn(a, b));
        } else {
            out[i] = __float2half_rn(n[i]);
        }
    }
    __half *o = (which == 0 ? q_out : k_out) + (token * heads + head) * H3_QK_DIM + 4 * lane;
    for (int i = 0; i < 4; i++)
        o[i] = out[i];
}
