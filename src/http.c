/* http.c - libcurl's multi_socket interface driven by each worker's reactor
 * and timing wheel (libax_http; DESIGN.md §11).
 *
 * Per worker, created on first use: one CURLM (so connections are cached and
 * reused by every task of the worker), its sockets registered in the
 * worker's epoll as reactor sources, its single timeout as an extension
 * timer in the worker's wheel. Everything runs on the worker thread: curl's
 * callbacks fire from curl_multi_* calls made either by a task (adding its
 * transfer) or by the worker loop (socket events, the timer) — never
 * concurrently, so the multi handle needs no lock.
 *
 * A task in ax_http_perform is parked as RS_PARK_EXT with its easy handle in
 * run->ext. Three ways out:
 *   - the transfer completes: check_done takes it out of the multi handle
 *     and wakes the task with 0 (curl's result in the wait record);
 *   - the task's deadline or a cancel wakes it: run_wake calls on_unpark,
 *     which removes the easy handle from the multi handle — curl closes that
 *     connection at once, so the upstream sees the abort;
 *   - curl's own CURLOPT_TIMEOUT_MS (set to the remaining deadline) ends it
 *     with CURLE_OPERATION_TIMEDOUT, reported as AX_ETIMEDOUT.
 *
 * Keep-alive. curl's connection cache (one per multi handle) is bounded by
 * CURLMOPT_MAXCONNECTS; left at its default, curl sizes it to 4 x the easy
 * handles added *now*, checked as each transfer ends. Here a finished
 * transfer leaves the multi handle at once (check_done) and its task adds
 * the next one only when it runs again, so after a burst of completions the
 * count is low, the cache looks over-full and curl closes connections it is
 * about to need: 100 requests in flight against nginx opened one connection
 * per 7-11 requests in issue 11 (43-123 per 1 000 in bench/run here). So
 * the cache is sized from the most transfers this worker has had in flight
 * at once (`peak`, which only grows), unless ax_http_config.max_connects
 * fixes it: R requests with at most K in flight open at most K connections
 * to a server that keeps them.
 *
 * Settings (ax_http_configure) live in the scheduler under s->lock with a
 * generation counter; a worker compares the generation (one atomic load)
 * before each request and re-reads and applies them when it moved.
 *
 * Cost per request with many connections. libcurl 7.88 (Debian 12's) walks
 * a cache's connections twice per request: the reuse lookup scans the
 * host's connections, busy ones included, for an idle one, and
 * curl_multi_remove_handle runs through the whole cache for the transfer's
 * last connection (close_connect_only; curl 8.x looks it up by id). With
 * every connection of a worker in one cache that is O(connections) per
 * request: perf (cpu-clock) of ax_http_bench put 8.6 % of the client's CPU
 * in those loops against nginx at 1 000 in flight, 19 % against
 * ax-upstream at 10 000, ~1 % at 100. Spreading connections over several
 * caches (CURLSH with CURL_LOCK_DATA_CONNECT, one per 64 in flight, a task
 * keeping its own) took it to 1.7 % and CPU per request at 10 000 from 165
 * to 123 us, but was reverted: a review found that such a design must also
 * retire shards when the load falls (curl reaps a cache's dead connections
 * only when that cache is used: 237 sockets sat in CLOSE_WAIT), apply
 * ax_http_configure's limits to every shard's idle connections (238 stayed
 * open under max_total_connections 2), and it opens more connections than
 * transfers in flight while shards are added (316 for 300).
 *
 * ax_http_get/post take their easy handles from a per-worker pool of idle
 * ones (curl_easy_reset on the way back; bounded by easy_pool): no
 * allocation of curl's per-handle buffers per request, and TLS sessions
 * cached in the handle are resumed. Touched only by the worker thread.
 */
#define _GNU_SOURCE
#include "ax_http.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct http_sock;

struct http_worker {
    struct worker *w;
    CURLM *multi;
    struct run_timer timer;
    struct http_sock *graveyard; /* removed sockets, freed after the epoll batch */
    struct http_sock *live;      /* not removed yet (freed at destroy if curl never does) */
    struct http_sock *haunted;   /* removed after curl closed them: maybe still in epoll
                                    (sock_unregister); freed at destroy */
    ax_http_config conf;         /* as applied to multi */
    unsigned conf_gen;           /* s->http_conf_gen when conf was read */
    unsigned inflight, peak;     /* transfers in multi now / at most so far */
    long cache_size;             /* CURLMOPT_MAXCONNECTS as set */
    bool trim;                   /* a limit was lowered: close the idle connections
                                    once no transfer is in flight (trim_idle) */
    CURL **pool;                 /* idle easy handles for ax_http_get/post */
    unsigned npool, pool_cap;
};

/* The auto cache size: 4 x the peak in flight, as curl's own rule but
 * without its dips, and room for a few hosts before the first peak. */
