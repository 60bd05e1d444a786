/* test_class2_capfull_spin.c - workers spin while the concurrency cap is
 * full and tasks are queued (not class code: the worker loop's hints).
 *
 * worker.c worker_sleep returns at once from its spin when
 *   hint_queued && !hint_blocked && !hint_orphans_full
 * and hint_blocked is only "paused or closing" (sched.c sched_hint_locked;
 * `running >= cap` was dropped from it in 6bdcbf9). With the cap full and
 * jobs queued, a worker that wakes for anything (a timer of one of its
 * parked runs) goes dispatch -> nothing to take -> worker_sleep -> return
 * -> dispatch ... for as long as the cap stays full: 100 % of a core per
 * awake worker, in exactly the overload the library is for (every slot
 * waiting on a slow upstream, the queue growing). Parked class jobs are
 * out of hint_queued, so a class at its limit does not do this; a full cap
 * does.
 *
 * Here: cap 1, 2 workers; the slot is held by a task that sleeps in 5 ms
 * steps (its worker wakes every 5 ms); 5 tasks queued. Expected: under
 * 0.3 s of CPU in 1 s.
 */
#include "class_common.h"

int main(void)
{
    long hz = sysconf(_SC_CLK_TCK);
    ax_sched *s = test_sched(2, 1);
    static atomic_int release;
    ax_spec hold = {.fn = rc_block, .arg = &release, .timeout_ms = 10000,
                    .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
    for (int i = 0; i < 5; i++) {
        ax_spec q = {.fn = rc_noop, .timeout_ms = 10000, .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    usleep(100 * 1000);
    long t0 = test_cpu_ticks();
    usleep(1000 * 1000);
    long d = test_cpu_ticks() - t0;
    fprintf(stderr, "cap full, 5 queued: %ld ticks in 1 s (hz %ld)\n", d, hz);
    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 6, 5000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    CHECK_LE(d, hz * 3 / 10);
    return 0;
}
