/*
 * The parameter block of h3_qk_norm_rope_f16 (kernels/qk_norm_rope.cu),
 * shared by the kernel and the op that launches it (shim/op_qk_norm_rope.c):
 * plain C, pointers as void * (FP32 or FP16 as named), passed by value.
 */
#ifndef H3_QK_PARAMS_H
#define H3_QK_PARAMS_H

/* Everything PyTorch's launches write for q (side 0) or k (side 1); a NULL
 * pointer is not written.  Rows are (token, head), dense. */
struct h3_qk_side {
    void *f32;  /* FP32 [rows][64]: the strided copy's output */
    void *y;    /* FP32 [rows][64]: the RMSNorm output */
    void *rstd; /* FP32 [rows] */
    void *n16;  /* FP16 [rows][64]: its cast */
    void *a;    /* FP16 [rows][48]: n[0:48] * cos */
    void *neg;  /* FP16 [rows][24]: -n[24:48] */
    void *rot;  /* FP16 [rows][48]: cat(neg, n[0:24]) */
    void *b;    /* FP16 [rows][48]: rot * sin */
    void *sum;  /* FP16 [rows][48]: a + b */
    void *out;  /* FP16 [rows][64]: cat(sum, n[48:64]), what attention reads */
};

struct h3_qk_params {
    const void *qkv;          /* FP16 [tokens][heads][192]: q at 0, k at 64 of each head */
    long long token_stride;   /* elements between tokens of qkv */
    const void *cosv, *sinv;  /* FP16 [tokens][48] */
    long long cs_stride;      /* elements between tokens of cos and sin */
    long long tokens;
    int heads;
    float eps;
    struct h3_qk_side side[2];
};

#endif
