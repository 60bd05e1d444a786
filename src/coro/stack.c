/* stack.c - the stack pool described in stack.h: slabs of guarded stacks,
 * a warm LIFO cache and a cold list.
 *
 * Invariants:
 *   - every stack is in exactly one state: IN_USE (on no list), WARM (on
 *     p->warm, pages maybe resident) or COLD (on p->cold, no resident pages);
 *   - slab->n_cold counts its COLD stacks; a slab with n_cold == n is
 *     "empty"; at most one empty slab is kept outside ax_stack_pool_trim;
 *   - descriptors live in malloc'd slab headers, never inside the mapped
 *     stack memory, so bookkeeping never faults a stack page back in;
 *   - every IN_USE or WARM stack has its guard (`guarded`); a COLD one may
 *     not yet, if it was never handed out. Guards are never taken out: a
 *     slab loses them only with its mapping.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, madvise */
#include "stack.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 */
#endif
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

#define KIB ((size_t)1024)
#define MIN_STACK (16 * KIB)
#define DEFAULT_STACK (64 * KIB)
#define DEFAULT_CACHE 64
#define AUTO_SLAB_BYTES (8 * KIB * KIB)

struct ax_stack_slab {
    char *base;
    size_t len;
    size_t n;      /* stacks in this slab */
    size_t n_cold; /* of which COLD */
    struct ax_stack_slab *next, *prev;
    struct ax_stack stacks[]; /* stacks[i] lies at base + i * slot_size */
};

/* ---- intrusive circular lists with sentinel ------------------------------ */

static void list_init(struct ax_stack *head)
{
    head->next = head->prev = head;
}

static void list_push(struct ax_stack *head, struct ax_stack *s)
{
    s->prev = head;
    s->next = head->next;
    head->next->prev = s;
    head->next = s;
}

static void list_unlink(struct ax_stack *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

/* ---- guard mode probe ---------------------------------------------------- */

static size_t page_size(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (size_t)ps : 4096;
}

/* Accepted is not enough: an emulator (qemu-user) may return 0 for an
 * advice it does not know. So the probe also checks that the kernel now
 * refuses to read the page: write(2) from it into a pipe must fail with
 * EFAULT. */
static int probe_guard_install(void)
{
    size_t ps = page_size();
    char *m = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    int ok = 0, fds[2];
    if (madvise(m, ps, MADV_GUARD_INSTALL) == 0 && pipe(fds) == 0) {
        ok = write(fds[1], m, 1) < 0 && errno == EFAULT && write(fds[1], m + ps, 1) == 1;
        close(fds[0]);
        close(fds[1]);
    }
    munmap(m, 2 * ps);
    return ok;
}

int ax_stack_guard_madvise_supported(void)
{
    static atomic_int probed; /* 0 unknown, 1 yes, -1 no */
    int v = atomic_load_explicit(&probed, memory_order_relaxed);
    if (!v) {
        v = probe_guard_install() ? 1 : -1;
        atomic_store_explicit(&probed, v, memory_order_relaxed);
    }
    return v > 0;
}

/* ---- config -------------------------------------------------------------- */

void ax_stack_config_default(struct ax_stack_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->stack_size = DEFAULT_STACK;
    cfg->guard_size = 0; /* = one page */
    cfg->stacks_per_slab = 0;
    cfg->cache_max = DEFAULT_CACHE;
    cfg->guard_mode = AX_STACK_GUARD_AUTO;
}

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

int ax_stack_pool_init(struct ax_stack_pool *p, const struct ax_stack_config *cfg)
{
    struct ax_stack_config c;
    if (cfg)
        c = *cfg;
    else
        ax_stack_config_default(&c);
    memset(p, 0, sizeof *p);
    p->page = page_size();
    if (c.stack_size > SIZE_MAX / 4 || c.guard_size > SIZE_MAX / 4) return -EINVAL;
    c.stack_size = round_up(c.stack_size < MIN_STACK ? MIN_STACK : c.stack_size, p->page);
    c.guard_size = round_up(c.guard_size < p->page ? p->page : c.guard_size, p->page);
    p->slot_size = c.stack_size + c.guard_size;
    if (c.stacks_per_slab == 0) {
        c.stacks_per_slab = AUTO_SLAB_BYTES / p->slot_size;
        if (c.stacks_per_slab == 0) c.stacks_per_slab = 1;
    }
    if (c.stacks_per_slab > SIZE_MAX / 2 / p->slot_size) return -EINVAL;
    p->slab_bytes = c.stacks_per_slab * p->slot_size;

    switch (c.guard_mode) {
    case AX_STACK_GUARD_AUTO:
        p->guard_mode =
            ax_stack_guard_madvise_supported() ? AX_STACK_GUARD_MADVISE : AX_STACK_GUARD_MPROTECT;
        break;
    case AX_STACK_GUARD_MADVISE:
        if (!ax_stack_guard_madvise_supported()) return -ENOTSUP;
        p->guard_mode = AX_STACK_GUARD_MADVISE;
        break;
    case AX_STACK_GUARD_MPROTECT:
        p->guard_mode = AX_STACK_GUARD_MPROTECT;
        break;
    default:
        return -EINVAL;
    }
    p->cfg = c;
    list_init(&p->warm);
    list_init(&p->cold);
    return 0;
}

/* ---- slabs --------------------------------------------------------------- */

static int slab_new(struct ax_stack_pool *p)
{
    size_t n = p->cfg.stacks_per_slab, len = p->slab_bytes;
    struct ax_stack_slab *sl = malloc(sizeof *sl + n * sizeof sl->stacks[0]);
    if (!sl) return -ENOMEM;
    char *base =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        free(sl);
        return -ENOMEM;
    }
#ifdef MADV_NOHUGEPAGE
    /* Whole mapping: changes flags without splitting it. Best effort. */
    (void)madvise(base, len, MADV_NOHUGEPAGE);
#endif
    sl->base = base;
    sl->len = len;
    sl->n = n;
    sl->n_cold = n;
    /* Push highest first so the lowest stack is handed out first. */
    for (size_t i = n; i-- > 0;) {
        struct ax_stack *s = &sl->stacks[i];
        s->lo = base + i * p->slot_size + p->cfg.guard_size;
        s->size = p->cfg.stack_size;
        s->user = NULL;
        s->slab = sl;
        s->state = AX_STACK_COLD;
        s->guarded = false; /* at its first acquire, or the one below's: guards_for */
        list_push(&p->cold, s);
    }
    sl->prev = NULL;
    sl->next = p->slabs;
    if (p->slabs) p->slabs->prev = sl;
    p->slabs = sl;
    p->n_cold += n;
    p->n_slabs++;
    p->n_empty_slabs++;
    p->bytes_mapped += len;
    return 0;
}

