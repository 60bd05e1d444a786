/* ax_spawn.c - create, run and complete empty tasks.
 *
 * A parent task submits `tasks` children (ax_submit from inside the task:
 * fire and forget, like `go f()`; ax_spawn is the joinable variant and also
 * keeps each child's result for the parent) that return 0 at once; each
 * child's on_done counts a latch down. Two workers (the machine's cores), so
 * children run while the parent is still spawning. Prints
 *   ax_spawn_ns  (last child's completion - parent's first spawn) / tasks
 * Every child goes through admission, a priority bucket, dispatch, a
 * coroutine with its timeout armed, and on_done. Peer: `go f()` plus a
 * sync.WaitGroup from one goroutine (go/spawn.go).
 */
#include "ax_bench.h"

static long tasks;
static struct bu_latch done;
static uint64_t t_begin;

static int child(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static int parent(ax_task *t, void *arg)
{
    (void)arg;
    ax_spec spec = ab_spec(child, NULL, AX_PRIO_NORMAL, 60000, ab_done, &done);
    t_begin = bu_now_ns();
    for (long i = 0; i < tasks; i++) {
        int rc = ax_submit(ax_task_sched(t), &spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%ld: %s %s\n", i, ax_strerror(rc), ax_error_detail());
            exit(1);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    tasks = (long)bu_arg(argc, argv, "tasks", 1000000);

    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = (unsigned)bu_arg(argc, argv, "workers", 2);
    bu_args_done(argc, argv);
    ab_room_for(&cfg, 0, (unsigned)tasks, 0);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    struct bu_latch parent_done;
    bu_latch_init(&parent_done, 1);
    bu_latch_init(&done, tasks);
    ax_spec spec = ab_spec(parent, NULL, AX_PRIO_NORMAL, 600000, ab_done, &parent_done);
    ab_check(ax_submit(s, &spec, NULL), "ax_submit");
    ab_wait_all(&done, 600, "spawn");
    ab_wait_all(&parent_done, 600, "spawn parent");
    printf("ax_spawn_ns %.2f\n", (double)(done.done_ns - t_begin) / (double)tasks);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
