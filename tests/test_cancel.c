/* test_cancel.c - ax_cancel (ax.h; DESIGN.md §3 "exactly one terminal state").
 *
 *  1. A queued task (dispatch paused) ends CANCELLED at once: its on_done
 *     has run, once, on the cancelling thread when ax_cancel returns, and the
 *     task never runs.
 *  2. A running task parked in ax_sleep: ax_cancel ends it CANCELLED at once
 *     (on_done once), its slot goes to a queued task, ax_sleep returns
 *     AX_ECANCELED and so do ax_cancelled / ax_yield afterwards. A task
 *     spinning on ax_cancelled sees AX_ECANCELED.
 *  3. AX_ENOTFOUND for a finished task, a second cancel and unknown ids.
 *  4. A delayed task (delay_ms) and a task waiting out a retry back-off end
 *     CANCELLED at once and never run (again).
 *  5. Race: 20 000 short tasks, each cancelled from another thread at a
 *     random moment. Every on_done runs exactly once (counted per task), the
 *     cancels that returned 0 are exactly the CANCELLED outcomes, and
 *     succeeded + cancelled == submitted.
 */
#include "util.h"

#include <pthread.h>
#include <sched.h>

static atomic_ulong main_tid;

struct outcome {
    atomic_int calls;
    atomic_int state;
    atomic_int code;
    atomic_int on_caller; /* on_done ran on the main thread */
    atomic_int ran;       /* the task function started (count) */
};

static void on_done(const ax_result *r, void *arg)
{
    struct outcome *o = arg;
    atomic_store(&o->state, (int)r->state);
    atomic_store(&o->code, r->code);
    atomic_store(&o->on_caller, pthread_equal(pthread_self(), (pthread_t)atomic_load(&main_tid)));
    atomic_fetch_add(&o->calls, 1);
}

static void check_cancelled_now(struct outcome *o)
{
    /* "ends CANCELLED at once": on_done already ran, on this thread. */
    CHECK_EQ(atomic_load(&o->calls), 1);
    CHECK_EQ(atomic_load(&o->state), AX_STATE_CANCELLED);
    CHECK_EQ(atomic_load(&o->code), AX_ECANCELED);
    CHECK_EQ(atomic_load(&o->on_caller), 1);
}

static int count_fn(ax_task *t, void *arg)
{
    (void)t;
    struct outcome *o = arg;
    atomic_fetch_add(&o->ran, 1);
    return 0;
}

static uint64_t submit(ax_sched *s, ax_fn fn, struct outcome *o, uint64_t timeout_ms)
{
    ax_spec sp = {.fn = fn, .arg = o, .timeout_ms = timeout_ms, .on_done = on_done, .cb_arg = o};
    uint64_t id = 0;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    return id;
}

/* ---- 1. queued ------------------------------------------------------------ */

static void test_queued(ax_sched *s)
{
    static struct outcome o;
    CHECK_EQ(ax_pause(s), 0);
    uint64_t id = submit(s, count_fn, &o, 1000);
    CHECK_EQ(test_stats(s).queued[AX_PRIO_NORMAL], 1);
    CHECK_EQ(ax_cancel(s, id), 0);
    check_cancelled_now(&o);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], 0);
    CHECK_EQ(st.cancelled, 1);
    CHECK_EQ(ax_cancel(s, id), AX_ENOTFOUND);
    CHECK_EQ(ax_resume(s), 0);
    usleep(200 * 1000);
    CHECK_EQ(atomic_load(&o.ran), 0);
    CHECK_EQ(atomic_load(&o.calls), 1);
    CHECK_EQ(test_stats(s).started, 0);
}

/* ---- 2. running ----------------------------------------------------------- */

static atomic_int sleep_rc = 1, after_cancelled = 1, after_yield = 1, sleeper_returned;
static _Atomic uint64_t cancel_ms, sleep_end_ms, next_start_ms;

static int sleeper_fn(ax_task *t, void *arg)
{
    struct outcome *o = arg;
    atomic_fetch_add(&o->ran, 1);
    int rc = ax_sleep(t, 10000);
    atomic_store(&sleep_end_ms, test_now_ms());
    atomic_store(&sleep_rc, rc);
    atomic_store(&after_cancelled, ax_cancelled(t));
    atomic_store(&after_yield, ax_yield(t));
    atomic_store(&sleeper_returned, 1);
    return rc;
}

static int next_fn(ax_task *t, void *arg)
{
    atomic_store(&next_start_ms, test_now_ms());
    return count_fn(t, arg);
}

static atomic_int spin_rc = 1, spin_started;

static int spinner_fn(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&spin_started, 1);
    int rc = 0;
    for (uint64_t end = test_now_ms() + 3000; test_now_ms() < end;)
        if ((rc = ax_cancelled(t)) != 0) break;
    atomic_store(&spin_rc, rc);
    return 0;
}

