/*
 * Statistics (H3SHIM_STATS=1): calls per API and per kernel, decisions and
 * their reasons, printed as one table to stderr at exit.
 *
 * Owns: the per-hook counters, the host-time counters and the decision
 * table, and the stats' line format (h3_stats_line), which the other
 * subsystems print their own lines through (init.c calls each at exit).
 * Invariants: counting is lock-free (relaxed atomic adds); the table is
 * printed once, at exit, in one write per line.
 * Never: reads another subsystem's state.
 */
#include "h3shim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_ulong h3_stat_calls[H3_FN_COUNT];
static atomic_ulong h3_stat_shim_ns, h3_stat_forward_ns, h3_stat_shim_calls;
static atomic_ulong h3_stat_own_ns[H3_FN_COUNT];      /* the shim's own time, per entry point */
static atomic_ulong h3_stat_describe_ns[H3_FN_COUNT]; /* the part of it describing the call */
static atomic_ulong h3_stat_part_ns[H3_PARTS];       /* the matcher's and the scans' parts */
static atomic_ulong h3_stat_reads;                    /* the stats' own clock reads inside the parts */
static atomic_ulong h3_stat_config_ns, h3_stat_configs; /* configuration calls' own time (in h3_stat_shim_ns) */
static atomic_ulong h3_stat_config_by[H3_FN_COUNT];    /* configuration calls noted, by entry point */
static atomic_ulong h3_stat_idle_fast[H3_FN_COUNT];    /* calls an idle thread's wrappers forwarded */
static atomic_ulong h3_stat_idle_slow[H3_SLOW_KINDS];  /* idle launches they did not, by why */
static const char *const h3_idle_slow_names[H3_SLOW_KINDS] = {
    [H3_SLOW_WATCHED] = "something watched calls",
    [H3_SLOW_UNNOTED] = "the thread had none noted (its first, or a wake or follow set them aside)",
    [H3_SLOW_EPOCH] = "noted before what can begin a group or what a handle names changed",
    [H3_SLOW_TABLE] = "not in the thread's table (first seen, or evicted)",
    [H3_SLOW_LOOKING] = "the thread's learner looking (not in its refused launches)",
    [H3_SLOW_BY_CONFIG] = "an extended configuration's (its wrapper forwards none unobserved)",
};
static atomic_ulong h3_stat_one_off_ns[H3_ONE_OFF_KINDS], h3_stat_one_offs[H3_ONE_OFF_KINDS];
static atomic_ulong h3_stat_errors[H3_FN_COUNT];
/* The shim's own host time per call, in quarter-octave buckets: the mean
 * alone would be dominated by one-off work (first-use lookups, module loads,
 * weight copies' allocations), the median and tail show the steady cost. */
#define H3_NS_BUCKETS 252
static atomic_ulong h3_stat_ns_hist[H3_NS_BUCKETS];

static unsigned h3_ns_bucket(uint64_t ns)
{
    if (ns < 4)
        return (unsigned)ns;
    unsigned k = 63u - (unsigned)__builtin_clzll(ns); /* 2..63 */
    return 4u * (k - 1u) + (unsigned)((ns >> (k - 2u)) & 3u);
}

/* The smallest time in bucket `b`. */
static uint64_t h3_ns_bucket_low(unsigned b)
{
    if (b < 4)
        return b;
    return (uint64_t)(4u + b % 4u) << (b / 4u - 1u);
}

/* The bucket bounds [low, high) of the q-quantile of the own-time histogram. */
static void h3_ns_quantile(double q, unsigned long total, uint64_t *low, uint64_t *high)
{
    unsigned long want = (unsigned long)(q * (double)total), seen = 0;
    for (unsigned b = 0; b < H3_NS_BUCKETS; b++) {
        seen += atomic_load_explicit(&h3_stat_ns_hist[b], memory_order_relaxed);
        if (seen > want) {
            *low = h3_ns_bucket_low(b);
            *high = b + 1 < H3_NS_BUCKETS ? h3_ns_bucket_low(b + 1) : UINT64_MAX;
            return;
        }
    }
    *low = *high = 0;
}

#define H3_DECISION_SLOTS 64
struct h3_decision_count {
    _Atomic(const char *) decision;
    _Atomic(const char *) reason;
    atomic_ulong count;
};
static struct h3_decision_count h3_decisions[H3_DECISION_SLOTS];

