/* libax_redis hand-back: a message the local scheduler refuses (its NORMAL
 * bucket holds one task) is not failed: it goes back through the delayed
 * set, its attempt not counted, and runs a little later. Six messages with
 * no retries allowed all succeed, each run once at attempt 0.
 *
 * The refusal is made certain, not left to timing: the puller takes one
 * message per round trip (quota_normal = slots / 3 = 1), so on a loaded
 * machine a 20 ms handler could finish before the next read, and nothing
 * was ever refused (a TSan run in CI saw retried = 0). Now every handler
 * holds until the test has seen a hand-back recorded: one message runs,
 * one waits in the bucket, the third is refused. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int runs, bad_attempt;
static atomic_bool gate; /* opened once a hand-back is recorded */

static int work(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)arg;
    if (m->attempt != 0)
        atomic_fetch_add(&bad_attempt, 1);
    atomic_fetch_add(&runs, 1);
    while (!atomic_load(&gate)) {
        int rc = ax_sleep(t, 2);
        if (rc)
            return rc;
    }
    return 0;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "hb";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    for (int i = 0; i < 6; i++) {
        ax_redis_spec sp = {.kind = "w", .timeout_ms = 5000}; /* max_retry 0 */
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    cfg.max_concurrency = 3;              /* the puller, the acker, one message */
    cfg.capacity[AX_PRIO_NORMAL] = 1;     /* and one more waiting: the rest refused */
    ax_sched *s = test_sched_cfg(&cfg);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 4;
    cc.claim_interval_ms = 20; /* due hand-backs come back soon */
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "w", work, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    redisContext *rc = rs_connect();
    CHECK(WAIT_UNTIL(rs_int(rc, "HGET ax:{hb}:stats retried") >= 1, 30000));
    CHECK_EQ(rs_int(rc, "HGET ax:{hb}:stats succeeded"), 0); /* all held so far */
    atomic_store(&gate, true);
    CHECK(WAIT_UNTIL(rs_int(rc, "HGET ax:{hb}:stats succeeded") == 6, 30000));
    CHECK_EQ(atomic_load(&runs), 6);
    CHECK_EQ(atomic_load(&bad_attempt), 0);
    CHECK_EQ(rs_int(rc, "HGET ax:{hb}:stats dead"), 0);
    CHECK_LE(1, rs_int(rc, "HGET ax:{hb}:stats retried")); /* some were handed back */
    CHECK_EQ(rs_int(rc, "XLEN ax:{hb}:dead"), 0);
    CHECK_EQ(rs_int(rc, "ZCARD ax:{hb}:delayed"), 0);
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
