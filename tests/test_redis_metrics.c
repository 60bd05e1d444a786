/* libax_redis in /metrics (issue 13): a running consumer's scheduler serves
 * the queue's series (stream lengths, pending, delayed, dead letters,
 * succeeded / retried / dead / claimed) and the consumer's counters beside
 * libax's own, through ax_metrics_append, from the stats its puller caches
 * every claim interval -- a scrape makes no Redis round trip.
 *
 * Known workload on queue "metrics": 30 messages of kind "ok" (succeed),
 * 5 of kind "bad" with no retry (dead-lettered), then 3 HIGH messages of
 * kind "hold" whose handler waits on a gate. With those 3 held, a scrape
 * must say, exactly: length and pending high 3, normal and low 0, delayed
 * 0, dead letters 5, succeeded 30, retried 0, dead 5, claimed 0; the
 * consumer: pulled 38, succeeded 30, dead 5, held 3; kind "ok" ran in its
 * task class (ax_redis_handle_class): ax_class_succeeded_total 30. After the gate opens
 * and the consumer is stopped, its series are gone from the scrape (and
 * libax's remain). ax_metrics_append / ax_metrics_unappend's error codes.
 *
 * --dump: print one scrape (with the 3 held) and exit, for promtool.
 */
#include "redis_server.h"
#include "util.h"

#include <arpa/inet.h>
#include <ax_redis.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

static atomic_int gate;

static int ok(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)m, (void)arg;
    return 0;
}

static int bad(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    ax_task_set_error(t, "bad by design");
    return 1;
}

static int hold(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    while (!atomic_load(&gate)) {
        int rc = ax_sleep(t, 5);
        if (rc)
            return rc;
    }
    return 0;
}

static long extra(char *buf, size_t len, void *arg)
{
    (void)arg;
    return snprintf(buf, len, "# an appender that is never scraped\n");
}

/* One GET /metrics; the body into out (NUL-terminated). */
static void scrape(uint16_t port, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0);
    CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK_EQ(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    size_t n = 0;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        CHECK(poll(&pf, 1, 5000) == 1);
        ssize_t r = read(fd, out + n, cap - 1 - n);
        CHECK(r >= 0);
        if (r == 0)
            break;
        n += (size_t)r;
        CHECK(n < cap - 1);
    }
    out[n] = 0;
    close(fd);
    CHECK(strncmp(out, "HTTP/1.1 200", 12) == 0);
    char *body = strstr(out, "\r\n\r\n");
    CHECK(body != NULL);
    memmove(out, body + 4, strlen(body + 4) + 1);
}

/* The value of the sample that starts with `series ` (name and labels
 * exactly as rendered); -1 if absent. */
static double value(const char *text, const char *series)
{
    size_t l = strlen(series);
    for (const char *p = text; (p = strstr(p, series)); p += l)
        if ((p == text || p[-1] == '\n') && p[l] == ' ')
            return strtod(p + l + 1, NULL);
    return -1;
}

static ax_redis_queue *queue(void)
{
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "metrics";
    qc.conn.port = (uint16_t)rs_port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    return q;
}

static void submit(ax_redis_queue *q, const char *kind, ax_priority p, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        ax_redis_spec sp = {.kind = kind, .priority = p, .timeout_ms = 60000};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }
}

#define Q "{queue=\"metrics\""
#define C "{queue=\"metrics\",consumer=\"m1\"}"

static bool settled(const char *t)
{
    return value(t, "ax_redis_queue_pending" Q ",priority=\"high\"}") == 3 &&
           value(t, "ax_redis_queue_succeeded_total" Q "}") == 30 &&
           value(t, "ax_redis_queue_dead_total" Q "}") == 5;
}

