/* test_class2_low_starve.c - the quota rounds stop applying to a class's
 * parked jobs: one priority of the class takes every place while the other
 * waits for all of it -- LOW starved behind its class's HIGH, or (worse,
 * depending only on where the round stood) HIGH held behind its class's
 * LOW. DESIGN.md §4: with HIGH and LOW both waiting, rounds of quota_high
 * H then low_guaranteed L.
 *
 * sched.c: when the class gets one place, class_unpark_locked moves the
 * head of EACH priority's park list to the front of its bucket (H1, L1).
 * The pick starts the one whose bucket's turn comes first; in the same
 * dispatch the next pick finds that bucket's list empty (its other jobs
 * are parked) so it "passes its turn" (rr_taken = 0), meets the other
 * priority's unparked head, parks it again (the class is full), and
 * pick_classes_locked's four tries (tries <= AX_PRIO_COUNT) move the round
 * by one bucket net -- back to the same phase as before. The next place
 * goes to the same priority again, and again: the rounds' counters are
 * reset on every dispatch, never exhausted.
 *
 * Here: 1 worker, cap 8 (quotas 4/2/1), class limit 1. A running task
 * holds the class; 8 HIGH then 8 LOW tasks of the class wait (parked);
 * the holder is released. Run twice, the holder HIGH and then NORMAL (only
 * that changes where the round stands). Expected each time: among the
 * first 7 starts at least 3 H and at least 1 L.
 * Got: LLLLLLLLHHHHHHHH (holder HIGH), HHHHHHHHLLLLLLLL (holder NORMAL).
 */
#include "class_common.h"

#define NH 8
#define NL 8
static char order[64];
static atomic_int norder;

static int record(ax_task *t, void *arg)
{
    (void)arg;
    int i = atomic_fetch_add(&norder, 1);
    if (i < (int)sizeof order - 1)
        order[i] = ax_task_priority(t) == AX_PRIO_LOW ? 'L' : 'H';
    return 0;
}

static void run(ax_priority hold_prio, int *h, int *l)
{
    memset(order, 0, sizeof order);
    atomic_store(&norder, 0);
    atomic_store(&rc_done_n, 0);
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    cfg.max_concurrency = 8;
    ax_sched *s = test_sched_cfg(&cfg);
    ax_class_config c = rc_plain("up");
    c.limit_max = 1;
    c.priority = AX_PRIO_HIGH;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    atomic_store(&release, 0);
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id, .on_done = rc_on_done,
                    .priority = hold_prio, .overrides = AX_SPEC_PRIORITY};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
    for (int i = 0; i < NH; i++) {
        ax_spec q = {.fn = record, .class_id = id, .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    for (int i = 0; i < NL; i++) {
        ax_spec q = {.fn = record, .class_id = id, .priority = AX_PRIO_LOW,
                     .overrides = AX_SPEC_PRIORITY, .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    usleep(100 * 1000);
    CHECK_EQ(rc_cstats(s, id).queued, NH + NL);

    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1 + NH + NL, 5000));
    fprintf(stderr, "holder %s: start order after the class's place frees: %s\n",
            hold_prio == AX_PRIO_HIGH ? "HIGH" : "NORMAL", order);
    *h = *l = 0;
    for (int i = 0; i < 7; i++)
        order[i] == 'H' ? (*h)++ : (*l)++;
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 0, 5000));
    CHECK_EQ(test_stats(s).queued[AX_PRIO_HIGH] + test_stats(s).queued[AX_PRIO_LOW], 0);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(void)
{
    int h1, l1, h2, l2;
    run(AX_PRIO_HIGH, &h1, &l1);
    run(AX_PRIO_NORMAL, &h2, &l2);
    CHECK_LE(3, h1); /* HIGH is not held behind its class's LOW */
    CHECK_LE(1, l1);
    CHECK_LE(3, h2);
    CHECK_LE(1, l2); /* LOW is not held behind its class's HIGH */
    return 0;
}
