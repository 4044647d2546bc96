/*
 * What PyTorch's caching allocator has told, for the layers above: the
 * blocks it has handed out and not taken back, each thread's recent frees,
 * and whether any report has come.  c10_report.c, the interposed report
 * function, feeds it.
 *
 * The allocator in libc10_cuda.so reports every block it hands out and
 * every block it takes back, with the block's address, its size and the
 * device.  It reports a free when the last tensor on the block's memory is
 * gone, whatever the stream uses, and in CUDA graph captures too.  Two blocks
 * it hands out never overlap while both are in use, so a free reported
 * after a launch that touches the launch's output is the free of that
 * output's block (or of one the same memory was given to after it was
 * freed): no tensor refers to the output any more.  The rules built on that
 * are the ops' (ops.c: the freed-outputs rule; engine.c: owed writes) and
 * the matcher's (a reference to a freed buffer).
 *
 * Owns: the table of live blocks (weight_cache asks where a parameter's
 * block begins and ends), each thread's ring of its last H3_RECENT_FREES
 * frees, numbered with the thread's serial, the ring of every thread's
 * last H3_ALL_FREES frees, and the reports-seen flag.
 * Invariants: a thread's ring is written and read on its own thread; a
 * question about another thread's mark, or reaching back past a ring's
 * oldest entry, is answered "not known" (false), never "freed"; the ring
 * of every thread's frees answers "maybe" for what it does not hold.
 * Never: calls above the services; the ring allocates nothing.
 */
#include "h3shim.h"

#include <pthread.h>

static atomic_bool h3_released_seen_flag; /* a report about CUDA memory has come */

void h3_released_note_seen(void)
{
    if (!atomic_load_explicit(&h3_released_seen_flag, memory_order_relaxed))
        atomic_store_explicit(&h3_released_seen_flag, true, memory_order_relaxed);
}

bool h3_released_seen(void)
{
    return atomic_load_explicit(&h3_released_seen_flag, memory_order_relaxed);
}

/*
 * The blocks the allocator has handed out and not taken back, so that
 * weight_cache knows the whole block a parameter lies in (a flat buffer's
 * parameters are views of one block, written through its base).  Open
 * addressing on the block's address with backward-shift deletion; full (a
 * process with more live blocks than room), it stops answering, and the
 * caller falls back to the CUDA allocation.
 */
#define H3_BLOCKS_BITS 16
#define H3_BLOCKS_CAP (1u << H3_BLOCKS_BITS)
static struct {
    pthread_mutex_t lock;
    uint64_t ptr[H3_BLOCKS_CAP], size[H3_BLOCKS_CAP]; /* ptr 0: empty */
    unsigned n;
    bool lost; /* a block could not be entered: a miss proves nothing */
} h3_blocks = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline unsigned h3_blocks_slot(uint64_t ptr)
{
    return (unsigned)(((ptr >> 9) * 0x9e3779b97f4a7c15ull) >> (64 - H3_BLOCKS_BITS));
}

void h3_released_block_add(uint64_t ptr, uint64_t size)
{
    pthread_mutex_lock(&h3_blocks.lock);
    if (h3_blocks.n >= H3_BLOCKS_CAP - H3_BLOCKS_CAP / 4) {
        h3_blocks.lost = true;
    } else {
        unsigned i = h3_blocks_slot(ptr);
        while (h3_blocks.ptr[i] != 0 && h3_blocks.ptr[i] != ptr)
            i = (i + 1) & (H3_BLOCKS_CAP - 1);
        h3_blocks.n += h3_blocks.ptr[i] == 0;
        h3_blocks.ptr[i] = ptr, h3_blocks.size[i] = size;
    }
    pthread_mutex_unlock(&h3_blocks.lock);
}

void h3_released_block_remove(uint64_t ptr)
{
    pthread_mutex_lock(&h3_blocks.lock);
    unsigned i = h3_blocks_slot(ptr);
    while (h3_blocks.ptr[i] != 0 && h3_blocks.ptr[i] != ptr)
        i = (i + 1) & (H3_BLOCKS_CAP - 1);
    if (h3_blocks.ptr[i] != 0) {
        h3_blocks.n--;
        /* Backward shift: move later members of the run into the hole. */
        for (unsigned j = (i + 1) & (H3_BLOCKS_CAP - 1); h3_blocks.ptr[j] != 0; j = (j + 1) & (H3_BLOCKS_CAP - 1)) {
            unsigned home = h3_blocks_slot(h3_blocks.ptr[j]);
            bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
            if (movable) {
                h3_blocks.ptr[i] = h3_blocks.ptr[j], h3_blocks.size[i] = h3_blocks.size[j];
                i = j;
            }
        }
        h3_blocks.ptr[i] = 0, h3_blocks.size[i] = 0;
    }
    pthread_mutex_unlock(&h3_blocks.lock);
}

void h3_released_after_fork_child(void)
{
    pthread_mutex_init(&h3_blocks.lock, NULL);
}

