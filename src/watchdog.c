/* watchdog.c - a watchdog that only watches (DESIGN.md §3a, §7).
 *
 * Workers enforce their own deadlines with their own wheels; the watchdog
 * exists for the one thing a worker cannot do: notice that it is held. A
 * worker is held when it is busy (out of epoll_wait) and what is on its CPU
 * has not changed for HOLD_MS: the same run (a task that never yields), or
 * the worker's own stack (a slow on_done, a long curl callback). HOLD_MS
 * counts from the watchdog's own first sight of that state: a worker
 * publishes a new one when it starts and whenever it comes back from idle
 * (worker_unidle), so neither its first moments nor a sleep the watchdog
 * missed count (test_watchdog_first_sight), and when it picks a batch, so
 * a batch goes back only HOLD_MS after its pick (test_watchdog_batch_sight).
 * For a held worker the watchdog:
 *   1. hands the jobs on its to-start list back to their buckets (at the
 *      head: they were first), so that other workers start them, and wakes
 *      a sleeping worker when queued work could start (a slot the held
 *      worker freed before it was held is free for it);
 *   2. try-locks its wheel and expires what is due: an attempt past its
 *      deadline is ended by CAS (js_end_attempt) and its slot freed at once;
 *      the rest of that attempt's end (on_timeout, retry or terminal path
 *      with on_done) is handed to the callback pool; every expired node is
 *      left on w->fired for the worker to handle when it is back;
 *   3. reports the run on its CPU as LINGERING once it is grace_ms past the
 *      deadline of an attempt that has ended, with a backtrace the worker's
 *      own signal handler takes. That is the only signal ax ever sends, and
 *      only to a thread that is running a timed-out task.
 * It also expires the scheduler's wheel when no worker did within HOLD_MS
 * of an expiry (all held), and watches the callback pool for overruns.
 * It runs no user callback and never blocks on a worker.
 *
 * Idle cost: with no worker busy, no callback running and no task started
 * for LINGER_MS (or starts sparser than LINGER_DENSE_MS), it sleeps for
 * good; a worker that wakes, or a callback that starts, kicks it. An idle
 * scheduler, even with 100 000 parked tasks, makes no periodic wake-ups.
 * While a worker is busy it polls every POLL_MS; in the LINGER_MS after the
 * last task started, every LINGER_POLL_MS.
 *
 * Why linger: the kick is a lock and a futex wake of this thread, paid by
 * the worker between its own wake-up and the task it woke for. On this
 * 2-vCPU VM that was ~35 us of the ~90 us from ax_submit to the task's
 * first instruction with the workers asleep (bench ax_latency
 * idle_gap_ms=5, p50 88-103 us with the kick, 56-59 without: the wake of
 * another vCPU costs the waker an IPI). Traffic with gaps under LINGER_MS
 * never kicks; after a longer silence the first wake-up does, once. A
 * worker that became busy unkicked while we lingered is seen at the next
 * poll, at most LINGER_POLL_MS late, so a held worker is judged at most
 * that much later than HOLD_MS after its last switch. The linger's cost:
 * LINGER_MS / LINGER_POLL_MS = 20 short wake-ups after the last start,
 * which this VM's accounting charges ~75 us each (a bare 5 ms
 * pthread_cond_timedwait loop reads the same): ~1.5 ms of CPU per spell
 * (bench ax_parked's idle CPU: 0.0001 s without a linger, 0.011 s with
 * the 1 s one first tried, hence 100 ms). Only dense starts linger (two
 * sightings within LINGER_DENSE_MS): there a poll every 5 ms replaces a
 * kick per start; sparser starts are kicked as before, since 200 polls a
 * second cost more than a kick per start saves (starts every 50 ms: 99 ->
 * 403 watchdog switches in 2 s when any start lingered). Nor does a busy
 * worker linger: workers also wake for their timers (a sleep's end, the
 * wheel's coarse levels), and lingering after those, a scheduler of parked
 * ax_sleep tickers polled 5-10 times as often as before (review: a 1 s
 * ticker 12 -> 78 watchdog wake-ups in 2 s, a 200 ms one 47 -> 281).
 * Watchdog switches in 2 s, before -> after (2 workers): tickers of 20,
 * 200, 1000 ms 374 -> 373, 51 -> 50, 15 -> 10; a start every 5 ms
 * 995 -> 424. Kicked, a start costs ~2.5 watchdog wake-ups; lingering, the
 * 2 s cost ~410 whatever the gap, so the break-even is a start every
 * ~12 ms (trial: at 15 ms apart the linger's 409 against ~330 kicked, with
 * LINGER_DENSE_MS 20), hence 10. Sightings come at the 5 ms polls, so
 * starts up to ~14 ms apart may still linger.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#define POLL_MS 2
#define HOLD_MS 10 /* as Go's sysmon: a run this long without a switch is "held" */
#define LINGER_MS 100    /* polling on after the last busy sighting (see the top) */
#define LINGER_POLL_MS 5 /* ... this often: a worker busy unkicked is seen this late */
#define LINGER_DENSE_MS 10 /* ... only when two sightings of starts were this close */
#define NAMING_POLL_MS 20  /* lingering reports being named (obs/linger.c): this often */

