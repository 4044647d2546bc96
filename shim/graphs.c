/*
 * Which CUDA graphs were captured under the shim, and what each holds that
 * weight_cache acts on at its launch (H3SHIM_WEIGHT_CACHE_GRAPHS=1).
 *
 * Owns: the count of captures open (whatever the graph mode), the records
 * of captures in progress, of the graphs they made and of the executable
 * graphs instantiated from those.
 * Invariants:
 *   - A graph is known only when its capture began under the shim's eyes
 *     (cudaStreamBeginCapture, not into an existing graph), so that every
 *     call of it was observed; an executable graph only when instantiated
 *     from a known graph and never updated or given new node parameters
 *     since (those calls forget it).  A node changed anywhere forgets every
 *     graph not yet instantiated (the node's graph is not asked for).
 *   - One lock for all tables and records; records are shared, counted.
 * Never: makes a graph known that it did not see captured from the start.
 */
#include "h3shim.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>


struct h3_capture {
    uint64_t id;          /* the driver's capture sequence id; 0 until asked */
    const void *origin;   /* the stream cudaStreamBeginCapture was given */
    bool into_graph;      /* begun into an existing graph: never known */
    struct h3_grec *rec;  /* NULL until a call of the capture is recorded */
};

struct h3_graph_ref {
    const void *handle; /* CUgraph or CUgraphExec */
    struct h3_grec *rec;
};

#define H3_GRAPHS_MAX 1024

static struct {
    pthread_mutex_t lock;
    struct h3_capture captures[64];
    unsigned ncaptures;
    struct h3_graph_ref graphs[H3_GRAPHS_MAX], execs[H3_GRAPHS_MAX];
    unsigned ngraphs, nexecs;
} h3_g = {.lock = PTHREAD_MUTEX_INITIALIZER};

/*
 * Captures open in the process, whatever the graph mode: every begin of a
 * capture through an interposed entry point counts before it is forwarded
 * (and is taken back if it fails); an end counts down once its stream has
 * left capture.  So the count is never below the captures really open, as
 * long as every begin is seen, and h3_stream_capturing need not ask the
 * driver (a few microseconds on the legacy stream) while it is zero.  An
 * end on a capturing stream while the count is zero means a begin was not
 * seen: the count is not trusted again.
 */
static atomic_int h3_captures_open;
/* The shim's own calls that a capture in global mode forbids, in flight:
 * a capture's begin waits for them (h3_captures_before), and they begin
 * only while no capture is open, so none runs while one is. */
static atomic_int h3_unsafe_inflight;
static atomic_bool h3_captures_unsure;

enum { H3_EDGE_BEGIN = 1, H3_EDGE_END_OPEN, H3_EDGE_END_CLOSED };

enum h3_capture_edge h3_capture_edge_of(enum h3_fn fn)
{
    unsigned p = h3_hooks[fn].props;
    return (p & H3_P_CAPTURE_BEGIN) ? H3_CAPTURE_BEGIN
           : (p & H3_P_CAPTURE_INTO_GRAPH) ? H3_CAPTURE_BEGIN_INTO_GRAPH
           : (p & H3_P_CAPTURE_END) ? H3_CAPTURE_END
                                     : H3_CAPTURE_NONE;
}

bool h3_is_graph_launch(enum h3_fn fn)
{
    return (h3_hooks[fn].props & H3_P_GRAPH_LAUNCH) != 0;
}

