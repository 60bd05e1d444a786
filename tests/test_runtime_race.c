/* Run-time control while tasks run: 2 workers run a steady stream of short
 * tasks (every priority, retries that fail once, cancellations, ax_sleep /
 * ax_yield, fan-out with ax_spawn / ax_join, task classes) submitted from 2
 * threads, while a third thread calls, in a loop, every entry point of ax.h
 * that may be called while the scheduler runs: the ax_set_* controls,
 * ax_pause / ax_resume, the class calls (registering new classes too), the
 * event sinks, filter and lossless switch, the stats and metrics readers,
 * the /metrics endpoint with an appender coming and going, the dumps.
 *
 * Under TSan a setting written by the control thread and read unlocked by a
 * worker (or a stat read without the writer's lock) is a report; in every
 * build each admitted task must end exactly once, with the outcome its kind
 * allows, and the counters must add up exactly once the scheduler is idle. */
#include "util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>

#ifdef TEST_TSAN
#define PER_SUBMITTER 3000
#else
#define PER_SUBMITTER 4000
#endif
#define SUBMITTERS 2
#define MAX_CHILDREN (SUBMITTERS * PER_SUBMITTER)
#define IN_FLIGHT 256 /* per submitter: a steady stream, not one burst */
#define TIMEOUT_MS 30000 /* generous: liveness only */

enum kind {
    K_PLAIN, K_FAIL_ONCE, K_CANCEL, K_SLEEPY, K_YIELD, K_SPAWN, K_LATE_CLASS, K_TIMEOUT, K_CHILD
};

struct rec {
    enum kind kind;
    unsigned cls;
    uint64_t id;
    atomic_int done;     /* on_done calls */
    atomic_int state;
    atomic_int code;
    atomic_uint attempts; /* times the function was entered */
    atomic_bool cancel_ok; /* ax_cancel returned 0 for it */
    atomic_uint timeouts; /* on_timeout calls */
    atomic_uint res_attempts; /* on_done's ax_result.attempts */
};

static ax_sched *g_s;
static unsigned g_cls_a, g_cls_b; /* A: no breaker, takes failures; B: breaker on */
static struct rec g_recs[SUBMITTERS][PER_SUBMITTER];
static struct rec g_children[MAX_CHILDREN];
static atomic_uint g_nchildren;      /* child records handed out */
static atomic_ulong g_admitted;      /* tasks admitted (ax_submit + ax_spawn) */
static atomic_ulong g_refused;       /* submissions refused (counted in rejected/shed) */
static atomic_ulong g_done;          /* on_done calls */
static atomic_ulong g_by_state[8];   /* on_done calls per terminal state */
static atomic_ulong g_cls_admitted[AX_CLASS_MAX + 1];
static atomic_ulong g_events;        /* events seen by the callback sink */
static atomic_ulong g_appender_calls;
static atomic_bool g_stop;
static atomic_ulong g_ctl_loops;
static atomic_ulong g_on_timeout;    /* on_timeout calls */
static const ax_retry_policy g_fast_retry = {AX_BACKOFF_EXPONENTIAL, 1, 5, 1};

static void on_done(const ax_result *res, void *arg)
{
    struct rec *r = arg;
    atomic_store(&r->state, (int)res->state);
    atomic_store(&r->code, res->code);
    atomic_store(&r->res_attempts, res->attempts);
    CHECK(res->state == AX_STATE_SUCCEEDED || res->state == AX_STATE_FAILED ||
          res->state == AX_STATE_TIMED_OUT || res->state == AX_STATE_CANCELLED);
    atomic_fetch_add(&g_by_state[res->state], 1);
    CHECK_EQ(atomic_fetch_add(&r->done, 1), 0); /* exactly once */
    atomic_fetch_add(&g_done, 1);
}

static void on_timeout(const ax_result *res, void *arg)
{
    struct rec *r = arg;
    CHECK_EQ(res->state, AX_STATE_TIMED_OUT);
    atomic_fetch_add(&r->timeouts, 1);
    atomic_fetch_add(&g_on_timeout, 1);
}

