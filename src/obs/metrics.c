/* metrics.c - histograms of wait and run time, the snapshot, Prometheus text
 * and the /metrics endpoint (DESIGN.md §9; the seed's closing advice: queue
 * length, wait time, timeouts, retries, run time).
 *
 * Each worker owns a wait and a run histogram per priority and is their only
 * writer (plain stores, see obs/hist.h); attempts ended on other threads
 * (ax_cancel, the callback pool) record into a scheduler-wide pair under s->lock.
 * A snapshot merges them all without stopping anybody: a reader may miss an
 * update that is in flight, never see a torn count.
 *
 * The /metrics endpoint is in metrics_serve.c; it renders through
 * metrics_render, on its own thread, and changes nothing it reports.
 * metrics_render also appends the text of the appenders registered with
 * ax_metrics_append (a library's own series: libax_redis), each called
 * under mappend_lock so that ax_metrics_unappend can wait out a call. An
 * appender that calls ax_metrics_append or ax_metrics_unappend itself gets
 * AX_ESTATE (ax_current_appender_sched): it would wait for the lock its own
 * scrape holds.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "obs/prom.h"

#include <stdlib.h>
#include <string.h>

void metrics_record_wait(struct ax_sched *s, struct worker *w, unsigned prio, uint64_t ns)
{
    if (w) {
        ax_hist_record(&w->m->wait[prio], ns);
        return;
    }
    pthread_mutex_lock(&s->lock);
    ax_hist_record(&s->m_shared->wait[prio], ns);
    pthread_mutex_unlock(&s->lock);
}

void metrics_record_run(struct ax_sched *s, struct worker *w, unsigned prio, uint64_t ns)
{
    if (w) {
        ax_hist_record(&w->m->run[prio], ns);
        return;
    }
    pthread_mutex_lock(&s->lock);
    ax_hist_record(&s->m_shared->run[prio], ns);
    pthread_mutex_unlock(&s->lock);
}

int metrics_init(struct ax_sched *s)
{
    s->m_shared = calloc(1, sizeof *s->m_shared);
    if (!s->m_shared)
        return ax_fail_static(AX_ENOMEM, "out of memory for metrics");
    for (unsigned i = 0; i < s->nworkers; i++) {
        s->workers[i].m = calloc(1, sizeof *s->workers[i].m);
        if (!s->workers[i].m)
            return ax_fail_static(AX_ENOMEM, "out of memory for metrics");
    }
    return AX_OK;
}

void metrics_destroy(struct ax_sched *s)
{
    for (unsigned i = 0; i < s->nworkers; i++) {
        free(s->workers[i].m);
        s->workers[i].m = NULL;
    }
    free(s->m_shared);
    s->m_shared = NULL;
}

static struct ax_metrics_snapshot *snapshot(struct ax_sched *s)
{
    struct ax_metrics_snapshot *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    ax_stats_get(s, &m->st);
    m->events_dropped = ax_events_dropped(s);
    m->nclasses = ax_class_count(s);
    for (unsigned i = 0; i < m->nclasses; i++)
        ax_class_stats_get(s, i + 1, &m->cls[i]);
    for (unsigned p = 0; p < AX_PRIO_COUNT; p++) {
        for (unsigned i = 0; i < s->nworkers; i++) {
            ax_hist_merge(&m->wait[p], &s->workers[i].m->wait[p]);
            ax_hist_merge(&m->run[p], &s->workers[i].m->run[p]);
        }
        pthread_mutex_lock(&s->lock);
        ax_hist_merge(&m->wait[p], &s->m_shared->wait[p]);
        ax_hist_merge(&m->run[p], &s->m_shared->run[p]);
        pthread_mutex_unlock(&s->lock);
    }
    return m;
}

static void dist(const struct ax_hist *h, ax_dist *d)
{
    d->count = ax_hist_count(h);
    d->sum_ns = ax_hist_sum(h);
    d->p50_ns = ax_hist_quantile(h, 0.50);
    d->p90_ns = ax_hist_quantile(h, 0.90);
    d->p99_ns = ax_hist_quantile(h, 0.99);
    d->max_ns = ax_hist_max(h);
}

int ax_metrics_get(ax_sched *s, ax_metrics *out)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_metrics_get");
    if (!s || !out)
        return ax_fail_static(AX_EINVAL, "ax_metrics_get: NULL argument");
    struct ax_metrics_snapshot *m = snapshot(s);
    if (!m)
        return ax_fail_static(AX_ENOMEM, "ax_metrics_get: out of memory");
    out->stats = m->st;
    for (unsigned p = 0; p < AX_PRIO_COUNT; p++) {
        dist(&m->wait[p], &out->wait[p]);
        dist(&m->run[p], &out->run[p]);
    }
    free(m);
    return AX_OK;
}

long ax_metrics_prometheus(ax_sched *s, char *buf, size_t len)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_metrics_prometheus");
    if (!s || (!buf && len))
        return ax_fail_static(AX_EINVAL, "ax_metrics_prometheus: NULL argument");
    struct ax_metrics_snapshot *m = snapshot(s);
    if (!m)
        return ax_fail_static(AX_ENOMEM, "ax_metrics_prometheus: out of memory");
    size_t n = ax_prom_render(m, buf, len);
    free(m);
    return (long)n;
}

/* The scheduler whose appenders this thread is running, while they run;
 * else NULL. Any scheduler's append or unappend is refused there, not only
 * its own: two schedulers' scrapes whose appenders each touched the
 * other's list would deadlock. ax_shutdown and ax_free refuse their own
 * scheduler there (lifecycle.c own_thread): they stop the endpoint whose
 * thread this is. */
