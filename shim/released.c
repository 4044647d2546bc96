/*
 * What PyTorch's caching allocator frees, so that a fused op need not write
 * an output nothing can read any more.
 *
 * The allocator in libc10_cuda.so reports every block it hands out and
 * every block it takes back to c10::reportMemoryUsageToProfiler in
 * libc10.so (a call between two libraries, so the preloaded shim's
 * definition is the one bound), with the block's address, its size
 * (negative for a free) and the device.  It reports a free when the last
 * tensor on the block's memory is gone, whatever the stream uses, and in
 * CUDA graph captures too.  The shim forwards every report to the real
 * function (a memory profiler still sees them all), and while the calling
 * thread holds launches it logs each free of CUDA memory with the number of
 * launches then held (engine.c keeps the log with the thread's queue).
 *
 * The rule: an output of a held launch that a free logged after that launch
 * overlaps is left out by the fused op.  Two blocks the allocator hands out
 * never overlap while both are in use, so a free after the launch that
 * touches its output's bytes is the free of that output's block (or of one
 * the same memory was given to after it was freed): no tensor refers to the
 * output any more, and whatever gets its memory next is written before it is
 * read, by calls the shim sees after the op.  Autograd, a hook or any Python
 * reference that keeps the tensor keeps its block: no free, and the output
 * is written.  Where no report comes (the cudaMallocAsync backend,
 * PYTORCH_NO_CUDA_MEMORY_CACHING, another framework), every output is
 * written.  Frees made on another thread are not logged: written too.
 *
 * Most of a block's intermediates are freed only once the launch that
 * reads them returns to Python, after the group's last launch; so while the
 * rule is on, the engine runs a complete group at the thread's next
 * observed call instead of at its last launch (engine.c).
 *
 * Owns: the interposed report function, the switch (H3SHIM_SKIP_RELEASED),
 * the counts of outputs left out, the table of the allocator's live
 * blocks (which weight_cache asks where a parameter's block begins and
 * ends, and tells when one it copied is freed).  Each free of CUDA memory
 * also goes to the thread's ring of recent frees (recent_frees.c).
 * Never: changes what the report function does for PyTorch, or leaves out
 * an output without a free logged after it was launched.
 */
#include "h3shim.h"

#include <dlfcn.h>
#include <pthread.h>

/* Validated: tests/evidence/2026-11-30-nvidia-h200-{swiglu,residual-rmsnorm}-kernel-left-out-d405362.json
 * and ...-qk-norm-rope-kernel-out-d94eff3.json (the kernels with those outputs passed as null),
 * ...-full-decode-{quick-released,released}-d94eff3.md (the decodes with the rule on and off, every
 * arm bitwise), ...-robust-{threads,variants,workloads}-d94eff3.md. */
static const int h3_released_validated[] = {90};

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

static atomic_bool h3_released_seen; /* a report about CUDA memory has come */

/*
 * The blocks the allocator has handed out and not taken back, so that
 * weight_cache knows the whole block a parameter lies in (a flat buffer's
 * parameters are views of one block, written through its base).  Open
 * addressing on the block's address with backward-shift deletion; full (a
 * process with more live blocks than room), it stops answering, and the
 * caller falls back to the CUDA allocation.
 */
#define H3_BLOCKS_BITS 16
#define H3_BLOCKS_CAP (1u << H3_BLOCKS_BITS)
static struct {
    pthread_mutex_t lock;
    uint64_t ptr[H3_BLOCKS_CAP], size[H3_BLOCKS_CAP]; /* ptr 0: empty */
    unsigned n;
    bool lost; /* a block could not be entered: a miss proves nothing */
} h3_blocks = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline unsigned h3_blocks_slot(uint64_t ptr)
{
    return (unsigned)(((ptr >> 9) * 0x9e3779b97f4a7c15ull) >> (64 - H3_BLOCKS_BITS));
}

