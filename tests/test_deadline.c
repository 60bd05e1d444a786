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
 *  4. A job the worker takes for a start must not wait out another job's
 *     slow on_done where nothing enforces its deadline. One worker, cap 1:
 *     B holds the slot and the worker until just past E's deadline (E queued,
 *     deadline +50 ms); X is queued behind them (deadline +200 ms). The
 *     worker's next dispatch ends E (TIMED_OUT in the queue) and takes X in
 *     the same lock section; E's on_done then holds that worker until 100 ms
 *     past X's deadline. X must never SUCCEED after its deadline: it ends
 *     TIMED_OUT without running (handed back to its bucket by the watchdog, or
 *     refused at start once the on_done returned). The watchdog would end E
 *     itself (on the callback pool) had the worker not dispatched within
 *     HOLD_MS of E's deadline; a round where E's on_done did not run on B's
 *     worker checks only the invariant, and rounds repeat until two ran on
 *     it (at least one must).
 * Cases 1 and 2 run side by side, so the test takes about 3.5 s; case 4
 * about 0.3 s a round.
 */
#include "util.h"

#include <pthread.h>

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
    /* Entered once, or (a busy machine: its worker held past the 50 ms
     * timeout before the function began, watchdog.c) not at all. */
    CHECK_LE(atomic_load(&r->started), 1);
}

/* ---- 4. a slow on_done in dispatch does not hold a taken job ---------------- */

#ifdef TEST_TSAN
#define DX_E_MS 100 /* E's deadline, from just before the submissions */
#define DX_X_MS 300 /* X's deadline */
#else
#define DX_E_MS 50
#define DX_X_MS 200
#endif
#define DX_PAST_MS 100 /* E's on_done, on the worker, holds it until X's deadline + this */
#define DX_ROUNDS_MAX 10
#define DX_WANT 2 /* rounds where E's on_done ran on the worker */

static _Atomic uint64_t dx_e_deadline, dx_x_deadline, dx_x_end;
static pthread_t dx_b_thread; /* written before dx_b_in is set */
static atomic_int dx_b_in, dx_e_ran, dx_e_done, dx_e_on_worker, dx_x_ran, dx_x_done;
static ax_result dx_e_last, dx_x_last;

static int dx_b_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    dx_b_thread = pthread_self();
    atomic_store(&dx_b_in, 1);
    /* Spin (no ax call) until just past E's deadline, then free the slot:
     * the worker's next dispatch ends E and takes X. The watchdog would
     * expire E only HOLD_MS (10 ms) past its deadline. */
    uint64_t until = atomic_load(&dx_e_deadline) + 1000000u;
    while (ax_now_ns() < until)
        ;
    return 0;
}

static int dx_e_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&dx_e_ran, 1);
    return 0;
}

static void dx_e_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    dx_e_last = *r;
    bool on_worker = atomic_load(&dx_b_in) && pthread_equal(pthread_self(), dx_b_thread);
    atomic_store(&dx_e_on_worker, on_worker);
    if (on_worker) { /* a slow on_done: hold the worker past X's deadline */
        uint64_t until = atomic_load(&dx_x_deadline) + DX_PAST_MS * 1000000ull;
        while (ax_now_ns() < until)
            usleep(1000);
    }
    atomic_fetch_add(&dx_e_done, 1);
}

static int dx_x_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&dx_x_ran, 1);
    atomic_store(&dx_x_end, ax_now_ns());
    return 0;
}

static void dx_x_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    dx_x_last = *r;
    atomic_fetch_add(&dx_x_done, 1);
}

