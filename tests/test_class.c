/* test_class.c - task classes and their overload controls, end to end
 * through the public API (ax.h "task classes"; DESIGN.md §11). The
 * controllers' own arithmetic is tested in test_limit / test_budget /
 * test_breaker with synthetic time; this checks how the scheduler applies
 * them. Exact counts and states; wall-clock only as lower bounds (a sleep
 * is at least that long) or generous liveness bounds.
 *
 *  1. Bad input: every entry point refuses with a code and a detail.
 *  2. Defaults: a submission takes the class's priority, timeout, retries;
 *     overrides keep the spec's; ax_class_set_timeout applies to the next
 *     submissions.
 *  3. A fixed limit of 2: exactly 2 of the class run at once, the rest wait
 *     queued (stats say so), a task of no class is not held up; once the
 *     blocked class's tasks wait, the workers do not spin (CPU ticks).
 *  4. Queue-time budget: a task that waited past it ends FAILED AX_EEXPIRED
 *     without running.
 *  5. Breaker: 4 failures of 4 open it; submissions get AX_EOPEN; after
 *     open_ms two succeeding probes close it (closed -> open -> half-open ->
 *     closed, opened == 1).
 *  6. Retry budget of exactly one retry: the first task retries once, the
 *     next two are not retried, and their error says why.
 *  7. Deadlines propagate: a child's deadline is at most its parent's; a
 *     parent past its deadline cannot spawn.
 *  8. Events carry the class: the callback's class_name and the JSON
 *     line's "class".
 */
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* on_done may run on two workers at once: each takes its own slot of last[]
 * first, and counts itself done after writing it (a reader that sees done_n
 * reach n sees the n results). */
static atomic_int done_n, slot_n;
static ax_result last[64];

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    int i = atomic_fetch_add(&slot_n, 1);
    if (i < 64)
        last[i] = *r;
    atomic_fetch_add(&done_n, 1);
}

static void reset_done(void)
{
    atomic_store(&done_n, 0);
    atomic_store(&slot_n, 0);
}

static ax_class_config base(const char *name)
{
    ax_class_config c;
    ax_class_config_default(&c);
    c.name = name;
    return c;
}

/* ---- 1. bad input --------------------------------------------------------- */

