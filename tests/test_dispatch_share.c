/* test_dispatch_share - a worker takes its share of what is queued, not the
 * whole burst, so a burst of short CPU-bound tasks runs on every worker.
 *
 * Defect (issue 10's session of 2026-12-03, found while sizing the dispatch
 * batch): a worker took up to DISPATCH_BATCH (8) jobs in one lock section
 * however many workers there were. With 2 workers, a burst of 8 tasks that
 * each compute for a few milliseconds went to whichever worker took the lock
 * first: it ran them one after another (64 ms here) while the other worker
 * found nothing to take. The watchdog does not help: the worker switches
 * between the tasks, so it is never held for HOLD_MS. A worker now takes at
 * most ceil(queued / workers) (worker.c dispatch), and the rest stays in
 * the buckets for the worker that a full batch wakes.
 *
 * 2 workers, paused; 8 tasks queued, each spins 8 ms without an ax call;
 * resume. Checked: every task succeeded, and each worker started at least
 * one (on the old code one worker started all 8). The second worker has
 * the first one's 32 ms to get a CPU, so a busy machine does not fail it. */
#include "util.h"

#include <pthread.h>

#define NTASKS 8

static pthread_t ran_on[NTASKS];
static atomic_int nstarted;

static int spin_8ms(ax_task *t, void *arg)
{
    (void)t;
    ran_on[(uintptr_t)arg] = pthread_self();
    atomic_fetch_add(&nstarted, 1);
    uint64_t end = ax_now_ns() + 8000000u;
    while (ax_now_ns() < end)
        ;
    return 0;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_pause(s), 0);
    for (uintptr_t i = 0; i < NTASKS; i++) {
        ax_spec sp = {.fn = spin_8ms, .arg = (void *)i, .timeout_ms = 120000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL(test_stats(s).succeeded == NTASKS, 120000));
    CHECK_EQ(atomic_load(&nstarted), NTASKS);
    int on_first = 0;
    for (int i = 0; i < NTASKS; i++)
        on_first += pthread_equal(ran_on[i], ran_on[0]) != 0;
    fprintf(stderr, "tasks started by the first task's worker: %d of %d\n", on_first, NTASKS);
    CHECK(on_first < NTASKS); /* the other worker started some */
    ax_stats st = test_stats(s);
    CHECK_EQ(st.failed + st.timed_out + st.cancelled, 0u);
    CHECK_EQ(ax_shutdown(s, 10000), 0);
    ax_free(s);
    return 0;
}
