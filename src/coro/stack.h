/* stack.h - per-thread pool of coroutine stacks with guard pages.
 *
 * Owns: the memory that coroutines run on. A worker thread owns one pool and
 * is its only user: nothing here is thread-safe, nothing takes a lock.
 *
 * Layout. Stacks are carved from slabs: one mmap(MAP_NORESERVE) of
 * stacks_per_slab slots, each slot = [guard][stack], the guard (one page by
 * default) below the stack, which grows down into it. Memory is committed
 * page by page as a coroutine touches it, so a parked coroutine that touched
 * one page costs one page of RSS (plus ~64 bytes of descriptor); THP is
 * disabled on slabs so a first touch never faults in 2 MiB.
 *
 * Guards and the mapping limit. Linux caps mappings per process
 * (vm.max_map_count, 65530 by default).
 *   - MADV_GUARD_INSTALL (Linux >= 6.13, probed once per process): guard
 *     pages are page-table markers inside the slab's single mapping, so a
 *     slab costs at most ONE mapping whatever its stack count (the kernel
 *     even merges adjacent slabs). Live stacks are then bounded by memory,
 *     not mappings. Measured (Linux 6.18, 64 KiB stacks, 8 MiB slabs of 120
 *     stacks): 100,000 live stacks = 834 slabs, 6.5 GiB of address space,
 *     1 VMA, ~4 KiB RSS each once parked; 1,000,000 still acquire fine.
 *   - fallback, mprotect(PROT_NONE) guards: every guard splits the slab, so
 *     each stack costs TWO mappings and the pool tops out near
 *     max_map_count / 2: measured 32,640 stacks with the default 65530
 *     (less whatever else the process maps). Past that, acquire fails with
 *     -ENOMEM; raise vm.max_map_count or run Linux >= 6.13.
 *
 * Caching. Released stacks go to a LIFO "warm" cache (their touched pages
 * stay resident, so reuse costs no page faults) of at most cache_max
 * stacks. Beyond the cap a released stack is madvise(MADV_DONTNEED)'d (RSS
 * back to zero, guard kept) and joins the "cold" list; when every stack of a
 * slab is cold the slab is unmapped, except one spare empty slab kept to
 * avoid mmap churn at a slab boundary.
 *
 * Complexity: acquire/release O(1); they are HOT and make no syscall on a
 * cache hit (acquire from the warm list or of a cold stack handed out
 * before, release into the warm cache). A slab refill costs one mmap; a
 * stack's first acquire one madvise or mprotect (the guard of the slot
 * above it; its own went in with the stack below, or goes in now: two
 * calls), kept for the slab's life; a release past the cap one madvise.
 * ax_stack_owner_of is O(slabs), not hot.
 */
#ifndef AX_CORO_STACK_H
#define AX_CORO_STACK_H

#include <stdbool.h>
#include <stddef.h>

struct ax_stack_slab;

enum ax_stack_state { AX_STACK_COLD, AX_STACK_WARM, AX_STACK_IN_USE };

/* One stack. Owned by the pool; valid until ax_stack_pool_destroy. */
struct ax_stack {
    void *lo;    /* lowest usable byte, just above the guard */
    size_t size; /* usable bytes: the pool's stack_size */
    void *user;  /* free for the holder (e.g. its task, for overflow reports);
                    cleared on release */
    struct ax_stack_slab *slab;
    struct ax_stack *next, *prev; /* warm or cold list while free */
    enum ax_stack_state state;
    bool guarded; /* its guard is in: from its first acquire on */
};

enum ax_stack_guard_mode {
    AX_STACK_GUARD_AUTO = 0, /* MADV_GUARD_INSTALL when it works, else mprotect */
    AX_STACK_GUARD_MADVISE,  /* require MADV_GUARD_INSTALL (-ENOTSUP without it) */
    AX_STACK_GUARD_MPROTECT, /* always mprotect (mostly for tests) */
};

struct ax_stack_config {
    size_t stack_size;      /* usable bytes; rounded up to pages; min 16 KiB. Default 64 KiB */
    size_t guard_size;      /* rounded up to pages; min 1 page. Default 1 page */
    size_t stacks_per_slab; /* 0 = auto: ~8 MiB slabs (at least 1 stack) */
    size_t cache_max;       /* warm stacks kept resident. Default 64 */
    enum ax_stack_guard_mode guard_mode;
};

struct ax_stack_stats {
    size_t in_use;                       /* acquired and not released */
    size_t cached;                       /* warm: released, memory still resident */
    size_t cold;                         /* carved, never used or returned with MADV_DONTNEED */
    size_t slabs;                        /* mappings made (each 1 VMA with madvise guards) */
    size_t bytes_mapped;                 /* address space held, guards included */
    enum ax_stack_guard_mode guard_mode; /* mode in effect: MADVISE or MPROTECT */
    size_t guards;                       /* guards put in, ever (one per stack handed out, about) */
};

struct ax_stack_pool {
    /* private: use the functions below */
    struct ax_stack_config cfg; /* rounded values */
    size_t page, slot_size, slab_bytes;
    enum ax_stack_guard_mode guard_mode;
    struct ax_stack warm, cold; /* list sentinels */
    size_t n_in_use, n_warm, n_cold, n_slabs, n_empty_slabs, bytes_mapped, n_guards;
    struct ax_stack_slab *slabs; /* registry for ax_stack_owner_of */
};

void ax_stack_config_default(struct ax_stack_config *cfg);

/* cfg NULL means defaults. Maps nothing yet. Returns 0, -EINVAL (sizes
 * overflow) or -ENOTSUP (GUARD_MADVISE asked but unavailable). */
int ax_stack_pool_init(struct ax_stack_pool *p, const struct ax_stack_config *cfg);

/* Unmap everything, including stacks still in use. */
void ax_stack_pool_destroy(struct ax_stack_pool *p);

/* HOT. Hand out a stack: the most recently released warm one, else a cold
 * one, else a new slab. Returns 0, or -ENOMEM (mmap failed or the mapping
 * limit was hit: *out untouched and no stack taken, though a slab mapped
 * for it stays, empty, for a trim or the next acquire). */
int ax_stack_acquire(struct ax_stack_pool *p, struct ax_stack **out);

/* HOT. Give a stack back. Its memory content is garbage from now on. */
void ax_stack_release(struct ax_stack_pool *p, struct ax_stack *s);

/* Shrink: keep at most `keep` warm stacks (the rest go cold, RSS released)
 * and unmap every slab that has no warm or in-use stack (the spare too). */
void ax_stack_pool_trim(struct ax_stack_pool *p, size_t keep);

/* Which stack of this pool does addr fall in? Returns the stack whose
 * [guard, top) range holds addr, or NULL; *in_guard (if not NULL) tells
 * whether addr hit the guard. Reads only, no allocation: safe to call from
 * a SIGSEGV handler on the pool's own thread (e.g. to name the task whose
 * stack overflowed, via s->user). O(number of slabs). */
struct ax_stack *ax_stack_owner_of(const struct ax_stack_pool *p, const void *addr, int *in_guard);

void ax_stack_pool_stats(const struct ax_stack_pool *p, struct ax_stack_stats *st);

/* 1 if this kernel accepts MADV_GUARD_INSTALL (probed once per process). */
int ax_stack_guard_madvise_supported(void);

static inline void *ax_stack_top(const struct ax_stack *s)
{
    return (char *)s->lo + s->size;
}

#endif
