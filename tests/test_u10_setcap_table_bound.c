/* test_u10_setcap_table_bound - README "Limits ax_new enforces": the three
 * capacities plus max_concurrency <= 2 097 152 (half the task table, so
 * retries and children always find a slot). ax_new refuses 2 097 152 with
 * the default capacities ("config.capacity: total 50000 plus
 * max_concurrency exceeds 2097152 tasks"), but ax_set_max_concurrency
 * accepts the same value at run time (it checks only [1, 2097152]), so the
 * bound that protects retries and children is not kept. Expected: the
 * setter refuses it with AX_EINVAL as ax_new does. */
#include "util.h"

int main(void)
{
    ax_config c;
    ax_config_default(&c); /* capacities 10000 + 30000 + 10000 */
    c.workers = 1;
    c.max_concurrency = 2097152;
    ax_sched *s = NULL;
    CHECK_EQ(ax_new(&c, &s), AX_EINVAL); /* documented, and so it is */
    c.max_concurrency = 500;
    s = test_sched_cfg(&c);
    int rc = ax_set_max_concurrency(s, 2097152);
    fprintf(stderr, "ax_set_max_concurrency(2097152) = %d (%s)\n", rc, ax_strerror(rc));
    CHECK_EQ(rc, AX_EINVAL); /* fails today: 0 */
    CHECK_EQ(test_stats(s).limit, 500);
    ax_free(s);
    return 0;
}
