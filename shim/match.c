/*
 * The matcher: recognises the loaded signatures' groups in the call stream
 * (H3SHIM_MATCH=1), and reports each call's place in them as its decision's
 * reason.  It changes nothing: every call is still passed through.
 *
 * Owns: per-thread matching state (which call of each signature comes next
 * on which stream, and the pointer values seen so far in the current
 * instance) and the per-signature counts of complete and broken instances.
 * Invariants: constant work per call and signature (one expected call is
 * compared, and call 0 again after a break); a group is matched only when
 * every call has the recorded identity and stable bytes (a launch that no
 * op's range spans: its identity) and every pointer is wired as recorded.
 * State is per thread: a group's calls must come from one thread on one
 * stream, as PyTorch issues them.
 * Never: allocates after a thread's first observed call, or touches CUDA.
 */
#include "h3shim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define H3_MATCH_MAX_SIGS 32

struct h3_match_progress {
    const struct h3_sig *sig;
    uint64_t *values; /* pointer values of the current instance (h3_sig_call.value_base) */
    const struct h3_kernel **kernels; /* per call: the last kernel found to have its name */
    struct h3_free_mark *marks; /* per call: the thread's frees when it matched (h3_released_mark) */
    uint32_t next;    /* index of the call expected next; 0: none started */
    bool starts_with_matmul; /* the signature's first call is a GEMM */
    const void *stream;
};

struct h3_matcher {
    unsigned nsigs;
    struct h3_match_progress p[H3_MATCH_MAX_SIGS];
};

struct h3_match_counts {
    atomic_ulong complete, broken;
    atomic_ulong lookalike; /* GEMMs with one of the signature's shapes made while no attempt ran */
    atomic_ulong elsewhere; /* references to a freed buffer met by a buffer at another address */
    _Atomic(const char *) first_break;
    atomic_uint first_break_call;
};
static struct h3_match_counts h3_match_counts[H3_MATCH_MAX_SIGS];
static void h3_match_count_break(unsigned s, const char *why, uint32_t at);
static bool h3_match_gemm_shape(const struct h3_sig *sig, const struct h3_lt_desc *lt);
static void h3_match_count_lookalike(unsigned s);
static bool h3_match_first_warning(unsigned s);

static pthread_key_t h3_match_key;
static pthread_once_t h3_match_key_once = PTHREAD_ONCE_INIT;

/* The key holds this thread's matcher for its destructor; every call reads
 * it from h3_thread.matcher, beside the thread's other hot words. */
static void h3_matcher_free(void *arg)
{
    struct h3_matcher *m = arg;
    h3_thread.matcher = NULL; /* the destructor runs on the exiting thread */
    for (unsigned i = 0; m != NULL && i < m->nsigs; i++) {
        free(m->p[i].values);
        free(m->p[i].kernels);
        free(m->p[i].marks);
    }
    free(m);
}

static void h3_match_key_make(void)
{
    pthread_key_create(&h3_match_key, h3_matcher_free);
}

/* Adds progress for the signatures this thread's matcher does not have yet
 * (learned ones come while the process runs); false without memory, when
 * the signatures it has stay. */
static bool h3_matcher_grow(struct h3_matcher *m)
{
    unsigned n = h3_signatures_count();
    while (m->nsigs < n && m->nsigs < H3_MATCH_MAX_SIGS) {
        const struct h3_sig *sig = h3_signatures_get(m->nsigs);
        struct h3_match_progress *p = &m->p[m->nsigs];
        p->sig = sig;
        p->starts_with_matmul = sig->calls[0].kind == H3_SIG_MATMUL;
        p->values = calloc(sig->nvalues > 0 ? sig->nvalues : 1, sizeof(uint64_t));
        p->kernels = calloc(sig->ncalls, sizeof(*p->kernels));
        p->marks = calloc(sig->ncalls, sizeof(*p->marks));
        if (p->values == NULL || p->kernels == NULL || p->marks == NULL) {
            free(p->values);
            free(p->kernels);
            free(p->marks);
            memset(p, 0, sizeof(*p));
            return false;
        }
        p->next = 0;
        m->nsigs++;
    }
    return true;
}

