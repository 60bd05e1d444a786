/* finish.c - the end of an attempt and the one terminal path of a job
 * (seed §3.1 state machine, §3.4 handleTimeout, §5.5 back-off; DESIGN.md §3a).
 *
 * Whoever wins the CAS that ends an attempt (state.h: js_end_attempt or
 * js_end_queued) calls finish_attempt exactly once. The outcome was chosen
 * before that CAS (finish_decide), so a retry is part of the same atomic
 * step as the end of the attempt: a concurrent ax_cancel either sees
 * RUNNING (and its own CAS decides) or RETRYING (and cancels the retry); it
 * can never see a terminal state that later turns into a new attempt.
 *
 * The winner, on its own thread:
 *   1. releases the slot (at once, without the lock) if the attempt held one;
 *   2. posts on_timeout to the callback pool (never run here);
 *   3. either schedules the back-off (RETRYING: the scheduler's wheel,
 *      capped at the absolute deadline) or runs the terminal path.
 *
 * The terminal path (finish_terminal) is the only place a job ends: counters,
 * load, the terminal event, a child's result for its join (its parent is
 * woken once the child lets go: join.c), on_done, and the release of the
 * JH_END hold. It runs exactly once per job,
 * on the thread that won: the owning worker (return, deadline, a deadline
 * that passed while queued), the caller of ax_cancel / ax_shutdown, or the
 * callback pool's finisher thread ("ax-finish") for attempts the watchdog
 * ended while their worker was held. Never on the watchdog, never in a
 * signal handler, never under a lock.
 */
#include "internal.h"
#include "obs/prom.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *deadline_text(const struct job *j, char *buf, size_t len)
{
    if (j->end_why != END_DEADLINE_RETRY && j->end_why != END_DEADLINE_RETRY_TIMED)
        return "deadline passed before it could run";
    /* The ended word keeps the attempt field of the retry (0-based, as
     * RETRYING and QUEUED both hold it): the failed one before it is that
     * figure counted from 1. j->handoff is the reported attempt, which is
     * the retry itself once it was QUEUED (it said "attempt 2 failed" when
     * attempt 1 had). */
    unsigned failed = js_attempt(atomic_load_explicit(&j->sw, memory_order_acquire));
    snprintf(buf, len, "deadline passed while its retry waited (attempt %u %s)", failed,
             j->end_why == END_DEADLINE_RETRY_TIMED ? "timed out" : "failed");
    return buf;
}

/* result_fill with the run time given, not read from the job: on_timeout's
 * result, made while a cancel that won the retry's end may be writing
 * j->run_ns (review: TSan). */
static void result_fill_run(const struct job *j, unsigned attempt, unsigned state, int code,
                            const char *err, uint64_t run_ns, ax_result *r);

void result_fill(const struct job *j, unsigned attempt, unsigned state, int code, const char *err,
                 ax_result *r)
{
    result_fill_run(j, attempt, state, code, err, j->run_ns, r);
}

static void result_fill_run(const struct job *j, unsigned attempt, unsigned state, int code,
                            const char *err, uint64_t run_ns, ax_result *r)
{
    r->id = j->id;
    trace_format(j, r->trace_id);
    r->priority = (ax_priority)j->prio;
    r->state = js_public(state);
    r->attempts = attempt + 1u;
    r->code = code;
    r->wait_ns = j->wait_ns;
    r->run_ns = run_ns;
    r->class_id = j->cls;
    if (!err || !*err) { /* every success */
        r->error[0] = 0;
        return;
    }
    size_t n = strnlen(err, sizeof r->error - 1);
    if (n == sizeof r->error - 1 && err[n]) /* cut: never inside a character */
        n = utf8_cut(err, n);
    memcpy(r->error, err, n);
    r->error[n] = 0;
}

static inline void count_terminal(struct ax_sched *s, struct worker *w, const struct job *j,
                                  unsigned state)
{
    /* A terminal state: 0 .. WC_ENDS - 1 (anything else counted cancelled,
     * as the switch this replaced did). */
    unsigned k = state - JS_SUCCEEDED < WC_ENDS ? state - JS_SUCCEEDED : WC_ENDS - 1;
    if (w)
        wc_inc(&w->counts.ended[j->prio][k]);
    else
        atomic_fetch_add(&s->shared_counts.ended[j->prio][k], 1);
}