#define HTTP_CACHE_MIN 16
#define HTTP_CACHE_PER_FLIGHT 4
#define HTTP_CACHE_FD_SHARE 4 /* idle connections: at most 1/4 of RLIMIT_NOFILE */
#define HTTP_LIMIT_MAX 1000000L
#define HTTP_POOL_MAX 65536u
/* ax_http_get/post keep a response in memory: its body up to max_body
 * (default 64 MiB: a bound, not a size anyone should hit), its header lines
 * up to 1 MiB (libcurl 7.84 and later refuse more than 300 KiB of them
 * first; this bound is for the others). */
#define HTTP_MAX_BODY_DEFAULT ((size_t)64 << 20)
#define HTTP_MAX_HEADERS ((size_t)1 << 20)
#define HTTP_CONTENT_TYPE_MAX 256 /* with its NUL */

/* A socket curl asked us to watch, registered in the worker's epoll by
 * curl's number. libcurl 7.88 sometimes closes a socket first and says
 * CURL_POLL_REMOVE for it later, in the same curl_multi_socket_action call
 * (TSan caught it in ax-demo, CI stop 29). The close took the registration
 * out of epoll already, and by the REMOVE the number may be another
 * thread's new socket or one this worker registered: an EPOLL_CTL_DEL by
 * that number deleted someone else's entry, or failed and left the
 * worker's count of registrations (nfd_waits) up for good, so that it
 * polled epoll on every turn of its loop. So the file registered is known
 * by identity (dev, ino, as reactor.c's ax_wait_fd entries are), and the
 * number is used only while it still names that file. (Registering a
 * duplicate descriptor of our own instead was tried: one more fd per
 * socket, and test_http_10k's 10 000 connections ran out of descriptors.) */
struct http_sock {
    struct reactor_src src; /* first: the reactor hands us this pointer */
    struct http_worker *hw;
    curl_socket_t fd;       /* curl's number; -1 once curl removed it */
    bool registered;        /* in the worker's epoll (as fd, for the file dev/ino) */
    dev_t dev;
    ino_t ino;
    struct http_sock *next;                 /* graveyard */
    struct http_sock *live_prev, *live_next; /* hw->live */
};

struct http_wait {
    CURL *easy;
    struct http_worker *hw;
    CURLcode result;
    bool done;
    char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void trim_idle(struct http_worker *hw);

static void check_done(struct http_worker *hw)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(hw->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;
        struct ax_task *t = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
        curl_multi_remove_handle(hw->multi, easy);
        hw->inflight--;
        if (t && t->rs == RS_PARK_EXT && t->ext) {
            struct http_wait *wait = t->ext;
            wait->result = result;
            wait->done = true;
            t->on_unpark = NULL; /* already out of the multi handle */
            run_wake(t, 0);
        }
    }
    trim_idle(hw);
}

static void on_socket_event(struct reactor_src *src, struct worker *w, uint32_t events)
{
    (void)w;
    struct http_sock *hs = (struct http_sock *)src;
    if (hs->fd < 0)
        return; /* removed by an earlier event of the same epoll batch */
    int flags = 0;
    if (events & EPOLLIN)
        flags |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        flags |= CURL_CSELECT_OUT;
    if (events & (EPOLLERR | EPOLLHUP))
        flags |= CURL_CSELECT_ERR;
    struct http_worker *hw = hs->hw; /* hs may be freed inside socket_action */
    int running;
    curl_multi_socket_action(hw->multi, hs->fd, flags, &running);
    check_done(hw);
}

/* fstat without ThreadSanitizer's interceptor, which takes it for a use of
 * the number: asking whether a number still names our file, when another
 * thread may have reused it, is the point here, not a race. */
static bool sock_stat(curl_socket_t fd, struct stat *st)
{
    return syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH) == 0;
}

/* curl's fd still names the file we registered. */
static bool sock_same(const struct http_sock *hs, curl_socket_t fd)
{
    struct stat st;
    return sock_stat(fd, &st) && st.st_dev == hs->dev && st.st_ino == hs->ino;
}

/* Out of epoll: by number while it is still our file; else the close took
 * the registration out already, and only the worker's count is left.
 * Returns true in that second case: the entry outlives the close if
 * another descriptor still holds the file (a child the host forked while
 * the transfer ran: curl's sockets are not close-on-exec), so its data,
 * hs, must stay allocated (review: freed, the next event on it called
 * freed memory). */
static bool sock_unregister(struct http_worker *hw, struct http_sock *hs)
{
    if (!hs->registered)
        return false;
    hs->registered = false;
    if (sock_same(hs, hs->fd)) {
        reactor_src_del(hw->w, hs->fd);
        return false;
    }
    reactor_src_gone(hw->w, hs->fd);
    return true;
}

