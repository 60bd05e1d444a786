/* state.h - a job's whole life in one 64-bit word (DESIGN.md §3a).
 *
 * Anchors: Tokio's task/state.rs (one atomic word, changed only by named
 * transitions that tell the caller what to do next) and Go's casgstatus.
 * No other field of a job says where it is: not a bucket flag, not a "live"
 * flag, not a reference count. Every transition below is one CAS on j->sw,
 * and these functions are the only code that writes it (job.c clears it when
 * a slot is freed).
 *
 *   bits  0..3   state                          JS_*
 *   bit   4      JH_END     the terminal path has not finished yet
 *   bit   5      JH_RUN     a worker has it: on its to-start list, or a run
 *                           (coroutine) of its last attempt still lives
 *   bit   6      JH_PARENT  a parent attempt may still join it
 *   bit   7      JF_WAIT    back-off over, waiting for the previous attempt's
 *                           coroutine (JH_RUN) to return before re-queueing
 *   bit   8      JF_RETRY_ARMED  the back-off is in the scheduler's wheel
 *                           (counted in `delayed`); clear between the CAS
 *                           that chose the retry and that lock section
 *   bit   9      JH_HAND    the watchdog ended the attempt and handed the
 *                           rest of its end to the callback pool (linked
 *                           through the job) which has not run it yet
 *   bits 10..19  attempt    0-based (max_retry_cap <= 1000: at most 1001)
 *   bit   20     JF_RAN     RETRYING: the attempt that chose the retry had
 *                           entered its function (RUNNING, not STARTING).
 *                           Its run time reaches j->run_ns only in the lock
 *                           section that arms the back-off; whoever ends the
 *                           job before that (ax_cancel) reads this instead
 *   bit   21     JH_CB      an on_timeout of a task with an on_release is
 *                           queued or running on the callback pool
 *                           (finish.c, callback.c; under s->lock)
 *   bits 22..63  generation the id's sequence: a freed slot (word 0) and a
 *                           reused one match no older id
 *
 * States and who moves them (every arrow is one function here):
 *
 *   (admit) -> QUEUED | DELAYED                         submit.c, s->lock
 *   DELAYED | RETRYING -> QUEUED  (js_requeue)          sched.c, s->lock
 *   QUEUED -> STARTING + JH_RUN   (js_dispatch)         worker.c, s->lock
 *   STARTING -> QUEUED - JH_RUN   (js_unstart)          watchdog, s->lock
 *   STARTING -> RUNNING           (js_begin)            the run, on entry
 *   STARTING | RUNNING -> terminal | RETRYING (js_end_attempt)
 *                                 the worker (return, deadline), the
 *                                 watchdog (deadline of a held worker),
 *                                 ax_cancel / shutdown (CANCELLED)
 *   QUEUED | DELAYED | RETRYING -> TIMED_OUT | CANCELLED (js_end_queued)
 *                                 s->lock: a queued deadline, ax_cancel,
 *                                 shutdown, a back-off past the deadline
 *   clear JH_END / JH_RUN / JH_PARENT (js_release): the last one to clear
 *                                 a hold on a terminal job frees the slot
 *
 * Whoever wins the CAS into a terminal state owns the terminal path
 * (finish.c), which runs exactly once; whoever wins RUNNING -> RETRYING owns
 * the slot release and the back-off. A CAS that loses means someone else
 * decided first: the loser only cleans up what is its own (its coroutine,
 * its timer). The hold bits change independently of the state, so every
 * transition is a load + CAS loop that keeps the bits it does not own.
 */
#ifndef AX_STATE_H
#define AX_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum {
    JS_FREE = 0,
    JS_QUEUED,   /* in its bucket */
    JS_DELAYED,  /* spec.delay_ms not over yet: in the scheduler's timer wheel */
    JS_RETRYING, /* back-off not over yet: in the scheduler's timer wheel */
    JS_STARTING, /* taken by a worker, holds a slot, its function not entered */
    JS_RUNNING,  /* its function was entered */
    JS_SUCCEEDED,
    JS_FAILED,
    JS_TIMED_OUT,
    JS_CANCELLED,
};

