/*
 * The trace: one record per intercepted call (H3SHIM_TRACE).
 *
 * Owns: the trace file descriptor and the record format (JSON lines, or
 * Chrome trace-event JSON that Perfetto opens as a timeline).
 * Invariants: each record is built in a stack buffer and written with one
 * write(2) on an O_APPEND descriptor under a mutex, so records are never torn
 * or interleaved, from threads or from processes sharing the file; the file
 * is complete after every record.  A trace that cannot be opened leaves
 * tracing off with one warning.  In a fork child a path with %p is reopened
 * for the child's own pid.
 * Never: allocates, or calls into CUDA.
 */
#include "h3shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int h3_trace_fd = -1;
static pthread_mutex_t h3_trace_lock = PTHREAD_MUTEX_INITIALIZER;
/* The process that wrote the opening bracket of a Chrome trace closes it. */
static int h3_trace_bracket_pid;
static _Atomic unsigned long long h3_trace_seq;
static H3_TLS int h3_tid_cache;

uint64_t h3_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int h3_tid(void)
{
    if (h3_tid_cache == 0)
        h3_tid_cache = (int)syscall(SYS_gettid);
    return h3_tid_cache;
}

static void h3_trace_write(const char *p, size_t n)
{
    pthread_mutex_lock(&h3_trace_lock);
    while (n > 0) {
        ssize_t w = write(h3_trace_fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        p += w;
        n -= (size_t)w;
    }
    pthread_mutex_unlock(&h3_trace_lock);
}

/* Opens the path in h3_config.trace_path; returns the descriptor or -1. */
static int h3_trace_open_fd(void)
{
    const char *pattern = h3_config.trace_path;
    if (strcmp(pattern, "-") == 0)
        return dup(2);
    char path[4096];
    h3_log_expand_path(pattern, path, sizeof(path));
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        H3_WARN(H3_SUB_TRACE, "cannot open trace '%s' (%s); tracing is off", path, strerror(errno));
        return -1;
    }
    H3_INFO(H3_SUB_TRACE, "tracing to %s", path);
    return fd;
}

static void h3_trace_start_file(void)
{
    struct stat st;
    if (h3_config.trace_format == H3_FORMAT_CHROME && fstat(h3_trace_fd, &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_size == 0) {
        h3_trace_write("[\n", 2);
        h3_trace_bracket_pid = (int)getpid();
    }
}

bool h3_trace_open(void)
{
    if (h3_config.trace_path == NULL || h3_config.trace_path[0] == '\0')
        return false;
    h3_trace_fd = h3_trace_open_fd();
    if (h3_trace_fd < 0)
        return false;
    h3_trace_start_file();
    if (h3_config.trace_backtrace > 0) {
        void *probe[1];
        h3_backtrace(probe, 1); /* Reports once now if libunwind is missing. */
    }
    h3_hot.trace_on = true;
    return true;
}

void h3_trace_after_fork_child(void)
{
    pthread_mutex_init(&h3_trace_lock, NULL);
    h3_tid_cache = 0;
    if (!h3_hot.trace_on || strstr(h3_config.trace_path, "%p") == NULL)
        return;
    close(h3_trace_fd);
    h3_trace_fd = h3_trace_open_fd();
    if (h3_trace_fd < 0) {
        h3_hot.trace_on = false;
        return;
    }
    h3_trace_bracket_pid = 0;
    h3_trace_start_file();
}

void h3_trace_close(void)
{
    if (!h3_hot.trace_on)
        return;
    if (h3_config.trace_format == H3_FORMAT_CHROME && h3_trace_bracket_pid == (int)getpid()) {
        char end[256];
        int n = snprintf(end, sizeof(end),
                         "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                         "\"args\":{\"name\":\"h3shim %d\"}}\n]\n",
                         (int)getpid(), h3_tid(), (int)getpid());
        h3_trace_write(end, (size_t)n);
    }
}

static void h3_put_ptr(struct h3_buf *b, const char *key, const void *p)
{
    h3_buf_printf(b, ",\"%s\":\"%#llx\"", key, (unsigned long long)(uintptr_t)p);
}

static void h3_put_layout(struct h3_buf *b, const char *key, const struct h3_lt_layout *l)
{
    h3_buf_printf(b,
                  ",\"%s\":{\"type\":%d,\"order\":%d,\"rows\":%llu,\"cols\":%llu,\"ld\":%lld,"
                  "\"batch\":%lld,\"stride\":%lld}",
                  key, l->type, l->order, (unsigned long long)l->rows, (unsigned long long)l->cols,
                  (long long)l->ld, (long long)l->batch, (long long)l->stride);
}

static void h3_put_hex(struct h3_buf *b, const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    h3_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char byte = ((const unsigned char *)p)[i];
        h3_buf_putc(b, digits[byte >> 4]);
        h3_buf_putc(b, digits[byte & 15]);
    }
    h3_buf_putc(b, '"');
}

