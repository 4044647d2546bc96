/*
 * The fused ops: which are on, the GPUs they may run on, and what each did.
 *
 * Owns: the op table, the switches (H3SHIM_OPS, H3SHIM_OP_<NAME>), the SM
 * allowlist (H3SHIM_SM_ALLOW), the per-op counters (runs, and fallbacks
 * per reason), and the freed-outputs rule every op follows
 * (H3SHIM_SKIP_RELEASED, the outputs left out).
 * Invariants: an op is on by default only where it is validated (its
 * validated_sms); H3SHIM_OPS=all or naming it turns it on anywhere in the
 * allowlist, with a warning on an SM where it is not validated.  An op that
 * cannot run returns a reason before launching anything, and the engine
 * issues the unfused calls instead: a fallback is never a changed result.
 * Never: runs an op on an SM outside the allowlist.
 */
#include "h3shim.h"

#include <stdlib.h>
#include <string.h>

/* The built-in test op: issues the group exactly as it was made. */
static unsigned h3_replay_plan(const struct h3_sig *sig, uint32_t first, uint32_t last, struct h3_op_range *out,
                               unsigned max)
{
    (void)sig;
    if (max == 0)
        return 0;
    out[0] = (struct h3_op_range){.op = &h3_op_replay, .first = first, .last = last};
    return 1;
}

static const char *h3_replay_run(const struct h3_op_range *r, const struct h3_deferred *calls, struct h3_call *anchor)
{
    (void)anchor;
    h3_issue(calls, r->last - r->first + 1);
    return NULL;
}

const struct h3_op h3_op_replay = {
    .name = "replay",
    .test_only = true,
    .plan = h3_replay_plan,
    .run = h3_replay_run,
};

/* The test op first, then ops.def's in its planning order. */
static const struct h3_op *const h3_ops[] = {
    &h3_op_replay,
#define H3_OP(name, sw, validated, help) &h3_op_##name,
#include "ops.def"
#undef H3_OP
};
#define H3_OPS_COUNT H3_ARRAY_LEN(h3_ops)

/* Each op's switch, the h3_config member that holds it, and its validated
 * SMs, by the op's index in h3_ops (the test op has none of them). */
#define H3_SMS(...) {__VA_ARGS__}
#define H3_OP(name, sw, validated, help) static const int h3_validated_##name[] = validated;
#include "ops.def"
#undef H3_OP
static const struct {
    const char *switch_name;
    const char *const *switch_value;
    const int *sms;
    unsigned nsms;
} h3_op_facts[H3_OPS_COUNT] = {
    {"H3SHIM_OP_REPLAY", NULL, NULL, 0},
#define H3_OP(name, sw, validated, help) \
    {"H3SHIM_OP_" #sw, &h3_config.op_##name, h3_validated_##name, H3_ARRAY_LEN(h3_validated_##name)},
#include "ops.def"
#undef H3_OP
};
#undef H3_SMS

#define H3_OP_REASONS 8
struct h3_op_counts {
    atomic_ulong runs, calls;
    atomic_ulong own_ns;   /* with stats: host time in the op's run, less the calls it made for the application */
    atomic_ulong check_ns; /* and in its check, where it has one */
    _Atomic(const char *) reason[H3_OP_REASONS]; /* why it fell back ... */
    atomic_ulong fallbacks[H3_OP_REASONS];
    _Atomic(const char *) note[H3_OP_REASONS]; /* ... and how it ran where it has more than one way */
    atomic_ulong noted[H3_OP_REASONS];
    atomic_ulong left_out, left_out_bytes; /* outputs the allocator had freed, not written (the freed-outputs rule) */
};
static struct h3_op_counts h3_op_counts[H3_OPS_COUNT];
static bool h3_op_on[H3_OPS_COUNT];
static bool h3_op_named[H3_OPS_COUNT]; /* asked for explicitly: may run where not validated */
static atomic_bool h3_op_unvalidated[H3_OPS_COUNT]; /* the guard let it run where it is not validated */

#define H3_SM_MAX 16
static int h3_sm_allow[H3_SM_MAX];
static unsigned h3_nsm_allow;

unsigned h3_ops_count(void)
{
    return H3_OPS_COUNT;
}

const struct h3_op *h3_ops_get(unsigned i)
{
    return i < H3_OPS_COUNT ? h3_ops[i] : NULL;
}

_Static_assert(H3_OPS_COUNT <= H3_OPS_MAX, "H3_OPS_MAX must hold every op");

static unsigned h3_op_index(const struct h3_op *op)
{
    for (unsigned i = 0; i < H3_OPS_COUNT; i++)
        if (h3_ops[i] == op)
            return i;
    return 0;
}

unsigned h3_op_index_of(const struct h3_op *op)
{
    return h3_op_index(op);
}

bool h3_op_enabled(const struct h3_op *op)
{
    return h3_op_on[h3_op_index(op)];
}

/* Whether `list` (comma-separated) names `name`. */
static bool h3_list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p != NULL && *p != '\0'; p = strchr(p, ',') != NULL ? strchr(p, ',') + 1 : NULL) {
        while (*p == ' ')
            p++;
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == ' '))
            return true;
    }
    return false;
}

