/*
 * Fake libcuda.so.1 (unversioned, like the real driver).  Kernels are
 * struct fake_kernel; launching one runs its host function.  Built with
 * -Bsymbolic so that cuGetProcAddress hands out the library's own functions,
 * as the real driver does.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "nvapi.h"
#include "fake.h"
#include "../../kernels/qk_params.h"
#include "../../kernels/verify_params.h"

#include <pthread.h>
#include <string.h>

/*
 * Runs a kernel and logs its execution as an entry "exec": the handle, the
 * launch configuration, the stream and a hash of the parameter bytes (what
 * the kernel would see; the tests compare executions by it, since a launch
 * that was held back and issued later passes a copy of the parameters).
 */
/* The kernels of the fake module (see cuModuleLoadData below). */
static struct fake_kernel fake_module_kernels[11];

static CUcontext fake_current(void); /* this thread's current context (below) */

/*
 * Device memory the shim allocates (cuMemAlloc_v2) is host memory, zeroed,
 * and known here, so that the fakes can write it as the GPU would: memsets
 * into it, and a fused kernel named by FAKE_WRONG_KERNEL, which writes
 * 0xa5 bytes (a wrong result) over the first 8 bytes of every output it is
 * given there (verify mode's scratch: any 8-byte word of its parameters
 * that points into such memory).  The framework's own pointers are not
 * memory and are never written.
 */
#define FAKE_ALLOCS 256
static struct {
    uintptr_t p;
    size_t n;
} fake_allocs[FAKE_ALLOCS];
static pthread_mutex_t fake_allocs_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether [p, p + n) lies in memory cuMemAlloc_v2 handed out. */
static bool fake_is_memory(uintptr_t p, size_t n)
{
    bool in = false;
    pthread_mutex_lock(&fake_allocs_lock);
    for (unsigned i = 0; i < FAKE_ALLOCS && !in; i++)
        in = fake_allocs[i].p != 0 && p >= fake_allocs[i].p && p + n <= fake_allocs[i].p + fake_allocs[i].n;
    pthread_mutex_unlock(&fake_allocs_lock);
    return in;
}

/* For the other fakes (found with dlsym on a libcuda handle): whether p is
 * in memory cuMemAlloc_v2 handed out and cuMemFree_v2 has not taken back. */
FAKE_EXPORT int fake_device_memory_live(uintptr_t p)
{
    return fake_is_memory(p, 1);
}

/* With FAKE_WRONG_FROM=N, the wrong kernel's first N-1 runs are right. */
static void fake_wrong_writes(const struct fake_kernel *k, void **params)
{
    static atomic_long runs;
    const char *wrong = getenv("FAKE_WRONG_KERNEL"), *from = getenv("FAKE_WRONG_FROM");
    if (wrong == NULL || strcmp(wrong, k->name) != 0)
        return;
    if (atomic_fetch_add(&runs, 1) + 1 < (from != NULL ? atol(from) : 1))
        return;
    for (unsigned i = 0; i < k->nparams; i++)
        for (size_t off = 0; off + 8 <= k->sizes[i]; off += 8) {
            uintptr_t v;
            memcpy(&v, (const char *)params[i] + off, 8);
            if (v != 0 && fake_is_memory(v, 8))
                memset((void *)v, 0xa5, 8);
        }
}

/* With FAKE_CHECK_SCRATCH set, a fused kernel logs "outputs_scratch" with
 * 1 when every output it writes (non-null) lies in memory the shim
 * allocated (verify mode's scratch), else 0: a run into scratch that wrote
 * the program's buffers shows. */
static void fake_outputs_scratch(const uint64_t *out, unsigned n)
{
    if (getenv("FAKE_CHECK_SCRATCH") == NULL)
        return;
    uint64_t all = 1;
    for (unsigned i = 0; i < n; i++)
        all &= out[i] == 0 || fake_is_memory((uintptr_t)out[i], 1);
    fakelog_call("cuda", "outputs_scratch", 1, &all, 0);
}