static unsigned terminal_event(unsigned state)
{
    switch (state) {
    case JS_SUCCEEDED: return AX_EV_SUCCEEDED;
    case JS_FAILED: return AX_EV_FAILED;
    case JS_TIMED_OUT: return AX_EV_TIMED_OUT;
    default: return AX_EV_CANCELLED;
    }
}

unsigned finish_decide(struct ax_sched *s, const struct job *j, unsigned attempt, unsigned state,
                       int code, uint64_t now, bool *denied)
{
    *denied = false;
    if ((state == JS_FAILED || state == JS_TIMED_OUT) && attempt < j->max_retry &&
        code != AX_ENOMEM && !(j->deadline_ns && now >= j->deadline_ns) &&
        atomic_load_explicit(&s->retry_enabled[j->prio], memory_order_relaxed) &&
        !atomic_load_explicit(&s->closing, memory_order_relaxed)) {
        /* Last: the class's retry budget, peeked. Whoever wins the CAS that
         * follows spends it or records the denial (class_retry_decided):
         * the losers' decisions must leave no trace. */
        if (AX_LIKELY(!j->cls) || class_retry_room(s, j, now))
            return JS_RETRYING;
        *denied = true;
    }
    return state;
}

/* finish_decide's rules that neither the switch nor shutdown decides: not
 * out of memory, the deadline ahead, no class budget's denial; and the
 * attempt was one dispatch started, not one its class ended in its bucket
 * (queue-time budget, breaker open: never retried; review: they were
 * told "retries ... are switched off"). */
static bool retry_could_follow(const struct job *j, int code)
{
    return code != AX_ENOMEM && !(j->deadline_ns && now_ns() >= j->deadline_ns) &&
           j->end_why < END_BUDGET && j->end_why != END_EXPIRED && j->end_why != END_OPEN;
}

/* A failed attempt with retries left ends the task: was shutting down the
 * one reason (finish_decide's other rules held)? Read again at the end, off
 * the hot path: closing never goes back, so if it is set now and every
 * other rule still allows a retry, it is what stopped this one. */
static bool shutdown_stopped_retry(struct ax_sched *s, const struct job *j, int code)
{
    return atomic_load_explicit(&s->closing, memory_order_relaxed) &&
           atomic_load_explicit(&s->retry_enabled[j->prio], memory_order_relaxed) &&
           retry_could_follow(j, code);
}

/* The same for the priority's switch (ax_set_retry_enabled): off, and no
 * other rule stood in the way. Turned on again since: no reason given. */
static bool retry_switched_off(struct ax_sched *s, const struct job *j, int code)
{
    return !atomic_load_explicit(&s->retry_enabled[j->prio], memory_order_relaxed) &&
           retry_could_follow(j, code);
}

/* err (or "failed"), then "; not retried: " and reason, in why: the reason
 * must survive ax_result.error's bound (AX_ERROR_MAX), so err gives way
 * first, cut between characters and marked "...". */
static const char *not_retried(char *why, size_t cap, const char *err, const char *reason)
{
    const char *own = err && *err ? err : "failed";
    size_t room = AX_ERROR_MAX - 1, tail = strlen(reason) + strlen("; not retried: ");
    size_t keep = strlen(own);
    bool cut = tail < room && keep > room - tail;
    if (cut)
        keep = utf8_cut(own, room - tail >= 3 ? room - tail - 3 : 0);
    snprintf(why, cap, "%.*s%s; not retried: %s", (int)keep, own, cut ? "..." : "", reason);
    return why;
}

/* Hot: the worker's own end of a task goes finish_running -> attempt_end ->
 * terminal_path in one call; the two are inlined there (profile: the
 * calls and their eight arguments cost ~80 instructions per task). */
#define FIN_INLINE static inline __attribute__((always_inline))

