/* A consumer whose claim dead-letters an entry delivered more than
 * max_deliveries times (its consumers died holding it) used to report
 * dead 0 and claimed 0 though the queue's dead is 1: the claim script did
 * not say. Now it counts in that consumer's dead (and claimed: it took the
 * entry over), so its stats add up. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int runs;

static int h(ax_task *t, const ax_redis_msg *m, void *a)
{
    (void)t;
    (void)m;
    (void)a;
    atomic_fetch_add(&runs, 1);
    return 0;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "poison";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_redis_spec sp = {.kind = "work", .priority = AX_PRIO_NORMAL, .timeout_ms = 1000};
    char id[AX_REDIS_ID_MAX];
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 1000, id), 0);
    /* a ghost consumer takes it three times and dies */
    ax_redis_config rc;
    ax_redis_config_default(&rc);
    rc.port = (uint16_t)port;
    ax_redis *r;
    CHECK_EQ(ax_redis_new(&rc, &r), 0);
    redisReply *rep;
    const char *key = "ax:{poison}:normal";
    CHECK_EQ(ax_redis_command(NULL, r, -1, &rep, "XGROUP CREATE %s ax 0 MKSTREAM", key), 0);
    freeReplyObject(rep);
    CHECK_EQ(ax_redis_command(NULL, r, -1, &rep, "XREADGROUP GROUP ax ghost COUNT 1 STREAMS %s >",
                              key),
             0);
    CHECK(rep->type == REDIS_REPLY_ARRAY);
    freeReplyObject(rep);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(ax_redis_command(NULL, r, -1, &rep, "XCLAIM %s ax ghost 0 %s", key, id + 2), 0);
        freeReplyObject(rep);
    }
    ax_redis_free(r);
    ax_sched *s = test_sched(1, 8);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.visibility_ms = 300;
    cc.claim_interval_ms = 100;
    cc.max_deliveries = 2;
    cc.name = "p1";
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "work", h, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    ax_redis_queue_stats qs;
    CHECK(WAIT_UNTIL((ax_redis_queue_stats_get(NULL, q, 1000, &qs), qs.dead == 1), 5000));
    usleep(100000);
    CHECK_EQ(ax_redis_consumer_stop(c, 1000), 0);
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(c, &st);
    printf("queue dead=%" PRIu64 " claimed=%" PRIu64 "; consumer dead=%" PRIu64 " claimed=%" PRIu64
           " pulled=%" PRIu64 " runs=%d\n",
           qs.dead, qs.claimed, st.dead, st.claimed, st.pulled, atomic_load(&runs));
    CHECK_EQ(atomic_load(&runs), 0);
    CHECK_EQ(st.dead, 1);
    CHECK_EQ(st.claimed, 1);
    CHECK_EQ(st.pulled + st.claimed,
             st.succeeded + st.retried + st.dead + st.ack_lost + st.abandoned + st.held);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
