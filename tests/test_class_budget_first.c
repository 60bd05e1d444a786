/* test_class_budget_first.c - the retry budget counts a first
 * attempt only after the retry decision of that same attempt.
 *
 * finish_running decides (finish_decide -> class_retry_allowed ->
 * ax_budget_try_retry) before its CAS; the attempt's ax_budget_first comes
 * after it, from attempt_end -> class_attempt_done. So when the first
 * attempt of a task fails, the budget has not seen that attempt: with a
 * ratio-only budget (min_per_s = 0) the room is ratio x 0 = 0 and the retry
 * is denied, whatever the ratio. (Finagle deposits on each request sent;
 * gRPC's throttle counts the RPC before its outcome.)
 *
 * Here: ratio 2.0 (two retries per first attempt), no floor, one task that
 * fails once. 1 retry <= 2.0 x 1 first attempt: it must be allowed.
 */
#include "class_common.h"

static atomic_int calls;

static int fail_once(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return atomic_fetch_add(&calls, 1) == 0 ? 7 : 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = rc_plain("first");
    c.max_retry = 1;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1, 1, 0};
    c.retry_budget = true;
    c.retry_budget_ratio = 2.0;
    c.retry_budget_min_per_s = 0;
    c.retry_budget_window_ms = 10000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    ax_spec sp = {.fn = fail_once, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 10000));
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "state=%s attempts=%u error=\"%s\" allowed=%llu denied=%llu\n",
            ax_state_name(rc_last[0].state), rc_last[0].attempts, rc_last[0].error,
            (unsigned long long)st.retries_allowed, (unsigned long long)st.retries_denied);
    CHECK_EQ(rc_last[0].attempts, 2u);
    CHECK_EQ(rc_last[0].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(st.retries_allowed, 1u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