int main(int argc, char **argv)
{
    bool dump = argc > 1 && strcmp(argv[1], "--dump") == 0;
    rs_start();
    ax_sched *s = test_sched(2, 40);

    /* The hook's own errors. */
    CHECK_EQ(ax_metrics_append(NULL, extra, NULL), AX_EINVAL);
    CHECK_EQ(ax_metrics_append(s, NULL, NULL), AX_EINVAL);
    CHECK_EQ(ax_metrics_unappend(s, extra, NULL), AX_ENOTFOUND);
    CHECK_EQ(ax_metrics_append(s, extra, NULL), 0);
    CHECK_EQ(ax_metrics_append(s, extra, NULL), AX_EBUSY);
    CHECK_EQ(ax_metrics_unappend(s, extra, NULL), 0);
    CHECK_EQ(ax_metrics_unappend(s, extra, NULL), AX_ENOTFOUND);

    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    ax_redis_queue *q = queue();
    submit(q, "ok", AX_PRIO_NORMAL, 30);
    submit(q, "bad", AX_PRIO_LOW, 5);

    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "m1";
    cc.slots = 16;
    cc.claim_interval_ms = 100;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    /* "ok" runs in a task class (ax_redis_handle_class): its counters say so. */
    ax_class_config kc;
    ax_class_config_default(&kc);
    kc.name = "okc";
    unsigned okc;
    CHECK_EQ(ax_class_register(s, &kc, &okc), 0);
    CHECK_EQ(ax_redis_handle_class(c, "ok", okc, ok, NULL), 0);
    CHECK_EQ(ax_redis_handle_class(c, "ok", okc, ok, NULL), AX_EBUSY);
    CHECK_EQ(ax_redis_handle(c, "bad", bad, NULL), 0);
    CHECK_EQ(ax_redis_handle(c, "hold", hold, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    /* The 35 first: then the 3 that stay held. */
    ax_redis_consumer_stats st;
    WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.succeeded == 30 && st.dead == 5), 10000);
    submit(q, "hold", AX_PRIO_HIGH, 3);

    static char text[1 << 20];
    uint64_t until = test_now_ms() + 10000;
    do {
        usleep(50000);
        scrape(port, text, sizeof text);
    } while (!settled(text) && test_now_ms() < until);
    if (dump) {
        fputs(text, stdout);
    } else {
        static const struct {
            const char *series;
            double v;
        } want[] = {
            {"ax_redis_queue_length" Q ",priority=\"high\"}", 3},
            {"ax_redis_queue_length" Q ",priority=\"normal\"}", 0},
            {"ax_redis_queue_length" Q ",priority=\"low\"}", 0},
            {"ax_redis_queue_pending" Q ",priority=\"high\"}", 3},
            {"ax_redis_queue_pending" Q ",priority=\"normal\"}", 0},
            {"ax_redis_queue_pending" Q ",priority=\"low\"}", 0},
            {"ax_redis_queue_delayed" Q "}", 0},
            {"ax_redis_queue_dead_letters" Q "}", 5},
            {"ax_redis_queue_succeeded_total" Q "}", 30},
            {"ax_redis_queue_retried_total" Q "}", 0},
            {"ax_redis_queue_dead_total" Q "}", 5},
            {"ax_redis_queue_claimed_total" Q "}", 0},
            {"ax_redis_consumer_pulled_total" C, 38},
            {"ax_redis_consumer_claimed_total" C, 0},
            {"ax_redis_consumer_redelivered_total" C, 0},
            {"ax_redis_consumer_succeeded_total" C, 30},
            {"ax_redis_consumer_dead_total" C, 5},
            {"ax_redis_consumer_held" C, 3},
            {"ax_class_succeeded_total{class=\"okc\"}", 30},
            {"ax_class_submitted_total{class=\"okc\"}", 30},
        };
        for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
            double v = value(text, want[i].series);
            if (v != want[i].v) {
                fprintf(stderr, "%s = %g, want %g\n--- scrape:\n%s", want[i].series, v, want[i].v,
                        text);
                abort();
            }
        }
        /* libax's own series are still there, before the appended ones. */
        const char *own = strstr(text, "# TYPE ax_tasks_submitted_total");
        const char *redis = strstr(text, "# HELP ax_redis_queue_length");
        CHECK(own && redis && own < redis);
        CHECK(text[strlen(text) - 1] == '\n');
        printf("scrape of a running consumer: 18 ax_redis series and 2 of the kind's class exact (3 held, 30 succeeded, 5 "
               "dead letters)\n");
    }
    atomic_store(&gate, 1);
    WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.held == 0), 10000);
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    if (!dump) {
        scrape(port, text, sizeof text);
        CHECK(strstr(text, "ax_redis_") == NULL); /* off the scrape once stopped */
        CHECK(strstr(text, "ax_tasks_submitted_total") != NULL);
        printf("stopped: its series left the scrape, libax's stayed\n");
    }
    ax_redis_consumer_free(c);
    ax_free(s);
    ax_redis_queue_free(q);
    return 0;
}
