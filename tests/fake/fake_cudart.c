/*
 * Fake libcudart.so.13.  Like the real runtime it does not link the driver:
 * it dlopens libcuda.so.1, finds cuGetProcAddress_v2 with dlsym on that
 * handle and gets cuLaunchKernel / cuLaunchKernelEx through it, then launches
 * every kernel through the driver.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "nvapi.h"
#include "fake.h"

static struct {
    const void *stub;
    struct fake_kernel *kernel;
} stubs_[256];
static int nstubs;
static pthread_mutex_t stubs_lock = PTHREAD_MUTEX_INITIALIZER;

FAKE_EXPORT void fake_cudart_register_stub(const void *stub, struct fake_kernel *k)
{
    pthread_mutex_lock(&stubs_lock);
    if (nstubs < 256)
        stubs_[nstubs++] = (__typeof__(stubs_[0])){stub, k};
    pthread_mutex_unlock(&stubs_lock);
}

static struct fake_kernel *kernel_of_stub(const void *stub)
{
    struct fake_kernel *k = NULL;
    pthread_mutex_lock(&stubs_lock);
    for (int i = 0; i < nstubs; i++)
        if (stubs_[i].stub == stub)
            k = stubs_[i].kernel;
    pthread_mutex_unlock(&stubs_lock);
    return k;
}

FAKE_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *f, const void *stub)
{
    struct fake_kernel *k = kernel_of_stub(stub);
    if (k == NULL)
        return cudaErrorInvalidDeviceFunction;
    *f = (cudaFunction_t)k;
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaGetDevice(int *dev)
{
    *dev = 0;
    return cudaSuccess;
}

struct driver {
    PFN_cuLaunchKernel_v4000 launch, launch_ptsz;
    PFN_cuLaunchKernelEx_v11060 launch_ex, launch_ex_ptsz;
};
static struct driver drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return;
    PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
    if (gpa == NULL)
        return;
    CUdriverProcAddressQueryResult st;
    gpa("cuLaunchKernel", (void **)&drv.launch, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    gpa("cuLaunchKernel", (void **)&drv.launch_ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    gpa("cuLaunchKernelEx", (void **)&drv.launch_ex, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    gpa("cuLaunchKernelEx", (void **)&drv.launch_ex_ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
}

static cudaError_t launch(const void *k, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s, int ptsz)
{
    pthread_once(&drv_once, drv_load);
    PFN_cuLaunchKernel_v4000 f = ptsz ? drv.launch_ptsz : drv.launch;
    if (f == NULL)
        return cudaErrorInitializationError;
    CUresult r = f((CUfunction)k, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shmem, (CUstream)s, args, NULL);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

static cudaError_t launch_exc(const cudaLaunchConfig_t *c, const void *func, void **args, int ptsz)
{
    pthread_once(&drv_once, drv_load);
    PFN_cuLaunchKernelEx_v11060 f = ptsz ? drv.launch_ex_ptsz : drv.launch_ex;
    struct fake_kernel *k = kernel_of_stub(func);
    if (f == NULL || c == NULL)
        return cudaErrorInitializationError;
    if (k == NULL)
        return cudaErrorInvalidDeviceFunction;
    CUlaunchConfig dc = {c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y,
                         c->blockDim.z, (unsigned)c->dynamicSmemBytes, (CUstream)c->stream, NULL, 0};
    return f(&dc, (CUfunction)k, args, NULL) == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

static long long fake_behave(const char *fn, void **argp)
{
    fake_capture_unsafe(fn);
    int ptsz = strstr(fn, "_ptsz") != NULL;
    if (strncmp(fn, "__cudaLaunchKernel", 18) == 0)
        return launch(*(cudaKernel_t *)argp[0], *(dim3 *)argp[1], *(dim3 *)argp[2], *(void ***)argp[3],
                      *(size_t *)argp[4], *(cudaStream_t *)argp[5], ptsz);
    if (strncmp(fn, "cudaLaunchKernelExC", 19) == 0)
        return launch_exc(*(const cudaLaunchConfig_t **)argp[0], *(const void **)argp[1], *(void ***)argp[2], ptsz);
    if (strncmp(fn, "cudaLaunchKernel", 16) == 0) {
        struct fake_kernel *k = kernel_of_stub(*(const void **)argp[0]);
        if (k == NULL)
            return cudaErrorInvalidDeviceFunction;
        return launch(k, *(dim3 *)argp[1], *(dim3 *)argp[2], *(void ***)argp[3], *(size_t *)argp[4],
                      *(cudaStream_t *)argp[5], ptsz);
    }
    if (strncmp(fn, "cudaStreamBeginCapture", 22) == 0) {
        fake_capture_begin((uintptr_t) * (cudaStream_t *)argp[0]);
        return cudaSuccess;
    }
    if (strncmp(fn, "cudaStreamEndCapture", 20) == 0) {
        uintptr_t graph;
        int ended = fake_capture_end((uintptr_t) * (cudaStream_t *)argp[0], &graph);
        if (ended)
            **(cudaGraph_t **)argp[1] = (cudaGraph_t)graph;
        /* (not capturing: success, as the tests of forwarding call it) */
        return ended == 2 ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
    }
    if (strncmp(fn, "cudaGraphInstantiate", 20) == 0) {
        **(cudaGraphExec_t **)argp[0] = (cudaGraphExec_t)fake_exec_new();
        return cudaSuccess;
    }
    return cudaSuccess; /* memcpy, memset, events, synchronisation, graphs: logged, nothing to do */
}

#define FAKE_LIB_CUDART
#include "stubs.h"