#define JS_MASK 0xfull
#define JH_END (1ull << 4)
#define JH_RUN (1ull << 5)
#define JH_PARENT (1ull << 6)
#define JF_WAIT (1ull << 7)
#define JF_RETRY_ARMED (1ull << 8)
#define JH_HAND (1ull << 9)
#define JH_CB (1ull << 21)
#define JH_ALL (JH_END | JH_RUN | JH_PARENT | JH_HAND | JH_CB)
#define JF_RAN (1ull << 20)
#define JS_ATTEMPT_SHIFT 10
#define JS_ATTEMPT_BITS 10
#define JS_ATTEMPT_MASK (((1ull << JS_ATTEMPT_BITS) - 1) << JS_ATTEMPT_SHIFT)
#define JS_GEN_SHIFT 22 /* bit 21 is JH_CB */
_Static_assert(1001 < (1u << JS_ATTEMPT_BITS) && !(JF_RAN & JS_ATTEMPT_MASK),
               "attempts 0..1001 (max_retry_cap 1000, plus the retry chosen) and JF_RAN apart");
#define JS_GEN_BITS 42

#define JS_BIT(st) (1u << (st))
#define JS_LIVE_MASK                                                                           \
    (JS_BIT(JS_QUEUED) | JS_BIT(JS_DELAYED) | JS_BIT(JS_RETRYING) | JS_BIT(JS_STARTING) |      \
     JS_BIT(JS_RUNNING))
#define JS_WAITING_MASK (JS_BIT(JS_QUEUED) | JS_BIT(JS_DELAYED) | JS_BIT(JS_RETRYING))
#define JS_SLOT_MASK (JS_BIT(JS_STARTING) | JS_BIT(JS_RUNNING)) /* holds a concurrency slot */

static inline unsigned js_state(uint64_t w)
{
    return (unsigned)(w & JS_MASK);
}
static inline unsigned js_attempt(uint64_t w)
{
    return (unsigned)((w & JS_ATTEMPT_MASK) >> JS_ATTEMPT_SHIFT);
}
static inline uint64_t js_gen_of_id(uint64_t id, unsigned slot_bits)
{
    return (id >> slot_bits) & ((1ull << JS_GEN_BITS) - 1);
}
static inline uint64_t js_gen(uint64_t w)
{
    return w >> JS_GEN_SHIFT;
}
static inline bool js_is(uint64_t w, unsigned mask)
{
    return (JS_BIT(js_state(w)) & mask) != 0;
}
static inline bool js_terminal(unsigned st)
{
    return st >= JS_SUCCEEDED;
}
/* The word of a new job: generation, attempt 0, the given state and holds. */
static inline uint64_t js_make(uint64_t gen, unsigned attempt, unsigned st, uint64_t holds)
{
    return (gen << JS_GEN_SHIFT) | (((uint64_t)attempt << JS_ATTEMPT_SHIFT) & JS_ATTEMPT_MASK) |
           holds | st;
}

/* The generic step every named transition uses: if j is generation `gen`,
 * attempt `attempt` (or any attempt when attempt < 0) and in one of the
 * states of `from`, move it to state `to` with attempt `new_attempt`
 * (< 0: unchanged), setting `set` and clearing `clr`. Returns true and the
 * word it replaced in *old if it won. */
