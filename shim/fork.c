/*
 * fork() handling.
 *
 * Owns: the pthread_atfork handlers.
 * Invariants: the child starts with usable locks, its own thread ids, its
 * own trace file when the trace path has %p, and its own statistics.
 */
#include "h3shim.h"

#include <pthread.h>

static void h3_fork_child(void)
{
    h3_trace_after_fork_child();
    h3_stats_reset();
    h3_record_reset_counts();
    h3_match_reset();
    h3_engine_after_fork_child();
    h3_released_after_fork_child();
    h3_learn_after_fork_child();
    h3_signatures_after_fork_child();
    h3_lt_after_fork_child();
    h3_verify_after_fork_child();
    H3_INFO(H3_SUB_FORK, "fork child: trace and stats restarted");
}

void h3_fork_setup(void)
{
    pthread_atfork(NULL, NULL, h3_fork_child);
}
