/* test_r10_warm_fpenv.c - a warm coroutine hands the floating-point
 * control state of the task that ran on it last to the next task.
 *
 * On x86_64 the switch keeps MXCSR and the x87 control word per coroutine
 * (coro/switch_x86_64.S), and ax_coro_init gives a new coroutine the
 * worker's own (coro.c: "MXCSR and x87 control word copied from the
 * creating thread"), so before ddfaefa every attempt started with the
 * worker thread's rounding mode. Since ddfaefa a coroutine whose function
 * returned is parked at the top of run_entry's loop and takes the next
 * job on that worker as it is: task B inherits the rounding mode (and
 * FTZ/DAZ, exception masks) task A left set.
 *
 * Here: 1 worker. Task A sets MXCSR's rounding control to "toward +inf"
 * and returns. Task B then reads MXCSR's rounding control: it must be the
 * worker's (round to nearest, 0), not A's.
 */
#include "util.h"

#if defined(__x86_64__)
static atomic_int done_n;
static atomic_uint seen_rc = 0xffff;

static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&done_n, 1);
}

static int set_upward(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    unsigned m = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr((m & ~0x6000u) | 0x4000u); /* RC = 10b: toward +inf */
    return 0;
}

static int read_rc(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&seen_rc, (__builtin_ia32_stmxcsr() >> 13) & 3u);
    return 0;
}
#endif

int main(void)
{
#if defined(__x86_64__)
    ax_sched *s = test_sched(1, 4);
    ax_spec a = {.fn = set_upward, .timeout_ms = 5000, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == 1, 5000));
    ax_spec b = {.fn = read_rc, .timeout_ms = 5000, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &b, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == 2, 5000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    fprintf(stderr, "task B's MXCSR rounding control: %u (worker's: %u)\n",
            atomic_load(&seen_rc), (__builtin_ia32_stmxcsr() >> 13) & 3u);
    CHECK_EQ(atomic_load(&seen_rc), 0);
#endif
    return 0;
}
