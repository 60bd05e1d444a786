/* test_class2_unpark_lost.c - a parked task stays parked for ever with
 * its class idle: the room it was unparked for was never used.
 *
 * sched.c sched_unpark_locked clears the class's `unpark` flag and moves
 * up to room = limit - in_flight jobs per priority back to their bucket.
 * If the first of them does not START at the pick but ENDS there -- past
 * its queue-time budget (CLASS_END_EXPIRED) or its breaker open
 * (CLASS_END_OPEN) -- it takes no in_flight place, so the room is still
 * there, but nothing sets the flag again: room_made (class.c) runs only on
 * an in_flight decrement or a limit raise, and the class has nothing in
 * flight. The jobs behind it stay parked with the class idle until some
 * new task of the class happens to run; none may ever come. (And the
 * dispatch fast path never runs sched_expire_parked_locked for them:
 * test_class2_expire_idle.) The breaker variant: the attempt whose failure
 * opens the breaker frees its place, one parked job per priority is
 * unparked and fails fast, every other parked job of the class stays
 * parked, past open_ms and half-open, for ever.
 *
 * Here: class limit 1, queue budget 2 s. A task holds the class; P1 is
 * parked at t=0, P2 at t=1.9 s; the holder is cancelled at t=2.1 s (its
 * place frees in one step: one room_made, after the decrement). P1 is past
 * its budget and ends AX_EEXPIRED (at the pick then; by its timer since);
 * P2 has 1.8 s of budget left and the class is idle. Expected: P2 runs
 * (SUCCEEDED) within 1 s.
 * (test_class2_unpark_lost_open: the breaker variant.)
 */
#include "class_common.h"

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("up");
    c.limit_max = 1;
    c.queue_budget = true;
    c.queue_budget_ms = 2000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id, .on_done = rc_on_done};
    uint64_t holder = 0;
    CHECK_EQ(ax_submit(s, &hold, &holder), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));

    uint64_t p1 = 0, p2 = 0;
    ax_spec a = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &a, &p1), AX_OK);
    usleep(1900 * 1000);
    CHECK_EQ(ax_submit(s, &a, &p2), AX_OK);
    usleep(200 * 1000);
    /* P1 may have ended already: parked jobs now expire at their budget's
     * end (a timer), not when their class next has room. */
    CHECK_LE(rc_cstats(s, id).queued, 2);
    CHECK_EQ(ax_cancel(s, holder), AX_OK);

    bool ok = WAIT_UNTIL(atomic_load(&rc_done_n) == 3, 1000);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr,
            "1 s after the holder was cancelled: done=%d in_flight=%u queued=%llu expired=%llu "
            "succeeded=%llu\n",
            atomic_load(&rc_done_n), st.in_flight, (unsigned long long)st.queued,
            (unsigned long long)st.expired, (unsigned long long)st.succeeded);
    CHECK_EQ(ax_shutdown(s, 5000), 0); /* ends a stuck P2 CANCELLED */
    CHECK_EQ(atomic_load(&rc_done_n), 3);
    ax_free(s);
    CHECK(ok);
    for (int i = 0; i < 3; i++) {
        if (rc_last[i].id == p1)
            CHECK_EQ(rc_last[i].code, AX_EEXPIRED);
        if (rc_last[i].id == p2)
            CHECK_EQ(rc_last[i].state, AX_STATE_SUCCEEDED);
    }
    return 0;
}
