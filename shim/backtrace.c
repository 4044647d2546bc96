/*
 * Native backtraces for the trace (H3SHIM_TRACE_BACKTRACE=N), via libunwind.
 *
 * Owns: the libunwind handle, loaded at need with dlopen so that the shim
 * has no link-time dependency on it.
 * Invariants: when libunwind is absent, one clear notice is printed and
 * records simply carry no frames.  Frames inside h3shim itself are skipped:
 * the first frame is the caller of the intercepted function.
 */
#include "h3shim.h"

#include <dlfcn.h>

typedef int (*h3_unw_backtrace_fn)(void **, int);

static h3_unw_backtrace_fn h3_unw_find(void)
{
    static _Atomic(void *) fn;
    static atomic_int looked;
    if (atomic_load_explicit(&looked, memory_order_acquire))
        return (h3_unw_backtrace_fn)atomic_load_explicit(&fn, memory_order_acquire);
    static const char *const names[] = {"libunwind.so.8", "libunwind.so"};
    void *f = NULL;
    for (size_t i = 0; i < H3_ARRAY_LEN(names) && f == NULL; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h != NULL)
            f = h3_real_dlsym(h, "unw_backtrace");
    }
    if (f == NULL)
        H3_WARN(H3_SUB_TRACE, "H3SHIM_TRACE_BACKTRACE is set but libunwind (libunwind.so.8) is not "
                              "installed; tracing without backtraces");
    atomic_store_explicit(&fn, f, memory_order_release);
    atomic_store_explicit(&looked, 1, memory_order_release);
    return (h3_unw_backtrace_fn)f;
}

int h3_backtrace(void **frames, int max)
{
    h3_unw_backtrace_fn f = h3_unw_find();
    if (f == NULL || max <= 0)
        return 0;
    void *raw[96];
    int n = f(raw, (int)H3_ARRAY_LEN(raw));
    Dl_info self;
    if (dladdr((void *)&h3_backtrace, &self) == 0)
        self.dli_fbase = NULL;
    int out = 0;
    bool in_caller = false;
    for (int i = 0; i < n && out < max; i++) {
        Dl_info info;
        if (!in_caller && dladdr(raw[i], &info) != 0 && info.dli_fbase == self.dli_fbase)
            continue;
        in_caller = true;
        frames[out++] = raw[i];
    }
    return out;
}
