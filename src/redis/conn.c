/* conn.c - one Redis connection driven from inside an ax task (libax_redis).
 *
 * hiredis does the protocol only (formatting commands, parsing replies) on
 * a context in non-blocking mode over a socket this file connects itself:
 * the socket is O_NONBLOCK, every EAGAIN parks the calling coroutine in
 * ax_wait_fd (the worker's epoll; the thread goes on with other tasks), and
 * each wait is bounded by the call's deadline, which ax_wait_fd also caps
 * at the task's own. Outside a task (t == NULL) the waits are poll() on the
 * calling thread, with the same bounds.
 *
 * State: `ctx` is NULL while disconnected. Any failure (connect, I/O, a
 * timeout or cancel mid-command, whose reply would otherwise arrive as the
 * answer to the next command) closes it. Reconnecting is lazy, on the next
 * call: the first after a failure connects at once, later ones in a row
 * wait min(max, min * 2^(n-2)) plus random jitter up to as much again
 * (full jitter on top of exponential, so many clients of a restarted Redis
 * do not reconnect in step). A call made during the wait sleeps it out when
 * its bound allows, else fails at once with AX_ENET: a submit never blocks
 * past its own timeout for a Redis that is down.
 *
 * One task at a time: `busy` is taken for the whole call; a second user
 * gets AX_EBUSY instead of interleaving commands on the wire.
 */
#define _GNU_SOURCE
#include "redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct ax_redis {
    ax_redis_config cfg;
    char *host, *unix_path, *password; /* owned copies */
    char addr[128];
    redisContext *ctx;                 /* NULL: disconnected */
    unsigned failures;                 /* in a row */
    uint64_t next_try_ns;              /* no connect attempt before this */
    char last_err[160];
    atomic_flag busy;
};

