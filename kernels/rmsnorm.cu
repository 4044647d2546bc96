/*
 * rmsnorm: PyTorch's FP32 RMSNorm launch and the FP16 cast after it, as one
 * kernel (the arithmetic core of the norm_cast and residual_norm ops).
 *
 * The reference is vectorized_layer_norm_kernel<float, float, true> as
 * PyTorch 2.11 launches it for F.rms_norm on contiguous rows whose width is a
 * multiple of 4: one block of 32x4 threads per row.  Bitwise equality needs
 * its reduction order, which this kernel repeats step for step:
 *
 *   1. thread t = x + 32*y reads the row as float4 vectors t, t+128, ... and
 *      accumulates each element's square with a fused multiply-add
 *      (s = fma(v, v, s); PyTorch writes `s + v * v` and nvcc contracts it);
 *   2. each warp sums its 32 partial sums down a shuffle tree (offsets 16,
 *      8, 4, 2, 1; lane 0 ends with the warp's sum);
 *   3. the four warp sums combine as (w0 + w2) + (w1 + w3);
 *   4. mean square = sum / n (IEEE division), rstd = rsqrtf(ms + eps);
 *   5. y = gamma * (rstd * x) (two roundings, no contraction: nothing to
 *      contract), or rstd * x without weight; y16 = rn16(y).
 *
 * Outputs are optional (null: not written): the FP32 norm output y, the
 * per-row rstd PyTorch's kernel stores, and the FP16 cast y16.  Rows are
 * dense (x, y, y16 at row * n); n % 4 == 0 and 16-byte aligned rows, as the
 * reference's vectorised path requires.
 */
#include <cooperative_groups.h>
#include <cuda_fp16.h>

/* The steps above for kernels built on them (residual_rmsnorm).  The
 * validated h3_rmsnorm_f32 below keeps its own copy of them, as it was
 * compiled for its evidence (tests/evidence/...-rmsnorm-kernel.md): a
 * change of its code needs that test run again.
 *
 * Steps 2-4 for one 32x4 block: `s` is this thread's sum of squares (step 1). */
__device__ static float h3_block_rstd(float s, int n, float eps)
{
    __shared__ float warp_sum[4];
    for (int off = 16; off > 0; off >>= 1)
        s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, off));
    if (threadIdx.x == 0)
        warp_sum[threadIdx.y] = s;
    __syncthreads();
    const float total = __fadd_rn(__fadd_rn(warp_sum[0], warp_sum[2]), __fadd_rn(warp_sum[1], warp_sum[3]));
    return rsqrtf(__fadd_rn(__fdiv_rn(total, (float)n), eps));
}

__device__ static inline float h3_sumsq4(float4 v, float s)
{
    s = __fmaf_rn(v.x, v.x, s);
    s = __fmaf_rn(v.y, v.y, s);
    s = __fmaf_rn(v.z, v.z, s);
    return __fmaf_rn(v.w, v.w, s);
}

/* Step 5 for the float4 at index i of a row: y and y16 (either may be null). */
__device__ static inline void h3_norm_store4(float4 v, float r, const float *gamma, int i, float *y, __half *y16)
{
    float4 o;
    if (gamma != nullptr) {
        float4 g = reinterpret_cast<const float4 *>(gamma)[i];
        o = make_float4(__fmul_rn(g.x, __fmul_rn(r, v.x)), __fmul_rn(g.y, __fmul_rn(r, v.y)),
                        __fmul_rn(g.z, __fmul_rn(r, v.z)), __fmul_rn(g.w, __fmul_rn(r, v.w)));
    } else {
        o = make_float4(__fmul_rn(r, v.x), __fmul_rn(r, v.y), __fmul_rn(r, v.z), __fmul_rn(r, v.w));
    }
    if (y != nullptr)
        reinterpret_cast<float4 *>(y)[i] = o;
    if (y16 != nullptr) {
        __half2 *h = reinterpret_cast<__half2 *>(y16 + 4 * i);
        h[0] = __halves2half2(__float2half_rn(o.x), __float2half_rn(o.y));
        h[1] = __halves2half2(__float2half_rn(o.z), __float2half_rn(o.w));
    }
}