static void h3_blocks_add(uint64_t ptr, uint64_t size)
{
    pthread_mutex_lock(&h3_blocks.lock);
    if (h3_blocks.n >= H3_BLOCKS_CAP - H3_BLOCKS_CAP / 4) {
        h3_blocks.lost = true;
    } else {
        unsigned i = h3_blocks_slot(ptr);
        while (h3_blocks.ptr[i] != 0 && h3_blocks.ptr[i] != ptr)
            i = (i + 1) & (H3_BLOCKS_CAP - 1);
        h3_blocks.n += h3_blocks.ptr[i] == 0;
        h3_blocks.ptr[i] = ptr, h3_blocks.size[i] = size;
    }
    pthread_mutex_unlock(&h3_blocks.lock);
}

static void h3_blocks_remove(uint64_t ptr)
{
    pthread_mutex_lock(&h3_blocks.lock);
    unsigned i = h3_blocks_slot(ptr);
    while (h3_blocks.ptr[i] != 0 && h3_blocks.ptr[i] != ptr)
        i = (i + 1) & (H3_BLOCKS_CAP - 1);
    if (h3_blocks.ptr[i] != 0) {
        h3_blocks.n--;
        /* Backward shift: move later members of the run into the hole. */
        for (unsigned j = (i + 1) & (H3_BLOCKS_CAP - 1); h3_blocks.ptr[j] != 0; j = (j + 1) & (H3_BLOCKS_CAP - 1)) {
            unsigned home = h3_blocks_slot(h3_blocks.ptr[j]);
            bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
            if (movable) {
                h3_blocks.ptr[i] = h3_blocks.ptr[j], h3_blocks.size[i] = h3_blocks.size[j];
                i = j;
            }
        }
        h3_blocks.ptr[i] = 0, h3_blocks.size[i] = 0;
    }
    pthread_mutex_unlock(&h3_blocks.lock);
}

void h3_released_after_fork_child(void)
{
    pthread_mutex_init(&h3_blocks.lock, NULL);
}

bool h3_released_block(uint64_t addr, uint64_t *lo, uint64_t *hi)
{
    bool found = false;
    pthread_mutex_lock(&h3_blocks.lock);
    unsigned i = h3_blocks_slot(addr); /* most often the block's own address */
    while (h3_blocks.ptr[i] != 0 && h3_blocks.ptr[i] != addr)
        i = (i + 1) & (H3_BLOCKS_CAP - 1);
    if (h3_blocks.ptr[i] == addr && addr != 0) {
        *lo = addr, *hi = addr + h3_blocks.size[i], found = true;
    } else if (!h3_blocks.lost) { /* a view inside a block: every block is looked at (once per copy made) */
        for (unsigned k = 0; k < H3_BLOCKS_CAP && !found; k++)
            if (h3_blocks.ptr[k] != 0 && h3_blocks.ptr[k] <= addr && addr - h3_blocks.ptr[k] < h3_blocks.size[k])
                *lo = h3_blocks.ptr[k], *hi = h3_blocks.ptr[k] + h3_blocks.size[k], found = true;
    }
    pthread_mutex_unlock(&h3_blocks.lock);
    return found;
}
static _Atomic(h3_c10_report_fn *) h3_c10_real;

/* The real function, in the libc10.so the process loaded (PyTorch loads it
 * RTLD_LOCAL at times, where RTLD_NEXT would not find it); NULL when none
 * is loaded.  Tried at initialisation, so that a report seldom has to look
 * it up itself (it comes with the allocator's lock held).  Before libc10 is
 * loaded, nothing calls the report, so a miss here costs nothing. */
