/* libax_redis across a Redis restart (append-only file, appendfsync
 * always): a producer task and a consumer keep going while redis-server is
 * killed with SIGKILL and started again on the same port. Submits fail
 * with a clear error (AX_ENET / AX_ETIMEDOUT, never a hang) and are
 * retried by the producer; connections come back by themselves; nothing
 * admitted is lost: every message runs, each entry has exactly one
 * terminal record, and the only extra entries are submits whose reply was
 * lost (counted, at most the failed submits). */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

enum { N = 2000 };

static ax_redis_queue *q;
static atomic_int runs[N];
static atomic_int submitted, submit_failures, producer_done;

static int handler(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)arg;
    int i = atoi((const char *)m->payload);
    CHECK(i >= 0 && i < N);
    atomic_fetch_add(&runs[i], 1);
    return 0;
}

static int producer(ax_task *t, void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++) {
        char pl[16];
        int n = snprintf(pl, sizeof pl, "%d", i);
        ax_redis_spec sp = {.kind = "w", .priority = (ax_priority)(i % 3), .payload = pl,
                            .len = (size_t)n + 1, .timeout_ms = 5000};
        for (;;) {
            int rc = ax_redis_submit(t, q, &sp, 300, NULL);
            if (rc == 0)
                break;
            if (rc != AX_ENET && rc != AX_ETIMEDOUT) {
                fprintf(stderr, "submit: %s: %s\n", ax_strerror(rc), ax_error_detail());
                abort();
            }
            atomic_fetch_add(&submit_failures, 1);
            if (ax_sleep(t, 20))
                return -1;
        }
        atomic_store(&submitted, i + 1);
        if (i % 50 == 0 && ax_sleep(t, 5)) /* spread the run over the restart */
            return -1;
    }
    atomic_store(&producer_done, 1);
    return 0;
}

int main(void)
{
    int port = rs_start_on(0, true);
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "rs";
    qc.conn.port = (uint16_t)port;
    qc.conn.reconnect_min_ms = 20;
    qc.conn.reconnect_max_ms = 200;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_sched *s = test_sched(2, 32);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 16;
    cc.visibility_ms = 1000;
    cc.claim_interval_ms = 100;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "w", handler, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    ax_spec sp = {.fn = producer, .timeout_ms = 300000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);

    CHECK(WAIT_UNTIL(atomic_load(&submitted) >= N / 3, 60000));
    rs_kill_server();
    usleep(300000); /* down for a while: submits and acknowledgements fail */
    rs_start_on(port, true);
    CHECK(WAIT_UNTIL(atomic_load(&producer_done), 120000));
    CHECK_LE(1, atomic_load(&submit_failures)); /* the restart was felt */

    redisContext *rc = rs_connect();
    CHECK(WAIT_UNTIL(rs_int(rc, "XLEN ax:{rs}:high") + rs_int(rc, "XLEN ax:{rs}:normal") +
                             rs_int(rc, "XLEN ax:{rs}:low") == 0,
                     120000));
    ax_redis_consumer_stats st;
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.held == 0), 30000));
    long long ok = rs_int(rc, "HGET ax:{rs}:stats succeeded");
    long total = 0;
    for (int i = 0; i < N; i++) {
        CHECK_LE(1, atomic_load(&runs[i])); /* nothing admitted was lost */
        total += atomic_load(&runs[i]);
    }
    printf("submit failures %d, entries %lld for %d messages, claimed %llu, redis errors %llu\n",
           atomic_load(&submit_failures), ok, N, (unsigned long long)st.claimed,
           (unsigned long long)st.redis_errors);
    CHECK_EQ(total, ok);                      /* one run per entry, one record per entry */
    CHECK_LE(ok - N, atomic_load(&submit_failures)); /* extra entries: lost submit replies */
    CHECK_EQ(rs_int(rc, "HGET ax:{rs}:stats dead"), 0);
    CHECK_EQ(rs_int(rc, "ZCARD ax:{rs}:delayed"), 0);
    const char *streams[] = {"high", "normal", "low"};
    for (int k = 0; k < 3; k++) {
        redisReply *r = redisCommand(rc, "XPENDING ax:{rs}:%s ax", streams[k]);
        CHECK(r && r->type == REDIS_REPLY_ARRAY);
        CHECK_EQ(r->element[0]->integer, 0);
        freeReplyObject(r);
    }
    /* Redis loses everything (a restart without persistence): the
     * consumer creates its group again and goes on with new messages. */
    rs_int(rc, "FLUSHALL");
    /* A stream without the group (the submit script would create both). */
    redisReply *raw = redisCommand(rc, "XADD ax:{rs}:normal * k w p 0 to 5000 r 0 dl 0 a 0");
    CHECK(raw && raw->type == REDIS_REPLY_STRING);
    freeReplyObject(raw);
    usleep(100000); /* the puller meets the missing group */
    for (int i = 1; i < 10; i++) {
        char pl[16];
        int n = snprintf(pl, sizeof pl, "%d", i);
        ax_redis_spec again = {.kind = "w", .payload = pl, .len = (size_t)n + 1, .timeout_ms = 5000};
        CHECK_EQ(ax_redis_submit(NULL, q, &again, 5000, NULL), 0);
    }
    CHECK(WAIT_UNTIL(rs_int(rc, "HGET ax:{rs}:stats succeeded") == 10, 30000));
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
