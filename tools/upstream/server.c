/* server.c - the HTTP/1.1 server, written as ax tasks (the pattern of
 * tests/test_io.c): one accept task, and one task per connection.
 *
 * Connection task: read, parse a request head (http.c), skip its
 * Content-Length body, route the path to an endpoint, let the model decide
 * (model.c), serve, and loop while the connection is kept alive. Pipelined
 * requests are answered in order, since the next is only parsed once the
 * previous one's response is out. Latency is ax_sleep, so a request that
 * "takes" 30 s parks its coroutine and costs no thread; a hang parks in a
 * read until the client leaves. Every wait is bounded: by the idle timeout
 * between requests (and for the rest of a started one: 408), and by the
 * task's own timeout, the connection lifetime.
 *
 * Closing. After an error response the client may still be sending (a body
 * we refused, a pipeline behind a bad request); closing a socket with unread
 * input sends RST, which can destroy the response before the client reads
 * it. So the server half-closes and drains for a moment first (the "lingering
 * close" of Apache and nginx). A reset, in contrast, is meant to hurt:
 * SO_LINGER 0 and close, which sends RST at once.
 *
 * Connection tasks are submitted with ax_submit, not ax_spawn: a spawned
 * child keeps a reference in its parent's attempt until the parent joins it
 * or ends, and the accept task never ends, so every connection ever accepted
 * would stay in the job table.
 *
 * Ownership of a connection fd: the accept task until ax_submit succeeds,
 * then the connection task, which closes it on every path. A connection
 * still queued at shutdown (more connections than --max-conns) is closed by
 * process exit; nothing else is left behind.
 *
 * Hot: conn_task's loop. No malloc on it (the read buffer and the response
 * head live on the coroutine stack; /stats allocates, it is rare).
 */
#include "upstream.h"

#include "ax.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINGER_MS 500       /* drain time before closing after an error */
#define LINGER_BYTES 262144 /* or this much input, whichever comes first */
#define RESP_HEAD_MAX 1024

static struct server_opts G;
static _Atomic uint64_t conn_seq;
static char filler[65536]; /* body=N bytes */

#define INC(x) atomic_fetch_add_explicit(&(x), 1, memory_order_relaxed)
#define DEC(x) atomic_fetch_sub_explicit(&(x), 1, memory_order_relaxed)

struct conn {
    ax_task *t;
    int fd;
    struct rng rng;
};

/* Write the whole buffer within the idle timeout. */
static bool send_all(struct conn *c, const void *p, size_t n)
{
    return ax_write(c->t, c->fd, p, n, G.idle_ms) == (ssize_t)n;
}

/* Half-close, then read and drop what the client still sends, for a short
 * while, so that our last response is not destroyed by an RST. */
static void linger_close(struct conn *c)
{
    shutdown(c->fd, SHUT_WR);
    char scratch[4096];
    size_t got = 0;
    uint64_t until = ax_now_ns() + (uint64_t)LINGER_MS * 1000000u;
    while (got < LINGER_BYTES) {
        uint64_t now = ax_now_ns();
        if (now >= until) break;
        ssize_t n =
            ax_read(c->t, c->fd, scratch, sizeof scratch, (int64_t)((until - now) / 1000000u) + 1);
        if (n <= 0) break;
        got += (size_t)n;
    }
}

/* A response with a short body from a fixed text (errors, 408, refusals). */
static bool send_simple(struct conn *c, int status, const char *msg, bool keep, bool head)
{
    char body[256], hdr[RESP_HEAD_MAX];
    int bl = snprintf(body, sizeof body, "{\"error\":\"%s\"}\n", msg);
    int hl = snprintf(hdr, sizeof hdr,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n%s\r\n",
                      status, http_reason(status), bl, keep ? "" : "Connection: close\r\n");
    if (!head) {
        memcpy(hdr + hl, body, (size_t)bl);
        hl += bl;
    }
    return send_all(c, hdr, (size_t)hl);
}

/* Count a response that was or was not fully written. */
static void count_answer(int status, bool written)
{
    if (written)
        INC(up_stats.status[status]);
    else
        INC(up_stats.unanswered);
}

/* Wait until the client closes (or the lifetime ends): a hang. */
static void wait_gone(struct conn *c)
{
    char scratch[1024];
    while (ax_read(c->t, c->fd, scratch, sizeof scratch, -1) > 0) {
    }
}

/* Wait out a simulated latency of ms, watching the connection: false as
 * soon as the client has gone (end of file -- a half-close looks the same
 * and is taken for a departure too, tools/README.md -- or a reset: a request it gave
 * up on is not answered, and no longer counts in flight or in the load
 * the models see -- new user's trial: a client's 1 s timeout left a 3 s
 * request counted as a 200), or when cancelled. Bytes the client sends
 * meanwhile (a pipelined request) stay for the next read; the rest of the
 * wait is then a plain sleep. */