extern "C" __global__ void __launch_bounds__(128)
    h3_rmsnorm_f32(const float *__restrict__ x, const float *__restrict__ gamma, float eps, int n,
                   float *__restrict__ y, float *__restrict__ rstd, __half *__restrict__ y16)
{
    __shared__ float warp_sum[4];
    const long long row = blockIdx.x;
    const int t = threadIdx.x + 32 * threadIdx.y, nvec = n / 4;
    const float4 *xv = reinterpret_cast<const float4 *>(x + row * n);

    float s = 0.0f;
    for (int i = t; i < nvec; i += 128) {
        float4 v = xv[i];
        s = __fmaf_rn(v.x, v.x, s);
        s = __fmaf_rn(v.y, v.y, s);
        s = __fmaf_rn(v.z, v.z, s);
        s = __fmaf_rn(v.w, v.w, s);
    }
    for (int off = 16; off > 0; off >>= 1)
        s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, off));
    if (threadIdx.x == 0)
        warp_sum[threadIdx.y] = s;
    __syncthreads();
    const float total = __fadd_rn(__fadd_rn(warp_sum[0], warp_sum[2]), __fadd_rn(warp_sum[1], warp_sum[3]));
    const float r = rsqrtf(__fadd_rn(__fdiv_rn(total, (float)n), eps));

    const float4 *gv = reinterpret_cast<const float4 *>(gamma);
    for (int i = t; i < nvec; i += 128) {
        float4 v = xv[i], o;
        if (gamma != nullptr) {
            float4 g = gv[i];
            o = make_float4(__fmul_rn(g.x, __fmul_rn(r, v.x)), __fmul_rn(g.y, __fmul_rn(r, v.y)),
                            __fmul_rn(g.z, __fmul_rn(r, v.z)), __fmul_rn(g.w, __fmul_rn(r, v.w)));
        } else {
            o = make_float4(__fmul_rn(r, v.x), __fmul_rn(r, v.y), __fmul_rn(r, v.z), __fmul_rn(r, v.w));
        }
        if (y != nullptr)
            reinterpret_cast<float4 *>(y + row * n)[i] = o;
        if (y16 != nullptr) {
            __half2 *h = reinterpret_cast<__half2 *>(y16 + row * n + 4 * i);
            h[0] = __halves2half2(__float2half_rn(o.x), __float2half_rn(o.y));
            h[1] = __halves2half2(__float2half_rn(o.z), __float2half_rn(o.w));
        }
    }
    if (t == 0 && rstd != nullptr)
        rstd[row] = r;
}

/*
 * residual_rmsnorm: the block's scaled residual and the RMSNorm after it.
 * PyTorch: p = b16 * scale (Half times Float, computed and stored in FP32:
 * rn32(float(b) * s)), h' = h + p (rn32, CUDAFunctor_add with alpha 1), then
 * RMSNorm of h' as h3_rmsnorm_f32 computes it, and the FP16 cast.  Writes p
 * and h' as the two element-wise launches do, then y, rstd and y16 (each
 * optional but h').  b16 rows are `b_stride` elements apart; everything
 * else is dense rows of n.  No __restrict__ on what may share memory: PyTorch
 * may have given y the memory of h, and y16 that of b16, freed before they
 * were allocated.  A thread writes those elements only after it read the
 * inputs in their place, so that stays exact (the op checks the rest).
 */
/* One row of residual_rmsnorm, by one 32x4 block: `bv` is the row's b16 as
 * half2 pairs (in global memory, or staged in shared memory). */
