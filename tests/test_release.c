/* test_release.c - ax_spec.on_release: a task's arg is handed back once,
 * after on_done and after the last attempt's coroutine returned (ax.h).
 *
 * Why: on_done runs the moment a running attempt is cancelled or times out,
 * while its function goes on (an orphan), and may not even have reached
 * its first line. ax-demo freed its task record in on_done and TSan caught
 * the function's first line reading it afterwards (CI, stop 29:
 * heap-use-after-free in eng_ax.c attempt, freed by on_done from
 * ax_shutdown's cancel). on_release is where such an arg can be freed.
 *
 * Every case records the order of the events of one task on one counter
 * (seq): on_done, the function's last read of its arg, on_release; and
 * the thread on_release ran on.
 *  1. Never ran: a task queued behind a paused scheduler is cancelled:
 *     on_done, then on_release, both before ax_cancel returns (on the
 *     caller's thread: nothing else held it).
 *  2. Cancelled while running: the function parks in ax_sleep, is
 *     cancelled (ax_sleep returns AX_ECANCELED), then waits for the test's
 *     gate and reads its arg. on_done has run when ax_cancel returns;
 *     on_release has not, and does not while the function is held; once
 *     the gate opens it runs after the function's last read, on the
 *     worker.
 *  3. Timed out while running and held: timeout_ms 50, the function
 *     ignores the deadline (no ax call, polls the gate): on_done (TIMED_OUT)
 *     runs without it, on_release only after it returned.
 *  4. A retry waiting for its orphan, cancelled: attempt 0 times out and
 *     keeps running (held at the gate); back-off 1 ms; the retry waits for
 *     the orphan; the task is cancelled there (on_done: CANCELLED, the
 *     retry never ran), yet on_release waits for the orphan of attempt 0.
 *  5. Many tasks from four submitting threads (ax_submit and
 *     ax_submit_batch), each arg a malloc'ed record freed in on_release
 *     (ASan: no leak, no double free): on_release runs exactly once per
 *     admitted task, each after its own on_done.
 *  6. Shutdown: tasks queued behind a paused scheduler end CANCELLED in
 *     ax_shutdown; every one's on_release has run when ax_free returns, and
 *     a task without on_release costs nothing extra (no call).
 *  7. A spec with on_release and bad input is refused like any other
 *     (AX_EINVAL, nothing called).
 *  8. ax_free waits for an on_release in progress on another thread: one
 *     that sleeps 300 ms inside ax_cancel's call (a queued task) while the
 *     main thread calls ax_shutdown and ax_free; it has finished when
 *     ax_free returns, and the job it frees after is in a live table
 *     (new-user trial: ASan saw job_free_locked write into the table
 *     ax_free had freed).
 *  9. on_timeout runs on the callback pool after the attempt ended, with
 *     cb_arg, which is often arg: on_release waits for it (review: ASan
 *     saw on_timeout read what on_release had freed). One callback thread,
 *     callback_queue 1: task 0's on_timeout holds the thread; tasks 1 and
 *     2 time out, one on_timeout is queued and one dropped. The dropped
 *     one's task is released at once; task 0 is not while its on_timeout
 *     runs; each on_timeout that ran ended before its task's on_release.
 * 10. ax_shutdown returns only after the on_release that a cancelled task's
 *     orphan starts as it returns. The task spawns CHILDREN empty children
 *     and never joins them, is cancelled, goes on (no ax call) until the
 *     test opens its gate, then returns; ax_shutdown is called just after
 *     the gate opens. Returning, the orphan stopped counting as live before
 *     its job released its children and then itself, and an on_release
 *     (100 ms) began only then: with nothing else left, ax_shutdown, which
 *     polls every millisecond, returned 0 in between, before the
 *     on_release had begun (stop 29's note; releasing the children holds
 *     that moment open for about a millisecond). Rounds alternate: the
 *     parent's own on_release, and (the parent without one) the last
 *     child's (review: counting the orphan's own on_release only missed
 *     its children's). On the old code most of the ROUNDS rounds fail.
 * 11. An on_release that runs on the callback thread after its task's
 *     on_timeout is timed as a callback of its own: with
 *     callback_timeout_ms 1500, an on_timeout of 1000 ms then an on_release
 *     of 1000 ms count no overrun (they were timed together: 1, on the old
 *     code), while an on_release of 2500 ms after them counts one.
 * 12. ax_shutdown returns 0 only after an on_release that waits for its
 *     task's on_timeout (300 ms, on the callback pool) has run: both have
 *     ended when it returns (before, ax_shutdown did not wait for either).
 */
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static _Atomic unsigned seq;

