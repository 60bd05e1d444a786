/* lifecycle.c - create, shut down and free a scheduler; the stats snapshot
 * (DESIGN.md §10).
 *
 * Shutdown contract: after ax_shutdown begins, ax_submit returns
 * AX_ESHUTDOWN. Every queued and delayed task ends CANCELLED with its
 * on_done (so the caller can persist it), running tasks get until the
 * deadline to finish, then they are cancelled too. Nothing admitted is lost:
 * every task's on_done has run when ax_shutdown returns 0 (an on_done still
 * running after the grace period makes it AX_ETIMEDOUT).
 *
 * ax_free waits config.shutdown_timeout_ms for coroutines to return. A
 * task that never returns (it ignores its deadline and never calls ax) keeps
 * its worker thread: ax_free then says so on stderr and returns, leaking the
 * scheduler's memory and that thread rather than freeing memory a running
 * thread still uses, or hanging the caller for ever.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void stop_threads(struct ax_sched *s, unsigned started);

_Atomic unsigned ax_fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    atomic_fetch_add_explicit(&ax_fork_gen, 1, memory_order_relaxed);
}

static void fork_setup(void)
{
    (void)pthread_atfork(NULL, NULL, fork_child);
}

int sched_forked_fail(const char *who)
{
    return ax_fail(AX_ESTATE,
                   "%s: the scheduler was created before fork(): its threads are not in this "
                   "process (create one here with ax_new)",
                   who);
}

int ax_new(const ax_config *cfg, ax_sched **out)
{
    if (!out)
        return ax_fail_static(AX_EINVAL, "ax_new: out is NULL");
    *out = NULL;
    ax_config r;
    int rc = config_validate(cfg, &r);
    if (rc)
        return rc;
    linger_init();
    crash_init();
    report_init(); /* before any line: its fork handler too (obs/report.c) */
    pthread_once(&fork_once, fork_setup);
    struct ax_sched *s = aligned_alloc(AX_CACHELINE, (sizeof *s + AX_CACHELINE - 1) /
                                                         AX_CACHELINE * AX_CACHELINE);
    if (!s)
        return ax_fail_static(AX_ENOMEM, "ax_new: out of memory");
    memset(s, 0, sizeof *s);
    s->cfg = r;
    s->fork_gen = atomic_load_explicit(&ax_fork_gen, memory_order_relaxed);
    /* Adaptive: its sections are a few list operations, so a contender
     * spins briefly instead of sleeping in the kernel (perf, full path with
     * a submitting thread and a worker: 30% of the time was futex sleeps
     * and wake-ups on this lock with the default mutex). */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&s->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_mutex_init(&s->class_reg_lock, NULL);
    pthread_mutex_init(&s->mappend_lock, NULL);
    sched_adaptive_init(s); /* needs s->cfg: after it is set */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->watchdog_cond, &ca);
    pthread_cond_init(&s->idle_cond, &ca);
    pthread_condattr_destroy(&ca);
    s->cap = s->cap_max = r.max_concurrency;
    s->quota_auto[AX_PRIO_HIGH] = r.quota_high == 0;
    s->quota_auto[AX_PRIO_NORMAL] = r.quota_normal == 0;
    s->quota[AX_PRIO_HIGH] = r.quota_high;
    s->quota[AX_PRIO_NORMAL] = r.quota_normal;
    s->quota[AX_PRIO_LOW] = r.low_guaranteed;
    sched_recompute_locked(s);
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        atomic_store(&s->retry_enabled[p], r.retry_enabled[p]);
    s->max_orphans = r.max_orphans ? r.max_orphans
                     : r.max_concurrency > 64 ? r.max_concurrency : 64;
    if (r.rate_limit > 0) {
        s->rate = r.rate_limit;
        s->burst = r.rate_burst ? (double)r.rate_burst
                                : (r.rate_limit >= 1.0 ? r.rate_limit : 1.0);
        s->tokens = s->burst;
        s->rate_last_ns = now_ns();
    }
    s->chunks = calloc(AX_MAX_JOBS / AX_JOB_CHUNK, sizeof *s->chunks);
    s->nworkers = r.workers;
    s->share_div = r.workers;
    cpu_set_t cpus;
    long ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                                : sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu > 0 && (unsigned long)ncpu < s->share_div)
        s->share_div = (unsigned)ncpu;
    s->workers = aligned_alloc(AX_CACHELINE, r.workers * sizeof *s->workers);
    if (!s->chunks || !s->workers) {
        free(s->chunks);
        free(s->workers);
        free(s);
        return ax_fail_static(AX_ENOMEM, "ax_new: out of memory");
    }
    memset(s->workers, 0, r.workers * sizeof *s->workers);
    ax_wheel_init(&s->jwheel, ns_to_tick(now_ns()));
    atomic_store(&s->jwheel_next, UINT64_MAX);

    unsigned i;
    for (i = 0; i < r.workers; i++)
        if ((rc = worker_init(s, &s->workers[i], i)) != 0)
            break;
    if (rc == 0)
        rc = cb_pool_start(s);
    if (rc == 0)
        rc = ev_init(s);
    if (rc == 0)
        rc = metrics_init(s);
    if (rc == 0 && (rc = watchdog_start(s)) == 0)
        s->watchdog_started = true;
    unsigned started = 0;
    if (rc == 0) {
        for (; started < r.workers; started++) {
            if (pthread_create(&s->workers[started].thread, NULL, worker_main,
                               &s->workers[started]) != 0) {
                rc = ax_fail_static(AX_ESYS, "ax_new: cannot start a worker thread");
                break;
            }
        }
    }
    if (rc != 0) {
        char keep[256];
        strncpy(keep, ax_error_detail(), sizeof keep - 1);
        keep[sizeof keep - 1] = 0;
        atomic_store(&s->closing, true);
        stop_threads(s, started);
        if (s->watchdog_started)
            watchdog_stop(s, 0);
        cb_pool_stop(s);
        ev_stop(s);
        metrics_destroy(s);
        for (unsigned k = 0; k < r.workers; k++)
            worker_destroy(&s->workers[k]);
        free(s->workers);
        job_table_destroy(s);
        free(s);
        return ax_fail(rc, "%s", keep);
    }
    *out = s;
    return AX_OK;
}