void watchdog_kick(struct ax_sched *s)
{
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->watchdog_idle, false);
    pthread_cond_signal(&s->watchdog_cond);
    pthread_mutex_unlock(&s->lock);
}

static bool read_published(struct worker *w, struct ax_task **t, struct job **j,
                           uint64_t *expect, uint64_t *deadline, uint64_t *seq)
{
    for (int i = 0; i < 8; i++) {
        uint64_t s1 = atomic_load_explicit(&w->pub_seq, memory_order_acquire);
        if (s1 & 1)
            continue;
        /* Acquire loads: one that reads a later publish's field also
         * sees that publish's odd sequence, so the check below fails
         * (internal.h worker_publish). */
        *t = atomic_load_explicit(&w->pub_run, memory_order_acquire);
        *j = atomic_load_explicit(&w->pub_job, memory_order_acquire);
        *expect = atomic_load_explicit(&w->pub_expect, memory_order_acquire);
        *deadline = atomic_load_explicit(&w->pub_deadline, memory_order_acquire);
        if (atomic_load_explicit(&w->pub_seq, memory_order_relaxed) == s1) {
            *seq = s1;
            return true;
        }
    }
    return false;
}

/* 1. The held worker's to-start jobs go back to the head of their buckets,
 * unless it has published since (seq: the sequence judged held). Returns
 * how many went back (each with a sleeping worker woken for it). */