struct rec {
    _Atomic unsigned done_at, fn_last_at, release_at; /* seq + 1; 0 = not yet */
    _Atomic unsigned done_calls, release_calls;
    _Atomic int done_state;
    _Atomic bool gate, in_fn;
    char release_thread[16];
    _Atomic int attempts;
};

static unsigned tick(void)
{
    return atomic_fetch_add(&seq, 1) + 1;
}

static void on_done(const ax_result *r, void *arg)
{
    struct rec *x = arg;
    atomic_store(&x->done_state, (int)r->state);
    atomic_fetch_add(&x->done_calls, 1);
    atomic_store(&x->done_at, tick());
}

static void on_release(void *arg)
{
    struct rec *x = arg;
    pthread_getname_np(pthread_self(), x->release_thread, sizeof x->release_thread);
    /* Before the count, which the test waits for and then reads this. */
    atomic_store(&x->release_at, tick());
    atomic_fetch_add(&x->release_calls, 1);
}

static int fn_quick(ax_task *t, void *arg)
{
    (void)t;
    struct rec *x = arg;
    atomic_store(&x->fn_last_at, tick());
    return 0;
}

/* Parks until cancelled, then waits for the gate, then reads its arg. */
static int fn_park_then_gate(ax_task *t, void *arg)
{
    struct rec *x = arg;
    atomic_store(&x->in_fn, true);
    int rc = ax_sleep(t, 3600 * 1000);
    while (!atomic_load(&x->gate))
        usleep(1000); /* holds the worker: the attempt is over anyway */
    atomic_store(&x->fn_last_at, tick());
    return rc;
}

/* Ignores its deadline: no ax call until the gate opens. */
static int fn_hog_until_gate(ax_task *t, void *arg)
{
    (void)t;
    struct rec *x = arg;
    atomic_fetch_add(&x->attempts, 1);
    atomic_store(&x->in_fn, true);
    while (!atomic_load(&x->gate))
        usleep(1000);
    atomic_store(&x->fn_last_at, tick());
    return 0;
}

static ax_spec spec_for(struct rec *x, ax_fn fn)
{
    ax_spec sp = {
        .fn = fn,
        .arg = x,
        .timeout_ms = 60000,
        .on_done = on_done,
        .cb_arg = x,
        .on_release = on_release,
    };
    return sp;
}

static void case_never_ran(void)
{
    ax_sched *s = test_sched(2, 8);
    CHECK_EQ(ax_pause(s), 0);
    struct rec x = {0};
    ax_spec sp = spec_for(&x, fn_quick);
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK_EQ(atomic_load(&x.release_calls), 0u);
    CHECK_EQ(ax_cancel(s, id), 0);
    /* Nothing else held it: both ran on this thread, in order. */
    CHECK_EQ(atomic_load(&x.done_calls), 1u);
    CHECK_EQ(atomic_load(&x.release_calls), 1u);
    CHECK_EQ(atomic_load(&x.done_state), (int)AX_STATE_CANCELLED);
    CHECK(atomic_load(&x.done_at) < atomic_load(&x.release_at));
    CHECK_EQ(atomic_load(&x.fn_last_at), 0u);
    char me[16];
    pthread_getname_np(pthread_self(), me, sizeof me);
    CHECK_EQ(strcmp(x.release_thread, me), 0);
    CHECK_EQ(ax_resume(s), 0);
    ax_free(s);
    CHECK_EQ(atomic_load(&x.release_calls), 1u);
    printf("ok 1 - never ran: on_done then on_release, both in ax_cancel\n");
}