/* The value of an op's own switch: 1, 0, or -1 when unset or bad. */
/* "swiglu, weight_cache, ...": every op H3SHIM_OPS may name. */
static const char *h3_op_names(void)
{
    static char names[256];
    if (names[0] == '\0') {
        size_t n = 0;
        for (unsigned i = 0; i < H3_OPS_COUNT && n < sizeof(names); i++)
            n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", i > 0 ? ", " : "", h3_ops[i]->name);
    }
    return names;
}

static int h3_op_switch(unsigned i)
{
    if (h3_ops[i] == &h3_op_replay)
        return h3_config.op_replay ? 1 : -1;
    return h3_config_switch(h3_op_facts[i].switch_name, *h3_op_facts[i].switch_value, "following H3SHIM_OPS", NULL);
}

void h3_ops_setup(void)
{
    const char *ops = h3_config.ops != NULL ? h3_config.ops : "";
    bool all = strcmp(ops, "all") == 0, none = strcmp(ops, "none") == 0, list = *ops && !all && !none;
    if (list) {
        /* Every name in the list must be an op. */
        char copy[256];
        snprintf(copy, sizeof(copy), "%s", ops);
        for (char *save = NULL, *t = strtok_r(copy, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
            bool known = false;
            for (unsigned i = 0; i < H3_OPS_COUNT; i++)
                known |= strcmp(h3_ops[i]->name, t) == 0;
            if (!known)
                H3_WARN(H3_SUB_CONFIG, "H3SHIM_OPS names '%s', which is not an op (ops: %s)", t, h3_op_names());
        }
    }
    for (unsigned i = 0; i < H3_OPS_COUNT; i++) {
        const struct h3_op *op = h3_ops[i];
        bool test_only = op->test_only;
        int sw = h3_op_switch(i);
        bool named = sw == 1 || (all && !test_only) || (list && h3_list_has(ops, op->name));
        bool on = sw >= 0 ? sw == 1 : named || (!*ops && !test_only && h3_op_facts[i].nsms > 0);
        h3_op_on[i] = on;
        h3_op_named[i] = named;
        if (on)
            H3_INFO(H3_SUB_ENGINE, "op %s: on%s", op->name, named ? " (asked for)" : " (validated)");
    }
    h3_verify_setup();
    h3_nsm_allow = 0;
    const char *p = h3_config.sm_allow != NULL && *h3_config.sm_allow ? h3_config.sm_allow : "90,100,103";
    while (*p != '\0' && h3_nsm_allow < H3_SM_MAX) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || v > 1000) {
            H3_WARN(H3_SUB_CONFIG, "H3SHIM_SM_ALLOW=%s: '%s' is not a compute capability such as 90; "
                                   "ignoring the rest", h3_config.sm_allow, p);
            break;
        }
        h3_sm_allow[h3_nsm_allow++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
}

static bool h3_int_in(int v, const int *list, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (list[i] == v)
            return true;
    return false;
}

/* Counts `key` (a string literal) in a table of H3_OP_REASONS keys and counts. */
static void h3_op_count_key(_Atomic(const char *) *keys, atomic_ulong *counts, const char *key)
{
    for (unsigned s = 0; s < H3_OP_REASONS; s++) {
        const char *expected = NULL;
        if (atomic_load(&keys[s]) == key || atomic_compare_exchange_strong(&keys[s], &expected, key) ||
            expected == key) {
            atomic_fetch_add_explicit(&counts[s], 1, memory_order_relaxed);
            return;
        }
    }
}

/* Counts a fallback of op `i` for `why` (a string literal). */
static void h3_op_count_fallback(unsigned i, const char *why)
{
    h3_op_count_key(h3_op_counts[i].reason, h3_op_counts[i].fallbacks, why);
}

static H3_TLS const char *h3_op_last_note;

void h3_op_note(const struct h3_op *op, const char *how)
{
    if (h3_verify_active())
        return; /* a run into scratch (verify mode) is no run of the op */
    unsigned i = h3_op_index(op);
    h3_op_count_key(h3_op_counts[i].note, h3_op_counts[i].noted, how);
    h3_op_last_note = how;
}

const char *h3_op_take_note(void)
{
    const char *how = h3_op_last_note;
    h3_op_last_note = NULL;
    return how;
}

/* The outputs the ops run by this thread left out since the last take. */
static H3_TLS struct {
    uint32_t outputs;
    uint64_t bytes;
} h3_op_last_left_out;

void h3_op_take_left_out(uint32_t *outputs, uint64_t *bytes)
{
    *outputs = h3_op_last_left_out.outputs;
    *bytes = h3_op_last_left_out.bytes;
    h3_op_last_left_out.outputs = 0;
    h3_op_last_left_out.bytes = 0;
}

/* Why `op` may not run on the current device, or NULL. */
static const char *h3_op_sm_guard(unsigned i, const struct h3_op *op)
{
    if (op->test_only)
        return NULL; /* the replay op launches nothing of its own */
    /* Said once each, when a recognised block first meets it: the user
     * preloaded the shim for this model and must not be left guessing. */
    int sm = h3_kernels_sm();
    if (sm < 0) {
        H3_WARN_ONCE(H3_SUB_ENGINE, "the GPU's compute capability could not be read: no fused op runs, every "
                                    "call passes through");
        return "sm_unknown";
    }
    if (!h3_int_in(sm, h3_sm_allow, h3_nsm_allow)) {
        H3_WARN_ONCE(H3_SUB_ENGINE, "SM %d is not in H3SHIM_SM_ALLOW: no fused op runs, every call passes "
                                    "through", sm);
        return "sm_not_allowed";
    }
    if (!h3_int_in(sm, h3_op_facts[i].sms, h3_op_facts[i].nsms)) {
        if (!h3_op_named[i]) {
            H3_WARN_ONCE(H3_SUB_ENGINE, "op %s (and any other op not validated on SM %d) is not run there: "
                                        "its calls pass through unfused; H3SHIM_OPS=%s runs it unvalidated",
                         op->name, sm, op->name);
            return "sm_not_validated";
        }
        H3_WARN_ONCE(H3_SUB_ENGINE, "op %s runs on SM %d, where it is not validated (asked for by H3SHIM_OPS "
                                    "or its switch)", op->name, sm);
        atomic_store_explicit(&h3_op_unvalidated[i], true, memory_order_relaxed); /* verify mode's default */
    }
    return NULL;
}

bool h3_op_runs_unvalidated(const struct h3_op *op)
{
    return atomic_load_explicit(&h3_op_unvalidated[h3_op_index(op)], memory_order_relaxed);
}

const char *h3_op_check(const struct h3_op *op)
{
    return h3_op_sm_guard(h3_op_index(op), op);
}

void h3_op_fallback(const struct h3_op *op, const char *why)
{
    h3_op_count_fallback(h3_op_index(op), why);
}

static void h3_left_out_take(uint32_t *outputs, uint64_t *bytes);

/* The writes the op running on this thread owes (h3_op_owe), for the engine. */
static H3_TLS struct {
    unsigned n;
    struct h3_op_owed at[H3_OWED_MAX];
} h3_owing;

void h3_op_owe(const struct h3_deferred *d, struct h3_span out)
{
    if (h3_owing.n < H3_OWED_MAX) {
        h3_owing.at[h3_owing.n++] = (struct h3_op_owed){d, out};
        return;
    }
    h3_issue(d, 1); /* no room to owe it: written now, before anything else */
}

unsigned h3_op_take_owed(struct h3_op_owed *out, unsigned max)
{
    unsigned n = h3_owing.n < max ? h3_owing.n : max;
    memcpy(out, h3_owing.at, n * sizeof(out[0]));
    for (unsigned i = n; i < h3_owing.n; i++)
        h3_issue(h3_owing.at[i].d, 1);
    h3_owing.n = 0;
    return n;
}

const char *h3_op_run(const struct h3_op_range *r, const struct h3_sig *sig, const struct h3_deferred *calls,
                      struct h3_call *anchor)
{
    unsigned i = h3_op_index(r->op);
    uint64_t t0 = h3_hot.stats ? h3_stats_clock() : 0, forward0 = h3_thread.forward_ns;
    uint32_t left;
    uint64_t left_bytes;
    /* Verify mode: a range not yet verified runs into scratch, beside its
     * calls issued as made, or falls back (verify.c). */
    const char *gate = r->anchored || r->op->test_only || r->op->unverified ? NULL : h3_verify_begin(r, sig, calls);
    if (gate != NULL && gate != h3_verify_running) {
        h3_op_count_fallback(i, gate);
        return gate;
    }
    h3_left_out_take(&left, &left_bytes); /* nothing of this run's yet */
    h3_owing.n = 0;
    const char *why = r->op->run(r, calls, anchor);
    if (gate != NULL)
        why = h3_verify_ran(why);
    h3_left_out_take(&left, &left_bytes);
    if (why != NULL)
        h3_owing.n = 0; /* a run that failed owes nothing: its calls are issued */
    if (t0 != 0)
        atomic_fetch_add_explicit(&h3_op_counts[i].own_ns, h3_own_ns_since(t0, forward0), memory_order_relaxed);
    if (why == h3_verify_running)
        return why; /* counted by verify.c */
    if (why != NULL) {
        h3_op_count_fallback(i, why);
        return why;
    }
    atomic_fetch_add_explicit(&h3_op_counts[i].runs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_op_counts[i].calls, h3_op_range_calls(r), memory_order_relaxed);
    if (left != 0) {
        atomic_fetch_add_explicit(&h3_op_counts[i].left_out, left, memory_order_relaxed);
        atomic_fetch_add_explicit(&h3_op_counts[i].left_out_bytes, left_bytes, memory_order_relaxed);
        h3_op_last_left_out.outputs += left;
        h3_op_last_left_out.bytes += left_bytes;
    }
    return NULL;
}

const char *h3_op_check_range(const struct h3_op_range *r, const struct h3_deferred *calls,
                              struct h3_call *anchor)
{
    uint64_t t0 = h3_hot.stats ? h3_stats_clock() : 0, forward0 = h3_thread.forward_ns;
    const char *why = r->op->check != NULL ? r->op->check(r, calls, anchor) : NULL;
    if (t0 != 0)
        atomic_fetch_add_explicit(&h3_op_counts[h3_op_index(r->op)].check_ns, h3_own_ns_since(t0, forward0),
                                  memory_order_relaxed);
    if (why != NULL)
        h3_op_count_fallback(h3_op_index(r->op), why);
    return why;
}

uint64_t h3_ops_own_ns(void)
{
    uint64_t ns = 0;
    for (unsigned i = 0; i < H3_OPS_COUNT; i++)
        ns += atomic_load(&h3_op_counts[i].own_ns) + atomic_load(&h3_op_counts[i].check_ns);
    return ns;
}

void h3_ops_print_stats(void (*line)(const char *fmt, ...))
{
    for (unsigned i = 0; i < H3_OPS_COUNT; i++) {
        if (!h3_op_on[i])
            continue;
        struct h3_op_counts *k = &h3_op_counts[i];
        unsigned long runs = atomic_load(&k->runs);
        double per = runs != 0 ? 1.0 / (double)runs : 0.0;
        line("op %-12s %lu groups run (%lu calls), own time %.0f ns a run (%.0f of it in the check)",
             h3_ops[i]->name, runs, atomic_load(&k->calls),
             (double)(atomic_load(&k->own_ns) + atomic_load(&k->check_ns)) * per,
             (double)atomic_load(&k->check_ns) * per);
        unsigned long left = atomic_load(&k->left_out);
        if (left != 0)
            line("op %-12s left out %lu outputs the allocator had freed (%.1f MiB, %.1f a run)", h3_ops[i]->name,
                 left, (double)atomic_load(&k->left_out_bytes) / 1048576.0, (double)left * per);
        for (unsigned s = 0; s < H3_OP_REASONS; s++) {
            const char *how = atomic_load(&k->note[s]);
            if (how != NULL)
                line("op %-12s ran with %-20s %lu", h3_ops[i]->name, how, atomic_load(&k->noted[s]));
        }
        for (unsigned s = 0; s < H3_OP_REASONS; s++) {
            const char *why = atomic_load(&k->reason[s]);
            if (why != NULL)
                line("op %-12s fallback %-20s %lu", h3_ops[i]->name, why, atomic_load(&k->fallbacks[s]));
        }
    }
}

void h3_ops_reset(void)
{
    for (unsigned i = 0; i < H3_OPS_COUNT; i++) {
        atomic_store(&h3_op_counts[i].runs, 0);
        atomic_store(&h3_op_counts[i].calls, 0);
        atomic_store(&h3_op_counts[i].own_ns, 0);
        atomic_store(&h3_op_counts[i].check_ns, 0);
        atomic_store(&h3_op_counts[i].left_out, 0);
        atomic_store(&h3_op_counts[i].left_out_bytes, 0);
        for (unsigned s = 0; s < H3_OP_REASONS; s++) {
            atomic_store(&h3_op_counts[i].reason[s], NULL);
            atomic_store(&h3_op_counts[i].fallbacks[s], 0);
            atomic_store(&h3_op_counts[i].note[s], NULL);
            atomic_store(&h3_op_counts[i].noted[s], 0);
        }
    }
}

/* ---- what planners read from a signature ---- */

/* u32 of a launch's recorded bytes at (param, offset); false if not recorded. */
bool h3_sig_u32(const struct h3_sig_call *c, uint16_t param, uint16_t offset, uint32_t *out)
{
    for (uint32_t i = 0; i < c->nbytes; i++) {
        const struct h3_sig_bytes *b = &c->bytes[i];
        if (b->param == param && b->offset <= offset && offset + 4 <= b->offset + b->len) {
            memcpy(out, b->data + (offset - b->offset), 4);
            return true;
        }
    }
    return false;
}

/* Reads an elementwise_kernel<128,4> closure with OffsetCalculator<nargs> at offset 0 of param 1. */
bool h3_ew_read(const struct h3_sig_call *c, unsigned nargs, struct h3_ew *l)
{
    if (c->nparams != 2 || nargs > 3 || !h3_sig_u32(c, 0, 0, &l->n) || !h3_sig_u32(c, 1, 0, &l->dims) ||
        l->dims < 1 || l->dims > 3)
        return false;
    for (unsigned d = 0; d < l->dims; d++) {
        if (!h3_sig_u32(c, 1, (uint16_t)(4 + 12 * d), &l->size[d]))
            return false;
        for (unsigned a = 0; a < nargs; a++)
            if (!h3_sig_u32(c, 1, (uint16_t)(4 + 25 * 12 + 4 * (d * nargs + a)), &l->stride[d][a]))
                return false;
    }
    return true;
}

bool h3_sig_is_aten(const struct h3_sig_call *c)
{
    static const char aten[] = "_ZN2at6native";
    return c->kind == H3_SIG_LAUNCH && c->kernel != NULL && strncmp(c->kernel, aten, sizeof(aten) - 1) == 0;
}

bool h3_sig_bytes_are(const struct h3_sig_call *c, uint16_t param, uint16_t offset, const void *want, unsigned n)
{
    for (uint32_t i = 0; i < c->nbytes; i++) {
        const struct h3_sig_bytes *b = &c->bytes[i];
        if (b->param == param && b->offset <= offset && offset + n <= (unsigned)b->offset + b->len)
            return memcmp(b->data + (offset - b->offset), want, n) == 0;
    }
    return false;
}

bool h3_sig_u32s_are(const struct h3_sig_call *c, uint16_t param, uint16_t offset, const uint32_t *want, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        uint32_t v;
        if (!h3_sig_u32(c, param, (uint16_t)(offset + 4 * i), &v) || v != want[i])
            return false;
    }
    return true;
}

