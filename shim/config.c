/*
 * Configuration: every H3SHIM_* variable, parsed once.
 *
 * Owns: h3_config and the diagnostics of parsing it.
 * Invariants: a bad value never stops the shim: it is reported once, naming
 * the variable, the value and the value used instead.  An unknown H3SHIM_*
 * name is reported too (a typo must not silently do nothing).
 * Never: allocates after h3_config_load() returns.
 */
#include "h3shim.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct h3_config h3_config;

enum h3_config_type { H3_TYPE_BOOL, H3_TYPE_INT, H3_TYPE_STR, H3_TYPE_LEVEL, H3_TYPE_FORMAT };

struct h3_config_var {
    const char *name;
    enum h3_config_type type;
    size_t offset;
    const char *def;
};

static const struct h3_config_var h3_config_vars[] = {
#define H3_CONFIG(name, type, field, def, help) \
    {#name, H3_TYPE_##type, offsetof(struct h3_config, field), def},
#include "config.def"
#undef H3_CONFIG
};

#define H3_CONFIG_MAX_NOTES 32
static char h3_config_notes[H3_CONFIG_MAX_NOTES][256];
static int h3_config_nnotes;

static void h3_config_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void h3_config_note(const char *fmt, ...)
{
    if (h3_config_nnotes >= H3_CONFIG_MAX_NOTES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h3_config_notes[h3_config_nnotes++], sizeof(h3_config_notes[0]), fmt, ap);
    va_end(ap);
}

static const char *const h3_level_names[] = {"WARN", "INFO", "TRACE"};
static const char *const h3_format_names[] = {"jsonl", "chrome"};

static bool h3_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < H3_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, true;
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, true;
    }
    return false;
}

static bool h3_parse_int(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0)
        return false;
    *out = v;
    return true;
}

static bool h3_parse_name(const char *s, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(s, names[i]) == 0)
            return *out = i, true;
    return false;
}

/* Parses `value` (never NULL) into the field of `v`; false if invalid. */
static bool h3_config_parse(const struct h3_config_var *v, const char *value)
{
    char *field = (char *)&h3_config + v->offset;
    switch (v->type) {
    case H3_TYPE_BOOL: return h3_parse_bool(value, (bool *)field);
    case H3_TYPE_INT: return h3_parse_int(value, (long *)field);
    case H3_TYPE_STR: *(const char **)field = value; return true;
    case H3_TYPE_LEVEL: return h3_parse_name(value, h3_level_names, 3, (int *)field);
    case H3_TYPE_FORMAT: return h3_parse_name(value, h3_format_names, 2, (int *)field);
    }
    return false;
}

static const char *h3_getenv(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

int h3_config_load(char *const *envp)
{
    int problems = 0;
    h3_config_nnotes = 0;
    for (size_t i = 0; i < H3_ARRAY_LEN(h3_config_vars); i++) {
        const struct h3_config_var *v = &h3_config_vars[i];
        h3_config_parse(v, v->def);
        const char *value = h3_getenv(envp, v->name);
        if (value == NULL)
            continue;
        if (h3_config_parse(v, value)) {
            h3_config_note("I%s set by environment to %s", v->name, value);
        } else {
            h3_config_parse(v, v->def);
            h3_config_note("Winvalid value '%s' for %s; using default %s", value, v->name,
                           v->def[0] != '\0' ? v->def : "(unset)");
            problems++;
        }
    }
    if (h3_config.trace_backtrace > 64) {
        h3_config_note("WH3SHIM_TRACE_BACKTRACE=%ld is over the maximum; using 64",
                       h3_config.trace_backtrace);
        h3_config.trace_backtrace = 64;
        problems++;
    }
    if (h3_config.lt_shadow > 2) {
        h3_config_note("WH3SHIM_LT_SHADOW=%ld is not 0, 1 or 2; using 1", h3_config.lt_shadow);
        h3_config.lt_shadow = 1;
        problems++;
    }
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "H3SHIM_", 7) != 0)
            continue;
        size_t n = strcspn(*e, "=");
        bool known = false;
        for (size_t i = 0; i < H3_ARRAY_LEN(h3_config_vars) && !known; i++)
            known = strlen(h3_config_vars[i].name) == n && strncmp(*e, h3_config_vars[i].name, n) == 0;
        if (!known) {
            h3_config_note("Wunknown variable %.*s is ignored", (int)n, *e);
            problems++;
        }
    }
    return problems;
}

/* Echoes what was set and warns about what was wrong, through the log. */
void h3_config_report(void)
{
    for (int i = 0; i < h3_config_nnotes; i++) {
        if (h3_config_notes[i][0] == 'W')
            H3_WARN(H3_SUB_CONFIG, "%s", h3_config_notes[i] + 1);
        else
            H3_INFO(H3_SUB_CONFIG, "%s", h3_config_notes[i] + 1);
    }
}

int h3_config_switch(const char *name, const char *value, const char *otherwise, atomic_flag *warned)
{
    if (value == NULL || *value == '\0')
        return -1;
    if (strcmp(value, "1") == 0 || strcmp(value, "0") == 0)
        return value[0] == '1';
    if (warned == NULL || !atomic_flag_test_and_set(warned))
        H3_WARN(H3_SUB_CONFIG, "%s=%s: expected 0 or 1; %s", name, value, otherwise);
    return -1;
}