static void test_running(ax_sched *s)
{
    static struct outcome o, next, spin;
    uint64_t id = submit(s, sleeper_fn, &o, 20000);
    CHECK(WAIT_UNTIL(atomic_load(&o.ran) == 1, 2000));
    uint64_t next_id = submit(s, next_fn, &next, 1000); /* max_concurrency 1: waits */
    usleep(50 * 1000);                                  /* let the sleeper park */
    CHECK_EQ(atomic_load(&next.ran), 0);
    CHECK_EQ(test_stats(s).running, 1);

    atomic_store(&cancel_ms, test_now_ms());
    CHECK_EQ(ax_cancel(s, id), 0);
    check_cancelled_now(&o);

    CHECK(WAIT_UNTIL(atomic_load(&sleeper_returned), 1000));
    CHECK_EQ(atomic_load(&sleep_rc), AX_ECANCELED);
    CHECK_LE(atomic_load(&sleep_end_ms) - atomic_load(&cancel_ms), 1000);
    CHECK_EQ(atomic_load(&after_cancelled), AX_ECANCELED);
    CHECK_EQ(atomic_load(&after_yield), AX_ECANCELED);

    /* The slot was freed: the queued task runs. */
    CHECK(WAIT_UNTIL(atomic_load(&next.calls) == 1, 1000));
    CHECK_EQ(atomic_load(&next.state), AX_STATE_SUCCEEDED);
    CHECK_LE(atomic_load(&next_start_ms) - atomic_load(&cancel_ms), 1000);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 1000));

    /* A task on the CPU polling ax_cancelled. */
    uint64_t spin_id = submit(s, spinner_fn, &spin, 20000);
    CHECK(WAIT_UNTIL(atomic_load(&spin_started), 2000));
    CHECK_EQ(ax_cancel(s, spin_id), 0);
    check_cancelled_now(&spin);
    CHECK(WAIT_UNTIL(atomic_load(&spin_rc) != 1, 4000));
    CHECK_EQ(atomic_load(&spin_rc), AX_ECANCELED);

    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&o.calls), 1);
    CHECK_EQ(atomic_load(&spin.calls), 1);
    CHECK_EQ(atomic_load(&o.ran), 1);

    /* 3. finished, repeated and unknown ids. */
    CHECK_EQ(ax_cancel(s, next_id), AX_ENOTFOUND);
    CHECK_EQ(ax_cancel(s, id), AX_ENOTFOUND);
    CHECK_EQ(ax_cancel(s, spin_id), AX_ENOTFOUND);
    CHECK_EQ(ax_cancel(s, 0), AX_ENOTFOUND);
    CHECK_EQ(ax_cancel(s, 0xdeadbeef12345ull), AX_ENOTFOUND);
    CHECK_EQ(ax_cancel(s, UINT64_MAX), AX_ENOTFOUND);
    CHECK(ax_error_detail()[0] != 0);
}

/* ---- 4. delayed and backing off ------------------------------------------ */

static int fail_fn(ax_task *t, void *arg)
{
    (void)t;
    struct outcome *o = arg;
    atomic_fetch_add(&o->ran, 1);
    return 5;
}

static void test_delayed(ax_sched *s)
{
    static struct outcome d, r;
    ax_stats before = test_stats(s);

    ax_spec sp = {.fn = count_fn,
                  .arg = &d,
                  .timeout_ms = 1000,
                  .delay_ms = 1000, /* cancelled well before it ends, even on a busy machine */
                  .on_done = on_done,
                  .cb_arg = &d};
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK_EQ(test_stats(s).delayed, 1);
    CHECK_EQ(ax_cancel(s, id), 0);
    check_cancelled_now(&d);
    CHECK_EQ(test_stats(s).delayed, 0);

    /* Fails at once, then waits a 5 s back-off before its retry. */
    ax_retry_policy slow = {.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 5000, .max_ms = 5000};
    ax_spec rs = {.fn = fail_fn,
                  .arg = &r,
                  .timeout_ms = 1000,
                  .max_retry = 3,
                  .retry = &slow,
                  .on_done = on_done,
                  .cb_arg = &r};
    uint64_t rid;
    CHECK_EQ(ax_submit(s, &rs, &rid), 0);
    CHECK(WAIT_UNTIL(test_stats(s).retried == before.retried + 1, 2000));
    CHECK_EQ(atomic_load(&r.ran), 1);
    CHECK_EQ(atomic_load(&r.calls), 0);
    CHECK_EQ(test_stats(s).delayed, 1);
    CHECK_EQ(ax_cancel(s, rid), 0);
    check_cancelled_now(&r);
    CHECK_EQ(test_stats(s).delayed, 0);

    usleep(1200 * 1000); /* past the 1 s delay */
    CHECK_EQ(atomic_load(&d.ran), 0);
    CHECK_EQ(atomic_load(&d.calls), 1);
    CHECK_EQ(atomic_load(&r.ran), 1);
    CHECK_EQ(atomic_load(&r.calls), 1);
    CHECK_EQ(ax_cancel(s, id), AX_ENOTFOUND);
    CHECK_EQ(ax_cancel(s, rid), AX_ENOTFOUND);
}

