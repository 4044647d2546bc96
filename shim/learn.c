/*
 * The learner: finds the groups of calls a thread repeats, and derives their
 * signatures in the process, with the rules of scripts/record_signature.py
 * (signatures/README.md), so that a block of a shape, a batch or a build no
 * committed signature covers is fused after its first instances.
 *
 * Owns: per thread, a ring of the last H3_LEARN_RING calls that no signature
 * took (identity, launch configuration, parameter bytes, library
 * descriptions) and up to H3_LEARN_CANDIDATES periods being followed; per
 * process, the identities of groups the planners refused and the counts.
 * Invariants: a group is learned only when the same sequence of call
 * identities came H3_LEARN_INSTANCES times in a row on one stream, every
 * instance with known parameters; the signature is written in format 1 and
 * parsed by sigfile.c like a committed one, and it is published only when an
 * op plans a range in it (h3_engine_learned), which checks at every run what
 * it relies on.  Bounded: fixed memory per thread, constant work per call
 * (a hash, a table slot, the candidates), and a thread that made
 * H3_LEARN_PATIENCE calls without one repetition stops looking.
 * Never: touches CUDA, or changes a call: learning only adds a signature.
 */
#include "h3shim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Calls kept per thread; a group of H3_LEARN_INSTANCES instances must fit. */
#define H3_LEARN_RING 512
/* Longest and shortest group learned. */
#define H3_LEARN_MAX_PERIOD 160
#define H3_LEARN_MIN_PERIOD 4
/* Instances in a row before a group is learned (the first ones run unfused). */
#define H3_LEARN_INSTANCES 3
/* Periods followed at once per thread. */
#define H3_LEARN_CANDIDATES 8
/* Parameter bytes kept per thread, and the most one call may have. */
#define H3_LEARN_BYTES (256u << 10)
#define H3_LEARN_CALL_BYTES 8192u
/* Groups learned per process: published, and refused by every planner. */
#define H3_LEARN_MAX_LEARNED 24
/* Signatures in all, committed and learned: what every thread's matcher holds. */
#define H3_LEARN_MAX_SIGNATURES 32
/* Signatures the ops' planners saw, published or refused: never freed
 * (weight_cache keeps their calls' marks), so bounded for the process. */
#define H3_LEARN_MAX_PLANNED 64
/* Groups derived per process, whatever became of them: what bounds the work
 * when another model's groups come faster than they can be remembered. */
#define H3_LEARN_MAX_DERIVED 1024
/* Identities of refused groups remembered (open addressing, a power of two). */
#define H3_LEARN_REFUSED_IDS 4096
/* The last position of each identity (a power of two). */
#define H3_LEARN_LAST 1024
/* A refused group's launches its wrappers forward: sets of H3_LEARN_FAST_WAYS
 * (powers of two). */
#define H3_LEARN_FAST 512
#define H3_LEARN_FAST_WAYS 4
/* Runs of calls between refused groups followed per thread, and the longest
 * (h3_learn_island_close). */
#define H3_LEARN_ISLANDS 8
#define H3_LEARN_ISLAND_MAX 64
/* Places in the refused islands a quiet thread may be at when it follows one. */
#define H3_LEARN_FOLLOW 8
/* Identities a thread passed by, remembered for its quiet (a power of two;
 * h3_learn_passed_add). */
#define H3_LEARN_PASSED 512

/* The rules of record_signature.py, with its numbers. */
#define H3_LEARN_DEVICE_RADIUS (256ull << 20)
#define H3_LEARN_GRANULE 512
#define H3_LEARN_HOST_LOW 0x7F0000000000ull
#define H3_LEARN_HOST_HIGH 0x800000000000ull
#define H3_LEARN_BYTES_PER_LINE 2048

/* One call the learner keeps. */
struct h3_learn_call {
    uint64_t id;   /* its identity (h3_learn_identity); a gap's is unique */
    uint8_t kind;  /* enum h3_sig_kind, H3_LEARN_GAP or H3_LEARN_OPAQUE */
    const void *stream;
    const struct h3_kernel *kernel;
    unsigned grid[3], block[3], shmem;
    uint32_t nparams;
    uint64_t at; /* launches: where its sizes and bytes lie in the byte ring (absolute) */
    uint32_t len;
    bool synced; /* a call that submits work or synchronises came before it (since the last kept) */
    struct h3_free_mark mark; /* the thread's frees before it (h3_released_mark) */
    union {
        struct {
            int64_t desc[H3_SIG_DESC_KEYS], algo[H3_SIG_ALGO_KEYS];
            bool have_algo;
            uint64_t ptr[H3_SIG_OPERANDS], workspace;
        } mm;
        struct {
            uint32_t n;
            int64_t uids[H3_CUDNN_MAX_TENSORS];
            uint64_t ptrs[H3_CUDNN_MAX_TENSORS];
            uint64_t workspace;
        } dnn;
    } u;
};
#define H3_LEARN_GAP 0xff
/* A call kept for its identity alone: a GEMM through cuBLAS's own entry
 * points, which no signature can hold (a group with one is another model's). */
#define H3_LEARN_OPAQUE 0xfe

struct h3_learn_candidate {
    uint32_t period; /* 0: free */
    uint64_t start;  /* the first instance's first call (absolute position) */
    bool done;       /* learned (or refused) already: followed until it breaks */
};

/* A launch found a refused group's, where the learner's last two calls
 * were `before`: its wrapper forwards the same launch there again
 * (h3_learn_launch_refused), as the learner would pass it by. */
struct h3_learn_fast {
    const void *handle;
    uint64_t before[2];
    uint64_t id;
    unsigned dims[H3_LAUNCH_DIMS];
    uint8_t island, pos; /* a refused island's call (its slot + 1, its place in it), or 0 */
    uint16_t gen;        /* the learner's passed_gen when `id` was last put in its passed set */
} __attribute__((aligned(64))); /* one line a look */
_Static_assert(sizeof(struct h3_learn_fast) == 64, "a refused launch's entry is one cache line");

/*
 * A run of kept calls between two calls of refused groups (another model's
 * calls outside its layers: a Llama's embedding and head between its last
 * layer and its first), as the learner saw it close: the two calls before
 * it, and its calls' identities.  One that closed H3_LEARN_INSTANCES times
 * the same is refused: its calls are passed by where they come in order
 * after those two calls (h3_learn_passes), never elsewhere.  One whose
 * first calls came there and then a call that differs is broken: never
 * refused again (a block may begin as it does; h3_learn_cursor_end).
 */
struct h3_learn_island {
    uint64_t pre[2], fp;
    uint32_t len, seen;
    bool refused, broken;
    uint64_t ids[H3_LEARN_ISLAND_MAX];
};

struct h3_learner {
    struct h3_learn_call ring[H3_LEARN_RING];
    uint64_t n;           /* calls kept so far (absolute position of the next) */
    uint8_t *bytes;       /* H3_LEARN_BYTES */
    uint64_t bytes_head;  /* absolute */
    struct {
        uint64_t id, at;
    } last[H3_LEARN_LAST];
    struct h3_learn_candidate cand[H3_LEARN_CANDIDATES];
    uint64_t since_repeat; /* kept calls since a group not refused before was last tried */
    bool synced;           /* a call that submits work or synchronises came since the last one */
    void *block;           /* what calloc gave: the learner lies in it, aligned */
    uint64_t fast_victim;  /* picks the way a note replaces in a full set */
    /* The run of kept calls since the last refused group's call: open while
     * only refused groups' calls bound it; its first call (UINT64_MAX: none
     * yet) and the two before that. */
    bool acc_open;
    uint64_t acc_first, acc_pre[2];
    unsigned islands_next, islands_refused;
    /* Where the thread left refused island cut_island (slot + 1) after
     * cut_len of its calls, passed by (0: none), and the learner kept the
     * call after them at cut_at (UINT64_MAX: not yet): a run from there
     * may begin, in truth, with those calls. */
    uint32_t cut_len;
    uint8_t cut_island;
    uint64_t cut_at;
    struct h3_learn_island islands[H3_LEARN_ISLANDS];
    struct h3_learn_fast fast[H3_LEARN_FAST];
    /* Quiet (h3_learn_quiet_count): calls passed by in a row since the
     * learner last kept one, the identities of those passed by (emptied
     * when full, passed_gen moving on), the epoch the thread went quiet
     * in (h3_hot.idle_epoch + 1) and how often it did. */
    uint64_t quiet_run;
    unsigned quiet_hold; /* runs of H3SHIM_LEARN_QUIET calls to pass by awake before the next quiet */
    /* Following refused islands from a library call (h3_learn_follow_island):
     * the places it may be at, each its island (slot + 1), the place of its
     * next call and the place after the call followed from. */
    bool following;
    uint8_t follow_n;
    struct {
        uint8_t island, pos, from;
    } follow[H3_LEARN_FOLLOW];
    unsigned quiet_epoch, quiet_times;
    uint16_t passed_gen;
    uint64_t passed[H3_LEARN_PASSED];
};

static H3_TLS struct h3_learner *h3_learner_tls;
static H3_TLS bool h3_learner_failed;
/* Calls the thread's learner did not keep came since its last kept one (a
 * thread's word, not the learner's: another model's every call sets it). */
static H3_TLS bool h3_learn_gap;
/* The group the learner published at this thread's current call, for its trace record. */
static H3_TLS const char *h3_learn_just;
/* The call h3_learn_wants found an identity for, and that identity: the
 * same call's h3_learn_observe does not hash it again.  A call h3_learn_wants
 * says yes to is not idle, so h3_call_decide takes it to h3_learn_observe,
 * which clears this before any other call of the thread. */
static H3_TLS struct h3_learn_asked {
    const struct h3_call *c;
    uint64_t id;
} h3_learn_asked;
/* The launch h3_learn_wants last passed by as a refused group's, with the
 * learner's last two calls before it, for h3_learn_fast_note. */
static H3_TLS struct {
    const struct h3_call *c;
    uint64_t before[2], id;
    uint8_t island, pos;
} h3_learn_passed;
/* Where the thread is in a refused island: its slot + 1 (0: in none) and the
 * place of its next call. */
static H3_TLS struct {
    uint8_t island, pos;
} h3_learn_cur;
/* A refused island broke and the learner has not yet kept, or passed by,
 * the call that broke it (h3_learn_cursor_leave). */
static H3_TLS bool h3_learn_cut_pending;
static pthread_key_t h3_learn_key;
static pthread_once_t h3_learn_key_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t h3_learn_lock = PTHREAD_MUTEX_INITIALIZER;
/* Learning is over for the process: the learned groups' or signatures'
 * room is spent. */
/* Why learning ended for the process (a string constant), for the stats. */
static _Atomic(const char *) h3_learn_closed_why;
static atomic_uint h3_learn_planned, h3_learn_derived_all;
static atomic_ullong h3_learn_refused_ids[H3_LEARN_REFUSED_IDS];
/* Why a call was not kept. */
enum h3_learn_skip { H3_SKIP_TAKEN, H3_SKIP_LAUNCH, H3_SKIP_MATMUL, H3_SKIP_CUDNN, H3_SKIP_OTHER, H3_SKIP_REFUSED,
                     H3_SKIP_ISLAND, H3_SKIP_QUIET, H3_SKIPS,
                     /* and the other per-call counts: */
                     H3_COUNT_KEPT = H3_SKIPS, H3_COUNT_SYNCED, H3_COUNTS };
static const char *const h3_learn_skip_names[H3_SKIPS] = {
    "continuing a signature's attempt", "launches without known parameters", "GEMMs without a full description",
    "cuDNN executions without a known variant pack", "other library calls", "of refused groups",
    "between refused groups, repeating (refused islands)",
    "looked at while the thread was quiet, of identities it had passed by"};
static enum h3_learn_skip h3_learn_skip_of(const struct h3_call *c);
static void h3_learn_break(enum h3_learn_skip why);
static uint64_t h3_learn_unkept_prev(const struct h3_call *c);
static struct h3_learn_call *h3_learn_at(struct h3_learner *l, uint64_t pos);
static struct {
    atomic_uint learned, refused, threads, stopped, islands, islands_broken, quiet, woke, followed;
    atomic_ulong refused_calls;
    atomic_ulong calls[H3_COUNTS]; /* by enum h3_learn_skip: not kept, kept, synchronising */
} h3_learn_counts;
static uint64_t h3_learn_bodies[H3_LEARN_MAX_LEARNED]; /* hashes of the learned texts, under the lock */
static unsigned h3_learn_nbodies;

static void h3_learn_flush_pending(void);

static void h3_learner_free(void *arg)
{
    struct h3_learner *l = arg;
    h3_learner_tls = NULL;
    h3_thread.learn_quiet = false;
    h3_learn_cur.island = 0; /* its islands go with it */
    h3_learn_cut_pending = false;
    h3_learner_failed = true; /* a call after the key's destructor makes no new one */
    h3_learn_flush_pending();
    if (l != NULL) {
        free(l->bytes);
        free(l->block);
    }
}

static void h3_learn_key_make(void)
{
    pthread_key_create(&h3_learn_key, h3_learner_free);
}

static void h3_learn_close(const char *why)
{
    const char *expected = NULL;
    if (atomic_compare_exchange_strong(&h3_learn_closed_why, &expected, why))
        H3_INFO(H3_SUB_HOOK, "learning ends for the process: %s", why);
    atomic_store(&h3_hot.learn_closed, true);
}

bool h3_learn_looking(void)
{
    return h3_hot.learn_on && !h3_learner_failed &&
           !atomic_load_explicit(&h3_hot.learn_closed, memory_order_relaxed);
}

/* This thread's learner, made at its first call; NULL when out of memory
 * or stopped. */
static struct h3_learner *h3_learner_get(void)
{
    struct h3_learner *l = h3_learner_tls;
    if (l != NULL || h3_learner_failed)
        return l;
    pthread_once(&h3_learn_key_once, h3_learn_key_make);
    /* calloc, not aligned_alloc and a memset: its pages stay untouched until used. */
    void *block = calloc(1, sizeof(*l) + _Alignof(struct h3_learner));
    if (block != NULL) {
        uintptr_t a = _Alignof(struct h3_learner);
        l = (struct h3_learner *)(((uintptr_t)block + a - 1) & ~(a - 1));
        l->block = block;
    }
    if (l != NULL && (l->bytes = malloc(H3_LEARN_BYTES)) == NULL) {
        free(block);
        l = NULL;
    }
    if (l == NULL) {
        h3_learner_failed = true;
        H3_WARN(H3_SUB_HOOK, "out of memory for the learner: this thread learns nothing");
        return NULL;
    }
    pthread_setspecific(h3_learn_key, l);
    atomic_fetch_add(&h3_learn_counts.threads, 1);
    h3_learn_gap = false;
    return h3_learner_tls = l;
}

