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
 */
#define _GNU_SOURCE
#include "ax_http.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

struct http_sock;

struct http_worker {
    struct worker *w;
    CURLM *multi;
    struct run_timer timer;
    struct http_sock *graveyard; /* removed sockets, freed after the epoll batch */
};

struct http_sock {
    struct reactor_src src; /* first: the reactor hands us this pointer */
    struct http_worker *hw;
    curl_socket_t fd;       /* -1 once curl removed it */
    struct http_sock *next; /* graveyard */
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
        if (t && t->rs == RS_PARK_EXT && t->ext) {
            struct http_wait *wait = t->ext;
            wait->result = result;
            wait->done = true;
            t->on_unpark = NULL; /* already out of the multi handle */
            run_wake(t, 0);
        }
    }
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

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct http_worker *hw = userp;
    struct http_sock *hs = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (hs) {
            reactor_src_del(hw->w, fd);
            curl_multi_assign(hw->multi, fd, NULL);
            /* The epoll batch being handled may still point at it: free
             * it once the batch is done (reactor_done). */
            hs->fd = -1;
            hs->next = hw->graveyard;
            hw->graveyard = hs;
        }
        return 0;
    }
    uint32_t ev = 0;
    if (what & CURL_POLL_IN)
        ev |= EPOLLIN;
    if (what & CURL_POLL_OUT)
        ev |= EPOLLOUT;
    bool mod = hs != NULL;
    if (!hs) {
        hs = calloc(1, sizeof *hs);
        if (!hs)
            return -1;
        hs->src.on_event = on_socket_event;
        hs->hw = hw;
        hs->fd = fd;
        curl_multi_assign(hw->multi, fd, hs);
    }
    if (reactor_src_add(hw->w, fd, ev, &hs->src, mod) != 0 && mod)
        reactor_src_add(hw->w, fd, ev, &hs->src, false); /* curl reused the fd number */
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
    curl_multi_cleanup(hw->multi); /* closes cached connections */
    reap(hw);
    free(hw);
}

static struct http_worker *http_worker_get(struct worker *w)
{
    if (w->http)
        return w->http;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return NULL;
    struct http_worker *hw = calloc(1, sizeof *hw);
    if (!hw)
        return NULL;
    hw->w = w;
    hw->timer.fire = on_timer;
    hw->timer.kind = TIMER_EXT;
    hw->multi = curl_multi_init();
    if (!hw->multi) {
        free(hw);
        return NULL;
    }
    curl_multi_setopt(hw->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(hw->multi, CURLMOPT_SOCKETDATA, hw);
    curl_multi_setopt(hw->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(hw->multi, CURLMOPT_TIMERDATA, hw);
    w->http = hw;
    w->http_destroy = http_worker_destroy;
    w->reactor_done = reactor_done;
    return hw;
}

/* Deadline or cancel while the transfer runs: abort it now. */
static void abort_transfer(struct ax_task *t)
{
    struct http_wait *wait = t->ext;
    if (wait && !wait->done)
        curl_multi_remove_handle(wait->hw->multi, wait->easy);
}

static int map_result(CURLcode c, const char *errbuf)
{
    const char *why = errbuf && errbuf[0] ? errbuf : curl_easy_strerror(c);
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

/* The transfer, bounded by `bound_ns` (the task's deadline or tighter). */
static int perform(ax_task *t, CURL *easy, CURLcode *curl_code, uint64_t bound_ns)
{
    if (curl_code)
        *curl_code = CURLE_OK;
    if (!t)
        return ax_fail_static(AX_EINVAL, "ax_http_perform: task is NULL");
    if (t != ax_current_run)
        return ax_fail_static(AX_ESTATE,
                              "ax_http_perform: called outside the task's own coroutine");
    if (!easy)
        return ax_fail_static(AX_EINVAL, "ax_http_perform: easy handle is NULL");
    int rc = run_detached_rc(t);
    if (rc)
        return rc;
    struct http_worker *hw = http_worker_get(t->w);
    if (!hw)
        return ax_fail_static(AX_ENOMEM, "ax_http_perform: cannot set up curl on this worker");
    uint64_t now = now_ns();
    if (now >= bound_ns)
        return ax_fail_static(AX_ETIMEDOUT, "ax_http_perform: the deadline has passed");
    long left_ms = (long)((bound_ns - now + 999999u) / 1000000u);
    struct http_wait wait = {.easy = easy, .hw = hw};
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, left_ms);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, (char *)t);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, wait.errbuf);
    CURLMcode mc = curl_multi_add_handle(hw->multi, easy);
    if (mc != CURLM_OK) {
        curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
        return ax_fail(AX_EINVAL, "ax_http_perform: %s", curl_multi_strerror(mc));
    }
    t->ext = &wait;
    t->on_unpark = abort_transfer;
    t->rs = RS_PARK_EXT;
    rc = run_park(t);
    t->ext = NULL;
    t->on_unpark = NULL;
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
    if (rc)
        return ax_fail(rc, "ax_http_perform: transfer aborted: %s", ax_strerror(rc));
    if (curl_code)
        *curl_code = wait.result;
    if (wait.result == CURLE_OPERATION_TIMEDOUT && run_detached_rc(t))
        return run_detached_rc(t);
    return map_result(wait.result, wait.errbuf);
}

int ax_http_perform(ax_task *t, CURL *easy, CURLcode *curl_code)
{
    return perform(t, easy, curl_code, t && t == ax_current_run ? t->deadline_ns : 0);
}

/* ---- convenience ------------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
};

static size_t buf_append(struct buf *b, const char *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return 0; /* curl then fails the transfer with CURLE_WRITE_ERROR */
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return n;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *userp)
{
    return buf_append(userp, data, size * nmemb);
}

static int request(ax_task *t, const char *url, const char *content_type, const void *body,
                   size_t len, bool post, int64_t timeout_ms, ax_http_response *out)
{
    if (!out)
        return ax_fail_static(AX_EINVAL, "ax_http: response is NULL");
    memset(out, 0, sizeof *out);
    if (!url)
        return ax_fail_static(AX_EINVAL, "ax_http: url is NULL");
    pthread_once(&curl_once, curl_init);
    CURL *easy = curl_easy_init();
    if (!easy)
        return ax_fail_static(AX_ENOMEM, "ax_http: curl_easy_init failed");
    struct buf hb = {0}, bb = {0};
    struct curl_slist *hdrs = NULL;
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &bb);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_data);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &hb);
    if (post) {
        curl_easy_setopt(easy, CURLOPT_POST, 1L);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        if (content_type) {
            char h[256];
            snprintf(h, sizeof h, "Content-Type: %s", content_type);
            hdrs = curl_slist_append(hdrs, h);
            curl_easy_setopt(easy, CURLOPT_HTTPHEADER, hdrs);
        }
    }
    uint64_t bound = t && t == ax_current_run ? t->deadline_ns : 0;
    if (timeout_ms >= 0 && bound && now_ns() + (uint64_t)timeout_ms * 1000000u < bound)
        bound = now_ns() + (uint64_t)timeout_ms * 1000000u;
    int rc = perform(t, easy, NULL, bound);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_cleanup(easy);
    curl_slist_free_all(hdrs);
    out->headers = hb.p ? hb.p : calloc(1, 1);
    out->headers_len = hb.len;
    out->body = bb.p ? bb.p : calloc(1, 1);
    out->body_len = bb.len;
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
