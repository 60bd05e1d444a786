/* The /metrics endpoint (src/obs/metrics_serve.c, DESIGN.md §13) answers when
 * everything else is saturated and is not counted as the host's work.
 *
 *   saturated   every slot busy and the HIGH bucket full (AX_EFULL): a scrape
 *               over a raw socket gets a whole 200 answer; it takes no slot
 *   idle        100 idle connections to the port: the host still gets every
 *               slot and completes its tasks (exact counts); beyond the cap
 *               the oldest idle connection is closed, a scrape still answers;
 *               idle connections are closed after the read timeout, never
 *               before
 *   counters    the same workload with and without a scraping loop: every
 *               ax_stats counter, histogram count and event count identical
 *   protocol    HEAD has headers and no body; 400 / 404 / 405 / 431 / 505;
 *               a request in pieces; a request with a body; stop and restart
 *
 * Counts are exact by construction; times are bounded only for liveness
 * (generous, for sanitizers and a loaded machine) and printed.
 */
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define LIVENESS_MS 10000

/* ---- raw sockets ----------------------------------------------------------- */

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        CHECK(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

/* Read until the peer closes, at most cap - 1 bytes, within ms. Returns the
 * byte count, or -1 if the deadline passed first. */
static long read_to_eof(int fd, char *out, size_t cap, int ms)
{
    uint64_t end = test_now_ms() + (uint64_t)ms;
    size_t n = 0;
    for (;;) {
        uint64_t now = test_now_ms();
        if (now >= end)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - now)) <= 0)
            continue;
        ssize_t r = read(fd, out + n, cap - 1 - n);
        if (r < 0 && errno == ECONNRESET)
            r = 0;
        CHECK(r >= 0);
        if (r == 0)
            break;
        n += (size_t)r;
        CHECK(n < cap - 1);
    }
    out[n] = 0;
    return (long)n;
}

/* True if the server closed fd (EOF readable) within ms. */
static bool closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return false;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

struct answer {
    int status;
    long content_length; /* -1 if absent */
    size_t head_len;     /* through the blank line */
    size_t body_len;     /* bytes after it */
    char text[1 << 16];
};

/* One request, the whole answer, within LIVENESS_MS; *ms_out the time taken. */
static void request(uint16_t port, const char *req, size_t len, struct answer *a, double *ms_out)
{
    uint64_t t0 = ax_now_ns();
    int fd = dial(port);
    send_all(fd, req, len);
    long n = read_to_eof(fd, a->text, sizeof a->text, LIVENESS_MS);
    close(fd);
    if (ms_out)
        *ms_out = (double)(ax_now_ns() - t0) / 1e6;
    CHECK(n > 0);
    CHECK(sscanf(a->text, "HTTP/1.1 %d ", &a->status) == 1);
    const char *blank = strstr(a->text, "\r\n\r\n");
    CHECK(blank != NULL);
    a->head_len = (size_t)(blank + 4 - a->text);
    a->body_len = (size_t)n - a->head_len;
    const char *cl = strstr(a->text, "\r\nContent-Length: ");
    a->content_length = cl && cl < blank ? strtol(cl + 18, NULL, 10) : -1;
    CHECK(strstr(a->text, "\r\nConnection: close\r\n") != NULL);
}

static void get(uint16_t port, const char *req, struct answer *a)
{
    request(port, req, strlen(req), a, NULL);
}

/* The value of the sample line "name value" in a Prometheus text. */
static double sample(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    fprintf(stderr, "no sample %s\n", name);
    abort();
}

/* ---- tasks ------------------------------------------------------------------------- */

static atomic_int release_gate;

/* Holds its slot until release_gate is set. */
static int blocker(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&release_gate)) {
        int rc = ax_sleep(t, 2);
        if (rc)
            return rc;
    }
    return 0;
}

static int quick(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static ax_config small_config(unsigned cap)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = cap;
    c.capacity[AX_PRIO_HIGH] = 16;
    c.capacity[AX_PRIO_NORMAL] = 16;
    c.capacity[AX_PRIO_LOW] = 16;
    c.shed_ratio = 1.0;
    return c;
}

/* ---- 1. saturated ------------------------------------------------------------------- */

