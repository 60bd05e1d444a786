/* test_class2_handback_deposit.c - a first attempt handed back by the
 * watchdog is deposited in its class's retry budget twice.
 *
 * class.c class_dispatch_locked deposits (ax_budget_first) every dispatch
 * of attempt 0. The watchdog's hand_back (js_unstart, class_unstart) gives
 * the class place and the probe permit back, but not the deposit; the job
 * is dispatched again as attempt 0 and deposits again. Each hand-back
 * earns the class `ratio` more retries than its first attempts justify
 * (the budget's rule: retries <= ratio x first attempts + floor) -- and
 * hand-backs happen exactly when workers are held, i.e. in an incident.
 *
 * Here: 1 worker, a class with a retry budget of ratio 1.0 and no floor
 * (min_per_s 0). One batch of a hog (spins 300 ms without yielding) and 3
 * quick tasks: the watchdog hands the 3 back; they run after the hog.
 * Expected: 4 first attempts, so retry_budget_left == 4.
 */
#include "class_common.h"

static int hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t end = ax_now_ns() + 300 * 1000000ull;
    while (ax_now_ns() < end) {
    }
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 8);
    ax_class_config c = rc_plain("hb");
    c.retry_budget = true;
    c.retry_budget_ratio = 1.0;
    c.retry_budget_min_per_s = 0.0;
    c.retry_budget_window_ms = 600000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    CHECK_EQ((long)rc_cstats(s, id).retry_budget_left, 0);
    CHECK_EQ(ax_pause(s), AX_OK);
    ax_spec h = {.fn = hog, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
    for (int i = 0; i < 3; i++) {
        ax_spec q = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    CHECK_EQ(ax_resume(s), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 4, 10000));
    ax_stats st = test_stats(s);
    ax_class_stats cs = rc_cstats(s, id);
    fprintf(stderr, "started=%llu class started=%llu retry_budget_left=%.0f\n",
            (unsigned long long)st.started, (unsigned long long)cs.started,
            cs.retry_budget_left);
    CHECK_EQ(st.started, 4u);
    CHECK_EQ(cs.started, 4u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    CHECK_EQ((long)cs.retry_budget_left, 4);
    return 0;
}
