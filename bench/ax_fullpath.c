/* ax_fullpath.c - the full path of a task, from one submitting thread.
 *
 * The main thread ax_submit()s `tasks` empty tasks, priorities cycling
 * HIGH, NORMAL, LOW, each with a 1 s timeout armed; each goes through
 * admission, its priority bucket, quota-round dispatch, a coroutine on a
 * worker, completion and on_done (which counts a latch down). Prints
 *   ax_fullpath_w<workers>_ns  (last on_done - first submit) / tasks
 * Peers: the seed's Go scheduler (go/seed.go) and a pthread pool
 * (peer_threadpool.c) doing the same work. bench/run also runs this program
 * under callgrind at two task counts for "instructions per task".
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
    long tasks = (long)bu_arg(argc, argv, "tasks", 200000);
    unsigned workers = (unsigned)bu_arg(argc, argv, "workers", 1);

    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = workers;
    ab_room_for(&cfg, (unsigned)tasks / 3 + 1, (unsigned)tasks / 3 + 1, (unsigned)tasks / 3 + 1);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    static const ax_priority cycle[3] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    struct bu_latch done;
    bu_latch_init(&done, tasks);
    ax_spec spec = ab_spec(empty, NULL, AX_PRIO_NORMAL, 1000, ab_done, &done);
    uint64_t t0 = bu_now_ns();
    for (long i = 0; i < tasks; i++) {
        spec.priority = cycle[i % 3];
        int rc = ax_submit(s, &spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%ld: %s %s\n", i, ax_strerror(rc), ax_error_detail());
            exit(1);
        }
    }
    ab_wait_all(&done, 600, "fullpath");
    printf("ax_fullpath_w%u_ns %.2f\n", workers, (double)(done.done_ns - t0) / (double)tasks);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
