/* test_idle.c - an idle scheduler uses no CPU (DESIGN.md §6 "no periodic
 * tick: an idle ax uses 0% CPU"), even with many parked tasks, and shutdown
 * ends every parked task CANCELLED (§10).
 *
 * CPU time is read from /proc/self/stat (utime + stime, in clock ticks).
 * First the probe is shown able to fail: a busy-looping phase must register.
 * Then 10 000 tasks park in ax_sleep for an hour on 2 workers
 * (max_concurrency raised to 20 000) and the whole process must use at most
 * 5 ticks (50 ms at 100 Hz) over one second. Finally ax_shutdown with a
 * 100 ms grace cancels them: every on_done has run, CANCELLED, when it
 * returns, and every ax_sleep returns AX_ECANCELED.
 */
#include "util.h"


/* TSan models each coroutine as a thread and dies past 8128 of them: it
 * parks fewer (the idle-CPU property is the same). */
#if defined(__SANITIZE_THREAD__)
#define NTASK 3000
#else
#define NTASK 10000
#endif

static atomic_int entered, sleep_cancelled, sleep_other, done_cancelled, done_other;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&entered, 1);
    int rc = ax_sleep(t, 3600u * 1000u);
    if (rc == AX_ECANCELED)
        atomic_fetch_add(&sleep_cancelled, 1);
    else
        atomic_fetch_add(&sleep_other, 1);
    return rc;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_CANCELLED && r->code == AX_ECANCELED)
        atomic_fetch_add(&done_cancelled, 1);
    else
        atomic_fetch_add(&done_other, 1);
}

int main(void)
{
    long hz = sysconf(_SC_CLK_TCK);
    CHECK(hz > 0);

    /* The probe can fail: 150 ms of this thread's own CPU time spent
     * spinning shows up as >= 100 ms. Spun by CPU time, not wall time, so a busy machine
     * that gives this thread a small share still fills it (the wall bound
     * is liveness only). */
    long t0 = test_cpu_ticks();
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (uint64_t end = test_now_ms() + 60000; test_now_ms() < end;) {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        if ((c1.tv_sec - c0.tv_sec) * 1000000000L + (c1.tv_nsec - c0.tv_nsec) >= 150000000L)
            break;
    }
    long busy = test_cpu_ticks() - t0;
    fprintf(stderr, "busy phase: %ld ticks for 150 ms of CPU time\n", busy);
    CHECK(busy >= hz / 10); /* >= 100 ms of CPU */

    ax_sched *s = test_sched(2, 500);
    CHECK_EQ(ax_set_max_concurrency(s, 2 * NTASK), 0);
    for (int i = 0; i < NTASK; i++) {
        ax_spec sp = {.fn = sleeper, .timeout_ms = 2 * 3600u * 1000u, .on_done = on_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&entered) == NTASK, 30000 * TEST_SLOW));
    CHECK(WAIT_UNTIL(test_stats(s).running == NTASK, 5000));
    usleep(300 * 1000); /* let every thread finish its last spin and go to sleep */

    /* A polling scheduler burns CPU in every window; an idle one in none.
     * On a busy machine a window may still catch the last wake-ups of the
     * start burst (threads scheduled late), so the quietest of up to five
     * one-second windows is what must be idle. */
    long idle = -1;
    for (int win = 0; win < 5 && (idle < 0 || idle * 100 / hz > 5); win++) {
        long i0 = test_cpu_ticks();
        usleep(1000 * 1000);
        long d = test_cpu_ticks() - i0;
        fprintf(stderr, "idle phase: %ld ticks in 1 s with %d parked tasks\n", d, NTASK);
        if (idle < 0 || d < idle)
            idle = d;
    }
    CHECK(idle >= 0);
    CHECK_LE(idle * 100 / hz, 5); /* at most 50 ms of CPU in a second */

    ax_stats st = test_stats(s);
    CHECK_EQ(st.running, NTASK);
    CHECK_EQ(st.started, NTASK);
    CHECK_EQ(atomic_load(&done_cancelled) + atomic_load(&done_other), 0);

    int rc = ax_shutdown(s, 100);
    CHECK(rc == 0 || rc == AX_ETIMEDOUT);
    /* Every on_done has run when ax_shutdown returns. */
    CHECK_EQ(atomic_load(&done_cancelled), NTASK);
    CHECK_EQ(atomic_load(&done_other), 0);
    CHECK(WAIT_UNTIL(atomic_load(&sleep_cancelled) + atomic_load(&sleep_other) == NTASK, 10000));
    CHECK_EQ(atomic_load(&sleep_cancelled), NTASK);
    st = test_stats(s);
    CHECK_EQ(st.cancelled, NTASK);
    CHECK_EQ(st.running, 0);
    if (rc != 0) /* some coroutines were still unwinding: by now they are done */
        CHECK_EQ(ax_shutdown(s, 100), 0);
    ax_free(s);
    return 0;
}