/* h3_verify_diff: the wrong result's mark at an output's start is a difference at byte 0. */
static void fake_verify_diff(void **p)
{
    uintptr_t got = *(uintptr_t *)p[1];
    unsigned long long *first = *(unsigned long long **)p[3];
    static const unsigned char mark[8] = {0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5};
    bool differs = fake_is_memory(got, 8) && memcmp((const void *)got, mark, 8) == 0;
    if (differs && fake_is_memory((uintptr_t)first, 8))
        *first = 0;
    uint64_t words[2] = {differs, *(uint64_t *)p[2]};
    fakelog_call("cuda", "verify_check", 2, words, 0);
}

/* h3_verify_note, as the kernel: each result to host memory (the unfused
 * value unknown here: 0), and the words set back. */
static void fake_verify_note(void **p)
{
    const struct h3_verify_batch *b = p[0];
    for (unsigned i = 0; i < b->n && fake_is_memory((uintptr_t)b->first, 8 * b->n); i++) {
        struct h3_verify_record r = {b->first[i], {0}, {0}};
        if (r.first != ~0ull && fake_is_memory((uintptr_t)b->got[i], 8))
            memcpy(r.got, b->got[i], b->elem[i] < 8 ? b->elem[i] : 8);
        b->out[i] = r;
        b->first[i] = ~0ull;
    }
    uint64_t words[1] = {b->n};
    fakelog_call("cuda", "verify_note", 1, words, 0);
}

static unsigned fake_grid_x; /* of the kernel running now, for the fused ops' checks */

static CUresult run(const void *handle, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, unsigned shmem, CUstream stream, void **params)
{
    struct fake_kernel *k = fake_kernel_lookup(handle);
    if (k == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    const size_t nmodule = sizeof(fake_module_kernels) / sizeof(fake_module_kernels[0]);
    if (k >= fake_module_kernels && k < fake_module_kernels + nmodule && getenv("FAKE_LAUNCH_FAIL") != NULL)
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned i = 0; i < k->nparams && params != NULL; i++)
        for (size_t b = 0; b < k->sizes[i]; b++)
            h = (h ^ ((const unsigned char *)params[i])[b]) * 0x100000001b3ull;
    /* A kernel run in another context than device 0's says which, as an 11th word (one entry: threads interleave). */
    uint64_t words[11] = {(uint64_t)(uintptr_t)handle, gx, gy, gz, bx, by, bz, shmem, (uint64_t)(uintptr_t)stream, h,
                          (uint64_t)(uintptr_t)fake_current()};
    fakelog_call("cuda", "exec", fake_current() != (CUcontext)(uintptr_t)FAKE_CTX_DEVICE_0 ? 11 : 10, words, 0);
    fake_grid_x = gx;
    if (params != NULL)
        fake_wrong_writes(k, params);
    fake_kernel_run(k, params);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuKernelGetName(const char **name, CUkernel k)
{
    struct fake_kernel *fk = fake_kernel_lookup(k);
    if (fk == NULL || name == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = fk->name;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuFuncGetName(const char **name, CUfunction f)
{
    return cuKernelGetName(name, (CUkernel)f);
}

FAKE_EXPORT CUresult cuKernelGetParamInfo(CUkernel k, size_t index, size_t *offset, size_t *size)
{
    struct fake_kernel *fk = fake_kernel_lookup(k);
    if (fk == NULL || index >= fk->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    size_t off = 0;
    for (size_t i = 0; i < index; i++)
        off += fk->sizes[i];
    *offset = off;
    *size = fk->sizes[index];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    return cuKernelGetParamInfo((CUkernel)f, index, offset, size);
}

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
    *dev = fake_current() == (CUcontext)(uintptr_t)FAKE_CTX_DEVICE_1 ? 1 : 0;
    return CUDA_SUCCESS;
}

/* Device memory is host memory; allocations' extents are not known. */
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    fake_capture_unsafe("cuMemAlloc_v2");
    const char *fail = getenv("FAKE_ALLOC_FAIL_BYTES"); /* allocations of at least that many bytes fail */
    if (fail != NULL && bytes >= (size_t)strtoull(fail, NULL, 10))
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = calloc(1, bytes > 0 ? bytes : 1);
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    pthread_mutex_lock(&fake_allocs_lock);
    for (unsigned i = 0; i < FAKE_ALLOCS; i++)
        if (fake_allocs[i].p == 0) {
            fake_allocs[i].p = (uintptr_t)m, fake_allocs[i].n = bytes;
            break;
        }
    pthread_mutex_unlock(&fake_allocs_lock);
    return CUDA_SUCCESS;
}

/* Stream-ordered allocations: as cuMemAlloc_v2's. */
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s)
{
    (void)s;
    return cuMemAlloc_v2(p, bytes);
}

FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t bytes, CUstream s)
{
    (void)s;
    return cuMemAlloc_v2(p, bytes);
}