void h3_stats_idle_fast(enum h3_fn fn)
{
    atomic_fetch_add_explicit(&h3_stat_idle_fast[fn], 1, memory_order_relaxed);
}

void h3_stats_idle_slow(enum h3_idle_slow why)
{
    atomic_fetch_add_explicit(&h3_stat_idle_slow[why], 1, memory_order_relaxed);
}

void h3_stats_count(const struct h3_call *c)
{
    if (!h3_hot.stats)
        return;
    atomic_fetch_add_explicit(&h3_stat_calls[c->fn], 1, memory_order_relaxed);
    if (c->result != 0)
        atomic_fetch_add_explicit(&h3_stat_errors[c->fn], 1, memory_order_relaxed);
    /* Decisions and reasons are string literals: compare by address. */
    for (unsigned i = 0; i < H3_DECISION_SLOTS; i++) {
        struct h3_decision_count *d = &h3_decisions[i];
        const char *dec = atomic_load_explicit(&d->decision, memory_order_acquire);
        if (dec == NULL) {
            const char *expected = NULL;
            if (atomic_compare_exchange_strong(&d->reason, &expected, c->reason)) {
                atomic_store_explicit(&d->decision, c->decision, memory_order_release);
                dec = c->decision;
            } else {
                while ((dec = atomic_load_explicit(&d->decision, memory_order_acquire)) == NULL)
                    ;
            }
        }
        if (dec == c->decision && atomic_load_explicit(&d->reason, memory_order_relaxed) == c->reason) {
            atomic_fetch_add_explicit(&d->count, 1, memory_order_relaxed);
            return;
        }
    }
}

void h3_stats_shim_time(enum h3_fn fn, uint64_t own_ns, uint64_t describe_ns, uint64_t forward_ns,
                        uint64_t reads, const uint64_t part_ns[H3_PARTS])
{
    for (unsigned i = 0; i < H3_PARTS; i++)
        if (part_ns[i] != 0)
            atomic_fetch_add_explicit(&h3_stat_part_ns[i], part_ns[i], memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_reads, reads, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_own_ns[fn], own_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_describe_ns[fn], describe_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_shim_ns, own_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_forward_ns, forward_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_ns_hist[h3_ns_bucket(own_ns)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_shim_calls, 1, memory_order_relaxed);
}

void h3_stats_config_time(enum h3_fn fn, uint64_t ns)
{
    if ((unsigned)fn < H3_FN_COUNT)
        atomic_fetch_add_explicit(&h3_stat_config_by[fn], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_reads, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_config_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_configs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_shim_ns, ns, memory_order_relaxed);
}

void h3_stats_one_off(enum h3_one_off kind, uint64_t ns)
{
    atomic_fetch_add_explicit(&h3_stat_one_off_ns[kind], ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h3_stat_one_offs[kind], 1, memory_order_relaxed);
}

static double h3_clock_read_ns(void);

/*
 * The shim's own host time so far, for a program that wants to see it while
 * it runs (tests/gpu/robust.py: the shim's share of each workload's time).
 * Exported as h3shim_host_time; declared in README.md ("Statistics").
 * Returns 0 and the totals, or -1 when H3SHIM_STATS is off (nothing is
 * timed then) or an argument is NULL.
 */
H3_EXPORT int h3shim_host_time(unsigned long long *own_ns, unsigned long long *calls,
                               unsigned long long *issuing_ns)
{
    if (own_ns == NULL || calls == NULL || issuing_ns == NULL || h3_state_now() == 0 || !h3_hot.stats)
        return -1;
    /* Less the stats' own clock reads inside the parts. */
    uint64_t own = atomic_load_explicit(&h3_stat_shim_ns, memory_order_relaxed),
             reads = (uint64_t)((double)atomic_load_explicit(&h3_stat_reads, memory_order_relaxed) *
                                h3_clock_read_ns());
    *own_ns = own > reads ? own - reads : 0;
    *calls = atomic_load_explicit(&h3_stat_shim_calls, memory_order_relaxed);
    *issuing_ns = atomic_load_explicit(&h3_stat_forward_ns, memory_order_relaxed);
    return 0;
}

/* What one clock read costs here, at its cheapest (timed once, warm: what
 * is taken out of the shim's time for its reads is not more than they cost). */
static double h3_clock_read_ns(void)
{
    static _Atomic double timed = -1;
    double best = atomic_load(&timed);
    if (best >= 0)
        return best;
    for (int round = 0; round < 5; round++) {
        uint64_t t0 = h3_now_ns(), t = t0;
        for (int i = 0; i < 4096; i++)
            t = h3_now_ns();
        double each = (double)(t - t0) / 4096.0;
        best = round == 0 || each < best ? each : best;
    }
    atomic_store(&timed, best);
    return best;
}

void h3_stats_reset(void)
{
    for (unsigned i = 0; i < H3_FN_COUNT; i++) {
        atomic_store(&h3_stat_calls[i], 0);
        atomic_store(&h3_stat_errors[i], 0);
        atomic_store(&h3_stat_own_ns[i], 0);
        atomic_store(&h3_stat_describe_ns[i], 0);
        atomic_store(&h3_stat_config_by[i], 0);
        atomic_store(&h3_stat_idle_fast[i], 0);
        if (i < H3_PARTS)
            atomic_store(&h3_stat_part_ns[i], 0);
        atomic_store(&h3_stat_config_ns, 0);
        atomic_store(&h3_stat_configs, 0);
        atomic_store(&h3_stat_reads, 0);
        if (i < H3_ONE_OFF_KINDS) {
            atomic_store(&h3_stat_one_off_ns[i], 0);
            atomic_store(&h3_stat_one_offs[i], 0);
        }
    }
    atomic_store(&h3_stat_shim_ns, 0);
    atomic_store(&h3_stat_forward_ns, 0);
    atomic_store(&h3_stat_shim_calls, 0);
    for (unsigned i = 0; i < H3_SLOW_KINDS; i++)
        atomic_store(&h3_stat_idle_slow[i], 0);
    for (unsigned i = 0; i < H3_NS_BUCKETS; i++)
        atomic_store(&h3_stat_ns_hist[i], 0);
    for (unsigned i = 0; i < H3_DECISION_SLOTS; i++)
        atomic_store(&h3_decisions[i].count, 0);
}

void h3_stats_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    h3_write_line(2, "stats: ", fmt, ap);
    va_end(ap);
}

