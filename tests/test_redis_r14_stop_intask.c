/* ax_redis_consumer_stop called from one of the consumer's handlers used
 * to block the worker for its timeout, then fail AX_ETIMEDOUT ("a consumer
 * task did not end"). It returns AX_ESTATE at once now, nothing stopped. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static ax_redis_consumer *C;
static atomic_int fired, stop_rc = 1;
static _Atomic uint64_t took_ms;

static int h(ax_task *t, const ax_redis_msg *m, void *a)
{
    (void)t;
    (void)m;
    (void)a;
    if (atomic_exchange(&fired, 1) == 0) {
        uint64_t t0 = test_now_ms();
        atomic_store(&stop_rc, ax_redis_consumer_stop(C, 2000));
        atomic_store(&took_ms, test_now_ms() - t0);
        printf("stop from handler: %d %s\n", atomic_load(&stop_rc), ax_error_detail());
    }
    return 0;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "intask";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_redis_spec sp = {.kind = "work", .timeout_ms = 5000};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 1000, NULL), 0);
    ax_sched *s = test_sched(1, 8);
    CHECK_EQ(ax_redis_consumer_new(s, q, NULL, &C), 0);
    CHECK_EQ(ax_redis_handle(C, "work", h, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(C), 0);
    ax_redis_consumer_stats st;
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(C, &st), st.succeeded == 3), 5000));
    CHECK_EQ(atomic_load(&stop_rc), AX_ESTATE);
    CHECK(atomic_load(&took_ms) < 1000); /* refused at once, not after its 2 s bound */
    /* not stopped: it still runs what comes */
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 1000, NULL), 0);
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(C, &st), st.succeeded == 4), 5000));
    CHECK_EQ(ax_redis_consumer_stop(C, 1000), 0);
    ax_free(s);
    ax_redis_consumer_free(C);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
