/* peer_threadpool.c - the thread-pool baseline for the full-path benchmark.
 *
 * What the seed replaced (§1.1: "thread pool + Future.get(timeout)"), written
 * the ordinary pthread way and not handicapped:
 *   - a fixed pool of `threads` worker threads;
 *   - one queue (three FIFO lists, HIGH first, then NORMAL, then LOW) under
 *     one mutex, with a condition variable workers sleep on;
 *   - submit() mallocs a task and its future (mutex + condvar + done flag),
 *     stamps its deadline (now + timeout) and queues it;
 *   - the submitting thread then collects each future with
 *     pthread_cond_timedwait until that task's deadline: the per-task
 *     timeout of Future.get(timeout).
 * Same work as ax_fullpath.c: `tasks` empty tasks, priorities cycling
 * HIGH/NORMAL/LOW, 1 s timeout, from one submitting thread; bench/run runs
 * it with 1, 2 and 4 threads beside ax's 1, 2 and 4 workers. Prints
 *   tp_fullpath_t<threads>_ns  (last future collected - first submit) / tasks
 * With submitters=S (S > 1) S threads each submit tasks/S and collect
 * their own futures, started together by a barrier; it prints
 *   tp_fullpath_t<threads>_s<S>_ns  (last future collected - first
 *                                    submitter's start after the barrier) / tasks
 * beside ax_fullpath's submitters=S.
 * Per task the pool does what ax does not: a malloc'd task + future, a
 * mutex and condvar initialised and destroyed, a condvar signal to wake a
 * thread, a timed wait on the future by the submitting thread. It does not
 * do what ax does: no admission or bound, strict priority instead of quota
 * rounds, no deadline on the running task (the 1 s only bounds the
 * submitter's wait: a late task is abandoned, never interrupted), no stack
 * of its own (the task runs on the pool thread's), no callback or result
 * struct (the submitter reads an int).
 */
#include "bench_util.h"

enum { HIGH, NORMAL, LOW, NPRIO };

struct future {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct timespec deadline; /* CLOCK_MONOTONIC */
    int done;
    int rc;
};

struct task {
    int (*fn)(void *);
    void *arg;
    struct future fut;
    struct task *next;
};

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t nonempty;
    struct task *head[NPRIO], *tail[NPRIO];
    int stop;
    pthread_t *threads;
    unsigned nthreads;
};

static pthread_condattr_t mono; /* condvars timed against CLOCK_MONOTONIC */

static struct task *pop_locked(struct pool *p)
{
    for (int pr = 0; pr < NPRIO; pr++) {
        struct task *t = p->head[pr];
        if (t) {
            p->head[pr] = t->next;
            if (!p->head[pr])
                p->tail[pr] = NULL;
            return t;
        }
    }
    return NULL;
}

static void *worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        struct task *t;
        while (!(t = pop_locked(p)) && !p->stop)
            pthread_cond_wait(&p->nonempty, &p->mu);
        pthread_mutex_unlock(&p->mu);
        if (!t)
            return NULL;
        int rc = t->fn(t->arg);
        pthread_mutex_lock(&t->fut.mu);
        t->fut.rc = rc;
        t->fut.done = 1;
        pthread_cond_signal(&t->fut.cv);
        pthread_mutex_unlock(&t->fut.mu);
    }
}

static void pool_start(struct pool *p, unsigned n)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->nonempty, NULL);
    p->nthreads = n;
    p->threads = bu_xcalloc(n, sizeof *p->threads);
    for (unsigned i = 0; i < n; i++)
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            perror("pthread_create");
            exit(1);
        }
}

static void pool_stop(struct pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->nonempty);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
}

static struct task *submit(struct pool *p, int (*fn)(void *), void *arg, int prio,
                           uint64_t timeout_ms)
{
    struct task *t = malloc(sizeof *t);
    if (!t) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_init(&t->fut.mu, NULL);
    pthread_cond_init(&t->fut.cv, &mono);
    t->fut.done = 0;
    t->fut.rc = 0;
    uint64_t dl = bu_now_ns() + timeout_ms * 1000000u;
    t->fut.deadline.tv_sec = (time_t)(dl / 1000000000u);
    t->fut.deadline.tv_nsec = (long)(dl % 1000000000u);

    pthread_mutex_lock(&p->mu);
    if (p->tail[prio])
        p->tail[prio]->next = t;
    else
        p->head[prio] = t;
    p->tail[prio] = t;
    pthread_cond_signal(&p->nonempty);
    pthread_mutex_unlock(&p->mu);
    return t;
}

/* Future.get(timeout): 0, the task's code, or ETIMEDOUT. Frees the task
 * unless it timed out (then the worker still owns it; a real pool would
 * hand it a cancel flag - it never happens here). */
