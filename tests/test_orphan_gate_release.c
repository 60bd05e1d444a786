/* test_orphan_gate_release - an orphan's return reopens the max_orphans
 * gate before its task's on_release runs.
 *
 * At max_orphans no attempt starts, and the workers sleep; the run whose
 * return lowers the orphans below the bound wakes one. An orphan's last
 * hold on its job may be the one that runs the task's on_release (user
 * code, inline on that worker): the wake-up must come first, or a task
 * queued behind the gate waits as long as on_release takes (review of
 * 22515fb: ~300 ms behind a 300 ms on_release, 9 runs of 10).
 *
 * 2 workers, max_concurrency 1, max_orphans 1. Task A ignores its 50 ms
 * deadline (400 ms without an ax call: the watchdog ends its attempt, it
 * becomes an orphan and the gate closes); B is queued behind the gate. A's
 * on_release waits (up to 30 s) for B to start: B can start only if the
 * other worker was woken when A's function returned, before on_release. */
#include "util.h"

static atomic_bool a_in, b_started, release_saw_b, released;

static int task_a(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&a_in, true);
    uint64_t end = ax_now_ns() + 400000000u;
    while (ax_now_ns() < end)
        usleep(1000); /* no ax call: ignores its deadline */
    return 0;
}

static void a_release(void *arg)
{
    (void)arg;
    atomic_store(&release_saw_b, WAIT_UNTIL(atomic_load(&b_started), 30000));
    atomic_store(&released, true);
}

static int task_b(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&b_started, true);
    return 0;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 1;
    c.max_orphans = 1;
    c.grace_ms = 60000; /* no lingering report */
    ax_sched *s = test_sched_cfg(&c);
    ax_spec a = {.fn = task_a, .timeout_ms = 50, .on_release = a_release};
    CHECK_EQ(ax_submit(s, &a, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_in), 60000));
    /* A's attempt ended at its deadline while its function goes on. */
    CHECK(WAIT_UNTIL(test_stats(s).timed_out == 1, 60000));
    ax_stats st = test_stats(s);
    ax_spec b = {.fn = task_b, .timeout_ms = 60000};
    CHECK_EQ(ax_submit(s, &b, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&released), 120000));
    fprintf(stderr, "orphans when B was submitted: %llu; B started before A's on_release "
                    "returned: %s\n",
            (unsigned long long)st.orphans, atomic_load(&release_saw_b) ? "yes" : "no");
    CHECK(atomic_load(&b_started));
    CHECK(atomic_load(&release_saw_b));
    CHECK_EQ(ax_shutdown(s, 10000), 0);
    ax_free(s);
    return 0;
}
