/*
 * libh3faketriton.so: launches the way Triton's launcher does, with
 * cuLaunchKernelEx looked up by dlsym on a libcuda.so.1 handle.
 */
#include <dlfcn.h>

#include "nvapi.h"
#include "fake.h"

static void triton_kernel_fn(void **params)
{
    (void)params;
}
static struct fake_kernel triton_kernel;

/* Entry point `name`, looked up by dlsym on a libcuda.so.1 handle (NULL if none). */
static void *triton_cuda(const char *name)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return h != NULL ? dlsym(h, name) : NULL;
}

static uint64_t triton_a = 1, triton_b = 2;
static void *triton_params[2] = {&triton_a, &triton_b};

/* Returns the function dlsym gave, through *found, and the launch result. */
FAKE_EXPORT int triton_launch(void **found)
{
    size_t sizes[2] = {8, 8};
    fake_kernel_init(&triton_kernel, "triton_poi_fused_add_0", 2, sizes, triton_kernel_fn);
    PFN_cuLaunchKernelEx_v11060 launch = (PFN_cuLaunchKernelEx_v11060)triton_cuda("cuLaunchKernelEx");
    *found = (void *)launch;
    if (launch == NULL)
        return -2;
    CUlaunchConfig cfg = {64, 1, 1, 128, 1, 1, 0, NULL, NULL, 0};
    return (int)launch(&cfg, (CUfunction)&triton_kernel, triton_params, NULL);
}

/* The same kernel through cuLaunchKernel (found the same way), as a
 * program that launches it both ways would. */
FAKE_EXPORT int triton_launch_plain(void)
{
    PFN_cuLaunchKernel_v4000 launch = (PFN_cuLaunchKernel_v4000)triton_cuda("cuLaunchKernel");
    if (launch == NULL)
        return -2;
    return (int)launch((CUfunction)&triton_kernel, 64, 1, 1, 128, 1, 1, 0, NULL, triton_params, NULL);
}
