/* test_join.c - fan-out / fan-in with ax_spawn and ax_join (DESIGN.md §7).
 *
 *  1. A parent spawns 50 children, joins each, and sums the results they
 *     leave in their args; every join reports SUCCEEDED for that child's id.
 *  2. A join whose timeout ends first returns AX_ETIMEDOUT near the timeout,
 *     its message saying so (not the task's deadline: both were one text);
 *     the child is still an unjoined child (a second join gets its result),
 *     and a child its parent gave up on completes later with its on_done.
 *     A join with timeout < 0 is bounded by the parent's deadline, and so
 *     is the child: it ends TIMED_OUT at its parent's deadline (a child's
 *     deadline is at most its parent's, DESIGN.md §11).
 *  3. AX_ENOTFOUND for an unknown id, a second join of the same child, a task
 *     that is not a child (ax_submit) and the parent's own id.
 *  4. A child that ended before the join is still joinable, and the join
 *     reports its state and code (FAILED / 7 too: joining does not wait for
 *     success).
 *  5. Children never joined are released, not cancelled: they all succeed,
 *     the stats settle, and ax_free is clean under ASan.
 *  6. The join carries the child's error text: a child failing with
 *     ax_task_set_error ("upstream said 503", code 1), one ending in ax_panic
 *     ("boom 7", AX_EPANIC) and one timing out (AX_ETIMEDOUT): each join
 *     reports state, code and error exactly, and the error equals the one
 *     the child's on_done received (non-empty for all three).
 */
#include "util.h"

#define NCHILD 50

static uint64_t mono_ms(void)
{
    return ax_now_ns() / 1000000u;
}

struct child_arg {
    int in;
    atomic_int out;
    uint64_t sleep_ms;
    int sleep_rc; /* what its ax_sleep must return */
    int ret;
    atomic_int done_calls;
    atomic_int state;
    _Atomic uint64_t done_ms;
};

static int child_fn(ax_task *t, void *arg)
{
    struct child_arg *c = arg;
    if (c->sleep_ms) CHECK_EQ(ax_sleep(t, c->sleep_ms), c->sleep_rc);
    atomic_store(&c->out, c->in * c->in);
    return c->ret;
}

static void child_done(const ax_result *r, void *arg)
{
    struct child_arg *c = arg;
    atomic_store(&c->state, (int)r->state);
    atomic_store(&c->done_ms, mono_ms());
    atomic_fetch_add(&c->done_calls, 1);
}

static int spawn(ax_task *t, struct child_arg *c, uint64_t *id)
{
    ax_spec sp = {.fn = child_fn, .arg = c, .timeout_ms = 5000, .on_done = child_done, .cb_arg = c};
    return ax_spawn(t, &sp, id);
}

struct parent_out {
    atomic_int done_calls;
    atomic_int state;
    _Atomic uint64_t done_ms;
};

static void parent_done(const ax_result *r, void *arg)
{
    struct parent_out *p = arg;
    atomic_store(&p->state, (int)r->state);
    atomic_store(&p->done_ms, mono_ms());
    atomic_fetch_add(&p->done_calls, 1);
}

static void submit_parent(ax_sched *s, ax_fn fn, uint64_t timeout_ms, struct parent_out *p)
{
    ax_spec sp = {.fn = fn, .timeout_ms = timeout_ms, .on_done = parent_done, .cb_arg = p};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
}

/* ---- 1. fan-out / fan-in ------------------------------------------------ */

static struct child_arg fan[NCHILD];
static atomic_long fan_sum = -1;

static int fan_parent(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t ids[NCHILD];
    for (int i = 0; i < NCHILD; i++) {
        fan[i].in = i + 1;
        fan[i].sleep_ms = (uint64_t)(i % 7); /* some end before their join, some after */
        CHECK_EQ(spawn(t, &fan[i], &ids[i]), 0);
    }
    long sum = 0;
    for (int i = 0; i < NCHILD; i++) {
        ax_result r;
        memset(&r, 0xff, sizeof r);
        CHECK_EQ(ax_join(t, ids[i], -1, &r), 0);
        CHECK_EQ(r.id, ids[i]);
        CHECK_EQ(r.state, AX_STATE_SUCCEEDED);
        CHECK_EQ(r.code, 0);
        CHECK_EQ(r.attempts, 1);
        sum += atomic_load(&fan[i].out);
    }
    atomic_store(&fan_sum, sum);
    return 0;
}

