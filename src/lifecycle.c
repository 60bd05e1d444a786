/* lifecycle.c - create, shut down and free a scheduler; the stats snapshot
 * (DESIGN.md §10).
 *
 * Shutdown contract: after ax_shutdown begins, ax_submit returns
 * AX_ESHUTDOWN. Every queued and delayed task ends CANCELLED with its
 * on_done (so the caller can persist it), running tasks get until the
 * deadline to finish, then they are cancelled too. Nothing admitted is lost:
 * every task's on_done has run when ax_shutdown returns.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void stop_threads(struct ax_sched *s, unsigned started);

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
    struct ax_sched *s = aligned_alloc(AX_CACHELINE, (sizeof *s + AX_CACHELINE - 1) /
                                                         AX_CACHELINE * AX_CACHELINE);
    if (!s)
        return ax_fail_static(AX_ENOMEM, "ax_new: out of memory");
    memset(s, 0, sizeof *s);
    s->cfg = r;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->monitor_cond, &ca);
    pthread_cond_init(&s->idle_cond, &ca);
    pthread_condattr_destroy(&ca);
    s->cap = r.max_concurrency;
    s->quota_auto[AX_PRIO_HIGH] = r.quota_high == 0;
    s->quota_auto[AX_PRIO_NORMAL] = r.quota_normal == 0;
    s->quota[AX_PRIO_HIGH] = r.quota_high;
    s->quota[AX_PRIO_NORMAL] = r.quota_normal;
    s->quota[AX_PRIO_LOW] = r.low_guaranteed;
    sched_recompute_locked(s);
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        s->retry_enabled[p] = r.retry_enabled[p];
    if (r.rate_limit > 0) {
        s->rate = r.rate_limit;
        s->burst = r.rate_burst ? (double)r.rate_burst
                                : (r.rate_limit >= 1.0 ? r.rate_limit : 1.0);
        s->tokens = s->burst;
        s->rate_last_ns = now_ns();
    }
    s->chunks = calloc(AX_MAX_JOBS / AX_JOB_CHUNK, sizeof *s->chunks);
    s->nworkers = r.workers;
    s->workers = aligned_alloc(AX_CACHELINE, r.workers * sizeof *s->workers);
    if (!s->chunks || !s->workers) {
        free(s->chunks);
        free(s->workers);
        free(s);
        return ax_fail_static(AX_ENOMEM, "ax_new: out of memory");
    }
    memset(s->workers, 0, r.workers * sizeof *s->workers);
    ax_wheel_init(&s->delay_wheel, ns_to_tick(now_ns()));

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
    if (rc == 0)
        rc = monitor_start(s);
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
        s->closing = true;
        stop_threads(s, started);
        if (s->monitor)
            monitor_stop(s);
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
    for (unsigned i = 0; i < started; i++)
        pthread_join(s->workers[i].thread, NULL);
}

/* Take every queued and delayed job out (s->lock held); link them on *out. */
static void drain_queued_locked(struct ax_sched *s, struct job **out)
{
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        struct job *j;
        while ((j = s->b[p].head) != NULL) {
            bucket_remove_locked(s, j);
            if (ax_wheel_node_armed(&j->tnode))
                monitor_del_locked(s, j);
            j->next = *out;
            *out = j;
        }
    }
    /* Everything left in the monitor's wheel is a delay or back-off. */
    struct ax_wheel_node *list = NULL;
    ax_wheel_advance(&s->delay_wheel, s->delay_wheel.now + (1ull << 40), &list);
    while (list) {
        struct job *j = AX_CONTAINER_OF(list, struct job, tnode);
        list = list->next;
        j->tnode.next = NULL;
        if (j->where == WHERE_DELAY)
            s->delayed_new[j->prio]--;
        s->delayed--;
        j->where = WHERE_NONE;
        j->next = *out;
        *out = j;
    }
    for (struct job *j = *out; j; j = j->next) {
        uint64_t sw = atomic_load(&j->sw);
        atomic_store(&j->sw, (sw & ~(uint64_t)0xff) | AX_STATE_CANCELLED);
        j->run_ns = 0;
    }
}

