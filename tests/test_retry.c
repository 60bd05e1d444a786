/* Retries (DESIGN.md §8): delay formula bounds in both jitter modes, retry
 * on failure and on timeout, spacing of attempts, per-priority switch. */
#include "util.h"

#include <pthread.h>

static void check_bounds(void)
{
    ax_retry_policy exp = {AX_BACKOFF_EXPONENTIAL, 1000, 30000, 1000};
    ax_retry_policy full = {AX_BACKOFF_FULL_JITTER, 1000, 30000, 0};
    uint64_t d;
    /* Exact values at the ends of the random range. */
    CHECK_EQ(ax_retry_delay_ms(&exp, 0, 0, &d), 0);
    CHECK_EQ(d, 1000);
    CHECK_EQ(ax_retry_delay_ms(&exp, 0, 1000, &d), 0);
    CHECK_EQ(d, 2000); /* random(0, jitter) includes jitter */
    CHECK_EQ(ax_retry_delay_ms(&exp, 3, 0, &d), 0);
    CHECK_EQ(d, 8000);
    CHECK_EQ(ax_retry_delay_ms(&exp, 5, 0, &d), 0);
    CHECK_EQ(d, 30000); /* 32 s capped at max */
    CHECK_EQ(ax_retry_delay_ms(&exp, 4000000000u, 0, &d), 0);
    CHECK_EQ(d, 30000); /* no overflow for absurd attempts */
    CHECK_EQ(ax_retry_delay_ms(&full, 2, 4000, &d), 0);
    CHECK_EQ(d, 4000);
    CHECK_EQ(ax_retry_delay_ms(&full, 2, 4001, &d), 0);
    CHECK_EQ(d, 0);
    /* Random values stay inside [cap, cap + jitter] and [0, cap]. */
    uint64_t x = 88172645463325252ull;
    for (unsigned a = 0; a < 40; a++) {
        uint64_t cap = a >= 5 ? 30000 : 1000ull << a;
        for (int i = 0; i < 2000; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            CHECK_EQ(ax_retry_delay_ms(&exp, a, x, &d), 0);
            CHECK(d >= cap && d <= cap + 1000);
            CHECK_EQ(ax_retry_delay_ms(&full, a, x, &d), 0);
            CHECK(d <= cap);
        }
    }
    ax_retry_policy bad = {AX_BACKOFF_EXPONENTIAL, 0, 10, 0};
    CHECK_EQ(ax_retry_delay_ms(&bad, 0, 0, &d), AX_EINVAL);
    bad = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 100, 10, 0};
    CHECK_EQ(ax_retry_delay_ms(&bad, 0, 0, &d), AX_EINVAL);
    bad = (ax_retry_policy){(ax_backoff)9, 100, 1000, 0};
    CHECK_EQ(ax_retry_delay_ms(&bad, 0, 0, &d), AX_EINVAL);
}

struct log {
    atomic_int attempts;
    uint64_t at[16];
    atomic_int done;
    ax_result last;
    int fail_until; /* attempts below this fail */
    int mode;       /* 0: return 7, 1: sleep past the timeout */
};

static int flaky(ax_task *t, void *arg)
{
    struct log *l = arg;
    int a = atomic_fetch_add(&l->attempts, 1);
    CHECK_EQ(ax_task_attempt(t), (unsigned)a);
    l->at[a] = test_now_ms();
    if (a >= l->fail_until)
        return 0;
    if (l->mode == 1) {
        CHECK_EQ(ax_sleep(t, 10000), AX_ETIMEDOUT);
        return AX_ETIMEDOUT;
    }
    return 7;
}

static void done(const ax_result *r, void *arg)
{
    struct log *l = arg;
    l->last = *r;
    atomic_fetch_add(&l->done, 1);
}

static const ax_retry_policy fast = {AX_BACKOFF_EXPONENTIAL, 20, 80, 0};

