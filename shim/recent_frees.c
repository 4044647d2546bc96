/*
 * Each thread's recent frees of CUDA memory, as PyTorch's caching allocator
 * reported them (released.c passes them on), for the matcher.
 *
 * A signature's reference "@C.S" may be the allocator handing a freed
 * buffer's address to the next buffer it makes, not one call reading what
 * another wrote: a launch cannot read a tensor that was freed before it.
 * So when the buffer a reference names was freed since its call, the
 * matcher lets the new buffer lie anywhere (match.c).
 *
 * Owns: a ring of the last H3_RECENT_FREES frees per thread, numbered from
 * the thread's first.
 * Invariants: written and read on the thread that freed (a free reported
 * on another thread is not seen, and a reference to it must hold as
 * recorded); a question reaching back past the ring's oldest entry is
 * answered "not known", never "freed".
 * Never: allocates, locks, or calls anything.
 */
#include "h3shim.h"

#define H3_RECENT_FREES 128

static __attribute__((tls_model("initial-exec"))) _Thread_local struct {
    uint32_t n; /* frees noted so far */
    struct h3_span at[H3_RECENT_FREES];
} h3_recent;

void h3_recent_free_note(uint64_t lo, uint64_t hi)
{
    h3_recent.at[h3_recent.n % H3_RECENT_FREES] = (struct h3_span){lo, hi};
    h3_recent.n++;
}

uint32_t h3_recent_free_mark(void)
{
    return h3_recent.n;
}

bool h3_recent_free_since(uint64_t addr, uint32_t mark)
{
    uint32_t n = h3_recent.n;
    if (n - mark > H3_RECENT_FREES)
        return false;
    for (uint32_t k = mark; k != n; k++) {
        const struct h3_span *f = &h3_recent.at[k % H3_RECENT_FREES];
        if (f->lo <= addr && addr < f->hi)
            return true;
    }
    return false;
}