/* ---- identities ---- */

/* One word into a hash (a multiply and a shift: identities are made at
 * every call the learner keeps, so byte-wise FNV's 48 multiplies a launch
 * would be most of its cost). */
static inline uint64_t h3_learn_mix(uint64_t h, uint64_t v)
{
    h = (h ^ v) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static uint64_t h3_learn_mix_words(uint64_t h, const int64_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = h3_learn_mix(h, (uint64_t)v[i]);
    return h;
}

/* Whether a cuBLASLt call's description is complete enough to learn. */
static bool h3_learn_lt_known(const struct h3_call *c)
{
    return c->fn == H3_FN_cublasLtMatmul && c->detail && c->u.lt.d.rows != 0;
}

/* A call's identity: what must be equal for two calls to be one call of a
 * group (record_signature.py: the kernel, launch configuration and
 * parameter sizes; a matmul's description without pointers or algorithm; a
 * cuDNN variant pack's unique ids).  0: the call cannot be learned. */
static uint64_t h3_learn_identity(const struct h3_call *c)
{
    uint64_t h = H3_HASH_SEED;
    if (c->kind == H3_KIND_LAUNCH) {
        if (c->kernel == NULL || c->args == NULL || !c->kernel->learnable)
            return 0;
        h = h3_learn_mix(h, (uint64_t)(uintptr_t)c->kernel);
        h = h3_learn_mix(h, (uint64_t)c->grid[0] | (uint64_t)c->grid[1] << 32);
        h = h3_learn_mix(h, (uint64_t)c->grid[2] | (uint64_t)c->block[0] << 32);
        h = h3_learn_mix(h, (uint64_t)c->block[1] | (uint64_t)c->block[2] << 32);
        return h3_learn_mix(h, (uint64_t)c->shmem | (uint64_t)c->nparams << 32) | 1;
    }
    if (c->fn == H3_FN_cublasLtMatmul) {
        if (!h3_learn_lt_known(c))
            return 0;
        int64_t desc[H3_SIG_DESC_KEYS], algo[H3_SIG_ALGO_KEYS];
        h3_match_lt_values(&c->u.lt, desc, algo);
        return h3_learn_mix_words(h3_learn_mix(h, 2), desc, H3_SIG_DESC_KEYS) | 1;
    }
    if (c->fn == H3_FN_cudnnBackendExecute) {
        const struct h3_cudnn_desc *d = &c->u.dnn;
        if (!d->known || d->count <= 0 || d->count > H3_CUDNN_MAX_TENSORS)
            return 0;
        return h3_learn_mix_words(h3_learn_mix(h, 3), d->uids, (size_t)d->count) | 1;
    }
    if (c->kind == H3_KIND_LIBCALL && h3_hooks[c->fn].lib == H3_LIB_CUBLAS && c->detail) {
        /* cuBLAS's own GEMMs: no signature can hold one, but another model's
         * layer repeats with them (a transformers Llama's projections), and
         * is refused as a group of calls, not looked at call by call. */
        const struct h3_gemm_desc *g = &c->u.gemm;
        const int64_t v[] = {c->fn, g->transa, g->transb, g->atype, g->btype, g->ctype, g->compute,
                             g->m,  g->n,      g->k,      g->lda,   g->ldb,   g->ldc,   g->batch};
        return h3_learn_mix_words(h3_learn_mix(h, 5), v, sizeof(v) / sizeof(v[0])) | 1;
    }
    return 0;
}

/* What a refused group leaves out: each of its calls after the two calls
 * before it (three identities), not each call alone: another model's layer,
 * or a variant of the block the format cannot hold, may have calls of the H3
 * block, weight casts of the same shapes (the two of a GEMM, one after the
 * other, whatever the tokens), which must stay in sight where the block makes
 * them.  The identities of the thread's last two calls the learner saw, kept
 * or passed by as refused (prev[1] the last); 0 after a call it could not keep. */
static H3_TLS uint64_t h3_learn_prev[2];

/* After each call the learner saw: the last two identities move on by
 * `id` (0: a break, both forgotten), and whether the learner would keep the
 * thread's next GEMM, so that its descriptors are remembered as they are
 * built (h3_thread_wants_gemm).  Inside a refused group it would not:
 * another model's GEMMs are described by their shape alone, and one of a
 * shape no group refused is read in full at the GEMM instead. */
static inline void h3_learn_note(uint64_t id, bool gemms)
{
    h3_learn_prev[0] = id != 0 ? h3_learn_prev[1] : 0;
    h3_learn_prev[1] = id;
    h3_thread.learn_gemms = gemms;
}

static void h3_learn_island_bound(bool refused);
static inline void h3_learn_cursor_end(bool kept);
static void h3_learn_quiet_count(const struct h3_call *c, uint64_t id, enum h3_learn_skip why);
static bool h3_learn_quiet_passes(const struct h3_call *c, uint64_t id);
static void h3_learn_wake(struct h3_learner *l, const struct h3_call *c);
static bool h3_learn_follow_ends(const struct h3_learner *l, const struct h3_call *c, uint64_t id);
static void h3_learn_follow_quiet(struct h3_learner *l);
static void h3_learn_follow_left(struct h3_learner *l, const struct h3_call *c);
static void h3_learn_follow_narrow(struct h3_learner *l, const struct h3_call *c, uint64_t id);
static void h3_learn_passed_add(struct h3_learner *l, uint64_t id, bool island);

/* A call passed by, unkept: a refused group's or a refused island's (`why`;
 * `id` its identity; `c` is not read then), or one the learner cannot keep
 * (`id` 0): no group runs across it.  A refused group's next call follows
 * it, and so does one after its GEMM described by its shape alone.  A
 * refused group's call (or such a GEMM) bounds the run of kept calls before
 * it (h3_learn_island_bound); any other call ends that run, and any but a
 * refused island's ends the island the thread was in. */
static void h3_learn_pass(const struct h3_call *c, uint64_t id, enum h3_learn_skip why)
{
    if (id == 0 && h3_learner_tls != NULL && h3_learner_tls->following)
        h3_learn_follow_left(h3_learner_tls, c); /* a call it cannot keep: not the island's */
    h3_learn_break(id != 0 ? why : h3_learn_skip_of(c));
    uint64_t prev = id != 0 ? id : h3_learn_unkept_prev(c);
    if (id == 0 || why != H3_SKIP_ISLAND)
        h3_learn_cursor_end(false);
    h3_learn_island_bound(prev != 0 && (id == 0 || why != H3_SKIP_ISLAND));
    h3_learn_note(prev, prev == 0);
    h3_learn_quiet_count(c, id, why);
}

static inline uint64_t h3_learn_triple(uint64_t before2, uint64_t before1, uint64_t id)
{
    return h3_learn_mix(h3_learn_mix(h3_learn_mix(H3_HASH_SEED, before2), before1), id) | 1;
}

static bool h3_learn_refused(uint64_t id)
{
    for (unsigned i = 0; i < 16; i++) {
        uint64_t v = atomic_load_explicit(&h3_learn_refused_ids[(id + i) & (H3_LEARN_REFUSED_IDS - 1)],
                                          memory_order_relaxed);
        if (v == id)
            return true;
        if (v == 0)
            return false;
    }
    return false;
}

/* Whether call `c`, of identity `id`, after the thread's last two is a
 * refused group's.  A launch asks its kernel's copy of the triples first
 * (the line beside the one describing it read), and the process's table
 * only for a triple the copy lacks of a kernel some refused group has. */
static inline bool h3_learn_refused_here(const struct h3_call *c, uint64_t id)
{
    uint64_t t = h3_learn_triple(h3_learn_prev[0], h3_learn_prev[1], id);
    struct h3_kernel *k = c->kind == H3_KIND_LAUNCH ? (struct h3_kernel *)c->kernel : NULL;
    if (k != NULL) {
        for (unsigned i = 0; i < H3_KERNEL_REFUSED; i++) {
            uint64_t v = atomic_load_explicit(&k->refused[i], memory_order_relaxed);
            if (v == t)
                return true;
            if (v == 0)
                break;
        }
        if (!atomic_load_explicit(&k->in_refused, memory_order_acquire))
            return false;
    }
    return h3_learn_refused(t);
}

/* False when there is no room: the call stays in the learner's sight. */
static bool h3_learn_refuse_id(uint64_t id)
{
    for (unsigned i = 0; i < 16; i++) {
        atomic_ullong *slot = &h3_learn_refused_ids[(id + i) & (H3_LEARN_REFUSED_IDS - 1)];
        uint64_t expected = 0;
        if (atomic_compare_exchange_strong(slot, &expected, id) || expected == id)
            return true;
    }
    return false;
}

/* Copies refused triple `t`, put in the process's table, to kernel `k`'s
 * own (h3_learn_refused_here), while there is room. */
static void h3_learn_refuse_launch(struct h3_kernel *k, uint64_t t)
{
    for (unsigned i = 0; i < H3_KERNEL_REFUSED; i++) {
        uint64_t expected = 0;
        if (atomic_compare_exchange_strong(&k->refused[i], &expected, t) || expected == t)
            return;
    }
}

/* ---- refused islands ---- */

/* Where a call passed by as a refused island's lies in it (slot + 1, place). */
struct h3_learn_place {
    uint8_t island, pos;
};

/* The thread's place in its island moves past one of its calls; past the
 * last it stays in it (pos == len) until the next call says whether the
 * island ended there (h3_learn_cursor_leave). */
static inline void h3_learn_island_step(void)
{
    h3_learn_cur.pos++;
}

/*
 * Why the call of identity `id`, after the thread's last two calls, is
 * passed by: the next call of the refused island the thread is in, a
 * refused group's, or the first call of a refused island after the two
 * calls that came before it (then *at says where it lies); H3_COUNT_KEPT:
 * the learner keeps it.  A call that does not continue the thread's island
 * ends it there.
 */
static enum h3_learn_skip h3_learn_passes(const struct h3_call *c, uint64_t id, struct h3_learn_place *at)
{
    const struct h3_learner *l = h3_learner_tls;
    *at = (struct h3_learn_place){0, 0};
    if (l != NULL && l->following && l->follow_n > 1)
        h3_learn_follow_narrow(h3_learner_tls, c, id);
    if (h3_learn_cur.island != 0 && l != NULL) {
        const struct h3_learn_island *s = &l->islands[h3_learn_cur.island - 1];
        if (h3_learn_cur.pos < s->len && s->ids[h3_learn_cur.pos] == id) {
            *at = (struct h3_learn_place){h3_learn_cur.island, h3_learn_cur.pos};
            h3_learn_island_step();
            return H3_SKIP_ISLAND;
        }
    }
    if (l != NULL && l->following && !h3_learn_follow_ends(l, c, id))
        h3_learn_follow_left(h3_learner_tls, c);
    h3_learn_cursor_end(true); /* the call may yet be passed by: h3_learn_pass says so */
    if (h3_learn_refused_here(c, id))
        return H3_SKIP_REFUSED;
    for (unsigned i = 0; l != NULL && l->islands_refused != 0 && i < H3_LEARN_ISLANDS; i++) {
        const struct h3_learn_island *s = &l->islands[i];
        if (s->refused && s->ids[0] == id && s->pre[0] == h3_learn_prev[0] && s->pre[1] == h3_learn_prev[1]) {
            h3_learn_cursor_end(false); /* a cut the island before left: no kept call begins a run at it */
            *at = (struct h3_learn_place){(uint8_t)(i + 1), 0};
            h3_learn_cur.island = (uint8_t)(i + 1);
            h3_learn_cur.pos = 0;
            h3_learn_island_step();
            return H3_SKIP_ISLAND;
        }
    }
    return H3_COUNT_KEPT;
}

/*
 * The run of kept calls [acc_first, n) came between two refused groups'
 * calls.  One that comes H3_LEARN_INSTANCES times the same, after the same
 * two calls, is refused for the thread: another model's calls outside its
 * layers, which no group can hold (it is bounded by calls that no group
 * learned has), so that they stop being kept at every iteration.  Only
 * where its calls come in order after those two calls are they passed by
 * (h3_learn_passes); anywhere else the learner keeps them as before.
 */
static void h3_learn_island_close(struct h3_learner *l)
{
    uint32_t len = (uint32_t)(l->n - l->acc_first);
    uint64_t fp = h3_learn_mix(h3_learn_mix(h3_learn_mix(H3_HASH_SEED, l->acc_pre[0]), l->acc_pre[1]), len);
    for (uint32_t j = 0; j < len; j++)
        fp = h3_learn_mix(fp, h3_learn_at(l, l->acc_first + j)->id);
    struct h3_learn_island *s = NULL;
    for (unsigned i = 0; i < H3_LEARN_ISLANDS && s == NULL; i++)
        if (l->islands[i].fp == fp && l->islands[i].len == len)
            s = &l->islands[i];
    for (unsigned k = 0; k < H3_LEARN_ISLANDS && s == NULL; k++) { /* a slot no refused island holds */
        struct h3_learn_island *x = &l->islands[(l->islands_next + k) % H3_LEARN_ISLANDS];
        if (!x->refused && !x->broken) {
            s = x;
            l->islands_next = (l->islands_next + k + 1) % H3_LEARN_ISLANDS;
            s->pre[0] = l->acc_pre[0], s->pre[1] = l->acc_pre[1], s->fp = fp, s->len = len, s->seen = 0;
        }
    }
    if (s == NULL || s->refused || s->broken || ++s->seen < H3_LEARN_INSTANCES)
        return;
    for (uint32_t j = 0; j < len; j++)
        s->ids[j] = h3_learn_at(l, l->acc_first + j)->id;
    s->refused = true;
    l->islands_refused++;
    atomic_fetch_add(&h3_learn_counts.islands, 1);
    H3_INFO(H3_SUB_HOOK, "a run of %u calls between refused groups came %d times the same: passed by there", len,
            H3_LEARN_INSTANCES);
}

/* Island `s` came, and a call that the learner keeps followed its first
 * `pos` calls (a block that begins as the island does, right after another
 * model's layers): it is never refused again, so that the next time its
 * calls are kept there. */
static void h3_learn_island_break(struct h3_learner *l, struct h3_learn_island *s, unsigned pos)
{
    if (!s->refused)
        return;
    s->refused = false;
    s->broken = true;
    l->islands_refused--;
    atomic_fetch_add(&h3_learn_counts.islands_broken, 1);
    H3_INFO(H3_SUB_HOOK, "a refused island of %u calls broke after %u of them: it is kept again", s->len, pos);
}

/*
 * The thread leaves the refused island it is in.  Before its end, a call
 * that differs broke it (h3_learn_island_break).  After its end, a call
 * that the learner passes by ends it as its closings did; one it keeps
 * (`kept`: the call may yet be kept, h3_learn_pass says when it is not)
 * breaks it too.  The calls passed by in it are a cut in the run that the
 * kept call begins (h3_learn_island_kept): h3_learn_follow counts that
 * run's instances from the next one's first call, so that a group learned
 * from it is not rotated.
 */
static void h3_learn_cursor_leave(bool kept)
{
    struct h3_learner *l = h3_learner_tls;
    if (h3_learn_cur.island != 0 && l != NULL) {
        struct h3_learn_island *s = &l->islands[h3_learn_cur.island - 1];
        if (h3_learn_cur.pos < s->len)
            h3_learn_island_break(l, s, h3_learn_cur.pos);
        l->cut_island = h3_learn_cur.island;
        l->cut_len = h3_learn_cur.pos;
        l->cut_at = UINT64_MAX;
        h3_learn_cut_pending = true;
    }
    h3_learn_cur.island = 0;
    if (!kept && h3_learn_cut_pending) {
        h3_learn_cut_pending = false;
        if (l != NULL)
            l->cut_len = 0; /* the call after the cut was not kept: no run begins at it */
    }
}

/* Plain loads when the thread is in no island and no cut waits (every
 * refused group's call passed by). */
static inline void h3_learn_cursor_end(bool kept)
{
    if (h3_learn_cur.island != 0 || h3_learn_cut_pending)
        h3_learn_cursor_leave(kept);
}

/* A refused group's call (`refused`), or any other the learner passed by,
 * came: the run of kept calls before it closes, or ends unclosed. */
static void h3_learn_island_bound(bool refused)
{
    struct h3_learner *l = h3_learner_tls;
    if (l == NULL)
        return;
    if (refused && l->acc_open && l->acc_first != UINT64_MAX)
        h3_learn_island_close(l);
    l->acc_open = refused;
    l->acc_first = UINT64_MAX;
}

/* The call just kept (after `pre`) continues the run of kept calls, or
 * ends it: a call the ring could not keep, or one too many. */
static void h3_learn_island_kept(struct h3_learner *l, const uint64_t pre[2])
{
    h3_learn_cursor_end(true);
    uint64_t at = l->n - 1;
    if (h3_learn_cut_pending) { /* the call after the island's calls, kept: the island broke there */
        h3_learn_cut_pending = false;
        h3_learn_island_break(l, &l->islands[l->cut_island - 1], l->cut_len);
        l->cut_at = at;
    }
    if (!l->acc_open)
        return;
    if (h3_learn_at(l, at)->kind == H3_LEARN_GAP || (l->acc_first != UINT64_MAX && at - l->acc_first >= H3_LEARN_ISLAND_MAX)) {
        l->acc_open = false;
    } else if (l->acc_first == UINT64_MAX) {
        l->acc_first = at;
        l->acc_pre[0] = pre[0], l->acc_pre[1] = pre[1];
    }
}

bool h3_learn_wants(const struct h3_call *c)
{
    h3_learn_passed.c = NULL; /* the call at this address before was another */
    if (!h3_hot.learn_on || c->kind == H3_KIND_SYNC)
        return false;
    if (atomic_load_explicit(&h3_hot.learn_closed, memory_order_relaxed) || h3_learner_failed) {
        h3_thread.learn_gemms = false; /* closed, stopped looking, or out of memory: idle */
        return false;
    }
    uint64_t id = h3_learn_identity(c);
    if (h3_thread.learn_quiet && h3_learn_quiet_passes(c, id))
        return false;
    struct h3_learn_place at = {0, 0};
    enum h3_learn_skip why = id != 0 ? h3_learn_passes(c, id, &at) : H3_COUNT_KEPT;
    if (id != 0 && why == H3_COUNT_KEPT) {
        h3_learn_asked = (struct h3_learn_asked){c, id}; /* h3_learn_observe takes it */
        return true;
    }
    if (id != 0 && c->kind == H3_KIND_LAUNCH)
        h3_learn_passed = (__typeof__(h3_learn_passed)){c, {h3_learn_prev[0], h3_learn_prev[1]}, id, at.island, at.pos};
    h3_learn_pass(c, id, why);
    return false;
}

/* The first of the entries where a launch of `handle` after `before` may be
 * noted.  Sets of ways, and a full set's way replaced at random: a layer's
 * launches that fall in one set, more than it holds, must not evict each
 * other at every layer (least recently noted would, as they come in turn). */
static inline unsigned h3_learn_fast_set(const void *handle, const uint64_t before[2])
{
    uint64_t h = h3_learn_mix(h3_learn_mix((uint64_t)(uintptr_t)handle, before[0]), before[1]);
    return (unsigned)(h >> 48) & (H3_LEARN_FAST - H3_LEARN_FAST_WAYS);
}

static inline bool h3_learn_fast_is(const struct h3_learn_fast *f, const void *handle, const uint64_t before[2])
{
    return f->handle == handle && f->before[0] == before[0] && f->before[1] == before[1];
}

void h3_learn_fast_note(const struct h3_call *c, unsigned epoch)
{
    struct h3_learner *l = h3_learner_tls;
    bool passed = h3_learn_passed.c == c;
    h3_learn_passed.c = NULL;
    if (!passed || l == NULL || epoch == 0)
        return; /* not passed by as a refused group's; no learner (stopped); the epoch wrapped */
    if (h3_thread.refused_epoch != epoch) {
        memset(l->fast, 0, sizeof(l->fast));
        h3_thread.refused_epoch = epoch;
    }
    struct h3_learn_fast *set = &l->fast[h3_learn_fast_set(c->handle, h3_learn_passed.before)], *f = NULL;
    for (unsigned w = 0; w < H3_LEARN_FAST_WAYS && f == NULL; w++)
        if (set[w].handle == NULL || h3_learn_fast_is(&set[w], c->handle, h3_learn_passed.before))
            f = &set[w];
    if (f == NULL) {
        l->fast_victim = l->fast_victim * 6364136223846793005ull + 1442695040888963407ull;
        f = &set[(l->fast_victim >> 62) & (H3_LEARN_FAST_WAYS - 1)];
    }
    *f = (struct h3_learn_fast){c->handle, {h3_learn_passed.before[0], h3_learn_passed.before[1]}, h3_learn_passed.id,
                                {c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2], c->shmem},
                                h3_learn_passed.island, h3_learn_passed.pos, l->passed_gen};
}

