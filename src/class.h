/* class.h - task classes and their overload controls (class.c; DESIGN.md
 * §11). A class is created by ax_class_register and never freed before the
 * scheduler: a job refers to it by its index (j->cls), and readers reach it
 * through s->classes[] without a lock once nclasses covers it.
 *
 * Who touches what:
 *  - flight (overload/flight.h): its slots held, +1 by dispatch (s->lock),
 *    -1 by whoever frees the slot (class_slot_free, any thread), with the
 *    samples in and the drop count the slow start reads beside them.
 *    Dispatch checks the slots against `limit` under s->lock, so dispatch
 *    never takes more than the limit; a lowered limit drains as attempts
 *    end.
 *  - lim, bud, brk (the controllers, overload/): c->lk, held for a few
 *    hundred instructions at the end of an attempt and at a retry decision;
 *    s->lock may be held when c->lk is taken, never the other way round.
 *  - limit, brk_state: published copies of the controllers' outputs, read
 *    without c->lk on the dispatch path.
 *  - queued, park[], nparked: s->lock (bucket push / remove, park).
 */
#ifndef AX_CLASS_H
#define AX_CLASS_H

#include "overload/flight.h"
#include "overload/overload.h"

struct ax_class_rt {
    char name[AX_CLASS_NAME_MAX];
    ax_class_config cfg;           /* as registered (cfg.name points at name) */
    unsigned id;
    _Atomic uint64_t timeout_ms;   /* ax_class_set_timeout changes it */
    _Atomic uint64_t flight;       /* attempts holding a slot, HIGH ones included (flight.h) */
    _Atomic unsigned limit;
    _Atomic int brk_state;         /* AX_BRK_* as last seen under lk */
    uint64_t queued;               /* s->lock: in a bucket, parked included */
    /* Parked (s->lock): queued jobs dispatch found while the class was at
     * its limit (or out of half-open probes), one list per priority in
     * queue order, out of their bucket's list so the jobs behind them are
     * not held up. They stay QUEUED and counted in their bucket's n; the
     * pick (sched.c) takes the oldest startable job of a priority from its
     * bucket's list and the park lists' heads alike. */
    struct {
        struct job *head, *tail;
    } park[AX_PRIO_COUNT];
    _Atomic unsigned nparked;      /* written under s->lock, read by finishers */
    pthread_mutex_t lk;
    struct ax_limit lim;
    struct ax_budget bud;
    struct ax_breaker brk;
    bool limit_follows_cap;        /* limit_max 0: the scheduler's current cap (lk) */
    uint64_t rtt_short_ns;         /* moving average of run times, lk */
    _Atomic uint64_t submitted, started, succeeded, failed, timed_out, cancelled;
    _Atomic uint64_t expired, open_refused, retries_denied, retries_allowed;
};

/* Attempts of c holding a slot. */
static inline unsigned class_in_flight(struct ax_class_rt *c, memory_order mo)
{
    return fl_held(atomic_load_explicit(&c->flight, mo));
}

/* j is HIGH in a class with protect_high: no class limit, no breaker, no
 * retry budget hold it back (the cap, the quotas and its deadlines do). */
static inline bool class_high_lane(const struct ax_class_rt *c, const struct job *j)
{
    return c->cfg.protect_high && j->prio == AX_PRIO_HIGH;
}

static inline struct ax_class_rt *class_get(struct ax_sched *s, unsigned id)
{
    if (id == 0 || id > atomic_load_explicit(&s->nclasses, memory_order_acquire))
        return NULL;
    return s->classes[id];
}

/* Validate spec.class_id and spec.overrides and fill *out with the
 * class's defaults where the spec leaves them; *c = NULL without a class
 * (then *out is not written). */
int class_resolve_spec(struct ax_sched *s, const ax_spec *in, ax_spec *out,
                       struct ax_class_rt **c);
/* The breaker is open: a submission is refused (AX_EOPEN; the detail is
 * set). */
int class_refuse_open(struct ax_class_rt *c, uint64_t now);
bool class_open_now(struct ax_class_rt *c, uint64_t now);

enum { CLASS_START, CLASS_BLOCKED, CLASS_BLOCKED_PROBE, CLASS_END_EXPIRED, CLASS_END_OPEN };
/* j (of class c) has waited in its bucket past the queue-time budget. */
bool class_queue_expired(const struct ax_class_rt *c, const struct job *j, uint64_t now);
uint64_t class_queue_budget_ns(const struct ax_class_rt *c, const struct job *j);
/* Could queued job j (of class c) start now? s->lock held; takes nothing:
 * CLASS_BLOCKED (at its limit), CLASS_BLOCKED_PROBE (half-open, its probes
 * all out), or it must end (expired, breaker open). */
