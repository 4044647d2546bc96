/*
 * libh3fakector.so: makes a CUDA call from its constructor, before the
 * program's main code runs, as some libraries do at load time.
 */
#include "nvapi.h"
#include "fake.h"

static void ctor_kernel_fn(void **params)
{
    (void)params;
}
static struct fake_kernel ctor_kernel;
__attribute__((visibility("default"))) int h3t_ctor_result = -1;

__attribute__((constructor)) static void h3t_ctor(void)
{
    size_t sizes[1] = {8};
    fake_kernel_init(&ctor_kernel, "ctor_kernel", 1, sizes, ctor_kernel_fn);
    uint64_t a = 7;
    void *params[1] = {&a};
    dim3 g = {3, 1, 1}, b = {32, 1, 1};
    h3t_ctor_result = (int)__cudaLaunchKernel((cudaKernel_t)&ctor_kernel, g, b, params, 0, NULL);
}