/* The driver's answer: is `stream` being captured (unknown counts as yes)? */
static bool h3_driver_says_capturing(const void *stream)
{
    __typeof__(&cuStreamIsCapturing) is_capturing = H3_LIB_FN(CUDA, cuStreamIsCapturing);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (is_capturing == NULL || is_capturing((CUstream)(uintptr_t)stream, &status) != CUDA_SUCCESS)
        return true;
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void h3_captures_before(struct h3_call *c)
{
    enum h3_capture_edge edge = h3_capture_edge_of(c->fn);
    if (edge == H3_CAPTURE_BEGIN || edge == H3_CAPTURE_BEGIN_INTO_GRAPH) {
        atomic_fetch_add_explicit(&h3_captures_open, 1, memory_order_seq_cst);
        c->capture_edge = H3_EDGE_BEGIN;
        /* An allocation or module load of the shim's, begun on another
         * thread before this capture was counted, ends before it begins. */
        while (atomic_load_explicit(&h3_unsafe_inflight, memory_order_seq_cst) != 0)
            sched_yield();
    } else if (edge == H3_CAPTURE_END) {
        bool open = h3_driver_says_capturing(c->stream);
        c->capture_edge = open ? H3_EDGE_END_OPEN : H3_EDGE_END_CLOSED;
        if (open && atomic_load_explicit(&h3_captures_open, memory_order_seq_cst) <= 0 &&
            !atomic_exchange(&h3_captures_unsure, true))
            H3_WARN(H3_SUB_ENGINE, "a CUDA graph capture ended whose beginning the shim did not see: from now "
                                   "on it asks the driver whether each stream is being captured");
    }
}

void h3_captures_after(const struct h3_call *c)
{
    bool closed = (c->capture_edge == H3_EDGE_BEGIN && c->result != 0) ||
                  (c->capture_edge == H3_EDGE_END_OPEN && !h3_driver_says_capturing(c->stream));
    if (closed && atomic_fetch_sub_explicit(&h3_captures_open, 1, memory_order_seq_cst) <= 0) {
        atomic_fetch_add_explicit(&h3_captures_open, 1, memory_order_seq_cst);
        atomic_store(&h3_captures_unsure, true);
    }
}

bool h3_unsafe_begin(void)
{
    atomic_fetch_add_explicit(&h3_unsafe_inflight, 1, memory_order_seq_cst);
    if (h3_captures_none())
        return true;
    atomic_fetch_sub_explicit(&h3_unsafe_inflight, 1, memory_order_seq_cst);
    return false;
}

void h3_unsafe_end(void)
{
    atomic_fetch_sub_explicit(&h3_unsafe_inflight, 1, memory_order_seq_cst);
}

bool h3_captures_none(void)
{
    return h3_config.interpose_driver && !atomic_load_explicit(&h3_captures_unsure, memory_order_relaxed) &&
           atomic_load_explicit(&h3_captures_open, memory_order_seq_cst) == 0;
}

bool h3_stream_capturing(const void *stream)
{
    return !h3_captures_none() && h3_driver_says_capturing(stream);
}

static struct h3_grec *h3_grec_new(void)
{
    struct h3_grec *r = calloc(1, sizeof(*r));
    if (r != NULL)
        r->refs = 1;
    return r;
}

static void h3_grec_put(struct h3_grec *r)
{
    if (r == NULL || --r->refs > 0)
        return;
    free(r->reads);
    free(r->words);
    free(r->ranges);
    free(r);
}

/* Room for one more element of an array of `size`-byte elements; false (and
 * the record made `all`, which needs no list) when there is no memory. */
static bool h3_grec_grow(struct h3_grec *r, void **array, uint32_t n, uint32_t *cap, size_t size)
{
    if (n < *cap)
        return true;
    uint32_t want = *cap == 0 ? 64 : 2 * *cap;
    void *p = realloc(*array, (size_t)want * size);
    if (p == NULL) {
        r->all = true;
        return false;
    }
    *array = p;
    *cap = want;
    return true;
}

void h3_grec_read(struct h3_grec *r, uint32_t entry)
{
    for (uint32_t i = 0; i < r->nreads; i++)
        if (r->reads[i] == entry)
            return;
    if (h3_grec_grow(r, (void **)&r->reads, r->nreads, &r->capreads, sizeof(*r->reads)))
        r->reads[r->nreads++] = entry;
    else
        r->nreads = UINT32_MAX; /* unknown reads: see h3_wcache_graph_launch */
}

void h3_grec_word(struct h3_grec *r, uint64_t word)
{
    if (!r->all && h3_grec_grow(r, (void **)&r->words, r->nwords, &r->capwords, sizeof(*r->words)))
        r->words[r->nwords++] = word;
}

void h3_grec_range(struct h3_grec *r, uint64_t lo, uint64_t hi)
{
    if (!r->all && h3_grec_grow(r, (void **)&r->ranges, r->nranges, &r->capranges, sizeof(*r->ranges))) {
        r->ranges[r->nranges][0] = lo;
        r->ranges[r->nranges][1] = hi;
        r->nranges++;
    }
}

static void h3_grec_merge(struct h3_grec *into, const struct h3_grec *from)
{
    if (from->nreads == UINT32_MAX)
        into->nreads = UINT32_MAX;
    for (uint32_t i = 0; from->nreads != UINT32_MAX && i < from->nreads && into->nreads != UINT32_MAX; i++)
        h3_grec_read(into, from->reads[i]);
    into->all |= from->all;
    for (uint32_t i = 0; i < from->nwords; i++)
        h3_grec_word(into, from->words[i]);
    for (uint32_t i = 0; i < from->nranges; i++)
        h3_grec_range(into, from->ranges[i][0], from->ranges[i][1]);
}

/* The capture id and graph of `stream`; false when it is not capturing. */
static bool h3_capture_info(const void *stream, uint64_t *id, const void **graph)
{
    __typeof__(&cuStreamGetCaptureInfo_v3) info = H3_LIB_FN(CUDA, cuStreamGetCaptureInfo_v3);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    CUgraph g = NULL;
    if (info == NULL || info((CUstream)(uintptr_t)stream, &status, &cid, &g, NULL, NULL, NULL) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return false;
    *id = cid;
    if (graph != NULL)
        *graph = g;
    return true;
}

/* The capture with id `id`, asking the begun captures' streams for theirs. Locked. */
static struct h3_capture *h3_capture_of(uint64_t id)
{
    for (unsigned i = 0; i < h3_g.ncaptures; i++) {
        struct h3_capture *k = &h3_g.captures[i];
        if (k->id == 0 && !h3_capture_info(k->origin, &k->id, NULL))
            continue;
        if (k->id == id)
            return k;
    }
    return NULL;
}

static void h3_capture_remove(struct h3_capture *k)
{
    h3_grec_put(k->rec);
    *k = h3_g.captures[--h3_g.ncaptures];
}

void h3_graphs_begin(const void *stream, bool into_graph)
{
    if (!h3_hot.graphs_on)
        return;
    pthread_mutex_lock(&h3_g.lock);
    if (h3_g.ncaptures < sizeof(h3_g.captures) / sizeof(h3_g.captures[0])) {
        h3_g.captures[h3_g.ncaptures++] = (struct h3_capture){0, stream, into_graph, NULL};
        atomic_fetch_add_explicit(&h3_hot.captures_recording, 1, memory_order_release);
    } else {
        H3_WARN_ONCE(H3_SUB_ENGINE, "more than 64 CUDA graph captures at once: the ones beyond are not tracked, "
                                    "and weight_cache falls back in them");
    }
    pthread_mutex_unlock(&h3_g.lock);
}

struct h3_grec *h3_graphs_capture_lock(const void *stream)
{
    if (!h3_hot.graphs_on || atomic_load_explicit(&h3_hot.captures_recording, memory_order_acquire) == 0)
        return NULL;
    uint64_t id;
    if (!h3_capture_info(stream, &id, NULL))
        return NULL;
    pthread_mutex_lock(&h3_g.lock);
    struct h3_capture *k = h3_capture_of(id);
    if (k != NULL && k->rec == NULL)
        k->rec = h3_grec_new();
    if (k == NULL || k->rec == NULL || k->into_graph) {
        pthread_mutex_unlock(&h3_g.lock);
        return NULL;
    }
    return k->rec;
}

void h3_graphs_unlock(void)
{
    pthread_mutex_unlock(&h3_g.lock);
}

static struct h3_graph_ref *h3_ref_find(struct h3_graph_ref *refs, unsigned n, const void *handle)
{
    for (unsigned i = 0; i < n; i++)
        if (refs[i].handle == handle)
            return &refs[i];
    return NULL;
}

static void h3_ref_remove(struct h3_graph_ref *refs, unsigned *n, struct h3_graph_ref *ref)
{
    h3_grec_put(ref->rec);
    *ref = refs[--*n];
}

/* Makes handle -> rec known (replacing what a reused handle meant). Locked. */
static void h3_ref_add(struct h3_graph_ref *refs, unsigned *n, const void *handle, struct h3_grec *rec)
{
    struct h3_graph_ref *old = h3_ref_find(refs, *n, handle);
    if (old != NULL)
        h3_ref_remove(refs, n, old);
    if (*n == H3_GRAPHS_MAX) {
        H3_WARN_ONCE(H3_SUB_ENGINE, "more than %d CUDA graphs known at once: the ones beyond drop every "
                                    "weight_cache copy when launched", H3_GRAPHS_MAX);
        return;
    }
    rec->refs++;
    refs[(*n)++] = (struct h3_graph_ref){handle, rec};
}

static int h3_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts a finished capture's words and keeps each once: a block's launches
 * point at the same buffers again and again, and every launch of the graph
 * goes through the list. */
static void h3_grec_compact(struct h3_grec *r)
{
    if (r->nwords < 2)
        return;
    qsort(r->words, r->nwords, sizeof(*r->words), h3_u64_cmp);
    uint32_t n = 1;
    for (uint32_t i = 1; i < r->nwords; i++)
        if (r->words[i] != r->words[n - 1])
            r->words[n++] = r->words[i];
    r->nwords = n;
}

void h3_graphs_end(const void *stream)
{
    if (!h3_hot.graphs_on || atomic_load_explicit(&h3_hot.captures_recording, memory_order_acquire) == 0)
        return;
    uint64_t id;
    const void *graph = NULL;
    if (!h3_capture_info(stream, &id, &graph))
        return;
    pthread_mutex_lock(&h3_g.lock);
    struct h3_capture *k = h3_capture_of(id);
    if (k != NULL) {
        if (k->rec == NULL)
            k->rec = h3_grec_new(); /* nothing observed in it: nothing to do at its launches */
        if (!k->into_graph && k->rec != NULL && graph != NULL) {
            h3_grec_compact(k->rec);
            h3_ref_add(h3_g.graphs, &h3_g.ngraphs, graph, k->rec);
        }
        h3_capture_remove(k);
        atomic_fetch_sub_explicit(&h3_hot.captures_recording, 1, memory_order_release);
    }
    pthread_mutex_unlock(&h3_g.lock);
}

void h3_graphs_instantiated_at(const void *pexec, const void *graph)
{
    if (!h3_hot.graphs_on || pexec == NULL || *(const void *const *)pexec == NULL)
        return;
    const void *exec = *(const void *const *)pexec;
    pthread_mutex_lock(&h3_g.lock);
    struct h3_graph_ref *g = h3_ref_find(h3_g.graphs, h3_g.ngraphs, graph);
    struct h3_graph_ref *old = h3_ref_find(h3_g.execs, h3_g.nexecs, exec);
    if (old != NULL) /* a reused handle */
        h3_ref_remove(h3_g.execs, &h3_g.nexecs, old);
    if (g != NULL)
        h3_ref_add(h3_g.execs, &h3_g.nexecs, exec, g->rec);
    pthread_mutex_unlock(&h3_g.lock);
}

/* Forgets `handle` in one table (destroyed, or changed so that its record no longer holds). */
static void h3_graphs_forget(struct h3_graph_ref *refs, unsigned *n, const void *handle)
{
    if (!h3_hot.graphs_on)
        return;
    pthread_mutex_lock(&h3_g.lock);
    struct h3_graph_ref *r = h3_ref_find(refs, *n, handle);
    if (r != NULL)
        h3_ref_remove(refs, n, r);
    pthread_mutex_unlock(&h3_g.lock);
}

void h3_graphs_exec_gone(const void *exec)
{
    h3_graphs_forget(h3_g.execs, &h3_g.nexecs, exec);
}

void h3_graphs_graph_gone(const void *graph)
{
    h3_graphs_forget(h3_g.graphs, &h3_g.ngraphs, graph);
}

void h3_graphs_graphs_changed(void)
{
    if (!h3_hot.graphs_on)
        return;
    pthread_mutex_lock(&h3_g.lock);
    while (h3_g.ngraphs > 0)
        h3_ref_remove(h3_g.graphs, &h3_g.ngraphs, &h3_g.graphs[h3_g.ngraphs - 1]);
    pthread_mutex_unlock(&h3_g.lock);
}

struct h3_grec *h3_graphs_exec_lock(const void *exec)
{
    if (!h3_hot.graphs_on)
        return NULL;
    pthread_mutex_lock(&h3_g.lock);
    struct h3_graph_ref *e = h3_ref_find(h3_g.execs, h3_g.nexecs, exec);
    if (e == NULL) {
        pthread_mutex_unlock(&h3_g.lock);
        return NULL;
    }
    return e->rec;
}

void h3_graphs_reset(void)
{
    pthread_mutex_lock(&h3_g.lock);
    while (h3_g.ncaptures > 0)
        h3_capture_remove(&h3_g.captures[h3_g.ncaptures - 1]);
    while (h3_g.ngraphs > 0)
        h3_ref_remove(h3_g.graphs, &h3_g.ngraphs, &h3_g.graphs[h3_g.ngraphs - 1]);
    while (h3_g.nexecs > 0)
        h3_ref_remove(h3_g.execs, &h3_g.nexecs, &h3_g.execs[h3_g.nexecs - 1]);
    atomic_store(&h3_hot.captures_recording, 0);
    pthread_mutex_unlock(&h3_g.lock);
}

static void h3_grec_mark(const struct h3_grec *r, uint64_t *bits, unsigned nbits)
{
    for (uint32_t i = 0; r != NULL && i < (r->nreads == UINT32_MAX ? nbits : r->nreads); i++) {
        uint32_t e = r->nreads == UINT32_MAX ? i : r->reads[i];
        if (e < nbits)
            bits[e / 64] |= 1ull << (e % 64);
    }
}

void h3_graphs_reads(uint64_t *bits, unsigned nbits)
{
    pthread_mutex_lock(&h3_g.lock);
    for (unsigned i = 0; i < h3_g.ncaptures; i++)
        h3_grec_mark(h3_g.captures[i].rec, bits, nbits);
    for (unsigned i = 0; i < h3_g.ngraphs; i++)
        h3_grec_mark(h3_g.graphs[i].rec, bits, nbits);
    for (unsigned i = 0; i < h3_g.nexecs; i++)
        h3_grec_mark(h3_g.execs[i].rec, bits, nbits);
    pthread_mutex_unlock(&h3_g.lock);
}

/* Read without the lock: weight_cache asks holding its own, which the
 * graph launch takes inside this one.  A record made after the answer can
 * name an entry only under weight_cache's lock, so after what it does. */
bool h3_graphs_live(void)
{
    return __atomic_load_n(&h3_g.ncaptures, __ATOMIC_ACQUIRE) + __atomic_load_n(&h3_g.ngraphs, __ATOMIC_ACQUIRE) +
               __atomic_load_n(&h3_g.nexecs, __ATOMIC_ACQUIRE) > 0;
}

void h3_graphs_merge_exec(const void *stream, const void *exec)
{
    uint64_t id;
    if (!h3_hot.graphs_on || !h3_capture_info(stream, &id, NULL))
        return;
    pthread_mutex_lock(&h3_g.lock);
    struct h3_capture *k = h3_capture_of(id);
    struct h3_graph_ref *e = h3_ref_find(h3_g.execs, h3_g.nexecs, exec);
    if (k != NULL && k->rec != NULL) {
        if (e != NULL) {
            h3_grec_merge(k->rec, e->rec);
        } else {
            k->rec->all = true;
            k->rec->nreads = UINT32_MAX;
        }
    }
    pthread_mutex_unlock(&h3_g.lock);
}

void h3_graphs_after_fork_child(void)
{
    pthread_mutex_init(&h3_g.lock, NULL);
}
