/*
 * The fused ops' kernels: the fatbin of kernels/ (one .cu file per op) that the Makefile embeds
 * in the library, loaded with the driver API into each context at first use.
 *
 * Owns: the per-context modules, the per-(context, name) functions, and the
 * per-device compute capability.
 * Invariants: the shim has no CUDA runtime of its own; nothing is loaded
 * before an op first runs in a context; a failure is reported once per
 * cause and makes the op fall back (the caller's calls are issued
 * untouched), never an error the application sees.
 * Never: loads anything while no context is current, or while the stream
 * it is for is being captured into a CUDA graph (loading a module is not a
 * capturable operation and could invalidate the application's capture: the
 * op falls back until a launch outside capture has loaded it).
 */
#include "h3shim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* From `ld -r -b binary kernels.fatbin` (Makefile); empty without nvcc. */
extern const unsigned char _binary_kernels_fatbin_start[], _binary_kernels_fatbin_end[];

#define H3_KERNELS_MAX 64

struct h3_kernel_fn {
    CUcontext ctx;
    const char *name;
    CUfunction fn;
};

static struct {
    pthread_mutex_t lock;
    void *image; /* the fatbin, 16-byte aligned (the embedded copy need not be) */
    CUcontext ctx[H3_KERNELS_MAX];
    CUmodule mod[H3_KERNELS_MAX];
    unsigned nmod;
    struct h3_kernel_fn fns[H3_KERNELS_MAX];
    unsigned nfns;
} h3_kernels = {.lock = PTHREAD_MUTEX_INITIALIZER};

void h3_kernels_forget(void)
{
    pthread_mutex_lock(&h3_kernels.lock);
    h3_kernels.nmod = 0;
    h3_kernels.nfns = 0;
    pthread_mutex_unlock(&h3_kernels.lock);
}

size_t h3_kernels_image_size(void)
{
    return (size_t)(_binary_kernels_fatbin_end - _binary_kernels_fatbin_start);
}

/* The module of context `ctx`, loading it once (a failure is remembered
 * too); NULL with *why set.  Locked. */
static CUmodule h3_module_of(CUcontext ctx, const char **why)
{
    for (unsigned i = 0; i < h3_kernels.nmod; i++) {
        if (h3_kernels.ctx[i] == ctx) {
            if (h3_kernels.mod[i] == NULL)
                *why = "module_load_failed";
            return h3_kernels.mod[i];
        }
    }
    size_t size = h3_kernels_image_size();
    if (size == 0) {
        *why = "no_kernels";
        return NULL;
    }
    if (h3_kernels.nmod == H3_KERNELS_MAX) {
        *why = "too_many_contexts";
        return NULL;
    }
    if (h3_kernels.image == NULL) {
        void *p = NULL;
        if (posix_memalign(&p, 16, size) != 0) {
            *why = "no_memory";
            return NULL;
        }
        memcpy(p, _binary_kernels_fatbin_start, size);
        h3_kernels.image = p;
    }
    __typeof__(&cuModuleLoadData) load = H3_LIB_FN(CUDA, cuModuleLoadData);
    CUmodule mod = NULL;
    CUresult r = load != NULL ? load(&mod, h3_kernels.image) : CUDA_ERROR_NOT_FOUND;
    if (r != CUDA_SUCCESS) {
        H3_WARN_ONCE(H3_SUB_ENGINE, "cannot load the fused ops' kernels (cuModuleLoadData: %d); the ops fall back "
                                    "to the unfused calls", (int)r);
        *why = "module_load_failed";
        mod = NULL;
    }
    h3_kernels.ctx[h3_kernels.nmod] = ctx;
    h3_kernels.mod[h3_kernels.nmod++] = mod;
    if (mod != NULL)
        H3_INFO(H3_SUB_ENGINE, "loaded the fused ops' kernels (%zu bytes) into context %p", size, (void *)ctx);
    return mod;
}

bool h3_stream_capturing(const void *stream)
{
    __typeof__(&cuStreamIsCapturing) is_capturing = H3_LIB_FN(CUDA, cuStreamIsCapturing);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (is_capturing == NULL || is_capturing((CUstream)(uintptr_t)stream, &status) != CUDA_SUCCESS)
        return true;
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUfunction h3_kernels_function(const char *name, const void *stream, const char **why)
{
    __typeof__(&cuCtxGetCurrent) current = H3_LIB_FN(CUDA, cuCtxGetCurrent);
    CUcontext ctx = NULL;
    if (current == NULL || current(&ctx) != CUDA_SUCCESS || ctx == NULL) {
        *why = "no_context";
        return NULL;
    }
    CUfunction fn = NULL;
    pthread_mutex_lock(&h3_kernels.lock);
    for (unsigned i = 0; i < h3_kernels.nfns && fn == NULL; i++)
        if (h3_kernels.fns[i].ctx == ctx && strcmp(h3_kernels.fns[i].name, name) == 0)
            fn = h3_kernels.fns[i].fn;
    if (fn == NULL && h3_stream_capturing(stream)) {
        *why = "capturing_first_use";
    } else if (fn == NULL) {
        CUmodule mod = h3_module_of(ctx, why);
        __typeof__(&cuModuleGetFunction) get = H3_LIB_FN(CUDA, cuModuleGetFunction);
        if (mod != NULL && (get == NULL || get(&fn, mod, name) != CUDA_SUCCESS)) {
            *why = "kernel_missing";
            fn = NULL;
        }
        if (fn != NULL && h3_kernels.nfns < H3_KERNELS_MAX)
            h3_kernels.fns[h3_kernels.nfns++] = (struct h3_kernel_fn){ctx, name, fn};
    }
    pthread_mutex_unlock(&h3_kernels.lock);
    return fn;
}

const char *h3_kernels_launch(const char *name, const struct h3_deferred *like, const unsigned grid[3],
                              const unsigned block[3], void **args)
{
    const char *why = NULL;
    CUfunction fn = h3_kernels_function(name, like->stream, &why);
    if (fn == NULL)
        return why;
    bool ptsz = like->fn == H3_FN___cudaLaunchKernel_ptsz || like->fn == H3_FN_cudaLaunchKernel_ptsz ||
                like->fn == H3_FN_cuLaunchKernel_ptsz;
    __typeof__(&cuLaunchKernel) launch = h3_real_fn(ptsz ? H3_FN_cuLaunchKernel_ptsz : H3_FN_cuLaunchKernel);
    if (launch == NULL)
        return "no_driver";
    uint64_t t0 = h3_forward_begin();
    CUresult res = launch(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
                          (CUstream)(uintptr_t)like->stream, args, NULL);
    h3_forward_end(t0);
    return res == CUDA_SUCCESS ? NULL : "launch_failed";
}

int h3_kernels_sm(void)
{
    static atomic_int sm[64]; /* per device ordinal: 0 unknown, -1 unreadable, else major*10+minor */
    __typeof__(&cuCtxGetDevice) get_device = H3_LIB_FN(CUDA, cuCtxGetDevice);
    __typeof__(&cuDeviceGetAttribute) attr = H3_LIB_FN(CUDA, cuDeviceGetAttribute);
    CUdevice dev;
    if (get_device == NULL || attr == NULL || get_device(&dev) != CUDA_SUCCESS || dev < 0 || dev >= 64)
        return -1;
    int known = atomic_load_explicit(&sm[dev], memory_order_relaxed);
    if (known != 0)
        return known;
    int major = 0, minor = 0;
    if (attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
        attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
        known = -1;
    else
        known = major * 10 + minor;
    atomic_store_explicit(&sm[dev], known, memory_order_relaxed);
    return known;
}
