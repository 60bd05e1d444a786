/* test_class_stale_open.c - the stale END_BUDGET of a losing
 * retry decision (see test_class_budget_stale.c) turns a back-off
 * that reaches the task's deadline into "FAILED, AX_EOPEN, circuit breaker
 * open" -- for a class whose breaker is switched off.
 *
 * Attempt 0 times out at 50 ms; the worker's decision wins (RETRYING, the
 * one retry of the budget); the orphan's return decides again, is denied,
 * writes end_why = END_BUDGET, loses its CAS. The back-off (100 ms) is
 * capped at the deadline (120 ms): sched_expire_locked ends the job
 * TIMED_OUT in the state word and puts it on dispatch's `ended` list; there
 * worker.c:219 tests end_why == END_DEADLINE, which fails, so it takes the
 * class branch: code = end_why == END_EXPIRED ? AX_EEXPIRED : AX_EOPEN ->
 * AX_EOPEN, finish_attempt(JS_FAILED), open_refused + 1.
 *
 * Expected: TIMED_OUT, AX_ETIMEDOUT, breaker_rejected 0, and no "retry
 * budget" in the error (the one retry it had was allowed and ran).
 */
#include "class_common.h"

static int slow(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 5000);
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = rc_plain("stale2");
    c.timeout_ms = 50;
    c.max_retry = 1;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 100, 100, 0};
    c.retry_budget = true;
    c.retry_budget_ratio = 0;
    c.retry_budget_window_ms = 3600000;
    c.retry_budget_min_per_s = 1.0 / 3600; /* exactly one retry per window */
    c.breaker = false;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    ax_spec sp = {.fn = slow, .class_id = id, .on_done = rc_on_done,
                  .deadline_ns = ax_now_ns() + 120 * 1000000ull};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 10000));
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "state=%s code=%d (%s) error=\"%s\" breaker_rejected=%llu\n",
            ax_state_name(rc_last[0].state), rc_last[0].code, ax_strerror(rc_last[0].code),
            rc_last[0].error, (unsigned long long)st.breaker_rejected);
    CHECK_EQ(rc_last[0].state, AX_STATE_TIMED_OUT);
    CHECK_EQ(rc_last[0].code, AX_ETIMEDOUT);
    CHECK_EQ(st.breaker_rejected, 0u);
    /* (When the watchdog's expire_jobs ends it instead -- slower workers,
     * TSan -- it is TIMED_OUT but its error still says the budget denied a
     * retry that happened.) */
    CHECK(strstr(rc_last[0].error, "retry budget") == NULL);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
