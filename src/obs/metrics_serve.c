/* metrics_serve.c - the /metrics endpoint: one thread, `ax-metrics`, with its
 * own poll loop, outside the scheduler (DESIGN.md §13: "observability must
 * work when everything else is saturated").
 *
 * Why a thread of its own and not a task. The endpoint used to be a HIGH
 * task that spawned a HIGH task per connection. It then needed a free slot
 * and room in the HIGH bucket exactly when the host was saturated, so
 * scrapes timed out when they mattered most; idle connections to the port
 * each held a slot, so 25 of them stopped the host; and every scrape counted
 * as the host's work (submitted, started, succeeded, a wait sample, three
 * events). A thread that never submits, never takes a slot and never
 * touches a counter fixes all three at once, for the price of one mostly
 * sleeping thread per scheduler that serves. Reserved slots hidden from
 * admission and stats would have kept it on ax's coroutines but spread
 * special cases through submit.c, sched.c and lifecycle.c.
 *
 * What it owns: the listening socket, the connections (at most
 * config.metrics_max_connections), their buffers and deadlines. It reads the
 * scheduler only through metrics_render (a snapshot: ax_stats_get under
 * s->lock for a few microseconds, relaxed loads of the histograms), so a
 * scrape changes no counter and no histogram and emits no event.
 *
 * A connection's life: READ until metrics_req_parse decides (every byte
 * checked as it arrives; junk is answered 400 at its first bad byte), WRITE
 * the answer (non-blocking sendmsg, MSG_NOSIGNAL), then DRAIN: shut down our
 * side and discard what the peer still sends until it closes, so an unread
 * request body never turns our close into a reset that eats the answer.
 * One request per connection ("Connection: close"): a scrape every few
 * seconds gains nothing from keep-alive, and it keeps each state bounded.
 *
 * Deadlines. READ ends config.metrics_read_timeout_ms after accept (not
 * after the last byte: a client dribbling a byte a second is idle too);
 * WRITE and DRAIN together get as long again. A connection past its deadline
 * is closed. So no connection lives longer than twice the read timeout.
 *
 * The cap. With every connection in use, a new one evicts the oldest that
 * was answered already (DRAIN), else the oldest still not answered (READ),
 * never one being written: idle connections cannot lock a scraper out, they
 * only churn among themselves. A round of the loop reads before it accepts
 * and accepts at most half the cap, so a connection accepted in one round
 * is read in the next before that round's arrivals can evict it. When all
 * are mid-answer, the new one gets a best-effort 503 and is closed.
 *
 * Stop: metrics_serve_stop (ax_shutdown, ax_free) writes the eventfd; the
 * thread closes everything and returns; the caller joins and frees.
 *
 * Complexity: O(connections) per wake-up (poll), connections <= 1024;
 * memory 8 KiB of request buffer per open connection plus one rendered
 * text (~15 KiB) per connection being answered.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "listen_addr.h"
#include "obs/metrics_req.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

enum cstate { C_FREE, C_READ, C_WRITE, C_DRAIN };

struct mconn {
    int fd;
    enum cstate st;
    uint64_t seq;      /* accept order, for eviction */
    uint64_t deadline; /* ns, CLOCK_MONOTONIC */
    char *req;         /* METRICS_REQ_MAX bytes while READ */
    size_t in;
    char hdr[256]; /* the answer: hdr[0..hlen) then body[0..blen) */
    size_t hlen;
    char *body;
    size_t blen;
    bool body_owned;
    size_t sent;
};

struct metrics_server {
    struct ax_sched *s;
    pthread_t thread;
    int lfd, wake;
    uint64_t timeout_ns;
    unsigned cap;
    uint64_t seq;
    uint64_t accept_paused_until; /* after EMFILE: do not spin on the listener */
    struct mconn *c;              /* cap entries */
    struct pollfd *pfd;           /* cap + 2: wake, listener, connections */
    unsigned *pidx;               /* pfd[k] -> connection index */
};

/* Starting and stopping are rare and must not race each other: one lock for
 * every scheduler (cold, held across socket setup and pthread_create). */
static pthread_mutex_t serve_lock = PTHREAD_MUTEX_INITIALIZER;

static void conn_close(struct mconn *c)
{
    close(c->fd);
    free(c->req);
    if (c->body_owned)
        free(c->body);
    *c = (struct mconn){.fd = -1, .st = C_FREE};
}

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