static int task_fn(ax_task *t, void *arg)
{
    struct rec *r = arg;
    atomic_fetch_add(&r->attempts, 1);
    CHECK(ax_task_current() == t);
    CHECK(ax_task_sched(t) == g_s);
    CHECK(ax_task_id(t) != 0);
    CHECK(ax_task_trace_id(t)[0] != 0);
    CHECK((unsigned)ax_task_priority(t) < AX_PRIO_COUNT);
    CHECK(ax_task_deadline_ns(t) > 0);
    int rc;
    switch (r->kind) {
    case K_PLAIN:
    case K_LATE_CLASS:
        return 0;
    case K_FAIL_ONCE:
        if (ax_task_attempt(t) == 0) {
            if (ax_task_id(t) % 2) /* a long message: the events' locked long ring */
                ax_task_set_error(t, "the first attempt fails: the upstream answered 503 "
                                     "Service Unavailable after %u ms, with a body that "
                                     "says to come back later", 1 + (unsigned)(ax_task_id(t) % 7));
            else
                ax_task_set_error(t, "the first attempt fails");
            return 1;
        }
        return 0;
    case K_CANCEL: /* long enough for the submitter's ax_cancel to find it */
        for (int i = 0; i < 20; i++)
            if ((rc = ax_sleep(t, 1)))
                return rc;
        return 0;
    case K_SLEEPY:
        return ax_sleep(t, 1 + ax_task_id(t) % 3);
    case K_YIELD:
        for (int i = 0; i < 5; i++)
            if ((rc = ax_yield(t)))
                return rc;
        return 0;
    case K_SPAWN: {
        unsigned ci = atomic_fetch_add(&g_nchildren, 1);
        CHECK(ci < MAX_CHILDREN);
        struct rec *c = &g_children[ci];
        c->kind = K_CHILD;
        ax_spec sp = {.fn = task_fn, .arg = c, .priority = AX_PRIO_HIGH,
                      .timeout_ms = TIMEOUT_MS, .on_done = on_done, .cb_arg = c};
        uint64_t cid;
        /* Counted before: the child may end before ax_spawn returns, and
         * g_done must not catch up with g_admitted while this one runs. */
        atomic_fetch_add(&g_admitted, 1);
        if (ax_spawn(t, &sp, &cid) != AX_OK) {
            atomic_fetch_sub(&g_admitted, 1);
            atomic_fetch_add(&g_refused, 1);
            return 0;
        }
        /* A short join: with the cap at its lowest the child may need this
         * very slot. Not joined in time, it is released and runs later. */
        ax_result res;
        rc = ax_join(t, cid, 20, &res);
        CHECK(rc == AX_OK || rc == AX_ETIMEDOUT);
        if (rc == AX_OK)
            CHECK_EQ(res.state, AX_STATE_SUCCEEDED);
        return 0;
    }
    case K_TIMEOUT: /* ends at its 5 ms deadline */
        return ax_sleep(t, 1000);
    case K_CHILD:
        return ax_yield(t);
    }
    return 0;
}

static enum kind kind_of(unsigned i)
{
    static const enum kind mix[] = {K_PLAIN, K_FAIL_ONCE, K_SLEEPY, K_CANCEL, K_YIELD,
                                    K_PLAIN, K_SPAWN,     K_SLEEPY, K_LATE_CLASS, K_FAIL_ONCE,
                                    K_YIELD, K_CANCEL,    K_PLAIN,  K_TIMEOUT,    K_PLAIN};
    return mix[i % (sizeof mix / sizeof mix[0])];
}

