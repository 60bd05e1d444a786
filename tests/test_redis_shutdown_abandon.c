/* test_redis_shutdown_abandon.c - ax_shutdown mid-load: the messages it
 * cancelled count as abandoned, not held (a new user's trial of 16d186c).
 *
 * ax_shutdown cancels the consumer's handlers and its acker alike. The
 * acker is what turns a cancelled handler's message into "abandoned"; the
 * ones it had not reached stayed "held" for good (trial: abandoned 23,
 * held 41 of 64), and ax_redis_consumer_stop then returned AX_ETIMEDOUT
 * "41 messages still held", though every one had ended.
 *
 * Expected: after ax_shutdown, ax_redis_consumer_stop returns 0 with all 8
 * abandoned and none held; in Redis all 8 stay pending, handed back (their
 * idle time past any visibility_ms) for another consumer to claim at once
 * (test_redis_hand_back).
 */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int running;

static int hang(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    atomic_fetch_add(&running, 1);
    return ax_sleep(t, 60000); /* until cancelled */
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "sa";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    enum { N = 8 };
    for (int i = 0; i < N; i++) {
        ax_redis_spec sp = {.kind = "hang", .timeout_ms = 120000};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }
    ax_sched *s = test_sched(2, 32);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = N;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "hang", hang, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK(WAIT_UNTIL(atomic_load(&running) == N, 30000));

    CHECK_EQ(ax_shutdown(s, 0), 0);
    int rc = ax_redis_consumer_stop(c, 2000);
    ax_redis_consumer_stats st;
    CHECK_EQ(ax_redis_consumer_stats_get(c, &st), 0);
    fprintf(stderr, "stop rc=%d (%s) pulled %llu abandoned %llu held %llu\n", rc,
            rc ? ax_error_detail() : "", (unsigned long long)st.pulled,
            (unsigned long long)st.abandoned, (unsigned long long)st.held);
    CHECK_EQ(rc, 0);
    CHECK_EQ(st.pulled, N);
    CHECK_EQ(st.abandoned, N);
    CHECK_EQ(st.held, 0);
    /* Handed back through the queue's connection (the scheduler is not
     * touched: it may be freed): pending still, claimable at once. */
    CHECK_EQ(st.handed_back, N);
    CHECK_EQ(st.pulled + st.claimed,
             st.succeeded + st.retried + st.dead + st.ack_lost + st.abandoned + st.held);
    ax_redis_queue_stats qs;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 2000, &qs), 0);
    CHECK_EQ(qs.pending[AX_PRIO_NORMAL], N);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    return 0;
}
