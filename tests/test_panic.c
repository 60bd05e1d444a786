/* test_panic.c - ax_panic and ax_defer (DESIGN.md §7, the seed's recover).
 *
 *  1. ax_panic runs the cleanups registered with ax_defer last-in first-out,
 *     does not return, and ends the task FAILED with code AX_EPANIC and
 *     result.error equal to the formatted message; ax_stats.panicked counts
 *     it.
 *  2. Cleanups also run LIFO on a normal return, and when a task that timed
 *     out finally returns (not before: its coroutine still owns them).
 *  3. More cleanups than the inline capacity (8) work, on panic and return.
 *  4. ax_panic / ax_defer on a task handle from outside its coroutine return
 *     AX_ESTATE and neither end the task nor register anything.
 *  5. A cleanup that panics during a panic keeps the first message (the
 *     cause) and adds its own; the cleanups registered before it still run.
 *  6. 300 cleanups that each panic: all run, within the default stack.
 */
#include "util.h"

#define MAXREC 64

/* One recorder per scenario: the order cleanups ran in. */
struct rec {
    atomic_int n;
    atomic_int order[MAXREC];
};

struct cleanup {
    struct rec *r;
    int tag;
};

static void cleanup_fn(void *arg)
{
    struct cleanup *c = arg;
    int i = atomic_fetch_add(&c->r->n, 1);
    CHECK(i < MAXREC);
    atomic_store(&c->r->order[i], c->tag);
}

/* Check the recorder holds tags n-1, ..., 1, 0 (registered 0 first). */
static void check_lifo(struct rec *r, int n)
{
    CHECK_EQ(atomic_load(&r->n), n);
    for (int i = 0; i < n; i++)
        CHECK_EQ(atomic_load(&r->order[i]), n - 1 - i);
}

struct outcome {
    atomic_int calls;
    atomic_int state;
    atomic_int code;
    atomic_int cleanups_at_done; /* cleanups already run when on_done ran */
    char error[AX_ERROR_MAX];
    struct rec *r;
};

static void on_done(const ax_result *res, void *arg)
{
    struct outcome *o = arg;
    atomic_store(&o->state, (int)res->state);
    atomic_store(&o->code, res->code);
    atomic_store(&o->cleanups_at_done, o->r ? atomic_load(&o->r->n) : -1);
    memcpy(o->error, res->error, sizeof o->error);
    atomic_fetch_add(&o->calls, 1); /* last: publishes the fields above */
}

/* A scenario's task argument. */
struct job {
    struct rec rec;
    struct cleanup c[MAXREC];
    int ndefers;
    atomic_int after_panic; /* set if ax_panic returned: must stay 0 */
    atomic_int defer_rc;    /* first non-zero ax_defer result */
    atomic_int returned;
};

static void register_cleanups(ax_task *t, struct job *j)
{
    for (int i = 0; i < j->ndefers; i++) {
        j->c[i] = (struct cleanup){&j->rec, i};
        int rc = ax_defer(t, cleanup_fn, &j->c[i]);
        if (rc) atomic_store(&j->defer_rc, rc);
    }
}

static int panic_fn(ax_task *t, void *arg)
{
    struct job *j = arg;
    register_cleanups(t, j);
    ax_panic(t, "boom %d in %s", 42, "panic_fn");
    atomic_store(&j->after_panic, 1);
    return 0;
}

static int return_fn(ax_task *t, void *arg)
{
    struct job *j = arg;
    register_cleanups(t, j);
    CHECK_EQ(atomic_load(&j->rec.n), 0); /* nothing runs before the return */
    return 0;
}

static atomic_int timed_out_seen;

static int late_fn(ax_task *t, void *arg)
{
    struct job *j = arg;
    register_cleanups(t, j);
    int rc = ax_sleep(t, 5000); /* timeout 100 ms */
    CHECK_EQ(rc, AX_ETIMEDOUT);
    /* Linger until the test has seen the TIMED_OUT on_done (bounded). */
    for (int i = 0; i < 3000 && !atomic_load(&timed_out_seen); i++)
        usleep(1000);
    CHECK_EQ(atomic_load(&j->rec.n), 0);
    atomic_store(&j->returned, 1);
    return 0;
}