static void test_fan(ax_sched *s)
{
    struct parent_out p = {0};
    submit_parent(s, fan_parent, 10000, &p);
    CHECK(WAIT_UNTIL(atomic_load(&p.done_calls) == 1, 5000));
    CHECK_EQ(atomic_load(&p.state), AX_STATE_SUCCEEDED);
    long want = 0;
    for (int i = 1; i <= NCHILD; i++)
        want += (long)i * i;
    CHECK_EQ(atomic_load(&fan_sum), want);
    for (int i = 0; i < NCHILD; i++) {
        CHECK_EQ(atomic_load(&fan[i].done_calls), 1);
        CHECK_EQ(atomic_load(&fan[i].state), AX_STATE_SUCCEEDED);
    }
}

/* ---- 2. join timeouts ---------------------------------------------------- */

static struct child_arg slow1 = {.in = 3, .sleep_ms = 400};
static struct child_arg slow2 = {.in = 4, .sleep_ms = 300};
static struct child_arg slow3 = {.in = 5, .sleep_ms = 1000, .sleep_rc = AX_ETIMEDOUT};
static atomic_int rejoin_rc = 1, rejoin_state = -1, rejoin_out = -1, gaveup_rc = 1;
static atomic_int timeout_rc = 1, deadline_rc = 1;
static char timeout_detail[AX_ERROR_MAX], deadline_detail[AX_ERROR_MAX];
static _Atomic uint64_t timeout_ms_taken, deadline_ms_taken;

static int rejoin_parent(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t id;
    CHECK_EQ(spawn(t, &slow1, &id), 0);
    uint64_t t0 = mono_ms();
    int rc = ax_join(t, id, 50, NULL);
    snprintf(timeout_detail, sizeof timeout_detail, "%s", ax_error_detail());
    atomic_store(&timeout_rc, rc);
    atomic_store(&timeout_ms_taken, mono_ms() - t0);
    CHECK_EQ(ax_cancelled(t), 0); /* the join timed out, not the parent */
    ax_result r;
    atomic_store(&rejoin_rc, ax_join(t, id, -1, &r));
    atomic_store(&rejoin_state, (int)r.state);
    atomic_store(&rejoin_out, atomic_load(&slow1.out));
    return 0;
}

static int gaveup_parent(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t id;
    CHECK_EQ(spawn(t, &slow2, &id), 0);
    atomic_store(&gaveup_rc, ax_join(t, id, 50, NULL));
    return 0; /* the child is released and goes on */
}

static int deadline_parent(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t id;
    CHECK_EQ(spawn(t, &slow3, &id), 0);
    uint64_t t0 = mono_ms();
    int rc = ax_join(t, id, -1, NULL); /* parent timeout: 150 ms */
    snprintf(deadline_detail, sizeof deadline_detail, "%s", ax_error_detail());
    atomic_store(&deadline_rc, rc);
    atomic_store(&deadline_ms_taken, mono_ms() - t0);
    return 0;
}

