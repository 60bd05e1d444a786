/* test_class2_probe_spin.c - workers spin at 100 % CPU while a half-open
 * breaker's only probe runs and other jobs of its class wait.
 *
 * sched.c park_locked: after parking a job it re-reads in_flight < limit
 * and, if true, sets c->unpark and s->unpark_pending. But a job is also
 * CLASS_BLOCKED when the class is HALF_OPEN with its probes all out
 * (class_dispatch_locked), with in_flight (1, the probe) far below the
 * limit. So every park sets unpark_pending; the next dispatch
 * (worker.c) runs sched_unpark_locked, whose room = limit - in_flight
 * ignores the breaker, puts the jobs back at the front of their bucket,
 * the pick parks them again, park_locked sets unpark_pending again,
 * `more` wakes the other worker, and worker_sleep's spin returns at once
 * on unpark_pending: a busy loop on every worker for as long as the probe
 * runs (a probe against a degraded upstream: seconds).
 *
 * Expected: while the probe runs (1 s measured) the process uses well
 * under 0.3 s of CPU (tests/test_idle.c's idle bound style).
 */
#include "class_common.h"

int main(void)
{
    long hz = sysconf(_SC_CLK_TCK);
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_breaker("probe", 100, 1);
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    /* 1. One failure opens the breaker. */
    rc_open_breaker(s, id);

    /* 2. Half-open: the probe starts and holds its permit. */
    usleep(200 * 1000);
    static atomic_int release;
    ax_spec p = {.fn = rc_block, .arg = &release, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &p, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));

    /* 3. Three more tasks of the class: no permit left, they wait. */
    for (int i = 0; i < 3; i++) {
        ax_spec q = {.fn = rc_noop, .class_id = id, .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    usleep(100 * 1000);
    CHECK_EQ(rc_cstats(s, id).queued, 3);

    long t0 = test_cpu_ticks();
    usleep(1000 * 1000);
    long d = test_cpu_ticks() - t0;
    fprintf(stderr, "CPU while the probe runs and 3 jobs wait: %ld ticks in 1 s (hz %ld)\n", d,
            hz);

    /* 4. The probe succeeds: the breaker closes and the three run. */
    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 5, 5000));
    for (int i = 1; i < 5; i++)
        CHECK_EQ(rc_last[i].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    CHECK_LE(d, hz * 3 / 10);
    return 0;
}