static void case_cancel_running(void)
{
    ax_sched *s = test_sched(2, 8);
    struct rec x = {0};
    ax_spec sp = spec_for(&x, fn_park_then_gate);
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&x.in_fn), 30000));
    CHECK_EQ(ax_cancel(s, id), 0);
    CHECK_EQ(atomic_load(&x.done_calls), 1u); /* ended at once */
    CHECK_EQ(atomic_load(&x.done_state), (int)AX_STATE_CANCELLED);
    /* The function still runs (held at the gate) and will read its arg. */
    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&x.release_calls), 0u);
    CHECK_EQ(atomic_load(&x.fn_last_at), 0u);
    atomic_store(&x.gate, true);
    CHECK(WAIT_UNTIL(atomic_load(&x.release_calls) == 1, 30000));
    CHECK(atomic_load(&x.done_at) < atomic_load(&x.fn_last_at));
    CHECK(atomic_load(&x.fn_last_at) < atomic_load(&x.release_at));
    CHECK_EQ(strncmp(x.release_thread, "ax-worker-", 10), 0);
    ax_free(s);
    CHECK_EQ(atomic_load(&x.release_calls), 1u);
    CHECK_EQ(atomic_load(&x.done_calls), 1u);
    printf("ok 2 - cancelled while running: on_release after the orphan's last read (%s)\n",
           x.release_thread);
}

static void case_timeout_hog(void)
{
    ax_sched *s = test_sched(2, 8);
    struct rec x = {0};
    ax_spec sp = spec_for(&x, fn_hog_until_gate);
    sp.timeout_ms = 50;
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&x.done_calls) == 1, 30000));
    CHECK_EQ(atomic_load(&x.done_state), (int)AX_STATE_TIMED_OUT);
    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&x.release_calls), 0u);
    atomic_store(&x.gate, true);
    CHECK(WAIT_UNTIL(atomic_load(&x.release_calls) == 1, 30000));
    CHECK(atomic_load(&x.done_at) < atomic_load(&x.fn_last_at));
    CHECK(atomic_load(&x.fn_last_at) < atomic_load(&x.release_at));
    ax_free(s);
    CHECK_EQ(atomic_load(&x.release_calls), 1u);
    printf("ok 3 - timed out while held: on_release after the hog returned\n");
}

static void case_retry_waits_for_orphan(void)
{
    ax_sched *s = test_sched(2, 8);
    struct rec x = {0};
    static const ax_retry_policy fast = {AX_BACKOFF_EXPONENTIAL, 1, 1, 0};
    ax_spec sp = spec_for(&x, fn_hog_until_gate);
    sp.timeout_ms = 50;
    sp.max_retry = 1;
    sp.retry = &fast;
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&x.in_fn), 30000));
    /* Attempt 0 timed out, its back-off (1 ms) is over, and the retry waits
     * for the orphan: the task is delayed, not queued. */
    CHECK(WAIT_UNTIL(test_stats(s).delayed == 1, 30000));
    usleep(20 * 1000);
    CHECK_EQ(ax_cancel(s, id), 0);
    CHECK_EQ(atomic_load(&x.done_calls), 1u);
    CHECK_EQ(atomic_load(&x.done_state), (int)AX_STATE_CANCELLED);
    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&x.release_calls), 0u); /* attempt 0's orphan still runs */
    atomic_store(&x.gate, true);
    CHECK(WAIT_UNTIL(atomic_load(&x.release_calls) == 1, 30000));
    CHECK(atomic_load(&x.fn_last_at) < atomic_load(&x.release_at));
    CHECK(atomic_load(&x.done_at) < atomic_load(&x.release_at));
    ax_free(s);
    CHECK_EQ(atomic_load(&x.attempts), 1); /* the retry never ran */
    CHECK_EQ(atomic_load(&x.release_calls), 1u);
    printf("ok 4 - a retry waiting for its orphan, cancelled: on_release after the orphan\n");
}

/* Case 5: records malloc'ed by the submitters, freed by on_release. */
struct owned {
    _Atomic unsigned done;
    unsigned magic;
};
static _Atomic unsigned owned_released, owned_done, owned_bad;

static void owned_on_done(const ax_result *r, void *arg)
{
    (void)r;
    struct owned *o = arg;
    atomic_fetch_add(&o->done, 1);
    atomic_fetch_add(&owned_done, 1);
}

