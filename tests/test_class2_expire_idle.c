/* test_class2_expire_idle.c - a parked task past its queue-time budget
 * ends only when its class next has room, not "now".
 *
 * sched.c sched_expire_parked_locked says: "Parked jobs past their
 * queue-time budget end now rather than when their class next has room
 * (which may be a long attempt away)". It runs only inside dispatch's lock
 * section (worker.c), and dispatch's fast path skips that section when
 * nothing is due in the scheduler's wheel, hint_queued is 0 (parked jobs
 * are not in it) and unpark_pending is clear -- exactly the state of a
 * class whose only work is parked behind a long attempt. No timer is armed
 * for the budget. So the parked task ends (AX_EEXPIRED) when the long
 * attempt ends: here 3 s instead of 100 ms; with the seed's degraded
 * upstream, a whole timeout late.
 *
 * Here: class limit 1, queue budget 100 ms. A task holds the class 3 s
 * (it wakes its worker every 5 ms); task A is parked. Expected: A ends
 * FAILED/AX_EEXPIRED within 1.5 s while the holder still runs.
 */
#include "class_common.h"

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("up");
    c.limit_max = 1;
    c.queue_budget = true;
    c.queue_budget_ms = 100;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));

    ax_spec a = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);
    uint64_t t0 = test_now_ms();
    bool ended = WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 1500);
    fprintf(stderr, "parked task with a 100 ms budget: ended=%d after %llu ms (holder running)\n",
            ended, (unsigned long long)(test_now_ms() - t0));
    usleep(1500 * 1000); /* the holder's 3 s */
    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 5000));
    fprintf(stderr, "A: state %d code %d\n", rc_last[0].state, rc_last[0].code);
    CHECK_EQ(rc_last[0].code, AX_EEXPIRED);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    CHECK(ended);
    return 0;
}