FIN_INLINE void terminal_path(struct ax_sched *s, struct worker *w, struct job *j,
                              unsigned attempt, unsigned state, int code, const char *err,
                              uint64_t give)
{
    ax_result r;
    count_terminal(s, w, j, state);
    char why[AX_ERROR_MAX * 2];
    if (AX_UNLIKELY(j->cls)) {
        class_count_terminal(s, j, state);
        if (j->end_why >= END_BUDGET && state != JS_CANCELLED) {
            /* The attempt's own error, then why it was not retried. */
            /* Why it was not retried must survive ax_result.error's bound
             * (AX_ERROR_MAX): the attempt's error gives way ("...") first. */
            char reason[AX_ERROR_MAX];
            class_end_text(s, j, reason, sizeof reason);
            err = not_retried(why, sizeof why, err, reason);
        }
    }
    if (AX_UNLIKELY((state == JS_FAILED || state == JS_TIMED_OUT) && attempt < j->max_retry) &&
        err != why) {
        /* Say why, as a class's budget does (trials saw only "task returned 5"). */
        const char *reason = shutdown_stopped_retry(s, j, code) ? "the scheduler is shutting down"
                             : retry_switched_off(s, j, code)
                                 ? "retries of its priority are switched off (ax_set_retry_enabled)"
                                 : NULL;
        if (reason)
            err = not_retried(why, sizeof why, err, reason);
    }
    j->code = code;
    if (j->is_child) {
        /* The parent may join: keep the error text and the attempt. Under
         * s->lock, which ax_join takes to decide whether to park. The
         * parent is woken once the child lets go (join_let_go), not here:
         * its on_done is still to run, and a cancelled child's coroutine
         * may not have returned yet (new user's trial: a parent that freed
         * what its joined child's on_done or cleanups used). */
        char *copy = err && *err ? strdup(err) : NULL;
        struct job_ext *fresh = copy && !j->ext ? calloc(1, sizeof *fresh) : NULL;
        pthread_mutex_lock(&s->lock);
        if (copy && !j->ext) /* j->ext is set at submit only (a ref) or here */
            j->ext = fresh;
        if (j->ext) {
            free(j->ext->err);
            j->ext->err = copy;
        } else {
            free(copy); /* out of memory: the join reports no text */
        }
        /* The attempt on_done reports, for ax_join (a job ended in its
         * back-off holds the next one's number in its word). */
        join_ended_locked(j, attempt);
        pthread_mutex_unlock(&s->lock);
    }
    EV(s, w, j, terminal_event(state), code, err);
    /* A task with an on_release counts as a callback in progress from here
     * until its on_release has returned (job.c job_released, callback.c
     * finish_handed), wherever and however late that runs: before it
     * leaves the load, as on_done's count below. */
    struct worker *me = own_worker(s); /* whose counts (internal.h: ends) */
    if (AX_UNLIKELY(j->has_release))
        cb_begin(s, me);
    if (j->on_done) {
        /* Counted before it leaves the load, so that ax_shutdown, which
         * reads the load and then this, always sees one or the other
         * (sched_unload is a release, the load's fold an acquire). */
        cb_begin(s, me);
        sched_unload(s, me);
        result_fill(j, attempt, state, code, err, &r);
        /* On any thread, the caller of ax_cancel or ax_shutdown included,
         * on_done counts as the scheduler's callback: ax_free and
         * ax_shutdown refuse to run inside it (they would wait for it). */
        struct on_done_frame frame = {s, ax_on_done_frames};
        ax_on_done_frames = &frame;
        j->on_done(&r, j->cb_arg);
        ax_on_done_frames = frame.up;
        /* ax_shutdown promises every on_done has run when it returns, and
         * a task ended in its bucket (queued deadline, shutdown) has no
         * coroutine that would make it wait instead. */
        cb_return(s, me);
        /* User code ran on this worker: the next dispatch reads the clock
         * again (review: an 800 ms on_done made the next attempt's start
         * 800 ms early, its run_ns 800 ms long, and the limiter count it
         * among the attempts begun before a drop it followed). */
        if (w && w == ax_current_worker)
            w->clock_stale = true;
    } else {
        sched_unload(s, me);
    }
    job_release(s, w, j, JH_END | give); /* one atomic step for all the holds */
}

void finish_terminal(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                     unsigned state, int code, const char *err, uint64_t give)
{
    terminal_path(s, w, j, attempt, state, code, err, give);
}

/* Schedule the back-off of an attempt the CAS made RETRYING. */
static void retry_schedule(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                           bool timed_out, int code, const char *err, uint64_t now,
                           uint64_t run_ns, uint64_t give, int slot);