static void owned_release(void *arg)
{
    struct owned *o = arg;
    if (o->magic != 0xa11ce || atomic_load(&o->done) != 1)
        atomic_fetch_add(&owned_bad, 1);
    o->magic = 0;
    free(o);
    atomic_fetch_add(&owned_released, 1);
}

static int owned_fn(ax_task *t, void *arg)
{
    struct owned *o = arg;
    if (o->magic != 0xa11ce)
        atomic_fetch_add(&owned_bad, 1);
    if (((uintptr_t)o >> 4) % 3 == 0)
        (void)ax_yield(t); /* some park once: their release comes from the resumed run */
    return 0;
}

#define SUBMITTERS 4
#if defined(TEST_TSAN)
#define PER_SUBMITTER 1000u
#else
#define PER_SUBMITTER 4000u
#endif

static ax_sched *many_s;
static _Atomic unsigned admitted;

static ax_spec owned_spec(void)
{
    struct owned *o = malloc(sizeof *o);
    CHECK(o != NULL);
    atomic_init(&o->done, 0);
    o->magic = 0xa11ce;
    ax_spec sp = {.fn = owned_fn,
                  .arg = o,
                  .timeout_ms = 60000,
                  .on_done = owned_on_done,
                  .cb_arg = o,
                  .on_release = owned_release};
    return sp;
}

static void *submitter(void *arg)
{
    bool batch = (uintptr_t)arg & 1;
    for (unsigned i = 0; i < PER_SUBMITTER;) {
        if (batch) {
            ax_spec specs[8];
            int rcs[8];
            for (unsigned k = 0; k < 8; k++)
                specs[k] = owned_spec();
            ax_submit_batch(many_s, specs, 8, rcs, NULL);
            for (unsigned k = 0; k < 8; k++) {
                if (rcs[k] == 0)
                    atomic_fetch_add(&admitted, 1);
                else
                    free(specs[k].arg); /* refused: still the caller's */
            }
            i += 8;
        } else {
            ax_spec sp = owned_spec();
            if (ax_submit(many_s, &sp, NULL) == 0)
                atomic_fetch_add(&admitted, 1);
            else
                free(sp.arg);
            i++;
        }
    }
    return NULL;
}

static void case_many(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 64;
    for (unsigned p = 0; p < AX_PRIO_COUNT; p++)
        c.capacity[p] = 100000;
    c.shed_ratio = 1.0;
    many_s = test_sched_cfg(&c);
    pthread_t th[SUBMITTERS];
    for (uintptr_t i = 0; i < SUBMITTERS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, submitter, (void *)i), 0);
    for (unsigned i = 0; i < SUBMITTERS; i++)
        pthread_join(th[i], NULL);
    unsigned n = atomic_load(&admitted);
    CHECK(n > 0);
    CHECK(WAIT_UNTIL(atomic_load(&owned_released) == n, 60000 * TEST_SLOW));
    ax_free(many_s);
    CHECK_EQ(atomic_load(&owned_done), n);
    CHECK_EQ(atomic_load(&owned_released), n);
    CHECK_EQ(atomic_load(&owned_bad), 0u);
    printf("ok 5 - %u tasks from %d threads: on_release once each, after its on_done\n", n,
           SUBMITTERS);
}

static void case_shutdown(void)
{
    ax_sched *s = test_sched(2, 8);
    CHECK_EQ(ax_pause(s), 0);
    enum { N = 100 };
    static struct rec xs[N];
    for (unsigned i = 0; i < N; i++) {
        ax_spec sp = spec_for(&xs[i], fn_quick);
        if (i % 2)
            sp.on_release = NULL; /* half without: no call for those */
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK_EQ(ax_shutdown(s, 0), 0);
    ax_free(s);
    for (unsigned i = 0; i < N; i++) {
        CHECK_EQ(atomic_load(&xs[i].done_calls), 1u);
        CHECK_EQ(atomic_load(&xs[i].done_state), (int)AX_STATE_CANCELLED);
        CHECK_EQ(atomic_load(&xs[i].release_calls), i % 2 ? 0u : 1u);
        if (!(i % 2))
            CHECK(atomic_load(&xs[i].done_at) < atomic_load(&xs[i].release_at));
    }
    printf("ok 6 - shutdown: every on_release ran by ax_free, none for tasks without\n");
}

static void case_refused(void)
{
    ax_sched *s = test_sched(1, 8);
    struct rec x = {0};
    ax_spec sp = spec_for(&x, fn_quick);
    sp.timeout_ms = 0; /* invalid */
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EINVAL);
    int rc = 0;
    CHECK_EQ(ax_submit_batch(s, &sp, 1, &rc, NULL), AX_EINVAL);
    CHECK_EQ(rc, AX_EINVAL);
    ax_free(s);
    CHECK_EQ(atomic_load(&x.done_calls), 0u);
    CHECK_EQ(atomic_load(&x.release_calls), 0u);
    printf("ok 7 - a refused spec: no on_done, no on_release\n");
}

