/*
 * Driver entry points reached without a link-time reference: through
 * cuGetProcAddress (how the CUDA runtime, cuBLAS and cuDNN get the driver
 * API) and through dlsym on a libcuda.so.1 handle (how runtimes find
 * cuGetProcAddress and how Triton's launcher finds cuLaunchKernelEx).
 *
 * Owns: the exported dlsym and the cuGetProcAddress wrappers.
 * Invariants: dlsym answers only the interposed driver names, and only for a
 * handle of the loaded libcuda.so.1; every other lookup is a tail jump to
 * libc's dlsym, so RTLD_NEXT still resolves relative to the real caller and
 * a library looking itself up on its own handle (as cuDNN does) gets its own
 * symbol.  cuGetProcAddress is answered by exact pointer: the real driver is
 * asked with the caller's (symbol, version, flags), and only a result equal
 * to the real function of an interposed entry point is replaced by our
 * wrapper; anything else is returned untouched.
 * Never: takes a lock, allocates or initialises the shim inside dlsym unless
 * the lookup is for an interposed driver name.
 */
#include "h3shim.h"

#include <dlfcn.h>
#include <string.h>

_Static_assert(__builtin_types_compatible_p(__typeof__(&cuLaunchKernel), PFN_cuLaunchKernel_v4000),
               "cuLaunchKernel");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuLaunchKernel_ptsz),
                                            PFN_cuLaunchKernel_v7000_ptsz),
               "cuLaunchKernel_ptsz");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuLaunchKernelEx),
                                            PFN_cuLaunchKernelEx_v11060),
               "cuLaunchKernelEx");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuLaunchKernelEx_ptsz),
                                            PFN_cuLaunchKernelEx_v11060_ptsz),
               "cuLaunchKernelEx_ptsz");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuGetProcAddress),
                                            PFN_cuGetProcAddress_v11030),
               "cuGetProcAddress");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuGetProcAddress_v2),
                                            PFN_cuGetProcAddress_v12000),
               "cuGetProcAddress_v2");

/* Whether driver entry points are being interposed (initialising the shim
 * first when this is the first call). */
static bool h3_driver_active(void)
{
    return h3_state_now() == 1 && h3_config.interpose_driver;
}

/* The hook for an interposed driver symbol name, or H3_FN_COUNT. */
H3_NO_SANITIZE static enum h3_fn h3_driver_hook_named(const char *name)
{
    if (name == NULL || name[0] != 'c' || name[1] != 'u')
        return H3_FN_COUNT;
    for (unsigned fn = 0; fn < H3_FN_COUNT; fn++)
        if (h3_hooks[fn].lib == H3_LIB_CUDA && strcmp(h3_hooks[fn].name, name) == 0)
            return (enum h3_fn)fn;
    return H3_FN_COUNT;
}

H3_NO_SANITIZE void *h3_driver_dlsym_answer(void *handle, const char *name, const void *caller)
{
    if (name != NULL && handle != RTLD_DEFAULT && strncmp(name, "cublasLt", 8) == 0)
        h3_lt_note_lookup(name, caller);
    enum h3_fn fn = h3_driver_hook_named(name);
    if (H3_LIKELY(fn == H3_FN_COUNT) || handle == RTLD_DEFAULT || handle == RTLD_NEXT)
        return NULL;
    if (handle != h3_resolve_handle(H3_LIB_CUDA))
        return NULL;
    if (!h3_driver_active())
        return NULL;
    if (h3_real_fn(fn) == NULL)
        return NULL;
    H3_TRACE(H3_SUB_DRIVER, "dlsym(libcuda, %s) answered with the h3shim wrapper", name);
    return h3_driver_wrapper(fn);
}

/*
 * The one libc function h3shim interposes.  The forward is a tail jump, so
 * libc sees the original caller's return address (RTLD_NEXT depends on it).
 * Sibling calls are asked for explicitly because builds below -O2 (the
 * sanitized one) would otherwise call from this frame; `make check-tailjump`
 * verifies the `jmp` in the disassembly of both builds.
 */
H3_EXPORT H3_NO_SANITIZE __attribute__((optimize("optimize-sibling-calls"))) void *dlsym(void *restrict handle,
                                                                       const char *restrict name)
{
    void *ours = h3_driver_dlsym_answer(handle, name, __builtin_return_address(0));
    if (ours != NULL)
        return ours;
    return h3_real_dlsym_ptr()(handle, name);
}

/* Replaces the answer of a successful cuGetProcAddress by our wrapper when it
 * is the real function of an interposed entry point. */
static void h3_driver_after_procaddr(enum h3_fn self, const char *symbol, void **pfn, int version,
                                     cuuint64_t flags, CUresult r)
{
    if (!h3_driver_active())
        return;
    const char *decision = "passthrough", *reason = "not_interposed";
    if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL && symbol != NULL &&
        strncmp(symbol, "cu", 2) == 0) {
        for (unsigned fn = 0; fn < H3_FN_COUNT; fn++) {
            if (h3_hooks[fn].lib != H3_LIB_CUDA)
                continue;
            if (h3_real_fn((enum h3_fn)fn) == *pfn) {
                *pfn = h3_driver_wrapper((enum h3_fn)fn);
                decision = "interposed";
                reason = h3_hooks[fn].name;
                break;
            }
        }
        if (strcmp(decision, "passthrough") == 0 &&
            (strncmp(symbol, "cuLaunchKernel", 14) == 0 || strncmp(symbol, "cuGetProcAddress", 16) == 0)) {
            reason = "unknown_variant";
            H3_WARN_ONCE(H3_SUB_DRIVER,
                         "cuGetProcAddress(%s, version %d, flags %llu) returned a function h3shim "
                         "does not know; its calls will not be seen",
                         symbol, version, (unsigned long long)flags);
        }
    } else if (r != CUDA_SUCCESS) {
        reason = "driver_error";
    }
    /* The answer above is given whatever the depth: a library that caches a
     * driver pointer during an intercepted call must get the wrapper too.
     * Only top-level lookups are observed. */
    if (!h3_hot.observe || h3_thread.depth != 0)
        return;
    /* Runtimes look up hundreds of driver functions at start-up; only the
     * lookups of interposed names are worth a record (stats count all). */
    bool recorded = strcmp(decision, "interposed") == 0 || strcmp(reason, "unknown_variant") == 0;
    struct h3_call c;
    memset(&c, 0, sizeof(c));
    c.fn = self;
    c.kind = H3_KIND_PROCADDR;
    c.detail = h3_hot.trace_on;
    c.device = -1;
    c.t0_ns = c.t1_ns = h3_now_ns();
    h3_desc_procaddr(&c, symbol, pfn, version, flags);
    c.result = r;
    c.decision = decision;
    c.reason = reason;
    h3_stats_count(&c);
    if (c.detail && recorded)
        h3_trace_emit(&c);
}

H3_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status)
{
    PFN_cuGetProcAddress_v12000 real = h3_real_fn(H3_FN_cuGetProcAddress_v2);
    if (real == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, version, flags, status);
    h3_driver_after_procaddr(H3_FN_cuGetProcAddress_v2, symbol, pfn, version, flags, r);
    return r;
}

H3_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    PFN_cuGetProcAddress_v11030 real = h3_real_fn(H3_FN_cuGetProcAddress);
    if (real == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, version, flags);
    h3_driver_after_procaddr(H3_FN_cuGetProcAddress, symbol, pfn, version, flags, r);
    return r;
}
