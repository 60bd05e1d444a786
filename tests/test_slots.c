/* Slots are given back when their task ends, whatever else the worker does
 * (regressions found in review):
 *  1. a CPU hog is timed out even while the monitor waits toward a delayed
 *     task far in the future;
 *  2. a timed-out task's slot is free for a new task while its worker runs
 *     another task's long slice;
 *  3. a worker whose ready queue is full of yield loops still takes queued
 *     work when a slot frees up. */
#include "util.h"

static _Atomic uint64_t t0, hog_done_at, x_started_at;

static uint64_t since_ms(void)
{
    return test_now_ms() - atomic_load(&t0);
}

static int noop(ax_task *t, void *a)
{
    (void)t, (void)a;
    return 0;
}

static int spin(ax_task *t, void *a)
{
    (void)t;
    uint64_t end = test_now_ms() + (uint64_t)(uintptr_t)a;
    while (test_now_ms() < end)
        ;
    return 0;
}

static void hog_done(const ax_result *r, void *a)
{
    (void)a;
    CHECK_EQ(r->state, AX_STATE_TIMED_OUT);
    atomic_store(&hog_done_at, since_ms());
}

static int sleep_then_spin(ax_task *t, void *a)
{
    (void)a;
    ax_sleep(t, 100);
    return spin(t, (void *)1500);
}

static int sleeper(ax_task *t, void *a)
{
    (void)a;
    return ax_sleep(t, 100000);
}

static int x_fn(ax_task *t, void *a)
{
    (void)t, (void)a;
    atomic_store(&x_started_at, since_ms());
    return 0;
}

static int sleep_300(ax_task *t, void *a)
{
    (void)a;
    return ax_sleep(t, 300);
}

static atomic_int stop_yield;
static int yielder(ax_task *t, void *a)
{
    (void)a;
    while (!atomic_load(&stop_yield))
        if (ax_yield(t))
            break;
    return 0;
}

int main(void)
{
    /* 1. */
    ax_sched *s = test_sched(2, 10);
    ax_spec far = {.fn = noop, .timeout_ms = 1000, .delay_ms = 60000};
    CHECK_EQ(ax_submit(s, &far, NULL), 0);
    usleep(50000); /* let everything settle: workers and the monitor asleep */
    atomic_store(&t0, test_now_ms());
    ax_spec hog = {.fn = spin, .arg = (void *)1500, .timeout_ms = 100, .on_done = hog_done};
    CHECK_EQ(ax_submit(s, &hog, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&hog_done_at) != 0, 1200));
    CHECK_LE(atomic_load(&hog_done_at), 600);
    ax_free(s);

    /* 2. cap 2, two workers: A times out at 100 ms while B (same worker or
     * not) spins 1.5 s; X submitted at 300 ms must start at once. */
    atomic_store(&x_started_at, 0);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 2;
    CHECK_EQ(ax_new(&c, &s), 0);
    CHECK_EQ(ax_pause(s), 0);
    ax_spec a = {.fn = sleeper, .timeout_ms = 100};
    ax_spec b = {.fn = sleep_then_spin, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(s, &a, NULL), 0);
    CHECK_EQ(ax_submit(s, &b, NULL), 0);
    atomic_store(&t0, test_now_ms());
    CHECK_EQ(ax_resume(s), 0);
    usleep(300000);
    CHECK(WAIT_UNTIL(test_stats(s).timed_out == 1, 1000));
    CHECK_LE(test_stats(s).running, 1);
    ax_spec x = {.fn = x_fn, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(s, &x, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&x_started_at) != 0, 1500));
    CHECK_LE(atomic_load(&x_started_at), 800);
    ax_free(s);

    /* 3. one worker, cap 9: eight yield loops and one short task; a task
     * queued while the cap is full starts once the short one ends. */
    atomic_store(&x_started_at, 0);
    c.workers = 1;
    c.max_concurrency = 9;
    CHECK_EQ(ax_new(&c, &s), 0);
    for (int i = 0; i < 8; i++) {
        ax_spec y = {.fn = yielder, .timeout_ms = 10000};
        CHECK_EQ(ax_submit(s, &y, NULL), 0);
    }
    ax_spec shortt = {.fn = sleep_300, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(s, &shortt, NULL), 0);
    CHECK(WAIT_UNTIL(test_stats(s).running == 9, 1000));
    atomic_store(&t0, test_now_ms());
    CHECK_EQ(ax_submit(s, &x, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&x_started_at) != 0, 1500));
    CHECK_LE(atomic_load(&x_started_at), 800);
    atomic_store(&stop_yield, 1);
    ax_free(s);
    return 0;
}