static ax_task *_Atomic parked_task;
static atomic_int go;

static int parked_fn(ax_task *t, void *arg)
{
    struct job *j = arg;
    register_cleanups(t, j);
    atomic_store(&parked_task, t);
    while (!atomic_load(&go))
        if (ax_sleep(t, 2) != 0) return 1;
    return 0;
}

/* 5: cleanups 0 and 2 record; the one between them panics again. */
static ax_task *nested_task;

static void panicking_cleanup(void *arg)
{
    struct cleanup *c = arg;
    cleanup_fn(c);
    ax_panic(nested_task, "second %d", 2);
}

static int nested_panic_fn(ax_task *t, void *arg)
{
    struct job *j = arg;
    nested_task = t;
    j->c[0] = (struct cleanup){&j->rec, 0};
    j->c[1] = (struct cleanup){&j->rec, 1};
    j->c[2] = (struct cleanup){&j->rec, 2};
    ax_defer(t, cleanup_fn, &j->c[0]);
    ax_defer(t, panicking_cleanup, &j->c[1]);
    ax_defer(t, cleanup_fn, &j->c[2]);
    ax_panic(t, "first %d", 1);
    atomic_store(&j->after_panic, 1);
    return 0;
}

/* 6: MANY_PANICS cleanups, each panicking in turn. */
#define MANY_PANICS 300
static atomic_int many_ran;
static ax_task *many_task;

static void panicking_again(void *arg)
{
    (void)arg;
    atomic_fetch_add(&many_ran, 1);
    ax_panic(many_task, "again");
}

static int many_panics_fn(ax_task *t, void *arg)
{
    (void)arg;
    many_task = t;
    for (int i = 0; i < MANY_PANICS; i++)
        if (ax_defer(t, panicking_again, NULL) != 0)
            return 1;
    ax_panic(t, "first");
    return 0;
}

static void run(ax_sched *s, ax_fn fn, struct job *j, struct outcome *o, uint64_t timeout_ms)
{
    o->r = &j->rec;
    ax_spec sp = {.fn = fn, .arg = j, .timeout_ms = timeout_ms, .on_done = on_done, .cb_arg = o};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
}