static void stop_threads(struct ax_sched *s, unsigned started)
{
    atomic_store(&s->stop, 1);
    for (unsigned i = 0; i < started; i++)
        worker_kick(&s->workers[i]);
    for (unsigned i = 0; i < started; i++) {
        pthread_join(s->workers[i].thread, NULL);
        s->workers[i].joined = true;
    }
}

/* Every job of the table, one chunk at a time: `fn` runs under s->lock. */
static struct job *table_at(struct ax_sched *s, unsigned c, unsigned k)
{
    return &s->chunks[c][k];
}

/* End every waiting job (queued, delayed, in a back-off) CANCELLED (s->lock
 * held); link them on *out for their terminal paths. A table scan: a job
 * whose back-off is over but whose previous coroutine still runs is in no
 * bucket and no wheel. */
static void drain_waiting_locked(struct ax_sched *s, struct job **out)
{
    /* Every waiting job is counted in a bucket or in `delayed` (a retry
     * waiting for its orphan included); a retry not armed yet is left to
     * its finisher (below). Nothing counted: nothing to scan. */
    if (!s->b[0].n && !s->b[1].n && !s->b[2].n && !s->delayed)
        return;
    for (unsigned c = 0; c < s->nchunks; c++) {
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++) {
            struct job *j = table_at(s, c, k);
            uint64_t old, w = atomic_load(&j->sw);
            if (!js_is(w, JS_WAITING_MASK))
                continue;
            /* A retry chosen but not armed yet: its finisher takes the lock
             * next, sees `closing` and cancels it itself (finish.c); its
             * links may be in use until then. */
            if (js_state(w) == JS_RETRYING && !(w & (JF_RETRY_ARMED | JF_WAIT)))
                continue;
            if (!js_end_queued(&j->sw, job_gen(j), JS_CANCELLED, &old))
                continue;
            sched_leave_locked(s, j, old);
            j->handoff = js_report_attempt(old);
            j->next = *out;
            *out = j;
        }
    }
}

