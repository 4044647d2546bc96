/*
 * Lazy lookup of the real functions.
 *
 * Owns: the table of real function pointers and the handles of the CUDA
 * libraries the process loaded.
 * Invariants: a real function always comes from the copy of its library the
 * process already loaded (dlopen with RTLD_NOLOAD), by its versioned name
 * where the library has version nodes; the shim never loads a library and
 * never links against one.  Lookups are thread-safe and idempotent: racing
 * threads store the same pointer.
 * Never: returns one of the shim's own wrappers as a real function.
 */
#include "h3shim.h"

#include <dlfcn.h>
#include <string.h>

_Atomic(void *) h3_real[H3_FN_COUNT];

struct h3_lib_info {
    const char *sonames[2];
};

static const struct h3_lib_info h3_libs[H3_LIB_COUNT] = {
#define H3_X(lib, so1, so2, fail) [H3_LIB_##lib] = {{so1, so2}},
    H3_LIB_LIST(H3_X)
#undef H3_X
};

static _Atomic(void *) h3_handles[H3_LIB_COUNT];
static _Atomic(const char *) h3_found_soname[H3_LIB_COUNT];

typedef void *(*h3_dlsym_fn)(void *, const char *);
static _Atomic(h3_dlsym_fn) h3_dlsym_libc;

/* libc's dlsym.  RTLD_NEXT here is relative to the shim, so this finds the
 * next definition after ours: libc's (GLIBC_2.34 since glibc 2.34, else the
 * original GLIBC_2.2.5 one in libdl). */
H3_NO_SANITIZE static h3_dlsym_fn h3_dlsym_find(void)
{
    h3_dlsym_fn f = (h3_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (f == NULL)
        f = (h3_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    atomic_store_explicit(&h3_dlsym_libc, f, memory_order_release);
    return f;
}

void *h3_real_dlsym(void *handle, const char *name)
{
    h3_dlsym_fn f = atomic_load_explicit(&h3_dlsym_libc, memory_order_acquire);
    if (H3_UNLIKELY(f == NULL))
        f = h3_dlsym_find();
    return f != NULL ? f(handle, name) : NULL;
}

/* Used by the exported dlsym: the same lookup, kept separate so that the
 * exported function can tail-jump to the result. */
H3_NO_SANITIZE void *(*h3_real_dlsym_ptr(void))(void *, const char *)
{
    h3_dlsym_fn f = atomic_load_explicit(&h3_dlsym_libc, memory_order_acquire);
    return H3_LIKELY(f != NULL) ? f : h3_dlsym_find();
}

void *h3_resolve_handle(enum h3_lib lib)
{
    void *h = atomic_load_explicit(&h3_handles[lib], memory_order_acquire);
    if (h != NULL)
        return h;
    const char *found = NULL;
    for (size_t i = 0; i < H3_ARRAY_LEN(h3_libs[lib].sonames); i++) {
        const char *so = h3_libs[lib].sonames[i];
        if (so == NULL)
            continue;
        void *hi = dlopen(so, RTLD_NOLOAD | RTLD_LAZY);
        if (hi == NULL)
            continue;
        if (h == NULL) {
            h = hi;
            found = so;
        } else {
            H3_WARN_ONCE(H3_SUB_RESOLVE,
                         "both %s and %s are loaded; calls are forwarded to %s. If code built for "
                         "the other one calls through h3shim, set H3SHIM_DISABLE=1",
                         found, so, found);
            dlclose(hi);
        }
    }
    if (h == NULL)
        return NULL;
    void *expected = NULL;
    if (atomic_compare_exchange_strong(&h3_handles[lib], &expected, h)) {
        atomic_store_explicit(&h3_found_soname[lib], found, memory_order_release);
        H3_INFO(H3_SUB_RESOLVE, "found %s", found);
    } else {
        dlclose(h); /* Another thread won: keep one reference. */
        h = expected;
    }
    return h;
}

const char *h3_resolve_soname(enum h3_lib lib)
{
    return atomic_load_explicit(&h3_found_soname[lib], memory_order_acquire);
}

void *h3_resolve_sym(enum h3_lib lib, const char *name)
{
    void *h = h3_resolve_handle(lib);
    if (h == NULL)
        return NULL;
    const char *so = h3_resolve_soname(lib);
    /* CUDA libraries name their one version node after the soname. */
    void *p = (lib != H3_LIB_CUDA && so != NULL) ? dlvsym(h, name, so) : NULL;
    if (p == NULL)
        p = h3_real_dlsym(h, name);
    return p;
}

void *h3_resolve_cached(enum h3_lib lib, const char *name, _Atomic(void *) *slot)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (f == NULL) {
        f = h3_resolve_sym(lib, name);
        atomic_store_explicit(slot, f, memory_order_release);
    }
    return f;
}

/* Whether `p` lies in this library (a lookup that found the shim's own wrapper). */
static bool h3_resolve_is_own(const void *p)
{
    Dl_info found, own;
    return p != NULL && dladdr(p, &found) != 0 && dladdr((const void *)&h3_resolve_is_own, &own) != 0 &&
           found.dli_fbase == own.dli_fbase;
}

void *h3_resolve_fn(enum h3_fn fn)
{
    if ((unsigned)fn >= H3_FN_COUNT)
        return NULL;
    void *p = h3_resolve_sym(h3_hooks[fn].lib, h3_hooks[fn].name);
    if (h3_resolve_is_own(p)) {
        H3_WARN_ONCE(H3_SUB_RESOLVE, "lookup of %s found h3shim itself; not forwarding",
                     h3_hooks[fn].name);
        p = NULL;
    }
    if (p == NULL) {
        H3_INFO(H3_SUB_RESOLVE, "real %s not found (is its library loaded?)", h3_hooks[fn].name);
        return NULL;
    }
    atomic_store_explicit(&h3_real[fn], p, memory_order_release);
    return p;
}
