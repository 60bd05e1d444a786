/* test_join_let_go.c - ax_join returns once the child has let go.
 *
 * The README: "join it before its parent's arg goes". The join returned as
 * soon as the child's terminal path recorded its result, before that path
 * ran the child's on_done, and (the child cancelled) before its coroutine
 * woke to return and run its cleanups: a parent that then freed what it had
 * given the child had it written after the free (new user's trial: ASan
 * heap-use-after-free in the child's on_done and in its ax_defer cleanup;
 * SIGSEGV and "malloc(): unaligned fastbin chunk" in plain builds). Now
 * the join waits for every hold but the parent's: on_done returned, the
 * coroutine returned.
 *
 *  1. on_done slow (20 ms): after each of 20 joins returned 0, the child's
 *     on_done has returned (its flag set, exactly one call).
 *  2. A child cancelled by its parent, parked in ax_sleep with a cleanup
 *     (ax_defer): after the join returned 0 (CANCELLED), the cleanup ran.
 *     One worker: the child's coroutine can only wake once the parent
 *     parks, so before the fix the join returned without parking (20 of 20).
 *  3. A child cancelled from another thread whose on_done (run there) waits:
 *     a join bounded at 20 ms returns AX_ETIMEDOUT saying the child ended
 *     but has not let go; once on_done returns, a second, unbounded join
 *     returns 0 after the child's cleanup ran, with the child's result
 *     (CANCELLED, 1 attempt) as on_done saw it.
 */
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct box {
    atomic_int entered; /* the child's function began: its cleanup is registered */
    atomic_int done_calls;
    atomic_int done_returned;
    atomic_int cleaned;
    ax_result seen;
};

static void slow_done(const ax_result *r, void *arg)
{
    struct box *b = arg;
    atomic_fetch_add(&b->done_calls, 1);
    b->seen = *r;
    usleep(20 * 1000);
    atomic_store(&b->done_returned, 1);
}