static int noop(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void test_bad_input(void)
{
    ax_sched *s = test_sched(1, 4);
    unsigned id = 0;
    ax_class_config c = base("quote");
    CHECK_EQ(ax_class_register(NULL, &c, &id), AX_EINVAL);
    CHECK_EQ(ax_class_register(s, NULL, &id), AX_EINVAL);
    c.name = NULL;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c.name = "";
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c.name = "has space";
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "byte 3") != NULL);
    c.name = "0123456789012345678901234567890123"; /* 34 bytes */
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c = base("quote");
    c.timeout_ms = 0;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "class.timeout_ms") != NULL);
    c = base("quote");
    c.priority = (ax_priority)7;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c = base("quote");
    c.max_retry = 1000;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c = base("quote");
    c.limit_min = 0;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c = base("quote");
    c.limit_min = 10; /* above limit_max = max_concurrency = 4 */
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c = base("quote");
    c.breaker_failure_rate = 0;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "breaker_failure_rate") != NULL);
    c = base("quote");
    c.retry_budget_ratio = -1;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    c = base("quote");
    c.retry.base_ms = 0;
    c.retry.max_ms = 0;
    c.retry.mode = (ax_backoff)9;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EINVAL);
    CHECK_EQ(ax_class_count(s), 0u);

    c = base("quote");
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    CHECK_EQ(id, 1u);
    CHECK_EQ(ax_class_register(s, &c, &id), AX_EBUSY);
    unsigned found = 0;
    CHECK_EQ(ax_class_find(s, "quote", &found), AX_OK);
    CHECK_EQ(found, 1u);
    CHECK_EQ(ax_class_find(s, "nope", &found), AX_ENOTFOUND);
    CHECK_EQ(ax_class_find(s, NULL, &found), AX_EINVAL);
    CHECK_EQ(ax_class_set_timeout(s, 2, 100), AX_ENOTFOUND);
    CHECK_EQ(ax_class_set_timeout(s, 1, 0), AX_EINVAL);
    CHECK_EQ(ax_class_set_timeout(NULL, 1, 10), AX_EINVAL);
    ax_class_stats st;
    CHECK_EQ(ax_class_stats_get(s, 0, &st), AX_ENOTFOUND);
    CHECK_EQ(ax_class_stats_get(s, 1, NULL), AX_EINVAL);
    CHECK_EQ(ax_class_stats_get(s, 1, &st), AX_OK);
    CHECK_EQ(st.breaker_calls, 0u);

    /* Up to AX_CLASS_MAX, then AX_ENOMEM. */
    char name[16];
    for (unsigned i = 2; i <= AX_CLASS_MAX; i++) {
        snprintf(name, sizeof name, "c%u", i);
        c = base(name);
        CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
        CHECK_EQ(id, i);
    }
    c = base("one-too-many");
    CHECK_EQ(ax_class_register(s, &c, &id), AX_ENOMEM);
    CHECK_EQ(ax_class_count(s), (unsigned)AX_CLASS_MAX);

    ax_spec sp = {.fn = noop, .timeout_ms = 100};
    sp.class_id = AX_CLASS_MAX + 1;
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "spec.class_id") != NULL);
    sp.class_id = 1;
    sp.overrides = 4;
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EINVAL);
    sp.overrides = 0;
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK); /* timeout 0 would be refused without a class */
    sp.class_id = 0;
    sp.timeout_ms = 0;
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EINVAL);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    c = base("too-late");
    CHECK_EQ(ax_class_register(s, &c, &id), AX_ESHUTDOWN);
    ax_free(s);
}

/* ---- 2. defaults and overrides ---------------------------------------------- */

struct seen {
    ax_priority prio;
    uint64_t budget_ms; /* deadline - now at entry */
    unsigned attempts;
};

static int look(ax_task *t, void *arg)
{
    struct seen *v = arg;
    v->prio = ax_task_priority(t);
    v->budget_ms = (ax_task_deadline_ns(t) - ax_now_ns()) / 1000000u;
    v->attempts = ax_task_attempt(t) + 1;
    return v->attempts < 3 ? 1 : 0; /* fails twice, then succeeds */
}

static void run_one(ax_sched *s, ax_spec *sp)
{
    int before = atomic_load(&done_n);
    sp->on_done = on_done;
    CHECK_EQ(ax_submit(s, sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) > before, 10000));
}