static void sock_register(struct http_worker *hw, struct http_sock *hs, uint32_t ev)
{
    struct stat st;
    if (!sock_stat(hs->fd, &st))
        return; /* not open: nothing to watch (curl finds out itself) */
    hs->dev = st.st_dev;
    hs->ino = st.st_ino;
    hs->registered = reactor_src_add(hw->w, hs->fd, ev, &hs->src, false) == 0;
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct http_worker *hw = userp;
    struct http_sock *hs = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (hs) {
            /* curl's number may be closed, even reused */
            bool haunted = sock_unregister(hw, hs);
            curl_multi_assign(hw->multi, fd, NULL);
            /* The epoll batch being handled may still point at it: free
             * it once the batch is done (reactor_done). */
            hs->fd = -1;
            if (hs->live_prev)
                hs->live_prev->live_next = hs->live_next;
            else
                hw->live = hs->live_next;
            if (hs->live_next)
                hs->live_next->live_prev = hs->live_prev;
            if (haunted) { /* kept till the worker goes: its events are ignored */
                hs->next = hw->haunted;
                hw->haunted = hs;
            } else {
                hs->next = hw->graveyard;
                hw->graveyard = hs;
            }
        }
        return 0;
    }
    uint32_t ev = 0;
    if (what & CURL_POLL_IN)
        ev |= EPOLLIN;
    if (what & CURL_POLL_OUT)
        ev |= EPOLLOUT;
    if (!hs) {
        hs = calloc(1, sizeof *hs);
        if (!hs)
            return -1;
        hs->src.on_event = on_socket_event;
        hs->hw = hw;
        hs->live_next = hw->live;
        if (hw->live)
            hw->live->live_prev = hs;
        hw->live = hs;
        curl_multi_assign(hw->multi, fd, hs);
    } else if (hs->registered && !sock_same(hs, fd)) {
        /* A socket curl closed without a REMOVE, whose number its next
         * socket took: its stale entry (and our hs) came back. */
        sock_unregister(hw, hs);
    }
    hs->fd = fd;
    if (hs->registered && reactor_src_add(hw->w, fd, ev, &hs->src, true) == 0)
        return 0;
    sock_unregister(hw, hs);
    sock_register(hw, hs, ev);
    return 0;
}

static void on_timer(struct run_timer *rt, struct worker *w)
{
    (void)w;
    struct http_worker *hw = AX_CONTAINER_OF(rt, struct http_worker, timer);
    int running;
    curl_multi_socket_action(hw->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(hw);
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct http_worker *hw = userp;
    if (timeout_ms < 0)
        worker_timer_disarm(hw->w, &hw->timer);
    else
        worker_timer_arm(hw->w, &hw->timer, now_ns() + (uint64_t)timeout_ms * 1000000u);
    return 0;
}

static void reap(struct http_worker *hw)
{
    while (hw->graveyard) {
        struct http_sock *hs = hw->graveyard;
        hw->graveyard = hs->next;
        free(hs);
    }
}

static void reactor_done(struct worker *w)
{
    reap(w->http);
}

static void http_worker_destroy(void *p)
{
    struct http_worker *hw = p;
    while (hw->npool)
        curl_easy_cleanup(hw->pool[--hw->npool]);
    free(hw->pool);
    curl_multi_cleanup(hw->multi); /* closes cached connections */
    /* Sockets curl never said REMOVE for: their memory (the worker's epoll
     * goes with the worker). */
    while (hw->live) {
        struct http_sock *hs = hw->live;
        hw->live = hs->live_next;
        free(hs);
    }
    while (hw->haunted) {
        struct http_sock *hs = hw->haunted;
        hw->haunted = hs->next;
        free(hs);
    }
    reap(hw);
    free(hw);
}

/* ---- settings ------------------------------------------------------------ */

void ax_http_config_default(ax_http_config *c)
{
    if (!c)
        return;
    *c = (ax_http_config){0};
    c->max_connects = 0;
    c->max_host_connections = 0;
    c->max_total_connections = 0;
    c->multiplex = true;
    c->http_version = CURL_HTTP_VERSION_2TLS;
    c->easy_pool = 64;
    c->max_body = HTTP_MAX_BODY_DEFAULT;
}

static int check_limit(const char *field, long v)
{
    if (v < 0)
        return ax_fail(AX_EINVAL, "ax_http_config.%s: %ld is negative", field, v);
    if (v > HTTP_LIMIT_MAX)
        return ax_fail(AX_EINVAL, "ax_http_config.%s: %ld is more than %ld", field, v,
                       HTTP_LIMIT_MAX);
    return 0;
}

static int check_version(long v)
{
    bool h2 = false;
    switch (v) {
    case CURL_HTTP_VERSION_NONE:
    case CURL_HTTP_VERSION_1_0:
    case CURL_HTTP_VERSION_1_1:
        return 0;
    case CURL_HTTP_VERSION_2TLS:
        return 0; /* HTTP/1.1 where curl lacks HTTP/2 */
    case CURL_HTTP_VERSION_2_0:
    case CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE:
        h2 = true;
        break;
    default:
        return ax_fail(AX_EINVAL, "ax_http_config.http_version: %ld is not a CURL_HTTP_VERSION_* "
                                  "that ax_http knows (1_0, 1_1, 2_0, 2TLS, 2_PRIOR_KNOWLEDGE)", v);
    }
    const curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
    if (h2 && !(cv->features & CURL_VERSION_HTTP2))
        return ax_fail(AX_EINVAL, "ax_http_config.http_version: %ld needs HTTP/2, which this "
                                  "libcurl (%s) lacks", v, cv->version);
    /* 7.88.x (Debian 12's) fails every request on a reused prior-knowledge
     * connection with "Error in the HTTP2 framing layer" (curl issue 10634,
     * fixed in 8.0.0): refuse rather than fail requests. */
    if (v == CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE && cv->version_num >= 0x075800 &&
        cv->version_num < 0x080000)
        return ax_fail(AX_EINVAL, "ax_http_config.http_version: HTTP/2 with prior knowledge "
                                  "is broken in libcurl %s when a connection is reused (curl "
                                  "issue 10634, fixed in 8.0.0)", cv->version);
    return 0;
}

int ax_http_configure(ax_sched *s, const ax_http_config *c)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_http_configure");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_http_configure: scheduler is NULL");
    if (!c)
        return ax_fail_static(AX_EINVAL, "ax_http_configure: config is NULL");
    int rc = check_limit("max_connects", c->max_connects);
    if (!rc)
        rc = check_limit("max_host_connections", c->max_host_connections);
    if (!rc)
        rc = check_limit("max_total_connections", c->max_total_connections);
    if (!rc)
        rc = check_version(c->http_version);
    if (!rc && c->easy_pool > HTTP_POOL_MAX)
        rc = ax_fail(AX_EINVAL, "ax_http_config.easy_pool: %u is more than %u", c->easy_pool,
                     HTTP_POOL_MAX);
    if (rc)
        return rc;
    ax_http_config *copy = malloc(sizeof *copy);
    if (!copy)
        return ax_fail_static(AX_ENOMEM, "ax_http_configure: out of memory");
    *copy = *c;
    pthread_mutex_lock(&s->lock);
    void *old = s->http_conf;
    s->http_conf = copy;
    atomic_fetch_add_explicit(&s->http_conf_gen, 1, memory_order_release);
    pthread_mutex_unlock(&s->lock);
    free(old); /* workers copy it under s->lock only */
    return AX_OK;
}