/* This thread's matcher, built at its first observed call; NULL if memory
 * runs out at first (then nothing is matched on this thread). */
static struct h3_matcher *h3_matcher_get(void)
{
    struct h3_matcher *m = h3_thread.matcher;
    if (m != NULL) {
        if (H3_UNLIKELY(m->nsigs < h3_signatures_count() && m->nsigs < H3_MATCH_MAX_SIGS))
            h3_matcher_grow(m);
        return m;
    }
    pthread_once(&h3_match_key_once, h3_match_key_make);
    if ((m = pthread_getspecific(h3_match_key)) != NULL)
        return h3_thread.matcher = m;
    m = aligned_alloc(64, (sizeof(*m) + 63) & ~(size_t)63); /* the count and the first progress in one line */
    if (m == NULL)
        return NULL;
    memset(m, 0, sizeof(*m));
    if (!h3_matcher_grow(m)) {
        /* Without memory this thread matches nothing: a signature left out
         * would shift the indices the counts and the engine use. */
        h3_matcher_free(m);
        return NULL;
    }
    pthread_setspecific(h3_match_key, m);
    return h3_thread.matcher = m;
}

/* Whether a slot's value satisfies its reference in the current instance.
 * A reference to exactly an earlier slot's buffer that this thread's
 * allocator reported freed since that call is met by any buffer: a launch
 * cannot read a freed tensor, so the recorded equality was the allocator
 * handing the freed address to the next buffer, which it need not do
 * (another program's allocations, another tile's).  *elsewhere says so.
 * The allocator's reports are trusted as far as the freed-outputs rule is
 * (h3_released_on: H3SHIM_SKIP_RELEASED, validated SMs).  An op may not
 * take such a reference for dataflow: each checks the pointers it relies
 * on in the calls themselves. */
static bool h3_match_ref(const struct h3_match_progress *p, const struct h3_sig_slot *s, uint64_t v, bool *elsewhere)
{
    switch (s->ref) {
    case H3_REF_FIRST: return v != 0; /* recorded non-null in every instance */
    case H3_REF_NULL: return v == 0;
    case H3_REF_SLOT: {
        uint64_t want = p->values[s->ref_value] + (uint64_t)s->delta;
        if (v == want)
            return true;
        if (v == 0 || s->delta != 0 || !h3_released_since(p->marks[s->ref_call], (struct h3_span){want, want + 1}) ||
            !h3_released_on())
            return false;
        *elsewhere = true;
        return true;
    }
    }
    return false;
}

/* The description values of a cuBLASLt call in h3_sig_desc_keys order. */
void h3_match_lt_values(const struct h3_lt_desc *lt, int64_t *desc, int64_t *algo)
{
    int64_t head[10] = {lt->compute, lt->scale, lt->transa, lt->transb, lt->epilogue, lt->bias_type,
                        lt->m,       lt->n,     lt->k,      (int64_t)lt->workspace};
    memcpy(desc, head, sizeof(head));
    const struct h3_lt_layout *l[4] = {&lt->a, &lt->b, &lt->c, &lt->d};
    for (int i = 0; i < 4; i++) {
        int64_t v[7] = {l[i]->type, l[i]->order, (int64_t)l[i]->rows, (int64_t)l[i]->cols,
                        l[i]->ld,   l[i]->batch, l[i]->stride};
        memcpy(desc + 10 + 7 * i, v, sizeof(v));
    }
    int64_t a[H3_SIG_ALGO_KEYS] = {lt->algo_id, lt->tile,    lt->stages,  lt->splitk, lt->reduction,
                                   lt->swizzle, lt->custom, lt->cluster, lt->inner};
    memcpy(algo, a, sizeof(a));
}

