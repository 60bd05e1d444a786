/* test_class_probe_spell.c - a half-open permit went back to whichever
 * half-open spell was current when it was released (review of 16d186c).
 *
 * j->probe only said "holds a permit", not of which spell. A probe P1 of a
 * first half-open spell was still running when another outcome (a HIGH
 * task's, whose lane bypasses the breaker but whose outcome is evidence)
 * gave that spell its verdict: open again. In the next spell probe Q took
 * the only permit; then P1 was cancelled and its release took Q's permit
 * count back to 0, so R started beside Q: two probes with
 * breaker_half_open_calls = 1, at an upstream that may still be failing.
 *
 * Expected: R waits for Q's verdict, and runs once Q succeeds (the breaker
 * closes). Old code: R starts while Q is out.
 */
#include "class_common.h"

static atomic_int started[4];
static atomic_int release[4];

static int probe(ax_task *t, void *arg)
{
    int i = (int)(intptr_t)arg;
    atomic_store(&started[i], 1);
    while (!atomic_load(&release[i])) {
        int rc = ax_sleep(t, 2);
        if (rc)
            return rc;
    }
    return 0;
}

static uint64_t submit(ax_sched *s, unsigned cls, int i)
{
    ax_spec p = {.fn = probe, .arg = (void *)(intptr_t)i, .class_id = cls,
                 .on_done = rc_on_done};
    uint64_t id = 0;
    CHECK_EQ(ax_submit(s, &p, &id), AX_OK);
    return id;
}

int main(void)
{
    ax_sched *s = test_sched(2, 16);
    ax_class_config c = rc_breaker("spell", 50, 1);
    c.protect_high = true; /* HIGH bypasses the breaker; its outcome still counts */
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    rc_open_breaker(s, id); /* done 1 */
    CHECK(WAIT_UNTIL(rc_cstats(s, id).breaker == AX_BREAKER_HALF_OPEN, 5000));

    /* Spell 1: P1 takes the only permit and keeps running. */
    uint64_t p1 = submit(s, id, 1);
    CHECK(WAIT_UNTIL(atomic_load(&started[1]), 5000));

    /* A HIGH failure is spell 1's one outcome: open again, P1 still out. */
    ax_spec h = {.fn = rc_fail, .class_id = id, .priority = AX_PRIO_HIGH,
                 .overrides = AX_SPEC_PRIORITY, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 2, 5000));
    CHECK_EQ(rc_last[1].state, AX_STATE_FAILED);
    CHECK_EQ(rc_cstats(s, id).breaker_opened, 2);

    /* Spell 2: Q takes its only permit. */
    CHECK(WAIT_UNTIL(rc_cstats(s, id).breaker == AX_BREAKER_HALF_OPEN, 5000));
    submit(s, id, 2);
    CHECK(WAIT_UNTIL(atomic_load(&started[2]), 5000));

    /* P1 is cancelled: its permit was spell 1's, not Q's. */
    CHECK_EQ(ax_cancel(s, p1), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 3, 5000));
    CHECK_EQ(rc_last[2].state, AX_STATE_CANCELLED);

    /* R must wait for Q's verdict. (A slow machine may only delay a start
     * that would be wrong, never make a right one fail.) */
    submit(s, id, 3);
    bool early = WAIT_UNTIL(atomic_load(&started[3]), 300);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "R started beside Q: %d; breaker %s, in_flight %u\n", early,
                    ax_breaker_state_name(st.breaker), st.in_flight);
    CHECK(!early);
    CHECK_EQ(st.breaker, AX_BREAKER_HALF_OPEN);
    CHECK_EQ(st.in_flight, 1);

    /* Q succeeds: the verdict closes the breaker and R runs. */
    atomic_store(&release[2], 1);
    atomic_store(&release[3], 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 5, 5000));
    CHECK(atomic_load(&started[3]));
    CHECK_EQ(rc_cstats(s, id).breaker, AX_BREAKER_CLOSED);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