static void test_timeouts(ax_sched *s)
{
    struct parent_out p1 = {0}, p2 = {0}, p3 = {0};
    submit_parent(s, rejoin_parent, 5000, &p1);
    submit_parent(s, gaveup_parent, 5000, &p2);
    submit_parent(s, deadline_parent, 150, &p3);

    CHECK(WAIT_UNTIL(atomic_load(&p1.done_calls) == 1, 3000));
    CHECK_EQ(atomic_load(&timeout_rc), AX_ETIMEDOUT);
    /* Which of the two timed out, in the message (the code is the same). */
    CHECK(strstr(timeout_detail, "ax_join: its bound of 50 ms passed before task ") != NULL);
    CHECK(atomic_load(&timeout_ms_taken) + 5 >= 50);
    CHECK_LE(atomic_load(&timeout_ms_taken), 350); /* the child sleeps 400 ms */
    CHECK_EQ(atomic_load(&rejoin_rc), 0);
    CHECK_EQ(atomic_load(&rejoin_state), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&rejoin_out), 9);
    CHECK_EQ(atomic_load(&p1.state), AX_STATE_SUCCEEDED);

    /* The parent that gave up ended first; its child completes later. */
    CHECK(WAIT_UNTIL(atomic_load(&slow2.done_calls) == 1, 3000));
    CHECK_EQ(atomic_load(&gaveup_rc), AX_ETIMEDOUT);
    CHECK_EQ(atomic_load(&p2.done_calls), 1);
    CHECK_EQ(atomic_load(&p2.state), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&slow2.state), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&slow2.out), 16);
    CHECK(atomic_load(&slow2.done_ms) >= atomic_load(&p2.done_ms));

    /* Join bounded by the parent's own deadline. */
    CHECK(WAIT_UNTIL(atomic_load(&p3.done_calls) == 1, 3000));
    CHECK_EQ(atomic_load(&p3.state), AX_STATE_TIMED_OUT);
    CHECK(WAIT_UNTIL(atomic_load(&deadline_ms_taken) != 0, 1000));
    CHECK_EQ(atomic_load(&deadline_rc), AX_ETIMEDOUT);
    if (!strstr(deadline_detail, "ax_join: the task's deadline passed while it waited"))
        fprintf(stderr, "the join's detail: %s\n", deadline_detail);
    CHECK(strstr(deadline_detail, "ax_join: the task's deadline passed while it waited") != NULL);
    CHECK(atomic_load(&deadline_ms_taken) + 10 >= 150);
    CHECK_LE(atomic_load(&deadline_ms_taken), 900); /* the child sleeps 1 s */
    /* The child inherited that deadline: it timed out too, long before
     * its 1 s sleep would have ended. */
    CHECK(WAIT_UNTIL(atomic_load(&slow3.done_calls) == 1, 3000));
    CHECK_EQ(atomic_load(&slow3.state), AX_STATE_TIMED_OUT);
}

/* ---- 3. AX_ENOTFOUND ---------------------------------------------------- */

static struct child_arg nf_child = {.in = 6};
static atomic_int nf_unknown = 1, nf_first = 1, nf_second = 1, nf_other = 1, nf_self = 1;
static atomic_int nf_zero = 1;

static int other_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static int notfound_parent(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t id, other;
    atomic_store(&nf_unknown, ax_join(t, 0x123456789abcull, 10, NULL));
    atomic_store(&nf_zero, ax_join(t, 0, 10, NULL));
    CHECK_EQ(spawn(t, &nf_child, &id), 0);
    atomic_store(&nf_first, ax_join(t, id, -1, NULL));
    atomic_store(&nf_second, ax_join(t, id, 10, NULL));
    ax_spec sp = {.fn = other_fn, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(ax_task_sched(t), &sp, &other), 0);
    atomic_store(&nf_other, ax_join(t, other, 10, NULL));
    atomic_store(&nf_self, ax_join(t, ax_task_id(t), 10, NULL));
    return 0;
}

static void test_notfound(ax_sched *s)
{
    struct parent_out p = {0};
    submit_parent(s, notfound_parent, 5000, &p);
    CHECK(WAIT_UNTIL(atomic_load(&p.done_calls) == 1, 3000));
    CHECK_EQ(atomic_load(&p.state), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&nf_unknown), AX_ENOTFOUND);
    CHECK_EQ(atomic_load(&nf_zero), AX_ENOTFOUND);
    CHECK_EQ(atomic_load(&nf_first), 0);
    CHECK_EQ(atomic_load(&nf_second), AX_ENOTFOUND);
    CHECK_EQ(atomic_load(&nf_other), AX_ENOTFOUND);
    CHECK_EQ(atomic_load(&nf_self), AX_ENOTFOUND);
}

