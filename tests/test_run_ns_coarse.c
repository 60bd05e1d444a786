/* ax_result.run_ns is > 0 exactly when the attempt's function ran, also
 * with a coarse clock. This test replaces clock_gettime for the whole
 * process (libax is linked in statically, so its calls bind to this one):
 * CLOCK_MONOTONIC advances in steps of 4 ms, as jiffies do on a VM without
 * a stable TSC. A task cancelled right after it began then measured a run
 * of 0 ns, which read as "never ran": libax_redis freed a consumer whose
 * puller coroutine still ran (an adversarial review's use after free).
 * Second part: a retry that never ran reports run_ns 0, not its failed
 * predecessor's, when it is cancelled in its bucket or its deadline passes
 * there; and the deadline's text names the attempt that failed (a review
 * found both wrong: the stale run time, and "attempt 2 failed"). */
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

static atomic_int entered, rdone;
static ax_result rres;

static int fail_once(ax_task *t, void *arg)
{
    (void)arg;
    if (ax_task_attempt(t) == 0)
        ax_pause(ax_task_sched(t)); /* the retry then stays queued */
    atomic_fetch_add(&entered, 1);
    return -1;
}

static void on_rdone(const ax_result *r, void *arg)
{
    (void)arg;
    rres = *r;
    atomic_fetch_add(&rdone, 1);
}

static void retry_never_ran(bool by_deadline)
{
    ax_sched *s = test_sched(1, 4);
    atomic_store(&entered, 0);
    atomic_store(&rdone, 0);
    static const ax_retry_policy fast = {.mode = AX_BACKOFF_FULL_JITTER, .base_ms = 1,
                                         .max_ms = 1};
    ax_spec sp = {.fn = fail_once, .timeout_ms = 5000, .max_retry = 1, .retry = &fast,
                  .on_done = on_rdone};
    if (by_deadline)
        sp.deadline_ns = ax_now_ns() + 400 * 1000000ull;
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&entered) == 1, 10000));
    /* The back-off (1 ms) ends: the retry is QUEUED, paused, not started. */
    CHECK(WAIT_UNTIL(test_stats(s).queued[AX_PRIO_NORMAL] == 1, 10000));
    if (!by_deadline)
        CHECK_EQ(ax_cancel(s, id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&rdone) == 1, 10000));
    CHECK_EQ(atomic_load(&entered), 1);
    CHECK_EQ(rres.attempts, 2);
    CHECK_EQ(rres.state, by_deadline ? AX_STATE_TIMED_OUT : AX_STATE_CANCELLED);
    if (rres.run_ns)
        fprintf(stderr, "retry never ran, run_ns %llu\n", (unsigned long long)rres.run_ns);
    CHECK_EQ(rres.run_ns, 0);
    if (by_deadline)
        CHECK_STR(rres.error, "deadline passed while its retry waited (attempt 1 failed)");
    ax_free(s);
}

int main(void)
{
    retry_never_ran(false);
    retry_never_ran(true);
    printf("a retry that never ran: run_ns 0, cancelled or past its deadline\n");

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
