/*
 * The qk_norm_rope op: the 18 launches of the H3 block between to_qkv and
 * attention (per q and k: the strided FP16->FP32 copy, RMSNorm over 64, the
 * FP16 cast; then per q and k the RoPE: Half mul by cos, neg, cat, Half mul
 * by sin, Half add, cat) as one kernel (kernels/qk_norm_rope.cu), which
 * writes every buffer those launches write, as they write it.
 *
 * Planning reads the signature: the 18 kernels in that order, their layouts
 * (OffsetCalculator sizes and strides, the concatenations' metadata, counts,
 * alpha) for `tokens` tokens of `heads` heads of 64, and their wiring (each
 * launch reads what the one before it wrote, k's input is q's moved by 64
 * elements, both ropes read the same cos and sin).  All of it is compared
 * bytes and references, so a matched group has this layout.  Running checks
 * the wiring again on the instance's pointers, and that no output buffer
 * overlaps another or an input, except q's rstd where the allocator gave k's
 * rstd the same buffer (k's values are the ones left there, so q's are not
 * written).
 */
#include "h3shim.h"

#include <string.h>

#include "../kernels/qk_params.h"


enum { QK_CALLS = 18, QK_HEADS = 32 };
/* Calls relative to the range's first: per side (q 0, k 1) the copy, norm and
 * cast at 3*side, the rope's six at 6 + 6*side. */
enum { C_COPY, C_NORM, C_CAST };
enum { R_MUL1, R_NEG, R_CAT1, R_MUL2, R_ADD, R_CAT2 };
#define QK_C(side, k) (3u * (side) + (k))
#define QK_R(side, k) (6u + 6u * (side) + (k))
/* Where each planned value lives in h3_op_range.arg. */
enum { QK_TOKENS, QK_TOKEN_STRIDE };

static const uint16_t EW2 = H3_EW2D_DATA(2), EW3 = H3_EW2D_DATA(3);

static bool h3_qk_name(const struct h3_sig_call *c, const char *part)
{
    return h3_sig_is_aten(c) && strstr(c->kernel, part) != NULL;
}

/* The layout of an elementwise launch: n, dims, sizes, strides[dim][operand]. */
static bool h3_qk_ew(const struct h3_sig_call *c, unsigned nargs, uint32_t n, unsigned dims, const uint32_t *size,
                     const uint32_t *strides)
{
    struct h3_ew l;
    if (!h3_ew_read(c, nargs, &l) || l.n != n || l.dims != dims)
        return false;
    for (unsigned d = 0; d < dims; d++) {
        if (l.size[d] != size[d])
            return false;
        for (unsigned a = 0; a < nargs; a++)
            if (l.stride[d][a] != strides[d * nargs + a])
                return false;
    }
    return true;
}

/* A CatArrayBatchedCopy of two FP16 inputs along the last of 4 dims: output
 * [batch, tokens / batch, heads, w0 + w1] dense; input i [batch, tokens /
 * batch, heads, wi] with row stride si elements. */
static bool h3_qk_cat(const struct h3_sig_call *c, uint32_t tokens, uint32_t w0, uint32_t s0, uint32_t w1, uint32_t s1)
{
    static const uint16_t sizes[5] = {8, 3392, 32, 4, 4};
    /* [batch, tokens / batch, heads, w]: the batch's tokens lie one after
     * another, as the launches before it coalesced them into one dimension. */
    uint32_t batch;
    if (!h3_sig_u32(c, 2, 0, &batch) || batch == 0 || tokens % batch != 0)
        return false;
    const uint32_t h = QK_HEADS, w = w0 + w1, rows = tokens * h, s = tokens / batch;
    const uint32_t out[8] = {batch, s, h, w, s * h * w, h * w, w, 1};
    const uint32_t offsets[2] = {0, w0}, dims[2] = {w0, w1}, nel[2] = {rows * w0, rows * w1};
    const uint32_t strides[16] = {batch, s, h, w0, s * h * s0, h * s0, s0, 1,
                                  batch, s, h, w1, s * h * s1, h * s1, s1, 1};
    const uint32_t three = 3, one = 1;
    static const uint8_t not_contiguous[2] = {0, 0};
    return h3_qk_name(c, "CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi4ELi64ELi64EE") && c->nparams == 5 &&
           memcmp(c->param_sizes, sizes, sizeof(sizes)) == 0 && c->have_config && c->grid[1] == 2 &&
           h3_sig_u32s_are(c, 2, 0, out, 8) && h3_sig_u32s_are(c, 3, 0, &three, 1) &&
           h3_sig_u32s_are(c, 4, 0, &one, 1) && h3_sig_u32s_are(c, 1, 512, offsets, 2) &&
           h3_sig_u32s_are(c, 1, 768, dims, 2) && h3_sig_u32s_are(c, 1, 1024, nel, 2) &&
           h3_sig_u32s_are(c, 1, 1344, strides, 16) &&
           h3_sig_bytes_are(c, 1, 1280, not_contiguous, 2) &&
           h3_sig_slot_at(c, 0, 0) >= 0;
}