bool h3_sig_root(const struct h3_sig *sig, uint32_t call, uint16_t param, uint16_t offset, uint32_t *rc,
                 uint32_t *rs, int64_t *delta)
{
    int s = h3_sig_slot_at(&sig->calls[call], param, offset);
    if (s < 0)
        return false;
    *rc = call, *rs = (uint32_t)s, *delta = 0;
    for (unsigned hops = 0; hops < sig->ncalls; hops++) {
        const struct h3_sig_slot *x = &sig->calls[*rc].slots[*rs];
        if (x->ref != H3_REF_SLOT)
            return x->ref == H3_REF_FIRST;
        *delta += x->delta;
        *rc = x->ref_call, *rs = x->ref_slot;
    }
    return false;
}

/*
 * The group's launches allocate their outputs in order from memory PyTorch's
 * allocator holds; an output that a later output of the group overlaps was
 * freed before that later one was allocated (live tensors never overlap),
 * so nothing reads it after the group.  An op that writes every output at
 * once must not write those: its threads would race with the later
 * output's.  Returns the freed outputs' bits (bit i for out[i]).
 */
static uint64_t h3_outputs_freed(const struct h3_span *out, unsigned n)
{
    uint64_t freed = 0;
    for (unsigned i = 0; i < n && i < 64; i++)
        for (unsigned k = i + 1; k < n; k++)
            if (h3_spans_overlap(out[i], out[k])) {
                freed |= 1ull << i;
                break;
            }
    return freed;
}

