/* test_deadline.c - the absolute deadline (ax_spec.deadline_ns) bounds the
 * whole task, retry back-offs included (ax.h: "covers queue wait and all
 * attempts"; DESIGN.md §8).
 *
 *  1. A task that fails at once, deadline now + 300 ms, max_retry 3, a 3 s
 *     back-off (base = max = 3000, jitter 0): the retry could only start
 *     after the deadline, so the task ends TIMED_OUT / AX_ETIMEDOUT well
 *     before the back-off would end (generous bound: 1 s after the submit),
 *     with attempts == 1 and its function run once. on_done runs exactly
 *     once and no attempt starts later (checked past the 3 s back-off).
 *  2. The same with an attempt that times out (timeout_ms 50, it sleeps
 *     10 s) instead of failing.
 *  3. A retry whose back-off ends before the deadline still runs: deadline
 *     now + 2 s, back-off 100 ms, the second attempt succeeds: SUCCEEDED,
 *     attempts 2.
 * Cases 1 and 2 run side by side, so the test takes about 3.5 s.
 */
#include "util.h"

#define DEADLINE_MS 300
#define BACKOFF_MS 3000
#define DONE_BOUND_MS 1000 /* liveness: "no later than ~+1000 ms" */

struct rec {
    int fail_mode;        /* 0: return 1 at once, 1: ax_sleep past the timeout */
    int succeed_from;     /* attempts >= this return 0 (0: never) */
    atomic_int started;   /* attempts that entered the function */
    atomic_int done_calls;
    _Atomic uint64_t submit_ms, done_ms;
    ax_result last;       /* written by on_done before done_calls */
};

static int rec_fn(ax_task *t, void *arg)
{
    struct rec *r = arg;
    int a = atomic_fetch_add(&r->started, 1);
    CHECK_EQ(ax_task_attempt(t), (unsigned)a);
    if (r->succeed_from && a + 1 >= r->succeed_from)
        return 0;
    if (r->fail_mode == 1) {
        CHECK_EQ(ax_sleep(t, 10000), AX_ETIMEDOUT);
        return AX_ETIMEDOUT;
    }
    return 1;
}

static void rec_done(const ax_result *res, void *arg)
{
    struct rec *r = arg;
    r->last = *res;
    atomic_store(&r->done_ms, test_now_ms());
    atomic_fetch_add(&r->done_calls, 1);
}

static const ax_retry_policy slow = {AX_BACKOFF_EXPONENTIAL, BACKOFF_MS, BACKOFF_MS, 0};
static const ax_retry_policy quick = {AX_BACKOFF_EXPONENTIAL, 100, 100, 0};

static void submit_rec(ax_sched *s, struct rec *r, uint64_t timeout_ms, uint64_t deadline_ms,
                       unsigned max_retry, const ax_retry_policy *pol)
{
    atomic_store(&r->submit_ms, test_now_ms());
    ax_spec sp = {.fn = rec_fn,
                  .arg = r,
                  .timeout_ms = timeout_ms,
                  .deadline_ns = ax_now_ns() + deadline_ms * 1000000ull,
                  .max_retry = max_retry,
                  .retry = pol,
                  .on_done = rec_done,
                  .cb_arg = r};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
}

static void check_timed_out_early(struct rec *r)
{
    /* Waits a little past the bound so that a failure shows the values. */
    CHECK(WAIT_UNTIL(atomic_load(&r->done_calls) >= 1, BACKOFF_MS + 1000));
    uint64_t took = atomic_load(&r->done_ms) - atomic_load(&r->submit_ms);
    fprintf(stderr, "deadline: on_done after %llu ms: %s, attempts %u\n",
            (unsigned long long)took, ax_state_name(r->last.state), r->last.attempts);
    CHECK_LE(took, DONE_BOUND_MS);
    CHECK_EQ(r->last.state, AX_STATE_TIMED_OUT);
    CHECK_EQ(r->last.code, AX_ETIMEDOUT);
    CHECK_EQ(r->last.attempts, 1);
    CHECK_EQ(atomic_load(&r->started), 1);
}

int main(void)
{
    ax_sched *s = test_sched(2, 16);

    /* 1 and 2: the back-off would end ~2.7 s after the deadline. */
    static struct rec fail = {.fail_mode = 0}, tmo = {.fail_mode = 1};
    submit_rec(s, &fail, 1000, DEADLINE_MS, 3, &slow);
    submit_rec(s, &tmo, 50, DEADLINE_MS, 3, &slow);
    uint64_t t0 = test_now_ms();
    check_timed_out_early(&fail);
    check_timed_out_early(&tmo);
    /* Nothing is left waiting: no back-off entry outlives the task. */
    ax_stats st = test_stats(s);
    CHECK_EQ(st.delayed, 0);
    CHECK_EQ(st.timed_out, 2);
    CHECK_EQ(st.started, 2);
    /* Past the end of the 3 s back-off: no second attempt, no second on_done. */
    uint64_t until = t0 + BACKOFF_MS + 500;
    while (test_now_ms() < until)
        usleep(10 * 1000);
    CHECK_EQ(atomic_load(&fail.started), 1);
    CHECK_EQ(atomic_load(&tmo.started), 1);
    CHECK_EQ(atomic_load(&fail.done_calls), 1);
    CHECK_EQ(atomic_load(&tmo.done_calls), 1);
    st = test_stats(s);
    CHECK_EQ(st.started, 2);
    CHECK_EQ(st.timed_out, 2);
    CHECK_EQ(st.failed, 0);
    CHECK_EQ(st.delayed, 0);

    /* 3: the back-off (100 ms) ends well before the deadline (2 s). */
    static struct rec ok = {.fail_mode = 0, .succeed_from = 2};
    submit_rec(s, &ok, 1000, 2000, 3, &quick);
    CHECK(WAIT_UNTIL(atomic_load(&ok.done_calls) == 1, 5000));
    CHECK_EQ(ok.last.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(ok.last.code, 0);
    CHECK_EQ(ok.last.attempts, 2);
    CHECK_EQ(atomic_load(&ok.started), 2);
    usleep(100 * 1000);
    CHECK_EQ(atomic_load(&ok.done_calls), 1);
    st = test_stats(s);
    CHECK_EQ(st.succeeded, 1);

    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