/*
 * Compares call `c` with call `j` of the progress's signature; on a match
 * stores its slot values and returns NULL, else returns why not.
 */
static const char *h3_match_one(struct h3_match_progress *p, uint32_t j, const struct h3_call *c, bool *elsewhere)
{
    const struct h3_sig_call *sc = &p->sig->calls[j];
    uint64_t v[H3_SIG_MAX_CALL_SLOTS];
    if (sc->nslots > H3_SIG_MAX_CALL_SLOTS)
        return "slots";
    if (sc->kind == H3_SIG_LAUNCH) {
        if (c->kind != H3_KIND_LAUNCH)
            return "kind";
        if (c->kernel == NULL)
            return "kernel";
        if (c->kernel != p->kernels[j]) { /* kernels are cached per handle: a name is compared once */
            /* Another kernel's name is told by its hash, without reading either name. */
            if (c->kernel->name_hash != sc->kernel_hash || strcmp(c->kernel->name, sc->kernel) != 0)
                return "kernel";
            p->kernels[j] = c->kernel;
        }
        if (memcmp(c->grid, sc->grid, sizeof(c->grid)) != 0 || memcmp(c->block, sc->block, sizeof(c->block)) != 0 ||
            c->shmem != sc->shmem)
            return "config";
        if (c->args == NULL || c->nparams != sc->nparams ||
            memcmp(c->param_sizes, sc->param_sizes, sc->nparams * sizeof(uint16_t)) != 0)
            return "params";
        for (uint32_t i = 0; !sc->loose && i < sc->nbytes; i++) {
            const struct h3_sig_bytes *b = &sc->bytes[i];
            if (memcmp((const char *)c->args[b->param] + b->offset, b->data, b->len) != 0)
                return "bytes";
        }
        for (uint32_t i = 0; i < sc->nslots; i++)
            memcpy(&v[i], (const char *)c->args[sc->slots[i].param] + sc->slots[i].offset, sizeof(uint64_t));
    } else if (sc->kind == H3_SIG_MATMUL) {
        if (c->fn != H3_FN_cublasLtMatmul)
            return "kind";
        int64_t desc[H3_SIG_DESC_KEYS], algo[H3_SIG_ALGO_KEYS];
        h3_match_lt_values(&c->u.lt, desc, algo);
        for (int k = 0; k < H3_SIG_DESC_KEYS; k++)
            if ((sc->desc_present & (1ull << k)) && desc[k] != sc->desc[k])
                return "matmul";
        if (sc->algo_present != 0 && !c->u.lt.have_algo)
            return "algo";
        for (int k = 0; k < H3_SIG_ALGO_KEYS; k++)
            if ((sc->algo_present & (1ull << k)) && algo[k] != sc->algo[k])
                return "algo";
        const void *ops[H3_SIG_OPERANDS] = {c->u.lt.A, c->u.lt.B, c->u.lt.C, c->u.lt.D, c->u.lt.bias};
        for (uint32_t i = 0; i < sc->nslots; i++)
            v[i] = (uint64_t)(uintptr_t)ops[sc->slots[i].param];
    } else {
        const struct h3_cudnn_desc *d = &c->u.dnn;
        if (c->fn != H3_FN_cudnnBackendExecute)
            return "kind";
        if (!d->known || (uint64_t)d->count != sc->nuids ||
            memcmp(d->uids, sc->uids, sc->nuids * sizeof(int64_t)) != 0)
            return "uids";
        for (uint32_t i = 0; i < sc->nslots; i++)
            for (uint32_t u = 0; u < sc->nuids; u++)
                if (sc->uids[u] == sc->slots[i].uid)
                    v[i] = (uint64_t)(uintptr_t)d->ptrs[u];
    }
    for (uint32_t i = 0; i < sc->nslots; i++)
        if (!h3_match_ref(p, &sc->slots[i], v[i], elsewhere))
            return "wiring";
    memcpy(&p->values[sc->value_base], v, sc->nslots * sizeof(uint64_t));
    p->marks[j] = h3_released_mark();
    return NULL;
}

