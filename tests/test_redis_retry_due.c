/* A message's retry runs when its back-off ends, not at its consumer's next
 * claim pass.
 *
 * Due retries were moved from the delayed set to their streams only at the
 * puller's maintenance passes, every claim_interval_ms: a retry ran up to
 * that much late (1 s with the defaults; ~250 ms late on a 200 ms interval
 * in a new user's trial). Now the acker promotes each retry it wrote when
 * it is due, and the promote's XADD wakes the puller's blocked XREADGROUP
 * (a first version had the puller do it: blocked in XREADGROUP, it saw
 * them only when its block ended, up to block_ms late, review).
 *
 * 5 messages fail their first attempt and succeed on the retry; back-off a
 * fixed 100 ms, claim interval 3 s, XREADGROUP blocks of 2 s. Each retry
 * must start well before either (under 1.5 s after the first attempt;
 * before the fix ~3 s, with the puller's version ~2 s).
 */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

enum { N = 5 };

static _Atomic uint64_t first_ns[N], second_ns[N];
static atomic_int finished;

static int flaky(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t;
    (void)arg;
    int i = atoi((const char *)m->payload);
    CHECK(i >= 0 && i < N);
    if (m->attempt == 0) {
        atomic_store(&first_ns[i], ax_now_ns());
        return 1;
    }
    atomic_store(&second_ns[i], ax_now_ns());
    atomic_fetch_add(&finished, 1);
    return 0;
}

int main(void)
{
    int port = rs_start();
    redisContext *rc = rs_connect();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "due";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    for (int i = 0; i < N; i++) {
        char pl[8];
        int n = snprintf(pl, sizeof pl, "%d", i);
        ax_redis_spec sp = {.kind = "flaky", .payload = pl, .len = (size_t)n,
                            .timeout_ms = 60000, .max_retry = 1};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }
    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "c";
    cc.slots = 8;
    cc.claim_interval_ms = 3000;
    cc.block_ms = 2000;
    cc.visibility_ms = 30000;
    cc.retry.mode = AX_BACKOFF_EXPONENTIAL; /* capped at max_ms: a fixed 100 ms */
    cc.retry.base_ms = 100;
    cc.retry.max_ms = 100;
    cc.retry.jitter_ms = 0;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "flaky", flaky, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK(WAIT_UNTIL(atomic_load(&finished) == N, 60000));
    uint64_t worst = 0;
    for (int i = 0; i < N; i++) {
        uint64_t gap = atomic_load(&second_ns[i]) - atomic_load(&first_ns[i]);
        if (gap > worst)
            worst = gap;
    }
    fprintf(stderr, "retry after a 100 ms back-off: the latest started %.0f ms after its "
                    "first attempt (claim interval 3 000 ms)\n",
            (double)worst / 1e6);
    CHECK(worst >= 100 * 1000000ull);  /* not before its back-off */
    CHECK(worst < 1500 * 1000000ull);  /* not at the next claim pass (~3 s) */
    CHECK_EQ(ax_redis_consumer_stop(c, 10000), 0);
    CHECK_EQ(rs_int(rc, "HGET ax:{due}:stats succeeded"), N);
    CHECK_EQ(rs_int(rc, "ZCARD ax:{due}:delayed"), 0);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
