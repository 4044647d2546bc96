/*
 * The norm_cast op: PyTorch's FP32 RMSNorm launch and the autocast FP16 cast
 * of its output for the next GEMM, as one kernel (kernels/rmsnorm.cu, which
 * repeats the reduction order of vectorized_layer_norm_kernel<float, float,
 * true> for its 32x4 launch).
 *
 * Planning reads the signature: a vectorized_layer_norm_kernel<float, float,
 * true> launch of 32x4 threads, rows of N floats (N % 4 == 0) with no beta
 * and no mean (compared bytes: zero), a weight, rstd and output; then, later
 * in its group, a vectorized float16_copy launch whose input is that output
 * (a reference in the signature), with no call in between touching it.  The
 * other calls in between (the block's weight casts) stay where they are.
 * The op runs where the norm was launched and writes everything the two
 * launches wrote: the FP32 output, rstd, and the FP16 copy.
 */
#include "h3shim.h"

#include <string.h>

/* Where each planned value lives in h3_op_range.arg. */
enum { NC_CAST };

/* Validated: tests/evidence/2026-11-29-nvidia-h200-rmsnorm-kernel.md (the kernel against
 * PyTorch, 163 M elements, 0 bits differing) and ...-full-decode-norm-cast.md, ...-all-ops.md
 * (full decode bitwise equal with the op in every block, eager and CUDA graphs). */
static const int h3_norm_cast_validated[] = {90};

/* Whether param `param` of call `c` has its `len` recorded bytes at offset 0, all zero. */
static bool h3_nc_zero_bytes(const struct h3_sig_call *c, uint16_t param, uint16_t len)
{
    for (uint32_t i = 0; i < c->nbytes; i++) {
        const struct h3_sig_bytes *b = &c->bytes[i];
        if (b->param != param || b->offset != 0 || b->len < len)
            continue;
        for (uint16_t k = 0; k < len; k++)
            if (b->data[k] != 0)
                return false;
        return true;
    }
    return false;
}

static bool h3_nc_is_norm(const struct h3_sig_call *c)
{
    static const uint16_t sizes[8] = {4, 4, 8, 8, 8, 8, 8, 8};
    return c->kind == H3_SIG_LAUNCH && strstr(c->kernel, "vectorized_layer_norm_kernelIffLb1E") != NULL &&
           c->nparams == 8 && memcmp(c->param_sizes, sizes, sizeof(sizes)) == 0 && c->have_config &&
           c->block[0] == 32 && c->block[1] == 4 && c->block[2] == 1 && h3_nc_zero_bytes(c, 4, 8) &&
           h3_nc_zero_bytes(c, 5, 8) && h3_sig_slot_at(c, 2, 0) >= 0 && h3_sig_slot_at(c, 3, 0) >= 0 &&
           h3_sig_slot_at(c, 6, 0) >= 0 && h3_sig_slot_at(c, 7, 0) >= 0;
}

static bool h3_nc_is_cast(const struct h3_sig_call *c)
{
    return c->kind == H3_SIG_LAUNCH && strstr(c->kernel, "float16_copy_kernel_cuda") != NULL &&
           strstr(c->kernel, "vectorized_elementwise_kernelILi8E") != NULL &&
           strstr(c->kernel, "St5arrayIPcLm2EE") != NULL && c->nparams == 3 && c->param_sizes[0] == 4 &&
           c->param_sizes[1] == 1 && c->param_sizes[2] == 16;
}

/* Whether any call in (a, b) refers to slot (j, s). */
static bool h3_nc_touched_between(const struct h3_sig *sig, uint32_t a, uint32_t b, uint32_t j, uint32_t s)
{
    for (uint32_t c = a + 1; c < b; c++)
        for (uint32_t i = 0; i < sig->calls[c].nslots; i++) {
            const struct h3_sig_slot *x = &sig->calls[c].slots[i];
            if (x->ref == H3_REF_SLOT && x->ref_call == j && x->ref_slot == s)
                return true;
        }
    return false;
}

static unsigned h3_nc_plan(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                           unsigned max)
{
    unsigned n = 0;
    for (uint32_t j = first; j < last && n < max; j++) {
        const struct h3_sig_call *norm = &sig->calls[j];
        if (!h3_nc_is_norm(norm))
            continue;
        uint32_t y = (uint32_t)h3_sig_slot_at(norm, 7, 0);
        for (uint32_t c = j + 1; c <= last && c - j < 64; c++) {
            const struct h3_sig_call *cast = &sig->calls[c];
            int in = h3_sig_slot_at(cast, 2, 8);
            if (!h3_nc_is_cast(cast) || in < 0 || h3_sig_slot_at(cast, 2, 0) < 0)
                continue;
            const struct h3_sig_slot *s = &cast->slots[in];
            if (s->ref != H3_REF_SLOT || s->ref_call != j || s->ref_slot != y || s->delta != 0 ||
                h3_nc_touched_between(sig, j, c, j, y))
                continue;
            out[n++] = (struct h3_op_range){
                .op = &h3_op_norm_cast,
                .first = j,
                .last = c,
                .mask = 1ull | (1ull << (c - j)),
                .arg = {[NC_CAST] = c - j},
            };
            break;
        }
    }
    return n;
}

static const char *h3_nc_run(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    (void)anchor;
    const struct h3_deferred *norm = &calls[0], *cast = &calls[r->arg[NC_CAST]];
    if (norm->stream != cast->stream || norm->fn != cast->fn)
        return "streams_differ";
    int32_t n, count;
    float eps;
    uint64_t x, gamma, beta, rstd, y, out, in;
    memcpy(&n, norm->argv[0], 4);
    memcpy(&eps, norm->argv[1], 4);
    memcpy(&x, norm->argv[2], 8);
    memcpy(&gamma, norm->argv[3], 8);
    memcpy(&beta, norm->argv[4], 8);
    memcpy(&rstd, norm->argv[6], 8);
    memcpy(&y, norm->argv[7], 8);
    memcpy(&count, cast->argv[0], 4);
    memcpy(&out, cast->argv[2], 8);
    memcpy(&in, (const char *)cast->argv[2] + 8, 8);
    unsigned rows = norm->grid.x;
    /* What the kernel relies on, checked on the pointers of this instance. */
    if (n <= 0 || n % 4 != 0 || beta != 0 || in != y || (long long)count != (long long)rows * n ||
        norm->grid.y != 1 || norm->grid.z != 1 || norm->block.x != 32 || norm->block.y != 4 || norm->block.z != 1)
        return "layout";
    if (x % 16 != 0 || y % 16 != 0 || gamma % 16 != 0 || out % 8 != 0)
        return "unaligned";
    void *args[] = {&x, &gamma, &eps, &n, &y, &rstd, &out};
    const unsigned grid[3] = {rows, 1, 1}, block[3] = {32, 4, 1};
    return h3_kernels_launch("h3_rmsnorm_f32", norm, grid, block, args);
}

const struct h3_op h3_op_norm_cast = {
    .name = "norm_cast",
    .switch_name = "H3SHIM_OP_NORM_CAST",
    .switch_value = &h3_config.op_norm_cast,
    .validated_sms = h3_norm_cast_validated,
    .nvalidated = H3_ARRAY_LEN(h3_norm_cast_validated),
    .plan = h3_nc_plan,
    .run = h3_nc_run,
};
