/* wheel.c - hierarchical timing wheel: task timeouts, sleeps, retry back-offs
 * and delayed submits of one worker (DESIGN.md §6).
 *
 * What it owns
 * ------------
 * Armed struct ax_wheel_node's, linked into 6 levels of 64 slots plus one
 * overflow slot. The wheel never allocates, never makes a syscall and takes no
 * lock: the owning worker serialises every call. It never reads a clock
 * either; the worker passes the time in (ax_wheel_advance), which is what
 * lets tests drive it deterministically and lets an idle worker sleep until
 * ax_wheel_next() instead of ticking.
 *
 * Geometry (1 tick = 2^16 ns = 65.5 us in ax, internal.h's AX_TICK_NS; the
 * code only sees uint64_t ticks)
 * --------
 *   level  slot width            level span (64 slots)
 *     0    1 tick   (65.5 us)    4.2 ms
 *     1    64       (4.2 ms)     268 ms
 *     2    4096     (268 ms)     17.2 s
 *     3    2^18     (17.2 s)     18.3 min
 *     4    2^24     (18.3 min)   19.5 h
 *     5    2^30     (19.5 h)     52 days   (2^36 ticks)
 *   overflow: one slot for anything beyond the current 2^36-tick window.
 * (Until issue 10 a tick was 1 ms: the same levels spanned 64 ms .. 2.2
 * years, but every sleep was rounded up to a whole millisecond.)
 *
 * Placement is a pure function of (expiry, now): take the highest bit in
 * which expiry and now differ (at least bit 5); its 6-bit group is the level
 * and the expiry's 6 bits in that group are the slot. So a node sits at level
 * L exactly when it lies in the same 64^(L+1)-aligned block as `now` but not
 * in the same 64^L-aligned one. This is the scheme Tokio's driver uses; it is
 * not "delta / width" bucketing: a timer 1 tick away can sit in level 1 when
 * now is the last tick of a 64-block. The level's span is therefore aligned
 * to now, not measured from it, which is what makes the next three
 * invariants hold. If the highest differing bit is 36 or above, the node goes
 * to the overflow slot ("clamped into the top"): it is re-filed once the
 * clock leaves the current 2^36-tick window (2.2 years of ticks), then lands
 * in a real level or back in overflow. It is never dropped, never fires
 * early, and a single huge advance re-files it once, not once per window.
 *
 * Invariants (between calls)
 * ----------
 *  I1. Every armed node sits in slot index(n->expiry, w->now) as defined
 *      above, and n->expiry >= w->now. (add clamps a past expiry to now.)
 *  I2. Within level L > 0 every occupied slot is strictly after now's own
 *      slot at that level; in level 0 at or after it. Hence no level ever
 *      wraps: slot order is time order, and the first occupied slot of a level
 *      is ctz(occupied[L]) - no rotate, no modulo.
 *  I3. Every slot of level L starts after every slot of level L-1 ends
 *      (level L-1 covers the rest of now's current 64^L block, level L only
 *      later blocks). So the earliest work is in the lowest non-empty level:
 *      ax_wheel_next() is a scan of 7 words plus one ctz.
 *  I4. Bit s of occupied[L] is set iff slot (L, s) is non-empty; del keeps it
 *      exact, so a cancelled timeout never causes a spurious wake-up.
 *  I5. Each slot is an hlist (head pointer; node->pprev points at whatever
 *      points at the node), newest node first.
 *
 * How time moves (ax_wheel_advance)
 * ---------------------------------
 * Repeatedly take the earliest non-empty slot (I3); if its start tick is
 * beyond the target, stop. Otherwise set w->now to that start tick and empty
 * the slot: a level-0 slot holds nodes of exactly one expiry, which are
 * handed out; an upper slot is "cascaded": each node is re-filed by I1 with
 * the new now, which puts it in a strictly lower level (it now shares the
 * slot's block with now). The loop visits only non-empty slots, so an
 * advance of hours over a handful of timers costs a handful of iterations,
 * never one per tick, and no tick is ever scanned while the worker sleeps.
 *
 * Ordering guarantee (tested)
 * --------
 * Nodes come out in non-decreasing expiry, and nodes of equal expiry in the
 * order they were added (FIFO), including nodes added with a past expiry,
 * which are due "now" and come out first. Why FIFO holds with LIFO slots: by
 * I1 all armed nodes of one expiry always share one slot, so no cascade can
 * interleave them with older or newer ones. Each slot list is newest first;
 * a cascade re-files in list order by appending, into slots that are empty
 * (everything below the cascading level is, by I3), so they stay newest
 * first; expiring reverses a level-0 list to oldest first on its way out.
 * Expiry is exact: a node is handed out by the first advance whose target is
 * >= its expiry - never earlier, never later. (Linux instead fires
 * upper-level timers up to 1/8 of their timeout late to avoid cascading; a
 * task deadline in ax should not drift by seconds, so we cascade.)
 *
 * Complexity and numbers
 * ----------------------
 *  add     O(1): xor, bsr, a divide-by-6 multiply, 4 stores, one bit set.
 *  del     O(1): unlink, plus one bit clear when the slot empties.
 *  next    O(levels): at most 7 words read, one ctz.
 *  advance O(expired + cascaded + non-empty slots crossed). A node is
 *          cascaded at most once per level, so at most 6 times in its life
 *          (plus once per 2.2 years of ticks if it lives in overflow). A
 *          task timeout that is cancelled before it is due - the common case -
 *          is never cascaded at all: add/del never move other nodes.
 *  memory  24 bytes per node (inside the user's struct), 3.2 KB per wheel,
 *          3 KB of stack in advance (cascade cursors).
 *
 * Numbers (bench/bench_wheel.c, gcc -O2, 2-core AMD EPYC VM, median of 5):
 *   add+del of one timeout, 10k others pending      ~5-8 ns the pair
 *   insert / cancel per op, 10k .. 1M pending       3-5 / 2-7 ns (flat)
 *   expire per timer (cascades included), 10k..1M   ~20 .. 7 ns when node
 *          memory order follows expiry order; with nodes scattered over
 *          24 MB (1M random expiries) ~300 ns: each cascade walk is a chain
 *          of cache misses. That is why a cascade walks its list once.
 *
 * Trade-offs
 * ----------
 *  - Exact firing costs cascades (bounded, see above) where Linux accepts
 *    slack instead (and needs no ordering rule; ax promises FIFO).
 *  - No sorted structure (heap, skip list): O(log n) arm/cancel and a cache
 *    miss per level would dominate the "arm + cancel a timeout" path that
 *    every task pays; the wheel pays only on the rare timer that survives.
 *  - ax_wheel_next may report an upper level's cascade tick rather than the
 *    real expiry, so a sleeping worker can wake once per level on its way
 *    to a far timer (at most 6 wake-ups, plus one per 52-day window for a
 *    timer beyond the first: ax_sleep's cap of a year costs at most 13) -
 *    the price of O(levels) next without scanning slot contents.
 *  - The node has no room for its slot index, so del finds the slot only
 *    when it empties, by recognising that pprev points into w->slot[]; this
 *    also means a wheel with armed nodes must not be moved in memory.
 *
 * Hot functions: ax_wheel_add, ax_wheel_del (and the inline
 * ax_wheel_node_armed). Warm: ax_wheel_next, ax_wheel_advance.
 */
