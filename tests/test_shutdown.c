/* Shutdown (DESIGN.md §10): 100 000 queued tasks and a few running ones;
 * every admitted task's on_done runs exactly once, nothing is lost.
 *
 * test_shutdown_held_tostart: ax_shutdown begins while the only worker is
 * held by a task H and the jobs B it took in the same dispatch wait on its
 * to-start list; the watchdog hands a held worker's to-start jobs back.
 * Whether that happens before or after shutdown drained the buckets, every
 * B must end CANCELLED with its on_done run exactly once by the time
 * ax_shutdown returns, none of them runs, nothing stays queued. (A hand-back
 * after the drain once put them in a bucket nobody looked at again: their
 * on_done ran only in ax_free, while ax_shutdown returned 0.) H ignores
 * everything but its own cancellation, and returns once the B have ended so
 * that none of them could start on the worker it lets go. Several rounds:
 * the hand-back comes 10 ms (HOLD_MS) after H starts, so the order varies
 * on a busy machine. */
#include "util.h"

#include <stdlib.h>

#define QUEUED 100000
#define RUNNING 50
#define DELAYED 100

static atomic_uchar *seen; /* on_done calls per task index */
static atomic_int states[8];
static atomic_int started;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&started, 1);
    int rc = ax_sleep(t, 60000);
    CHECK_EQ(rc, AX_ECANCELED);
    return rc;
}

static int quick(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    size_t i = (size_t)(uintptr_t)arg;
    atomic_fetch_add(&seen[i], 1);
    atomic_fetch_add(&states[r->state], 1);
}

/* ---- ax_shutdown while the held worker's to-start list is full ------------ */

#ifdef TEST_TSAN
#define HB_ROUNDS 3
#else
#define HB_ROUNDS 6
#endif
#define HB_TAKEN 3 /* jobs taken with H, waiting to start behind it */

static atomic_int hb_h_in, hb_h_done, hb_h_state, hb_b_ran, hb_b_done, hb_b_bad;

static int hb_hold_fn(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&hb_h_in, 1);
    /* Holds the worker, no ax call that parks, until shutdown cancels it. */
    uint64_t end = test_now_ms() + 30000;
    while (!ax_cancelled(t) && test_now_ms() < end)
        usleep(1000);
    /* Then until the B behind it have ended (bounded). */
    end = test_now_ms() + 500;
    while (atomic_load(&hb_b_done) < HB_TAKEN && test_now_ms() < end)
        usleep(1000);
    return 0;
}

static void hb_h_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&hb_h_state, (int)r->state);
    atomic_fetch_add(&hb_h_done, 1);
}

static int hb_b_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&hb_b_ran, 1);
    return 0;
}

static void hb_b_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state != AX_STATE_CANCELLED || r->code != AX_ECANCELED || r->attempts != 1)
        atomic_fetch_add(&hb_b_bad, 1);
    atomic_fetch_add(&hb_b_done, 1);
}

static void test_shutdown_held_tostart(void)
{
    for (int round = 0; round < HB_ROUNDS; round++) {
        atomic_store(&hb_h_in, 0);
        atomic_store(&hb_h_done, 0);
        atomic_store(&hb_h_state, -1);
        atomic_store(&hb_b_ran, 0);
        atomic_store(&hb_b_done, 0);
        atomic_store(&hb_b_bad, 0);
        ax_sched *s = test_sched(1, 8);
        ax_spec h = {.fn = hb_hold_fn, .timeout_ms = 60000, .on_done = hb_h_on_done};
        ax_spec b = {.fn = hb_b_fn, .timeout_ms = 1000, .on_done = hb_b_on_done};
        CHECK_EQ(ax_pause(s), 0);
        CHECK_EQ(ax_submit(s, &h, NULL), 0);
        for (int i = 0; i < HB_TAKEN; i++)
            CHECK_EQ(ax_submit(s, &b, NULL), 0);
        CHECK_EQ(ax_resume(s), 0); /* one dispatch takes H and every B */
        uint64_t end = test_now_ms() + 10000;
        while (!atomic_load(&hb_h_in) && test_now_ms() < end)
            ; /* no sleep: shut down within HOLD_MS of H's start if we can */
        CHECK(atomic_load(&hb_h_in));

        int rc = ax_shutdown(s, 50);
        ax_stats st = test_stats(s);
        fprintf(stderr,
                "shutdown, held worker, round %d: rc %d, B on_done %d/%d (ran %d), H on_done %d; "
                "queued %llu, running %llu, cancelled %llu\n",
                round, rc, atomic_load(&hb_b_done), HB_TAKEN, atomic_load(&hb_b_ran),
                atomic_load(&hb_h_done),
                (unsigned long long)(st.queued[0] + st.queued[1] + st.queued[2]),
                (unsigned long long)st.running, (unsigned long long)st.cancelled);
        CHECK_EQ(rc, 0);
        CHECK_EQ(atomic_load(&hb_b_done), HB_TAKEN); /* every on_done ran */
        CHECK_EQ(atomic_load(&hb_b_bad), 0);         /* each CANCELLED */
        CHECK_EQ(atomic_load(&hb_b_ran), 0);
        CHECK_EQ(atomic_load(&hb_h_done), 1);
        CHECK_EQ(atomic_load(&hb_h_state), AX_STATE_CANCELLED);
        for (int p = 0; p < AX_PRIO_COUNT; p++)
            CHECK_EQ(st.queued[p], 0);
        CHECK_EQ(st.running, 0);
        CHECK_EQ(st.delayed, 0);
        CHECK_EQ(st.started, 1);
        CHECK_EQ(st.cancelled, 1 + HB_TAKEN);
        CHECK_EQ(st.submitted, st.succeeded + st.failed + st.timed_out + st.cancelled);
        ax_free(s);
        CHECK_EQ(atomic_load(&hb_b_done), HB_TAKEN); /* no second call in ax_free */
        CHECK_EQ(atomic_load(&hb_b_ran), 0);
        CHECK_EQ(atomic_load(&hb_h_done), 1);
    }
}

