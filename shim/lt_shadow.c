/*
 * cuBLASLt descriptors and layouts, remembered as they are built, so that a
 * GEMM the matcher compares costs no attribute reads (H3SHIM_LT_SHADOW).
 *
 * Owns: a table from descriptor or layout handle to the attributes the
 * matcher compares (h3_lt_desc's), each as a read of it would return it;
 * the defaults of a fresh handle, learnt from the first one of each kind
 * by reading it; a memo of algorithms' configs, keyed by their 64 bytes.
 * Why: PyTorch creates and destroys the descriptor and its layouts around
 * every GEMM, so a GEMM in a block took about 44 cuBLASLt attribute reads
 * (most of the shim's own time on it); watching the handful of Create and
 * SetAttribute calls that built them costs less.
 * Invariants:
 *   - A handle is remembered from its interposed Create on, only while a
 *     thread's matcher expects a GEMM (the block's; another model's GEMMs
 *     are never remembered) and only if the code creating it never looked
 *     the descriptor functions up with dlsym (calls through such pointers
 *     bypass the wrappers; cuDNN's engines do so for their own); it
 *     is forgotten at its Destroy or Init; every SetAttribute on a
 *     remembered handle updates it, or forgets it when the value is not one
 *     the shim can mirror.
 *   - A GEMM whose descriptor or any layout is not remembered is read in
 *     full, as before; H3SHIM_LT_SHADOW=2 reads every GEMM anyway and
 *     warns at the first difference (and uses the reads).  The bias
 *     pointer is read always: the other attributes only decide whether a
 *     GEMM is the block's (the GEMM runs with its real descriptor on the
 *     same bytes either way), but weight_cache points the bias at a copy
 *     of what the description says.
 *   - An algorithm's config is a function of its bytes (NVIDIA documents
 *     the struct as trivially serialisable), so the memo is never stale.
 * Never: describes a GEMM from a handle it did not see created, or keeps a
 * handle it saw destroyed.
 */
#include "h3shim.h"

#include <link.h>
#include <pthread.h>
#include <string.h>

/* The attributes mirrored, in the order h3_lt_desc and h3_lt_layout keep them. */
enum { H3_LT_DESC_KEYS = 7, H3_LT_LAYOUT_KEYS = 7, H3_LT_KEYS = 7 };
static const int h3_lt_desc_attr[H3_LT_DESC_KEYS] = {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, CUBLASLT_MATMUL_DESC_SCALE_TYPE,     CUBLASLT_MATMUL_DESC_TRANSA,
    CUBLASLT_MATMUL_DESC_TRANSB,       CUBLASLT_MATMUL_DESC_EPILOGUE,       CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER};
static const size_t h3_lt_desc_size[H3_LT_DESC_KEYS] = {4, 4, 4, 4, 4, 4, sizeof(void *)};
static const int h3_lt_layout_attr[H3_LT_LAYOUT_KEYS] = {
    CUBLASLT_MATRIX_LAYOUT_TYPE, CUBLASLT_MATRIX_LAYOUT_ORDER,       CUBLASLT_MATRIX_LAYOUT_ROWS,
    CUBLASLT_MATRIX_LAYOUT_COLS, CUBLASLT_MATRIX_LAYOUT_LD,          CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET};
static const size_t h3_lt_layout_size[H3_LT_LAYOUT_KEYS] = {4, 4, 8, 8, 8, 4, 8};

/* ---- the table ---- */

#define H3_LT_SLOTS 256 /* a power of two; live handles are a few per GEMM in flight */

enum h3_lt_kind { H3_LT_FREE, H3_LT_DESC, H3_LT_LAYOUT };

struct h3_lt_entry {
    const void *handle;
    enum h3_lt_kind kind;
    int64_t v[H3_LT_KEYS];
};

/* A fresh handle's attributes, for each create argument seen: learnt from
 * the first such handle, by reading it before anything is set on it (the
 * attributes given as arguments are then taken from each create's). */
#define H3_LT_FRESH 8
struct h3_lt_fresh {
    enum h3_lt_kind kind;
    int64_t key[2]; /* desc: compute and scale type; layout: data type */
    int64_t v[H3_LT_KEYS];
};

#define H3_LT_ALGOS 16
struct h3_lt_algo_memo {
    bool used;
    cublasLtMatmulAlgo_t algo;
    int32_t v[9];
};