/* Advances one signature's progress with call `c`; returns the reason. */
static const char *h3_match_advance(unsigned s, struct h3_match_progress *p, const struct h3_call *c)
{
    if (p->next > 0 && c->stream != p->stream)
        return "other_stream";
    if (p->next > 0) {
        bool elsewhere = false;
        const char *why = h3_match_one(p, p->next, c, &elsewhere);
        if (elsewhere && why == NULL)
            atomic_fetch_add_explicit(&h3_match_counts[s].elsewhere, 1, memory_order_relaxed);
        if (why == NULL) {
            if (++p->next < p->sig->ncalls)
                return "group_call";
            p->next = 0;
            return "group_complete"; /* counted by h3_match_call, for one signature an instance */
        }
        h3_match_count_break(s, why, p->next);
        p->next = 0;
    }
    /* Most calls are not a signature's first: a launch of a kernel already
     * found not to be is turned away without reading the signature. */
    struct h3_kernel *k = (struct h3_kernel *)c->kernel;
    uint64_t bit = s < 64 ? 1ull << s : 0;
    if (k != NULL && (atomic_load_explicit(&k->not_first, memory_order_relaxed) & bit) != 0)
        return NULL;
    bool elsewhere = false; /* the first call refers to nothing */
    const char *why = h3_match_one(p, 0, c, &elsewhere);
    if (why != NULL) {
        if (k != NULL && bit != 0 && strcmp(why, "kernel") == 0) /* its name: so for good */
            atomic_fetch_or_explicit(&k->not_first, bit, memory_order_relaxed);
        if (c->fn == H3_FN_cublasLtMatmul && h3_match_gemm_shape(p->sig, &c->u.lt))
            h3_match_count_lookalike(s);
        return NULL;
    }
    if (p->sig->ncalls == 1)
        return "group_complete";
    p->stream = c->stream;
    p->next = 1;
    return "group_call";
}

/* Attempts that broke, none complete, before the matcher says so: a
 * signature recorded for another build must not fail silently. */
#define H3_MATCH_WARN_AFTER 8

/* Whether a cuBLASLt call has the m, n and k of one of the signature's. */
static bool h3_match_gemm_shape(const struct h3_sig *sig, const struct h3_lt_desc *lt)
{
    for (uint32_t i = 0; i < sig->nshapes; i++)
        if (sig->shapes[i][0] == lt->m && sig->shapes[i][1] == lt->n && sig->shapes[i][2] == lt->k)
            return true;
    return false;
}

/*
 * A GEMM of the block's shape while no attempt runs: the process looks like
 * the recorded model, but the signature's first call never came as recorded
 * (another PyTorch build names or launches its kernels differently), so no
 * attempt even starts and nothing breaks.  Said once, as the breaks are.
 */
static void h3_match_count_lookalike(unsigned s)
{
    unsigned long n = atomic_fetch_add_explicit(&h3_match_counts[s].lookalike, 1, memory_order_relaxed) + 1;
    if (n == 4 * H3_MATCH_WARN_AFTER && atomic_load(&h3_match_counts[s].complete) == 0 &&
        atomic_load(&h3_match_counts[s].broken) < H3_MATCH_WARN_AFTER && h3_match_first_warning(s)) {
        const struct h3_sig *sig = h3_signatures_get(s);
        H3_WARN(H3_SUB_HOOK,
                "signature %s/%s (%s): %d GEMMs with its shapes were made but none of its instances began (its "
                "call 0, %s, never came as recorded); this process looks like the recorded model from another "
                "build (PyTorch, CUDA or GPU), so nothing it covers is fused. Record it again for this build "
                "(signatures/README.md)",
                sig->model, sig->group, sig->path, 4 * H3_MATCH_WARN_AFTER,
                sig->calls[0].kernel != NULL ? sig->calls[0].kernel : "a library call");
    }
}

