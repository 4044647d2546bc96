/*
 * The engine, on the real call stream: the H3 block trace recorded on the
 * H200 is replayed through the fake stack with H3SHIM_OP_REPLAY=1, with
 * foreign calls inserted at every position of one block instance, on several
 * streams and threads.  The oracle is what the fake libraries executed (each
 * kernel with a hash of its parameter bytes, every other call with its
 * arguments), compared with the same replay under H3SHIM_DISABLE=1.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3shim.h"
#include "t_common.h"

#define T_REPLAY "build/tests/h3-block3-replay.txt"
#define T_REPLAY_ALIAS "build/tests/h3-block3-replay-y16-in-h.txt"
#define T_REPLAY_SWIGLU_ALIAS "build/tests/h3-block3-replay-swiglu-out-in-gate.txt"
#define T_REPLAY_LAST_H_ALIAS "build/tests/h3-block3-replay-last-h-in-b16.txt"
#define T_REPLAY_SWIGLU_UNALIGNED "build/tests/h3-block3-replay-swiglu-out-unaligned.txt"
#define T_REPLAY_FREES "build/tests/h3-block3-frees-after.txt"
#define T_REPLAY_FREES_BEFORE "build/tests/h3-block3-frees-before.txt"
#define T_REPLAY_FREES_CPU "build/tests/h3-block3-frees-cpu.txt"
#define T_REPLAY_FREES_CASTS "build/tests/h3-block3-frees-casts.txt"
#define T_REPLAY_MOVED "build/tests/h3-block3-frees-moved.txt"
#define T_REPLAY_MOVED_KEPT "build/tests/h3-block3-frees-moved-kept.txt"
#define T_REPLAY_SWIGLU_MOVED "build/tests/h3-block3-frees-swiglu-moved.txt"
#define T_REPLAY_GEMM_MOVED "build/tests/h3-block3-frees-gemm-moved.txt"
#define T_REPLAY_MUTATED "build/tests/h3-block3-mutated-middle.txt"
#define T_REPLAY_PADDING "build/tests/h3-block3-mutated-padding.txt"
#define T_REPLAY_LOOSE "build/tests/h3-block3-mutated-loose.txt"
#define T_REPLAY_READER "build/tests/h3-block3-mutated-reader.txt"
#define T_REPLAY_CAST_READER "build/tests/h3-block3-mutated-cast-reader.txt"
#define T_REPLAY_EARLY "build/tests/h3-block3-mutated-early.txt"
#define T_REPLAY_UNIQUE "build/tests/unique-replay.txt"
#define T_MOVED_TO 0x7e0000000000ull /* replay_frees.py's MOVED_TO */
#define T_REPLAY_FOREIGN "build/tests/foreign-replay.txt"
#define T_REPLAY_FOREIGN_X20 "build/tests/foreign-replay-x20.txt"
#define T_REPLAY_GAPPED "build/tests/gapped-replay.txt"
#define T_REPLAY_KERNELS "build/tests/kernels-replay.txt"
#define T_REPLAY_BLOCK_THEN_FOREIGN "build/tests/block-then-foreign-replay.txt"
#define T_REPLAY_STREAMS "build/tests/streams-replay.txt"
#define T_REPLAY_SHARED "build/tests/shared-replay.txt"
#define T_REPLAY_VARIANT "build/tests/variant-replay.txt"
#define T_REPLAY_VARIANT_LONG "build/tests/variant-long-replay.txt"
#define T_REPLAY_VARIANT_MANY "build/tests/variant-many-replay.txt"
#define T_REPLAY_ISLANDS "build/tests/islands-replay.txt"
#define T_REPLAY_ISLANDS_ADJACENT "build/tests/islands-adjacent-replay.txt"
#define T_REPLAY_ISLANDS_ALTERNATING "build/tests/islands-alternating-replay.txt"
#define T_REPLAY_ISLANDS_PREAMBLE "build/tests/islands-preamble-replay.txt"
#define T_REPLAY_ISLANDS_LONG "build/tests/islands-long-replay.txt"
#define T_REPLAY_ISLANDS_SHARED "build/tests/islands-shared-replay.txt"
#define T_REPLAY_ISLANDS_SHARED2 "build/tests/islands-shared2-replay.txt"
#define T_REPLAY_ISLANDS_DUP "build/tests/islands-dup-replay.txt"
#define T_REPLAY_ISLANDS_CROWDED "build/tests/islands-crowded-replay.txt"
#define T_REPLAY_REWAKE "build/tests/rewake-replay.txt"
#define T_REPLAY_REWAKE_FOLLOW "build/tests/rewake-follow-replay.txt"
#define T_REPLAY_ISLANDS_WHOLE "build/tests/islands-whole-replay.txt"
#define T_REPLAY_ISLANDS_SUFFIX "build/tests/islands-suffix-replay.txt"
#define T_REPLAY_LENGTHS "build/tests/lengths-replay.txt"
#define T_REPLAY_LT_LENGTHS "build/tests/lt-lengths-replay.txt"
#define T_REPLAY_SERVING "build/tests/h3-serving3-a-replay.txt"
#define T_REPLAY_UNIQUE_THEN_BLOCK "build/tests/unique-then-block-replay.txt"
#define T_INSTANCES 9
#define T_BLOCK 42

/* What a child replays, and where it writes what the fakes executed. */
static struct {
    struct fw_replay_opts opts;
    int threads; /* 0: replay on this thread; 1: on a thread that then exits; 2: on two threads,
                    streams 0x1000 and 0x2000 */
    bool fork_after; /* then fork: the child synchronises and writes its log to log_child */
    const char *log, *err, *trace, *log_child;
    const char *sigs; /* the signature file or directory to load (default: signatures/) */
    const char *replay; /* the replay file, relative to the repository (default: T_REPLAY) */
    struct fw_graph_opts graph; /* with launches: then the replay captured and launched (fw_graph) */
    bool end_capture_then_replay; /* then a capture's end on a stream, and the replay again */
    bool paused_first; /* the replay once with observation paused (h3shim_pause), then as usual */
    bool paused_after; /* then the replay again with observation paused */
    const char *replay_before; /* a replay file (relative to the repository) replayed once before it */
    bool capture_elsewhere; /* a capture (global mode) open on stream 0x3000 of this thread while the
                               replay runs on another thread, ended after it */
    bool second_device; /* with threads 2: the second thread's replay runs on device 1 (its context current) */
    const char *replay_after; /* with threads 1: a replay file this thread replays once the other thread exited */
} t_run;

/* One line per executed call: launches as their "exec" entry, library calls
 * by name (their descriptors are made per call), anything else with its
 * arguments.  The entry points' own launch records are left out (the
 * argument array a held-back launch passes is a copy), and so are lookups
 * (cuGetProcAddress), a primary context's retain, an IPC handle's making, and cuBLASLt descriptors being built or set (the shim
 * sets the bias of a GEMM it makes on weight copies): they submit nothing,
 * never flush, and so may come before launches held back earlier. */
static void write_log(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    struct fakelog_entry e;
    for (size_t i = 0; fakelog_get(i, &e); i++) {
        if (strncmp(e.fn, "__cudaLaunchKernel", 18) == 0 || strncmp(e.fn, "cudaLaunchKernel", 16) == 0 ||
            strncmp(e.fn, "cuLaunchKernel", 14) == 0 || strncmp(e.fn, "cuGetProcAddress", 16) == 0 ||
            strncmp(e.fn, "cublasLtMatmulDesc", 18) == 0 || strncmp(e.fn, "cublasLtMatrixLayout", 20) == 0 ||
            strcmp(e.fn, "cuDevicePrimaryCtxRetain") == 0 || strcmp(e.fn, "cudaIpcGetMemHandle") == 0 ||
            (strcmp(e.fn, "cuStreamIsCapturing") == 0 && getenv("T_LOG_CAPTURE_QUERIES") == NULL))
            continue;
        fprintf(f, "%s", e.fn);
        bool library = (strcmp(e.lib, "cublasLt") == 0 && strcmp(e.fn, "lt_operands") != 0) ||
                       strcmp(e.lib, "cublas") == 0 || strcmp(e.lib, "cudnn") == 0;
        for (int a = 0; !library && a < e.nargs; a++)
            fprintf(f, " %llx", (unsigned long long)e.args[a]);
        fprintf(f, " -> %lld\n", e.ret);
    }
    fclose(f);
}

static void *replay_thread(void *arg)
{
    fw_replay_with_fn *fn = (fw_replay_with_fn *)dlsym(t_load("libh3fakeframework.so", RTLD_NOW | RTLD_LOCAL),
                                                       "fw_replay_with");
    char *path = t_repo_path(t_run.replay != NULL ? t_run.replay : T_REPLAY);
    long bad = 0;
    long n = fn(path, arg, &bad);
    free(path);
    return (void *)(intptr_t)(n > 0 ? 0 : 1);
}

static void replay_child(void)
{
    if (freopen(t_run.err, "w", stderr) == NULL)
        exit(3);
    char *sigs = t_run.sigs != NULL ? strdup(t_run.sigs) : t_repo_path("signatures");
    setenv("H3SHIM_SIGNATURES", sigs, 1);
    setenv("H3SHIM_STATS", "1", 1);
    if (t_run.trace != NULL)
        setenv("H3SHIM_TRACE", t_run.trace, 1);
    free(sigs);
    if (t_run.replay_before != NULL) {
        const char *main_replay = t_run.replay;
        t_run.replay = t_run.replay_before;
        void *r = replay_thread(&t_run.opts);
        t_run.replay = main_replay;
        if (r != NULL)
            exit(4);
    }
    int (*pause)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "h3shim_pause");
    if (t_run.paused_first) {
        if (pause == NULL || pause(1) != 0 || replay_thread(&t_run.opts) != NULL || pause(0) != 0)
            exit(8);
    }
    if (t_run.capture_elsewhere) {
        cudaError_t (*begin)(cudaStream_t, enum cudaStreamCaptureMode) =
            (cudaError_t (*)(cudaStream_t, enum cudaStreamCaptureMode))dlsym(RTLD_DEFAULT, "cudaStreamBeginCapture");
        if (begin == NULL || begin((cudaStream_t)0x3000, cudaStreamCaptureModeGlobal) != cudaSuccess)
            exit(10);
    }
    if (t_run.threads == 0) {
        if (replay_thread(&t_run.opts) != NULL)
            exit(4);
    } else if (t_run.threads == 1) {
        pthread_t th;
        void *r;
        ck_assert_int_eq(pthread_create(&th, NULL, replay_thread, &t_run.opts), 0);
        pthread_join(th, &r);
        if (r != NULL)
            exit(4);
        if (t_run.replay_after != NULL) {
            t_run.replay = t_run.replay_after;
            if (replay_thread(&t_run.opts) != NULL)
                exit(14);
        }
    } else {
        pthread_t th[2];
        struct fw_replay_opts o[2] = {t_run.opts, t_run.opts};
        o[0].stream = 0x1000, o[1].stream = 0x2000;
        o[1].device = t_run.second_device ? 1 : 0;
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(pthread_create(&th[i], NULL, replay_thread, &o[i]), 0);
        for (int i = 0; i < 2; i++) {
            void *r;
            pthread_join(th[i], &r);
            if (r != NULL)
                exit(4);
        }
    }
    if (t_run.capture_elsewhere) {
        cudaError_t (*end)(cudaStream_t, cudaGraph_t *) =
            (cudaError_t (*)(cudaStream_t, cudaGraph_t *))dlsym(RTLD_DEFAULT, "cudaStreamEndCapture");
        cudaGraph_t g = NULL;
        if (end == NULL)
            exit(11);
        if (end((cudaStream_t)0x3000, &g) != cudaSuccess)
            exit(12); /* the capture was invalidated */
    }
    if (t_run.graph.launches > 0) {
        fw_graph_fn *fn = (fw_graph_fn *)dlsym(t_load("libh3fakeframework.so", RTLD_NOW | RTLD_LOCAL), "fw_graph");
        char *path = t_repo_path(t_run.replay != NULL ? t_run.replay : T_REPLAY);
        long bad = 0;
        if (fn(path, &t_run.graph, &bad) <= 0)
            exit(6);
        free(path);
    }
    if (t_run.paused_first && pause(1) != -1) /* refused: weight copies exist now */
        exit(9);
    if (t_run.paused_after) {
        if (pause == NULL || pause(1) != 0 || replay_thread(&t_run.opts) != NULL || pause(0) != 0)
            exit(13);
    }
    if (t_run.end_capture_then_replay) {
        t_call("cudaStreamEndCapture", 1);
        if (replay_thread(&t_run.opts) != NULL)
            exit(7);
    }
    if (t_run.fork_after) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            t_call("cudaDeviceSynchronize", 1);
            write_log(t_run.log_child);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            exit(5);
        t_call("cudaDeviceSynchronize", 1);
    }
    write_log(t_run.log);
}

/* Sets (or unsets) each "NAME=VALUE" of a NULL-terminated list. */
static void set_env(const char *const *env, bool set)
{
    for (const char *const *e = env; *e != NULL; e++) {
        char var[128];
        snprintf(var, sizeof(var), "%s", *e);
        char *eq = strchr(var, '=');
        *eq = '\0';
        if (set)
            setenv(var, eq + 1, 1);
        else
            unsetenv(var);
    }
}

/* Replays in a child with `env` ("NAME=VALUE" pairs, NULL-terminated) set;
 * returns the execution log, and the stats in *stats. */
static char *replay_with(const char *tag, const char *const *env, char **stats)
{
    char name[64];
    snprintf(name, sizeof(name), "log-%s.txt", tag);
    t_run.log = t_path(name);
    snprintf(name, sizeof(name), "err-%s.txt", tag);
    t_run.err = t_path(name);
    set_env(env, true);
    int status = t_in_child(replay_child);
    set_env(env, false);
    setenv("H3SHIM_OPS", "none", 1); /* the fixture's */
    ck_assert_msg(status == 0, "replay child (%s) exited with %d", tag, status);
    if (stats != NULL)
        *stats = t_read_file(t_run.err, NULL);
    char *log = t_read_file(t_run.log, NULL);
    ck_assert(log != NULL);
    return log;
}

static const char *const t_disabled[] = {"H3SHIM_DISABLE=1", NULL};

/* The replay without the shim, in the fakes' state that `env` sets up (a
 * capture in progress), to compare a run with `env` against. */
static char *replay_base_for(const char *const *env)
{
    for (size_t i = 0; env[i] != NULL; i++)
        if (strncmp(env[i], "FAKE_CAPTURING=", 15) == 0) {
            const char *const capturing[] = {"H3SHIM_DISABLE=1", env[i], NULL};
            return replay_with("base-capturing", capturing, NULL);
        }
    return replay_with("base", t_disabled, NULL);
}
static const char *const t_replay_op[] = {"H3SHIM_OP_REPLAY=1", NULL};

/* A number from the stats: the unsigned integer after `key`, or -1. */
static long stat_after(const char *stats, const char *key)
{
    const char *p = strstr(stats, key);
    return p != NULL ? strtol(p + strlen(key), NULL, 10) : -1;
}
/* The count of entry point `fn` on the stats line of calls forwarded by
 * their wrappers, the thread idle, or with `fn` NULL every count on it (0 if none). */
static long forwarded(const char *stats, const char *fn)
{
    const char *line = strstr(stats, "forwarded by their wrapper, the thread idle (not observed, not timed): ");
    if (line == NULL)
        return 0;
    long n = 0;
    const char *end = strchr(line, '\n');
    for (const char *at = strstr(line, "): ") + 3; end == NULL || at < end;) { /* "NAME N, NAME N" */
        const char *sp = strchr(at, ' ');
        if (sp == NULL || (end != NULL && sp > end))
            break;
        if (fn == NULL || ((size_t)(sp - at) == strlen(fn) && strncmp(at, fn, strlen(fn)) == 0))
            n += strtol(sp + 1, NULL, 10);
        const char *comma = strchr(sp, ',');
        if (comma == NULL || (end != NULL && comma > end))
            break;
        at = comma + 2;
    }
    return n;
}

/* Calls that took the idle path, observed or forwarded by their wrappers. */
static long idle_calls(const char *stats)
{
    return stat_after(stats, "passthrough  idle") + forwarded(stats, NULL);
}


/* The end of a stats text, short enough for a Check message. */
static const char *tail_of(const char *stats)
{
    size_t n = strlen(stats);
    return n > 1500 ? stats + n - 1500 : stats;
}

static size_t count_lines_starting(const char *text, const char *prefix)
{
    size_t n = strncmp(text, prefix, strlen(prefix)) == 0;
    for (const char *p = strchr(text, '\n'); p != NULL; p = strchr(p + 1, '\n'))
        n += strncmp(p + 1, prefix, strlen(prefix)) == 0;
    return n;
}

#define H3_ARRAY_LEN_T(a) (sizeof(a) / sizeof((a)[0]))

/* `log`'s lines that start with one of `prefixes` (NULL-terminated), or
 * without `keep`, its other lines. */
/* The lines of `log` before its first line starting with `marker` (which must be there). */
static char *lines_before(const char *log, const char *marker)
{
    const char *at = strstr(log, marker);
    ck_assert_msg(at != NULL, "no '%s' in the log", marker);
    return strndup(log, (size_t)(at - log));
}

static char *lines_filtered(const char *log, const char *const *prefixes, bool keep)
{
    char *out = malloc(strlen(log) + 1), *o = out;
    for (const char *at = log; *at != '\0';) {
        const char *nl = strchr(at, '\n');
        size_t len = nl != NULL ? (size_t)(nl - at) + 1 : strlen(at);
        bool match = false;
        for (const char *const *p = prefixes; *p != NULL && !match; p++)
            match = strncmp(at, *p, strlen(*p)) == 0;
        if (match == keep) {
            memcpy(o, at, len);
            o += len;
        }
        at += len;
    }
    *o = '\0';
    return out;
}

/* `log`'s lines that start with `prefix`; without them. */
static char *lines_only(const char *log, const char *prefix)
{
    return lines_filtered(log, (const char *const[]){prefix, NULL}, true);
}

static char *lines_without(const char *log, const char *prefix)
{
    return lines_filtered(log, (const char *const[]){prefix, NULL}, false);
}

/* Whether two logs hold the same calls in the same order, but for kernel
 * executions moved past cuDNN's variant packs being built (which submit
 * nothing): with the allocator's reports (the freed-outputs rule on) a
 * complete group is issued at its thread's next observed call, after the
 * configuration calls that follow it.  Without the packs the logs are the
 * same; without the executions too, the packs are where they were. */
static bool same_calls(const char *base, const char *log)
{
    char *a = lines_without(base, "cudnnBackendSetAttribute "), *b = lines_without(log, "cudnnBackendSetAttribute ");
    char *ea = lines_without(base, "exec "), *eb = lines_without(log, "exec ");
    bool same = strcmp(a, b) == 0 && strcmp(ea, eb) == 0;
    free(a), free(b), free(ea), free(eb);
    return same;
}

/* Every op's check line in `log` (the fakes' kernels log one a launch), in order. */
static char *op_checks(const char *log)
{
    return lines_filtered(log, (const char *const[]){"qk_check ", "swiglu_check ", "rmsnorm_check ",
                                                      "residual_check ", "residual_staged_check ", NULL},
                          true);
}

/* With several ops: deferred launches = launches the ops took + those flushed. */
static void check_accounting_ops(const char *stats)
{
    long deferred = stat_after(stats, "engine: ");
    long taken = 0;
    for (const char *p = strstr(stats, "groups run ("); p != NULL; p = strstr(p + 1, "groups run ("))
        taken += strtol(p + strlen("groups run ("), NULL, 10);
    ck_assert_msg(deferred >= 0 && deferred >= taken, "deferred %ld, taken by ops %ld", deferred, taken);
}

/* Deferred launches are issued exactly once: by the op or by a flush. */
static void check_accounting(const char *stats)
{
    long deferred = stat_after(stats, "engine: ");
    long op_calls = 0, flushed = 0;
    const char *p = strstr(stats, "groups run (");
    if (p != NULL)
        op_calls = strtol(p + strlen("groups run ("), NULL, 10);
    for (p = strstr(stats, "groups issued untouched ("); p != NULL;
         p = strstr(p + 1, "groups issued untouched ("))
        flushed += strtol(p + strlen("groups issued untouched ("), NULL, 10);
    ck_assert_msg(deferred >= 0 && deferred == op_calls + flushed,
                  "deferred %ld, issued by the op %ld, by flushes %ld", deferred, op_calls, flushed);
}

/*
 * The block's layout, from a traced replay with the matcher: the replay call
 * where the fifth complete instance starts, and for each of its calls the
 * last call of its group (-1 for library calls).
 */
static struct {
    long start;
    int last[T_BLOCK];
    int groups;
} t_block;

static void learn_block(void)
{
    t_run.trace = t_path("layout.jsonl");
    static const char *const env[] = {"H3SHIM_MATCH=1", NULL};
    free(replay_with("layout", env, NULL));
    t_run.trace = NULL;
    char *text = t_read_file(t_path("layout.jsonl"), NULL);
    ck_assert(text != NULL);
    size_t nlines = t_count_lines(text);
    char **lines = calloc(nlines, sizeof(char *));
    size_t n = 0;
    for (char *l = strtok(text, "\n"); l != NULL; l = strtok(NULL, "\n"))
        lines[n++] = l;
    int complete = 0;
    t_block.start = -1;
    for (size_t i = 0; i + T_BLOCK <= n && t_block.start < 0; i++)
        if ((strstr(lines[i], "\"group_call\":0,") != NULL || strstr(lines[i], "\"group_call\":0}") != NULL) &&
            strstr(lines[i + T_BLOCK - 1], "\"reason\":\"group_complete\"") != NULL && ++complete == 5)
            t_block.start = (long)i;
    ck_assert_int_ge(t_block.start, 0);
    int end = -1;
    for (int j = T_BLOCK - 1; j >= 0; j--) {
        bool launch = strstr(lines[t_block.start + j], "\"api\":\"__cudaLaunchKernel\"") != NULL;
        if (launch && end < 0)
            end = j, t_block.groups++;
        t_block.last[j] = launch ? end : -1;
        if (!launch)
            end = -1;
    }
    free(lines);
    free(text);
}

START_TEST(replay_op_issues_every_group_once)
{
    char *base = replay_with("base", t_disabled, NULL);
    char *stats;
    char *log = replay_with("op", t_replay_op, &stats);
    ck_assert_msg(same_calls(base, log), "the fakes executed another stream of calls");
    ck_assert_msg(strstr(stats, "9 complete, 0 broken") != NULL, "%s", stats);
    learn_block();
    ck_assert_int_eq(t_block.groups, 6);
    long runs = stat_after(stats, "op replay       ");
    ck_assert_int_eq(runs, T_INSTANCES * t_block.groups);
    ck_assert_int_eq(stat_after(stats, "engine: "), T_INSTANCES * 37);
    ck_assert_int_eq(stat_after(stats, "shim host time: "), 516); /* every call of the replay was observed */
    ck_assert_msg(strstr(stats, "ns per call issuing held launches") != NULL, "%s", stats);
    const char *q = strstr(stats, "its own: median ");
    ck_assert_msg(q != NULL, "%s", stats);
    unsigned long lo = 0, hi = 0;
    ck_assert_int_eq(sscanf(q, "its own: median %lu-%lu ns", &lo, &hi), 2);
    ck_assert_msg(lo > 0 && lo < hi && hi <= lo + lo / 4 + 1, "median bucket %lu-%lu", lo, hi);
    check_accounting(stats);
    free(stats);
    free(log);
    free(base);
}
END_TEST

static const char *const t_insert_names[] = {
    "none", "stream_sync", "memset", "event", "driver_copy", "kernel", "other_stream", "nccl", "copy_2d", "callback",
    "other_thread", "device_reset", "cat", "cat_into", "ctx_pair", "ctx_release", "swap", "kernel_extra",
    "ipc_export", "module_reload", "device_switch", "swap_unmap",
};
_Static_assert(sizeof(t_insert_names) / sizeof(t_insert_names[0]) == FW_INSERT_COUNT,
               "a name for every enum fw_insert");

/* The groups of the instance that a call inserted before its call p
 * prevents from running whole. */
static int groups_lost(enum fw_insert what, int p)
{
    int lost = 0;
    for (int j = 0; j < T_BLOCK; j++) {
        if (t_block.last[j] != j)
            continue;
        int first = j;
        while (first > 0 && t_block.last[first - 1] == j)
            first--;
        if (what == FW_INSERT_IPC_EXPORT) /* a configuration call: it neither submits nor synchronises */
            continue;
        if (what == FW_INSERT_OTHER_THREAD) /* flushed; and a complete group waits for its thread's next */
            lost += first < p && p <= j + 1; /* call (the allocator reports: the freed-outputs rule is on) */
        else if (what == FW_INSERT_OTHER_STREAM || what == FW_INSERT_DEVICE_SWITCH)
            lost += first < p && p <= j; /* flushed, the instance goes on */
        else
            lost += p >= 1 && p < T_BLOCK && j >= p; /* the instance is broken there */
    }
    /* Before call 0: the previous instance's last group, complete, still waits. */
    if (what == FW_INSERT_OTHER_THREAD && p == 0 && t_block.last[T_BLOCK - 1] == T_BLOCK - 1)
        lost++;
    return lost;
}

START_TEST(foreign_calls_at_every_position_of_a_block)
{
    learn_block();
    int runs = 0;
    for (int what = FW_INSERT_STREAM_SYNC; what < FW_INSERT_COUNT; what++) {
        /* (A swap's report from the allocator turns the freed-outputs rule
         * on, which moves groups after the configuration calls that follow
         * them; weight_cache_gives_back_the_copy_of_a_freed_weight tests
         * both.) */
        if (what == FW_INSERT_SWAP || what == FW_INSERT_SWAP_UNMAP)
            continue;
        for (int p = 0; p <= T_BLOCK; p++) {
            t_run.opts = (struct fw_replay_opts){t_block.start + p, (enum fw_insert)what, 0, 0, 0, 0};
            char tag[64];
            snprintf(tag, sizeof(tag), "%s-%d", t_insert_names[what], p);
            char *base = replay_with("base", t_disabled, NULL);
            char *stats;
            char *log = replay_with(tag, t_replay_op, &stats);
            ck_assert_msg(same_calls(base, log), "%s before call %d: the fakes executed another stream of calls",
                          t_insert_names[what], p);
            long expected = T_INSTANCES * t_block.groups - groups_lost((enum fw_insert)what, p);
            ck_assert_msg(stat_after(stats, "op replay       ") == expected,
                          "%s before call %d: expected %ld groups run by the op, %ld\n%s", t_insert_names[what], p,
                          expected, stat_after(stats, "op replay       "), tail_of(stats));
            check_accounting(stats);
            free(stats);
            free(log);
            free(base);
            runs++;
        }
    }
    ck_assert_int_eq(runs, (FW_INSERT_COUNT - 3) * (T_BLOCK + 1)); /* every kind but none and the two swaps */
}
END_TEST

