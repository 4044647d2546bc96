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
 * 16 rows per 256-thread block; each lane holds 4 consecutive elements.
 *
 * h3_qk_norm_rope_f16x4 is the same with each lane's 4 elements loaded and
 * stored as one vector (8 bytes of FP16, 16 of FP32); the op uses it when
 * every pointer and stride allows that.  h3_qk_norm_rope_out_f16x4 is that
 * kernel writing only `out` (the op uses it when every other output is left
 * out): without the other stores it needs fewer registers, so more rows are
 * in flight.  All three instantiate h3_qk_rows, so they compute the same
 * values (h3_qk_rows can give a half-warp several rows, every row's loads
 * first; two rows a half-warp measured no faster in the block, 0.0187
 * against 0.0184 ms, so each kernel takes one).  Each lane loads its cos and sin before the reduction, so that
 * their latency overlaps it.
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

/* Where row r (q and k rows interleaved: token, head, q or k) is: one
 * division (64-bit division is a long subroutine, and each lane runs it). */
__device__ static inline void h3_qk_where(const struct h3_qk_params &p, long long r, long long &token, int &head,
                                          int &which)
{
    const long long pair = r / 2;
    token = pair / p.heads;
    head = (int)(pair - token * p.heads);
    which = (int)(r % 2);
}

/* rsqrtf(sum / 64 + eps): dividing by 64 and multiplying by 2^-6 are the
 * same exact scaling, so both round to the same float (for every sum,
 * subnormal, infinite and NaN ones too); the multiplication skips
 * div.rn.f32's range check and the branch around its slow path. */
__device__ static inline float h3_qk_rstd(float sum, float eps)
{
    return rsqrtf(__fadd_rn(__fmul_rn(sum, 1.0f / H3_QK_DIM), eps));
}

/* Stores the 4 values of one lane at element i of an output (none when
 * base is NULL): one by one, or as one vector. */
template <bool Wide>
__device__ static inline void h3_put16x4(void *base, long long i, const unsigned short v[4])
{
    if (base == nullptr)
        return;
    unsigned short *p = reinterpret_cast<unsigned short *>(base) + i;
    if (Wide) {
        *reinterpret_cast<uint2 *>(p) = make_uint2(v[0] | (unsigned)v[1] << 16, v[2] | (unsigned)v[3] << 16);
    } else {
        for (int k = 0; k < 4; k++)
            p[k] = v[k];
    }
}

template <bool Wide>
__device__ static inline void h3_put32x4(void *base, long long i, const float v[4])
{
    if (base == nullptr)
        return;
    float *p = reinterpret_cast<float *>(base) + i;
    if (Wide) {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        for (int k = 0; k < 4; k++)
            p[k] = v[k];
    }
}

/* The 4 FP16 values at p, as bits. */
template <bool Wide>
__device__ static inline void h3_get16x4(const __half *p, unsigned short v[4])
{
    if (Wide) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        v[0] = (unsigned short)u.x, v[1] = (unsigned short)(u.x >> 16);
        v[2] = (unsigned short)u.y, v[3] = (unsigned short)(u.y >> 16);
    } else {
        for (int k = 0; k < 4; k++)
            v[k] = h3_bits(p[k]);
    }
}

/* One lane's inputs of one row: its 4 elements of x, cos and sin (cos and
 * sin for lanes 0-11 only), as bits packed two to a word, and where the row
 * is. */
struct h3_qk_in {
    uint2 x, c, s;
    long long hr; /* the row in the outputs */
    int which;
    bool live;
};

__device__ static inline uint2 h3_pack4(const unsigned short v[4])
{
    return make_uint2(v[0] | (unsigned)v[1] << 16, v[2] | (unsigned)v[3] << 16);
}

__device__ static inline void h3_unpack4(uint2 u, unsigned short v[4])
{
    v[0] = (unsigned short)u.x, v[1] = (unsigned short)(u.x >> 16);
    v[2] = (unsigned short)u.y, v[3] = (unsigned short)(u.y >> 16);
}

/* Loads row `row` (of q and k rows interleaved: token, head, q or k). */
template <bool Wide>
__device__ static inline void h3_qk_load(const struct h3_qk_params &p, long long row, unsigned lane,
                                         struct h3_qk_in &in)
{
    const long long rows = p.tokens * p.heads * 2;
    in.live = row < rows;
    long long token;
    int head;
    h3_qk_where(p, in.live ? row : rows - 1, token, head, in.which); /* every lane takes part in the shuffles */
    in.hr = token * p.heads + head;
    const __half *x = reinterpret_cast<const __half *>(p.qkv) + token * p.token_stride +
                      (long long)head * 3 * H3_QK_DIM + in.which * H3_QK_DIM;
    unsigned short b[4];
    h3_get16x4<Wide>(x + 4 * lane, b);
    in.x = h3_pack4(b);
    in.c = in.s = make_uint2(0, 0);
    if (4 * lane < H3_QK_ROPE) { /* lanes 0-11 rotate their 4 elements */
        h3_get16x4<Wide>(reinterpret_cast<const __half *>(p.cosv) + token * p.cs_stride + 4 * lane, b);
        in.c = h3_pack4(b);
        h3_get16x4<Wide>(reinterpret_cast<const __half *>(p.sinv) + token * p.cs_stride + 4 * lane, b);
        in.s = h3_pack4(b);
    }
}