FIN_INLINE void attempt_end(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                            unsigned state, unsigned to, int code, const char *err, int slot,
                            uint64_t run_ns, uint64_t give)
{
    if (to != JS_RETRYING && slot != FIN_NO_SLOT)
        j->run_ns = run_ns; /* terminal: the job is ours alone */
    if (slot != FIN_NO_SLOT) {
        /* run_ns is 0 exactly when the function never ran (dispatched, then
         * cancelled or past its deadline before it began): no run time. */
        if (AX_LIKELY(w && run_ns))
            ax_hist_record(&w->m->run[j->prio], run_ns); /* metrics_record_run, inline */
        else if (run_ns)
            metrics_record_run(s, NULL, j->prio, run_ns);
        if (AX_UNLIKELY(j->cls))
            class_attempt_done(s, j, state, run_ns != 0, run_ns, w ? w->now_ns : now_ns(),
                               slot == FIN_SLOT_FREED);
        if (AX_UNLIKELY(s->cfg.adaptive_limit)) {
            if (run_ns && state != JS_CANCELLED)
                sched_adaptive_sample(s, j, run_ns, state == JS_TIMED_OUT,
                                      w ? w->now_ns : now_ns(), slot == FIN_SLOT_FREED);
            else if (!run_ns && slot == FIN_SLOT) /* never ran: back for a drop */
                sched_adaptive_unran(s, j);
        }
        /* After a timeout or cancel the worker may be about to run a long
         * slice (the attempt ended from outside its code), so a sleeping
         * peer takes queued work now; after a normal end the worker
         * dispatches itself next (a wake-up per task cost the 2-worker full
         * path ~200 ns); held after that (its on_done below, a hog), the
         * watchdog wakes a peer for the queued work (watchdog.c). */
        if (slot == FIN_SLOT) {
            if (to == JS_RETRYING)
                retry_unarmed_add(s, j); /* before its slot is someone else's */
            job_slot_free(s, j, !w || (state != JS_SUCCEEDED && state != JS_FAILED));
        }
    }
    if (state == JS_TIMED_OUT && j->on_timeout) {
        ax_result r;
        result_fill_run(j, attempt, JS_TIMED_OUT, code, err, run_ns, &r);
        /* has_release, not ext: a cancel may be allocating ext for a child's
         * error text right now (review: TSan). */
        if (AX_UNLIKELY(j->has_release))
            cb_pool_post_held(s, j, j->on_timeout, j->cb_arg, &r);
        else
            cb_pool_post(s, j->on_timeout, j->cb_arg, &r);
    }
    if (to != JS_RETRYING)
        terminal_path(s, w, j, attempt, to, code, err, give);
    else
        retry_schedule(s, w, j, attempt, state == JS_TIMED_OUT, code, err,
                       w ? w->now_ns : now_ns(), run_ns, give, slot);
}

void finish_attempt(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                    unsigned state, unsigned to, int code, const char *err, int slot,
                    uint64_t run_ns, uint64_t give)
{
    attempt_end(s, w, j, attempt, state, to, code, err, slot, run_ns, give);
}