static void test_saturated(void)
{
    ax_config c = small_config(8);
    ax_sched *s = test_sched_cfg(&c);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    atomic_store(&release_gate, 0);
    /* Every slot busy, then every bucket full (or, for NORMAL and LOW, shed:
     * with these bounds the shed line comes first). */
    unsigned admitted = 0;
    for (int i = 0; i < 8; i++, admitted++) {
        ax_spec sp = {.fn = blocker, .priority = AX_PRIO_HIGH, .timeout_ms = 120000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    /* running counts a slot from dispatch, started from entering the function */
    CHECK(WAIT_UNTIL(test_stats(s).started == 8, LIVENESS_MS));
    static const ax_priority order[] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        for (;;) {
            ax_spec sp = {.fn = blocker, .priority = order[p], .timeout_ms = 120000};
            int rc = ax_submit(s, &sp, NULL);
            if (rc == AX_EFULL || rc == AX_ESHED)
                break;
            CHECK_EQ(rc, 0);
            admitted++;
        }
    }
    ax_spec more = {.fn = blocker, .priority = AX_PRIO_HIGH, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(s, &more, NULL), AX_EFULL);
    ax_stats before = test_stats(s);
    CHECK_EQ(before.running, 8);
    CHECK_EQ(before.queued[AX_PRIO_HIGH] + before.queued[AX_PRIO_NORMAL] +
                 before.queued[AX_PRIO_LOW] + before.running,
             admitted);
    CHECK_EQ(before.queued[AX_PRIO_HIGH], 16);

    struct answer *a = malloc(sizeof *a);
    double ms = 0, worst = 0;
    for (int i = 0; i < 5; i++) {
        request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 35, a, &ms);
        if (ms > worst)
            worst = ms;
        CHECK_EQ(a->status, 200);
        CHECK_EQ(a->content_length, (long)a->body_len);
        const char *body = a->text + a->head_len;
        CHECK_EQ(sample(body, "ax_tasks_running"), 8);
        CHECK_EQ(sample(body, "ax_concurrency_limit"), 8);
        CHECK_EQ(sample(body, "ax_queue_length{priority=\"high\"}"), 16);
        CHECK_EQ(sample(body, "ax_tasks_submitted_total"), admitted);
        CHECK_EQ(sample(body, "ax_tasks_started_total"), 8);
        CHECK_EQ(sample(body, "ax_tasks_succeeded_total"), 0);
    }
    printf("saturated: 8/8 slots busy, %u admitted, HIGH bucket full: 5 scrapes answered 200, "
           "slowest %.1f ms\n",
           admitted, worst);
    /* Scraping took no slot, admitted nothing, started nothing. */
    ax_stats after = test_stats(s);
    CHECK_EQ(after.running, 8);
    CHECK_EQ(after.submitted, before.submitted);
    CHECK_EQ(after.started, before.started);
    CHECK_EQ(after.rejected, before.rejected);
    atomic_store(&release_gate, 1);
    CHECK(WAIT_UNTIL(test_stats(s).succeeded == admitted, LIVENESS_MS * 3));
    free(a);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

/* ---- 2. idle connections ------------------------------------------------------------- */

/* Completions per second of n quick tasks submitted as room allows. */
static double run_quick(ax_sched *s, unsigned n)
{
    uint64_t base = test_stats(s).succeeded;
    uint64_t t0 = ax_now_ns();
    for (unsigned i = 0; i < n;) {
        ax_spec sp = {.fn = quick, .priority = AX_PRIO_NORMAL, .timeout_ms = 10000};
        int rc = ax_submit(s, &sp, NULL);
        if (rc == AX_EFULL || rc == AX_ESHED) {
            usleep(100);
            continue;
        }
        CHECK_EQ(rc, 0);
        i++;
    }
    CHECK(WAIT_UNTIL(test_stats(s).succeeded == base + n, LIVENESS_MS * 3));
    CHECK_EQ(test_stats(s).succeeded, base + n);
    return n / ((double)(ax_now_ns() - t0) / 1e9);
}

static void test_idle(void)
{
#ifdef TEST_TSAN
    enum { CAP = 100, EXTRA = 10, N = 2000 };
#else
    enum { CAP = 100, EXTRA = 10, N = 10000 };
#endif
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 512) {
        printf("idle: skipped (RLIMIT_NOFILE %llu)\n", (unsigned long long)rl.rlim_cur);
        return;
    }
    ax_config c = small_config(8);
    c.capacity[AX_PRIO_NORMAL] = 1000;
    c.metrics_max_connections = CAP;
    c.metrics_read_timeout_ms = 120000; /* nothing times out in this part */
    ax_sched *s = test_sched_cfg(&c);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    run_quick(s, N); /* warm up: stacks, job table */
    double base_rate = run_quick(s, N);

    int fds[CAP + EXTRA];
    for (int i = 0; i < CAP; i++)
        fds[i] = dial(port);
    /* Every slot is still the host's: 8 blockers all start. */
    atomic_store(&release_gate, 0);
    for (int i = 0; i < 8; i++) {
        ax_spec sp = {.fn = blocker, .priority = AX_PRIO_HIGH, .timeout_ms = 120000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(test_stats(s).started == 2 * N + 8, LIVENESS_MS));
    CHECK_EQ(test_stats(s).running, 8);
    atomic_store(&release_gate, 1);
    CHECK(WAIT_UNTIL(test_stats(s).succeeded == 2 * N + 8, LIVENESS_MS));
    double idle_rate = run_quick(s, N);
    printf("idle: %d idle connections held: the host's %d tasks all completed, %.0f/s "
           "(%.0f/s without them)\n",
           CAP, N, idle_rate, base_rate);

    /* Connections beyond the cap evict the oldest idle ones, in order. */
    for (int i = CAP; i < CAP + EXTRA; i++)
        fds[i] = dial(port);
    for (int i = 0; i < EXTRA; i++)
        CHECK(closed_within(fds[i], LIVENESS_MS));
    for (int i = EXTRA; i < CAP + EXTRA; i++)
        CHECK(!closed_within(fds[i], 0));
    /* A scrape with the cap full of idle connections still answers (it
     * evicts the next oldest). */
    struct answer *a = malloc(sizeof *a);
    double ms;
    request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 34, a, &ms);
    CHECK_EQ(a->status, 200);
    CHECK_EQ(sample(a->text + a->head_len, "ax_tasks_succeeded_total"), 3 * N + 8);
    CHECK(closed_within(fds[EXTRA], LIVENESS_MS));
    for (int i = EXTRA + 1; i < CAP + EXTRA; i++)
        CHECK(!closed_within(fds[i], 0));
    printf("idle: %d connections over a cap of %d closed the %d oldest idle ones; a scrape "
           "answered in %.1f ms\n",
           CAP + EXTRA + 1, CAP, EXTRA + 1, ms);
    CHECK_EQ(test_stats(s).submitted, 3 * N + 8);
    /* Shutdown closes the rest. */
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    for (int i = EXTRA + 1; i < CAP + EXTRA; i++)
        CHECK(closed_within(fds[i], LIVENESS_MS));
    for (int i = 0; i < CAP + EXTRA; i++)
        close(fds[i]);
    free(a);
    ax_free(s);
}