/* ax_free / ax_shutdown from the scheduler's own callback threads (on_done
 * on ax-finish for a task whose worker was held, on_timeout on
 * ax-callback-N) are refused: they would wait for, or free, themselves. */
static ax_sched *cb_s;
static atomic_int cb_calls, cb_shutdown_rc;
static int cb_spin(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    uint64_t end = ax_now_ns() + 200 * 1000000ull;
    while (ax_now_ns() < end)
        ;
    return 1;
}
static int cb_ok(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return 0;
}
static void cb_free_self(const ax_result *r, void *arg)
{
    (void)r, (void)arg;
    atomic_store(&cb_shutdown_rc, ax_shutdown(cb_s, 100));
    ax_free(cb_s); /* refused, with a message */
    atomic_fetch_add(&cb_calls, 1);
}

static void test_free_from_callbacks(void)
{
    for (int use_timeout = 0; use_timeout < 2; use_timeout++) {
        atomic_store(&cb_calls, 0);
        cb_s = test_sched(2, 8);
        ax_spec sp = {.fn = cb_spin, .timeout_ms = 20};
        if (use_timeout)
            sp.on_timeout = cb_free_self;
        else
            sp.on_done = cb_free_self;
        CHECK_EQ(ax_submit(cb_s, &sp, NULL), 0);
        CHECK(WAIT_UNTIL(atomic_load(&cb_calls) == 1, 10000));
        CHECK_EQ(atomic_load(&cb_shutdown_rc), AX_ESTATE);
        /* Still a working scheduler. */
        atomic_store(&cb_calls, 0);
        ax_spec ok = {.fn = cb_ok, .timeout_ms = 1000};
        CHECK_EQ(ax_submit(cb_s, &ok, NULL), 0);
        CHECK(WAIT_UNTIL(test_stats(cb_s).succeeded == 1, 10000));
        ax_free(cb_s);
    }
}

/* The same from an on_done that runs on the caller's own thread: ax_cancel
 * of a queued task, and ax_shutdown cancelling a queued task, run its
 * on_done there. ax_free used to free the scheduler under the terminal path
 * (use after free), and a nested ax_shutdown waited for itself (~1 s per
 * queued task) instead of refusing. */
static atomic_int caller_calls, caller_rc;
static void caller_free_self(const ax_result *r, void *arg)
{
    (void)r, (void)arg;
    atomic_store(&caller_rc, ax_shutdown(cb_s, 100));
    ax_free(cb_s); /* refused, with a message */
    atomic_fetch_add(&caller_calls, 1);
}

static void test_free_from_on_done_on_caller(void)
{
    for (int via_shutdown = 0; via_shutdown < 2; via_shutdown++) {
        atomic_store(&caller_calls, 0);
        atomic_store(&caller_rc, 0);
        cb_s = test_sched(1, 8);
        CHECK_EQ(ax_pause(cb_s), 0); /* stays queued: ended on this thread */
        enum { N = 20 };
        uint64_t ids[N];
        for (int i = 0; i < N; i++) {
            ax_spec sp = {.fn = cb_ok, .timeout_ms = 60000, .on_done = caller_free_self};
            CHECK_EQ(ax_submit(cb_s, &sp, &ids[i]), 0);
        }
        if (via_shutdown) {
            CHECK_EQ(ax_shutdown(cb_s, 1000), 0);
            CHECK_EQ(atomic_load(&caller_calls), N);
        } else {
            CHECK_EQ(ax_cancel(cb_s, ids[0]), 0);
            CHECK_EQ(atomic_load(&caller_calls), 1);
        }
        CHECK_EQ(atomic_load(&caller_rc), AX_ESTATE);
        ax_free(cb_s);
    }
}