/* Computes a loaded row and stores its outputs. */
template <bool Wide, bool OutOnly>
__device__ static inline void h3_qk_finish(const struct h3_qk_params &p, const struct h3_qk_in &in, unsigned lane)
{
    const struct h3_qk_side o = p.side[in.which];
    const long long hr = in.hr;
    unsigned short xb[4], cb[4], sb[4];
    h3_unpack4(in.x, xb);
    h3_unpack4(in.c, cb);
    h3_unpack4(in.s, sb);
    float v[4];
    for (int i = 0; i < 4; i++)
        v[i] = h3_f(xb[i]);
    float s = 0.0f;
    for (int i = 0; i < 4; i++)
        s = __fmaf_rn(v[i], v[i], s);
    for (int off = 8; off > 0; off >>= 1)
        s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, off, 16));
    s = __shfl_sync(0xffffffffu, s, 0, 16);
    const float rstd = h3_qk_rstd(s, p.eps);

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
    if (!in.live)
        return;
    const long long at = hr * H3_QK_DIM + 4 * lane;
    if (!OutOnly) {
        if (lane == 0 && o.rstd != nullptr)
            reinterpret_cast<float *>(o.rstd)[hr] = rstd;
        h3_put32x4<Wide>(o.f32, at, v);
        h3_put32x4<Wide>(o.y, at, y);
        h3_put16x4<Wide>(o.n16, at, n);
    }
    unsigned short out[4] = {n[0], n[1], n[2], n[3]};
    if (4 * lane < H3_QK_ROPE) { /* lanes 0-11: all 4 elements are rotated */
        unsigned short a[4], rot[4], b[4];
        for (int i = 0; i < 4; i++) {
            const int d = 4 * (int)lane + i;
            a[i] = h3_h(__fmul_rn(h3_f(n[i]), h3_f(cb[i])));
            /* PyTorch's Half neg is c10::Half's unary minus: __hneg on the GPU. */
            rot[i] = d < H3_QK_HALF ? h3_bits(__hneg(__ushort_as_half(up[i]))) : down[i];
            b[i] = h3_h(__fmul_rn(h3_f(rot[i]), h3_f(sb[i])));
            out[i] = h3_h(__fadd_rn(h3_f(a[i]), h3_f(b[i])));
        }
        if (!OutOnly) {
            const long long at48 = hr * H3_QK_ROPE + 4 * lane;
            if (4 * lane < H3_QK_HALF) /* lanes 0-5 */
                h3_put16x4<Wide>(o.neg, hr * H3_QK_HALF + 4 * lane, rot);
            h3_put16x4<Wide>(o.a, at48, a);
            h3_put16x4<Wide>(o.rot, at48, rot);
            h3_put16x4<Wide>(o.b, at48, b);
            h3_put16x4<Wide>(o.sum, at48, out);
        }
    }
    h3_put16x4<Wide>(o.out, at, out);
}

/* `Rows` rows per half-warp, 16 * Rows per 256-thread block: every row's
 * loads are issued before the first row is computed. */
template <bool Wide, bool OutOnly, int Rows>
__device__ static inline void h3_qk_rows(const struct h3_qk_params &p)
{
    const unsigned lane = threadIdx.x % 16;
    struct h3_qk_in in[Rows];
    for (int k = 0; k < Rows; k++)
        h3_qk_load<Wide>(p, ((long long)blockIdx.x * Rows + k) * 16 + threadIdx.x / 16, lane, in[k]);
    for (int k = 0; k < Rows; k++)
        h3_qk_finish<Wide, OutOnly>(p, in[k], lane);
}

extern "C" __global__ void __launch_bounds__(256) h3_qk_norm_rope_f16(const struct h3_qk_params p)
{
    h3_qk_rows<false, false, 1>(p);
}

extern "C" __global__ void __launch_bounds__(256) h3_qk_norm_rope_f16x4(const struct h3_qk_params p)
{
    h3_qk_rows<true, false, 1>(p);
}

extern "C" __global__ void __launch_bounds__(256) h3_qk_norm_rope_out_f16x4(const struct h3_qk_params p)
{
    h3_qk_rows<true, true, 1>(p);
}