static struct {
    pthread_mutex_t lock;
    unsigned live;
    struct h3_lt_entry e[H3_LT_SLOTS];
    struct h3_lt_fresh fresh[H3_LT_FRESH];
    unsigned nfresh;
    struct h3_lt_algo_memo algos[H3_LT_ALGOS];
    atomic_ulong remembered, served, read_in_full, mismatches;
} h3_lt = {.lock = PTHREAD_MUTEX_INITIALIZER};

static unsigned h3_lt_home(const void *handle)
{
    return (unsigned)(((uint64_t)(uintptr_t)handle * 0x9e3779b97f4a7c15ull) >> 56) & (H3_LT_SLOTS - 1);
}

/* The slot of `handle`, or -1; locked. */
static int h3_lt_find(const void *handle)
{
    for (unsigned i = 0, s = h3_lt_home(handle); i < H3_LT_SLOTS; i++, s = (s + 1) & (H3_LT_SLOTS - 1)) {
        if (h3_lt.e[s].kind == H3_LT_FREE)
            return -1;
        if (h3_lt.e[s].handle == handle)
            return (int)s;
    }
    return -1;
}

/* Forgets slot `s`, moving later entries of its run back (linear probing
 * without tombstones); locked. */
static void h3_lt_erase(unsigned s)
{
    h3_lt.e[s].kind = H3_LT_FREE;
    h3_lt.live--;
    for (unsigned j = (s + 1) & (H3_LT_SLOTS - 1); h3_lt.e[j].kind != H3_LT_FREE; j = (j + 1) & (H3_LT_SLOTS - 1)) {
        unsigned home = h3_lt_home(h3_lt.e[j].handle);
        /* Entry j may move to the hole at s unless its home lies in (s, j]. */
        bool stays = s <= j ? (home > s && home <= j) : (home > s || home <= j);
        if (stays)
            continue;
        h3_lt.e[s] = h3_lt.e[j];
        h3_lt.e[j].kind = H3_LT_FREE;
        s = j;
    }
    atomic_store_explicit(&h3_hot.lt_live, h3_lt.live, memory_order_relaxed);
}

/* Remembers `handle` with attributes `v` (replacing what was kept for it);
 * locked.  A table three quarters full remembers nothing more. */
static void h3_lt_put(const void *handle, enum h3_lt_kind kind, const int64_t *v)
{
    int found = h3_lt_find(handle);
    if (found < 0 && h3_lt.live >= H3_LT_SLOTS * 3 / 4)
        return;
    unsigned s = h3_lt_home(handle);
    if (found >= 0) {
        s = (unsigned)found;
    } else {
        while (h3_lt.e[s].kind != H3_LT_FREE)
            s = (s + 1) & (H3_LT_SLOTS - 1);
        h3_lt.live++;
        atomic_store_explicit(&h3_hot.lt_live, h3_lt.live, memory_order_relaxed);
    }
    h3_lt.e[s].handle = handle;
    h3_lt.e[s].kind = kind;
    memcpy(h3_lt.e[s].v, v, sizeof(h3_lt.e[s].v));
    if (h3_hot.stats)
        atomic_fetch_add_explicit(&h3_lt.remembered, 1, memory_order_relaxed);
}

/* The objects (their loaded address ranges) that looked a descriptor
 * function up with dlsym: what they create is never remembered.  Added to,
 * never removed (an object unloaded and another loaded there is only
 * remembered less). */
#define H3_LT_BYPASSERS 8
static struct {
    _Atomic uintptr_t lo, hi;
} h3_lt_bypass[H3_LT_BYPASSERS];
static atomic_uint h3_lt_nbypass;
static atomic_bool h3_lt_bypass_all; /* a lookup whose object could not be told, or too many */

struct h3_lt_find_object {
    uintptr_t at, lo, hi;
    const char *name;
};

static int h3_lt_object_of(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct h3_lt_find_object *f = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + info->dlpi_phdr[i].p_memsz > hi ? a + info->dlpi_phdr[i].p_memsz : hi;
    }
    if (f->at < lo || f->at >= hi)
        return 0;
    f->lo = lo, f->hi = hi, f->name = info->dlpi_name;
    return 1;
}

