/*
 * cuDNN variant packs, remembered as they are built.
 *
 * Owns: a small table from variant-pack descriptor to the unique ids, data
 * pointers and workspace last set on it with cudnnBackendSetAttribute.
 * cuDNN 9 answers CUDNN_STATUS_NOT_SUPPORTED when a variant pack's ids or
 * pointers are read back (seen on the H200, cuDNN 9.19), so this is the only
 * way to know what a cudnnBackendExecute reads and writes.
 * Invariants: entries are keyed by descriptor address and each attribute is
 * overwritten when set again (cuDNN's frontend sets all three, in an order of
 * its own, for every pack it builds, so a descriptor reallocated at the same
 * address never shows stale values).  A full table drops the oldest entry.
 */
#include "h3shim.h"

#include <pthread.h>
#include <string.h>

#define H3_PACKS 64

struct h3_pack {
    cudnnBackendDescriptor_t desc;
    uint64_t stamp;
    int64_t n_uids, n_ptrs;
    int64_t uids[H3_CUDNN_MAX_TENSORS];
    void *ptrs[H3_CUDNN_MAX_TENSORS];
    void *workspace;
};

static struct h3_pack h3_packs[H3_PACKS];
static uint64_t h3_pack_clock;
static pthread_mutex_t h3_pack_lock = PTHREAD_MUTEX_INITIALIZER;

/* The entry of `desc`, or a fresh one (the least recently used); locked. */
static struct h3_pack *h3_pack_slot(cudnnBackendDescriptor_t desc, bool create)
{
    struct h3_pack *oldest = &h3_packs[0];
    for (int i = 0; i < H3_PACKS; i++) {
        if (h3_packs[i].desc == desc)
            return &h3_packs[i];
        if (h3_packs[i].stamp < oldest->stamp)
            oldest = &h3_packs[i];
    }
    if (!create)
        return NULL;
    memset(oldest, 0, sizeof(*oldest));
    oldest->desc = desc;
    return oldest;
}

void h3_cudnn_note_set(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t attr,
                       cudnnBackendAttributeType_t type, int64_t count, const void *elements)
{
    bool ids = attr == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS && type == CUDNN_TYPE_INT64;
    bool ptrs = attr == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS && type == CUDNN_TYPE_VOID_PTR;
    bool ws = attr == CUDNN_ATTR_VARIANT_PACK_WORKSPACE && type == CUDNN_TYPE_VOID_PTR && count == 1;
    if ((!ids && !ptrs && !ws) || desc == NULL || elements == NULL || count < 0)
        return;
    int64_t n = count < (int64_t)H3_CUDNN_MAX_TENSORS ? count : (int64_t)H3_CUDNN_MAX_TENSORS;
    pthread_mutex_lock(&h3_pack_lock);
    struct h3_pack *p = h3_pack_slot(desc, true);
    if (ids) {
        memcpy(p->uids, elements, (size_t)n * sizeof(int64_t));
        p->n_uids = n;
    } else if (ptrs) {
        memcpy(p->ptrs, elements, (size_t)n * sizeof(void *));
        p->n_ptrs = n;
    } else {
        memcpy(&p->workspace, elements, sizeof(void *));
    }
    p->stamp = ++h3_pack_clock;
    pthread_mutex_unlock(&h3_pack_lock);
}

bool h3_cudnn_pack_get(cudnnBackendDescriptor_t pack, struct h3_cudnn_desc *d)
{
    pthread_mutex_lock(&h3_pack_lock);
    struct h3_pack *p = pack != NULL ? h3_pack_slot(pack, false) : NULL;
    if (p != NULL) {
        d->count = p->n_uids < p->n_ptrs ? p->n_uids : p->n_ptrs;
        memcpy(d->uids, p->uids, (size_t)d->count * sizeof(int64_t));
        memcpy(d->ptrs, p->ptrs, (size_t)d->count * sizeof(void *));
        d->workspace = p->workspace;
    }
    pthread_mutex_unlock(&h3_pack_lock);
    return p != NULL;
}
