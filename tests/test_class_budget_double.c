/* test_class_budget_double.c - one timed-out attempt spends the
 * retry budget twice.
 *
 * finish_running always calls finish_decide before its CAS, and
 * finish_decide calls class_retry_allowed (which spends a retry) for every
 * FAILED / TIMED_OUT outcome that could be retried. When an attempt times
 * out, deadline_fired decides (spends 1, wins the CAS: RETRYING); then the
 * woken coroutine returns its AX_ETIMEDOUT, run_complete calls
 * finish_running(FAILED) for the same attempt, which decides again (spends a
 * second retry) and loses the CAS. Same for a watchdog-ended attempt whose
 * worker comes back (deadline_fired after expire_held), and for a cancel
 * that wins over a deadline.
 *
 * Expected: 1 retry happened (ax_stats.retried == 1), so the class counts 1
 * allowed, 0 denied.
 */
#include "class_common.h"

/* Attempt 0 sleeps past its timeout and returns the AX_ETIMEDOUT it gets
 * (what any task does); attempt 1 succeeds. */
static int slow_then_ok(ax_task *t, void *arg)
{
    (void)arg;
    if (ax_task_attempt(t) == 0) /* by attempt, not by entry: attempt 0 may end unbegun */
        return ax_sleep(t, 5000);
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = rc_plain("double");
    c.timeout_ms = 50;
    c.max_retry = 1;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 100, 100, 0};
    c.retry_budget = true;
    c.retry_budget_ratio = 0;
    c.retry_budget_min_per_s = 1000; /* plenty: every retry is allowed */
    c.retry_budget_window_ms = 10000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    ax_spec sp = {.fn = slow_then_ok, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 10000));
    CHECK_EQ(rc_last[0].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(rc_last[0].attempts, 2u);
    CHECK_EQ(test_stats(s).retried, 1u);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "ax_stats.retried=1, class retries_allowed=%llu retries_denied=%llu\n",
            (unsigned long long)st.retries_allowed, (unsigned long long)st.retries_denied);
    CHECK_EQ(st.retries_allowed + st.retries_denied, 1u);
    CHECK_EQ(st.retries_allowed, 1u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
