/*
 * The RMSNorm ops (kernels/rmsnorm.cu, which repeats the reduction order of
 * vectorized_layer_norm_kernel<float, float, true> for its 32x4 launch):
 *
 *   norm_cast      the FP32 RMSNorm launch and the autocast FP16 cast of its
 *                  output for the next GEMM, as one kernel;
 *   residual_norm  the scaled residual before it (a FP32 mul of the FP16
 *                  GEMM output by the scale, then the add to h) too; where
 *                  no norm follows the residual (the block's last), the mul
 *                  and add alone.
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

/* Where each planned value lives in h3_op_range.arg (calls relative to the range's first). */
enum { NC_NORM, NC_CAST, RN_ADD, RN_ONLY };


/* Whether pointer parameter `param` of call `c` is recorded as NULL. */
static bool h3_nc_null(const struct h3_sig_call *c, uint16_t param)
{
    static const uint8_t zero[8];
    return h3_sig_bytes_are(c, param, 0, zero, sizeof(zero));
}

bool h3_sig_is_rmsnorm(const struct h3_sig_call *c, bool weight)
{
    static const uint16_t sizes[8] = {4, 4, 8, 8, 8, 8, 8, 8};
    return h3_sig_is_aten(c) && strstr(c->kernel, "vectorized_layer_norm_kernelIffLb1E") != NULL &&
           c->nparams == 8 && memcmp(c->param_sizes, sizes, sizeof(sizes)) == 0 && c->have_config &&
           c->block[0] == 32 && c->block[1] == 4 && c->block[2] == 1 && h3_nc_null(c, 4) &&
           h3_nc_null(c, 5) && h3_sig_slot_at(c, 2, 0) >= 0 &&
           (weight ? h3_sig_slot_at(c, 3, 0) >= 0 : h3_nc_null(c, 3)) && h3_sig_slot_at(c, 6, 0) >= 0 &&
           h3_sig_slot_at(c, 7, 0) >= 0;
}

