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
 * The endpoint is an ordinary HIGH task with a one-year timeout (so it holds
 * one slot, shows in ax_stats and ax_dump, and ends at shutdown) that
 * accepts connections and spawns a short task per request.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "listen_addr.h"
#include "obs/prom.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- the endpoint --------------------------------------------------------- */

#define REQ_MAX 8192

static int respond(ax_task *t, int fd, const char *status, const char *type, const char *body,
                   size_t blen)
{
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      status, type, blen);
    if (ax_write(t, fd, head, (size_t)hl, 2000) < 0)
        return -1;
    return ax_write(t, fd, body, blen, 2000) < 0 ? -1 : 0;
}

static int serve_conn(ax_task *t, void *arg)
{
    int fd = (int)(intptr_t)arg;
    char req[REQ_MAX + 1];
    size_t n = 0;
    while (n < REQ_MAX) {
        ssize_t r = ax_read(t, fd, req + n, REQ_MAX - n, 5000);
        if (r <= 0)
            break;
        n += (size_t)r;
        req[n] = 0;
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[n] = 0;
    if (strncmp(req, "GET /metrics", 12) == 0 &&
        (req[12] == ' ' || req[12] == '?' || req[12] == '\r')) {
        long need = ax_metrics_prometheus(t->s, NULL, 0);
        char *body = need >= 0 ? malloc((size_t)need + 1) : NULL;
        if (body) {
            long got = ax_metrics_prometheus(t->s, body, (size_t)need + 1);
            respond(t, fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body,
                    (size_t)(got < need ? got : need));
            free(body);
        } else {
            respond(t, fd, "500 Internal Server Error", "text/plain", "out of memory\n", 14);
        }
    } else if (strncmp(req, "GET ", 4) == 0 || strncmp(req, "HEAD ", 5) == 0) {
        respond(t, fd, "404 Not Found", "text/plain", "not found: try /metrics\n", 24);
    } else if (n > 0) {
        respond(t, fd, "400 Bad Request", "text/plain", "bad request\n", 12);
    }
    close(fd);
    return 0;
}

static int serve_main(ax_task *t, void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = ax_accept(t, lfd, NULL, NULL, -1);
        if (fd < 0) {
            if (fd == AX_ETIMEDOUT || fd == AX_ECANCELED)
                break; /* shutdown or the (one-year) deadline */
            ax_sleep(t, 10); /* EMFILE and friends: back off, do not spin */
            continue;
        }
        ax_spec sp = {.fn = serve_conn, .arg = (void *)(intptr_t)fd, .priority = AX_PRIO_HIGH,
                      .timeout_ms = 10000, .trace_id = "ax-metrics-conn"};
        if (ax_submit(t->s, &sp, NULL) != AX_OK)
            close(fd);
    }
    close(lfd);
    return 0;
}

int ax_metrics_serve(ax_sched *s, const char *addr, uint16_t *port_out)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_metrics_serve: scheduler is NULL");
    if (!addr)
        addr = "127.0.0.1:9464";
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || colon - addr > 63)
        return ax_fail(AX_EINVAL, "ax_metrics_serve: address '%s' is not host:port", addr);
    char host[64];
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || errno || port < 0 || port > 65535)
        return ax_fail(AX_EINVAL, "ax_metrics_serve: bad port in '%s'", addr);
    struct sockaddr_storage sa;
    socklen_t salen;
    if (listen_addr_parse("ax_metrics_serve", host, (uint16_t)port, &sa, &salen))
        return AX_EINVAL;
    pthread_mutex_lock(&s->lock);
    bool taken = s->metrics_serving;
    s->metrics_serving = true;
    pthread_mutex_unlock(&s->lock);
    if (taken)
        return ax_fail_static(AX_EBUSY, "ax_metrics_serve: already serving");
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    int rc = AX_OK;
    if (fd < 0)
        rc = ax_fail(AX_ESYS, "ax_metrics_serve: socket: %s", strerror(errno));
    else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
             bind(fd, (struct sockaddr *)&sa, salen) != 0 || listen(fd, 128) != 0)
        rc = ax_fail(AX_ESYS, "ax_metrics_serve: %s: %s", addr, strerror(errno));
    if (rc == AX_OK && port_out) {
        socklen_t sl = sizeof sa;
        getsockname(fd, (struct sockaddr *)&sa, &sl);
        *port_out = listen_addr_port(&sa);
    }
    if (rc == AX_OK) {
        ax_spec sp = {.fn = serve_main, .arg = (void *)(intptr_t)fd, .priority = AX_PRIO_HIGH,
                      .timeout_ms = 365ull * 24 * 3600 * 1000, .trace_id = "ax-metrics"};
        rc = ax_submit(s, &sp, NULL);
    }
    if (rc != AX_OK) {
        if (fd >= 0)
            close(fd);
        pthread_mutex_lock(&s->lock);
        s->metrics_serving = false;
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}
