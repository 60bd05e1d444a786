/* Shutdown (DESIGN.md §10): 100 000 queued tasks and a few running ones;
 * every admitted task's on_done runs exactly once, nothing is lost. */
#include "util.h"

#include <stdlib.h>

#define QUEUED 100000
#define RUNNING 50
#define DELAYED 100

static atomic_uchar *seen; /* on_done calls per task index */
static atomic_int states[8];
static atomic_int started;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&started, 1);
    int rc = ax_sleep(t, 60000);
    CHECK_EQ(rc, AX_ECANCELED);
    return rc;
}

static int quick(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    size_t i = (size_t)(uintptr_t)arg;
    atomic_fetch_add(&seen[i], 1);
    atomic_fetch_add(&states[r->state], 1);
}

int main(void)
{
    seen = calloc(QUEUED + RUNNING + DELAYED, 1);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = RUNNING;
    c.capacity[AX_PRIO_NORMAL] = QUEUED;
    c.capacity[AX_PRIO_LOW] = DELAYED;
    c.shed_ratio = 1.0;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), 0);
    size_t k = 0;
    for (int i = 0; i < RUNNING; i++, k++) {
        ax_spec sp = {.fn = sleeper, .priority = AX_PRIO_HIGH, .timeout_ms = 120000,
                      .on_done = on_done, .cb_arg = (void *)(uintptr_t)k};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&started) == RUNNING, 5000));
    for (int i = 0; i < QUEUED; i++, k++) {
        ax_spec sp = {.fn = quick, .timeout_ms = 1000, .on_done = on_done,
                      .cb_arg = (void *)(uintptr_t)k};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    for (int i = 0; i < DELAYED; i++, k++) {
        ax_spec sp = {.fn = quick, .priority = AX_PRIO_LOW, .timeout_ms = 1000,
                      .delay_ms = 30000, .on_done = on_done, .cb_arg = (void *)(uintptr_t)k};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    ax_stats st = test_stats(s);
    CHECK_EQ(st.running, RUNNING);
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], QUEUED);
    CHECK_EQ(st.delayed, DELAYED);

    /* The running sleepers ignore nothing: cancelled at the deadline they
     * return at once, so shutdown completes. */
    uint64_t t0 = test_now_ms();
    CHECK_EQ(ax_shutdown(s, 200), 0);
    uint64_t took = test_now_ms() - t0;
    CHECK(took >= 200);
    for (size_t i = 0; i < k; i++)
        CHECK_EQ(atomic_load(&seen[i]), 1);
    CHECK_EQ(atomic_load(&states[AX_STATE_CANCELLED]), QUEUED + RUNNING + DELAYED);
    st = test_stats(s);
    CHECK_EQ(st.cancelled, QUEUED + RUNNING + DELAYED);
    CHECK_EQ(st.running, 0);
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], 0);
    CHECK_EQ(st.delayed, 0);
    CHECK_EQ(st.submitted, st.succeeded + st.failed + st.timed_out + st.cancelled);
    ax_spec sp = {.fn = quick, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_ESHUTDOWN);
    CHECK_EQ(ax_shutdown(s, 0), 0); /* idempotent */
    ax_free(s);
    for (size_t i = 0; i < k; i++)
        CHECK_EQ(atomic_load(&seen[i]), 1);
    free(seen);

    /* Running tasks that finish before the deadline are not cancelled. */
    s = test_sched(2, 10);
    for (int i = 0; i < 5; i++) {
        ax_spec q = {.fn = quick, .timeout_ms = 1000};
        CHECK_EQ(ax_submit(s, &q, NULL), 0);
    }
    CHECK_EQ(ax_shutdown(s, 2000), 0);
    st = test_stats(s);
    CHECK_EQ(st.succeeded + st.cancelled, 5);
    ax_free(s);
    return 0;
}
