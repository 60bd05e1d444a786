/* test_class_budget_stale.c - a losing retry decision leaves
 * j->end_why = END_BUDGET on the job, and a later, unrelated end reports
 * "retry budget exhausted".
 *
 * Attempt 0 times out: deadline_fired decides RETRYING (spends the one retry
 * the budget has) and retry_schedule -> sched_retry_locked clears end_why.
 * Then the woken coroutine returns AX_ETIMEDOUT: run_complete ->
 * finish_running(FAILED) -> finish_decide for attempt 0 again: the budget
 * is empty now, so it writes end_why = END_BUDGET (finish.c:91) -- and its
 * CAS loses (the job is RETRYING, attempt 1). Attempt 1 then SUCCEEDS, and
 * terminal_path (finish.c:110) turns its empty error into
 * "failed; not retried: class ... retry budget exhausted".
 *
 * (Also: that write is an unsynchronised write of a field the next
 * attempt's terminal path, maybe on another worker, reads.)
 *
 * Expected: SUCCEEDED with error "", and the class counts 1 allowed, 0
 * denied.
 */
#include "class_common.h"

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
    ax_class_config c = rc_plain("stale");
    c.timeout_ms = 50;
    c.max_retry = 1;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 100, 100, 0};
    c.retry_budget = true;
    c.retry_budget_ratio = 0;
    c.retry_budget_window_ms = 3600000;   /* an hour: never slides in the test */
    c.retry_budget_min_per_s = 1.0 / 3600; /* exactly one retry per window */
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    ax_spec sp = {.fn = slow_then_ok, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 10000));
    fprintf(stderr, "state=%s attempts=%u code=%d error=\"%s\"\n",
            ax_state_name(rc_last[0].state), rc_last[0].attempts, rc_last[0].code,
            rc_last[0].error);
    CHECK_EQ(rc_last[0].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(rc_last[0].attempts, 2u);
    CHECK_STR(rc_last[0].error, "");
    ax_class_stats st = rc_cstats(s, id);
    CHECK_EQ(st.retries_allowed, 1u);
    CHECK_EQ(st.retries_denied, 0u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
