/*
 * The fused ops' kernels: the fatbin of kernels/ (one .cu file per op) that the Makefile embeds
 * in the library, loaded with the driver API into each context at first use.
 *
 * Owns: the per-context modules, the per-(context, name) functions, how many
 * blocks of a function fit on its device at once (cooperative launches), and
 * the per-device compute capability.
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

#include <limits.h>
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

/* How many blocks of a function fit on its device at once, for a dynamic shared memory size. */
struct h3_kernel_fit {
    CUfunction fn;
    unsigned smem, blocks;
};

static struct {
    pthread_mutex_t lock;
    void *image; /* the fatbin, 16-byte aligned (the embedded copy need not be) */
    CUcontext ctx[H3_KERNELS_MAX];
    CUmodule mod[H3_KERNELS_MAX];
    unsigned nmod;
    struct h3_kernel_fn fns[H3_KERNELS_MAX];
    unsigned nfns;
    struct h3_kernel_fit fits[H3_KERNELS_MAX];
    unsigned nfits;
} h3_kernels = {.lock = PTHREAD_MUTEX_INITIALIZER};

void h3_kernels_forget(void)
{
    pthread_mutex_lock(&h3_kernels.lock);
    h3_kernels.nmod = 0;
    h3_kernels.nfns = 0;
    h3_kernels.nfits = 0;
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
    uint64_t t0 = h3_hot.stats ? h3_stats_clock() : 0;
    CUresult r = load != NULL ? load(&mod, h3_kernels.image) : CUDA_ERROR_NOT_FOUND;
    if (t0 != 0)
        h3_stats_one_off(H3_ONE_OFF_MODULE, h3_stats_clock() - t0);
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
        if (h3_kernels.fns[i].ctx == ctx &&
            (h3_kernels.fns[i].name == name || strcmp(h3_kernels.fns[i].name, name) == 0)) /* names are literals */
            fn = h3_kernels.fns[i].fn;
    /* Loading a module during a capture in global mode, on any thread,
     * would invalidate that capture. */
    if (fn == NULL && !h3_unsafe_begin()) {
        *why = h3_stream_capturing(stream) ? "capturing_first_use" : "capture_open_elsewhere";
    } else if (fn == NULL) {
        CUmodule mod = h3_module_of(ctx, why);
        h3_unsafe_end();
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

/* Launches fn on the stream of `like` through the driver entry point of its
 * kind (per-thread default stream or not), cooperatively or not. */
static const char *h3_launch_fn(CUfunction fn, const struct h3_deferred *like, const unsigned grid[3],
                                const unsigned block[3], unsigned smem, bool cooperative, void **args)
{
    bool ptsz = h3_fn_per_thread(like->fn);
    CUstream stream = (CUstream)(uintptr_t)like->stream;
    CUresult res;
    uint64_t t0;
    if (cooperative) {
        __typeof__(&cuLaunchCooperativeKernel) launch =
            h3_real_fn(ptsz ? H3_FN_cuLaunchCooperativeKernel_ptsz : H3_FN_cuLaunchCooperativeKernel);
        if (launch == NULL)
            return "no_driver";
        t0 = h3_forward_begin();
        res = launch(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, args);
    } else {
        __typeof__(&cuLaunchKernel) launch = h3_real_fn(ptsz ? H3_FN_cuLaunchKernel_ptsz : H3_FN_cuLaunchKernel);
        if (launch == NULL)
            return "no_driver";
        t0 = h3_forward_begin();
        res = launch(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, args, NULL);
    }
    h3_forward_end(t0);
    return res == CUDA_SUCCESS ? NULL : "launch_failed";
}

const char *h3_kernels_launch(const char *name, const struct h3_deferred *like, const unsigned grid[3],
                              const unsigned block[3], void **args)
{
    const char *why = NULL;
    CUfunction fn = h3_kernels_function(name, like->stream, &why);
    return fn == NULL ? why : h3_launch_fn(fn, like, grid, block, 0, false, args);
}

/* How many blocks of `threads` threads and `smem` bytes of dynamic shared
 * memory of fn can be resident at once on the current device: 0 when the
 * device cannot launch cooperatively or the driver cannot say.  Remembered
 * per (function, smem). */
static unsigned h3_resident_blocks(CUfunction fn, unsigned threads, unsigned smem)
{
    unsigned found = UINT_MAX;
    pthread_mutex_lock(&h3_kernels.lock);
    for (unsigned i = 0; i < h3_kernels.nfits && found == UINT_MAX; i++)
        if (h3_kernels.fits[i].fn == fn && h3_kernels.fits[i].smem == smem)
            found = h3_kernels.fits[i].blocks;
    pthread_mutex_unlock(&h3_kernels.lock);
    if (found != UINT_MAX)
        return found;
    __typeof__(&cuCtxGetDevice) get_device = H3_LIB_FN(CUDA, cuCtxGetDevice);
    __typeof__(&cuDeviceGetAttribute) attr = H3_LIB_FN(CUDA, cuDeviceGetAttribute);
    __typeof__(&cuOccupancyMaxActiveBlocksPerMultiprocessor) occupancy =
        H3_LIB_FN(CUDA, cuOccupancyMaxActiveBlocksPerMultiprocessor);
    CUdevice dev;
    int coop = 0, sms = 0, per_sm = 0;
    if (get_device == NULL || attr == NULL || occupancy == NULL || get_device(&dev) != CUDA_SUCCESS ||
        attr(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev) != CUDA_SUCCESS ||
        attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
        occupancy(&per_sm, fn, (int)threads, smem) != CUDA_SUCCESS || coop == 0 || sms <= 0 || per_sm <= 0)
        found = 0;
    else
        found = (unsigned)sms * (unsigned)per_sm;
    pthread_mutex_lock(&h3_kernels.lock);
    if (h3_kernels.nfits < H3_KERNELS_MAX)
        h3_kernels.fits[h3_kernels.nfits++] = (struct h3_kernel_fit){fn, smem, found};
    pthread_mutex_unlock(&h3_kernels.lock);
    return found;
}

const char *h3_kernels_launch_staged(const char *name, const struct h3_deferred *like, unsigned rows,
                                     unsigned row_bytes, void **args)
{
    const char *why = NULL;
    CUfunction fn = h3_kernels_function(name, like->stream, &why);
    if (fn == NULL)
        return why;
    const unsigned block[3] = {32, 4, 1};
    for (unsigned per = 1; rows > 0 && row_bytes > 0 && per * row_bytes <= 48u * 1024; per++) {
        unsigned resident = h3_resident_blocks(fn, 128, per * row_bytes);
        if (resident == 0)
            return "no_cooperative_launch";
        const unsigned grid[3] = {(rows + per - 1) / per, 1, 1};
        if (grid[0] <= resident)
            return h3_launch_fn(fn, like, grid, block, per * row_bytes, true, args);
    }
    return "too_many_rows";
}

unsigned h3_kernels_sm_count(void)
{
    static atomic_uint count[64]; /* per device ordinal: 0 unknown */
    __typeof__(&cuCtxGetDevice) get_device = H3_LIB_FN(CUDA, cuCtxGetDevice);
    __typeof__(&cuDeviceGetAttribute) attr = H3_LIB_FN(CUDA, cuDeviceGetAttribute);
    CUdevice dev;
    if (get_device == NULL || attr == NULL || get_device(&dev) != CUDA_SUCCESS || dev < 0 || dev >= 64)
        return 1;
    unsigned known = atomic_load_explicit(&count[dev], memory_order_relaxed);
    if (known != 0)
        return known;
    int sms = 0;
    if (attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS || sms <= 0)
        return 1; /* asked again next time */
    atomic_store_explicit(&count[dev], (unsigned)sms, memory_order_relaxed);
    return (unsigned)sms;
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
