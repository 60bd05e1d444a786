/* State machine (DESIGN.md §3): each path to a terminal state, what the
 * result says, ids and trace ids, delayed starts, queued deadlines. */
#include "util.h"

#include <string.h>

struct rec {
    atomic_int ran, done;
    ax_result r;
    uint64_t ran_at;
    uint64_t seen_id;
    char trace[AX_TRACE_ID_MAX];
};

static int fn_ok(ax_task *t, void *arg)
{
    struct rec *x = arg;
    x->seen_id = ax_task_id(t);
    snprintf(x->trace, sizeof x->trace, "%s", ax_task_trace_id(t));
    x->ran_at = test_now_ms();
    atomic_fetch_add(&x->ran, 1);
    CHECK_EQ(ax_cancelled(t), 0);
    CHECK(ax_task_deadline_ns(t) > ax_now_ns());
    CHECK(ax_task_sched(t) != NULL);
    return 0;
}

static int fn_fail(ax_task *t, void *arg)
{
    struct rec *x = arg;
    atomic_fetch_add(&x->ran, 1);
    CHECK_EQ(ax_task_set_error(t, "upstream said %d", 503), 0);
    return 42;
}

static int fn_fail_plain(ax_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&((struct rec *)arg)->ran, 1);
    return -5;
}

/* Submits a plain (not child) task from inside a task. */
static int fn_submitter(ax_task *t, void *arg);

static void on_done(const ax_result *r, void *arg)
{
    struct rec *x = arg;
    x->r = *r;
    atomic_fetch_add(&x->done, 1);
}

static struct rec inner;

static int fn_submitter(ax_task *t, void *arg)
{
    (void)arg;
    ax_spec sp = {.fn = fn_ok, .arg = &inner, .timeout_ms = 1000, .on_done = on_done,
                  .cb_arg = &inner};
    return ax_submit(ax_task_sched(t), &sp, NULL);
}

static void submit(ax_sched *s, ax_spec *sp, struct rec *x, uint64_t *id)
{
    sp->arg = x;
    sp->on_done = on_done;
    sp->cb_arg = x;
    if (!sp->timeout_ms)
        sp->timeout_ms = 1000;
    CHECK_EQ(ax_submit(s, sp, id), 0);
}

static void wait_done(struct rec *x)
{
    CHECK(WAIT_UNTIL(atomic_load(&x->done) == 1, 5000));
}

int main(void)
{
    ax_sched *s = test_sched(2, 100);
    uint64_t id;

    /* SUCCEEDED, with the id and the caller's trace id passed through. */
    struct rec a = {0};
    ax_spec sp = {.fn = fn_ok, .priority = AX_PRIO_HIGH, .trace_id = "req-7f3a"};
    submit(s, &sp, &a, &id);
    wait_done(&a);
    CHECK_EQ(a.r.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(a.r.code, 0);
    CHECK_EQ(a.r.attempts, 1);
    CHECK_EQ(a.r.id, id);
    CHECK_EQ(a.seen_id, id);
    CHECK_EQ(a.r.priority, AX_PRIO_HIGH);
    CHECK_STR(a.r.trace_id, "req-7f3a");
    CHECK_STR(a.trace, "req-7f3a");
    CHECK_STR(a.r.error, "");

    /* Generated trace ids are non-empty and differ per task; ids are unique. */
    struct rec b = {0}, b2 = {0};
    uint64_t id2, id3;
    sp = (ax_spec){.fn = fn_ok};
    submit(s, &sp, &b, &id2);
    sp = (ax_spec){.fn = fn_ok};
    submit(s, &sp, &b2, &id3);
    wait_done(&b);
    wait_done(&b2);
    CHECK(id2 != id3 && id2 != id);
    CHECK(strlen(b.r.trace_id) > 0);
    CHECK_STR(b.r.trace_id, b.trace);
    CHECK(strcmp(b.r.trace_id, b2.r.trace_id) != 0);
    CHECK_EQ(b.r.priority, AX_PRIO_NORMAL); /* zero-initialised spec */

    /* FAILED with the function's code and the message it set. */
    struct rec c = {0};
    sp = (ax_spec){.fn = fn_fail};
    submit(s, &sp, &c, NULL);
    wait_done(&c);
    CHECK_EQ(c.r.state, AX_STATE_FAILED);
    CHECK_EQ(c.r.code, 42);
    CHECK_STR(c.r.error, "upstream said 503");
    struct rec c2 = {0};
    sp = (ax_spec){.fn = fn_fail_plain};
    submit(s, &sp, &c2, NULL);
    wait_done(&c2);
    CHECK_EQ(c2.r.code, -5);
    CHECK_STR(c2.r.error, "task returned -5");

    /* Delayed submission: waits out its delay, counted as delayed. */
    struct rec d = {0};
    uint64_t t0 = test_now_ms();
    sp = (ax_spec){.fn = fn_ok, .delay_ms = 150};
    submit(s, &sp, &d, NULL);
    uint64_t delayed_now = test_stats(s).delayed;
    if (test_now_ms() - t0 < 150) /* read inside the delay (a busy machine may not) */
        CHECK_EQ(delayed_now, 1);
    wait_done(&d);
    CHECK(d.ran_at - t0 >= 150);
    CHECK_EQ(test_stats(s).delayed, 0);
    CHECK(d.r.wait_ns < 1000000000ull); /* wait counts from the end of the delay */

    /* An absolute deadline that passes while queued: TIMED_OUT, never ran,
     * and its on_done arrives at the deadline, not when dispatch resumes. */
    CHECK_EQ(ax_pause(s), 0);
    struct rec e = {0};
    sp = (ax_spec){.fn = fn_ok, .deadline_ns = ax_now_ns() + 100000000ull};
    submit(s, &sp, &e, NULL);
    wait_done(&e);
    CHECK_EQ(atomic_load(&e.ran), 0);
    CHECK_EQ(e.r.state, AX_STATE_TIMED_OUT);
    CHECK_EQ(e.r.code, AX_ETIMEDOUT);
    CHECK_EQ(e.r.run_ns, 0);
    CHECK_EQ(test_stats(s).queued[AX_PRIO_NORMAL], 0);
    CHECK_EQ(ax_resume(s), 0);

    /* ax_submit works from inside a task, too. */
    struct rec f = {0};
    sp = (ax_spec){.fn = fn_submitter};
    submit(s, &sp, &f, NULL);
    wait_done(&f);
    wait_done(&inner);
    CHECK_EQ(f.r.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(inner.r.state, AX_STATE_SUCCEEDED);

    /* Every terminal state was counted once; nothing is left. */
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 1000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, 9);
    CHECK_EQ(st.succeeded, 6);
    CHECK_EQ(st.failed, 2);
    CHECK_EQ(st.timed_out, 1);
    CHECK_EQ(st.stacks_in_use, 0);
    CHECK_EQ(ax_cancel(s, id), AX_ENOTFOUND); /* finished tasks cannot be cancelled */
    ax_free(s);
    return 0;
}