static unsigned hand_back(struct ax_sched *s, struct worker *w, uint64_t seq)
{
    /* The list holds at most one dispatch batch: the worker fills it only
     * from its own dispatch, which starts every entry before it takes more. */
    struct job *take[DISPATCH_BATCH], *gone = NULL;
    unsigned n = 0;
    if (!wheel_trylock_foreign(w))
        return 0;
    /* Not held any more: it switched, or picked a new batch, since we
     * judged it (we may have been kept off our CPU in between). */
    if (atomic_load_explicit(&w->pub_seq, memory_order_acquire) != seq) {
        wheel_unlock_foreign(w);
        return 0;
    }
    /* The round as it stood before each of them was picked (see below);
     * read only while the list holds some: meanwhile the worker picks
     * nothing. */
    uint8_t rr_before[DISPATCH_BATCH];
    unsigned taken_before[DISPATCH_BATCH];
    uint64_t gen0 = w->tostart_head ? w->batch_gen : UINT64_MAX;
    unsigned first = w->batch_next;
    while (w->tostart_head && n < DISPATCH_BATCH) {
        if (first + n < DISPATCH_BATCH) {
            rr_before[n] = w->batch_rr[first + n];
            taken_before[n] = w->batch_taken[first + n];
        } else {
            gen0 = UINT64_MAX; /* not this batch's bookkeeping: leave the round */
        }
        take[n++] = w->tostart_head;
        w->tostart_head = w->tostart_head->next;
    }
    if (!w->tostart_head)
        w->tostart_tail = NULL;
    wheel_unlock_foreign(w);
    if (!n)
        return 0;
    unsigned moved = 0;
    pthread_mutex_lock(&s->lock);
    if (atomic_load_explicit(&s->closing, memory_order_relaxed)) {
        /* Shutdown drained the buckets already: these never start. End each
         * CANCELLED here (the CAS is ours, like ax_cancel's), free its slot,
         * and hand its terminal path to the finisher: the watchdog runs no
         * user code. */
        pthread_mutex_unlock(&s->lock);
        for (unsigned i = 0; i < n; i++) {
            struct job *j = take[i];
            unsigned attempt = js_attempt(atomic_load(&j->sw));
            uint64_t old;
            if (js_end_attempt_handed(&j->sw, job_gen(j), attempt, JS_CANCELLED, &old)) {
                if (j->cls)
                    class_retry_dropped(s, j, old); /* a retry not yet entered */
                job_unran(s, j);
                job_slot_free(s, j, false);
                cb_pool_finish(s, j, attempt, JS_CANCELLED, JS_CANCELLED, FIN_SLOT_FREED);
            }
            job_release_nouser(s, j, JH_RUN); /* the to-start list's hold */
        }
        return 0;
    }
    running_locked(s);
    unsigned undo_from = 0; /* the picks from here on are undone below */
    for (unsigned i = n; i-- > 0;) { /* last first: push_front keeps their order */
        struct job *j = take[i];
        if (js_unstart(&j->sw, job_gen(j))) {
            s->running--;
            if (s->cfg.adaptive_limit) /* taken again by a dispatch, and stamped again */
                sched_adaptive_unstart(s, j);
            atomic_store_explicit(&s->hint_cap_full, false, memory_order_relaxed);
            if (j->cls) /* its class place and probe permit too: dispatch takes them again */
                class_unstart(s, j);
            j->enqueue_ns = now_ns() - j->wait_ns; /* its wait goes on */
            bucket_push_front_locked(s, j);
            if (j->deadline_ns)
                jtimer_arm_locked(s, j, j->deadline_ns);
            moved++;
        } else {
            j->next = gone; /* ended (cancelled) while on the list: drop its hold */
            gone = j;
            if (!undo_from)
                undo_from = i + 1; /* its pick stands: it is never picked again */
        }
    }
    /* Undo their dispatch in the quota round too, when no batch was picked
     * since theirs (one worker, or the others idle): else each would count
     * twice against its priority's turn, once now and once when picked
     * again, and the start order would leave the rounds' (with one worker:
     * a turn short of tasks, LOW's start a whole round late; tests
     * test_quota, test_stress failed on it under load). Only the picks
     * after the last job that ended on the list are undone: that one's
     * pick stands (it will not be picked again), and the round can only be
     * set back to a point in its sequence (test_r13_handback_cancelled).
     * When others have picked since, the round has moved on and stays. */
    if (s->dispatch_gen == gen0 && undo_from < n) {
        s->rr = rr_before[undo_from];
        s->rr_taken = taken_before[undo_from];
    }
    pthread_mutex_unlock(&s->lock);
    while (gone) {
        struct job *j = gone;
        gone = j->next;
        job_release_nouser(s, j, JH_RUN);
    }
    if (moved)
        sched_wake_workers(s, moved);
    return moved;
}

/* 2. End the held worker's overdue attempts. Only deadline nodes are taken
 * out (onto w->fired, for the worker to wake their runs when it is back);
 * every other due node (a sleep, a wait, curl's timer) goes back into the
 * wheel, due, so that nothing but the worker ever re-arms a node that is
 * not in the wheel. */
