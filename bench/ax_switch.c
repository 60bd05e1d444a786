/* ax_switch.c - two ax tasks handing control back and forth with ax_yield.
 *
 * One worker, two tasks. Once both have started, each calls ax_yield
 * `rounds` times; every yield parks the caller and resumes the other task, so
 * the pair makes 2 * rounds hand-offs. Prints
 *   ax_switch_ns  wall time / hand-offs  (task -> worker loop -> other task)
 * Peer: two goroutines ping-ponging over unbuffered channels (go/switch.go).
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
    printf("ax_switch_ns %.2f\n", (double)(t_end - t_begin) / (2.0 * (double)rounds));
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
