/* wheel.h - hierarchical timing wheel (internal; see wheel.c for the design).
 *
 * One wheel per worker. The caller serialises every call (no locks inside),
 * nothing here allocates or makes a syscall. Ticks are plain uint64_t; ax
 * uses 1 tick = 2^16 ns (AX_TICK_NS in internal.h), the wheel itself does
 * not care.
 *
 * Hot: ax_wheel_add, ax_wheel_del, ax_wheel_node_armed (arm/cancel of a task
 * timeout on every dispatch). Warm: ax_wheel_next, ax_wheel_advance (once per
 * worker loop iteration).
 *
 * A wheel holds pointers into itself once a node is armed: do not move or
 * copy a struct ax_wheel while it has armed nodes (an empty one may be moved).
 */
#ifndef AX_WHEEL_H
#define AX_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AX_WHEEL_LEVEL_BITS 6                      /* log2(slots per level) */
#define AX_WHEEL_SLOTS (1u << AX_WHEEL_LEVEL_BITS) /* 64 */
#define AX_WHEEL_LEVELS 6                          /* 64^6 ticks = 52 days at 65.5 us */
#define AX_WHEEL_RANGE_BITS (AX_WHEEL_LEVEL_BITS * AX_WHEEL_LEVELS) /* 36 */
/* Level AX_WHEEL_LEVELS is the overflow bucket: one slot holding every timer
 * that lies beyond the current 2^36-tick window; it is re-cascaded whenever
 * time crosses into the next window. */
#define AX_WHEEL_NSLOTS (AX_WHEEL_LEVELS * AX_WHEEL_SLOTS + 1)

/* Embed in your own struct; zero-initialised = not armed. While armed the
 * fields belong to the wheel; `expiry` may be read (it is the tick the wheel
 * fires the node at: the expiry passed to ax_wheel_add, raised to the wheel's
 * current time if it was already in the past). After the node is returned by
 * ax_wheel_advance, `next` links the expired list and the node is un-armed. */
struct ax_wheel_node {
    struct ax_wheel_node *next, **pprev;
    uint64_t expiry; /* absolute tick */
};

struct ax_wheel {
    uint64_t now;                                /* every expiry < now has been handed out */
    size_t count;                                /* armed nodes */
    uint64_t occupied[AX_WHEEL_LEVELS + 1];      /* bit s of [l]: slot (l, s) non-empty */
    uint64_t visits;                             /* slots emptied by advance, ever (stats) */
    struct ax_wheel_node *slot[AX_WHEEL_NSLOTS]; /* list heads, newest node first */
};

/* Start an empty wheel whose clock reads `now`. */
void ax_wheel_init(struct ax_wheel *w, uint64_t now);

/* Hot. Arm n to fire at absolute tick `expiry`; expiry <= w->now fires at the
 * next ax_wheel_advance (n->expiry is then set to w->now). n must not be
 * armed. O(1), no allocation. */
void ax_wheel_add(struct ax_wheel *w, struct ax_wheel_node *n, uint64_t expiry);

/* Hot. Disarm n. O(1); a no-op if n is not armed. n must be armed in w (or
 * in no wheel at all). */
void ax_wheel_del(struct ax_wheel *w, struct ax_wheel_node *n);

/* Hot. True while n sits in a wheel. */
static inline bool ax_wheel_node_armed(const struct ax_wheel_node *n)
{
    return n->pprev != NULL;
}

/* Earliest tick at which ax_wheel_advance may have work: never later than the
 * earliest armed expiry, possibly earlier (the tick at which an upper level
 * must cascade). w->now if something is already due; UINT64_MAX when the wheel
 * is empty. O(levels). */
uint64_t ax_wheel_next(const struct ax_wheel *w);

/* Move the clock to `now` (a value below w->now is taken as w->now: time never
 * runs backwards) and append every node whose expiry <= now to the singly
 * linked list *out (NULL-terminated, linked through n->next; *out is usually
 * NULL, a non-empty list is walked to its tail first). Returned nodes are
 * un-armed and come out in non-decreasing expiry order, nodes of equal expiry
 * in the order they were added. Cost is proportional to the number of
 * non-empty slots crossed, never to the number of ticks crossed. Returns the
 * number of nodes appended. */
size_t ax_wheel_advance(struct ax_wheel *w, uint64_t now, struct ax_wheel_node **out);

/* Number of armed nodes. O(1). */
size_t ax_wheel_count(const struct ax_wheel *w);

#endif
