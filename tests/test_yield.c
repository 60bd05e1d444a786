/* ax_yield: ready tasks take turns, and a task that yields in a loop does
 * not keep queued tasks from starting on its worker (found by bench/). */
#include "util.h"

static atomic_int turns[2];
static atomic_int order[64];
static atomic_int norder;
static atomic_int started;
static atomic_int b_started, a_done;

static int ping(ax_task *t, void *arg)
{
    int me = (int)(intptr_t)arg;
    /* Take turns only once both are runs: until then the second is a job on
     * the worker's to-start list, which the watchdog hands back to its
     * bucket if the OS keeps the worker off its CPU for 10 ms (a busy
     * machine), and the first would then yield to no one. */
    atomic_fetch_add(&started, 1);
    while (atomic_load(&started) < 2)
        CHECK_EQ(ax_yield(t), 0);
    for (int i = 0; i < 10; i++) {
        int k = atomic_fetch_add(&norder, 1);
        if (k < 64)
            atomic_store(&order[k], me);
        atomic_fetch_add(&turns[me], 1);
        CHECK_EQ(ax_yield(t), 0);
    }
    return 0;
}

static int yielder(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t end = ax_now_ns() + 3000000000ull;
    while (!atomic_load(&b_started) && ax_now_ns() < end)
        CHECK_EQ(ax_yield(t), 0);
    atomic_store(&a_done, 1);
    return 0;
}

static int b_fn(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    atomic_store(&b_started, 1);
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 10);
    /* Two tasks on one worker alternate strictly. */
    CHECK_EQ(ax_pause(s), 0);
    for (intptr_t i = 0; i < 2; i++) {
        ax_spec sp = {.fn = ping, .arg = (void *)i, .timeout_ms = 5000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL(atomic_load(&turns[0]) == 10 && atomic_load(&turns[1]) == 10, 3000));
    CHECK_EQ(atomic_load(&norder), 20);
    for (int k = 1; k < 20; k++)
        CHECK_EQ(atomic_load(&order[k]), 1 - atomic_load(&order[k - 1]));

    /* A yield loop that waits for a task submitted after it. */
    ax_spec a = {.fn = yielder, .timeout_ms = 5000};
    CHECK_EQ(ax_submit(s, &a, NULL), 0);
    usleep(20000);
    ax_spec b = {.fn = b_fn, .timeout_ms = 5000};
    CHECK_EQ(ax_submit(s, &b, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_done), 5000));
    CHECK_EQ(atomic_load(&b_started), 1);
    CHECK_EQ(ax_yield(NULL), AX_EINVAL);
    ax_free(s);
    return 0;
}
