/* test_class_handback_probe.c - a half-open probe handed back by
 * the watchdog keeps its breaker permit.
 *
 * class_dispatch_locked takes a half-open permit (ax_breaker_allow ->
 * probes_out + 1) with the class place. hand_back (watchdog.c:106-109)
 * gives the class place back (class_slot_free) but not the permit (nothing
 * calls ax_breaker_release), and the job, queued again, needs a new permit
 * at its next dispatch. With breaker_half_open_calls = 2: the hog probe and
 * the quick probe take both permits; the quick one is handed back; the
 * verdict needs 2 outcomes, only the hog's ever comes; probes_out stays 2:
 * the quick probe and every later task of the class are CLASS_BLOCKED for
 * good.
 *
 * Expected: all three tasks end (the third succeeds) within a few seconds.
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
    ax_class_config c = rc_breaker("hbprobe", 100, 2);
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    rc_open_breaker(s, id);
    usleep(200 * 1000);

    /* Half-open now: two probes, dispatched in one batch to one worker. */
    CHECK_EQ(ax_pause(s), AX_OK);
    ax_spec h = {.fn = hog, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
    ax_spec q = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    CHECK_EQ(ax_resume(s), AX_OK);
    bool both = WAIT_UNTIL(atomic_load(&rc_done_n) == 3, 3000);
    ax_class_stats cs = rc_cstats(s, id);
    fprintf(stderr, "after 3 s: done=%d (want 3) breaker=%s queued=%llu in_flight=%u started=%llu\n",
            atomic_load(&rc_done_n), ax_breaker_state_name(cs.breaker),
            (unsigned long long)cs.queued, cs.in_flight, (unsigned long long)cs.started);
    CHECK(both);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
