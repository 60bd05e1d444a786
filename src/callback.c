/* callback.c - the callback pool: on_timeout, and the attempts the watchdog
 * ended (seed §5.2; DESIGN.md §3a, §7).
 *
 * The seed's incident lesson: a slow OnTimeout run inline stalled the whole
 * scheduling loop. Here on_timeout never runs on a worker or on the dispatch
 * path: it is queued to a few dedicated threads ("ax-callback-N"). The queue
 * is a ring of config.callback_queue entries allocated at start: posting
 * copies the result in and never allocates; when the ring is full the call
 * is dropped and counted (ax_stats.callback_dropped), because an unbounded
 * queue of timeouts is exactly the memory growth of the seed's incident.
 *
 * The pool also finishes the attempts that the watchdog ended while their
 * worker was held (watchdog.c): the watchdog may not run user code, and the
 * held worker cannot, so their terminal path (on_done) runs here, on a
 * thread of its own ("ax-finish") so that an on_timeout stuck in the host's
 * code never holds up an on_done. Those are never dropped: they are linked
 * through the job itself, so they cost no memory, and their number is
 * bounded by the admitted jobs.
 *
 * C cannot preempt a function, so the pool's "time limit" is enforced the
 * only honest way: the watchdog notices a callback running past
 * callback_timeout_ms, counts it as an overrun and, when every pool thread
 * is stuck in one, starts another thread so the queue keeps moving (at most
 * callback_threads + CB_EXTRA_MAX threads).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CB_EXTRA_MAX 16

_Thread_local struct ax_sched *ax_current_cb_sched;
_Thread_local struct on_done_frame *ax_on_done_frames;

struct cb_item {
    ax_callback fn;
    void *arg;
    ax_result r;
    struct job *held; /* JH_CB taken for it (cb_pool_post_held), or NULL */
};

/* What a callback thread runs (cb_thread.what), for the overrun message. */
enum { CB_RUNS_ON_TIMEOUT = 1, CB_RUNS_ON_RELEASE = 2 };

struct cb_thread {
    struct cb_pool *pool;
    pthread_t thread;
    unsigned index;
    _Atomic uint64_t started_ns; /* 0 while idle */
    _Atomic uint64_t task_id;    /* whose callback runs, while started_ns != 0 */
    _Atomic unsigned what;       /* CB_RUNS_*, likewise */
    _Atomic bool exited;         /* cb_main returned: joining it cannot block */
    bool overrun_counted;
};

struct cb_pool {
    struct ax_sched *s;
    pthread_mutex_t lock;
    pthread_cond_t cond;     /* ring items */
    pthread_cond_t fin_cond; /* attempts to finish */
    pthread_t fin_thread;
    bool fin_started;
    _Atomic bool fin_exited; /* fin_main returned */
    struct cb_item *ring; /* callback_queue entries */
    size_t cap, head, n;
    struct job *fin_head, *fin_tail; /* attempts to finish (watchdog), FIFO via j->next */
    bool stop;
    unsigned nthreads, max_threads;
    struct cb_thread *threads;
    uint64_t limit_ns;
};

/* handoff: how the watchdog ended the attempt (packed in j->handoff). */
static uint32_t handoff_pack(unsigned attempt, unsigned state, unsigned to, unsigned slot)
{
    return (uint32_t)attempt << 13 | state << 9 | to << 5 | slot;
}

/* j->handoff of a job handed over only for its on_release (cb_pool_release):
 * never a packed attempt (attempts stay below 2^16). */
#define HANDOFF_RELEASE UINT32_MAX