static bool wait_latency(struct conn *c, uint64_t ms)
{
    uint64_t end = ax_now_ns() + ms * 1000000u;
    for (;;) {
        uint64_t now = ax_now_ns();
        if (now >= end)
            return true;
        int64_t left = (int64_t)((end - now + 999999u) / 1000000u);
        int rc = ax_wait_fd(c->t, c->fd, AX_READ, left);
        if (rc == AX_ETIMEDOUT && ax_cancelled(c->t) == 0)
            return true; /* its own bound: the latency is over */
        if (rc != AX_OK)
            return false; /* cancelled (shutdown) or the connection's lifetime ended */
        char b;
        ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return false; /* the client left */
        if (n > 0) {
            now = ax_now_ns();
            return now >= end || ax_sleep(c->t, (end - now + 999999u) / 1000000u) == 0;
        }
    }
}

static void serve_stats(struct conn *c, const struct http_req *rq, bool keep)
{
    INC(up_stats.stats_requests);
    size_t len = 0;
    char *json = stats_json(G.sc, G.start_ns, ax_now_ns(), &len);
    if (!json) {
        send_simple(c, 500, "out of memory", keep, rq->head);
        return;
    }
    char hdr[RESP_HEAD_MAX];
    int hl = snprintf(hdr, sizeof hdr,
                      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      "Cache-Control: no-store\r\nContent-Length: %zu\r\n%s%s\r\n",
                      len, keep ? "" : "Connection: close\r\n",
                      keep && rq->minor == 0 ? "Connection: keep-alive\r\n" : "");
    if (send_all(c, hdr, (size_t)hl) && !rq->head) send_all(c, json, len);
    free(json);
}

/* Serve one endpoint request. Returns false when the connection must end
 * without a lingering close (a hang the client left, a reset, a failed
 * write, cancellation). */
static bool serve_endpoint(struct conn *c, const struct http_req *rq, unsigned ei, bool keep)
{
    const struct scenario *sc = G.sc;
    struct endpoint *ep = (struct endpoint *)&sc->ep[ei];
    INC(ep->requests);
    uint64_t n_ep = INC(ep->in_flight) + 1;
    stats_max(&ep->max_in_flight, n_ep);
    stats_max(&up_stats.max_in_flight, INC(up_stats.in_flight) + 1);

    uint64_t t0 = ax_now_ns();
    unsigned ph = scenario_phase_at(sc, (t0 - G.start_ns) / 1000000u, NULL);
    const struct behaviour *b = scenario_eff(sc, ph, ei);
    struct fate f;
    model_decide(b, n_ep, &c->rng, &f);

    bool ok = true, counted = false;
    if (f.out == OUT_HANG) {
        INC(up_stats.hangs);
        wait_gone(c);
        ok = false;
        goto out;
    }
    if (f.latency_ms && !wait_latency(c, f.latency_ms)) {
        ok = false; /* the client left, cancelled, or the connection's lifetime ended */
        goto out;
    }

    char resp[RESP_HEAD_MAX + 512];
    char body[512];
    int bl = 0;
    long body_len;
    if (f.status != 200)
        body_len = bl =
            snprintf(body, sizeof body, "{\"error\":\"simulated %d\",\"phase\":\"%s\"}\n", f.status,
                     sc->ph[ph].name);
    else if (b->body >= 0)
        body_len = b->body;
    else
        body_len = bl = snprintf(body, sizeof body,
                                 "{\"ok\":true,\"endpoint\":\"%s\",\"phase\":\"%s\","
                                 "\"latency_ms\":%llu}\n",
                                 ep->pattern, sc->ph[ph].name, (unsigned long long)f.latency_ms);
    int hl = snprintf(
        resp, RESP_HEAD_MAX,
        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %ld\r\n"
        "X-Upstream-Endpoint: %s\r\nX-Upstream-Phase: %s\r\n"
        "X-Upstream-Latency-Ms: %llu\r\n%s%s%s\r\n",
        f.status, http_reason(f.status), bl || body_len == 0 ? "application/json" : "text/plain",
        body_len, ep->pattern, sc->ph[ph].name, (unsigned long long)f.latency_ms,
        f.status == 503 ? "Retry-After: 1\r\n" : "", keep ? "" : "Connection: close\r\n",
        keep && rq->minor == 0 ? "Connection: keep-alive\r\n" : "");
    if (rq->head) body_len = bl = 0;
    memcpy(resp + hl, body, (size_t)bl);

    if (f.out == OUT_RESET) {
        /* Mid-response: the head and half the body (half the head if there
         * is no body to cut), then RST. */
        size_t cut = body_len >= 2 ? (size_t)hl + (size_t)body_len / 2 : (size_t)hl / 2;
        size_t inbuf = (size_t)hl + (size_t)bl;
        bool sent = send_all(c, resp, cut < inbuf ? cut : inbuf);
        for (size_t off = inbuf; sent && off < cut;) {
            size_t k = cut - off < sizeof filler ? cut - off : sizeof filler;
            sent = send_all(c, filler, k);
            off += k;
        }
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        INC(up_stats.resets);
        counted = true;
        ok = false;
        goto out;
    }

    bool sent = send_all(c, resp, (size_t)hl + (size_t)bl);
    for (long off = bl; sent && off < body_len;) {
        size_t k =
            (size_t)(body_len - off) < sizeof filler ? (size_t)(body_len - off) : sizeof filler;
        sent = send_all(c, filler, k);
        off += (long)k;
    }
    count_answer(f.status, sent);
    counted = true;
    if (sent) stats_latency((ax_now_ns() - t0) / 1000u);
    ok = sent;
out:
    if (!counted) INC(up_stats.unanswered);
    DEC(ep->in_flight);
    DEC(up_stats.in_flight);
    return ok;
}