/* CURLMOPT_MAXCONNECTS for the current settings and peak. The auto size
 * keeps the idle connections of a scheduler's workers within a quarter of
 * the process's open-file limit: after a burst of K in flight the cache held
 * them all (4 K), so with K near the limit the process could open no file
 * or socket at all once idle (a new user's trial: ulimit -n 200, 1 000 in
 * flight, opendir failed afterwards). Read at each resize (peaks only
 * grow, settings change rarely): a host that raises its limit later gets
 * the room from the next peak on. */
static long cache_want(const struct http_worker *hw)
{
    long want = hw->conf.max_connects;
    if (want == 0) {
        want = (long)hw->peak * HTTP_CACHE_PER_FLIGHT;
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
            rlim_t share = rl.rlim_cur / HTTP_CACHE_FD_SHARE / hw->w->s->nworkers;
            if ((rlim_t)want > share)
                want = (long)share;
        }
        if (want < HTTP_CACHE_MIN)
            want = HTTP_CACHE_MIN;
    }
    return want;
}

static void cache_fit(struct http_worker *hw)
{
    long want = cache_want(hw);
    if (want != hw->cache_size) {
        curl_multi_setopt(hw->multi, CURLMOPT_MAXCONNECTS, want);
        hw->cache_size = want;
    }
}

static void pool_fit(struct http_worker *hw)
{
    unsigned cap = hw->conf.easy_pool;
    while (hw->npool > cap)
        curl_easy_cleanup(hw->pool[--hw->npool]);
    if (cap == hw->pool_cap)
        return;
    CURL **p = realloc(hw->pool, (cap ? cap : 1) * sizeof *p);
    if (!p)
        return; /* keep the old pool; the bound above still holds */
    hw->pool = p;
    hw->pool_cap = cap;
}

/* hw->conf's connection settings, into hw->multi. */
static void multi_apply(struct http_worker *hw)
{
    curl_multi_setopt(hw->multi, CURLMOPT_MAX_HOST_CONNECTIONS, hw->conf.max_host_connections);
    curl_multi_setopt(hw->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, hw->conf.max_total_connections);
    curl_multi_setopt(hw->multi, CURLMOPT_PIPELINING,
                      hw->conf.multiplex ? CURLPIPE_MULTIPLEX : CURLPIPE_NOTHING);
    cache_fit(hw);
}