bool h3_learn_gemm_refused(const struct h3_call *c)
{
    if (!h3_learn_looking())
        return false;
    uint64_t id = h3_learn_identity(c);
    struct h3_learn_place at;
    enum h3_learn_skip why = id != 0 ? h3_learn_passes(c, id, &at) : H3_COUNT_KEPT;
    if (why == H3_COUNT_KEPT)
        return false;
    h3_learn_pass(c, id, why);
    return true;
}

bool h3_learn_launch_refused(const void *handle, const unsigned dims[H3_LAUNCH_DIMS], unsigned epoch)
{
    struct h3_learner *l = h3_learner_tls;
    if (h3_thread.refused_epoch != epoch || l == NULL || handle == NULL || h3_thread.learn_quiet ||
        (l->following && l->follow_n > 1) || !h3_learn_looking())
        return false; /* quiet: h3_call_decide notes it idle; following several places: h3_learn_passes narrows them */
    struct h3_learn_fast *f = &l->fast[h3_learn_fast_set(handle, h3_learn_prev)];
    unsigned w = 0;
    while (w < H3_LEARN_FAST_WAYS && !h3_learn_fast_is(&f[w], handle, h3_learn_prev))
        w++;
    if (w == H3_LEARN_FAST_WAYS || memcmp(f[w].dims, dims, sizeof(f[w].dims)) != 0)
        return false;
    /* A refused island's: its first call, the thread in no island, or the
     * thread's next in it; a refused group's only where the thread is in no
     * island (else the learner says whether the island goes on). */
    if (f[w].island != 0) {
        const struct h3_learn_island *s = &l->islands[f[w].island - 1];
        if (!s->refused || (f[w].pos != 0 ? h3_learn_cur.island != f[w].island || h3_learn_cur.pos != f[w].pos
                                          : h3_learn_cur.island != 0))
            return false;
        h3_learn_cur.island = f[w].island;
        h3_learn_cur.pos = f[w].pos;
        h3_learn_island_step();
    } else if (h3_learn_cur.island != 0 && h3_learn_cur.pos < l->islands[h3_learn_cur.island - 1].len) {
        return false; /* past the island's end, a refused group's call ends it as its closings did */
    }
    if (f[w].gen != l->passed_gen) { /* the passed set was emptied since it was noted */
        h3_learn_passed_add(l, f[w].id, f[w].island != 0);
        f[w].gen = l->passed_gen;
    }
    /* the call itself is not needed */
    h3_learn_pass(NULL, f[w].id, f[w].island != 0 ? H3_SKIP_ISLAND : H3_SKIP_REFUSED);
    return true;
}

/* Why a call whose identity is 0 cannot be kept. */
static enum h3_learn_skip h3_learn_skip_of(const struct h3_call *c)
{
    return c->kind == H3_KIND_LAUNCH                ? H3_SKIP_LAUNCH
           : c->fn == H3_FN_cublasLtMatmul          ? H3_SKIP_MATMUL
           : c->fn == H3_FN_cudnnBackendExecute     ? H3_SKIP_CUDNN
                                                    : H3_SKIP_OTHER;
}

/* Calls the learner could not keep, or that a signature took: no group runs across them. */
/* The per-call counts, kept per thread and added to the process's every
 * 256 (a shared counter would be a cache line every call writes), and when
 * the thread's learner goes or the stats are printed. */
static H3_TLS uint32_t h3_learn_pending[H3_COUNTS];

static void h3_learn_flush_pending(void)
{
    for (unsigned i = 0; i < H3_COUNTS; i++) {
        atomic_fetch_add_explicit(&h3_learn_counts.calls[i], h3_learn_pending[i], memory_order_relaxed);
        h3_learn_pending[i] = 0;
    }
}

static void h3_learn_count(unsigned what)
{
    if (++h3_learn_pending[what] == 256) {
        atomic_fetch_add_explicit(&h3_learn_counts.calls[what], h3_learn_pending[what], memory_order_relaxed);
        h3_learn_pending[what] = 0;
    }
}

/* What the learner did with the thread's last call it saw, for the trace. */
static H3_TLS const char *h3_learn_what;

const char *h3_learn_take_what(void)
{
    const char *what = h3_learn_what;
    h3_learn_what = NULL;
    return what;
}

static void h3_learn_break(enum h3_learn_skip why)
{
    h3_learn_what = h3_learn_skip_names[why];
    h3_learn_count(why);
    if (h3_learner_tls != NULL)
        h3_learn_gap = true;
}

static uint64_t h3_learn_gemm_key(int64_t transa, int64_t m, int64_t n, int64_t k)
{
    const int64_t v[4] = {transa, m, n, k};
    return h3_learn_mix_words(h3_learn_mix(H3_HASH_SEED, 4), v, 4) | 1;
}

/* A kept cuBLASLt GEMM's shape key (desc: transa at 2, m n k at 6-8). */
static uint64_t h3_learn_mm_key(const struct h3_learn_call *e)
{
    return h3_learn_gemm_key(e->u.mm.desc[2], e->u.mm.desc[6], e->u.mm.desc[7], e->u.mm.desc[8]);
}

/* What comes before the next call when this one cannot be kept: a cuBLASLt
 * GEMM described by its shape alone (a refused group's shape, record.c) is
 * its shape's key, so that the refused group's next call is refused after
 * it; anything else is a break (0). */
static uint64_t h3_learn_unkept_prev(const struct h3_call *c)
{
    if (c->fn != H3_FN_cublasLtMatmul || !c->detail || c->u.lt.m == 0)
        return 0;
    return h3_learn_gemm_key(c->u.lt.transa, c->u.lt.m, c->u.lt.n, c->u.lt.k);
}

bool h3_learn_wants_gemm(int32_t transa, int64_t m, int64_t n, int64_t k)
{
    return h3_learn_looking() && !h3_learn_refused(h3_learn_gemm_key(transa, m, n, k));
}

void h3_learn_sync(void)
{
    struct h3_learner *l = h3_learner_tls;
    if (l != NULL) {
        l->synced = true;
        h3_learn_count(H3_COUNT_SYNCED);
    }
}

/* ---- quiet: a thread whose every call the learner passes by ---- */

/* An identity's first slot in the passed set (identities end in a set bit). */
static inline unsigned h3_learn_passed_slot(uint64_t id, unsigned i)
{
    return (unsigned)((id >> 11) + i) & (H3_LEARN_PASSED - 1);
}

/* Whether identity `id` was passed by: as a refused group's call, or with
 * `islands` also as a refused island's only (kept as `id` with its last
 * bit clear, in the same slots). */
static bool h3_learn_passed_has(const struct h3_learner *l, uint64_t id, bool islands)
{
    for (unsigned i = 0; i < 8; i++) {
        uint64_t v = l->passed[h3_learn_passed_slot(id, i)];
        if (v == id || (islands && v == (id ^ 1)))
            return true;
        if (v == 0)
            return false;
    }
    return false;
}

/* Every identity forgotten; a refused launch's entry puts its own back
 * at its next pass (its gen differs). */
