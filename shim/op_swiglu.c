/*
 * The swiglu op: PyTorch's SiLU launch on the first half of a GEMM output
 * and the mul launch by the second half, as one kernel (kernels/swiglu.cu).
 *
 * Planning reads the signature: a silu_kernel launch followed in its group
 * by a MulFunctor launch of the same element count, both strided 2-D
 * (OffsetCalculator with 2 dims) over `rows` rows of `width` FP16 elements,
 * the mul reading the silu output and the silu input moved by `width`
 * elements.  Everything the kernel relies on (counts, strides, dtypes,
 * wiring) is in the signature's compared bytes and references, so a matched
 * group has exactly that layout; only the pointers change, and they are read
 * from the held-back launches' parameters.
 * Writes both the silu output and the product, as the unfused launches do
 * (the silu output only while the allocator has not freed it: ops.c),
 * eight elements per thread where the pointers and strides allow it.
 */
#include "h3shim.h"

#include <string.h>

/* Where each planned value lives in h3_op_range.arg. */
enum { SW_ROWS, SW_WIDTH, SW_IN_STRIDE, SW_SILU_OUT, SW_SILU_IN, SW_MUL_OUT };


static unsigned h3_swiglu_plan(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                               unsigned max)
{
    unsigned n = 0;
    for (uint32_t j = first; j < last && n < max; j++) {
        const struct h3_sig_call *s = &sig->calls[j], *m = &sig->calls[j + 1];
        if (!h3_sig_is_aten(s) || !h3_sig_is_aten(m) || strstr(s->kernel, "silu_kernel") == NULL || strstr(m->kernel, "MulFunctor") == NULL ||
            strstr(s->kernel, "c104Half") == NULL || strstr(m->kernel, "IN3c104HalfES5_S5_") == NULL)
            continue;
        struct h3_ew2d ls, lm;
        if (!h3_ew2d_read(s, 2, &ls) || !h3_ew2d_read(m, 3, &lm) || ls.n != lm.n || ls.width != lm.width)
            continue;
        /* FP16 everywhere; outputs dense; the two inputs share a row stride. */
        uint32_t w2 = 2 * ls.width;
        if (ls.elem[0] != 2 || ls.elem[1] != 2 || lm.elem[0] != 2 || lm.elem[1] != 2 || lm.elem[2] != 2 ||
            ls.row[0] != w2 || lm.row[0] != w2 || lm.row[1] != w2 || lm.row[2] != ls.row[1] || ls.row[1] % 2)
            continue;
        /* The data pointers right after the OffsetCalculator: silu (out, in), mul (out, a, b). */
        const uint16_t data_s = H3_EW2D_DATA(2), data_m = H3_EW2D_DATA(3);
        int so = h3_sig_slot_at(s, 1, data_s), si = h3_sig_slot_at(s, 1, data_s + 8);
        int mo = h3_sig_slot_at(m, 1, data_m), ma = h3_sig_slot_at(m, 1, data_m + 8), mb = h3_sig_slot_at(m, 1, data_m + 16);
        if (so < 0 || si < 0 || mo < 0 || ma < 0 || mb < 0)
            continue;
        const struct h3_sig_slot *a = &m->slots[ma], *b = &m->slots[mb];
        if (a->ref != H3_REF_SLOT || a->ref_call != j || a->ref_slot != (uint32_t)so || a->delta != 0 ||
            b->ref != H3_REF_SLOT || b->ref_call != j || b->ref_slot != (uint32_t)si || b->delta != (int64_t)w2)
            continue;
        out[n++] = (struct h3_op_range){
            .op = &h3_op_swiglu,
            .first = j,
            .last = j + 1,
            .arg = {ls.rows, ls.width, ls.row[1] / 2, data_s, data_s + 8, data_m},
        };
        j++;
    }
    return n;
}

static const char *h3_swiglu_run(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    (void)anchor;
    const struct h3_deferred *silu = &calls[0], *mul = &calls[1];
    if (silu->stream != mul->stream || silu->fn != mul->fn)
        return "streams_differ";
    const unsigned char *ps = silu->argv[1], *pm = mul->argv[1];
    uint64_t silu_out, gate, out, a, b;
    memcpy(&silu_out, ps + r->arg[SW_SILU_OUT], 8);
    memcpy(&gate, ps + r->arg[SW_SILU_IN], 8);
    memcpy(&out, pm + r->arg[SW_MUL_OUT], 8);
    memcpy(&a, pm + r->arg[SW_MUL_OUT] + 8, 8);
    memcpy(&b, pm + r->arg[SW_MUL_OUT] + 16, 8);
    uint64_t up = gate + 2 * (uint64_t)r->arg[SW_WIDTH];
    /* The mul reads silu's output and the input's up half, as planned: the
     * matcher may have let a reference to a freed buffer go (match.c). */
    if (a != silu_out || b != up)
        return "layout";
    long long stride = r->arg[SW_IN_STRIDE], rows = r->arg[SW_ROWS], width = r->arg[SW_WIDTH];
    /* No written output in the other's or in the input's memory (PyTorch's
     * allocator may reuse freed memory inside a group; see ops.c): else the
     * kernel's threads could race on elements another thread reads.  The
     * silu output is not written once the allocator freed it (ops.c). */
    const uint64_t dense = 2 * (uint64_t)rows * (uint64_t)width;
    const struct h3_span o[2] = {{silu_out, silu_out + dense}, {out, out + dense}},
                         in = {gate, up + 2 * ((uint64_t)(rows - 1) * (uint64_t)stride + (uint64_t)width)};
    /* The product is what w2 reads: only silu's output may be dead; both are
     * asked whether a held launch between silu and the mul took their memory. */
    const struct h3_deferred *by[2] = {silu, mul};
    const uint64_t dead = h3_outputs_dead(o, by, 1);
    const char *reused = h3_outputs_reused(o, by, 2, dead);
    if (reused != NULL)
        return reused;
    if (dead != 0)
        silu_out = 0;
    else if (h3_spans_overlap(o[0], o[1]) || h3_spans_overlap(o[0], in))
        return "aliased";
    if (h3_spans_overlap(o[1], in))
        return "aliased";
    /* Eight elements per thread where every access can be 16 bytes wide. */
    const bool wide = width % 8 == 0 && stride % 8 == 0 && (gate | up | silu_out | out) % 16 == 0;
    const char *why = h3_verify_outputs((uint64_t *const[]){&silu_out, &out}, (const uint64_t[]){dense, dense},
                                        (const unsigned[]){2, 2}, (const struct h3_deferred *const[]){silu, mul}, 2);
    if (why != NULL)
        return why;
    void *args[] = {&gate, &up, &stride, &silu_out, &out, &rows, &width};
    long long n = wide ? rows * width / 8 : rows * width;
    /* At most 64 (wide) or 32 blocks an SM; the kernels stride over the rest. */
    unsigned threads = 256, blocks = (unsigned)((n + threads - 1) / threads),
             cap = h3_kernels_sm_count() * (wide ? 64u : 32u);
    if (blocks > cap)
        blocks = cap;
    const unsigned grid[3] = {blocks, 1, 1}, block[3] = {threads, 1, 1};
    return h3_kernels_launch(wide ? "h3_swiglu_f16x8" : "h3_swiglu_f16", silu, grid, block, args);
}

const struct h3_op h3_op_swiglu = {
    .name = "swiglu",
    .marks_block = true,
    .plan = h3_swiglu_plan,
    .run = h3_swiglu_run,
};