static void expire_held(struct ax_sched *s, struct worker *w, uint64_t now,
                        const struct ax_task *holder)
{
    uint64_t tick = ns_to_tick(now);
    if (!wheel_trylock_foreign(w))
        return;
    if (ax_wheel_next(&w->wheel) > tick) {
        wheel_unlock_foreign(w);
        return;
    }
    struct ax_wheel_node *list = NULL;
    ax_wheel_advance(&w->wheel, tick, &list);
    struct job *ended = NULL;
    while (list) {
        struct ax_wheel_node *n = list;
        list = n->next;
        struct run_timer *rt = AX_CONTAINER_OF(n, struct run_timer, node);
        if (rt->kind != TIMER_DEADLINE) {
            n->next = NULL;
            ax_wheel_add(&w->wheel, n, n->expiry); /* due: fires at the worker's next look */
            continue;
        }
        n->next = w->fired;
        w->fired = n;
        /* The run's fields are stable: its deadline node was armed, and the
         * worker cannot recycle it without taking the lock we hold. */
        struct ax_task *t = rt->run;
        struct job *j = t->job;
        bool denied;
        unsigned to = finish_decide(s, j, t->attempt, JS_TIMED_OUT, AX_ETIMEDOUT, now, &denied);
        uint64_t old;
        if (!js_end_attempt_handed(&j->sw, t->gen, t->attempt, to, &old))
            continue; /* JH_HAND keeps it allocated until the pool has run it */
        if (j->cls)
            class_retry_decided(s, j, to, denied, old);
        /* Read back below. Still STARTING: the worker was held between
         * arming the deadline and entering the function (preempted there),
         * and the function will never run: the attempt reports no run
         * (run_ns 0, no sample for its class), as any attempt that never
         * ran does. */
        bool unbegun = js_state(old) == JS_STARTING;
        /* The run holding the worker, past its deadline: named so in its
         * message. Not one held before it began (in the switch into it). */
        bool holder_run = t == holder && !unbegun;
        j->handoff = t->attempt << 6 | holder_run << 5 | unbegun << 4 | to;
        j->next = ended;
        ended = j;
    }
    bool fired = w->fired != NULL;
    if (fired)
        atomic_store_explicit(&w->fired_hint, 1, memory_order_release);
    wheel_unlock_foreign(w);
    int one = 1;
    if (fired && atomic_compare_exchange_strong(&w->sleeping, &one, 0))
        worker_kick(w); /* it may have gone to sleep since we judged it held */
    while (ended) {
        struct job *j = ended;
        ended = j->next;
        if (j->handoff & 16)
            job_unran(s, j); /* unbegun: it will never run */
        if ((j->handoff & 15) == JS_RETRYING)
            retry_unarmed_add(s, j); /* until ax-finish arms it (retry_schedule) */
        job_slot_free(s, j, true); /* free at the deadline, though the worker is held */
        cb_pool_finish(s, j, j->handoff >> 6, JS_TIMED_OUT, j->handoff & 15,
                       FIN_SLOT_FREED | (j->handoff & 16 ? FIN_UNBEGUN : 0) |
                           (j->handoff & 32 ? FIN_HOLDER : 0));
    }
}

/* Returns whether any worker is busy (so the next sleep must be short);
 * *active: some worker started a task since the last pass, busy now or not
 * (the linger goes on; a wake-up for a timer, a resumed task, does not). */
static bool watch_workers(struct ax_sched *s, uint64_t now, bool *active, bool *naming)
{
    bool busy = false;
    for (unsigned i = 0; i < s->nworkers; i++) {
        struct worker *w = &s->workers[i];
        if (w->lg_pend || w->lg_naming) {
            int left = linger_pending_step(s, w, now);
            busy = busy || left == 2; /* a backtrace being taken: every POLL_MS */
            *naming = *naming || left == 1;
        }
        uint64_t started = atomic_load_explicit(&w->counts.started, memory_order_relaxed);
        if (started != w->wd_started) {
            w->wd_started = started;
            *active = true;
        }
        if (!atomic_load(&w->busy)) {
            w->wd_seq = UINT64_MAX;
            continue;
        }
        busy = true;
        struct ax_task *t;
        struct job *j;
        uint64_t expect, deadline, seq;
        if (!read_published(w, &t, &j, &expect, &deadline, &seq))
            continue;
        if (seq != w->wd_seq) {
            /* Since now, read after the sequence: `now` was read before this
             * pass (and before the other workers' reads), and a watchdog the
             * OS kept off its CPU in between would date the sighting too
             * early and judge a worker held after as little as one POLL_MS
             * without a switch. A stale `now` in the test below only errs
             * the other way (held a little later). */
            w->wd_seq = seq;
            w->wd_since_ns = now_ns();
            continue;
        }
        if (now - w->wd_since_ns < HOLD_MS * 1000000ull)
            continue;
        unsigned moved = hand_back(s, w, seq);
        expire_held(s, w, now, t); /* t: the run holding it, if one does */
        /* A task that ends normally frees its slot without a wake-up (its
         * worker dispatches next, finish.c); held after that (an on_done or
         * on_release inline, a task that never yields), the worker takes
         * nothing, and work queued behind the full cap waited for it while
         * another worker slept (test_held_worker_wakes: the whole 300 ms of
         * a slow on_done). Wake one: at most one wake-up per held worker a
         * poll, only while a sleeper would find work (none when the
         * hand-back woke some already), and none on the task path. */
        if (!moved && sched_work_for_sleeper(s))
            sched_wake_workers(s, 1);
        if (t)
            linger_hog_check(s, w, now, t, j, expect, deadline, seq);
    }
    return busy;
}