/* Case 8: a slow on_release on the thread of ax_cancel, while ax_free. */
static _Atomic bool slow_in, slow_out;
static ax_sched *slow_s;
static uint64_t slow_id;

static void slow_release(void *arg)
{
    (void)arg;
    atomic_store(&slow_in, true);
    usleep(300 * 1000);
    atomic_store(&slow_out, true);
}

static void *slow_canceller(void *arg)
{
    (void)arg;
    CHECK_EQ(ax_cancel(slow_s, slow_id), 0);
    return NULL;
}

static void case_free_waits(void)
{
    slow_s = test_sched(1, 8);
    CHECK_EQ(ax_pause(slow_s), 0);
    ax_spec sp = {.fn = fn_quick, .timeout_ms = 60000, .on_release = slow_release};
    static struct rec x;
    sp.arg = &x;
    CHECK_EQ(ax_submit(slow_s, &sp, &slow_id), 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, slow_canceller, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&slow_in), 30000));
    CHECK_EQ(ax_shutdown(slow_s, 0), 0);
    ax_free(slow_s); /* must wait for the release, which then frees the job */
    CHECK(atomic_load(&slow_out));
    pthread_join(th, NULL);
    printf("ok 8 - ax_free waits for an on_release running in ax_cancel's thread\n");
}

/* Case 9: on_timeout (on the callback pool) comes before on_release. */
static _Atomic unsigned to_calls, to_end_at[3], rel_at[3], rel_calls;
static _Atomic bool to_block;

static void slow_on_timeout(const ax_result *r, void *arg)
{
    (void)r;
    unsigned i = (unsigned)(uintptr_t)arg;
    atomic_fetch_add(&to_calls, 1);
    if (i == 0)
        while (atomic_load(&to_block))
            usleep(1000); /* holds the only callback thread */
    else
        usleep(20 * 1000);
    atomic_store(&to_end_at[i], tick());
}

static void idx_release(void *arg)
{
    unsigned i = (unsigned)(uintptr_t)arg;
    atomic_store(&rel_at[i], tick());
    atomic_fetch_add(&rel_calls, 1);
}

static int fn_sleep_long(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 3600 * 1000); /* AX_ETIMEDOUT at the deadline: returns at once */
}

static void case_timeout_before_release(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 8;
    c.callback_threads = 1;
    c.callback_queue = 1;
    c.callback_timeout_ms = 600000; /* no second thread while 0's on_timeout holds the first */
    ax_sched *s = test_sched_cfg(&c);
    atomic_store(&to_block, true);
    for (uintptr_t i = 0; i < 3; i++) {
        ax_spec sp = {.fn = fn_sleep_long,
                      .arg = (void *)i,
                      .timeout_ms = 50,
                      .on_timeout = slow_on_timeout,
                      .cb_arg = (void *)i,
                      .on_release = idx_release};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        if (i == 0) /* 0's on_timeout holds the callback thread */
            CHECK(WAIT_UNTIL(atomic_load(&to_calls) == 1, 30000));
    }
    /* 1 and 2 timed out too: one on_timeout queued, the other dropped
     * (callback_queue 1). The dropped one's task is released; the others
     * wait for their on_timeout. */
    CHECK(WAIT_UNTIL(test_stats(s).callback_dropped == 1, 30000));
    CHECK(WAIT_UNTIL(atomic_load(&rel_calls) == 1, 30000));
    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&rel_calls), 1u);
    CHECK_EQ(atomic_load(&rel_at[0]), 0u); /* its on_timeout is still running */
    atomic_store(&to_block, false);
    CHECK(WAIT_UNTIL(atomic_load(&rel_calls) == 3, 30000));
    ax_free(s);
    unsigned ran = 0;
    for (unsigned i = 0; i < 3; i++) {
        if (atomic_load(&to_end_at[i])) {
            ran++;
            CHECK(atomic_load(&to_end_at[i]) < atomic_load(&rel_at[i]));
        }
    }
    CHECK_EQ(ran, 2u);
    CHECK_EQ(atomic_load(&rel_calls), 3u);
    printf("ok 9 - on_release after the task's on_timeout ran or was dropped\n");
}