static void finish_handed(struct ax_sched *s, struct job *j)
{
    uint32_t h = j->handoff;
    if (h == HANDOFF_RELEASE) { /* counted since its terminal path (finish.c) */
        job_run_release(s, NULL, j);
        pthread_mutex_lock(&s->lock);
        job_free_locked(s, j);
        pthread_mutex_unlock(&s->lock);
        cb_return(s, own_worker(s));
        return;
    }
    unsigned attempt = h >> 13, state = (h >> 9) & 15, to = (h >> 5) & 15, slot = h & 7;
    bool began = !(h & FIN_UNBEGUN);
    char msg[96];
    if (to == JS_CANCELLED) {
        finish_attempt(s, NULL, j, attempt, state, to, AX_ECANCELED, "cancelled at shutdown",
                       (int)slot, 0, JH_HAND);
        return;
    }
    if (to == JS_FAILED && slot == FIN_NO_SLOT) {
        /* The watchdog expired the scheduler's wheel: a class ended it. */
        class_finish_unstarted(s, NULL, j, attempt, JH_HAND);
        return;
    }
    char dbuf[96];
    if (slot == FIN_NO_SLOT)
        snprintf(msg, sizeof msg, "%s", deadline_text(j, dbuf, sizeof dbuf));
    else if (h & FIN_HOLDER)
        snprintf(msg, sizeof msg,
                 "timed out after %llu ms (it ran on without yielding past its deadline)",
                 (unsigned long long)(j->timeout_ns / 1000000u));
    else
        snprintf(msg, sizeof msg, "timed out after %llu ms (its worker was held%s)",
                 (unsigned long long)(j->timeout_ns / 1000000u),
                 began ? "" : " before it began");
    /* Ended at its deadline: it ran about its timeout (the run's own start
     * is the held worker's to read, not ours), or not at all. */
    finish_attempt(s, NULL, j, attempt, state, to, AX_ETIMEDOUT, msg, (int)slot,
                   slot == FIN_NO_SLOT || !began ? 0 : j->timeout_ns, JH_HAND);
}

/* One of a job's queued on_timeouts ran or was dropped: the last lets go
 * of JH_CB, and may be the job's last hold (on_release runs here then). */
static void held_done(struct ax_sched *s, struct job *j)
{
    pthread_mutex_lock(&s->lock);
    uint64_t n = 0;
    bool last = --j->ext->timeouts_queued == 0;
    if (last)
        n = js_release(&j->sw, JH_CB);
    pthread_mutex_unlock(&s->lock);
    if (last && js_freeable(n))
        job_released(s, NULL, j, n);
    else if (last && job_let_go(JH_CB, n))
        join_let_go(s, j, n);
}

static void *cb_main(void *arg)
{
    struct cb_thread *t = arg;
    struct cb_pool *p = t->pool;
    char name[16];
    snprintf(name, sizeof name, "ax-callback-%u", t->index);
    pthread_setname_np(pthread_self(), name);
    ax_current_cb_sched = p->s;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->n && !p->stop)
            pthread_cond_wait(&p->cond, &p->lock);
        if (!p->n)
            break; /* stopping, queue drained */
        struct cb_item it = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->n--;
        pthread_mutex_unlock(&p->lock);
        atomic_store(&t->task_id, it.r.id);
        atomic_store(&t->what, CB_RUNS_ON_TIMEOUT);
        atomic_store(&t->started_ns, now_ns());
        /* The watchdog may have just gone to sleep for good, having seen
         * this thread idle: it must watch this callback's time (its
         * overrun, a replacement thread). Paired with the watchdog's store
         * of watchdog_idle and re-read of started_ns (cb_pool_running), as
         * a worker's busy is. */
        if (atomic_load_explicit(&p->s->watchdog_idle, memory_order_seq_cst))
            watchdog_kick(p->s);
        it.fn(&it.r, it.arg);
        if (it.held) {
            /* The job's last hold may drop here and run its on_release: a
             * callback of its own, timed from its own start (it was added to
             * the on_timeout's time, so two within callback_timeout_ms each
             * counted an overrun: stop 29's note). */
            /* Under the pool's lock, as cb_pool_check reads them: with the
             * flag cleared before the new start, the check could see the
             * on_timeout's start with the flag down and count its overrun
             * twice (review). */
            pthread_mutex_lock(&p->lock);
            atomic_store(&t->what, CB_RUNS_ON_RELEASE);
            atomic_store(&t->started_ns, now_ns());
            t->overrun_counted = false;
            pthread_mutex_unlock(&p->lock);
            held_done(p->s, it.held);
        }
        atomic_store(&t->started_ns, 0);
        pthread_mutex_lock(&p->lock);
        t->overrun_counted = false;
    }
    pthread_mutex_unlock(&p->lock);
    atomic_store_explicit(&t->exited, true, memory_order_release);
    return NULL;
}

/* The finisher: terminal paths of attempts the watchdog ended, in order. */
static void *fin_main(void *arg)
{
    struct cb_pool *p = arg;
    pthread_setname_np(pthread_self(), "ax-finish");
    ax_current_cb_sched = p->s;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->fin_head && !p->stop)
            pthread_cond_wait(&p->fin_cond, &p->lock);
        struct job *j = p->fin_head;
        if (!j)
            break; /* stopping, list drained */
        p->fin_head = j->next;
        if (!p->fin_head)
            p->fin_tail = NULL;
        pthread_mutex_unlock(&p->lock);
        finish_handed(p->s, j); /* drops JH_HAND */
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    atomic_store_explicit(&p->fin_exited, true, memory_order_release);
    return NULL;
}

