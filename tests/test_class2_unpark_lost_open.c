/* test_class2_unpark_lost_open.c - the breaker variant of
 * test_class2_unpark_lost: tasks parked behind a class's limit when its
 * breaker opens stay parked for ever (not failed fast, not probed).
 *
 * The holder's failure opens the breaker (class_attempt_done, then its
 * place frees: room_made). One parked job per priority is unparked for the
 * room of 1; at the pick its breaker is open: CLASS_END_OPEN, it ends
 * AX_EOPEN without taking the place. The class now has room and nothing
 * in flight, but its `unpark` flag was spent: nothing calls room_made
 * again, the rest stay parked past open_ms and through half-open. They
 * should have failed fast (the breaker is open: commit 20eb56f "an open
 * breaker fails fast even when the class is at its limit") or, once
 * half-open, run as probes.
 *
 * Here: class limit 1, breaker (1 call, 50 %, open 200 ms, 1 probe). A task
 * holds the class and fails when released; P1, P2, P3 (NORMAL) wait
 * parked. Expected: within 1.5 s of the failure all three have ended
 * (AX_EOPEN, or SUCCEEDED as a half-open probe and after it).
 */
#include "class_common.h"

static int hold_then_fail(ax_task *t, void *arg)
{
    atomic_int *release = arg;
    atomic_fetch_add(&rc_running, 1);
    while (!atomic_load(release))
        if (ax_sleep(t, 5))
            break;
    return 7;
}

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("up");
    c.limit_max = 1;
    c.breaker = true;
    c.breaker_min_calls = 1;
    c.breaker_failure_rate = 0.5;
    c.breaker_window_ms = 10000;
    c.breaker_open_ms = 200;
    c.breaker_half_open_calls = 1;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    ax_spec hold = {.fn = hold_then_fail, .arg = &release, .class_id = id,
                    .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
    for (int i = 0; i < 3; i++) {
        ax_spec q = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    usleep(100 * 1000);
    CHECK_EQ(rc_cstats(s, id).queued, 3);
    atomic_store(&release, 1);

    bool ok = WAIT_UNTIL(atomic_load(&rc_done_n) == 4, 1500);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr,
            "1.5 s after the failure: done=%d breaker=%s in_flight=%u queued=%llu "
            "open_refused=%llu succeeded=%llu\n",
            atomic_load(&rc_done_n), ax_breaker_state_name(st.breaker), st.in_flight,
            (unsigned long long)st.queued, (unsigned long long)st.breaker_rejected,
            (unsigned long long)st.succeeded);
    CHECK_EQ(ax_shutdown(s, 5000), 0); /* ends the stuck ones CANCELLED */
    CHECK_EQ(atomic_load(&rc_done_n), 4);
    ax_free(s);
    CHECK(ok);
    return 0;
}