/* Idle and half-sent connections are closed after the read timeout, never
 * before: the server's deadline is accept + timeout, and accept follows our
 * connect. */
static void test_read_timeout(void)
{
    enum { TIMEOUT = 300 };
    ax_config c = small_config(8);
    c.metrics_read_timeout_ms = TIMEOUT;
    ax_sched *s = test_sched_cfg(&c);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    uint64_t t0 = ax_now_ns();
    int idle = dial(port);
    int half = dial(port);
    send_all(half, "GET /metr", 9);
    char buf[64];
    CHECK_EQ(read_to_eof(idle, buf, sizeof buf, LIVENESS_MS), 0);
    CHECK_EQ(read_to_eof(half, buf, sizeof buf, LIVENESS_MS), 0);
    double ms = (double)(ax_now_ns() - t0) / 1e6;
    CHECK(ms >= TIMEOUT);
    printf("read timeout: an idle and a half-sent connection closed with no answer after "
           "%.0f ms (timeout %d ms)\n",
           ms, TIMEOUT);
    close(idle);
    close(half);
    ax_free(s);
}

/* ---- 3. counters with and without scraping ---------------------------------------------- */

static atomic_ulong events[AX_EV_COUNT];

static void count_event(const ax_event *ev, void *arg)
{
    (void)arg;
    atomic_fetch_add(&events[ev->kind], 1);
}

