/* callback.c - the pool that runs on_timeout (seed §5.2).
 *
 * The seed's incident lesson: a slow OnTimeout run inline stalled the whole
 * scheduling loop. Here on_timeout never runs on a worker or on the dispatch
 * path: it is queued to a few dedicated threads. C cannot preempt a
 * function, so the pool's "time limit" is enforced the only honest way: the
 * monitor notices a callback running past callback_timeout_ms, counts it as
 * an overrun (ax_stats.callback_overruns) and, when every pool thread is
 * stuck in one, starts another thread so the queue keeps moving (at most
 * callback_threads + CB_EXTRA_MAX threads). Items are copies (ax_result),
 * never pointers into ax, so a late callback cannot touch freed state.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

#define CB_EXTRA_MAX 16

struct cb_item {
    struct cb_item *next;
    ax_callback fn;
    void *arg;
    ax_result r;
};

struct cb_thread {
    struct cb_pool *pool;
    pthread_t thread;
    _Atomic uint64_t started_ns; /* 0 while idle */
    bool overrun_counted;
};

struct cb_pool {
    struct ax_sched *s;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct cb_item *head, *tail;
    bool stop;
    unsigned nthreads, max_threads;
    struct cb_thread *threads;
    _Atomic uint64_t overruns;
    uint64_t limit_ns;
};

static void *cb_main(void *arg)
{
    struct cb_thread *t = arg;
    struct cb_pool *p = t->pool;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->cond, &p->lock);
        struct cb_item *it = p->head;
        if (!it)
            break; /* stopping, queue drained */
        p->head = it->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        atomic_store(&t->started_ns, now_ns());
        it->fn(&it->r, it->arg);
        atomic_store(&t->started_ns, 0);
        free(it);
        pthread_mutex_lock(&p->lock);
        t->overrun_counted = false;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static int add_thread_locked(struct cb_pool *p)
{
    struct cb_thread *t = &p->threads[p->nthreads];
    t->pool = p;
    atomic_store(&t->started_ns, 0);
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
    p->limit_ns = (uint64_t)s->cfg.callback_timeout_ms * 1000000u;
    if (!p->threads) {
        free(p);
        return ax_fail_static(AX_ENOMEM, "out of memory for the callback pool");
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    s->cbp = p;
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

void cb_pool_stop(struct ax_sched *s)
{
    struct cb_pool *p = s->cbp;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->cond);
    unsigned n = p->nthreads;
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(p->threads[i].thread, NULL);
    while (p->head) { /* only if every thread failed to start */
        struct cb_item *it = p->head;
        p->head = it->next;
        it->fn(&it->r, it->arg);
        free(it);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p->threads);
    free(p);
    s->cbp = NULL;
}

void cb_pool_post(struct ax_sched *s, ax_callback fn, void *arg, const ax_result *r)
{
    struct cb_pool *p = s->cbp;
    struct cb_item *it = malloc(sizeof *it);
    if (!it) {
        /* No memory to queue it: run it here rather than lose it. */
        fn(r, arg);
        return;
    }
    it->next = NULL;
    it->fn = fn;
    it->arg = arg;
    it->r = *r;
    pthread_mutex_lock(&p->lock);
    if (p->tail)
        p->tail->next = it;
    else
        p->head = it;
    p->tail = it;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
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
                atomic_fetch_add(&p->overruns, 1);
                fprintf(stderr,
                        "ax: on_timeout callback running for more than %u ms; "
                        "the callback pool goes on without it\n",
                        s->cfg.callback_timeout_ms);
            }
        }
    }
    if (stuck == p->nthreads && p->head && p->nthreads < p->max_threads)
        add_thread_locked(p);
    pthread_mutex_unlock(&p->lock);
    return busy;
}

uint64_t cb_pool_overruns(struct ax_sched *s)
{
    return s->cbp ? atomic_load(&s->cbp->overruns) : 0;
}