static void h3_learn_passed_clear(struct h3_learner *l)
{
    memset(l->passed, 0, sizeof(l->passed));
    l->passed_gen++;
}

/* Remembers identity `id` as passed by, as a refused island's call
 * (`island`) or a refused group's.  Where its slots are all taken (another
 * model's calls at many shapes), every identity is forgotten and the run of
 * calls passed by counts from 0: the thread goes quiet only once it passed
 * by that many calls whose identities are all in the set. */
static void h3_learn_passed_add(struct h3_learner *l, uint64_t id, bool island)
{
    const uint64_t key = island ? id ^ 1 : id;
    for (unsigned i = 0; i < 8; i++) {
        uint64_t *v = &l->passed[h3_learn_passed_slot(id, i)];
        if (*v == id || *v == key)
            return; /* a group's call, or an island's again */
        if (*v == 0 || (!island && *v == (id ^ 1))) {
            *v = key; /* new, or an island's now seen in a group */
            return;
        }
    }
    h3_learn_passed_clear(l);
    l->quiet_run = 0;
    l->passed[h3_learn_passed_slot(id, 0)] = key;
}

/*
 * The learner passed by call `c` (identity `id`; `c` NULL: a refused
 * launch its wrapper passed by, whose identity h3_learn_launch_refused put
 * in the set).  After H3SHIM_LEARN_QUIET of them in a row, with no call kept
 * and no signature's group run, the thread goes quiet: h3_call_decide
 * notes its launches idle, as with learning off, so that their wrappers
 * forward them unobserved (another model's calls, every group of which was
 * refused, cost what they cost with learning off).  What the idle path
 * does not forward is still looked at (h3_learn_quiet_passes).
 */
static void h3_learn_quiet_count(const struct h3_call *c, uint64_t id, enum h3_learn_skip why)
{
    struct h3_learner *l = h3_learner_tls;
    if (l == NULL || h3_config.learn_quiet <= 0)
        return;
    if (l->following) { /* h3_learn_passes woke it at any other call */
        if (why == H3_SKIP_REFUSED)
            h3_learn_follow_quiet(l);
        return;
    }
    if (c != NULL && id != 0)
        h3_learn_passed_add(l, id, why == H3_SKIP_ISLAND);
    if (++l->quiet_run < (uint64_t)h3_config.learn_quiet)
        return;
    if (l->quiet_hold != 0) { /* woken lately: awake a while yet */
        l->quiet_hold--;
        l->quiet_run = 0;
        return;
    }
    h3_thread.learn_quiet = true;
    h3_thread.learn_gemms = false; /* a GEMM of a refused shape is described by its shape alone */
    l->quiet_epoch = atomic_load_explicit(&h3_hot.idle_epoch, memory_order_acquire) + 1;
    atomic_fetch_add(&h3_learn_counts.quiet, 1);
    if (l->quiet_times++ == 0)
        H3_INFO(H3_SUB_HOOK, "%lld calls in a row passed by, none kept: this thread's calls take the idle path "
                             "until one comes that it did not pass by",
                (long long)h3_config.learn_quiet);
}

/* The thread is awake from call `c` on (quiet or following before): its
 * idle launches are noted anew once it is quiet again, after the hold. */
static void h3_learn_awake(struct h3_learner *l, const struct h3_call *c)
{
    h3_thread.learn_quiet = false;
    h3_thread.idle_keys_epoch = 0;
    const bool named = c->kind == H3_KIND_LAUNCH && c->kernel != NULL && c->kernel->name != NULL;
    if (atomic_fetch_add(&h3_learn_counts.woke, 1) == 0) /* the process's first wake */
        H3_INFO(H3_SUB_HOOK, "a quiet thread wakes at %s%s%s", h3_hooks[c->fn].name, named ? " of " : "",
                named ? c->kernel->name : "");
    if (l == NULL)
        return;
    l->following = false;
    l->quiet_run = 0;
    l->quiet_hold = H3_LEARN_INSTANCES;
}

/*
 * The thread stops being quiet: the learner looks at every call again,
 * after a gap (the calls forwarded while it was quiet were not seen, so no
 * island, cut or run goes on across them).  h3_call_decide forgets the
 * thread's idle launches.  It stays awake for H3_LEARN_INSTANCES runs of
 * H3SHIM_LEARN_QUIET calls passed by before it goes quiet again: another
 * model whose forward is longer than that, with calls between its layers
 * not refused yet, woke it at those calls, and they come three times,
 * after their refused calls, seen, before they are a refused island
 * (quiet at every forward, the wake cut each one's run: never refused,
 * kept at every forward).
 */
static void h3_learn_wake(struct h3_learner *l, const struct h3_call *c)
{
    h3_learn_awake(l, c);
    h3_learn_cur.island = 0;
    h3_learn_cut_pending = false;
    h3_learn_prev[0] = h3_learn_prev[1] = 0;
    if (l == NULL)
        return;
    l->acc_open = false;
    l->cut_len = 0;
    h3_learn_gap = true;
}

/*
 * A quiet thread's library call whose identity it passed by only as a
 * refused island's (a cuBLASLt GEMM, a cuDNN execution between another
 * model's layers): rather than wake, the thread follows that island from
 * the call, awake (h3_call_decide sets its idle launches aside), as if the
 * island's calls before it had come.  Where the rest of the island comes in
 * order and a refused group's call after it, the thread is quiet again
 * (h3_learn_quiet_count): another model whose every forward has such a call
 * stays quiet.  A call that differs before that wakes the thread there
 * (h3_learn_follow_left): a block that begins as the island does is seen
 * from where it differs.  Every place in the refused islands that holds
 * `id` is followed at once (the calls before it were not seen, so which
 * is not known); false when none does, or more than H3_LEARN_FOLLOW do.
 */
static bool h3_learn_follow_island(struct h3_learner *l, uint64_t id)
{
    unsigned n = 0;
    for (unsigned i = 0; i < H3_LEARN_ISLANDS; i++)
        for (uint32_t p = 0; l->islands[i].refused && p < l->islands[i].len; p++)
            if (l->islands[i].ids[p] == id && n++ < H3_LEARN_FOLLOW)
                l->follow[n - 1] = (__typeof__(l->follow[0])){(uint8_t)(i + 1), (uint8_t)(p + 1), (uint8_t)(p + 1)};
    if (n == 0 || n > H3_LEARN_FOLLOW)
        return false; /* more places than it can follow: one left out may be the thread's, so it wakes */
    const struct h3_learn_island *s = &l->islands[l->follow[0].island - 1];
    const unsigned p = l->follow[0].pos - 1u;
    h3_thread.learn_quiet = false;
    l->following = true;
    l->follow_n = (uint8_t)n;
    h3_learn_cur.island = l->follow[0].island;
    h3_learn_cur.pos = l->follow[0].pos;
    h3_learn_cut_pending = false;
    h3_learn_prev[0] = p >= 1 ? s->ids[p - 1] : s->pre[1]; /* the first place's, a guess where there are several */
    h3_learn_prev[1] = id;
    l->acc_open = false;
    l->cut_len = 0;
    h3_learn_gap = true; /* the calls before it were not seen */
    atomic_fetch_add(&h3_learn_counts.followed, 1);
    return true;
}

/*
 * A thread following from a call that several places in the refused
 * islands hold: only the places whose next call is `c` (identity `id`) stay,
 * and the thread's place in its island is the first of them, so that
 * h3_learn_passes steps it.  Where none stays, a place at its island's end
 * before a refused group's call is the thread's (the island came whole); or
 * the places stay as they were, and the call leaves them
 * (h3_learn_follow_left).  One place left is the thread's alone from then.
 */
static void h3_learn_follow_narrow(struct h3_learner *l, const struct h3_call *c, uint64_t id)
{
    unsigned k = 0;
    for (unsigned j = 0; j < l->follow_n; j++) {
        const struct h3_learn_island *s = &l->islands[l->follow[j].island - 1];
        if (s->refused && l->follow[j].pos < s->len && s->ids[l->follow[j].pos] == id) {
            l->follow[k] = l->follow[j];
            l->follow[k++].pos++;
        }
    }
    if (k != 0) {
        l->follow_n = (uint8_t)k;
        h3_learn_cur.island = l->follow[0].island;
        h3_learn_cur.pos = (uint8_t)(l->follow[0].pos - 1); /* h3_learn_passes steps it */
        return;
    }
    for (unsigned j = 0; j < l->follow_n; j++) {
        if (l->follow[j].pos == l->islands[l->follow[j].island - 1].len && h3_learn_refused_here(c, id)) {
            l->follow[0] = l->follow[j];
            l->follow_n = 1;
            h3_learn_cur.island = l->follow[0].island;
            h3_learn_cur.pos = l->follow[0].pos;
            return;
        }
    }
}

/* Whether call `c` (identity `id`), which does not continue the island a
 * following thread is in, is a refused group's right after its end: the
 * island came whole.  Any other call wakes the thread, leaving the island
 * unbroken (the calls before the one it followed from were not seen). */
static bool h3_learn_follow_ends(const struct h3_learner *l, const struct h3_call *c, uint64_t id)
{
    return h3_learn_cur.island != 0 && h3_learn_cur.pos == l->islands[h3_learn_cur.island - 1].len &&
           h3_learn_refused_here(c, id);
}

/*
 * A following thread met call `c`, which neither continues the island nor
 * is a refused group's after its end: it is awake from there.  Where the
 * calls since the one it followed from left one place in the islands, and
 * at least one came, its place is taken as known: the call breaks the
 * island as it would awake (a block that begins as the island does), the
 * calls it passed by in it a cut in the run the call begins.  Otherwise the
 * call it followed from may have been another island's, or another place's
 * in this one: it wakes as at any other call, every island left unbroken.
 */
static void h3_learn_follow_left(struct h3_learner *l, const struct h3_call *c)
{
    if (l->follow_n != 1 || h3_learn_cur.island == 0 || h3_learn_cur.pos <= l->follow[0].from) {
        h3_learn_wake(l, c);
        return;
    }
    h3_learn_awake(l, c);
}

/* The island came whole and a refused group's call after it: the thread is
 * quiet again as before it followed, and the kernels it had noted idle are
 * idle again at once, as its next idle note would make them (h3_idle_note:
 * their epoch is kept until a wake or a change of what can begin a group or
 * what a handle names). */
static void h3_learn_follow_quiet(struct h3_learner *l)
{
    l->following = false;
    h3_thread.learn_quiet = true;
    h3_thread.learn_gemms = false;
    const unsigned epoch = atomic_load_explicit(&h3_hot.idle_epoch, memory_order_acquire) + 1;
    if (h3_thread.idle_keys_epoch == epoch) /* 0 where none were noted since a wake: none then */
        h3_thread.idle_epoch = epoch;
}

/*
 * A call that the idle path did not forward while the thread is quiet
 * (a launch of a kernel not noted idle, a cuBLASLt GEMM, a cuDNN
 * execution, any call while something watches): passed by when it is
 * one the learner cannot keep, or when its identity is one the learner
 * passed by before (the calls before it were not seen, so it is not asked
 * whether it comes where it came): a launch's as a refused group's or
 * island's call, a library call's as a refused group's only.  An island is
 * another model's calls outside its layers, passed by only where they come
 * in order after the same two calls; where they are the block's own (a
 * block that begins as the island does), the block's GEMMs and attention
 * must wake the thread, as they would break the island.  Any other call
 * wakes it, and so does the first after what can begin a group or what a
 * handle names changed (its identities may be another kernel's then).
 */
static bool h3_learn_quiet_passes(const struct h3_call *c, uint64_t id)
{
    struct h3_learner *l = h3_learner_tls;
    if (l != NULL && l->quiet_epoch != atomic_load_explicit(&h3_hot.idle_epoch, memory_order_acquire) + 1)
        h3_learn_passed_clear(l);
    else if (l != NULL && (id == 0 || h3_learn_passed_has(l, id, c->kind == H3_KIND_LAUNCH) ||
                           (c->kind != H3_KIND_LAUNCH && h3_learn_passed_has(l, id, true) && h3_learn_follow_island(l, id)))) {
        enum h3_learn_skip why = id != 0 ? H3_SKIP_QUIET : h3_learn_skip_of(c);
        h3_learn_what = h3_learn_skip_names[why];
        h3_learn_count(why);
        return true;
    }
    h3_learn_wake(l, c);
    return false;
}

/* ---- the ring ---- */

static struct h3_learn_call *h3_learn_at(struct h3_learner *l, uint64_t pos)
{
    return &l->ring[pos % H3_LEARN_RING];
}

/* Where a kept launch's sizes (uint16 each) and then bytes lie; NULL when
 * the byte ring overwrote them. */
static const uint8_t *h3_learn_bytes_of(const struct h3_learner *l, const struct h3_learn_call *e)
{
    if (l->bytes_head - e->at > H3_LEARN_BYTES)
        return NULL;
    return l->bytes + e->at % H3_LEARN_BYTES;
}

static const uint16_t *h3_learn_sizes(const struct h3_learner *l, const struct h3_learn_call *e)
{
    return (const uint16_t *)(const void *)h3_learn_bytes_of(l, e);
}

/* Parameter p's bytes of a kept launch (its sizes must be known). */
static const uint8_t *h3_learn_param(const struct h3_learner *l, const struct h3_learn_call *e, uint32_t p)
{
    const uint8_t *b = h3_learn_bytes_of(l, e);
    const uint16_t *sizes = (const uint16_t *)(const void *)b;
    size_t off = ((size_t)e->nparams * 2 + 7) & ~(size_t)7;
    for (uint32_t i = 0; i < p; i++)
        off += sizes[i];
    return b + off;
}

/* Keeps a launch's sizes and bytes; false when it has too many. */
static bool h3_learn_keep_bytes(struct h3_learner *l, struct h3_learn_call *e, const struct h3_call *c)
{
    size_t head = ((size_t)c->nparams * 2 + 7) & ~(size_t)7, total = head;
    for (uint32_t i = 0; i < c->nparams; i++) {
        if (c->param_sizes[i] < 1 || c->param_sizes[i] > 4096)
            return false;
        total += c->param_sizes[i];
    }
    if (total > H3_LEARN_CALL_BYTES)
        return false;
    uint64_t at = (l->bytes_head + 7) & ~7ull;
    if (at % H3_LEARN_BYTES + total > H3_LEARN_BYTES)
        at += H3_LEARN_BYTES - at % H3_LEARN_BYTES; /* wrap: a call's bytes lie together */
    uint8_t *b = l->bytes + at % H3_LEARN_BYTES;
    memcpy(b, c->param_sizes, (size_t)c->nparams * 2);
    size_t off = head;
    for (uint32_t i = 0; i < c->nparams; i++) {
        memcpy(b + off, c->args[i], c->param_sizes[i]);
        off += c->param_sizes[i];
    }
    e->at = at;
    e->len = (uint32_t)total;
    l->bytes_head = at + total;
    return true;
}