void ax_redis_config_default(ax_redis_config *c)
{
    if (!c)
        return;
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 6379;
    c->connect_timeout_ms = 1000;
    c->command_timeout_ms = 5000;
    c->reconnect_min_ms = 50;
    c->reconnect_max_ms = 5000;
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

int ax_redis_new(const ax_redis_config *cfg, ax_redis **out)
{
    if (!cfg || !out)
        return ax_fail_static(AX_EINVAL, "ax_redis_new: cfg and out are required");
    *out = NULL;
    ax_redis_config dflt;
    if (!cfg->unix_path && !cfg->host) { /* NULL: the documented default */
        dflt = *cfg;
        dflt.host = "127.0.0.1";
        cfg = &dflt;
    }
    if (!cfg->unix_path && !*cfg->host)
        return ax_fail_static(AX_EINVAL, "ax_redis_config.host is empty");
    if (!cfg->unix_path && cfg->port == 0)
        return ax_fail_static(AX_EINVAL, "ax_redis_config.port must be > 0");
    if (!cfg->unix_path && strcmp(cfg->host, "localhost") != 0) {
        /* checked here, not at the first connect: a name would fail every
         * call (no DNS, it would block a worker) */
        unsigned char a[sizeof(struct in6_addr)];
        if (inet_pton(AF_INET, cfg->host, a) != 1 && inet_pton(AF_INET6, cfg->host, a) != 1)
            return ax_fail(AX_EINVAL,
                           "ax_redis_config.host '%.64s' is not a numeric IPv4 / IPv6 address "
                           "or localhost (no DNS: it would block)",
                           cfg->host);
    }
    if (cfg->unix_path && !*cfg->unix_path) /* as an empty host: review */
        return ax_fail_static(AX_EINVAL, "ax_redis_config.unix_path is empty (NULL: TCP to host)");
    if (cfg->unix_path && strlen(cfg->unix_path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return ax_fail_static(AX_EINVAL, "ax_redis_config.unix_path is too long");
    if (cfg->connect_timeout_ms == 0 || cfg->command_timeout_ms == 0)
        return ax_fail_static(AX_EINVAL,
                              "ax_redis_config.connect_timeout_ms and command_timeout_ms must be > 0");
    if (cfg->reconnect_min_ms == 0 || cfg->reconnect_max_ms < cfg->reconnect_min_ms)
        return ax_fail_static(AX_EINVAL,
                              "ax_redis_config: need 0 < reconnect_min_ms <= reconnect_max_ms");
    ax_redis *r = calloc(1, sizeof *r);
    if (!r)
        return ax_fail_static(AX_ENOMEM, "ax_redis_new: out of memory");
    bool oom = false;
    r->cfg = *cfg;
    r->host = dup_or_null(cfg->unix_path ? NULL : cfg->host, &oom);
    r->unix_path = dup_or_null(cfg->unix_path, &oom);
    r->password = dup_or_null(cfg->password, &oom);
    if (oom) {
        ax_redis_free(r);
        return ax_fail_static(AX_ENOMEM, "ax_redis_new: out of memory");
    }
    r->cfg.host = r->host;
    r->cfg.unix_path = r->unix_path;
    r->cfg.password = r->password;
    if (r->unix_path)
        snprintf(r->addr, sizeof r->addr, "unix:%s", r->unix_path);
    else if (strchr(r->host, ':'))
        snprintf(r->addr, sizeof r->addr, "[%s]:%u", r->host, (unsigned)cfg->port);
    else
        snprintf(r->addr, sizeof r->addr, "%s:%u", r->host, (unsigned)cfg->port);
    atomic_flag_clear(&r->busy);
    *out = r;
    return AX_OK;
}

void ax_redis_free(ax_redis *r)
{
    if (!r)
        return;
    if (r->ctx)
        redisFree(r->ctx);
    free(r->host);
    free(r->unix_path);
    free(r->password);
    free(r);
}

const char *rconn_addr(const ax_redis *r)
{
    return r->addr;
}

bool ax_redis_connected(const ax_redis *r)
{
    return r && r->ctx;
}

/* ---- failures and back-off ----------------------------------------------------- */

static void disconnect(ax_redis *r)
{
    if (r->ctx) {
        redisFree(r->ctx); /* closes the socket */
        r->ctx = NULL;
    }
}

/* Record a failure of kind `code` with the detail already set by ax_fail:
 * close the connection and push the next connect attempt out. */
static int failed(ax_redis *r, int code)
{
    disconnect(r);
    snprintf(r->last_err, sizeof r->last_err, "%s", ax_error_detail());
    r->failures++;
    uint64_t now = now_ns();
    if (r->failures < 2) {
        r->next_try_ns = now;
    } else {
        unsigned shift = r->failures - 2 > 20 ? 20 : r->failures - 2;
        uint64_t d = (uint64_t)r->cfg.reconnect_min_ms << shift;
        if (d > r->cfg.reconnect_max_ms)
            d = r->cfg.reconnect_max_ms;
        d += ax_rand64() % (d + 1); /* jitter: up to as much again */
        r->next_try_ns = now + d * 1000000u;
    }
    return code;
}

/* ---- waiting: a parked coroutine in a task, poll() outside ------------------------ */

static int wait_io(ax_task *t, ax_redis *r, int fd, unsigned events, uint64_t deadline,
                   int64_t timeout_ms, const char *what)
{
    uint64_t now = now_ns();
    int64_t ms = now >= deadline ? 0 : (int64_t)((deadline - now + 999999u) / 1000000u);
    int rc;
    if (t) {
        rc = ax_wait_fd(t, fd, events, ms);
        if (rc == AX_ETIMEDOUT && ax_cancelled(t) == 0)
            rc = AX_ETIMEDOUT + 1000; /* our own bound, not the task's deadline */
    } else {
        struct pollfd p = {.fd = fd, .events = (short)((events & AX_READ ? POLLIN : 0) |
                                                        (events & AX_WRITE ? POLLOUT : 0))};
        int n;
        do
            n = poll(&p, 1, ms > INT32_MAX ? INT32_MAX : (int)ms);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            return ax_fail(AX_ESYS, "redis %s: poll: %s", r->addr, strerror(errno));
        rc = n == 0 ? AX_ETIMEDOUT + 1000 : 0;
    }
    if (rc == AX_ETIMEDOUT + 1000)
        return ax_fail(AX_ETIMEDOUT, "redis %s: %s: no answer within %lld ms", r->addr, what,
                       (long long)timeout_ms);
    if (rc == AX_ETIMEDOUT)
        return ax_fail(AX_ETIMEDOUT, "redis %s: %s: the task's deadline passed", r->addr, what);
    if (rc == AX_ECANCELED)
        return ax_fail(AX_ECANCELED, "redis %s: %s: the task was cancelled", r->addr, what);
    return rc;
}

static int sleep_until(ax_task *t, uint64_t when)
{
    uint64_t now = now_ns();
    if (now >= when)
        return AX_OK;
    uint64_t ms = (when - now + 999999u) / 1000000u;
    if (t)
        return ax_sleep(t, ms);
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return AX_OK;
}

/* ---- connecting -------------------------------------------------------------------- */

static int open_socket(ax_redis *r, struct sockaddr_storage *sa, socklen_t *len)
{
    memset(sa, 0, sizeof *sa);
    if (r->unix_path) {
        struct sockaddr_un *u = (struct sockaddr_un *)sa;
        u->sun_family = AF_UNIX;
        memcpy(u->sun_path, r->unix_path, strlen(r->unix_path) + 1);
        *len = sizeof *u;
    } else {
        const char *h = strcmp(r->host, "localhost") == 0 ? "127.0.0.1" : r->host;
        struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
        if (inet_pton(AF_INET, h, &v4->sin_addr) == 1) {
            v4->sin_family = AF_INET;
            v4->sin_port = htons(r->cfg.port);
            *len = sizeof *v4;
        } else if (inet_pton(AF_INET6, h, &v6->sin6_addr) == 1) {
            v6->sin6_family = AF_INET6;
            v6->sin6_port = htons(r->cfg.port);
            *len = sizeof *v6;
        } else {
            return ax_fail(AX_EINVAL, "redis %s: host is not a numeric address", r->addr);
        }
    }
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ax_fail(AX_ESYS, "redis %s: socket: %s", r->addr, strerror(errno));
    if (sa->ss_family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

static int do_auth(ax_task *t, ax_redis *r, uint64_t deadline, int64_t timeout_ms);

static int do_connect(ax_task *t, ax_redis *r, uint64_t deadline, int64_t timeout_ms)
{
    uint64_t now = now_ns();
    if (now < r->next_try_ns) {
        if (r->next_try_ns >= deadline)
            return ax_fail(AX_ENET, "redis %s: unreachable (%s); next attempt in %llu ms", r->addr,
                           r->last_err,
                           (unsigned long long)((r->next_try_ns - now) / 1000000u + 1));
        int rc = sleep_until(t, r->next_try_ns); /* back-off */
        if (rc)
            return ax_fail(rc, "redis %s: %s while waiting to reconnect", r->addr,
                           rc == AX_ECANCELED ? "cancelled" : "the task's deadline passed");
    }
    uint64_t cdl = now_ns() + (uint64_t)r->cfg.connect_timeout_ms * 1000000u;
    if (cdl > deadline)
        cdl = deadline;
    struct sockaddr_storage sa;
    socklen_t len = 0;
    int fd = open_socket(r, &sa, &len);
    if (fd < 0)
        return fd == AX_EINVAL ? fd : failed(r, AX_ENET);
    if (connect(fd, (struct sockaddr *)&sa, len) != 0) {
        int e = errno;
        if (e != EINPROGRESS && e != EAGAIN) {
            close(fd);
            ax_fail(AX_ENET, "redis %s: connect: %s", r->addr, strerror(e));
            return failed(r, AX_ENET);
        }
        int rc = wait_io(t, r, fd, AX_WRITE, cdl, (int64_t)r->cfg.connect_timeout_ms, "connect");
        if (rc) {
            close(fd);
            return rc == AX_ETIMEDOUT || rc == AX_ECANCELED || rc == AX_ESYS ? failed(r, rc) : rc;
        }
        socklen_t el = sizeof e;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
            e = errno;
        if (e) {
            close(fd);
            ax_fail(AX_ENET, "redis %s: connect: %s", r->addr, strerror(e));
            return failed(r, AX_ENET);
        }
    }
    r->ctx = redisConnectFd(fd);
    if (!r->ctx || r->ctx->err) {
        if (r->ctx)
            redisFree(r->ctx);
        else
            close(fd);
        r->ctx = NULL;
        return ax_fail(AX_ENOMEM, "redis %s: out of memory for a context", r->addr);
    }
    r->ctx->flags &= ~REDIS_BLOCK; /* EAGAIN means "later", not an error */
    if (r->password)
        return do_auth(t, r, deadline, timeout_ms);
    return AX_OK;
}

/* ---- commands ------------------------------------------------------------------------ */

static int io_error(ax_redis *r, const char *what)
{
    const char *e = r->ctx && r->ctx->errstr[0] ? r->ctx->errstr : "connection closed";
    ax_fail(AX_ENET, "redis %s: %s: %s", r->addr, what, e);
    return failed(r, AX_ENET);
}

/* redisBufferWrite with SIGPIPE held back: hiredis writes with write(2),
 * and ax never lets a closed peer kill the process (io.c sends with
 * MSG_NOSIGNAL): block SIGPIPE on this thread for the call and take back a
 * SIGPIPE it raised (EPIPE is the error we report). Linux reports a reset
 * peer as ECONNRESET to the first write and EPIPE (with SIGPIPE) only to
 * later ones, which this file never makes after an error -- so this is
 * insurance against other kernels and hiredis versions, at three cheap
 * syscalls per flush (a flush carries a whole pipeline). */
static int buffer_write(redisContext *c, int *done)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    bool had = sigismember(&pending, SIGPIPE) == 1; /* someone else's: leave it */
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    int rc = redisBufferWrite(c, done);
    if (rc != REDIS_OK && !had) {
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE) == 1) {
            struct timespec zero = {0, 0};
            while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
                ;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Send what was appended and read n replies. */
static int exchange(ax_task *t, ax_redis *r, uint64_t deadline, int64_t timeout_ms, size_t n,
                    redisReply **replies)
{
    int done = 0, rc;
    for (;;) {
        if (buffer_write(r->ctx, &done) != REDIS_OK)
            return io_error(r, "write");
        if (done)
            break;
        if ((rc = wait_io(t, r, r->ctx->fd, AX_WRITE, deadline, timeout_ms, "write")))
            return failed(r, rc);
    }
    for (size_t i = 0; i < n; i++) {
        void *rep = NULL;
        for (;;) {
            if (redisGetReplyFromReader(r->ctx, &rep) != REDIS_OK) {
                for (size_t k = 0; k < i; k++)
                    freeReplyObject(replies[k]);
                return io_error(r, "protocol");
            }
            if (rep)
                break;
            if ((rc = wait_io(t, r, r->ctx->fd, AX_READ, deadline, timeout_ms, "reply")) ||
                (redisBufferRead(r->ctx) != REDIS_OK && (rc = -1))) {
                for (size_t k = 0; k < i; k++)
                    freeReplyObject(replies[k]);
                return rc == -1 ? io_error(r, "read") : failed(r, rc);
            }
        }
        replies[i] = rep;
    }
    return AX_OK;
}

static int do_auth(ax_task *t, ax_redis *r, uint64_t deadline, int64_t timeout_ms)
{
    const char *argv[2] = {"AUTH", r->password};
    size_t lens[2] = {4, strlen(r->password)};
    if (redisAppendCommandArgv(r->ctx, 2, argv, lens) != REDIS_OK)
        return io_error(r, "AUTH");
    redisReply *rep = NULL;
    int rc = exchange(t, r, deadline, timeout_ms, 1, &rep);
    if (rc)
        return rc;
    if (rep->type == REDIS_REPLY_ERROR) {
        ax_fail(AX_ENET, "redis %s: AUTH: %s", r->addr, rep->str);
        freeReplyObject(rep);
        return failed(r, AX_ENET);
    }
    freeReplyObject(rep);
    return AX_OK;
}

static int enter(ax_task *t, ax_redis *r, const char *who)
{
    if (!r)
        return ax_fail(AX_EINVAL, "%s: connection is NULL", who);
    if (t && ax_cancelled(t))
        return ax_fail(ax_cancelled(t), "%s: the task %s", who,
                       ax_cancelled(t) == AX_ECANCELED ? "was cancelled" : "is past its deadline");
    if (atomic_flag_test_and_set(&r->busy))
        return ax_fail(AX_EBUSY, "%s: the connection is in use by another task", who);
    return AX_OK;
}

/* A Redis Cluster redirection "<kind> <slot> <host>:<port>" (kind MOVED
 * or ASK): true with the node's address, if rep is one. */
static bool redirect(const redisReply *rep, const char *kind, char host[64], long *port)
{
    size_t kl = strlen(kind);
    if (!rep || rep->type != REDIS_REPLY_ERROR || strncmp(rep->str, kind, kl) != 0 ||
        rep->str[kl] != ' ')
        return false;
    const char *sp = strchr(rep->str + kl + 1, ' ');
    const char *colon = sp ? strrchr(sp + 1, ':') : NULL;
    if (!colon || colon == sp + 1 || (size_t)(colon - sp - 1) >= 64)
        return false;
    memcpy(host, sp + 1, (size_t)(colon - sp - 1));
    host[colon - sp - 1] = 0;
    *port = strtol(colon + 1, NULL, 10);
    return *port > 0 && *port <= 65535;
}

/* "MOVED <slot> <host>:<port>": Redis Cluster says another node owns the
 * keys' slot (the command did not run there). Re-point the connection. */
static bool moved(ax_redis *r, const redisReply *rep)
{
    char host[64];
    long port;
    if (r->unix_path || !redirect(rep, "MOVED", host, &port))
        return false;
    char *h = strdup(host);
    if (!h)
        return false;
    disconnect(r);
    free(r->host);
    r->host = h;
    r->cfg.host = h;
    r->cfg.port = (uint16_t)port;
    snprintf(r->addr, sizeof r->addr, strchr(h, ':') ? "[%s]:%ld" : "%s:%ld", h, port);
    r->failures = 0;
    r->next_try_ns = 0;
    return true;
}

/* "ASK <slot> <host>:<port>": the slot is being migrated and the keys this
 * command needs are no longer here; the node named takes it when it comes
 * preceded by ASKING. The slot still belongs to this node (its other keys
 * are served here), so the connection is not re-pointed: the commands
 * ask[0..n) go, each after an ASKING, in one pipeline over a connection of
 * their own to that node, made for this once and closed (a migration is
 * rare and short; a connection kept per target would be state to age
 * out). No second redirection is followed: an answer from there, MOVED
 * or TRYAGAIN included, is the command's reply. */
static int ask_forward(ax_task *t, ax_redis *r, uint64_t deadline, int64_t timeout_ms,
                       const char *host, long port, const struct rcmd *cmds, const size_t *ask,
                       size_t n, redisReply **replies)
{
    ax_redis_config cfg = r->cfg;
    cfg.host = host;
    cfg.port = (uint16_t)port;
    cfg.unix_path = NULL;
    ax_redis *a;
    int rc = ax_redis_new(&cfg, &a);
    if (rc)
        return rc;
    redisReply **got = calloc(2 * n, sizeof *got);
    if (!got) {
        ax_redis_free(a);
        return ax_fail_static(AX_ENOMEM, "redis: out of memory");
    }
    if ((rc = do_connect(t, a, deadline, timeout_ms)))
        goto out;
    static const char *asking[1] = {"ASKING"};
    static const size_t asking_len[1] = {6};
    for (size_t k = 0; k < n; k++) {
        const struct rcmd *c = &cmds[ask[k]];
        if (redisAppendCommandArgv(a->ctx, 1, asking, asking_len) != REDIS_OK ||
            (c->argc == RCMD_FORMATTED
                 ? redisAppendFormattedCommand(a->ctx, c->argv[0], c->lens[0])
                 : redisAppendCommandArgv(a->ctx, c->argc, c->argv, c->lens)) != REDIS_OK) {
            rc = io_error(a, "append");
            goto out;
        }
    }
    if ((rc = exchange(t, a, deadline, timeout_ms, 2 * n, got)))
        goto out;
    for (size_t k = 0; k < n; k++) {
        freeReplyObject(got[2 * k]); /* +OK to ASKING */
        replies[k] = got[2 * k + 1];
    }
out:
    if (rc) {
        /* the detail names the ASK target; the connection r is fine */
        char d[AX_ERROR_MAX];
        snprintf(d, sizeof d, "%s", ax_error_detail());
        ax_fail(rc, "%s (following ASK from %s)", d, r->addr);
    }
    free(got);
    ax_redis_free(a);
    return rc;
}

/* Send and receive; the commands answered MOVED go again to the node named
 * (at most two hops: a slot moving while we follow it is retried by the
 * caller), those answered ASK go once to the node it names (ask_forward).
 * With all of a queue's keys under one hash tag, every command of a
 * pipeline is for one slot, so they move together. */
int rconn_pipeline(ax_task *t, ax_redis *r, int64_t timeout_ms, size_t n, const struct rcmd *cmds,
                   redisReply **replies)
{
    int rc = enter(t, r, "redis");
    if (rc)
        return rc;
    if (timeout_ms < 0)
        timeout_ms = r->cfg.command_timeout_ms;
    uint64_t deadline = now_ns() + ms_to_ns_capped(timeout_ms);
    size_t todo_small[16], *todo = n <= 16 ? todo_small : malloc(n * sizeof *todo);
    redisReply *got_small[16], **got = n <= 16 ? got_small : malloc(n * sizeof *got);
    size_t ask_small[16], *ask = n <= 16 ? ask_small : malloc(n * sizeof *ask);
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL; /* on failure: whatever is placed is freed */
    if (!todo || !got || !ask) {
        rc = ax_fail_static(AX_ENOMEM, "redis: out of memory");
        goto out;
    }
    size_t ntodo = n;
    for (size_t i = 0; i < n; i++)
        todo[i] = i;
    for (int hop = 0; ntodo; hop++) {
        if (!r->ctx && (rc = do_connect(t, r, deadline, timeout_ms)))
            goto fail;
        for (size_t k = 0; k < ntodo; k++) {
            const struct rcmd *c = &cmds[todo[k]];
            if ((c->argc == RCMD_FORMATTED
                     ? redisAppendFormattedCommand(r->ctx, c->argv[0], c->lens[0])
                     : redisAppendCommandArgv(r->ctx, c->argc, c->argv, c->lens)) != REDIS_OK) {
                rc = io_error(r, "append");
                goto fail;
            }
        }
        if ((rc = exchange(t, r, deadline, timeout_ms, ntodo, got)))
            goto fail;
        r->failures = 0;
        size_t again = 0, nask = 0;
        char ask_host[64] = "";
        long ask_port = 0;
        for (size_t k = 0; k < ntodo; k++) {
            char h[64];
            long p;
            if (hop < 2 && moved(r, got[k])) {
                freeReplyObject(got[k]);
                todo[again++] = todo[k];
            } else if (redirect(got[k], "ASK", h, &p) &&
                       (nask == 0 || (p == ask_port && strcmp(h, ask_host) == 0))) {
                /* one slot per pipeline (one hash tag): one target; an ASK
                 * to another node (not a queue's pipeline) stays an error */
                memcpy(ask_host, h, sizeof h);
                ask_port = p;
                freeReplyObject(got[k]);
                ask[nask++] = todo[k];
            } else {
                replies[todo[k]] = got[k];
            }
        }
        ntodo = again;
        if (nask) {
            redisReply *fw_small[16], **fw = nask <= 16 ? fw_small : malloc(nask * sizeof *fw);
            if (!fw) {
                rc = ax_fail_static(AX_ENOMEM, "redis: out of memory");
                goto fail;
            }
            rc = ask_forward(t, r, deadline, timeout_ms, ask_host, ask_port, cmds, ask, nask, fw);
            for (size_t k = 0; k < nask && !rc; k++)
                replies[ask[k]] = fw[k];
            if (fw != fw_small)
                free(fw);
            if (rc)
                goto fail;
        }
    }
    goto out;
fail:
    /* the replies are the caller's only on success */
    for (size_t i = 0; i < n; i++)
        if (replies[i]) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
        }
out:
    if (todo != todo_small)
        free(todo);
    if (got != got_small)
        free(got);
    if (ask != ask_small)
        free(ask);
    atomic_flag_clear(&r->busy);
    return rc;
}

int ax_redis_command_argv(ax_task *t, ax_redis *r, int64_t timeout_ms, redisReply **reply,
                          int argc, const char **argv, const size_t *argvlen)
{
    if (!reply || argc <= 0 || !argv)
        return ax_fail_static(AX_EINVAL, "ax_redis_command_argv: reply, argc > 0 and argv are required");
    *reply = NULL;
    for (int i = 0; i < argc; i++) /* hiredis would strlen or copy from it: review */
        if (!argv[i])
            return ax_fail(AX_EINVAL, "ax_redis_command_argv: argv[%d] is NULL", i);
    RTIMEOUT_CHECK("ax_redis_command_argv", timeout_ms);
    struct rcmd c = {argc, argv, argvlen};
    return rconn_pipeline(t, r, timeout_ms, 1, &c, reply);
}

int ax_redis_command(ax_task *t, ax_redis *r, int64_t timeout_ms, redisReply **reply,
                     const char *fmt, ...)
{
    if (!reply || !fmt)
        return ax_fail_static(AX_EINVAL, "ax_redis_command: reply and fmt are required");
    *reply = NULL;
    if (!r)
        return ax_fail_static(AX_EINVAL, "ax_redis_command: connection is NULL");
    RTIMEOUT_CHECK("ax_redis_command", timeout_ms);
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (len < 0 || !cmd)
        return ax_fail(AX_EINVAL, "ax_redis_command: cannot format \"%s\"", fmt);
    if (len == 4 && memcmp(cmd, "*0\r\n", 4) == 0) {
        /* No word at all: Redis skips it and answers nothing, so the call
         * would only wait out its timeout. */
        redisFreeCommand(cmd);
        return ax_fail_static(AX_EINVAL, "ax_redis_command: the command is empty");
    }
    const char *argv[1] = {cmd};
    size_t lens[1] = {(size_t)len};
    struct rcmd c = {RCMD_FORMATTED, argv, lens};
    int rc = rconn_pipeline(t, r, timeout_ms, 1, &c, reply);
    redisFreeCommand(cmd);
    return rc;
}