static int fail_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 7;
}

static int slow_fn(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 5000); /* its 200 ms timeout ends it */
}

struct scraper {
    uint16_t port;
    atomic_int stop;
    atomic_int done;
};

static void *scrape_loop(void *arg)
{
    struct scraper *sc = arg;
    struct answer *a = malloc(sizeof *a);
    while (!atomic_load(&sc->stop)) {
        request(sc->port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 34, a, NULL);
        CHECK_EQ(a->status, 200);
        atomic_fetch_add(&sc->done, 1);
    }
    free(a);
    return NULL;
}

struct outcome {
    ax_stats st;
    ax_metrics m;
    unsigned long ev[AX_EV_COUNT];
    int scrapes;
};

static const ax_retry_policy fast_retry = {AX_BACKOFF_EXPONENTIAL, 1, 1, 0};

static struct outcome workload(bool scrape)
{
    enum { N = 60 };
    ax_config c = small_config(4);
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        c.capacity[p] = 1000;
    ax_sched *s = test_sched_cfg(&c);
    for (int k = 0; k < AX_EV_COUNT; k++)
        atomic_store(&events[k], 0);
    CHECK_EQ(ax_events_callback(s, count_event, NULL), 0);
    CHECK_EQ(ax_events_lossless(s, true), 0);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    struct scraper sc = {.port = port};
    pthread_t th;
    if (scrape)
        CHECK_EQ(pthread_create(&th, NULL, scrape_loop, &sc), 0);

    /* A blocker holds one slot until the scraper has scraped the scheduler
     * in the middle of its work; the rest succeed, fail, fail once then
     * retry, or time out. */
    atomic_store(&release_gate, 0);
    ax_spec g = {.fn = blocker, .priority = AX_PRIO_HIGH, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &g, NULL), 0);
    for (int i = 0; i < N; i++) {
        ax_spec sp = {.timeout_ms = 10000, .priority = (ax_priority)(i % AX_PRIO_COUNT)};
        switch (i % 4) {
        case 0: sp.fn = quick; break;
        case 1: sp.fn = fail_fn; break;
        case 2: sp.fn = fail_fn, sp.max_retry = 1, sp.retry = &fast_retry; break;
        /* 200 ms: an attempt whose worker was held between arming the
         * deadline and entering the function ends unbegun (watchdog.c),
         * one STARTED short; a first TSan fiber can take that long. */
        case 3: sp.fn = slow_fn, sp.timeout_ms = 200; break;
        }
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    if (scrape) {
        int from = atomic_load(&sc.done);
        CHECK(WAIT_UNTIL(atomic_load(&sc.done) >= from + 5, LIVENESS_MS));
    }
    atomic_store(&release_gate, 1);
    struct outcome o = {0};
    CHECK(WAIT_UNTIL(test_stats(s).succeeded + test_stats(s).failed +
                             test_stats(s).timed_out ==
                         N + 1,
                     LIVENESS_MS * 3));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, LIVENESS_MS));
    /* A timed-out attempt's coroutine returns a little after its slot is
     * freed (an orphan meanwhile): the gauge compared below must settle. */
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, LIVENESS_MS));
    if (scrape) {
        int from = atomic_load(&sc.done);
        CHECK(WAIT_UNTIL(atomic_load(&sc.done) >= from + 2, LIVENESS_MS));
        atomic_store(&sc.stop, 1);
        pthread_join(th, NULL);
        o.scrapes = atomic_load(&sc.done);
    }
    /* Terminal events come after the counts (finish.c): one per task. */
    CHECK(WAIT_UNTIL((ax_events_flush(s), atomic_load(&events[AX_EV_SUCCEEDED]) +
                                               atomic_load(&events[AX_EV_FAILED]) +
                                               atomic_load(&events[AX_EV_TIMED_OUT]) >=
                                           N + 1),
                     LIVENESS_MS));
    CHECK_EQ(ax_events_flush(s), 0);
    o.st = test_stats(s);
    CHECK_EQ(ax_metrics_get(s, &o.m), 0);
    for (int k = 0; k < AX_EV_COUNT; k++)
        o.ev[k] = atomic_load(&events[k]);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return o;
}