static int wait_idle_until(struct ax_sched *s, uint64_t deadline)
{
    pthread_mutex_lock(&s->lock);
    /* Until no slot is held and every admitted task has ended (the callback pool
     * or ax_cancel may still be finishing some). Releases made without the
     * lock do not signal: wake at least every millisecond to fold them. */
    while ((running_locked(s) > 0 || load_locked(s) > 0) && now_ns() < deadline) {
        uint64_t until = now_ns() + 1000000u;
        if (until > deadline)
            until = deadline;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                              .tv_nsec = (long)(until % 1000000000u)};
        pthread_cond_timedwait(&s->idle_cond, &s->lock, &ts);
    }
    int left = (int)(running_locked(s) + load_locked(s));
    pthread_mutex_unlock(&s->lock);
    /* After the load: a task leaves it only once counted here. */
    return left + (int)callbacks_in_progress(s);
}

/* Cancel every STARTING/RUNNING attempt. */
static void cancel_running(struct ax_sched *s)
{
    /* nchunks_hint, not nchunks: the lock is taken per job, and a submit
     * admitted just before closing may still be growing the table (review
     * of 3b1dc51: a plain read racing link_chunk_locked's write). */
    for (unsigned c = 0; c < atomic_load_explicit(&s->nchunks_hint, memory_order_relaxed); c++) {
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++) {
            pthread_mutex_lock(&s->lock);
            struct job *j = table_at(s, c, k);
            uint64_t id = j->id;
            bool live = js_is(atomic_load(&j->sw), JS_SLOT_MASK);
            pthread_mutex_unlock(&s->lock);
            if (live)
                ax_cancel(s, id); /* AX_ENOTFOUND if it ended meanwhile */
        }
    }
}

/* True on a thread of s itself: a task, a worker running on_done, or a
 * callback-pool thread running on_timeout or on_done. */
static bool in_on_done_of(struct ax_sched *s)
{
    for (const struct on_done_frame *f = ax_on_done_frames; f; f = f->up)
        if (f->s == s)
            return true;
    return false;
}

/* A thread of s itself, in code of the user's that s runs: a task, a
 * worker (on_done, on_release), the callback pool (on_timeout, on_done),
 * the event thread (the sink), the metrics thread (an appender). The last
 * two refuse every scheduler's ax_shutdown and ax_free (below). */
static bool own_thread(struct ax_sched *s)
{
    return (ax_current_run && ax_current_run->s == s) ||
           (ax_current_worker && ax_current_worker->s == s) || ax_current_cb_sched == s ||
           ax_current_ev_sched == s || ax_current_appender_sched == s || in_on_done_of(s);
}

/* grace_ns: how long cancelled coroutines get to return at the end. */
/* Cancel the queued, wait timeout_ms for running tasks, cancel them, then
 * wait grace_ns for their coroutines to return; no wait goes past
 * `hard_until` (ax_free's budget; UINT64_MAX for ax_shutdown). */
