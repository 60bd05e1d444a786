/* test_class2_expire_head.c - a parked task past its queue-time budget is
 * not ended while an older parked task of its class is within its own.
 *
 * sched.c sched_expire_parked_locked ends parked jobs "oldest first: each
 * park list is in queue order": it stops at the first head that has not
 * expired. But the budget is per job (queue_budget_ms 0: the job's own
 * timeout, j->timeout_ns, fixed at submit), so the list is not in order of
 * expiry: after ax_class_set_timeout lowers the class's timeout (§4.2,
 * the operator's move in the incident), or with spec.timeout_ms set per
 * task, a younger job with the short budget sits behind an older one with
 * the long budget and waits -- past its budget -- for its class to have
 * room (commit 20eb56f: "Parked jobs past their queue-time budget end at
 * the next dispatch"). Re-parking at the tail (test_class2_fifo) breaks
 * the order assumption too.
 *
 * Here: class limit 1, queue budget = the timeout. A task holds the class.
 * A (timeout 10 s) is parked; the class timeout is lowered to 200 ms; B
 * (the class's timeout: 200 ms) is parked behind A. Classless tasks keep
 * dispatch busy every 20 ms. Expected: B ends FAILED/AX_EEXPIRED within
 * 1.5 s, while the holder still runs.
 */
#include "class_common.h"

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("up");
    c.limit_max = 1;
    c.queue_budget = true;
    c.queue_budget_ms = 0; /* each task's timeout */
    c.timeout_ms = 10000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));

    ax_spec a = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done}; /* 10 s */
    uint64_t ida = 0, idb = 0;
    CHECK_EQ(ax_submit(s, &a, &ida), AX_OK);
    usleep(20 * 1000);
    CHECK_EQ(ax_class_set_timeout(s, id, 200), AX_OK);
    ax_spec b = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done}; /* 200 ms */
    CHECK_EQ(ax_submit(s, &b, &idb), AX_OK);

    /* Dispatch lock sections every 20 ms for 1.5 s. */
    for (int i = 0; i < 75 && atomic_load(&rc_done_n) == 0; i++) {
        ax_spec x = {.fn = rc_noop, .timeout_ms = 1000};
        CHECK_EQ(ax_submit(s, &x, NULL), AX_OK);
        usleep(20 * 1000);
    }
    int done = atomic_load(&rc_done_n);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "1.5 s after B's 200 ms budget began: done=%d expired=%llu queued=%llu\n",
            done, (unsigned long long)st.expired, (unsigned long long)st.queued);
    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 2, 5000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    CHECK_EQ(done, 1);
    CHECK_EQ(rc_last[0].id, idb);
    CHECK_EQ(rc_last[0].code, AX_EEXPIRED);
    return 0;
}
