/* test_redis_r13_two_consumers.c - two started consumers on one scheduler
 * make its /metrics an invalid Prometheus exposition.
 * (Named test_redis_* so that CMake links it with libax_redis.)
 *
 * Defect (branch cluster, 3090e4d): each started consumer registers its own
 * appender (src/redis/consumer.c ax_redis_consumer_start ->
 * ax_metrics_append(s, metrics_text, c)), and metrics_text writes complete
 * families -- "# HELP" / "# TYPE" lines included -- for ax_redis_queue_*
 * (ax_redis_queue_prometheus) and ax_redis_consumer_*
 * (ax_redis_consumer_prometheus). src/obs/metrics.c metrics_render
 * concatenates the appenders' texts, so with two consumers (the config says
 * a consumer's name is "unique per process": several per process are
 * expected -- two queues, or two consumers of one) every family of those
 * appears twice: a second "# TYPE ax_redis_consumer_pulled_total" line and
 * the family's samples split in two groups. The text format allows one
 * TYPE line per metric name and each family's lines as one group;
 * Prometheus' parser rejects the whole scrape ("second TYPE line for
 * metric name ..."; promtool: "text format parsing error ...: second HELP
 * line for metric name"), so one consumer too many loses every series of the
 * process, ax's own included. With two consumers of the SAME queue the
 * ax_redis_queue_* samples are moreover duplicated with identical labels.
 *
 * Deterministic: queues "qa" and "qb", one consumer each, one scheduler;
 * once both consumers' stats are cached (claim interval 100 ms), render a
 * scrape (metrics_render, the /metrics body) and count the TYPE lines per
 * metric name: each must be 1 (today: 2 for every ax_redis_* family).
 *
 * Fix: one appender per scheduler for libax_redis (shared by its
 * consumers, registered on the first start, removed with the last stop)
 * that writes each family once with every consumer's / queue's samples,
 * deduplicating queues by name; or families keyed so each is emitted once. */
#include "redis_server.h"
#include "util.h"

#include "internal.h" /* metrics_render: the body a /metrics scrape gets */

#include <ax_redis.h>
#include <stdlib.h>

static int ok(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)m, (void)arg;
    return 0;
}

static ax_redis_queue *queue(const char *name)
{
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = name;
    qc.conn.port = (uint16_t)rs_port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    return q;
}

static ax_redis_consumer *consumer(ax_sched *s, ax_redis_queue *q, const char *name)
{
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = name;
    cc.slots = 8;
    cc.claim_interval_ms = 100;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "ok", ok, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    return c;
}

static unsigned count(const char *text, const char *needle)
{
    unsigned n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

int main(void)
{
    rs_start();
    ax_sched *s = test_sched(2, 32);
    ax_redis_queue *qa = queue("qa"), *qb = queue("qb");
    ax_redis_consumer *ca = consumer(s, qa, "ca"), *cb = consumer(s, qb, "cb");

    char *text = NULL;
    size_t len = 0;
    uint64_t until = test_now_ms() + 20000;
    do { /* until both consumers' queue stats are cached */
        free(text);
        usleep(50000);
        text = metrics_render(s, &len);
        CHECK(text != NULL);
    } while (!(strstr(text, "ax_redis_queue_length{queue=\"qa\"") &&
               strstr(text, "ax_redis_queue_length{queue=\"qb\"")) &&
             test_now_ms() < until);
    CHECK(strstr(text, "ax_redis_queue_length{queue=\"qa\"") != NULL);
    CHECK(strstr(text, "ax_redis_queue_length{queue=\"qb\"") != NULL);

    /* Every TYPE line names a metric no other TYPE line names. */
    unsigned dup = 0;
    for (const char *p = text; (p = strstr(p, "# TYPE ")); p++) {
        if (p != text && p[-1] != '\n')
            continue;
        const char *e = strchr(p + 7, ' ');
        CHECK(e != NULL);
        char line[160];
        snprintf(line, sizeof line, "# TYPE %.*s ", (int)(e - (p + 7)), p + 7);
        unsigned n = count(text, line);
        if (n != 1) {
            if (p == strstr(text, line)) /* report each name once */
                fprintf(stderr, "%u TYPE lines for %.*s\n", n, (int)(e - (p + 7)), p + 7);
            dup++;
        }
    }
    CHECK_EQ(count(text, "# TYPE ax_redis_consumer_pulled_total "), 1u); /* fails: 2 */
    CHECK_EQ(count(text, "# TYPE ax_redis_queue_length "), 1u);
    CHECK_EQ(dup, 0u);
    free(text);

    CHECK_EQ(ax_redis_consumer_stop(ca, 5000), 0);
    CHECK_EQ(ax_redis_consumer_stop(cb, 5000), 0);
    ax_redis_consumer_free(ca);
    ax_redis_consumer_free(cb);
    ax_redis_queue_free(qa);
    ax_redis_queue_free(qb);
    ax_free(s);
    return 0;
}