static int quick_child(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void cleanup(void *arg)
{
    struct box *b = arg;
    atomic_store(&b->cleaned, 1);
}

static int sleepy_child(ax_task *t, void *arg)
{
    struct box *b = arg;
    ax_defer(t, cleanup, arg);
    atomic_store(&b->entered, 1);
    int rc = ax_sleep(t, 10000);
    return rc ? rc : 0;
}

static atomic_int failures, parents_done;

static void fail_at(int line)
{
    fprintf(stderr, "test_join_let_go.c:%d: check failed\n", line);
    atomic_fetch_add(&failures, 1);
}
#define EXPECT(c)                                                                              \
    do {                                                                                       \
        if (!(c))                                                                              \
            fail_at(__LINE__);                                                                 \
    } while (0)

static int parent_slow_done(ax_task *t, void *arg)
{
    (void)arg;
    struct box *b = calloc(1, sizeof *b);
    ax_spec sp = {.fn = quick_child, .timeout_ms = 5000, .on_done = slow_done, .cb_arg = b};
    uint64_t id;
    EXPECT(ax_spawn(t, &sp, &id) == AX_OK);
    ax_result r;
    EXPECT(ax_join(t, id, -1, &r) == AX_OK);
    EXPECT(r.state == AX_STATE_SUCCEEDED);
    EXPECT(atomic_load(&b->done_returned) == 1);
    EXPECT(atomic_load(&b->done_calls) == 1);
    free(b);
    atomic_fetch_add(&parents_done, 1);
    return 0;
}

static int parent_cancel(ax_task *t, void *arg)
{
    (void)arg;
    struct box *b = calloc(1, sizeof *b);
    ax_spec sp = {.fn = sleepy_child, .arg = b, .timeout_ms = 5000};
    uint64_t id;
    EXPECT(ax_spawn(t, &sp, &id) == AX_OK);
    while (!atomic_load(&b->entered)) /* then it parks in its sleep */
        EXPECT(ax_sleep(t, 1) == AX_OK);
    EXPECT(ax_cancel(ax_task_sched(t), id) == AX_OK);
    ax_result r;
    EXPECT(ax_join(t, id, -1, &r) == AX_OK);
    EXPECT(r.state == AX_STATE_CANCELLED);
    EXPECT(atomic_load(&b->cleaned) == 1);
    free(b);
    atomic_fetch_add(&parents_done, 1);
    return 0;
}

/* Case 3: the child's on_done runs on the thread that cancels it (this
 * test's main thread, not a worker) and waits there until the parent has
 * tried a bounded join. */
static _Atomic uint64_t held_child;
static struct box *_Atomic held_box;
static atomic_int in_done, may_return;

static void held_done(const ax_result *r, void *arg)
{
    struct box *b = arg;
    atomic_fetch_add(&b->done_calls, 1);
    b->seen = *r;
    atomic_store(&in_done, 1);
    for (int i = 0; i < 10000 && !atomic_load(&may_return); i++)
        usleep(1000);
    atomic_store(&b->done_returned, 1);
}

static int parent_held(ax_task *t, void *arg)
{
    (void)arg;
    struct box *b = calloc(1, sizeof *b);
    ax_spec sp = {.fn = sleepy_child, .arg = b, .timeout_ms = 10000, .on_done = held_done,
                  .cb_arg = b};
    uint64_t id;
    EXPECT(ax_spawn(t, &sp, &id) == AX_OK);
    atomic_store(&held_box, b);
    atomic_store(&held_child, id);
    while (!atomic_load(&in_done))
        EXPECT(ax_sleep(t, 1) == AX_OK);
    ax_result r;
    int rc = ax_join(t, id, 20, &r);
    EXPECT(rc == AX_ETIMEDOUT);
    if (rc == AX_ETIMEDOUT) {
        fprintf(stderr, "bounded join: %s\n", ax_error_detail());
        EXPECT(strstr(ax_error_detail(), "ended, but its on_done or its function") != NULL);
    }
    atomic_store(&may_return, 1);
    EXPECT(ax_join(t, id, -1, &r) == AX_OK);
    EXPECT(atomic_load(&b->done_returned) == 1 && atomic_load(&b->cleaned) == 1);
    EXPECT(r.state == AX_STATE_CANCELLED && r.code == AX_ECANCELED);
    EXPECT(r.state == b->seen.state && r.attempts == b->seen.attempts && r.attempts == 1);
    free(b);
    atomic_fetch_add(&parents_done, 1);
    return 0;
}

static void run_parents(unsigned workers, ax_fn parent, int n)
{
    atomic_store(&parents_done, 0);
    ax_sched *s = test_sched(workers, 64);
    for (int i = 0; i < n; i++) {
        ax_spec sp = {.fn = parent, .timeout_ms = 20000};
        CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    }
    CHECK(WAIT_UNTIL(atomic_load(&parents_done) == n, 30000));
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
}

int main(void)
{
    run_parents(2, parent_slow_done, 20);
    CHECK_EQ(atomic_load(&failures), 0);
    run_parents(1, parent_cancel, 20);
    CHECK_EQ(atomic_load(&failures), 0);
    run_parents(2, parent_cancel, 20);
    CHECK_EQ(atomic_load(&failures), 0);

    atomic_store(&parents_done, 0);
    ax_sched *s = test_sched(2, 64);
    ax_spec sp = {.fn = parent_held, .timeout_ms = 20000};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&held_child) != 0, 10000));
    CHECK(WAIT_UNTIL(atomic_load(&atomic_load(&held_box)->entered), 10000));
    CHECK_EQ(ax_cancel(s, atomic_load(&held_child)), AX_OK); /* runs held_done here */
    CHECK(WAIT_UNTIL(atomic_load(&parents_done) == 1, 30000));
    CHECK_EQ(atomic_load(&failures), 0);
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    return 0;
}