/* Fills the ring entry of a call; false when it cannot be kept (a gap then). */
static bool h3_learn_keep(struct h3_learner *l, struct h3_learn_call *e, const struct h3_call *c, uint64_t id)
{
    memset(e, 0, offsetof(struct h3_learn_call, u));
    e->id = id;
    e->stream = c->stream;
    e->mark = h3_released_mark();
    e->synced = l->synced;
    l->synced = false;
    if (c->kind == H3_KIND_LAUNCH) {
        e->kind = H3_SIG_LAUNCH;
        e->kernel = c->kernel;
        memcpy(e->grid, c->grid, sizeof(e->grid));
        memcpy(e->block, c->block, sizeof(e->block));
        e->shmem = c->shmem;
        e->nparams = c->nparams;
        return h3_learn_keep_bytes(l, e, c);
    }
    if (c->fn == H3_FN_cublasLtMatmul) {
        const struct h3_lt_desc *lt = &c->u.lt;
        e->kind = H3_SIG_MATMUL;
        h3_match_lt_values(lt, e->u.mm.desc, e->u.mm.algo);
        e->u.mm.have_algo = lt->have_algo;
        const void *ops[H3_SIG_OPERANDS] = {lt->A, lt->B, lt->C, lt->D, lt->bias};
        for (unsigned i = 0; i < H3_SIG_OPERANDS; i++)
            e->u.mm.ptr[i] = (uint64_t)(uintptr_t)ops[i];
        e->u.mm.workspace = (uint64_t)(uintptr_t)lt->workspace_ptr;
        return true;
    }
    if (c->fn != H3_FN_cudnnBackendExecute) { /* a cuBLAS GEMM: its identity alone */
        e->kind = H3_LEARN_OPAQUE;
        return true;
    }
    const struct h3_cudnn_desc *d = &c->u.dnn;
    e->kind = H3_SIG_CUDNN;
    e->u.dnn.n = (uint32_t)d->count;
    memcpy(e->u.dnn.uids, d->uids, sizeof(e->u.dnn.uids));
    for (uint32_t i = 0; i < e->u.dnn.n; i++)
        e->u.dnn.ptrs[i] = (uint64_t)(uintptr_t)d->ptrs[i];
    e->u.dnn.workspace = (uint64_t)(uintptr_t)d->workspace;
    return true;
}

/* ---- deriving a signature from the instances (record_signature.py's rules) ---- */

struct h3_learn_slot {
    uint16_t param, offset; /* launch: parameter, byte offset; matmul: operand; cudnn: uid index */
    int64_t uid;
    uint64_t v[H3_LEARN_INSTANCES];
    int ref; /* -1 first, -2 null, else index of the referred slot in the group's slot list */
    int64_t delta;
    int root;        /* the group slot index of the buffer's first slot */
    int64_t offset_in_root;
    uint32_t call;
};

struct h3_learn_range {
    uint16_t param, a, b;
};

struct h3_learn_pos {
    const struct h3_learn_call *e[H3_LEARN_INSTANCES];
    uint32_t first_slot, nslots; /* into the group's slot list */
    struct h3_learn_range unused[64];
    unsigned nunused;
    uint32_t masked[64]; /* param << 16 | offset of words that are padding */
    unsigned nmasked;
};

struct h3_learn_group {
    const struct h3_learner *l;
    uint32_t n;
    struct h3_learn_pos *pos;
    struct h3_learn_slot *slots;
    uint32_t nslots, cap;
    uint64_t *known; /* device addresses for certain, sorted */
    uint32_t nknown, capknown;
};

static struct h3_learn_slot *h3_learn_slot_new(struct h3_learn_group *g)
{
    if (g->nslots == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 256;
        struct h3_learn_slot *s = realloc(g->slots, cap * sizeof(*s));
        if (s == NULL)
            return NULL;
        g->slots = s, g->cap = cap;
    }
    struct h3_learn_slot *s = &g->slots[g->nslots++];
    memset(s, 0, sizeof(*s));
    return s;
}

static int h3_learn_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool h3_learn_known_add(struct h3_learn_group *g, uint64_t v)
{
    if (v == 0)
        return true;
    if (g->nknown == g->capknown) {
        uint32_t cap = g->capknown ? g->capknown * 2 : 1024;
        uint64_t *k = realloc(g->known, cap * sizeof(*k));
        if (k == NULL)
            return false;
        g->known = k, g->capknown = cap;
    }
    g->known[g->nknown++] = v;
    return true;
}

/* Whether `v` is a device address for certain or within H3_LEARN_DEVICE_RADIUS
 * of one: the library calls' operands and the words accepted so far
 * (record_signature.py's rule), or memory the caching allocator reported
 * (what a trace does not hold: buffers PyTorch's allocator put in segments
 * far from every GEMM's operands). */
static bool h3_learn_near(const struct h3_learn_group *g, uint64_t v)
{
    if (h3_released_device_address(v))
        return true;
    uint32_t lo = 0, hi = g->nknown;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (g->known[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < g->nknown && g->known[lo] - v <= H3_LEARN_DEVICE_RADIUS)
        return true;
    return lo > 0 && v - g->known[lo - 1] <= H3_LEARN_DEVICE_RADIUS;
}

static uint64_t h3_learn_word(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t h3_learn_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Whether data[off, off+12) is IntDivider<uint32_t>(d) for some d >= 1. */
static bool h3_learn_int_divider(const uint8_t *data, size_t off)
{
    uint64_t d = h3_learn_u32(data + off), m1 = h3_learn_u32(data + off + 4), shift = h3_learn_u32(data + off + 8);
    if (d < 1 || shift > 32 || (1ull << shift) < d || (shift > 0 && (1ull << (shift - 1)) >= d))
        return false;
    return m1 == (uint32_t)(((1ull << 32) * ((1ull << shift) - d)) / d + 1);
}

#define H3_OC_MAX_DIMS 25
#define H3_OC_DIVIDER 12

static bool h3_learn_is_slot(const struct h3_learn_group *g, const struct h3_learn_pos *pos, uint32_t p, size_t off)
{
    for (uint32_t i = pos->first_slot; i < pos->first_slot + pos->nslots; i++)
        if (g->slots[i].param == p && g->slots[i].offset == off)
            return true;
    return false;
}

static void h3_learn_unused(struct h3_learn_pos *pos, uint32_t p, size_t a, size_t b)
{
    if (b > a && pos->nunused < H3_ARRAY_LEN(pos->unused))
        pos->unused[pos->nunused++] = (struct h3_learn_range){(uint16_t)p, (uint16_t)a, (uint16_t)b};
}

static bool h3_learn_in_unused(const struct h3_learn_pos *pos, uint32_t p, size_t off)
{
    for (unsigned i = 0; i < pos->nunused; i++)
        if (pos->unused[i].param == p && pos->unused[i].a <= off && off < pos->unused[i].b)
            return true;
    return false;
}

/* CatArrayBatchedCopy's metadata parameter: the entries past grid.y. */
static void h3_learn_cat_unused(struct h3_learn_pos *pos, const char *kernel, size_t size)
{
    const char *m = strstr(kernel, "CatArrayBatchedCopyI");
    if (m == NULL)
        return;
    /* The first "E[jm]Li<dims>ELi<batch>ELi<stride>EEEv" after it. */
    char it = 0;
    int dims = -1, batch = -1, stride = -1;
    for (const char *x = m; x[0] != '\0' && it == 0; x++) {
        int used = 0;
        if (x[0] == 'E' && (x[1] == 'j' || x[1] == 'm') && x[2] == 'L' && x[3] == 'i' &&
            (sscanf(x + 1, "%cLi%dELi%dELi%dEEEv%n", &it, &dims, &batch, &stride, &used) != 4 || used == 0))
            it = 0;
    }
    if (it == 0 || dims < 0 || batch < 0 || stride < 0)
        return;
    size_t index = it == 'j' ? 4 : 8;
    size_t entries[6] = {8, index, index, index, 1, 2 * (size_t)dims * index};
    size_t counts[6] = {(size_t)batch, (size_t)batch, (size_t)batch, (size_t)batch, (size_t)batch, (size_t)stride};
    size_t starts[6], off = 0;
    for (int i = 0; i < 6; i++) {
        size_t align = i == 5 ? index : entries[i];
        off = (off + align - 1) / align * align;
        starts[i] = off;
        off += entries[i] * counts[i];
    }
    if ((off + 7) / 8 * 8 != size)
        return;
    size_t used = pos->e[0]->grid[1];
    for (int i = 0; i < 6; i++)
        if (used < counts[i])
            h3_learn_unused(pos, 1, starts[i] + entries[i] * used, starts[i] + entries[i] * counts[i]);
}

static const char *const h3_learn_empty_functors[] = {
    "float16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_",
    "direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE5_clEvEUlfE_",
};
#define H3_LEARN_VECTORIZED "_ZN2at6native29vectorized_elementwise_kernel"
#define H3_LEARN_LEGACY "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_impl"

/* Whether the kernel is one of PyTorch's elementwise kernels that take a lambda closure. */
static bool h3_learn_closure_kernel(const char *k)
{
    if (strncmp(k, H3_LEARN_VECTORIZED, strlen(H3_LEARN_VECTORIZED)) == 0)
        return true;
    const char *pre = "_ZN2at6native18elementwise_kernelILi";
    if (strncmp(k, pre, strlen(pre)) != 0)
        return false;
    k += strlen(pre);
    while (*k >= '0' && *k <= '9')
        k++;
    if (strncmp(k, "ELi", 3) != 0)
        return false;
    k += 3;
    while (*k >= '0' && *k <= '9')
        k++;
    return strncmp(k, "EZNS0_15gpu_kernel_implI", 24) == 0 || strncmp(k, "EZNS0_22gpu_kernel_impl_nocastI", 31) == 0;
}

/* The bytes of launch `pos` that its kernel cannot read (record_signature.py's unused_ranges). */
static void h3_learn_mask_unused(const struct h3_learn_group *g, struct h3_learn_pos *pos)
{
    const struct h3_learn_call *e = pos->e[0];
    const char *kernel = e->kernel->name;
    bool empty = false;
    for (size_t i = 0; i < H3_ARRAY_LEN(h3_learn_empty_functors); i++)
        empty |= strstr(kernel, h3_learn_empty_functors[i]) != NULL;
    const uint16_t *sizes = h3_learn_sizes(g->l, e);
    for (uint32_t p = 0; p < e->nparams; p++) {
        const uint8_t *data = h3_learn_param(g->l, e, p);
        size_t size = sizes[p];
        unsigned before = pos->nunused;
        if (p == 1)
            h3_learn_cat_unused(pos, kernel, size);
        if (empty && strncmp(kernel, H3_LEARN_VECTORIZED, strlen(H3_LEARN_VECTORIZED)) == 0 && p == 1 && size == 1)
            h3_learn_unused(pos, p, 0, 1);
        const size_t span = 4 + H3_OC_MAX_DIMS * H3_OC_DIVIDER;
        for (size_t off = 0; size > span && off < size - span; off += 4) {
            uint32_t dims = h3_learn_u32(data + off);
            if (dims < 1 || dims > H3_OC_MAX_DIMS)
                continue;
            bool ok = true;
            for (uint32_t i = 0; i < dims && ok; i++)
                ok = h3_learn_int_divider(data, off + 4 + H3_OC_DIVIDER * i);
            if (!ok)
                continue;
            size_t strides = off + span;
            for (size_t nargs = 1; nargs <= 8; nargs++) {
                size_t end = strides + 4 * H3_OC_MAX_DIMS * nargs, first = (end + 7) / 8 * 8;
                bool all = first + 8 * nargs <= size && !h3_learn_is_slot(g, pos, p, first + 8 * nargs);
                for (size_t k = 0; all && k < nargs; k++)
                    all = h3_learn_is_slot(g, pos, p, first + 8 * k);
                if (!all)
                    continue;
                h3_learn_unused(pos, p, off + 4 + H3_OC_DIVIDER * dims, strides);
                h3_learn_unused(pos, p, strides + 4 * dims * nargs, strides + 4 * H3_OC_MAX_DIMS * nargs);
                if (empty && strncmp(kernel, H3_LEARN_LEGACY, strlen(H3_LEARN_LEGACY)) == 0) {
                    size_t functor = (strides + 4 * H3_OC_MAX_DIMS * nargs + 7) / 8 * 8 + 8 * nargs;
                    size_t tail = functor + 1 + nargs;
                    if (tail <= size) {
                        h3_learn_unused(pos, p, functor, functor + 1);
                        h3_learn_unused(pos, p, tail, size);
                    }
                }
                break;
            }
        }
        if (p == 1 && h3_learn_closure_kernel(kernel) && size % 8 == 0 && size >= 16) {
            size_t last = size - 8;
            bool differs = false;
            for (unsigned k = 1; k < H3_LEARN_INSTANCES; k++)
                differs |= memcmp(h3_learn_param(g->l, pos->e[k], p) + last, data + last, 8) != 0;
            bool overlaps = false;
            for (unsigned i = before; i < pos->nunused; i++)
                overlaps |= pos->unused[i].a < size && last < pos->unused[i].b;
            /* In one process the host address there is the same in every
             * instance of a thread, until a capture or another code path
             * moves it (record_signature.py sees it differ between
             * processes): a value that is no pointer slot and looks like a
             * host address (16 MiB to the top of user space, where no double
             * but a tiny one lies) is masked too.  A call no op replaces is
             * issued with its own bytes whatever the signature compares. */
            uint64_t word = h3_learn_word(data + last);
            bool host = word >= (16ull << 20) && word < H3_LEARN_HOST_HIGH && !h3_learn_is_slot(g, pos, p, last);
            if ((differs || host) && !overlaps)
                h3_learn_unused(pos, p, last, size);
        }
    }
    /* Pointer slots found where the kernel cannot read are stale values: dropped. */
    uint32_t w = pos->first_slot;
    for (uint32_t i = pos->first_slot; i < pos->first_slot + pos->nslots; i++)
        if (!h3_learn_in_unused(pos, g->slots[i].param, g->slots[i].offset))
            g->slots[w++] = g->slots[i];
    pos->nslots = w - pos->first_slot;
}

/* The launches' pointer slots: 8-byte words that are, in every instance, 0 or
 * near a device address known for certain, growing that set to a fixpoint. */
static bool h3_learn_find_slots(struct h3_learn_group *g)
{
    /* Known for certain: the library calls' operands and workspaces, of every call kept. */
    uint64_t oldest = g->l->n > H3_LEARN_RING ? g->l->n - H3_LEARN_RING : 0;
    for (uint64_t at = oldest; at < g->l->n; at++) {
            const struct h3_learn_call *e = &g->l->ring[at % H3_LEARN_RING];
            if (e->kind == H3_SIG_MATMUL) {
                for (unsigned i = 0; i < H3_SIG_OPERANDS; i++)
                    if (!h3_learn_known_add(g, e->u.mm.ptr[i]))
                        return false;
                if (!h3_learn_known_add(g, e->u.mm.workspace))
                    return false;
            } else if (e->kind == H3_SIG_CUDNN && !h3_learn_known_add(g, e->u.dnn.workspace)) {
                return false;
            }
        }
    if (g->nknown > 1) /* fewer: nothing to sort (none: a group of launches alone, g->known not made) */
        qsort(g->known, g->nknown, sizeof(uint64_t), h3_learn_u64_cmp);
    /* The words of every launch, accepted or not yet; one bit each. */
    uint32_t nwords = 0;
    for (uint32_t j = 0; j < g->n; j++)
        if (g->pos[j].e[0]->kind == H3_SIG_LAUNCH)
            nwords += g->pos[j].e[0]->len / 8 + 1;
    uint8_t *state = calloc(nwords ? nwords : 1, 1); /* 0 candidate, 1 accepted, 2 never */
    if (state == NULL)
        return false;
    bool changed = true;
    while (changed) {
        changed = false;
        uint32_t w = 0;
        bool added = false;
        for (uint32_t j = 0; j < g->n; j++) {
            const struct h3_learn_pos *pos = &g->pos[j];
            if (pos->e[0]->kind != H3_SIG_LAUNCH)
                continue;
            const uint16_t *sizes = h3_learn_sizes(g->l, pos->e[0]);
            uint32_t base = w;
            for (uint32_t p = 0; p < pos->e[0]->nparams; p++)
                for (size_t off = 0; off + 8 <= sizes[p]; off += 8, w++) {
                    if (state[w] != 0)
                        continue;
                    bool any = false, near = true;
                    for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++) {
                        uint64_t v = h3_learn_word(h3_learn_param(g->l, pos->e[k], p) + off);
                        any |= v != 0;
                        near &= v == 0 || h3_learn_near(g, v);
                    }
                    if (!any) {
                        state[w] = 2;
                        continue;
                    }
                    if (!near)
                        continue;
                    state[w] = 1;
                    changed = added = true;
                    for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
                        if (!h3_learn_known_add(g, h3_learn_word(h3_learn_param(g->l, pos->e[k], p) + off))) {
                            free(state);
                            return false;
                        }
                }
            w = base + pos->e[0]->len / 8 + 1;
        }
        if (added)
            qsort(g->known, g->nknown, sizeof(uint64_t), h3_learn_u64_cmp);
    }
    /* The slots, in call order. */
    uint32_t w = 0;
    for (uint32_t j = 0; j < g->n; j++) {
        struct h3_learn_pos *pos = &g->pos[j];
        pos->first_slot = g->nslots;
        const struct h3_learn_call *e0 = pos->e[0];
        if (e0->kind == H3_SIG_LAUNCH) {
            const uint16_t *sizes = h3_learn_sizes(g->l, e0);
            uint32_t base = w;
            for (uint32_t p = 0; p < e0->nparams; p++)
                for (size_t off = 0; off + 8 <= sizes[p]; off += 8, w++) {
                    if (state[w] != 1)
                        continue;
                    uint64_t v[H3_LEARN_INSTANCES];
                    bool zero = false;
                    for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
                        zero |= (v[k] = h3_learn_word(h3_learn_param(g->l, pos->e[k], p) + off)) == 0;
                    if (zero) { /* 0 in some instances only: padding */
                        if (pos->nmasked < H3_ARRAY_LEN(pos->masked))
                            pos->masked[pos->nmasked++] = p << 16 | (uint32_t)off;
                        else
                            goto fail;
                        continue;
                    }
                    struct h3_learn_slot *s = h3_learn_slot_new(g);
                    if (s == NULL)
                        goto fail;
                    s->param = (uint16_t)p, s->offset = (uint16_t)off, s->call = j;
                    memcpy(s->v, v, sizeof(v));
                }
            w = base + e0->len / 8 + 1;
        } else if (e0->kind == H3_SIG_MATMUL) {
            for (unsigned i = 0; i < H3_SIG_OPERANDS; i++) {
                struct h3_learn_slot *s = h3_learn_slot_new(g);
                if (s == NULL)
                    goto fail;
                s->param = (uint16_t)i, s->call = j;
                for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
                    s->v[k] = pos->e[k]->u.mm.ptr[i];
            }
        } else {
            for (uint32_t u = 0; u < e0->u.dnn.n; u++) {
                uint64_t v[H3_LEARN_INSTANCES];
                bool near = true, any = false;
                for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++) {
                    v[k] = pos->e[k]->u.dnn.ptrs[u];
                    near &= h3_learn_near(g, v[k]);
                    any |= v[k] != 0;
                }
                if (!near && any)
                    continue; /* a pointer to a host scalar: not compared */
                struct h3_learn_slot *s = h3_learn_slot_new(g);
                if (s == NULL)
                    goto fail;
                s->param = (uint16_t)u, s->uid = e0->u.dnn.uids[u], s->call = j;
                memcpy(s->v, v, sizeof(v));
            }
        }
        pos->nslots = g->nslots - pos->first_slot;
        if (e0->kind == H3_SIG_LAUNCH)
            h3_learn_mask_unused(g, pos);
        g->nslots = pos->first_slot + pos->nslots;
    }
    free(state);
    return true;
fail:
    free(state);
    return false;
}

