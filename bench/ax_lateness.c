/* ax_lateness.c - how late ax_sleep wakes with many timers pending.
 *
 * `tasks` tasks (all running at once: max_concurrency raised) each note the
 * time, ax_sleep(`sleep_ms`), and note how late they woke:
 *   lateness = wake time - (time before ax_sleep + sleep_ms)
 * Prints ax_lateness_p50_ms, ax_lateness_p99_ms, ax_lateness_max_ms; and the p99 of the tasks
 * whose sleep began while the submitting thread was still submitting
 * (ax_lateness_submitting_p99_ms) and after (ax_lateness_after_p99_ms).
 * On 2 cores the first share three busy threads (the submitter and two
 * workers starting tasks, each start faulting in a fresh stack), and a
 * worker the kernel keeps off a CPU for a few ms fires its timers that much
 * late: measured on this project's VM (issue 10, 2026-12-03, perf sched),
 * workers waited up to 2-2.4 ms for a CPU while the submitter ran.
 * from_task=1: the sleepers are submitted by a task instead (prints
 * ax_lateness_from_task_*), as the Go peer's goroutines are started by its
 * main goroutine on one of GOMAXPROCS threads: two busy threads on two
 * CPUs, like the peer, where the default has three. The submitting task
 * does not yield: it holds its worker for the whole burst (~65 ms here),
 * as a Go loop of `go f()` holds its P until the runtime preempts it, and
 * the other worker starts the sleepers. Measured when it was added (issue
 * 10, 2026-12-06, slow placement, 8 runs): p99 0.71-1.67 ms, one run 4.6,
 * against 1.9-4.0 ms for the default in the same minutes. A submitting
 * task that yields every 256 submits was worse (1.1-4.2 ms): its worker
 * then starts sleepers between its turns, and both workers' timers wait
 * for a CPU while the submitter holds one.
 * Peer: as many goroutines in time.Sleep (go/parked.go benchLateness).
 */
#include "ax_bench.h"

static int64_t *late;
static uint64_t *began; /* when each task began its sleep */
static uint64_t sleep_ms;
static uint64_t first_submit, submitted; /* the first and the last submit's time */

static int sleeper(ax_task *t, void *arg)
{
    uint64_t t0 = ax_now_ns();
    began[(uintptr_t)arg] = t0;
    int rc = ax_sleep(t, sleep_ms);
    late[(uintptr_t)arg] = (int64_t)(ax_now_ns() - t0) - (int64_t)(sleep_ms * 1000000u);
    return rc;
}

struct root_arg {
    ax_sched *s;
    ax_spec spec;
    long tasks;
};

/* from_task=1: the sleepers are submitted by a task, as Go's main goroutine
 * starts the peer's goroutines on one of its GOMAXPROCS threads. */
static int root(ax_task *t, void *arg)
{
    (void)t;
    struct root_arg *a = arg;
    first_submit = ax_now_ns();
    for (long i = 0; i < a->tasks; i++) {
        a->spec.arg = (void *)(uintptr_t)i;
        int rc = ax_submit(a->s, &a->spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%ld from a task: %s %s\n", i, ax_strerror(rc),
                    ax_error_detail());
            exit(1);
        }
    }
    submitted = ax_now_ns();
    return 0;
}

int main(int argc, char **argv)
{
    long tasks = (long)bu_arg(argc, argv, "tasks", 100000);
    sleep_ms = bu_arg(argc, argv, "sleep_ms", 50);
    bool from_task = bu_arg(argc, argv, "from_task", 0) != 0;
    bu_args_done(argc, argv);
    late = bu_xcalloc((size_t)tasks, sizeof *late);
    began = bu_xcalloc((size_t)tasks, sizeof *began);

    ax_config cfg;
    ax_config_default(&cfg);
    cfg.max_concurrency = (unsigned)tasks + 16;
    ab_room_for(&cfg, 0, (unsigned)tasks, 0);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    struct bu_latch done;
    bu_latch_init(&done, tasks);
    ax_spec spec = ab_spec(sleeper, NULL, AX_PRIO_NORMAL, 60000, ab_done, &done);
    if (from_task) {
        struct root_arg ra = {.s = s, .spec = spec, .tasks = tasks};
        ax_spec rs = ab_spec(root, &ra, AX_PRIO_HIGH, 60000, NULL, NULL);
        ab_check(ax_submit(s, &rs, NULL), "ax_submit root");
        ab_wait_all(&done, 600, "lateness");
        goto report;
    }
    first_submit = ax_now_ns();
    for (long i = 0; i < tasks; i++) {
        spec.arg = (void *)(uintptr_t)i;
        int rc = ax_submit(s, &spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%ld: %s %s\n", i, ax_strerror(rc), ax_error_detail());
            exit(1);
        }
    }
    submitted = ax_now_ns(); /* the submitting thread's last submit */
    ab_wait_all(&done, 600, "lateness");
report:;
    const char *key = from_task ? "ax_lateness_from_task" : "ax_lateness";
    int64_t *during = bu_xcalloc((size_t)tasks, sizeof *during);
    int64_t *after = bu_xcalloc((size_t)tasks, sizeof *after);
    size_t nd = 0, na = 0;
    for (long i = 0; i < tasks; i++) {
        if (began[i] < submitted)
            during[nd++] = late[i];
        else
            after[na++] = late[i];
    }
    printf("%s_p50_ms %.3f\n", key, (double)bu_percentile(late, (size_t)tasks, 50) / 1e6);
    printf("%s_p99_ms %.3f\n", key, (double)bu_percentile(late, (size_t)tasks, 99) / 1e6);
    printf("%s_max_ms %.3f\n", key, (double)bu_percentile(late, (size_t)tasks, 100) / 1e6);
    if (nd)
        printf("%s_submitting_p99_ms %.3f\n", key, (double)bu_percentile(during, nd, 99) / 1e6);
    if (na)
        printf("%s_after_p99_ms %.3f\n", key, (double)bu_percentile(after, na, 99) / 1e6);
    fprintf(stderr, "ax_lateness: %zu sleeps began while submitting (%.1f ms), %zu after\n", nd,
            (double)(submitted - first_submit) / 1e6, na);
    free(during);
    free(after);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