/* Whether slot (call a, param pa, offset oa) points into the same buffer as
 * (call b, pb, ob), `delta` bytes further. */
static bool h3_qk_wired(const struct h3_sig *sig, uint32_t a, uint16_t pa, uint16_t oa, uint32_t b, uint16_t pb,
                        uint16_t ob, int64_t delta)
{
    uint32_t ra, sa, rb, sb;
    int64_t da, db;
    return h3_sig_root(sig, a, pa, oa, &ra, &sa, &da) && h3_sig_root(sig, b, pb, ob, &rb, &sb, &db) && ra == rb &&
           sa == sb && da == db + delta;
}

/* One side's nine launches and their wiring; j is the range's first call. */
static bool h3_qk_side_ok(const struct h3_sig *sig, uint32_t j, unsigned side, uint32_t tokens)
{
    const uint32_t h = QK_HEADS, rows = tokens * h;
    const struct h3_sig_call *cp = &sig->calls[j + QK_C(side, C_COPY)], *nm = &sig->calls[j + QK_C(side, C_NORM)],
                             *ca = &sig->calls[j + QK_C(side, C_CAST)];
    const uint32_t copy_size[2] = {64, rows}, copy_stride[4] = {4, 2, 256, 384};
    uint32_t n, count;
    if (!h3_qk_name(cp, "direct_copy_kernel_cuda") || !h3_qk_name(cp, "elementwise_kernelILi128ELi4E") ||
        !h3_qk_ew(cp, 2, rows * 64, 2, copy_size, copy_stride) || !h3_sig_is_rmsnorm(nm, false) ||
        !h3_sig_u32(nm, 0, 0, &n) || n != 64 || nm->grid[0] != rows || !h3_sig_is_half_cast(ca) ||
        !h3_sig_u32(ca, 0, 0, &count) || count != rows * 64)
        return false;
    uint32_t c0 = j + QK_C(side, C_COPY), n0 = j + QK_C(side, C_NORM), k0 = j + QK_C(side, C_CAST);
    if (!h3_qk_wired(sig, n0, 2, 0, c0, 1, EW2, 0) || !h3_qk_wired(sig, k0, 2, 8, n0, 7, 0, 0))
        return false;
    const struct h3_sig_call *m1 = &sig->calls[j + QK_R(side, R_MUL1)], *ng = &sig->calls[j + QK_R(side, R_NEG)],
                             *c1 = &sig->calls[j + QK_R(side, R_CAT1)], *m2 = &sig->calls[j + QK_R(side, R_MUL2)],
                             *ad = &sig->calls[j + QK_R(side, R_ADD)], *c2 = &sig->calls[j + QK_R(side, R_CAT2)];
    const char *mul = "gpu_kernel_impl_nocastINS0_13BinaryFunctorIN3c104HalfES5_S5_NS0_15binary_internal10MulFunctorIfEE";
    const uint32_t mul_size[3] = {48, h, tokens};
    const uint32_t mul1_stride[9] = {2, 2, 2, 96, 128, 0, h * 96, h * 128, 96};
    const uint32_t mul2_stride[9] = {2, 2, 2, 96, 96, 0, h * 96, h * 96, 96};
    const uint32_t neg_size[2] = {24, rows}, neg_stride[4] = {2, 2, 48, 128};
    uint32_t alpha;
    if (!h3_qk_name(m1, mul) || !h3_qk_ew(m1, 3, rows * 48, 3, mul_size, mul1_stride) ||
        !h3_qk_name(ng, "neg_kernel_cuda") || !h3_qk_name(ng, "c104HalfE") ||
        !h3_qk_ew(ng, 2, rows * 24, 2, neg_size, neg_stride) || !h3_qk_cat(c1, tokens, 24, 24, 24, 64) ||
        !h3_qk_name(m2, mul) || !h3_qk_ew(m2, 3, rows * 48, 3, mul_size, mul2_stride) ||
        !h3_qk_name(ad, "vectorized_elementwise_kernelILi8ENS0_15CUDAFunctor_addIN3c104HalfEEE") ||
        ad->nparams != 3 || !h3_sig_u32(ad, 0, 0, &count) || count != rows * 48 || !h3_sig_u32(ad, 1, 0, &alpha) ||
        alpha != 0x3f800000u || !h3_qk_cat(c2, tokens, 48, 48, 16, 64))
        return false;
    uint32_t r0 = j + QK_R(side, 0);
    /* mul1 reads the cast's output and cos; neg its elements 24..47; cat1
     * (neg, its elements 0..23); mul2 cat1's output and sin; add (mul1, mul2);
     * cat2 (add, its elements 48..63). */
    return h3_qk_wired(sig, r0 + R_MUL1, 1, EW3 + 8, k0, 2, 0, 0) &&
           h3_qk_wired(sig, r0 + R_NEG, 1, EW2 + 8, k0, 2, 0, 48) &&
           h3_qk_wired(sig, r0 + R_CAT1, 1, 0, r0 + R_NEG, 1, EW2, 0) &&
           h3_qk_wired(sig, r0 + R_CAT1, 1, 8, k0, 2, 0, 0) &&
           h3_qk_wired(sig, r0 + R_MUL2, 1, EW3 + 8, r0 + R_CAT1, 0, 0, 0) &&
           h3_qk_wired(sig, r0 + R_ADD, 2, 8, r0 + R_MUL1, 1, EW3, 0) &&
           h3_qk_wired(sig, r0 + R_ADD, 2, 16, r0 + R_MUL2, 1, EW3, 0) &&
           h3_qk_wired(sig, r0 + R_CAT2, 1, 0, r0 + R_ADD, 2, 0, 0) &&
           h3_qk_wired(sig, r0 + R_CAT2, 1, 8, k0, 2, 0, 96);
}

