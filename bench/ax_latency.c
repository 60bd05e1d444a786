/* ax_latency.c - dispatch latency, submit -> start, under the cap.
 *
 * One thread submits `rate` tasks per second for `ms` milliseconds, in bursts
 * of `burst` (a burst every burst/rate seconds, the same arrival pattern as
 * the Go peer). Each task notes when it starts, then ax_sleeps `task_ms`.
 * With the defaults (25 000/s x 10 ms = 250 running on average against the
 * default max_concurrency of 500) the scheduler runs at about 50 % of its cap.
 * The first 10 % of tasks are warm-up and not counted. Prints
 *   ax_latency_p50_us, ax_latency_p99_us   start - just-before-ax_submit
 * Peer: the seed's Go scheduler with the same load (go/latency.go).
 */
#include "ax_bench.h"

static uint64_t *submitted, *started;

static uint64_t task_ms;

static int sleeper(ax_task *t, void *arg)
{
    started[(uintptr_t)arg] = ax_now_ns();
    int rc = ax_sleep(t, task_ms);
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t rate = bu_arg(argc, argv, "rate", 25000);
    uint64_t ms = bu_arg(argc, argv, "ms", 1000);
    uint64_t burst = bu_arg(argc, argv, "burst", 25);
    task_ms = bu_arg(argc, argv, "task_ms", 10);

    size_t n = (size_t)(rate * ms / 1000 / burst * burst);
    submitted = bu_xcalloc(n, sizeof *submitted);
    started = bu_xcalloc(n, sizeof *started);

    ax_config cfg;
    ax_config_default(&cfg);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    struct bu_latch done;
    bu_latch_init(&done, (long)n);
    ax_spec spec = ab_spec(sleeper, NULL, AX_PRIO_NORMAL, 1000, ab_done, &done);
    uint64_t base = bu_now_ns() + 1000000, period = burst * 1000000000ull / rate;
    for (size_t i = 0, b = 0; i < n; b++) {
        bu_sleep_until(base + b * period);
        for (uint64_t j = 0; j < burst; j++, i++) {
            spec.arg = (void *)(uintptr_t)i;
            submitted[i] = ax_now_ns();
            int rc = ax_submit(s, &spec, NULL);
            if (rc != 0) {
                fprintf(stderr, "ax_submit #%zu: %s %s\n", i, ax_strerror(rc), ax_error_detail());
                exit(1);
            }
        }
    }
    ab_wait_all(&done, 600, "latency");

    size_t skip = n / 10, m = n - skip;
    int64_t *lat = bu_xcalloc(m, sizeof *lat);
    for (size_t i = 0; i < m; i++)
        lat[i] = (int64_t)(started[skip + i] - submitted[skip + i]);
    printf("ax_latency_p50_us %.2f\n", (double)bu_percentile(lat, m, 50) / 1e3);
    printf("ax_latency_p99_us %.2f\n", (double)bu_percentile(lat, m, 99) / 1e3);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