static int add_thread_locked(struct cb_pool *p)
{
    struct cb_thread *t = &p->threads[p->nthreads];
    t->pool = p;
    t->index = p->nthreads;
    atomic_store(&t->started_ns, 0);
    atomic_store(&t->exited, false);
    t->overrun_counted = false;
    if (pthread_create(&t->thread, NULL, cb_main, t) != 0)
        return AX_ESYS;
    p->nthreads++;
    return AX_OK;
}

int cb_pool_start(struct ax_sched *s)
{
    struct cb_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ax_fail_static(AX_ENOMEM, "out of memory for the callback pool");
    p->s = s;
    p->max_threads = s->cfg.callback_threads + CB_EXTRA_MAX;
    p->threads = calloc(p->max_threads, sizeof *p->threads);
    p->cap = s->cfg.callback_queue;
    p->ring = calloc(p->cap, sizeof *p->ring);
    p->limit_ns = (uint64_t)s->cfg.callback_timeout_ms * 1000000u;
    if (!p->threads || !p->ring) {
        free(p->threads);
        free(p->ring);
        free(p);
        return ax_fail_static(AX_ENOMEM, "out of memory for the callback pool");
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    pthread_cond_init(&p->fin_cond, NULL);
    s->cbp = p;
    if (pthread_create(&p->fin_thread, NULL, fin_main, p) != 0)
        return ax_fail_static(AX_ESYS, "callback pool: pthread_create failed");
    p->fin_started = true;
    pthread_mutex_lock(&p->lock);
    for (unsigned i = 0; i < s->cfg.callback_threads; i++) {
        if (add_thread_locked(p) != AX_OK) {
            pthread_mutex_unlock(&p->lock);
            return ax_fail_static(AX_ESYS, "callback pool: pthread_create failed");
        }
    }
    pthread_mutex_unlock(&p->lock);
    return AX_OK;
}

/* The pool's threads drain what is queued and return; each says so
 * (exited) just before, so a thread still in a callback is seen without
 * joining it. */
static bool all_exited(struct cb_pool *p, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!atomic_load_explicit(&p->threads[i].exited, memory_order_acquire))
            return false;
    return !p->fin_started || atomic_load_explicit(&p->fin_exited, memory_order_acquire);
}

bool cb_pool_stop_until(struct ax_sched *s, uint64_t until)
{
    struct cb_pool *p = s->cbp;
    if (!p)
        return true;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->cond);
    pthread_cond_broadcast(&p->fin_cond);
    unsigned n = p->nthreads; /* the watchdog, which adds threads, has stopped */
    pthread_mutex_unlock(&p->lock);
    /* A callback that does not return holds its thread and may still use
     * the pool and the scheduler: past `until` the caller leaks them
     * rather than hang (new-user trial: ax_free waited out a 60 s
     * on_timeout with shutdown_timeout_ms 200). */
    while (!all_exited(p, n)) {
        if (now_ns() < until) {
            usleep(1000);
            continue;
        }
        /* Give up on the pool (the caller leaks it): join the threads that
         * returned, detach the others, so none is left unjoined for good. */
        for (unsigned i = 0; i < n; i++) {
            if (atomic_load_explicit(&p->threads[i].exited, memory_order_acquire))
                pthread_join(p->threads[i].thread, NULL);
            else
                pthread_detach(p->threads[i].thread);
        }
        if (p->fin_started) {
            if (atomic_load_explicit(&p->fin_exited, memory_order_acquire))
                pthread_join(p->fin_thread, NULL);
            else
                pthread_detach(p->fin_thread);
        }
        return false;
    }
    for (unsigned i = 0; i < n; i++)
        pthread_join(p->threads[i].thread, NULL);
    if (p->fin_started)
        pthread_join(p->fin_thread, NULL);
    /* Only if every thread failed to start: nothing admitted is lost. */
    while (p->fin_head) {
        struct job *j = p->fin_head;
        p->fin_head = j->next;
        finish_handed(s, j);
    }
    for (; p->n; p->n--, p->head = (p->head + 1) % p->cap) {
        struct cb_item *it = &p->ring[p->head];
        it->fn(&it->r, it->arg);
        if (it->held)
            held_done(s, it->held);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    pthread_cond_destroy(&p->fin_cond);
    free(p->threads);
    free(p->ring);
    free(p);
    s->cbp = NULL;
    return true;
}