/* Whether signature `s` may warn now: no signature of its model has, since
 * one warning a model is enough (its variants break alike). */
static bool h3_match_first_warning(unsigned s)
{
    static atomic_uint warned; /* a bit per model, at the index of its first signature */
    const struct h3_sig *sig = h3_signatures_get(s);
    unsigned first = s;
    for (unsigned o = 0; o < s; o++)
        if (strcmp(h3_signatures_get(o)->model, sig->model) == 0) {
            first = o;
            break;
        }
    return !((atomic_fetch_or(&warned, 1u << first) >> first) & 1);
}

/* Counts a break of signature `s`'s instance in progress, and why. */
static void h3_match_count_break(unsigned s, const char *why, uint32_t at)
{
    const char *expected = NULL;
    if (atomic_compare_exchange_strong(&h3_match_counts[s].first_break, &expected, why))
        atomic_store(&h3_match_counts[s].first_break_call, at);
    unsigned long broken = atomic_fetch_add_explicit(&h3_match_counts[s].broken, 1, memory_order_relaxed) + 1;
    if (broken != H3_MATCH_WARN_AFTER || atomic_load(&h3_match_counts[s].complete) != 0)
        return;
    /* A signature of the same model that completes covers this process
     * (the same block as another mode of the program runs it), and one
     * warning a model is enough: its variants break alike. */
    const struct h3_sig *sig = h3_signatures_get(s);
    bool covered = false;
    for (unsigned o = 0; o < h3_signatures_count() && o < H3_MATCH_MAX_SIGS; o++)
        covered |= atomic_load(&h3_match_counts[o].complete) != 0 &&
                   strcmp(h3_signatures_get(o)->model, sig->model) == 0;
    if (covered || !h3_match_first_warning(s)) {
        H3_INFO(H3_SUB_HOOK, "signature %s/%s: %d attempts broke (first: %s at call %u)%s", sig->model, sig->group,
                H3_MATCH_WARN_AFTER, atomic_load(&h3_match_counts[s].first_break),
                atomic_load(&h3_match_counts[s].first_break_call),
                covered ? "; another signature of the model covers this process" : "");
        return;
    }
    /* Of the model's signatures, the one whose attempts got furthest says why. */
    unsigned w = s;
    for (unsigned o = 0; o < h3_signatures_count() && o < H3_MATCH_MAX_SIGS; o++)
        if (atomic_load(&h3_match_counts[o].first_break) != NULL &&
            strcmp(h3_signatures_get(o)->model, sig->model) == 0 &&
            atomic_load(&h3_match_counts[o].first_break_call) > atomic_load(&h3_match_counts[w].first_break_call))
            w = o;
    sig = h3_signatures_get(w);
    const char *first = atomic_load(&h3_match_counts[w].first_break);
    unsigned call = atomic_load(&h3_match_counts[w].first_break_call);
    if (first != NULL && strcmp(first, "wiring") == 0)
        /* Every kernel and byte as recorded: the same build, run so that
         * its tensors live and die otherwise than when it was recorded. */
        H3_WARN(H3_SUB_HOOK,
                "signature %s/%s (%s): %d attempts to match it broke and none completed (first break: wiring at "
                "call %u): the calls are the recorded ones but their buffers are wired otherwise (the program "
                "keeps or frees tensors otherwise than the recorded one: autocast's cast cache, grad mode, hooks, "
                "a graph's memory pool), so nothing it covers is fused. A signature recorded from this program "
                "would cover it (signatures/README.md)",
                sig->model, sig->group, sig->path, H3_MATCH_WARN_AFTER, call);
    else if (sig->source != NULL && strcmp(sig->source, "learned") == 0)
        /* Learned in this process: no other build to blame. */
        H3_WARN(H3_SUB_HOOK,
                "signature %s/%s: %d attempts to match it broke and none completed (first break: %s at call %u): "
                "the three instances it was learned from agreed there and later ones do not, so the blocks it "
                "covers run unfused, exactly (docs/learning.md, \"Limits\")",
                sig->model, sig->group, H3_MATCH_WARN_AFTER, first, call);
    else
        H3_WARN(H3_SUB_HOOK,
                "signature %s/%s (%s): %d attempts to match it broke and none completed (first break: %s at call "
                "%u); this process's calls differ from the recording (another PyTorch, CUDA or GPU?), so nothing "
                "it covers is fused. Record it again for this build (signatures/README.md)",
                sig->model, sig->group, sig->path, H3_MATCH_WARN_AFTER, first, call);
}

