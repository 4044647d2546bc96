/*
 * What verify mode's kernels (kernels/verify.cu) and shim/verify.c share:
 * plain C, passed by value.
 */
#ifndef H3_VERIFY_PARAMS_H
#define H3_VERIFY_PARAMS_H

/* Outputs one op's run may write: qk_norm_rope's 20 at most. */
#define H3_VERIFY_OUTPUTS 24

/* What one output's comparison found: `first` the byte offset of the first
 * differing byte (all ones: none), and the bytes of the element holding it. */
struct h3_verify_record {
    unsigned long long first;
    unsigned char ref[8], got[8];
};

/* The outputs of one run: the program's buffer (what the unfused launches
 * wrote) beside the fused kernel's copy, each `elem` bytes an element. */
struct h3_verify_batch {
    const void *ref[H3_VERIFY_OUTPUTS], *got[H3_VERIFY_OUTPUTS];
    unsigned long long bytes[H3_VERIFY_OUTPUTS];
    unsigned elem[H3_VERIFY_OUTPUTS];
    unsigned n;
    unsigned long long *first;      /* device memory, one word an output; all ones between runs */
    struct h3_verify_record *out;   /* pinned host memory the device writes */
};

#endif