static unsigned h3_qk_plan(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                           unsigned max)
{
    for (uint32_t j = first; j + QK_CALLS - 1 <= last && max > 0; j++) {
        struct h3_ew l;
        if (!h3_qk_name(&sig->calls[j], "direct_copy_kernel_cuda") || !h3_ew_read(&sig->calls[j], 2, &l) ||
            l.dims != 2 || l.size[1] % QK_HEADS != 0)
            continue;
        uint32_t tokens = l.size[1] / QK_HEADS, r0 = j + QK_R(0, 0), r1 = j + QK_R(1, 0);
        if (!h3_qk_side_ok(sig, j, 0, tokens) || !h3_qk_side_ok(sig, j, 1, tokens) ||
            !h3_qk_wired(sig, j + QK_C(1, C_COPY), 1, EW2 + 8, j, 1, EW2 + 8, 128) ||
            !h3_qk_wired(sig, r1 + R_MUL1, 1, EW3 + 16, r0 + R_MUL1, 1, EW3 + 16, 0) ||
            !h3_qk_wired(sig, r1 + R_MUL2, 1, EW3 + 16, r0 + R_MUL2, 1, EW3 + 16, 0))
            continue;
        out[0] = (struct h3_op_range){
            .op = &h3_op_qk_norm_rope,
            .first = j,
            .last = j + QK_CALLS - 1,
            .mask = (1ull << QK_CALLS) - 1,
            .arg = {[QK_TOKENS] = tokens, [QK_TOKEN_STRIDE] = 3 * 64 * QK_HEADS},
        };
        return 1;
    }
    return 0;
}

