/*
 * Attribute storage for the fake libraries' opaque descriptors: each
 * attribute is stored with its size, and reading it back with another size
 * fails, as NVIDIA's getters do.
 */
#ifndef H3_FAKE_ATTRS_H
#define H3_FAKE_ATTRS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define FAKE_ATTRS 128
#define FAKE_ATTRS_MAGIC 0x61747472u

struct fake_attrs {
    uint32_t magic;
    uint64_t val[FAKE_ATTRS];
    size_t size[FAKE_ATTRS];
};

static inline bool fake_attrs_set(struct fake_attrs *a, int attr, const void *buf, size_t size)
{
    if (a == NULL || a->magic != FAKE_ATTRS_MAGIC || attr < 0 || attr >= FAKE_ATTRS || size > 8)
        return false;
    a->val[attr] = 0;
    memcpy(&a->val[attr], buf, size);
    a->size[attr] = size;
    return true;
}

static inline bool fake_attrs_get(const struct fake_attrs *a, int attr, void *buf, size_t size, size_t *written)
{
    if (a == NULL || a->magic != FAKE_ATTRS_MAGIC || attr < 0 || attr >= FAKE_ATTRS)
        return false;
    if (a->size[attr] == 0 || size != a->size[attr]) {
        if (written != NULL)
            *written = a->size[attr];
        return false;
    }
    memcpy(buf, &a->val[attr], size);
    if (written != NULL)
        *written = size;
    return true;
}

#endif