/* Unmap an empty slab (all its stacks COLD). Caller fixes n_empty_slabs. */
static void slab_free(struct ax_stack_pool *p, struct ax_stack_slab *sl)
{
    for (size_t i = 0; i < sl->n; i++)
        list_unlink(&sl->stacks[i]);
    p->n_cold -= sl->n;
    if (sl->prev)
        sl->prev->next = sl->next;
    else
        p->slabs = sl->next;
    if (sl->next) sl->next->prev = sl->prev;
    p->n_slabs--;
    p->bytes_mapped -= sl->len;
    munmap(sl->base, sl->len);
    free(sl);
}

/* Release a stack's pages and file it COLD; maybe unmap its slab. */
static void make_cold(struct ax_stack_pool *p, struct ax_stack *s)
{
    (void)madvise(s->lo, s->size, MADV_DONTNEED); /* keeps guard markers */
    s->state = AX_STACK_COLD;
    list_push(&p->cold, s);
    p->n_cold++;
    struct ax_stack_slab *sl = s->slab;
    if (++sl->n_cold == sl->n) {
        if (p->n_empty_slabs > 0)
            slab_free(p, sl);
        else
            p->n_empty_slabs++; /* keep one spare */
    }
}

/* ---- hot path ------------------------------------------------------------ */

/* A stack's guard goes in when the stack is first handed out, not when its
 * slab is mapped. One madvise (or mprotect) of ~2 us each, but a new
 * slab's 64 of them in a row (the workers' pool: 64 KiB stacks, 64 KiB
 * guards, 8 MiB slabs) took 0.13-0.23 ms alone, and in a burst the start
 * that made the slab took 0.4-2.8 ms, inside a dispatch's batch of starts
 * with the due timers waiting (bench ax_lateness, 2026-12-06). Spread over
 * the stacks' first uses: timer lateness p99 with 100 000 sleepers down
 * by a third to a half in five rounds of interleaved runs of six
 * (SCALING.md "A new slab's guards, one at a time").
 *
 * A guard MADV_GUARD_INSTALL refuses (EINVAL once the slab is mlock'd:
 * mlockall(MCL_CURRENT) after it was mapped) is made by mprotect instead:
 * else that stack, first on the cold list, would fail every acquire for
 * good (review). */
