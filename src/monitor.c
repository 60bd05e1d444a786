/* monitor.c - the one background thread that watches time for everybody.
 *
 * It owns the scheduler-wide timing wheel (s->delay_wheel, guarded by
 * s->lock) that holds:
 *   - delayed submissions (spec.delay_ms)            WHERE_DELAY
 *   - retry back-offs (seed §3.4, §5.5)               WHERE_RETRY
 *   - deadlines of queued tasks (spec.deadline_ns)   WHERE_BUCKET
 * When a delay or back-off ends the job re-enters its bucket (or ends
 * TIMED_OUT if its absolute deadline passed meanwhile); a queued task whose
 * deadline passes ends TIMED_OUT without running.
 *
 * It is also the hog watch. A worker enforces the deadlines of its own tasks
 * with its own wheel, but a task that never yields keeps its worker from
 * looking. While any worker is busy (out of epoll_wait) the monitor polls
 * every HOG_POLL_MS and times out, by CAS, a task still on a CPU past its
 * deadline: its slot is freed, its callbacks run, its coroutine becomes an
 * orphan that every later ax call tells to stop (DESIGN.md §7). Tasks parked
 * behind a hog on the same worker are ended when the worker comes back.
 *
 * Idle cost: with no worker busy and no callback running it sleeps until the
 * wheel's next expiry, or for good; a worker that wakes kicks it. So an idle
 * scheduler, even with 100 000 parked tasks, makes no periodic wake-ups.
 */
#include "internal.h"

#include <errno.h>

#define HOG_POLL_MS 2

void monitor_add_locked(struct ax_sched *s, struct job *j, uint64_t when_ns, uint8_t where)
{
    if (where != WHERE_BUCKET) {
        j->where = where;
        s->delayed++;
    }
    uint64_t tick = ns_to_tick_ceil(when_ns);
    ax_wheel_add(&s->delay_wheel, &j->tnode, tick);
    if (tick < s->monitor_wake_tick) {
        s->monitor_wake_tick = tick;
        pthread_cond_signal(&s->monitor_cond);
    }
}

void monitor_del_locked(struct ax_sched *s, struct job *j)
{
    ax_wheel_del(&s->delay_wheel, &j->tnode);
    if (j->where == WHERE_DELAY)
        s->delayed_new[j->prio]--;
    if (j->where == WHERE_DELAY || j->where == WHERE_RETRY) {
        s->delayed--;
        j->where = WHERE_NONE;
    }
}

void monitor_kick(struct ax_sched *s)
{
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->monitor_idle, false);
    pthread_cond_signal(&s->monitor_cond);
    pthread_mutex_unlock(&s->lock);
}

/* Expire the delay wheel (s->lock held). Jobs to end are linked on *ended. */
static unsigned expire_delays_locked(struct ax_sched *s, uint64_t now, struct job **ended)
{
    uint64_t tick = ns_to_tick(now);
    if (ax_wheel_next(&s->delay_wheel) > tick)
        return 0;
    struct ax_wheel_node *list = NULL;
    unsigned requeued = 0;
    ax_wheel_advance(&s->delay_wheel, tick, &list);
    while (list) {
        struct job *j = AX_CONTAINER_OF(list, struct job, tnode);
        list = list->next;
        j->tnode.next = NULL;
        if (j->where == WHERE_BUCKET) {
            bucket_remove_locked(s, j);
        } else {
            if (j->where == WHERE_DELAY)
                s->delayed_new[j->prio]--;
            s->delayed--;
            j->where = WHERE_NONE;
            if (!(j->deadline_ns && now >= j->deadline_ns)) {
                submit_requeue_locked(s, j, now);
                requeued++;
                continue;
            }
        }
        /* The job holds no slot and nobody else can end it while we hold
         * the lock (cancel and dispatch take it too). */
        j->wait_ns = now - j->enqueue_ns;
        j->run_ns = 0;
        atomic_store_explicit(&j->sw, sw_make(j->id, j->attempt, AX_STATE_TIMED_OUT),
                              memory_order_release);
        j->next = *ended;
        *ended = j;
    }
    return requeued;
}

