/* A healthy Redis, no traffic: redis_errors used to count the BUSYGROUP
 * answers of XGROUP CREATE on a queue whose groups exist (3 at each start)
 * and the call its stop cancelled (1). Neither is a failed Redis call. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static int h(ax_task *t, const ax_redis_msg *m, void *a)
{
    (void)t;
    (void)m;
    (void)a;
    return 0;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "busygroup";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    for (int run = 0; run < 2; run++) { /* the second finds the groups */
        ax_sched *s = test_sched(1, 8);
        ax_redis_consumer *c;
        CHECK_EQ(ax_redis_consumer_new(s, q, NULL, &c), 0);
        CHECK_EQ(ax_redis_handle(c, "work", h, NULL), 0);
        CHECK_EQ(ax_redis_consumer_start(c), 0);
        usleep(400000);
        ax_redis_consumer_stats st;
        ax_redis_consumer_stats_get(c, &st);
        printf("run %d: redis_errors=%" PRIu64 " running", run, st.redis_errors);
        CHECK_EQ(st.redis_errors, 0);
        CHECK_EQ(ax_redis_consumer_stop(c, 1000), 0);
        ax_redis_consumer_stats_get(c, &st);
        printf(", %" PRIu64 " stopped\n", st.redis_errors);
        CHECK_EQ(st.redis_errors, 0);
        ax_free(s);
        ax_redis_consumer_free(c);
    }
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