bool h3_released_block(uint64_t addr, uint64_t *lo, uint64_t *hi)
{
    bool found = false;
    pthread_mutex_lock(&h3_blocks.lock);
    unsigned i = h3_blocks_slot(addr); /* most often the block's own address */
    while (h3_blocks.ptr[i] != 0 && h3_blocks.ptr[i] != addr)
        i = (i + 1) & (H3_BLOCKS_CAP - 1);
    if (h3_blocks.ptr[i] == addr && addr != 0) {
        *lo = addr, *hi = addr + h3_blocks.size[i], found = true;
    } else if (!h3_blocks.lost) { /* a view inside a block: every block is looked at (once per copy made) */
        for (unsigned k = 0; k < H3_BLOCKS_CAP && !found; k++)
            if (h3_blocks.ptr[k] != 0 && h3_blocks.ptr[k] <= addr && addr - h3_blocks.ptr[k] < h3_blocks.size[k])
                *lo = h3_blocks.ptr[k], *hi = h3_blocks.ptr[k] + h3_blocks.size[k], found = true;
    }
    pthread_mutex_unlock(&h3_blocks.lock);
    return found;
}

/* ---- each thread's recent frees ---- */

#define H3_RECENT_FREES 128

static atomic_uint h3_recent_serials; /* 0: a thread that has noted nothing yet */

static H3_TLS struct {
    uint32_t serial; /* this thread's, from 1; 0 until its first free */
    uint32_t n;      /* frees noted so far */
    struct h3_span at[H3_RECENT_FREES];
} h3_recent;

static uint32_t h3_recent_serial(void)
{
    if (h3_recent.serial == 0)
        h3_recent.serial = atomic_fetch_add_explicit(&h3_recent_serials, 1, memory_order_relaxed) + 1;
    return h3_recent.serial;
}

/*
 * Every thread's last H3_ALL_FREES frees, numbered in one count, for the
 * question whether memory may have been freed between two points at all
 * (h3_released_maybe_between): the allocator gives memory freed on a stream
 * to the next allocation on it from any thread.  Reports come with the
 * allocator's lock held, so a free that let a later allocation have the
 * memory was counted before that allocation.  An entry is written as a
 * sequence lock: `seq` is its number plus one once it is whole, 0 while it
 * is written; a reader that sees another number, or sees it change, does
 * not know the entry.
 */
#define H3_ALL_FREES 512
static atomic_ullong h3_all_n;
static struct {
    atomic_ullong seq;
    atomic_ullong lo, hi;
} h3_all[H3_ALL_FREES];

void h3_released_note_free(uint64_t lo, uint64_t hi)
{
    h3_recent_serial();
    h3_recent.at[h3_recent.n % H3_RECENT_FREES] = (struct h3_span){lo, hi};
    h3_recent.n++;
    uint64_t k = atomic_fetch_add_explicit(&h3_all_n, 1, memory_order_relaxed);
    __typeof__(&h3_all[0]) e = &h3_all[k % H3_ALL_FREES];
    atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&e->lo, lo, memory_order_relaxed);
    atomic_store_explicit(&e->hi, hi, memory_order_relaxed);
    atomic_store_explicit(&e->seq, k + 1, memory_order_release);
}

struct h3_free_mark h3_released_mark(void)
{
    return (struct h3_free_mark){h3_recent_serial(), h3_recent.n,
                                 atomic_load_explicit(&h3_all_n, memory_order_relaxed)};
}

bool h3_released_maybe_between(struct h3_free_mark a, struct h3_free_mark b, struct h3_span s)
{
    if (!h3_released_seen() || b.all - a.all > H3_ALL_FREES)
        return true;
    for (uint64_t k = a.all; k != b.all; k++) {
        __typeof__(&h3_all[0]) e = &h3_all[k % H3_ALL_FREES];
        uint64_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);
        struct h3_span f = {atomic_load_explicit(&e->lo, memory_order_relaxed),
                            atomic_load_explicit(&e->hi, memory_order_relaxed)};
        atomic_thread_fence(memory_order_acquire);
        if (seq != k + 1 || atomic_load_explicit(&e->seq, memory_order_relaxed) != seq || h3_spans_overlap(f, s))
            return true;
    }
    return false;
}

bool h3_released_since(struct h3_free_mark mark, struct h3_span s)
{
    uint32_t n = h3_recent.n;
    if (mark.serial == 0 || mark.serial != h3_recent.serial || n - mark.n > H3_RECENT_FREES)
        return false;
    for (uint32_t k = mark.n; k != n; k++)
        if (h3_spans_overlap(h3_recent.at[k % H3_RECENT_FREES], s))
            return true;
    return false;
}

int h3_released_between(struct h3_free_mark a, struct h3_free_mark b, struct h3_span s)
{
    uint32_t n = h3_recent.n;
    if (a.serial == 0 || a.serial != h3_recent.serial || b.serial != a.serial || n - a.n > H3_RECENT_FREES ||
        b.n - a.n > n - a.n)
        return -1;
    for (uint32_t k = a.n; k != b.n; k++)
        if (h3_spans_overlap(h3_recent.at[k % H3_RECENT_FREES], s))
            return 1;
    return 0;
}

bool h3_released_device_address(uint64_t addr)
{
    if (addr == 0)
        return false;
    bool found = false;
    pthread_mutex_lock(&h3_blocks.lock);
    unsigned i = h3_blocks_slot(addr);
    while (h3_blocks.ptr[i] != 0 && h3_blocks.ptr[i] != addr)
        i = (i + 1) & (H3_BLOCKS_CAP - 1);
    found = h3_blocks.ptr[i] == addr;
    pthread_mutex_unlock(&h3_blocks.lock);
    uint32_t n = h3_recent.n, kept = n < H3_RECENT_FREES ? n : H3_RECENT_FREES;
    for (uint32_t k = n - kept; !found && k != n; k++)
        found = addr >= h3_recent.at[k % H3_RECENT_FREES].lo && addr < h3_recent.at[k % H3_RECENT_FREES].hi;
    return found;
}
