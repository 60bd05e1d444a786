/* test_redis_r13_open_dispatch.c - a message whose kind's task class opens
 * its breaker while the message waits locally is dead-lettered without
 * ever running; the same refusal at submit hands it back.
 * (Named test_redis_* so that CMake links it with libax_redis.)
 *
 * Defect (ax_redis_handle_class, 440410e): include/ax_redis.h promises "A
 * message the class refuses at submit (AX_EOPEN: breaker open) is handed
 * back as a full bucket is" (OUT_REQUEUE: its attempt not counted), and
 * the consumer's doc: a message s refuses to admit (..., AX_EOPEN: s is busy
 * with other work) is handed back through the delayed set. But a message
 * already submitted and parked behind the class's limit is ended at
 * dispatch by the same breaker (src/sched.c first_startable_locked ->
 * class_end_locked END_OPEN -> class_finish_unstarted: FAILED, AX_EOPEN,
 * never started), and src/redis/consumer.c msg_done (around line 455)
 * treats every non-SUCCEEDED, non-CANCELLED result as a failed attempt
 * (fail_outcome): with its retries used up -- max_retry 0 here -- the
 * message goes to the dead-letter stream, its handler never having run.
 * Whether a message is dead-lettered or handed back depends only on
 * whether the breaker opened just before or just after its local submit.
 *
 * Deterministic: class "brk" (no adaptive limit, limit_max 1, breaker
 * min_calls 2, open 60 s); kind "f" always fails; 4 messages (max_retry
 * 0) pulled in one read, submitted at once: #1 runs and fails, #2 runs and
 * fails (the breaker records it before #2's class place is freed:
 * attempt_end calls class_attempt_done before job_slot_free) -> open; #3
 * and #4, parked, are ended AX_EOPEN at dispatch. Expected: the handler
 * ran twice, 2 dead letters, #3 and #4 handed back (they keep bouncing
 * while the breaker is open). Today: dead 4 (3/3 runs). With the consumer's
 * default quota_normal (slots / 3 = 2 per read) #3 and #4 arrive in the
 * next read, after the breaker opened, are refused at submit and handed
 * back: dead 2, retried 2 -- the same messages, the other outcome.
 *
 * Fix: in msg_done, a FAILED result with code AX_EOPEN (the class ended it
 * unstarted: r->run_ns == 0) is OUT_REQUEUE like an AX_EOPEN at submit. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int ran;

static int fails(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    atomic_fetch_add(&ran, 1);
    ax_task_set_error(t, "upstream down");
    return -1;
}

int main(void)
{
    rs_start();
    ax_sched *s = test_sched(1, 16);
    ax_class_config kc;
    ax_class_config_default(&kc);
    kc.name = "brk";
    kc.adaptive = false;
    kc.limit_max = 1;
    kc.retry_budget = false;
    kc.breaker = true;
    kc.breaker_failure_rate = 0.5;
    kc.breaker_min_calls = 2;
    kc.breaker_window_ms = 60000;
    kc.breaker_open_ms = 60000;
    unsigned cls;
    CHECK_EQ(ax_class_register(s, &kc, &cls), 0);

    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "r13open";
    qc.conn.port = (uint16_t)rs_port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    for (int i = 0; i < 4; i++) {
        ax_redis_spec sp = {.kind = "f", .priority = AX_PRIO_NORMAL, .timeout_ms = 20000};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "r13o";
    cc.slots = 8;
    cc.quota_normal = 8; /* all 4 in one read (the default quota is slots / 3) */
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle_class(c, "f", cls, fails, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);

    ax_redis_consumer_stats st;
    memset(&st, 0, sizeof st);
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.dead >= 2), 20000));
    usleep(1000000); /* #3 and #4 settle one way or the other */
    ax_redis_consumer_stats_get(c, &st);
    ax_class_stats ks;
    CHECK_EQ(ax_class_stats_get(s, cls, &ks), 0);
    fprintf(stderr, "handler ran %d, dead %llu, retried (handed back) %llu, class breaker "
                    "opened %llu, breaker_rejected %llu\n",
            atomic_load(&ran), (unsigned long long)st.dead, (unsigned long long)st.retried,
            (unsigned long long)ks.breaker_opened, (unsigned long long)ks.breaker_rejected);
    CHECK_EQ(atomic_load(&ran), 2);
    CHECK_EQ(ks.breaker_opened, 1);
    CHECK_EQ(st.dead, 2); /* fails: 4 -- two never ran */
    CHECK(st.retried >= 2);

    ax_redis_consumer_stop(c, 5000);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    ax_free(s);
    return 0;
}