static void run(ax_sched *s, struct log *l, ax_priority p, unsigned max_retry)
{
    /* 50 ms only where the timeout is what is tested: a short timeout can
     * end an attempt before its function is entered on a busy machine
     * (watchdog.c), and flaky counts entries as attempts. */
    ax_spec sp = {.fn = flaky, .arg = l, .priority = p, .timeout_ms = l->mode == 1 ? 50 : 5000,
                  .max_retry = max_retry,
                  .retry = &fast, .on_done = done, .cb_arg = l};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&l->done) == 1, 10000));
    usleep(20000);
    CHECK_EQ(atomic_load(&l->done), 1);
}

int main(void)
{
    check_bounds();
    ax_sched *s = test_sched(2, 100);

    /* Always failing, 3 retries: 4 attempts spaced >= 20, 40, 80 ms, then
     * FAILED with the function's code. */
    struct log a = {.fail_until = 100};
    run(s, &a, AX_PRIO_NORMAL, 3);
    CHECK_EQ(atomic_load(&a.attempts), 4);
    CHECK_EQ(a.last.state, AX_STATE_FAILED);
    CHECK_EQ(a.last.code, 7);
    CHECK_EQ(a.last.attempts, 4);
    CHECK(a.at[1] - a.at[0] >= 20 && a.at[2] - a.at[1] >= 40 && a.at[3] - a.at[2] >= 80);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.retried, 3);
    CHECK_EQ(st.failed, 1);
    CHECK_EQ(st.started, 4);

    /* Fails twice, then succeeds. */
    struct log b = {.fail_until = 2};
    run(s, &b, AX_PRIO_HIGH, 5);
    CHECK_EQ(b.last.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(b.last.attempts, 3);

    /* Timeouts retry too: times out twice, then succeeds. */
    struct log c = {.fail_until = 2, .mode = 1};
    run(s, &c, AX_PRIO_NORMAL, 2);
    CHECK_EQ(c.last.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(c.last.attempts, 3);
    /* ... and out of retries it ends TIMED_OUT. */
    struct log d = {.fail_until = 100, .mode = 1};
    run(s, &d, AX_PRIO_NORMAL, 1);
    CHECK_EQ(d.last.state, AX_STATE_TIMED_OUT);
    CHECK_EQ(d.last.code, AX_ETIMEDOUT);
    CHECK_EQ(d.last.attempts, 2);

    /* The seed's incident fix: no retries for LOW, switched at run time. */
    CHECK_EQ(ax_set_retry_enabled(s, AX_PRIO_LOW, false), 0);
    struct log e = {.fail_until = 100};
    run(s, &e, AX_PRIO_LOW, 5);
    CHECK_EQ(atomic_load(&e.attempts), 1);
    CHECK_EQ(e.last.state, AX_STATE_FAILED);
    /* ... and its error says why it was not retried (it said only "task
     * returned 7": a new user's trial). */
    CHECK_STR(e.last.error, "task returned 7; not retried: retries of its priority are switched "
                            "off (ax_set_retry_enabled)");
    CHECK_EQ(ax_set_retry_enabled(s, AX_PRIO_LOW, true), 0);
    struct log f = {.fail_until = 1};
    run(s, &f, AX_PRIO_LOW, 5);
    CHECK_EQ(f.last.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(f.last.attempts, 2);

    /* An absolute deadline bounds all attempts: no retry after it. */
    struct log g = {.fail_until = 100};
    ax_spec sp = {.fn = flaky, .arg = &g, .timeout_ms = 50, .max_retry = 10, .retry = &fast,
                  .deadline_ns = ax_now_ns() + 70000000ull, .on_done = done, .cb_arg = &g};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&g.done) == 1, 5000));
    CHECK(atomic_load(&g.attempts) <= 3);
    CHECK(g.last.state == AX_STATE_FAILED || g.last.state == AX_STATE_TIMED_OUT);
    ax_free(s);
    return 0;
}
