/* libax_redis dead letters: a message that always fails is retried through
 * the delayed set (surviving the process) max_retry times, then ends in the
 * dead-letter stream with its last error, its attempts and its id; so do a
 * message of a kind with no handler, one that timed out, one whose deadline
 * passed before it started, and one delivered more than max_deliveries
 * times (its consumers died holding it). Nothing is left in the streams. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static char first_id[AX_REDIS_ID_MAX];
static char entries[3][AX_REDIS_ID_MAX];
static atomic_int calls;

static int always_fail(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)arg;
    int i = atomic_load(&calls);
    CHECK_EQ(m->attempt, (unsigned)i); /* attempts 0, 1, 2 */
    CHECK_STR(m->id, first_id);        /* the same idempotency key each time */
    CHECK_STR(m->trace_id, "trace-fail");
    CHECK_EQ(m->len, 5);
    CHECK(memcmp(m->payload, "a\0b\0c", 5) == 0);
    if (i < 3)
        snprintf(entries[i], sizeof entries[i], "%s", m->entry_id);
    ax_task_set_error(t, "boom %u", m->attempt);
    atomic_store(&calls, i + 1);
    return -1;
}

static int ok_one(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)m, (void)arg;
    return 0;
}

static int too_slow(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    ax_sleep(t, 10000); /* past its 100 ms timeout */
    return 0;
}

/* Field `name` of a dead letter (a reply's flat field/value list). */
static const char *fieldv(const redisReply *f, const char *name)
{
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (strcmp(f->element[i]->str, name) == 0)
            return f->element[i + 1]->str;
    return "";
}

