/* test_r10_shed_wrap.c - the shed check's unfolded pre-test
 * (`s->load >= s->shed_at && load_locked(s) >= s->shed_at`, submit.c since
 * a46cf05) misses the bound once `load` has wrapped: NORMAL is admitted
 * above shed_ratio.
 *
 * `load` (unsigned) is incremented by every admission and decremented only
 * when a lock holder folds `unloaded` (load_locked). Since a46cf05 the only
 * folds are a NORMAL/LOW submission that finds the unfolded `load` at the
 * bound, and shutdown: a HIGH submission never looks. So while only HIGH
 * tasks come and go, `load` and `unloaded` both grow by one per task; after
 * 2^32 of them both have wrapped, and the unfolded `load` (true load minus
 * whatever `unloaded` wrapped past) reads below shed_at while the true load
 * is at or above it: the pre-test says "not at the bound", the fold that
 * would show the true figure is skipped, and the task is admitted. Before
 * a46cf05 every NORMAL/LOW submission folded first.
 *
 * The 2^32 - 60 HIGH tasks that ended without a fold are put in place
 * directly (the two counters, as those tasks leave them); then, paused,
 * 120 HIGH tasks are queued: the load is 120 = shed_at, so a NORMAL
 * submission must be shed.
 */
#include "util.h"
#include "internal.h"

static int noop(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

int main(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    cfg.max_concurrency = 4;
    cfg.capacity[AX_PRIO_HIGH] = 1000;
    cfg.capacity[AX_PRIO_NORMAL] = 100;
    cfg.capacity[AX_PRIO_LOW] = 100;
    cfg.shed_ratio = 0.1; /* shed_at = 120 */
    ax_sched *s = test_sched_cfg(&cfg);
    CHECK_EQ(ax_pause(s), AX_OK);

    /* As 2^32 - 60 HIGH tasks admitted and ended leave them: every one
     * added to `load` at admission and to `unloaded` at its end, with no
     * NORMAL/LOW submission between them to fold the two. */
    pthread_mutex_lock(&s->lock);
    CHECK_EQ(s->shed_at, 120);
    CHECK_EQ(load_locked(s), 0);
    unsigned k = 0u - 60u;
    s->load += k;
    atomic_fetch_add(&s->unloaded, k);
    pthread_mutex_unlock(&s->lock);

    for (int i = 0; i < 120; i++) {
        ax_spec h = {.fn = noop, .priority = AX_PRIO_HIGH, .timeout_ms = 1000};
        CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
    }
    ax_stats st = test_stats(s);
    CHECK_EQ(st.queued[AX_PRIO_HIGH], 120);

    ax_spec n = {.fn = noop, .priority = AX_PRIO_NORMAL, .timeout_ms = 1000};
    int rc = ax_submit(s, &n, NULL);
    fprintf(stderr, "NORMAL at load 120 (shed_at 120): %s\n", ax_strerror(rc));
    CHECK_EQ(rc, AX_ESHED);
    CHECK_EQ(ax_resume(s), AX_OK);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
