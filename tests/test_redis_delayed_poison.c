/* A member of the delayed set that is not a retry ax wrote (added by hand,
 * or by another program sharing the key) is dead-lettered, not left in
 * the way of the real retries behind it.
 *
 * The promote script unpacked each due member with cmsgpack and used its
 * first field as a stream index: a member that was not msgpack, or had
 * another index, failed the script at every call, so no retry of the queue
 * was promoted again (a new user's trial: an acker retrying the promote
 * every 100 ms forever). Five poison members, due long ago, then one
 * message that fails its first attempt: its retry must run, and each
 * poison member must be in the dead-letter stream with an error and its
 * bytes, counted in the queue's `dead`.
 */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int attempts, finished;

static int flaky(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&attempts, 1);
    if (m->attempt == 0)
        return 1;
    atomic_fetch_add(&finished, 1);
    return 0;
}

int main(void)
{
    int port = rs_start();
    redisContext *rc = rs_connect();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "pz";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);

    /* Not msgpack; msgpack with stream index 9; a field that is a table;
     * a priority with no fields; 10 000 fields. Scores 1-5: due since 1970. */
    CHECK_EQ(rs_int(rc, "ZADD ax:{pz}:delayed 1 garbage"), 1);
    const char *packs[] = {"return redis.call('ZADD', KEYS[1], 2, cmsgpack.pack({'9', 'k', 'x'}))",
                           "return redis.call('ZADD', KEYS[1], 3, cmsgpack.pack({'1', 'k', {1}}))",
                           "return redis.call('ZADD', KEYS[1], 4, cmsgpack.pack({'2'}))",
                           /* more fields than unpack takes (review) */
                           ("local t = {'2'} for i = 1, 10000 do t[#t + 1] = 'f' end "
                            "return redis.call('ZADD', KEYS[1], 5, cmsgpack.pack(t))")};
    for (int i = 0; i < 4; i++) {
        redisReply *r = redisCommand(rc, "EVAL %s 1 ax:{pz}:delayed", packs[i]);
        CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
        freeReplyObject(r);
    }

    ax_redis_spec sp = {.kind = "flaky", .timeout_ms = 60000, .max_retry = 1};
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "c";
    cc.claim_interval_ms = 200;
    cc.retry.mode = AX_BACKOFF_EXPONENTIAL;
    cc.retry.base_ms = 50;
    cc.retry.max_ms = 50;
    cc.retry.jitter_ms = 0;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "flaky", flaky, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    /* Liveness only: the retry is due 50 ms after the first attempt. */
    if (!WAIT_UNTIL(atomic_load(&finished) == 1, 30000)) {
        fprintf(stderr, "the retry never ran: %d attempts, %lld members left in the delayed set\n",
                atomic_load(&attempts), rs_int(rc, "ZCARD ax:{pz}:delayed"));
        CHECK(atomic_load(&finished) == 1);
    }
    CHECK_EQ(ax_redis_consumer_stop(c, 10000), 0);
    CHECK_EQ(atomic_load(&attempts), 2);
    CHECK_EQ(rs_int(rc, "ZCARD ax:{pz}:delayed"), 0);
    CHECK_EQ(rs_int(rc, "HGET ax:{pz}:stats succeeded"), 1);
    CHECK_EQ(rs_int(rc, "HGET ax:{pz}:stats retried"), 1);
    CHECK_EQ(rs_int(rc, "HGET ax:{pz}:stats dead"), 5);
    CHECK_EQ(rs_int(rc, "XLEN ax:{pz}:dead"), 5);

    /* Each dead letter names the set and keeps the member's bytes. */
    redisReply *all = redisCommand(rc, "XRANGE ax:{pz}:dead - +");
    CHECK(all && all->type == REDIS_REPLY_ARRAY && all->elements == 5);
    bool saw_garbage = false;
    for (size_t i = 0; i < all->elements; i++) {
        const redisReply *f = all->element[i]->element[1];
        const char *e = rs_field(f, "e"), *m = rs_field(f, "m");
        CHECK(e && strstr(e, "not a retry ax wrote") && strstr(e, "ax:{pz}:delayed"));
        CHECK(m != NULL);
        if (strcmp(m, "garbage") == 0)
            saw_garbage = true;
    }
    CHECK(saw_garbage);
    freeReplyObject(all);

    ax_redis_queue_stats qs;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 5000, &qs), 0);
    CHECK_EQ(qs.dead, 5);
    CHECK_EQ(qs.dead_letters, 5);
    CHECK_EQ(qs.delayed, 0);

    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
