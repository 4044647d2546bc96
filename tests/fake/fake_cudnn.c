/*
 * Fake libcudnn.so.9: handles with a stream, backend descriptors (variant
 * packs with unique ids, data pointers and workspace, which like cuDNN 9's
 * cannot be read back), and
 * cudnnBackendExecute, which like cuDNN 9's dispatcher looks a function up
 * with dlsym on its own handle.  A dlsym interposer that turned that lookup
 * into a global one would hand back the interposer's wrapper; the fake then
 * fails with CUDNN_STATUS_INTERNAL_ERROR instead of recursing.
 */
#include <dlfcn.h>
#include <stdlib.h>

#include "nvapi.h"
#include "fake.h"

#define FAKE_CUDNN_MAGIC 0x646e6e68u
struct fake_cudnn_handle {
    uint32_t magic;
    cudaStream_t stream;
};

struct fake_pack {
    uint32_t magic;
    int64_t n;
    int64_t uids[16];
    void *ptrs[16];
    void *workspace;
};

FAKE_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    struct fake_cudnn_handle *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return CUDNN_STATUS_ALLOC_FAILED;
    f->magic = FAKE_CUDNN_MAGIC;
    *h = (cudnnHandle_t)f;
    return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    struct fake_cudnn_handle *f = (struct fake_cudnn_handle *)h;
    if (f == NULL || f->magic != FAKE_CUDNN_MAGIC)
        return CUDNN_STATUS_BAD_PARAM;
    f->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t *s)
{
    struct fake_cudnn_handle *f = (struct fake_cudnn_handle *)h;
    if (f == NULL || f->magic != FAKE_CUDNN_MAGIC)
        return CUDNN_STATUS_BAD_PARAM;
    *s = f->stream;
    return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d)
{
    if (type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return CUDNN_STATUS_NOT_SUPPORTED;
    struct fake_pack *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return CUDNN_STATUS_ALLOC_FAILED;
    p->magic = FAKE_CUDNN_MAGIC;
    *d = (cudnnBackendDescriptor_t)p;
    return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d)
{
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

/* Like cuDNN 9: a variant pack's attributes cannot be read back. */
FAKE_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t requested,
                                                   int64_t *count, void *buf)
{
    (void)d, (void)name, (void)type, (void)requested, (void)count, (void)buf;
    return CUDNN_STATUS_NOT_SUPPORTED;
}

static long long set_attribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                               cudnnBackendAttributeType_t type, int64_t count, const void *buf)
{
    struct fake_pack *p = (struct fake_pack *)d;
    if (p == NULL || p->magic != FAKE_CUDNN_MAGIC || count < 0 || count > 16 || buf == NULL)
        return CUDNN_STATUS_BAD_PARAM;
    if (name == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS && type == CUDNN_TYPE_INT64) {
        memcpy(p->uids, buf, (size_t)count * 8);
        p->n = count;
    } else if (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS && type == CUDNN_TYPE_VOID_PTR) {
        memcpy(p->ptrs, buf, (size_t)count * sizeof(void *));
    } else if (name == CUDNN_ATTR_VARIANT_PACK_WORKSPACE && type == CUDNN_TYPE_VOID_PTR && count == 1) {
        memcpy(&p->workspace, buf, sizeof(void *));
    } else {
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    return CUDNN_STATUS_SUCCESS;
}

/* This library's own definition of cudnnBackendExecute (not the global one). */
extern __typeof__(cudnnBackendExecute) fake_cudnn_execute_self
    __attribute__((alias("cudnnBackendExecute"), visibility("hidden")));

static long long fake_behave(const char *fn, void **argp)
{
    if (strcmp(fn, "cudnnBackendSetAttribute") == 0)
        return set_attribute(*(cudnnBackendDescriptor_t *)argp[0], *(cudnnBackendAttributeName_t *)argp[1],
                             *(cudnnBackendAttributeType_t *)argp[2], *(int64_t *)argp[3], *(const void **)argp[4]);
    if (strcmp(fn, "cudnnBackendExecute") != 0)
        return CUDNN_STATUS_NOT_SUPPORTED;
    void *self = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    void *found = self != NULL ? dlsym(self, "cudnnBackendExecute") : NULL;
    if (self != NULL)
        dlclose(self);
    return found == (void *)&fake_cudnn_execute_self ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR;
}

#define FAKE_LIB_CUDNN
#include "stubs.h"
