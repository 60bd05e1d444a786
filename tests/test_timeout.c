/* test_timeout.c - deadlines are enforced without the task's good will
 * (DESIGN.md §1 goal 3, §7; ax.h ax_spec.timeout_ms, on_timeout, ax_sleep,
 * ax_cancelled).
 *
 *  1. A task that busy-loops for 1.5 s with no ax call and a 200 ms timeout,
 *     max_concurrency 1, 2 workers: its on_done reports TIMED_OUT /
 *     AX_ETIMEDOUT long before the loop ends, its slot is freed at once (a
 *     queued second task starts while the first still loops), ax_stats shows
 *     running 0 and the orphan, on_timeout runs exactly once on a thread that
 *     is neither a worker nor the submitter.
 *  2. A task parked in ax_sleep(5000) with a 100 ms timeout gets
 *     AX_ETIMEDOUT from ax_sleep near the deadline.
 *  3. A task that overran its deadline (an orphan) sees AX_ETIMEDOUT from
 *     ax_cancelled and from every blocking call, and does not get a second
 *     on_done when it finally returns.
 */
#include "util.h"

#include <pthread.h>

/* Spin on the raw clock: the hog must make no ax call at all. */
static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static atomic_ulong main_tid;

/* ---- part 1: the CPU hog ------------------------------------------------ */

#define HOG_LOOP_MS 1500
#define HOG_TIMEOUT_MS 200

static atomic_int hog_looping, hog_finished;
static atomic_ulong hog_tid, second_tid, timeout_tid;
static _Atomic uint64_t hog_start_ms, hog_end_ms, hog_done_ms, second_start_ms;
static atomic_int hog_done_calls, hog_timeout_calls, second_done_calls;
static atomic_int hog_done_state = -1, hog_done_code = 1, hog_done_looping = -1;
static atomic_int timeout_state = -1, timeout_code = 1;
static _Atomic uint64_t timeout_id;
static atomic_int second_saw_hog_looping = -1;

static int hog_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&hog_tid, (unsigned long)pthread_self());
    uint64_t start = mono_ms();
    atomic_store(&hog_start_ms, start);
    atomic_store(&hog_looping, 1);
    volatile uint64_t spins = 0;
    while (mono_ms() - start < HOG_LOOP_MS)
        spins++;
    atomic_store(&hog_end_ms, mono_ms());
    atomic_store(&hog_looping, 0);
    atomic_store(&hog_finished, 1);
    return 0;
}

static void hog_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&hog_done_ms, mono_ms());
    atomic_store(&hog_done_state, (int)r->state);
    atomic_store(&hog_done_code, r->code);
    atomic_store(&hog_done_looping, atomic_load(&hog_looping));
    atomic_fetch_add(&hog_done_calls, 1);
}

static void hog_timeout(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&timeout_tid, (unsigned long)pthread_self());
    atomic_store(&timeout_state, (int)r->state);
    atomic_store(&timeout_code, r->code);
    atomic_store(&timeout_id, r->id);
    atomic_fetch_add(&hog_timeout_calls, 1);
}

static int second_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&second_tid, (unsigned long)pthread_self());
    atomic_store(&second_start_ms, mono_ms());
    atomic_store(&second_saw_hog_looping, atomic_load(&hog_looping));
    return 0;
}

static void second_done(const ax_result *r, void *arg)
{
    (void)arg;
    CHECK_EQ(r->state, AX_STATE_SUCCEEDED);
    atomic_fetch_add(&second_done_calls, 1);
}