H3_NO_SANITIZE void h3_lt_note_lookup(const char *name, const void *caller)
{
    if (strncmp(name, "cublasLtMatmulDesc", 18) != 0 && strncmp(name, "cublasLtMatrixLayout", 20) != 0)
        return;
    struct h3_lt_find_object f = {.at = (uintptr_t)caller};
    if (caller == NULL || dl_iterate_phdr(h3_lt_object_of, &f) == 0) {
        if (!atomic_exchange(&h3_lt_bypass_all, true))
            H3_INFO(H3_SUB_HOOK, "dlsym(libcublasLt, %s) from unknown code: every GEMM's attributes are read from "
                                 "now on", name);
        return;
    }
    unsigned n = atomic_load(&h3_lt_nbypass);
    for (unsigned i = 0; i < n && i < H3_LT_BYPASSERS; i++)
        if (atomic_load(&h3_lt_bypass[i].lo) == f.lo)
            return;
    unsigned i = atomic_fetch_add(&h3_lt_nbypass, 1);
    if (i >= H3_LT_BYPASSERS) {
        atomic_store(&h3_lt_bypass_all, true);
        return;
    }
    atomic_store(&h3_lt_bypass[i].hi, f.hi);
    atomic_store(&h3_lt_bypass[i].lo, f.lo);
    H3_INFO(H3_SUB_HOOK, "dlsym(libcublasLt, %s) from %s: the descriptors it makes are read, not remembered", name,
            f.name != NULL && f.name[0] != '\0' ? f.name : "the main program");
}

/* Whether code at `caller` may make calls past the wrappers. */
static bool h3_lt_bypassing(const void *caller)
{
    if (atomic_load_explicit(&h3_lt_bypass_all, memory_order_relaxed))
        return true;
    unsigned n = atomic_load_explicit(&h3_lt_nbypass, memory_order_acquire);
    for (unsigned i = 0; i < n && i < H3_LT_BYPASSERS; i++) {
        uintptr_t lo = atomic_load_explicit(&h3_lt_bypass[i].lo, memory_order_relaxed);
        if (lo != 0 && (uintptr_t)caller >= lo && (uintptr_t)caller < atomic_load(&h3_lt_bypass[i].hi))
            return true;
    }
    return false;
}

/* Whether handles made by `caller` are remembered now: the shadow is on,
 * observation is not paused (h3shim_pause: the GEMM is not observed; one
 * made after the pause reads what it was not told), the caller never looked
 * the functions up itself, and this thread's next GEMM is wanted in full (on
 * any stream: the stream is not known yet): a signature expects one, or the
 * learner would keep it. */
bool h3_lt_create_wanted(const void *caller)
{
    return h3_hot.lt_remember && !atomic_load_explicit(&h3_hot.paused, memory_order_relaxed) &&
           h3_thread_wants_gemm() && !h3_lt_bypassing(caller);
}

/* A fresh handle's attributes for create arguments `key`, if learnt; locked. */
static bool h3_lt_fresh_known(enum h3_lt_kind kind, const int64_t key[2], int64_t *v)
{
    for (unsigned i = 0; i < h3_lt.nfresh; i++)
        if (h3_lt.fresh[i].kind == kind && h3_lt.fresh[i].key[0] == key[0] && h3_lt.fresh[i].key[1] == key[1]) {
            memcpy(v, h3_lt.fresh[i].v, sizeof(h3_lt.fresh[i].v));
            return true;
        }
    return false;
}

/* Learns a fresh handle's attributes from `handle`, made just now with
 * arguments `key` (nothing is set on it yet); false when unreadable. */
static bool h3_lt_fresh_learn(enum h3_lt_kind kind, const void *handle, const int64_t key[2], int64_t *v)
{
    void *g = kind == H3_LT_DESC ? (void *)H3_LIB_FN(CUBLASLT, cublasLtMatmulDescGetAttribute)
                                 : (void *)H3_LIB_FN(CUBLASLT, cublasLtMatrixLayoutGetAttribute);
    if (g == NULL)
        return false;
    for (unsigned k = 0; k < H3_LT_KEYS; k++)
        v[k] = kind == H3_LT_DESC ? h3_lt_int(g, handle, h3_lt_desc_attr[k], h3_lt_desc_size[k])
                                  : h3_lt_int(g, handle, h3_lt_layout_attr[k], h3_lt_layout_size[k]);
    pthread_mutex_lock(&h3_lt.lock);
    if (h3_lt.nfresh < H3_LT_FRESH && !h3_lt_fresh_known(kind, key, (int64_t[H3_LT_KEYS]){0})) {
        struct h3_lt_fresh *f = &h3_lt.fresh[h3_lt.nfresh++];
        f->kind = kind, f->key[0] = key[0], f->key[1] = key[1];
        memcpy(f->v, v, sizeof(f->v));
    }
    pthread_mutex_unlock(&h3_lt.lock);
    return true;
}

