/* test_class2_fifo.c - a class's tasks of one priority start out of their
 * submission order.
 *
 * sched.c: class_unpark_locked puts the head of each priority's park list
 * back at the front of its bucket; a job that then finds its class full
 * again at the pick (another priority's unparked head took the place
 * first) is parked again by park_locked -- at the TAIL of its park list,
 * behind the jobs that were queued after it. Each such round rotates the
 * list by one. (The comment above class_unpark_locked: "Those that do not
 * get a place are parked again by the next pick" -- at the wrong end.)
 * The same happens to a job the watchdog hands back (bucket front) that
 * then finds its class full, and sched_expire_parked_locked, which only
 * looks at each list's head ("each park list is in queue order"), then
 * misses an older job past its budget behind a younger one.
 *
 * Here: 1 worker, cap 8, class limit 1. A NORMAL task holds the class;
 * one HIGH task, then LOW tasks L0 L1 L2 of the class wait (parked). The
 * holder is released. Expected: L0 L1 L2 start in that order (FIFO within
 * a priority, DESIGN.md §4 "three FIFO queues").
 */
#include "class_common.h"

static char order[16];
static atomic_int norder;

static int record(ax_task *t, void *arg)
{
    (void)t;
    int i = atomic_fetch_add(&norder, 1);
    if (i < (int)sizeof order - 1)
        order[i] = (char)(intptr_t)arg;
    return 0;
}

int main(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    cfg.max_concurrency = 8;
    ax_sched *s = test_sched_cfg(&cfg);
    ax_class_config c = rc_plain("up");
    c.limit_max = 1;
    c.priority = AX_PRIO_LOW;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id, .on_done = rc_on_done,
                    .priority = AX_PRIO_NORMAL, .overrides = AX_SPEC_PRIORITY};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
    ax_spec hi = {.fn = record, .arg = (void *)(intptr_t)'H', .class_id = id,
                  .priority = AX_PRIO_HIGH, .overrides = AX_SPEC_PRIORITY,
                  .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &hi, NULL), AX_OK);
    for (int i = 0; i < 3; i++) {
        ax_spec q = {.fn = record, .arg = (void *)(intptr_t)('0' + i), .class_id = id,
                     .on_done = rc_on_done};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
        usleep(2000);
    }
    usleep(100 * 1000);
    CHECK_EQ(rc_cstats(s, id).queued, 4);

    atomic_store(&release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 5, 5000));
    fprintf(stderr, "start order (H, then LOW tasks by submission index): %s\n", order);
    char low[4] = {0};
    for (int i = 0, k = 0; order[i]; i++)
        if (order[i] != 'H')
            low[k++] = order[i];
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    CHECK_STR(low, "012");
    return 0;
}
