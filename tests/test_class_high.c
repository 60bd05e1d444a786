/* test_class_high.c - HIGH first under overload (ax_class_config.protect_high,
 * on by default): a class's overload controls shed NORMAL and LOW, never
 * HIGH (the seed's contract, §2.2, kept under overload).
 *
 *  1. Limit: class limit 1, a NORMAL task holds it. A HIGH task of the class
 *     starts at once (the class limit does not hold HIGH back), a second
 *     NORMAL one waits parked. With protect_high off the HIGH task waits
 *     too, until the NORMAL one ends (which of the two waiting starts
 *     first is the quota round's turn, not asserted).
 *  2. Breaker: once open, NORMAL submissions get AX_EOPEN, HIGH ones are
 *     admitted and run; their failures still count in the breaker.
 *  3. Retry budget: with a budget of no retry at all, a failing NORMAL task
 *     is not retried, a failing HIGH task is (attempts 3 of max_retry 2),
 *     and its retries are counted in the budget (retries_allowed 2).
 * Exact states and counts; wall-clock only as liveness bounds.
 */
#include "class_common.h"

static void limit_case(bool protect)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("quote");
    c.limit_max = 1;
    c.protect_high = protect;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    static atomic_int release;
    atomic_store(&release, 0);
    atomic_store(&rc_done_n, 0);
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 1, 5000));
    ax_spec high = {.fn = rc_noop, .class_id = id, .priority = AX_PRIO_HIGH,
                    .overrides = AX_SPEC_PRIORITY, .on_done = rc_on_done};
    ax_spec normal = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &normal, NULL), AX_OK);
    CHECK_EQ(ax_submit(s, &high, NULL), AX_OK);
    if (protect) {
        CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 5000));
        CHECK_EQ(rc_last[0].priority, AX_PRIO_HIGH);
        CHECK_EQ(rc_last[0].state, AX_STATE_SUCCEEDED);
    }
    usleep(100 * 1000);
    /* The NORMAL one waits behind the held place (and HIGH too when not
     * protected). */
    CHECK_EQ(atomic_load(&rc_done_n), protect ? 1 : 0);
    CHECK_EQ(rc_cstats(s, id).queued, protect ? 1u : 2u);
    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 2, 5000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

static void breaker_case(void)
{
    ax_sched *s = test_sched(1, 8);
    ax_class_config c = rc_plain("search");
    c.protect_high = true;
    c.breaker = true;
    c.breaker_min_calls = 4;
    c.breaker_open_ms = 3600000; /* stays open for the test */
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    atomic_store(&rc_done_n, 0);
    for (int i = 0; i < 4; i++) {
        ax_spec f = {.fn = rc_fail, .class_id = id, .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &f, NULL), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == i + 1, 5000));
    }
    CHECK_EQ(rc_cstats(s, id).breaker, AX_BREAKER_OPEN);
    ax_spec normal = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &normal, NULL), AX_EOPEN);
    ax_spec high = {.fn = rc_fail, .class_id = id, .priority = AX_PRIO_HIGH,
                    .overrides = AX_SPEC_PRIORITY, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &high, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 5, 5000));
    CHECK_EQ(rc_last[4].state, AX_STATE_FAILED);
    CHECK_EQ(rc_last[4].code, 7); /* it ran: not AX_EOPEN */
    ax_class_stats st = rc_cstats(s, id);
    CHECK_EQ(st.breaker, AX_BREAKER_OPEN);
    CHECK_EQ(st.breaker_rejected, 1u);
    CHECK_EQ(st.failed, 5u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

static void budget_case(void)
{
    ax_sched *s = test_sched(1, 8);
    ax_class_config c = rc_plain("report");
    c.protect_high = true;
    c.retry_budget = true;
    c.retry_budget_ratio = 0;
    c.retry_budget_min_per_s = 0; /* no retry for NORMAL / LOW at all */
    c.max_retry = 2;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1, 1, 0};
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    atomic_store(&rc_done_n, 0);
    ax_spec normal = {.fn = rc_fail, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &normal, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 5000));
    CHECK_EQ(rc_last[0].attempts, 1u);
    CHECK(strstr(rc_last[0].error, "retry budget exhausted") != NULL);
    ax_spec high = {.fn = rc_fail, .class_id = id, .priority = AX_PRIO_HIGH,
                    .overrides = AX_SPEC_PRIORITY, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &high, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 2, 5000));
    CHECK_EQ(rc_last[1].state, AX_STATE_FAILED);
    CHECK_EQ(rc_last[1].attempts, 3u);
    CHECK(strstr(rc_last[1].error, "retry budget") == NULL);
    ax_class_stats st = rc_cstats(s, id);
    CHECK_EQ(st.retries_allowed, 2u);
    CHECK_EQ(st.retries_denied, 1u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(void)
{
    limit_case(true);
    limit_case(false);
    breaker_case();
    budget_case();
    puts("test_class_high: ok");
    return 0;
}