static void test_counters(void)
{
    struct outcome a = workload(false), b = workload(true);
    CHECK(b.scrapes >= 7);
#define SAME(f) CHECK_EQ(a.st.f, b.st.f)
    SAME(submitted);
    SAME(rejected);
    SAME(shed);
    SAME(started);
    SAME(succeeded);
    SAME(failed);
    SAME(timed_out);
    SAME(cancelled);
    SAME(retried);
    SAME(panicked);
    SAME(orphans);
    SAME(running);
    SAME(limit);
#undef SAME
    /* The workload's own numbers: 1 + 15 succeed, 15 + 15 fail (15 after a
     * retry), 15 time out. */
    CHECK_EQ(b.st.submitted, 61);
    CHECK_EQ(b.st.succeeded, 16);
    CHECK_EQ(b.st.failed, 30);
    CHECK_EQ(b.st.timed_out, 15);
    CHECK_EQ(b.st.retried, 15);
    CHECK_EQ(b.st.started, 76);
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        CHECK_EQ(a.m.wait[p].count, b.m.wait[p].count);
        CHECK_EQ(a.m.run[p].count, b.m.run[p].count);
    }
    unsigned long total = 0;
    for (int k = 0; k < AX_EV_COUNT; k++) {
        CHECK_EQ(a.ev[k], b.ev[k]);
        total += b.ev[k];
    }
    CHECK_EQ(b.ev[AX_EV_SUBMITTED], 61);
    CHECK_EQ(b.ev[AX_EV_STARTED], 76);
    printf("counters: with %d scrapes during the workload, every counter, %lu events and the "
           "histogram counts are identical to the run without\n",
           b.scrapes, total);
}

/* ---- 4. protocol --------------------------------------------------------------------------- */