/* The scheduler's wheel, when no worker expired it in time. */
static void expire_jobs(struct ax_sched *s, uint64_t now)
{
    uint64_t next = atomic_load_explicit(&s->jwheel_next, memory_order_relaxed);
    uint64_t due = tick_to_ns(next); /* saturates: no wrap below */
    if (next == UINT64_MAX || now < due || now - due < HOLD_MS * 1000000ull)
        return;
    struct job *ended = NULL;
    pthread_mutex_lock(&s->lock);
    unsigned requeued = sched_expire_locked(s, now, &ended);
    for (struct job *j = ended; j; j = j->next)
        atomic_fetch_or(&j->sw, JH_HAND); /* the pool releases it */
    pthread_mutex_unlock(&s->lock);
    if (requeued)
        sched_wake_workers(s, requeued);
    while (ended) {
        struct job *j = ended;
        ended = j->next;
        /* Its deadline (TIMED_OUT), or its class ended it FAILED (a parked
         * job's queue-time budget): the state the CAS set, finished as
         * dispatch would (callback.c: finish_handed). */
        unsigned st = j->end_why <= END_DEADLINE_RETRY_TIMED ? JS_TIMED_OUT : JS_FAILED;
        cb_pool_finish(s, j, j->handoff, st, st, FIN_NO_SLOT);
    }
}

static void *watchdog_main(void *arg)
{
    struct ax_sched *s = arg;
    pthread_setname_np(pthread_self(), "ax-watchdog");
    /* When a worker was last seen to have started a task, and the sighting
     * before: the linger is worth its polls only while starts are dense. */
    uint64_t start_ms = 0, prev_start_ms = 0;
    unsigned sightings = 0; /* of starts, up to 2: the gap needs two */
    pthread_mutex_lock(&s->lock);
    while (!s->watchdog_stop) {
        uint64_t now = now_ns();
        pthread_mutex_unlock(&s->lock);
        bool active = false, naming = false;
        bool busy = watch_workers(s, now, &active, &naming);
        expire_jobs(s, now);
        busy = cb_pool_check(s, now) || busy;

        pthread_mutex_lock(&s->lock);
        if (s->watchdog_stop)
            break;
        uint64_t ms = now_ns() / 1000000u; /* CLOCK_MONOTONIC, as watchdog_cond's */
        if (active) {
            prev_start_ms = start_ms;
            start_ms = ms;
            sightings += sightings < 2;
        }
        uint64_t wake = UINT64_MAX;
        if (busy)
            wake = ms + POLL_MS;
        else if (sightings == 2 && ms - start_ms < LINGER_MS &&
                 start_ms - prev_start_ms <= LINGER_DENSE_MS)
            wake = ms + LINGER_POLL_MS;
        else if (naming)
            wake = ms + NAMING_POLL_MS; /* a lingering report waits for its names */
        if (wake == UINT64_MAX) {
            /* Not polling during this sleep: announce it, then look once
             * more at the workers (a worker sets busy, then reads
             * watchdog_idle and kicks us; so does a callback thread). */
            atomic_store(&s->watchdog_idle, true);
            for (unsigned i = 0; i < s->nworkers; i++)
                if (atomic_load(&s->workers[i].busy))
                    wake = ms + POLL_MS;
            if (cb_pool_running(s)) /* one that began since cb_pool_check */
                wake = ms + POLL_MS;
            if (wake != UINT64_MAX)
                atomic_store(&s->watchdog_idle, false);
        }
        if (wake == UINT64_MAX) {
            pthread_cond_wait(&s->watchdog_cond, &s->lock);
        } else {
            struct timespec ts = {.tv_sec = (time_t)(wake / 1000),
                                  .tv_nsec = (long)(wake % 1000) * 1000000L};
            int rc = pthread_cond_timedwait(&s->watchdog_cond, &s->lock, &ts);
            (void)rc; /* ETIMEDOUT or a signal: either way, look again */
        }
        atomic_store(&s->watchdog_idle, false);
    }
    uint64_t flush_until = s->watchdog_until;
    pthread_mutex_unlock(&s->lock);
    linger_pending_flush(s, flush_until);
    return NULL;
}

int watchdog_start(struct ax_sched *s)
{
    int rc = pthread_create(&s->watchdog, NULL, watchdog_main, s);
    if (rc != 0)
        return ax_fail(AX_ESYS, "watchdog thread: pthread_create failed (%d)", rc);
    return AX_OK;
}

void watchdog_stop(struct ax_sched *s, uint64_t until)
{
    pthread_mutex_lock(&s->lock);
    s->watchdog_stop = true;
    s->watchdog_until = until;
    pthread_cond_signal(&s->watchdog_cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->watchdog, NULL);
}
