/*
 * Signature files (signatures/FORMAT.md, format 1): parsing, validation and
 * printing.
 *
 * Owns: struct h3_sig and everything it points to.
 * Invariants: the parser never trusts its input: every count, index, offset
 * and length is bounded before it is used, allocation sizes are bounded by
 * the input's size, nothing recurses, and any error leaves no partial
 * signature behind.  An error is one message "PATH:LINE: what is wrong".
 * Never: touches CUDA, or keeps a pointer into the caller's text.
 */
#include "h3shim.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H3_SIG_MAX_LINE 8192
#define H3_SIG_MAX_TOKENS 300
#define H3_SIG_MAX_CALLS 4096
#define H3_SIG_MAX_PARAMS 256
#define H3_SIG_MAX_PARAM_SIZE 4096
#define H3_SIG_MAX_ITEMS 512

const char *const h3_sig_desc_keys[H3_SIG_DESC_KEYS] = {
    "compute", "scale", "transa", "transb", "epilogue", "bias_type", "m", "n", "k", "workspace",
    "a.type", "a.order", "a.rows", "a.cols", "a.ld", "a.batch", "a.stride",
    "b.type", "b.order", "b.rows", "b.cols", "b.ld", "b.batch", "b.stride",
    "c.type", "c.order", "c.rows", "c.cols", "c.ld", "c.batch", "c.stride",
    "d.type", "d.order", "d.rows", "d.cols", "d.ld", "d.batch", "d.stride",
};
const char *const h3_sig_algo_keys[H3_SIG_ALGO_KEYS] = {
    "id", "tile", "stages", "splitk", "reduction", "swizzle", "custom", "cluster", "inner",
};
const char *const h3_sig_operands[H3_SIG_OPERANDS] = {"A", "B", "C", "D", "bias"};
static const char *const h3_sig_meta_required[] = {"model", "group", "torch", "cuda", "sm", "created"};
static const char *const h3_sig_kinds[] = {"launch", "matmul", "cudnn"};

struct h3_sig_parser {
    const char *path;
    int line;
    char *err;
    size_t errlen;
    struct h3_sig *sig;
    struct h3_sig_call *call; /* the call being read, or NULL */
    bool ended;
};

