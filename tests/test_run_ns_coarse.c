/* ax_result.run_ns is > 0 exactly when the attempt's function ran, also
 * with a coarse clock. This test replaces clock_gettime for the whole
 * process (libax is linked in statically, so its calls bind to this one):
 * CLOCK_MONOTONIC advances in steps of 4 ms, as jiffies do on a VM without
 * a stable TSC. A task cancelled right after it began then measured a run
 * of 0 ns, which read as "never ran": libax_redis freed a consumer whose
 * puller coroutine still ran (an adversarial review's use after free). */
#include "util.h"

#include <sys/syscall.h>

#define GRAIN_NS 4000000L

int clock_gettime(clockid_t id, struct timespec *ts)
{
    long rc = syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && id == CLOCK_MONOTONIC)
        ts->tv_nsec -= ts->tv_nsec % GRAIN_NS;
    return (int)rc;
}

static atomic_int began, ndone, ran_zero, queued_nonzero;

static int parks(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&began, 1);
    ax_sleep(t, 10000);
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    bool ran = arg != NULL; /* set by main once the task was seen running */
    if (ran && r->run_ns == 0)
        atomic_fetch_add(&ran_zero, 1);
    if (!ran && r->run_ns != 0)
        atomic_fetch_add(&queued_nonzero, 1);
    atomic_fetch_add(&ndone, 1);
}

int main(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    usleep(1000);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(a.tv_nsec % GRAIN_NS == 0 && b.tv_nsec % GRAIN_NS == 0); /* the shim is in use */

    ax_sched *s = test_sched(1, 1);
    enum { N = 40 };
    for (int i = 0; i < N; i++) {
        /* Running: cancelled as soon as its function began (parked in
         * ax_sleep), well within one 4 ms step most of the time. */
        int b0 = atomic_load(&began);
        ax_spec sp = {.fn = parks, .timeout_ms = 60000, .on_done = on_done, .cb_arg = (void *)1};
        uint64_t id;
        CHECK_EQ(ax_submit(s, &sp, &id), 0);
        /* Queued behind it (cap 1): cancelled before it ever ran. */
        ax_spec q = {.fn = parks, .timeout_ms = 60000, .on_done = on_done, .cb_arg = NULL};
        uint64_t qid;
        CHECK_EQ(ax_submit(s, &q, &qid), 0);
        CHECK(WAIT_UNTIL(atomic_load(&began) == b0 + 1, 10000));
        CHECK_EQ(ax_cancel(s, qid), 0);
        CHECK_EQ(ax_cancel(s, id), 0);
        CHECK(WAIT_UNTIL(atomic_load(&ndone) == 2 * (i + 1), 10000));
    }
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    if (atomic_load(&ran_zero))
        fprintf(stderr, "%d of %d cancelled running attempts reported run_ns 0\n",
                atomic_load(&ran_zero), N);
    CHECK_EQ(atomic_load(&ran_zero), 0);
    CHECK_EQ(atomic_load(&queued_nonzero), 0);
    printf("test_run_ns_coarse: ok (%d running and %d queued tasks cancelled)\n", N, N);
    return 0;
}