/* Read and drop `left` body bytes: those in buf past `head`, then from the
 * socket. Returns false if the client went away or stalled. */
static bool skip_body(struct conn *c, char *buf, size_t *len, size_t head, uint64_t left)
{
    size_t have = *len - head;
    if (have >= left) {
        size_t rest = have - (size_t)left;
        memmove(buf, buf + head + left, rest);
        *len = rest;
        return true;
    }
    left -= have;
    *len = 0;
    while (left) {
        size_t want = left < UP_MAX_HEAD ? (size_t)left : UP_MAX_HEAD;
        ssize_t n = ax_read(c->t, c->fd, buf, want, G.idle_ms);
        if (n <= 0) return false;
        left -= (uint64_t)n;
    }
    return true;
}

static void serve(struct conn *c)
{
    char buf[UP_MAX_HEAD];
    size_t len = 0;
    for (;;) {
        struct http_req rq;
        const char *why;
        int r = http_parse(buf, len, UP_MAX_REQ_BODY, &rq, &why);
        if (r == 0) {
            ssize_t n = ax_read(c->t, c->fd, buf + len, sizeof buf - len, G.idle_ms);
            if (n > 0) {
                len += (size_t)n;
                continue;
            }
            /* A request begun and not finished within the idle timeout. */
            if (n == AX_ETIMEDOUT && len > 0 && ax_cancelled(c->t) == 0) {
                INC(up_stats.requests);
                count_answer(408,
                             send_simple(c, 408, "request not completed in time", false, false));
                linger_close(c);
            }
            return; /* end of stream, idle, error, cancelled */
        }
        if (r < 0) {
            INC(up_stats.requests);
            count_answer(-r, send_simple(c, -r, why, false, false));
            linger_close(c);
            return;
        }
        bool keep = rq.keep_alive;
        bool stats = rq.path_len == 6 && memcmp(rq.path, "/stats", 6) == 0;
        unsigned ei = stats ? 0 : scenario_route(G.sc, rq.path, rq.path_len);
        if (!stats) /* /stats is counted apart, in stats_requests */
            INC(up_stats.requests);
        /* rq.path points into buf: everything that needs it is done above. */
        if (rq.expect_continue && rq.content_length > len - (size_t)r) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            if (!send_all(c, cont, sizeof cont - 1)) {
                if (!stats) INC(up_stats.unanswered);
                return;
            }
        }
        if (!skip_body(c, buf, &len, (size_t)r, rq.content_length)) {
            if (!stats) INC(up_stats.unanswered);
            return;
        }
        if (stats)
            serve_stats(c, &rq, keep);
        else if (!serve_endpoint(c, &rq, ei, keep))
            return;
        if (!keep) {
            linger_close(c);
            return;
        }
    }
}

static int conn_task(ax_task *t, void *arg)
{
    struct conn c = {.t = t, .fd = (int)(intptr_t)arg};
    rng_seed(&c.rng, G.sc->seed, INC(conn_seq));
    stats_max(&up_stats.conns_max_open, INC(up_stats.conns_open) + 1);
    serve(&c);
    close(c.fd);
    DEC(up_stats.conns_open);
    return 0;
}

static int accept_task(ax_task *t, void *arg)
{
    (void)arg;
    ax_sched *s = ax_task_sched(t);
    for (;;) {
        int fd = ax_accept(t, G.listen_fd, NULL, NULL, -1);
        if (fd == AX_ETIMEDOUT || fd == AX_ECANCELED) return 0;
        if (fd < 0) {
            /* Out of fds (EMFILE) and the like: the backlog keeps the
             * connection; try again shortly instead of spinning. */
            INC(up_stats.accept_errors);
            if (ax_sleep(t, 10) != 0) return 0;
            continue;
        }
        INC(up_stats.conns_accepted);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ax_spec sp = {.fn = conn_task, .arg = (void *)(intptr_t)fd, .timeout_ms = G.lifetime_ms};
        if (ax_submit(s, &sp, NULL) != 0) {
            /* Shed or full: say so and close, as an overloaded front end would. */
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                       "Retry-After: 1\r\nConnection: close\r\n\r\n";
            INC(up_stats.conns_refused);
            if (send(fd, busy, sizeof busy - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
                /* nothing to do: the client sees the close */
            }
            close(fd);
        }
    }
}

int server_start(ax_sched *s, const struct server_opts *o)
{
    G = *o;
    memset(filler, 'x', sizeof filler);
    ax_spec sp = {
        .fn = accept_task,
        .priority = AX_PRIO_HIGH,
        .timeout_ms = 365ull * 24 * 3600 * 1000, /* ax's longest: the server's whole life */
        .trace_id = "accept",
    };
    return ax_submit(s, &sp, NULL);
}
