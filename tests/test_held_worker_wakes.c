/* test_held_worker_wakes - a worker held after it freed a slot does not
 * keep the queued work from the others.
 *
 * A task that ends normally frees its slot without waking anyone: its
 * worker dispatches next itself (finish.c). When that worker is then held
 * (a long on_done or on_release, inline on it, or a task that never
 * yields), a task queued while the cap was full waited for it, though the
 * slot was free and another worker slept: ~300 ms behind a 300 ms on_done
 * (new-user trial of 4a8f223), as long as the hog in general. The watchdog
 * judges a worker held after HOLD_MS without a switch; it now also wakes a
 * sleeping worker when queued work could start.
 *
 * 2 workers, max_concurrency 1. A runs until B has been submitted (so B is
 * queued behind the full cap, no worker woken for it), then returns; A's
 * callback (on_done in round 1, on_release in round 2) waits up to 30 s for
 * B to start. B can start only on the other worker. */
#include "util.h"

static atomic_bool a_in, b_queued, b_started, cb_saw_b, cb_done;

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_in, true);
    /* Liveness bound only: B is submitted right after a_in. */
    for (int i = 0; i < 60000 && !atomic_load(&b_queued); i++)
        if (ax_sleep(t, 1) != 0)
            return 1;
    return 0;
}

static int task_b(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&b_started, true);
    return 0;
}

static void wait_for_b(void)
{
    atomic_store(&cb_saw_b, WAIT_UNTIL(atomic_load(&b_started), 30000));
    atomic_store(&cb_done, true);
}

static void a_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    wait_for_b();
}

static void a_release(void *arg)
{
    (void)arg;
    wait_for_b();
}

static void round_(bool by_release)
{
    atomic_store(&a_in, false);
    atomic_store(&b_queued, false);
    atomic_store(&b_started, false);
    atomic_store(&cb_saw_b, false);
    atomic_store(&cb_done, false);

    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 1;
    ax_sched *s = test_sched_cfg(&c);
    ax_spec a = {.fn = task_a, .timeout_ms = 120000};
    if (by_release)
        a.on_release = a_release;
    else
        a.on_done = a_done;
    CHECK_EQ(ax_submit(s, &a, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_in), 60000));
    ax_spec b = {.fn = task_b, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &b, NULL), 0);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.running, 1); /* A holds the only slot: B is queued */
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], 1);
    atomic_store(&b_queued, true);
    CHECK(WAIT_UNTIL(atomic_load(&cb_done), 120000));
    fprintf(stderr, "%s: B started while A's %s held its worker: %s\n",
            by_release ? "on_release" : "on_done", by_release ? "on_release" : "on_done",
            atomic_load(&cb_saw_b) ? "yes" : "no");
    CHECK(atomic_load(&cb_saw_b));
    CHECK(WAIT_UNTIL(test_stats(s).succeeded == 2, 60000));
    CHECK_EQ(ax_shutdown(s, 10000), 0);
    ax_free(s);
}

int main(void)
{
    round_(false);
    round_(true);
    return 0;
}