/* A multi handle that reports its sockets and timer to hw's worker. */
static CURLM *multi_new(struct http_worker *hw)
{
    CURLM *m = curl_multi_init();
    if (m) {
        curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, socket_cb);
        curl_multi_setopt(m, CURLMOPT_SOCKETDATA, hw);
        curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, timer_cb);
        curl_multi_setopt(m, CURLMOPT_TIMERDATA, hw);
    }
    return m;
}

/* A lower limit than before (0 is none): the idle connections over it
 * must go. */
static bool lowered(long was, long now)
{
    return now > 0 && (was == 0 || now < was);
}

/* The same for max_connects, whose 0 is not "none" but the auto size:
 * the sizes the old and the new settings give are compared (hw->conf is
 * the new one, cache_size still the old size): raising it from auto to a
 * larger number closed every idle connection (review of f7705f4), and
 * going back to an auto size below the old number closed none (review of
 * 5b302fe). */
static bool cache_lowered(const struct http_worker *hw)
{
    return hw->cache_size > 0 && cache_want(hw) < hw->cache_size;
}

/* After a limit was lowered, with no transfer in flight: close every idle
 * connection by swapping in a fresh multi handle. curl itself closes at most
 * one idle connection as each transfer ends, and none while there is no
 * traffic: a trial lowered max_total_connections to 2 after 1 000 requests in
 * flight and 963 connections were still open after 50 more requests, for
 * good. Only between transfers: a multi handle cannot be swapped under one.
 * The new handle is made first, so the sockets curl_multi_cleanup reports
 * removed (socket_cb) leave epoll against a live hw->multi. */
static void trim_idle(struct http_worker *hw)
{
    if (!hw->trim || hw->inflight)
        return;
    CURLM *m = multi_new(hw);
    if (!m)
        return; /* tried again at the next transfer's end or request */
    CURLM *old = hw->multi;
    hw->multi = m;
    hw->cache_size = 0; /* set again below */
    multi_apply(hw);
    curl_multi_cleanup(old); /* closes its cached connections */
    hw->trim = false;
}

/* Re-read the scheduler's settings when ax_http_configure changed them.
 * Hot (once or twice per request): one atomic load when nothing changed. */
static void conf_refresh(struct http_worker *hw)
{
    struct ax_sched *s = hw->w->s;
    if (atomic_load_explicit(&s->http_conf_gen, memory_order_acquire) == hw->conf_gen)
        return;
    ax_http_config was = hw->conf;
    pthread_mutex_lock(&s->lock);
    if (s->http_conf)
        hw->conf = *(const ax_http_config *)s->http_conf;
    hw->conf_gen = atomic_load_explicit(&s->http_conf_gen, memory_order_relaxed);
    pthread_mutex_unlock(&s->lock);
    if (cache_lowered(hw) ||
        lowered(was.max_host_connections, hw->conf.max_host_connections) ||
        lowered(was.max_total_connections, hw->conf.max_total_connections))
        hw->trim = true;
    multi_apply(hw);
    pool_fit(hw);
    trim_idle(hw);
}

static CURL *easy_take(struct http_worker *hw)
{
    return hw->npool ? hw->pool[--hw->npool] : curl_easy_init();
}

static void easy_give(struct http_worker *hw, CURL *easy)
{
    if (hw->npool < hw->pool_cap) {
        curl_easy_reset(easy); /* keeps its TLS session and DNS caches */
        hw->pool[hw->npool++] = easy;
    } else {
        curl_easy_cleanup(easy);
    }
}

