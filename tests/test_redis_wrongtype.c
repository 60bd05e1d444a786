/* test_redis_wrongtype.c - a key of the wrong type in the queue's place
 * loses no message (a new user's trial of 16d186c).
 *
 * The acknowledgement script took the entry off the stream (XACK, XDEL)
 * before the write that records its outcome (ZADD to the delayed set, XADD
 * to the dead-letter stream). With a string at either key that write
 * failed, Redis kept the earlier ones (a script's writes are not rolled
 * back), and the message was gone: in no stream, not pending, not delayed,
 * not dead, counted only as ack_lost, which means "another consumer had
 * already recorded it".
 *
 * Expected: the script checks its keys' types first and writes nothing on
 * a wrong one. The messages stay pending and held, the consumer counts
 * the errors, other messages' records go through meanwhile, and
 * ax_redis_queue_stats_get says WRONGTYPE; once the key is fixed, both end
 * dead, and nothing was ack_lost.
 */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static int fail(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    ax_task_set_error(t, "boom");
    return -1;
}

static int ok(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)m, (void)arg;
    return 0;
}

static ax_redis_consumer_stats cstats(ax_redis_consumer *c)
{
    ax_redis_consumer_stats st;
    CHECK_EQ(ax_redis_consumer_stats_get(c, &st), 0);
    return st;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "wt";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    redisContext *rc = rs_connect();

    ax_redis_spec retry = {.kind = "fail", .timeout_ms = 5000, .max_retry = 1};
    CHECK_EQ(ax_redis_submit(NULL, q, &retry, 5000, NULL), 0);
    ax_redis_spec dead = {.kind = "fail", .timeout_ms = 5000};
    CHECK_EQ(ax_redis_submit(NULL, q, &dead, 5000, NULL), 0);
    /* Then the wrong key. (A wrong delayed set is refused at submit, whose
     * admission counts it; the scripts check it as they check this one.) */
    redisReply *r = redisCommand(rc, "SET ax:{wt}:dead oops");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);

    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 4;
    cc.retry = (ax_retry_policy){.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 20, .max_ms = 100};
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "fail", fail, NULL), 0);
    CHECK_EQ(ax_redis_handle(c, "ok", ok, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);

    /* The retried one's first outcome is written (the delayed set is
     * fine); then it and the other fail for good, and neither dead letter
     * can be written: both stay pending and held. */
    /* One snapshot: a message is counted pulled a moment before it is
     * held (dispatch). */
    ax_redis_consumer_stats st;
    CHECK(WAIT_UNTIL((st = cstats(c), st.pulled == 3 && st.redis_errors >= 2 && st.held == 2),
                     30000));
    CHECK_EQ(st.succeeded, 0);
    CHECK_EQ(st.retried, 1);
    CHECK_EQ(st.dead, 0);
    CHECK_EQ(st.ack_lost, 0);
    CHECK_EQ(rs_int(rc, "XLEN ax:{wt}:normal"), 2);
    r = redisCommand(rc, "XPENDING ax:{wt}:normal ax");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1);
    CHECK_EQ(r->element[0]->integer, 2);
    freeReplyObject(r);

    /* They hold back no one else's record (review: the acker retried the
     * same batch for ever, and every success waited behind it). */
    ax_redis_spec good = {.kind = "ok", .timeout_ms = 5000};
    CHECK_EQ(ax_redis_submit(NULL, q, &good, 5000, NULL), 0);
    /* A settled message is counted in its outcome just before it leaves
     * held (ax_redis.h): the two are read together until both agree. */
    CHECK(WAIT_UNTIL((st = cstats(c), st.succeeded == 1 && st.held == 2), 30000));

    /* The queue's numbers say what is wrong rather than read 0. */
    ax_redis_queue_stats qs;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 5000, &qs), AX_ENET);
    CHECK(strstr(ax_error_detail(), "WRONGTYPE") != NULL);

    /* The keys fixed: the writes go through on the consumer's next try. */
    r = redisCommand(rc, "DEL ax:{wt}:dead");
    CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    CHECK(WAIT_UNTIL(rs_int(rc, "XLEN ax:{wt}:dead") == 2, 60000));
    CHECK(WAIT_UNTIL(cstats(c).held == 0, 10000));
    st = cstats(c);
    CHECK_EQ(st.retried, 1);
    CHECK_EQ(st.dead, 2);
    CHECK_EQ(st.ack_lost, 0);
    CHECK_EQ(st.pulled + st.claimed, st.succeeded + st.retried + st.dead + st.ack_lost +
                                         st.abandoned + st.held);
    CHECK_EQ(rs_int(rc, "XLEN ax:{wt}:normal"), 0);
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 5000, &qs), 0);
    CHECK_EQ(qs.dead_letters, 2);
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