/* A handle was created with arguments `args` (what a read of the first
 * `nargs` attributes returns); the rest are a fresh handle's.  One lock
 * once the fresh handle is known. */
static void h3_lt_created(enum h3_lt_kind kind, const void *handle, const int64_t key[2], const int *arg_keys,
                          const int64_t *args, unsigned nargs)
{
    if (handle == NULL)
        return;
    int64_t v[H3_LT_KEYS];
    pthread_mutex_lock(&h3_lt.lock);
    bool known = h3_lt_fresh_known(kind, key, v);
    if (!known) {
        pthread_mutex_unlock(&h3_lt.lock);
        if (!h3_lt_fresh_learn(kind, handle, key, v))
            return;
        pthread_mutex_lock(&h3_lt.lock);
    }
    for (unsigned i = 0; i < nargs; i++)
        v[arg_keys[i]] = args[i];
    h3_lt_put(handle, kind, v);
    pthread_mutex_unlock(&h3_lt.lock);
}

void h3_lt_note_desc_create(const cublasLtMatmulDesc_t *desc, int compute, int scale, const void *caller)
{
    static const int keys[2] = {0, 1}; /* compute and scale type */
    if (desc != NULL && h3_lt_create_wanted(caller))
        h3_lt_created(H3_LT_DESC, *desc, (const int64_t[2]){compute, scale}, keys,
                      (const int64_t[2]){(int32_t)compute, (int32_t)scale}, 2);
}

void h3_lt_note_layout_create(const cublasLtMatrixLayout_t *layout, int type, uint64_t rows, uint64_t cols,
                              int64_t ld, const void *caller)
{
    static const int keys[4] = {0, 2, 3, 4}; /* type, rows, cols, ld */
    if (layout != NULL && h3_lt_create_wanted(caller))
        h3_lt_created(H3_LT_LAYOUT, *layout, (const int64_t[2]){type, 0}, keys,
                      (const int64_t[4]){(int32_t)type, (int64_t)rows, (int64_t)cols, ld}, 4);
}

/* SetAttribute succeeded on `handle`: the mirrored value, if it is one;
 * any other size of a mirrored attribute forgets the handle. */
static void h3_lt_set(enum h3_lt_kind kind, const void *handle, int attr, const void *buf, size_t size)
{
    if (atomic_load_explicit(&h3_hot.lt_live, memory_order_relaxed) == 0)
        return;
    const int *attrs = kind == H3_LT_DESC ? h3_lt_desc_attr : h3_lt_layout_attr;
    const size_t *sizes = kind == H3_LT_DESC ? h3_lt_desc_size : h3_lt_layout_size;
    pthread_mutex_lock(&h3_lt.lock);
    int s = h3_lt_find(handle);
    if (s >= 0 && h3_lt.e[s].kind != kind) {
        h3_lt_erase((unsigned)s);
    } else if (s >= 0) {
        for (unsigned k = 0; k < H3_LT_KEYS; k++) {
            if (attrs[k] != attr)
                continue;
            if (buf != NULL && size == sizes[k])
                h3_lt.e[s].v[k] = h3_lt_widen(buf, size);
            else
                h3_lt_erase((unsigned)s);
            break;
        }
    }
    pthread_mutex_unlock(&h3_lt.lock);
}

void h3_lt_note_desc_set(cublasLtMatmulDesc_t desc, int attr, const void *buf, size_t size)
{
    h3_lt_set(H3_LT_DESC, desc, attr, buf, size);
}

void h3_lt_note_layout_set(cublasLtMatrixLayout_t layout, int attr, const void *buf, size_t size)
{
    h3_lt_set(H3_LT_LAYOUT, layout, attr, buf, size);
}