/* ---- running ---- */

static uint64_t h3_qk_ptr(const struct h3_deferred *d, unsigned param, unsigned offset)
{
    uint64_t v;
    memcpy(&v, (const char *)d->argv[param] + offset, 8);
    return v;
}

/* Reads one side's buffers from its launches; false when the instance's
 * pointers are not wired as planned. */
static bool h3_qk_side_read(const struct h3_deferred *calls, unsigned side, struct h3_qk_side *o, uint64_t *in,
                            uint64_t *cosv, uint64_t *sinv)
{
    const struct h3_deferred *cp = &calls[QK_C(side, C_COPY)], *nm = &calls[QK_C(side, C_NORM)],
                             *ca = &calls[QK_C(side, C_CAST)], *r = &calls[QK_R(side, 0)];
    uint64_t f32 = h3_qk_ptr(cp, 1, EW2), y = h3_qk_ptr(nm, 7, 0), n16 = h3_qk_ptr(ca, 2, 0);
    uint64_t a = h3_qk_ptr(&r[R_MUL1], 1, EW3), neg = h3_qk_ptr(&r[R_NEG], 1, EW2);
    uint64_t rot = h3_qk_ptr(&r[R_CAT1], 0, 0), b = h3_qk_ptr(&r[R_MUL2], 1, EW3);
    uint64_t sum = h3_qk_ptr(&r[R_ADD], 2, 0), out = h3_qk_ptr(&r[R_CAT2], 0, 0);
    *in = h3_qk_ptr(cp, 1, EW2 + 8);
    *cosv = h3_qk_ptr(&r[R_MUL1], 1, EW3 + 16);
    *sinv = h3_qk_ptr(&r[R_MUL2], 1, EW3 + 16);
    *o = (struct h3_qk_side){(void *)(uintptr_t)f32, (void *)(uintptr_t)y,
                             (void *)(uintptr_t)h3_qk_ptr(nm, 6, 0), (void *)(uintptr_t)n16,
                             (void *)(uintptr_t)a, (void *)(uintptr_t)neg, (void *)(uintptr_t)rot,
                             (void *)(uintptr_t)b, (void *)(uintptr_t)sum, (void *)(uintptr_t)out};
    return h3_qk_ptr(nm, 2, 0) == f32 && h3_qk_ptr(ca, 2, 8) == y && h3_qk_ptr(&r[R_MUL1], 1, EW3 + 8) == n16 &&
           h3_qk_ptr(&r[R_NEG], 1, EW2 + 8) == n16 + 48 && h3_qk_ptr(&r[R_CAT1], 1, 0) == neg &&
           h3_qk_ptr(&r[R_CAT1], 1, 8) == n16 && h3_qk_ptr(&r[R_MUL2], 1, EW3 + 8) == rot &&
           h3_qk_ptr(&r[R_ADD], 2, 8) == a && h3_qk_ptr(&r[R_ADD], 2, 16) == b &&
           h3_qk_ptr(&r[R_CAT2], 1, 0) == sum && h3_qk_ptr(&r[R_CAT2], 1, 8) == n16 + 96;
}

/*
 * Drops from the parameter block every output that a later output of the
 * group overlaps (k's rstd in q's, the rope's products in q's FP32 copy)
 * or that the allocator freed after its launch (with PyTorch's own code,
 * all but what attention reads): h3_outputs_dead.  Then no two outputs overlap.  Returns false when an output
 * overlaps an input (qkv, cos, sin): "aliased"; and the reason when an output
 * written may be memory a held launch in between touches (h3_outputs_reused).
 */