/* Only the executions on `stream`, in order. */
static char *execs_on(const char *log, unsigned long stream)
{
    char *out = calloc(1, strlen(log) + 1);
    char *copy = strdup(log);
    char want[32];
    snprintf(want, sizeof(want), " %lx ", stream);
    for (char *l = strtok(copy, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        if (strncmp(l, "exec ", 5) != 0)
            continue;
        /* exec HANDLE GX GY GZ BX BY BZ SHMEM STREAM HASH -> R: the stream is word 9 */
        const char *w = l;
        for (int i = 0; i < 9 && w != NULL; i++)
            w = strchr(w + 1, ' ');
        if (w != NULL && strncmp(w, want, strlen(want)) == 0) {
            strcat(out, l);
            strcat(out, "\n");
        }
    }
    free(copy);
    return out;
}

START_TEST(two_threads_on_two_streams)
{
    char *base[2];
    for (int i = 0; i < 2; i++) {
        t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, i == 0 ? 0x1000 : 0x2000, 0, 0, 0};
        base[i] = replay_with(i == 0 ? "base-1000" : "base-2000", t_disabled, NULL);
    }
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
    t_run.threads = 2;
    char *stats;
    char *log = replay_with("threads", t_replay_op, &stats);
    t_run.threads = 0;
    for (int i = 0; i < 2; i++) {
        unsigned long s = i == 0 ? 0x1000 : 0x2000;
        char *want = execs_on(base[i], s), *got = execs_on(log, s);
        ck_assert_uint_ge(t_count_lines(want), T_INSTANCES * 37);
        ck_assert_msg(strcmp(want, got) == 0, "stream %#lx: other executions", s);
        free(want);
        free(got);
        free(base[i]);
    }
    ck_assert_msg(strstr(stats, "18 complete, 0 broken") != NULL, "%s", stats);
    ck_assert_int_eq(stat_after(stats, "op replay       "), 2 * T_INSTANCES * 6);
    check_accounting(stats);
    free(stats);
    free(log);
}
END_TEST

START_TEST(groups_over_the_limits_are_issued_untouched)
{
    learn_block();
    int fit = 0;
    for (int j = 0; j < T_BLOCK; j++) {
        int first = j;
        while (t_block.last[j] == j && first > 0 && t_block.last[first - 1] == j)
            first--;
        fit += t_block.last[j] == j && j - first + 1 <= 4;
    }
    char *base = replay_with("base", t_disabled, NULL);
    static const char *const env[] = {"H3SHIM_OP_REPLAY=1", "H3SHIM_ENGINE_MAX_CALLS=4", NULL};
    char *stats;
    char *log = replay_with("limit", env, &stats);
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls");
    ck_assert_int_eq(stat_after(stats, "op replay       "), T_INSTANCES * fit);
    ck_assert_msg(strstr(stats, "flush limit") != NULL, "%s", stats);
    check_accounting(stats);
    free(stats);
    free(log);
    static const char *const bytes[] = {"H3SHIM_OP_REPLAY=1", "H3SHIM_ENGINE_MAX_BYTES=1024", NULL};
    log = replay_with("limit-bytes", bytes, &stats);
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls");
    ck_assert_msg(strstr(stats, "flush limit") != NULL, "%s", stats);
    check_accounting(stats);
    free(stats);
    free(log);
    free(base);
}
END_TEST