static void *submitter(void *arg)
{
    unsigned me = (unsigned)(uintptr_t)arg;
    uint64_t rnd = 0x9e3779b97f4a7c15ull * (me + 1);
    unsigned pending_cancel = UINT32_MAX; /* a K_CANCEL task to cancel a bit later */
    unsigned long mine_admitted = 0;
    for (unsigned i = 0; i < PER_SUBMITTER; i++) {
        struct rec *r = &g_recs[me][i];
        r->kind = kind_of(i + me);
        ax_spec sp = {.fn = task_fn, .arg = r, .priority = (ax_priority)(i % AX_PRIO_COUNT),
                      .timeout_ms = TIMEOUT_MS, .on_done = on_done, .cb_arg = r,
                      .retry = &g_fast_retry};
        char trace[AX_TRACE_ID_MAX];
        if (i % 2) {
            snprintf(trace, sizeof trace, "rt-%u-%u", me, i);
            sp.trace_id = trace;
        }
        if (i % 5 == 0)
            sp.ref = "msg-42";
        switch (r->kind) {
        case K_FAIL_ONCE:
            sp.max_retry = 2;
            if (i % 3 == 0) { /* the class's retry budget and throttle decide too */
                r->cls = g_cls_a;
                sp.overrides = AX_SPEC_PRIORITY | AX_SPEC_MAX_RETRY;
                sp.timeout_ms = 0; /* the class's, ax_class_set_timeout moves it */
                sp.retry = NULL;
            }
            break;
        case K_CANCEL:
            if (i % 2)
                r->cls = g_cls_a, sp.overrides = AX_SPEC_PRIORITY;
            break;
        case K_PLAIN:
        case K_YIELD:
            if (i % 4 == 0)
                r->cls = g_cls_b, sp.timeout_ms = 0, sp.retry = NULL;
            break;
        case K_TIMEOUT: /* on_timeout on the callback pool; a retry if they are on */
            sp.timeout_ms = 5;
            sp.max_retry = i % 2;
            sp.on_timeout = on_timeout;
            break;
        case K_LATE_CLASS: /* the newest class: the table grows meanwhile */
            r->cls = ax_class_count(g_s);
            sp.overrides = AX_SPEC_PRIORITY;
            break;
        default:
            break;
        }
        sp.class_id = r->cls;
        /* A steady stream: at most IN_FLIGHT of ours not yet ended. */
        while (atomic_load(&g_admitted) - atomic_load(&g_done) >=
               (unsigned long)IN_FLIGHT * SUBMITTERS)
            usleep(200);
        int rc;
        uint64_t t0 = test_now_ms();
        while ((rc = ax_submit(g_s, &sp, &r->id)) != AX_OK) {
            CHECK(rc == AX_ERATE || rc == AX_ESHED || rc == AX_EFULL);
            atomic_fetch_add(&g_refused, 1);
            CHECK(test_now_ms() - t0 < 60000);
            usleep(100 + xorshift(&rnd) % 400);
        }
        mine_admitted++;
        atomic_fetch_add(&g_admitted, 1);
        if (r->cls)
            atomic_fetch_add(&g_cls_admitted[r->cls], 1);
        if (pending_cancel != UINT32_MAX && (r->kind == K_CANCEL || i - pending_cancel >= 3)) {
            struct rec *c = &g_recs[me][pending_cancel];
            rc = ax_cancel(g_s, c->id);
            CHECK(rc == AX_OK || rc == AX_ENOTFOUND);
            if (rc == AX_OK)
                atomic_store(&c->cancel_ok, true);
            pending_cancel = UINT32_MAX;
        }
        if (r->kind == K_CANCEL) {
            if (xorshift(&rnd) % 3 == 0) { /* at once: most likely still queued */
                rc = ax_cancel(g_s, r->id);
                CHECK(rc == AX_OK || rc == AX_ENOTFOUND);
                if (rc == AX_OK)
                    atomic_store(&r->cancel_ok, true);
            } else {
                pending_cancel = i;
            }
        }
    }
    if (pending_cancel != UINT32_MAX) {
        struct rec *c = &g_recs[me][pending_cancel];
        int rc = ax_cancel(g_s, c->id);
        CHECK(rc == AX_OK || rc == AX_ENOTFOUND);
        if (rc == AX_OK)
            atomic_store(&c->cancel_ok, true);
    }
    CHECK_EQ(mine_admitted, PER_SUBMITTER);
    return NULL;
}

/* ---- the control thread -------------------------------------------------------- */