_Thread_local const struct ax_sched *ax_current_appender_sched;

int ax_metrics_append(ax_sched *s, ax_metrics_appender fn, void *arg)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_metrics_append");
    if (!s || !fn)
        return ax_fail_static(AX_EINVAL, "ax_metrics_append: scheduler and fn are required");
    if (ax_current_appender_sched)
        return ax_fail_static(AX_ESTATE, "ax_metrics_append: called from a metrics appender "
                                         "(the scrape holds the lock it needs)");
    /* After ax_shutdown the endpoint has stopped: an appender taken then
     * would never be called (user trial: AX_OK, and nothing). One taken
     * while shutdown begins is as one taken before it. */
    if (atomic_load(&s->closing))
        return ax_fail_static(AX_ESHUTDOWN, "ax_metrics_append: the scheduler is shutting down "
                                            "(its /metrics endpoint has stopped)");
    int rc = AX_OK;
    pthread_mutex_lock(&s->mappend_lock);
    for (unsigned i = 0; i < s->nmappend && rc == AX_OK; i++)
        if (s->mappend[i].fn == fn && s->mappend[i].arg == arg)
            rc = ax_fail_static(AX_EBUSY, "ax_metrics_append: this fn and arg are registered");
    if (rc == AX_OK && s->nmappend == AX_METRICS_APPENDERS)
        rc = ax_fail(AX_ENOMEM, "ax_metrics_append: %d appenders at most", AX_METRICS_APPENDERS);
    if (rc == AX_OK) {
        s->mappend[s->nmappend].fn = fn;
        s->mappend[s->nmappend++].arg = arg;
    }
    pthread_mutex_unlock(&s->mappend_lock);
    return rc;
}

int ax_metrics_unappend(ax_sched *s, ax_metrics_appender fn, void *arg)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_metrics_unappend");
    if (!s || !fn)
        return ax_fail_static(AX_EINVAL, "ax_metrics_unappend: scheduler and fn are required");
    if (ax_current_appender_sched)
        return ax_fail_static(AX_ESTATE, "ax_metrics_unappend: called from a metrics appender "
                                         "(the scrape holds the lock it needs)");
    bool found = false;
    pthread_mutex_lock(&s->mappend_lock);
    for (unsigned i = 0; i < s->nmappend; i++)
        if (s->mappend[i].fn == fn && s->mappend[i].arg == arg) {
            s->mappend[i] = s->mappend[--s->nmappend];
            found = true;
            break;
        }
    pthread_mutex_unlock(&s->mappend_lock);
    /* The detail only on failure: a clean-up's unappend after another
     * call failed must leave that call's text (ax_redis_consumer_start). */
    return found ? AX_OK : ax_fail_static(AX_ENOTFOUND, "ax_metrics_unappend: not registered");
}

/* An appender's text at most (beyond: left out of the scrape, as an error). */
#define METRICS_APPEND_MAX (16u << 20)

/* One appender's text after text[0..*n), growing *text as it needs: its
 * figures move between calls, so a call that needs more than it was given
 * is made again with what it asked for (three times at most, then its text
 * is left out). Under mappend_lock. */
static char *append_one(char *text, size_t *n, size_t *cap, ax_metrics_appender fn, void *arg)
{
    size_t room = 4096;
    for (int tries = 0; tries < 3; tries++) {
        if (*cap - *n < room + 2) {
            char *t = realloc(text, *n + room + 2);
            if (!t)
                return text;
            text = t;
            *cap = *n + room + 2;
        }
        long need = fn(text + *n, room + 1, arg);
        if (need < 0 || (size_t)need > METRICS_APPEND_MAX)
            break;
        if ((size_t)need <= room) {
            /* Text only: a length past what it wrote (a NUL inside) would
             * serve whatever the buffer held. */
            if (memchr(text + *n, 0, (size_t)need) != NULL)
                break;
            *n += (size_t)need;
            if (need > 0 && text[*n - 1] != '\n')
                text[(*n)++] = '\n'; /* whole lines: the next family starts clean */
            break;
        }
        room = (size_t)need + 1024;
    }
    text[*n] = 0;
    return text;
}

char *metrics_render(struct ax_sched *s, size_t *len)
{
    struct ax_metrics_snapshot *m = snapshot(s);
    if (!m)
        return NULL;
    /* Sized and filled from one snapshot, so the length is exact. */
    size_t n = ax_prom_render(m, NULL, 0);
    size_t cap = n + 1;
    char *text = malloc(cap);
    if (text)
        ax_prom_render(m, text, n + 1);
    free(m);
    if (text) {
        size_t own = n;
        pthread_mutex_lock(&s->mappend_lock);
        ax_current_appender_sched = s;
        for (unsigned i = 0; i < s->nmappend; i++)
            text = append_one(text, &n, &cap, s->mappend[i].fn, s->mappend[i].arg);
        ax_current_appender_sched = NULL;
        pthread_mutex_unlock(&s->mappend_lock);
        /* Two consumers (or any two appenders) write the same families:
         * one HELP/TYPE and one group each, or Prometheus rejects it all. */
        if (n > own) {
            n = own + ax_prom_merge(text + own, n - own);
            text[n] = 0;
        }
    }
    *len = n;
    return text;
}