/* The calling task's worker state, created on first use, settings fresh. */
static struct http_worker *http_worker_get(struct worker *w)
{
    if (w->http) {
        conf_refresh(w->http);
        return w->http;
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return NULL;
    struct http_worker *hw = calloc(1, sizeof *hw);
    if (!hw)
        return NULL;
    hw->w = w;
    hw->timer.fire = on_timer;
    hw->timer.kind = TIMER_EXT;
    hw->multi = multi_new(hw);
    if (!hw->multi) {
        free(hw);
        return NULL;
    }
    ax_http_config_default(&hw->conf);
    hw->conf_gen = atomic_load_explicit(&w->s->http_conf_gen, memory_order_relaxed) - 1;
    conf_refresh(hw); /* applies the defaults or ax_http_configure's */
    w->http = hw;
    w->http_destroy = http_worker_destroy;
    w->reactor_done = reactor_done;
    return hw;
}

/* Deadline or cancel while the transfer runs: abort it now. */
static void abort_transfer(struct ax_task *t)
{
    struct http_wait *wait = t->ext;
    if (wait && !wait->done) {
        curl_multi_remove_handle(wait->hw->multi, wait->easy);
        wait->hw->inflight--;
        trim_idle(wait->hw);
    }
}

/* curl's code as ax's. CURLE_UNSUPPORTED_PROTOCOL is the caller's when the
 * URL's scheme was refused (nothing connected), but libcurl also returns it
 * for a reply that is not HTTP (an HTTP/0.9 or garbage answer): that is the
 * server's, a failed transfer like any other (review: AX_EINVAL told the
 * caller its own request was wrong, so it would not retry). */
static int map_result(CURL *easy, CURLcode c, const char *errbuf)
{
    const char *why = errbuf && errbuf[0] ? errbuf : curl_easy_strerror(c);
    if (c == CURLE_UNSUPPORTED_PROTOCOL) {
        /* The IP of the connection used, new or reused; "" when none was. */
        char *ip = NULL;
        if (curl_easy_getinfo(easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK && ip && ip[0])
            return ax_fail(AX_ENET, "curl: %s (the server's reply is not HTTP)", why);
    }
    switch (c) {
    case CURLE_OK:
        return AX_OK;
    case CURLE_OPERATION_TIMEDOUT:
        return ax_fail(AX_ETIMEDOUT, "curl: %s", why);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_BAD_FUNCTION_ARGUMENT:
        return ax_fail(AX_EINVAL, "curl: %s", why);
    default:
        return ax_fail(AX_ENET, "curl: %s (%s)", why, curl_easy_strerror(c));
    }
}

/* The transfer, bounded by `bound_ns` (the task's deadline or tighter);
 * `who` is the public call the user made, for the error details (a trial:
 * ax_http_get(NULL, ...) said "ax_http_perform: task is NULL"). */
static int perform(ax_task *t, CURL *easy, CURLcode *curl_code, uint64_t bound_ns,
                   const char *who)
{
    if (!t)
        return ax_fail(AX_EINVAL, "%s: task is NULL", who);
    if (t != ax_current_run)
        return ax_fail(AX_ESTATE, "%s: called outside the task's own coroutine", who);
    if (!easy)
        return ax_fail(AX_EINVAL, "%s: easy handle is NULL", who);
    int rc = run_blocking_entry(t, who);
    if (rc)
        return rc;
    struct http_worker *hw = http_worker_get(t->w);
    if (!hw)
        return ax_fail(AX_ENOMEM, "%s: cannot set up curl on this worker", who);
    uint64_t now = now_ns();
    if (now >= bound_ns)
        return ax_fail(AX_ETIMEDOUT, "%s: the deadline has passed", who);
    long left_ms = (long)((bound_ns - now + 999999u) / 1000000u);
    struct http_wait wait = {.easy = easy, .hw = hw};
    /* CURLOPT_PRIVATE is how the multi callbacks find the task: the
     * caller's own value is put back afterwards (a trial found it lost). */
    char *caller_private = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &caller_private);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, left_ms);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, (char *)t);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, wait.errbuf);
    CURLMcode mc = curl_multi_add_handle(hw->multi, easy);
    if (mc != CURLM_OK) {
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
        curl_easy_setopt(easy, CURLOPT_PRIVATE, caller_private);
        return ax_fail(AX_EINVAL, "ax_http_perform: %s", curl_multi_strerror(mc));
    }
    if (++hw->inflight > hw->peak) {
        hw->peak = hw->inflight;
        cache_fit(hw); /* before any transfer ends and curl trims the cache */
    }
    t->ext = &wait;
    t->on_unpark = abort_transfer;
    t->rs = RS_PARK_EXT;
    rc = run_park(t);
    t->ext = NULL;
    t->on_unpark = NULL;
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, caller_private);
    if (rc)
        return ax_fail(rc, "ax_http_perform: transfer aborted: %s", ax_strerror(rc));
    if (curl_code)
        *curl_code = wait.result;
    if (wait.result == CURLE_OPERATION_TIMEDOUT && run_detached_rc(t))
        return run_detached_rc(t);
    return map_result(easy, wait.result, wait.errbuf);
}

/* curl's code for an ax code when curl has none (ax ended or refused the
 * transfer): never CURLE_OK for a failure (a trial found a cancelled
 * transfer reported CURLE_OK, read as a success). */
static CURLcode curl_of(int rc)
{
    switch (rc) {
    case AX_OK: return CURLE_OK;
    case AX_ETIMEDOUT: return CURLE_OPERATION_TIMEDOUT;
    case AX_ENOMEM: return CURLE_OUT_OF_MEMORY;
    case AX_EINVAL:
    case AX_ESTATE: return CURLE_BAD_FUNCTION_ARGUMENT;
    default: return CURLE_ABORTED_BY_CALLBACK; /* cancelled, shut down */
    }
}

int ax_http_perform(ax_task *t, CURL *easy, CURLcode *curl_code)
{
    CURLcode cc = CURL_LAST; /* still CURL_LAST: curl gave no result */
    int rc = perform(t, easy, &cc, t && t == ax_current_run ? t->deadline_ns : 0,
                     "ax_http_perform");
    if (curl_code)
        *curl_code = cc != CURL_LAST ? cc : curl_of(rc);
    return rc;
}

