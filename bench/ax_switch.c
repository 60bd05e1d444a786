/* ax_switch.c - two ax tasks handing control back and forth with ax_yield.
 *
 * One worker, two tasks. Once both have started, each calls ax_yield
 * `rounds` times; every yield parks the caller and resumes the other task, so
 * the pair makes 2 * rounds hand-offs. Prints
 *   ax_switch_ns  wall time / hand-offs
 * The path measured is the public ax_yield's, whatever it takes: with the
 * other task ready it switches from task to task directly (the caller to the
 * back of the worker's ready queue, the other resumed), and once per budget
 * of direct hand-offs (64 today) it goes task -> worker loop (timers, inbox,
 * dispatch) -> other task instead. The bare register switch, with no
 * scheduler around it, is bench_switch.c's coro_switch_ns: its own row.
 * Per hand-off ax does what Go does not: a deadline and cancel check, and a
 * publish of the running task for the watchdog. Go does what ax does not:
 * the global run queue under the scheduler's lock, timers checked on every
 * schedule().
 * Peer: two goroutines each calling runtime.Gosched `rounds` times at
 * GOMAXPROCS=1 (go/switch.go).
 */
#include "ax_bench.h"

static long rounds;
static atomic_int ready, begun, finished;
static uint64_t t_begin, t_end;

static int pingpong(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&ready, 1);
    while (atomic_load(&ready) < 2) { /* wait for the partner to exist */
        int rc = ax_yield(t);
        if (rc != 0)
            return rc;
    }
    if (atomic_fetch_add(&begun, 1) == 0)
        t_begin = bu_now_ns();
    for (long i = 0; i < rounds; i++) {
        int rc = ax_yield(t);
        if (rc != 0)
            return rc;
    }
    if (atomic_fetch_add(&finished, 1) == 1)
        t_end = bu_now_ns();
    return 0;
}

int main(int argc, char **argv)
{
    rounds = (long)bu_arg(argc, argv, "rounds", 1000000);
    bu_args_done(argc, argv);

    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    struct bu_latch done;
    bu_latch_init(&done, 2);
    /* Queue both before dispatch starts, so that they start together. */
    ab_check(ax_pause(s), "ax_pause");
    for (int i = 0; i < 2; i++) {
        ax_spec spec = ab_spec(pingpong, NULL, AX_PRIO_NORMAL, 120000, ab_done, &done);
        ab_check(ax_submit(s, &spec, NULL), "ax_submit");
    }
    ab_check(ax_resume(s), "ax_resume");
    ab_wait_all(&done, 120, "switch");
    printf("ax_switch%s_ns %.2f\n", AB_LIB, (double)(t_end - t_begin) / (2.0 * (double)rounds));
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
