/* libax_redis and ASK: a queue's hash slot migrated from node A to node B
 * of a 3-node Redis Cluster, the queue's connections pointed at A.
 *
 * Midway (A MIGRATING, B IMPORTING; the NORMAL stream already moved to B,
 * the HIGH stream still on A), A answers ASK for every key it no longer
 * holds. A command on such a key is sent once to B after ASKING and its
 * answer is the command's; the connection stays on A (CLUSTER MYID through
 * it names A afterwards), which still serves the HIGH stream:
 *  - ax_redis_command: XLEN of the moved stream is its length on B;
 *  - ax_redis_queue_stats_get (one pipeline, each key on its node): the
 *    lengths of both streams, the moved one from B.
 * A submit then (a script over keys on both nodes) fails with AX_ENET
 * (TRYAGAIN: Redis refuses a multi-key command split by a migration) and
 * its caller retries. Once the slot is B's (CLUSTER SETSLOT NODE), MOVED
 * re-points the connections: a consumer pointed at A runs every message,
 * each recorded once. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

enum { NODES = 3, N_NORMAL = 10, N_HIGH = 5 };

static atomic_int runs;

static int work(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)m, (void)arg;
    atomic_fetch_add(&runs, 1);
    return 0;
}

static redisContext *node(int port)
{
    rs_port = port;
    return rs_connect();
}

/* A status or string reply of the node on `port`, into out. */
static void node_cmd(redisContext *c, char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    CHECK(r != NULL);
    if (r->type == REDIS_REPLY_ERROR) fprintf(stderr, "%s: %s\n", fmt, r->str);
    CHECK(r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING);
    if (out) snprintf(out, cap, "%s", r->str);
    freeReplyObject(r);
}

int main(void)
{
    int ports[NODES];
    rs_cluster_start(NODES, ports);
    redisContext *c0 = node(ports[0]);
    long long slot = rs_int(c0, "CLUSTER KEYSLOT ax:{ask}:normal");
    redisFree(c0);
    int a_port = rs_cluster_owner(ports[0], slot);
    int b_port = a_port == ports[0] ? ports[1] : ports[0];
    CHECK(a_port > 0);
    redisContext *a = node(a_port), *b = node(b_port);
    char a_id[64], b_id[64];
    node_cmd(a, a_id, sizeof a_id, "CLUSTER MYID");
    node_cmd(b, b_id, sizeof b_id, "CLUSTER MYID");

    /* The queue, on A (the submit script makes its streams and groups). */
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "ask";
    qc.conn.port = (uint16_t)a_port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    for (int i = 0; i < N_NORMAL + N_HIGH; i++) {
        ax_redis_spec sp = {.kind = "w",
                            .priority = i < N_NORMAL ? AX_PRIO_NORMAL : AX_PRIO_HIGH,
                            .timeout_ms = 60000};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }

    /* Midway through a migration A -> B: the NORMAL stream moved. */
    node_cmd(b, NULL, 0, "CLUSTER SETSLOT %lld IMPORTING %s", slot, a_id);
    node_cmd(a, NULL, 0, "CLUSTER SETSLOT %lld MIGRATING %s", slot, b_id);
    node_cmd(a, NULL, 0, "MIGRATE 127.0.0.1 %d ax:{ask}:normal 0 5000", b_port);
    redisReply *rr = redisCommand(a, "XLEN ax:{ask}:normal");
    CHECK(rr && rr->type == REDIS_REPLY_ERROR && strncmp(rr->str, "ASK ", 4) == 0);
    freeReplyObject(rr);

    /* One connection: the command goes to B after ASKING; it stays on A. */
    ax_redis_config rcfg;
    ax_redis_config_default(&rcfg);
    rcfg.port = (uint16_t)a_port;
    ax_redis *r;
    CHECK_EQ(ax_redis_new(&rcfg, &r), 0);
    redisReply *rep;
    CHECK_EQ(ax_redis_command(NULL, r, 5000, &rep, "XLEN ax:{ask}:normal"), 0);
    CHECK_EQ(rep->type, REDIS_REPLY_INTEGER);
    CHECK_EQ(rep->integer, N_NORMAL);
    freeReplyObject(rep);
    CHECK_EQ(ax_redis_command(NULL, r, 5000, &rep, "XLEN ax:{ask}:high"), 0);
    CHECK_EQ(rep->type, REDIS_REPLY_INTEGER);
    CHECK_EQ(rep->integer, N_HIGH);
    freeReplyObject(rep);
    CHECK_EQ(ax_redis_command(NULL, r, 5000, &rep, "CLUSTER MYID"), 0);
    CHECK_STR(rep->str, a_id); /* not re-pointed */
    freeReplyObject(rep);

    /* The queue's pipelined stats: each key answered by its node. */
    ax_redis_queue_stats st;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 5000, &st), 0);
    CHECK_EQ(st.length[AX_PRIO_NORMAL], N_NORMAL);
    CHECK_EQ(st.length[AX_PRIO_HIGH], N_HIGH);
    CHECK_EQ(st.length[AX_PRIO_LOW], 0);
    CHECK_EQ(st.pending[AX_PRIO_NORMAL], 0);

    /* A submit's script spans both nodes now: refused, retried by its caller. */
    ax_redis_spec sp = {.kind = "w", .timeout_ms = 60000};
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), AX_ENET);
    printf("submit mid-migration: %s\n", ax_error_detail());
    CHECK(strstr(ax_error_detail(), "TRYAGAIN") != NULL);

    /* The rest of the slot's keys, then the slot, to B. */
    for (;;) {
        redisReply *keys = redisCommand(a, "CLUSTER GETKEYSINSLOT %lld 100", slot);
        CHECK(keys && keys->type == REDIS_REPLY_ARRAY);
        size_t n = keys->elements;
        for (size_t i = 0; i < n; i++)
            node_cmd(a, NULL, 0, "MIGRATE 127.0.0.1 %d %s 0 5000", b_port, keys->element[i]->str);
        freeReplyObject(keys);
        if (n == 0) break;
    }
    for (int i = 0; i < NODES; i++) {
        redisContext *c = node(ports[i]);
        node_cmd(c, NULL, 0, "CLUSTER SETSLOT %lld NODE %s", slot, b_id);
        redisFree(c);
    }

    /* MOVED from A now: a consumer pointed at A runs every message. */
    ax_sched *s = test_sched(2, 10);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 8;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "w", work, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK(WAIT_UNTIL(rs_int(b, "HGET ax:{ask}:stats succeeded") == N_NORMAL + N_HIGH, 60000));
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    CHECK_EQ(atomic_load(&runs), N_NORMAL + N_HIGH);
    CHECK_EQ(rs_int(b, "XLEN ax:{ask}:normal"), 0);
    CHECK_EQ(rs_int(b, "XLEN ax:{ask}:high"), 0);
    CHECK_EQ(rs_int(b, "HGET ax:{ask}:stats dead"), 0);

    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_free(r);
    ax_redis_queue_free(q);
    redisFree(a);
    redisFree(b);
    return 0;
}