START_TEST(engine_off_defers_nothing)
{
    char *base = replay_with("base", t_disabled, NULL);
    static const char *const env[] = {"H3SHIM_OP_REPLAY=1", "H3SHIM_ENGINE=0", "H3SHIM_MATCH=1", NULL};
    char *stats;
    char *log = replay_with("off", env, &stats);
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls");
    ck_assert_msg(strstr(stats, "engine: off (H3SHIM_ENGINE=0)") != NULL, "%s", stats);
    ck_assert_msg(strstr(stats, "9 complete, 0 broken") != NULL, "%s", stats);
    ck_assert_msg(strstr(stats, "deferred") == NULL, "%s", stats);
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* The execution log without some lines: exec lines whose grid.x and
 * block.x (hex words 3 and 5) are gx and bx, and lines starting with `drop`. */
static char *log_without(const char *log, const char *gx, const char *bx, const char *drop)
{
    char *out = calloc(1, strlen(log) + 1), *copy = strdup(log);
    for (char *l = strtok(copy, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        char w[6][32] = {{0}};
        sscanf(l, "%31s %31s %31s %31s %31s %31s", w[0], w[1], w[2], w[3], w[4], w[5]);
        bool exec_match = strcmp(w[0], "exec") == 0 && strcmp(w[2], gx) == 0 && strcmp(w[5], bx) == 0;
        if (exec_match || (drop != NULL && strncmp(l, drop, strlen(drop)) == 0))
            continue;
        strcat(out, l);
        strcat(out, "\n");
    }
    free(copy);
    return out;
}

static void expect_fallback(const char *const *env, const char *reason, bool held);

/* Whether the library was built with its kernels (nvcc present): without,
 * every op falls back with no_kernels, and that is what the ops tests check. */
static bool kernels_built(void)
{
    char *path = t_repo_path("build/kernels.fatbin");
    size_t len = 0;
    char *data = t_read_file(path, &len);
    free(data);
    free(path);
    return len > 0;
}

#define T_NEEDS_KERNELS()                                                                     \
    do {                                                                                      \
        if (!kernels_built()) {                                                               \
            static const char *const env_[] = {"H3SHIM_OP_SWIGLU=1", NULL};                   \
            expect_fallback(env_, "no_kernels", true);                                        \
            return;                                                                           \
        }                                                                                     \
    } while (0)

START_TEST(swiglu_replaces_silu_and_mul)
{
    T_NEEDS_KERNELS();
    char *base = replay_with("base", t_disabled, NULL);
    static const char *const env[] = {"H3SHIM_OP_SWIGLU=1", NULL};
    char *stats;
    char *log = replay_with("swiglu", env, &stats);
    ck_assert_msg(strstr(stats, "op swiglu       9 groups run (18 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    check_accounting_ops(stats);
    /* Nine fused launches, each with the block's layout ... */
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 0 "), 0);
    /* ... in place of the silu and mul launches (grid 28752 = 0x7050, block
     * 128), eight elements per thread (the replay's pointers are aligned:
     * 1797 * 8192 / 8 / 256 -> grid 7188 = 0x1c14), everything else executed
     * as without the shim. */
    char *want = log_without(base, "7050", "80", NULL);
    char *got = log_without(log, "1c14", "100", "swiglu_check");
    ck_assert_uint_eq(t_count_lines(base) - t_count_lines(want), 2 * T_INSTANCES);
    ck_assert_uint_eq(t_count_lines(log) - t_count_lines(got), 2 * T_INSTANCES);
    ck_assert_msg(strcmp(want, got) == 0, "the other calls changed");
    free(want);
    free(got);
    free(stats);
    free(log);
    free(base);
}
END_TEST

START_TEST(norm_cast_replaces_each_norm_and_its_cast)
{
    T_NEEDS_KERNELS();
    char *base = replay_with("base", t_disabled, NULL);
    static const char *const env[] = {"H3SHIM_OP_NORM_CAST=1", NULL};
    char *stats;
    char *log = replay_with("norm_cast", env, &stats);
    /* Two per block: norm1 (call 0) with the to_qkv input cast (call 3), and
     * norm2 (call 30) with the w1 input cast (call 33); the weight casts
     * between them stay. */
    ck_assert_msg(strstr(stats, "op norm_cast    18 groups run (36 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "takes calls 0,3\n") != NULL || strstr(stats, "takes calls 0,3") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    check_accounting_ops(stats);
    ck_assert_uint_eq(count_lines_starting(log, "rmsnorm_check 1 "), 2 * T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "rmsnorm_check 0 "), 0);
    /* In place of the norm launches (grid 1797 = 0x705, block 32x4) and the
     * input casts (grid 3594 = 0xe0a, block 128), everything else as without
     * the shim, in the same order. */
    char *want = log_without(base, "705", "20", NULL), *want2 = log_without(want, "e0a", "80", NULL);
    char *got = log_without(log, "705", "20", "rmsnorm_check"), *got2 = log_without(got, "e0a", "80", NULL);
    /* As many launches of that shape (the trace's 3 other norms among them);
     * 18 input casts fewer. */
    ck_assert_uint_eq(t_count_lines(base) - t_count_lines(want),
                      t_count_lines(log) - t_count_lines(got) - 2 * T_INSTANCES /* rmsnorm_check lines */);
    ck_assert_uint_eq((t_count_lines(want) - t_count_lines(want2)) - (t_count_lines(got) - t_count_lines(got2)),
                      2 * T_INSTANCES);
    ck_assert_msg(strcmp(want2, got2) == 0, "the other calls changed");
    free(want);
    free(want2);
    free(got);
    free(got2);
    free(stats);
    free(log);
    free(base);
}
END_TEST

START_TEST(norm_cast_falls_back_exactly)
{
    /* With residual_norm on too: it takes norm2, norm_cast norm1. */
    static const char *const env[] = {"H3SHIM_OP_NORM_CAST=1", "H3SHIM_OP_RESIDUAL_NORM=1", "FAKE_NO_KERNEL=1", NULL};
    char *base = replay_with("base", t_disabled, NULL);
    char *stats;
    char *log = replay_with("norm_cast-fallback", env, &stats);
    const char *want = kernels_built() ? "op norm_cast    fallback kernel_missing       9"
                                       : "op norm_cast    fallback no_kernels           9";
    ck_assert_msg(strstr(stats, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats));
    want = kernels_built() ? "op residual_norm fallback kernel_missing       18"
                           : "op residual_norm fallback no_kernels           18";
    ck_assert_msg(strstr(stats, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats));
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls");
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* The fakes' device launches cooperative kernels (loop 0) or not (loop 1:
 * FAKE_NO_COOPERATIVE); the residual_norm tests run both ways. */
#define T_COOP (_i == 0)
#define T_RN_ENV {"H3SHIM_OP_RESIDUAL_NORM=1", T_COOP ? NULL : "FAKE_NO_COOPERATIVE=1", NULL}

/* The staged kernel's launch: 1797 rows, 2 a block (12 blocks of 132 SMs fit
 * at once, too few for one each), so grid 899 (0x383) of 32x4 threads with
 * 8 KiB (0x2000) of shared memory, cooperative. */
#define T_STAGED_LAUNCH " 383 1 1 20 4 1 2000 "

START_TEST(residual_norm_replaces_the_mid_block_residual_and_norm)
{
    T_NEEDS_KERNELS();
    char *base = replay_with("base", t_disabled, NULL);
    const char *const env[] = T_RN_ENV;
    char *stats;
    char *log = replay_with("residual_norm", env, &stats);
    /* Calls 28 (mul), 29 (add), 30 (norm2) and 33 (w1's input cast) of each
     * block; the weight casts 31-32 stay where they are.  And the block's
     * last residual, 40 (mul) and 41 (add), which no norm follows. */
    ck_assert_msg(strstr(stats, "takes calls 28,29,30,33") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "takes calls 40,41\n") != NULL, "%s", tail_of(stats));
    /* The recorded addresses (tests/record/data): PyTorch gave the norm's
     * output y the memory of the product p in 7 blocks (p is then not
     * written: its memory was freed), and in 2 the sum h' the memory of
     * b16, where one thread block's rows of h' cover rows of b16 that others
     * read: there the staged kernel runs, which reads all of b16 before it
     * writes; without cooperative launches, the mul and add are issued as
     * they were, then the norm and cast as one kernel.  At the block's end
     * every h' and p has memory of its own: 9 more groups, p written. */
    ck_assert_msg(strstr(stats, "op residual_norm 18 groups run (54 calls)") != NULL, "%s", tail_of(stats));
    const char *how = T_COOP ? "op residual_norm ran with staged               2"
                             : "op residual_norm ran with h_in_b16             2";
    ck_assert_msg(strstr(stats, how) != NULL, "expected '%s' in\n%s", how, tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    check_accounting_ops(stats);
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 1 1 "), 7);
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 1 e "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 0 "), 0);
    ck_assert_uint_eq(count_lines_starting(log, "residual_staged_check 1 "), T_COOP ? 2 : 0);
    ck_assert_uint_eq(count_lines_starting(log, "residual_staged_check 0 "), 0);
    ck_assert_uint_eq(count_lines_starting(log, "cuLaunchCooperativeKernel "), T_COOP ? 2 : 0);
    ck_assert_uint_eq(t_count(log, T_STAGED_LAUNCH), T_COOP ? 2 * 2 : 0); /* the call and its "exec" */
    ck_assert_uint_eq(count_lines_starting(log, "rmsnorm_check 1 "), T_COOP ? 0 : 2);
    /* Fused: 4 launches as 1 where p is freed, and where h' is in b16 with
     * the staged kernel, else 3 as 2; 2 as 1 at the block's end. */
    ck_assert_uint_eq(count_lines_starting(log, "exec "),
                      count_lines_starting(base, "exec ") - 3 * 7 - (T_COOP ? 3 : 1) * 2 - 1 * T_INSTANCES);
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* Replays the replay file `replay` (rewritten, or another model's) without
 * the shim's ops, into *base, and with `env`, returning the log and the stats. */
static char *replay_against_base(const char *replay, const char *tag, const char *const *env, char **base,
                              char **stats)
{
    t_run.replay = replay;
    char name[64];
    snprintf(name, sizeof(name), "base-%s", tag);
    *base = replay_with(name, t_disabled, NULL);
    char *log = replay_with(tag, env, stats);
    t_run.replay = NULL;
    return log;
}

/* The recorded stream with one block's FP16 copy of norm2 moved into h's
 * memory at an offset (tests/tools/replay_alias.py): the kernel would write
 * its rows over other thread blocks' rows of h, and staging b16 does not
 * help there, so that block's mul and add are issued as they were and then
 * the norm and its cast as one kernel; the other blocks are as above. */
START_TEST(residual_norm_keeps_the_exact_part_when_a_copy_lands_in_an_input)
{
    T_NEEDS_KERNELS();
    const char *const env[] = T_RN_ENV;
    char *base, *stats;
    t_run.trace = t_path("residual-alias.jsonl");
    char *log = replay_against_base(T_REPLAY_ALIAS, "residual_norm-alias", env, &base, &stats);
    char *trace = t_read_file(t_run.trace, NULL);
    t_run.trace = NULL;
    /* The trace says how, at the call where the op ran. */
    ck_assert_uint_eq(t_count(trace, "\"op\":\"residual_norm\""), 18); /* 9 mid-block, 9 at the end */
    ck_assert_uint_eq(t_count(trace, "\"op_how\":\"y16_in_h\""), 1);
    ck_assert_uint_eq(t_count(trace, T_COOP ? "\"op_how\":\"staged\"" : "\"op_how\":\"h_in_b16\""), 2);
    ck_assert_uint_eq(t_count(trace, "\"op_how\""), 3);
    free(trace);
    ck_assert_msg(strstr(stats, "op residual_norm 18 groups run (54 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op residual_norm ran with y16_in_h             1") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 1 1 "), 6);
    ck_assert_uint_eq(count_lines_starting(log, "residual_staged_check 1 "), T_COOP ? 2 : 0);
    ck_assert_uint_eq(count_lines_starting(log, "rmsnorm_check 1 "), T_COOP ? 1 : 3);
    ck_assert_uint_eq(count_lines_starting(log, "exec "),
                      count_lines_starting(base, "exec ") - 3 * 6 - 1 * 1 - (T_COOP ? 3 : 1) * 2 - 1 * T_INSTANCES);
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* The first block's last sum h' moved into w2's output b16, a row off: the
 * one-row-a-block kernel would write h' over rows of b16 that other thread
 * blocks read, so the staged kernel runs it (no norm outputs); without
 * cooperative launches that mul and add run as they were.  The other 17
 * residuals are fused as before. */
START_TEST(residual_norm_stages_the_last_sum_that_lands_in_b16)
{
    T_NEEDS_KERNELS();
    const char *const env[] = T_RN_ENV;
    char *base, *stats;
    char *log = replay_against_base(T_REPLAY_LAST_H_ALIAS, "last-h-alias", env, &base, &stats);
    if (T_COOP) {
        ck_assert_msg(strstr(stats, "op residual_norm 18 groups run (54 calls)") != NULL, "%s", tail_of(stats));
        ck_assert_msg(strstr(stats, "op residual_norm ran with staged               3") != NULL, "%s",
                      tail_of(stats));
        ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
        ck_assert_uint_eq(count_lines_starting(log, "residual_staged_check 1 e "), 1);
    } else {
        ck_assert_msg(strstr(stats, "op residual_norm 17 groups run (52 calls)") != NULL, "%s", tail_of(stats));
        ck_assert_msg(strstr(stats, "op residual_norm fallback aliased              1") != NULL, "%s",
                      tail_of(stats));
    }
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 1 e "), T_INSTANCES - 1);
    ck_assert_uint_eq(count_lines_starting(log, "exec "), count_lines_starting(base, "exec ") - 3 * 7 -
                                                              (T_COOP ? 3 : 1) * 2 - 1 * (T_INSTANCES - (T_COOP ? 0 : 1)));
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* The first block's product two bytes off: that block's swiglu runs the
 * one-element kernel (grid 132 x 32 = 0x1080), the other eight the
 * eight-wide one (grid 0x1c14); all nine are fused. */
START_TEST(swiglu_takes_the_one_element_kernel_where_a_pointer_is_unaligned)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OP_SWIGLU=1", NULL};
    char *base, *stats;
    char *log = replay_against_base(T_REPLAY_SWIGLU_UNALIGNED, "swiglu-unaligned", env, &base, &stats);
    ck_assert_msg(strstr(stats, "op swiglu       9 groups run (18 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 "), T_INSTANCES);
    ck_assert_uint_eq(t_count(log, " 1080 1 1 100 1 1 "), 1);
    ck_assert_uint_eq(t_count(log, " 1c14 1 1 100 1 1 "), T_INSTANCES - 1);
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* The first block's silu(g) * x moved into w1's output (its gate half) at an
 * offset: the kernel would race there, so that block's two launches are
 * issued as they were; the other eight are fused. */
START_TEST(swiglu_falls_back_where_its_output_lands_in_its_input)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OP_SWIGLU=1", NULL};
    char *base, *stats;
    char *log = replay_against_base(T_REPLAY_SWIGLU_ALIAS, "swiglu-alias", env, &base, &stats);
    ck_assert_msg(strstr(stats, "op swiglu       8 groups run (16 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op swiglu       fallback aliased              1") != NULL, "%s", tail_of(stats));
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 "), 8);
    ck_assert_uint_eq(count_lines_starting(log, "exec "), count_lines_starting(base, "exec ") - 8);
    free(stats);
    free(log);
    free(base);
}
END_TEST

#define T_WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Replays with `base_env`, then with `env`: the second run's stats hold
 * every line of `want`, and the fakes executed the same calls in both. */
static void expect_same_calls(const char *tag, const char *const *base_env, const char *const *env,
                              const char *const *want)
{
    char *base = replay_with("same-calls-base", base_env, NULL);
    char *stats;
    char *log = replay_with(tag, env, &stats);
    for (; *want != NULL; want++)
        ck_assert_msg(strstr(stats, *want) != NULL, "%s: expected '%s' in\n%s", tag, *want, tail_of(stats));
    ck_assert_msg(strcmp(base, log) == 0, "%s: the fakes executed another stream of calls", tag);
    free(stats);
    free(log);
    free(base);
}

START_TEST(an_op_falls_back_while_another_in_its_group_runs)
{
    /* weight_cache cannot run (no room for copies) in the groups where
     * norm_cast does: the executed calls are exactly norm_cast's alone. */
    T_NEEDS_KERNELS();
    static const char *const nc[] = {"H3SHIM_OP_NORM_CAST=1", NULL};
    static const char *const both[] = {"H3SHIM_OP_NORM_CAST=1", "H3SHIM_OP_WEIGHT_CACHE=1",
                                       "H3SHIM_WEIGHT_CACHE_MAX_MB=0", NULL};
    expect_same_calls("nc-wc-full", nc, both,
                      T_WANT("op norm_cast    18 groups run (36 calls)",
                             "op weight_cache fallback cache_full           36"));
}
END_TEST

START_TEST(qk_norm_rope_replaces_the_18_launches_of_q_and_k)
{
    T_NEEDS_KERNELS();
    char *base = replay_with("base", t_disabled, NULL);
    static const char *const env[] = {"H3SHIM_OP_QK_NORM_ROPE=1", NULL};
    char *stats;
    char *log = replay_with("qk", env, &stats);
    ck_assert_msg(strstr(stats, "op qk_norm_rope 9 groups run (162 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "takes calls 5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    check_accounting_ops(stats);
    ck_assert_uint_eq(count_lines_starting(log, "qk_check 1 "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "qk_check 0 "), 0);
    /* Not written: the outputs a later one of the group overlaps, as the
     * recording's allocator placed them: q's rstd (where k's went), never
     * k's rstd or sum, nor what attention reads. */
    size_t checked = 0;
    for (const char *at = strstr(log, "qk_check 1 "); at != NULL; at = strstr(at + 1, "qk_check 1 ")) {
        unsigned long dropped = strtoul(at + 11, NULL, 16);
        ck_assert_msg((dropped >> 2 & 1) && !(dropped >> 12 & 1) && !(dropped >> 18 & 1) && !(dropped >> 9 & 1) &&
                          !(dropped >> 19 & 1), "dropped %lx", dropped);
        checked++;
    }
    ck_assert_uint_eq(checked, T_INSTANCES);
    /* The recorded pointers and strides are aligned: the four-wide kernel every time. */
    /* (The allocator's reports end so too: "... 1 -> 0", device type 1.) */
    ck_assert_uint_eq(t_count(log, " 1 -> 0\n") - count_lines_starting(log, "reportMemoryUsageToProfiler "),
                      T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "exec "), count_lines_starting(base, "exec ") - 17 * T_INSTANCES);
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* ---- what the allocator freed (released.c) ---- */

#define T_C10_REPORT "reportMemoryUsageToProfiler"
#define T_FREES 210 /* the F lines tests/tools/replay_frees.py adds: 23 a block, 3 outside */
#define T_FIRST_REPORTS 1 /* the framework's report of a block, before the first call */

/* The block with the frees PyTorch's allocator reports where the block's
 * code makes them (tests/tools/replay_frees.py): each op leaves out what was
 * freed after its launch and writes the rest.  q's and k's intermediates go
 * (all but what attention reads), silu's output, both residuals' products
 * and every norm's rstd; the norms' FP32 outputs (the Python code keeps
 * them in `n`), h' and the GEMMs' inputs stay.  Every report reaches the
 * real function unchanged. */
START_TEST(ops_leave_out_what_the_allocator_freed)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    t_run.replay = T_REPLAY_FREES;
    char *base = replay_with("frees-base", t_disabled, NULL);
    char *stats;
    t_run.trace = t_path("frees.jsonl");
    char *log = replay_with("frees", env, &stats);
    char *trace = t_read_file(t_run.trace, NULL);
    t_run.trace = NULL;
    t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "skip_released: on") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op qk_norm_rope 9 groups run (162 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op residual_norm 18 groups run (54 calls)") != NULL, "%s", tail_of(stats));
    /* q's and k's fields but `out` (9 and 19), in every block: the eight-wide kernel that writes `out` alone. */
    ck_assert_uint_eq(count_lines_starting(log, "qk_check 1 7fdff 3 "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 0 "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "rmsnorm_check 1 2 "), T_INSTANCES); /* norm1: rstd */
    /* The mid-block residual: p and rstd (y stays: `n` holds it); the last: p, and it has no norm. */
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 1 5 ") +
                          count_lines_starting(log, "residual_staged_check 1 5 "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 1 f ") +
                          count_lines_starting(log, "residual_staged_check 1 f "), T_INSTANCES);
    ck_assert_msg(strstr(stats, "op qk_norm_rope left out") != NULL, "%s", tail_of(stats));
    /* The ops that ran at the call after their group say so there, with what they left out. */
    ck_assert_uint_eq(t_count(trace, "\"group_call\":23,\"op\":\"qk_norm_rope\",\"op_calls\":18,\"left_out\":"),
                      T_INSTANCES);
    /* Every report went on, unchanged, in order. */
    char *reports = lines_only(log, T_C10_REPORT), *base_reports = lines_only(base, T_C10_REPORT);
    ck_assert_uint_eq(count_lines_starting(reports, T_C10_REPORT), T_FREES + T_FIRST_REPORTS);
    ck_assert_str_eq(reports, base_reports);
    free(reports);
    free(base_reports);
    free(trace);
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* The same frees with H3SHIM_SKIP_RELEASED=0, moved before the groups that
 * made the tensors (memory an earlier owner freed), and reported for a CPU
 * device: every op writes what it writes without them, and runs where it
 * ran without them. */
START_TEST(frees_before_a_launch_or_switched_off_leave_nothing_out)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    static const char *const off[] = {"H3SHIM_OPS=all", "H3SHIM_SKIP_RELEASED=0", NULL};
    char *plain = replay_with("frees-plain", env, NULL);
    char *want = op_checks(plain);
    t_run.replay = T_REPLAY_FREES;
    char *stats;
    char *log = replay_with("frees-off", off, &stats);
    ck_assert_msg(strstr(stats, "skip_released: off") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "left out") == NULL, "%s", tail_of(stats));
    char *got = op_checks(log);
    ck_assert_str_eq(got, want);
    free(got);
    free(log);
    free(stats);
    t_run.replay = T_REPLAY_FREES_BEFORE;
    log = replay_with("frees-before", env, &stats);
    ck_assert_msg(strstr(stats, "skip_released: on") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "left out") == NULL, "%s", tail_of(stats));
    got = op_checks(log);
    ck_assert_str_eq(got, want);
    free(got);
    free(log);
    free(stats);
    /* Reports of another device type (the CPU allocator's) do not count as frees ... */
    t_run.replay = T_REPLAY_FREES_CPU;
    log = replay_with("frees-cpu", env, &stats);
    ck_assert_msg(strstr(stats, "skip_released: on") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "left out") == NULL, "%s", tail_of(stats));
    got = op_checks(log);
    ck_assert_str_eq(got, want);
    free(got);
    free(log);
    free(stats);
    /* ... nor turn the rule on where no CUDA report comes (the framework's first one neither). */
    setenv("FAKE_C10_SILENT", "1", 1);
    log = replay_with("frees-cpu-only", env, &stats);
    unsetenv("FAKE_C10_SILENT");
    ck_assert_msg(strstr(stats, "skip_released: no report") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "left out") == NULL, "%s", tail_of(stats));
    got = NULL;
    t_run.replay = NULL;
    free(got);
    free(log);
    free(stats);
    free(want);
    free(plain);
}
END_TEST

/* The index of the first block's attention call (cuDNN, after the 18 launches of q and k) in T_REPLAY. */
static long first_attention_call(void)
{
    char *path = t_repo_path(T_REPLAY);
    char *text = t_read_file(path, NULL);
    ck_assert(text != NULL);
    long calls = 0, at = -1, copy_at = -100;
    for (char *l = strtok(text, "\n"); l != NULL && at < 0; l = strtok(NULL, "\n"), calls++) {
        if (strstr(l, "direct_copy_kernel_cuda") != NULL && copy_at < calls - 18)
            copy_at = calls;
        if (strncmp(l, "C ", 2) == 0 && copy_at == calls - 18)
            at = calls;
    }
    free(text);
    free(path);
    ck_assert_int_ge(at, 0);
    return at;
}

/* A group complete and waiting for its thread's next call is issued as it
 * was made when another thread's call on its stream comes first (held
 * launches precede it), like any held group: q and k of the first block
 * unfused, the rest as above. */
START_TEST(a_complete_group_waits_for_no_other_thread)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    t_run.replay = T_REPLAY_FREES;
    t_run.opts = (struct fw_replay_opts){first_attention_call(), FW_INSERT_OTHER_THREAD, 0, 0, 0, 0};
    char *stats;
    char *log = replay_with("frees-other-thread", env, &stats);
    t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "op qk_norm_rope 8 groups run (144 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "flush other_thread     1 groups issued untouched (18 calls)") != NULL, "%s",
                  tail_of(stats));
    ck_assert_uint_eq(count_lines_starting(log, "qk_check 1 7fdff 3 "), T_INSTANCES - 1);
    free(stats);
    free(log);
}
END_TEST

/* Mutants of the committed signature that still parse, loaded with every op
 * on and the recorded stream replayed: the planners read whatever layout and
 * wiring a mutant claims and must neither crash nor read out of bounds (ASan
 * build), and the replay ends normally. */
START_TEST(planners_survive_mutated_signatures)
{
    char *path = t_repo_path("signatures/h3-block-torch2.11.0+cu130-sm90.sig");
    size_t len;
    char *text = t_read_file(path, &len);
    char err[512], *mutant_path = t_path("mutant.sig");
    static const char digits[] = "0123456789abcdef";
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    uint64_t x = 0x2545f4914f6cdd1dull;
    int tried = 0, loaded = 0;
    while (loaded < 24 && tried < 4000) {
        tried++;
        char *m = malloc(len);
        memcpy(m, text, len);
        for (int k = 0; k < 1 + tried % 3; k++) {
            size_t at;
            do {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                at = x % len;
            } while (strchr(digits, m[at]) == NULL || m[at] == '\0');
            m[at] = digits[(x >> 32) % (m[at] >= '0' && m[at] <= '9' && (x >> 40) % 2 ? 10 : 16)];
        }
        struct h3_sig *sig = h3_sig_parse(m, len, "mutant", err, sizeof(err));
        if (sig != NULL && memcmp(m, text, len) != 0) {
            h3_sig_free(sig);
            FILE *f = fopen(mutant_path, "w");
            ck_assert(f != NULL && fwrite(m, 1, len, f) == len);
            fclose(f);
            t_run.sigs = mutant_path;
            char *stats;
            char *log = replay_with("mutant", env, &stats);
            t_run.sigs = NULL;
            free(stats);
            free(log);
            loaded++;
        } else {
            h3_sig_free(sig);
        }
        free(m);
    }
    ck_assert_msg(loaded == 24, "only %d of %d mutants parsed", loaded, tried);
    free(mutant_path);
    free(text);
    free(path);
}
END_TEST

START_TEST(all_ops_share_the_block)
{
    /* norm_cast takes 0 and 3, weight_cache 1-2 and the GEMM, in one group;
     * qk_norm_rope 5-22; residual_norm 28-30 and 33 with weight_cache's 31-32
     * between. */
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    char *stats;
    char *log = replay_with("all", env, &stats);
    ck_assert_msg(strstr(stats, "op norm_cast    9 groups run (18 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op residual_norm 18 groups run (54 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op qk_norm_rope 9 groups run (162 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op swiglu       9 groups run (18 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run (108 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    /* norm1 in every block; where h' has b16's memory (see above), the staged kernel. */
    ck_assert_uint_eq(count_lines_starting(log, "rmsnorm_check 1 "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "residual_check 1 "), 7 + T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "residual_staged_check 1 "), 2);
    ck_assert_uint_eq(count_lines_starting(log, "qk_check 1 "), T_INSTANCES);
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 "), T_INSTANCES);
    free(stats);
    free(log);
}
END_TEST

/* Each fallback issues the unfused calls exactly, and is counted; `held`:
 * whether the group is still held back (an op that cannot run on this GPU
 * at all is known before, and then nothing is). */
static void expect_fallback(const char *const *env, const char *reason, bool held)
{
    char *base = replay_base_for(env);
    char *stats;
    char *log = replay_with("fallback", env, &stats);
    ck_assert_msg(strcmp(base, log) == 0, "%s: the fakes executed another stream of calls", reason);
    char want[128];
    snprintf(want, sizeof(want), "op swiglu       fallback %-20s %d", reason, T_INSTANCES);
    ck_assert_msg(strstr(stats, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats));
    ck_assert_msg(strstr(stats, "op swiglu       0 groups run") != NULL, "%s", tail_of(stats));
    ck_assert_int_eq(stat_after(stats, "engine: "), held ? 4 * T_INSTANCES : 0);
    /* Where the GPU keeps every op from running, the user is told once, stats or not. */
    static const struct {
        const char *reason, *says;
    } told[] = {{"sm_unknown", "compute capability could not be read"},
                {"sm_not_allowed", "is not in H3SHIM_SM_ALLOW: no fused op runs"},
                {"sm_not_validated", "is not run there: its calls pass through unfused"}};
    for (size_t i = 0; i < sizeof(told) / sizeof(told[0]); i++)
        if (strcmp(reason, told[i].reason) == 0)
            t_said_once(stats, told[i].says);
    free(stats);
    free(log);
    free(base);
}

START_TEST(swiglu_falls_back_on_an_sm_outside_the_allowlist)
{
    static const char *const env[] = {"H3SHIM_OP_SWIGLU=1", "FAKE_SM=80", NULL};
    expect_fallback(env, "sm_not_allowed", false);
    static const char *const allow[] = {"H3SHIM_OP_SWIGLU=1", "H3SHIM_SM_ALLOW=100", NULL};
    expect_fallback(allow, "sm_not_allowed", false);
}
END_TEST

START_TEST(swiglu_falls_back_without_its_kernels)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OP_SWIGLU=1", "FAKE_MODULE_FAIL=1", NULL};
    expect_fallback(env, "module_load_failed", true);
}
END_TEST

START_TEST(swiglu_never_loads_its_kernels_during_capture)
{
    T_NEEDS_KERNELS();
    /* Loading a module inside a capture could break the application's graph:
     * until a launch outside capture has loaded it, the op falls back. */
    static const char *const env[] = {"H3SHIM_OP_SWIGLU=1", "FAKE_CAPTURING=1", NULL};
    expect_fallback(env, "capturing_first_use", true);
}
END_TEST

START_TEST(every_fallback_reason_is_reachable)
{
    T_NEEDS_KERNELS();
    static const struct {
        const char *env[3];
        const char *reason;
        bool held;
    } cases[] = {
        {{"H3SHIM_OP_SWIGLU=1", "FAKE_SM=-1", NULL}, "sm_unknown", false},
        {{"H3SHIM_OP_SWIGLU=1", "FAKE_NO_CONTEXT=1", NULL}, "no_context", true},
        {{"H3SHIM_OP_SWIGLU=1", "FAKE_NO_KERNEL=1", NULL}, "kernel_missing", true},
        {{"H3SHIM_OP_SWIGLU=1", "FAKE_LAUNCH_FAIL=1", NULL}, "launch_failed", true},
    };
    for (size_t i = 0; i < H3_ARRAY_LEN_T(cases); i++)
        expect_fallback(cases[i].env, cases[i].reason, cases[i].held);
}
END_TEST

START_TEST(switches_choose_the_ops)
{
    T_NEEDS_KERNELS();
    char *base = replay_with("base", t_disabled, NULL);
    struct {
        const char *env[7];
        const char *expect;
        bool fused; /* the op ran: the log differs from the unshimmed one */
    } cases[] = {
        /* swiglu is validated on SM 90: on there by default, elsewhere only when named. */
        {{"H3SHIM_OPS=", NULL}, "op swiglu       9 groups run", true},
        {{"H3SHIM_OPS=", "FAKE_SM=100", NULL}, "op swiglu       fallback sm_not_validated     9", false},
        {{"H3SHIM_OPS=", "FAKE_SM=100", NULL}, "is not run there: its calls pass through unfused", false},
        {{"H3SHIM_OPS=swiglu", "FAKE_SM=100", NULL}, "op swiglu runs on SM 100, where it is not validated", true},
        {{"H3SHIM_OPS=none", NULL}, "passthrough  matching_off", false},
        {{"H3SHIM_OPS=all", NULL}, "op swiglu       9 groups run", true},
        {{"H3SHIM_OPS=swiglu", NULL}, "op swiglu       9 groups run", true},
        {{"H3SHIM_OPS=none", "H3SHIM_OP_SWIGLU=1", NULL}, "op swiglu       9 groups run", true},
        {{"H3SHIM_OPS=all", "H3SHIM_OP_SWIGLU=0", "H3SHIM_OP_WEIGHT_CACHE=0", "H3SHIM_OP_NORM_CAST=0",
          "H3SHIM_OP_RESIDUAL_NORM=0", "H3SHIM_OP_QK_NORM_ROPE=0", NULL},
         "passthrough  matching_off", false},
        {{"H3SHIM_OPS=bogus", NULL}, "H3SHIM_OPS names 'bogus', which is not an op", false},
        {{"H3SHIM_OPS=none", "H3SHIM_OP_SWIGLU=yes", NULL}, "H3SHIM_OP_SWIGLU=yes: expected 0 or 1", false},
        /* With the replay op too, swiglu takes its two calls and replay the rest (calls 37-38 of that group). */
        {{"H3SHIM_OP_SWIGLU=1", "H3SHIM_OP_REPLAY=1", NULL}, "op replay       54 groups run (315 calls)", true},
    };
    for (size_t i = 0; i < H3_ARRAY_LEN_T(cases); i++) {
        char *stats;
        char *log = replay_with("switch", cases[i].env, &stats);
        ck_assert_msg(strstr(stats, cases[i].expect) != NULL, "case %zu: expected '%s' in\n%s", i, cases[i].expect,
                      tail_of(stats));
        ck_assert_msg((strcmp(base, log) == 0) == !cases[i].fused, "case %zu: the log %s the unshimmed one", i,
                      cases[i].fused ? "equals" : "differs from");
        free(stats);
        free(log);
    }
    free(base);
}
END_TEST

START_TEST(held_back_launches_are_issued_when_their_thread_exits)
{
    /* A thread stops in the middle of a group (calls 35-36 of the fifth
     * instance held back) and exits: the launches are issued then. */
    learn_block();
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, t_block.start + 37, 0, 0};
    char *base = replay_with("base", t_disabled, NULL);
    t_run.threads = 1;
    char *stats;
    char *log = replay_with("thread-exit", t_replay_op, &stats);
    ck_assert_msg(same_calls(base, log), "the fakes executed another stream of calls");
    const char *flush = strstr(stats, "flush thread_exit");
    ck_assert_msg(flush != NULL && strncmp(flush + strlen("flush thread_exit"),
                                           "      1 groups issued untouched (2 calls)", 41) == 0,
                  "%s", tail_of(stats));
    free(stats);
    free(log);
    free(base);
}
END_TEST

START_TEST(a_fork_child_does_not_issue_the_parents_held_back_launches)
{
    learn_block();
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, t_block.start + 37, 0, 0};
    t_run.fork_after = true;
    t_run.log_child = t_path("log-child.txt");
    char *base = replay_with("base", t_disabled, NULL);
    char *log = replay_with("fork", t_replay_op, NULL);
    /* The parent issues them at its own synchronisation ... */
    ck_assert_msg(same_calls(base, log), "the parent executed another stream of calls");
    /* ... the child, which synchronised too, never: it has the parent's log up
     * to the fork, then only its own synchronisation. */
    char *child = t_read_file(t_run.log_child, NULL);
    ck_assert(child != NULL);
    ck_assert_uint_eq(count_lines_starting(child, "exec "), count_lines_starting(base, "exec ") - 2);
    ck_assert_uint_eq(t_count_lines(child), t_count_lines(base) - 2);
    free(child);
    free(log);
    free(base);
}
END_TEST

/* ---- weight_cache ---- */

static const char *const t_wc[] = {"H3SHIM_OP_WEIGHT_CACHE=1", NULL};

/* The distinct words `word` (1-based) of the log's lines starting with `prefix`. */
static size_t distinct_words(const char *log, const char *prefix, int word, uint64_t *out, size_t max)
{
    size_t n = 0;
    char *copy = strdup(log);
    for (char *l = strtok(copy, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        if (strncmp(l, prefix, strlen(prefix)) != 0)
            continue;
        const char *w = l;
        for (int i = 0; i < word && w != NULL; i++)
            w = strchr(w + 1, ' ');
        uint64_t v = w != NULL ? strtoull(w + 1, NULL, 16) : 0;
        bool seen = false;
        for (size_t i = 0; i < n; i++)
            seen |= out[i] == v;
        if (!seen && n < max)
            out[n++] = v;
    }
    free(copy);
    return n;
}

/* The block's GEMMs are described from the descriptors and layouts seen
 * being built, with no attribute read, and the shim decides exactly as it
 * does reading them: the same calls run, the same ops. */
START_TEST(lt_shadow_describes_block_gemms_as_reads_do)
{
    /* Learning off: while a thread looks for groups, every GEMM is described in full. */
    static const char *const off[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_LT_SHADOW=0", "H3SHIM_LEARN=0", NULL};
    static const char *const on[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_LEARN=0", NULL};
    static const char *const both[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_LT_SHADOW=2", "H3SHIM_LEARN=0", NULL};
    char *stats_off, *stats_on, *stats_both;
    char *log_off = replay_with("lt-off", off, &stats_off);
    char *log_on = replay_with("lt-on", on, &stats_on);
    char *log_both = replay_with("lt-both", both, &stats_both);
    char want[160];
    snprintf(want, sizeof(want), "lt_shadow: %d GEMMs described from remembered descriptors, 0 read in full, %d handles",
             4 * T_INSTANCES, 5 * 4 * T_INSTANCES);
    ck_assert_msg(strstr(stats_on, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats_on));
    ck_assert_msg(strstr(stats_both, "0 differences (H3SHIM_LT_SHADOW=2)") != NULL, "%s", tail_of(stats_both));
    snprintf(want, sizeof(want), "lt_shadow: 0 GEMMs described from remembered descriptors, %d read in full, 0 handles",
             4 * T_INSTANCES);
    ck_assert_msg(strstr(stats_off, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats_off));
    /* (The copies' addresses come from the fakes' heap, so the logs differ
     * in them: what ran is compared by count.) */
    const char *ops = "op weight_cache 36 groups run (108 calls)";
    ck_assert_msg(strstr(stats_off, ops) != NULL && strstr(stats_on, ops) != NULL && strstr(stats_both, ops) != NULL,
                  "%s", tail_of(stats_on));
    snprintf(want, sizeof(want), "minimax-h3-vae-decoder/block: %d complete, 0 broken", T_INSTANCES);
    ck_assert_msg(strstr(stats_off, want) != NULL && strstr(stats_on, want) != NULL && strstr(stats_both, want) != NULL,
                  "%s", tail_of(stats_on));
    ck_assert_uint_eq(count_lines_starting(log_on, "exec "), count_lines_starting(log_off, "exec "));
    ck_assert_uint_eq(count_lines_starting(log_both, "exec "), count_lines_starting(log_off, "exec "));
    free(stats_off), free(stats_on), free(stats_both);
    free(log_off), free(log_on), free(log_both);
}
END_TEST

/* A descriptor changed past the wrappers: H3SHIM_LT_SHADOW=2 says so, and
 * what it read is what the matcher compares (the flipped transposes match
 * no block). */
START_TEST(lt_shadow_check_finds_a_change_past_the_wrappers)
{
    static const char *const env[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_LT_SHADOW=2", "FW_LT_BEHIND=1",
                                      "H3SHIM_LEARN=0", NULL};
    char *stats;
    char *log = replay_with("lt-behind", env, &stats);
    ck_assert_msg(strstr(stats, "a GEMM's remembered descriptor differs from its attributes read back") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "minimax-h3-vae-decoder/block: 0 complete") != NULL, "%s", tail_of(stats));
    /* Every GEMM compared (each attempt's first, where it breaks) differed. */
    long compared = stat_after(stats, "lt_shadow: "), differences = -1;
    const char *d = strstr(stats, " differences (H3SHIM_LT_SHADOW=2)");
    while (d != NULL && d > stats && d[-1] >= '0' && d[-1] <= '9')
        d--;
    if (d != NULL)
        differences = strtol(d, NULL, 10);
    ck_assert_int_eq(compared, T_INSTANCES);
    ck_assert_int_eq(differences, compared);
    free(stats);
    free(log);
}
END_TEST

/* A bias pointer moved past the wrappers: the bias is read at every GEMM,
 * so the wiring no longer matches and the block runs as the program made
 * it, exactly (weight_cache never points a GEMM at another bias's copy). */
START_TEST(lt_shadow_reads_the_bias_pointer_always)
{
    static const char *const env[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "FW_LT_BEHIND=bias", NULL};
    static const char *const base_env[] = {"H3SHIM_DISABLE=1", "FW_LT_BEHIND=bias", NULL};
    expect_same_calls("lt-bias", base_env, env,
                      T_WANT("minimax-h3-vae-decoder/block: 0 complete", "op weight_cache 0 groups run"));
}
END_TEST

/* A descriptor function looked up on cuBLASLt's handle may be called past
 * the wrappers: the descriptors made by the object that looked it up are
 * read in full; another object's are still remembered. */
START_TEST(lt_shadow_off_after_a_dlsym_of_descriptor_functions)
{
    /* This test program looks one up: the framework's descriptors are still remembered. */
    void *lt = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (lt == NULL)
        lt = t_load("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    ck_assert(dlsym(lt, "cublasLtMatmulDescSetAttribute") != NULL);
    static const char *const other[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_LEARN=0", NULL};
    char *stats_other;
    char *log_other = replay_with("lt-dlsym-other", other, &stats_other);
    char served[128];
    snprintf(served, sizeof(served), "lt_shadow: %d GEMMs described from remembered descriptors, 0 read in full",
             4 * T_INSTANCES);
    ck_assert_msg(strstr(stats_other, served) != NULL, "expected '%s' in\n%s", served, tail_of(stats_other));
    free(stats_other);
    free(log_other);
    /* The framework itself looks one up: its descriptors are read. */
    static const char *const env[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "FW_LT_DLSYM=1", "H3SHIM_LEARN=0", NULL};
    char *stats;
    char *log = replay_with("lt-dlsym", env, &stats);
    char want[128];
    snprintf(want, sizeof(want), "lt_shadow: 0 GEMMs described from remembered descriptors, %d read in full",
             4 * T_INSTANCES);
    ck_assert_msg(strstr(stats, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run (108 calls)") != NULL, "%s", tail_of(stats));
    free(stats);
    free(log);
}
END_TEST

/* Another model's calls are forwarded after the least look: once a kernel
 * is known to begin no block, its launches are idle (no attempt to match,
 * no engine, no weight_cache), and so are GEMMs without a block's shape;
 * everything executes exactly as without the shim.  With learning on (the
 * default), its repeating group (the block stream with other kernels) is
 * found after three instances and refused, not being the H3 block; from
 * then on the group's calls are idle too, and the calls outside it stay in
 * the learner's sight. */
START_TEST(another_models_calls_are_forwarded_idle)
{
    static const char *const learn_off[] = {"H3SHIM_OPS=", "H3SHIM_LEARN=0", NULL};
    char *base, *stats;
    char *log = replay_against_base(T_REPLAY_FOREIGN, "foreign", learn_off, &base, &stats);
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls");
    long calls = stat_after(stats, "shim host time: ") + forwarded(stats, NULL), idle = idle_calls(stats);
    ck_assert_msg(calls > 500 && idle > calls * 9 / 10, "%ld idle of %ld calls:\n%s", idle, calls, tail_of(stats));
    /* Only each kernel's first launch takes the whole way (32 kernels). */
    ck_assert_msg(stat_after(stats, "passthrough  no_match") <= 32, "%s", tail_of(stats));
    free(stats), free(log), free(base);

    static const char *const defaults[] = {"H3SHIM_OPS=", NULL};
    log = replay_against_base(T_REPLAY_FOREIGN, "foreign-learning", defaults, &base, &stats);
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls");
    ck_assert_msg(strstr(stats, "learn: 0 groups learned, 1 refused (42 calls back on the idle path)") != NULL, "%s",
                  tail_of(stats));
    /* 9 instances of 42 calls in three stacks, 138 calls outside them: the 6
     * instances after the refusal are idle, but for the first two calls of
     * each later stack, which follow calls outside the group (what is
     * refused is a call after the two before it). */
    calls = stat_after(stats, "shim host time: ") + forwarded(stats, NULL), idle = idle_calls(stats);
    ck_assert_msg(calls == 516 && idle >= 6 * 42 - 4, "%ld idle of %ld calls:\n%s", idle, calls, tail_of(stats));
    /* Inside the refused group its GEMMs' descriptors are not remembered as
     * they are built (the shape is enough): 75 handles for the 15 GEMMs the
     * learner kept, 195 when every GEMM's were. */
    ck_assert_msg(strstr(stats, "lt_shadow: 15 GEMMs described from remembered descriptors, 0 read in full, 75 "
                                "handles remembered") != NULL, "%.200s", strstr(stats, "lt_shadow:"));
    free(stats), free(log), free(base);
}
END_TEST

/* Paused, the shim remembers no cuBLASLt descriptor being made: a program
 * timing its loop observed against paused pays the same for its GEMMs'
 * descriptors in the paused loops as without the shim, whatever the thread
 * was last doing (the learner wanted the next GEMM, as after another
 * model's calls outside its refused group). On the H200 every paused GEMM's
 * descriptors were remembered, which made the paused loops slower. */
START_TEST(paused_gemms_have_no_descriptors_remembered)
{
    static const char *const defaults[] = {"H3SHIM_OPS=", NULL};
    char *base, *stats;
    char *log = replay_against_base(T_REPLAY_FOREIGN, "foreign-observed", defaults, &base, &stats);
    long observed = stat_after(stats, "read in full, ");
    free(stats), free(log), free(base);
    t_run.paused_after = true;
    t_run.replay = T_REPLAY_FOREIGN;
    log = replay_with("foreign-then-paused", defaults, &stats);
    t_run.replay = NULL;
    t_run.paused_after = false;
    ck_assert_int_gt(observed, 0);
    ck_assert_msg(stat_after(stats, "read in full, ") == observed, "%ld handles remembered against %ld: %.200s",
                  stat_after(stats, "read in full, "), observed, strstr(stats, "lt_shadow:"));
    free(stats), free(log);
}
END_TEST

/* Idle calls change nothing that comes after them: a process that ran
 * another model first recognises and fuses every block after it, as one
 * that did not. */
START_TEST(blocks_after_another_models_idle_calls_fuse)
{
    static const char *const defaults[] = {"H3SHIM_OPS=", NULL};
    static const char *const learn_off[] = {"H3SHIM_OPS=", "H3SHIM_LEARN=0", NULL}; /* the idle count below */
    t_run.replay = T_REPLAY_FOREIGN;
    char *foreign = replay_with("foreign", t_disabled, NULL);
    t_run.replay = NULL;
    t_run.replay_before = T_REPLAY_FOREIGN;
    char *stats;
    char *log = replay_with("foreign-then-h3", learn_off, &stats);
    t_run.replay_before = NULL;
    char *alone_stats;
    char *alone = replay_with("h3", defaults, &alone_stats);
    ck_assert_msg(strstr(stats, "minimax-h3-vae-decoder/block: 9 complete, 0 broken") != NULL, "%s",
                  tail_of(stats));
    ck_assert_int_gt(idle_calls(stats), 400);
    /* The same ops in the same blocks, and the foreign part executed as without the shim. */
    const char *ops[] = {"op norm_cast    9 groups run (18 calls)", "op residual_norm 18 groups run (54 calls)",
                         "op qk_norm_rope 9 groups run (162 calls)", "op swiglu       9 groups run (18 calls)",
                         "op weight_cache 36 groups run (108 calls)"};
    for (size_t i = 0; i < H3_ARRAY_LEN_T(ops); i++)
        ck_assert_msg(strstr(stats, ops[i]) != NULL && strstr(alone_stats, ops[i]) != NULL, "%s:\n%s", ops[i],
                      tail_of(stats));
    size_t nf = strlen(foreign);
    ck_assert_msg(strncmp(log, foreign, nf) == 0, "the other model's calls executed otherwise");
    ck_assert_uint_eq(count_lines_starting(log + nf, "exec "), count_lines_starting(alone, "exec "));
    free(alone_stats);
    free(alone);
    free(stats);
    free(log);
    free(foreign);
}
END_TEST

/* Another model's CUDA graph: its capture is seen while its calls are idle
 * around it, and the captured and launched graph executes as without the
 * shim. */
START_TEST(another_models_graph_is_captured_and_launched_untouched)
{
    static const char *const defaults[] = {"H3SHIM_OPS=", "H3SHIM_LEARN=0", NULL}; /* the idle count below */
    t_run.graph = (struct fw_graph_opts){0x3000, 0x4000, 2, 0, 0, 0, 0, 0};
    char *base, *stats;
    char *log = replay_against_base(T_REPLAY_FOREIGN, "foreign-graph", defaults, &base, &stats);
    memset(&t_run.graph, 0, sizeof(t_run.graph));
    /* (less the shim's own questions to the driver about the capture) */
    char *executed = lines_without(log, "cuStreamGetCaptureInfo");
    ck_assert_msg(strcmp(base, executed) == 0, "the fakes executed another stream of calls");
    free(executed);
    ck_assert_msg(strstr(stats, "weight_cache graphs: 2 launches of graphs captured under the shim") != NULL, "%s",
                  tail_of(stats));
    ck_assert_int_gt(idle_calls(stats), 400);
    /* The capture's launches are looked at (the graph's record is made of
     * them), though their kernels were found idle before it: the wrappers
     * forwarded as many as without the graph. */
    t_run.replay = T_REPLAY_FOREIGN;
    char *alone_stats;
    free(replay_with("foreign-alone", defaults, &alone_stats));
    t_run.replay = NULL;
    ck_assert_msg(forwarded(stats, NULL) > 300 && forwarded(stats, NULL) == forwarded(alone_stats, NULL),
                  "%ld forwarded, %ld without the graph\n%s", forwarded(stats, NULL), forwarded(alone_stats, NULL),
                  tail_of(stats));
    free(alone_stats);
    free(stats);
    free(log);
    free(base);
}
END_TEST

/* Another model's calls, then the block (weight_cache makes its copies),
 * then the other model's calls again: while copies exist any launch may
 * write a source, so the second time none goes by its wrapper, though its
 * kernel was found idle the first time (learning off), or its launches
 * found a refused group's (learning on): as many forwarded as without
 * them. */
START_TEST(an_idle_thread_s_launches_are_looked_at_while_weight_copies_exist)
{
    T_NEEDS_KERNELS();
    static const char *const off[] = {"H3SHIM_OPS=all", "H3SHIM_LEARN=0", NULL}, *const on[] = {"H3SHIM_OPS=all", NULL};
    const char *const *envs[] = {off, on};
    for (int learning = 0; learning < 2; learning++) {
        char *stats, *alone_stats;
        t_run.replay_before = T_REPLAY_FOREIGN;
        free(replay_with(learning ? "copies-block-learning" : "copies-block", envs[learning], &alone_stats));
        t_run.replay = T_REPLAY_BLOCK_THEN_FOREIGN;
        free(replay_with(learning ? "copies-block-then-foreign-learning" : "copies-block-then-foreign",
                         envs[learning], &stats));
        t_run.replay_before = NULL, t_run.replay = NULL;
        ck_assert_msg(strstr(stats, "op weight_cache 36 groups run") != NULL &&
                          forwarded(alone_stats, NULL) > (learning ? 100 : 300) &&
                          forwarded(stats, NULL) == forwarded(alone_stats, NULL),
                      "learning %d: %ld forwarded, %ld without the other model's calls after the block\n%s", learning,
                      forwarded(stats, NULL), forwarded(alone_stats, NULL), tail_of(stats));
        free(stats), free(alone_stats);
    }
}
END_TEST

/* A program can time its loop with and without the shim's observation in
 * one process: paused, the calls are executed exactly as without the shim
 * and nothing is matched or counted; resumed, the shim does all it does. */
START_TEST(observation_paused_passes_every_call_through)
{
    char *base = replay_with("base", t_disabled, NULL);
    char *once_stats;
    char *once = replay_with("wc", t_wc, &once_stats);
    t_run.paused_first = true;
    char *stats;
    char *log = replay_with("paused", t_wc, &stats);
    t_run.paused_first = false;
    /* The paused replay executed what no shim does, then the observed one
     * what the shim does: the same launches as in a process of its own. */
    size_t nb = strlen(base);
    ck_assert_msg(strncmp(log, base, nb) == 0, "the paused replay executed another stream of calls");
    /* (the copies' addresses differ from a fresh process's: compared by count) */
    ck_assert_uint_eq(count_lines_starting(log + nb, "exec "), count_lines_starting(once, "exec "));
    /* Only the observed replay was matched and counted. */
    ck_assert_msg(strstr(stats, "minimax-h3-vae-decoder/block: 9 complete, 0 broken") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run (108 calls)") != NULL, "%s", tail_of(stats));
    long calls = stat_after(once_stats, "shim host time: ");
    ck_assert_int_gt(calls, 0);
    ck_assert_int_eq(stat_after(stats, "shim host time: "), calls);
    free(stats);
    free(log);
    free(once_stats);
    free(once);
    free(base);
}
END_TEST

/* The signature says call 37's bias cast writes where call 27's bias was:
 * the allocator gave the freed address to the next buffer of that size.
 * Another program's allocations (another tile, a model beside it) put the
 * buffer elsewhere, and the block is the same block: with call 27's bias
 * freed, the second block's cast at a fresh address (replay_frees.py moved)
 * still completes its group, and every op runs on the pointers the calls
 * carry (the GEMM reads its bias copy; the moved cast is owed nowhere).
 * With that bias kept (moved-kept), the same address is no freed buffer's:
 * the block's signature breaks on its wiring at call 37. */
/* Replays `replay` (relative to the repository) with `env` and checks
 * that the stats hold every string of `want`; returns the log and, in
 * *stats, the stats. */
static char *replay_wanting(const char *replay, const char *tag, const char *const *env, const char *const *want,
                            char **stats)
{
    t_run.replay = replay;
    char *log = replay_with(tag, env, stats);
    t_run.replay = NULL;
    for (; *want != NULL; want++)
        ck_assert_msg(strstr(*stats, *want) != NULL, "%s: expected '%s' in\n%s", tag, *want, tail_of(*stats));
    return log;
}

START_TEST(a_freed_buffers_reference_is_met_by_a_buffer_elsewhere)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    char *stats;
    char *log = replay_wanting(T_REPLAY_MOVED, "moved", env,
                               T_WANT("minimax-h3-vae-decoder/block: 9 complete, 0 broken",
                                      "minimax-h3-vae-decoder/block: 1 calls met a reference to a buffer the allocator "
                                      "had freed with a buffer elsewhere",
                                      "op weight_cache 36 groups run (108 calls)"),
                               &stats);
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    free(stats), free(log);
    /* The allocator's reports are trusted as far as the freed-outputs rule is: off, the reference holds. */
    static const char *const off[] = {"H3SHIM_OPS=all", "H3SHIM_SKIP_RELEASED=0", NULL};
    free(replay_wanting(T_REPLAY_MOVED, "moved-off", off,
                        T_WANT("minimax-h3-vae-decoder/block: 8 complete, 1 broken (first break: wiring at call 37)"),
                        &stats));
    free(stats);
    /* The serving signature's first tile, whose call 37 is no freed buffer's, takes the instance. */
    log = replay_wanting(T_REPLAY_MOVED_KEPT, "moved-kept", env,
                         T_WANT("minimax-h3-vae-decoder/block: 8 complete, 1 broken (first break: wiring at call 37)",
                                "minimax-h3-vae-decoder/block-serving-first: 1 complete"),
                         &stats);
    ck_assert_msg(strstr(stats, "with a buffer elsewhere") == NULL, "%s", tail_of(stats));
    free(stats), free(log);
}
END_TEST

/* A reference let go because its buffer was freed is no dataflow an op
 * may rely on.  The second block's mul reads another buffer where the
 * signature says silu's output, which was freed right after silu
 * (replay_frees.py swiglu-moved); its last GEMM reads another buffer where
 * the signature says its weight cast's output, freed right after the cast
 * (gemm-moved).  Both blocks complete; swiglu and weight_cache see the
 * calls' own pointers, fall back (layout), and the launches run as made:
 * the GEMM reads what the program gave it. */
START_TEST(an_op_checks_the_dataflow_a_freed_reference_let_go)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    char *stats;
    free(replay_wanting(T_REPLAY_SWIGLU_MOVED, "swiglu-moved", env,
                        T_WANT("minimax-h3-vae-decoder/block: 9 complete, 0 broken", "op swiglu       8 groups run",
                               "op swiglu       fallback layout"),
                        &stats));
    free(stats);
    char *log = replay_wanting(T_REPLAY_GEMM_MOVED, "gemm-moved", env,
                               T_WANT("minimax-h3-vae-decoder/block: 9 complete, 0 broken",
                                      "op weight_cache 35 groups run", "op weight_cache fallback layout"),
                               &stats);
    uint64_t a[64];
    size_t na = distinct_words(log, "lt_operands", 1, a, 64);
    bool moved = false;
    for (size_t i = 0; i < na; i++)
        moved |= a[i] == T_MOVED_TO;
    ck_assert_msg(moved, "no GEMM read the buffer the program gave it");
    free(stats), free(log);
}
END_TEST

/* The fused kernels' grids follow the device: swiglu's eight-wide kernel
 * takes at most 64 blocks an SM (and strides over the rest), so on a GPU
 * of 2 SMs 128 blocks, on the H200's 132 all 7188 the block's product needs. */
START_TEST(swiglu_sizes_its_grid_from_the_device)
{
    T_NEEDS_KERNELS();
    static const char *const small[] = {"H3SHIM_OP_SWIGLU=1", "FAKE_SM_COUNT=2", NULL};
    static const char *const h200[] = {"H3SHIM_OP_SWIGLU=1", NULL};
    char *log = replay_with("sms-2", small, NULL);
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 1 80 "), T_INSTANCES);
    free(log);
    log = replay_with("sms-132", h200, NULL);
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 1 1c14 "), T_INSTANCES);
    free(log);
}
END_TEST

START_TEST(weight_cache_casts_each_weight_once)
{
    /* As in inference mode: the casts' outputs are freed once each GEMM returns. */
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *base = replay_with("base", t_disabled, NULL);
    char *stats;
    char *log = replay_with("wc", t_wc, &stats);
    t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "owed writes: 0 made into the program's buffers after the op") != NULL &&
                      strstr(stats, "72 not made (their buffer freed first)") != NULL, "%s", tail_of(stats));
    /* 3 blocks x 4 GEMMs, each with a weight and a bias: 24 copies made in the
     * first pass and used in the two others; the block's own launches never
     * drop one. */
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run (108 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "weight_cache: 24 copies") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "48 hits, 24 fills, 0 drops") != NULL, "%s", tail_of(stats));
    /* 72 casts are 24 casts into the cache ... */
    ck_assert_uint_eq(count_lines_starting(log, "exec "), count_lines_starting(base, "exec ") - 48);
    /* ... and every block GEMM reads a copy: 12 weights and 12 biases that
     * no GEMM read without the shim (the trace's GEMMs outside the blocks
     * read what they read before). */
    uint64_t a[64], b[64], a0[64], b0[64];
    size_t na = distinct_words(log, "lt_operands", 1, a, 64), nb = distinct_words(log, "lt_operands", 2, b, 64);
    size_t na0 = distinct_words(base, "lt_operands", 1, a0, 64), nb0 = distinct_words(base, "lt_operands", 2, b0, 64);
    size_t new_a = 0, new_b = 0;
    for (size_t i = 0; i < na; i++) {
        bool old = false;
        for (size_t j = 0; j < na0; j++)
            old |= a[i] == a0[j];
        new_a += !old;
    }
    for (size_t i = 0; i < nb; i++) {
        bool old = false;
        for (size_t j = 0; j < nb0; j++)
            old |= b[i] == b0[j];
        new_b += !old;
    }
    ck_assert_uint_eq(new_a, 12);
    ck_assert_uint_eq(new_b, 12);
    /* Everything else ran as without the shim. */
    char *want = log_without(base, "-", "-", "lt_operands"), *got = log_without(log, "-", "-", "lt_operands");
    char *want2 = strdup(want), *got2 = strdup(got);
    size_t wl = 0, gl = 0;
    for (char *l = strtok(want2, "\n"); l != NULL; l = strtok(NULL, "\n"))
        wl += strncmp(l, "exec ", 5) != 0;
    for (char *l = strtok(got2, "\n"); l != NULL; l = strtok(NULL, "\n"))
        gl += strncmp(l, "exec ", 5) != 0;
    /* ... but for an event recorded after each fill, which a graph launch
     * on another stream would wait for (graph mode is on by default). */
    ck_assert_uint_eq(count_lines_starting(log, "cuEventCreate "), 24);
    ck_assert_uint_eq(count_lines_starting(log, "cuEventRecord "), 24);
    ck_assert_uint_eq(count_lines_starting(base, "cuEvent"), 0);
    ck_assert_uint_eq(wl + 48, gl);
    free(want), free(got), free(want2), free(got2);
    free(stats);
    free(log);
    free(base);
}
END_TEST

static int t_strcmp_p(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The "exec" lines of `log`, sorted (a multiset to compare). */
static char *execs_sorted(const char *log)
{
    char *only = lines_only(log, "exec ");
    size_t n = count_lines_starting(only, "exec ");
    char **v = calloc(n + 1, sizeof(*v));
    size_t k = 0;
    for (char *l = strtok(only, "\n"); l != NULL && k < n; l = strtok(NULL, "\n"))
        v[k++] = l;
    qsort(v, k, sizeof(*v), t_strcmp_p);
    size_t len = 0;
    for (size_t i = 0; i < k; i++)
        len += strlen(v[i]) + 1;
    char *out = calloc(len + 1, 1), *p = out;
    for (size_t i = 0; i < k; i++)
        p += sprintf(p, "%s\n", v[i]);
    free(v);
    free(only);
    return out;
}

/* Whether every line of sorted multiset `a` is in sorted multiset `b`; the lines of b left over counted in *extra. */
static bool lines_within(const char *a, const char *b, size_t *extra)
{
    *extra = 0;
    while (*a != '\0') {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (*b == '\0')
            return false;
        int c = strncmp(a, b, la > lb ? la : lb);
        if (c == 0 && la == lb)
            a += la + 1, b += lb + 1;
        else if (c > 0)
            b += lb + 1, ++*extra;
        else
            return false;
    }
    *extra += count_lines_starting(b, "exec ");
    return true;
}

/* The casts' outputs stay referenced (autocast's cast cache keeps the FP16
 * weight of a parameter that requires grad for the whole autocast region,
 * under no_grad too, and autograd saves it): loop 0, the allocator reports
 * the block's other frees but not those; loop 1, it reports nothing.  The
 * GEMMs still read the copies, and every cast PyTorch made is still made
 * into PyTorch's own buffer, as it made it: the program's kernels all
 * execute, plus the 24 fills of the copies. */
START_TEST(weight_cache_writes_the_casts_a_program_keeps)
{
    t_run.replay = _i == 0 ? T_REPLAY_FREES : NULL;
    char *base = replay_with("base", t_disabled, NULL);
    char *stats;
    char *log = replay_with("wc-kept", t_wc, &stats);
    t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run (108 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "owed writes: 72 made into the program's buffers after the op") != NULL &&
                      strstr(stats, " 0 not made") != NULL, "%s", tail_of(stats));
    char *want = execs_sorted(base), *got = execs_sorted(log);
    size_t extra = 0;
    ck_assert_msg(lines_within(want, got, &extra), "a launch of the program is missing with the shim");
    ck_assert_uint_eq(extra, 24);
    free(want), free(got), free(stats), free(log), free(base);
}
END_TEST

/* The FP32 source pointer of the fifth instance's weight cast (call 2): the
 * second pointer of its third parameter, from the replay file. */
static uintptr_t fifth_weight(void)
{
    char *path = t_repo_path(T_REPLAY);
    char *text = t_read_file(path, NULL);
    char *line = text;
    for (long i = 0; i < t_block.start + 2 && line != NULL; i++)
        line = strchr(line, '\n') != NULL ? strchr(line, '\n') + 1 : NULL;
    ck_assert(line != NULL);
    /* L NAME GX GY GZ BX BY BZ SHMEM STREAM 3 4 1 16 HEX0 HEX1 HEX2 */
    const char *tok = line;
    for (int i = 0; i < 16; i++)
        tok = strchr(tok, ' ') + 1;
    ck_assert_int_eq((int)strcspn(tok, " \n"), 32);
    unsigned char bytes[8];
    for (int i = 0; i < 8; i++) {
        unsigned v;
        ck_assert(sscanf(tok + 16 + 2 * i, "%2x", &v) == 1);
        bytes[i] = (unsigned char)v;
    }
    uint64_t p;
    memcpy(&p, bytes, 8);
    free(text);
    free(path);
    return (uintptr_t)p;
}

/* Replays with weight_cache on and `what` (at `ptr`) inserted right before
 * the fifth instance (learn_block() first); the stats must hold each of
 * `want` (NULL-terminated).  Returns the fakes' log. */
static char *replay_wc_after_insert(const char *tag, enum fw_insert what, uintptr_t ptr, const char *const *want)
{
    t_run.opts = (struct fw_replay_opts){t_block.start, what, 0, 0, ptr, 0};
    char *stats;
    char *log = replay_with(tag, t_wc, &stats);
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
    for (; *want != NULL; want++)
        ck_assert_msg(strstr(stats, *want) != NULL, "%s: expected '%s' in\n%s", tag, *want, tail_of(stats));
    free(stats);
    return log;
}

START_TEST(weight_cache_drops_a_copy_whose_source_is_written)
{
    learn_block();
    /* A memset into the fifth instance's to_qkv weight: its copy is dropped
     * and made again, nothing else. */
    free(replay_wc_after_insert("wc-write", FW_INSERT_MEMSET, fifth_weight(),
                                T_WANT("47 hits, 25 fills, 1 drops", "the first drop was at cudaMemsetAsync\n")));
}
END_TEST

START_TEST(weight_cache_drops_a_copy_a_launch_may_write)
{
    learn_block();
    /* A kernel launched with a pointer into the fifth instance's to_qkv
     * weight, after four blocks of launches whose activation pointers lie
     * between the weights: that copy is dropped and made again. */
    free(replay_wc_after_insert("wc-launch-write", FW_INSERT_KERNEL, fifth_weight() + 4096,
                                T_WANT("47 hits, 25 fills, 1 drops", "the first drop was at __cudaLaunchKernel of ")));
}
END_TEST

START_TEST(weight_cache_keeps_a_copy_a_cat_reads)
{
    learn_block();
    /* PyTorch's cat with the fifth instance's to_qkv weight in its inputs'
     * list (as a stale slot past the inputs it copies may hold): a cat
     * writes only its output, so no copy is dropped. */
    free(replay_wc_after_insert("wc-cat-reads", FW_INSERT_CAT, fifth_weight() + 4096,
                                T_WANT("48 hits, 24 fills, 0 drops")));
}
END_TEST

START_TEST(weight_cache_drops_a_copy_a_cat_writes)
{
    learn_block();
    /* The same cat writing into that weight (torch.cat(..., out=w)): dropped. */
    free(replay_wc_after_insert("wc-cat-writes", FW_INSERT_CAT_INTO, fifth_weight() + 4096,
                                T_WANT("47 hits, 25 fills, 1 drops", "the first drop was at cuLaunchKernel of ")));
}
END_TEST

START_TEST(weight_cache_drops_a_copy_a_launch_may_write_at_its_end)
{
    learn_block();
    /* The same at the last word of that weight (6144 x 2048 FP32): many 2
     * MiB pages past its first, so the lock-free page test must hold every
     * page a source covers, not only its first. */
    free(replay_wc_after_insert("wc-launch-write-end", FW_INSERT_KERNEL, fifth_weight() + 6144u * 2048u * 4u - 8u,
                                T_WANT("47 hits, 25 fills, 1 drops")));
}
END_TEST

START_TEST(weight_cache_drops_a_copy_a_2d_copy_writes)
{
    learn_block();
    /* A driver cuMemcpy2DAsync into the fifth instance's to_qkv weight: that
     * copy is dropped and made again. */
    free(replay_wc_after_insert("wc-copy2d", FW_INSERT_COPY_2D, fifth_weight() + 64,
                                T_WANT("47 hits, 25 fills, 1 drops")));
}
END_TEST

START_TEST(weight_cache_drops_everything_at_an_nccl_launch)
{
    learn_block();
    /* An NCCL kernel finds its buffers through device memory: before the
     * fifth instance, every copy made so far is dropped. */
    free(replay_wc_after_insert("wc-nccl", FW_INSERT_NCCL, 0, T_WANT("24 hits, 48 fills, 24 drops")));
}
END_TEST

START_TEST(weight_cache_lets_go_of_its_copies_when_the_device_is_reset)
{
    learn_block();
    /* cudaDeviceReset before the fifth instance: the 24 copies (and their
     * events) are freed before the reset is forwarded, and the instances
     * after it make their copies again: 8 hits before the reset (the fourth
     * instance), 3 x 8 fills and 2 x 8 hits after it. */
    char *log = replay_wc_after_insert("wc-reset", FW_INSERT_DEVICE_RESET, 0,
                                       T_WANT("op weight_cache 36 groups run (108 calls)", "weight_cache: 24 copies",
                                              "24 hits, 48 fills, 0 drops"));
    /* Freed before the reset, none after. */
    char *head = lines_before(log, "cudaDeviceReset");
    ck_assert_uint_eq(count_lines_starting(head, "cuMemFree_v2 "), 24);
    ck_assert_uint_eq(count_lines_starting(head, "cuEventDestroy_v2 "), 24);
    ck_assert_uint_eq(count_lines_starting(log, "cuMemFree_v2 "), 24);
    free(head);
    free(log);
}
END_TEST

/* A driver launch whose parameters come packed in `extra` (the driver's
 * other form), pointing into the fifth instance's to_qkv weight: read as
 * the buffer it is, its copy is dropped and made again. */
START_TEST(weight_cache_drops_a_copy_a_packed_launch_may_write)
{
    learn_block();
    free(replay_wc_after_insert("wc-extra", FW_INSERT_KERNEL_EXTRA, fifth_weight() + 4096,
                                T_WANT("47 hits, 25 fills, 1 drops")));
}
END_TEST

/* The program exports the fifth instance's to_qkv weight to other
 * processes (cudaIpcGetMemHandle, as torch.multiprocessing shares CUDA
 * tensors): their writes are not seen, so that weight is never copied
 * again and its GEMMs cast it as without the shim; the others keep theirs. */
START_TEST(weight_cache_keeps_away_from_memory_other_processes_can_write)
{
    learn_block();
    setenv("FAKE_RANGE_BYTES", "64", 1); /* the exported allocation is the weight's first bytes */
    free(replay_wc_after_insert("wc-ipc", FW_INSERT_IPC_EXPORT, fifth_weight(),
                                T_WANT("op weight_cache fallback shared_memory        2", "44 hits, 24 fills, 0 drops")));
    unsetenv("FAKE_RANGE_BYTES");
}
END_TEST

/* A module is unloaded and the driver gives its kernel's handle to another
 * module's kernel: the shim describes the handle again at its next launch
 * (its name, hence what signatures and weight_cache make of it), instead
 * of keeping the old kernel's description. */
START_TEST(a_kernel_handle_reused_after_an_unload_is_described_again)
{
    t_run.opts = (struct fw_replay_opts){5, FW_INSERT_MODULE_RELOAD, 0, 0, 0, 0};
    t_run.trace = t_path("trace-reload.jsonl");
    static const char *const env[] = {"H3SHIM_OPS=none", NULL};
    char *stats;
    free(replay_with("reload", env, &stats));
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
    char *trace = t_read_file(t_run.trace, NULL);
    t_run.trace = NULL;
    ck_assert(trace != NULL);
    ck_assert_uint_eq(t_count(trace, "\"kernel\":\"_Z14first_kernel_av\""), 1);
    ck_assert_uint_eq(t_count(trace, "\"kernel\":\"_Z15second_kernel_bv\""), 1);
    free(trace), free(stats);
}
END_TEST

/* Another library retains and releases the primary context in pairs (video
 * codecs, Numba, cuda-python) while PyTorch holds it: nothing ended, so
 * every copy stays and is used (before the fix every copy was freed). */
START_TEST(weight_cache_keeps_its_copies_across_a_balanced_retain_and_release)
{
    learn_block();
    char *log = replay_wc_after_insert("wc-ctx-pair", FW_INSERT_CTX_PAIR, 0,
                                       T_WANT("48 hits, 24 fills, 0 drops", "weight_cache: 24 copies"));
    ck_assert_uint_eq(count_lines_starting(log, "cuDevicePrimaryCtxRelease_v2 "), 1);
    ck_assert_uint_eq(count_lines_starting(log, "cuMemFree_v2 "), 0);
    free(log);
}
END_TEST

/* The release of the primary context's last reference ends it: the copies
 * are forgotten without cuMemFree (their memory went with the context, and
 * a new context may reuse the addresses), and made again after. */
START_TEST(weight_cache_forgets_its_copies_when_the_last_release_ends_the_context)
{
    learn_block();
    char *log = replay_wc_after_insert("wc-ctx-last", FW_INSERT_CTX_RELEASE, 0,
                                       T_WANT("24 hits, 48 fills, 0 drops", "weight_cache: 24 copies"));
    ck_assert_uint_eq(count_lines_starting(log, "cuMemFree_v2 "), 0);
    free(log);
}
END_TEST

/* How a program gives memory back: loop 0, cudaFree (PyTorch's caching
 * allocator); loop 1, cuMemUnmap of the pages (its expandable segments:
 * empty_cache and the retry after a failed allocation unmap, never free). */
static const struct {
    enum fw_insert insert;
    const char *call, *tag;
} t_give_back[] = {{FW_INSERT_SWAP, "cudaFree ", "wc-swap"}, {FW_INSERT_SWAP_UNMAP, "cuMemUnmap ", "wc-swap-unmap"}};

/* del model; torch.cuda.empty_cache(): the allocator reports the fifth
 * instance's to_qkv weight freed, and the program frees CUDA memory.  The
 * copy of that weight is never used again and its memory is given back at
 * the program's free (before it is forwarded); a new tensor at the same
 * address (the replay goes on with it) gets a new copy.  (With expandable
 * segments the copies were kept for the life of the process before the
 * unmap was a free point: four models swapped held 2 GiB on an H100.) */
START_TEST(weight_cache_gives_back_the_copy_of_a_freed_weight)
{
    learn_block();
    setenv("FAKE_RANGE_BYTES", "64", 1); /* the freed allocation is that block's */
    char *log = replay_wc_after_insert(
        t_give_back[_i].tag, t_give_back[_i].insert, fifth_weight(),
        T_WANT("47 hits, 25 fills, 0 drops", "weight_cache: 24 copies",
               "weight_cache: 1 copies whose source the program freed and 0 given up with the device low on memory; "
               "1 of them given back"));
    unsetenv("FAKE_RANGE_BYTES");
    char *head = lines_before(log, t_give_back[_i].call);
    ck_assert_uint_eq(count_lines_starting(head, "cuMemFree_v2 "), 1);
    ck_assert_uint_eq(count_lines_starting(log, "cuMemFree_v2 "), 1);
    free(head);
    free(log);
}
END_TEST

/* The device runs low on memory and PyTorch's allocator frees its cache
 * (FAKE_MEM_FREE_LOW_MB: what is free once the 24 copies are made):
 * every copy is given back there, before the free is forwarded, and the
 * blocks after it cast their weights as without the shim until memory is
 * free again (here never: each copy it would make falls back). */
START_TEST(weight_cache_gives_its_copies_back_when_the_device_runs_low)
{
    learn_block();
    setenv("FAKE_MEM_FREE_LOW_MB", "1000", 1);
    setenv("FAKE_MEM_LOW_AFTER", "24", 1);
    char tag[32];
    snprintf(tag, sizeof(tag), "%s-low", t_give_back[_i].tag);
    char *log = replay_wc_after_insert(
        tag, t_give_back[_i].insert, 0x7000,
        T_WANT("given up with the device low on memory; 24 of them given back", "op weight_cache fallback low_memory"));
    unsetenv("FAKE_MEM_FREE_LOW_MB");
    unsetenv("FAKE_MEM_LOW_AFTER");
    char *head = lines_before(log, t_give_back[_i].call);
    ck_assert_uint_eq(count_lines_starting(head, "cuMemFree_v2 "), 24);
    free(head);
    free(log);
}
END_TEST

/* Another thread gives memory back with the device low on it while a
 * weight_cache GEMM runs, between the op's choice of its copies and the
 * GEMM's reading them (FAKE_LT_FREE_DURING: the 30th GEMM of the replay, a
 * hit). The free is stream-ordered on a stream of its own and the block
 * runs on a side stream, so the other thread does not wait for this one's
 * held launches: every copy is given up, but their memory is given back
 * only once no such GEMM is still to be issued: here (the fake GEMM waits
 * for the other thread) at the program's next free, a cudaFree before the
 * replay's last call, after its last GEMM.  Before the fix the memory was freed under the GEMM,
 * which on a GPU then reads memory the allocator may hand out; with the
 * first fix it was never given back. */
/* The calls of the replay file (its lines but the allocator's reports). */
static long replay_calls(void)
{
    char *path = t_repo_path(T_REPLAY), *text = t_read_file(path, NULL);
    ck_assert(text != NULL);
    long n = 0;
    for (char *l = strtok(text, "\n"); l != NULL; l = strtok(NULL, "\n"))
        n += strncmp(l, "F ", 2) != 0 && strncmp(l, "A ", 2) != 0;
    free(text);
    free(path);
    return n;
}

START_TEST(weight_cache_keeps_the_copies_a_running_gemm_reads)
{
    learn_block();
    setenv("FAKE_MEM_FREE_LOW_MB", "1000", 1);
    setenv("FAKE_MEM_LOW_AFTER", "24", 1);
    setenv("FAKE_LT_FREE_DURING", "30", 1);
    t_run.opts = (struct fw_replay_opts){replay_calls() - 1, FW_INSERT_SWAP, 0x1000, 0, 0x7000, 0};
    char *stats;
    char *log = replay_with("wc-low-during", t_wc, &stats);
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
    unsetenv("FAKE_MEM_FREE_LOW_MB");
    unsetenv("FAKE_MEM_LOW_AFTER");
    unsetenv("FAKE_LT_FREE_DURING");
    ck_assert_msg(strstr(stats, "given up with the device low on memory; 24 of them given back") != NULL, "%s",
                  tail_of(stats));
    ck_assert_uint_eq(count_lines_starting(log, "cuMemFreeAsync 7000"), 1); /* the other thread's free came */
    ck_assert_uint_eq(count_lines_starting(log, "lt_free_hung"), 0);
    ck_assert_uint_eq(count_lines_starting(log, "lt_read_freed "), 0);
    /* Given back at that free, after the replay's last GEMM, not before. */
    char *head = lines_before(log, "cudaFree ");
    const char *last_gemm = NULL;
    for (const char *p = strstr(head, "\nlt_operands "); p != NULL; p = strstr(p + 1, "\nlt_operands "))
        last_gemm = p;
    ck_assert(last_gemm != NULL);
    ck_assert_uint_eq(count_lines_starting(last_gemm + 1, "cuMemFree_v2 "), 24);
    ck_assert_uint_eq(count_lines_starting(log, "cuMemFree_v2 "), 24);
    free(head);
    free(stats);
    free(log);
}
END_TEST

/* Parameters that are views of one flat buffer (vector_to_parameters,
 * stacked or flat parameters): the allocator handed out one block that
 * holds the fifth instance's to_qkv weight and more before it; a kernel
 * writing through the block's base, below the weight, may write the weight:
 * its copy is dropped and made again. */
START_TEST(weight_cache_drops_a_copy_a_write_through_its_flat_buffer_may_reach)
{
    learn_block();
    /* The weight moved to memory no other source is near, inside a block
     * the allocator reports that begins a megabyte before it. */
    uintptr_t w = fifth_weight(), moved = (uintptr_t)0x7a0000100000ull, base = moved - (1u << 20);
    char from[17], to[17];
    for (int i = 0; i < 8; i++) {
        snprintf(from + 2 * i, 3, "%02x", (unsigned)((w >> (8 * i)) & 0xff));
        snprintf(to + 2 * i, 3, "%02x", (unsigned)((moved >> (8 * i)) & 0xff));
    }
    char *path = t_repo_path(T_REPLAY), *text = t_read_file(path, NULL);
    ck_assert(text != NULL);
    size_t moves = 0;
    for (char *at = strstr(text, from); at != NULL; at = strstr(at + 16, from))
        memcpy(at, to, 16), moves++;
    ck_assert_uint_eq(moves, 3); /* its cast in each pass over the model */
    char *plain = t_path("replay-moved.txt"), *flat = t_path("replay-flat.txt");
    FILE *f = fopen(plain, "w");
    ck_assert(f != NULL);
    fputs(text, f);
    fclose(f);
    f = fopen(flat, "w");
    ck_assert(f != NULL);
    fprintf(f, "A %#lx %lu\n%s", (unsigned long)base, (unsigned long)((1u << 20) + 6144u * 2048u * 4u), text);
    fclose(f);
    /* Without the block's report, a pointer a megabyte below the weight writes none of it ... */
    t_run.replay = plain;
    free(replay_wc_after_insert("wc-flat-unknown", FW_INSERT_KERNEL, base, T_WANT("48 hits, 24 fills, 0 drops")));
    /* ... with it, a write through the block's base may reach the weight: its copy is made again. */
    t_run.replay = flat;
    free(replay_wc_after_insert("wc-flat", FW_INSERT_KERNEL, base, T_WANT("47 hits, 25 fills, 1 drops")));
    t_run.replay = NULL;
    free(plain), free(flat), free(text), free(path);
}
END_TEST

/* The block as the serving pipeline runs it (no_grad, the parameters
 * requiring grad, one autocast region a request), traced on the H200: the
 * first tile of each of three requests casts its weights (9 blocks, the
 * casts kept by autocast's cache), the second casts none (9 blocks).  With
 * every signature loaded, each block is recognised by its own and every op
 * that applies runs in every block; weight_cache's GEMMs read copies, and
 * every cast of a weight PyTorch made is still made into its own buffer
 * (nothing frees them). */
START_TEST(the_serving_modes_blocks_fuse_and_keep_every_cast)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    t_run.replay = T_REPLAY_SERVING;
    char *base = replay_with("serving-base", t_disabled, NULL);
    char *stats;
    char *log = replay_with("serving", env, &stats);
    t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "signature minimax-h3-vae-decoder/block-serving-first: 9 complete") != NULL,
                  "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "signature minimax-h3-vae-decoder/block-serving-cached: 9 complete") != NULL,
                  "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op qk_norm_rope 18 groups run") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op swiglu       18 groups run") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op norm_cast    18 groups run") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op residual_norm 36 groups run") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "owed writes: 72 made into the program's buffers") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "WARN") == NULL, "%s", tail_of(stats));
    free(stats), free(log), free(base);
}
END_TEST