int main(void)
{
    ax_sched *s = test_sched(2, 16);
    static struct job j1, j2, j3, j4, j5, j6;
    static struct outcome o1, o2, o3, o4, o5, o6;

    /* 1. panic with 3 cleanups. */
    j1.ndefers = 3;
    run(s, panic_fn, &j1, &o1, 5000);
    CHECK(WAIT_UNTIL(atomic_load(&o1.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&o1.state), AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&o1.code), AX_EPANIC);
    CHECK_STR(o1.error, "boom 42 in panic_fn");
    CHECK_EQ(atomic_load(&j1.after_panic), 0);
    CHECK_EQ(atomic_load(&j1.defer_rc), 0);
    check_lifo(&j1.rec, 3);
    CHECK(WAIT_UNTIL(test_stats(s).panicked == 1, 1000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.failed, 1);
    CHECK_EQ(st.panicked, 1);

    /* 2a. normal return with 5 cleanups. */
    j2.ndefers = 5;
    run(s, return_fn, &j2, &o2, 5000);
    CHECK(WAIT_UNTIL(atomic_load(&o2.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&o2.state), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&o2.code), 0);
    CHECK_STR(o2.error, "");
    CHECK(WAIT_UNTIL(atomic_load(&j2.rec.n) == 5, 1000));
    check_lifo(&j2.rec, 5);

    /* 2b. a timed-out task keeps its cleanups until it returns. */
    j3.ndefers = 4;
    run(s, late_fn, &j3, &o3, 100);
    CHECK(WAIT_UNTIL(atomic_load(&o3.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&o3.state), AX_STATE_TIMED_OUT);
    CHECK_EQ(atomic_load(&o3.code), AX_ETIMEDOUT);
    CHECK_EQ(atomic_load(&o3.cleanups_at_done), 0);
    atomic_store(&timed_out_seen, 1);
    CHECK(WAIT_UNTIL(atomic_load(&j3.returned), 4000));
    CHECK(WAIT_UNTIL(atomic_load(&j3.rec.n) == 4, 1000));
    check_lifo(&j3.rec, 4);
    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&o3.calls), 1);

    /* 3. beyond the inline capacity of 8: panic with 20, return with 33. */
    j4.ndefers = 20;
    run(s, panic_fn, &j4, &o4, 5000);
    j5.ndefers = 33;
    run(s, return_fn, &j5, &o5, 5000);
    CHECK(WAIT_UNTIL(atomic_load(&o4.calls) == 1 && atomic_load(&o5.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&j4.defer_rc), 0);
    CHECK_EQ(atomic_load(&j5.defer_rc), 0);
    CHECK_EQ(atomic_load(&o4.state), AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&o4.code), AX_EPANIC);
    CHECK_STR(o4.error, "boom 42 in panic_fn");
    check_lifo(&j4.rec, 20);
    CHECK_EQ(atomic_load(&o5.state), AX_STATE_SUCCEEDED);
    CHECK(WAIT_UNTIL(atomic_load(&j5.rec.n) == 33, 1000));
    check_lifo(&j5.rec, 33);
    CHECK(WAIT_UNTIL(test_stats(s).panicked == 2, 1000));

    /* 4. ax_panic / ax_defer with a live task's handle, from outside it. */
    j6.ndefers = 2;
    run(s, parked_fn, &j6, &o6, 5000);
    CHECK(WAIT_UNTIL(atomic_load(&parked_task) != NULL, 2000));
    ax_task *t = atomic_load(&parked_task);
    static struct cleanup foreign;
    foreign = (struct cleanup){&j6.rec, 99};
    CHECK_EQ(ax_defer(t, cleanup_fn, &foreign), AX_ESTATE);
    CHECK(ax_error_detail()[0] != 0);
    CHECK_EQ(ax_panic(t, "not from here %d", 1), AX_ESTATE);
    CHECK(ax_error_detail()[0] != 0);
    usleep(20 * 1000);
    CHECK_EQ(atomic_load(&o6.calls), 0); /* the task was not ended */
    CHECK_EQ(atomic_load(&j6.rec.n), 0); /* nor were its cleanups run */
    atomic_store(&go, 1);
    CHECK(WAIT_UNTIL(atomic_load(&o6.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&o6.state), AX_STATE_SUCCEEDED);
    CHECK(WAIT_UNTIL(atomic_load(&j6.rec.n) == 2, 1000));
    check_lifo(&j6.rec, 2); /* tag 99 was never registered */

    /* 5. a panic inside a cleanup run by a panic. */
    static struct job j7;
    static struct outcome o7;
    run(s, nested_panic_fn, &j7, &o7, 5000);
    CHECK(WAIT_UNTIL(atomic_load(&o7.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&o7.state), AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&o7.code), AX_EPANIC);
    CHECK_STR(o7.error, "first 1; then a defer panicked: second 2");
    CHECK_EQ(atomic_load(&j7.after_panic), 0);
    check_lifo(&j7.rec, 3);

    /* 6. cleanups that each panic in turn: every one runs, none on top of
     * the last's frames (review: ~400 bytes a level, so past ~180 of them
     * the 64 KiB stack overflowed and the process aborted). */
    static struct job j8;
    static struct outcome o8;
    run(s, many_panics_fn, &j8, &o8, 30000);
    CHECK(WAIT_UNTIL(atomic_load(&o8.calls) == 1, 10000));
    CHECK_EQ(atomic_load(&o8.state), AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&o8.code), AX_EPANIC);
    CHECK_EQ(atomic_load(&many_ran), MANY_PANICS);
    CHECK(strncmp(o8.error, "first; then a defer panicked: again", 35) == 0);

    usleep(50 * 1000);
    st = test_stats(s);
    CHECK_EQ(st.panicked, 4);
    CHECK_EQ(st.failed, 4);
    CHECK_EQ(st.succeeded, 3);
    CHECK_EQ(st.timed_out, 1);
    CHECK_EQ(st.running, 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
