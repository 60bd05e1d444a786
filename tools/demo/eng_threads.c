/* eng_threads.c - the seed's "before" (§1.1): a fixed pool of threads, each
 * making blocking HTTP calls (curl_easy_perform, one kept-alive connection
 * per thread) with a per-call timeout, fed by one unbounded FIFO queue.
 *
 * This is the usual thread-pool executor: no priorities (a HIGH task waits
 * behind every task queued before it), no admission control (the queue
 * takes everything, so memory follows the backlog), no retries, and a call
 * cannot be cancelled: at the end of the run, queued tasks are dropped
 * (counted CANCELLED) but running calls are waited for, which their timeout
 * bounds. Threads use the default stack size, as an application would.
 */
#include "run.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct dm_task *head, *tail;
    uint64_t queued[DM_NPRIO];
    uint64_t busy;
    bool stop;
    pthread_t *th;
    unsigned n;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static size_t discard(char *p, size_t size, size_t n, void *userp)
{
    (void)p;
    (void)userp;
    return size * n;
}

static void *worker(void *arg)
{
    (void)arg;
    CURL *e = curl_easy_init();
    if (e) {
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    }
    for (;;) {
        pthread_mutex_lock(&P.mu);
        while (!P.head && !P.stop)
            pthread_cond_wait(&P.cv, &P.mu);
        struct dm_task *t = P.head;
        if (!t) {
            pthread_mutex_unlock(&P.mu);
            break;
        }
        P.head = t->next;
        if (!P.head) P.tail = NULL;
        P.queued[t->prio]--;
        P.busy++;
        pthread_mutex_unlock(&P.mu);

        uint64_t t0 = dm_attempt_begin(t);
        long status = 0;
        CURLcode c = CURLE_FAILED_INIT;
        if (e) {
            curl_easy_setopt(e, CURLOPT_URL, dm_run_g.url[t->cls]);
            curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)dm_run_g.timeout_wall_ms[t->cls]);
            c = curl_easy_perform(e);
            if (c == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        }
        dm_attempt_end(t->cls, t0, status);
        pthread_mutex_lock(&P.mu);
        P.busy--;
        pthread_mutex_unlock(&P.mu);
        dm_task_done(t, c == CURLE_OPERATION_TIMEDOUT    ? OUT_TIMED_OUT
                        : c == CURLE_OK && status == 200 ? OUT_SUCCEEDED
                                                         : OUT_FAILED);
    }
    if (e) curl_easy_cleanup(e);
    return NULL;
}

static int th_start(char *err, size_t errlen)
{
    P.n = dm_run_g.p->cap;
    P.th = calloc(P.n, sizeof *P.th);
    if (!P.th) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (unsigned i = 0; i < P.n; i++) {
        int rc = pthread_create(&P.th[i], NULL, worker, NULL);
        if (rc) {
            snprintf(err, errlen, "pthread_create (thread %u of %u): %s", i + 1, P.n, strerror(rc));
            pthread_mutex_lock(&P.mu);
            P.stop = true;
            pthread_cond_broadcast(&P.cv);
            pthread_mutex_unlock(&P.mu);
            for (unsigned k = 0; k < i; k++)
                pthread_join(P.th[k], NULL);
            return -1;
        }
    }
    return 0;
}

static int th_submit(struct dm_task *t)
{
    t->next = NULL;
    pthread_mutex_lock(&P.mu);
    if (P.tail)
        P.tail->next = t;
    else
        P.head = t;
    P.tail = t;
    P.queued[t->prio]++;
    pthread_cond_signal(&P.cv);
    pthread_mutex_unlock(&P.mu);
    return 0;
}

static void th_gauges(struct dm_gauges *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_lock(&P.mu);
    memcpy(g->queued, P.queued, sizeof g->queued);
    g->running = P.busy;
    pthread_mutex_unlock(&P.mu);
    g->limit = P.n;
}

static bool th_idle(void)
{
    pthread_mutex_lock(&P.mu);
    bool idle = !P.head && P.busy == 0;
    pthread_mutex_unlock(&P.mu);
    return idle;
}

static void th_stop(void)
{
    pthread_mutex_lock(&P.mu);
    struct dm_task *t = P.head;
    P.head = P.tail = NULL;
    memset(P.queued, 0, sizeof P.queued);
    P.stop = true;
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    while (t) {
        struct dm_task *next = t->next;
        dm_task_done(t, OUT_CANCELLED);
        t = next;
    }
    for (unsigned i = 0; i < P.n; i++)
        pthread_join(P.th[i], NULL);
}

static void th_finish(struct dm_result *r)
{
    r->retries = 0;
    free(P.th);
    P.th = NULL;
}

const struct dm_engine_ops dm_engine_threads = {
    .start = th_start,
    .submit = th_submit,
    .gauges = th_gauges,
    .idle = th_idle,
    .stop = th_stop,
    .finish = th_finish,
};