static size_t format_head(char *out, size_t cap, int status, const char *type, size_t blen)
{
    int n = snprintf(out, cap,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status, reason(status), type, blen,
                     status == 405 ? "Allow: GET, HEAD\r\n" : "");
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Prepare the answer to a decided request; the body is kept for a HEAD's
 * Content-Length and then not sent. */
static void conn_answer(struct metrics_server *v, struct mconn *c, const struct metrics_req *r)
{
    static const char prom[] = "text/plain; version=0.0.4; charset=utf-8";
    int status = r->status;
    char *body = NULL;
    size_t blen = 0;
    if (status == 200) {
        body = metrics_render(v->s, &blen);
        if (!body)
            status = 500;
    }
    if (body) {
        c->body = body;
        c->body_owned = true;
    } else {
        const char *text = status == 404   ? "not found: try /metrics\n"
                           : status == 405 ? "method not allowed: GET or HEAD\n"
                           : status == 431 ? "request head too large\n"
                           : status == 500 ? "out of memory\n"
                           : status == 505 ? "HTTP/1.x only\n"
                                           : "bad request\n";
        c->body = (char *)text;
        c->body_owned = false;
        blen = strlen(text);
    }
    c->blen = blen;
    c->hlen = format_head(c->hdr, sizeof c->hdr, status, status == 200 ? prom : "text/plain",
                          blen);
    if (r->head)
        c->blen = 0;
    c->sent = 0;
    free(c->req);
    c->req = NULL;
    c->st = C_WRITE;
    c->deadline = now_ns() + v->timeout_ns;
}

/* Send what the socket takes. False when the connection is done with. */
static bool conn_write(struct mconn *c)
{
    while (c->sent < c->hlen + c->blen) {
        struct iovec iov[2];
        int n = 0;
        if (c->sent < c->hlen)
            iov[n++] = (struct iovec){c->hdr + c->sent, c->hlen - c->sent};
        size_t boff = c->sent > c->hlen ? c->sent - c->hlen : 0;
        if (c->blen > boff)
            iov[n++] = (struct iovec){c->body + boff, c->blen - boff};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        c->sent += (size_t)w;
    }
    if (c->body_owned)
        free(c->body);
    c->body = NULL;
    c->body_owned = false;
    shutdown(c->fd, SHUT_WR);
    c->st = C_DRAIN;
    return true;
}

/* Read what arrived. False when the connection is done with. A request
 * is read whole (METRICS_REQ_MAX bounds it); a draining peer gets 64 KiB
 * a round, so one that never stops sending cannot hold the loop. */
static bool conn_read(struct metrics_server *v, struct mconn *c)
{
    for (int drained = 0; drained < 16;) {
        char scratch[4096];
        bool drain = c->st == C_DRAIN;
        char *to = drain ? scratch : c->req + c->in;
        size_t room = drain ? sizeof scratch : METRICS_REQ_MAX - c->in;
        ssize_t r = read(c->fd, to, room);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        if (r == 0)
            return false; /* the peer closed: before deciding, or after our answer */
        if (drain) {
            drained++;
            continue;
        }
        c->in += (size_t)r;
        struct metrics_req req;
        if (metrics_req_parse(c->req, c->in, &req) == METRICS_REQ_DONE) {
            conn_answer(v, c, &req);
            return conn_write(c);
        }
        /* MORE with a full buffer cannot happen: the parser decides 431 at
         * METRICS_REQ_MAX bytes. */
    }
    return true;
}

/* The connection to evict: the oldest DRAIN (answered already), else the
 * oldest READ; never one being answered (WRITE). NULL if none. */
static struct mconn *conn_oldest_idle(struct metrics_server *v)
{
    struct mconn *best = NULL;
    for (unsigned i = 0; i < v->cap; i++) {
        struct mconn *c = &v->c[i];
        if (c->st != C_DRAIN && c->st != C_READ)
            continue;
        if (!best || (c->st == C_DRAIN && best->st == C_READ) ||
            (c->st == best->st && c->seq < best->seq))
            best = c;
    }
    return best;
}

/* A slot for a new connection: a free one, else the oldest idle one
 * (evicted), else none. */
static struct mconn *conn_slot(struct metrics_server *v)
{
    for (unsigned i = 0; i < v->cap; i++)
        if (v->c[i].st == C_FREE)
            return &v->c[i];
    struct mconn *best = conn_oldest_idle(v);
    if (best)
        conn_close(best);
    return best;
}

static void accept_some(struct metrics_server *v, uint64_t now)
{
    for (unsigned k = 0; k < v->cap / 2 + 1; k++) {
        int fd = accept4(v->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            /* Out of fds with idle connections of ours open: they are what
             * a scraper waits behind (review: under a low fd limit 100 idle
             * connections held every scrape until their read timeout, 2-7
             * s). Evict the oldest and accept again. */
            struct mconn *idle;
            if ((errno == EMFILE || errno == ENFILE) && (idle = conn_oldest_idle(v))) {
                conn_close(idle);
                continue;
            }
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                v->accept_paused_until = now + 100000000u; /* 100 ms */
            return;
        }
        char *req = malloc(METRICS_REQ_MAX);
        struct mconn *c = req ? conn_slot(v) : NULL;
        if (!c) {
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                       "Connection: close\r\n\r\n";
            ssize_t w = send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w; /* best effort */
            close(fd);
            free(req);
            continue;
        }
        *c = (struct mconn){.fd = fd,
                            .st = C_READ,
                            .seq = v->seq++,
                            .deadline = now + v->timeout_ns,
                            .req = req};
    }
}

static void *serve_main(void *arg)
{
    struct metrics_server *v = arg;
    pthread_setname_np(pthread_self(), "ax-metrics");
    for (;;) {
        uint64_t now = now_ns();
        /* Close what is past its deadline; poll until the next one. */
        uint64_t next = UINT64_MAX;
        unsigned n = 0;
        v->pfd[n++] = (struct pollfd){.fd = v->wake, .events = POLLIN};
        bool listening = now >= v->accept_paused_until;
        if (listening)
            v->pfd[n++] = (struct pollfd){.fd = v->lfd, .events = POLLIN};
        else
            next = v->accept_paused_until;
        unsigned first = n;
        for (unsigned i = 0; i < v->cap; i++) {
            struct mconn *c = &v->c[i];
            if (c->st == C_FREE)
                continue;
            if (now >= c->deadline) {
                conn_close(c);
                continue;
            }
            if (c->deadline < next)
                next = c->deadline;
            v->pidx[n] = i;
            v->pfd[n++] = (struct pollfd){.fd = c->fd, .events = c->st == C_WRITE ? POLLOUT
                                                                                     : POLLIN};
        }
        int timeout = -1;
        if (next != UINT64_MAX) {
            uint64_t ms = (next - now + 999999u) / 1000000u; /* never wake early */
            timeout = ms > 60000 ? 60000 : (int)ms;
        }
        int rc = poll(v->pfd, n, timeout);
        if (rc < 0)
            continue; /* EINTR (signals are blocked here, but be safe) */
        if (v->pfd[0].revents)
            break;
        now = now_ns();
        for (unsigned k = first; k < n; k++) {
            if (!v->pfd[k].revents)
                continue;
            struct mconn *c = &v->c[v->pidx[k]];
            bool keep = c->st == C_WRITE ? conn_write(c) : conn_read(v, c);
            if (!keep)
                conn_close(c);
        }
        /* Last, so that a new connection can evict only one that has had
         * its chance in this round. */
        if (listening && v->pfd[1].revents)
            accept_some(v, now);
    }
    for (unsigned i = 0; i < v->cap; i++)
        if (v->c[i].st != C_FREE)
            conn_close(&v->c[i]);
    return NULL;
}

static void server_free(struct metrics_server *v)
{
    if (v->lfd >= 0)
        close(v->lfd);
    if (v->wake >= 0)
        close(v->wake);
    free(v->c);
    free(v->pfd);
    free(v->pidx);
    free(v);
}

void metrics_serve_stop(struct ax_sched *s)
{
    pthread_mutex_lock(&serve_lock);
    struct metrics_server *v = s->msrv;
    s->msrv = NULL;
    pthread_mutex_unlock(&serve_lock);
    if (!v)
        return;
    uint64_t one = 1;
    ssize_t w = write(v->wake, &one, sizeof one);
    (void)w; /* an eventfd write of 1 cannot fail short of overflow */
    pthread_join(v->thread, NULL);
    server_free(v);
}

/* "host:port"; the host by the rule ax-upstream --bind follows too
 * (listen_addr.c): localhost, numeric IPv4, numeric IPv6 in brackets.
 * Here an IPv6 host must be in brackets: "::1:0" could be the host "::1"
 * with port 0 or the address "::1:0" with no port, so it is refused rather
 * than guessed. The port is decimal digits only: strtol would also take
 * "+5", " 5" or "-0". */
static int parse_addr(const char *addr, struct sockaddr_storage *sa, socklen_t *salen)
{
    /* Not echoed into the detail: a newline there splits a log line
     * (trial: "127.0.0.1:0\n" came back with its newline). */
    for (const char *p = addr; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return ax_fail(AX_EINVAL,
                           "ax_metrics_serve: the address has a control byte (0x%02x) at "
                           "offset %zu",
                           (unsigned)(unsigned char)*p, (size_t)(p - addr));
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || colon - addr > 63)
        return ax_fail(AX_EINVAL, "ax_metrics_serve: address '%s' is not host:port", addr);
    char host[64];
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    if (host[0] != '[' && strchr(host, ':'))
        return ax_fail(AX_EINVAL,
                       "ax_metrics_serve: address '%s': an IPv6 host must be in brackets "
                       "('[::1]:9464')",
                       addr);
    const char *digits = colon + 1;
    size_t ndig = strspn(digits, "0123456789");
    if (ndig == 0 || digits[ndig] || ndig > 5 || atol(digits) > 65535)
        return ax_fail(AX_EINVAL, "ax_metrics_serve: bad port in '%s' (want 0-65535, digits only)",
                       addr);
    long port = atol(digits);
    return listen_addr_parse("ax_metrics_serve", host, (uint16_t)port, sa, salen);
}

/* Under serve_lock: bind, allocate, start the thread. */
static int serve_start_locked(struct ax_sched *s, const char *addr,
                              const struct sockaddr_storage *sa0, socklen_t salen,
                              uint16_t *port_out)
{
    struct sockaddr_storage sa = *sa0;
    struct metrics_server *v = calloc(1, sizeof *v);
    if (!v)
        return ax_fail_static(AX_ENOMEM, "ax_metrics_serve: out of memory");
    v->s = s;
    v->cap = s->cfg.metrics_max_connections;
    v->timeout_ns = (uint64_t)s->cfg.metrics_read_timeout_ms * 1000000u;
    v->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    v->lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    v->c = calloc(v->cap, sizeof *v->c);
    v->pfd = calloc(v->cap + 2, sizeof *v->pfd);
    v->pidx = calloc(v->cap + 2, sizeof *v->pidx);
    int one = 1, rc = AX_OK;
    if (!v->c || !v->pfd || !v->pidx)
        rc = ax_fail_static(AX_ENOMEM, "ax_metrics_serve: out of memory");
    else if (v->wake < 0 || v->lfd < 0)
        rc = ax_fail(AX_ESYS, "ax_metrics_serve: %s: %s", v->lfd < 0 ? "socket" : "eventfd",
                     strerror(errno));
    else if (setsockopt(v->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
             bind(v->lfd, (struct sockaddr *)&sa, salen) != 0 || listen(v->lfd, 128) != 0)
        rc = ax_fail(AX_ESYS, "ax_metrics_serve: %s: %s", addr, strerror(errno));
    if (rc != AX_OK) {
        server_free(v);
        return rc;
    }
    for (unsigned i = 0; i < v->cap; i++)
        v->c[i].fd = -1;
    socklen_t sl = sizeof sa;
    getsockname(v->lfd, (struct sockaddr *)&sa, &sl);
    /* The thread takes no asynchronous signal: the host's handlers run on
     * its own threads. Faults stay deliverable (a blocked SIGSEGV would kill
     * the process without crash.c's report). */
    sigset_t all, old;
    sigfillset(&all);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++)
        sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&v->thread, NULL, serve_main, v);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        server_free(v);
        return ax_fail(AX_ESYS, "ax_metrics_serve: cannot start the ax-metrics thread (%d)", prc);
    }
    s->msrv = v;
    if (port_out)
        *port_out = listen_addr_port(&sa);
    return AX_OK;
}

int ax_metrics_serve(ax_sched *s, const char *addr, uint16_t *port_out)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_metrics_serve");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_metrics_serve: scheduler is NULL");
    if (!addr)
        addr = "127.0.0.1:9464";
    struct sockaddr_storage sa;
    socklen_t salen;
    int rc = parse_addr(addr, &sa, &salen);
    if (rc != AX_OK)
        return rc;
    pthread_mutex_lock(&serve_lock);
    /* ax_shutdown sets closing before it stops the server under this lock:
     * either we see closing here, or it sees the server we start. */
    if (atomic_load(&s->closing))
        rc = ax_fail_static(AX_ESHUTDOWN, "ax_metrics_serve: the scheduler is shutting down");
    else if (s->msrv)
        rc = ax_fail_static(AX_EBUSY, "ax_metrics_serve: already serving");
    else
        rc = serve_start_locked(s, addr, &sa, salen, port_out);
    pthread_mutex_unlock(&serve_lock);
    return rc;
}
