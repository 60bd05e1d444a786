/* test_adaptive_limit_stall.c - config.adaptive_limit never stays stuck
 * behind attempts that do not end (a new user's trial of 16d186c).
 *
 * The limiter moves only on samples, and a sample is an attempt that ends.
 * A long-lived task (a poller; a Redis consumer's puller and acker) holds a
 * slot for good. In a timeout storm the limit fell to 1, the poller kept
 * that slot, no other attempt started, so no sample came, and the tasks
 * queued behind it waited for ever after the upstream was fast again
 * (trial: 1 810 queued, none finishing). ax_set_max_concurrency did not
 * help either: the limiter put the cap straight back.
 *
 * Expected:
 *  A. After the storm, with the limit at 1 and the poller in its slot, the
 *     fast tasks queued then all run (sched.c: a dispatch that finds every
 *     slot held, work waiting and no sample for a second raises the limit
 *     by one). Old code: none ever starts.
 *  B. In the same stall, ax_set_max_concurrency(s, 3) makes the cap 3 at
 *     once (the limiter starts over from the new bound). Old code: 1.
 */
#include "util.h"

static atomic_int down, stop_poller, ok_n, timed_out_n;

static int poller(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_poller))
        if (ax_sleep(t, 20) != 0)
            break;
    return 0;
}

static int work(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, atomic_load(&down) ? 1000 : 1);
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_SUCCEEDED)
        atomic_fetch_add(&ok_n, 1);
    else if (r->state == AX_STATE_TIMED_OUT)
        atomic_fetch_add(&timed_out_n, 1);
}

static ax_stats stats(ax_sched *s)
{
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), AX_OK);
    return st;
}

static void submit_work(ax_sched *s, int n)
{
    for (int i = 0; i < n; i++) {
        ax_spec w = {.fn = work, .timeout_ms = 50, .on_done = on_done};
        CHECK_EQ(ax_submit(s, &w, NULL), AX_OK);
    }
}

/* A scheduler whose adaptive cap (at most 2) has fallen to 1 in a timeout
 * storm, the poller in that slot and work queued behind it. */
static ax_sched *stalled(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 2;
    c.adaptive_limit = true;
    ax_sched *s = test_sched_cfg(&c);
    atomic_store(&down, 1);
    atomic_store(&stop_poller, 0);
    ax_spec p = {.fn = poller, .priority = AX_PRIO_HIGH, .timeout_ms = 600000};
    CHECK_EQ(ax_submit(s, &p, NULL), AX_OK);
    uint64_t end = test_now_ms() + 60000; /* liveness only */
    while (!(stats(s).limit == 1 && stats(s).running == 1)) {
        CHECK(test_now_ms() < end);
        submit_work(s, 2);
        usleep(20 * 1000);
    }
    CHECK(atomic_load(&timed_out_n) > 0);
    return s;
}

static void finish(ax_sched *s)
{
    atomic_store(&stop_poller, 1);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_free(s);
}

int main(void)
{
    /* A. The stall ends by itself. */
    ax_sched *s = stalled();
    atomic_store(&down, 0); /* the upstream is fast again */
    int queued = (int)(stats(s).queued[AX_PRIO_NORMAL]);
    int ok0 = atomic_load(&ok_n);
    submit_work(s, 20);
    fprintf(stderr, "A: limit 1, %d queued before the 20 fast ones\n", queued);

    /* Liveness only: every queued task must run; none may wait for ever. */
    CHECK(WAIT_UNTIL(stats(s).queued[AX_PRIO_NORMAL] == 0 && atomic_load(&ok_n) >= ok0 + 20,
                     60000));
    CHECK(WAIT_UNTIL(stats(s).limit == 2, 30000)); /* fast samples take it back up */
    finish(s);

    /* B. An operator raises the bound: the cap follows at once. */
    s = stalled();
    CHECK_EQ(ax_set_max_concurrency(s, 3), AX_OK);
    CHECK_EQ(stats(s).limit, 3);
    atomic_store(&down, 0);
    finish(s);
    fprintf(stderr, "test_adaptive_limit_stall: ok (succeeded %d, timed out %d)\n",
            atomic_load(&ok_n), atomic_load(&timed_out_n));
    return 0;
}