/* ---- the freed-outputs rule: what the allocator freed is not written ----
 *
 * An output of a held launch that a free the allocator reported on this
 * thread after that launch overlaps is left out by the fused op (released.c
 * says why that is the output's free).  Autograd, a hook or any Python
 * reference that keeps the tensor keeps its block: no free, and the output
 * is written.  Frees made on another thread, and those no report told, are
 * not known: written too.  Most of a block's intermediates are freed only
 * once the launch that reads them returns to Python, after the group's last
 * launch; so while the rule is on, the engine runs a complete group at the
 * thread's next observed call instead of at its last launch (engine.c). */

/* Validated: tests/evidence/2026-11-30-nvidia-h200-{swiglu,residual-rmsnorm}-kernel-left-out-d405362.json
 * and ...-qk-norm-rope-kernel-out-d94eff3.json (the kernels with those outputs passed as null),
 * ...-full-decode-{quick-released,released}-d94eff3.md (the decodes with the rule on and off, every
 * arm bitwise), ...-robust-{threads,variants,workloads}-d94eff3.md. */
static const int h3_released_validated[] = {90};

/* H3SHIM_SKIP_RELEASED: 1, 0, or -1 (unset: on where validated). */
static int h3_released_switch(void)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    return h3_config_switch("H3SHIM_SKIP_RELEASED", h3_config.skip_released, "on where validated", &warned);
}