static const char *h3_qk_drop_freed(struct h3_qk_params *p, long long rows, const struct h3_span *in, unsigned nin,
                             const struct h3_deferred *calls)
{
    /* Bytes per row of each field of struct h3_qk_side, in its order, and
     * the launch that writes it (relative to the side's first). */
    static const uint16_t per_row[10] = {256, 256, 4, 128, 96, 48, 96, 96, 96, 128};
    static const uint8_t made_by[10] = {C_COPY, C_NORM, C_NORM, C_CAST, R_MUL1, R_NEG, R_CAT1, R_MUL2, R_ADD, R_CAT2};
    void **field[20];
    struct h3_span b[20];
    const struct h3_deferred *by[20];
    unsigned n = 0;
    /* q's and k's copy, norm and cast (calls 5-10), then q's rope, then k's (11-22). */
    for (unsigned phase = 0; phase < 2; phase++)
        for (unsigned side = 0; side < 2; side++) {
            void **f = (void **)&p->side[side];
            for (unsigned k = phase == 0 ? 0 : 4; k < (phase == 0 ? 4u : 10u); k++, n++) {
                field[n] = &f[k];
                by[n] = &calls[k < 4 ? QK_C(side, made_by[k]) : QK_R(side, made_by[k])];
                b[n] = (struct h3_span){(uint64_t)(uintptr_t)f[k], (uint64_t)(uintptr_t)f[k] + per_row[k] * (uint64_t)rows};
            }
        }
    const uint64_t freed = h3_outputs_dead(b, by, n);
    const char *why = h3_outputs_reused(b, by, n, freed);
    if (why != NULL)
        return why;
    for (unsigned i = 0; i < n; i++) {
        if ((freed >> i) & 1) {
            *field[i] = NULL;
            continue;
        }
        for (unsigned k = 0; k < nin; k++)
            if (h3_spans_overlap(b[i], in[k]))
                return "aliased";
    }
    return NULL;
}

/* Whether every lane's 4 elements can be loaded and stored as one vector:
 * 8-byte FP16 and 16-byte FP32 rows (h3_qk_norm_rope_f16x4). */
static bool h3_qk_wide(const struct h3_qk_params *p)
{
    uint64_t misaligned = (uint64_t)(uintptr_t)p->qkv % 8 | (uint64_t)p->token_stride % 4 |
                          (uint64_t)(uintptr_t)p->cosv % 8 | (uint64_t)(uintptr_t)p->sinv % 8 |
                          (uint64_t)p->cs_stride % 4;
    for (unsigned side = 0; side < 2; side++) {
        void *const *f = (void *const *)&p->side[side];
        for (unsigned k = 0; k < 10; k++) /* f32 and y (0, 1) in FP32, rstd (2) one float per row */
            misaligned |= k == 2 ? 0 : (uint64_t)(uintptr_t)f[k] % (k < 2 ? 16 : 8);
    }
    return misaligned == 0;
}

/* Whether every lane's 8 FP16 elements can be loaded and stored as one
 * 16-byte vector: h3_qk_norm_rope_out_f16x8, which writes `out` alone. */
static bool h3_qk_wide16(const struct h3_qk_params *p)
{
    return ((uint64_t)(uintptr_t)p->qkv | (uint64_t)(uintptr_t)p->cosv | (uint64_t)(uintptr_t)p->sinv |
            (uint64_t)(uintptr_t)p->side[0].out | (uint64_t)(uintptr_t)p->side[1].out) % 16 == 0 &&
           p->token_stride % 8 == 0 && p->cs_stride % 8 == 0;
}

/* Whether every output but what attention reads is left out: then a
 * kernel that writes `out` alone (fewer registers, more rows in flight). */
static bool h3_qk_out_only(const struct h3_qk_params *p)
{
    for (unsigned side = 0; side < 2; side++) {
        void *const *f = (void *const *)&p->side[side];
        for (unsigned k = 0; k < 9; k++) /* every field before `out` */
            if (f[k] != NULL)
                return false;
    }
    return true;
}