void cb_pool_stop(struct ax_sched *s)
{
    (void)cb_pool_stop_until(s, UINT64_MAX);
}

static bool post(struct ax_sched *s, ax_callback fn, void *arg, const ax_result *r,
                 struct job *held)
{
    struct cb_pool *p = s->cbp;
    pthread_mutex_lock(&p->lock);
    if (p->n == p->cap) {
        pthread_mutex_unlock(&p->lock);
        atomic_fetch_add_explicit(&s->cb_dropped, 1, memory_order_relaxed);
        return false;
    }
    struct cb_item *it = &p->ring[(p->head + p->n) % p->cap];
    it->fn = fn;
    it->arg = arg;
    it->r = *r;
    it->held = held;
    p->n++;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return true;
}

void cb_pool_post(struct ax_sched *s, ax_callback fn, void *arg, const ax_result *r)
{
    post(s, fn, arg, r, NULL);
}

void cb_pool_post_held(struct ax_sched *s, struct job *j, ax_callback fn, void *arg,
                       const ax_result *r)
{
    /* The caller holds the job (it ends the attempt): the hold is taken
     * before anyone can let go of the job's last other one. */
    pthread_mutex_lock(&s->lock);
    if (j->ext->timeouts_queued++ == 0)
        atomic_fetch_or_explicit(&j->sw, JH_CB, memory_order_acq_rel);
    pthread_mutex_unlock(&s->lock);
    if (!post(s, fn, arg, r, j))
        held_done(s, j); /* dropped (queue full): as if it had run */
}

static void fin_push(struct ax_sched *s, struct job *j, uint32_t handoff)
{
    struct cb_pool *p = s->cbp;
    j->handoff = handoff;
    j->next = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->fin_tail)
        p->fin_tail->next = j;
    else
        p->fin_head = j;
    p->fin_tail = j;
    pthread_cond_signal(&p->fin_cond);
    pthread_mutex_unlock(&p->lock);
}

void cb_pool_finish(struct ax_sched *s, struct job *j, unsigned attempt, unsigned state,
                    unsigned to, int slot)
{
    fin_push(s, j, handoff_pack(attempt, state, to, (unsigned)slot));
}

void cb_pool_release(struct ax_sched *s, struct job *j)
{
    fin_push(s, j, HANDOFF_RELEASE);
}

bool cb_pool_check(struct ax_sched *s, uint64_t now)
{
    struct cb_pool *p = s->cbp;
    bool busy = false;
    unsigned stuck = 0;
    pthread_mutex_lock(&p->lock);
    for (unsigned i = 0; i < p->nthreads; i++) {
        struct cb_thread *t = &p->threads[i];
        uint64_t st = atomic_load(&t->started_ns);
        if (!st)
            continue;
        busy = true;
        if (now > st && now - st > p->limit_ns) {
            stuck++;
            if (!t->overrun_counted) {
                t->overrun_counted = true;
                atomic_fetch_add(&s->cb_overruns, 1);
                unsigned what = atomic_load(&t->what);
                report_note(s, report_line("ax: %s of task %llu has been running for more "
                                           "than %u ms; the callback pool goes on without it",
                                           what == CB_RUNS_ON_RELEASE ? "the on_release"
                                                                      : "an on_timeout",
                                           (unsigned long long)atomic_load(&t->task_id),
                                           s->cfg.callback_timeout_ms));
            }
        }
    }
    if (stuck == p->nthreads && p->n && p->nthreads < p->max_threads)
        add_thread_locked(p);
    pthread_mutex_unlock(&p->lock);
    return busy;
}

bool cb_pool_running(struct ax_sched *s)
{
    /* Without the lock (the watchdog holds s->lock here): the threads
     * array is allocated whole at start and started_ns is atomic. */
    struct cb_pool *p = s->cbp;
    for (unsigned i = 0; p && i < p->max_threads; i++)
        if (atomic_load_explicit(&p->threads[i].started_ns, memory_order_seq_cst))
            return true;
    return false;
}

/* In the scheduler, not the pool: ax_stats_get reads them from an events
 * callback while ax_free stops and frees the pool, the event thread
 * stopping last (review: TSan saw the free race the reads). */
uint64_t cb_pool_overruns(struct ax_sched *s)
{
    return atomic_load(&s->cb_overruns);
}

uint64_t cb_pool_dropped(struct ax_sched *s)
{
    return atomic_load(&s->cb_dropped);
}