/* Decided at the first group that asks once a report has come: 1 on, 2 off. */
static atomic_int h3_released_decided;

bool h3_released_on(void)
{
    int d = atomic_load_explicit(&h3_released_decided, memory_order_relaxed);
    if (d != 0)
        return d == 1;
    if (!h3_released_seen())
        return false;
    int sw = h3_released_switch(), sm = h3_kernels_sm();
    if (sw < 0 && sm < 0)
        return false; /* asked again once the device is known */
    bool on = sw == 1;
    for (unsigned i = 0; sw < 0 && i < H3_ARRAY_LEN(h3_released_validated); i++)
        on |= h3_released_validated[i] == sm;
    atomic_store_explicit(&h3_released_decided, on ? 1 : 2, memory_order_relaxed);
    return on;
}

const char *h3_released_state(void)
{
    if (!h3_released_seen())
        return "no report from PyTorch's caching allocator: every output written";
    switch (atomic_load(&h3_released_decided)) {
    case 1: return "on";
    case 2: return "off (H3SHIM_SKIP_RELEASED=0, or not validated on this GPU)";
    default: return "not decided (no group completed)";
    }
}

/* This thread's outputs left out since the last take. */
static H3_TLS struct {
    uint32_t outputs;
    uint64_t bytes;
} h3_left_out;