static const char *h3_qk_run(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    (void)anchor;
    for (unsigned i = 1; i < QK_CALLS; i++)
        if (calls[i].stream != calls[0].stream || calls[i].fn != calls[0].fn)
            return "streams_differ";
    struct h3_qk_params p = {0};
    uint64_t in[2], cs[2][2];
    for (unsigned side = 0; side < 2; side++)
        if (!h3_qk_side_read(calls, side, &p.side[side], &in[side], &cs[side][0], &cs[side][1]))
            return "layout";
    long long tokens = r->arg[QK_TOKENS], rows = tokens * QK_HEADS;
    if (in[1] != in[0] + 128 || cs[1][0] != cs[0][0] || cs[1][1] != cs[0][1])
        return "layout";
    float eps, eps_k;
    memcpy(&eps, calls[QK_C(0, C_NORM)].argv[1], 4);
    memcpy(&eps_k, calls[QK_C(1, C_NORM)].argv[1], 4);
    if (memcmp(&eps, &eps_k, 4) != 0)
        return "layout";
    const uint64_t in_bytes = (uint64_t)(tokens - 1) * (uint64_t)r->arg[QK_TOKEN_STRIDE] * 2 + 2 * 64 * 3 * QK_HEADS;
    const struct h3_span inputs[3] = {{in[0], in[0] + in_bytes},
                                      {cs[0][0], cs[0][0] + (uint64_t)tokens * 96},
                                      {cs[0][1], cs[0][1] + (uint64_t)tokens * 96}};
    const char *dropped = h3_qk_drop_freed(&p, rows, inputs, 3, calls);
    if (dropped != NULL)
        return dropped;
    p.qkv = (const void *)(uintptr_t)in[0];
    p.token_stride = r->arg[QK_TOKEN_STRIDE];
    p.cosv = (const void *)(uintptr_t)cs[0][0];
    p.sinv = (const void *)(uintptr_t)cs[0][1];
    p.cs_stride = 48;
    p.tokens = tokens;
    p.heads = QK_HEADS;
    p.eps = eps;
    void *args[] = {&p};
    /* With `out` alone and 16-byte rows, eight lanes a row (32 rows a block); else 16 rows a block. */
    const bool out_only = h3_qk_out_only(&p), out8 = out_only && h3_qk_wide16(&p);
    const unsigned per_block = out8 ? 32 : 16;
    const unsigned grid[3] = {(unsigned)((2 * rows + per_block - 1) / per_block), 1, 1}, block[3] = {256, 1, 1};
    const char *kernel = out8              ? "h3_qk_norm_rope_out_f16x8"
                         : !h3_qk_wide(&p) ? "h3_qk_norm_rope_f16"
                         : out_only        ? "h3_qk_norm_rope_out_f16x4"
                                           : "h3_qk_norm_rope_f16x4";
    /* Verify mode: every field written moves to scratch (h3_verify_outputs). */
    static const uint16_t per_row[10] = {256, 256, 4, 128, 96, 48, 96, 96, 96, 128};
    static const uint8_t made_by[10] = {C_COPY, C_NORM, C_NORM, C_CAST, R_MUL1, R_NEG, R_CAT1, R_MUL2, R_ADD, R_CAT2};
    uint64_t field[20], bytes[20], *at[20];
    unsigned elem[20];
    const struct h3_deferred *by[20];
    for (unsigned k = 0; k < 20; k++) {
        void **f = (void **)&p.side[k / 10];
        unsigned side = k / 10, i = k % 10;
        field[k] = (uint64_t)(uintptr_t)f[i];
        bytes[k] = per_row[i] * (uint64_t)rows;
        elem[k] = i < 3 ? 4 : 2;
        at[k] = &field[k];
        by[k] = &calls[i < 4 ? QK_C(side, made_by[i]) : QK_R(side, made_by[i])];
    }
    const char *why = h3_verify_outputs(at, bytes, elem, by, 20);
    if (why != NULL)
        return why;
    for (unsigned k = 0; k < 20; k++)
        ((void **)&p.side[k / 10])[k % 10] = (void *)(uintptr_t)field[k];
    return h3_kernels_launch(kernel, &calls[0], grid, block, args);
}

const struct h3_op h3_op_qk_norm_rope = {
    .name = "qk_norm_rope",
    .marks_block = true,
    .plan = h3_qk_plan,
    .run = h3_qk_run,
};
