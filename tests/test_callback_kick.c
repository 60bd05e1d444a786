/* An on_timeout that starts while the scheduler is otherwise idle is timed:
 * the watchdog counts its overrun.
 *
 * The only task times out at 600 ms; its on_timeout runs 800 ms, past
 * callback_timeout_ms (100). Nothing else runs, so the watchdog has nothing
 * to poll for and goes to sleep for good unless the callback thread kicks
 * it. Before, the watchdog re-checked only the workers before sleeping: a
 * callback that began just after its last look was never timed (review:
 * overruns 0 in 2 of 3 runs). */
#include "util.h"

static atomic_int cb_done;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 3000);
}

static void slow_cb(const ax_result *r, void *arg)
{
    (void)r, (void)arg;
    usleep(800 * 1000);
    atomic_store(&cb_done, 1);
}

int main(void)
{
    for (int round = 0; round < 3; round++) {
        atomic_store(&cb_done, 0);
        ax_config c;
        ax_config_default(&c);
        c.workers = 1;
        c.callback_timeout_ms = 100;
        ax_sched *s = test_sched_cfg(&c);
        ax_spec sp = {.fn = sleeper, .timeout_ms = 600, .on_timeout = slow_cb};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        CHECK(WAIT_UNTIL(atomic_load(&cb_done), 30000));
        ax_stats st;
        ax_stats_get(s, &st);
        printf("round %d: timed_out %llu overruns %llu\n", round, (unsigned long long)st.timed_out,
               (unsigned long long)st.callback_overruns);
        CHECK_EQ(st.timed_out, 1);
        CHECK_EQ(st.callback_overruns, 1);
        CHECK_EQ(ax_shutdown(s, 5000), 0);
        ax_free(s);
    }
    puts("test_callback_kick: ok");
    return 0;
}