/* ---- convenience ------------------------------------------------------------- */

/* A response part kept in memory, at most `max` bytes: past it (or when
 * memory runs out) the write callback returns short, curl fails the
 * transfer with CURLE_WRITE_ERROR, and `over` / `nomem` say why. */
struct buf {
    char *p;
    size_t len, cap, max;
    bool over, nomem;
};

static size_t buf_append(struct buf *b, const char *data, size_t n)
{
    if (n > b->max - b->len) {
        b->over = true;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->nomem = true;
            return 0;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return n;
}

/* Every socket ax_http_get/post opens is close-on-exec: a subprocess the
 * host starts does not inherit it (libcurl 7.88 opens them without
 * SOCK_CLOEXEC). A child holding one would keep the connection open past
 * curl's close, and keep its epoll entry alive (struct http_sock). And the
 * system's reason when no socket can be had is kept: curl says only
 * "Couldn't connect to server" for a full fd table (EMFILE; a trial), and
 * CURLINFO_OS_ERRNO keeps the errno of an earlier connect on a reused
 * handle ("Connection refused"). */
struct sock_opened {
    int err;     /* errno of a socket() that failed (EMFILE over EAFNOSUPPORT) */
    bool opened; /* one succeeded: the failure is not the request's (an
                    address family the host lacks beside one it has) */
};

static curl_socket_t on_open_socket(void *clientp, curlsocktype purpose,
                                    struct curl_sockaddr *a)
{
    (void)purpose;
    struct sock_opened *so = clientp;
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd < 0) {
        /* A full fd table says more than a family the host lacks. */
        if (!so->err || so->err == EAFNOSUPPORT)
            so->err = errno;
        return CURL_SOCKET_BAD;
    }
    so->opened = true;
    return fd;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *userp)
{
    return buf_append(userp, data, size * nmemb);
}

static int request_do(ax_task *t, const char *url, const char *content_type, const void *body,
                      size_t len, bool post, int64_t timeout_ms, ax_http_response *out)
{
    const char *fn = post ? "ax_http_post" : "ax_http_get";
    if (!url)
        return ax_fail(AX_EINVAL, "%s: url is NULL", fn);
    /* Only http(s): libcurl would also read file:// and speak ftp://, dict://
     * and more (a trial read /etc/passwd through ax_http_get). */
    if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
        return ax_fail(AX_EINVAL, "%s: url must begin with http:// or https:// (\"%.40s\")", fn,
                       url);
    if (post && !body && len > 0)
        return ax_fail(AX_EINVAL, "ax_http_post: body is NULL with len %zu", len);
    if (post && content_type) {
        size_t n = strnlen(content_type, HTTP_CONTENT_TYPE_MAX);
        if (n == HTTP_CONTENT_TYPE_MAX)
            return ax_fail(AX_EINVAL, "ax_http_post: content_type is longer than %d bytes",
                           HTTP_CONTENT_TYPE_MAX - 1);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)content_type[i];
            /* RFC 9110 §5.5: no CR, LF or NUL in a field value, and no other
             * control character but HTAB; a CR LF would start a header of
             * the caller's choosing. */
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return ax_fail(AX_EINVAL,
                               "ax_http_post: content_type has a control character (byte %zu: "
                               "0x%02x)", i, c);
        }
    }
    if (timeout_ms == 0)
        return ax_fail(AX_ETIMEDOUT, "%s: timeout_ms is 0: no time for a request", fn);
    pthread_once(&curl_once, curl_init);
    /* Outside its own coroutine the task has no worker: perform says so. */
    struct http_worker *hw = t && t == ax_current_run ? http_worker_get(t->w) : NULL;
    CURL *easy = hw ? easy_take(hw) : curl_easy_init();
    if (!easy)
        return ax_fail_static(AX_ENOMEM, "ax_http: curl_easy_init failed");
    size_t max_body = hw && hw->conf.max_body ? hw->conf.max_body : HTTP_MAX_BODY_DEFAULT;
    struct buf hb = {.max = HTTP_MAX_HEADERS}, bb = {.max = max_body};
    struct curl_slist *hdrs = NULL;
    CURLcode uc = curl_easy_setopt(easy, CURLOPT_URL, url);
    if (uc != CURLE_OK) { /* e.g. longer than curl takes (8 MiB) */
        if (hw)
            easy_give(hw, easy);
        else
            curl_easy_cleanup(easy);
        return ax_fail(uc == CURLE_OUT_OF_MEMORY ? AX_ENOMEM : AX_EINVAL, "%s: url refused by curl: %s",
                       fn, curl_easy_strerror(uc));
    }
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85.0 */
    /* "https" is unknown to a libcurl built without TLS: then http alone
     * (unchecked, a failure would leave every protocol on). */
    if (curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK)
        curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http");
    if (curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK)
        curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http");
