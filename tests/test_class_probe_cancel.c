/* test_class_probe_cancel.c - a half-open probe that is cancelled
 * never gives its permit back (class.c: class_attempt_done returns early for
 * JS_CANCELLED, and nothing calls ax_breaker_release), so with
 * breaker_half_open_calls = 1 the breaker stays HALF_OPEN with its only
 * permit out: every later task of the class is CLASS_BLOCKED at dispatch,
 * forever (nothing it waits for will ever happen).
 *
 * Expected: after the probe is cancelled, a new task of the class runs
 * (either as a fresh probe, or because the cancel gave the permit back).
 */
#include "class_common.h"

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_breaker("probe", 100, 1);
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    /* 1. One failure opens it. */
    rc_open_breaker(s, id);

    /* 2. After open_ms it is half-open: the probe is admitted and starts. */
    usleep(200 * 1000);
    static atomic_int release;
    ax_spec p = {.fn = rc_block, .arg = &release, .class_id = id, .on_done = rc_on_done};
    uint64_t probe = 0;
    CHECK_EQ(ax_submit(s, &p, &probe), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
    CHECK_EQ(rc_cstats(s, id).breaker, AX_BREAKER_HALF_OPEN);

    /* 3. The caller cancels the probe (a shutdown of its request, say). */
    CHECK_EQ(ax_cancel(s, probe), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 2, 5000));
    CHECK_EQ(rc_last[1].state, AX_STATE_CANCELLED);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 0, 5000));

    /* 4. A healthy task of the class: it must run (and close the breaker). */
    ax_spec ok = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &ok, NULL), AX_OK);
    bool ran = WAIT_UNTIL(atomic_load(&rc_done_n) == 3, 3000);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "after 3 s: done=%d breaker=%s in_flight=%u queued=%llu\n",
            atomic_load(&rc_done_n), ax_breaker_state_name(st.breaker), st.in_flight,
            (unsigned long long)st.queued);
    CHECK(ran);
    CHECK_EQ(rc_last[2].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
