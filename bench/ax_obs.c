/* ax_obs.c - what observability costs on the full path.
 *
 * The full path of ax_fullpath.c (one submitting thread, mixed priorities,
 * a timeout armed, on_done), run twice in one process on fresh schedulers:
 *   events=off   no event sink (metrics histograms are always kept)
 *   events=json  every lifecycle event written as a JSON line to a file, in
 *                lossless mode (a full buffer makes the producer wait), so the
 *                figure is the honest cost of writing all of them
 * Prints ax_obs_off_ns and ax_obs_json_ns (ns per task). The bound:
 * full JSON logging may cost at most 30% of throughput. Also
 * ax_obs_json_thread_ns: the event thread's own CPU per task (its
 * schedstat run time), which moves little with what else the machine runs:
 * on 2 cores the thread competes with the worker and the submitter, so it
 * is what the ratio above mostly pays for.
 */
#include "ax_bench.h"

#include <dirent.h>
#include <string.h>

/* CPU time (ns) of this process's thread named `name`, or -1. */
static double thread_cpu_ns(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    double ns = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], comm[32] = "";
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (!fgets(comm, sizeof comm, f))
            comm[0] = 0;
        fclose(f);
        comm[strcspn(comm, "\n")] = 0;
        if (strcmp(comm, name) != 0)
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        unsigned long long v;
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%llu", &v) == 1)
                ns = (double)v;
            fclose(f);
        }
    }
    closedir(d);
    return ns;
}

static int empty(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static double run(long tasks, unsigned workers, FILE *events, double *thread_ns)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = workers;
    ab_room_for(&cfg, (unsigned)tasks / 3 + 1, (unsigned)tasks / 3 + 1, (unsigned)tasks / 3 + 1);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");
    if (events) {
        ab_check(ax_events_json(s, events), "ax_events_json");
        ab_check(ax_events_lossless(s, true), "ax_events_lossless"); /* every event, no drops */
    }
    static const ax_priority cycle[3] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    struct bu_latch done;
    bu_latch_init(&done, tasks);
    ax_spec spec = ab_spec(empty, NULL, AX_PRIO_NORMAL, 1000, ab_done, &done);
    uint64_t t0 = bu_now_ns();
    for (long i = 0; i < tasks; i++) {
        spec.priority = cycle[i % 3];
        int rc;
        while ((rc = ax_submit(s, &spec, NULL)) == AX_ESHED || rc == AX_EFULL)
            ;
        ab_check(rc, "ax_submit");
    }
    ab_wait_all(&done, 600, "obs");
    double ns = (double)(done.done_ns - t0) / (double)tasks;
    if (events) {
        ab_check(ax_events_flush(s), "ax_events_flush");
        *thread_ns = thread_cpu_ns("ax-events") / (double)tasks; /* before ax_free ends it */
        if (ax_events_dropped(s))
            fprintf(stderr, "ax_obs: %llu events dropped\n",
                    (unsigned long long)ax_events_dropped(s));
    }
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return ns;
}

int main(int argc, char **argv)
{
    long tasks = (long)bu_arg(argc, argv, "tasks", 200000);
    unsigned workers = (unsigned)bu_arg(argc, argv, "workers", 1);
    bu_args_done(argc, argv);
    FILE *f = tmpfile();
    if (!f) {
        perror("tmpfile");
        return 1;
    }
    double thread_ns = -1;
    double off = run(tasks, workers, NULL, &thread_ns);
    double json = run(tasks, workers, f, &thread_ns);
    long bytes = ftell(f);
    fclose(f);
    printf("ax_obs_off_ns %.2f\n", off);
    printf("ax_obs_json_ns %.2f\n", json);
    printf("ax_obs_json_thread_ns %.2f\n", thread_ns);
    fprintf(stderr, "ax_obs: %ld bytes of JSON for %ld tasks\n", bytes, tasks);
    return 0;
}
