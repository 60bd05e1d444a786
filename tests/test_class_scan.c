/* test_class_scan.c - head-of-line blocking across classes.
 *
 * bucket_first_startable_locked (sched.c) looks at most CLASS_SCAN (16)
 * blocked jobs past a bucket's head; then the bucket "passes its turn", and
 * when every bucket does, dispatch sets hint_class_blocked and no worker
 * looks again until that class frees a place. A task of no class (or of
 * another class with room) queued behind 16 tasks of a class at its limit
 * therefore waits for the blocked class's running task, however long that
 * runs -- with the global cap far from full. In the seed's incident (one
 * degraded upstream, thousands of its tasks queued in HIGH) every other
 * HIGH task would wait for the slow upstream.
 *
 * Here: class A limit 1, its one running task holds 4 s; 16 more A tasks
 * queued in NORMAL; then one NORMAL task of no class. Cap 8, 6 places free.
 * Expected: the classless task runs at once (well within 2 s).
 */
#include "class_common.h"

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    ax_class_config c = rc_plain("slowup");
    c.limit_max = 1; /* adaptive off: a fixed limit of 1 */
    c.priority = AX_PRIO_NORMAL;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    ax_spec hold = {.fn = rc_block, .arg = &release, .class_id = id};
    CHECK_EQ(ax_submit(s, &hold, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_running) == 1, 5000));
    for (int i = 0; i < 16; i++) {
        ax_spec q = {.fn = rc_noop, .class_id = id};
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    }
    CHECK(WAIT_UNTIL(rc_cstats(s, id).queued == 16, 5000));

    ax_spec x = {.fn = rc_noop, .timeout_ms = 1000, .priority = AX_PRIO_NORMAL,
                 .on_done = rc_on_done};
    uint64_t t0 = test_now_ms();
    CHECK_EQ(ax_submit(s, &x, NULL), AX_OK);
    bool ran = WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 2000);
    fprintf(stderr, "classless task behind 16 blocked: done=%d after %llu ms (running=%llu)\n",
            atomic_load(&rc_done_n), (unsigned long long)(test_now_ms() - t0),
            (unsigned long long)test_stats(s).running);
    atomic_store(&release, 1);
    CHECK(ran);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
