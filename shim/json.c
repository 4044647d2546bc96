/*
 * A bounded string builder for trace records.
 *
 * Owns: nothing global.  The caller provides the storage (a stack buffer),
 * so building a record never allocates.
 * Invariants: the buffer is always NUL-terminated; on overflow the text is
 * cut and `overflow` is set, and the trace writer then drops the optional
 * parts (backtrace) rather than emit invalid JSON.
 */
#include "h3shim.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void h3_buf_putc(struct h3_buf *b, char ch)
{
    if (b->len + 1 < b->cap) {
        b->p[b->len++] = ch;
        b->p[b->len] = '\0';
    } else {
        b->overflow = true;
    }
}

void h3_buf_puts(struct h3_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n < b->cap) {
        memcpy(b->p + b->len, s, n + 1);
        b->len += n;
    } else {
        b->overflow = true;
    }
}

void h3_buf_printf(struct h3_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->p + b->len, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room) {
        b->overflow = true;
        b->p[b->len] = '\0';
    } else {
        b->len += (size_t)n;
    }
}

void h3_buf_json_str(struct h3_buf *b, const char *s)
{
    h3_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)(s != NULL ? s : ""); *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            h3_buf_putc(b, '\\');
            h3_buf_putc(b, (char)*p);
        } else if (*p < 0x20) {
            h3_buf_printf(b, "\\u%04x", *p);
        } else {
            h3_buf_putc(b, (char)*p);
        }
    }
    h3_buf_putc(b, '"');
}
