/* test_class_budget_cancel.c - cancelling a running task spends
 * its class's retry budget.
 *
 * ax_cancel wins the CAS (CANCELLED); the woken coroutine returns the
 * AX_ECANCELED it got; run_complete -> finish_running(FAILED) ->
 * finish_decide: FAILED, attempt 0 < max_retry -> class_retry_allowed spends
 * a retry (retries_allowed + 1) for a task that is already CANCELLED and
 * will never retry; then its CAS loses. Ten cancels of running tasks eat a
 * budget of ten retries.
 *
 * Expected: no retry happened, so retries_allowed == retries_denied == 0.
 */
#include "class_common.h"

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = rc_plain("cancelled");
    c.max_retry = 1;
    c.retry_budget = true;
    c.retry_budget_ratio = 0;
    c.retry_budget_min_per_s = 1; /* 10 retries per 10 s window */
    c.retry_budget_window_ms = 10000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    static atomic_int release;
    for (int i = 0; i < 10; i++) {
        ax_spec sp = {.fn = rc_block, .arg = &release, .class_id = id, .on_done = rc_on_done};
        uint64_t tid;
        CHECK_EQ(ax_submit(s, &sp, &tid), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
        CHECK_EQ(ax_cancel(s, tid), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 0, 5000));
    }
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 10, 5000));
    usleep(50 * 1000);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "10 cancels: retries_allowed=%llu denied=%llu budget_left=%g retried=%llu\n",
            (unsigned long long)st.retries_allowed, (unsigned long long)st.retries_denied,
            st.retry_budget_left, (unsigned long long)test_stats(s).retried);
    CHECK_EQ(test_stats(s).retried, 0u);
    CHECK_EQ(st.retries_allowed, 0u);
    CHECK_EQ(st.retries_denied, 0u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
