/* test_adaptive_limit_stall_w0.c - the adaptive limit's stall nudge happens
 * with worker 0 held.
 *
 * With config.adaptive_limit, every slot held by attempts that do not end
 * and work waiting, a dispatch raises the limit by one once no sample came
 * for a second (test_adaptive_limit_stall, where a poller's 20 ms sleeps
 * kept waking its worker). Only worker 0 set a wake-up for that moment
 * (a task queued behind the full cap kicks it through its deadline timer,
 * and no other worker): held by a task that never yields, it looked no
 * more, and the queued task waited until the hog returned (a known gap of
 * the last notes). Now the first task queued behind the full cap wakes a
 * sleeping worker, and every worker sets the wake-up.
 *
 * Two workers, max_concurrency 2, the limit brought to 1 by a timeout
 * storm; then one task holds the slot and one more is queued. It must
 * start while the first still holds its slot (the nudge), not after:
 *  A. the first parks for a minute (both workers asleep): a control, which
 *     the old code passed too;
 *  B. the first spins on worker 0 without yielding (it stops as soon as
 *     the queued task starts, or after 20 s): old code "after".
 */
#include "util.h"

#include "internal.h" /* ax_current_worker: where the holder runs */

static atomic_int down, holder_started, holder_on_w0, holding, queued_started, queued_saw_holder;
static atomic_int spin_on_w0; /* B: the holder spins if it runs on worker 0 */

static int work(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, atomic_load(&down) ? 1000 : 1);
}

static int holder(ax_task *t, void *arg)
{
    (void)arg;
    int w0 = ax_current_worker->index == 0;
    atomic_store(&holder_on_w0, w0);
    atomic_store(&holding, 1);
    atomic_store(&holder_started, 1);
    int rc = 0;
    if (atomic_load(&spin_on_w0)) {
        if (w0) {
            uint64_t until = ax_now_ns() + 20000000000ull;
            while (ax_now_ns() < until && !atomic_load(&queued_started))
                __asm__ __volatile__("" ::: "memory");
        }
    } else {
        uint64_t until = ax_now_ns() + 60000000000ull;
        while (!atomic_load(&queued_started) && ax_now_ns() < until)
            if ((rc = ax_sleep(t, 60000)) != 0) /* one long park: nothing due */
                break;
    }
    atomic_store(&holding, 0);
    return rc;
}

static int queued(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    atomic_store(&queued_saw_holder, atomic_load(&holding));
    atomic_store(&queued_started, 1);
    return 0;
}

static ax_stats stats(ax_sched *s)
{
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), AX_OK);
    return st;
}

/* Limit 1 after a timeout storm, nothing running or queued. */
static ax_sched *limit_one(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 2;
    c.adaptive_limit = true;
    ax_sched *s = test_sched_cfg(&c);
    atomic_store(&down, 1);
    uint64_t end = test_now_ms() + 60000; /* liveness only */
    while (stats(s).limit != 1) {
        CHECK(test_now_ms() < end);
        for (int i = 0; i < 2; i++) {
            ax_spec w = {.fn = work, .timeout_ms = 50};
            CHECK_EQ(ax_submit(s, &w, NULL), AX_OK);
        }
        usleep(20 * 1000);
    }
    CHECK(WAIT_UNTIL(stats(s).running == 0 && stats(s).queued[AX_PRIO_NORMAL] == 0, 30000));
    return s;
}

/* 1: the queued task started while the holder held its slot; 0: after;
 * -1 (B only): the holder did not run on worker 0. */
static int one(bool spin)
{
    atomic_store(&spin_on_w0, spin);
    atomic_store(&holder_started, 0);
    atomic_store(&queued_started, 0);
    atomic_store(&queued_saw_holder, 0);
    ax_sched *s = limit_one();
    CHECK_EQ(stats(s).limit, 1);
    uint64_t hid;
    ax_spec h = {.fn = holder, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &h, &hid), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&holder_started), 30000));
    if (spin && !atomic_load(&holder_on_w0)) {
        (void)ax_cancel(s, hid);
        CHECK_EQ(ax_shutdown(s, 30000), 0);
        ax_free(s);
        return -1;
    }
    usleep(50 * 1000); /* both workers asleep (A), or worker 1 (B) */
    ax_spec q = {.fn = queued, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&queued_started), 90000));
    int saw = atomic_load(&queued_saw_holder);
    (void)ax_cancel(s, hid);
    CHECK_EQ(ax_shutdown(s, 30000), 0);
    ax_free(s);
    return saw;
}

int main(void)
{
    int a = one(false);
    fprintf(stderr, "A: the queued task started %s the parked one held its slot\n",
            a == 1 ? "while" : "after");
    CHECK_EQ(a, 1);
    for (int round = 0; round < 20; round++) {
        int b = one(true);
        if (b < 0) continue; /* dispatch put the holder on worker 1: again */
        fprintf(stderr, "B (round %d): the queued task started %s worker 0 spun\n", round,
                b == 1 ? "while" : "after");
        CHECK_EQ(b, 1);
        puts("test_adaptive_limit_stall_w0: ok");
        return 0;
    }
    fprintf(stderr,
            "test_adaptive_limit_stall_w0: the holder never ran on worker 0 in 20 rounds\n");
    return 1;
}