/* The callback sink's argument: a fresh one per ax_events_callback, freed
 * as soon as the sink is switched (as a host would free its logger). */
struct sink {
    unsigned long events;
};

static void ev_sink(const ax_event *ev, void *arg)
{
    struct sink *k = arg;
    CHECK((unsigned)ev->kind < AX_EV_COUNT);
    CHECK(ax_event_name(ev->kind) != NULL);
    k->events++; /* the event thread's alone while it is the sink */
    atomic_fetch_add(&g_events, 1);
}

static long appender(char *buf, size_t len, void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_appender_calls, 1);
    return snprintf(buf, len, "# TYPE rt_test_up gauge\nrt_test_up 1\n");
}

/* One GET /metrics over loopback; returns the body's length. */
static size_t scrape(uint16_t port, char *buf, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    CHECK_EQ(write(fd, req, sizeof req - 1), (long)(sizeof req - 1));
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    close(fd);
    CHECK(strncmp(buf, "HTTP/1.", 7) == 0);
    CHECK(strstr(buf, " 200 ") != NULL);
    CHECK(strstr(buf, "ax_") != NULL);
    return n;
}

static void *controller(void *arg)
{
    uint16_t port = *(uint16_t *)arg;
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(devnull != NULL);
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    unsigned extra_classes = 0;
    bool appended = false;
    struct sink *sink = NULL;
    FILE *json = NULL;
    for (unsigned k = 0; !atomic_load(&g_stop); k++) {
        /* the scheduler's knobs */
        CHECK_EQ(ax_set_max_concurrency(g_s, 4 + k % 29), AX_OK);
        CHECK_EQ(ax_set_quotas(g_s, k % 4, k % 3, 1 + k % 2), AX_OK);
        CHECK_EQ(ax_set_retry_enabled(g_s, (ax_priority)(k % AX_PRIO_COUNT), (k / 3) % 4 != 0),
                 AX_OK);
        switch (k % 5) {
        case 0: CHECK_EQ(ax_set_rate_limit(g_s, 1e6, 0), AX_OK); break;
        case 1: CHECK_EQ(ax_set_rate_limit(g_s, 0, 0), AX_OK); break; /* off */
        case 2: CHECK_EQ(ax_set_rate_limit(g_s, 200, 5), AX_OK); break; /* refuses some */
        case 3: CHECK_EQ(ax_set_rate_limit(g_s, 0, 0), AX_OK); break;
        default: break;
        }
        if (k % 4 == 0) {
            CHECK_EQ(ax_pause(g_s), AX_OK);
            usleep(200);
            CHECK_EQ(ax_resume(g_s), AX_OK);
        }

        /* classes */
        if (k % 8 == 0 && extra_classes < 16) {
            ax_class_config cc;
            ax_class_config_default(&cc);
            char name[AX_CLASS_NAME_MAX];
            snprintf(name, sizeof name, "late-%u", extra_classes);
            cc.name = name;
            cc.priority = (ax_priority)(extra_classes % AX_PRIO_COUNT);
            cc.timeout_ms = TIMEOUT_MS;
            cc.adaptive = extra_classes % 2 == 0;
            cc.retry = g_fast_retry;
            unsigned id;
            CHECK_EQ(ax_class_register(g_s, &cc, &id), AX_OK);
            CHECK_EQ(ax_class_register(g_s, &cc, NULL), AX_EBUSY);
            unsigned found;
            CHECK_EQ(ax_class_find(g_s, name, &found), AX_OK);
            CHECK_EQ(found, id);
            extra_classes++;
        }
        unsigned ncls = ax_class_count(g_s);
        CHECK_EQ(ncls, 2 + extra_classes);
        CHECK_EQ(ax_class_find(g_s, "no-such-class", NULL), AX_ENOTFOUND);
        for (unsigned id = 1; id <= ncls; id++) {
            CHECK_EQ(ax_class_set_timeout(g_s, id, TIMEOUT_MS - (k % 100)), AX_OK);
            ax_class_stats cs;
            CHECK_EQ(ax_class_stats_get(g_s, id, &cs), AX_OK);
            CHECK(cs.limit >= 1);
            CHECK(ax_breaker_state_name(cs.breaker) != NULL);
        }
        CHECK_EQ(ax_class_set_timeout(g_s, ncls + 1, 100), AX_ENOTFOUND);

        /* events */
        unsigned masks[] = {AX_EVMASK_ALL, AX_EVMASK_FAILURES, AX_EVMASK_ALL,
                            AX_EVMASK(AX_EV_STARTED) | AX_EVMASK(AX_EV_SUCCEEDED), AX_EVMASK_ALL,
                            0};
        CHECK_EQ(ax_events_filter(g_s, masks[k % 6], k % 5 == 4 ? 3 : 1), AX_OK);
        /* A sink switched off or replaced is the host's again once the call
         * returns: it frees the callback's argument, closes the file (a log
         * rotated). A few times a loop: the event thread drains meanwhile. */
        for (unsigned r = 0; r < 2; r++) {
            struct sink *nsink = (k + r) % 3 ? calloc(1, sizeof *nsink) : NULL;
            CHECK_EQ(ax_events_callback(g_s, nsink ? ev_sink : NULL, nsink), AX_OK);
            free(sink);
            sink = nsink;
            FILE *njson = (k + r) % 2 ? fopen("/dev/null", "w") : NULL;
            CHECK(!((k + r) % 2) || njson);
            CHECK_EQ(ax_events_json(g_s, njson), AX_OK);
            if (json)
                fclose(json);
            json = njson;
        }
        CHECK_EQ(ax_events_lossless(g_s, k % 6 < 3), AX_OK);
        if (k % 5 == 0)
            CHECK_EQ(ax_events_flush(g_s), AX_OK);
        (void)ax_events_dropped(g_s);

        /* stats and metrics */
        ax_stats st = test_stats(g_s);
        CHECK(st.limit >= 1);
        ax_metrics m;
        CHECK_EQ(ax_metrics_get(g_s, &m), AX_OK);
        long need = ax_metrics_prometheus(g_s, buf, cap);
        CHECK(need > 0 && (size_t)need < cap);
        CHECK(strstr(buf, "ax_") != NULL);
        if (k % 3 == 0) {
            if (appended)
                CHECK_EQ(ax_metrics_unappend(g_s, appender, buf), AX_OK);
            else
                CHECK_EQ(ax_metrics_append(g_s, appender, buf), AX_OK);
            appended = !appended;
        }
        if (k % 2 == 0)
            scrape(port, buf, cap);

        /* dumps */
        if (k % 4 == 1)
            CHECK_EQ(ax_dump(g_s, devnull, k % 8 == 1 ? 0 : 5), AX_OK);
        if (k % 10 == 2) {
            CHECK_EQ(ax_dump_on_signal(g_s, SIGUSR1, devnull), AX_OK);
            raise(SIGUSR1);
        } else if (k % 10 == 7) {
            CHECK_EQ(ax_dump_on_signal(g_s, 0, NULL), AX_OK);
        }
        (void)ax_strerror(AX_EOPEN);
        atomic_fetch_add(&g_ctl_loops, 1);
        usleep(300);
    }
    /* Leave the scheduler running freely: no pause, no rate limit, retries on. */
    CHECK_EQ(ax_set_rate_limit(g_s, 0, 0), AX_OK);
    CHECK_EQ(ax_set_max_concurrency(g_s, 16), AX_OK);
    if (appended)
        CHECK_EQ(ax_metrics_unappend(g_s, appender, buf), AX_OK);
    CHECK_EQ(ax_dump_on_signal(g_s, 0, NULL), AX_OK);
    CHECK_EQ(ax_events_flush(g_s), AX_OK);
    CHECK_EQ(ax_events_callback(g_s, NULL, NULL), AX_OK);
    free(sink);
    CHECK_EQ(ax_events_json(g_s, NULL), AX_OK);
    if (json)
        fclose(json);
    free(buf);
    fclose(devnull);
    return NULL;
}