/* ---- 4. a child that ended before the join ------------------------------- */

static struct child_arg early_ok = {.in = 7};
static struct child_arg early_bad = {.in = 8, .ret = 7};
static atomic_int early_rc1 = 1, early_rc2 = 1, early_st1 = -1, early_st2 = -1;
static atomic_int early_code1 = -1, early_code2 = -1, early_both_done = -1;

static int early_parent(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t a, b;
    CHECK_EQ(spawn(t, &early_ok, &a), 0);
    CHECK_EQ(spawn(t, &early_bad, &b), 0);
    for (int i = 0; i < 1000; i++) { /* until both children's on_done ran */
        if (atomic_load(&early_ok.done_calls) && atomic_load(&early_bad.done_calls)) break;
        CHECK_EQ(ax_sleep(t, 2), 0);
    }
    atomic_store(&early_both_done,
                 atomic_load(&early_ok.done_calls) && atomic_load(&early_bad.done_calls));
    ax_result r;
    atomic_store(&early_rc1, ax_join(t, a, 0, &r));
    atomic_store(&early_st1, (int)r.state);
    atomic_store(&early_code1, r.code);
    atomic_store(&early_rc2, ax_join(t, b, 0, &r));
    atomic_store(&early_st2, (int)r.state);
    atomic_store(&early_code2, r.code);
    return 0;
}

static void test_early(ax_sched *s)
{
    struct parent_out p = {0};
    submit_parent(s, early_parent, 5000, &p);
    CHECK(WAIT_UNTIL(atomic_load(&p.done_calls) == 1, 4000));
    CHECK_EQ(atomic_load(&early_both_done), 1);
    CHECK_EQ(atomic_load(&early_rc1), 0);
    CHECK_EQ(atomic_load(&early_st1), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&early_code1), 0);
    CHECK_EQ(atomic_load(&early_rc2), 0);
    CHECK_EQ(atomic_load(&early_st2), AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&early_code2), 7);
}

/* ---- 5. children never joined ------------------------------------------- */

#define NORPHAN 100
static struct child_arg unjoined[NORPHAN];

static int careless_parent(ax_task *t, void *arg)
{
    (void)arg;
    for (int i = 0; i < NORPHAN; i++) {
        unjoined[i].in = i;
        unjoined[i].sleep_ms = 50;
        CHECK_EQ(spawn(t, &unjoined[i], NULL), 0);
    }
    return 0;
}

static void test_unjoined(ax_sched *s)
{
    struct parent_out p = {0};
    submit_parent(s, careless_parent, 5000, &p);
    CHECK(WAIT_UNTIL(atomic_load(&p.done_calls) == 1, 3000));
    for (int i = 0; i < NORPHAN; i++) {
        CHECK(WAIT_UNTIL(atomic_load(&unjoined[i].done_calls) == 1, 3000));
        CHECK_EQ(atomic_load(&unjoined[i].state), AX_STATE_SUCCEEDED);
        CHECK_EQ(atomic_load(&unjoined[i].out), i * i);
    }
}

/* ---- 6. the child's error text ------------------------------------------ */

struct err_child {
    int kind; /* 0 set_error + return 1, 1 ax_panic, 2 time out */
    atomic_int done_calls;
    atomic_int state, code;
    char error[AX_ERROR_MAX]; /* from on_done, written before done_calls */
};

static struct err_child err_kids[3] = {{.kind = 0}, {.kind = 1}, {.kind = 2}};
static ax_result err_joined[3];
static atomic_int err_join_rc[3] = {1, 1, 1};
static uint64_t err_ids[3];

static int err_child_fn(ax_task *t, void *arg)
{
    struct err_child *c = arg;
    switch (c->kind) {
    case 0:
        ax_task_set_error(t, "upstream said %d", 503);
        return 1;
    case 1:
        ax_panic(t, "boom %d", 7);
        return 0; /* not reached */
    default:
        ax_sleep(t, 10000); /* ends with the 100 ms timeout */
        return 0;
    }
}

