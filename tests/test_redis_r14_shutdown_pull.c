/* ax_shutdown while a consumer runs: its puller used to go on pulling
 * through the drain (200 pulled with 16 slots), each message refused
 * AX_ESHUTDOWN by the local ax_submit and left pending, one of its
 * max_deliveries used up each time. Now the first refusal stops the
 * pulling; the refused messages are handed back through the delayed set
 * (no delivery left pending), and the consumer's stats add up:
 * pulled + claimed = succeeded + retried + dead + ack_lost + abandoned + held. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static int slow(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m;
    (void)arg;
    return ax_sleep(t, 300);
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "shutpull";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    enum { N = 200, SLOTS = 16 };
    ax_redis_spec sp[N];
    int rcs[N];
    for (int i = 0; i < N; i++)
        sp[i] = (ax_redis_spec){.kind = "work", .timeout_ms = 2000};
    CHECK_EQ(ax_redis_submit_batch(NULL, q, sp, N, 2000, rcs, NULL), 0);
    ax_sched *s = test_sched(2, 64);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = SLOTS;
    cc.visibility_ms = 2000;
    cc.claim_interval_ms = 250;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "work", slow, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    usleep(500000);
    int src = ax_shutdown(s, 1000);
    printf("shutdown rc=%d %s\n", src, src ? ax_error_detail() : "");
    /* A consumer made after ax_shutdown is refused at once, not first at
     * its start; out stays NULL. */
    ax_redis_consumer *late = (ax_redis_consumer *)&late;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &late), AX_ESHUTDOWN);
    CHECK(late == NULL);
    CHECK(strstr(ax_error_detail(), "ax_redis_consumer_new: the scheduler is shutting down"));
    int rc = ax_redis_consumer_stop(c, 1000);
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(c, &st);
    printf("stop rc=%d pulled=%" PRIu64 " claimed=%" PRIu64 " succeeded=%" PRIu64
           " retried=%" PRIu64 " dead=%" PRIu64 " ack_lost=%" PRIu64 " abandoned=%" PRIu64
           " held=%" PRIu64 "\n",
           rc, st.pulled, st.claimed, st.succeeded, st.retried, st.dead, st.ack_lost, st.abandoned,
           st.held);
    /* Pulling stopped at the first refusal: at most the slots freed during
     * the drain's first moments plus one read's worth, far from all 200. */
    CHECK(st.pulled <= 4 * SLOTS);
    CHECK_EQ(st.pulled + st.claimed,
             st.succeeded + st.retried + st.dead + st.ack_lost + st.abandoned + st.held);
    ax_redis_queue_stats qs;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 1000, &qs), 0);
    uint64_t pending = qs.pending[0] + qs.pending[1] + qs.pending[2];
    printf("queue: pending=%" PRIu64 " delayed=%" PRIu64 " succeeded=%" PRIu64 "\n", pending,
           qs.delayed, qs.succeeded);
    /* only what ax_shutdown cancelled mid-run (abandoned) or the consumer
     * still holds stays pending; none of the refused ones */
    CHECK(pending <= st.abandoned + st.held);
    CHECK_EQ(qs.succeeded + qs.length[0] + qs.length[1] + qs.length[2] + qs.delayed, (uint64_t)N);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