/* Pinned host memory: host memory. */
FAKE_EXPORT CUresult cuMemAllocHost_v2(void **p, size_t bytes)
{
    *p = calloc(1, bytes > 0 ? bytes : 1);
    return *p != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE_EXPORT CUresult cuMemFreeHost(void *p)
{
    free(p);
    return CUDA_SUCCESS;
}

/* 141 GiB of device memory, FAKE_MEM_FREE_MB of it free (default: all);
 * FAKE_MEM_FREE_LOW_MB from the (FAKE_MEM_LOW_AFTER + 1)-th question on. */
FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    static atomic_long asked;
    fake_capture_unsafe("cuMemGetInfo_v2");
    const char *after = getenv("FAKE_MEM_LOW_AFTER");
    bool low = after != NULL && atomic_fetch_add(&asked, 1) >= atol(after);
    const char *f = getenv(low ? "FAKE_MEM_FREE_LOW_MB" : "FAKE_MEM_FREE_MB");
    *total_b = (size_t)141 << 30;
    *free_b = f != NULL ? (size_t)strtoull(f, NULL, 10) << 20 : *total_b;
    return CUDA_SUCCESS;
}

/* With FAKE_RANGE_BYTES=N, every address begins an allocation of N bytes. */
FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    const char *n = getenv("FAKE_RANGE_BYTES");
    if (n == NULL)
        return CUDA_ERROR_NOT_FOUND;
    *base = p;
    *size = (size_t)strtoull(n, NULL, 10);
    return CUDA_SUCCESS;
}

/* The primary context's references: PyTorch's one, and another library's
 * retains and releases. */
static atomic_int fake_primary_refs = 1;

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    (void)dev;
    atomic_fetch_add(&fake_primary_refs, 1);
    *ctx = (CUcontext)0xc0c0;
    uint64_t words[1] = {(uint64_t)dev};
    fakelog_call("cuda", "cuDevicePrimaryCtxRetain", 1, words, 0);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    (void)dev;
    *flags = 0;
    *active = atomic_load(&fake_primary_refs) > 0;
    return CUDA_SUCCESS;
}

/* Each thread's stack of current contexts: device 0's unless set (cuCtxSetCurrent) or pushed. */
static __thread CUcontext fake_ctx_stack[8];
static __thread int fake_nctx;

static CUcontext fake_current(void)
{
    return fake_nctx > 0 ? fake_ctx_stack[fake_nctx - 1] : (CUcontext)(uintptr_t)FAKE_CTX_DEVICE_0;
}

/* No context is current while FAKE_NO_CONTEXT is set. */
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    *ctx = getenv("FAKE_NO_CONTEXT") != NULL ? NULL : fake_current();
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (fake_nctx == 0)
        fake_nctx = 1;
    fake_ctx_stack[fake_nctx - 1] = ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (fake_nctx == 8)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake_nctx == 0) /* the implicit device 0's below it */
        fake_ctx_stack[fake_nctx++] = (CUcontext)(uintptr_t)FAKE_CTX_DEVICE_0;
    fake_ctx_stack[fake_nctx++] = ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    if (fake_nctx == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext top = fake_ctx_stack[--fake_nctx];
    if (ctx != NULL)
        *ctx = top;
    return CUDA_SUCCESS;
}