bool h3_sig_is_half_cast(const struct h3_sig_call *c)
{
    return h3_sig_is_aten(c) && strstr(c->kernel, "float16_copy_kernel_cuda") != NULL &&
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

/* The float16_copy after norm `j` in (j, last] that reads its output, with
 * nothing in between touching that output; 0 if none. */
static uint32_t h3_nc_find_cast(const struct h3_sig *sig, uint32_t j, uint32_t last)
{
    uint32_t y = (uint32_t)h3_sig_slot_at(&sig->calls[j], 7, 0);
    for (uint32_t c = j + 1; c <= last && c - j < 64; c++) {
        const struct h3_sig_call *cast = &sig->calls[c];
        int in = h3_sig_slot_at(cast, 2, 8);
        if (!h3_sig_is_half_cast(cast) || in < 0 || h3_sig_slot_at(cast, 2, 0) < 0)
            continue;
        const struct h3_sig_slot *s = &cast->slots[in];
        if (s->ref == H3_REF_SLOT && s->ref_call == j && s->ref_slot == y && s->delta == 0 &&
            !h3_nc_touched_between(sig, j, c, j, y))
            return c;
    }
    return 0;
}

static unsigned h3_nc_plan(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                           unsigned max)
{
    unsigned n = 0;
    for (uint32_t j = first; j < last && n < max; j++) {
        uint32_t c = h3_sig_is_rmsnorm(&sig->calls[j], true) ? h3_nc_find_cast(sig, j, last) : 0;
        if (c == 0)
            continue;
        out[n++] = (struct h3_op_range){
            .op = &h3_op_norm_cast,
            .first = j,
            .last = c,
            .mask = 1ull | (1ull << (c - j)),
            .arg = {[NC_NORM] = 0, [NC_CAST] = c - j},
        };
    }
    return n;
}

/* What a norm launch and its cast hold, checked against what the kernels rely on. */
struct h3_nc_args {
    int32_t n;
    float eps;
    uint64_t x, gamma, rstd, y, out;
    unsigned rows;
};

static const char *h3_nc_read(const struct h3_deferred *norm, const struct h3_deferred *cast, struct h3_nc_args *a)
{
    if (norm->stream != cast->stream || norm->fn != cast->fn)
        return "streams_differ";
    int32_t count;
    uint64_t beta, in;
    memcpy(&a->n, norm->argv[0], 4);
    memcpy(&a->eps, norm->argv[1], 4);
    memcpy(&a->x, norm->argv[2], 8);
    memcpy(&a->gamma, norm->argv[3], 8);
    memcpy(&beta, norm->argv[4], 8);
    memcpy(&a->rstd, norm->argv[6], 8);
    memcpy(&a->y, norm->argv[7], 8);
    memcpy(&count, cast->argv[0], 4);
    memcpy(&a->out, cast->argv[2], 8);
    memcpy(&in, (const char *)cast->argv[2] + 8, 8);
    a->rows = norm->grid.x;
    if (a->n <= 0 || a->n % 4 != 0 || beta != 0 || in != a->y || (long long)count != (long long)a->rows * a->n ||
        norm->grid.y != 1 || norm->grid.z != 1 || norm->block.x != 32 || norm->block.y != 4 || norm->block.z != 1)
        return "layout";
    if (a->x % 16 != 0 || a->y % 16 != 0 || a->gamma % 16 != 0 || a->out % 8 != 0)
        return "unaligned";
    return NULL;
}

/* The outputs of a norm and its cast, in the order the launches write them. */
static void h3_nc_spans(const struct h3_nc_args *a, struct h3_span out[3])
{
    const uint64_t f32 = (uint64_t)a->rows * (uint64_t)a->n * 4;
    out[0] = (struct h3_span){a->y, a->y + f32};
    out[1] = (struct h3_span){a->rstd, a->rstd + (uint64_t)a->rows * 4};
    out[2] = (struct h3_span){a->out, a->out + f32 / 2};
}

/* Of the norm's and cast's outputs, those nothing reads (h3_outputs_dead)
 * into *dead; the reason not to run when an output written may be memory a
 * held launch in between touches (h3_outputs_reused). */
static const char *h3_nc_dead(const struct h3_nc_args *a, const struct h3_deferred *norm,
                              const struct h3_deferred *cast, uint64_t *dead)
{
    struct h3_span out[3];
    h3_nc_spans(a, out);
    const struct h3_deferred *by[3] = {norm, norm, cast};
    *dead = h3_outputs_dead(out, by, 3);
    return h3_outputs_reused(out, by, 3, *dead);
}

/*
 * The outputs in the order the two launches write them (y, rstd, y16):
 * those in `dead` (h3_nc_dead) are not written.  False when one written
 * overlaps an input (the kernel's pointers are __restrict__).
 */
static bool h3_nc_outputs(struct h3_nc_args *a, uint64_t dead)
{
    uint64_t *field[3] = {&a->y, &a->rstd, &a->out};
    const uint64_t f32 = (uint64_t)a->rows * (uint64_t)a->n * 4, n4 = (uint64_t)a->n * 4;
    struct h3_span out[3];
    h3_nc_spans(a, out);
    const struct h3_span in[2] = {{a->x, a->x + f32}, {a->gamma, a->gamma + n4}};
    for (unsigned i = 0; i < 3; i++) {
        if ((dead >> i) & 1)
            *field[i] = 0;
        else if (h3_spans_overlap(out[i], in[0]) || h3_spans_overlap(out[i], in[1]))
            return false;
    }
    return true;
}

/* The norm and its cast as one launch of h3_rmsnorm_f32 on the norm's stream. */
static const char *h3_nc_launch(const struct h3_deferred *norm, const struct h3_deferred *cast, struct h3_nc_args *a)
{
    const uint64_t f32 = (uint64_t)a->rows * (uint64_t)a->n * 4;
    const char *why = h3_verify_outputs((uint64_t *const[]){&a->y, &a->rstd, &a->out},
                                        (const uint64_t[]){f32, (uint64_t)a->rows * 4, f32 / 2},
                                        (const unsigned[]){4, 4, 2}, (const struct h3_deferred *const[]){norm, norm, cast},
                                        3);
    if (why != NULL)
        return why;
    void *args[] = {&a->x, &a->gamma, &a->eps, &a->n, &a->y, &a->rstd, &a->out};
    const unsigned grid[3] = {a->rows, 1, 1}, block[3] = {32, 4, 1};
    return h3_kernels_launch("h3_rmsnorm_f32", norm, grid, block, args);
}

static const char *h3_nc_run(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    (void)anchor;
    const struct h3_deferred *norm = &calls[r->arg[NC_NORM]], *cast = &calls[r->arg[NC_CAST]];
    struct h3_nc_args a;
    const char *why = h3_nc_read(norm, cast, &a);
    if (why != NULL)
        return why;
    uint64_t dead;
    if ((why = h3_nc_dead(&a, norm, cast, &dead)) != NULL)
        return why;
    return h3_nc_outputs(&a, dead) ? h3_nc_launch(norm, cast, &a) : "aliased";
}

const struct h3_op h3_op_norm_cast = {
    .name = "norm_cast",
    .plan = h3_nc_plan,
    .run = h3_nc_run,
};

/* ---- residual_norm ---- */

/* The H3 residual's mul: elementwise_kernel<128,4> over BinaryFunctor<float, float, float,
 * MulFunctor<float>> with casting loads (gpu_kernel_impl), 2-D: FP32 dense output, FP16
 * input rows, FP32 scale broadcast over rows. */
static bool h3_rn_is_mul(const struct h3_sig_call *c, struct h3_ew2d *l)
{
    static const uint8_t dtypes[4] = {3, 6, 5, 6}; /* 3 operands: float, half, float */
    return h3_sig_is_aten(c) && strstr(c->kernel, "gpu_kernel_implINS0_13BinaryFunctorIfffNS0_15binary_"
                                                         "internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseE") != NULL &&
           h3_ew2d_read(c, 3, l) && l->elem[0] == 4 && l->elem[1] == 2 && l->elem[2] == 4 &&
           l->row[0] == 4 * l->width && l->row[1] % 4 == 0 && l->row[2] == 0 && l->width % 4 == 0 &&
           h3_sig_bytes_are(c, 1, H3_EW2D_DATA(3) + 24, dtypes, sizeof(dtypes));
}

/* The add after it: vectorized CUDAFunctor_add<float> with alpha 1, out = a + mul's output. */
static bool h3_rn_is_add(const struct h3_sig *sig, uint32_t a, uint32_t mul, uint32_t n)
{
    const struct h3_sig_call *c = &sig->calls[a];
    uint32_t count, alpha;
    int b = h3_sig_slot_at(c, 2, 16);
    return h3_sig_is_aten(c) && strstr(c->kernel, "vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEE") &&
           c->nparams == 3 && c->param_sizes[0] == 4 && c->param_sizes[1] == 4 && c->param_sizes[2] == 24 &&
           h3_sig_u32(c, 0, 0, &count) && count == n && h3_sig_u32(c, 1, 0, &alpha) && alpha == 0x3f800000u &&
           h3_sig_slot_at(c, 2, 0) >= 0 && h3_sig_slot_at(c, 2, 8) >= 0 && b >= 0 &&
           c->slots[b].ref == H3_REF_SLOT && c->slots[b].ref_call == mul &&
           (int)c->slots[b].ref_slot == h3_sig_slot_at(&sig->calls[mul], 1, H3_EW2D_DATA(3)) && c->slots[b].delta == 0;
}

static unsigned h3_rn_plan(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                           unsigned max)
{
    unsigned n = 0;
    for (uint32_t j = first; j + 1 <= last && n < max; j++) {
        struct h3_ew2d l;
        if (!h3_rn_is_mul(&sig->calls[j], &l) || !h3_rn_is_add(sig, j + 1, j, l.n))
            continue;
        /* The norm right after the add, over its output, rows of the same
         * width; without one (the block's last residual) the mul and add alone. */
        const struct h3_sig_call *norm = j + 2 <= last ? &sig->calls[j + 2] : NULL;
        uint32_t width;
        int x = norm != NULL ? h3_sig_slot_at(norm, 2, 0) : -1;
        uint32_t c = 0;
        if (norm == NULL || !h3_sig_is_rmsnorm(norm, true) || !h3_sig_u32(norm, 0, 0, &width) ||
            width != l.width || x < 0 || norm->slots[x].ref != H3_REF_SLOT || norm->slots[x].ref_call != j + 1 ||
            (int)norm->slots[x].ref_slot != h3_sig_slot_at(&sig->calls[j + 1], 2, 0) || norm->slots[x].delta != 0 ||
            (c = h3_nc_find_cast(sig, j + 2, last)) == 0 || c - j >= 64) {
            out[n++] = (struct h3_op_range){
                .op = &h3_op_residual_norm,
                .first = j,
                .last = j + 1,
                .mask = 3,
                .arg = {[RN_ADD] = 1, [RN_ONLY] = 1},
            };
            j++;
            continue;
        }
        out[n++] = (struct h3_op_range){
            .op = &h3_op_residual_norm,
            .first = j,
            .last = c,
            .mask = 7ull | (1ull << (c - j)),
            .arg = {[NC_NORM] = 2, [NC_CAST] = c - j, [RN_ADD] = 1},
        };
        j = c;
    }
    return n;
}

/*
 * The outputs in the order the launches write them: p, h', y, rstd, y16.
 * Those in `dead` (h3_rn_dead: a later one overlaps them, or the allocator
 * freed them) are not written.  A written
 * output may overlap an input only where the kernel's thread reads the
 * input element before it writes the output element in its place: an FP32
 * row output at h itself, or y16 at b16 itself with dense rows.  PyTorch
 * gives freed memory to later outputs at any offset, though, where their
 * rows fall on other blocks' input rows: most often h' in b16's memory,
 * freed after the mul.  With `staged` an output may overlap b16 anywhere:
 * the staged kernel reads all of b16 before it writes anything.  False when
 * an overlap remains; *clash names the first found ("h_in_b16": h' in b16's
 * memory).  Then the op keeps what is exact: the held mul and add are issued
 * as they were, then the norm and its cast as one kernel (norm_cast's).
 * (Leaving only y16 to the held cast would be exact too, but it never
 * happened in the decode, so it would be a path without GPU evidence.)
 */
static bool h3_rn_fusable(struct h3_nc_args *a, uint64_t b16, long long b_stride, uint64_t scale, uint64_t h,
                          uint64_t *p, uint64_t *h_out, bool staged, uint64_t dead, const char **clash)
{
    enum { P, H_OUT, Y, RSTD, Y16 };
    static const char *const names[5][4] = {
        {"p_in_h", "p_in_b16", "p_in_scale", "p_in_gamma"},
        {"h_in_h", "h_in_b16", "h_in_scale", "h_in_gamma"},
        {"y_in_h", "y_in_b16", "y_in_scale", "y_in_gamma"},
        {"rstd_in_h", "rstd_in_b16", "rstd_in_scale", "rstd_in_gamma"},
        {"y16_in_h", "y16_in_b16", "y16_in_scale", "y16_in_gamma"},
    };
    const uint64_t f32 = (uint64_t)a->rows * (uint64_t)a->n * 4, n4 = (uint64_t)a->n * 4;
    uint64_t *field[5] = {p, h_out, &a->y, &a->rstd, &a->out};
    const uint64_t size[5] = {f32, f32, f32, (uint64_t)a->rows * 4, f32 / 2};
    struct h3_span out[5];
    for (unsigned i = 0; i < 5; i++)
        out[i] = (struct h3_span){*field[i], *field[i] + size[i]};
    const struct h3_span in[4] = {{h, h + f32},
                                  {b16, b16 + ((uint64_t)a->rows - 1) * (uint64_t)b_stride * 2 + (uint64_t)a->n * 2},
                                  {scale, scale + n4},
                                  {a->gamma, a->gamma + n4}};
    if ((dead >> H_OUT) & 1) { /* the kernel reads h' back for the norm */
        *clash = "h_freed";
        return false;
    }
    for (unsigned i = 0; i < 5; i++) {
        if ((dead >> i) & 1)
            continue;
        const bool in_place[4] = {i <= Y && out[i].lo == h,
                                  staged || (i == Y16 && out[i].lo == b16 && b_stride == a->n)};
        for (unsigned k = 0; k < 4; k++)
            if (h3_spans_overlap(out[i], in[k]) && !in_place[k]) {
                *clash = names[i][k];
                return false;
            }
    }
    for (unsigned i = 0; i < 5; i++)
        if ((dead >> i) & 1)
            *field[i] = 0;
    return true;
}

/* What the residual's mul and add launches were given. */
struct h3_rn_launches {
    uint64_t p, b16, scale, h_out, h, p_in; /* mul: p = b16 * scale; add: h_out = h + p_in */
    uint32_t count, width, b_row;            /* elements, row width, b16's row stride in bytes */
};

static struct h3_rn_launches h3_rn_read(const struct h3_deferred *mul, const struct h3_deferred *add)
{
    const unsigned char *pm = mul->argv[1], *pa = add->argv[2];
    struct h3_rn_launches l;
    memcpy(&l.p, pm + H3_EW2D_DATA(3), 8);
    memcpy(&l.b16, pm + H3_EW2D_DATA(3) + 8, 8);
    memcpy(&l.scale, pm + H3_EW2D_DATA(3) + 16, 8);
    memcpy(&l.count, mul->argv[0], 4);
    memcpy(&l.width, pm + 4, 4);
    memcpy(&l.b_row, pm + 4 + 25 * 12 + 3 * 4 + 4, 4);
    memcpy(&l.h_out, pa, 8);
    memcpy(&l.h, pa + 8, 8);
    memcpy(&l.p_in, pa + 16, 8);
    return l;
}

/* Whether the residual kernel's vector accesses fit the launches' pointers. */
static bool h3_rn_aligned(const struct h3_rn_launches *l)
{
    return l->p % 16 == 0 && l->h % 16 == 0 && l->h_out % 16 == 0 && l->scale % 16 == 0 && l->b16 % 4 == 0;
}

/* The residual kernel over `rows` rows: h3_residual_rmsnorm_f32, or with
 * `staged` its cooperative form that reads all of b16 first. */
static const char *h3_rn_launch(const struct h3_deferred *like, unsigned rows, bool staged, void **args12)
{
    if (!staged) {
        const unsigned grid[3] = {rows, 1, 1}, block[3] = {32, 4, 1};
        return h3_kernels_launch("h3_residual_rmsnorm_f32", like, grid, block, args12);
    }
    int nrows = (int)rows, n = *(const int *)args12[8];
    void *args[13];
    memcpy(args, args12, 12 * sizeof(void *));
    args[12] = &nrows;
    return h3_kernels_launch_staged("h3_residual_rmsnorm_f32_staged", like, rows, (unsigned)n * 2, args);
}

/* The residual kernel with the norm after it, over the launches `l` and the norm `a` read. */
static const char *h3_rn_launch_fused(const struct h3_deferred *like, const struct h3_deferred *const by[5],
                                      struct h3_rn_launches *l, long long *b_stride, struct h3_nc_args *a, bool staged)
{
    const uint64_t f32 = (uint64_t)a->rows * (uint64_t)a->n * 4;
    const char *why = h3_verify_outputs((uint64_t *const[]){&l->p, &l->h_out, &a->y, &a->rstd, &a->out},
                                        (const uint64_t[]){f32, f32, f32, (uint64_t)a->rows * 4, f32 / 2},
                                        (const unsigned[]){4, 4, 4, 4, 2}, by, 5);
    if (why != NULL)
        return why;
    void *args[] = {&l->b16, b_stride, &l->scale, &l->h, &l->p, &l->h_out, &a->gamma, &a->eps, &a->n, &a->y,
                    &a->rstd, &a->out};
    return h3_rn_launch(like, a->rows, staged, args);
}

/* The block's last residual, no norm after it: p = b16 * scale and h' = h
 * + p, by h3_residual_rmsnorm_f32 with every norm output left out.  The
 * kernel reads its inputs' elements before writing its outputs' in their
 * place, which is exact only where they share the indexing: p or h' at h.
 * PyTorch often gives h' the memory of b16 (freed after the mul), whose
 * rows other blocks read: then the staged kernel runs, which reads all of
 * b16 first, or where it cannot, the launches run as they were (aliased). */
static const char *h3_rn_run_residual(const struct h3_deferred *mul, const struct h3_deferred *add)
{
    if (mul->stream != add->stream || mul->fn != add->fn)
        return "streams_differ";
    struct h3_rn_launches l = h3_rn_read(mul, add);
    if (l.p_in != l.p || l.width == 0 || l.width % 4 != 0 || l.count % l.width != 0 || l.b_row % 4 != 0)
        return "layout";
    if (!h3_rn_aligned(&l))
        return "unaligned";
    unsigned rows = l.count / l.width;
    long long b_stride = l.b_row / 2;
    const uint64_t f32 = (uint64_t)l.count * 4;
    struct h3_span out[2] = {{l.p, l.p + f32}, {l.h_out, l.h_out + f32}};
    const struct h3_span in[3] = {{l.h, l.h + f32},
                                  {l.b16, l.b16 + ((uint64_t)rows - 1) * (uint64_t)l.b_row + (uint64_t)l.width * 2},
                                  {l.scale, l.scale + (uint64_t)l.width * 4}};
    const struct h3_deferred *by[2] = {mul, add};
    uint64_t freed = h3_outputs_dead(out, by, 2);
    if ((freed >> 1) & 1)
        return "aliased";
    const char *reused = h3_outputs_reused(out, by, 2, freed);
    if (reused != NULL)
        return reused;
    bool staged = false;
    for (unsigned i = 0; i < 2; i++)
        for (unsigned k = 0; k < 3 && !((freed >> i) & 1); k++)
            if (h3_spans_overlap(out[i], in[k]) && !(k == 0 && out[i].lo == l.h)) {
                if (k != 1)
                    return "aliased";
                staged = true;
            }
    if (freed & 1)
        l.p = 0;
    const char *why = h3_verify_outputs((uint64_t *const[]){&l.p, &l.h_out}, (const uint64_t[]){f32, f32},
                                        (const unsigned[]){4, 4}, (const struct h3_deferred *const[]){mul, add}, 2);
    if (why != NULL)
        return why;
    int n = (int)l.width;
    float eps = 0.0f;
    void *none = NULL;
    void *args[] = {&l.b16, &b_stride, &l.scale, &l.h, &l.p, &l.h_out, &none, &eps, &n,
                    &none, &none, &none};
    why = h3_rn_launch(add, rows, staged, args);
    if (staged && why != NULL)
        return "aliased";
    if (staged)
        h3_op_note(&h3_op_residual_norm, "staged");
    return why;
}

/* Of the residual's outputs p, h', y, rstd and y16 (made by by[0..5)), those
 * nothing reads (h3_outputs_dead), a bit each, into *dead; the reason not to
 * run when one written may be memory a held launch in between touches
 * (h3_outputs_reused). */
static const char *h3_rn_dead(const struct h3_nc_args *a, const struct h3_rn_launches *l,
                              const struct h3_deferred *const by[5], uint64_t *dead)
{
    const uint64_t f32 = (uint64_t)a->rows * (uint64_t)a->n * 4;
    struct h3_span out[5] = {{l->p, l->p + f32}, {l->h_out, l->h_out + f32}};
    h3_nc_spans(a, out + 2);
    *dead = h3_outputs_dead(out, by, 5);
    return h3_outputs_reused(out, by, 5, *dead);
}

static const char *h3_rn_run(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    (void)anchor;
    if (r->arg[RN_ONLY])
        return h3_rn_run_residual(&calls[0], &calls[1]);
    const struct h3_deferred *mul = &calls[0], *add = &calls[r->arg[RN_ADD]], *norm = &calls[r->arg[NC_NORM]],
                             *cast = &calls[r->arg[NC_CAST]];
    struct h3_nc_args a;
    const char *why = h3_nc_read(norm, cast, &a);
    if (why != NULL)
        return why;
    if (mul->stream != norm->stream || add->stream != norm->stream || mul->fn != norm->fn || add->fn != norm->fn)
        return "streams_differ";
    struct h3_rn_launches l = h3_rn_read(mul, add);
    if (l.p_in != l.p || l.h_out != a.x || l.width != (uint32_t)a.n || (long long)l.count != (long long)a.rows * a.n)
        return "layout";
    if (!h3_rn_aligned(&l))
        return "unaligned";
    long long b_stride = l.b_row / 2;
    const char *clash, *staged_clash;
    const struct h3_deferred *const by[5] = {mul, add, norm, norm, cast};
    uint64_t dead;
    if ((why = h3_rn_dead(&a, &l, by, &dead)) != NULL)
        return why;
    if (!h3_rn_fusable(&a, l.b16, b_stride, l.scale, l.h, &l.p, &l.h_out, false, dead, &clash)) {
        /* Outputs in b16's memory: the staged kernel, on copies of what the
         * check changes (a failed check changes nothing), so that the
         * fallback below still sees the launches. */
        struct h3_nc_args sa = a;
        struct h3_rn_launches sl = l;
        if (h3_rn_fusable(&sa, sl.b16, b_stride, sl.scale, sl.h, &sl.p, &sl.h_out, true, dead, &staged_clash) &&
            h3_rn_launch_fused(norm, by, &sl, &b_stride, &sa, true) == NULL) {
            h3_op_note(&h3_op_residual_norm, "staged");
            return NULL;
        }
        if (h3_verify_active())
            return clash; /* it issues the mul and add itself: verified runs issue every call as made */
        a.x = l.h_out; /* norm_cast's read of the norm saw it so */
        if (!h3_nc_outputs(&a, dead >> 2)) /* y, rstd, y16: what a later one of them overlaps, and freed */
            return "aliased";
        if (h3_kernels_function("h3_rmsnorm_f32", norm->stream, &why) == NULL)
            return why;
        h3_issue(mul, 1);
        h3_issue(add, 1);
        why = h3_nc_launch(norm, cast, &a);
        if (why != NULL) /* the mul and add were issued: the norm and cast must follow */
            h3_issue(norm, 1), h3_issue(cast, 1);
        h3_op_note(&h3_op_residual_norm, clash);
        return NULL;
    }
    return h3_rn_launch_fused(norm, by, &l, &b_stride, &a, false);
}

const struct h3_op h3_op_residual_norm = {
    .name = "residual_norm",
    .plan = h3_rn_plan,
    .run = h3_rn_run,
};
