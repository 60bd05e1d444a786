/* Configuration refused up front (AX_EINVAL naming the field) instead of
 * failing later: a host name (no DNS: every call would fail "host is not
 * a numeric address"), and claim_interval_ms >= visibility_ms / 2 (the
 * heartbeat would not keep a running message from being taken over). */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

int main(void)
{
    ax_redis_config rc;
    ax_redis_config_default(&rc);
    ax_redis *r;
    rc.host = "redis.local";
    CHECK_EQ(ax_redis_new(&rc, &r), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "host"));
    printf("%s\n", ax_error_detail());
    rc.host = "localhost";
    CHECK_EQ(ax_redis_new(&rc, &r), 0);
    ax_redis_free(r);
    rc.host = "::1";
    CHECK_EQ(ax_redis_new(&rc, &r), 0);
    ax_redis_free(r);
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "cfg";
    qc.conn.host = "redis.local";
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), AX_EINVAL);
    qc.conn.host = "127.0.0.1";
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0); /* no I/O yet */
    ax_sched *s = test_sched(1, 8);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    ax_redis_consumer *c;
    cc.visibility_ms = 1000;
    cc.claim_interval_ms = 500;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "claim_interval_ms"));
    printf("%s\n", ax_error_detail());
    cc.claim_interval_ms = 499;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    ax_redis_consumer_free(c);
    ax_free(s);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