/* The compute capability is FAKE_SM (default 90; negative: unreadable); 132
 * SMs, which launch cooperative kernels unless FAKE_NO_COOPERATIVE is set. */
FAKE_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
    const char *env = getenv("FAKE_SM");
    int sm = env != NULL ? atoi(env) : 90;
    (void)dev;
    if (sm < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        *v = sm / 10;
    else if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        *v = sm % 10;
    else if (a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        *v = getenv("FAKE_SM_COUNT") != NULL ? atoi(getenv("FAKE_SM_COUNT")) : 132;
    else if (a == CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)
        *v = getenv("FAKE_NO_COOPERATIVE") == NULL;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Twelve blocks of any kernel fit on an SM at once (the H200's figure for
 * h3_residual_rmsnorm_f32_staged: 40 registers a thread), whatever the
 * shared memory, up to 48 KiB. */
FAKE_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int threads, size_t smem)
{
    if (fake_kernel_lookup(f) == NULL || threads <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *n = smem <= 48 * 1024 ? 12 : 0;
    return CUDA_SUCCESS;
}

/*
 * Modules: any image loads (unless FAKE_MODULE_FAIL is set) and holds the
 * fused ops' kernels as fake kernels (none while FAKE_NO_KERNEL is set; their
 * launches fail while FAKE_LAUNCH_FAIL is set).  h3_swiglu_f16 (and its
 * eight-wide h3_swiglu_f16x8) logs an entry
 * "swiglu_check" with 1 when its arguments have the H3 block's layout (the up
 * half 8192 elements after the gate, rows of 16384, 1797 rows of 8192),
 * whether it writes the silu output, and its grid's blocks (the SM count is
 * 132, or FAKE_SM_COUNT); h3_rmsnorm_f32 logs "rmsnorm_check"
 * with 1 when its arguments are the H3 block's norm (rows of 2048, eps
 * 1e-5, a weight, the FP16 output) and a bit per output left unwritten (y,
 * rstd, y16);
 * h3_residual_rmsnorm_f32 logs "residual_check" likewise (b16 rows of 2048
 * too, the inputs and h' set, and eps and gamma where a norm output is) and
 * a bit per output left unwritten (p, y, rstd, y16: e for the block's last
 * residual, which has no norm), and h3_residual_rmsnorm_f32_staged logs
 * "residual_staged_check" likewise, its rows (the last parameter) 1797 too;
 * h3_qk_norm_rope_f16 (and h3_qk_norm_rope_f16x4) logs "qk_check" with 1
 * when its parameter block is the H3 block's (1797 tokens of 32 heads, what
 * attention reads set), a bit per output left unwritten (side * 10 +
 * field) and which kernel it is (0 one element a lane, 1 four-wide, 2 and 3
 * the four- and eight-wide ones that write `out` alone).
 */
static void fake_swiglu(void **p)
{
    uint64_t gate = *(uint64_t *)p[0], up = *(uint64_t *)p[1];
    long long stride = *(long long *)p[2], rows = *(long long *)p[5], width = *(long long *)p[6];
    uint64_t words[3] = {up == gate + 2 * 8192 && stride == 16384 && rows == 1797 && width == 8192,
                         *(uint64_t *)p[3] != 0, fake_grid_x};
    fakelog_call("cuda", "swiglu_check", 3, words, 0);
    const uint64_t out[2] = {*(uint64_t *)p[3], *(uint64_t *)p[4]};
    fake_outputs_scratch(out, 2);
}

static void fake_rmsnorm(void **p)
{
    uint64_t x = *(uint64_t *)p[0], gamma = *(uint64_t *)p[1], y = *(uint64_t *)p[4], rstd = *(uint64_t *)p[5],
             y16 = *(uint64_t *)p[6];
    float eps = *(float *)p[2];
    int n = *(int *)p[3];
    uint64_t words[2] = {x != 0 && gamma != 0 && y16 != 0 && n == 2048 && eps == 1e-5f,
                         (uint64_t)(y == 0) | (uint64_t)(rstd == 0) << 1 | (uint64_t)(y16 == 0) << 2};
    fakelog_call("cuda", "rmsnorm_check", 2, words, 0);
    const uint64_t out[3] = {y, rstd, y16};
    fake_outputs_scratch(out, 3);
}

static void fake_residual_as(void **p, const char *entry, uint64_t ok)
{
    ok &= *(long long *)p[1] == 2048 && *(int *)p[8] == 2048;
    for (int i = 0; i < 4; i++) /* b16, (stride), scale, h */
        ok &= i == 1 || *(uint64_t *)p[i] != 0;
    ok &= *(uint64_t *)p[5] != 0; /* h' */
    uint64_t unwritten = 0; /* a bit per output left to others: p, y, rstd, y16 (params 4, 9, 10, 11) */
    static const int outs[4] = {4, 9, 10, 11};
    for (int i = 0; i < 4; i++)
        unwritten |= (uint64_t)(*(uint64_t *)p[outs[i]] == 0) << i;
    if ((unwritten & 14) != 14) /* a norm output: the block's eps and gamma */
        ok &= *(float *)p[7] == 1e-5f && *(uint64_t *)p[6] != 0;
    uint64_t words[2] = {ok, unwritten};
    fakelog_call("cuda", entry, 2, words, 0);
    uint64_t out[5];
    for (int i = 0; i < 4; i++)
        out[i] = *(uint64_t *)p[outs[i]];
    out[4] = *(uint64_t *)p[5]; /* h' */
    fake_outputs_scratch(out, 5);
}

static void fake_residual(void **p)
{
    fake_residual_as(p, "residual_check", 1);
}

static void fake_residual_staged(void **p)
{
    fake_residual_as(p, "residual_staged_check", *(int *)p[12] == 1797);
}

static void fake_qk_as(void **p, uint64_t wide);

static void fake_qk(void **p)
{
    fake_qk_as(p, 0);
}

static void fake_qk_wide(void **p)
{
    fake_qk_as(p, 1);
}

static void fake_qk_out(void **p)
{
    fake_qk_as(p, 2);
}

static void fake_qk_out8(void **p)
{
    fake_qk_as(p, 3);
}

/* Logs "qk_check OK DROPPED WIDE". */
static void fake_qk_as(void **p, uint64_t wide)
{
    const struct h3_qk_params *q = p[0];
    uint64_t out[20];
    for (unsigned k = 0; k < 20; k++)
        out[k] = (uint64_t)(uintptr_t)((void *const *)&q->side[k / 10])[k % 10];
    fake_outputs_scratch(out, 20);
    uint64_t ok = q->tokens == 1797 && q->heads == 32 && q->eps == 1e-5f && q->token_stride == 6144 &&
                  q->cs_stride == 48 && q->qkv != NULL && q->cosv != NULL && q->sinv != NULL &&
                  q->side[0].out != NULL && q->side[1].out != NULL;
    uint64_t dropped = 0; /* a bit per output left unwritten: side * 10 + field */
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < 10; k++)
            dropped |= (uint64_t)(((void *const *)&q->side[side])[k] == NULL) << (side * 10 + k);
    uint64_t words[3] = {ok, dropped, wide};
    fakelog_call("cuda", "qk_check", 3, words, 0);
}

/* Every stream is being captured while FAKE_CAPTURING is set (no capture
 * id nor graph then; the fake framework begins one capture, on stream
 * 0x5000, unless the value is "unseen", through CUDA 10.0's
 * cuStreamBeginCapture if it is "v1"); else those between a begin and an
 * end of capture. */
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    uint64_t id, words[1] = {(uint64_t)(uintptr_t)s};
    fakelog_call("cuda", "cuStreamIsCapturing", 1, words, 0);
    *status = getenv("FAKE_CAPTURING") != NULL || fake_capture_status((uintptr_t)s, &id)
                  ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                  : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

/* Events: handles only (the fakes run every launch at once). */
FAKE_EXPORT CUresult cuEventCreate(CUevent *ev, unsigned int flags)
{
    static atomic_ulong n;
    fake_capture_unsafe("cuEventCreate");
    *ev = (CUevent)(uintptr_t)(0xe0000 + 16 * atomic_fetch_add(&n, 1));
    uint64_t words[2] = {(uint64_t)(uintptr_t)*ev, flags};
    fakelog_call("cuda", "cuEventCreate", 2, words, 0);
    return CUDA_SUCCESS;
}

/* An event is complete unless FAKE_EVENTS_PENDING is set (then never);
 * with FAKE_EVENT_LAG=N, after its first N queries since it was recorded. */
static struct {
    uintptr_t ev;
    long asked;
} fake_event_lag[64];
static pthread_mutex_t fake_event_lock = PTHREAD_MUTEX_INITIALIZER;

/* Restarts an event's lag (a record).  */
static void fake_event_recorded(uintptr_t ev)
{
    pthread_mutex_lock(&fake_event_lock);
    for (unsigned i = 0; i < 64; i++)
        if (fake_event_lag[i].ev == ev || fake_event_lag[i].ev == 0) {
            fake_event_lag[i].ev = ev, fake_event_lag[i].asked = 0;
            break;
        }
    pthread_mutex_unlock(&fake_event_lock);
}

FAKE_EXPORT CUresult cuEventQuery(CUevent ev)
{
    uint64_t words[1] = {(uint64_t)(uintptr_t)ev};
    fakelog_call("cuda", "cuEventQuery", 1, words, 0);
    fake_capture_unsafe("cuEventQuery");
    if (getenv("FAKE_EVENTS_PENDING") != NULL)
        return CUDA_ERROR_NOT_READY;
    const char *lag = getenv("FAKE_EVENT_LAG");
    bool pending = false;
    pthread_mutex_lock(&fake_event_lock);
    for (unsigned i = 0; i < 64 && lag != NULL; i++)
        if (fake_event_lag[i].ev == (uintptr_t)ev) {
            pending = fake_event_lag[i].asked++ < atol(lag);
            break;
        }
    pthread_mutex_unlock(&fake_event_lock);
    return pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent ev)
{
    uint64_t words[1] = {(uint64_t)(uintptr_t)ev};
    fakelog_call("cuda", "cuEventDestroy_v2", 1, words, 0);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id_out,
                                               CUgraph *graph_out, const CUgraphNode **deps,
                                               const CUgraphEdgeData **edges, size_t *ndeps)
{
    uint64_t id = 0;
    int active = fake_capture_status((uintptr_t)s, &id);
    uint64_t words[2] = {(uint64_t)(uintptr_t)s, id};
    fakelog_call("cuda", "cuStreamGetCaptureInfo_v3", 2, words, 0);
    *status = active ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id_out != NULL)
        *id_out = id;
    if (graph_out != NULL)
        *graph_out = active ? (CUgraph)fake_capture_graph(id) : NULL;
    if (deps != NULL)
        *deps = NULL;
    if (edges != NULL)
        *edges = NULL;
    if (ndeps != NULL)
        *ndeps = 0;
    return CUDA_SUCCESS;
}