static void test_defaults(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = base("quote");
    c.priority = AX_PRIO_HIGH;
    c.timeout_ms = 5000;
    c.max_retry = 2;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1, 1, 0};
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    struct seen v = {0};
    ax_spec sp = {.fn = look, .arg = &v, .class_id = id};
    reset_done();
    run_one(s, &sp); /* class: HIGH, 5 s, 2 retries -> succeeds on attempt 3 */
    CHECK_EQ(v.prio, AX_PRIO_HIGH);
    CHECK(v.budget_ms > 2500 && v.budget_ms <= 5000);
    CHECK_EQ(last[0].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(last[0].attempts, 3u);
    CHECK_EQ(last[0].class_id, id);

    /* Overrides: NORMAL, no retry, its own timeout. */
    sp = (ax_spec){.fn = look, .arg = &v, .class_id = id, .priority = AX_PRIO_NORMAL,
                   .max_retry = 0, .timeout_ms = 60000,
                   .overrides = AX_SPEC_PRIORITY | AX_SPEC_MAX_RETRY};
    run_one(s, &sp);
    CHECK_EQ(v.prio, AX_PRIO_NORMAL);
    CHECK(v.budget_ms > 5000);
    CHECK_EQ(last[1].state, AX_STATE_FAILED);
    CHECK_EQ(last[1].attempts, 1u);

    /* The class's timeout changed at run time. */
    CHECK_EQ(ax_class_set_timeout(s, id, 20000), AX_OK);
    sp = (ax_spec){.fn = look, .arg = &v, .class_id = id};
    run_one(s, &sp);
    CHECK(v.budget_ms > 10000 && v.budget_ms <= 20000);
    ax_class_stats st;
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_STR(st.name, "quote");
    CHECK_EQ(st.timeout_ms, 20000u);
    CHECK_EQ(st.submitted, 3u);
    CHECK_EQ(st.started, 7u); /* 3 + 1 + 3 attempts */
    CHECK_EQ(st.succeeded, 2u);
    CHECK_EQ(st.failed, 1u);
    CHECK_EQ(st.in_flight, 0u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- 3. a fixed limit ---------------------------------------------------------- */

static atomic_int gate_open, inside, inside_max;

static int gated(ax_task *t, void *arg)
{
    (void)arg;
    int now = atomic_fetch_add(&inside, 1) + 1;
    int m = atomic_load(&inside_max);
    while (now > m && !atomic_compare_exchange_weak(&inside_max, &m, now))
        ;
    while (!atomic_load(&gate_open))
        if (ax_sleep(t, 2) != 0)
            break;
    atomic_fetch_sub(&inside, 1);
    return 0;
}

static void test_fixed_limit(void)
{
    ax_sched *s = test_sched(2, 50);
    ax_class_config c = base("search");
    c.adaptive = false;
    c.limit_max = 2;
    c.timeout_ms = 60000;
    c.queue_budget = false;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    reset_done();
    atomic_store(&gate_open, 0);
    for (int i = 0; i < 10; i++) {
        ax_spec sp = {.fn = gated, .class_id = id, .on_done = on_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    }
    CHECK(WAIT_UNTIL(atomic_load(&inside) == 2, 10000));
    /* A task of no class runs beside the blocked class. */
    ax_spec free_sp = {.fn = noop, .timeout_ms = 1000, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &free_sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == 1, 10000));
    ax_class_stats st;
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.limit, 2u);
    CHECK_EQ(st.in_flight, 2u);
    CHECK_EQ(st.queued, 8u);
    ax_stats gs = test_stats(s);
    CHECK_EQ(gs.queued[AX_PRIO_NORMAL], 8u);
    /* Blocked by their class, the 8 do not keep the workers spinning: over
     * 500 ms the process uses well under a CPU (two tasks poll every 2 ms). */
    long t0 = test_cpu_ticks();
    usleep(500 * 1000);
    long used = test_cpu_ticks() - t0;
    fprintf(stderr, "class limit: %ld ticks of CPU in 500 ms while blocked\n", used);
    CHECK_LE(used, 25); /* 0.5 CPU-s = 50 ticks for one spinning worker */
    atomic_store(&gate_open, 1);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == 11, 10000));
    CHECK_EQ(atomic_load(&inside_max), 2);
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.succeeded, 10u);
    CHECK_EQ(st.queued, 0u);
    CHECK_EQ(st.in_flight, 0u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- 4. queue-time budget ------------------------------------------------------- */

static atomic_int ran_second, holder_started;

/* Holds the class's one slot until the other task has ended. */
static int hold_until_one_done(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&holder_started, 1);
    while (atomic_load(&done_n) == 0)
        if (ax_sleep(t, 5))
            return 1;
    return 0;
}

static int mark(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&ran_second, 1);
    return 0;
}