/* ---- the outcomes --------------------------------------------------------------- */

static void check_rec(const struct rec *r)
{
    CHECK_EQ(atomic_load(&r->done), 1);
    int state = atomic_load(&r->state);
    unsigned att = atomic_load(&r->attempts);
    switch (r->kind) {
    case K_PLAIN:
    case K_SLEEPY:
    case K_YIELD:
    case K_SPAWN:
    case K_LATE_CLASS:
    case K_CHILD:
        CHECK_EQ(state, AX_STATE_SUCCEEDED);
        CHECK_EQ(att, 1);
        break;
    case K_FAIL_ONCE: /* retried, or not: retries were switched off or denied */
        if (state == AX_STATE_SUCCEEDED) {
            CHECK_EQ(att, 2);
        } else {
            CHECK_EQ(state, AX_STATE_FAILED);
            CHECK_EQ(att, 1);
            CHECK_EQ(atomic_load(&r->code), 1);
        }
        break;
    case K_TIMEOUT: { /* retried once if retries were on for its priority then */
        CHECK_EQ(state, AX_STATE_TIMED_OUT);
        CHECK_EQ(atomic_load(&r->code), AX_ETIMEDOUT);
        /* Every attempt timed out; one whose worker was held between
         * arming its 5 ms deadline and entering the function (preempted,
         * or a slow first switch under TSan) ended at its deadline without
         * entering it (watchdog.c): counted in attempts, not entered. */
        unsigned n = atomic_load(&r->res_attempts);
        CHECK(n >= 1 && n <= 2);
        CHECK_LE(att, n);
        CHECK_LE(atomic_load(&r->timeouts), n);
        break;
    }
    case K_CANCEL:
        if (atomic_load(&r->cancel_ok)) {
            CHECK_EQ(state, AX_STATE_CANCELLED);
            CHECK_LE(att, 1);
        } else {
            CHECK_EQ(state, AX_STATE_SUCCEEDED);
            CHECK_EQ(att, 1);
        }
        break;
    }
}