#else
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &bb);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_data);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &hb);
    struct sock_opened so = {0, false};
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, &so);
    if (hw) {
        curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, hw->conf.http_version);
        /* Wait for a connection being set up to say whether it multiplexes
         * only where it can: TLS (ALPN) or h2c by prior knowledge. On plain
         * http:// curl would otherwise hold requests until the first
         * response shows HTTP/1.1 (test_http_10k: requests sent 8 s late). */
        bool may_mux = strncasecmp(url, "https://", 8) == 0 ||
                       hw->conf.http_version == CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
        curl_easy_setopt(easy, CURLOPT_PIPEWAIT, hw->conf.multiplex && may_mux ? 1L : 0L);
    }
    if (post) {
        curl_easy_setopt(easy, CURLOPT_POST, 1L);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        if (content_type) {
            char h[sizeof "Content-Type: " + HTTP_CONTENT_TYPE_MAX];
            snprintf(h, sizeof h, "Content-Type: %s", content_type); /* checked: fits */
            hdrs = curl_slist_append(hdrs, h);
            curl_easy_setopt(easy, CURLOPT_HTTPHEADER, hdrs);
        }
    }
    uint64_t deadline = t && t == ax_current_run ? t->deadline_ns : 0;
    uint64_t bound = deadline;
    if (timeout_ms >= 0 && bound && now_ns() + ms_to_ns_capped(timeout_ms) < bound)
        bound = now_ns() + ms_to_ns_capped(timeout_ms);
    int rc = perform(t, easy, NULL, bound, fn);
    /* curl says "Operation timed out" for either bound, as AX_ETIMEDOUT
     * does: when it was the request's own timeout_ms that expired, with the
     * task's deadline still ahead, the detail says so. */
    if (rc == AX_ETIMEDOUT && bound < deadline && now_ns() < deadline) {
        char why[256];
        snprintf(why, sizeof why, "%s", ax_error_detail());
        ax_fail(AX_ETIMEDOUT,
                "%s: no answer within timeout_ms %lld (the task's deadline has not passed; %s)",
                fn, (long long)timeout_ms, why);
    }
    /* A part past its bound, or out of memory for it: curl only says
     * "Failed writing received data". */
    if (rc == AX_ENET && so.err && !so.opened) {
        char why[256];
        snprintf(why, sizeof why, "%s", ax_error_detail());
        rc = ax_fail(AX_ENET, "%s: cannot open a socket: %s%s (%s)", fn, strerror(so.err),
                     so.err == EMFILE ? " (the process's RLIMIT_NOFILE)" : "", why);
    } else if (rc && (bb.over || hb.over))
        rc = ax_fail(AX_ENET, "%s: the response's %s is longer than %zu bytes (%s)", fn,
                     bb.over ? "body" : "header", bb.over ? bb.max : hb.max,
                     bb.over ? "ax_http_config.max_body" : "the headers' bound");
    else if (rc && (bb.nomem || hb.nomem))
        rc = ax_fail(AX_ENOMEM, "%s: out of memory for the response (%zu bytes so far)", fn,
                     bb.len + hb.len);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &out->status);
    if (hw)
        easy_give(hw, easy);
    else
        curl_easy_cleanup(easy);
    curl_slist_free_all(hdrs);
    out->headers = hb.p;
    out->headers_len = hb.len;
    out->body = bb.p;
    out->body_len = bb.len;
    return rc;
}

/* ax_http.h promises NUL-terminated headers and body, also when the
 * request was refused before it was made (new-user trial: NULL after a bad
 * URL or content_type, or timeout_ms 0) and when no byte came. Allocated,
 * as a response's: callers free() them (test_http_10k keeps a body), and a
 * static "" there crashed (review of 68c8f50). Out of memory: NULL still. */
static int request(ax_task *t, const char *url, const char *content_type, const void *body,
                   size_t len, bool post, int64_t timeout_ms, ax_http_response *out)
{
    if (!out)
        return ax_fail_static(AX_EINVAL, "ax_http: response is NULL");
    memset(out, 0, sizeof *out);
    int rc = request_do(t, url, content_type, body, len, post, timeout_ms, out);
    if (!out->headers)
        out->headers = calloc(1, 1);
    if (!out->body)
        out->body = calloc(1, 1);
    return rc;
}

int ax_http_get(ax_task *t, const char *url, int64_t timeout_ms, ax_http_response *out)
{
    return request(t, url, NULL, NULL, 0, false, timeout_ms, out);
}

int ax_http_post(ax_task *t, const char *url, const char *content_type, const void *body,
                 size_t len, int64_t timeout_ms, ax_http_response *out)
{
    return request(t, url, content_type, body, len, true, timeout_ms, out);
}

void ax_http_response_free(ax_http_response *r)
{
    if (!r)
        return;
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof *r);
}