static void test_protocol(void)
{
    ax_config c = small_config(8);
    ax_sched *s = test_sched_cfg(&c);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", NULL), AX_EBUSY);
    struct answer *a = malloc(sizeof *a), *h = malloc(sizeof *h);

    get(port, "GET /metrics HTTP/1.0\r\n\r\n", a);
    CHECK_EQ(a->status, 200);
    CHECK(a->content_length > 1000);
    CHECK_EQ(a->content_length, (long)a->body_len);
    CHECK(strstr(a->text, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    const char *body = a->text + a->head_len;
    CHECK(strstr(body, "# TYPE ax_events_dropped_total counter\nax_events_dropped_total 0\n"));
    CHECK(strstr(body, "# TYPE ax_tasks_orphaned gauge\nax_tasks_orphaned 0\n"));
    CHECK(strstr(body, "# TYPE ax_callback_dropped_total counter\n"));
    CHECK_EQ(body[a->body_len - 1], '\n');

    /* HEAD: the same headers, no body. */
    get(port, "HEAD /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n", h);
    CHECK_EQ(h->status, 200);
    CHECK_EQ(h->content_length, a->content_length); /* nothing ran in between */
    CHECK_EQ(h->body_len, 0);
    get(port, "HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n", h);
    CHECK_EQ(h->status, 404);
    CHECK(h->content_length > 0);
    CHECK_EQ(h->body_len, 0);

    /* A query string, bare LF line ends, leading empty lines. */
    get(port, "GET /metrics?name[]=ax_tasks_running HTTP/1.1\r\nHost: x\r\n\r\n", a);
    CHECK_EQ(a->status, 200);
    get(port, "\r\nGET /metrics HTTP/1.1\nHost: x\n\n", a);
    CHECK_EQ(a->status, 200);
    /* The absolute-form a client sends through a proxy (RFC 9112 §3.2.2). */
    get(port, "GET http://localhost/metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", a);
    CHECK_EQ(a->status, 200);
    CHECK(strstr(a->text, "ax_tasks_running") != NULL);

    struct {
        const char *req;
        int status;
    } bad[] = {
        {"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404},
        {"GET /metrics/x HTTP/1.1\r\nHost: x\r\n\r\n", 404},
        {"GET /metricsx HTTP/1.1\r\nHost: x\r\n\r\n", 404},
        {"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405},
        {"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405},
        {"GET /metrics HTTP/2.0\r\n\r\n", 505},
        {"GET /metrics HTTP/1.1\r\nBad Header: x\r\n\r\n", 400},
        {"GET /metrics HTTP/1.1\r\n folded\r\n\r\n", 400},
        {"GET metrics HTTP/1.1\r\n\r\n", 400},
        {"GET gopher://h/metrics HTTP/1.1\r\n\r\n", 400},
        {"GET  /metrics HTTP/1.1\r\n\r\n", 400},
        {"GET /metrics\r\n\r\n", 400},
        {"GARBAGE\r\n\r\n", 400},
        {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400}, /* a TLS hello: at once */
        {"GET /metrics HTTP/1.1\r\nX: a\rb\r\n\r\n", 400},
        {"GET /metrics HTTP/1.1\r\nX: \x01\r\n\r\n", 400},
        /* Host (RFC 9112 §3.2): missing in HTTP/1.1, twice, invalid; the
         * authority of an absolute-form that is not one. */
        {"GET /metrics HTTP/1.1\r\n\r\n", 400},
        {"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400},
        {"GET /metrics HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
        {"GET http://h:99999999999/metrics HTTP/1.1\r\nHost: h\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        get(port, bad[i].req, a);
        if (a->status != bad[i].status)
            fprintf(stderr, "request %zu: %d, want %d\n", i, a->status, bad[i].status);
        CHECK_EQ(a->status, bad[i].status);
        CHECK_EQ(a->content_length, (long)a->body_len);
        if (bad[i].status == 405)
            CHECK(strstr(a->text, "\r\nAllow: GET, HEAD\r\n") != NULL);
    }

    /* A head longer than 8 KiB: 431. */
    size_t big = 9000;
    char *huge = malloc(big + 64);
    int k = snprintf(huge, 64, "GET /metrics HTTP/1.1\r\nX-Pad: ");
    memset(huge + k, 'a', big);
    memcpy(huge + k + big, "\r\n\r\n", 5);
    request(port, huge, strlen(huge), a, NULL);
    CHECK_EQ(a->status, 431);
    free(huge);

    /* In pieces, with pauses; with a body the server drains and discards. */
    int fd = dial(port);
    const char *pieces[] = {"GE", "T /metr", "ics HTTP/1.1\r\nHo", "st: x\r\n", "\r\n"};
    for (size_t i = 0; i < 5; i++) {
        send_all(fd, pieces[i], strlen(pieces[i]));
        usleep(20000);
    }
    long n = read_to_eof(fd, a->text, sizeof a->text, LIVENESS_MS);
    CHECK(n > 0 && strncmp(a->text, "HTTP/1.1 200 OK\r\n", 17) == 0);
    close(fd);
    get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", a);
    CHECK_EQ(a->status, 200);
    CHECK_EQ(a->content_length, (long)a->body_len);

    /* Shutdown stops it: the port is closed, and it cannot be restarted. */
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(probe, (struct sockaddr *)&sa, sizeof sa) != 0);
    CHECK_EQ(errno, ECONNREFUSED);
    close(probe);
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", NULL), AX_ESHUTDOWN);
    /* Still nothing counted: every request above was outside the host. */
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, 0);
    CHECK_EQ(st.started, 0);
    CHECK_EQ(st.rejected, 0);
    free(a);
    free(h);
    ax_free(s);
    printf("protocol: GET, HEAD (no body), 400/404/405/431/505, pieces, a body, stop: ok\n");

    /* ax_free alone stops it too (no ax_shutdown first). */
    s = test_sched_cfg(&c);
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    fd = dial(port); /* left open: ax_free closes it */
    ax_free(s);
    CHECK(closed_within(fd, LIVENESS_MS));
    close(fd);

    /* Config bounds. */
    ax_config bc = small_config(8);
    bc.metrics_max_connections = 1025;
    ax_sched *bs = NULL;
    CHECK_EQ(ax_new(&bc, &bs), AX_EINVAL);
    bc = small_config(8);
    bc.metrics_read_timeout_ms = 3600001;
    CHECK_EQ(ax_new(&bc, &bs), AX_EINVAL);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_protocol();
    test_saturated();
    test_read_timeout();
    test_idle();
    test_counters();
    printf("test_metrics_serve: ok\n");
    return 0;
}