static void test_dispatch_ended_ondone(void)
{
    int exercised = 0, rounds = 0;
    while (exercised < DX_WANT && rounds < DX_ROUNDS_MAX) {
        rounds++;
        atomic_store(&dx_b_in, 0);
        atomic_store(&dx_e_ran, 0);
        atomic_store(&dx_e_done, 0);
        atomic_store(&dx_e_on_worker, 0);
        atomic_store(&dx_x_ran, 0);
        atomic_store(&dx_x_done, 0);
        atomic_store(&dx_x_end, 0);
        ax_sched *s = test_sched(1, 1);
        uint64_t now = ax_now_ns();
        atomic_store(&dx_e_deadline, now + DX_E_MS * 1000000ull);
        atomic_store(&dx_x_deadline, now + DX_X_MS * 1000000ull);
        ax_spec b = {.fn = dx_b_fn, .timeout_ms = 5000};
        ax_spec e = {.fn = dx_e_fn,
                     .timeout_ms = 1000,
                     .deadline_ns = atomic_load(&dx_e_deadline),
                     .on_done = dx_e_on_done};
        ax_spec x = {.fn = dx_x_fn,
                     .timeout_ms = 1000,
                     .deadline_ns = atomic_load(&dx_x_deadline),
                     .on_done = dx_x_on_done};
        CHECK_EQ(ax_pause(s), 0);
        CHECK_EQ(ax_submit(s, &b, NULL), 0);
        CHECK_EQ(ax_submit(s, &e, NULL), 0);
        CHECK_EQ(ax_submit(s, &x, NULL), 0);
        CHECK_EQ(ax_resume(s), 0);
        CHECK(WAIT_UNTIL(atomic_load(&dx_x_done) == 1 && atomic_load(&dx_e_done) == 1, 10000));
        usleep(20 * 1000); /* a second on_done would show now */

        bool on_worker = atomic_load(&dx_e_on_worker);
        uint64_t x_end = atomic_load(&dx_x_end), x_deadline = atomic_load(&dx_x_deadline);
        fprintf(stderr, "dispatch on_done, round %d: E's on_done on the worker: %s; X %s, ran %d",
                rounds, on_worker ? "yes" : "no", ax_state_name(dx_x_last.state),
                atomic_load(&dx_x_ran));
        if (x_end)
            fprintf(stderr, ", returned %lld ms after its deadline",
                    (long long)((int64_t)(x_end - x_deadline) / 1000000));
        fprintf(stderr, "\n");
        /* Always: X never succeeds after its deadline; each on_done once. */
        CHECK(dx_x_last.state != AX_STATE_SUCCEEDED || x_end <= x_deadline);
        CHECK_EQ(atomic_load(&dx_x_done), 1);
        CHECK_EQ(atomic_load(&dx_e_done), 1);
        CHECK_EQ(dx_e_last.state, AX_STATE_TIMED_OUT);
        CHECK_EQ(dx_e_last.code, AX_ETIMEDOUT);
        CHECK_EQ(atomic_load(&dx_e_ran), 0);
        if (on_worker) {
            exercised++;
            /* X was taken before E's on_done and held past its deadline. */
            CHECK_EQ(dx_x_last.state, AX_STATE_TIMED_OUT);
            CHECK_EQ(dx_x_last.code, AX_ETIMEDOUT);
            CHECK_EQ(atomic_load(&dx_x_ran), 0);
            ax_stats st = test_stats(s);
            CHECK_EQ(st.started, 1); /* B only */
            CHECK_EQ(st.succeeded, 1);
            CHECK_EQ(st.timed_out, 2);
            CHECK_EQ(st.running, 0);
            CHECK_EQ(st.queued[AX_PRIO_NORMAL], 0);
        } else {
            CHECK_LE(atomic_load(&dx_x_ran), 1);
        }
        CHECK_EQ(ax_shutdown(s, 1000), 0);
        ax_free(s);
        CHECK_EQ(atomic_load(&dx_x_done), 1);
        CHECK_EQ(atomic_load(&dx_e_done), 1);
    }
    fprintf(stderr, "dispatch on_done: %d of %d rounds ran E's on_done on the worker\n",
            exercised, rounds);
    CHECK(exercised >= 1);
}

/* A deadline_ns as far as it goes (UINT64_MAX: "never") is no deadline in
 * practice: a task queued behind a busy slot with it runs and succeeds. It
 * used to wrap to tick 0 in the scheduler's wheel (ns + 999999 overflowed)
 * and end TIMED_OUT in its bucket at the next dispatch (found by
 * tests/fuzz/fuzz_sched_api.c). */
static atomic_int far_release, far_done, far_state;
static int far_hold(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&far_release))
        if (ax_sleep(t, 1))
            return -1;
    return 0;
}
static int far_ok(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return 0;
}
static void far_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&far_state, (int)r->state);
    atomic_fetch_add(&far_done, 1);
}
static void test_far_deadline(void)
{
    ax_sched *s = test_sched(1, 1);
    ax_spec hold = {.fn = far_hold, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(s, &hold, NULL), 0);
    static const uint64_t far[] = {UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 999999};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
        atomic_store(&far_done, 0);
        atomic_store(&far_release, 0);
        ax_spec sp = {.fn = far_ok, .timeout_ms = 1000, .deadline_ns = far[i],
                      .on_done = far_on_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        usleep(50 * 1000); /* queued behind the held slot; the wheel turns */
        CHECK_EQ(atomic_load(&far_done), 0);
        atomic_store(&far_release, 1);
        CHECK(WAIT_UNTIL(atomic_load(&far_done) == 1, 5000));
        CHECK_EQ(atomic_load(&far_state), AX_STATE_SUCCEEDED);
        if (i + 1 < sizeof far / sizeof far[0]) {
            atomic_store(&far_release, 0);
            CHECK_EQ(ax_submit(s, &hold, NULL), 0);
        }
    }
    ax_stats st = test_stats(s);
    CHECK_EQ(st.timed_out, 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

int main(void)
{
    test_far_deadline();
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
    unsigned entered = atomic_load(&fail.started) + atomic_load(&tmo.started);
    CHECK_EQ(st.started, entered);
    /* Past the end of the 3 s back-off: no second attempt, no second on_done. */
    uint64_t until = t0 + BACKOFF_MS + 500;
    while (test_now_ms() < until)
        usleep(10 * 1000);
    CHECK_EQ(atomic_load(&fail.started) + atomic_load(&tmo.started), entered);
    CHECK_EQ(atomic_load(&fail.done_calls), 1);
    CHECK_EQ(atomic_load(&tmo.done_calls), 1);
    st = test_stats(s);
    CHECK_EQ(st.started, entered);
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

    test_dispatch_ended_ondone();
    return 0;
}