/* The bytes a matmul operand spans, from its layout; 0 unknown. */
static uint64_t h3_learn_extent(const struct h3_learn_call *e, unsigned operand)
{
    if (e->kind != H3_SIG_MATMUL || operand > 3)
        return 0;
    const int64_t *l = &e->u.mm.desc[10 + 7 * operand]; /* type order rows cols ld batch stride */
    static const struct {
        int type, size;
    } sizes[] = {{0, 4}, {1, 8}, {2, 2}, {3, 1}, {8, 1}, {10, 4}, {14, 2}, {28, 1}, {29, 1}};
    int size = 0;
    for (size_t i = 0; i < H3_ARRAY_LEN(sizes); i++)
        if (sizes[i].type == l[0])
            size = sizes[i].size;
    if (size == 0)
        return 0;
    int64_t columns = l[1] == 0 ? l[3] : l[2];
    int64_t n = l[4] * columns + l[6] * (l[5] > 1 ? l[5] - 1 : 0);
    return n > 0 ? (uint64_t)n * (uint64_t)size : 0;
}

/* Whether slot t plus d bytes lies in t's buffer for certain. */
static bool h3_learn_inside(const struct h3_learn_group *g, int t, int64_t d)
{
    const struct h3_learn_slot *target = &g->slots[t];
    const struct h3_learn_slot *root = &g->slots[target->root];
    int64_t offset = target->offset_in_root + d;
    uint64_t extent = h3_learn_extent(g->pos[root->call].e[0], root->param);
    return (offset > 0 && offset < H3_LEARN_GRANULE) || (extent != 0 && offset > 0 && (uint64_t)offset < extent);
}

/*
 * Whether the allocator reported the buffer at slot o's value freed between
 * o's call and s's in some instance whose frees are still known: then s
 * holding o's value was the allocator handing the freed address out again,
 * not dataflow, and s is no reference to o.  (What record_signature.py
 * cannot see in a trace, and learns only from instances that disagree.)
 */
static bool h3_learn_reused(const struct h3_learn_group *g, const struct h3_learn_slot *o,
                            const struct h3_learn_slot *s)
{
    for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++) {
        struct h3_span at = {o->v[k], o->v[k] + 1};
        if (h3_released_between(g->pos[o->call].e[k]->mark, g->pos[s->call].e[k]->mark, at) == 1)
            return true;
    }
    return false;
}

/* Every slot's reference (record_signature.py's wire); false when the
 * instances disagree for certain. */
static bool h3_learn_wire(struct h3_learn_group *g)
{
    for (uint32_t i = 0; i < g->nslots; i++) {
        struct h3_learn_slot *s = &g->slots[i];
        s->root = (int)i, s->offset_in_root = 0, s->ref = -1, s->delta = 0;
        unsigned zeros = 0;
        for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
            zeros += s->v[k] == 0;
        if (zeros == H3_LEARN_INSTANCES) {
            s->ref = -2;
            continue;
        }
        if (zeros != 0)
            return false; /* a matmul's or cuDNN's pointer 0 in some instances only */
        int best = -1;
        int64_t best_d = 0;
        for (uint32_t t = 0; t < g->nslots && g->slots[t].call < s->call; t++) {
            const struct h3_learn_slot *o = &g->slots[t];
            /* A candidate holds in every instance with one offset. */
            int64_t d = (int64_t)(s->v[0] - o->v[0]);
            bool holds = o->v[0] != 0 && (d == 0 || (d > 0 && h3_learn_inside(g, (int)t, d)));
            for (unsigned k = 1; k < H3_LEARN_INSTANCES && holds; k++)
                holds = o->v[k] != 0 && (int64_t)(s->v[k] - o->v[k]) == d;
            if (!holds || (d == 0 && h3_learn_reused(g, o, s)))
                continue;
            /* min by (d != 0, d, -call, -slot): later slots win ties */
            if (best < 0 || (d != 0) < (best_d != 0) || ((d != 0) == (best_d != 0) && d < best_d) ||
                ((d != 0) == (best_d != 0) && d == best_d))
                best = (int)t, best_d = d;
        }
        if (best >= 0) {
            s->ref = best, s->delta = best_d;
            s->root = g->slots[best].root;
            s->offset_in_root = g->slots[best].offset_in_root + best_d;
        }
    }
    /* A "first" slot equal to an earlier buffer in some instances, while a
     * later matmul reads that buffer through a reference to exactly it:
     * the instances disagree on the wiring (check_coincidences). */
    for (uint32_t i = 0; i < g->nslots; i++) {
        const struct h3_learn_slot *s = &g->slots[i];
        if (s->ref != -1)
            continue;
        for (uint32_t t = 0; t < g->nslots && g->slots[t].call < s->call; t++) {
            bool some = false;
            for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
                some |= g->slots[t].v[k] == s->v[k] && s->v[k] != 0;
            if (!some)
                continue;
            for (uint32_t r = i + 1; r < g->nslots; r++) {
                const struct h3_learn_slot *later = &g->slots[r];
                if (later->call > s->call && g->pos[later->call].e[0]->kind == H3_SIG_MATMUL &&
                    (later->param == 0 || later->param == 1 || later->param == 4) && later->ref == (int)t &&
                    later->delta == 0)
                    return false;
            }
        }
    }
    return true;
}

/* ---- the signature's text (signatures/FORMAT.md) ---- */

static void h3_learn_hex(FILE *f, const uint8_t *b, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        fputc(digits[b[i] >> 4], f);
        fputc(digits[b[i] & 15], f);
    }
}

static bool h3_learn_word_masked(const struct h3_learn_pos *pos, uint32_t p, size_t off)
{
    for (unsigned i = 0; i < pos->nmasked; i++)
        if (pos->masked[i] == (p << 16 | (uint32_t)off))
            return true;
    return false;
}

/* A slot's REF and the end of its line. */
static void h3_learn_print_ref(FILE *f, const struct h3_learn_group *g, const struct h3_learn_slot *s)
{
    if (s->ref == -2) {
        fputs("null\n", f);
    } else if (s->ref == -1) {
        fputs("first\n", f);
    } else {
        const struct h3_learn_slot *r = &g->slots[s->ref];
        fprintf(f, "@%u.%u", r->call, (unsigned)(s->ref - (int)g->pos[r->call].first_slot));
        if (s->delta != 0)
            fprintf(f, "%+lld", (long long)s->delta);
        fputc('\n', f);
    }
}

/* A launch's lines: slots and bytes in (parameter, offset) order, bytes first. */
static void h3_learn_print_launch(FILE *f, const struct h3_learn_group *g, const struct h3_learn_pos *pos)
{
    const struct h3_learn_call *e0 = pos->e[0];
    const uint16_t *sizes = h3_learn_sizes(g->l, e0);
    for (uint32_t p = 0; p < e0->nparams; p++) {
        size_t size = sizes[p];
        uint8_t keep[4096];
        const uint8_t *d0 = h3_learn_param(g->l, e0, p);
        for (size_t b = 0; b < size; b++) {
            keep[b] = !h3_learn_in_unused(pos, p, b);
            for (unsigned k = 1; k < H3_LEARN_INSTANCES && keep[b]; k++)
                keep[b] = h3_learn_param(g->l, pos->e[k], p)[b] == d0[b];
        }
        for (size_t off = 0; off + 8 <= size; off += 8) {
            bool host = false;
            for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++) {
                uint8_t w[8];
                const uint8_t *d = h3_learn_param(g->l, pos->e[k], p) + off;
                for (int i = 0; i < 8; i++)
                    w[i] = h3_learn_in_unused(pos, p, off + (size_t)i) ? 0 : d[i];
                uint64_t v = h3_learn_word(w);
                host |= v >= H3_LEARN_HOST_LOW && v < H3_LEARN_HOST_HIGH;
            }
            /* A padding word (0 in some instances only) is masked whole, unless
             * part of it is unused: then the bytes the kernel can read (a bool
             * beside padding) are compared (record_signature.py's rule). */
            bool padding = h3_learn_word_masked(pos, p, off);
            for (int i = 0; i < 8 && padding; i++)
                padding = !h3_learn_in_unused(pos, p, off + (size_t)i);
            if (host || padding || h3_learn_is_slot(g, pos, p, off))
                memset(keep + off, 0, 8);
        }
        size_t b = 0;
        while (b < size) {
            if (h3_learn_is_slot(g, pos, p, b) && b % 8 == 0) {
                for (uint32_t i = pos->first_slot; i < pos->first_slot + pos->nslots; i++) {
                    const struct h3_learn_slot *s = &g->slots[i];
                    if (s->param != p || s->offset != b)
                        continue;
                    fprintf(f, "  slot %u %u %zu ", i - pos->first_slot, p, b);
                    h3_learn_print_ref(f, g, s);
                }
                b += 8;
                continue;
            }
            if (!keep[b]) {
                b++;
                continue;
            }
            size_t end = b;
            while (end < size && keep[end] && end - b < H3_LEARN_BYTES_PER_LINE)
                end++;
            fprintf(f, "  bytes %u %zu ", p, b);
            h3_learn_hex(f, d0 + b, end - b);
            fputc('\n', f);
            b = end;
        }
    }
}

