/* libax_redis consumer: quota rounds across the three streams, as local
 * dispatch (tests/test_quota.c): one consumer holding one message at a
 * time, quotas 2/1/1, L×4 N×4 H×4 queued first: the handlers run
 * H H N L H H N L N L N L. Every message is acknowledged exactly once and
 * leaves its stream. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static char order[64];
static atomic_int norder;
static char ids[12][AX_REDIS_ID_MAX];
static uint64_t submit_start_ms;

static int record(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)arg;
    static const char name[] = {[AX_PRIO_HIGH] = 'H', [AX_PRIO_NORMAL] = 'N', [AX_PRIO_LOW] = 'L'};
    int i = atomic_load(&norder);
    order[i] = name[m->priority];
    CHECK_EQ(m->len, 2);
    CHECK_EQ(((const char *)m->payload)[0], order[i]); /* the payload names its priority */
    CHECK_EQ(m->attempt, 0);
    CHECK_EQ(m->deliveries, 1);
    CHECK_STR(m->id + 2, m->entry_id); /* "h:" + the entry */
    CHECK_EQ(m->id[0], order[i] == 'H' ? 'h' : order[i] == 'N' ? 'n' : 'l');
    CHECK_STR(m->kind, "rec");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
    CHECK_LE(submit_start_ms, m->submitted_ms); /* one machine: one clock */
    CHECK_LE(m->submitted_ms, now_ms);
    snprintf(ids[i], sizeof ids[i], "%s", m->id);
    atomic_store(&norder, i + 1);
    return 0;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "quota";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    submit_start_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    char sub[12][AX_REDIS_ID_MAX];
    int ns = 0;
    const ax_priority ps[3] = {AX_PRIO_LOW, AX_PRIO_NORMAL, AX_PRIO_HIGH};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 4; i++) {
            const char *pl = ps[k] == AX_PRIO_HIGH ? "H" : ps[k] == AX_PRIO_NORMAL ? "N" : "L";
            ax_redis_spec sp = {.kind = "rec", .priority = ps[k], .payload = pl, .len = 2,
                                .timeout_ms = 5000, .trace_id = "tr-1"};
            CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, sub[ns++]), 0);
        }

    ax_sched *s = test_sched(1, 2);
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, NULL, &c), 0);
    CHECK_EQ(ax_redis_consumer_start(c), AX_EINVAL); /* no room for a message */
    CHECK(strstr(ax_error_detail(), "max_concurrency 2 < 3") != NULL);
    ax_redis_consumer_free(c);
    ax_redis_consumer_config bad;
    ax_redis_consumer_config_default(&bad);
    bad.name = "a \"quoted\" name";
    CHECK_EQ(ax_redis_consumer_new(s, q, &bad, &c), AX_EINVAL);
    ax_free(s);
    s = test_sched(1, 3); /* the puller, the acker, one message */
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 1;
    cc.name = "q1";
    cc.quota_high = 2;
    cc.quota_normal = 1;
    cc.low_guaranteed = 1;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "rec", record, NULL), 0);
    CHECK_EQ(ax_redis_handle(c, "rec", record, NULL), AX_EBUSY);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK_EQ(ax_redis_handle(c, "other", record, NULL), AX_ESTATE);
    CHECK(WAIT_UNTIL(atomic_load(&norder) == 12, 30000));
    CHECK_STR(order, "HHNLHHNLNLNL");
    ax_redis_consumer_stats st;
    /* An outcome is counted just before the message leaves held: both. */
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.succeeded == 12 && st.held == 0),
                     10000));
    CHECK_EQ(st.pulled, 12);
    CHECK_EQ(st.held, 0);
    CHECK_EQ(st.claimed, 0);
    CHECK_EQ(st.redelivered, 0);
    CHECK_EQ(st.ack_lost, 0);
    char text[4096];
    long need = ax_redis_consumer_prometheus(c, NULL, 0);
    CHECK_EQ(ax_redis_consumer_prometheus(c, text, sizeof text), need);
    CHECK_LE(need, (long)sizeof text - 1);
    char want[128];
    snprintf(want, sizeof want, "ax_redis_consumer_succeeded_total{queue=\"quota\",consumer=\"%s\"} 12\n",
             "q1");
    CHECK(strstr(text, want) != NULL);
    CHECK(strstr(text, "# TYPE ax_redis_consumer_held gauge\n") != NULL);
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    /* Each submitted id ran once. */
    for (int i = 0; i < 12; i++) {
        int seen = 0;
        for (int k = 0; k < 12; k++)
            seen += strcmp(sub[i], ids[k]) == 0;
        CHECK_EQ(seen, 1);
    }
    redisContext *rc = rs_connect();
    CHECK_EQ(rs_int(rc, "HGET ax:{quota}:stats succeeded"), 12);
    const char *streams[] = {"high", "normal", "low"};
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(rs_int(rc, "XLEN ax:{quota}:%s", streams[k]), 0);
        redisReply *r = redisCommand(rc, "XPENDING ax:{quota}:%s ax", streams[k]);
        CHECK(r && r->type == REDIS_REPLY_ARRAY);
        CHECK_EQ(r->element[0]->integer, 0);
        freeReplyObject(r);
    }
    redisFree(rc);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    return 0;
}
