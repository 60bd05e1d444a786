/* test_class_watchdog_expire.c - a parked job's queue-time budget ending
 * while every worker is held.
 *
 * The defect (found by test_class on a busy machine): the scheduler's
 * wheel is expired by a worker's dispatch, or by the watchdog when no
 * worker did within HOLD_MS of an expiry (all held). The watchdog's path
 * finished every job sched_expire_locked ended as TIMED_OUT "deadline
 * passed before it could run" -- also the class jobs it ended FAILED
 * (queue-time budget: AX_EEXPIRED; breaker open: AX_EOPEN): the wrong
 * state, code and text in on_done, a terminal state other than the job's
 * own, and the class's expired counter not counted.
 *
 * Here: one worker; class "q" with a fixed limit of 1 and a 100 ms
 * queue-time budget. The holder takes the class's place, lets the worker
 * park the second task (it sleeps, so the worker dispatches), then spins
 * without yielding for 1 s: the worker is held, the parked task's budget
 * timer comes due, and only the watchdog can end it.
 */
#include "class_common.h"

static atomic_int b_submitted, b_ran;

static int holder(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&b_submitted))
        if (ax_sleep(t, 5))
            return 1;
    /* Two loop iterations of the worker: the second task is dispatched,
     * finds its class at its limit and is parked. */
    ax_sleep(t, 20);
    ax_sleep(t, 20);
    uint64_t end = ax_now_ns() + 1000000000ull;
    while (ax_now_ns() < end)
        ; /* held: no yield */
    return 0;
}

static int second(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&b_ran, 1);
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = rc_plain("q");
    c.limit_max = 1; /* adaptive off (rc_plain): a fixed limit */
    c.queue_budget = true;
    c.queue_budget_ms = 100;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    ax_spec a = {.fn = holder, .class_id = id, .timeout_ms = 20000, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 1, 10000));
    ax_spec b = {.fn = second, .class_id = id, .timeout_ms = 20000, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &b, NULL), AX_OK);
    atomic_store(&b_submitted, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 2, 20000));

    /* The second ended first (the holder spins for 1 s). */
    const ax_result *r = &rc_last[0];
    fprintf(stderr, "second task: state %d code %d: %s (waited %llu ms)\n", (int)r->state, r->code,
            r->error, (unsigned long long)(r->wait_ns / 1000000u));
    CHECK_EQ(atomic_load(&b_ran), 0);
    CHECK_EQ(r->state, AX_STATE_FAILED);
    CHECK_EQ(r->code, AX_EEXPIRED);
    CHECK(strstr(r->error, "queue-time budget of 100 ms") != NULL);
    CHECK_EQ(r->run_ns, 0u);
    CHECK_EQ(rc_last[1].state, AX_STATE_SUCCEEDED);
    ax_class_stats st = rc_cstats(s, id);
    CHECK_EQ(st.expired, 1u);
    CHECK_EQ(st.failed, 1u);
    CHECK_EQ(st.timed_out, 0u);
    CHECK_EQ(st.succeeded, 1u);
    ax_stats gs;
    CHECK_EQ(ax_stats_get(s, &gs), AX_OK);
    CHECK_EQ(gs.failed, 1u);
    CHECK_EQ(gs.timed_out, 0u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
