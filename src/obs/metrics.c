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
 */
#define _GNU_SOURCE
#include "internal.h"
#include "obs/prom.h"

#include <stdlib.h>

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
    if (!s || (!buf && len))
        return ax_fail_static(AX_EINVAL, "ax_metrics_prometheus: NULL argument");
    struct ax_metrics_snapshot *m = snapshot(s);
    if (!m)
        return ax_fail_static(AX_ENOMEM, "ax_metrics_prometheus: out of memory");
    size_t n = ax_prom_render(m, buf, len);
    free(m);
    return (long)n;
}

char *metrics_render(struct ax_sched *s, size_t *len)
{
    struct ax_metrics_snapshot *m = snapshot(s);
    if (!m)
        return NULL;
    /* Sized and filled from one snapshot, so the length is exact. */
    size_t n = ax_prom_render(m, NULL, 0);
    char *text = malloc(n + 1);
    if (text)
        ax_prom_render(m, text, n + 1);
    free(m);
    *len = n;
    return text;
}
