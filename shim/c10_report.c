/*
 * PyTorch's caching allocator's reports, interposed.
 *
 * The allocator in libc10_cuda.so reports every block it hands out and
 * every block it takes back to c10::reportMemoryUsageToProfiler in
 * libc10.so (a call between two libraries, so the preloaded shim's
 * definition is the one bound), with the block's address, its size
 * (negative for a free) and the device.  The shim forwards every report to
 * the real function (a memory profiler still sees them all) and tells the
 * services what it says about CUDA memory (released.c: the live blocks, the
 * thread's recent frees, that reports come), and weight_cache which of its
 * copies' sources is gone.  Where no report comes (the cudaMallocAsync
 * backend, PYTORCH_NO_CUDA_MEMORY_CACHING, another framework), nothing is
 * known freed and every output is written.
 *
 * Owns: the interposed report function and the real one it forwards to.
 * Never: changes what the report function does for PyTorch.
 */
#include "h3shim.h"

#include <dlfcn.h>

/* c10::Device: DeviceType (int8, CUDA = 1) and index (int8), passed by value. */
struct h3_c10_device {
    int8_t type, index;
};
#define H3_C10_CUDA 1
#define H3_C10_REPORT "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE"
typedef void h3_c10_report_fn(void *ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                              struct h3_c10_device device);

H3_EXPORT void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t alloc_size,
                                                                      size_t total_allocated, size_t total_reserved,
                                                                      struct h3_c10_device device);

static _Atomic(h3_c10_report_fn *) h3_c10_real;

/* The real function, in the libc10.so the process loaded (PyTorch loads it
 * RTLD_LOCAL at times, where RTLD_NEXT would not find it); NULL when none
 * is loaded.  Tried at initialisation, so that a report seldom has to look
 * it up itself (it comes with the allocator's lock held).  Before libc10 is
 * loaded, nothing calls the report, so a miss here costs nothing. */
void h3_c10_resolve(void)
{
    if (atomic_load_explicit(&h3_c10_real, memory_order_acquire) != NULL)
        return;
    void *h = dlopen("libc10.so", RTLD_NOW | RTLD_NOLOAD);
    void *f = h != NULL ? h3_real_dlsym(h, H3_C10_REPORT) : NULL;
    if (f == NULL)
        f = h3_real_dlsym(RTLD_NEXT, H3_C10_REPORT);
    if (f != NULL && f != (void *)_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE)
        atomic_store_explicit(&h3_c10_real, (h3_c10_report_fn *)f, memory_order_release);
    /* The handle is kept: libc10.so stays loaded while the pointer is used. */
}


/* c10::reportMemoryUsageToProfiler(void *, int64_t, size_t, size_t, c10::Device). */
H3_EXPORT void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t alloc_size,
                                                                      size_t total_allocated, size_t total_reserved,
                                                                      struct h3_c10_device device)
{
    h3_c10_report_fn *f = atomic_load_explicit(&h3_c10_real, memory_order_acquire);
    static atomic_flag tried = ATOMIC_FLAG_INIT;
    if (f == NULL && !atomic_flag_test_and_set(&tried)) { /* once: a lookup takes the loader's lock */
        h3_c10_resolve();
        f = atomic_load_explicit(&h3_c10_real, memory_order_acquire);
        if (f == NULL)
            H3_WARN(H3_SUB_RESOLVE, "c10::reportMemoryUsageToProfiler is called but the real one was not found "
                                    "in libc10.so: the caching allocator's reports go no further (a memory "
                                    "profiler misses them); the fused ops write every output");
    }
    int state = atomic_load_explicit(&h3_hot.state, memory_order_acquire);
    if (device.type == H3_C10_CUDA && ptr != NULL && state != 2) { /* blocks from the first, parameters included */
        if (alloc_size > 0)
            h3_released_block_add((uint64_t)(uintptr_t)ptr, (uint64_t)alloc_size);
        else if (alloc_size < 0)
            h3_released_block_remove((uint64_t)(uintptr_t)ptr);
    }
    if (device.type == H3_C10_CUDA && alloc_size < 0 && ptr != NULL && state == 1) {
        uint64_t lo = (uint64_t)(uintptr_t)ptr, hi = lo - (uint64_t)alloc_size;
        h3_released_note_free(lo, hi);
        if (atomic_load_explicit(&h3_hot.wc_held, memory_order_relaxed) != 0)
            h3_wcache_source_freed(lo, hi);
    }
    if (f != NULL && device.type == H3_C10_CUDA && state == 1)
        h3_released_note_seen();
    if (f != NULL)
        f(ptr, alloc_size, total_allocated, total_reserved, device);
}

