/* test_class_budget_dropped.c - a retry that never starts gives its class's
 * retry budget back.
 *
 * The budget counts the retries that reached the upstream; a denied one is
 * not counted (overload/budget.c). A retry decided and then dropped before
 * its function was entered never reached it either, yet it stayed spent:
 * ten retries cancelled in their back-off emptied a budget of ten, and the
 * next real failure was refused "retry budget exhausted" (review, 5 of 5 in
 * every case below). Now a decided retry is reserved (it takes room at
 * once), enters the window when its function is entered, and is given back
 * when it is dropped: cancelled in its back-off or its bucket, past its
 * deadline, at shutdown, refused at dispatch (queue-time budget, breaker).
 *
 * Every class here: 10 retries per 10 s window (ratio 0, 1/s floor), no
 * throttle, max_retry 1, a function that fails.
 */
#include "class_common.h"

static int fail_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 5;
}

static atomic_int ndone;
static ax_result last;
static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    last = *r;
    atomic_fetch_add(&ndone, 1);
}

static ax_class_config budget_class(uint32_t backoff_ms)
{
    ax_class_config c = rc_plain("b");
    c.max_retry = 1;
    c.retry_budget = true;
    c.retry_budget_ratio = 0;
    c.retry_budget_min_per_s = 1; /* 10 per 10 s */
    c.retry_budget_window_ms = 10000;
    c.retry_throttle_tokens = 0;
    c.retry.mode = AX_BACKOFF_EXPONENTIAL;
    c.retry.base_ms = backoff_ms;
    c.retry.max_ms = backoff_ms;
    c.retry.jitter_ms = 0;
    return c;
}

static double left(ax_sched *s, unsigned id)
{
    return rc_cstats(s, id).retry_budget_left;
}

/* N failing tasks whose retries wait out a 3 s back-off, then dropped by
 * `how`: "cancel", "deadline" (a 1 s deadline ends the back-off),
 * "shutdown". */
static void in_backoff(const char *how)
{
    atomic_store(&ndone, 0);
    ax_sched *s = test_sched(1, 16);
    ax_class_config c = budget_class(3000);
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    CHECK(left(s, id) == 10);
    enum { N = 5 };
    uint64_t ids[N];
    bool deadline = strcmp(how, "deadline") == 0;
    for (int i = 0; i < N; i++) {
        ax_spec sp = {.fn = fail_fn, .class_id = id, .on_done = on_done};
        if (deadline)
            sp.deadline_ns = ax_now_ns() + 1000000000ull; /* room for the checks below */
        CHECK_EQ(ax_submit(s, &sp, &ids[i]), AX_OK);
    }
    CHECK(WAIT_UNTIL(rc_cstats(s, id).retries_allowed == N, 5000));
    /* Reserved while they wait: the room is taken at the decision. */
    CHECK(left(s, id) == 10 - N);
    if (strcmp(how, "cancel") == 0)
        for (int i = 0; i < N; i++)
            CHECK_EQ(ax_cancel(s, ids[i]), AX_OK);
    if (strcmp(how, "shutdown") == 0)
        CHECK_EQ(ax_shutdown(s, 1000), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == N, 10000));
    CHECK_EQ(last.state, deadline ? AX_STATE_TIMED_OUT : AX_STATE_CANCELLED);
    CHECK_EQ(rc_cstats(s, id).started, N); /* no retry ran */
    fprintf(stderr, "%s: budget left %g of 10\n", how, left(s, id));
    CHECK(left(s, id) == 10);
    ax_free(s);
}

/* A retry whose back-off is over, waiting in its bucket behind its class's
 * limit of 1 (a blocked task holds it): "cancel" ends it there, "expired"
 * lets its 1 s queue-time budget end it at dispatch. */
static void in_bucket(const char *how)
{
    atomic_store(&ndone, 0);
    atomic_store(&rc_running, 0);
    ax_sched *s = test_sched(1, 16);
    /* The blocker must hold the limit before the back-off ends: 2 s, not
     * 10 ms (CI, TSan on a loaded machine: the retry ran before the
     * blocker did and failed with the function's code). */
    ax_class_config c = budget_class(2000);
    c.limit_max = 1;
    bool expired = strcmp(how, "expired") == 0;
    if (expired) {
        c.queue_budget = true;
        c.queue_budget_ms = 1000; /* the first attempt and the blocker start within it */
    }
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    static atomic_int release;
    atomic_store(&release, 0);
    uint64_t tid;
    ax_spec sp = {.fn = fail_fn, .class_id = id, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, &tid), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).retries_allowed == 1, 5000));
    ax_spec blk = {.fn = rc_block, .arg = &release, .class_id = id, .overrides = AX_SPEC_MAX_RETRY};
    CHECK_EQ(ax_submit(s, &blk, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
    if (!expired) {
        CHECK(WAIT_UNTIL(rc_cstats(s, id).queued == 1 && test_stats(s).delayed == 0, 5000));
        CHECK(left(s, id) == 9);
        CHECK_EQ(ax_cancel(s, tid), AX_OK);
    }
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == 1, 10000));
    CHECK_EQ(last.state, expired ? AX_STATE_FAILED : AX_STATE_CANCELLED);
    if (expired)
        CHECK_EQ(last.code, AX_EEXPIRED);
    CHECK_EQ(last.attempts, 2);
    fprintf(stderr, "%s: budget left %g of 10\n", how, left(s, id));
    CHECK(left(s, id) == 10);
    atomic_store(&release, 1);
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
}

/* The breaker opens during the back-off (a second task's failure); the
 * retry is refused AX_EOPEN at dispatch. */
static void breaker_open(void)
{
    atomic_store(&ndone, 0);
    ax_sched *s = test_sched(1, 16);
    ax_class_config c = budget_class(2000); /* the second fails within it */
    c.breaker = true;
    c.breaker_min_calls = 2;
    c.breaker_failure_rate = 0.5;
    c.breaker_window_ms = 10000;
    c.breaker_open_ms = 60000;
    c.breaker_half_open_calls = 1;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    ax_spec sp = {.fn = fail_fn, .class_id = id, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).retries_allowed == 1, 5000));
    ax_spec second = {.fn = fail_fn, .class_id = id, .overrides = AX_SPEC_MAX_RETRY};
    CHECK_EQ(ax_submit(s, &second, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == 1, 10000));
    CHECK_EQ(last.code, AX_EOPEN);
    fprintf(stderr, "open: budget left %g of 10\n", left(s, id));
    CHECK(left(s, id) == 10);
    ax_free(s);
}

/* And a retry that runs stays spent, in the window from its start. */
static void ran(void)
{
    atomic_store(&ndone, 0);
    ax_sched *s = test_sched(1, 16);
    ax_class_config c = budget_class(10);
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    for (int i = 0; i < 3; i++) {
        ax_spec sp = {.fn = fail_fn, .class_id = id, .on_done = on_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    }
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == 3, 10000));
    CHECK_EQ(last.attempts, 2);
    CHECK_EQ(rc_cstats(s, id).started, 6);
    CHECK(left(s, id) == 7);
    ax_free(s);
}

int main(void)
{
    in_backoff("cancel");
    in_backoff("deadline");
    in_backoff("shutdown");
    in_bucket("cancel");
    in_bucket("expired");
    breaker_open();
    ran();
    return 0;
}
