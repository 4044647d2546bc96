/*
 * Issuing: held launches, and the launches an op makes as the program made
 * them, through the real entry points they were made to.
 *
 * Owns: the count of issued launches that returned an error.
 * Invariants: a launch is issued through the entry point it was made to,
 * with its own grid, block, shared memory, stream and parameters; the time
 * is the application's (h3_forward_begin/end), not the shim's own.
 * Never: holds, reorders or changes a launch.
 */
#include "h3shim.h"

static atomic_ulong h3_issue_failed;

/* Issues one deferred call through the real entry point it was made to. */
static long long h3_issue_one(const struct h3_deferred *d)
{
    void *real = h3_real_fn(d->fn);
    if (real == NULL)
        return -1;
    void *handle = (void *)(uintptr_t)d->handle;
    void *stream = (void *)(uintptr_t)d->stream;
    switch (d->fn) {
    case H3_FN___cudaLaunchKernel:
    case H3_FN___cudaLaunchKernel_ptsz:
        return ((__typeof__(&__cudaLaunchKernel))real)((cudaKernel_t)handle, d->grid, d->block, d->argv,
                                                        d->shmem, (cudaStream_t)stream);
    case H3_FN_cudaLaunchKernel:
    case H3_FN_cudaLaunchKernel_ptsz:
        return ((__typeof__(&cudaLaunchKernel))real)(handle, d->grid, d->block, d->argv, d->shmem,
                                                      (cudaStream_t)stream);
    case H3_FN_cuLaunchKernel:
    case H3_FN_cuLaunchKernel_ptsz:
        return ((__typeof__(&cuLaunchKernel))real)((CUfunction)handle, d->grid.x, d->grid.y, d->grid.z,
                                                    d->block.x, d->block.y, d->block.z, d->shmem,
                                                    (CUstream)stream, d->argv, NULL);
    default:
        return -1;
    }
}

unsigned h3_issue(const struct h3_deferred *calls, uint32_t n)
{
    unsigned failed = 0;
    uint64_t t0 = h3_forward_begin(); /* the runtime launches through the driver: not a new call */
    for (uint32_t i = 0; i < n; i++) {
        long long r = h3_issue_one(&calls[i]);
        if (r != 0) {
            failed++;
            atomic_fetch_add_explicit(&h3_issue_failed, 1, memory_order_relaxed);
            H3_WARN_ONCE(H3_SUB_ENGINE,
                         "a deferred %s returned %lld when issued; the error surfaces at the "
                         "caller's next error check, not at the launch",
                         h3_hooks[calls[i].fn].name, r);
        }
    }
    h3_forward_end(t0);
    return failed;
}

unsigned long h3_issue_errors(void)
{
    return atomic_load(&h3_issue_failed);
}

void h3_issue_reset(void)
{
    atomic_store(&h3_issue_failed, 0);
}
