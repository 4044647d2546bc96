/*
 * Fake libc10.so: c10::reportMemoryUsageToProfiler, which PyTorch's CUDA
 * caching allocator (libc10_cuda.so) calls for every block it hands out
 * (size > 0) and takes back (size < 0).  Logs "reportMemoryUsageToProfiler
 * PTR SIZE ALLOCATED RESERVED DEVICE" (DEVICE: type | index << 8), so a test
 * sees that the shim's definition passes every report on unchanged.  The
 * fake framework calls it as libc10_cuda.so does (replay lines "F PTR BYTES").
 */
#include "fake.h"

struct fake_c10_device {
    int8_t type, index;
};

FAKE_EXPORT void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t size, size_t allocated,
                                                                       size_t reserved, struct fake_c10_device d);

FAKE_EXPORT void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t size, size_t allocated,
                                                                       size_t reserved, struct fake_c10_device d)
{
    uint64_t w[5] = {(uint64_t)(uintptr_t)ptr, (uint64_t)size, allocated, reserved,
                     (uint64_t)(uint8_t)d.type | (uint64_t)(uint8_t)d.index << 8};
    fakelog_call("c10", "reportMemoryUsageToProfiler", 5, w, 0);
}