static bool h3_match_wants_matmul_on(const struct h3_matcher *m, const void *stream, bool any_stream)
{
    for (unsigned s = 0; m != NULL && s < m->nsigs; s++) {
        const struct h3_match_progress *p = &m->p[s];
        if (p->starts_with_matmul ||
            (p->next > 0 && (any_stream || p->stream == stream) && p->sig->calls[p->next].kind == H3_SIG_MATMUL))
            return true;
    }
    return false;
}

bool h3_match_wants_matmul(const void *stream)
{
    return h3_match_wants_matmul_on(h3_matcher_get(), stream, false);
}

/* Keeps h3_thread.expects_matmul (what a descriptor's Create asks, on any
 * stream) up to date after the progress changed. */
static void h3_match_note_expectation(const struct h3_matcher *m)
{
    h3_thread.expects_matmul = h3_match_wants_matmul_on(m, NULL, true);
    bool attempting = false;
    for (unsigned s = 0; m != NULL && s < m->nsigs; s++)
        attempting |= m->p[s].next > 0;
    h3_thread.attempting = attempting;
}

/* The signatures' first calls (h3_match_setup, at start-up and whenever a
 * signature is learned): what can begin an attempt. */
static struct {
    atomic_ullong all;            /* a bit per signature, as h3_kernel.not_first has them */
    atomic_bool matmul, cudnn;    /* some signature begins with a GEMM, with a cuDNN execution */
} h3_match_firsts;

void h3_match_setup(void)
{
    unsigned n = h3_signatures_count();
    uint64_t all = 0;
    bool matmul = false, cudnn = false;
    for (unsigned s = 0; s < n && s < H3_MATCH_MAX_SIGS; s++) {
        const struct h3_sig *sig = h3_signatures_get(s);
        all |= 1ull << s;
        matmul |= sig->ncalls > 0 && sig->calls[0].kind == H3_SIG_MATMUL;
        cudnn |= sig->ncalls > 0 && sig->calls[0].kind == H3_SIG_CUDNN;
    }
    /* What begins a group only grows: a call found idle before stays idle
     * for the signatures it was found so for. */
    atomic_store(&h3_match_firsts.matmul, matmul);
    atomic_store(&h3_match_firsts.cudnn, cudnn);
    atomic_store(&h3_match_firsts.all, all);
    atomic_fetch_add(&h3_hot.idle_epoch, 1); /* the threads' idle kernels are asked again */
}

bool h3_match_idle(const struct h3_call *c)
{
    if (c->kind == H3_KIND_LAUNCH) {
        const struct h3_kernel *k = c->kernel;
        uint64_t all = atomic_load_explicit(&h3_match_firsts.all, memory_order_relaxed);
        return k != NULL && (atomic_load_explicit(&k->not_first, memory_order_relaxed) & all) == all;
    }
    if (c->fn == H3_FN_cublasLtMatmul) {
        if (atomic_load_explicit(&h3_match_firsts.matmul, memory_order_relaxed))
            return false;
        for (unsigned s = 0; s < h3_signatures_count() && s < H3_MATCH_MAX_SIGS; s++)
            if (h3_match_gemm_shape(h3_signatures_get(s), &c->u.lt))
                return false; /* counted as a lookalike */
        return true;
    }
    if (c->fn == H3_FN_cudnnBackendExecute)
        return !atomic_load_explicit(&h3_match_firsts.cudnn, memory_order_relaxed);
    return true; /* no signature has any other library call */
}

