/* test_redis_r13_class_id.c - ax_redis_handle_class takes a class id the
 * consumer's scheduler never registered, and every message of that kind
 * then fails at its local submit and is dead-lettered unrun.
 * (Named test_redis_* so that CMake links it with libax_redis.)
 *
 * Defect (branch cluster, 440410e): src/redis/consumer.c
 * ax_redis_handle_class (around line 318) validates the consumer, the kind
 * and fn, but stores class_id unchecked. dispatch() (around line 529) then
 * sets sp.class_id for each message of the kind, ax_submit refuses it
 * (class_resolve_spec: AX_EINVAL "spec.class_id 7 is not a registered
 * class"), and dispatch's `else if (rc)` branch makes it a failed attempt
 * ("local submit: ..."): retried through the delayed set up to max_retry,
 * then a dead letter -- the handler never runs. A configuration error
 * (a wrong id, an id from another scheduler) is reported as AX_OK and
 * turns into data loss to the dead-letter stream at run time. Class ids
 * are handed out by ax_class_register only, so an id cannot be valid later
 * without having been registered before (no reason to defer the check).
 *
 * Deterministic: no class registered; ax_redis_handle_class(c, "k", 7, ...)
 * returns AX_OK today (expected AX_EINVAL or AX_ENOTFOUND naming the
 * class). For the report, the test then shows the consequence: one message
 * of kind "k" (max_retry 0) is dead-lettered and the handler never ran.
 *
 * Fix: in ax_redis_handle_class, when class_id != 0, check it against
 * c->s (class_id <= ax_class_count(c->s), or ax_class_stats_get succeeding)
 * and fail with AX_ENOTFOUND / AX_EINVAL naming the id. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int ran;

static int handler(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)m, (void)arg;
    atomic_fetch_add(&ran, 1);
    return 0;
}

int main(void)
{
    rs_start();
    ax_sched *s = test_sched(2, 16);
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "r13cls";
    qc.conn.port = (uint16_t)rs_port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "r13";
    cc.slots = 8;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);

    CHECK_EQ(ax_class_count(s), 0u);
    int rc = ax_redis_handle_class(c, "k", 7, handler, NULL);
    if (rc == AX_OK) {
        /* What the accepted id does at run time. */
        CHECK_EQ(ax_redis_consumer_start(c), 0);
        ax_redis_spec sp = {.kind = "k", .priority = AX_PRIO_NORMAL, .timeout_ms = 10000};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
        ax_redis_consumer_stats st;
        memset(&st, 0, sizeof st);
        WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.dead + st.succeeded >= 1), 20000);
        fprintf(stderr, "ax_redis_handle_class(class 7, none registered) = AX_OK; "
                        "the message: dead %llu, succeeded %llu, handler ran %d times\n",
                (unsigned long long)st.dead, (unsigned long long)st.succeeded,
                atomic_load(&ran));
        ax_redis_consumer_stop(c, 5000);
    }
    CHECK(rc == AX_EINVAL || rc == AX_ENOTFOUND); /* fails: AX_OK */
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    ax_free(s);
    return 0;
}