/* ax_shutdown returns only once every on_done has run, including one still
 * running when shutdown starts: (a) of a task that returned on its worker,
 * (b) of a task whose deadline passed while it was queued (ended by the
 * worker that turned the scheduler's wheel, with no coroutine left to wait
 * for). The load count used to drop before on_done ran, and ax_shutdown
 * waited for it only until its own timeout (+100 ms), so it could return
 * first (found by tests/fuzz/fuzz_sched_api.c). */
static atomic_int sd_in, sd_out;
static int sd_quick(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return 0;
}
static void sd_slow_done(const ax_result *r, void *arg)
{
    (void)r, (void)arg;
    atomic_store(&sd_in, 1);
    usleep(300 * 1000);
    atomic_store(&sd_out, 1);
}
static void test_shutdown_waits_for_on_done(bool queued)
{
    ax_sched *s = test_sched(1, 1);
    atomic_store(&sd_in, 0);
    atomic_store(&sd_out, 0);
    if (queued) /* it stays queued, with a deadline 50 ms away */
        CHECK_EQ(ax_pause(s), 0);
    ax_spec sp = {.fn = sd_quick, .timeout_ms = 1000, .on_done = sd_slow_done,
                  .deadline_ns = queued ? ax_now_ns() + 50 * 1000000ull : 0};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&sd_in) == 1, 5000));
    CHECK_EQ(ax_shutdown(s, 0), 0);
    CHECK_EQ(atomic_load(&sd_out), 1);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, st.succeeded + st.failed + st.timed_out + st.cancelled);
    CHECK_EQ(queued ? st.timed_out : st.succeeded, 1);
    ax_free(s);
}

int main(void)
{
    test_shutdown_waits_for_on_done(false);
    test_shutdown_waits_for_on_done(true);
    test_free_from_callbacks();
    test_free_from_on_done_on_caller();
    seen = calloc(QUEUED + RUNNING + DELAYED, 1);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = RUNNING;
    c.capacity[AX_PRIO_NORMAL] = QUEUED;
    c.capacity[AX_PRIO_LOW] = DELAYED;
    c.shed_ratio = 1.0;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), 0);
    size_t k = 0;
    for (int i = 0; i < RUNNING; i++, k++) {
        ax_spec sp = {.fn = sleeper, .priority = AX_PRIO_HIGH, .timeout_ms = 120000,
                      .on_done = on_done, .cb_arg = (void *)(uintptr_t)k};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&started) == RUNNING, 5000));
    for (int i = 0; i < QUEUED; i++, k++) {
        ax_spec sp = {.fn = quick, .timeout_ms = 1000, .on_done = on_done,
                      .cb_arg = (void *)(uintptr_t)k};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    for (int i = 0; i < DELAYED; i++, k++) {
        ax_spec sp = {.fn = quick, .priority = AX_PRIO_LOW, .timeout_ms = 1000,
                      .delay_ms = 30000, .on_done = on_done, .cb_arg = (void *)(uintptr_t)k};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    ax_stats st = test_stats(s);
    CHECK_EQ(st.running, RUNNING);
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], QUEUED);
    CHECK_EQ(st.delayed, DELAYED);

    /* The running sleepers ignore nothing: cancelled at the deadline they
     * return at once, so shutdown completes. */
    uint64_t t0 = test_now_ms();
    CHECK_EQ(ax_shutdown(s, 200), 0);
    uint64_t took = test_now_ms() - t0;
    CHECK(took >= 200);
    for (size_t i = 0; i < k; i++)
        CHECK_EQ(atomic_load(&seen[i]), 1);
    CHECK_EQ(atomic_load(&states[AX_STATE_CANCELLED]), QUEUED + RUNNING + DELAYED);
    st = test_stats(s);
    CHECK_EQ(st.cancelled, QUEUED + RUNNING + DELAYED);
    CHECK_EQ(st.running, 0);
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], 0);
    CHECK_EQ(st.delayed, 0);
    CHECK_EQ(st.submitted, st.succeeded + st.failed + st.timed_out + st.cancelled);
    ax_spec sp = {.fn = quick, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_ESHUTDOWN);
    CHECK_EQ(ax_shutdown(s, 0), 0); /* idempotent */
    ax_free(s);
    for (size_t i = 0; i < k; i++)
        CHECK_EQ(atomic_load(&seen[i]), 1);
    free(seen);

    /* Running tasks that finish before the deadline are not cancelled. */
    s = test_sched(2, 10);
    for (int i = 0; i < 5; i++) {
        ax_spec q = {.fn = quick, .timeout_ms = 1000};
        CHECK_EQ(ax_submit(s, &q, NULL), 0);
    }
    CHECK_EQ(ax_shutdown(s, 2000), 0);
    st = test_stats(s);
    CHECK_EQ(st.succeeded + st.cancelled, 5);
    ax_free(s);

    test_shutdown_held_tostart();
    return 0;
}
