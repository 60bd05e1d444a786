/* A NULL ax_redis_config.host means the documented default 127.0.0.1
 * (it used to be refused: "host is empty"), for a connection and a queue. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

int main(void)
{
    int port = rs_start();
    ax_redis_config rc;
    ax_redis_config_default(&rc);
    rc.host = NULL;
    rc.port = (uint16_t)port;
    ax_redis *r;
    CHECK_EQ(ax_redis_new(&rc, &r), 0);
    redisReply *rep;
    CHECK_EQ(ax_redis_command(NULL, r, -1, &rep, "PING"), 0);
    CHECK(rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0);
    freeReplyObject(rep);
    ax_redis_free(r);
    rc.host = "";
    CHECK_EQ(ax_redis_new(&rc, &r), AX_EINVAL);
    /* (review) An empty unix_path was taken, to fail later with AX_ENET. */
    rc.host = NULL;
    rc.unix_path = "";
    CHECK_EQ(ax_redis_new(&rc, &r), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "unix_path is empty") != NULL);
    rc.unix_path = NULL;
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "nullhost";
    qc.conn.host = NULL;
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    CHECK_EQ(ax_redis_submit(NULL, q, &(ax_redis_spec){.kind = "k", .timeout_ms = 1000}, -1, NULL),
             0);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
