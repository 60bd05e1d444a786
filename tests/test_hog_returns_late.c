/* test_hog_returns_late.c - a task that runs past its deadline without
 * yielding and then returns ends TIMED_OUT, whether or not the watchdog
 * noticed it first (README "The hog itself, past its own deadline, ends
 * the same way"; DESIGN.md §7).
 *
 * The watchdog judges a worker held only after 10 ms without a switch, so
 * a task that spins 6 ms under a 1 ms timeout returns before it can act:
 * the old code ended every one SUCCEEDED, 5 ms past its deadline. (A new
 * user's trial saw the same with 250 ms hogs under 18-44 ms timeouts, the
 * watchdog late.) Checked, one worker:
 *   A. 12 such hogs: each TIMED_OUT, code AX_ETIMEDOUT, the hog's message,
 *      run_ns at least the spin, on_timeout once each, on_done once each;
 *   B. 6 with max_retry 1 (back-off 1 ms): each attempt timed out, so each
 *      ends TIMED_OUT after 2 attempts, with on_timeout twice;
 *   C. 12 that spin 1 ms under a 10 s timeout, and 12 that fail with their
 *      own code under it: SUCCEEDED and FAILED as before, no on_timeout;
 *   D. a hog that spins past its deadline and returns an error code:
 *      TIMED_OUT too (the deadline decides, not the code).
 * Only states, codes, messages and counts are checked; the spins are
 * wall-clock, so a busy machine lengthens nothing that matters here.
 */
#include "util.h"

#define NHOG 12
#define NRETRY 6
#define NCTRL 12
#define SPIN_MS 6

static void spin_ms(unsigned ms)
{
    uint64_t end = ax_now_ns() + (uint64_t)ms * 1000000u;
    volatile uint64_t n = 0;
    while (ax_now_ns() < end)
        n++;
}

static int hog_ok(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    spin_ms(SPIN_MS);
    return 0;
}

static int hog_err(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    spin_ms(SPIN_MS);
    return 42;
}

static int quick_ok(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    spin_ms(1);
    return 0;
}

static int quick_err(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 42;
}

enum { G_HOG, G_RETRY, G_OK, G_ERR, G_HOG_ERR, G_N };

struct group {
    atomic_int done, timeouts, bad_state, bad_code, bad_msg, bad_attempts, bad_run;
    int want_state, want_code, want_attempts;
    const char *want_msg; /* a substring, or NULL */
};
static struct group g[G_N];

static void on_done(const ax_result *r, void *arg)
{
    struct group *gr = arg;
    if ((int)r->state != gr->want_state) {
        fprintf(stderr, "group %d: state %d (%s), want %d\n", (int)(gr - g), (int)r->state,
                r->error, gr->want_state);
        atomic_fetch_add(&gr->bad_state, 1);
    }
    if (r->code != gr->want_code)
        atomic_fetch_add(&gr->bad_code, 1);
    if (gr->want_msg && !strstr(r->error, gr->want_msg)) {
        fprintf(stderr, "group %d: message \"%s\"\n", (int)(gr - g), r->error);
        atomic_fetch_add(&gr->bad_msg, 1);
    }
    if ((int)r->attempts != gr->want_attempts)
        atomic_fetch_add(&gr->bad_attempts, 1);
    if (gr == &g[G_HOG] && r->run_ns < (uint64_t)SPIN_MS * 1000000u)
        atomic_fetch_add(&gr->bad_run, 1);
    atomic_fetch_add(&gr->done, 1);
}

static void on_timeout(const ax_result *r, void *arg)
{
    struct group *gr = arg;
    if (r->state != AX_STATE_TIMED_OUT)
        atomic_fetch_add(&gr->bad_state, 1);
    atomic_fetch_add(&gr->timeouts, 1);
}

static void submit(ax_sched *s, int group, ax_fn fn, unsigned timeout_ms, unsigned max_retry,
                   const ax_retry_policy *rp)
{
    ax_spec sp = {.fn = fn,
                  .timeout_ms = timeout_ms,
                  .max_retry = max_retry,
                  .retry = rp,
                  .on_done = on_done,
                  .on_timeout = on_timeout,
                  .cb_arg = &g[group]};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
}

int main(void)
{
    const char *late = "(it ran on without yielding past its deadline)";
    g[G_HOG] = (struct group){.want_state = AX_STATE_TIMED_OUT, .want_code = AX_ETIMEDOUT,
                              .want_attempts = 1, .want_msg = late};
    g[G_RETRY] = (struct group){.want_state = AX_STATE_TIMED_OUT, .want_code = AX_ETIMEDOUT,
                                .want_attempts = 2, .want_msg = late};
    g[G_OK] = (struct group){.want_state = AX_STATE_SUCCEEDED, .want_code = 0,
                             .want_attempts = 1};
    g[G_ERR] = (struct group){.want_state = AX_STATE_FAILED, .want_code = 42,
                              .want_attempts = 1, .want_msg = "task returned 42"};
    g[G_HOG_ERR] = (struct group){.want_state = AX_STATE_TIMED_OUT, .want_code = AX_ETIMEDOUT,
                                  .want_attempts = 1, .want_msg = late};

    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    ax_sched *s = test_sched_cfg(&c);
    ax_retry_policy rp = {.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 1, .max_ms = 1,
                          .jitter_ms = 0};
    for (int i = 0; i < NHOG; i++)
        submit(s, G_HOG, hog_ok, 1, 0, NULL);
    for (int i = 0; i < NRETRY; i++)
        submit(s, G_RETRY, hog_ok, 1, 1, &rp);
    for (int i = 0; i < NCTRL; i++) {
        submit(s, G_OK, quick_ok, 10000, 0, NULL);
        submit(s, G_ERR, quick_err, 10000, 0, NULL);
    }
    submit(s, G_HOG_ERR, hog_err, 1, 0, NULL);

    const int want_done[G_N] = {NHOG, NRETRY, NCTRL, NCTRL, 1};
    const int want_timeouts[G_N] = {NHOG, 2 * NRETRY, 0, 0, 1};
    /* on_done first (each task's, exactly once), and what it saw; then the
     * on_timeouts, which the callback pool runs in its own time. */
    for (int k = 0; k < G_N; k++)
        CHECK(WAIT_UNTIL(atomic_load(&g[k].done) == want_done[k], 30000 * TEST_SLOW));
    for (int k = 0; k < G_N; k++) {
        CHECK_EQ(atomic_load(&g[k].bad_state), 0);
        CHECK_EQ(atomic_load(&g[k].bad_code), 0);
        CHECK_EQ(atomic_load(&g[k].bad_msg), 0);
        CHECK_EQ(atomic_load(&g[k].bad_attempts), 0);
        CHECK_EQ(atomic_load(&g[k].bad_run), 0);
    }
    for (int k = 0; k < G_N; k++)
        CHECK(WAIT_UNTIL(atomic_load(&g[k].timeouts) >= want_timeouts[k], 30000 * TEST_SLOW));
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    for (int k = 0; k < G_N; k++) {
        CHECK_EQ(atomic_load(&g[k].done), want_done[k]); /* exactly once each */
        CHECK_EQ(atomic_load(&g[k].timeouts), want_timeouts[k]);
        CHECK_EQ(atomic_load(&g[k].bad_state), 0);
    }
    return 0;
}
