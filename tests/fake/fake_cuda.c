/*
 * Fake libcuda.so.1 (unversioned, like the real driver).  Kernels are
 * struct fake_kernel; launching one runs its host function.  Built with
 * -Bsymbolic so that cuGetProcAddress hands out the library's own functions,
 * as the real driver does.
 */
#include "nvapi.h"
#include "fake.h"

/*
 * Runs a kernel and logs its execution as an entry "exec": the handle, the
 * launch configuration, the stream and a hash of the parameter bytes (what
 * the kernel would see; the tests compare executions by it, since a launch
 * that was held back and issued later passes a copy of the parameters).
 */
static CUresult run(const void *handle, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, unsigned shmem, CUstream stream, void **params)
{
    struct fake_kernel *k = fake_kernel_lookup(handle);
    if (k == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned i = 0; i < k->nparams && params != NULL; i++)
        for (size_t b = 0; b < k->sizes[i]; b++)
            h = (h ^ ((const unsigned char *)params[i])[b]) * 0x100000001b3ull;
    uint64_t words[10] = {(uint64_t)(uintptr_t)handle, gx, gy, gz, bx, by, bz, shmem, (uint64_t)(uintptr_t)stream, h};
    fakelog_call("cuda", "exec", 10, words, 0);
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
    *dev = 0;
    return CUDA_SUCCESS;
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
    if (strcmp(fn, "cuLaunchKernel") == 0 || strcmp(fn, "cuLaunchKernel_ptsz") == 0)
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