#include "wheel.h"

#include <assert.h>
#include <string.h>

#define SLOT_MASK ((uint64_t)AX_WHEEL_SLOTS - 1)
#define OVERFLOW_LEVEL AX_WHEEL_LEVELS
#define OVERFLOW_IDX (AX_WHEEL_LEVELS * AX_WHEEL_SLOTS)

/* Hot. Flat slot index (level * 64 + slot, or OVERFLOW_IDX) for expiry at
 * time now, expiry >= now. Straight-line apart from the overflow choice, a
 * branch that is almost never taken (or a cmov, depending on the compiler). */
static inline unsigned wheel_index(uint64_t expiry, uint64_t now)
{
    unsigned msb = 63u - (unsigned)__builtin_clzll((expiry ^ now) | SLOT_MASK);
    unsigned lvl = msb / AX_WHEEL_LEVEL_BITS; /* 0..10; shift below stays < 64 */
    unsigned s = (unsigned)((expiry >> (lvl * AX_WHEEL_LEVEL_BITS)) & SLOT_MASK);
    unsigned idx = lvl * AX_WHEEL_SLOTS + s;
    return lvl < AX_WHEEL_LEVELS ? idx : OVERFLOW_IDX;
}

/* Hot. Push n at the head of slot idx and mark the slot occupied. */
static inline void slot_push(struct ax_wheel *w, struct ax_wheel_node *n, unsigned idx)
{
    struct ax_wheel_node **head = &w->slot[idx];
    struct ax_wheel_node *first = *head;

    n->next = first;
    n->pprev = head;
    if (first) first->pprev = &n->next;
    *head = n;
    w->occupied[idx / AX_WHEEL_SLOTS] |= (uint64_t)1 << (idx % AX_WHEEL_SLOTS);
}