static void test_hog(ax_sched *s)
{
    uint64_t hog_id = 0, second_id = 0;
    uint64_t submit_ms = mono_ms();
    ax_spec hog = {
        .fn = hog_fn, .timeout_ms = HOG_TIMEOUT_MS, .on_done = hog_done, .on_timeout = hog_timeout};
    CHECK_EQ(ax_submit(s, &hog, &hog_id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&hog_looping), 2000));
    ax_spec second = {.fn = second_fn, .timeout_ms = 5000, .on_done = second_done};
    CHECK_EQ(ax_submit(s, &second, &second_id), 0);
    /* max_concurrency 1: the second task waits for the hog's slot. */
    ax_stats st = test_stats(s);
    CHECK_EQ(st.running, 1);

    /* on_done reports the timeout while the hog still loops. */
    CHECK(WAIT_UNTIL(atomic_load(&hog_done_calls) == 1, 1200));
    CHECK_EQ(atomic_load(&hog_done_state), AX_STATE_TIMED_OUT);
    CHECK_EQ(atomic_load(&hog_done_code), AX_ETIMEDOUT);
    CHECK_EQ(atomic_load(&hog_done_looping), 1);
    /* Not before its deadline (which is at least 200 ms after the submit),
     * and "well before" the 1.5 s loop ends. */
    CHECK(atomic_load(&hog_done_ms) >= submit_ms + HOG_TIMEOUT_MS);
    CHECK_LE(atomic_load(&hog_done_ms) - atomic_load(&hog_start_ms), 1000);

    /* The slot is free: the queued task starts while the hog still loops,
     * necessarily on the other worker. */
    CHECK(WAIT_UNTIL(atomic_load(&second_done_calls) == 1, 1000));
    CHECK_EQ(atomic_load(&second_saw_hog_looping), 1);
    CHECK(!pthread_equal((pthread_t)atomic_load(&second_tid), (pthread_t)atomic_load(&hog_tid)));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 1000));
    /* Orphans are the live coroutines beyond the slots held: the second
     * task's run counts until its worker recycles it, just after its
     * on_done (a busy machine can hold the worker in between: 2 vs 1). */
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 1, 1000));
    st = test_stats(s);
    CHECK_EQ(atomic_load(&hog_looping), 1); /* all of the above happened during the loop */
    CHECK_EQ(st.running, 0);
    CHECK_EQ(st.timed_out, 1);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(st.orphans, 1); /* the hog's coroutine goes on without its task */

    /* on_timeout: once, on the callback pool, for this task. */
    CHECK(WAIT_UNTIL(atomic_load(&hog_timeout_calls) == 1, 1000));
    CHECK_EQ(atomic_load(&timeout_state), AX_STATE_TIMED_OUT);
    CHECK_EQ(atomic_load(&timeout_code), AX_ETIMEDOUT);
    CHECK_EQ(atomic_load(&timeout_id), hog_id);
    pthread_t cb = (pthread_t)atomic_load(&timeout_tid);
    CHECK(!pthread_equal(cb, (pthread_t)atomic_load(&hog_tid)));
    CHECK(!pthread_equal(cb, (pthread_t)atomic_load(&second_tid)));
    CHECK(!pthread_equal(cb, (pthread_t)atomic_load(&main_tid)));

    /* The hog finally returns: no second on_done, no second on_timeout. */
    CHECK(WAIT_UNTIL(atomic_load(&hog_finished), 3000));
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 1000));
    usleep(200 * 1000);
    CHECK_EQ(atomic_load(&hog_done_calls), 1);
    CHECK_EQ(atomic_load(&hog_timeout_calls), 1);
    CHECK_EQ(atomic_load(&second_done_calls), 1);
    st = test_stats(s);
    CHECK_EQ(st.timed_out, 1);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(st.running, 0);
    CHECK_EQ(ax_cancel(s, hog_id), AX_ENOTFOUND);
}

/* ---- part 2: a task parked in ax_sleep ---------------------------------- */

static atomic_int sleep_rc = 1, sleeper_returned, sleeper_done_calls, sleeper_timeout_calls;
static atomic_int sleeper_state = -1;
static _Atomic uint64_t sleep_deadline_ns, sleep_return_ns;
static atomic_ulong sleeper_tid, sleeper_cb_tid;

static int sleeper_fn(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&sleeper_tid, (unsigned long)pthread_self());
    atomic_store(&sleep_deadline_ns, ax_task_deadline_ns(t));
    int rc = ax_sleep(t, 5000);
    atomic_store(&sleep_return_ns, ax_now_ns());
    atomic_store(&sleep_rc, rc);
    atomic_store(&sleeper_returned, 1);
    return rc;
}

static void sleeper_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&sleeper_state, (int)r->state);
    CHECK_EQ(r->code, AX_ETIMEDOUT);
    atomic_fetch_add(&sleeper_done_calls, 1);
}

static void sleeper_timeout(const ax_result *r, void *arg)
{
    (void)arg;
    CHECK_EQ(r->state, AX_STATE_TIMED_OUT);
    atomic_store(&sleeper_cb_tid, (unsigned long)pthread_self());
    atomic_fetch_add(&sleeper_timeout_calls, 1);
}