/* The part of `log` after its n-th line starting with `prefix` (1-based). */
static const char *lines_after(const char *log, const char *prefix, int n)
{
    int seen = 0;
    for (const char *at = log; at != NULL && *at != '\0'; at = strchr(at, '\n') != NULL ? strchr(at, '\n') + 1 : NULL)
        if (strncmp(at, prefix, strlen(prefix)) == 0 && ++seen == n)
            return at;
    ck_assert_msg(false, "fewer than %d lines starting with %s", n, prefix);
    return NULL;
}

/* `log` with the first argument of each lt_operands line (a GEMM's A: where
 * weight_cache put a weight's copy, which depends on when it was made) left out. */
static char *without_copy_addresses(const char *log)
{
    char *out = strdup(log);
    for (char *at = strstr(out, "lt_operands "); at != NULL; at = strstr(at + 1, "lt_operands ")) {
        char *arg = at + strlen("lt_operands "), *end = strchr(arg, ' ');
        if (end != NULL)
            memmove(arg, end + 1, strlen(end + 1) + 1);
    }
    return out;
}

static struct h3_sig *parse_sig_file(const char *path)
{
    size_t len;
    char *text = t_read_file(path, &len);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    char err[512];
    struct h3_sig *s = h3_sig_parse(text, len, path, err, sizeof(err));
    ck_assert_msg(s != NULL, "%s", err);
    free(text);
    return s;
}