static void h3_learn_print_slots(FILE *f, const struct h3_learn_group *g, const struct h3_learn_pos *pos)
{
    for (uint32_t i = pos->first_slot; i < pos->first_slot + pos->nslots; i++) {
        const struct h3_learn_slot *s = &g->slots[i];
        if (pos->e[0]->kind == H3_SIG_MATMUL)
            fprintf(f, "  slot %u %s 0 ", i - pos->first_slot, h3_sig_operands[s->param]);
        else
            fprintf(f, "  slot %u uid:%lld 0 ", i - pos->first_slot, (long long)s->uid);
        h3_learn_print_ref(f, g, s);
    }
}

/* The calls' lines (everything after the meta lines). */
static void h3_learn_print_calls(FILE *f, const struct h3_learn_group *g)
{
    for (uint32_t j = 0; j < g->n; j++) {
        const struct h3_learn_pos *pos = &g->pos[j];
        const struct h3_learn_call *e0 = pos->e[0];
        if (e0->kind == H3_SIG_LAUNCH) {
            fprintf(f, "call %u launch %s\n  config %u %u %u %u %u %u %u\n  params", j, e0->kernel->name,
                    e0->grid[0], e0->grid[1], e0->grid[2], e0->block[0], e0->block[1], e0->block[2], e0->shmem);
            const uint16_t *sizes = h3_learn_sizes(g->l, e0);
            for (uint32_t p = 0; p < e0->nparams; p++)
                fprintf(f, " %u", sizes[p]);
            fputc('\n', f);
            h3_learn_print_launch(f, g, pos);
        } else if (e0->kind == H3_SIG_MATMUL) {
            fprintf(f, "call %u matmul\n  desc", j);
            for (int k = 0; k < H3_SIG_DESC_KEYS; k++)
                fprintf(f, " %s=%lld", h3_sig_desc_keys[k], (long long)e0->u.mm.desc[k]);
            fputc('\n', f);
            bool all = true;
            for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
                all &= pos->e[k]->u.mm.have_algo;
            if (all) {
                bool any = false;
                for (int a = 0; a < H3_SIG_ALGO_KEYS; a++) {
                    bool stable = true;
                    for (unsigned k = 1; k < H3_LEARN_INSTANCES; k++)
                        stable &= pos->e[k]->u.mm.algo[a] == e0->u.mm.algo[a];
                    if (stable)
                        fprintf(f, "%s%s=%lld", any ? " " : "  algo ", h3_sig_algo_keys[a], (long long)e0->u.mm.algo[a]);
                    any |= stable;
                }
                if (any)
                    fputc('\n', f);
            }
            h3_learn_print_slots(f, g, pos);
        } else {
            fprintf(f, "call %u cudnn\n  uids", j);
            for (uint32_t u = 0; u < e0->u.dnn.n; u++)
                fprintf(f, " %lld", (long long)e0->u.dnn.uids[u]);
            fputc('\n', f);
            h3_learn_print_slots(f, g, pos);
        }
    }
    fputs("end\n", f);
}

/* ---- learning a group ---- */

/* The first refusals' sizes and reasons, for the stats. */
#define H3_LEARN_REFUSALS_KEPT 8
static struct {
    uint32_t period;
    char why[96];
    unsigned times;
} h3_learn_refusals[H3_LEARN_REFUSALS_KEPT];
static unsigned h3_learn_nrefusals;

static pthread_mutex_t h3_learn_refusals_lock = PTHREAD_MUTEX_INITIALIZER;

void h3_learn_after_fork_child(void)
{
    pthread_mutex_init(&h3_learn_lock, NULL);
    pthread_mutex_init(&h3_learn_refusals_lock, NULL);
}

/* Counted after h3_learn_lock is let go. */
static void h3_learn_note_refusal(uint32_t period, const char *why)
{
    pthread_mutex_lock(&h3_learn_refusals_lock);
    unsigned i = 0;
    while (i < h3_learn_nrefusals &&
           (h3_learn_refusals[i].period != period || strcmp(h3_learn_refusals[i].why, why) != 0))
        i++;
    if (i == h3_learn_nrefusals && i < H3_LEARN_REFUSALS_KEPT) {
        h3_learn_refusals[i].period = period;
        snprintf(h3_learn_refusals[i].why, sizeof(h3_learn_refusals[i].why), "%s", why);
        h3_learn_nrefusals++;
    }
    if (i < h3_learn_nrefusals)
        h3_learn_refusals[i].times++;
    pthread_mutex_unlock(&h3_learn_refusals_lock);
}

/* Writes a learned signature to H3SHIM_RECORD (a directory). */
static void h3_learn_record(const char *text, size_t len, const char *group)
{
    const char *dir = h3_config.record;
    if (dir == NULL || dir[0] == '\0')
        return;
    mkdir(dir, 0777);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s-pid%ld.sig", dir, group, (long)getpid()); /* processes may share DIR */
    FILE *f = fopen(path, "w");
    if (f == NULL || fwrite(text, 1, len, f) != len) {
        H3_WARN(H3_SUB_HOOK, "H3SHIM_RECORD: cannot write %s", path);
        if (f != NULL)
            fclose(f);
        return;
    }
    fclose(f);
    H3_INFO(H3_SUB_HOOK, "learned signature written to %s", path);
}

/* The first GEMM's n (the tokens times the batch, in a ViT block), for the group's name. */
static long long h3_learn_rows(const struct h3_learn_group *g)
{
    for (uint32_t j = 0; j < g->n; j++)
        if (g->pos[j].e[0]->kind == H3_SIG_MATMUL)
            return (long long)g->pos[j].e[0]->u.mm.desc[7];
    return 0;
}

static uint64_t h3_learn_fingerprint(struct h3_learner *l, uint64_t start, uint32_t period);
static void h3_learn_refuse_group(uint64_t fp);

/* Renders, parses and publishes the group of `period` calls starting at `start`. */
static void h3_learn_group(struct h3_learner *l, uint64_t start, uint32_t period)
{
    if (atomic_fetch_add(&h3_learn_derived_all, 1) >= H3_LEARN_MAX_DERIVED) {
        h3_learn_close("1024 groups derived");
        return;
    }
    struct h3_learn_group g = {.l = l, .n = period};
    g.pos = calloc(period, sizeof(*g.pos));
    char *text = NULL, *body = NULL;
    size_t len = 0, body_len = 0;
    const char *why = NULL;
    if (g.pos == NULL) {
        why = "out of memory";
        goto done;
    }
    /* Every instance's calls first: the group's name reads them whatever is refused. */
    for (uint32_t j = 0; j < period; j++)
        for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
            g.pos[j].e[k] = h3_learn_at(l, start + (uint64_t)k * period + j);
    bool foreign = false; /* a call no signature can hold: another model's */
    for (uint32_t j = 0; j < period && why == NULL; j++)
        for (unsigned k = 0; k < H3_LEARN_INSTANCES && why == NULL; k++) {
            const struct h3_learn_call *e = g.pos[j].e[k];
            if (e->kind == H3_LEARN_OPAQUE) {
                why = "a GEMM through cuBLAS's own entry point (no signature holds one)";
                foreign = true;
            } else if (e->kind == H3_LEARN_GAP || e->stream != g.pos[0].e[0]->stream)
                why = "calls on several streams";
            else if (e->kind == H3_SIG_LAUNCH && h3_learn_bytes_of(l, e) == NULL)
                why = "parameter bytes no longer kept";
        }
    /* A call that synchronises inside every instance, at one place: the
     * matcher's attempts would break there every time. */
    for (uint32_t j = 1; j < period && why == NULL; j++) {
        bool always = true;
        for (unsigned k = 0; k < H3_LEARN_INSTANCES; k++)
            always &= g.pos[j].e[k]->synced;
        if (always)
            why = "a call that synchronises comes inside every instance";
    }
    if (why == NULL && !h3_learn_find_slots(&g))
        why = "out of memory";
    if (why == NULL && !h3_learn_wire(&g))
        why = "the instances disagree on the wiring";
    FILE *f = why == NULL ? open_memstream(&body, &body_len) : NULL;
    if (why == NULL && f == NULL)
        why = "out of memory";
    if (why == NULL) {
        h3_learn_print_calls(f, &g);
        fclose(f);
    }
    uint64_t hash = body != NULL ? h3_hash(H3_HASH_SEED, body, body_len) : 0;
    pthread_mutex_lock(&h3_learn_lock);
    bool duplicate = false;
    for (unsigned i = 0; why == NULL && !duplicate && i < h3_learn_nbodies; i++)
        duplicate = h3_learn_bodies[i] == hash;
    if (duplicate)
        why = "learned already (another thread)";
    static unsigned h3_learn_derived; /* under the lock: each group its own number */
    unsigned number = ++h3_learn_derived;
    char group[96];
    snprintf(group, sizeof(group), "block-learned-%u-%ucalls-n%lld", number, period, h3_learn_rows(&g));
    if (why == NULL) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        int sm = h3_kernels_sm();
        f = open_memstream(&text, &len);
        if (f != NULL) {
            fprintf(f, "# Learned in process %ld from %u instances in a row on one thread (shim/learn.c).\n"
                       "h3sig 1\nmeta model learned\nmeta group %s\nmeta torch this-process\nmeta cuda 0\n"
                       "meta sm %d\nmeta created %04d-%02d-%02d\nmeta source learned\n%s",
                    (long)getpid(), H3_LEARN_INSTANCES, group, sm > 0 ? sm : 0, tm.tm_year + 1900, tm.tm_mon + 1,
                    tm.tm_mday, body);
            fclose(f);
        }
        if (text == NULL)
            why = "out of memory";
    }
    struct h3_sig *sig = NULL;
    if (why == NULL) {
        char err[512];
        sig = h3_sig_parse(text, len, group, err, sizeof(err));
        if (sig == NULL) {
            H3_WARN(H3_SUB_HOOK, "a learned signature did not parse (%s); nothing learned", err);
            why = "did not parse";
        }
    }
    bool published = false;
    char not_block[96];
    const char *engine_why = NULL;
    bool resembles = !foreign; /* unless the planners say otherwise: its calls stay in sight */
    bool planned = false; /* the ops' planners saw it: it is never freed (weight_cache keeps its calls' marks) */
    if (sig != NULL) {
        if (atomic_load(&h3_learn_counts.learned) >= H3_LEARN_MAX_LEARNED ||
            h3_signatures_count() >= H3_LEARN_MAX_SIGNATURES) {
            why = "no room for another signature";
            h3_learn_close(why);
        } else if (atomic_fetch_add(&h3_learn_planned, 1) >= H3_LEARN_MAX_PLANNED) {
            why = "no room for another signature the planners see";
            h3_learn_close("64 groups seen by the ops' planners");
        } else if ((planned = true, h3_engine_learned(sig, &engine_why, &resembles) == 0)) {
            if (engine_why != NULL && strchr(engine_why, ' ') == NULL) { /* an op's name */
                snprintf(not_block, sizeof(not_block), "not the H3 block (%s plans nothing in it)", engine_why);
                why = not_block;
            } else {
                why = engine_why != NULL ? engine_why : "the engine took nothing";
            }
        } else if (!h3_signatures_add(sig))
            why = "too many signatures";
        else {
            published = true;
            h3_match_setup(); /* what the signatures begin with, again */
            h3_learn_bodies[h3_learn_nbodies++] = hash;
            atomic_fetch_add(&h3_learn_counts.learned, 1);
        }
    }
    pthread_mutex_unlock(&h3_learn_lock);
    if (duplicate) {
        H3_INFO(H3_SUB_HOOK, "a repeating group of %u calls was learned already, by another thread", period);
        if (sig != NULL)
            h3_sig_free(sig);
    } else if (published) {
        h3_learn_just = sig->group; /* kept for the process, as the signature is */
        H3_INFO(H3_SUB_HOOK, "learned signature %s: %u calls, from this thread's kept calls %llu to %llu", group,
                period, (unsigned long long)start, (unsigned long long)(start + (uint64_t)H3_LEARN_INSTANCES * period - 1));
        h3_learn_record(text, len, group);
    } else {
        if (sig != NULL && !planned)
            h3_sig_free(sig);
        /* Another model's group: its calls go back to the idle path.  A
         * variant of the block (an op that marks it plans there: another
         * batch, say) shares calls with the block's other shapes (the weight
         * casts), so only the group is remembered, not to be derived again. */
        if (!resembles) {
            bool full = false;
            for (uint32_t j = 0; j < period; j++) {
                const struct h3_learn_call *e = h3_learn_at(l, start + j);
                /* The two calls before it in the group (the last ones of the
                 * instance before, for its first two), each as the thread
                 * sees it: a GEMM by its identity, or by its shape alone. */
                uint64_t before[2][2];
                for (unsigned b = 0; b < 2; b++) {
                    const struct h3_learn_call *x = h3_learn_at(l, start + (j + period - 1 - b) % period);
                    before[b][0] = x->id;
                    before[b][1] = x->kind == H3_SIG_MATMUL ? h3_learn_mm_key(x) : x->id;
                }
                /* A launch's kernel asks the table for what its copy lacks
                 * from before the table holds the triple: no thread sees it
                 * refused later than the table alone would say. */
                struct h3_kernel *k = e->kind == H3_SIG_LAUNCH ? (struct h3_kernel *)e->kernel : NULL;
                if (k != NULL)
                    atomic_store_explicit(&k->in_refused, true, memory_order_release);
                for (unsigned a = 0; a < 2; a++)
                    for (unsigned b = 0; b < 2; b++) {
                        uint64_t t = h3_learn_triple(before[1][a], before[0][b], e->id);
                        bool put = h3_learn_refuse_id(t);
                        full |= !put;
                        /* copied: the triple as a thread sees it once the group is refused */
                        if (put && k != NULL && a == 1 && b == 1)
                            h3_learn_refuse_launch(k, t);
                    }
                if (e->kind == H3_SIG_MATMUL)
                    full |= !h3_learn_refuse_id(h3_learn_mm_key(e));
            }
            static atomic_flag told = ATOMIC_FLAG_INIT;
            if (full && !atomic_flag_test_and_set(&told)) /* its calls stay in sight, as far as the bounds */
                H3_INFO(H3_SUB_HOOK, "the refused calls' table is full (%d): another model's repeating calls "
                        "are looked at again", H3_LEARN_REFUSED_IDS);
            atomic_fetch_add(&h3_learn_counts.refused_calls, period);
        }
        /* A refusal that says something of the group (the planners', a
         * synchronising call, disagreeing wiring) is remembered; one of the
         * moment (bytes overwritten, memory) is not. */
        if (planned || foreign ||
            (why != NULL && (strstr(why, "synchronises") != NULL || strstr(why, "disagree") != NULL)))
            h3_learn_refuse_group(h3_learn_fingerprint(l, start, period));
        atomic_fetch_add(&h3_learn_counts.refused, 1);
        H3_INFO(H3_SUB_HOOK, "a repeating group of %u calls was not learned: %s", period, why);
        h3_learn_note_refusal(period, why);
        if (text != NULL) {
            char name[128];
            snprintf(name, sizeof(name), "refused-%s", group);
            h3_learn_record(text, len, name);
        }
    }
