/* A task that loops on a blocking call without checking its code, past its
 * deadline (`while (!ready) ax_sleep(t, 10);`). After the deadline every
 * blocking call returns AX_ETIMEDOUT; such calls used to return at once
 * every time, so the orphan spun on its worker without ever giving it
 * back: with one on each worker nothing else started, ever, and each
 * worker burnt a CPU. Now the first such call returns at once and later
 * ones pause (1, 2, 4 ... 100 ms) first.
 *
 * Checks, with 2 workers and 4 such loopers (50 ms timeout): all 4 end
 * TIMED_OUT; 20 ordinary tasks submitted afterwards all succeed while the
 * loopers still loop; the process uses little CPU meanwhile (process CPU
 * time, not wall time: a busy machine cannot make it fail, only pass more
 * easily); each looper saw AX_ETIMEDOUT from its calls after the deadline;
 * when the loops end every coroutine returns and no stack stays in use. */
#include "util.h"

#include <stdio.h>
#include <string.h>

#define LOOPERS 4
#define GOOD 20

static atomic_int stop, timed_out, good_done, saw_timeout, loop_calls;

static int looper(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        int rc = ax_sleep(t, 10); /* the code ignored, as careless code does */
        atomic_fetch_add(&loop_calls, 1);
        if (rc == AX_ETIMEDOUT)
            atomic_store(&saw_timeout, 1);
    }
    return 0;
}

static void looper_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_TIMED_OUT)
        atomic_fetch_add(&timed_out, 1);
}

static int good(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 1);
}

static void good_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_SUCCEEDED)
        atomic_fetch_add(&good_done, 1);
}

int main(void)
{
    ax_sched *s = test_sched(2, 16);
    for (int i = 0; i < LOOPERS; i++) {
        ax_spec sp = {.fn = looper, .timeout_ms = 50, .on_done = looper_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&timed_out) == LOOPERS, 60000));
    CHECK(WAIT_UNTIL(atomic_load(&saw_timeout) == 1, 60000));

    /* The workers are not lost to the loopers. */
    for (int i = 0; i < GOOD; i++) {
        ax_spec sp = {.fn = good, .timeout_ms = 60000, .on_done = good_on_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&good_done) == GOOD, 60000));

    /* And the loopers wait rather than spin: 2 s of the process's CPU. */
    long hz = sysconf(_SC_CLK_TCK);
    int calls0 = atomic_load(&loop_calls);
    long t0 = test_cpu_ticks();
    usleep(2000000);
    long used = test_cpu_ticks() - t0;
    int calls = atomic_load(&loop_calls) - calls0;
    fprintf(stderr, "detached loopers: %d calls and %ld ticks of CPU (hz %ld) in 2 s\n", calls,
            used, hz);
    CHECK_LE(used, hz / 10); /* at most 100 ms of CPU in 2 s */
    CHECK(calls > 0);        /* still looping: they were not killed */

    atomic_store(&stop, 1);
    CHECK(WAIT_UNTIL(test_stats(s).stacks_in_use == 0, 60000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.timed_out, LOOPERS);
    CHECK_EQ(st.succeeded, GOOD);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