static void test_queue_budget(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = base("report");
    c.adaptive = false;
    c.limit_max = 1;
    c.timeout_ms = 10000;
    /* Long enough that the holder, submitted first, starts within it on a
     * busy machine (it is a task of the same class: were it kept off a CPU
     * past the budget, it would expire too). */
    c.queue_budget_ms = 1000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    reset_done();
    ax_spec a = {.fn = hold_until_one_done, .class_id = id, .on_done = on_done};
    ax_spec b = {.fn = mark, .class_id = id, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&holder_started), 10000));
    /* b waits behind the holder (limit 1) until its budget ends it. */
    CHECK_EQ(ax_submit(s, &b, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == 2, 10000));
    CHECK_EQ(atomic_load(&ran_second), 0);
    int k = 0; /* b ended first: the holder waited for it */
    if (last[k].state != AX_STATE_FAILED)
        fprintf(stderr, "queue budget: b ended %d: %s (waited %llu ms)\n", (int)last[k].state,
                last[k].error, (unsigned long long)(last[k].wait_ns / 1000000u));
    CHECK_EQ(last[1].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(last[k].state, AX_STATE_FAILED);
    CHECK_EQ(last[k].code, AX_EEXPIRED);
    CHECK(strstr(last[k].error, "queue-time budget of 1000 ms") != NULL);
    CHECK(last[k].wait_ns >= 1000000000u);
    CHECK_EQ(last[k].run_ns, 0u);
    ax_class_stats st;
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.expired, 1u);
    CHECK_EQ(st.failed, 1u);
    CHECK_EQ(st.succeeded, 1u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- 5. circuit breaker ------------------------------------------------------------ */

static int fail_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 1;
}

static void test_breaker(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = base("flaky");
    c.breaker_min_calls = 4;
    c.breaker_failure_rate = 0.5;
    c.breaker_open_ms = 1000; /* the refusal below must come while it is open */
    c.breaker_half_open_calls = 2;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    reset_done();
    for (int i = 0; i < 4; i++) {
        ax_spec sp = {.fn = fail_fn, .class_id = id};
        run_one(s, &sp);
    }
    ax_class_stats st;
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.breaker, AX_BREAKER_OPEN);
    CHECK_EQ(st.breaker_opened, 1u);
    ax_spec sp = {.fn = noop, .class_id = id, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EOPEN);
    CHECK(strstr(ax_error_detail(), "circuit breaker open") != NULL);
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.breaker_rejected, 1u);
    CHECK_EQ(test_stats(s).rejected, 1u);
    usleep(1200 * 1000); /* past open_ms */
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.breaker, AX_BREAKER_HALF_OPEN);
    run_one(s, &sp);
    run_one(s, &sp);
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.breaker, AX_BREAKER_CLOSED);
    CHECK_EQ(st.breaker_opened, 1u);
    CHECK_EQ(st.succeeded, 2u);
    CHECK_EQ(st.failed, 4u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- 6. retry budget ---------------------------------------------------------------- */

static void test_retry_budget(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = base("search");
    c.max_retry = 3;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1, 1, 0};
    c.retry_budget_ratio = 0;
    c.retry_budget_window_ms = 3600000;   /* an hour: the test never slides it */
    c.retry_budget_min_per_s = 1.0 / 3600; /* one retry per window */
    c.breaker = false;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    reset_done();
    for (int i = 0; i < 3; i++) {
        ax_spec sp = {.fn = fail_fn, .class_id = id};
        run_one(s, &sp);
    }
    CHECK_EQ(last[0].attempts, 2u);
    CHECK_EQ(last[1].attempts, 1u);
    CHECK_EQ(last[2].attempts, 1u);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(last[i].state, AX_STATE_FAILED);
        CHECK(strstr(last[i].error, "retry budget exhausted") != NULL);
    }
    ax_class_stats st;
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    CHECK_EQ(st.retries_allowed, 1u);
    CHECK_EQ(st.retries_denied, 3u);
    CHECK_EQ(test_stats(s).retried, 1u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- 7. deadlines propagate --------------------------------------------------------- */

static _Atomic uint64_t parent_deadline, child_deadline;
static atomic_int spawn_late_rc, spawn_delay_rc;
#define RC_UNSET 12345 /* no ax_spawn result yet */

static int child_fn(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&child_deadline, ax_task_deadline_ns(t));
    return 0;
}