static void test_sleeper(ax_sched *s)
{
    ax_spec sp = {.fn = sleeper_fn,
                  .timeout_ms = 100,
                  .on_done = sleeper_done,
                  .on_timeout = sleeper_timeout};
    uint64_t submit_ns = ax_now_ns();
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&sleeper_returned), 2000));
    CHECK_EQ(atomic_load(&sleep_rc), AX_ETIMEDOUT);
    /* The attempt's deadline is 100 ms after it started (so after the
     * submit); ax_sleep returns at it, never before, and not at the end of
     * the 5 s sleep. */
    uint64_t deadline = atomic_load(&sleep_deadline_ns), ret = atomic_load(&sleep_return_ns);
    CHECK(deadline >= submit_ns + 100 * 1000000ull);
    CHECK(ret >= deadline);
    CHECK_LE((ret - deadline) / 1000000u, 1000);
    CHECK(WAIT_UNTIL(atomic_load(&sleeper_done_calls) == 1, 1000));
    CHECK_EQ(atomic_load(&sleeper_state), AX_STATE_TIMED_OUT);
    CHECK(WAIT_UNTIL(atomic_load(&sleeper_timeout_calls) == 1, 1000));
    pthread_t cb = (pthread_t)atomic_load(&sleeper_cb_tid);
    CHECK(!pthread_equal(cb, (pthread_t)atomic_load(&sleeper_tid)));
    CHECK(!pthread_equal(cb, (pthread_t)atomic_load(&hog_tid)));
    CHECK(!pthread_equal(cb, (pthread_t)atomic_load(&second_tid)));
    CHECK(!pthread_equal(cb, (pthread_t)atomic_load(&main_tid)));
    usleep(100 * 1000);
    CHECK_EQ(atomic_load(&sleeper_done_calls), 1);
    CHECK_EQ(atomic_load(&sleeper_timeout_calls), 1);
}

/* ---- part 3: ax_cancelled in an orphan ----------------------------------- */

static atomic_int orphan_before = 1, orphan_after = 1, orphan_sleep = 1, orphan_yield = 1;
static atomic_int orphan_returned, orphan_done_calls, orphan_state = -1;

static int orphan_fn(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&orphan_before, ax_cancelled(t));
    /* Overrun the 100 ms deadline, no ax call, until its on_done says the
     * attempt ended (a cap of 10 s): not a fixed 400 ms, which a loaded
     * machine could use up before the watchdog ended the attempt. */
    uint64_t start = mono_ms();
    while (atomic_load(&orphan_done_calls) == 0 && mono_ms() - start < 10000)
        ;
    atomic_store(&orphan_after, ax_cancelled(t));
    atomic_store(&orphan_sleep, ax_sleep(t, 10));
    atomic_store(&orphan_yield, ax_yield(t));
    atomic_store(&orphan_returned, 1);
    return 0; /* too late: the task already ended TIMED_OUT */
}

static void orphan_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&orphan_state, (int)r->state);
    atomic_fetch_add(&orphan_done_calls, 1);
}

static void test_orphan(ax_sched *s)
{
    ax_spec sp = {.fn = orphan_fn, .timeout_ms = 100, .on_done = orphan_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&orphan_returned), 15000));
    CHECK_EQ(atomic_load(&orphan_before), 0);
    CHECK_EQ(atomic_load(&orphan_after), AX_ETIMEDOUT);
    CHECK_EQ(atomic_load(&orphan_sleep), AX_ETIMEDOUT);
    CHECK_EQ(atomic_load(&orphan_yield), AX_ETIMEDOUT);
    CHECK(WAIT_UNTIL(atomic_load(&orphan_done_calls) == 1, 1000));
    usleep(100 * 1000);
    CHECK_EQ(atomic_load(&orphan_done_calls), 1);
    CHECK_EQ(atomic_load(&orphan_state), AX_STATE_TIMED_OUT);
}

int main(void)
{
    atomic_store(&main_tid, (unsigned long)pthread_self());
    ax_sched *s = test_sched(2, 1);
    test_hog(s);
    test_sleeper(s);
    test_orphan(s);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, 4);
    CHECK_EQ(st.timed_out, 3);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