done:
    free(text);
    free(body);
    free(g.pos);
    free(g.slots);
    free(g.known);
}

/* A group's calls' identities, whatever call it starts at. */
static uint64_t h3_learn_fingerprint(struct h3_learner *l, uint64_t start, uint32_t period)
{
    uint64_t x = (uint64_t)period * 0x9e3779b97f4a7c15ull;
    for (uint32_t j = 0; j < period; j++)
        x ^= h3_learn_at(l, start + j)->id * 0xff51afd7ed558ccdull;
    return x | 1;
}

/* The groups refused (fingerprints), so that none is derived twice. */
#define H3_LEARN_REFUSED_GROUPS 64
static atomic_ullong h3_learn_refused_groups[H3_LEARN_REFUSED_GROUPS];

static atomic_uint h3_learn_refused_next;

static bool h3_learn_group_refused(uint64_t fp)
{
    for (unsigned i = 0; i < H3_LEARN_REFUSED_GROUPS; i++)
        if (atomic_load_explicit(&h3_learn_refused_groups[i], memory_order_relaxed) == fp)
            return true;
    return false;
}

/* Remembered in the oldest one's place once all are taken (another model's
 * layer at each prompt length is a group of its own): a group forgotten is
 * derived again should it repeat again, which a refused group's calls, left
 * out after their refusal, do not. */
static void h3_learn_refuse_group(uint64_t fp)
{
    if (h3_learn_group_refused(fp))
        return;
    unsigned i = atomic_fetch_add(&h3_learn_refused_next, 1) % H3_LEARN_REFUSED_GROUPS;
    atomic_store_explicit(&h3_learn_refused_groups[i], fp, memory_order_relaxed);
}

/* Learns the group unless it was refused already.  Only a group not
 * refused before (or a signature's group running: h3_learn_observe) renews
 * the thread's patience: one refused again and again (another model's
 * layer, a variant of the block), or a run of calls that comes twice and
 * never a third time, is no reason to keep looking. */
static void h3_learn_try(struct h3_learner *l, uint64_t start, uint32_t period)
{
    if (!h3_learn_group_refused(h3_learn_fingerprint(l, start, period))) {
        l->since_repeat = 0;
        h3_learn_group(l, start, period);
    }
}

/* Where the periodicity of `period` ending at `at` began: as far back as
 * calls equal their predecessors `period` before, within the ring. */
static uint64_t h3_learn_run_start(struct h3_learner *l, uint64_t at, uint32_t period)
{
    uint64_t s = at - period; /* call `at` equals this one */
    uint64_t oldest = l->n > H3_LEARN_RING ? l->n - H3_LEARN_RING : 0;
    while (s > oldest && h3_learn_at(l, s - 1)->id == h3_learn_at(l, s - 1 + period)->id &&
           h3_learn_at(l, s - 1)->kind != H3_LEARN_GAP)
        s--;
    return s;
}

static void h3_learn_follow(struct h3_learner *l, uint64_t at)
{
    const struct h3_learn_call *e = h3_learn_at(l, at);
    /* The periods followed: each continues or ends. */
    for (unsigned i = 0; i < H3_LEARN_CANDIDATES; i++) {
        struct h3_learn_candidate *c = &l->cand[i];
        if (c->period == 0)
            continue;
        if (e->kind == H3_LEARN_GAP || h3_learn_at(l, at - c->period)->id != e->id) {
            c->period = 0;
            continue;
        }
        if (!c->done && at + 1 - c->start >= (uint64_t)H3_LEARN_INSTANCES * c->period) {
            c->done = true;
            h3_learn_try(l, c->start, c->period);
        }
    }
    if (e->kind == H3_LEARN_GAP)
        return;
    /* A new period: from this identity's last position. */
    unsigned slot = (unsigned)(e->id & (H3_LEARN_LAST - 1));
    uint64_t prev = l->last[slot].id == e->id ? l->last[slot].at : UINT64_MAX;
    l->last[slot].id = e->id;
    l->last[slot].at = at;
    if (prev == UINT64_MAX || at - prev > H3_LEARN_MAX_PERIOD || at - prev < H3_LEARN_MIN_PERIOD)
        return;
    uint32_t period = (uint32_t)(at - prev);
    unsigned free_at = H3_LEARN_CANDIDATES;
    for (unsigned i = 0; i < H3_LEARN_CANDIDATES; i++) {
        if (l->cand[i].period == period)
            return;
        if (l->cand[i].period == 0 && free_at == H3_LEARN_CANDIDATES)
            free_at = i;
    }
    if (free_at == H3_LEARN_CANDIDATES) { /* the shortest run so far gives way */
        free_at = 0;
        for (unsigned i = 1; i < H3_LEARN_CANDIDATES; i++)
            if (l->cand[i].start > l->cand[free_at].start)
                free_at = i;
    }
    struct h3_learn_candidate *c = &l->cand[free_at];
    c->period = period;
    c->start = h3_learn_run_start(l, at, period);
    /* A run that a broken island cut: where the last m calls passed by in
     * it are the run's own (each equal to the call a whole number of
     * periods after it), its first instance lacks them, and its instances
     * count from the next one's first call.  The calls before those m are
     * another's (the island began before the run). */
    if (l->cut_len != 0 && c->start == l->cut_at) {
        const struct h3_learn_island *s = &l->islands[l->cut_island - 1];
        uint32_t m = 0;
        while (m < l->cut_len &&
               s->ids[l->cut_len - 1 - m] == h3_learn_at(l, l->cut_at + (period - (m + 1) % period) % period)->id)
            m++;
        c->start += (period - m % period) % period;
    }
    c->done = false;
    if (at + 1 - c->start >= (uint64_t)H3_LEARN_INSTANCES * period) {
        c->done = true;
        h3_learn_try(l, c->start, period);
    }
}

static void h3_learn_push(struct h3_learner *l, const struct h3_call *c, uint64_t id)
{
    uint64_t at = l->n++;
    struct h3_learn_call *e = h3_learn_at(l, at);
    if (c == NULL || !h3_learn_keep(l, e, c, id)) {
        memset(e, 0, offsetof(struct h3_learn_call, u));
        e->kind = H3_LEARN_GAP;
        e->id = 0;
    }
    h3_learn_follow(l, at);
}

void h3_learn_observe(struct h3_call *c)
{
    const uint64_t asked = h3_learn_asked.c == c ? h3_learn_asked.id : 0;
    h3_learn_asked.c = NULL;
    if (!h3_hot.learn_on || c->kind == H3_KIND_SYNC)
        return;
    if (h3_learner_failed || atomic_load_explicit(&h3_hot.learn_closed, memory_order_relaxed)) {
        h3_thread.learn_gemms = false;
        return;
    }
    /* A call that continues an attempt is a signature's (kept out: the
     * signature covers it); one that only begins one is kept, since the
     * attempt may break at the next call (a variant of the block that
     * begins like it, as the serving mode's later tiles begin like its
     * first's). */
    if (c->match_continues != 0) {
        /* The thread runs a signature's group: the block's other shapes
         * (another tile, another batch) may come yet, so it keeps looking. */
        if (h3_thread.learn_quiet || (h3_learner_tls != NULL && h3_learner_tls->following))
            h3_learn_wake(h3_learner_tls, c);
        if (h3_learner_tls != NULL)
            h3_learner_tls->since_repeat = h3_learner_tls->quiet_run = 0;
        h3_learn_break(H3_SKIP_TAKEN);
        h3_learn_cursor_end(false);
        h3_learn_island_bound(false);
        h3_learn_note(0, true); /* should the attempt break, its GEMM is kept */
        return;
    }
    uint64_t id = asked != 0 ? asked : h3_learn_identity(c);
    if (asked == 0 && h3_thread.learn_quiet && h3_learn_quiet_passes(c, id))
        return;
    struct h3_learn_place at;
    enum h3_learn_skip why = id != 0 && asked == 0 ? h3_learn_passes(c, id, &at) : H3_COUNT_KEPT;
    if (id == 0 || why != H3_COUNT_KEPT) {
        h3_learn_pass(c, id, why);
        return;
    }
    const uint64_t pre[2] = {h3_learn_prev[0], h3_learn_prev[1]};
    h3_learn_note(id, true);
    struct h3_learner *l = h3_learner_get();
    if (l == NULL)
        return;
    if (h3_learn_gap) {
        h3_learn_gap = false;
        h3_learn_push(l, NULL, 0);
    }
    h3_learn_push(l, c, id);
    h3_learn_island_kept(l, pre);
    h3_learn_what = "kept";
    l->quiet_run = 0;
    c->learned = h3_learn_just;
    h3_learn_just = NULL;
    h3_learn_count(H3_COUNT_KEPT);
    if (++l->since_repeat > (uint64_t)h3_config.learn_patience) {
        atomic_fetch_add(&h3_learn_counts.stopped, 1);
        H3_INFO(H3_SUB_HOOK, "no group repeated in %lld calls: this thread stops looking",
                (long long)h3_config.learn_patience);
        pthread_setspecific(h3_learn_key, NULL);
        h3_learner_free(l); /* its memory goes back now; the thread makes no other */
        h3_thread.learn_gemms = false;
    }
}

void h3_learn_print_stats(void (*line)(const char *fmt, ...))
{
    if (!h3_hot.learn_on)
        return;
    h3_learn_flush_pending(); /* this thread's; a thread still running keeps up to 255 of each */
    unsigned threads = atomic_load(&h3_learn_counts.threads);
    line("learn: %u groups learned, %u refused (%lu calls back on the idle path); %u threads looked "
         "(%zu bytes each), %u stopped looking",
         atomic_load(&h3_learn_counts.learned), atomic_load(&h3_learn_counts.refused),
         atomic_load(&h3_learn_counts.refused_calls), threads,
         sizeof(struct h3_learner) + _Alignof(struct h3_learner) + (size_t)H3_LEARN_BYTES,
         atomic_load(&h3_learn_counts.stopped));
    unsigned long skipped = 0;
    for (unsigned i = 0; i < H3_SKIPS; i++)
        skipped += atomic_load(&h3_learn_counts.calls[i]);
    if (atomic_load(&h3_learn_counts.islands) != 0)
        line("learn: %u runs of calls between refused groups came %d times the same: passed by where they "
             "come after the same two calls (refused islands); %u broken since (kept again)",
             atomic_load(&h3_learn_counts.islands), H3_LEARN_INSTANCES, atomic_load(&h3_learn_counts.islands_broken));
    if (atomic_load(&h3_learn_counts.quiet) != 0)
        line("learn: %u times a thread passed by %lld calls in a row, keeping none: its calls took the idle path "
             "(quiet); %u woke since, at a call it had not passed by",
             atomic_load(&h3_learn_counts.quiet), (long long)h3_config.learn_quiet, atomic_load(&h3_learn_counts.woke));
    if (atomic_load(&h3_learn_counts.followed) != 0)
        line("learn: %u times a quiet thread followed a refused island from a library call of it, awake, and was "
             "quiet again at its end unless a call differed (then it woke)",
             atomic_load(&h3_learn_counts.followed));
    line("learn: %lu calls kept, %lu not kept, %lu calls that synchronise between them",
         atomic_load(&h3_learn_counts.calls[H3_COUNT_KEPT]), skipped, atomic_load(&h3_learn_counts.calls[H3_COUNT_SYNCED]));
    for (unsigned i = 0; i < H3_SKIPS; i++)
        if (atomic_load(&h3_learn_counts.calls[i]) != 0)
            line("learn: not kept: %lu %s", atomic_load(&h3_learn_counts.calls[i]), h3_learn_skip_names[i]);
    for (unsigned i = 0; i < h3_learn_nrefusals; i++)
        line("learn: refused %u times, a group of %u calls: %s", h3_learn_refusals[i].times,
             h3_learn_refusals[i].period, h3_learn_refusals[i].why);
    const char *closed = atomic_load(&h3_learn_closed_why);
    if (closed != NULL)
        line("learn: learning ended for the process: %s", closed);
}