static int guard_put(struct ax_stack_pool *p, struct ax_stack *s)
{
    char *guard = (char *)s->lo - p->cfg.guard_size;
    int rc = -1;
    if (p->guard_mode == AX_STACK_GUARD_MADVISE)
        rc = madvise(guard, p->cfg.guard_size, MADV_GUARD_INSTALL);
    if (rc != 0)
        rc = mprotect(guard, p->cfg.guard_size, PROT_NONE);
    if (rc != 0) /* typically ENOMEM: vm.max_map_count reached */
        return -ENOMEM;
    s->guarded = true;
    p->n_guards++;
    return 0;
}

/* A cold stack about to be handed out: its own guard, and the guard of the
 * slot above it (the next stack of its slab, handed out next), so that the
 * stack lies between two guards from its first run. With mprotect guards
 * the untouched rest of a slab is one read-write mapping; where
 * MADV_NOHUGEPAGE is ignored (qemu-user) a first touch at a stack's top
 * could then be backed by a 2 MiB huge page spanning the stacks above
 * (review). The slot above is best effort: tried again at its own
 * acquire. No system call once both are in. */
static int guards_for(struct ax_stack_pool *p, struct ax_stack *s)
{
    if (!s->guarded) {
        int rc = guard_put(p, s);
        if (rc) return rc;
    }
    struct ax_stack_slab *sl = s->slab;
    struct ax_stack *above = s + 1;
    if (above < sl->stacks + sl->n && !above->guarded) (void)guard_put(p, above);
    return 0;
}

int ax_stack_acquire(struct ax_stack_pool *p, struct ax_stack **out)
{
    struct ax_stack *s;
    if (p->n_warm) {
        s = p->warm.next;
        p->n_warm--;
    } else {
        if (!p->n_cold) {
            int rc = slab_new(p);
            if (rc) return rc;
        }
        s = p->cold.next;
        int rc = guards_for(p, s);
        if (rc) return rc; /* still cold, still first on the list */
        p->n_cold--;
        if (s->slab->n_cold-- == s->slab->n) p->n_empty_slabs--;
    }
    list_unlink(s);
    s->state = AX_STACK_IN_USE;
    p->n_in_use++;
    *out = s;
    return 0;
}

void ax_stack_release(struct ax_stack_pool *p, struct ax_stack *s)
{
    s->user = NULL;
    p->n_in_use--;
    if (p->n_warm < p->cfg.cache_max) {
        s->state = AX_STACK_WARM;
        list_push(&p->warm, s);
        p->n_warm++;
        return;
    }
    make_cold(p, s);
}

/* ---- cold path ----------------------------------------------------------- */

void ax_stack_pool_trim(struct ax_stack_pool *p, size_t keep)
{
    while (p->n_warm > keep) {
        struct ax_stack *s = p->warm.prev; /* least recently released */
        list_unlink(s);
        p->n_warm--;
        make_cold(p, s);
    }
    struct ax_stack_slab *sl = p->slabs;
    while (sl) {
        struct ax_stack_slab *next = sl->next;
        if (sl->n_cold == sl->n) {
            slab_free(p, sl);
            p->n_empty_slabs--;
        }
        sl = next;
    }
}

void ax_stack_pool_destroy(struct ax_stack_pool *p)
{
    struct ax_stack_slab *sl = p->slabs;
    while (sl) {
        struct ax_stack_slab *next = sl->next;
        munmap(sl->base, sl->len);
        free(sl);
        sl = next;
    }
    memset(p, 0, sizeof *p);
}

struct ax_stack *ax_stack_owner_of(const struct ax_stack_pool *p, const void *addr, int *in_guard)
{
    uintptr_t a = (uintptr_t)addr;
    for (const struct ax_stack_slab *sl = p->slabs; sl; sl = sl->next) {
        uintptr_t base = (uintptr_t)sl->base;
        if (a < base || a - base >= sl->len) continue;
        size_t i = (a - base) / p->slot_size;
        if (in_guard) *in_guard = (a - base) % p->slot_size < p->cfg.guard_size;
        return (struct ax_stack *)&sl->stacks[i];
    }
    if (in_guard) *in_guard = 0;
    return NULL;
}

void ax_stack_pool_stats(const struct ax_stack_pool *p, struct ax_stack_stats *st)
{
    st->in_use = p->n_in_use;
    st->cached = p->n_warm;
    st->cold = p->n_cold;
    st->slabs = p->n_slabs;
    st->bytes_mapped = p->bytes_mapped;
    st->guard_mode = p->guard_mode;
    st->guards = p->n_guards;
}
