/* flight.h - the attempts holding a limiter's slots, as one atomic word, so
 * that the slow start's count (limit.c, drop_pending) is exact: a class's
 * limiter (class.c) and config.adaptive_limit's (sched.c) each keep one.
 *
 * A drop waits for the attempts it finds out beside it, each counting back
 * with its own sample. Which to wait for, and which count back, are read
 * from three numbers that change on different threads: the slots held
 * (taken by dispatch, freed by whoever ends the attempt), the samples
 * already in of attempts still holding their slot (an attempt ends with
 * its sample, then frees its slot: finish.c), and the drop count (an
 * attempt stamps it when it takes its slot; "began before the drop" is a
 * stamp older than the count). Kept apart, a reader could see one before
 * and another after a change:
 *  - a drop read the slots while Y, sampled a moment before, still held
 *    its slot: it waited for Y, whose sample was already in, until the
 *    class's timeout (CI of cae5488; test_limit_sampled_held);
 *  - a take counted its slot, a drop read the slots, then the take read
 *    the bumped count: counted by the drop, yet stamped after it, so it
 *    never counted back (class.c said so and bounded it by the timeout).
 * In one word, each step is one atomic read-modify-write that returns the
 * word whole: a take is counted by a drop exactly when its stamp is older,
 * and a drop waits for exactly the attempts that hold a slot with no sample
 * in yet. Each of those counts back with its sample, or without one if it
 * never ran (ax_limit_back); one cancelled while it ran never does, and the
 * timeout ends that wait (limit.c).
 *
 * Layout: bits 0-23 slots held, 24-47 of those already sampled, 48-63 the
 * drop count (wraps; stamps keep its low byte, so an attempt out across a
 * multiple of 256 drops reads as begun after, and the timeout ends the
 * wait). Slots are at most max_concurrency <= AX_MAX_JOBS / 2 = 2^21.
 */
#ifndef AX_FLIGHT_H
#define AX_FLIGHT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define FL_HELD 1ull
#define FL_SAMPLED (1ull << 24)
#define FL_DROP (1ull << 48)
#define FL_MASK 0xffffffull

static inline unsigned fl_held(uint64_t w)
{
    return (unsigned)(w & FL_MASK);
}
static inline unsigned fl_sampled(uint64_t w)
{
    return (unsigned)((w >> 24) & FL_MASK);
}
static inline uint8_t fl_stamp(uint64_t w)
{
    return (uint8_t)(w >> 48);
}

/* A slot taken: its stamp, the drop count as of this take. */
static inline uint8_t fl_take(_Atomic uint64_t *f)
{
    return fl_stamp(atomic_fetch_add_explicit(f, FL_HELD, memory_order_seq_cst));
}

/* An attempt's sample, in the limiter's lock. slot_held: its slot is still
 * held (freed after the sample; the watchdog frees it before). Returns the
 * attempts out and not yet sampled beside it, itself included (the
 * limiter's `inflight`); *before: it began before the last drop (for a
 * drop: before the one ahead of its own; the limiter reads it only for
 * others); *marked: it is now counted as sampled, which its free must
 * undo. With slot_held false (the watchdog freed the slot first) a drop
 * between that free and this sample did not count it, yet *before says
 * so: a sample there counts back once too often. Today none does: such an
 * attempt is timed out (a drop), cancelled or unbegun (no sample). */
static inline unsigned fl_sample(_Atomic uint64_t *f, uint8_t stamp, bool dropped, bool slot_held,
                                 bool *before, bool *marked)
{
    uint64_t add = (dropped ? FL_DROP : 0) + (slot_held ? FL_SAMPLED : 0);
    uint64_t w = add ? atomic_fetch_add_explicit(f, add, memory_order_seq_cst)
                     : atomic_load_explicit(f, memory_order_seq_cst);
    *before = fl_stamp(w) != stamp;
    *marked = slot_held;
    return fl_held(w) - fl_sampled(w) + !slot_held;
}

/* A slot freed; sampled: fl_sample marked it. */
static inline void fl_free(_Atomic uint64_t *f, bool sampled)
{
    atomic_fetch_sub_explicit(f, FL_HELD + (sampled ? FL_SAMPLED : 0), memory_order_seq_cst);
}

#endif