void h3_released_resolve(void)
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
        h3_released_resolve();
        f = atomic_load_explicit(&h3_c10_real, memory_order_acquire);
        if (f == NULL)
            H3_WARN(H3_SUB_RESOLVE, "c10::reportMemoryUsageToProfiler is called but the real one was not found "
                                    "in libc10.so: the caching allocator's reports go no further (a memory "
                                    "profiler misses them); the fused ops write every output");
    }
    int state = atomic_load_explicit(&h3_hot.state, memory_order_acquire);
    if (device.type == H3_C10_CUDA && ptr != NULL && state != 2) { /* blocks from the first, parameters included */
        if (alloc_size > 0)
            h3_blocks_add((uint64_t)(uintptr_t)ptr, (uint64_t)alloc_size);
        else if (alloc_size < 0)
            h3_blocks_remove((uint64_t)(uintptr_t)ptr);
    }
    if (device.type == H3_C10_CUDA && alloc_size < 0 && ptr != NULL && state == 1)
        h3_recent_free_note((uint64_t)(uintptr_t)ptr, (uint64_t)(uintptr_t)ptr - (uint64_t)alloc_size);
    if (device.type == H3_C10_CUDA && alloc_size < 0 && ptr != NULL && state == 1 &&
        atomic_load_explicit(&h3_hot.wc_held, memory_order_relaxed) != 0)
        h3_wcache_source_freed((uint64_t)(uintptr_t)ptr, (uint64_t)(uintptr_t)ptr - (uint64_t)alloc_size);
    if (f != NULL && device.type == H3_C10_CUDA && state == 1) {
        if (!atomic_load_explicit(&h3_released_seen, memory_order_relaxed))
            atomic_store_explicit(&h3_released_seen, true, memory_order_relaxed);
        if (alloc_size < 0 && ptr != NULL && atomic_load_explicit(&h3_hot.holding, memory_order_relaxed) != 0)
            h3_engine_note_free((uint64_t)(uintptr_t)ptr, (uint64_t)(uintptr_t)ptr - (uint64_t)alloc_size);
    }
    if (f != NULL)
        f(ptr, alloc_size, total_allocated, total_reserved, device);
}

/* H3SHIM_SKIP_RELEASED: 1, 0, or -1 (unset: on where validated). */
static int h3_released_switch(void)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    return h3_config_switch("H3SHIM_SKIP_RELEASED", h3_config.skip_released, "on where validated", &warned);
}

/* Decided at the first group that asks once a report has come: 1 on, 2 off. */
static atomic_int h3_released_decided;

bool h3_released_on(void)
{
    int d = atomic_load_explicit(&h3_released_decided, memory_order_relaxed);
    if (d != 0)
        return d == 1;
    if (!atomic_load_explicit(&h3_released_seen, memory_order_relaxed))
        return false;
    int sw = h3_released_switch(), sm = h3_kernels_sm();
    if (sw < 0 && sm < 0)
        return false; /* asked again once the device is known */
    bool on = sw == 1;
    for (unsigned i = 0; sw < 0 && i < H3_ARRAY_LEN(h3_released_validated); i++)
        on |= h3_released_validated[i] == sm;
    atomic_store_explicit(&h3_released_decided, on ? 1 : 2, memory_order_relaxed);
    return on;
}

/* This thread's outputs left out since the last take. */
static __attribute__((tls_model("initial-exec"))) _Thread_local struct {
    uint32_t outputs;
    uint64_t bytes;
} h3_left_out;

uint64_t h3_outputs_dead(const struct h3_span *out, const struct h3_deferred *const *by, unsigned n)
{
    const uint64_t freed = h3_outputs_freed(out, n);
    const struct h3_frees *f = h3_engine_frees();
    if (f == NULL || f->n == 0 || !h3_released_on())
        return freed;
    uint64_t released = 0;
    for (unsigned i = 0; i < n && i < 64; i++) {
        int64_t made = h3_engine_held_index(by[i]);
        if (made < 0 || out[i].lo == 0 || ((freed >> i) & 1))
            continue;
        for (uint32_t k = 0; k < f->n; k++)
            if (f->at[k].after > (uint64_t)made &&
                h3_spans_overlap(out[i], (struct h3_span){f->at[k].lo, f->at[k].hi})) {
                released |= 1ull << i;
                h3_left_out.outputs++;
                h3_left_out.bytes += out[i].hi - out[i].lo;
                break;
            }
    }
    return freed | released;
}

void h3_released_take(uint32_t *outputs, uint64_t *bytes)
{
    *outputs = h3_left_out.outputs;
    *bytes = h3_left_out.bytes;
    h3_left_out.outputs = 0;
    h3_left_out.bytes = 0;
}

const char *h3_released_state(void)
{
    if (!atomic_load(&h3_released_seen))
        return "no report from PyTorch's caching allocator: every output written";
    switch (atomic_load(&h3_released_decided)) {
    case 1: return "on";
    case 2: return "off (H3SHIM_SKIP_RELEASED=0, or not validated on this GPU)";
    default: return "not decided (no group completed)";
    }
}