/* Case 10: ax_shutdown and an orphan's on_release. */
#define CHILDREN 50000
#define ROUNDS 8

static _Atomic bool orphan_gate, orphan_release_began, orphan_release_ended;
static _Atomic int orphan_children;
static _Atomic bool child_has_release; /* this round: the last child's, not the parent's */

static void orphan_release(void *arg);

static int fn_empty(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

/* Spawns CHILDREN, never joins them, then ignores its deadline until the
 * gate opens (no ax call: the attempt ends without it). */
static int fn_spawn_then_hog(ax_task *t, void *arg)
{
    (void)arg;
    ax_spec child = {.fn = fn_empty, .timeout_ms = 60000};
    int n = 0;
    for (int i = 0; i < CHILDREN; i++) {
        child.on_release =
            i == CHILDREN - 1 && atomic_load(&child_has_release) ? orphan_release : NULL;
        int rc = ax_spawn(t, &child, NULL);
        if (rc != 0 && i - n < 3)
            fprintf(stderr, "spawn %d: %s: %s\n", i, ax_strerror(rc), ax_error_detail());
        n += rc == 0;
    }
    atomic_store(&orphan_children, n);
    while (!atomic_load(&orphan_gate))
        usleep(1000);
    return 0;
}

static void orphan_release(void *arg)
{
    (void)arg;
    atomic_store(&orphan_release_began, true);
    usleep(100 * 1000);
    atomic_store(&orphan_release_ended, true);
}

static void case_shutdown_waits_for_orphan_release(void)
{
    for (int round = 0; round < ROUNDS; round++) {
        ax_config c;
        ax_config_default(&c);
        c.workers = 2;
        c.max_concurrency = 8;
        c.capacity[AX_PRIO_NORMAL] = CHILDREN + 64;
        c.shed_ratio = 1.0;
        ax_sched *s = test_sched_cfg(&c);
        atomic_store(&orphan_gate, false);
        atomic_store(&orphan_release_began, false);
        atomic_store(&orphan_release_ended, false);
        atomic_store(&orphan_children, -1);
        static struct rec x;
        memset(&x, 0, sizeof x);
        atomic_store(&child_has_release, round % 2 == 1);
        ax_spec sp = spec_for(&x, fn_spawn_then_hog);
        sp.on_release = round % 2 == 1 ? NULL : orphan_release;
        uint64_t id;
        CHECK_EQ(ax_submit(s, &sp, &id), 0);
        CHECK(WAIT_UNTIL(atomic_load(&orphan_children) >= 0, 60000 * TEST_SLOW));
        CHECK_EQ(atomic_load(&orphan_children), CHILDREN);
        CHECK_EQ(ax_cancel(s, id), 0); /* the attempt ends; its function goes on */
        CHECK_EQ(atomic_load(&x.done_calls), 1u);
        CHECK_EQ(atomic_load(&x.done_state), (int)AX_STATE_CANCELLED);
        /* Every child ended (they ran on the other worker): nothing but the
         * orphan is left. */
        CHECK(WAIT_UNTIL(test_stats(s).succeeded == CHILDREN, 60000 * TEST_SLOW));
        CHECK(!atomic_load(&orphan_release_began));
        atomic_store(&orphan_gate, true);
        CHECK_EQ(ax_shutdown(s, 30000), 0);
        if (!atomic_load(&orphan_release_ended)) {
            fprintf(stderr, "round %d: ax_shutdown returned 0 with the %s on_release %s\n", round,
                    round % 2 == 1 ? "last child's" : "orphan's",
                    atomic_load(&orphan_release_began) ? "still running" : "not begun");
            CHECK(atomic_load(&orphan_release_ended));
        }
        ax_free(s);
        CHECK_EQ(atomic_load(&x.release_calls), 0u); /* its own on_release replaced ours */
    }
    printf("ok 10 - ax_shutdown returns after an orphan's on_release and its children's (%d "
           "rounds)\n",
           ROUNDS);
}

/* Case 11: an on_release after an on_timeout, on the callback thread. */
static _Atomic unsigned c11_release_ms, c11_released;

static void c11_on_timeout(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    usleep(1000 * 1000);
}

static void c11_release(void *arg)
{
    (void)arg;
    usleep(atomic_load(&c11_release_ms) * 1000u);
    atomic_fetch_add(&c11_released, 1);
}

static void case_release_timed_alone(void)
{
    static const unsigned release_ms[2] = {1000, 2500};
    static const uint64_t overruns[2] = {0, 1};
    for (int k = 0; k < 2; k++) {
        ax_config c;
        ax_config_default(&c);
        c.workers = 1;
        c.max_concurrency = 8;
        c.callback_threads = 1;
        c.callback_timeout_ms = 1500;
        ax_sched *s = test_sched_cfg(&c);
        atomic_store(&c11_release_ms, release_ms[k]);
        atomic_store(&c11_released, 0);
        ax_spec sp = {.fn = fn_sleep_long,
                      .timeout_ms = 20,
                      .on_timeout = c11_on_timeout,
                      .on_release = c11_release};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        /* The coroutine returns at the deadline (ax_sleep): the release
         * waits only for the on_timeout, then runs on the callback thread. */
        CHECK(WAIT_UNTIL(atomic_load(&c11_released) == 1, 60000 * TEST_SLOW));
        uint64_t got = test_stats(s).callback_overruns;
        if (got != overruns[k])
            fprintf(stderr, "case 11: on_release of %u ms: %llu overrun(s), want %llu\n",
                    release_ms[k], (unsigned long long)got, (unsigned long long)overruns[k]);
        CHECK_EQ(got, overruns[k]);
        CHECK_EQ(ax_shutdown(s, 1000), 0);
        ax_free(s);
    }
    printf("ok 11 - an on_release after an on_timeout is timed on its own\n");
}

/* Case 12: ax_shutdown waits for an on_timeout -> on_release chain. */
static _Atomic bool c12_timeout_ended, c12_release_ended;

static void c12_on_timeout(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    usleep(300 * 1000);
    atomic_store(&c12_timeout_ended, true);
}

static void c12_release(void *arg)
{
    (void)arg;
    CHECK(atomic_load(&c12_timeout_ended)); /* after its task's on_timeout */
    atomic_store(&c12_release_ended, true);
}

static void case_shutdown_waits_for_timeout_chain(void)
{
    ax_sched *s = test_sched(1, 8);
    static struct rec x;
    ax_spec sp = spec_for(&x, fn_sleep_long);
    sp.timeout_ms = 20;
    sp.on_timeout = c12_on_timeout;
    sp.on_release = c12_release;
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&x.done_calls) == 1, 60000 * TEST_SLOW));
    CHECK_EQ(atomic_load(&x.done_state), (int)AX_STATE_TIMED_OUT);
    CHECK_EQ(ax_shutdown(s, 0), 0);
    CHECK(atomic_load(&c12_timeout_ended));
    CHECK(atomic_load(&c12_release_ended));
    ax_free(s);
    printf("ok 12 - ax_shutdown returns after an on_release that waited for its on_timeout\n");
}

int main(void)
{
    case_never_ran();
    case_cancel_running();
    case_timeout_hog();
    case_retry_waits_for_orphan();
    case_many();
    case_shutdown();
    case_refused();
    case_free_waits();
    case_timeout_before_release();
    case_shutdown_waits_for_orphan_release();
    case_release_timed_alone();
    case_shutdown_waits_for_timeout_chain();
    return 0;
}
