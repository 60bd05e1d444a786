/* test_class_cap.c - a class with limit_max 0 ("= max_concurrency",
 * ax.h) is limited by the max_concurrency given to ax_new, forever:
 * class.c:112/157 read s->cfg.max_concurrency (never updated;
 * ax_set_max_concurrency changes s->cap) into c->limit (fixed) or the
 * limiter's max (adaptive), once. Raising the cap at run time (DESIGN.md
 * §1, §10; the seed's 200 -> 600) does nothing for class tasks -- even for
 * a class registered after the change (and check_config validates
 * limit_min / limit_initial against the stale cap too).
 *
 * Here: ax_new with cap 2, cap raised to 6, then a class with limit_max 0
 * registered; 6 blocking tasks of the class. Expected: 6 run at once and
 * stats.limit says 6.
 */
#include "class_common.h"

int main(void)
{
    ax_sched *s = test_sched(2, 2);
    CHECK_EQ(ax_set_max_concurrency(s, 6), AX_OK);
    ax_class_config c = rc_plain("capped"); /* adaptive off, limit_max 0 */
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);

    static atomic_int release;
    for (int i = 0; i < 6; i++) {
        ax_spec sp = {.fn = rc_block, .arg = &release, .class_id = id};
        CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    }
    bool all = WAIT_UNTIL(atomic_load(&rc_running) == 6, 3000);
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "cap 6: running=%d class limit=%u in_flight=%u queued=%llu\n",
            atomic_load(&rc_running), st.limit, st.in_flight, (unsigned long long)st.queued);
    atomic_store(&release, 1);
    CHECK(all);
    CHECK_EQ(st.limit, 6u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