/*
 * The signature learned into `dir` against the committed one: the same
 * calls (kernels, launch configurations, parameter sizes, descriptions,
 * algorithms, unique ids), the same bytes, the same slots; wiring differs
 * at seven slots, each between "first" and a reference: three references
 * of the recording are the allocator's reuse of a freed buffer (the
 * replay's frees say so), four equalities held in the three learning
 * instances with no free reported between them (replay_frees.py reports
 * the block's Python frees, not every one PyTorch makes); and no slot is
 * dead (nothing reads the dead set).
 */
static void compare_with_committed(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    char path[1024] = "";
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
        if (strncmp(e->d_name, "block-learned-1-42calls-n1797", 29) == 0)
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    closedir(d);
    ck_assert_msg(path[0] != '\0', "no learned signature written to %s", dir);
    char *committed_path = t_repo_path("signatures/h3-block-torch2.11.0+cu130-sm90.sig");
    struct h3_sig *l = parse_sig_file(path), *c = parse_sig_file(committed_path);
    ck_assert_uint_eq(l->ncalls, c->ncalls);
    unsigned rewired = 0, dead = 0;
    for (uint32_t j = 0; j < c->ncalls; j++) {
        const struct h3_sig_call *a = &l->calls[j], *b = &c->calls[j];
        ck_assert_int_eq(a->kind, b->kind);
        ck_assert(a->kernel == NULL ? b->kernel == NULL : strcmp(a->kernel, b->kernel) == 0);
        ck_assert(memcmp(a->grid, b->grid, sizeof(a->grid)) == 0 && memcmp(a->block, b->block, sizeof(a->block)) == 0 &&
                  a->shmem == b->shmem && a->nparams == b->nparams);
        ck_assert(a->nparams == 0 || memcmp(a->param_sizes, b->param_sizes, a->nparams * sizeof(uint16_t)) == 0);
        ck_assert(memcmp(a->desc, b->desc, sizeof(a->desc)) == 0 && a->desc_present == b->desc_present);
        ck_assert(memcmp(a->algo, b->algo, sizeof(a->algo)) == 0 && a->algo_present == b->algo_present);
        ck_assert(a->nuids == b->nuids && (a->nuids == 0 || memcmp(a->uids, b->uids, a->nuids * sizeof(int64_t)) == 0));
        ck_assert_msg(a->nbytes == b->nbytes, "call %u: %u byte ranges, committed %u", j, a->nbytes, b->nbytes);
        for (uint32_t i = 0; i < a->nbytes; i++)
            ck_assert_msg(a->bytes[i].param == b->bytes[i].param && a->bytes[i].offset == b->bytes[i].offset &&
                              a->bytes[i].len == b->bytes[i].len &&
                              memcmp(a->bytes[i].data, b->bytes[i].data, a->bytes[i].len) == 0,
                          "call %u: byte range %u differs", j, i);
        ck_assert_uint_eq(a->nslots, b->nslots);
        for (uint32_t i = 0; i < a->nslots; i++) {
            const struct h3_sig_slot *x = &a->slots[i], *y = &b->slots[i];
            ck_assert(x->param == y->param && x->offset == y->offset && x->uid == y->uid);
            bool same = x->ref == y->ref && (x->ref != H3_REF_SLOT || (x->ref_call == y->ref_call &&
                                                                     x->ref_slot == y->ref_slot && x->delta == y->delta));
            if (!same) {
                ck_assert_msg((x->ref == H3_REF_FIRST && y->ref == H3_REF_SLOT) ||
                                  (x->ref == H3_REF_SLOT && y->ref == H3_REF_FIRST),
                              "call %u slot %u: wired otherwise than first against a reference", j, i);
                rewired++;
            }
            dead += y->dead;
            ck_assert(!x->dead);
        }
    }
    ck_assert_uint_eq(rewired, 7);
    ck_assert_uint_eq(dead, 2);
    h3_sig_free(l), h3_sig_free(c), free(committed_path);
}

/*
 * With no signature loaded, the recorded H200 block trace (with the frees
 * PyTorch reports in inference mode, replay_frees.py casts) is learned from
 * its first three blocks in a row (the first stack of three), and the six
 * blocks after them are fused by every op: once the weight copies exist,
 * the fakes execute exactly what they execute with the committed signature.
 * Without the frees the allocator's reuse of addresses within one stack
 * looks like wiring, and the next stacks' blocks break on it (the stats say
 * so); the frees tell the learner which equalities were reuse.
 */
START_TEST(the_block_is_learned_from_its_first_instances)
{
    T_NEEDS_KERNELS();
    char *none = t_path("no-signatures"), *kept = t_path("learned");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    char record[512];
    snprintf(record, sizeof(record), "H3SHIM_RECORD=%s", kept);
    const char *const env[] = {"H3SHIM_OPS=all", record, NULL};
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *committed_stats;
    char *committed = replay_with("committed", env, &committed_stats);
    t_run.sigs = none;
    char *stats;
    char *log = replay_with("learned", env, &stats);
    /* Traced, the same replay names the call the group was learned at: once. */
    t_run.trace = t_path("learned.jsonl");
    char *traced_stats;
    free(replay_with("learned-traced", env, &traced_stats));
    free(traced_stats);
    char *trace = t_read_file(t_run.trace, NULL);
    t_run.trace = NULL;
    t_run.sigs = NULL;
    t_run.replay = NULL;
    ck_assert(trace != NULL);
    const char *at = strstr(trace, "\"learned\":\"block-learned-1-42calls-n1797\"");
    ck_assert_msg(at != NULL && strstr(at + 1, "\"learned\":") == NULL, "the trace names the learning call not once");
    /* Each record says what the learner did with its call: the three
     * instances kept, the fused blocks' calls left to their signature. */
    unsigned nkept = 0;
    for (const char *k = trace; (k = strstr(k, "\"learner\":\"kept\"")) != NULL && k < at; k++)
        nkept++;
    ck_assert_msg(nkept >= 3 * 42, "%u calls traced as kept before the learning call", nkept);
    ck_assert(strstr(at, "\"learner\":\"continuing a signature's attempt\"") != NULL);
    free(trace);
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 0 refused") != NULL, "%s", tail_of(stats));
    static const char *const runs[] = {"op norm_cast    6 groups run (12 calls)", "op residual_norm 12 groups run",
                                       "op qk_norm_rope 6 groups run (108 calls)", "op swiglu       6 groups run",
                                       "op weight_cache 24 groups run"};
    for (size_t i = 0; i < H3_ARRAY_LEN_T(runs); i++)
        ck_assert_msg(strstr(stats, runs[i]) != NULL, "expected '%s' in\n%s", runs[i], tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL && strstr(stats, "WARN") == NULL, "%s", tail_of(stats));
    /* The fourth block is the first fused (its q/k op is the learned run's
     * first); the second stack's blocks make the weight copies that the
     * committed run made in the first, so from the third stack on (the
     * seventh block) every call is the committed run's, the copies' addresses
 * aside. */
    char *a = without_copy_addresses(lines_after(log, "qk_check ", 4));
    char *b = without_copy_addresses(lines_after(committed, "qk_check ", 7));
    ck_assert_msg(strcmp(a, b) == 0, "from the seventh block on, the fakes executed other calls than with the "
                                     "committed signature");
    free(a), free(b);
    ck_assert_uint_eq(count_lines_starting(log, "qk_check "), T_INSTANCES - 3);
    compare_with_committed(kept);
    free(stats), free(log), free(committed), free(committed_stats), free(none), free(kept);
}
END_TEST

/* A learning run: the replay `replay` with no signature loaded and every op,
 * against the same replay without the shim; the fakes must execute the same
 * calls (`same`: compared whole, else only the launches on each of the two
 * threads' streams).  Returns the stats. */
static char *learning_run(const char *tag, const char *replay, bool same)
{
    char *none = t_path("no-signatures");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    t_run.replay = replay;
    char *base = same ? replay_with("learning-base", t_disabled, NULL) : NULL;
    t_run.sigs = none;
    char *stats;
    char *log = replay_with(tag, env, &stats);
    t_run.sigs = NULL;
    t_run.replay = NULL;
    if (same)
        ck_assert_msg(strcmp(base, log) == 0, "%s: the fakes executed another stream of calls", tag);
    free(base), free(log), free(none);
    return stats;
}

/* learning_run with H3SHIM_LEARN_QUIET at `quiet`. */
static char *quiet_learning_run(const char *tag, const char *replay, bool same, const char *quiet)
{
    setenv("H3SHIM_LEARN_QUIET", quiet, 1);
    char *stats = learning_run(tag, replay, same);
    unsetenv("H3SHIM_LEARN_QUIET");
    return stats;
}

/*
 * Learning beside what real programs put between a block's calls: a call
 * that synchronises, another kernel on the stream, a launch on another
 * stream, before several calls of the first stack's second block.  The
 * block is learned every time: from the first stack where the foreign call
 * came on another stream or synchronised (noted, not a break), else from the
 * second stack; nothing falls back and nothing warns.
 */
START_TEST(learning_survives_foreign_calls)
{
    T_NEEDS_KERNELS();
    static const enum fw_insert what[] = {FW_INSERT_STREAM_SYNC, FW_INSERT_KERNEL, FW_INSERT_OTHER_STREAM};
    static const int at[] = {0, 7, 23, 41};
    for (size_t w = 0; w < H3_ARRAY_LEN_T(what); w++)
        for (size_t p = 0; p < H3_ARRAY_LEN_T(at); p++) {
            /* The second block begins at replay call 36 + 42. */
            t_run.opts = (struct fw_replay_opts){36 + T_BLOCK + at[p], what[w], 0, 0, 0, 0};
            char tag[64];
            snprintf(tag, sizeof(tag), "learning-%s-%d", t_insert_names[what[w]], at[p]);
            char *stats = learning_run(tag, T_REPLAY_FREES_CASTS, false);
            ck_assert_msg(strstr(stats, "learn: 1 groups learned") != NULL, "%s:\n%s", tag, tail_of(stats));
            long complete = stat_after(stats, "block-learned-1-42calls-n1797: ");
            ck_assert_msg(complete >= 3, "%s: %ld blocks fused after learning\n%s", tag, complete, tail_of(stats));
            ck_assert_msg(strstr(stats, "WARN") == NULL && strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
            free(stats);
        }
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
}
END_TEST

/* Two threads replaying the block at once, each on its own stream: the
 * group is learned once (the second thread's is the first's, and matches
 * it), and both threads' later blocks are fused. */
START_TEST(two_threads_learn_the_block_once)
{
    T_NEEDS_KERNELS();
    t_run.replay = T_REPLAY_FREES_CASTS;
    t_run.threads = 2;
    char *none = t_path("no-signatures");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    t_run.sigs = none;
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    char *stats;
    char *log = replay_with("learning-threads", env, &stats);
    t_run.sigs = NULL, t_run.threads = 0, t_run.replay = NULL;
    for (int i = 0; i < 2; i++) {
        char *got = execs_on(log, i == 0 ? 0x1000 : 0x2000);
        ck_assert_uint_gt(count_lines_starting(got, "exec "), 0);
        free(got);
    }
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 0 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-1-42calls-n1797: ") >= 6, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "2 threads looked") != NULL, "%s", tail_of(stats));
    free(stats), free(log), free(none);
}
END_TEST

/* The main thread replays `before` (no signature loaded), then a second
 * thread learns the block from its replay, then the main thread replays
 * the block; the stats of the run (its log freed).  weight_cache off: its
 * copies would turn every thread's wrappers off (h3_thread_idle_fast). */
static char *learned_elsewhere_run(const char *tag, const char *before, const char *setting)
{
    char *none = t_path("no-signatures");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    t_run.sigs = none;
    t_run.replay_before = before;
    t_run.replay = T_REPLAY_FREES_CASTS;
    t_run.threads = 1;
    t_run.replay_after = T_REPLAY_FREES_CASTS;
    const char *const env[] = {"H3SHIM_OPS=norm_cast,residual_norm,qk_norm_rope,swiglu", setting, NULL};
    char *stats;
    char *log = replay_with(tag, env, &stats);
    t_run.sigs = NULL, t_run.replay_before = NULL, t_run.replay = NULL, t_run.threads = 0, t_run.replay_after = NULL;
    free(log), free(none);
    return stats;
}

/* A thread that stopped looking (H3SHIM_LEARN_PATIENCE, spent on a stream
 * that never repeats) runs the block with no signature: its kernels are
 * idle there, and noted so (its wrappers forward them).  Another thread
 * then learns the block; when the first runs it again, its table of idle
 * kernels is stale (the signatures' first calls changed), so its blocks are
 * matched and fused too, as the other thread's are (without the epoch's
 * bump in h3_match_setup they are forwarded unmatched). */
START_TEST(a_block_learned_on_another_thread_reaches_an_idle_thread)
{
    T_NEEDS_KERNELS();
    char *stats = learned_elsewhere_run("learned-elsewhere", T_REPLAY_UNIQUE_THEN_BLOCK, "H3SHIM_LEARN_PATIENCE=1000");
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 0 refused") != NULL &&
                      strstr(stats, "2 threads looked") != NULL && strstr(stats, "1 stopped looking") != NULL,
                  "%s", tail_of(stats));
    /* The first thread's idle block ran by its wrappers, before the other learned it. */
    ck_assert_msg(forwarded(stats, "__cudaLaunchKernel") >= 8 * 30, "%s", tail_of(stats));
    /* The other thread's blocks after its three, and all of the first's second stream. */
    ck_assert_msg(stat_after(stats, "block-learned-1-42calls-n1797: ") == (T_INSTANCES - 3) + T_INSTANCES, "%s",
                  tail_of(stats));
    free(stats);
}
END_TEST

/* Another kernel in the middle of every block (replay_mutate.py middle): the
 * group is learned but no op takes it (qk_norm_rope plans nothing there), so
 * nothing is fused and everything executes as without the shim. */
START_TEST(a_mutated_block_is_learned_not_fused)
{
    T_NEEDS_KERNELS();
    char *stats = learning_run("mutated", T_REPLAY_MUTATED, true);
    ck_assert_msg(strstr(stats, "learn: 0 groups learned, 1 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "a group of 44 calls: not the H3 block (qk_norm_rope plans nothing in it)") != NULL,
                  "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "groups run (0 calls)") != NULL && strstr(stats, "engine: 0 launches deferred") != NULL,
                  "%s", tail_of(stats));
    free(stats);
}
END_TEST

/* Two threads, one a device each (as DataParallel's replicas, or a thread
 * per GPU): every launch each made, its fused ops' kernels and its held
 * launches issued at the group's end or at the thread's exit, runs in its
 * own device's context (the fakes add the context to a kernel run in
 * another than device 0's), and both threads' blocks are fused. */
START_TEST(two_threads_on_two_devices)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    t_run.threads = 2, t_run.second_device = true;
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *stats;
    char *log = replay_with("two-devices", env, &stats);
    t_run.threads = 0, t_run.second_device = false, t_run.replay = NULL;
    size_t on[2] = {0, 0}, in_device_1[2] = {0, 0};
    char *copy = strdup(log), *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        unsigned long w[11];
        int n = sscanf(l, "exec %lx %lx %lx %lx %lx %lx %lx %lx %lx %lx %lx", &w[0], &w[1], &w[2], &w[3], &w[4],
                       &w[5], &w[6], &w[7], &w[8], &w[9], &w[10]);
        if (n < 10 || (w[8] != 0x1000 && w[8] != 0x2000))
            continue;
        on[w[8] == 0x2000]++;
        in_device_1[w[8] == 0x2000] += n == 11 && w[10] == 0xc1c0; /* an 11th word: run in that context */
    }
    free(copy);
    ck_assert_msg(on[0] > 100 && on[1] > 100, "executions on the two streams: %zu, %zu", on[0], on[1]);
    ck_assert_msg(in_device_1[0] == 0 && in_device_1[1] == on[1],
                  "device 0's thread: %zu of %zu runs in device 1's context; device 1's: %zu of %zu", in_device_1[0],
                  on[0], in_device_1[1], on[1]);
    ck_assert_msg(strstr(stats, "op qk_norm_rope 18 groups run") != NULL && strstr(stats, "op swiglu       18 groups run") != NULL,
                  "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "WARN") == NULL, "%s", tail_of(stats));
    free(stats), free(log);
}
END_TEST

/* Stale bytes beside the cats' two isContiguous flags, 0 in some blocks and
 * near a device address in others (seen on the H200 at 517 tokens): the word
 * is padding, but the flags beside it are what the kernel reads and what
 * qk_norm_rope checks, so they stay compared and the block is learned and fused. */
START_TEST(padding_beside_a_flag_keeps_the_flag)
{
    T_NEEDS_KERNELS();
    char *stats = learning_run("padding", T_REPLAY_PADDING, false);
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 0 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op qk_norm_rope 6 groups run (108 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL && strstr(stats, "WARN") == NULL, "%s", tail_of(stats));
    free(stats);
}
END_TEST

/*
 * Stale bytes in a launch that no op's range spans (replay_mutate.py loose:
 * the nan_to_num functor's padding), the same in the three learning
 * instances and different in each later block, as the unused entries and
 * padding of PyTorch's ReduceOp are in a block whose norm is written by hand
 * (robust.py's implementations, on the H200: "bytes at call 1", nothing
 * fused).  The launch is matched on its identity and wiring, with the
 * committed signature and with the learned one: every block fuses as in the
 * unmutated replay, and each mutated launch runs with its own bytes (its
 * execution, parameters' hash and all, is the one the fakes log without the
 * shim).
 */