static bool h3_sig_fail(struct h3_sig_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool h3_sig_fail(struct h3_sig_parser *p, const char *fmt, ...)
{
    if (p->err != NULL && p->errlen > 0) {
        int n = snprintf(p->err, p->errlen, "%s:%d: ", p->path, p->line);
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < p->errlen)
            vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* Parses a whole decimal integer within [lo, hi]. */
static bool h3_sig_int(const char *s, long long lo, long long hi, long long *out)
{
    if (s == NULL || *s == '\0')
        return false;
    const char *d = s + (*s == '-');
    for (; *d != '\0'; d++)
        if (!isdigit((unsigned char)*d))
            return false;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno != 0 || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void *h3_sig_grow(void *array, uint32_t n, size_t elem)
{
    /* Grows by doubling when n reaches a power of two (n is the old count). */
    if (n != 0 && (n & (n - 1)) != 0)
        return array;
    size_t cap = n == 0 ? 4 : (size_t)n * 2;
    return realloc(array, cap * elem);
}

/* Whether [off, off+len) of parameter `param` overlaps a range already
 * claimed by a `bytes` or `slot` line of the call. */
static bool h3_sig_overlaps(const struct h3_sig_call *c, unsigned param, unsigned off, unsigned len)
{
    for (uint32_t i = 0; i < c->nbytes; i++) {
        const struct h3_sig_bytes *b = &c->bytes[i];
        if (b->param == param && off < (unsigned)b->offset + b->len && b->offset < off + len)
            return true;
    }
    for (uint32_t i = 0; i < c->nslots; i++) {
        const struct h3_sig_slot *s = &c->slots[i];
        if (c->kind == H3_SIG_LAUNCH && s->param == param && off < (unsigned)s->offset + 8u &&
            s->offset < off + len)
            return true;
    }
    return false;
}

static bool h3_sig_meta(struct h3_sig_parser *p, char **tok, int n, const char *rest)
{
    if (n < 3)
        return h3_sig_fail(p, "meta needs a key and a value");
    struct h3_sig *s = p->sig;
    char **field = NULL;
    static const struct {
        const char *key;
        size_t offset;
    } keys[] = {
        {"model", offsetof(struct h3_sig, model)},     {"group", offsetof(struct h3_sig, group)},
        {"torch", offsetof(struct h3_sig, torch)},     {"cuda", offsetof(struct h3_sig, cuda)},
        {"sm", offsetof(struct h3_sig, sm)},           {"created", offsetof(struct h3_sig, created)},
        {"cublaslt", offsetof(struct h3_sig, cublaslt)}, {"cudnn", offsetof(struct h3_sig, cudnn)},
        {"source", offsetof(struct h3_sig, source)},
    };
    for (size_t i = 0; i < H3_ARRAY_LEN(keys); i++)
        if (strcmp(tok[1], keys[i].key) == 0)
            field = (char **)((char *)s + keys[i].offset);
    if (field == NULL)
        return h3_sig_fail(p, "unknown meta key '%s'", tok[1]);
    if (*field != NULL)
        return h3_sig_fail(p, "meta %s given twice", tok[1]);
    if (strcmp(tok[1], "created") == 0) {
        long long y, m, d;
        char ys[5], ms[3], ds[3];
        if (n != 3 || strlen(tok[2]) != 10 || tok[2][4] != '-' || tok[2][7] != '-')
            return h3_sig_fail(p, "meta created must be YYYY-MM-DD");
        memcpy(ys, tok[2], 4), ys[4] = '\0';
        memcpy(ms, tok[2] + 5, 2), ms[2] = '\0';
        memcpy(ds, tok[2] + 8, 2), ds[2] = '\0';
        if (!h3_sig_int(ys, 2000, 9999, &y) || !h3_sig_int(ms, 1, 12, &m) || !h3_sig_int(ds, 1, 31, &d))
            return h3_sig_fail(p, "meta created must be YYYY-MM-DD");
    }
    if (strcmp(tok[1], "sm") == 0) {
        long long sm;
        if (n != 3 || !h3_sig_int(tok[2], 10, 999, &sm))
            return h3_sig_fail(p, "meta sm must be a number such as 90");
        s->sm_number = (int)sm;
    }
    *field = strdup(rest);
    return *field != NULL || h3_sig_fail(p, "out of memory");
}

static bool h3_sig_call_start(struct h3_sig_parser *p, char **tok, int n)
{
    struct h3_sig *s = p->sig;
    long long index;
    if (n < 3)
        return h3_sig_fail(p, "call needs an index and a kind");
    if (!h3_sig_int(tok[1], 0, H3_SIG_MAX_CALLS - 1, &index) || index != (long long)s->ncalls)
        return h3_sig_fail(p, "call index must be %u (calls are numbered from 0 in order)", s->ncalls);
    int kind = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(tok[2], h3_sig_kinds[i]) == 0)
            kind = i;
    if (kind < 0)
        return h3_sig_fail(p, "unknown call kind '%s' (launch, matmul, cudnn)", tok[2]);
    if ((kind == H3_SIG_LAUNCH) != (n == 4))
        return h3_sig_fail(p, kind == H3_SIG_LAUNCH ? "call ... launch needs the kernel name"
                                                    : "call ... %s takes nothing after the kind", tok[2]);
    struct h3_sig_call *calls = h3_sig_grow(s->calls, s->ncalls, sizeof(*calls));
    if (calls == NULL)
        return h3_sig_fail(p, "out of memory");
    s->calls = calls;
    struct h3_sig_call *c = &calls[s->ncalls++];
    memset(c, 0, sizeof(*c));
    c->kind = (enum h3_sig_kind)kind;
    c->line = p->line;
    if (kind == H3_SIG_LAUNCH && (c->kernel = strdup(tok[3])) == NULL)
        return h3_sig_fail(p, "out of memory");
    p->call = c;
    return true;
}

/* Parses REF into the slot; references must name an earlier call's slot. */
static bool h3_sig_ref(struct h3_sig_parser *p, const char *ref, struct h3_sig_slot *slot)
{
    if (strcmp(ref, "first") == 0) {
        slot->ref = H3_REF_FIRST;
        return true;
    }
    if (strcmp(ref, "null") == 0) {
        slot->ref = H3_REF_NULL;
        return true;
    }
    if (ref[0] != '@')
        return h3_sig_fail(p, "bad reference '%s' (first, null or @CALL.SLOT[+-BYTES])", ref);
    char buf[64];
    if (strlen(ref) >= sizeof(buf))
        return h3_sig_fail(p, "bad reference '%s'", ref);
    strcpy(buf, ref + 1);
    char *dot = strchr(buf, '.');
    if (dot == NULL)
        return h3_sig_fail(p, "bad reference '%s'", ref);
    *dot = '\0';
    char *slot_s = dot + 1;
    char *sign = strpbrk(slot_s, "+-");
    long long delta = 0, call, sl;
    if (sign != NULL) {
        if (!h3_sig_int(sign + 1, 0, (1ll << 40), &delta))
            return h3_sig_fail(p, "bad offset in reference '%s'", ref);
        if (*sign == '-')
            delta = -delta;
        *sign = '\0';
    }
    uint32_t self = p->sig->ncalls - 1;
    if (!h3_sig_int(buf, 0, H3_SIG_MAX_CALLS, &call) || !h3_sig_int(slot_s, 0, H3_SIG_MAX_ITEMS, &sl))
        return h3_sig_fail(p, "bad reference '%s'", ref);
    if ((uint32_t)call >= self)
        return h3_sig_fail(p, "reference '%s' must name an earlier call than %u", ref, self);
    if ((uint32_t)sl >= p->sig->calls[call].nslots)
        return h3_sig_fail(p, "reference '%s': call %lld has no slot %lld", ref, call, sl);
    slot->ref = H3_REF_SLOT;
    slot->ref_call = (uint32_t)call;
    slot->ref_slot = (uint32_t)sl;
    slot->delta = delta;
    return true;
}

static bool h3_sig_slot_line(struct h3_sig_parser *p, struct h3_sig_call *c, char **tok, int n)
{
    long long id, param = 0, off;
    if (n != 5)
        return h3_sig_fail(p, "slot needs ID PLACE OFFSET REF");
    if (!h3_sig_int(tok[1], 0, H3_SIG_MAX_ITEMS - 1, &id) || id != (long long)c->nslots)
        return h3_sig_fail(p, "slot id must be %u (slots are numbered from 0 in order)", c->nslots);
    struct h3_sig_slot slot;
    memset(&slot, 0, sizeof(slot));
    if (c->kind == H3_SIG_LAUNCH) {
        if (!h3_sig_int(tok[2], 0, (long long)c->nparams - 1, &param))
            return h3_sig_fail(p, "slot parameter '%s' is not one of the %u parameters", tok[2], c->nparams);
        if (!h3_sig_int(tok[3], 0, H3_SIG_MAX_PARAM_SIZE, &off) || off + 8 > c->param_sizes[param])
            return h3_sig_fail(p, "slot at offset %s does not fit in parameter %lld (%u bytes)", tok[3], param,
                               c->param_sizes[param]);
        if (h3_sig_overlaps(c, (unsigned)param, (unsigned)off, 8))
            return h3_sig_fail(p, "slot overlaps another bytes or slot range");
        slot.param = (uint16_t)param;
        slot.offset = (uint16_t)off;
    } else if (c->kind == H3_SIG_MATMUL) {
        int operand = -1;
        for (int i = 0; i < H3_SIG_OPERANDS; i++)
            if (strcmp(tok[2], h3_sig_operands[i]) == 0)
                operand = i;
        if (operand < 0 || strcmp(tok[3], "0") != 0)
            return h3_sig_fail(p, "matmul slot place must be A, B, C, D or bias, offset 0");
        for (uint32_t i = 0; i < c->nslots; i++)
            if (c->slots[i].param == operand)
                return h3_sig_fail(p, "operand %s has two slots", tok[2]);
        slot.param = (uint16_t)operand;
    } else {
        long long uid;
        if (strncmp(tok[2], "uid:", 4) != 0 || !h3_sig_int(tok[2] + 4, INT64_MIN / 2, INT64_MAX / 2, &uid) ||
            strcmp(tok[3], "0") != 0)
            return h3_sig_fail(p, "cudnn slot place must be uid:UID, offset 0");
        bool known = false;
        for (uint32_t i = 0; i < c->nuids; i++)
            known |= c->uids[i] == uid;
        if (!known)
            return h3_sig_fail(p, "uid %lld is not in the call's uids", uid);
        for (uint32_t i = 0; i < c->nslots; i++)
            if (c->slots[i].uid == uid)
                return h3_sig_fail(p, "uid %lld has two slots", uid);
        slot.uid = uid;
    }
    if (!h3_sig_ref(p, tok[4], &slot))
        return false;
    struct h3_sig_slot *slots = h3_sig_grow(c->slots, c->nslots, sizeof(*slots));
    if (slots == NULL)
        return h3_sig_fail(p, "out of memory");
    c->slots = slots;
    c->slots[c->nslots++] = slot;
    return true;
}

static int h3_sig_hex(char ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

static bool h3_sig_bytes_line(struct h3_sig_parser *p, struct h3_sig_call *c, char **tok, int n)
{
    long long param, off;
    if (c->kind != H3_SIG_LAUNCH)
        return h3_sig_fail(p, "bytes belongs to launch calls");
    if (n != 4)
        return h3_sig_fail(p, "bytes needs PARAM OFFSET HEX");
    if (!h3_sig_int(tok[1], 0, (long long)c->nparams - 1, &param))
        return h3_sig_fail(p, "bytes parameter '%s' is not one of the %u parameters", tok[1], c->nparams);
    size_t hexlen = strlen(tok[3]);
    if (hexlen == 0 || hexlen % 2 != 0)
        return h3_sig_fail(p, "bytes needs an even, non-zero number of hex digits");
    size_t len = hexlen / 2;
    if (!h3_sig_int(tok[2], 0, H3_SIG_MAX_PARAM_SIZE, &off) || (size_t)off + len > c->param_sizes[param])
        return h3_sig_fail(p, "bytes at offset %s (%zu bytes) do not fit in parameter %lld (%u bytes)", tok[2],
                           len, param, c->param_sizes[param]);
    if (c->nbytes >= H3_SIG_MAX_ITEMS)
        return h3_sig_fail(p, "too many bytes lines in one call");
    if (h3_sig_overlaps(c, (unsigned)param, (unsigned)off, (unsigned)len))
        return h3_sig_fail(p, "bytes overlap another bytes or slot range");
    uint8_t *data = malloc(len);
    if (data == NULL)
        return h3_sig_fail(p, "out of memory");
    for (size_t i = 0; i < len; i++) {
        int hi = h3_sig_hex(tok[3][2 * i]), lo = h3_sig_hex(tok[3][2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(data);
            return h3_sig_fail(p, "bytes: '%s' is not lowercase hex", tok[3]);
        }
        data[i] = (uint8_t)(hi << 4 | lo);
    }
    struct h3_sig_bytes *bytes = h3_sig_grow(c->bytes, c->nbytes, sizeof(*bytes));
    if (bytes == NULL) {
        free(data);
        return h3_sig_fail(p, "out of memory");
    }
    c->bytes = bytes;
    c->bytes[c->nbytes++] = (struct h3_sig_bytes){(uint16_t)param, (uint16_t)off, (uint16_t)len, data};
    return true;
}

/* `desc KEY=INT...` or `algo KEY=INT...` into values[] / present mask. */
static bool h3_sig_keyvals(struct h3_sig_parser *p, char **tok, int n, const char *const *keys, int nkeys,
                           int64_t *values, uint64_t *present)
{
    if (n < 2)
        return h3_sig_fail(p, "%s needs KEY=VALUE pairs", tok[0]);
    for (int t = 1; t < n; t++) {
        char *eq = strchr(tok[t], '=');
        if (eq == NULL)
            return h3_sig_fail(p, "'%s' is not KEY=VALUE", tok[t]);
        *eq = '\0';
        int key = -1;
        for (int i = 0; i < nkeys; i++)
            if (strcmp(tok[t], keys[i]) == 0)
                key = i;
        long long v;
        if (key < 0)
            return h3_sig_fail(p, "unknown %s key '%s'", tok[0], tok[t]);
        if (!h3_sig_int(eq + 1, INT64_MIN / 2, INT64_MAX / 2, &v))
            return h3_sig_fail(p, "%s %s: '%s' is not an integer", tok[0], tok[t], eq + 1);
        if (*present & (1ull << key))
            return h3_sig_fail(p, "%s %s given twice", tok[0], tok[t]);
        *present |= 1ull << key;
        values[key] = v;
    }
    return true;
}

/* One line of a call's body. */
static bool h3_sig_call_line(struct h3_sig_parser *p, char **tok, int n)
{
    struct h3_sig_call *c = p->call;
    if (c == NULL)
        return h3_sig_fail(p, "'%s' outside a call", tok[0]);
    bool launch = c->kind == H3_SIG_LAUNCH;
    if (strcmp(tok[0], "config") == 0) {
        long long v[7];
        if (!launch || n != 8 || c->have_config)
            return h3_sig_fail(p, "config: one per launch call, GX GY GZ BX BY BZ SHMEM");
        for (int i = 0; i < 7; i++)
            if (!h3_sig_int(tok[i + 1], i == 6 ? 0 : 1, i == 6 ? (1 << 20) : 0x7fffffff, &v[i]))
                return h3_sig_fail(p, "config value '%s' is out of range", tok[i + 1]);
        for (int i = 0; i < 3; i++)
            c->grid[i] = (unsigned)v[i], c->block[i] = (unsigned)v[i + 3];
        c->shmem = (unsigned)v[6];
        c->have_config = true;
        return true;
    }
    if (strcmp(tok[0], "params") == 0) {
        if (!launch || c->have_params)
            return h3_sig_fail(p, "params: one per launch call, before its bytes and slots");
        c->have_params = true;
        if (n - 1 > H3_SIG_MAX_PARAMS)
            return h3_sig_fail(p, "params: at most %d parameters", H3_SIG_MAX_PARAMS);
        c->param_sizes = calloc((size_t)(n > 1 ? n - 1 : 1), sizeof(uint16_t));
        if (c->param_sizes == NULL)
            return h3_sig_fail(p, "out of memory");
        for (int i = 1; i < n; i++) {
            long long v;
            if (!h3_sig_int(tok[i], 1, H3_SIG_MAX_PARAM_SIZE, &v))
                return h3_sig_fail(p, "parameter size '%s' must be 1 to %d", tok[i], H3_SIG_MAX_PARAM_SIZE);
            c->param_sizes[c->nparams++] = (uint16_t)v;
        }
        return true;
    }
    if (strcmp(tok[0], "bytes") == 0) {
        if (launch && !c->have_params)
            return h3_sig_fail(p, "bytes before params");
        return h3_sig_bytes_line(p, c, tok, n);
    }
    if (strcmp(tok[0], "slot") == 0) {
        if (launch && !c->have_params)
            return h3_sig_fail(p, "slot before params");
        return h3_sig_slot_line(p, c, tok, n);
    }
    if (strcmp(tok[0], "desc") == 0 || strcmp(tok[0], "algo") == 0) {
        if (c->kind != H3_SIG_MATMUL)
            return h3_sig_fail(p, "%s belongs to matmul calls", tok[0]);
        bool desc = tok[0][0] == 'd';
        return h3_sig_keyvals(p, tok, n, desc ? h3_sig_desc_keys : h3_sig_algo_keys,
                              desc ? H3_SIG_DESC_KEYS : H3_SIG_ALGO_KEYS, desc ? c->desc : c->algo,
                              desc ? &c->desc_present : &c->algo_present);
    }
    if (strcmp(tok[0], "uids") == 0) {
        if (c->kind != H3_SIG_CUDNN || c->have_uids || c->nslots != 0)
            return h3_sig_fail(p, "uids: one per cudnn call, before its slots");
        c->have_uids = true;
        c->uids = calloc((size_t)(n > 1 ? n - 1 : 1), sizeof(int64_t));
        if (c->uids == NULL)
            return h3_sig_fail(p, "out of memory");
        for (int i = 1; i < n; i++) {
            long long v;
            if (!h3_sig_int(tok[i], INT64_MIN / 2, INT64_MAX / 2, &v))
                return h3_sig_fail(p, "uid '%s' is not an integer", tok[i]);
            for (uint32_t j = 0; j < c->nuids; j++)
                if (c->uids[j] == v)
                    return h3_sig_fail(p, "uid %lld given twice", v);
            c->uids[c->nuids++] = v;
        }
        return true;
    }
    return h3_sig_fail(p, "unknown line '%s'", tok[0]);
}

/* Checks what can only be checked when a call is complete. */
static bool h3_sig_call_end(struct h3_sig_parser *p)
{
    struct h3_sig_call *c = p->call;
    if (c == NULL)
        return true;
    int line = p->line;
    p->line = c->line;
    bool ok = true;
    if (c->kind == H3_SIG_LAUNCH && (!c->have_config || !c->have_params))
        ok = h3_sig_fail(p, "launch call %u needs config and params", p->sig->ncalls - 1);
    p->line = line;
    p->call = NULL;
    return ok;
}

static bool h3_sig_dead(struct h3_sig_parser *p, char **tok, int n)
{
    struct h3_sig_slot tmp;
    if (n != 2)
        return h3_sig_fail(p, "dead needs @CALL.SLOT");
    /* Parsed as a reference made from one past the last call. */
    if (!h3_sig_ref(p, tok[1], &tmp))
        return false;
    if (tmp.ref != H3_REF_SLOT || tmp.delta != 0)
        return h3_sig_fail(p, "dead needs @CALL.SLOT");
    struct h3_sig_slot *s = &p->sig->calls[tmp.ref_call].slots[tmp.ref_slot];
    if (s->ref != H3_REF_FIRST)
        return h3_sig_fail(p, "dead %s: only a buffer's first slot can be dead", tok[1]);
    s->dead = true;
    return true;
}

/* Splits `line` in place into at most H3_SIG_MAX_TOKENS tokens; -1 if more. */
static int h3_sig_split(char *line, char **tok)
{
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        if (n == H3_SIG_MAX_TOKENS)
            return -1;
        tok[n++] = t;
    }
    return n;
}

static bool h3_sig_line(struct h3_sig_parser *p, char *line)
{
    size_t linelen = strlen(line);
    if (linelen > 0 && line[linelen - 1] == '\r')
        line[linelen - 1] = '\0'; /* CRLF line ends are accepted */
    char *hash = strchr(line, '#');
    if (hash != NULL)
        *hash = '\0';
    for (const unsigned char *q = (const unsigned char *)line; *q != '\0'; q++)
        if ((*q < 0x20 && *q != '\t') || *q == 0x7f)
            return h3_sig_fail(p, "control character in line");
    /* `meta` keeps the rest of the line (spaces folded at the ends). */
    char rest[H3_SIG_MAX_LINE + 1];
    const char *r = line;
    while (*r == ' ' || *r == '\t')
        r++;
    if (strncmp(r, "meta", 4) == 0 && (r[4] == ' ' || r[4] == '\t')) {
        r += 4;
        while (*r == ' ' || *r == '\t')
            r++;
        while (*r != '\0' && *r != ' ' && *r != '\t')
            r++;
        while (*r == ' ' || *r == '\t')
            r++;
    }
    snprintf(rest, sizeof(rest), "%s", r);
    for (size_t len = strlen(rest); len > 0 && (rest[len - 1] == ' ' || rest[len - 1] == '\t');)
        rest[--len] = '\0';
    char *tok[H3_SIG_MAX_TOKENS];
    int n = h3_sig_split(line, tok);
    if (n < 0)
        return h3_sig_fail(p, "too many tokens");
    if (n == 0)
        return true;
    if (p->ended)
        return h3_sig_fail(p, "text after end");
    if (!p->sig->have_magic) {
        long long version;
        if (n != 2 || strcmp(tok[0], "h3sig") != 0)
            return h3_sig_fail(p, "not an h3shim signature file (the first line must be 'h3sig 1')");
        if (!h3_sig_int(tok[1], 0, 1000, &version) || version != 1)
            return h3_sig_fail(p, "format version %s is not supported (this h3shim reads format 1)", tok[1]);
        p->sig->have_magic = true;
        return true;
    }
    if (strcmp(tok[0], "meta") == 0) {
        if (p->sig->ncalls != 0)
            return h3_sig_fail(p, "meta after the first call");
        return h3_sig_meta(p, tok, n, rest);
    }
    if (strcmp(tok[0], "call") == 0)
        return h3_sig_call_end(p) && h3_sig_call_start(p, tok, n);
    if (strcmp(tok[0], "dead") == 0) {
        if (!h3_sig_call_end(p))
            return false;
        p->sig->ncalls++; /* so that references may name the last call */
        bool ok = h3_sig_dead(p, tok, n);
        p->sig->ncalls--;
        return ok;
    }
    if (strcmp(tok[0], "end") == 0) {
        if (n != 1)
            return h3_sig_fail(p, "end takes nothing");
        p->ended = true;
        return h3_sig_call_end(p);
    }
    return h3_sig_call_line(p, tok, n);
}

/* Frees call c's parameter sizes, compared bytes and slots (not packed). */
static void h3_sig_call_free_arrays(struct h3_sig_call *c)
{
    free(c->param_sizes);
    for (uint32_t j = 0; j < c->nbytes; j++)
        free(c->bytes[j].data);
    free(c->bytes);
    free(c->slots);
}

#define H3_PACK_ALIGN(n) (((n) + 7) & ~(size_t)7)

/* What the matcher looks up without walking the calls: each kernel name's
 * hash, the GEMMs' shapes, and where each slot's value and each reference's
 * lie in an instance's values (references name earlier calls, checked when
 * parsed). */
static void h3_sig_index(struct h3_sig *s)
{
    enum { M = 6, N = 7, K = 8 }; /* in h3_sig_desc_keys */
    s->nvalues = 0;
    for (uint32_t i = 0; i < s->ncalls; i++) {
        struct h3_sig_call *c = &s->calls[i];
        c->value_base = s->nvalues;
        s->nvalues += c->nslots;
        for (uint32_t k = 0; k < c->nslots; k++)
            if (c->slots[k].ref == H3_REF_SLOT)
                c->slots[k].ref_value = s->calls[c->slots[k].ref_call].value_base + c->slots[k].ref_slot;
        if (c->kernel != NULL)
            c->kernel_hash = h3_hash(H3_HASH_SEED, c->kernel, strlen(c->kernel));
        if (c->kind == H3_SIG_MATMUL && (c->desc_present >> M & 7) == 7 && s->nshapes < H3_SIG_SHAPES) {
            int64_t *shape = s->shapes[s->nshapes++];
            shape[0] = c->desc[M], shape[1] = c->desc[N], shape[2] = c->desc[K];
        }
    }
}

/* Moves every call's parameter sizes, compared bytes and slots into one
 * block, in call order (the matcher walks the calls in order; the cache
 * then finds each call's data beside the last).  The arrays are left as
 * they are when the block cannot be had. */
static void h3_sig_pack(struct h3_sig *s)
{
    size_t need = 0;
    for (uint32_t i = 0; i < s->ncalls; i++) {
        const struct h3_sig_call *c = &s->calls[i];
        need += H3_PACK_ALIGN(c->nparams * sizeof(uint16_t)) + c->nbytes * sizeof(struct h3_sig_bytes) +
                c->nslots * sizeof(struct h3_sig_slot);
        for (uint32_t j = 0; j < c->nbytes; j++)
            need += H3_PACK_ALIGN(c->bytes[j].len);
    }
    unsigned char *arena = need != 0 ? malloc(need) : NULL, *at = arena;
    if (arena == NULL)
        return;
    for (uint32_t i = 0; i < s->ncalls; i++) {
        struct h3_sig_call *c = &s->calls[i], old = *c;
        c->param_sizes = old.param_sizes != NULL ? memcpy(at, old.param_sizes, c->nparams * sizeof(uint16_t)) : NULL;
        at += H3_PACK_ALIGN(c->nparams * sizeof(uint16_t));
        c->slots = old.slots != NULL ? memcpy(at, old.slots, c->nslots * sizeof(struct h3_sig_slot)) : NULL;
        at += c->nslots * sizeof(struct h3_sig_slot);
        c->bytes = old.bytes != NULL ? memcpy(at, old.bytes, c->nbytes * sizeof(struct h3_sig_bytes)) : NULL;
        at += c->nbytes * sizeof(struct h3_sig_bytes);
        for (uint32_t j = 0; j < c->nbytes; j++) {
            c->bytes[j].data = memcpy(at, old.bytes[j].data, c->bytes[j].len);
            at += H3_PACK_ALIGN(c->bytes[j].len);
        }
        h3_sig_call_free_arrays(&old);
    }
    s->arena = arena;
}

void h3_sig_free(struct h3_sig *s)
{
    if (s == NULL)
        return;
    for (uint32_t i = 0; i < s->ncalls; i++) {
        struct h3_sig_call *c = &s->calls[i];
        free(c->kernel);
        if (s->arena == NULL)
            h3_sig_call_free_arrays(c);
        free(c->uids);
    }
    free(s->arena);
    free(s->calls);
    char **fields[] = {&s->path, &s->model, &s->group, &s->torch, &s->cuda,
                       &s->sm, &s->created, &s->cublaslt, &s->cudnn, &s->source};
    for (size_t i = 0; i < H3_ARRAY_LEN(fields); i++)
        free(*fields[i]);
    free(s);
}

struct h3_sig *h3_sig_parse(const char *text, size_t len, const char *path, char *err, size_t errlen)
{
    struct h3_sig_parser p = {path != NULL ? path : "(signature)", 0, err, errlen, NULL, NULL, false};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    p.sig = calloc(1, sizeof(*p.sig));
    if (p.sig == NULL || (p.sig->path = strdup(p.path)) == NULL) {
        h3_sig_fail(&p, "out of memory");
        h3_sig_free(p.sig);
        return NULL;
    }
    bool ok = true;
    char line[H3_SIG_MAX_LINE + 1];
    size_t pos = 0;
    while (ok && pos < len) {
        p.line++;
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - (text + pos)) : len - pos;
        if (n > H3_SIG_MAX_LINE) {
            ok = h3_sig_fail(&p, "line longer than %d bytes", H3_SIG_MAX_LINE);
            break;
        }
        if (memchr(text + pos, '\0', n) != NULL) {
            ok = h3_sig_fail(&p, "NUL byte in line");
            break;
        }
        memcpy(line, text + pos, n);
        line[n] = '\0';
        pos += n + 1;
        ok = h3_sig_line(&p, line);
    }
    if (ok && !p.sig->have_magic)
        ok = h3_sig_fail(&p, "empty file (the first line must be 'h3sig 1')");
    if (ok && !p.ended)
        ok = h3_sig_fail(&p, "missing 'end' (the file may be cut short)");
    for (size_t i = 0; ok && i < H3_ARRAY_LEN(h3_sig_meta_required); i++) {
        char **fields[] = {&p.sig->model, &p.sig->group, &p.sig->torch, &p.sig->cuda, &p.sig->sm, &p.sig->created};
        if (*fields[i] == NULL)
            ok = h3_sig_fail(&p, "missing meta %s", h3_sig_meta_required[i]);
    }
    if (ok && p.sig->ncalls == 0)
        ok = h3_sig_fail(&p, "no calls");
    if (!ok) {
        h3_sig_free(p.sig);
        return NULL;
    }
    h3_sig_index(p.sig);
    h3_sig_pack(p.sig);
    return p.sig;
}

static void h3_sig_print_ref(FILE *f, const struct h3_sig_slot *s)
{
    if (s->ref == H3_REF_FIRST)
        fputs("first", f);
    else if (s->ref == H3_REF_NULL)
        fputs("null", f);
    else if (s->delta == 0)
        fprintf(f, "@%u.%u", s->ref_call, s->ref_slot);
    else
        fprintf(f, "@%u.%u%+lld", s->ref_call, s->ref_slot, (long long)s->delta);
}

void h3_sig_print(FILE *f, const struct h3_sig *s)
{
    fputs("h3sig 1\n", f);
    const char *keys[] = {"model", "group", "torch", "cuda", "sm", "created", "cublaslt", "cudnn", "source"};
    const char *vals[] = {s->model, s->group, s->torch, s->cuda, s->sm, s->created, s->cublaslt, s->cudnn, s->source};
    for (size_t i = 0; i < H3_ARRAY_LEN(keys); i++)
        if (vals[i] != NULL)
            fprintf(f, "meta %s %s\n", keys[i], vals[i]);
    for (uint32_t i = 0; i < s->ncalls; i++) {
        const struct h3_sig_call *c = &s->calls[i];
        fprintf(f, "call %u %s%s%s\n", i, h3_sig_kinds[c->kind], c->kernel ? " " : "", c->kernel ? c->kernel : "");
        if (c->kind == H3_SIG_LAUNCH) {
            fprintf(f, "  config %u %u %u %u %u %u %u\n  params", c->grid[0], c->grid[1], c->grid[2], c->block[0],
                    c->block[1], c->block[2], c->shmem);
            for (uint32_t j = 0; j < c->nparams; j++)
                fprintf(f, " %u", c->param_sizes[j]);
            fputc('\n', f);
            for (uint32_t j = 0; j < c->nbytes; j++) {
                fprintf(f, "  bytes %u %u ", c->bytes[j].param, c->bytes[j].offset);
                for (uint32_t b = 0; b < c->bytes[j].len; b++)
                    fprintf(f, "%02x", c->bytes[j].data[b]);
                fputc('\n', f);
            }
        } else if (c->kind == H3_SIG_MATMUL) {
            const char *heads[2] = {"desc", "algo"};
            for (int w = 0; w < 2; w++) {
                uint64_t present = w == 0 ? c->desc_present : c->algo_present;
                if (present == 0)
                    continue;
                fprintf(f, "  %s", heads[w]);
                for (int k = 0; k < (w == 0 ? H3_SIG_DESC_KEYS : H3_SIG_ALGO_KEYS); k++)
                    if (present & (1ull << k))
                        fprintf(f, " %s=%lld", w == 0 ? h3_sig_desc_keys[k] : h3_sig_algo_keys[k],
                                (long long)(w == 0 ? c->desc[k] : c->algo[k]));
                fputc('\n', f);
            }
        } else {
            fputs("  uids", f);
            for (uint32_t j = 0; j < c->nuids; j++)
                fprintf(f, " %lld", (long long)c->uids[j]);
            fputc('\n', f);
        }
        for (uint32_t j = 0; j < c->nslots; j++) {
            const struct h3_sig_slot *sl = &c->slots[j];
            if (c->kind == H3_SIG_LAUNCH)
                fprintf(f, "  slot %u %u %u ", j, sl->param, sl->offset);
            else if (c->kind == H3_SIG_MATMUL)
                fprintf(f, "  slot %u %s 0 ", j, h3_sig_operands[sl->param]);
            else
                fprintf(f, "  slot %u uid:%lld 0 ", j, (long long)sl->uid);
            h3_sig_print_ref(f, sl);
            fputc('\n', f);
        }
    }
    for (uint32_t i = 0; i < s->ncalls; i++)
        for (uint32_t j = 0; j < s->calls[i].nslots; j++)
            if (s->calls[i].slots[j].dead)
                fprintf(f, "dead @%u.%u\n", i, j);
    fputs("end\n", f);
}

int h3_sig_slot_at(const struct h3_sig_call *c, uint16_t param, uint16_t offset)
{
    for (uint32_t i = 0; i < c->nslots; i++)
        if (c->slots[i].param == param && c->slots[i].offset == offset)
            return (int)i;
    return -1;
}