int main(void)
{
    signal(SIGUSR1, SIG_IGN); /* until ax_dump_on_signal's handler */
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 16;
    c.adaptive_limit = true; /* ax_set_max_concurrency moves its bound */
    c.adaptive_min = 4;
    c.retry = g_fast_retry;
    g_s = test_sched_cfg(&c);

    ax_class_config cc;
    ax_class_config_default(&cc);
    cc.name = "flaky";
    cc.timeout_ms = TIMEOUT_MS;
    cc.max_retry = 2;
    cc.retry = g_fast_retry;
    cc.breaker = false; /* its tasks fail once: a breaker would fail the rest */
    CHECK_EQ(ax_class_register(g_s, &cc, &g_cls_a), AX_OK);
    ax_class_config_default(&cc);
    cc.name = "steady";
    cc.priority = AX_PRIO_HIGH;
    cc.timeout_ms = TIMEOUT_MS;
    cc.protect_high = false;
    cc.adaptive = false;
    cc.limit_max = 3;
    CHECK_EQ(ax_class_register(g_s, &cc, &g_cls_b), AX_OK);

    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(g_s, "127.0.0.1:0", &port), AX_OK);
    CHECK(port != 0);

    uint64_t t0 = test_now_ms();
    pthread_t ctl, sub[SUBMITTERS];
    CHECK_EQ(pthread_create(&ctl, NULL, controller, &port), 0);
    for (unsigned i = 0; i < SUBMITTERS; i++)
        CHECK_EQ(pthread_create(&sub[i], NULL, submitter, (void *)(uintptr_t)i), 0);
    for (unsigned i = 0; i < SUBMITTERS; i++)
        CHECK_EQ(pthread_join(sub[i], NULL), 0);
    /* Every admitted task (children included) ends while the knobs still move. */
    CHECK(WAIT_UNTIL(atomic_load(&g_done) == atomic_load(&g_admitted), 120000));
    atomic_store(&g_stop, true);
    CHECK_EQ(pthread_join(ctl, NULL), 0);
    uint64_t wall = test_now_ms() - t0;

    unsigned long admitted = atomic_load(&g_admitted);
    unsigned nchildren = atomic_load(&g_nchildren);
    CHECK(admitted >= SUBMITTERS * PER_SUBMITTER);
    for (unsigned m = 0; m < SUBMITTERS; m++)
        for (unsigned i = 0; i < PER_SUBMITTER; i++)
            check_rec(&g_recs[m][i]);
    unsigned long children_admitted = admitted - SUBMITTERS * PER_SUBMITTER;
    unsigned long children_done = 0;
    for (unsigned i = 0; i < nchildren; i++)
        if (atomic_load(&g_children[i].done)) {
            check_rec(&g_children[i]);
            children_done++;
        }
    CHECK_EQ(children_done, children_admitted);

    /* The counters, exact once idle (a counter may move just after on_done). */
    ax_stats st;
    CHECK(WAIT_UNTIL((st = test_stats(g_s),
                      st.succeeded + st.failed + st.timed_out + st.cancelled == st.submitted &&
                          st.running == 0),
                     10000));
    CHECK_EQ(st.submitted, admitted);
    CHECK_EQ(st.succeeded, atomic_load(&g_by_state[AX_STATE_SUCCEEDED]));
    CHECK_EQ(st.failed, atomic_load(&g_by_state[AX_STATE_FAILED]));
    CHECK_EQ(st.timed_out, atomic_load(&g_by_state[AX_STATE_TIMED_OUT]));
    CHECK_EQ(st.cancelled, atomic_load(&g_by_state[AX_STATE_CANCELLED]));
    CHECK_EQ(st.rejected + st.shed, atomic_load(&g_refused));
    CHECK_EQ(st.queued[0] + st.queued[1] + st.queued[2] + st.delayed, 0);
    CHECK_EQ(st.panicked, 0);
    /* Each timed-out attempt's on_timeout ran once (or was dropped, counted),
     * entered or not. */
    unsigned long timeouts = 0;
    for (unsigned m = 0; m < SUBMITTERS; m++)
        for (unsigned i = 0; i < PER_SUBMITTER; i++)
            if (g_recs[m][i].kind == K_TIMEOUT)
                timeouts += atomic_load(&g_recs[m][i].res_attempts);
    CHECK(timeouts > 0);
    CHECK(WAIT_UNTIL(atomic_load(&g_on_timeout) + test_stats(g_s).callback_dropped >= timeouts,
                     10000));
    CHECK_EQ(atomic_load(&g_on_timeout) + test_stats(g_s).callback_dropped, timeouts);
    unsigned ncls = ax_class_count(g_s);
    for (unsigned id = 1; id <= ncls; id++) {
        ax_class_stats cs;
        CHECK_EQ(ax_class_stats_get(g_s, id, &cs), AX_OK);
        CHECK_EQ(cs.submitted, atomic_load(&g_cls_admitted[id]));
        CHECK_EQ(cs.succeeded + cs.failed + cs.timed_out + cs.cancelled, cs.submitted);
        CHECK_EQ(cs.in_flight, 0);
        CHECK_EQ(cs.queued, 0);
    }
    CHECK(atomic_load(&g_cls_admitted[g_cls_a]) > 0 && atomic_load(&g_cls_admitted[g_cls_b]) > 0);

    CHECK_EQ(ax_shutdown(g_s, 5000), AX_OK);
    ax_free(g_s);
    printf("runtime_race: %lu tasks (%lu children), %lu refused, %lu succeeded, %lu failed, "
           "%lu timed out, %lu cancelled; %lu control loops, %lu events to the callback, "
           "%lu appender calls; %llu ms\n",
           admitted, children_admitted, atomic_load(&g_refused),
           atomic_load(&g_by_state[AX_STATE_SUCCEEDED]), atomic_load(&g_by_state[AX_STATE_FAILED]),
           atomic_load(&g_by_state[AX_STATE_TIMED_OUT]),
           atomic_load(&g_by_state[AX_STATE_CANCELLED]), atomic_load(&g_ctl_loops),
           atomic_load(&g_events), atomic_load(&g_appender_calls), (unsigned long long)wall);
    return 0;
}