/* One line "TITLE: ENTRY N, ..." of the entry points whose count is not 0 (none: no line). */
static void h3_stats_by_entry(const char *title, atomic_ulong *counts)
{
    char by[512];
    size_t at = 0;
    by[0] = '\0';
    for (unsigned i = 0; i < H3_FN_COUNT && at < sizeof(by); i++) {
        unsigned long n = atomic_load(&counts[i]);
        if (n != 0)
            at += (size_t)snprintf(by + at, sizeof(by) - at, "%s%s %lu", at > 0 ? ", " : "", h3_hooks[i].name, n);
    }
    if (at > 0)
        h3_stats_line("%s: %s", title, by);
}

void h3_stats_print_calls(void)
{
    h3_stats_line("%-32s %12s %8s %14s %14s", "api", "calls", "errors", "own ns/call", "describing");
    for (unsigned i = 0; i < H3_FN_COUNT; i++) {
        unsigned long calls = atomic_load(&h3_stat_calls[i]);
        if (calls != 0)
            h3_stats_line("%-32s %12lu %8lu %14.0f %14.0f", h3_hooks[i].name, calls, atomic_load(&h3_stat_errors[i]),
                          (double)atomic_load(&h3_stat_own_ns[i]) / (double)calls,
                          (double)atomic_load(&h3_stat_describe_ns[i]) / (double)calls);
    }
    /* Configuration calls the shim looked at (the rest were forwarded at once). */
    h3_stats_by_entry("configuration calls noted", h3_stat_config_by);
    h3_stats_by_entry("forwarded by their wrapper, the thread idle (not observed, not timed)", h3_stat_idle_fast);
    char by[768];
    size_t at = 0;
    for (unsigned i = 0; i < H3_SLOW_KINDS && at < sizeof(by); i++) {
        unsigned long n = atomic_load(&h3_stat_idle_slow[i]);
        if (n != 0)
            at += (size_t)snprintf(by + at, sizeof(by) - at, "%s%lu %s", at > 0 ? "; " : "", n, h3_idle_slow_names[i]);
    }
    if (at > 0)
        h3_stats_line("idle launches observed, not forwarded by their wrapper: %s", by);
}