static inline bool js_move(_Atomic uint64_t *sw, uint64_t gen, long attempt, unsigned from,
                           unsigned to, long new_attempt, uint64_t set, uint64_t clr,
                           uint64_t *old)
{
    uint64_t w = atomic_load_explicit(sw, memory_order_acquire);
    for (;;) {
        if (js_gen(w) != gen || !js_is(w, from) ||
            (attempt >= 0 && js_attempt(w) != (unsigned)attempt))
            return false;
        uint64_t n = (w & ~(JS_MASK | clr)) | set | to;
        if (new_attempt >= 0)
            n = (n & ~JS_ATTEMPT_MASK) |
                (((uint64_t)new_attempt << JS_ATTEMPT_SHIFT) & JS_ATTEMPT_MASK);
        if (atomic_compare_exchange_weak_explicit(sw, &w, n, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            if (old)
                *old = w;
            return true;
        }
    }
}

/* QUEUED -> STARTING, taking the JH_RUN hold for the worker (dispatch;
 * s->lock). A job whose previous coroutine lives is never QUEUED. */
static inline void js_dispatch(_Atomic uint64_t *sw)
{
    /* Under s->lock a QUEUED job's state cannot change, only its holds: one
     * RMW, no loop (QUEUED ^ STARTING flips the state, JH_RUN is clear). */
    atomic_fetch_xor_explicit(sw, (uint64_t)(JS_QUEUED ^ JS_STARTING) | JH_RUN,
                              memory_order_acq_rel);
}
/* STARTING -> QUEUED, dropping JH_RUN: the watchdog hands a job back from a
 * held worker's to-start list (s->lock). */
static inline bool js_unstart(_Atomic uint64_t *sw, uint64_t gen)
{
    return js_move(sw, gen, -1, JS_BIT(JS_STARTING), JS_QUEUED, -1, 0, JH_RUN, NULL);
}
/* STARTING -> RUNNING: the run enters the function. */
static inline bool js_begin(_Atomic uint64_t *sw, uint64_t gen, unsigned attempt)
{
    return js_move(sw, gen, attempt, JS_BIT(JS_STARTING), JS_RUNNING, -1, 0, 0, NULL);
}
/* The end of an attempt: STARTING | RUNNING (this attempt) -> `to`, with
 * `set` (JH_HAND or 0). To RETRYING: the next attempt, and JF_RAN when this
 * one had entered its function. */
static inline bool js_end_attempt_set(_Atomic uint64_t *sw, uint64_t gen, unsigned attempt,
                                      unsigned to, uint64_t set, uint64_t *old)
{
    uint64_t w = atomic_load_explicit(sw, memory_order_acquire);
    for (;;) {
        if (js_gen(w) != gen || !js_is(w, JS_SLOT_MASK) || js_attempt(w) != attempt)
            return false;
        uint64_t n = (w & ~(JS_MASK | JF_RAN)) | set | to;
        if (to == JS_RETRYING)
            n = (n & ~JS_ATTEMPT_MASK) |
                (((uint64_t)(attempt + 1) << JS_ATTEMPT_SHIFT) & JS_ATTEMPT_MASK) |
                (js_state(w) == JS_RUNNING ? JF_RAN : 0);
        if (atomic_compare_exchange_weak_explicit(sw, &w, n, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            if (old)
                *old = w;
            return true;
        }
    }
}
/* STARTING | RUNNING (this attempt) -> `to`: a terminal state, or RETRYING
 * with the next attempt. The winner owns the slot release and what follows. */
static inline bool js_end_attempt(_Atomic uint64_t *sw, uint64_t gen, unsigned attempt,
                                  unsigned to, uint64_t *old)
{
    return js_end_attempt_set(sw, gen, attempt, to, 0, old);
}
/* The same for the watchdog, taking JH_HAND for the callback pool; *old
 * (may be NULL) says whether the function was entered (RUNNING) or not
 * (STARTING). */
static inline bool js_end_attempt_handed(_Atomic uint64_t *sw, uint64_t gen, unsigned attempt,
                                         unsigned to, uint64_t *old)
{
    return js_end_attempt_set(sw, gen, attempt, to, JH_HAND, old);
}
/* QUEUED | DELAYED | RETRYING -> TIMED_OUT or CANCELLED (s->lock). */
static inline bool js_end_queued(_Atomic uint64_t *sw, uint64_t gen, unsigned to, uint64_t *old)
{
    return js_move(sw, gen, -1, JS_WAITING_MASK, to, -1, 0, JF_WAIT | JF_RETRY_ARMED, old);
}
/* DELAYED | RETRYING -> QUEUED at the end of a delay or back-off (s->lock).
 * Returns 1 if queued, 0 if the previous attempt's coroutine still runs (the
 * job stays RETRYING with JF_WAIT: its return re-queues it), -1 if the job
 * is no longer waiting (cancelled meanwhile). */
static inline int js_requeue(_Atomic uint64_t *sw, uint64_t gen, uint64_t *old)
{
    uint64_t w = atomic_load_explicit(sw, memory_order_acquire);
    for (;;) {
        if (js_gen(w) != gen || !js_is(w, JS_BIT(JS_DELAYED) | JS_BIT(JS_RETRYING)))
            return -1;
        bool wait = (w & JH_RUN) != 0;
        uint64_t n = wait ? (w | JF_WAIT)
                          : ((w & ~(JS_MASK | JF_WAIT | JF_RETRY_ARMED | JF_RAN)) | JS_QUEUED);
        if (atomic_compare_exchange_weak_explicit(sw, &w, n, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            if (old)
                *old = w;
            return wait ? 0 : 1;
        }
    }
}
/* Drop one hold. Returns the word after the change: the caller frees the
 * slot when it is terminal with no hold left (js_freeable). */
static inline uint64_t js_release(_Atomic uint64_t *sw, uint64_t hold)
{
    return atomic_fetch_and_explicit(sw, ~hold, memory_order_acq_rel) & ~hold;
}
/* The attempt a result reports for a job ended while waiting (`old` is the
 * word before): a back-off that never ended did not start its attempt. */
static inline unsigned js_report_attempt(uint64_t old)
{
    unsigned a = js_attempt(old);
    return js_state(old) == JS_RETRYING && a > 0 ? a - 1 : a;
}
static inline bool js_freeable(uint64_t w)
{
    return js_terminal(js_state(w)) && !(w & JH_ALL);
}

#endif
