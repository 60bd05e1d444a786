/* test_r10_walk_gaps.c - the gaps that cancelled jobs leave in a bucket's
 * ring count against PICK_WALK, so a HIGH job right behind a parked class
 * job is not found in HIGH's turn and NORMAL starts first.
 *
 * sched.c first_startable_locked walks positions from b->rh, counting every
 * position (gaps included) towards PICK_WALK (1024). Parking the head job X
 * moves rh past the gaps to A at once, but the walk goes on position by
 * position through the gaps and stops after 1024 of them with no
 * candidate: pick_classes_locked passes HIGH's turn to NORMAL. With the
 * list the buckets were before a46cf05 the walk went from X straight to A.
 *
 * Here: 1 worker, cap 100 (quota_high 50). A class of limit 1 is held by
 * one running task. Paused: X (class, HIGH), 1100 plain HIGH jobs, A
 * (plain HIGH), N (NORMAL) are queued; the 1100 are cancelled (gaps
 * between X and A). Resumed: HIGH's turn has 49 picks left, so A must
 * start before N.
 */
#include "class_common.h"

static char order[8];
static atomic_int norder;

static int record(ax_task *t, void *arg)
{
    (void)t;
    int i = atomic_fetch_add(&norder, 1);
    if (i < (int)sizeof order - 1)
        order[i] = (char)(intptr_t)arg;
    return 0;
}

#define NGAP 1100

int main(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    cfg.max_concurrency = 100;
    ax_sched *s = test_sched_cfg(&cfg);
    ax_class_config c = rc_plain("up");
    c.limit_max = 1;
    c.priority = AX_PRIO_HIGH;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));

    CHECK_EQ(ax_pause(s), AX_OK);
    ax_spec x = {.fn = record, .arg = (void *)(intptr_t)'X', .class_id = id,
                 .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &x, NULL), AX_OK);
    static uint64_t gap[NGAP];
    for (int i = 0; i < NGAP; i++) {
        ax_spec g = {.fn = record, .arg = (void *)(intptr_t)'g', .priority = AX_PRIO_HIGH,
                     .timeout_ms = 10000};
        CHECK_EQ(ax_submit(s, &g, &gap[i]), AX_OK);
    }
    ax_spec a = {.fn = record, .arg = (void *)(intptr_t)'A', .priority = AX_PRIO_HIGH,
                 .timeout_ms = 10000, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);
    ax_spec n = {.fn = record, .arg = (void *)(intptr_t)'N', .priority = AX_PRIO_NORMAL,
                 .timeout_ms = 10000, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &n, NULL), AX_OK);
    for (int i = 0; i < NGAP; i++)
        CHECK_EQ(ax_cancel(s, gap[i]), AX_OK);
    CHECK_EQ(ax_resume(s), AX_OK);

    CHECK(WAIT_UNTIL(atomic_load(&norder) == 2, 5000));
    usleep(20 * 1000);
    CHECK_EQ(atomic_load(&norder), 2); /* X waits for its class */
    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 4, 5000));
    fprintf(stderr, "start order: %s\n", order);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    CHECK_STR(order, "ANX");
    return 0;
}