/* ---- 5. the race ---------------------------------------------------------- */

#define NRACE 20000
#define WINDOW 64 /* submitted but not yet handed to ax_cancel */

static atomic_int race_calls[NRACE];
static atomic_int race_state[NRACE];
static _Atomic uint64_t race_ids[NRACE];
static atomic_int race_published; /* race_ids[0..published) are valid */
static atomic_int race_handled;   /* ids the canceller is done with */
static atomic_int race_cancel_ok, race_cancelled_done, race_bad;

static int race_fn(ax_task *t, void *arg)
{
    int i = (int)(intptr_t)arg;
    switch (i % 4) {
    case 0:
        return 0;
    case 1:
        for (int k = 0; k < 3; k++)
            if (ax_yield(t) != 0) break;
        return 0;
    case 2:
        ax_sleep(t, 1);
        return 0;
    default: {
        uint64_t end = ax_now_ns() + 20000;
        while (ax_now_ns() < end)
            ;
        return 0;
    }
    }
}

static void race_done(const ax_result *r, void *arg)
{
    int i = (int)(intptr_t)arg;
    if (r->state == AX_STATE_CANCELLED && r->code == AX_ECANCELED)
        atomic_fetch_add(&race_cancelled_done, 1);
    else if (!(r->state == AX_STATE_SUCCEEDED && r->code == 0))
        atomic_fetch_add(&race_bad, 1);
    atomic_store(&race_state[i], (int)r->state);
    atomic_fetch_add(&race_calls[i], 1);
}

static void *canceller(void *arg)
{
    ax_sched *s = arg;
    uint64_t rnd = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < NRACE; i++) {
        while (atomic_load(&race_published) <= i)
            sched_yield();
        uint64_t x = xorshift(&rnd);
        if (x & 1) { /* half at once, half after up to ~50 µs */
            uint64_t end = ax_now_ns() + (x >> 8) % 50000;
            while (ax_now_ns() < end)
                ;
        }
        int rc = ax_cancel(s, atomic_load(&race_ids[i]));
        if (rc == 0)
            atomic_fetch_add(&race_cancel_ok, 1);
        else if (rc != AX_ENOTFOUND)
            atomic_fetch_add(&race_bad, 1);
        atomic_store(&race_handled, i + 1);
    }
    return NULL;
}

static void test_race(void)
{
    ax_sched *s = test_sched(2, 500);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, canceller, s), 0);
    for (int i = 0; i < NRACE; i++) {
        while (i - atomic_load(&race_handled) >= WINDOW)
            sched_yield();
        ax_spec sp = {.fn = race_fn,
                      .arg = (void *)(intptr_t)i,
                      .timeout_ms = 5000,
                      .on_done = race_done,
                      .cb_arg = (void *)(intptr_t)i};
        uint64_t id;
        CHECK_EQ(ax_submit(s, &sp, &id), 0);
        atomic_store(&race_ids[i], id);
        atomic_store(&race_published, i + 1);
    }
    CHECK_EQ(pthread_join(th, NULL), 0);
    int total_calls = 0;
    for (int i = 0; i < NRACE; i++)
        CHECK(WAIT_UNTIL(atomic_load(&race_calls[i]) >= 1, 3000));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 2000));
    usleep(50 * 1000);
    int succeeded = 0, cancelled = 0;
    for (int i = 0; i < NRACE; i++) {
        CHECK_EQ(atomic_load(&race_calls[i]), 1);
        total_calls += atomic_load(&race_calls[i]);
        int st = atomic_load(&race_state[i]);
        CHECK(st == AX_STATE_SUCCEEDED || st == AX_STATE_CANCELLED);
        succeeded += st == AX_STATE_SUCCEEDED;
        cancelled += st == AX_STATE_CANCELLED;
    }
    CHECK_EQ(total_calls, NRACE);
    CHECK_EQ(atomic_load(&race_bad), 0);
    CHECK_EQ(atomic_load(&race_cancel_ok), cancelled);
    CHECK_EQ(atomic_load(&race_cancelled_done), cancelled);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, NRACE);
    CHECK_EQ(st.succeeded, succeeded);
    CHECK_EQ(st.cancelled, cancelled);
    CHECK_EQ(st.succeeded + st.cancelled, st.submitted);
    CHECK_EQ(st.failed + st.timed_out, 0);
    CHECK_EQ(st.running, 0);
    /* The race must have happened both ways to mean anything. */
    CHECK(cancelled > 0);
    CHECK(succeeded > 0);
    fprintf(stderr, "race: %d succeeded, %d cancelled\n", succeeded, cancelled);
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 2000));
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

int main(void)
{
    atomic_store(&main_tid, (unsigned long)pthread_self());
    ax_sched *s = test_sched(2, 1);
    test_queued(s);
    test_running(s);
    test_delayed(s);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    test_race();
    return 0;
}