START_TEST(a_launch_no_op_spans_is_matched_without_its_bytes)
{
    T_NEEDS_KERNELS();
    char *none = t_path("no-signatures");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    static const char *const ops[] = {"stats: op norm_cast    ", "stats: op qk_norm_rope ", "stats: op residual_norm ",
                                      "stats: op swiglu       ", "stats: op weight_cache "};
    /* The executions of the mutated launches, as the fakes log them without the shim. */
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *plain = replay_with("loose-plain", t_disabled, NULL);
    t_run.replay = T_REPLAY_LOOSE;
    char *plain_mutated = replay_with("loose-plain-mutated", t_disabled, NULL);
    char *mutated[8];
    size_t nmutated = 0;
    char *copy = strdup(plain_mutated), *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save))
        if (strncmp(l, "exec ", 5) == 0 && strstr(plain, l) == NULL && nmutated < 8)
            mutated[nmutated++] = l;
    ck_assert_msg(nmutated == 6, "%zu executions differ without the shim, 6 launches were mutated", nmutated);
    for (int learned = 0; learned < 2; learned++) {
        t_run.sigs = learned ? none : NULL;
        t_run.replay = T_REPLAY_FREES_CASTS;
        char *base_stats, *stats;
        free(replay_with(learned ? "loose-base-learned" : "loose-base", env, &base_stats));
        t_run.replay = T_REPLAY_LOOSE;
        char *log = replay_with(learned ? "loose-learned" : "loose-committed", env, &stats);
        t_run.sigs = NULL, t_run.replay = NULL;
        for (size_t i = 0; i < H3_ARRAY_LEN_T(ops); i++) {
            long runs = stat_after(stats, ops[i]);
            ck_assert_msg(runs > 0 && runs == stat_after(base_stats, ops[i]), "%s%ld groups, unmutated %ld:\n%s",
                          ops[i], runs, stat_after(base_stats, ops[i]), tail_of(stats));
        }
        ck_assert_msg(strstr(stats, "(first break: bytes") == NULL && strstr(stats, "WARN") == NULL, "%s",
                      tail_of(stats));
        for (size_t i = 0; i < nmutated; i++)
            ck_assert_msg(strstr(log, mutated[i]) != NULL, "%s: not executed with its own bytes: %s",
                          learned ? "learned" : "committed", mutated[i]);
        free(base_stats), free(log), free(stats);
    }
    free(copy), free(plain), free(plain_mutated), free(none);
}
END_TEST

/*
 * A launch after the rope, in the rope's group, that reads k's FP16 norm
 * (replay_mutate.py reader), the norm freed once that launch returned and
 * before the group's next call: the q/k op runs at that call, after the
 * free, while the launch is still held.  The norm is written (what the held
 * launch reads), every other freed intermediate is left out as before.
 * Without the reader the freed-outputs rule had taken the free alone and
 * left the norm out: the held launch read memory nothing wrote.
 */
START_TEST(an_output_a_held_launch_reads_is_written)
{
    T_NEEDS_KERNELS();
    char *stats = NULL;
    char *none = t_path("no-signatures");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    t_run.replay = T_REPLAY_READER;
    t_run.sigs = none;
    char *log = replay_with("reader", env, &stats);
    t_run.sigs = NULL, t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "learn: 1 groups learned") != NULL && strstr(stats, "skip_released: on") != NULL,
                  "%s", tail_of(stats));
    /* k's FP16 norm is bit 13 of what the q/k op left out (side 1, field 3). */
    size_t fused = 0;
    for (const char *at = strstr(log, "qk_check 1 "); at != NULL; at = strstr(at + 1, "qk_check 1 ")) {
        unsigned long dropped = strtoul(at + strlen("qk_check 1 "), NULL, 16);
        ck_assert_msg((dropped & (1ul << 13)) == 0, "k's FP16 norm left out (%lx) while a held launch reads it", dropped);
        ck_assert_msg(dropped != 0, "nothing left out: the freed-outputs rule did not run");
        fused++;
    }
    ck_assert_msg(fused >= 3 && strstr(stats, "op qk_norm_rope left out") != NULL, "%zu fused\n%s", fused,
                  tail_of(stats));
    free(stats), free(log), free(none);
}
END_TEST

/*
 * The w2 weight's cast (call 38, which weight_cache claims) reading silu's
 * output through its input word, which is no pointer slot and not compared
 * (replay_mutate.py cast-reader), silu's output freed after that cast was
 * made: swiglu writes silu's output in every block (the second word of
 * swiglu_check), as a launch held after its range may read anything.  The
 * unmutated replay leaves it out (ops_leave_out_what_the_allocator_freed).
 */
START_TEST(an_output_a_claimed_launch_reads_is_written)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    t_run.replay = T_REPLAY_CAST_READER;
    char *stats;
    char *log = replay_with("cast-reader", env, &stats);
    t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "skip_released: on") != NULL, "%s", tail_of(stats));
    ck_assert_msg(count_lines_starting(log, "swiglu_check 1 1 ") == T_INSTANCES &&
                      count_lines_starting(log, "swiglu_check 1 0 ") == 0,
                  "%zu blocks wrote silu's output, %zu left it out\n%s", count_lines_starting(log, "swiglu_check 1 1 "),
                  count_lines_starting(log, "swiglu_check 1 0 "), tail_of(stats));
    free(stats), free(log);
}
END_TEST

/* The shared replay with `env`, untraced and traced (a trace observes every
 * call): the same calls executed in the same order, and as many groups run
 * by each op.  Returns the untraced run's stats. */
static char *idle_against_traced(const char *tag, const char *const *env)
{
    t_run.replay = T_REPLAY_SHARED;
    char name[64], *stats, *traced_stats;
    char *log = replay_with(tag, env, &stats);
    snprintf(name, sizeof(name), "%s.jsonl", tag);
    t_run.trace = t_path(name);
    snprintf(name, sizeof(name), "%s-traced", tag);
    char *traced = replay_with(name, env, &traced_stats);
    t_run.trace = NULL, t_run.replay = NULL;
    ck_assert_msg(forwarded(traced_stats, NULL) == 0, "%s", tail_of(traced_stats));
    /* The same executions (weight_cache's copies, host memory on the fakes, may lie elsewhere). */
    char *checks = op_checks(log), *traced_checks = op_checks(traced);
    ck_assert_str_eq(checks, traced_checks);
    ck_assert_uint_eq(count_lines_starting(log, "exec "), count_lines_starting(traced, "exec "));
    ck_assert_uint_eq(t_count_lines(log), t_count_lines(traced));
    ck_assert_msg(count_lines_starting(checks, "qk_check") >= 3, "%s", tail_of(stats));
    for (const char *at = strstr(traced_stats, "stats: op "); at != NULL; at = strstr(at + 1, "stats: op ")) {
        const char *runs = strstr(at, " groups run"), *end = strchr(at, '\n');
        if (runs == NULL || (end != NULL && runs > end))
            continue; /* not an op's count of runs */
        char line[96];
        snprintf(line, sizeof(line), "%.*s", (int)(runs - at), at);
        ck_assert_msg(strstr(stats, line) != NULL, "%s: not in\n%s", line, tail_of(stats));
    }
    free(checks), free(traced_checks), free(log), free(traced), free(traced_stats);
    return stats;
}

/*
 * Another model's layers, with one of the block's weight casts among them,
 * then the block (the shared replay).  With learning off (H3SHIM_LEARN=0),
 * the layers' launches and cuBLAS GEMMs are forwarded by their wrappers
 * once their kernels were found idle, and the block is matched and fused
 * as when every call is observed.  With learning on and no signature, the
 * layers repeat and are refused; then their launches are forwarded from the
 * thread's table of the refused group's launches, and their GEMMs by their
 * description alone, and the block is learned and fused as when every call
 * is observed: the cast the layers share with it stays in sight where the
 * block makes it (another two calls before it).
 */
START_TEST(an_idle_thread_s_calls_are_forwarded_by_their_wrappers)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", "H3SHIM_LEARN=0", NULL};
    char *stats = idle_against_traced("idle-fast", env);
    long launches = forwarded(stats, "__cudaLaunchKernel"), gemms = forwarded(stats, "cublasGemmEx");
    ck_assert_msg(launches >= 20 * 25 && gemms >= 20 * 4, "%ld launches, %ld GEMMs\n%s", launches, gemms,
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "op norm_cast    9 groups run") != NULL, "%s", tail_of(stats));
    free(stats);
    static const char *const learning[] = {"H3SHIM_OPS=all", NULL};
    char *none = t_path("no-signatures");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    t_run.sigs = none;
    stats = idle_against_traced("idle-learning", learning);
    t_run.sigs = NULL;
    launches = forwarded(stats, "__cudaLaunchKernel"), gemms = forwarded(stats, "cublasGemmEx");
    ck_assert_msg(launches >= 15 * 25 && gemms >= 15 * 4, "%ld launches, %ld GEMMs\n%s", launches, gemms,
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= 3, "%s", tail_of(stats));
    free(stats), free(none);
}
END_TEST

/* The count on the stats line "op OP ... fallback REASON N", or -1. */
static long op_fallbacks(const char *stats, const char *op, const char *reason)
{
    for (const char *at = strstr(stats, "stats: op "); at != NULL; at = strstr(at + 1, "stats: op ")) {
        const char *name = at + strlen("stats: op "), *end = strchr(at, '\n');
        size_t n = strlen(op), r = strlen(reason);
        const char *why = strstr(name, "fallback ");
        if (strncmp(name, op, n) == 0 && name[n] == ' ' && why != NULL && (end == NULL || why < end) &&
            strncmp(why + 9, reason, r) == 0 && why[9 + r] == ' ')
            return strtol(why + 9 + r, NULL, 10);
    }
    return -1;
}

/*
 * The input casts of to_qkv and w1 (calls 3 and 33) made where a buffer was
 * that the bias casts before them (calls 1 and 31) read, that buffer freed
 * in between (replay_mutate.py early): norm_cast (calls 0 and 3) and
 * residual_norm (28-30 and 33) would write the input's cast ahead of the
 * bias cast, which would then read the input's bits for its bias; and
 * weight_cache, which casts the bias after the rest of the group (a fill,
 * the owed write), would read them too.  All three fall back
 * (freed_between) in every block, committed or learned, and the other ops
 * run; the unmutated stream, whose casts read parameters, never falls back
 * so.
 */
START_TEST(an_output_is_not_written_ahead_of_a_launch_whose_memory_it_took)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    char *none = t_path("no-signatures");
    ck_assert(mkdir(none, 0777) == 0 || errno == EEXIST);
    char *stats;
    for (int learned = 0; learned < 2; learned++) {
        t_run.replay = T_REPLAY_EARLY;
        t_run.sigs = learned ? none : NULL;
        char *log = replay_with(learned ? "early-learned" : "early", env, &stats);
        t_run.sigs = NULL, t_run.replay = NULL;
        long nc = op_fallbacks(stats, "norm_cast", "freed_between"),
             rn = op_fallbacks(stats, "residual_norm", "freed_between");
        long wc = op_fallbacks(stats, "weight_cache", "freed_between");
        size_t qk = count_lines_starting(log, "qk_check 1 ");
        ck_assert_msg(count_lines_starting(log, "rmsnorm_check ") == 0 && nc == rn && nc > 0 && (size_t)nc == qk &&
                          wc == 2 * nc && (learned || nc == T_INSTANCES),
                      "%s: norm_cast ran %zu times, fell back %ld times, residual_norm %ld, weight_cache %ld; q/k %zu\n%s",
                      learned ? "learned" : "committed", count_lines_starting(log, "rmsnorm_check "), nc, rn, wc, qk,
                      tail_of(stats));
        free(log), free(stats);
    }
    t_run.replay = T_REPLAY_FREES_CASTS;
    free(replay_with("early-base", env, &stats));
    t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "freed_between") == NULL && strstr(stats, "op norm_cast    9 groups run") != NULL &&
                      strstr(stats, "op residual_norm 18 groups run") != NULL,
                  "%s", tail_of(stats));
    free(stats), free(none);
}
END_TEST

/*
 * Verify mode.  The log without what the shim issues of its own: the fused
 * and verify kernels' executions (an "exec" line followed by the kernel's
 * "..._check" or "verify_note" line) and the events and memsets it makes;
 * and without the allocator's reports and cuDNN's variant packs being
 * built, which the framework makes as it goes while the engine holds
 * launches back (they submit nothing).
 */
static char *without_shim_calls(const char *log)
{
    static const char *const own[] = {"cuEventCreate ", "cuEventQuery ", "cuEventRecord ", "cuEventSynchronize ",
                                      "cuEventDestroy_v2 ", "cuMemsetD8_v2 ", "cuMemsetD32Async ", "cuMemFreeAsync ",
                                      "reportMemoryUsageToProfiler ", "cudnnBackendSetAttribute "};
    char *out = malloc(strlen(log) + 1), *w = out, *prev = NULL;
    for (const char *at = log; *at != '\0';) {
        const char *end = strchr(at, '\n');
        size_t n = end != NULL ? (size_t)(end - at) + 1 : strlen(at);
        const char *space = memchr(at, ' ', n);
        size_t word = space != NULL ? (size_t)(space - at) : n;
        bool check = (word > 6 && memcmp(at + word - 6, "_check", 6) == 0) ||
                     (word == 11 && memcmp(at, "verify_note", 11) == 0);
        bool drop = check;
        for (size_t i = 0; i < H3_ARRAY_LEN_T(own) && !drop; i++)
            drop = strncmp(at, own[i], strlen(own[i])) == 0;
        if (check && prev != NULL && strncmp(prev, "exec ", 5) == 0)
            w = prev; /* the kernel's execution line goes with it */
        if (!drop) {
            prev = w;
            memcpy(w, at, n);
            w += n;
        } else {
            prev = NULL;
        }
        at += n;
    }
    *w = '\0';
    return out;
}

/* The committed block replay with the ops in `ops` and verify mode: its log without the shim's own calls. */
static char *verify_run(const char *tag, const char *const *env, char **stats)
{
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *log = replay_with(tag, env, stats);
    t_run.replay = NULL;
    char *own = without_shim_calls(log);
    free(log);
    return own;
}

/* The first N runs of each op range are compared (the fakes' events are
 * complete at once, so each result is read at the next op's run); every
 * range runs fused after its N equal runs; the trace names the verified
 * runs; weight_cache, which launches no kernel of its own, is not compared. */
START_TEST(verify_mode_compares_then_fuses)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", "H3SHIM_VERIFY=2", NULL};
    t_run.trace = t_path("verify.jsonl");
    char *stats;
    free(verify_run("verify", env, &stats));
    char *trace = t_read_file(t_run.trace, NULL);
    t_run.trace = NULL;
    static const char *const want[] = {
        "op swiglu       7 groups run", "op norm_cast    7 groups run", "op residual_norm 14 groups run",
        "op qk_norm_rope 7 groups run", "op weight_cache 36 groups run",
        "verify: op swiglu       2 runs a range; 2 compared, 2 equal, 0 differing, 0 not read; 1 ranges verified",
        "verify: op residual_norm 2 runs a range; 4 compared, 4 equal, 0 differing, 0 not read; 2 ranges verified",
        "verify: op qk_norm_rope 2 runs a range; 2 compared, 2 equal, 0 differing, 0 not read; 1 ranges verified; "
        "4 outputs compared, 0 not (freed first)",
        "verify: op norm_cast    2 runs a range; 2 compared, 2 equal, 0 differing, 0 not read; 1 ranges verified; "
        "4 outputs compared",
        "verify: op weight_cache 2 runs a range; 0 compared", "not compared (no kernel of its own)"};
    for (size_t i = 0; i < H3_ARRAY_LEN_T(want); i++)
        ck_assert_msg(strstr(stats, want[i]) != NULL, "expected '%s' in\n%s", want[i], tail_of(stats));
    ck_assert_msg(strstr(stats, "fallback") == NULL && strstr(stats, "WARN") == NULL, "%s", tail_of(stats));
    ck_assert(trace != NULL);
    size_t verified = 0;
    for (const char *at = strstr(trace, "\"verify\":\"qk_norm_rope\""); at != NULL;
         at = strstr(at + 1, "\"verify\":\"qk_norm_rope\""))
        verified++;
    ck_assert_msg(verified == 2, "the trace names %zu verified qk_norm_rope runs", verified);
    free(trace), free(stats);
}
END_TEST

/* A fused kernel that computes a wrong result (FAKE_WRONG_KERNEL: it marks
 * the scratch it writes) is caught at its first run: one warning naming the
 * op, the signature, the output and the element; the op is off afterwards
 * (verify_differed), and the fakes executed the unshimmed stream's calls. */
START_TEST(verify_mode_turns_a_wrong_op_off)
{
    T_NEEDS_KERNELS();
    /* Each op with a kernel of its own, alone, its kernel wrong (the one
     * the block's launches take on the fakes). */
    static const struct {
        const char *op, *kernel, *warning;
    } cases[] = {
        {"swiglu", "h3_swiglu_f16x8", "WARN verify: op swiglu differs from the calls it replaces (signature "
                                      "minimax-h3-vae-decoder/block, output 1 of 1, 29442048 bytes): element 0 is "
                                      "0xa5a5 fused"},
        {"norm_cast", "h3_rmsnorm_f32", "WARN verify: op norm_cast differs"},
        {"residual_norm", "h3_residual_rmsnorm_f32", "WARN verify: op residual_norm differs"},
        {"qk_norm_rope", "h3_qk_norm_rope_out_f16x8", "WARN verify: op qk_norm_rope differs"},
    };
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *base_raw = replay_with("verify-base", t_disabled, NULL);
    t_run.replay = NULL;
    char *base = without_shim_calls(base_raw);
    for (size_t c = 0; c < H3_ARRAY_LEN_T(cases); c++) {
        char ops[64], wrong[96], ran[64];
        snprintf(ops, sizeof(ops), "H3SHIM_OPS=%s", cases[c].op);
        snprintf(wrong, sizeof(wrong), "FAKE_WRONG_KERNEL=%s", cases[c].kernel);
        const char *const env[] = {ops, "H3SHIM_VERIFY=3", wrong, NULL};
        char *stats;
        char *log = verify_run("verify-wrong", env, &stats);
        ck_assert_msg(strcmp(base, log) == 0, "%s: the fakes executed another stream of calls than without the shim",
                      cases[c].op);
        ck_assert_msg(strstr(stats, cases[c].warning) != NULL, "%s:\n%s", cases[c].op, tail_of(stats));
        snprintf(ran, sizeof(ran), "op %-12s 0 groups run", cases[c].op);
        ck_assert_msg(strstr(stats, ran) != NULL && strstr(stats, "fallback verify_differed") != NULL &&
                          strstr(stats, "1 compared, 0 equal, 1 differing") != NULL &&
                          strstr(stats, "off (a difference)") != NULL,
                      "%s:\n%s", cases[c].op, tail_of(stats));
        free(log), free(stats);
    }
    free(base), free(base_raw);
}
END_TEST

/* While a range is not verified its op's kernel writes scratch alone: with
 * verification that never ends and every output written (no output left
 * out: H3SHIM_SKIP_RELEASED=0), every fused kernel's every output lies in
 * memory the shim allocated (FAKE_CHECK_SCRATCH), and no op runs fused. */
START_TEST(verify_mode_writes_only_scratch)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=all", "H3SHIM_VERIFY=1000000", "H3SHIM_SKIP_RELEASED=0",
                                      "FAKE_CHECK_SCRATCH=1", NULL};
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *stats;
    char *log = replay_with("verify-scratch", env, &stats);
    t_run.replay = NULL;
    size_t in = 0, out = 0;
    for (const char *at = strstr(log, "outputs_scratch "); at != NULL; at = strstr(at + 1, "outputs_scratch "))
        at[16] == '1' ? in++ : out++;
    ck_assert_msg(out == 0 && in >= 9 * 5, "%zu fused runs wrote the program's buffers, %zu scratch alone", out, in);
    static const char *const none[] = {"op swiglu       0 groups run", "op norm_cast    0 groups run",
                                       "op residual_norm 0 groups run", "op qk_norm_rope 0 groups run"};
    for (size_t i = 0; i < H3_ARRAY_LEN_T(none); i++)
        ck_assert_msg(strstr(stats, none[i]) != NULL, "expected '%s' in\n%s", none[i], tail_of(stats));
    free(log), free(stats);
}
END_TEST

/* Results that come back late (FAKE_EVENT_LAG: an event is complete at its
 * second query): a range whose N runs were read equal does not run fused
 * while another of its runs is still on its way (verify_pending), so a
 * difference found in that run (FAKE_WRONG_FROM=2: the kernel goes wrong at
 * its second run) turns the op off before it ever ran fused; and with a
 * right kernel the range runs fused once every result is in. */
START_TEST(verify_mode_waits_for_late_results)
{
    T_NEEDS_KERNELS();
    static const char *const wrong[] = {"H3SHIM_OPS=swiglu", "H3SHIM_VERIFY=1", "FAKE_EVENT_LAG=1",
                                        "FAKE_WRONG_KERNEL=h3_swiglu_f16x8", "FAKE_WRONG_FROM=2", NULL};
    char *stats;
    char *log = verify_run("verify-late-wrong", wrong, &stats);
    ck_assert_msg(strstr(stats, "op swiglu       0 groups run") != NULL && strstr(stats, "1 differing") != NULL &&
                      strstr(stats, "off (a difference)") != NULL && strstr(stats, "verify_pending") != NULL,
                  "%s", tail_of(stats));
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *base_raw = replay_with("verify-late-base", t_disabled, NULL);
    t_run.replay = NULL;
    char *base = without_shim_calls(base_raw);
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls than without the shim");
    free(log), free(stats);
    static const char *const right[] = {"H3SHIM_OPS=swiglu", "H3SHIM_VERIFY=2", "FAKE_EVENT_LAG=1", NULL};
    log = verify_run("verify-late-right", right, &stats);
    long fused = stat_after(stats, "op swiglu       "), pending = stat_after(stats, "fallback verify_pending"),
         compared = stat_after(stats, "runs a range; ");
    ck_assert_msg(strstr(stats, "0 differing") != NULL && fused > 0 && pending > 0 && compared >= 2 &&
                      fused + pending + compared == 9,
                  "%s", tail_of(stats));
    free(log), free(stats), free(base), free(base_raw);
}
END_TEST

/* A device reset (its context let go) in the middle of verification, with
 * results still on their way (FAKE_EVENT_LAG): the context's slots go with
 * it and nothing of them is used after; the process goes on, nothing is
 * found differing, and the ops still fuse afterwards. */
START_TEST(verify_mode_survives_a_device_reset)
{
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=swiglu,norm_cast,residual_norm,qk_norm_rope", "H3SHIM_VERIFY=2",
                                      "FAKE_EVENT_LAG=1", NULL};
    static const int at[] = {36 + 5, 36 + T_BLOCK + 23, 36 + 2 * T_BLOCK + 41};
    for (size_t p = 0; p < H3_ARRAY_LEN_T(at); p++) {
        t_run.opts = (struct fw_replay_opts){at[p], FW_INSERT_DEVICE_RESET, 0, 0, 0, 0};
        t_run.replay = T_REPLAY_FREES_CASTS;
        char *stats;
        char *log = replay_with("verify-reset", env, &stats);
        t_run.replay = NULL;
        ck_assert_msg(strstr(log, "cudaDeviceReset") != NULL, "reset before %d: no reset made", at[p]);
        /* The slots' events (nothing else here makes one) destroyed with the context. */
        ck_assert_msg(strstr(log, "cuEventDestroy_v2 ") != NULL, "reset before %d: no slot let go", at[p]);
        ck_assert_msg(strstr(stats, "1 differing") == NULL && strstr(stats, "WARN") == NULL &&
                          stat_after(stats, "op swiglu       ") > 0,
                      "reset before %d:\n%s", at[p], tail_of(stats));
        free(log), free(stats);
    }
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
}
END_TEST

/* Where a run cannot be compared, the op falls back and the calls run as
 * made: a capture in progress (verify_capture), scratch that cannot be had
 * (verify_memory).  H3SHIM_VERIFY unset compares 3 runs where an op is
 * asked for on an SM it is not validated on (FAKE_SM=100), none where it is
 * validated; a bad value warns and keeps that default. */
START_TEST(verify_mode_falls_back_where_it_cannot_compare)
{
    T_NEEDS_KERNELS();
    static const struct {
        const char *env[5];
        const char *want, *also;
        bool same; /* the unshimmed stream's calls, the shim's own aside */
    } cases[] = {
        {{"H3SHIM_OPS=swiglu", "H3SHIM_VERIFY=2", "FAKE_CAPTURING=1", NULL},
         "op swiglu       fallback verify_capture       9", "0 compared", true},
        {{"H3SHIM_OPS=swiglu", "H3SHIM_VERIFY=2", "FAKE_ALLOC_FAIL_BYTES=1048576", NULL},
         "op swiglu       fallback verify_memory        9", "0 compared", true},
        {{"H3SHIM_OPS=swiglu", "H3SHIM_VERIFY=2", "H3SHIM_VERIFY_MAX_MB=1", NULL},
         "op swiglu       fallback verify_memory        9", "0 compared", true},
        {{"H3SHIM_OPS=swiglu", "FAKE_SM=100", NULL}, "op swiglu       6 groups run",
         "verify: op swiglu       3 runs a range; 3 compared, 3 equal", false},
        {{"H3SHIM_OPS=swiglu", NULL}, "op swiglu       9 groups run", NULL, false},
        {{"H3SHIM_OPS=swiglu", "H3SHIM_VERIFY=sometimes", NULL}, "op swiglu       9 groups run",
         "H3SHIM_VERIFY=sometimes is not a number of runs", false},
    };
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *base_raw = replay_with("verify-base", t_disabled, NULL);
    t_run.replay = NULL;
    char *base = without_shim_calls(base_raw);
    for (size_t i = 0; i < H3_ARRAY_LEN_T(cases); i++) {
        char tag[32];
        snprintf(tag, sizeof(tag), "verify-case-%zu", i);
        char *stats;
        char *log = verify_run(tag, cases[i].env, &stats);
        ck_assert_msg(strstr(stats, cases[i].want) != NULL, "case %zu: expected '%s' in\n%s", i, cases[i].want,
                      tail_of(stats));
        ck_assert_msg(cases[i].also == NULL || strstr(stats, cases[i].also) != NULL,
                      "case %zu: expected '%s' in\n%s", i, cases[i].also, tail_of(stats));
        if (cases[i].also == NULL)
            ck_assert_msg(strstr(stats, "verify:") == NULL, "case %zu: verify mode on\n%s", i, tail_of(stats));
        if (cases[i].same && strstr(cases[i].env[2], "FAKE_CAPTURING") == NULL)
            ck_assert_msg(strcmp(base, log) == 0, "case %zu: another stream of calls", i);
        free(log), free(stats);
    }
    free(base), free(base_raw);
}
END_TEST