static int shutdown_within(ax_sched *s, int64_t timeout_ms, uint64_t grace_ns, uint64_t hard_until)
{
    uint64_t deadline = now_ns() + (timeout_ms > 0 ? ms_to_ns_capped(timeout_ms) : 0);
    struct job *q = NULL;
    /* Lossless events wait for a sink only for the running tasks'
     * timeout_ms and half their coroutines' grace: a coroutine held in such
     * a wait returns in the other half (with the whole grace, ax_shutdown
     * gave up on such coroutines as they were let go: AX_ETIMEDOUT in 1 of
     * 2 runs of a new user's trial). */
    uint64_t ev_until = deadline + grace_ns / 2;
    ev_bound_waits(s, ev_until < deadline || ev_until > hard_until ? hard_until : ev_until);
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->closing, true);
    sched_hint_locked(s);
    drain_waiting_locked(s, &q);
    pthread_mutex_unlock(&s->lock);
    while (q) {
        struct job *j = q;
        q = j->next;
        finish_terminal(s, NULL, j, j->handoff, JS_CANCELLED, AX_ECANCELED,
                        "cancelled at shutdown", 0);
    }
    if (deadline > hard_until)
        deadline = hard_until;
    if (wait_idle_until(s, deadline) > 0) {
        cancel_running(s);
        uint64_t settle = now_ns() + 100000000u;
        wait_idle_until(s, settle < hard_until ? settle : hard_until);
    }
    /* Every coroutine returned, and every admitted task ended: its on_done
     * has run (a task leaves the load only after it; one ended in its
     * bucket, by a queued deadline, has no coroutine to wait for). */
    uint64_t until = now_ns() + grace_ns;
    if (until > hard_until)
        until = hard_until;
    while ((live_runs_total(s, memory_order_acquire) > 0 || wait_idle_until(s, 0) > 0) &&
           now_ns() < until)
        usleep(1000);
    /* The endpoint ends last, so the drain itself could be watched; it
     * holds no slot and no task waits for it. */
    metrics_serve_stop(s);
    uint64_t live = live_runs_total(s, memory_order_acquire);
    if (live > 0)
        return ax_fail(AX_ETIMEDOUT,
                       "ax_shutdown: %llu task coroutine(s) have not returned yet (they ignore "
                       "their cancellation, or wait for a worker one of them holds)",
                       (unsigned long long)live);
    int left = wait_idle_until(s, 0);
    if (left > 0)
        return ax_fail(AX_ETIMEDOUT,
                       "ax_shutdown: %d task(s) or callback(s) have not ended yet (an on_done or "
                       "on_release still running, or an on_release waiting for its task's "
                       "on_timeout?)",
                       left);
    return AX_OK;
}

int ax_shutdown(ax_sched *s, int64_t timeout_ms)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_shutdown: scheduler is NULL");
    if (sched_forked(s))
        return sched_forked_fail("ax_shutdown");
    if (own_thread(s))
        return ax_fail_static(AX_ESTATE, "ax_shutdown: called from one of its own tasks or "
                                         "callbacks (it would wait for itself)");
    if (ax_current_appender_sched || ax_current_ev_sched)
        return ax_fail_static(AX_ESTATE, "ax_shutdown: called from a metrics appender or an "
                                         "events callback (it would wait for another "
                                         "scheduler's threads, which may wait for this one)");
    /* Cancelled coroutines get as long again as the caller granted running
     * tasks to return, and at least a second (10 000 parked connections
     * take ~200 ms to wake and return on 2 cores). */
    uint64_t grace = timeout_ms > 1000 ? ms_to_ns_capped(timeout_ms) : 1000000000u;
    return shutdown_within(s, timeout_ms, grace, UINT64_MAX);
}

