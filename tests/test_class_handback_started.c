/* test_class_handback_started.c - ax_class_stats.started counts
 * dispatches, not starts: class_dispatch_locked adds 1 to `started` when it
 * takes the class place, and the watchdog's hand_back (js_unstart ->
 * class_slot_free) gives the place back without taking the count back, so a
 * job handed back and dispatched again is counted twice. ax_stats.started
 * counts run_entry (js_begin), once per attempt that entered its function.
 * (A STARTING job cancelled on a to-start list is likewise "started" for
 * the class and not for ax_stats.)
 *
 * Here: 1 hog + 3 quick tasks of one class dispatched in one batch to one
 * worker; the hog spins 300 ms without yielding, so the watchdog hands the
 * other 3 back (HOLD_MS 10) and the second worker runs them.
 * Expected: class started == ax_stats.started == 4.
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
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("hb");
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
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
    fprintf(stderr, "ax_stats.started=%llu class started=%llu succeeded=%llu in_flight=%u\n",
            (unsigned long long)st.started, (unsigned long long)cs.started,
            (unsigned long long)cs.succeeded, cs.in_flight);
    CHECK_EQ(st.started, 4u);
    CHECK_EQ(cs.in_flight, 0u);
    CHECK_EQ(cs.started, st.started);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