/* A stream in which no run of calls repeats: every call is kept in the
 * learner's fixed memory (one learner for the one thread), nothing is
 * learned or refused, and every call executes as without the shim; a
 * thread out of patience stops looking.  With learning off and no
 * signature, nothing is learned or matched. */
START_TEST(learning_is_bounded_and_switched_off)
{
    char *stats = learning_run("learn-unique", T_REPLAY_UNIQUE, true);
    ck_assert_msg(strstr(stats, "learn: 0 groups learned, 0 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "1 threads looked (590592 bytes each)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: 3000 calls kept, 0 not kept") != NULL, "%s", tail_of(stats));
    free(stats);
    /* With less patience the thread stops looking after 1000 calls, gives
     * its learner back, and its later calls take the idle path. */
    setenv("H3SHIM_LEARN_PATIENCE", "1000", 1);
    stats = learning_run("learn-patience", T_REPLAY_UNIQUE, true);
    unsetenv("H3SHIM_LEARN_PATIENCE");
    ck_assert_msg(strstr(stats, "0 stopped looking") == NULL && strstr(stats, "1 stopped looking") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(idle_calls(stats) >= 1999, "%s", tail_of(stats));
    free(stats);
    /* Another model's calls over and over: its group is refused at once, and
     * a group refused again and again renews no patience, so the thread
     * stops looking and its calls take the idle path (they kept it looking
     * for ever before).  (Its calls between the refused group's are passed
     * by too once they repeated, a refused island: 1084 are kept in all,
     * so the patience is less than that.) */
    setenv("H3SHIM_LEARN_PATIENCE", "800", 1);
    stats = learning_run("learn-patience-foreign", T_REPLAY_FOREIGN_X20, true);
    unsetenv("H3SHIM_LEARN_PATIENCE");
    ck_assert_msg(strstr(stats, "1 refused") != NULL && strstr(stats, "1 stopped looking") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(idle_calls(stats) >= 8000, "%s", tail_of(stats));
    free(stats);
    static const char *const off[] = {"H3SHIM_OPS=all", "H3SHIM_LEARN=0", NULL};
    char *none = t_path("no-signatures");
    t_run.sigs = none;
    t_run.replay = T_REPLAY_FREES_CASTS;
    char *log = replay_with("learn-off", off, &stats);
    t_run.sigs = NULL, t_run.replay = NULL;
    ck_assert_msg(strstr(stats, "learn:") == NULL, "%s", tail_of(stats));
    /* With no signature and no learning every call is passed through at the first look. */
    ck_assert_msg(stat_after(stats, "passthrough  no_signatures") == 516, "%s", tail_of(stats));
    free(stats), free(log), free(none);
}
END_TEST

/* Another model's layers as a transformers Llama makes them: launches with
 * a GEMM through cuBLAS's own entry point every six (the gapped replay, 100
 * layers of 35 calls).  The learner keeps the GEMMs as calls no signature
 * can hold, so the layer repeats, is refused at its third instance, and
 * every later call takes the idle path, from its wrapper (the same calls
 * executed: `same`); before, each GEMM was a gap, no run between two held a
 * group, and every launch was kept for the whole patience (2^20 calls). */
/* The calls the learner kept, by its stats line. */
/* The number on the stats line right before `key` (-1 when no line has it). */
static long number_before(const char *stats, const char *key)
{
    const char *at = strstr(stats, key);
    if (at == NULL)
        return -1;
    while (at > stats && at[-1] >= '0' && at[-1] <= '9')
        at--;
    return strtol(at, NULL, 10);
}

static long kept_calls(const char *stats)
{
    long kept = number_before(stats, " calls kept");
    ck_assert(kept >= 0);
    return kept;
}

/*
 * Another model's forward of 96 kernels in turn (the kernels replay, 100
 * times), learning off and on (refused, then quiet): from the second forward
 * on every launch is forwarded by its wrapper, found in the thread's table
 * of idle kernels.  A table of 64 entries indexed by the handle alone held
 * at most 64 of them, and two kernels whose handles shared an entry evicted
 * each other at every forward (on the H200 a ViT's thread, at the addresses
 * the loader gave that process, saw 45 of its 190 launches a forward
 * observed so).
 */
START_TEST(a_forward_of_many_kernels_is_forwarded_by_the_wrappers)
{
    for (int learn = 0; learn <= 1; learn++) {
        char *stats;
        if (learn == 0) { /* the committed signatures, learning off */
            static const char *const off[] = {"H3SHIM_OPS=all", "H3SHIM_LEARN=0", NULL};
            t_run.replay = T_REPLAY_KERNELS;
            free(replay_with("kernels-learn-off", off, &stats));
            t_run.replay = NULL;
        } else { /* no signature: refused, then quiet */
            stats = quiet_learning_run("kernels-learn-on", T_REPLAY_KERNELS, true, "500");
        }
        long missed = number_before(stats, " not in the thread's table");
        ck_assert_msg(missed <= 2 * 96, "learning %s: %ld idle launches missed the table\n%s", learn ? "on" : "off",
                      missed, tail_of(stats));
        /* Learning on, the thread keeps its first forwards (a group tried, refused), and its first
         * 500 calls after the refusal take the refused table's path, then the idle table's. */
        ck_assert_msg(forwarded(stats, "__cudaLaunchKernel") >= 90 * 96, "learning %s: %ld launches forwarded\n%s",
                      learn ? "on" : "off", forwarded(stats, "__cudaLaunchKernel"), tail_of(stats));
        free(stats);
    }
}
END_TEST

/* A child that launches a Triton-style kernel (cuLaunchKernelEx, found by
 * dlsym) 200 times, then once through cuLaunchKernel, learning off, the
 * stats to t_run.err. */
static void extended_launches_child(void)
{
    if (freopen(t_run.err, "w", stderr) == NULL)
        exit(3);
    setenv("H3SHIM_STATS", "1", 1);
    setenv("H3SHIM_OPS", "all", 1);
    setenv("H3SHIM_LEARN", "0", 1);
    char *sigs = t_repo_path("signatures"); /* the committed ones: the kernel is idle */
    setenv("H3SHIM_SIGNATURES", sigs, 1);
    free(sigs);
    void *h = t_load("libh3faketriton.so", RTLD_NOW | RTLD_LOCAL);
    int (*launch)(void **) = (int (*)(void **))dlsym(h, "triton_launch");
    int (*plain)(void) = (int (*)(void))dlsym(h, "triton_launch_plain");
    void *found = NULL;
    for (int i = 0; i < 200; i++)
        if (launch == NULL || launch(&found) != 0)
            exit(4);
    if (plain == NULL || plain() != 0) /* then once through cuLaunchKernel: not in the table */
        exit(5);
}

/* An extended configuration's launch (Triton's) is never forwarded by its
 * wrapper's idle path, which looks up the configuration: its kernel takes
 * no place in the thread's table of idle kernels (it evicted one that its
 * wrapper could find), and the stats say why it was observed (they said
 * something watched calls). */
START_TEST(extended_launches_take_no_place_in_the_idle_table)
{
    t_run.err = t_path("err-extended.txt");
    ck_assert_int_eq(t_in_child(extended_launches_child), 0);
    char *stats = t_read_file(t_run.err, NULL);
    ck_assert(stats != NULL);
    ck_assert_msg(number_before(stats, " an extended configuration's") >= 199 &&
                      strstr(stats, "something watched calls") == NULL,
                  "%s", tail_of(stats));
    /* The kernel's launch through cuLaunchKernel after them was not found in the table. */
    ck_assert_msg(forwarded(stats, "cuLaunchKernel") == 0 && number_before(stats, " not in the thread's table") == 1,
                  "%s", tail_of(stats));
    free(stats);
}
END_TEST

START_TEST(another_models_layers_with_cublas_gemms_are_refused)
{
    char *stats = learning_run("learn-gapped", T_REPLAY_GAPPED, true);
    ck_assert_msg(strstr(stats, "learn: 0 groups learned, 1 refused (35 calls back on the idle path)") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "a group of 35 calls: a GEMM through cuBLAS's own entry point") != NULL, "%s",
                  tail_of(stats));
    /* Three layers kept, and the few calls before the group was tried; the rest idle. */
    ck_assert_msg(kept_calls(stats) <= 4 * 35, "%s", tail_of(stats));
    ck_assert_msg(idle_calls(stats) >= 96 * 35, "%s", tail_of(stats));
    /* Their wrappers forward them, the learner still looking: every layer's
     * launches after the first few are found in the thread's table of the
     * refused group's launches, and its GEMMs are the refused group's by
     * their description alone (a probe). */
    ck_assert_msg(forwarded(stats, "__cudaLaunchKernel") >= 90 * 30 && forwarded(stats, "cublasGemmEx") >= 95 * 5,
                  "%s", tail_of(stats));
    free(stats);
    /* The refused layer holds one of the block's weight casts (the same
     * kernel and grid): what is refused is each call after the two before
     * it, so the cast stays in sight where the block makes it, and the
     * block that comes after the layers is learned and fused. */
    stats = learning_run("learn-shared", T_REPLAY_SHARED, false);
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused (36 calls back on the idle path)") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= 3, "%s", tail_of(stats));
    free(stats);
    /* A variant of the block with cuBLAS's own GEMMs (another token count:
     * every grid but the weight casts' differs), refused: the casts of a
     * GEMM, one after the other whatever the tokens, stay in sight, and the
     * block after it is learned. */
    stats = learning_run("learn-variant", T_REPLAY_VARIANT, false);
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= 3, "%s", tail_of(stats));
    free(stats);
    /* Another model's layers at 70 prompt lengths: 70 groups refused, more
     * than the 64 remembered, and learning goes on (it ended for the process
     * when the table was full). */
    stats = learning_run("learn-lengths", T_REPLAY_LENGTHS, false);
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 70 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-71-42calls-n1797: ") >= 3, "%s", tail_of(stats));
    free(stats);
    /* The same with cuBLASLt GEMMs: each length's group reaches the ops'
     * planners, and what they saw is kept for the process (weight_cache
     * keeps its calls' marks), so after 64 of them learning ends: the
     * memory stays bounded (at 99bbab0 every length kept one more). */
    stats = learning_run("learn-lt-lengths", T_REPLAY_LT_LENGTHS, false);
    ck_assert_msg(strstr(stats, "learn: 0 groups learned, 65 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: learning ended for the process: 64 groups seen by the ops' planners") != NULL,
                  "%s", tail_of(stats));
    free(stats);
}
END_TEST

/*
 * Another model's iterations as a Llama's forward makes them (the islands
 * replay): its layers, refused, and between its last and its first the calls
 * outside them (embedding, head), which no group holds, so the learner kept
 * them at every iteration.  Here they are the block's own first eight
 * calls.  Closed three times the same between the refused layers' calls,
 * they are refused there: passed by in that order after those two calls,
 * and forwarded by their wrappers.  The block stacks that come after the
 * iterations (after other calls) are kept, learned and fused.
 */
START_TEST(calls_between_refused_layers_are_passed_by_there)
{
    T_NEEDS_KERNELS();
    char *stats = learning_run("learn-islands", T_REPLAY_ISLANDS, false);
    ck_assert_msg(strstr(stats, "learn: 1 runs of calls between refused groups came 3 times the same") != NULL, "%s",
                  tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL, "%s", tail_of(stats));
    /* The island is the eight calls and the first layer's first two (their
     * two calls before are the island's): ten calls at each of the 26
     * iterations after it was refused; kept before, 673 calls in all. */
    ck_assert_msg(strstr(stats, "not kept: 260 between refused groups") != NULL,
                  "%s", tail_of(stats));
    ck_assert_msg(kept_calls(stats) <= 450, "%s", tail_of(stats));
    /* Its nine launches go by their wrappers (3430 before). */
    ck_assert_msg(forwarded(stats, "__cudaLaunchKernel") >= 3430 + 20 * 9, "%s", tail_of(stats));
    /* Every block after the iterations fused, as without the island. */
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= 6, "%s", tail_of(stats));
    free(stats);
    /* The block right after the layers: its first eight calls come after
     * the island's two calls before and are passed by, then its ninth
     * differs.  The island is broken there, for good, and the stack's run
     * counts its instances from the second block: the block is learned
     * from the next three whole instances (the second stack here: 3 fused,
     * 6 without islands), not rotated. */
    stats = learning_run("learn-islands-adjacent", T_REPLAY_ISLANDS_ADJACENT, false);
    ck_assert_msg(strstr(stats, "(refused islands); 1 broken since (kept again)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= 3, "%s", tail_of(stats));
    free(stats);
    /* A stack of three blocks after the layers at every request: once the
     * island broke, every later stack's first block is kept whole, and the
     * block is learned (18 fused; 21 without islands).  Before the island
     * broke for good and the cut run counted from its next instance, the
     * first block lost its first calls at every stack, and a group rotated
     * by eight calls was learned and refused in its place: nothing fused. */
    stats = learning_run("learn-islands-alternating", T_REPLAY_ISLANDS_ALTERNATING, false);
    ck_assert_msg(strstr(stats, "(refused islands); 1 broken since (kept again)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= 18, "%s", tail_of(stats));
    free(stats);
    /* Where the island breaks, the block learned is the block (its first
     * op's range at its first call), not a rotation of it: two calls that
     * begin the island right after the layers, then block stacks (the cut
     * is not the stacks' run's: no count from another instance); an
     * island longer than a block (the cut, 50 calls, more than a period);
     * an island that is the block's first ten calls whole, the stack going
     * on past its end (a kept call after the end breaks it too); an
     * island of two other calls and the block's first eight, whose last
     * eight only are the stack's (the cut counts the block's calls at its
     * end).  Each learned a block rotated, refused or fused wrongly,
     * before. */
    static const struct {
        const char *replay;
        long complete;
    } more[] = {{T_REPLAY_ISLANDS_PREAMBLE, 8}, {T_REPLAY_ISLANDS_LONG, 6}, {T_REPLAY_ISLANDS_WHOLE, 18},
                 {T_REPLAY_ISLANDS_SUFFIX, 18}};
    for (unsigned i = 0; i < H3_ARRAY_LEN_T(more); i++) {
        stats = learning_run("learn-islands-more", more[i].replay, false);
        ck_assert_msg(strstr(stats, "(refused islands); 1 broken since (kept again)") != NULL, "%s: %s",
                      more[i].replay, tail_of(stats));
        ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL &&
                          strstr(stats, "plan learned/block-learned-2-42calls-n1797: op norm_cast takes calls 0,3") !=
                              NULL,
                      "%s: %s", more[i].replay, tail_of(stats));
        ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= more[i].complete, "%s: %s",
                      more[i].replay, tail_of(stats));
        free(stats);
    }
}
END_TEST

/* The calls the learner looked at and passed by as refused groups', by its stats line (0: none). */
static long refused_looked_at(const char *stats)
{
    long n = number_before(stats, " of refused groups\n");
    return n < 0 ? 0 : n;
}

/*
 * A model whose kernels are the block's (a variant no signature can hold:
 * cuBLAS's own GEMMs, another token count), refused, its 60 blocks passed by
 * call after call (replay_mutate.py variant-long): after H3SHIM_LEARN_QUIET
 * of them in a row the thread goes quiet, and its launches take the idle
 * path from their wrappers (the block's kernels among them), as with
 * learning off.  The block's first cuBLASLt GEMM, an identity the learner
 * never passed by, wakes it: the block is learned from its next instances
 * and fused, one block later at most.  Before, every call of the variant
 * was looked at by the learner (a refused group's, 2394 of them).
 */
START_TEST(a_thread_that_passes_every_call_goes_quiet_until_the_block_comes)
{
    T_NEEDS_KERNELS();
    char *awake = quiet_learning_run("learn-quiet-off", T_REPLAY_VARIANT_LONG, false, "0");
    char *stats = quiet_learning_run("learn-quiet", T_REPLAY_VARIANT_LONG, false, "500");
    ck_assert_msg(strstr(awake, "calls in a row, keeping none") == NULL, "%s", tail_of(awake));
    ck_assert_msg(strstr(stats, "learn: 1 times a thread passed by 500 calls in a row, keeping none: its calls took "
                                "the idle path (quiet); 1 woke since") != NULL,
                  "%s", tail_of(stats));
    for (int i = 0; i < 2; i++)
        ck_assert_msg(strstr(i == 0 ? awake : stats, "learn: 1 groups learned, 1 refused") != NULL, "%s",
                      tail_of(i == 0 ? awake : stats));
    long fused_awake = stat_after(awake, "block-learned-2-42calls-n1797: ");
    long fused = stat_after(stats, "block-learned-2-42calls-n1797: ");
    ck_assert_msg(fused_awake >= 6 && fused >= fused_awake - 1, "%ld fused quiet, %ld awake\n%s", fused, fused_awake,
                  tail_of(stats));
    /* Quiet, the variant's launches went by the idle path, unseen by the
     * learner: it looked at the calls passed by before (the group's from
     * its refusal on, 655 with a trace) and at few others. */
    long looked = refused_looked_at(stats), looked_awake = refused_looked_at(awake);
    ck_assert_msg(looked_awake >= 2000 && looked <= 700, "%ld refused calls looked at quiet, %ld awake\n%s", looked,
                  looked_awake, tail_of(stats));
    ck_assert_msg(forwarded(stats, NULL) >= forwarded(awake, NULL), "%s", tail_of(stats));
    free(stats), free(awake);
    /* Another model's layers (the gapped stream): quiet, the same calls executed. */
    stats = quiet_learning_run("learn-quiet-gapped", T_REPLAY_GAPPED, true, "500");
    ck_assert_msg(strstr(stats, "learn: 1 times a thread passed by 500 calls in a row") != NULL &&
                      strstr(stats, "0 woke since") != NULL && refused_looked_at(stats) <= 700,
                  "%s", tail_of(stats));
    free(stats);
    /* A module unloaded in the middle of them: its kernels are new ones
     * after it, so the quiet thread wakes at the first launch looked at
     * (and the idle epoch moved: it forgets what it passed by), and goes
     * quiet again once it passed by 300 calls four times over (woken, it
     * stays awake for three such runs). */
    setenv("H3SHIM_LEARN_QUIET", "300", 1);
    t_run.opts = (struct fw_replay_opts){50 * 35 + 3, FW_INSERT_MODULE_RELOAD, 0, 0, 0, 0};
    stats = learning_run("learn-quiet-reload", T_REPLAY_GAPPED, false);
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
    unsetenv("H3SHIM_LEARN_QUIET");
    ck_assert_msg(strstr(stats, "learn: 2 times a thread passed by 300 calls in a row") != NULL &&
                      strstr(stats, "1 woke since") != NULL,
                  "%s", tail_of(stats));
    free(stats);
}
END_TEST

/*
 * Another model's forward of more refused calls than H3SHIM_LEARN_QUIET,
 * with the block's first eight calls (a cuBLASLt GEMM among them) outside
 * its layers (the islands replay, 140 refused calls a forward, quiet after
 * 100): the thread goes quiet inside a forward and those calls wake it.
 * Woken, it stays awake for three runs of 100 calls passed by, so those
 * calls come three times after their refused calls, seen, and are refused
 * as a refused island, as awake; the learner keeps about what it keeps
 * awake (quiet again at every forward, each wake cut their run: never
 * refused, kept at every forward, 713 calls against 423, and a thread out
 * of patience sooner).  Once the island is refused, the quiet thread
 * follows it from its GEMM at every forward and is quiet again after it
 * (woken there at every forward before: 11 wakes, 4090 refused calls
 * looked at against 697), its idle kernels idle again from the next
 * launch.  The block is learned and fused as awake.
 */
START_TEST(a_thread_woken_inside_a_forward_refuses_the_calls_outside_the_layers_then_follows_them)
{
    T_NEEDS_KERNELS();
    char *awake = learning_run("learn-islands-awake", T_REPLAY_ISLANDS, false);
    char *stats = quiet_learning_run("learn-islands-woken", T_REPLAY_ISLANDS, false, "100");
    ck_assert_msg(number_before(stats, " times a thread passed by 100 calls in a row") >= 1 &&
                      stat_after(stats, "(quiet); ") <= 3,
                  "%s", tail_of(stats));
    ck_assert_msg(number_before(stats, " times a quiet thread followed a refused island") >= 20 &&
                      refused_looked_at(stats) <= 1000,
                  "%ld refused calls looked at\n%s", refused_looked_at(stats), tail_of(stats));
    /* Quiet again after the island, its idle kernels are forwarded by their
     * wrappers from the next launch on (its first launch after each island
     * was observed before, to be noted idle again: 29 for 27 follows). */
    ck_assert_msg(number_before(stats, " the thread had none noted") <= 5, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: 1 runs of calls between refused groups came 3 times the same") != NULL &&
                      kept_calls(stats) <= kept_calls(awake) + 100,
                  "%ld kept woken, %ld awake\n%s", kept_calls(stats), kept_calls(awake), tail_of(stats));
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL &&
                      strstr(stats, "plan learned/block-learned-2-42calls-n1797: op norm_cast takes calls 0,3") != NULL,
                  "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") >= stat_after(awake, "block-learned-2-42calls-n1797: "),
                  "%s", tail_of(stats));
    free(stats), free(awake);
    /* Where the block begins as the island does (right after the layers;
     * after an island longer than a block), the thread following the island
     * meets the block's call that differs, wakes there, and the block is
     * learned as awake, not rotated (islands-long, woken at the island's
     * GEMM before: a rotation learned, 5 fused). */
    static const struct {
        const char *replay;
        long complete;
    } adjacent[] = {{T_REPLAY_ISLANDS_ADJACENT, 3}, {T_REPLAY_ISLANDS_LONG, 6}};
    for (unsigned i = 0; i < H3_ARRAY_LEN_T(adjacent); i++) {
        stats = quiet_learning_run("learn-islands-followed", adjacent[i].replay, false, "100");
        ck_assert_msg(number_before(stats, " times a quiet thread followed a refused island") >= 20 &&
                          strstr(stats, "learn: 1 groups learned, 1 refused") != NULL &&
                          strstr(stats, "plan learned/block-learned-2-42calls-n1797: op norm_cast takes calls 0,3") !=
                              NULL &&
                          stat_after(stats, "block-learned-2-42calls-n1797: ") >= adjacent[i].complete,
                      "%s: %s", adjacent[i].replay, tail_of(stats));
        free(stats);
    }
    /* Two islands with one GEMM in both, in turn (and the call after it,
     * islands-shared2); one island that holds the GEMM and the call after
     * it twice, the thread quiet between them (at 146).  A quiet thread at
     * the GEMM follows every place that holds it, and only once the calls
     * after it leave one place is that place known: no island breaks, and
     * the learner keeps what it keeps awake (following the first place
     * alone, taken as known after one call, broke islands for good: 913,
     * 911 and 839 calls kept; waking at every wrong guess, 563 and 17
     * wakes in islands-shared).  A GEMM at more places than the thread
     * can follow (9, islands-crowded) wakes it: a place left out may be
     * the one (with the 9th left out, the 8th was taken as known: an island
     * broke, 1102 kept). */
    static const struct {
        const char *replay, *quiet;
        long kept;
    } guessed[] = {{T_REPLAY_ISLANDS_SHARED, "100", 520}, {T_REPLAY_ISLANDS_SHARED2, "100", 520},
                   {T_REPLAY_ISLANDS_DUP, "146", 470}, {T_REPLAY_ISLANDS_CROWDED, "155", 700}};
    for (unsigned i = 0; i < H3_ARRAY_LEN_T(guessed); i++) {
        stats = quiet_learning_run("learn-islands-guessed", guessed[i].replay, false, guessed[i].quiet);
        ck_assert_msg(strstr(stats, "(refused islands); 0 broken since") != NULL &&
                          kept_calls(stats) <= guessed[i].kept &&
                          stat_after(stats, "block-learned-2-42calls-n1797: ") >= 6,
                      "%s: %s", guessed[i].replay, tail_of(stats));
        free(stats);
    }
}
END_TEST

/*
 * Another model's layers launch the block's first kernel at another grid
 * (the thread quiet, that kernel noted idle), a new GEMM wakes the thread,
 * a third model's layers make it quiet again, then the block comes: the
 * kernels noted idle before the wake were forgotten with it, so the
 * block's first launch is looked at and wakes the thread, and every block
 * after the learning instances fuses (with the idle kernels brought back
 * after a wake, that launch went unseen and the block was learned from its
 * second call on: 3 fused).  The same where the wake is a followed
 * island's call that differs, its place known (rewake-follow: 3 fused
 * where that wake kept the idle kernels).
 */
START_TEST(a_woken_thread_quiet_again_sees_the_kernels_it_had_noted_idle)
{
    T_NEEDS_KERNELS();
    /* Woken by a new GEMM, and by a followed island that broke (rewake-follow). */
    static const char *const replays[] = {T_REPLAY_REWAKE, T_REPLAY_REWAKE_FOLLOW};
    for (unsigned i = 0; i < H3_ARRAY_LEN_T(replays); i++) {
        char *stats = quiet_learning_run("learn-rewake", replays[i], false, "100");
        ck_assert_msg(number_before(stats, " times a thread passed by 100 calls in a row") >= 2 &&
                          stat_after(stats, "block-learned-3-42calls-n1797: ") >= 6,
                      "%s: %s", replays[i], tail_of(stats));
        free(stats);
    }
}
END_TEST

/* A quiet thread (the variant's blocks, its kernels the block's noted idle)
 * runs the block after another thread learned it: the signature's first
 * calls changed, so the quiet thread's idle launches are asked again, and
 * every one of its blocks is matched and fused. */
START_TEST(a_quiet_thread_runs_a_block_learned_on_another_thread)
{
    T_NEEDS_KERNELS();
    char *stats = learned_elsewhere_run("quiet-learned-elsewhere", T_REPLAY_VARIANT_MANY, "H3SHIM_LEARN_QUIET=500");
    ck_assert_msg(strstr(stats, "learn: 1 groups learned, 1 refused") != NULL &&
                      strstr(stats, "2 threads looked") != NULL &&
                      strstr(stats, "learn: 1 times a thread passed by 500 calls in a row") != NULL,
                  "%s", tail_of(stats));
    ck_assert_msg(stat_after(stats, "block-learned-2-42calls-n1797: ") == (T_INSTANCES - 3) + T_INSTANCES, "%s",
                  tail_of(stats));
    free(stats);
}
END_TEST

/* A module unloaded in the middle of another model's refused layers (the
 * gapped replay, learning on): a handle may name another kernel after it,
 * so the thread's table of the refused group's launches goes, and the
 * next layer's launches are looked at again (found refused, noted anew)
 * before their wrappers forward them. */
START_TEST(an_unloaded_module_drops_the_refused_launches_table)
{
    T_NEEDS_KERNELS();
    char *plain = learning_run("learn-gapped-plain", T_REPLAY_GAPPED, false);
    t_run.opts = (struct fw_replay_opts){50 * 35 + 3, FW_INSERT_MODULE_RELOAD, 0, 0, 0, 0};
    char *reloaded = learning_run("learn-gapped-reload", T_REPLAY_GAPPED, false);
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
    long a = forwarded(plain, "__cudaLaunchKernel"), b = forwarded(reloaded, "__cudaLaunchKernel");
    ck_assert_msg(a >= 90 * 30 && a - b >= 20, "%ld forwarded without the unload, %ld with it\n%s", a, b,
                  tail_of(reloaded));
    free(plain), free(reloaded);
}
END_TEST

/* A group that repeats with its first call on another stream: refused as
 * on several streams, without reading past the calls it looked at (the
 * group's name came from its first GEMM, looked for among calls not yet
 * gathered: a NULL read). */
START_TEST(a_group_on_two_streams_is_refused)
{
    char *stats = learning_run("learn-streams", T_REPLAY_STREAMS, true);
    ck_assert_msg(strstr(stats, "learn: 0 groups learned, 1 refused") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "a group of 20 calls: calls on several streams") != NULL, "%s", tail_of(stats));
    free(stats);
}
END_TEST