static int get(struct task *t)
{
    pthread_mutex_lock(&t->fut.mu);
    int rc = 0;
    while (!t->fut.done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&t->fut.cv, &t->fut.mu, &t->fut.deadline);
    int done = t->fut.done, code = t->fut.rc;
    pthread_mutex_unlock(&t->fut.mu);
    if (!done)
        return ETIMEDOUT;
    pthread_cond_destroy(&t->fut.cv);
    pthread_mutex_destroy(&t->fut.mu);
    free(t);
    return code;
}

static int empty(void *arg)
{
    (void)arg;
    return 0;
}

/* One of `submitters` threads: submits its share, then collects it. */
struct submitter {
    struct pool *p;
    pthread_barrier_t *go;
    long first, count, failed;
    uint64_t t0, t1; /* its start after the barrier, its last future collected */
};

static void *submit_share(void *arg)
{
    struct submitter *sub = arg;
    static const int cycle[3] = {HIGH, NORMAL, LOW};
    struct task **futs = bu_xcalloc((size_t)sub->count, sizeof *futs);
    pthread_barrier_wait(sub->go);
    sub->t0 = bu_now_ns();
    for (long i = 0; i < sub->count; i++)
        futs[i] = submit(sub->p, empty, NULL, cycle[(sub->first + i) % 3], 1000);
    for (long i = 0; i < sub->count; i++)
        if (get(futs[i]) != 0)
            sub->failed++;
    sub->t1 = bu_now_ns();
    free(futs);
    return NULL;
}

static int run_submitters(struct pool *p, long tasks, unsigned threads, unsigned nsub)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, nsub + 1);
    struct submitter *subs = bu_xcalloc(nsub, sizeof *subs);
    pthread_t *tids = bu_xcalloc(nsub, sizeof *tids);
    for (unsigned k = 0; k < nsub; k++) {
        subs[k] = (struct submitter){.p = p, .go = &go, .first = tasks * k / nsub,
                                     .count = tasks * (k + 1) / nsub - tasks * k / nsub};
        if (pthread_create(&tids[k], NULL, submit_share, &subs[k]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    pthread_barrier_wait(&go);
    long failed = 0;
    uint64_t t0 = UINT64_MAX, t1 = 0; /* as ax_fullpath: first start, last collected */
    for (unsigned k = 0; k < nsub; k++) {
        pthread_join(tids[k], NULL);
        failed += subs[k].failed;
        if (subs[k].t0 < t0)
            t0 = subs[k].t0;
        if (subs[k].t1 > t1)
            t1 = subs[k].t1;
    }
    pool_stop(p);
    pthread_barrier_destroy(&go);
    free(subs);
    free(tids);
    if (failed) {
        fprintf(stderr, "threadpool: %ld tasks timed out or failed\n", failed);
        return 1;
    }
    printf("tp_fullpath_t%u_s%u_ns %.2f\n", threads, nsub, (double)(t1 - t0) / (double)tasks);
    return 0;
}

int main(int argc, char **argv)
{
    long tasks = (long)bu_arg(argc, argv, "tasks", 200000);
    unsigned threads = (unsigned)bu_arg(argc, argv, "threads", 1);
    uint64_t nsub_arg = bu_arg(argc, argv, "submitters", 1);
    bu_args_done(argc, argv); /* no batch= or split=: the pool submits one task a call */
    unsigned nsub = nsub_arg > 256 ? 0 : (unsigned)nsub_arg; /* 0: refused below */
    if (tasks < 1 || threads < 1) {
        fprintf(stderr, "peer_threadpool: tasks=%ld threads=%u: at least 1 each\n", tasks, threads);
        return 2;
    }
    if (nsub < 1 || nsub > 256) {
        fprintf(stderr, "peer_threadpool: submitters=%llu: 1 to 256\n",
                (unsigned long long)nsub_arg);
        return 2;
    }
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);

    struct pool p;
    pool_start(&p, threads);
    if (nsub > 1)
        return run_submitters(&p, tasks, threads, nsub);
    struct task **futs = bu_xcalloc((size_t)tasks, sizeof *futs);
    static const int cycle[3] = {HIGH, NORMAL, LOW};

    uint64_t t0 = bu_now_ns();
    for (long i = 0; i < tasks; i++)
        futs[i] = submit(&p, empty, NULL, cycle[i % 3], 1000);
    long failed = 0;
    for (long i = 0; i < tasks; i++)
        if (get(futs[i]) != 0)
            failed++;
    uint64_t t1 = bu_now_ns();

    pool_stop(&p);
    if (failed) {
        fprintf(stderr, "threadpool: %ld tasks timed out or failed\n", failed);
        return 1;
    }
    printf("tp_fullpath_t%u_ns %.2f\n", threads, (double)(t1 - t0) / (double)tasks);
    free(futs);
    return 0;
}