/* A launch's parameter bytes, one hex string per parameter (or the packed
 * buffer of the driver's `extra` form), for recording signatures offline. */
static void h3_trace_params(struct h3_buf *b, const struct h3_call *c)
{
    if (c->args != NULL && c->param_sizes != NULL) {
        h3_buf_puts(b, ",\"params\":[");
        for (uint32_t i = 0; i < c->nparams; i++) {
            if (i > 0)
                h3_buf_putc(b, ',');
            h3_put_hex(b, c->args[i], c->param_sizes[i]);
        }
        h3_buf_putc(b, ']');
    } else if (c->extra != NULL) {
        const void *buf = NULL;
        size_t size = 0;
        for (void **e = c->extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
            if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = e[1];
            else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1] != NULL)
                size = *(const size_t *)e[1];
        }
        if (buf != NULL && size <= 4096) {
            h3_buf_puts(b, ",\"param_buffer\":");
            h3_put_hex(b, buf, size);
        }
    }
}

/* The fields of a record, shared by both formats; `full` adds backtrace. */
static void h3_trace_fields(struct h3_buf *b, const struct h3_call *c, bool full, int name_max)
{
    const struct h3_hook_info *hk = &h3_hooks[c->fn];
    h3_buf_printf(b, "\"seq\":%llu,\"t_ns\":%llu,\"dur_ns\":%llu,\"pid\":%d,\"tid\":%d,\"dev\":%d",
                  (unsigned long long)c->seq, (unsigned long long)c->t0_ns,
                  (unsigned long long)(c->t1_ns - c->t0_ns), (int)getpid(), h3_tid(), c->device);
    h3_buf_puts(b, ",\"api\":");
    h3_buf_json_str(b, hk->name);
    h3_put_ptr(b, "stream", c->stream);
    if (hk->kind == H3_KIND_LAUNCH) {
        char name[4096];
        snprintf(name, sizeof(name), "%.*s", name_max, c->kernel != NULL ? c->kernel->name : "?");
        h3_buf_puts(b, ",\"kernel\":");
        h3_buf_json_str(b, name);
        if (c->kernel != NULL && c->kernel->pretty != c->kernel->name) {
            snprintf(name, sizeof(name), "%.*s", name_max, c->kernel->pretty);
            h3_buf_puts(b, ",\"kernel_pretty\":");
            h3_buf_json_str(b, name);
        }
        h3_buf_printf(b, ",\"ptsz\":%s,\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"shmem\":%u",
                      c->per_thread ? "true" : "false", c->grid[0], c->grid[1], c->grid[2],
                      c->block[0], c->block[1], c->block[2], c->shmem);
        h3_buf_printf(b, ",\"param_bytes\":%u,\"param_sizes\":[", c->param_bytes);
        for (uint32_t i = 0; i < c->nparams && c->param_sizes != NULL; i++)
            h3_buf_printf(b, i ? ",%u" : "%u", c->param_sizes[i]);
        h3_buf_putc(b, ']');
        if (h3_config.trace_params)
            h3_trace_params(b, c);
    }
    switch (c->fn) {
    case H3_FN_cublasLtMatmul: {
        const struct h3_lt_desc *lt = &c->u.lt;
        h3_buf_printf(b,
                      ",\"matmul\":{\"compute\":%d,\"scale\":%d,\"transa\":%d,\"transb\":%d,"
                      "\"epilogue\":%d,\"bias_type\":%d,\"m\":%lld,\"n\":%lld,\"k\":%lld,"
                      "\"workspace\":%zu",
                      lt->compute, lt->scale, lt->transa, lt->transb, lt->epilogue, lt->bias_type,
                      (long long)lt->m, (long long)lt->n, (long long)lt->k, lt->workspace);
        h3_put_ptr(b, "bias", lt->bias);
        h3_put_ptr(b, "A", lt->A);
        h3_put_ptr(b, "B", lt->B);
        h3_put_ptr(b, "C", lt->C);
        h3_put_ptr(b, "D", lt->D);
        h3_put_ptr(b, "workspace_ptr", lt->workspace_ptr);
        h3_put_layout(b, "a", &lt->a);
        h3_put_layout(b, "b", &lt->b);
        h3_put_layout(b, "c", &lt->c);
        h3_put_layout(b, "d", &lt->d);
        if (lt->have_algo)
            h3_buf_printf(b,
                          ",\"algo\":{\"id\":%d,\"tile\":%d,\"stages\":%d,\"splitk\":%d,"
                          "\"reduction\":%d,\"swizzle\":%d,\"custom\":%d,\"cluster\":%d,\"inner\":%d}",
                          lt->algo_id, lt->tile, lt->stages, lt->splitk, lt->reduction, lt->swizzle,
                          lt->custom, lt->cluster, lt->inner);
        else
            h3_buf_puts(b, ",\"algo\":null");
        h3_buf_putc(b, '}');
        break;
    }
    case H3_FN_cudnnBackendExecute: {
        const struct h3_cudnn_desc *d = &c->u.dnn;
        h3_buf_printf(b, ",\"cudnn\":{\"plan\":\"%#llx\",\"pack_known\":%s,\"uids\":[",
                      (unsigned long long)(uintptr_t)d->plan, d->known ? "true" : "false");
        for (int64_t i = 0; i < d->count; i++)
            h3_buf_printf(b, i ? ",%lld" : "%lld", (long long)d->uids[i]);
        h3_buf_puts(b, "],\"ptrs\":[");
        for (int64_t i = 0; i < d->count; i++)
            h3_buf_printf(b, i ? ",\"%#llx\"" : "\"%#llx\"", (unsigned long long)(uintptr_t)d->ptrs[i]);
        h3_buf_putc(b, ']');
        h3_put_ptr(b, "workspace", d->workspace);
        h3_buf_putc(b, '}');
        break;
    }
    case H3_FN_cuGetProcAddress:
    case H3_FN_cuGetProcAddress_v2:
        h3_buf_puts(b, ",\"symbol\":");
        h3_buf_json_str(b, c->u.pa.symbol);
        h3_buf_printf(b, ",\"version\":%d,\"flags\":%llu", c->u.pa.version,
                      (unsigned long long)c->u.pa.flags);
        break;
    default:
        if (hk->kind == H3_KIND_SYNC && c->u.sync.dst != NULL) {
            h3_put_ptr(b, "dst", c->u.sync.dst);
            h3_buf_printf(b, ",\"bytes\":%zu", c->u.sync.bytes);
        }
        if (hk->kind == H3_KIND_LIBCALL) {
            const struct h3_gemm_desc *g = &c->u.gemm;
            h3_buf_printf(b,
                          ",\"gemm\":{\"transa\":%d,\"transb\":%d,\"atype\":%d,\"btype\":%d,"
                          "\"ctype\":%d,\"compute\":%d,\"m\":%lld,\"n\":%lld,\"k\":%lld,\"lda\":%lld,"
                          "\"ldb\":%lld,\"ldc\":%lld,\"batch\":%lld",
                          g->transa, g->transb, g->atype, g->btype, g->ctype, g->compute,
                          (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->lda,
                          (long long)g->ldb, (long long)g->ldc, (long long)g->batch);
            h3_put_ptr(b, "A", g->A);
            h3_put_ptr(b, "B", g->B);
            h3_put_ptr(b, "C", g->C);
            h3_buf_putc(b, '}');
        }
        break;
    }
    h3_buf_printf(b, ",\"fp\":\"%016llx\",\"result\":%lld", (unsigned long long)c->fp, c->result);
    h3_buf_puts(b, ",\"decision\":");
    h3_buf_json_str(b, c->decision);
    h3_buf_puts(b, ",\"reason\":");
    h3_buf_json_str(b, c->reason);
    if (c->match_sig != NULL) {
        h3_buf_puts(b, ",\"group\":");
        h3_buf_json_str(b, c->match_sig->group);
        h3_buf_printf(b, ",\"group_call\":%u", c->match_call);
    }
    if (c->flushed != 0) {
        h3_buf_printf(b, ",\"flushed\":%u,\"flush_reason\":", c->flushed);
        h3_buf_json_str(b, c->flush_reason);
    }
    if (c->op != NULL) {
        h3_buf_puts(b, ",\"op\":");
        h3_buf_json_str(b, c->op);
        h3_buf_printf(b, ",\"op_calls\":%u", c->op_calls);
        if (c->op_left_out != 0)
            h3_buf_printf(b, ",\"left_out\":%u,\"left_out_bytes\":%llu", c->op_left_out,
                          (unsigned long long)c->op_left_out_bytes);
    }
    if (c->op_how != NULL) {
        h3_buf_puts(b, ",\"op_how\":");
        h3_buf_json_str(b, c->op_how);
    }
    if (c->op_verify != NULL) {
        h3_buf_puts(b, ",\"verify\":");
        h3_buf_json_str(b, c->op_verify);
    }
    if (c->learned != NULL) {
        h3_buf_puts(b, ",\"learned\":");
        h3_buf_json_str(b, c->learned);
    }
    if (c->learner != NULL) {
        h3_buf_puts(b, ",\"learner\":");
        h3_buf_json_str(b, c->learner);
    }
    if (c->op_fallback != NULL) {
        h3_buf_puts(b, ",\"op_fallback\":");
        h3_buf_json_str(b, c->op_fallback);
    }
    if (full && h3_config.trace_backtrace > 0) {
        void *frames[64];
        int n = h3_backtrace(frames, (int)h3_config.trace_backtrace);
        h3_buf_puts(b, ",\"bt\":[");
        for (int i = 0; i < n; i++) {
            Dl_info info;
            char frame[512];
            if (dladdr(frames[i], &info) != 0 && info.dli_sname != NULL)
                snprintf(frame, sizeof(frame), "%s+%#lx", info.dli_sname,
                         (unsigned long)((char *)frames[i] - (char *)info.dli_saddr));
            else if (dladdr(frames[i], &info) != 0 && info.dli_fname != NULL)
                snprintf(frame, sizeof(frame), "%s+%#lx", info.dli_fname,
                         (unsigned long)((char *)frames[i] - (char *)info.dli_fbase));
            else
                snprintf(frame, sizeof(frame), "%p", frames[i]);
            if (i > 0)
                h3_buf_putc(b, ',');
            h3_buf_json_str(b, frame);
        }
        h3_buf_putc(b, ']');
    }
}

/* Builds a whole record into `b`; false if it did not fit. */
static bool h3_trace_build(struct h3_buf *b, const struct h3_call *c, bool full, int name_max)
{
    b->len = 0;
    b->overflow = false;
    b->p[0] = '\0';
    if (h3_config.trace_format == H3_FORMAT_CHROME) {
        const char *name = c->kind == H3_KIND_LAUNCH && c->kernel != NULL
                               ? c->kernel->pretty : h3_hooks[c->fn].name;
        char shortname[256];
        snprintf(shortname, sizeof(shortname), "%.*s", name_max < 200 ? name_max : 200, name);
        h3_buf_puts(b, "{\"name\":");
        h3_buf_json_str(b, shortname);
        h3_buf_puts(b, ",\"cat\":");
        h3_buf_json_str(b, h3_hooks[c->fn].name);
        h3_buf_printf(b, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{",
                      (double)c->t0_ns / 1e3, (double)(c->t1_ns - c->t0_ns) / 1e3, (int)getpid(),
                      h3_tid());
        h3_trace_fields(b, c, full, name_max);
        h3_buf_puts(b, "}},\n");
    } else {
        h3_buf_putc(b, '{');
        h3_trace_fields(b, c, full, name_max);
        h3_buf_puts(b, "}\n");
    }
    return !b->overflow;
}

void h3_trace_emit(const struct h3_call *c)
{
    char storage[32768];
    struct h3_buf b = {storage, 0, sizeof(storage), false};
    struct h3_call copy = *c;
    copy.seq = atomic_fetch_add_explicit(&h3_trace_seq, 1, memory_order_relaxed);
    if (!h3_trace_build(&b, &copy, true, 4000) && !h3_trace_build(&b, &copy, false, 512))
        return;
    h3_trace_write(b.p, b.len);
}