/* The lines of `log` between the n-th and the (n+1)-th line starting with `prefix` (1-based). */
static char *lines_between(const char *log, const char *prefix, int n)
{
    const char *at = log, *from = NULL, *to = NULL;
    for (int seen = 0; at != NULL && *at != '\0'; at = strchr(at, '\n') != NULL ? strchr(at, '\n') + 1 : NULL) {
        if (strncmp(at, prefix, strlen(prefix)) != 0)
            continue;
        if (++seen == n)
            from = strchr(at, '\n') + 1;
        else if (seen == n + 1) {
            to = at;
            break;
        }
    }
    ck_assert_msg(from != NULL && to != NULL, "no lines between %s %d and %d", prefix, n, n + 1);
    return strndup(from, (size_t)(to - from));
}

static const char *const t_wc_graphs[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_WEIGHT_CACHE_GRAPHS=1", NULL};

/* Loop 0: the fills' events are complete when the graph is launched; 1:
 * never (FAKE_EVENTS_PENDING). */
START_TEST(weight_cache_in_a_graph_refills_what_was_dropped)
{
    learn_block();
    const bool pending = _i == 1;
    const char *const env[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_WEIGHT_CACHE_GRAPHS=1",
                               pending ? "FAKE_EVENTS_PENDING=1" : NULL, NULL};
    /* The replay eagerly (24 copies made), then captured on stream 0x3000 and
     * launched three times on 0x4000, the fifth instance's to_qkv weight
     * written before the third launch; then a graph never captured. */
    t_run.graph = (struct fw_graph_opts){0x3000, 0x4000, 3, 3, fifth_weight(), 1, 0, 0};
    t_run.trace = t_path("trace-wc-graph.jsonl");
    char *stats;
    char *log = replay_with("wc-graph", env, &stats);
    memset(&t_run.graph, 0, sizeof(t_run.graph));
    /* The trace says what happened at each launch. */
    char *trace = t_read_file(t_run.trace, NULL);
    t_run.trace = NULL;
    ck_assert(trace != NULL);
    ck_assert_uint_eq(t_count(trace, "\"op_how\":\"weight_cache_graph_known\""), 2);
    ck_assert_uint_eq(t_count(trace, "\"op_how\":\"weight_cache_graph_refilled\""), 1);
    ck_assert_uint_eq(t_count(trace, "\"op_how\":\"weight_cache_graph_unknown\""), 1);
    free(trace);
    /* Every GEMM of the capture read a copy: 36 groups eagerly, 36 captured. */
    ck_assert_msg(strstr(stats, "op weight_cache 72 groups run (216 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache fallback") == NULL, "%s", tail_of(stats));
    /* 48 + 72 hits; the write drops one copy, the unknown graph the 24. */
    ck_assert_msg(strstr(stats, "weight_cache: 24 copies") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "120 hits, 24 fills, 25 drops") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "weight_cache graphs: 3 launches of graphs captured under the shim, 1 copies "
                                "refilled at them") != NULL, "%s", tail_of(stats));
    /* Before each launch the graph's stream waits for the 24 copies, last
     * filled on the replay's stream, unless their fills are seen complete:
     * then no launch waits, and each fill's event is asked once.  Nothing is
     * refilled while none is dropped. */
    char *before2 = lines_between(log, "cudaGraphLaunch", 1);
    ck_assert_uint_eq(count_lines_starting(before2, "exec "), 0);
    ck_assert_uint_eq(count_lines_starting(before2, "cuStreamWaitEvent 4000 "), pending ? 24 : 0);
    ck_assert_uint_eq(count_lines_starting(before2, "cuEventQuery "), pending ? 24 : 0);
    /* (And before the graph never captured, which may be one whose record
     * was lost: it waits for the 23 copies captures read, last filled
     * elsewhere; the refilled one was filled on its stream.) */
    ck_assert_uint_eq(count_lines_starting(log, "cuEventQuery "), pending ? 24 * 3 - 1 + 23 : 24);
    /* Before the third: the memset, then the one cast into the dropped copy
     * on the launch stream itself, and waits for the 23 others. */
    char *before3 = lines_between(log, "cudaGraphLaunch", 2);
    ck_assert_uint_eq(count_lines_starting(before3, "cudaMemsetAsync "), 1);
    ck_assert_uint_eq(count_lines_starting(before3, "exec "), 1);
    ck_assert_msg(strstr(before3, " 3000 1 1 80 1 1 0 4000 ") != NULL, "%s", before3); /* call 2's cast */
    ck_assert_uint_eq(count_lines_starting(before3, "cuStreamWaitEvent 4000 "), pending ? 23 : 0);
    free(before2);
    free(before3);
    free(stats);
    free(log);
}
END_TEST

START_TEST(weight_cache_in_a_graph_that_writes_a_weight)
{
    learn_block();
    /* The capture begins with a kernel that may write the fifth instance's
     * to_qkv weight: the three GEMMs of that weight keep their casts in the
     * graph (their copy is dropped when captured), the other 33 read copies.
     * The replay, uncaptured, before the launches makes that copy again;
     * the launches drop it (the graph may write its source), so the replay
     * after them makes it once more: 24 + 1 + 1 fills. */
    t_run.graph = (struct fw_graph_opts){0x3000, 0x4000, 2, 0, 0, 0, fifth_weight() + 4096, 1};
    char *stats;
    char *log = replay_with("wc-graph-writes", t_wc_graphs, &stats);
    memset(&t_run.graph, 0, sizeof(t_run.graph));
    ck_assert_msg(strstr(stats, "op weight_cache 141 groups run (423 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, " 26 fills, ") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache fallback capturing            3") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "weight_cache graphs: 2 launches of graphs captured under the shim, 0 copies "
                                "refilled at them") != NULL, "%s", tail_of(stats));
    char *before2 = lines_between(log, "cudaGraphLaunch", 1);
    ck_assert_uint_eq(count_lines_starting(before2, "exec "), 0);
    free(before2);
    free(stats);
    free(log);
}
END_TEST

START_TEST(weight_cache_graph_mode_follows_its_validation)
{
    learn_block();
    /* As in the refill test, but the switch as users find it: unset on SM 90
     * (validated: the captured GEMMs read copies), unset where weight_cache
     * is named on SM 100 (not validated there: they keep their casts), 1
     * there (asked for), and 0 on SM 90. */
    static const struct {
        const char *env[4];
        bool read_in_capture;
    } cases[] = {
        {{"H3SHIM_OP_WEIGHT_CACHE=1", NULL}, true},
        {{"H3SHIM_OPS=weight_cache", "FAKE_SM=100", NULL}, false},
        {{"H3SHIM_OPS=weight_cache", "FAKE_SM=100", "H3SHIM_WEIGHT_CACHE_GRAPHS=1", NULL}, true},
        {{"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_WEIGHT_CACHE_GRAPHS=0", NULL}, false},
        {{"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_WEIGHT_CACHE_GRAPHS=maybe", NULL}, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        t_run.graph = (struct fw_graph_opts){0x3000, 0x4000, 3, 3, fifth_weight(), 1, 0, 0};
        char *stats;
        char *log = replay_with("wc-graph-default", cases[i].env, &stats);
        memset(&t_run.graph, 0, sizeof(t_run.graph));
        const char *want = cases[i].read_in_capture ? "op weight_cache 72 groups run (216 calls)"
                                                    : "op weight_cache fallback capturing            36";
        ck_assert_msg(strstr(stats, want) != NULL, "case %zu: expected '%s' in\n%s", i, want, tail_of(stats));
        if (i == 4)
            ck_assert_msg(strstr(stats, "H3SHIM_WEIGHT_CACHE_GRAPHS=maybe: expected 0 or 1") != NULL, "%s", stats);
        free(stats);
        free(log);
    }
}
END_TEST

static void expect_wc_fallback(const char *const *env, const char *reason)
{
    char *base = replay_base_for(env);
    char *stats;
    char *log = replay_with("wc-fallback", env, &stats);
    char want[128];
    snprintf(want, sizeof(want), "op weight_cache fallback %-20s %d", reason, 4 * T_INSTANCES);
    ck_assert_msg(strstr(stats, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats));
    ck_assert_msg(strcmp(base, log) == 0, "%s: the fakes executed another stream of calls", reason);
    /* Memory limits cost the user the op's gain: said once, stats or not. */
    const char *says = strcmp(reason, "cache_full") == 0  ? "the copies reached H3SHIM_WEIGHT_CACHE_MAX_MB"
                       : strcmp(reason, "low_memory") == 0 ? "of GPU memory free; GEMMs whose weights have no copy"
                                                           : NULL;
    if (says != NULL)
        t_said_once(stats, says);
    free(stats);
    free(log);
    free(base);
}

/* The shim asks the driver whether a stream is being captured only while a
 * capture it saw begin is open (a few microseconds a GEMM on the legacy
 * stream otherwise).  Loop 0: none is; 1: one is (FAKE_CAPTURING); 2: one
 * is, begun through CUDA 10.0's cuStreamBeginCapture. */
START_TEST(capture_status_is_asked_only_while_a_capture_is_open)
{
    const bool open = _i >= 1;
    const char *const env[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_WEIGHT_CACHE_GRAPHS=0", "T_LOG_CAPTURE_QUERIES=1",
                               _i == 0 ? NULL : _i == 1 ? "FAKE_CAPTURING=1" : "FAKE_CAPTURING=v1", NULL};
    char *stats;
    char *log = replay_with("capture-queries", env, &stats);
    ck_assert_uint_eq(count_lines_starting(log, "cuStreamIsCapturing "), open ? 4 * T_INSTANCES : 0);
    const char *want = open ? "op weight_cache fallback capturing            36" : "op weight_cache 36 groups run";
    ck_assert_msg(strstr(stats, want) != NULL, "expected '%s' in\n%s", want, tail_of(stats));
    free(stats);
    free(log);
}
END_TEST

/* Another thread captures a CUDA graph in global mode (torch.cuda.graph's
 * default) while this one decodes: nothing the shim does may invalidate it
 * (allocate, ask for free memory, make or ask an event, load a module,
 * synchronise).  Loop 0: no copy made yet, so weight_cache and the fused
 * ops, whose kernels are not loaded, fall back; loop 1: the copies were made
 * before the capture began (a replay before it) and are used.  Either way
 * the capture ends well (the child exits 12 if not) and every kernel of the
 * program runs. */
START_TEST(another_threads_capture_is_never_invalidated)
{
    static const char *const env[] = {"H3SHIM_OPS=all", NULL};
    if (_i == 1)
        t_run.replay_before = T_REPLAY_FREES_CASTS;
    t_run.replay = T_REPLAY_FREES_CASTS;
    t_run.capture_elsewhere = true;
    t_run.threads = 1;
    char *base = replay_with("elsewhere-base", t_disabled, NULL);
    char *stats;
    char *log = replay_with("elsewhere", env, &stats);
    t_run.capture_elsewhere = false;
    t_run.threads = 0;
    t_run.replay = NULL;
    t_run.replay_before = NULL;
    ck_assert_msg(strstr(log, "capture_invalidated") == NULL, "the shim invalidated another thread's capture");
    ck_assert_msg(strstr(log, "cudaStreamEndCapture 3000 ") != NULL, "%s", tail_of(log));
    if (_i == 0) {
        ck_assert_msg(strstr(stats, "capture_open_elsewhere") != NULL, "%s", tail_of(stats));
        char *want = execs_sorted(base), *got = execs_sorted(log);
        ck_assert_str_eq(got, want);
        free(want), free(got);
    } else {
        ck_assert_msg(strstr(stats, "weight_cache: 24 copies") != NULL, "%s", tail_of(stats));
    }
    free(stats), free(log), free(base);
}
END_TEST

/* A capture whose beginning the shim did not see (FAKE_CAPTURING=unseen:
 * every stream reports one, none was begun through an interposed entry
 * point) cannot be told from none: weight_cache runs.  The end of such a
 * capture gives it away: the shim says so once and from then on asks the
 * driver, so the replay after it falls back. */
START_TEST(a_capture_ended_unseen_makes_the_shim_ask_again)
{
    const char *const env[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_WEIGHT_CACHE_GRAPHS=0", "FAKE_CAPTURING=unseen",
                               NULL};
    t_run.end_capture_then_replay = true;
    char *stats;
    char *log = replay_with("capture-unseen", env, &stats);
    t_run.end_capture_then_replay = false;
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache fallback capturing            36") != NULL, "%s", tail_of(stats));
    t_said_once(stats, "a CUDA graph capture ended whose beginning the shim did not see");
    free(stats);
    free(log);
}
END_TEST

START_TEST(weight_cache_falls_back_exactly)
{
    /* (Graph mode off: with it, the capture's calls are recorded, tested apart.) */
    static const char *const capturing[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "FAKE_CAPTURING=1",
                                            "H3SHIM_WEIGHT_CACHE_GRAPHS=0", NULL};
    expect_wc_fallback(capturing, "capturing");
    static const char *const full[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "H3SHIM_WEIGHT_CACHE_MAX_MB=0", NULL};
    expect_wc_fallback(full, "cache_full");
    /* About 35 GiB of 141 free: a copy would leave less than the 25% kept free, though not less than 20%. */
    static const char *const low[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "FAKE_MEM_FREE_MB=36000", NULL};
    expect_wc_fallback(low, "low_memory");
    static const char *const low_ok[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "FAKE_MEM_FREE_MB=36000",
                                         "H3SHIM_WEIGHT_CACHE_MIN_FREE_PCT=20", NULL};
    char *stats;
    char *log = replay_with("wc-low-ok", low_ok, &stats);
    ck_assert_msg(strstr(stats, "fallback") == NULL, "%s", tail_of(stats));
    free(stats);
    free(log);
    static const char *const sm[] = {"H3SHIM_OP_WEIGHT_CACHE=1", "FAKE_SM=80", NULL};
    expect_wc_fallback(sm, "sm_not_allowed");
}
END_TEST

START_TEST(nothing_is_held_back_without_driver_interposition)
{
    /* Launches and copies made through the driver would not be seen, and one
     * could run before the launches held back: every op is off, and the
     * shim says so once. */
    char *base = replay_with("base", t_disabled, NULL);
    static const char *const env[] = {"H3SHIM_OPS=", "H3SHIM_INTERPOSE_DRIVER=0", NULL}; /* the defaults */
    char *stats;
    char *log = replay_with("nodrv", env, &stats);
    ck_assert_msg(strcmp(base, log) == 0, "the fakes executed another stream of calls");
    ck_assert_int_le(stat_after(stats, "engine: "), 0); /* no engine line, or nothing deferred */
    t_said_once(stats, "H3SHIM_INTERPOSE_DRIVER=0: calls made through the driver would not be seen");
    free(stats);
    free(log);
    free(base);
}
END_TEST

START_TEST(swiglu_and_weight_cache_share_a_group)
{
    /* Calls 35-38 are one group: swiglu takes 35-36, weight_cache 37-38 and
     * the GEMM after them. */
    T_NEEDS_KERNELS();
    static const char *const env[] = {"H3SHIM_OPS=swiglu,weight_cache", NULL};
    char *stats;
    char *log = replay_with("both", env, &stats);
    ck_assert_msg(strstr(stats, "op swiglu       9 groups run (18 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "op weight_cache 36 groups run (108 calls)") != NULL, "%s", tail_of(stats));
    ck_assert_msg(strstr(stats, "48 hits, 24 fills, 0 drops") != NULL, "%s", tail_of(stats));
    ck_assert_uint_eq(count_lines_starting(log, "swiglu_check 1 "), T_INSTANCES);
    free(stats);
    free(log);
}
END_TEST

static void engine_setup(void)
{
    t_setup();
    t_run.opts = (struct fw_replay_opts){-1, FW_INSERT_NONE, 0, 0, 0, 0};
    t_run.threads = 0;
    t_run.trace = NULL;
    t_run.fork_after = false;
}

Suite *t_suite_engine(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, engine_setup, t_teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, replay_op_issues_every_group_once);
    tcase_add_test(tc, foreign_calls_at_every_position_of_a_block);
    tcase_add_test(tc, two_threads_on_two_streams);
    tcase_add_test(tc, groups_over_the_limits_are_issued_untouched);
    tcase_add_test(tc, engine_off_defers_nothing);
    tcase_add_test(tc, held_back_launches_are_issued_when_their_thread_exits);
    tcase_add_test(tc, a_fork_child_does_not_issue_the_parents_held_back_launches);
    suite_add_tcase(s, tc);
    TCase *ops = tcase_create("ops");
    tcase_add_checked_fixture(ops, engine_setup, t_teardown);
    tcase_set_timeout(ops, 300);
    tcase_add_test(ops, swiglu_replaces_silu_and_mul);
    tcase_add_test(ops, swiglu_falls_back_on_an_sm_outside_the_allowlist);
    tcase_add_test(ops, swiglu_falls_back_without_its_kernels);
    tcase_add_test(ops, swiglu_never_loads_its_kernels_during_capture);
    tcase_add_test(ops, every_fallback_reason_is_reachable);
    tcase_add_test(ops, weight_cache_casts_each_weight_once);
    tcase_add_test(ops, swiglu_sizes_its_grid_from_the_device);
    tcase_add_test(ops, a_freed_buffers_reference_is_met_by_a_buffer_elsewhere);
    tcase_add_test(ops, an_op_checks_the_dataflow_a_freed_reference_let_go);
    tcase_add_loop_test(ops, weight_cache_writes_the_casts_a_program_keeps, 0, 2);
    tcase_add_test(ops, observation_paused_passes_every_call_through);
    tcase_add_test(ops, paused_gemms_have_no_descriptors_remembered);
    tcase_add_test(ops, another_models_calls_are_forwarded_idle);
    tcase_add_test(ops, blocks_after_another_models_idle_calls_fuse);
    tcase_add_test(ops, another_models_graph_is_captured_and_launched_untouched);
    tcase_add_test(ops, lt_shadow_describes_block_gemms_as_reads_do);
    tcase_add_test(ops, lt_shadow_check_finds_a_change_past_the_wrappers);
    tcase_add_test(ops, lt_shadow_off_after_a_dlsym_of_descriptor_functions);
    tcase_add_test(ops, lt_shadow_reads_the_bias_pointer_always);
    tcase_add_test(ops, weight_cache_drops_a_copy_whose_source_is_written);
    tcase_add_test(ops, weight_cache_falls_back_exactly);
    tcase_add_test(ops, weight_cache_drops_a_copy_a_launch_may_write);
    tcase_add_test(ops, weight_cache_drops_a_copy_a_launch_may_write_at_its_end);
    tcase_add_test(ops, weight_cache_drops_a_copy_a_2d_copy_writes);
    tcase_add_test(ops, weight_cache_drops_everything_at_an_nccl_launch);
    tcase_add_test(ops, weight_cache_keeps_a_copy_a_cat_reads);
    tcase_add_test(ops, weight_cache_drops_a_copy_a_cat_writes);
    tcase_add_loop_test(ops, weight_cache_in_a_graph_refills_what_was_dropped, 0, 2);
    tcase_add_loop_test(ops, capture_status_is_asked_only_while_a_capture_is_open, 0, 3);
    tcase_add_test(ops, a_capture_ended_unseen_makes_the_shim_ask_again);
    tcase_add_loop_test(ops, another_threads_capture_is_never_invalidated, 0, 2);
    tcase_add_test(ops, weight_cache_in_a_graph_that_writes_a_weight);
    tcase_add_test(ops, weight_cache_graph_mode_follows_its_validation);
    tcase_add_test(ops, weight_cache_lets_go_of_its_copies_when_the_device_is_reset);
    tcase_add_test(ops, weight_cache_keeps_its_copies_across_a_balanced_retain_and_release);
    tcase_add_test(ops, weight_cache_forgets_its_copies_when_the_last_release_ends_the_context);
    tcase_add_loop_test(ops, weight_cache_gives_back_the_copy_of_a_freed_weight, 0, 2);
    tcase_add_test(ops, a_kernel_handle_reused_after_an_unload_is_described_again);
    tcase_add_loop_test(ops, weight_cache_gives_its_copies_back_when_the_device_runs_low, 0, 2);
    tcase_add_test(ops, weight_cache_keeps_the_copies_a_running_gemm_reads);
    tcase_add_test(ops, weight_cache_drops_a_copy_a_packed_launch_may_write);
    tcase_add_test(ops, weight_cache_keeps_away_from_memory_other_processes_can_write);
    tcase_add_test(ops, weight_cache_drops_a_copy_a_write_through_its_flat_buffer_may_reach);
    tcase_add_test(ops, nothing_is_held_back_without_driver_interposition);
    tcase_add_test(ops, swiglu_and_weight_cache_share_a_group);
    tcase_add_test(ops, switches_choose_the_ops);
    tcase_add_test(ops, norm_cast_replaces_each_norm_and_its_cast);
    tcase_add_test(ops, norm_cast_falls_back_exactly);
    tcase_add_loop_test(ops, residual_norm_replaces_the_mid_block_residual_and_norm, 0, 2);
    tcase_add_loop_test(ops, residual_norm_keeps_the_exact_part_when_a_copy_lands_in_an_input, 0, 2);
    tcase_add_loop_test(ops, residual_norm_stages_the_last_sum_that_lands_in_b16, 0, 2);
    tcase_add_test(ops, swiglu_takes_the_one_element_kernel_where_a_pointer_is_unaligned);
    tcase_add_test(ops, swiglu_falls_back_where_its_output_lands_in_its_input);
    tcase_add_test(ops, an_op_falls_back_while_another_in_its_group_runs);
    tcase_add_test(ops, qk_norm_rope_replaces_the_18_launches_of_q_and_k);
    tcase_add_test(ops, all_ops_share_the_block);
    tcase_add_test(ops, the_serving_modes_blocks_fuse_and_keep_every_cast);
    tcase_add_test(ops, the_block_is_learned_from_its_first_instances);
    tcase_add_test(ops, calls_between_refused_layers_are_passed_by_there);
    tcase_add_test(ops, a_thread_that_passes_every_call_goes_quiet_until_the_block_comes);
    tcase_add_test(ops, a_quiet_thread_runs_a_block_learned_on_another_thread);
    tcase_add_test(ops, a_thread_woken_inside_a_forward_refuses_the_calls_outside_the_layers_then_follows_them);
    tcase_add_test(ops, a_woken_thread_quiet_again_sees_the_kernels_it_had_noted_idle);
    tcase_add_test(ops, learning_survives_foreign_calls);
    tcase_add_test(ops, two_threads_learn_the_block_once);
    tcase_add_test(ops, a_mutated_block_is_learned_not_fused);
    tcase_add_test(ops, padding_beside_a_flag_keeps_the_flag);
    tcase_add_test(ops, a_launch_no_op_spans_is_matched_without_its_bytes);
    tcase_add_test(ops, an_output_a_held_launch_reads_is_written);
    tcase_add_test(ops, an_output_a_claimed_launch_reads_is_written);
    tcase_add_test(ops, an_output_is_not_written_ahead_of_a_launch_whose_memory_it_took);
    tcase_add_test(ops, an_idle_thread_s_calls_are_forwarded_by_their_wrappers);
    tcase_add_test(ops, an_idle_thread_s_launches_are_looked_at_while_weight_copies_exist);
    tcase_add_test(ops, verify_mode_compares_then_fuses);
    tcase_add_test(ops, verify_mode_turns_a_wrong_op_off);
    tcase_add_test(ops, verify_mode_falls_back_where_it_cannot_compare);
    tcase_add_test(ops, verify_mode_writes_only_scratch);
    tcase_add_test(ops, verify_mode_waits_for_late_results);
    tcase_add_test(ops, verify_mode_survives_a_device_reset);
    tcase_add_test(ops, two_threads_on_two_devices);
    tcase_add_test(ops, a_block_learned_on_another_thread_reaches_an_idle_thread);
    tcase_add_test(ops, learning_is_bounded_and_switched_off);
    tcase_add_test(ops, another_models_layers_with_cublas_gemms_are_refused);
    tcase_add_test(ops, a_forward_of_many_kernels_is_forwarded_by_the_wrappers);
    tcase_add_test(ops, extended_launches_take_no_place_in_the_idle_table);
    tcase_add_test(ops, a_group_on_two_streams_is_refused);
    tcase_add_test(ops, an_unloaded_module_drops_the_refused_launches_table);
    tcase_add_test(ops, planners_survive_mutated_signatures);
    tcase_add_test(ops, ops_leave_out_what_the_allocator_freed);
    tcase_add_test(ops, frees_before_a_launch_or_switched_off_leave_nothing_out);
    tcase_add_test(ops, a_complete_group_waits_for_no_other_thread);
    suite_add_tcase(s, ops);
    return s;
}