/* Tick at which slot s of level lvl (< AX_WHEEL_LEVELS) begins, given I2. */
static inline uint64_t slot_start(uint64_t now, unsigned lvl, unsigned s)
{
    unsigned shift = lvl * AX_WHEEL_LEVEL_BITS;
    uint64_t block = ((uint64_t)1 << (shift + AX_WHEEL_LEVEL_BITS)) - 1;

    return (now & ~block) | ((uint64_t)s << shift);
}

/* Tick at which the overflow slot is re-filed: the start of the next
 * 2^36-tick window. Only called while overflow is non-empty, which implies
 * now is not in the last window, so this cannot wrap. */
static inline uint64_t overflow_start(uint64_t now)
{
    return ((now >> AX_WHEEL_RANGE_BITS) + 1) << AX_WHEEL_RANGE_BITS;
}

void ax_wheel_init(struct ax_wheel *w, uint64_t now)
{
    memset(w, 0, sizeof *w);
    w->now = now;
}

/* Hot. */
void ax_wheel_add(struct ax_wheel *w, struct ax_wheel_node *n, uint64_t expiry)
{
    uint64_t now = w->now;

    assert(n->pprev == NULL && "ax_wheel_add: node already armed");
    expiry = expiry < now ? now : expiry; /* past: due at the next advance */
    n->expiry = expiry;
    slot_push(w, n, wheel_index(expiry, now));
    w->count++;
}

/* Hot. */
void ax_wheel_del(struct ax_wheel *w, struct ax_wheel_node *n)
{
    struct ax_wheel_node **pprev = n->pprev, *next = n->next;

    if (!pprev) return;
    *pprev = next;
    if (next) {
        next->pprev = pprev;
    } else {
        /* n was last. If it was also first, pprev is the slot head itself
         * and the slot is now empty: keep I4 exact. */
        size_t off = (size_t)((uintptr_t)pprev - (uintptr_t)w->slot);
        if (off < sizeof w->slot) {
            size_t idx = off / sizeof w->slot[0];
            w->occupied[idx / AX_WHEEL_SLOTS] &= ~((uint64_t)1 << (idx % AX_WHEEL_SLOTS));
        }
    }
    n->next = NULL;
    n->pprev = NULL;
    w->count--;
}

/* Earliest non-empty slot (by I3) and its start tick; false if empty. */
static bool wheel_first(const struct ax_wheel *w, unsigned *idx, uint64_t *at)
{
    for (unsigned lvl = 0; lvl < AX_WHEEL_LEVELS; lvl++) {
        uint64_t occ = w->occupied[lvl];
        if (occ) {
            unsigned s = (unsigned)__builtin_ctzll(occ);
            *idx = lvl * AX_WHEEL_SLOTS + s;
            *at = slot_start(w->now, lvl, s);
            return true;
        }
    }
    if (w->occupied[OVERFLOW_LEVEL]) {
        *idx = OVERFLOW_IDX;
        *at = overflow_start(w->now);
        return true;
    }
    return false;
}

