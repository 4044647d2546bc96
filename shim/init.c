/*
 * Process-wide state and the one lazy initialisation.
 *
 * Owns: h3_hot.state, h3_hot.observe, h3_hot.paused, the thread-local
 * re-entrancy depth, and the process exit hook.
 * Invariants: h3_init() is idempotent and thread-safe; it reads the
 * environment, sets up logging, the trace and fork handling, and touches no
 * CUDA library.  There is no constructor that does work: the first
 * intercepted call initialises the shim.
 * Never: initialises CUDA, or fails in a way that changes what a wrapper
 * returns.
 */
#include "h3shim.h"

#include <pthread.h>
#include <stdlib.h>

struct h3_hot h3_hot;
H3_TLS struct h3_thread h3_thread;
H3_TLS const void *h3_idle_keys[H3_IDLE_KEYS] __attribute__((aligned(64)));

static pthread_once_t h3_init_once = PTHREAD_ONCE_INIT;

extern char **environ;

static void h3_init_run(void)
{
    h3_thread.depth++;
    h3_config_load(environ);
    h3_hot.stats = h3_config.stats;
    h3_log_setup();
    h3_config_report();
    if (h3_config.disable) {
        H3_INFO(H3_SUB_INIT, "disabled by H3SHIM_DISABLE: pure pass-through");
        atomic_store_explicit(&h3_hot.state, 2, memory_order_release);
        h3_thread.depth--;
        return;
    }
    h3_trace_open();
    h3_signatures_load();
    h3_match_setup();
    h3_engine_setup();
    h3_c10_resolve();
    h3_hot.learn_on = h3_config.learn && h3_hot.engine_on;
    h3_hot.match_on = (h3_config.match || h3_hot.engine_on) && (h3_signatures_count() > 0 || h3_hot.learn_on);
    h3_hot.observe = h3_hot.trace_on || h3_hot.stats || h3_hot.match_on;
    h3_hot.lt_remember = h3_config.lt_shadow != 0 && h3_hot.match_on;
    h3_fork_setup();
    H3_INFO(H3_SUB_INIT, "active: trace %s, stats %s, matching %s, engine %s, learning %s",
            h3_hot.trace_on ? "on" : "off", h3_hot.stats ? "on" : "off", h3_hot.match_on ? "on" : "off",
            h3_hot.engine_on ? "on" : "off", h3_hot.learn_on ? "on" : "off");
    atomic_store_explicit(&h3_hot.state, 1, memory_order_release);
    h3_thread.depth--;
}

void h3_init(void)
{
    /* A call made by the shim's own initialisation is simply forwarded. */
    if (h3_thread.depth != 0)
        return;
    pthread_once(&h3_init_once, h3_init_run);
}

static bool h3_pause_unsafe(void)
{
    return atomic_load(&h3_hot.holding) != 0 || atomic_load(&h3_hot.captures_recording) != 0 ||
           atomic_load(&h3_hot.wc_live) != 0 ||
           atomic_load(&h3_hot.wc_held) != 0 || h3_hot.trace_on;
}

/*
 * Exported as h3shim_pause (h3shim.h): lets a program time the same loop
 * with and without the shim's observation in one process, free of the
 * swings between processes.  A pause is refused where an unobserved call
 * could change what the shim does after it: launches held (they must be
 * issued before anything later), a capture open (its end must be seen),
 * weight copies (a write to their sources must be seen) or a trace (it
 * would have a silent gap).  Configuration calls on the descriptors the
 * shim remembers stay noted, so what it knows stays true; no new one is
 * remembered (its GEMM, if made after the pause, is read in full).  The
 * calling thread's attempt at a block, if any, breaks here: calls it will
 * not see come next.  The checks
 * are made again once paused, so that another thread's first copy or held
 * launch in between undoes the pause; a thread already inside a call that
 * is making one can still slip past, so a program pauses only where no
 * other thread runs H3 blocks.
 */
H3_EXPORT int h3shim_pause(int on)
{
    if (h3_state_now() != 1)
        return -1;
    if (!on) {
        atomic_store_explicit(&h3_hot.paused, false, memory_order_relaxed);
        return 0;
    }
    if (h3_pause_unsafe())
        return -1;
    h3_thread.depth++;
    h3_match_interrupt();
    h3_thread.depth--;
    atomic_store(&h3_hot.paused, true);
    if (h3_pause_unsafe()) { /* another thread made one meanwhile */
        atomic_store(&h3_hot.paused, false);
        return -1;
    }
    return 0;
}

/* The stats table: each subsystem prints its own lines through the stats' line format. */
static void h3_stats_report(void)
{
    h3_stats_print_calls();
    h3_record_print_kernels(h3_stats_line);
    if (h3_hot.match_on) {
        h3_match_print_stats(h3_stats_line);
        h3_learn_print_stats(h3_stats_line);
        h3_engine_print_stats(h3_stats_line);
        h3_lt_print_stats(h3_stats_line);
    }
    h3_stats_print_time(h3_ops_own_ns());
    h3_stats_print_decisions();
}

/* At exit (or unload): the stats table and the end of the trace. */
__attribute__((destructor)) static void h3_fini(void)
{
    if (atomic_load_explicit(&h3_hot.state, memory_order_acquire) != 1)
        return;
    h3_thread.depth++;
    if (h3_hot.stats)
        h3_stats_report();
    h3_trace_close();
}
