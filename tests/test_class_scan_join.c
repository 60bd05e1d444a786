/* test_class_scan_join.c - CLASS_SCAN head-of-line blocking turns
 * fan-out / fan-in into a deadlock that only the parent's timeout breaks.
 *
 * A task of class A (limit 1) spawns a child of no class and joins it. 16
 * more tasks of A are queued in the same bucket (NORMAL). The child goes
 * behind them; bucket_first_startable_locked gives up after 16 blocked jobs
 * and dispatch sets hint_class_blocked; A's place frees only when the
 * parent ends, which waits for the child. The parent times out (5 s here; 30 s
 * in the seed's incident) with 6 of 8 places free.
 *
 * Expected: the child runs at once; the parent succeeds well within 2 s.
 */
#include "class_common.h"

static atomic_int spawned;

static int child(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static atomic_int go;
static int parent(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&go)) {
        int rc = ax_sleep(t, 1);
        if (rc)
            return rc;
    }
    ax_spec c = {.fn = child, .timeout_ms = 1000, .priority = AX_PRIO_NORMAL};
    uint64_t cid;
    int rc = ax_spawn(t, &c, &cid);
    if (rc)
        return rc;
    atomic_store(&spawned, 1);
    ax_result r;
    return ax_join(t, cid, -1, &r);
}

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("fan");
    c.limit_max = 1;
    c.timeout_ms = 5000;
    c.priority = AX_PRIO_NORMAL;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    ax_spec p = {.fn = parent, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &p, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 1, 5000));
    for (int i = 0; i < 16; i++) {
        ax_spec q = {.fn = rc_noop, .class_id = id};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    CHECK(WAIT_UNTIL(rc_cstats(s, id).queued == 16, 5000));
    uint64_t t0 = test_now_ms();
    atomic_store(&go, 1);
    CHECK(WAIT_UNTIL(atomic_load(&spawned) == 1, 5000));
    bool ok = WAIT_UNTIL(atomic_load(&rc_done_n) >= 1, 8000);
    fprintf(stderr, "parent ended after %llu ms: %s code=%d \"%s\"\n",
            (unsigned long long)(test_now_ms() - t0),
            ok ? ax_state_name(rc_last[0].state) : "(not yet)", ok ? rc_last[0].code : 0,
            ok ? rc_last[0].error : "");
    CHECK(ok);
    CHECK_EQ(rc_last[0].state, AX_STATE_SUCCEEDED);
    CHECK_LE(test_now_ms() - t0, 2000);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