uint64_t ax_wheel_next(const struct ax_wheel *w)
{
    unsigned idx;
    uint64_t at;

    return wheel_first(w, &idx, &at) ? at : UINT64_MAX;
}

/* Re-file a detached slot list (newest first) by I1 at time `at`, in one
 * pass over the nodes. Every node lands in a level below `lvl` (or back in
 * the overflow slot, which was just emptied), and all of those slots are
 * empty on entry (I3: lower levels hold earlier work, already done). So
 * appending at each destination's tail, in list order, keeps every
 * destination newest first, which the FIFO guarantee needs, without a
 * separate reversal pass: at 1M pending timers the walk is a chain of cache
 * misses and a second walk would nearly double its cost. */
static void cascade(struct ax_wheel *w, struct ax_wheel_node *list, uint64_t at, unsigned lvl)
{
    struct ax_wheel_node *last[AX_WHEEL_NSLOTS]; /* valid only for slots filled here */

    for (unsigned l = 0; l < lvl && l < AX_WHEEL_LEVELS; l++)
        assert(w->occupied[l] == 0);
    (void)lvl;
    while (list) {
        struct ax_wheel_node *n = list, **link;
        unsigned d = wheel_index(n->expiry, at);

        list = n->next;
        if (w->slot[d]) {
            link = &last[d]->next;
        } else {
            link = &w->slot[d];
            w->occupied[d / AX_WHEEL_SLOTS] |= (uint64_t)1 << (d % AX_WHEEL_SLOTS);
        }
        *link = n;
        n->pprev = link;
        n->next = NULL;
        last[d] = n;
    }
}

size_t ax_wheel_advance(struct ax_wheel *w, uint64_t now, struct ax_wheel_node **out)
{
    struct ax_wheel_node **tail = out;
    size_t fired = 0;
    unsigned idx;
    uint64_t at;

    while (*tail)
        tail = &(*tail)->next;
    if (now < w->now) now = w->now;

    while (wheel_first(w, &idx, &at) && at <= now) {
        struct ax_wheel_node *list = w->slot[idx], *n;

        w->now = at; /* I1 must hold for the re-filing below */
        w->slot[idx] = NULL;
        w->occupied[idx / AX_WHEEL_SLOTS] &= ~((uint64_t)1 << (idx % AX_WHEEL_SLOTS));
        w->visits++;

        if (idx < AX_WHEEL_SLOTS) {
            /* Level 0: every node here has expiry == at. Reverse to oldest
             * first (FIFO), un-arm, and splice onto the output. */
            struct ax_wheel_node *last = list, *rev = NULL;
            while (list) {
                n = list;
                list = n->next;
                n->next = rev;
                n->pprev = NULL;
                rev = n;
                fired++;
            }
            *tail = rev;
            tail = &last->next;
        } else {
            if (idx == OVERFLOW_IDX) {
                /* Levels 0..5 are empty here (I3) and no overflow node is
                 * due before `min`, so the clock may jump straight to
                 * min(target, min) instead of stepping one 2^36 window at a
                 * time: a jump of centuries costs one pass, and every node
                 * is re-filed exactly by I1 (some back into overflow). */
                uint64_t min = UINT64_MAX;
                for (n = list; n; n = n->next)
                    min = n->expiry < min ? n->expiry : min;
                at = min < now ? min : now;
                w->now = at;
            }
            cascade(w, list, at, idx / AX_WHEEL_SLOTS);
        }
    }
    w->now = now;
    w->count -= fired;
    return fired;
}

size_t ax_wheel_count(const struct ax_wheel *w)
{
    return w->count;
}