static int wait_idle_until(struct ax_sched *s, uint64_t deadline)
{
    pthread_mutex_lock(&s->lock);
    /* Until no slot is held and every admitted task has ended (the monitor
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
    return left;
}

/* Cancel every STARTING/RUNNING attempt. */
static void cancel_running(struct ax_sched *s)
{
    for (unsigned c = 0; c < s->nchunks; c++) {
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++) {
            uint64_t id;
            pthread_mutex_lock(&s->lock);
            struct job *j = &s->chunks[c][k];
            unsigned st = sw_state(atomic_load(&j->sw));
            id = j->id;
            bool live = j->in_system && (st == AX_STATE_RUNNING || st == JS_STARTING);
            pthread_mutex_unlock(&s->lock);
            if (live)
                ax_cancel(s, id);
        }
    }
}

int ax_shutdown(ax_sched *s, int64_t timeout_ms)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_shutdown: scheduler is NULL");
    if (ax_current_run && ax_current_run->s == s)
        return ax_fail_static(AX_ESTATE, "ax_shutdown: called from one of its own tasks");
    uint64_t deadline = now_ns() + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000u : 0);
    struct job *q = NULL;
    pthread_mutex_lock(&s->lock);
    s->closing = true;
    sched_hint_locked(s);
    drain_queued_locked(s, &q);
    pthread_mutex_unlock(&s->lock);
    while (q) {
        struct job *j = q;
        q = j->next;
        finish_attempt(s, NULL, j, AX_STATE_CANCELLED, AX_ECANCELED, "cancelled at shutdown",
                       false);
    }
    if (wait_idle_until(s, deadline) > 0) {
        cancel_running(s);
        wait_idle_until(s, now_ns() + 100000000u);
    }
    /* Give cancelled coroutines time to unwind: as long again as the
     * caller granted running tasks, and at least a second (10 000 parked
     * connections take ~200 ms to wake and return on 2 cores). */
    uint64_t grace = timeout_ms > 1000 ? (uint64_t)timeout_ms * 1000000u : 1000000000u;
    uint64_t until = now_ns() + grace;
    while (atomic_load(&s->total_live_runs) > 0 && now_ns() < until)
        usleep(1000);
    if (atomic_load(&s->total_live_runs) > 0)
        return ax_fail(AX_ETIMEDOUT, "ax_shutdown: %llu cancelled tasks have not returned yet",
                       (unsigned long long)atomic_load(&s->total_live_runs));
    return AX_OK;
}

void ax_free(ax_sched *s)
{
    if (!s)
        return;
    dump_unregister(s);
    ax_shutdown(s, 0);
    stop_threads(s, s->nworkers);
    monitor_stop(s);
    cb_pool_stop(s);
    ev_stop(s); /* last: writes what the others produced */
    metrics_destroy(s);
    for (unsigned i = 0; i < s->nworkers; i++) {
        free(s->workers[i].linger);
        worker_destroy(&s->workers[i]);
    }
    free(s->workers);
    job_table_destroy(s);
    pthread_cond_destroy(&s->monitor_cond);
    pthread_cond_destroy(&s->idle_cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ax_stats_get(ax_sched *s, ax_stats *out)
{
    if (!s || !out)
        return ax_fail_static(AX_EINVAL, "ax_stats_get: NULL argument");
    pthread_mutex_lock(&s->lock);
    *out = s->st;
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        out->queued[p] = s->b[p].n;
    out->delayed = s->delayed;
    out->running = s->running;
    out->limit = s->cap;
    /* Orphans are the coroutines alive beyond those whose attempt holds a
     * slot. Derived rather than counted: a hog timed out by the monitor
     * becomes an orphan without its worker knowing yet. (Momentarily low
     * while a worker has releases not yet applied.) */
    uint64_t live = atomic_load(&s->total_live_runs);
    out->running = running_locked(s);
    out->orphans = live > out->running ? live - out->running : 0;
    pthread_mutex_unlock(&s->lock);
    out->stacks_in_use = 0;
    for (unsigned i = 0; i < s->nworkers; i++) {
        struct worker_counts *c = &s->workers[i].counts;
        out->succeeded += atomic_load_explicit(&c->succeeded, memory_order_relaxed);
        out->failed += atomic_load_explicit(&c->failed, memory_order_relaxed);
        out->timed_out += atomic_load_explicit(&c->timed_out, memory_order_relaxed);
        out->cancelled += atomic_load_explicit(&c->cancelled, memory_order_relaxed);
        out->panicked += atomic_load_explicit(&c->panicked, memory_order_relaxed);
        out->stacks_in_use +=
            atomic_load_explicit(&s->workers[i].stacks_in_use, memory_order_relaxed);
    }
    out->callback_overruns = cb_pool_overruns(s);
    return AX_OK;
}