static int parent_fn(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&parent_deadline, ax_task_deadline_ns(t));
    ax_spec c = {.fn = child_fn, .timeout_ms = 60000};
    uint64_t id;
    CHECK_EQ(ax_spawn(t, &c, &id), AX_OK);
    ax_result r;
    CHECK_EQ(ax_join(t, id, -1, &r), AX_OK);
    CHECK_EQ(r.state, AX_STATE_SUCCEEDED);
    /* A delay that ends after the parent's deadline: refused the same way. */
    ax_spec d = {.fn = child_fn, .timeout_ms = 100, .delay_ms = 60000};
    atomic_store(&spawn_delay_rc, ax_spawn(t, &d, NULL));
    /* Past the deadline (spinning: blocking calls would return at once). */
    while (ax_now_ns() <= ax_task_deadline_ns(t))
        ;
    atomic_store(&spawn_late_rc, ax_spawn(t, &c, NULL));
    return 0;
}

static void test_deadline_propagates(void)
{
    ax_sched *s = test_sched(2, 4);
    ax_spec sp = {.fn = parent_fn, .timeout_ms = 2000};
    reset_done();
    atomic_store(&spawn_late_rc, RC_UNSET);
    atomic_store(&spawn_delay_rc, RC_UNSET);
    run_one(s, &sp);
    /* The parent's attempt may end at its deadline (the watchdog or its
     * worker's wheel) before its function, spinning to that deadline, gets
     * to the late spawn: on_done does not wait for it (a busy machine keeps
     * the worker off its CPU just then). */
    CHECK(WAIT_UNTIL(atomic_load(&spawn_late_rc) != RC_UNSET, 10000));
    CHECK(atomic_load(&child_deadline) != 0);
    CHECK_LE(atomic_load(&child_deadline), atomic_load(&parent_deadline));
    CHECK_EQ(atomic_load(&spawn_late_rc), AX_ETIMEDOUT);
    CHECK_EQ(atomic_load(&spawn_delay_rc), AX_ETIMEDOUT);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- 8. events carry the class ------------------------------------------------------ */

static atomic_int ev_with_class, ev_total;

static void on_event(const ax_event *ev, void *arg)
{
    (void)arg;
    atomic_fetch_add(&ev_total, 1);
    if (strcmp(ev->class_name, "quote") == 0)
        atomic_fetch_add(&ev_with_class, 1);
}

static void test_events(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = base("quote");
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    char *json = NULL;
    size_t json_len = 0;
    FILE *f = open_memstream(&json, &json_len);
    CHECK(f != NULL);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), AX_OK);
    CHECK_EQ(ax_events_json(s, f), AX_OK);
    reset_done();
    ax_spec sp = {.fn = noop, .class_id = id};
    run_one(s, &sp);
    ax_spec plain = {.fn = noop, .timeout_ms = 100};
    run_one(s, &plain);
    CHECK_EQ(ax_events_flush(s), AX_OK);
    /* submitted, started, succeeded for each task; three of them "quote" */
    CHECK_EQ(atomic_load(&ev_total), 6);
    CHECK_EQ(atomic_load(&ev_with_class), 3);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    fclose(f);
    unsigned lines = 0, classed = 0;
    for (char *p = json; p && *p; p = strchr(p, '\n') + 1) {
        lines++;
        char *nl = strchr(p, '\n');
        CHECK(nl != NULL);
        *nl = 0;
        if (strstr(p, ",\"class\":\"quote\","))
            classed++;
        *nl = '\n';
    }
    CHECK_EQ(lines, 6u);
    CHECK_EQ(classed, 3u);
    free(json);
}

int main(void)
{
    test_bad_input();
    test_defaults();
    test_fixed_limit();
    test_queue_budget();
    test_breaker();
    test_retry_budget();
    test_deadline_propagates();
    test_events();
    puts("test_class: ok");
    return 0;
}
