/* test_detached_cause.c - a blocking call made after the task's attempt
 * ended says which call, and how the attempt ended (run.c detached_cause).
 *
 * The cause was read from the clock alone: a task cancelled that ran on
 * past its deadline was told AX_ETIMEDOUT, "timed out (its deadline
 * passed)"; and the text named no call (a new user's trial). Checked, one
 * worker:
 *   A. cancels itself, spins past its 20 ms deadline, calls ax_sleep:
 *      AX_ECANCELED, "ax_sleep: the task's attempt was cancelled";
 *   B. spins past its 20 ms deadline (the attempt ends TIMED_OUT at its
 *      return at the latest; here the worker is held, the watchdog ends
 *      it), calls ax_yield: AX_ETIMEDOUT, "ax_yield: the task's attempt
 *      timed out (its deadline passed)";
 *   C. cancels itself, calls ax_read at once: AX_ECANCELED, "ax_read: ...
 *      cancelled". */
#include "util.h"

static char msg[3][256];
static atomic_int rc[3], done_n;

static void spin_past(ax_task *t)
{
    while (ax_now_ns() < ax_task_deadline_ns(t) + 30000000u)
        __asm__ __volatile__("" ::: "memory");
}

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    CHECK_EQ(ax_cancel(ax_task_sched(t), ax_task_id(t)), AX_OK);
    spin_past(t);
    atomic_store(&rc[0], ax_sleep(t, 1));
    snprintf(msg[0], sizeof msg[0], "%s", ax_error_detail());
    return 0;
}

static int task_b(ax_task *t, void *arg)
{
    (void)arg;
    spin_past(t);
    /* The watchdog ends a held worker's attempt at its deadline. */
    while (!ax_cancelled(t))
        __asm__ __volatile__("" ::: "memory");
    atomic_store(&rc[1], ax_yield(t));
    snprintf(msg[1], sizeof msg[1], "%s", ax_error_detail());
    return 0;
}

static int task_c(ax_task *t, void *arg)
{
    (void)arg;
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(ax_cancel(ax_task_sched(t), ax_task_id(t)), AX_OK);
    char b;
    atomic_store(&rc[2], (int)ax_read(t, p[0], &b, 1, 1000));
    snprintf(msg[2], sizeof msg[2], "%s", ax_error_detail());
    close(p[0]);
    close(p[1]);
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&done_n, 1);
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    ax_sched *s = test_sched_cfg(&c);
    int (*fns[3])(ax_task *, void *) = {task_a, task_b, task_c};
    for (int k = 0; k < 3; k++) {
        ax_spec sp = {.fn = fns[k], .timeout_ms = 20, .on_done = on_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&done_n) == k + 1, 30000 * TEST_SLOW));
    }
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_free(s);
    CHECK_EQ(atomic_load(&rc[0]), AX_ECANCELED);
    CHECK_STR(msg[0], "ax_sleep: the task's attempt was cancelled");
    CHECK_EQ(atomic_load(&rc[1]), AX_ETIMEDOUT);
    CHECK_STR(msg[1], "ax_yield: the task's attempt timed out (its deadline passed)");
    CHECK_EQ(atomic_load(&rc[2]), AX_ECANCELED);
    CHECK_STR(msg[2], "ax_read: the task's attempt was cancelled");
    return 0;
}