void h3_stats_print_time(uint64_t ops_ns)
{
    unsigned long shim_calls = atomic_load(&h3_stat_shim_calls);
    if (shim_calls != 0)
        h3_stats_line("shim host time: %lu observed calls, %.0f ns per call of its own (record, matcher, "
                      "engine, op planning; the clock reads included), %.0f ns per call issuing held "
                      "launches and ops' kernels and library calls",
                      shim_calls, (double)atomic_load(&h3_stat_shim_ns) / (double)shim_calls,
                      (double)atomic_load(&h3_stat_forward_ns) / (double)shim_calls);
    if (shim_calls != 0) {
        uint64_t describe = 0, match = atomic_load(&h3_stat_part_ns[H3_PART_MATCH]),
                 scan = atomic_load(&h3_stat_part_ns[H3_PART_SCAN]), ops = ops_ns;
        for (unsigned i = 0; i < H3_FN_COUNT; i++)
            describe += atomic_load(&h3_stat_describe_ns[i]);
        uint64_t config = atomic_load(&h3_stat_config_ns);
        uint64_t own = atomic_load(&h3_stat_shim_ns), parts = describe + match + scan + ops + config;
        double per = 1.0 / (double)shim_calls;
        h3_stats_line("shim host time per call, its own, by part: describing %.0f ns, matching %.0f ns, "
                      "weight_cache's scans %.0f ns, ops' checks and runs %.0f ns, configuration calls (%lu, "
                      "not counted as calls) %.0f ns, the rest (call record, engine's queue) %.0f ns",
                      (double)describe * per, (double)match * per, (double)scan * per, (double)ops * per,
                      atomic_load(&h3_stat_configs), (double)config * per,
                      own > parts ? (double)(own - parts) * per : 0.0);
        uint64_t kernels_ns = atomic_load(&h3_stat_one_off_ns[H3_ONE_OFF_KERNEL]),
                 copies_ns = atomic_load(&h3_stat_one_off_ns[H3_ONE_OFF_COPY]),
                 module_ns = atomic_load(&h3_stat_one_off_ns[H3_ONE_OFF_MODULE]),
                 once = kernels_ns + copies_ns + module_ns;
        h3_stats_line("shim host time, one-off work in it: the first sight of %lu kernels %.2f ms, %lu "
                      "weight copies made %.2f ms, %lu loads of the fused kernels %.2f ms; without them, "
                      "%.0f ns per call of its own",
                      atomic_load(&h3_stat_one_offs[H3_ONE_OFF_KERNEL]), (double)kernels_ns / 1e6,
                      atomic_load(&h3_stat_one_offs[H3_ONE_OFF_COPY]), (double)copies_ns / 1e6,
                      atomic_load(&h3_stat_one_offs[H3_ONE_OFF_MODULE]), (double)module_ns / 1e6,
                      own > once ? (double)(own - once) * per : 0.0);
        double read_ns = h3_clock_read_ns(), reads = (double)atomic_load(&h3_stat_reads),
               net = (double)(own > once ? own - once : 0) - reads * read_ns;
        h3_stats_line("shim host time, the stats' own clock reads in it: %.1f a call between its first and last, "
                      "%.1f ns a read (timed once, warm); without them and the one-off work, %.0f ns per call of its own",
                      reads * per, read_ns, net > 0 ? net * per : 0.0);
    }
    if (shim_calls != 0) {
        uint64_t lo[3], hi[3];
        const double q[3] = {0.5, 0.9, 0.99};
        for (int i = 0; i < 3; i++)
            h3_ns_quantile(q[i], shim_calls, &lo[i], &hi[i]);
        h3_stats_line("shim host time per call, its own: median %lu-%lu ns, 90th percentile %lu-%lu ns, "
                      "99th percentile %lu-%lu ns (bucket bounds)",
                      (unsigned long)lo[0], (unsigned long)hi[0], (unsigned long)lo[1], (unsigned long)hi[1],
                      (unsigned long)lo[2], (unsigned long)hi[2]);
    }
}

void h3_stats_print_decisions(void)
{
    h3_stats_line("%-12s %-24s %s", "decision", "reason", "calls");
    for (unsigned i = 0; i < H3_DECISION_SLOTS; i++) {
        const char *dec = atomic_load(&h3_decisions[i].decision);
        unsigned long n = atomic_load(&h3_decisions[i].count);
        if (dec != NULL && n != 0)
            h3_stats_line("%-12s %-24s %lu", dec, atomic_load(&h3_decisions[i].reason), n);
    }
}