/*
 * h3_qk_norm_rope_out_f16x8: `out` alone, eight lanes a row with eight
 * consecutive elements each (16-byte accesses, 32 rows a block).  Lane P
 * holds what lanes 2P and 2P+1 of the half-warp kernels hold, and the sum
 * of squares takes the same additions in the same order: each half's 4
 * squares folded with fused multiply-adds; the half-warp's offsets 8, 4
 * and 2 are shuffles by 4, 2 and 1 lanes on both halves' sums; its offset
 * 1 adds lane P's second half to its first.  The rotation partner (24
 * elements away) is three lanes away; lanes 6 and 7 pass through.  Its
 * values stay packed two to a word: the shuffles move pairs, and the rope
 * runs on half2 pairs with the same bits (see there).  The op uses it when
 * every pointer and stride allows 16-byte accesses.
 */
extern "C" __global__ void __launch_bounds__(256) h3_qk_norm_rope_out_f16x8(const struct h3_qk_params p)
{
    const unsigned lane = threadIdx.x % 8;
    const long long rows = p.tokens * p.heads * 2, row = (long long)blockIdx.x * 32 + threadIdx.x / 8;
    const bool live = row < rows;
    long long token;
    int head, which;
    h3_qk_where(p, live ? row : rows - 1, token, head, which); /* every lane takes part in the shuffles */
    const long long hr = token * p.heads + head;
    const __half *x = reinterpret_cast<const __half *>(p.qkv) + token * p.token_stride +
                      (long long)head * 3 * H3_QK_DIM + which * H3_QK_DIM;
    union h3_half8 {
        uint4 u;
        unsigned w[4];
        __half2 h[4]; /* h[k]: elements 2k (low) and 2k + 1 */
    } xv, cv, sv, n, up, down, out;
    xv.u = *reinterpret_cast<const uint4 *>(x + 8 * lane);
    if (8 * lane < H3_QK_ROPE) { /* lanes 0-5 rotate their 8 elements */
        const long long cs = token * p.cs_stride + 8 * lane;
        cv.u = *reinterpret_cast<const uint4 *>(reinterpret_cast<const __half *>(p.cosv) + cs);
        sv.u = *reinterpret_cast<const uint4 *>(reinterpret_cast<const __half *>(p.sinv) + cs);
    }
    float v[8];
    for (int k = 0; k < 4; k++) {
        const float2 f = __half22float2(xv.h[k]);
        v[2 * k] = f.x, v[2 * k + 1] = f.y;
    }
    float s0 = 0.0f, s1 = 0.0f; /* the half-warp kernels' lanes 2P and 2P+1 */
    for (int i = 0; i < 4; i++) {
        s0 = __fmaf_rn(v[i], v[i], s0);
        s1 = __fmaf_rn(v[4 + i], v[4 + i], s1);
    }
    for (int off = 4; off > 0; off >>= 1) {
        s0 = __fadd_rn(s0, __shfl_down_sync(0xffffffffu, s0, off, 8));
        s1 = __fadd_rn(s1, __shfl_down_sync(0xffffffffu, s1, off, 8));
    }
    const float rstd = h3_qk_rstd(__shfl_sync(0xffffffffu, __fadd_rn(s0, s1), 0, 8), p.eps);
    for (int k = 0; k < 4; k++)
        n.h[k] = __floats2half2_rn(__fmul_rn(rstd, v[2 * k]), __fmul_rn(rstd, v[2 * k + 1]));
    for (int k = 0; k < 4; k++) {
        up.w[k] = __shfl_down_sync(0xffffffffu, n.w[k], 3, 8);
        down.w[k] = __shfl_up_sync(0xffffffffu, n.w[k], 3, 8);
    }
    if (!live)
        return;
    out.u = n.u;
    if (8 * lane < H3_QK_ROPE) {
        /* rn16(float(a) * float(b)) is the FP16 product rounded once (the
         * FP32 product of two FP16 values is exact), and rn16(float(a) +
         * float(b)) the FP16 sum rounded once (FP32's 24 bits are at least
         * twice FP16's 11 plus 2, so the double rounding is innocuous):
         * __hmul2_rn and __hadd2_rn give the Half kernels' bits, two at a
         * time, and are never contracted into a fused multiply-add. */
        const bool first = 8 * lane < H3_QK_HALF; /* the partner is 24 ahead: rot = -n[d + 24] */
        for (int k = 0; k < 4; k++) {
            const __half2 rot = first ? __hneg2(up.h[k]) : down.h[k];
            out.h[k] = __hadd2_rn(__hmul2_rn(n.h[k], cv.h[k]), __hmul2_rn(rot, sv.h[k]));
        }
    }
    *reinterpret_cast<uint4 *>(reinterpret_cast<unsigned short *>(p.side[which].out) + hr * H3_QK_DIM + 8 * lane) =
        out.u;
}
