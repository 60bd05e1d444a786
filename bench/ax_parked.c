/* ax_parked.c - memory per parked task, and the CPU an idle scheduler uses.
 *
 * `tasks` tasks each call ax_sleep for an hour (max_concurrency raised so
 * they all run at once). When every one is parked:
 *   ax_parked_bytes  (RSS now - RSS before ax_new) / tasks: task, coroutine
 *                    stack pages actually touched, timer, everything
 *   ax_idle_cpu_s    user+system CPU seconds the whole process uses over the
 *                    next `idle_s` seconds, with all those timers an hour
 *                    away (should be ~0: no periodic tick)
 * Then ax_shutdown cancels them (each ax_sleep returns AX_ECANCELED).
 * Peer: goroutines in time.Sleep(time.Hour) (go/parked.go).
 */
#include "ax_bench.h"

static atomic_long parked;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&parked, 1);
    int rc = ax_sleep(t, 3600 * 1000);
    return rc == AX_ECANCELED || rc == 0 ? 0 : rc;
}

int main(int argc, char **argv)
{
    long tasks = (long)bu_arg(argc, argv, "tasks", 100000);
    unsigned idle_s = (unsigned)bu_arg(argc, argv, "idle_s", 5);
    bu_args_done(argc, argv);

    int64_t rss0 = bu_rss_bytes();
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.max_concurrency = (unsigned)tasks + 16;
    ab_room_for(&cfg, 0, (unsigned)tasks, 0);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    ax_spec spec = ab_spec(sleeper, NULL, AX_PRIO_NORMAL, 2 * 3600 * 1000, NULL, NULL);
    for (long i = 0; i < tasks; i++) {
        int rc = ax_submit(s, &spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%ld: %s %s\n", i, ax_strerror(rc), ax_error_detail());
            exit(1);
        }
    }
    /* Wait until all have entered ax_sleep (and the last one has parked). */
    uint64_t give_up = bu_now_ns() + 120 * 1000000000ull;
    while (atomic_load(&parked) < tasks && bu_now_ns() < give_up)
        bu_sleep_ms(10);
    bu_sleep_ms(200);
    ax_stats st;
    ab_check(ax_stats_get(s, &st), "ax_stats_get");
    if (atomic_load(&parked) < tasks) {
        fprintf(stderr, "only %ld of %ld tasks started (running %llu, stacks %llu)\n",
                atomic_load(&parked), tasks, (unsigned long long)st.running,
                (unsigned long long)st.stacks_in_use);
        exit(1);
    }
    int64_t rss1 = bu_rss_bytes();
    printf("ax_parked_bytes %.1f\n", (double)(rss1 - rss0) / (double)tasks);
    fflush(stdout);

    double cpu0 = bu_cpu_seconds();
    bu_sleep_ms(idle_s * 1000ull);
    double cpu1 = bu_cpu_seconds();
    printf("ax_idle_cpu_s %.4f\n", cpu1 - cpu0);

    ax_shutdown(s, 0); /* cancel the sleepers now */
    ax_free(s);
    return 0;
}
