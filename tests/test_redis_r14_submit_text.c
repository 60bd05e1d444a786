/* ax_redis_submit used to accept a trace_id that is not valid UTF-8 (and
 * C1 control characters) which the consumer's local ax_submit then refused,
 * dead-lettering the message unrun. It is refused at submit now, AX_EINVAL
 * naming the field, with the rules of ax_spec.trace_id; kind too, and a
 * timeout_ms over one year. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static int einval(ax_redis_queue *q, ax_redis_spec sp, const char *field)
{
    char id[AX_REDIS_ID_MAX];
    int rc = ax_redis_submit(NULL, q, &sp, 1000, id);
    printf("rc=%d %s\n", rc, rc ? ax_error_detail() : id);
    CHECK_EQ(rc, AX_EINVAL);
    CHECK(strstr(ax_error_detail(), field));
    return 0;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "text";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_redis_spec ok = {.kind = "work", .timeout_ms = 1000};
    einval(q, (ax_redis_spec){.kind = "work", .timeout_ms = 1000, .trace_id = "bad\xff"},
           "trace_id");
    einval(q, (ax_redis_spec){.kind = "work", .timeout_ms = 1000, .trace_id = "c1\xc2\x85x"},
           "trace_id");
    einval(q, (ax_redis_spec){.kind = "work", .timeout_ms = 1000, .trace_id = "ov\xc0\xaf"},
           "trace_id");
    einval(q, (ax_redis_spec){.kind = "wo\xe2\x82", .timeout_ms = 1000}, "kind");
    einval(q, (ax_redis_spec){.kind = "wo\nrk", .timeout_ms = 1000}, "kind");
    einval(q, (ax_redis_spec){.kind = "work", .timeout_ms = 366ull * 24 * 3600 * 1000},
           "timeout_ms");
    /* valid UTF-8 is fine */
    char id[AX_REDIS_ID_MAX];
    ok.trace_id = "tr\xc3\xa9-\xe2\x82\xac";
    CHECK_EQ(ax_redis_submit(NULL, q, &ok, 1000, id), 0);
    ax_redis_queue_stats st;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 1000, &st), 0);
    CHECK_EQ(st.length[AX_PRIO_HIGH] + st.length[AX_PRIO_NORMAL] + st.length[AX_PRIO_LOW], 1);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
