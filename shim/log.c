/*
 * The debug log (H3SHIM_DEBUG, H3SHIM_DEBUG_SUBSYS, H3SHIM_DEBUG_FILE).
 *
 * Owns: the log level, the subsystem mask and the log file descriptor.
 * Invariants: one write(2) per line, prefixed "h3shim: ", so lines from many
 * threads never interleave; usable before h3_init() (WARN to stderr).  The
 * log is separate from the trace and from the stats table.
 * Never: writes to stdout.
 */
#include "h3shim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int h3_log_level = H3_LEVEL_WARN;
unsigned h3_log_mask = H3_SUB_ALL;
static int h3_log_fd = 2;

static const struct {
    const char *name;
    unsigned bit;
} h3_subsys_names[] = {
    {"INIT", H3_SUB_INIT},   {"RESOLVE", H3_SUB_RESOLVE}, {"HOOK", H3_SUB_HOOK},
    {"DRIVER", H3_SUB_DRIVER}, {"TRACE", H3_SUB_TRACE},   {"CONFIG", H3_SUB_CONFIG},
    {"STATS", H3_SUB_STATS}, {"FORK", H3_SUB_FORK},       {"ENGINE", H3_SUB_ENGINE}, {"ALL", H3_SUB_ALL},
};

void h3_log_expand_path(const char *pattern, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = pattern; *p != '\0' && o + 1 < outlen; p++) {
        char tmp[256];
        const char *ins = NULL;
        if (p[0] == '%' && p[1] == 'p') {
            snprintf(tmp, sizeof(tmp), "%d", (int)getpid());
            ins = tmp;
        } else if (p[0] == '%' && p[1] == 'h') {
            if (gethostname(tmp, sizeof(tmp)) != 0)
                strcpy(tmp, "unknown");
            tmp[sizeof(tmp) - 1] = '\0';
            ins = tmp;
        }
        if (ins != NULL) {
            size_t n = strlen(ins);
            if (n > outlen - 1 - o)
                n = outlen - 1 - o;
            memcpy(out + o, ins, n);
            o += n;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

/* Parses "INIT,TRACE" or "^HOOK" into a mask; unknown names are reported. */
static unsigned h3_log_parse_subsys(const char *list)
{
    if (list == NULL || list[0] == '\0')
        return H3_SUB_ALL;
    bool invert = list[0] == '^';
    unsigned mask = 0;
    const char *p = list + (invert ? 1 : 0);
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < H3_ARRAY_LEN(h3_subsys_names); i++) {
            if (strlen(h3_subsys_names[i].name) == n && strncasecmp(p, h3_subsys_names[i].name, n) == 0) {
                mask |= h3_subsys_names[i].bit;
                found = true;
            }
        }
        if (!found && n > 0)
            h3_log_write(H3_LEVEL_WARN, H3_SUB_CONFIG, "unknown subsystem '%.*s' in H3SHIM_DEBUG_SUBSYS is ignored",
                         (int)n, p);
        p += n;
        if (*p == ',')
            p++;
    }
    return invert ? (H3_SUB_ALL & ~mask) : mask;
}

void h3_log_setup(void)
{
    h3_log_level = h3_config.debug_level;
    h3_log_mask = h3_log_parse_subsys(h3_config.debug_subsys);
    /* Problems with the configuration itself are always shown. */
    h3_log_mask |= H3_SUB_CONFIG;
    if (h3_config.debug_file != NULL && h3_config.debug_file[0] != '\0') {
        char path[4096];
        h3_log_expand_path(h3_config.debug_file, path, sizeof(path));
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0)
            h3_log_fd = fd;
        else
            h3_log_write(H3_LEVEL_WARN, H3_SUB_CONFIG,
                         "cannot open H3SHIM_DEBUG_FILE '%s' (%s); logging to stderr", path, strerror(errno));
    }
}

void h3_write_line(int fd, const char *prefix, const char *fmt, va_list ap)
{
    char line[1024];
    int n = snprintf(line, sizeof(line), "h3shim: %d %s", (int)getpid(), prefix);
    if (n < 0 || (size_t)n >= sizeof(line) - 2)
        n = 0;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t w = write(fd, line, len);
    (void)w;
}

void h3_log_write(int level, unsigned subsys, const char *fmt, ...)
{
    (void)subsys;
    static const char *const tags[] = {"WARN ", "INFO ", "TRACE "};
    va_list ap;
    va_start(ap, fmt);
    h3_write_line(h3_log_fd, tags[level < 0 ? 0 : level > 2 ? 2 : level], fmt, ap);
    va_end(ap);
}
