/* test_class_throttle.c - a class's retry throttle (gRPC's rule, budget.c)
 * end to end through the scheduler, with exact counts.
 *
 * One worker, tasks submitted one at a time (each waits for the last to
 * end), so outcomes and retry decisions come in a known order. The class:
 * max_retry 3, a 1 ms fixed back-off, the window rule made unbinding (ratio
 * 10, 1000/s) so only the throttle decides; tokens 10, 0.1 per success.
 * A decision counts its own failure as pending (class_retry_room):
 *   task 1 fails x4: decisions see 10-1, 9-1, 8-1 > 5: 3 retries; 6 left;
 *   task 2 fails: 6-1 = 5, not above the half: throttled; 5 left; its error
 *     says "retries throttled";
 *   20 successes: 7 tokens;
 *   task 3 fails: 7-1 > 5: one retry (6), then 6-1 = 5: throttled; 5 left;
 *   a HIGH task of the class (protect_high) fails x4: all 3 retries go
 *     (HIGH is exempt), its 4 failures still take 4 tokens: 1 left;
 *   a class with retry_throttle_tokens = 0: every retry goes.
 * Bad configurations are AX_EINVAL naming the field.
 */
#include "class_common.h"

static int fails_left_fn(ax_task *t, void *arg)
{
    (void)t;
    atomic_int *n = arg;
    return atomic_fetch_sub(n, 1) > 0 ? 7 : 0;
}

static atomic_int attempts;
static int count_fail(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&attempts, 1);
    return 7;
}

static int long_fail(ax_task *t, void *arg)
{
    (void)arg;
    char e[120];
    memset(e, 'x', sizeof e - 1);
    e[sizeof e - 1] = 0;
    memcpy(e, "upstream said: ", 15);
    ax_task_set_error(t, "%s", e);
    return 7;
}

/* Submit one task and wait for its on_done: the result. */
static ax_result run_one(ax_sched *s, ax_spec sp)
{
    int before = atomic_load(&rc_done_n);
    sp.on_done = rc_on_done;
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == before + 1, 10000));
    return rc_last[before];
}

static ax_class_config throttled_class(const char *name)
{
    ax_class_config c = rc_plain(name);
    c.max_retry = 3;
    c.retry.mode = AX_BACKOFF_EXPONENTIAL;
    c.retry.base_ms = c.retry.max_ms = 1;
    c.retry.jitter_ms = 0;
    c.retry_budget = true;
    c.retry_budget_ratio = 10;
    c.retry_budget_min_per_s = 1000;
    c.retry_throttle_tokens = 10;
    c.retry_throttle_ratio = 0.1;
    return c;
}