/* The first held launch after the running range's first call that is not its own (h3_op_later). */
static H3_TLS const struct h3_deferred *h3_later;

void h3_op_later(const struct h3_deferred *next)
{
    h3_later = next;
}

uint64_t h3_outputs_dead(const struct h3_span *out, const struct h3_deferred *const *by, unsigned n)
{
    const uint64_t freed = h3_outputs_freed(out, n);
    if (!h3_released_on())
        return freed;
    uint64_t released = 0;
    for (unsigned i = 0; i < n && i < 64; i++) {
        if (out[i].lo == 0 || ((freed >> i) & 1))
            continue;
        /* Freed before anything that may read it was made: no launch made
         * after a free reads the freed tensor (whatever gets the memory next
         * is written first).  A held launch made before the free may. */
        if (h3_later != NULL ? h3_released_between(by[i]->made, h3_later->made, out[i]) != 1
                             : !h3_released_since(by[i]->made, out[i]))
            continue;
        released |= 1ull << i;
        h3_left_out.outputs++;
        h3_left_out.bytes += out[i].hi - out[i].lo;
    }
    return freed | released;
}

/*
 * An op that runs where its range's first call was made writes the outputs
 * of its later calls ahead of the held launches between that are not its
 * own (another op's, or none's).  The planner saw in the signature that
 * those launches do not refer to the outputs; what it cannot see is memory
 * one of them reads or writes being freed after it was made and given to
 * an output made later: written early, the output would be read or
 * overwritten by that launch.  No free in between overlapping the output,
 * on any thread, rules that out (a launch touches only memory live when it
 * was made).  Returns the fallback's reason, or NULL.
 */
const char *h3_outputs_reused(const struct h3_span *out, const struct h3_deferred *const *by, unsigned n,
                              uint64_t dead)
{
    for (unsigned i = 0; h3_later != NULL && i < n; i++)
        if (out[i].lo != 0 && !(i < 64 && ((dead >> i) & 1)) && h3_later < by[i] &&
            h3_released_maybe_between(h3_later->made, by[i]->made, out[i]))
            return "freed_between";
    return NULL;
}

static void h3_left_out_take(uint32_t *outputs, uint64_t *bytes)
{
    *outputs = h3_left_out.outputs;
    *bytes = h3_left_out.bytes;
    h3_left_out.outputs = 0;
    h3_left_out.bytes = 0;
}

bool h3_ew2d_read(const struct h3_sig_call *c, unsigned nargs, struct h3_ew2d *l)
{
    struct h3_ew e;
    if (!h3_ew_read(c, nargs, &e) || e.dims != 2)
        return false;
    l->n = e.n, l->width = e.size[0], l->rows = e.size[1];
    for (unsigned a = 0; a < nargs; a++)
        l->elem[a] = e.stride[0][a], l->row[a] = e.stride[1][a];
    return l->n == l->width * l->rows;
}