FAKE_EXPORT CUresult cuModuleLoadData(CUmodule *mod, const void *image)
{
    fake_capture_unsafe("cuModuleLoadData");
    if (getenv("FAKE_MODULE_FAIL") != NULL || image == NULL)
        return CUDA_ERROR_INVALID_IMAGE;
    static const size_t sizes[7] = {8, 8, 8, 8, 8, 8, 8};
    fake_kernel_init(&fake_module_kernels[0], "h3_swiglu_f16", 7, sizes, fake_swiglu);
    static const size_t norm_sizes[7] = {8, 8, 4, 4, 8, 8, 8};
    fake_kernel_init(&fake_module_kernels[1], "h3_rmsnorm_f32", 7, norm_sizes, fake_rmsnorm);
    static const size_t residual_sizes[12] = {8, 8, 8, 8, 8, 8, 8, 4, 4, 8, 8, 8};
    fake_kernel_init(&fake_module_kernels[2], "h3_residual_rmsnorm_f32", 12, residual_sizes, fake_residual);
    static const size_t qk_sizes[1] = {sizeof(struct h3_qk_params)};
    fake_kernel_init(&fake_module_kernels[3], "h3_qk_norm_rope_f16", 1, qk_sizes, fake_qk);
    fake_kernel_init(&fake_module_kernels[4], "h3_swiglu_f16x8", 7, sizes, fake_swiglu);
    fake_kernel_init(&fake_module_kernels[5], "h3_qk_norm_rope_f16x4", 1, qk_sizes, fake_qk_wide);
    fake_kernel_init(&fake_module_kernels[7], "h3_qk_norm_rope_out_f16x4", 1, qk_sizes, fake_qk_out);
    fake_kernel_init(&fake_module_kernels[8], "h3_qk_norm_rope_out_f16x8", 1, qk_sizes, fake_qk_out8);
    static const size_t staged_sizes[13] = {8, 8, 8, 8, 8, 8, 8, 4, 4, 8, 8, 8, 4};
    fake_kernel_init(&fake_module_kernels[6], "h3_residual_rmsnorm_f32_staged", 13, staged_sizes,
                     fake_residual_staged);
    static const size_t diff_sizes[4] = {8, 8, 8, 8}, note_sizes[1] = {sizeof(struct h3_verify_batch)};
    fake_kernel_init(&fake_module_kernels[9], "h3_verify_diff", 4, diff_sizes, fake_verify_diff);
    fake_kernel_init(&fake_module_kernels[10], "h3_verify_note", 1, note_sizes, fake_verify_note);
    *mod = (CUmodule)fake_module_kernels;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name)
{
    if (mod != (CUmodule)fake_module_kernels || getenv("FAKE_NO_KERNEL") != NULL)
        return CUDA_ERROR_NOT_FOUND;
    for (size_t i = 0; i < sizeof(fake_module_kernels) / sizeof(fake_module_kernels[0]); i++) {
        if (strcmp(name, fake_module_kernels[i].name) == 0) {
            *f = (CUfunction)&fake_module_kernels[i];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

static const struct {
    const char *symbol;
    void *plain, *ptsz;
} procs[] = {
    {"cuLaunchKernel", (void *)&cuLaunchKernel, (void *)&cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", (void *)&cuLaunchKernelEx, (void *)&cuLaunchKernelEx_ptsz},
    {"cuGetProcAddress", (void *)&cuGetProcAddress_v2, (void *)&cuGetProcAddress_v2},
    {"cuKernelGetName", (void *)&cuKernelGetName, (void *)&cuKernelGetName},
    {"cuFuncGetName", (void *)&cuFuncGetName, (void *)&cuFuncGetName},
    {"cuCtxGetDevice", (void *)&cuCtxGetDevice, (void *)&cuCtxGetDevice},
    {"cuMemcpyDtoHAsync", (void *)&cuMemcpyDtoHAsync_v2, (void *)&cuMemcpyDtoHAsync_v2_ptsz},
    {"cuStreamSynchronize", (void *)&cuStreamSynchronize, (void *)&cuStreamSynchronize_ptsz},
};

static long long fake_behave(const char *fn, void **argp)
{
    fake_capture_unsafe(fn);
    if (strcmp(fn, "cuMemFree_v2") == 0 || strncmp(fn, "cuMemFreeAsync", 14) == 0) { /* forgotten, not freed: the fakes may still be handed it */
        uintptr_t m = (uintptr_t) * (CUdeviceptr *)argp[0];
        pthread_mutex_lock(&fake_allocs_lock);
        for (unsigned i = 0; i < FAKE_ALLOCS; i++)
            if (fake_allocs[i].p == m)
                fake_allocs[i].p = 0;
        pthread_mutex_unlock(&fake_allocs_lock);
        return CUDA_SUCCESS;
    }
    if (strncmp(fn, "cuMemsetD32Async", 16) == 0) {
        uintptr_t m = (uintptr_t) * (CUdeviceptr *)argp[0];
        unsigned v = *(unsigned *)argp[1];
        size_t n = *(size_t *)argp[2];
        if (fake_is_memory(m, 4 * n))
            for (size_t i = 0; i < n; i++)
                memcpy((char *)m + 4 * i, &v, 4);
        return CUDA_SUCCESS;
    }
    if (strncmp(fn, "cuEventRecord", 13) == 0) {
        fake_event_recorded((uintptr_t) * (CUevent *)argp[0]);
        return CUDA_SUCCESS;
    }
    if (strcmp(fn, "cuMemsetD8_v2") == 0) {
        uintptr_t m = (uintptr_t) * (CUdeviceptr *)argp[0];
        size_t n = *(size_t *)argp[2];
        if (fake_is_memory(m, n))
            memset((void *)m, *(unsigned char *)argp[1], n);
        return CUDA_SUCCESS;
    }
    if (strcmp(fn, "cuDevicePrimaryCtxRelease_v2") == 0) {
        atomic_fetch_sub(&fake_primary_refs, 1);
        return CUDA_SUCCESS;
    }
    if (strncmp(fn, "cuGetProcAddress", 16) == 0) {
        const char *symbol = *(const char **)argp[0];
        void **pfn = *(void ***)argp[1];
        cuuint64_t flags = *(cuuint64_t *)argp[3];
        if (symbol == NULL || pfn == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
            if (strcmp(procs[i].symbol, symbol) == 0) {
                bool legacy_gpa = strcmp(fn, "cuGetProcAddress") == 0 && i == 2;
                *pfn = legacy_gpa ? (void *)&cuGetProcAddress
                                  : (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? procs[i].ptsz
                                                                                            : procs[i].plain;
                return CUDA_SUCCESS;
            }
        }
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    if (strncmp(fn, "cuStreamBeginCapture", 20) == 0) {
        fake_capture_begin((uintptr_t) * (CUstream *)argp[0]);
        return CUDA_SUCCESS;
    }
    if (strncmp(fn, "cuStreamEndCapture", 18) == 0) {
        uintptr_t graph;
        int ended = fake_capture_end((uintptr_t) * (CUstream *)argp[0], &graph);
        if (ended)
            **(CUgraph **)argp[1] = (CUgraph)graph;
        return ended == 2 ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
    }
    if (strncmp(fn, "cuGraphInstantiate", 18) == 0) {
        **(CUgraphExec **)argp[0] = (CUgraphExec)fake_exec_new();
        return CUDA_SUCCESS;
    }
    if (strcmp(fn, "cuLaunchKernel") == 0 || strcmp(fn, "cuLaunchKernel_ptsz") == 0)
        return run(*(CUfunction *)argp[0], *(unsigned *)argp[1], *(unsigned *)argp[2], *(unsigned *)argp[3],
                   *(unsigned *)argp[4], *(unsigned *)argp[5], *(unsigned *)argp[6], *(unsigned *)argp[7],
                   *(CUstream *)argp[8], *(void ***)argp[9]);
    if ((strcmp(fn, "cuLaunchCooperativeKernel") == 0 || strcmp(fn, "cuLaunchCooperativeKernel_ptsz") == 0) &&
        fake_kernel_lookup(*(CUfunction *)argp[0]) != NULL)
        return run(*(CUfunction *)argp[0], *(unsigned *)argp[1], *(unsigned *)argp[2], *(unsigned *)argp[3],
                   *(unsigned *)argp[4], *(unsigned *)argp[5], *(unsigned *)argp[6], *(unsigned *)argp[7],
                   *(CUstream *)argp[8], *(void ***)argp[9]);
    if (strcmp(fn, "cuLaunchKernelEx") == 0 || strcmp(fn, "cuLaunchKernelEx_ptsz") == 0) {
        const CUlaunchConfig *c = *(const CUlaunchConfig **)argp[0];
        if (c == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        return run(*(CUfunction *)argp[1], c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                   c->blockDimZ, c->sharedMemBytes, c->hStream, *(void ***)argp[2]);
    }
    return CUDA_SUCCESS; /* memcpy, memset, events, synchronisation: logged, nothing to do */
}

#define FAKE_LIB_CUDA
#include "stubs.h"
