/* timeout_ms == 0 used to make every call time out ("no answer within
 * 0 ms"), some submits admitted all the same. It is AX_EINVAL at entry
 * now, nothing sent, for every call that takes one. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "t0";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_redis_spec sp = {.kind = "work", .timeout_ms = 1000};
    char id[AX_REDIS_ID_MAX];
    for (int i = 0; i < 50; i++) {
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 0, id), AX_EINVAL);
        CHECK(strstr(ax_error_detail(), "timeout_ms"));
    }
    printf("%s\n", ax_error_detail());
    ax_redis_spec b[4] = {sp, sp, sp, sp};
    int rcs[4];
    CHECK_EQ(ax_redis_submit_batch(NULL, q, b, 4, 0, rcs, NULL), AX_EINVAL);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(rcs[i], AX_EINVAL);
    ax_redis_queue_stats st;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 0, &st), AX_EINVAL);
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, -1, &st), 0);
    CHECK_EQ(st.length[0] + st.length[1] + st.length[2], 0); /* nothing admitted */
    ax_redis_config rc;
    ax_redis_config_default(&rc);
    rc.port = (uint16_t)port;
    ax_redis *r;
    CHECK_EQ(ax_redis_new(&rc, &r), 0);
    redisReply *rep = NULL;
    CHECK_EQ(ax_redis_command(NULL, r, 0, &rep, "PING"), AX_EINVAL);
    const char *argv[] = {"PING"};
    CHECK_EQ(ax_redis_command_argv(NULL, r, 0, &rep, 1, argv, NULL), AX_EINVAL);
    CHECK_EQ(ax_redis_command(NULL, r, 1000, &rep, "PING"), 0);
    freeReplyObject(rep);
    ax_redis_free(r);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
