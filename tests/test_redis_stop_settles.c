/* libax_redis: a message whose handler ends after a stop's drain ran out
 * (its acker cancelled) is still acknowledged by the next stop.
 *
 * ax-worker's SIGTERM path: ax_redis_consumer_stop(c, drain) times out with
 * a handler still running, the handler then ends (here: succeeds), and a
 * second ax_redis_consumer_stop(c, 0) settles what is left. Before, that
 * stop handed back only the abandoned messages: the succeeded one stayed
 * held and pending in Redis, to run again after visibility_ms (new user's
 * trial: "held 1" after "drained no"). */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int started, release_it;

static int slow(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    atomic_store(&started, 1);
    for (int i = 0; i < 6000 && !atomic_load(&release_it); i++)
        if (ax_sleep(t, 5) != 0) return -1;
    return 0;
}

int main(void)
{
    int port = rs_start();
    redisContext *rc = rs_connect();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "st";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "c";
    cc.claim_interval_ms = 50;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "slow", slow, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    ax_redis_spec sp = {.kind = "slow", .timeout_ms = 60000};
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&started), 30000));

    /* The drain runs out with the handler still running. */
    CHECK_EQ(ax_redis_consumer_stop(c, 200), AX_ETIMEDOUT);
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(c, &st);
    CHECK_EQ(st.held, 1);

    /* It ends well after that; its task's on_done has run once the
     * scheduler counts it (the puller and the acker were cancelled). */
    atomic_store(&release_it, 1);
    ax_stats ss;
    CHECK(WAIT_UNTIL((ax_stats_get(s, &ss), ss.succeeded == 1), 30000));

    CHECK_EQ(ax_redis_consumer_stop(c, 0), 0);
    ax_redis_consumer_stats_get(c, &st);
    printf("held %llu succeeded %llu abandoned %llu\n", (unsigned long long)st.held,
           (unsigned long long)st.succeeded, (unsigned long long)st.abandoned);
    CHECK_EQ(st.held, 0);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(st.abandoned, 0);
    redisReply *r = redisCommand(rc, "XPENDING ax:{st}:normal ax");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1);
    CHECK_EQ(r->element[0]->integer, 0); /* acknowledged: nothing left to run again */
    freeReplyObject(r);
    CHECK_EQ(rs_int(rc, "HGET ax:{st}:stats succeeded"), 1);

    ax_free(s);
    ax_redis_consumer_free(c);
    redisFree(rc);
    ax_redis_queue_free(q);
    puts("test_redis_stop_settles: ok");
    return 0;
}
