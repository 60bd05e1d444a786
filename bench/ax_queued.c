/* ax_queued.c - memory per queued task.
 *
 * The scheduler is paused (ax_pause) and its bucket bounds raised, then
 * `tasks` tasks are submitted: none can start, so each is only what ax keeps
 * for a queued task. Prints
 *   ax_queued_bytes  (RSS after the submissions - RSS before ax_new) / tasks
 * RSS before ax_new, so whatever ax allocates up front is charged too.
 * Peer: the seed's Go scheduler holding the same number of queued tasks.
 */
#include "ax_bench.h"

static int empty(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

int main(int argc, char **argv)
{
    long tasks = (long)bu_arg(argc, argv, "tasks", 1000000);
    bu_args_done(argc, argv);

    int64_t rss0 = bu_rss_bytes();
    ax_config cfg;
    ax_config_default(&cfg);
    ab_room_for(&cfg, 0, (unsigned)tasks, 0);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");
    ab_check(ax_pause(s), "ax_pause");

    ax_spec spec = ab_spec(empty, NULL, AX_PRIO_NORMAL, 1000, NULL, NULL);
    for (long i = 0; i < tasks; i++) {
        int rc = ax_submit(s, &spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%ld: %s %s\n", i, ax_strerror(rc), ax_error_detail());
            exit(1);
        }
    }
    int64_t rss1 = bu_rss_bytes();
    ax_stats st;
    ab_check(ax_stats_get(s, &st), "ax_stats_get");
    uint64_t queued = st.queued[0] + st.queued[1] + st.queued[2];
    if (queued != (uint64_t)tasks) {
        fprintf(stderr, "queued: %llu in the buckets, expected %ld\n", (unsigned long long)queued,
                tasks);
        exit(1);
    }
    printf("ax_queued_bytes %.1f\n", (double)(rss1 - rss0) / (double)tasks);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
