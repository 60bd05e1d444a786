/* Entries written into a queue's stream by hand (or by another program)
 * that do not fit a message's limits are dead-lettered with an error that
 * names the field, and never run under a cut or emptied identity.
 *
 * An origin id (field o, the handler's idempotency key) longer than
 * AX_REDIS_ID_MAX - 1 bytes was emptied: the handler ran with id "", so
 * every such message shared one idempotency key (a new user's trial). A
 * kind over AX_REDIS_KIND_MAX - 1 bytes was dead-lettered as "no kind".
 */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int ran, empty_ids;
static char seen_id[AX_REDIS_ID_MAX];

static int ok(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t;
    (void)arg;
    if (!m->id[0])
        atomic_fetch_add(&empty_ids, 1);
    else if (strcmp(m->kind, "ok") == 0 && m->len == 4 && memcmp(m->payload, "mine", 4) == 0)
        snprintf(seen_id, sizeof seen_id, "%s", m->id);
    atomic_fetch_add(&ran, 1);
    return 0;
}

int main(void)
{
    int port = rs_start();
    redisContext *rc = rs_connect();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "mf";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_redis_spec sp = {.kind = "ok", .timeout_ms = 5000};
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0); /* creates the stream and group */

    char longo[2][64], longk[80];
    memset(longk, 'k', sizeof longk - 1), longk[sizeof longk - 1] = 0;
    for (int i = 0; i < 2; i++) {
        memset(longo[i], 'o', sizeof longo[i] - 2);
        longo[i][sizeof longo[i] - 2] = (char)('0' + i); /* the same first 62 bytes */
        longo[i][sizeof longo[i] - 1] = 0;
        redisReply *r = redisCommand(rc, "XADD ax:{mf}:normal * k ok p x to 5000 o %s", longo[i]);
        CHECK(r && r->type == REDIS_REPLY_STRING);
        freeReplyObject(r);
    }
    redisReply *r = redisCommand(rc, "XADD ax:{mf}:normal * k %s p x to 5000", longk);
    CHECK(r && r->type == REDIS_REPLY_STRING);
    freeReplyObject(r);
    /* A hand-written entry whose o fits runs under it. */
    r = redisCommand(rc, "XADD ax:{mf}:normal * k ok p mine to 5000 o my-own-id-1");
    CHECK(r && r->type == REDIS_REPLY_STRING);
    freeReplyObject(r);

    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "c";
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "ok", ok, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK(WAIT_UNTIL(rs_int(rc, "HGET ax:{mf}:stats succeeded") +
                             rs_int(rc, "HGET ax:{mf}:stats dead") ==
                         5,
                     30000));
    CHECK_EQ(ax_redis_consumer_stop(c, 10000), 0);
    CHECK_EQ(atomic_load(&empty_ids), 0);
    CHECK_EQ(atomic_load(&ran), 2);
    CHECK_STR(seen_id, "my-own-id-1");
    CHECK_EQ(rs_int(rc, "HGET ax:{mf}:stats succeeded"), 2);
    CHECK_EQ(rs_int(rc, "HGET ax:{mf}:stats dead"), 3);

    r = redisCommand(rc, "XRANGE ax:{mf}:dead - +");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    int origin_errs = 0, kind_errs = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const char *e = rs_field(r->element[i]->element[1], "e");
        const char *o = rs_field(r->element[i]->element[1], "o");
        CHECK(e && o && o[0] == 'n' && o[1] == ':'); /* named by its entry */
        if (strstr(e, "malformed message: its origin id (field o)"))
            origin_errs++;
        else if (strstr(e, "malformed message: its kind (field k)"))
            kind_errs++;
        else
            fprintf(stderr, "unexpected dead letter error: %s\n", e);
    }
    CHECK_EQ(origin_errs, 2);
    CHECK_EQ(kind_errs, 1);
    freeReplyObject(r);

    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
