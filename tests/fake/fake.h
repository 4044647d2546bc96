/*
 * The fake CUDA stack shared by the fake libraries, the fake framework and
 * the tests (DESIGN.md section 7).
 *
 * Each fake library has the real soname and version node.  Every entry point
 * of shim/hooks.def is a generated stub that appends what it received to the
 * call log (libh3fakelog.so) and returns the result the test asked for: the
 * log is the oracle.  A "kernel" is a struct fake_kernel whose host function
 * runs when it is launched; device memory is host memory.
 */
#ifndef H3_FAKE_H
#define H3_FAKE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "foreach.h"

#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_MAX_ARGS 24
#define FAKE_KERNEL_MAGIC 0x6b65726eu

/* One argument as the log keeps it: its bytes zero-extended when at most 8,
 * else their FNV-1a hash.  Caller and callee encode alike, so equal words
 * mean identical arguments. */
static inline uint64_t fake_arg_word(const void *p, size_t n)
{
    uint64_t v = 0;
    if (n <= sizeof(v)) {
        memcpy(&v, p, n);
        return v;
    }
    v = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        v = (v ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return v;
}

struct fakelog_entry {
    char lib[16];
    char fn[48];
    int nargs;
    uint64_t args[FAKE_MAX_ARGS];
    long long ret;
};

/* libh3fakelog.so */
void fakelog_call(const char *lib, const char *fn, int nargs, const uint64_t *args, long long ret);
size_t fakelog_count(void);
int fakelog_get(size_t i, struct fakelog_entry *out);
/* Index of the last entry for `fn` at or after `from`, or -1. */
long fakelog_find(const char *fn, size_t from);
size_t fakelog_count_fn(const char *fn);
void fakelog_clear(void);
/* Makes every later call of `fn` return `ret` (an error code, say). */
void fakelog_set_result(const char *fn, long long ret);
long long fakelog_result(const char *fn, long long fallback);
void fakelog_reset_results(void);

/* Stream capture, shared by the fake runtime and driver: a stream captures
 * from fake_capture_begin to fake_capture_end, which gives the graph's
 * handle; fake_exec_new gives handles of executable graphs. */
uint64_t fake_capture_begin(uintptr_t stream);
/* 1 and the capture's id when `stream` is capturing, else 0. */
int fake_capture_status(uintptr_t stream, uint64_t *id);
/* 1 and the graph's handle when `stream` was capturing (the capture ends),
 * 2 when that capture was invalidated (fake_capture_unsafe), else 0. */
int fake_capture_end(uintptr_t stream, uintptr_t *graph);
/* Call `fn` was made: if CUDA forbids it during a capture, every capture open is invalidated. */
void fake_capture_unsafe(const char *fn);
uintptr_t fake_capture_graph(uint64_t id);
uintptr_t fake_exec_new(void);

/* A fake kernel (CUkernel, CUfunction and cudaKernel_t all point to one). */
struct fake_kernel {
    uint32_t magic;
    const char *name;
    unsigned nparams;
    size_t sizes[16];
    void (*fn)(void **params);
};

/* The fake driver's contexts: device 0's (current on every thread unless
 * set otherwise) and device 1's (fake_cuda.c). */
#define FAKE_CTX_DEVICE_0 0xc0c0u
#define FAKE_CTX_DEVICE_1 0xc1c0u

/* The kernel registry (libh3fakelog.so): handles are checked against it,
 * never dereferenced blindly. */
void fake_kernel_init(struct fake_kernel *k, const char *name, unsigned nparams, const size_t *sizes,
                      void (*fn)(void **params));
struct fake_kernel *fake_kernel_lookup(const void *handle);
void fake_kernel_run(struct fake_kernel *k, void **params);
unsigned long fake_kernel_runs(void);

/* libcudart.so.13 (fake) extras: host stubs for cudaLaunchKernel(func). */
void fake_cudart_register_stub(const void *stub, struct fake_kernel *k);

#endif