__device__ static inline void h3_residual_row(const __half2 *bv, const float *__restrict__ scale, const float *h,
                                              float *p_out, float *h_out, const float *__restrict__ gamma, float eps,
                                              int n, float *y, float *__restrict__ rstd, __half *y16, long long row)
{
    const int t = threadIdx.x + 32 * threadIdx.y, nvec = n / 4;
    const float4 *hv = reinterpret_cast<const float4 *>(h + row * n), *sv = reinterpret_cast<const float4 *>(scale);
    float4 *pv = reinterpret_cast<float4 *>(p_out + row * n), *ov = reinterpret_cast<float4 *>(h_out + row * n);
    float s = 0.0f;
    for (int i = t; i < nvec; i += 128) {
        float2 b01 = __half22float2(bv[2 * i]), b23 = __half22float2(bv[2 * i + 1]);
        float4 sc = sv[i], hh = hv[i];
        float4 p = make_float4(__fmul_rn(b01.x, sc.x), __fmul_rn(b01.y, sc.y), __fmul_rn(b23.x, sc.z),
                               __fmul_rn(b23.y, sc.w));
        float4 o = make_float4(__fadd_rn(hh.x, p.x), __fadd_rn(hh.y, p.y), __fadd_rn(hh.z, p.z),
                               __fadd_rn(hh.w, p.w));
        if (p_out != nullptr)
            pv[i] = p;
        ov[i] = o;
        s = h3_sumsq4(o, s);
    }
    const float r = h3_block_rstd(s, n, eps);
    for (int i = t; i < nvec; i += 128)
        h3_norm_store4(ov[i], r, gamma, i, y != nullptr ? y + row * n : nullptr,
                       y16 != nullptr ? y16 + row * n : nullptr);
    if (t == 0 && rstd != nullptr)
        rstd[row] = r;
}

extern "C" __global__ void __launch_bounds__(128)
    h3_residual_rmsnorm_f32(const __half *b16, long long b_stride, const float *__restrict__ scale, const float *h,
                            float *p_out, float *h_out, const float *__restrict__ gamma, float eps, int n, float *y,
                            float *__restrict__ rstd, __half *y16)
{
    const long long row = blockIdx.x;
    h3_residual_row(reinterpret_cast<const __half2 *>(b16 + row * b_stride), scale, h, p_out, h_out, gamma, eps, n,
                    y, rstd, y16, row);
}

/*
 * residual_rmsnorm_staged: the same rows, for outputs PyTorch put in b16's
 * memory at any offset (h' over b16, where row r of h' covers b16 rows 2r
 * and 2r+1, which other blocks read).  Launched cooperatively, every block
 * resident: each block first copies the b16 rows it will use (rows
 * blockIdx.x, + gridDim.x, ...) to shared memory (`rows_per_block` rows of n
 * halves, the launch's dynamic shared memory), the whole grid waits until
 * every row is copied, then each row runs exactly as in the kernel above,
 * from the copy.  The arithmetic is the same code, so the bits are too.
 */
extern "C" __global__ void __launch_bounds__(128)
    h3_residual_rmsnorm_f32_staged(const __half *b16, long long b_stride, const float *__restrict__ scale,
                                   const float *h, float *p_out, float *h_out, const float *__restrict__ gamma,
                                   float eps, int n, float *y, float *__restrict__ rstd, __half *y16, int rows)
{
    extern __shared__ __half2 h3_staged[];
    const int t = threadIdx.x + 32 * threadIdx.y, pairs = n / 2;
    int k = 0;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x, k++) {
        const __half2 *bv = reinterpret_cast<const __half2 *>(b16 + row * b_stride);
        for (int i = t; i < pairs; i += 128)
            h3_staged[k * pairs + i] = bv[i];
    }
    cooperative_groups::this_grid().sync();
    k = 0;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x, k++) {
        h3_residual_row(h3_staged + k * pairs, scale, h, p_out, h_out, gamma, eps, n, y, rstd, y16, row);
        __syncthreads(); /* h3_block_rstd's warp sums are reused by the next row */
    }
}