/* Name the tasks whose coroutine still runs (their job is held by JH_RUN). */
static void report_stuck(struct ax_sched *s)
{
    unsigned shown = 0, total = 0;
    pthread_mutex_lock(&s->lock);
    for (unsigned c = 0; c < s->nchunks; c++) {
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++) {
            struct job *j = table_at(s, c, k);
            uint64_t w = atomic_load(&j->sw);
            if (js_state(w) == JS_FREE || !(w & JH_RUN))
                continue;
            total++;
            if (shown++ < 16) {
                char trace[AX_TRACE_ID_MAX];
                trace_format(j, trace);
                fprintf(stderr, "ax_free:   task %llu (%s), attempt %u, %s\n",
                        (unsigned long long)j->id, trace, js_attempt(w),
                        ax_state_name(js_public(js_state(w))));
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (total > shown)
        fprintf(stderr, "ax_free:   ... and %u more\n", total - shown);
}

/* Join worker w, waiting up to `left` ns. */
static bool join_worker(struct worker *w, uint64_t left)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t at = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + left;
    ts.tv_sec = (time_t)(at / 1000000000u);
    ts.tv_nsec = (long)(at % 1000000000u);
    if (pthread_timedjoin_np(w->thread, NULL, &ts) == 0)
        w->joined = true;
    return w->joined;
}

/* Join the workers, waiting at most until `until` in all (they are all told
 * to stop first, so they leave side by side); false if one is still held
 * by a task that never returns. A worker on no task's stack (pub_run NULL)
 * is most likely not held: it only waits to be scheduled, which a busy
 * machine can delay past a small budget (review: budget 0, 8 idle workers
 * beside 6 busy loops, 17 of 150 ax_free calls leaked the scheduler "held"
 * by idle workers). Those get until FREE_IDLE_JOIN_NS after the join
 * began, one deadline for all of them: a worker stuck in an on_done (run
 * inline, pub_run NULL) must not add 100 ms each (review). */
#define FREE_IDLE_JOIN_NS 100000000u
static bool join_workers_until(struct ax_sched *s, uint64_t until)
{
    atomic_store(&s->stop, 1);
    for (unsigned i = 0; i < s->nworkers; i++)
        worker_kick(&s->workers[i]);
    uint64_t idle_until = now_ns() + FREE_IDLE_JOIN_NS;
    if (idle_until < until)
        idle_until = until;
    bool all = true;
    for (unsigned i = 0; i < s->nworkers; i++) {
        struct worker *w = &s->workers[i];
        if (w->joined)
            continue;
        uint64_t now = now_ns();
        if (join_worker(w, until > now ? until - now : 0))
            continue;
        now = now_ns();
        if (!atomic_load_explicit(&w->pub_run, memory_order_acquire) &&
            join_worker(w, idle_until > now ? idle_until - now : 0))
            continue;
        all = false;
    }
    return all;
}

/* The last part of ax_free's budget is the workers' to leave in: a tenth,
 * at most 100 ms, at least 10 ms. A worker no task holds leaves within
 * microseconds of being told, once the scheduler runs it; this keeps a
 * held worker from making the others count as held too, and the whole of
 * ax_free within shutdown_timeout_ms (it used to give each worker not yet
 * joined at least 100 ms after the budget: 100 ms past it per held worker,
 * a new user's trial). Past it only workers no task holds are waited for
 * (join_workers_until), as on a busy machine with a small budget. */
#define FREE_JOIN_MAX_NS 100000000u
#define FREE_JOIN_MIN_NS 10000000u

/* ax_free's deadline for one more thing to stop: its budget's end, or at
 * least FREE_JOIN_MIN_NS from now. */
static uint64_t free_step_until(uint64_t until)
{
    uint64_t now = now_ns();
    return until > now + FREE_JOIN_MIN_NS ? until : now + FREE_JOIN_MIN_NS;
}

void ax_free(ax_sched *s)
{
    if (!s)
        return;
    if (sched_forked(s)) {
        fprintf(stderr, "ax_free: the scheduler was created before fork(); its threads are not "
                        "in this process: leaked here, not freed (the parent frees its own)\n");
        return;
    }
    if (own_thread(s)) {
        fprintf(stderr, "ax_free: called from one of the scheduler's own tasks or callbacks; "
                        "refused (it would wait for itself)\n");
        return;
    }
    /* Any scheduler's, from an appender or an events callback: two
     * appenders freeing each other's scheduler joined each other's metrics
     * thread; an appender flushing B's events while B's callback stopped
     * the appender's scheduler, likewise (reviews). */
    if (ax_current_appender_sched || ax_current_ev_sched) {
        fprintf(stderr, "ax_free: called from a metrics appender or an events callback; refused "
                        "(it would wait for another scheduler's threads, which may wait for "
                        "this one)\n");
        return;
    }
    dump_unregister(s, 0); /* no new signal dumps; one in progress: below */
    uint64_t budget = (uint64_t)s->cfg.shutdown_timeout_ms * 1000000u;
    uint64_t join = budget / 10 > FREE_JOIN_MAX_NS ? FREE_JOIN_MAX_NS : budget / 10;
    if (join < FREE_JOIN_MIN_NS)
        join = FREE_JOIN_MIN_NS;
    uint64_t start = now_ns();
    uint64_t until = start + (budget > join ? budget : join);
    shutdown_within(s, 0, budget, until - join); /* all within shutdown_timeout_ms */
    if (!join_workers_until(s, until)) {
        /* A coroutine that never returns holds its worker: the thread, its
         * stacks and everything they may touch stay. Say what leaks. */
        unsigned held = 0;
        for (unsigned i = 0; i < s->nworkers; i++)
            held += !s->workers[i].joined;
        fprintf(stderr,
                "ax_free: %llu task(s) never returned within shutdown_timeout_ms (%u ms); "
                "leaking the scheduler (%u worker thread(s) still held, their stacks and "
                "state) instead of freeing memory they use\n",
                (unsigned long long)live_runs_total(s, memory_order_acquire),
                s->cfg.shutdown_timeout_ms,
                held);
        unsigned cbs = callbacks_in_progress(s);
        if (cbs)
            fprintf(stderr,
                    "ax_free:   %u on_done / on_release callback(s) still running or waiting "
                    "to run (an on_release waits for its task's coroutine and on_timeout "
                    "calls): an on_done that does not return holds its worker as a task "
                    "would (its task is listed as ended)\n",
                    cbs);
        report_stuck(s);
        /* Write out the events so far, but stop nothing the held worker may
         * still use (its task can still submit, emit, end): all of it is
         * leaked with the scheduler. Not past the budget's last part: the
         * sink may be a pipe nobody reads. */
        ev_flush_until(s, until > now_ns() ? until : now_ns() + FREE_JOIN_MIN_NS);
        ev_abandon(s); /* the sinks are the host's once ax_free returns */
        report_drain(atomic_load(&s->report_ticket)); /* the overrun's line, often */
        return;
    }
    /* A signal's dump of s still writing (a dump file that blocks: a pipe
     * nobody reads) reads the job table, the workers and the callback pool
     * (ax_stats_get): wait for it before anything is stopped or freed
     * (review: cb_pool_stop freed what it read), or leak, do not hang. */
    if (!dump_unregister(s, free_step_until(until))) {
        fprintf(stderr,
                "ax_free: a dump on signal (ax_dump_on_signal) was still writing to its file "
                "when shutdown_timeout_ms (%u ms) ran out; leaking the scheduler instead of "
                "waiting\n",
                s->cfg.shutdown_timeout_ms);
        ev_abandon(s);
        report_drain(atomic_load(&s->report_ticket));
        return;
    }
    /* An on_done or on_release still running on a thread of the user's (one
     * in ax_cancel), or an on_release still waiting for its task's
     * on_timeout: it will free its job into the table, so the table stays
     * until it has (review: ASan saw job_free_locked write into the table
     * ax_free had freed, ax_shutdown's wait having run out). The pool and
     * the event thread still run meanwhile. */
    uint64_t cb_until = free_step_until(until);
    while (callbacks_in_progress(s) > 0 && now_ns() < cb_until)
        usleep(1000);
    unsigned cbs = callbacks_in_progress(s);
    if (cbs) {
        fprintf(stderr,
                "ax_free: %u on_done / on_release callback(s) still running or waiting to run "
                "when shutdown_timeout_ms (%u ms) ran out; leaking the scheduler instead of "
                "freeing what they use\n",
                cbs, s->cfg.shutdown_timeout_ms);
        ev_flush_until(s, now_ns() + FREE_JOIN_MIN_NS);
        ev_abandon(s);
        report_drain(atomic_load(&s->report_ticket));
        return;
    }
    watchdog_stop(s, free_step_until(until));
    /* Its stderr lines (obs/report.c) written, up to 100 ms, before the
     * caller may exit: the leak paths before too. */
    report_drain(atomic_load(&s->report_ticket));
    /* An on_timeout, or an on_done / on_release the pool runs, that does not
     * return within the budget holds its thread, which may still use the
     * scheduler: leak it, as for a held worker, rather than hang. */
    if (!cb_pool_stop_until(s, free_step_until(until))) {
        fprintf(stderr,
                "ax_free: a callback on the callback pool (an on_timeout, or an on_done or "
                "on_release run there) was still running when shutdown_timeout_ms (%u ms) ran "
                "out; leaking the scheduler instead of waiting: callbacks queued behind it do "
                "not run\n",
                s->cfg.shutdown_timeout_ms);
        ev_flush_until(s, now_ns() + FREE_JOIN_MIN_NS);
        ev_abandon(s);
        return;
    }
    /* Last: writes what the others produced. A sink that takes nothing (a
     * pipe nobody reads, a callback that never returns) holds the event
     * thread in its write: leak the scheduler rather than hang the caller
     * (user trial: ax_free never returned). */
    if (!ev_stop_until(s, free_step_until(until))) {
        fprintf(stderr,
                "ax_free: the event thread was still writing to its sink (a pipe nobody "
                "reads? an events callback that never returns?) when shutdown_timeout_ms "
                "(%u ms) ran out; leaking the scheduler instead of waiting: events not "
                "yet written are lost\n",
                s->cfg.shutdown_timeout_ms);
        return;
    }
    metrics_destroy(s);
    for (unsigned i = 0; i < s->nworkers; i++)
        worker_destroy(&s->workers[i]);
    free(s->workers);
    free(s->http_conf); /* plain data owned by http.c (ax_http_configure) */
    job_table_destroy(s);
    class_free_all(s);
    pthread_mutex_destroy(&s->class_reg_lock);
    pthread_mutex_destroy(&s->mappend_lock);
    pthread_mutex_destroy(&s->alim_lk);
    pthread_cond_destroy(&s->watchdog_cond);
    pthread_cond_destroy(&s->idle_cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ax_stats_get(ax_sched *s, ax_stats *out)
{
    if (!s || !out)
        return ax_fail_static(AX_EINVAL, "ax_stats_get: NULL argument");
    if (sched_forked(s))
        return sched_forked_fail("ax_stats_get");
    pthread_mutex_lock(&s->lock);
    *out = s->st;
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        out->queued[p] = s->b[p].n;
    out->delayed = s->delayed;
    /* With the retries about to start their back-off (their slot freed,
     * the back-off not armed yet: admission counts them, so the stats show
     * them where a reader of an AX_EFULL looks for them). */
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        out->delayed += atomic_load_explicit(&s->retry_unarmed[p], memory_order_relaxed);
    out->running = s->running;
    out->limit = s->cap;
    /* Orphans are the coroutines alive beyond those whose attempt holds a
     * slot. Derived rather than counted: a hog timed out by the watchdog
     * becomes an orphan without its worker knowing yet. (Momentarily low
     * while a worker has releases not yet applied.) The slots first: a run
     * returns before its slot is freed, so one that ends meanwhile is seen
     * gone from both, or from the runs only, never as an orphan. */
    out->running = running_locked(s);
    uint64_t live = live_runs_total(s, memory_order_acquire);
    out->orphans = live > out->running ? live - out->running : 0;
    pthread_mutex_unlock(&s->lock);
    out->stacks_in_use = 0;
    for (unsigned i = 0; i <= s->nworkers; i++) {
        struct worker_counts *c = i < s->nworkers ? &s->workers[i].counts : &s->shared_counts;
        out->started += atomic_load_explicit(&c->started, memory_order_relaxed);
        out->panicked += atomic_load_explicit(&c->panicked, memory_order_relaxed);
        for (int p = 0; p < AX_PRIO_COUNT; p++) {
            uint64_t e[WC_ENDS];
            for (int k = 0; k < WC_ENDS; k++)
                e[k] = atomic_load_explicit(&c->ended[p][k], memory_order_relaxed);
            ax_prio_stats *ps = &out->prio[p];
            ps->succeeded += e[JS_SUCCEEDED - JS_SUCCEEDED];
            ps->failed += e[JS_FAILED - JS_SUCCEEDED];
            ps->timed_out += e[JS_TIMED_OUT - JS_SUCCEEDED];
            ps->cancelled += e[JS_CANCELLED - JS_SUCCEEDED];
        }
        if (i < s->nworkers)
            out->stacks_in_use +=
                atomic_load_explicit(&s->workers[i].stacks_in_use, memory_order_relaxed);
    }
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        out->succeeded += out->prio[p].succeeded;
        out->failed += out->prio[p].failed;
        out->timed_out += out->prio[p].timed_out;
        out->cancelled += out->prio[p].cancelled;
    }
    out->callback_overruns = cb_pool_overruns(s);
    out->callback_dropped = cb_pool_dropped(s);
    return AX_OK;
}