void h3_match_interrupt(void)
{
    struct h3_matcher *m = h3_thread.matcher; /* none made yet: nothing in progress */
    for (unsigned s = 0; m != NULL && s < m->nsigs; s++) {
        if (m->p[s].next > 0)
            h3_match_count_break(s, "foreign", m->p[s].next);
        m->p[s].next = 0;
    }
    h3_match_note_expectation(m);
}

void h3_match_call(struct h3_call *c)
{
    struct h3_matcher *m = h3_matcher_get();
    if (m == NULL)
        return;
    /* The call is the one of the first signature whose attempt it
     * continues; else of the first whose attempt it begins (the block's
     * second norm looks like its first, and must not take the call from the
     * attempt in progress). */
    const char *reason = "no_match";
    bool continued = false;
    unsigned chosen = 0;
    for (unsigned s = 0; s < m->nsigs; s++) {
        bool was = m->p[s].next > 0;
        const char *r = h3_match_advance(s, &m->p[s], c);
        if (r == NULL || strcmp(r, "other_stream") == 0)
            continue;
        bool continues = was && (m->p[s].next != 1 || m->p[s].sig->ncalls == 1 || strcmp(r, "group_complete") == 0);
        *(continues ? &c->match_continues : &c->match_starts) |= 1u << s;
        if (strcmp(reason, "no_match") == 0 || (continues && !continued)) {
            reason = r;
            continued = continues;
            chosen = s;
            c->match_sig = m->p[s].sig;
            c->match_call = m->p[s].next == 0 ? m->p[s].sig->ncalls - 1 : m->p[s].next - 1;
        }
    }
    /* Signatures that begin alike may complete the same instance: it is
     * counted once, for the one the call belongs to. */
    if (strcmp(reason, "group_complete") == 0)
        atomic_fetch_add_explicit(&h3_match_counts[chosen].complete, 1, memory_order_relaxed);
    c->reason = reason;
    h3_match_note_expectation(m);
}

void h3_match_print_stats(void (*line)(const char *fmt, ...))
{
    unsigned n = h3_signatures_count();
    for (unsigned s = 0; s < n && s < H3_MATCH_MAX_SIGS; s++) {
        const struct h3_sig *sig = h3_signatures_get(s);
        const char *why = atomic_load(&h3_match_counts[s].first_break);
        unsigned long complete = atomic_load(&h3_match_counts[s].complete);
        unsigned long broken = atomic_load(&h3_match_counts[s].broken);
        if (why == NULL)
            line("signature %s/%s: %lu complete, %lu broken", sig->model, sig->group, complete, broken);
        else
            line("signature %s/%s: %lu complete, %lu broken (first break: %s at call %u)", sig->model, sig->group,
                 complete, broken, why, atomic_load(&h3_match_counts[s].first_break_call));
        unsigned long elsewhere = atomic_load(&h3_match_counts[s].elsewhere);
        if (elsewhere > 0)
            line("signature %s/%s: %lu calls met a reference to a buffer the allocator had freed with a buffer elsewhere",
                 sig->model, sig->group, elsewhere);
    }
}

void h3_match_reset(void)
{
    for (unsigned s = 0; s < H3_MATCH_MAX_SIGS; s++) {
        atomic_store(&h3_match_counts[s].complete, 0);
        atomic_store(&h3_match_counts[s].broken, 0);
        atomic_store(&h3_match_counts[s].lookalike, 0);
        atomic_store(&h3_match_counts[s].elsewhere, 0);
        atomic_store(&h3_match_counts[s].first_break, NULL);
    }
}
