/* ax_beside.c - ax's timers and dispatch beside other programs' busy threads.
 *
 * Users run ax on machines that do other work. `hogs` plain threads (not
 * ax's, not tasks: default one per CPU this process may run on, at most
 * 64) spin for the whole run, so every worker shares its CPU with one.
 * Two measures, one after the other:
 *
 *   sleeps: `tasks` tasks (default 8) each ax_sleep `sleeps` times (default
 *   300), 1 ms and 2 ms alternately by task; lateness = wake time - (time
 *   before ax_sleep + the sleep). Prints ax_beside_sleep_p50_us,
 *   ax_beside_sleep_p99_us.
 *
 *   starts: the main thread submits `starts` empty tasks (default 2 000),
 *   one every `gap_us` (default 200), each noting when it started. Prints
 *   ax_beside_start_p50_us, ax_beside_start_p99_us: start - before
 *   ax_submit.
 *
 * What it guards: a worker out of work that gives its CPU away for longer
 * than it sleeps. Tried in issue 10 (SCALING.md, "The idle spin yields"):
 * sched_yield in the pre-sleep spin, on a kernel whose scheduler then
 * returns the CPU a whole slice later; sleep lateness p50 went from ~120 us
 * to ~1 ms here, and start p50 from 5-790 us to 1.6-2.1 ms. No peer, no
 * target: the kernel's time slices set the figures, and they are read
 * beside the same program's run before a change (bench/ab).
 */
#include "ax_bench.h"
#include "bench_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_bool hogs_stop;
static int64_t *late, *startlat;
static atomic_long nlate;
static uint64_t sleeps;
static uint64_t *submitted_at;

static void *hog(void *arg)
{
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&hogs_stop, memory_order_relaxed))
        x++;
    return NULL;
}

static int sleeper(ax_task *t, void *arg)
{
    uint64_t ms = 1 + ((uintptr_t)arg & 1);
    for (uint64_t i = 0; i < sleeps; i++) {
        uint64_t t0 = ax_now_ns();
        int rc = ax_sleep(t, ms);
        if (rc)
            return rc;
        late[atomic_fetch_add(&nlate, 1)] = (int64_t)(ax_now_ns() - t0) - (int64_t)(ms * 1000000u);
    }
    return 0;
}

static int starter(ax_task *t, void *arg)
{
    (void)t;
    size_t i = (uintptr_t)arg;
    startlat[i] = (int64_t)(ax_now_ns() - submitted_at[i]);
    return 0;
}

int main(int argc, char **argv)
{
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                          : sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t nhogs = bu_arg(argc, argv, "hogs", cpus < 1 ? 2 : cpus > 64 ? 64 : (uint64_t)cpus);
    uint64_t tasks = bu_arg(argc, argv, "tasks", 8);
    sleeps = bu_arg(argc, argv, "sleeps", 300);
    uint64_t starts = bu_arg(argc, argv, "starts", 2000);
    uint64_t gap_us = bu_arg(argc, argv, "gap_us", 200);
    bu_args_done(argc, argv);
    /* Bounds that keep tasks * sleeps and the arrays small, and the run
     * inside the tasks' 600 s timeout (review of b7cc379: a product that
     * wrapped allocated nothing and the sleepers wrote past it). */
    if (nhogs > 64 || tasks == 0 || tasks > 10000 || sleeps == 0 || sleeps > 100000 ||
        tasks * sleeps > 10000000 || starts == 0 || starts > 1000000 || gap_us > 1000000) {
        fprintf(stderr, "ax_beside: hogs <= 64, 1 <= tasks <= 10 000, 1 <= sleeps <= 100 000, "
                        "tasks x sleeps <= 10 000 000, 1 <= starts <= 1 000 000, "
                        "gap_us <= 1 000 000\n");
        return 2;
    }
    late = bu_xcalloc(tasks * sleeps, sizeof *late);
    startlat = bu_xcalloc(starts, sizeof *startlat);
    submitted_at = bu_xcalloc(starts, sizeof *submitted_at);

    ax_config cfg;
    ax_config_default(&cfg);
    ab_room_for(&cfg, 0, (unsigned)(tasks + starts), 0);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    pthread_t h[64];
    for (uint64_t i = 0; i < nhogs; i++)
        if (pthread_create(&h[i], NULL, hog, NULL) != 0) {
            fprintf(stderr, "ax_beside: pthread_create failed\n");
            return 1;
        }

    struct bu_latch done;
    bu_latch_init(&done, (long)tasks);
    for (uint64_t k = 0; k < tasks; k++) {
        ax_spec sp = ab_spec(sleeper, (void *)(uintptr_t)k, AX_PRIO_NORMAL, 600000, ab_done, &done);
        ab_check(ax_submit(s, &sp, NULL), "ax_submit");
    }
    ab_wait_all(&done, 600, "ax_beside sleeps");

    struct bu_latch done2;
    bu_latch_init(&done2, (long)starts);
    uint64_t next = bu_now_ns();
    for (uint64_t i = 0; i < starts; i++) {
        next += gap_us * 1000u;
        bu_sleep_until(next);
        ax_spec sp = ab_spec(starter, (void *)(uintptr_t)i, AX_PRIO_NORMAL, 60000, ab_done, &done2);
        submitted_at[i] = ax_now_ns();
        ab_check(ax_submit(s, &sp, NULL), "ax_submit");
    }
    ab_wait_all(&done2, 600, "ax_beside starts");

    atomic_store(&hogs_stop, true);
    for (uint64_t i = 0; i < nhogs; i++)
        pthread_join(h[i], NULL);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);

    size_t n = (size_t)atomic_load(&nlate);
    printf("ax_beside_sleep_p50_us %.1f\n", (double)bu_percentile(late, n, 50) / 1e3);
    printf("ax_beside_sleep_p99_us %.1f\n", (double)bu_percentile(late, n, 99) / 1e3);
    printf("ax_beside_start_p50_us %.1f\n", (double)bu_percentile(startlat, starts, 50) / 1e3);
    printf("ax_beside_start_p99_us %.1f\n", (double)bu_percentile(startlat, starts, 99) / 1e3);
    return 0;
}
