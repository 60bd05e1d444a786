/* A lingering task whose retry was scheduled meanwhile: its LINGERING
 * event reports its own attempt (number, queue wait, run time to its
 * timeout), and reading them races with nothing.
 *
 * The report read the job's wait_ns and run_ns when it was made, grace_ms
 * after the timeout, while the thread that scheduled the retry at the
 * timeout wrote run_ns with no order between the two: a data race TSan
 * reported in 1 of 3 runs of a reviewer's program (the watchdog's read in
 * linger_hog_check against sched_retry_locked's write). Now the numbers
 * come from the attempt's own run, written before it started and
 * published with it.
 *
 * Two cases: a hog spinning without yielding (reported by the watchdog) and
 * a task parking again and again in ax_sleep after its timeout (reported by
 * its worker). Each: timeout 30 ms, retry after 1 ms, grace 60 ms. */
#include "util.h"

#include <stdlib.h>

struct seen {
    atomic_int n;
    unsigned attempt;
    uint64_t wait_ns, run_ns;
};
static struct seen seen;
static atomic_int retries_started;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_STARTED && e->attempt == 1) atomic_fetch_add(&retries_started, 1);
    if (e->kind != AX_EV_LINGERING) return;
    seen.attempt = e->attempt;
    seen.wait_ns = e->wait_ns;
    seen.run_ns = e->run_ns;
    atomic_fetch_add(&seen.n, 1);
}

/* Attempt 0 ignores its deadline for 400 ms; the retry returns at once. */
static int spinner(ax_task *t, void *arg)
{
    (void)arg;
    if (ax_task_attempt(t) > 0) return 0;
    uint64_t until = ax_now_ns() + 400000000u;
    while (ax_now_ns() < until)
        __asm__ __volatile__("" ::: "memory");
    return 0;
}

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    if (ax_task_attempt(t) > 0) return 0;
    uint64_t until = ax_now_ns() + 400000000u;
    while (ax_now_ns() < until)
        (void)ax_sleep(t, 5); /* AX_ETIMEDOUT after the deadline: parks again */
    return 0;
}

static void one(ax_fn fn, const char *what)
{
    memset(&seen, 0, sizeof seen);
    atomic_store(&retries_started, 0);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.grace_ms = 60;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    ax_retry_policy rp = {.base_ms = 1, .max_ms = 1, .jitter_ms = 0};
    ax_spec sp = {
        /* 150 ms, not less: attempt 0 must enter its function (a held
         * worker can end an attempt unbegun, watchdog.c), and a first TSan
         * fiber is slow; 150 + grace 60 is still well inside the 400 ms. */
        .fn = fn, .priority = AX_PRIO_HIGH, .timeout_ms = 150, .max_retry = 1, .retry = &rp};
    uint64_t t0 = ax_now_ns();
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&seen.n) == 1, 30000));
    CHECK_EQ(ax_events_flush(s), 0);
    fprintf(stderr, "%s: LINGERING attempt %u wait %llu us run %llu us (retries started %d)\n",
            what, seen.attempt, (unsigned long long)seen.wait_ns / 1000,
            (unsigned long long)seen.run_ns / 1000, atomic_load(&retries_started));
    /* The retry was scheduled at the timeout, before the report; it
     * starts once the attempt's coroutine returns (it holds the job). */
    CHECK_EQ(seen.attempt, 0);
    /* Its run time to its timeout: 150 ms, give or take the wheel's tick. */
    CHECK(seen.run_ns >= 149000000u);
    CHECK(seen.run_ns <= ax_now_ns() - t0);
    CHECK(seen.wait_ns <= ax_now_ns() - t0);
    CHECK(WAIT_UNTIL(atomic_load(&retries_started) == 1, 30000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(void)
{
    one(spinner, "hog");
    one(sleeper, "parked");
    puts("test_linger_retry: ok");
    return 0;
}