int main(void)
{
    ax_sched *s = test_sched(1, 10);
    ax_class_config cc = throttled_class("thr");
    cc.protect_high = true;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &cc, &id), AX_OK);
    CHECK(rc_cstats(s, id).retry_tokens == 10);

    ax_spec f = {.fn = count_fail, .class_id = id};
    ax_result r = run_one(s, f); /* task 1 */
    CHECK_EQ(r.state, AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&attempts), 4);
    CHECK(strstr(r.error, "throttled") == NULL);
    ax_class_stats st = rc_cstats(s, id);
    CHECK_EQ(st.retries_allowed, 3);
    CHECK_EQ(st.retries_denied, 0);
    CHECK(st.retry_tokens > 5.999 && st.retry_tokens < 6.001);

    r = run_one(s, f); /* task 2 */
    CHECK_EQ(r.state, AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&attempts), 5);
    CHECK(strstr(r.error, "retries throttled") != NULL);
    st = rc_cstats(s, id);
    CHECK_EQ(st.retries_allowed, 3);
    CHECK_EQ(st.retries_denied, 1);
    CHECK(st.retry_budget_left == 0); /* 5 tokens: throttled */

    ax_spec ok = {.fn = rc_noop, .class_id = id};
    for (int i = 0; i < 20; i++)
        CHECK_EQ(run_one(s, ok).state, AX_STATE_SUCCEEDED);
    st = rc_cstats(s, id);
    CHECK(st.retry_tokens > 6.999 && st.retry_tokens < 7.001);
    CHECK(st.retry_budget_left > 0);

    r = run_one(s, f); /* task 3 */
    CHECK_EQ(atomic_load(&attempts), 7);
    CHECK(strstr(r.error, "retries throttled") != NULL);
    st = rc_cstats(s, id);
    CHECK_EQ(st.retries_allowed, 4);
    CHECK_EQ(st.retries_denied, 2);
    CHECK(st.retry_tokens > 4.999 && st.retry_tokens < 5.001);

    ax_spec hi = {.fn = count_fail, .class_id = id, .priority = AX_PRIO_HIGH,
                  .overrides = AX_SPEC_PRIORITY};
    r = run_one(s, hi);
    CHECK_EQ(r.state, AX_STATE_FAILED);
    CHECK_EQ(atomic_load(&attempts), 11);
    CHECK(strstr(r.error, "throttled") == NULL);
    st = rc_cstats(s, id);
    CHECK_EQ(st.retries_allowed, 7);
    CHECK_EQ(st.retries_denied, 2);
    CHECK(st.retry_tokens > 0.999 && st.retry_tokens < 1.001);

    /* A long error of its own: the reason it was not retried still fits
     * ax_result.error, the error giving way. */
    ax_spec lf = {.fn = long_fail, .class_id = id};
    r = run_one(s, lf);
    CHECK_EQ(r.state, AX_STATE_FAILED);
    CHECK(strlen(r.error) < AX_ERROR_MAX);
    const char *tail = "...; not retried: class \"thr\": retries throttled (recent attempts "
                       "mostly failed)";
    CHECK(strlen(r.error) > strlen(tail));
    CHECK_STR(r.error + strlen(r.error) - strlen(tail), tail);
    CHECK(strncmp(r.error, "upstream said: xxxx", 19) == 0);

    /* A task that fails twice then succeeds, in a class without a throttle. */
    ax_class_config nc = throttled_class("nothr");
    nc.retry_throttle_tokens = 0;
    unsigned nid;
    CHECK_EQ(ax_class_register(s, &nc, &nid), AX_OK);
    for (int i = 0; i < 5; i++) {
        atomic_int left = 2;
        ax_spec sp = {.fn = fails_left_fn, .arg = &left, .class_id = nid};
        CHECK_EQ(run_one(s, sp).state, AX_STATE_SUCCEEDED);
    }
    st = rc_cstats(s, nid);
    CHECK_EQ(st.retries_allowed, 10);
    CHECK_EQ(st.retries_denied, 0);

    /* Bad configurations. */
    ax_class_config bad = throttled_class("bad");
    bad.retry_throttle_tokens = -1;
    CHECK_EQ(ax_class_register(s, &bad, &id), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "retry_throttle_tokens") != NULL);
    bad.retry_throttle_tokens = 1001;
    CHECK_EQ(ax_class_register(s, &bad, &id), AX_EINVAL);
    bad.retry_throttle_tokens = 0.0 / 0.0;
    CHECK_EQ(ax_class_register(s, &bad, &id), AX_EINVAL);
    bad.retry_throttle_tokens = 10;
    bad.retry_throttle_ratio = 0;
    CHECK_EQ(ax_class_register(s, &bad, &id), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "retry_throttle_ratio") != NULL);
    bad.retry_throttle_ratio = 1.5;
    CHECK_EQ(ax_class_register(s, &bad, &id), AX_EINVAL);
    bad.retry_throttle_tokens = 0; /* no throttle: its ratio is not looked at */
    CHECK_EQ(ax_class_register(s, &bad, &id), AX_OK);

    ax_free(s);
    return 0;
}