int class_check_locked(struct ax_sched *s, struct ax_class_rt *c, const struct job *j,
                       uint64_t now);
/* j starts: its in_flight place, and a half-open permit (j->probe). After a
 * CLASS_START of class_check_locked in the same lock section. */
void class_take_locked(struct ax_sched *s, struct ax_class_rt *c, struct job *j, uint64_t now);
/* The slot of an attempt of j's class is free (any thread). */
void class_slot_free(struct ax_sched *s, struct job *j);

/* Every release of a slot goes through here: the class's place first. */
static inline void job_slot_free(struct ax_sched *s, struct job *j, bool wake)
{
    if (j->cls)
        class_slot_free(s, j);
    if (AX_UNLIKELY(s->cfg.adaptive_limit)) {
        bool sampled = j->fl_marks & FLM_ALIM;
        if (sampled)
            j->fl_marks &= (uint8_t)~FLM_ALIM;
        fl_free(&s->alim_flight, sampled);
    }
    sched_slot_free(s, wake);
}

/* A job that held a class place went back to its bucket without running
 * (the watchdog's hand-back): its place and its probe permit return. */
void class_unstart(struct ax_sched *s, struct job *j);
/* j holds its class place and will never run: back for a drop that
 * counted it (class.c limit_unran), before its slot is freed. */
void class_unran(struct ax_sched *s, struct job *j);

/* j holds its slot and will never run, and the slot is about to be freed
 * by the watchdog (a held worker's unbegun attempt past its deadline, or a
 * to-start job at shutdown): the slow start's count takes it back now,
 * while the count is exact (review of f7084f9: once freed, a drop that
 * counted it and one that did not look alike, so the finisher does not). */
static inline void job_unran(struct ax_sched *s, struct job *j)
{
    if (j->cls)
        class_unran(s, j);
    if (AX_UNLIKELY(s->cfg.adaptive_limit))
        sched_adaptive_unran(s, j);
}
/* The function of j's attempt was entered (counted where ax_stats counts). */
void class_started(struct ax_sched *s, struct job *j);
/* An attempt that held a slot ended. If it ran (ran: its function was
 * entered) and was not cancelled, its latency feeds the limiter and its
 * outcome the breaker; otherwise only a probe permit it held returns.
 * slot_freed: its slot was freed before this (the watchdog's path), so
 * in_flight no longer counts it. */
void class_attempt_done(struct ax_sched *s, struct job *j, unsigned state, bool ran,
                        uint64_t run_ns, uint64_t now, bool slot_freed);
/* The retry budget has room for j's retry now (peek: nothing is spent). */
bool class_retry_room(struct ax_sched *s, const struct job *j, uint64_t now);
/* The winner of the CAS that ended an attempt (old: the word it replaced):
 * a retry (to == RETRYING) reserves the budget; denied (the budget refused
 * it in finish_decide) marks the job for its terminal text. Only the
 * winner: losers decide too. */
void class_retry_decided(struct ax_sched *s, struct job *j, unsigned to, bool denied,
                         uint64_t old);
/* The winner of a CAS that ended a job (old: the word it replaced) before
 * a retry's function was entered: the retry's reservation goes back. */
void class_retry_dropped(struct ax_sched *s, struct job *j, uint64_t old);
void class_count_terminal(struct ax_sched *s, struct job *j, unsigned state);
/* The text of why dispatch ended j (END_EXPIRED, END_OPEN) or why its retry
 * was denied (END_BUDGET, END_THROTTLED). */
void class_end_text(struct ax_sched *s, const struct job *j, char *buf, size_t len);
/* Finish a job its class ended before it could start (END_EXPIRED: queue-
 * time budget; END_OPEN: breaker open): FAILED with AX_EEXPIRED / AX_EOPEN
 * and the class's text, counted in the class. Whoever expired the
 * scheduler's wheel or dispatched: a worker (w), or the callback pool for
 * the watchdog (w NULL). attempt and give as finish_attempt's. */
void class_finish_unstarted(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                            uint64_t give);
/* ax_set_max_concurrency: classes whose limit_max is 0 follow the new cap. */
void class_cap_changed(struct ax_sched *s, unsigned cap);
/* Room may have appeared in class c: if jobs are parked, a worker looks. */
void class_room_made(struct ax_sched *s, struct ax_class_rt *c);
void class_free_all(struct ax_sched *s);

#endif