void h3_lt_note_gone(const void *handle)
{
    if (atomic_load_explicit(&h3_hot.lt_live, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&h3_lt.lock);
    int s = h3_lt_find(handle);
    if (s >= 0)
        h3_lt_erase((unsigned)s);
    pthread_mutex_unlock(&h3_lt.lock);
}

/* ---- a GEMM's description ---- */

static void h3_lt_desc_from(struct h3_lt_desc *lt, const int64_t *v)
{
    lt->compute = (int32_t)v[0];
    lt->scale = (int32_t)v[1];
    lt->transa = (int32_t)v[2];
    lt->transb = (int32_t)v[3];
    lt->epilogue = (int32_t)v[4];
    lt->bias_type = (int32_t)v[5];
    lt->bias = h3_lt_pointer(v[6]);
}

static void h3_lt_layout_from(struct h3_lt_layout *l, const int64_t *v)
{
    l->type = (int32_t)v[0];
    l->order = (int32_t)v[1];
    l->rows = (uint64_t)v[2];
    l->cols = (uint64_t)v[3];
    l->ld = v[4];
    l->batch = v[5];
    l->stride = v[6];
}

/* The descriptor's and layouts' attributes from the table; false (nothing
 * filled that matters) when one of them is not remembered. */
static bool h3_lt_fill_remembered(struct h3_lt_desc *lt)
{
    if (atomic_load_explicit(&h3_hot.lt_live, memory_order_relaxed) == 0)
        return false;
    const void *handles[5] = {lt->desc, lt->Adesc, lt->Bdesc, lt->Cdesc, lt->Ddesc};
    struct h3_lt_layout *layouts[4] = {&lt->a, &lt->b, &lt->c, &lt->d};
    bool all = true;
    pthread_mutex_lock(&h3_lt.lock);
    for (unsigned i = 0; i < 5 && all; i++) {
        int s = handles[i] != NULL ? h3_lt_find(handles[i]) : -1;
        all = s >= 0 && h3_lt.e[s].kind == (i == 0 ? H3_LT_DESC : H3_LT_LAYOUT);
        if (all && i == 0)
            h3_lt_desc_from(lt, h3_lt.e[s].v);
        else if (all)
            h3_lt_layout_from(layouts[i - 1], h3_lt.e[s].v);
    }
    pthread_mutex_unlock(&h3_lt.lock);
    return all;
}

static void h3_lt_read_layout(struct h3_lt_layout *l, cublasLtMatrixLayout_t desc)
{
    void *g = (void *)H3_LIB_FN(CUBLASLT, cublasLtMatrixLayoutGetAttribute);
    int64_t v[H3_LT_KEYS];
    for (unsigned k = 0; k < H3_LT_KEYS; k++)
        v[k] = h3_lt_int(g, desc, h3_lt_layout_attr[k], h3_lt_layout_size[k]);
    h3_lt_layout_from(l, v);
}

/* Every attribute, read from cuBLASLt. */
static void h3_lt_read_all(struct h3_lt_desc *lt)
{
    void *g = (void *)H3_LIB_FN(CUBLASLT, cublasLtMatmulDescGetAttribute);
    int64_t v[H3_LT_KEYS];
    for (unsigned k = 0; k < H3_LT_KEYS; k++)
        v[k] = h3_lt_int(g, lt->desc, h3_lt_desc_attr[k], h3_lt_desc_size[k]);
    h3_lt_desc_from(lt, v);
    h3_lt_read_layout(&lt->a, lt->Adesc);
    h3_lt_read_layout(&lt->b, lt->Bdesc);
    h3_lt_read_layout(&lt->c, lt->Cdesc);
    h3_lt_read_layout(&lt->d, lt->Ddesc);
}

/* H3SHIM_LT_SHADOW=2 found `what` to differ from its reads: counted, said once. */
static void h3_lt_differs(const char *what)
{
    if (atomic_fetch_add_explicit(&h3_lt.mismatches, 1, memory_order_relaxed) == 0)
        H3_WARN(H3_SUB_HOOK, "H3SHIM_LT_SHADOW=2: %s differs from its attributes read back (the reads are used); "
                             "set H3SHIM_LT_SHADOW=0 and report it", what);
}

/* The algorithm's nine config values, from the memo or read (and kept). */
static void h3_lt_algo(struct h3_lt_desc *lt, const cublasLtMatmulAlgo_t *algo)
{
    static const int attrs[9] = {CUBLASLT_ALGO_CONFIG_ID,           CUBLASLT_ALGO_CONFIG_TILE_ID,
                                 CUBLASLT_ALGO_CONFIG_STAGES_ID,    CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                 CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                 CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
                                 CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
    static const size_t sizes[9] = {4, 4, 4, 4, 4, 4, 4, 2, 2};
    int32_t *out[9] = {&lt->algo_id, &lt->tile,   &lt->stages, &lt->splitk, &lt->reduction,
                       &lt->swizzle, &lt->custom, &lt->inner,  &lt->cluster};
    lt->have_algo = true;
    unsigned slot = (unsigned)(h3_hash(H3_HASH_SEED, algo, sizeof(*algo)) % H3_LT_ALGOS);
    bool memo = h3_config.lt_shadow != 0, hit = false;
    int32_t kept[9];
    if (memo) {
        pthread_mutex_lock(&h3_lt.lock);
        struct h3_lt_algo_memo *m = &h3_lt.algos[slot];
        hit = m->used && memcmp(&m->algo, algo, sizeof(*algo)) == 0;
        memcpy(kept, m->v, sizeof(kept));
        pthread_mutex_unlock(&h3_lt.lock);
        for (unsigned k = 0; hit && k < 9; k++)
            *out[k] = kept[k];
        if (hit && h3_config.lt_shadow != 2)
            return;
    }
    void *ga = (void *)H3_LIB_FN(CUBLASLT, cublasLtMatmulAlgoConfigGetAttribute);
    int32_t v[9];
    for (unsigned k = 0; k < 9; k++)
        v[k] = (int32_t)h3_lt_int(ga, algo, attrs[k], sizes[k]);
    for (unsigned k = 0; k < 9; k++)
        *out[k] = v[k];
    if (hit && memcmp(kept, v, sizeof(v)) != 0)
        h3_lt_differs("an algorithm's kept config");
    if (memo) {
        pthread_mutex_lock(&h3_lt.lock);
        struct h3_lt_algo_memo *m = &h3_lt.algos[slot];
        m->used = true, m->algo = *algo;
        memcpy(m->v, v, sizeof(v));
        pthread_mutex_unlock(&h3_lt.lock);
    }
}

void h3_lt_describe(struct h3_lt_desc *lt, const cublasLtMatmulAlgo_t *algo)
{
    struct h3_lt_desc seen;
    bool remembered = h3_config.lt_shadow != 0 && h3_lt_fill_remembered(lt);
    if (remembered && h3_config.lt_shadow == 2) {
        seen = *lt;
        h3_lt_read_all(lt);
        if (memcmp(&seen.compute, &lt->compute, offsetof(struct h3_lt_desc, bias) - offsetof(struct h3_lt_desc, compute)) != 0 ||
            seen.bias != lt->bias || memcmp(&seen.a, &lt->a, 4 * sizeof(lt->a)) != 0)
            h3_lt_differs("a GEMM's remembered descriptor");
    } else if (!remembered) {
        h3_lt_read_all(lt);
    } else {
        /* The one pointer among them is always read: weight_cache points
         * the bias at its copy of what this says, so even a descriptor
         * changed past the wrappers cannot make a GEMM add another bias. */
        lt->bias = h3_lt_pointer(h3_lt_int((void *)H3_LIB_FN(CUBLASLT, cublasLtMatmulDescGetAttribute), lt->desc,
                                           CUBLASLT_MATMUL_DESC_BIAS_POINTER, sizeof(void *)));
    }
    if (h3_hot.stats)
        atomic_fetch_add_explicit(remembered ? &h3_lt.served : &h3_lt.read_in_full, 1, memory_order_relaxed);
    if (algo != NULL)
        h3_lt_algo(lt, algo);
}

void h3_lt_print_stats(void (*line)(const char *fmt, ...))
{
    line("lt_shadow: %lu GEMMs described from remembered descriptors, %lu read in full, %lu handles remembered "
         "(%u still), %lu differences (H3SHIM_LT_SHADOW=%ld)",
         atomic_load(&h3_lt.served), atomic_load(&h3_lt.read_in_full), atomic_load(&h3_lt.remembered),
         atomic_load(&h3_hot.lt_live), atomic_load(&h3_lt.mismatches), h3_config.lt_shadow);
}

void h3_lt_after_fork_child(void)
{
    pthread_mutex_init(&h3_lt.lock, NULL);
}