static void retry_schedule(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                           bool timed_out, int code, const char *err, uint64_t now,
                           uint64_t run_ns, uint64_t give, int slot)
{
    bool slot_freed = slot != FIN_NO_SLOT; /* counted in retry_unarmed then */
    uint64_t delay_ms = 0;
    ax_retry_delay_ms(&j->retry, attempt, ax_rand64(), &delay_ms);
    /* The event belongs to the attempt that ended: its number, wait and
     * run. Read now: once the retry is armed the next attempt may start and
     * overwrite the job's. */
    struct ev_attempt ended = {attempt, j->wait_ns, run_ns};
    /* RETRY_SCHEDULED carries the time of the lock section that arms the
     * retry, and is emitted after it: a cancel of the retry or its next
     * attempt's STARTED, which need the lock after, have later times
     * (emitted with the time of its emission, after a lossless wait, it
     * read "submitted started cancelled retry_scheduled" for 7 to 19 tasks
     * of 20 000 with a slow sink: review). Not emitted under the lock: it
     * could not wait for room there, and a long one (its text holds the
     * task's error) was dropped from a full long ring in lossless mode
     * (review of that: 16 workers, 5 of 6 runs). Its text is made before
     * the lock. */
    char rmsg[AX_ERROR_MAX + 96];
    uint64_t ev_at = 0;
    bool ev_retry = AX_UNLIKELY(ev_on(s, AX_EV_RETRY_SCHEDULED));
    if (ev_retry) {
        if (j->deadline_ns && now + delay_ms * 1000000u > j->deadline_ns)
            snprintf(rmsg, sizeof rmsg,
                     "%s; retry %u of %u (attempt %u) in %llu ms would pass the task's "
                     "deadline: it ends TIMED_OUT at the deadline instead",
                     err && *err ? err : "failed", attempt + 1, (unsigned)j->max_retry,
                     attempt + 1, (unsigned long long)delay_ms);
        else
            snprintf(rmsg, sizeof rmsg, "%s; retry %u of %u (attempt %u) in %llu ms",
                     err && *err ? err : "failed", attempt + 1, (unsigned)j->max_retry,
                     attempt + 1, (unsigned long long)delay_ms);
    }
    if (AX_UNLIKELY(s->ev_lossless))
        ev_reserve(s);
    pthread_mutex_lock(&s->lock);
    int armed = 0;
    uint64_t old = 0;
    bool closing = atomic_load_explicit(&s->closing, memory_order_relaxed);
    if (closing) {
        /* Shutdown began after the decision: the retry never starts. */
        if (js_end_queued(&j->sw, job_gen(j), JS_CANCELLED, &old)) {
            armed = -1;
            if (AX_UNLIKELY(j->cls))
                class_retry_dropped(s, j, old);
        }
    } else {
        armed = sched_retry_locked(s, j, attempt + 1, timed_out, now + delay_ms * 1000000u,
                                   run_ns);
        if (armed > 0 && ev_retry)
            ev_at = ev_clock();
    }
    if (slot_freed)
        atomic_fetch_sub_explicit(&s->retry_unarmed[j->prio], 1, memory_order_relaxed);
    pthread_mutex_unlock(&s->lock);
    if (armed < 0) {
        /* The attempt's run time, as sched_retry_locked would have kept it
         * (the job is ours: we won its end). */
        j->run_ns = run_ns;
        finish_terminal(s, w, j, attempt, JS_CANCELLED, AX_ECANCELED, "cancelled at shutdown",
                        give);
        return;
    }
    if (ev_at)
        ev_emit_attempt_at(s, w, j, AX_EV_RETRY_SCHEDULED, code, rmsg, &ended, ev_at);
    /* armed == 0: ax_cancel ended it first and ran its terminal path. */
    if (give)
        job_release(s, w, j, give);
}

/* keep_on_loss: a lost CAS returns false with `give` still held, for the
 * caller to drop (run.c run_complete: an orphan's wake-up first, then the
 * hold, whose release may run a long on_release). */
FIN_INLINE bool finish_running_impl(struct ax_sched *s, struct worker *w, struct job *j,
                                    uint64_t gen, unsigned attempt, unsigned state, int code,
                                    const char *err, uint64_t run_ns, uint64_t give,
                                    bool keep_on_loss)
{
    bool denied = false;
    uint64_t now = w ? w->now_ns : now_ns();
    unsigned to = state == JS_SUCCEEDED ? JS_SUCCEEDED
                                        : finish_decide(s, j, attempt, state, code, now, &denied);
    uint64_t old;
    if (!js_end_attempt(&j->sw, gen, attempt, to, &old)) {
        if (give && !keep_on_loss)
            job_release(s, w, j, give);
        return false;
    }
    if (AX_UNLIKELY(j->cls))
        class_retry_decided(s, j, to, denied, old);
    /* An attempt that ran reports at least 1 ns: ax_result.run_ns is 0
     * exactly when it never ran, which libax_redis relies on. A coarse clock
     * (jiffies on a VM without a stable TSC) makes a short run measure 0. */
    attempt_end(s, w, j, attempt, state, to, code, err, FIN_SLOT,
                js_state(old) == JS_RUNNING ? (run_ns ? run_ns : 1) : 0, give);
    return true;
}

bool finish_running(struct ax_sched *s, struct worker *w, struct job *j, uint64_t gen,
                    unsigned attempt, unsigned state, int code, const char *err,
                    uint64_t run_ns, uint64_t give)
{
    return finish_running_impl(s, w, j, gen, attempt, state, code, err, run_ns, give, false);
}

bool finish_running_keep(struct ax_sched *s, struct worker *w, struct job *j, uint64_t gen,
                         unsigned attempt, unsigned state, int code, const char *err,
                         uint64_t run_ns, uint64_t give)
{
    return finish_running_impl(s, w, j, gen, attempt, state, code, err, run_ns, give, true);
}