static bool read_published(struct worker *w, struct job **j, uint64_t *sw, uint64_t *deadline,
                           uint64_t *seq)
{
    for (int i = 0; i < 8; i++) {
        uint64_t s1 = atomic_load_explicit(&w->pub_seq, memory_order_acquire);
        if (s1 & 1)
            continue;
        *j = atomic_load_explicit(&w->pub_job, memory_order_relaxed);
        *sw = atomic_load_explicit(&w->pub_sw, memory_order_relaxed);
        *deadline = atomic_load_explicit(&w->pub_deadline_ns, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&w->pub_seq, memory_order_relaxed) == s1) {
            *seq = s1;
            return true;
        }
    }
    return false;
}

/* Time out tasks that overran their deadline on a busy worker. Returns
 * whether any worker is busy (so the next sleep must be short). */
static bool hog_watch(struct ax_sched *s, uint64_t now)
{
    bool busy = false;
    for (unsigned i = 0; i < s->nworkers; i++) {
        struct worker *w = &s->workers[i];
        if (!atomic_load(&w->busy))
            continue;
        busy = true;
        struct job *j;
        uint64_t sw, deadline, seq;
        if (!read_published(w, &j, &sw, &deadline, &seq) || !j)
            continue;
        linger_hog_check(s, w, now, j, sw, deadline, seq);
        /* A margin of one poll lets the worker's own wheel, which is exact,
         * win whenever the worker is not actually stuck. */
        if (now < deadline + HOG_POLL_MS * 1000000ull)
            continue;
        if (!finish_try_cas(j, sw, AX_STATE_TIMED_OUT))
            continue; /* ended already, or the job moved on */
        j->run_ns = now - (j->enqueue_ns + j->wait_ns);
        finish_attempt(s, NULL, j, AX_STATE_TIMED_OUT, AX_ETIMEDOUT,
                       "timed out while running without yielding", true);
    }
    return busy;
}

static void *monitor_main(void *arg)
{
    struct ax_sched *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->monitor_stop) {
        uint64_t now = now_ns();
        struct job *ended = NULL;
        unsigned requeued = expire_delays_locked(s, now, &ended);
        bool can_run = !s->paused && running_locked(s) < s->cap;
        pthread_mutex_unlock(&s->lock);

        while (ended) {
            struct job *j = ended;
            ended = j->next;
            finish_attempt(s, NULL, j, AX_STATE_TIMED_OUT, AX_ETIMEDOUT,
                           "deadline passed while queued", false);
        }
        if (requeued && can_run)
            sched_wake_workers(s, requeued);
        bool busy = hog_watch(s, now);
        busy = cb_pool_check(s, now) || busy;

        pthread_mutex_lock(&s->lock);
        if (s->monitor_stop)
            break;
        uint64_t tick = ns_to_tick(now_ns());
        uint64_t wake = ax_wheel_next(&s->delay_wheel);
        if (busy && wake > tick + HOG_POLL_MS)
            wake = tick + HOG_POLL_MS;
        if (wake > tick + HOG_POLL_MS) {
            /* Not polling for hogs during this sleep (until the next delay
             * expiry, or for good): announce it, then look once more at the
             * workers (a worker sets busy, then reads monitor_idle and kicks
             * us). */
            atomic_store(&s->monitor_idle, true);
            for (unsigned i = 0; i < s->nworkers; i++)
                if (atomic_load(&s->workers[i].busy))
                    wake = tick + HOG_POLL_MS;
            if (wake <= tick + HOG_POLL_MS)
                atomic_store(&s->monitor_idle, false);
        }
        s->monitor_wake_tick = wake;
        if (wake == UINT64_MAX) {
            pthread_cond_wait(&s->monitor_cond, &s->lock);
        } else if (wake > tick) {
            struct timespec ts = {.tv_sec = (time_t)(wake / 1000),
                                  .tv_nsec = (long)(wake % 1000) * 1000000L};
            int rc = pthread_cond_timedwait(&s->monitor_cond, &s->lock, &ts);
            (void)rc; /* ETIMEDOUT or a signal: either way, look again */
        }
        atomic_store(&s->monitor_idle, false);
        s->monitor_wake_tick = UINT64_MAX;
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int monitor_start(struct ax_sched *s)
{
    s->monitor_wake_tick = UINT64_MAX;
    int rc = pthread_create(&s->monitor, NULL, monitor_main, s);
    if (rc != 0)
        return ax_fail(AX_ESYS, "monitor thread: pthread_create failed (%d)", rc);
    return AX_OK;
}

void monitor_stop(struct ax_sched *s)
{
    pthread_mutex_lock(&s->lock);
    s->monitor_stop = true;
    pthread_cond_signal(&s->monitor_cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->monitor, NULL);
}