static void err_child_done(const ax_result *r, void *arg)
{
    struct err_child *c = arg;
    atomic_store(&c->state, (int)r->state);
    atomic_store(&c->code, r->code);
    memcpy(c->error, r->error, sizeof c->error);
    atomic_fetch_add(&c->done_calls, 1);
}

static int err_parent(ax_task *t, void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++) {
        ax_spec sp = {.fn = err_child_fn,
                      .arg = &err_kids[i],
                      .timeout_ms = err_kids[i].kind == 2 ? 100 : 5000,
                      .on_done = err_child_done,
                      .cb_arg = &err_kids[i]};
        CHECK_EQ(ax_spawn(t, &sp, &err_ids[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        ax_result r;
        memset(&r, 0xff, sizeof r);
        atomic_store(&err_join_rc[i], ax_join(t, err_ids[i], -1, &r));
        err_joined[i] = r;
    }
    return 0;
}

static void test_errors(ax_sched *s)
{
    struct parent_out p = {0};
    submit_parent(s, err_parent, 5000, &p);
    CHECK(WAIT_UNTIL(atomic_load(&p.done_calls) == 1, 4000));
    CHECK_EQ(atomic_load(&p.state), AX_STATE_SUCCEEDED);
    for (int i = 0; i < 3; i++) {
        CHECK(WAIT_UNTIL(atomic_load(&err_kids[i].done_calls) == 1, 3000));
        CHECK_EQ(atomic_load(&err_join_rc[i]), 0);
        CHECK_EQ(err_joined[i].id, err_ids[i]);
        CHECK_EQ(err_joined[i].attempts, 1);
    }
    const ax_result *r = err_joined;
    CHECK_EQ(r[0].state, AX_STATE_FAILED);
    CHECK_EQ(r[0].code, 1);
    CHECK_STR(r[0].error, "upstream said 503");
    CHECK_EQ(r[1].state, AX_STATE_FAILED);
    CHECK_EQ(r[1].code, AX_EPANIC);
    CHECK_STR(r[1].error, "boom 7");
    CHECK_EQ(r[2].state, AX_STATE_TIMED_OUT);
    CHECK_EQ(r[2].code, AX_ETIMEDOUT);
    /* The join and the child's on_done report the same outcome. */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(atomic_load(&err_kids[i].state), r[i].state);
        CHECK_EQ(atomic_load(&err_kids[i].code), r[i].code);
        CHECK(err_kids[i].error[0] != 0);
        CHECK_STR(r[i].error, err_kids[i].error);
    }
}

int main(void)
{
    ax_sched *s = test_sched(2, 100);
    test_fan(s);
    test_timeouts(s);
    test_notfound(s);
    test_early(s);
    test_unjoined(s);
    test_errors(s);

    /* Everything settles. Tasks: fan-out 1 + 50, join timeouts 3 + 3,
     * not-found 1 + 1 child + 1 submitted, early 1 + 2, unjoined 1 + 100,
     * errors 1 + 3. */
    const uint64_t total =
        (1 + NCHILD) + (3 + 3) + (1 + 1 + 1) + (1 + 2) + (1 + NORPHAN) + (1 + 3);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 2000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, total);
    CHECK_EQ(st.succeeded + st.failed + st.timed_out + st.cancelled, total);
    CHECK_EQ(st.failed, 3);    /* early_bad, err_kids[0] and [1] */
    CHECK_EQ(st.timed_out, 3); /* deadline_parent and its child slow3, err_kids[2] */
    CHECK_EQ(st.cancelled, 0);
    CHECK_EQ(st.queued[0] + st.queued[1] + st.queued[2], 0);
    CHECK_EQ(st.delayed, 0);
    CHECK_EQ(st.running, 0);
    CHECK(WAIT_UNTIL(test_stats(s).stacks_in_use == 0, 2000));
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