static const redisReply *dead_of(const redisReply *all, const char *kind)
{
    for (size_t i = 0; i < all->elements; i++)
        if (strcmp(fieldv(all->element[i]->element[1], "k"), kind) == 0)
            return all->element[i]->element[1];
    fprintf(stderr, "no dead letter of kind %s\n", kind);
    abort();
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "dl";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    redisContext *rc = rs_connect();

    /* A message its consumers died holding: a ghost consumer read it and
     * took it over once more (2 deliveries); the next claim makes 3. */
    ax_redis_spec ghost = {.kind = "ghost", .priority = AX_PRIO_LOW, .timeout_ms = 5000};
    char gid[AX_REDIS_ID_MAX];
    CHECK_EQ(ax_redis_submit(NULL, q, &ghost, 5000, gid), 0);
    redisReply *r = redisCommand(rc, "XREADGROUP GROUP ax ghost COUNT 5 STREAMS ax:{dl}:low >");
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    r = redisCommand(rc, "XCLAIM ax:{dl}:low ax ghost 0 %s", gid + 2);
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    freeReplyObject(r);
    r = redisCommand(rc, "XPENDING ax:{dl}:low ax - + 10");
    CHECK(r && r->elements == 1);
    CHECK_EQ(r->element[0]->element[3]->integer, 2);
    freeReplyObject(r);

    ax_redis_spec sp = {.kind = "fail", .payload = "a\0b\0c", .len = 5, .timeout_ms = 5000,
                        .max_retry = 2, .trace_id = "trace-fail"};
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, first_id), 0);
    ax_redis_spec nope = {.kind = "nope", .priority = AX_PRIO_HIGH, .timeout_ms = 5000};
    CHECK_EQ(ax_redis_submit(NULL, q, &nope, 5000, NULL), 0);
    ax_redis_spec slow = {.kind = "slow", .priority = AX_PRIO_LOW, .timeout_ms = 100};
    CHECK_EQ(ax_redis_submit(NULL, q, &slow, 5000, NULL), 0);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    ax_redis_spec late = {.kind = "late", .timeout_ms = 5000,
                          .deadline_ms = (uint64_t)now.tv_sec * 1000 - 1};
    CHECK_EQ(ax_redis_submit(NULL, q, &late, 5000, NULL), 0);
    /* Successes beside them, on all three streams: acknowledged in the same
     * pipelines as the failures' records, one call per stream. */
    for (int i = 0; i < 30; i++) {
        ax_redis_spec ok = {.kind = "ok", .priority = (ax_priority)(i % 3), .timeout_ms = 5000};
        CHECK_EQ(ax_redis_submit(NULL, q, &ok, 5000, NULL), 0);
    }

    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 8;
    cc.retry = (ax_retry_policy){.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 20, .max_ms = 100};
    cc.claim_interval_ms = 50;
    cc.visibility_ms = 1000;
    cc.max_deliveries = 2;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "fail", always_fail, NULL), 0);
    CHECK_EQ(ax_redis_handle(c, "slow", too_slow, NULL), 0);
    CHECK_EQ(ax_redis_handle(c, "ok", ok_one, NULL), 0);
    CHECK_EQ(ax_redis_handle(c, "ghost", too_slow, NULL), 0); /* never runs: dead first */
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK(WAIT_UNTIL(rs_int(rc, "XLEN ax:{dl}:dead") == 5, 60000));
    CHECK_EQ(atomic_load(&calls), 3);

    r = redisCommand(rc, "XRANGE ax:{dl}:dead - +");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 5);
    const redisReply *f = dead_of(r, "fail");
    CHECK_STR(fieldv(f, "e"), "boom 2");
    CHECK_STR(fieldv(f, "a"), "3");
    CHECK_STR(fieldv(f, "o"), first_id);
    CHECK_STR(fieldv(f, "t"), "trace-fail");
    CHECK(strcmp(entries[0], entries[1]) != 0 && strcmp(entries[1], entries[2]) != 0);
    f = dead_of(r, "nope");
    CHECK_STR(fieldv(f, "e"), "no handler for kind \"nope\"");
    f = dead_of(r, "slow");
    CHECK(strstr(fieldv(f, "e"), "timed out") != NULL);
    f = dead_of(r, "late");
    CHECK_STR(fieldv(f, "e"), "its deadline passed before it started");
    f = dead_of(r, "ghost");
    CHECK_STR(fieldv(f, "e"), "delivered 3 times without an outcome (consumers died or stalled)");
    CHECK_STR(fieldv(f, "o"), gid);
    freeReplyObject(r);
    r = NULL;

    ax_redis_consumer_stats st;
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.held == 0), 10000));
    CHECK_EQ(st.retried, 2);
    CHECK_EQ(st.succeeded, 30);
    CHECK_EQ(rs_int(rc, "HGET ax:{dl}:stats retried"), 2);
    CHECK_EQ(rs_int(rc, "HGET ax:{dl}:stats dead"), 5);
    CHECK_EQ(rs_int(rc, "ZCARD ax:{dl}:delayed"), 0);
    const char *streams[] = {"high", "normal", "low"};
    for (int k = 0; k < 3; k++)
        CHECK_EQ(rs_int(rc, "XLEN ax:{dl}:%s", streams[k]), 0);
    /* The same numbers through the stats API and its Prometheus text. */
    ax_redis_queue_stats qs;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 5000, &qs), 0);
    CHECK_EQ(qs.dead_letters, 5);
    CHECK_EQ(qs.dead, 5);
    CHECK_EQ(qs.retried, 2);
    CHECK_EQ(qs.succeeded, 30);
    CHECK_EQ(qs.claimed, 0); /* the over-delivered one went dead, not to a handler */
    CHECK_EQ(qs.delayed, 0);
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        CHECK_EQ(qs.length[p], 0);
        CHECK_EQ(qs.pending[p], 0);
    }
    char text[4096];
    long need = ax_redis_queue_prometheus(q, &qs, NULL, 0);
    CHECK_EQ(ax_redis_queue_prometheus(q, &qs, text, sizeof text), need);
    CHECK_LE(need, (long)sizeof text - 1);
    CHECK(strstr(text, "ax_redis_queue_dead_letters{queue=\"dl\"} 5\n") != NULL);
    CHECK(strstr(text, "ax_redis_queue_retried_total{queue=\"dl\"} 2\n") != NULL);
    CHECK(strstr(text, "ax_redis_queue_length{queue=\"dl\",priority=\"high\"} 0\n") != NULL);
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
