/* ax_latency.c - dispatch latency, submit -> start, under the cap, with the
 * workers awake and with the workers asleep.
 *
 * Workers awake (default): one thread submits `rate` tasks per second for
 * `ms` milliseconds, in bursts of `burst` (a burst every burst/rate seconds,
 * the same arrival pattern as the Go peer). Each task notes when it starts,
 * then ax_sleeps `task_ms`. With the defaults (25 000/s x 10 ms = 250
 * running on average against the default max_concurrency of 500) the
 * scheduler runs at about 50 % of its cap: the workers are busy or spinning
 * through each burst and the timers' wake-ups, and asleep between them (see
 * the split below). Prints
 *   ax_latency_p50_us, ax_latency_p99_us   start - just-before-ax_submit
 *
 * Workers asleep (idle_gap_ms=G > 0): a burst of `burst` (default 1) every
 * G ms for `ms` ms, task bodies empty (task_ms default 0). A worker spins
 * 50 us at most before it sleeps in epoll_wait, so with G = 5 every
 * submission finds all workers asleep and pays for waking one. Prints
 *   ax_latency_asleep_p50_us, ax_latency_asleep_p99_us
 *
 * Also, workers awake with bursts of more than one task: the same figures for
 * the first task of each burst and for the others (ax_latency_first_*,
 * ax_latency_rest_*). They show what the p99 above is made of: measured on
 * this project's 2-core VM (issue 10, 2026-12-03) the first two tasks of a
 * burst waited ~50 us at the median and the others 11-20 us. Between two
 * bursts (1 ms) the workers spin SPIN_NS (50 us) and then sleep, so the
 * first submits of a burst wake sleeping workers (an eventfd write each,
 * which also delays the submitter), and the burst waits for the wake-up.
 *
 * poll_us=N sets config.idle_poll_us (default: the scheduler's, 50 us):
 * one worker then polls for work that long after it runs out, so the head
 * of a burst finds it awake; measured here (issue 10, 2026-12-03) with
 * poll_us=2000 (longer than the 1 ms between bursts: a worker never
 * sleeps) the first task of a burst waited ~2-4 us at the median instead of
 * ~50. What it costs shows in ax_latency*_cpu: the process's CPU seconds
 * (every thread, the submitting one included) per second of the run.
 *
 * from_task=1: the arrivals are made by a task, which waits for each
 * burst's time on a timerfd (ax_wait_fd, in its worker's reactor), as the Go
 * peer's submitting goroutine sleeps in its runtime's timers: no submitting
 * thread outside the scheduler. Prints the same figures with the key
 * ax_latency_from_task (ax_latency_asleep_from_task with idle_gap_ms).
 * Measured when it was added (issue 10, 2026-12-06, slow placement, 10
 * runs, awake): p99 38-108 us, median ~56, against 55-69 for the default in
 * the same minutes: the submitter's thread was not what the tail is made of.
 *
 * In both modes the first 10 % of tasks are warm-up and not counted.
 * Per task, ax does what the peer does not: a coroutine with its own stack
 * and a deadline in a timing wheel (the seed's goroutine and context timer
 * are its equivalents), and in the asleep mode an eventfd write to wake a
 * worker (the seed's loop goroutine is woken by the Go runtime instead).
 * Peer: the seed's Go scheduler with the same arrivals (benchLatency in
 * go/fullpath.go).
 */
#include "ax_bench.h"

#include <sys/timerfd.h>
#include <unistd.h>

static uint64_t *submitted, *started;

static uint64_t task_ms;

static int sleeper(ax_task *t, void *arg)
{
    started[(uintptr_t)arg] = ax_now_ns();
    return task_ms ? ax_sleep(t, task_ms) : 0;
}

/* The arrivals: n tasks in bursts of `burst`, a burst every `period` ns
 * from `base`. */
struct arrivals {
    ax_sched *s;
    ax_spec spec;
    size_t n;
    uint64_t burst, period, base;
    int tfd; /* from_task: the submitting task's timer */
};

static void submit_burst(struct arrivals *a, size_t *i)
{
    for (uint64_t j = 0; j < a->burst && *i < a->n; j++, (*i)++) {
        a->spec.arg = (void *)(uintptr_t)*i;
        submitted[*i] = ax_now_ns();
        int rc = ax_submit(a->s, &a->spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%zu: %s %s\n", *i, ax_strerror(rc), ax_error_detail());
            exit(1);
        }
    }
}

/* from_task=1: the arrivals come from a task, which waits for each burst's
 * time on a timerfd in its worker's reactor, as the Go peer's submitting
 * goroutine sleeps in its runtime's timers between bursts. */
static int submitter(ax_task *t, void *arg)
{
    struct arrivals *a = arg;
    for (size_t i = 0, b = 0; i < a->n; b++) {
        uint64_t at = a->base + b * a->period;
        struct itimerspec its = {.it_value = {.tv_sec = (time_t)(at / 1000000000u),
                                              .tv_nsec = (long)(at % 1000000000u)}};
        if (timerfd_settime(a->tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0) {
            perror("timerfd_settime");
            exit(1);
        }
        int rc = ax_wait_fd(t, a->tfd, AX_READ, -1);
        if (rc < 0) {
            fprintf(stderr, "ax_wait_fd: %s %s\n", ax_strerror(rc), ax_error_detail());
            exit(1);
        }
        uint64_t ticks;
        if (read(a->tfd, &ticks, sizeof ticks) != (ssize_t)sizeof ticks) {
            perror("read timerfd");
            exit(1);
        }
        submit_burst(a, &i);
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t gap_ms = bu_arg(argc, argv, "idle_gap_ms", 0);
    uint64_t rate = bu_arg(argc, argv, "rate", 25000);
    uint64_t ms = bu_arg(argc, argv, "ms", 1000);
    uint64_t burst = bu_arg(argc, argv, "burst", gap_ms ? 1 : 25);
    task_ms = bu_arg(argc, argv, "task_ms", gap_ms ? 0 : 10);
    uint64_t poll_us = bu_arg(argc, argv, "poll_us", 0);
    bool from_task = bu_arg(argc, argv, "from_task", 0) != 0;
    bu_args_done(argc, argv);
    if (rate == 0 || burst == 0) {
        fprintf(stderr, "ax_latency: rate and burst must be > 0\n");
        return 2;
    }

    size_t n;
    uint64_t period;
    if (gap_ms) {
        n = (size_t)(ms / gap_ms * burst);
        period = gap_ms * 1000000ull;
    } else {
        n = (size_t)(rate * ms / 1000 / burst * burst);
        period = burst * 1000000000ull / rate;
    }
    if (n < 10) {
        fprintf(stderr, "ax_latency: %zu tasks are too few; raise ms\n", n);
        return 2;
    }
    const char *key = gap_ms ? (poll_us ? "ax_latency_asleep_poll" : "ax_latency_asleep")
                             : (poll_us ? "ax_latency_poll" : "ax_latency");
    char keybuf[64];
    if (from_task) {
        snprintf(keybuf, sizeof keybuf, "%s_from_task", key);
        key = keybuf;
    }
    submitted = bu_xcalloc(n, sizeof *submitted);
    started = bu_xcalloc(n, sizeof *started);

    ax_config cfg;
    ax_config_default(&cfg);
    if (poll_us)
        cfg.idle_poll_us = (uint32_t)poll_us;
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    struct bu_latch done;
    bu_latch_init(&done, (long)n);
    ax_spec spec = ab_spec(sleeper, NULL, AX_PRIO_NORMAL, 1000, ab_done, &done);
    uint64_t base = bu_now_ns() + 1000000;
    struct arrivals a = {.s = s, .spec = spec, .n = n, .burst = burst, .period = period,
                         .base = base, .tfd = -1};
    double cpu0 = bu_cpu_seconds();
    if (from_task) {
        a.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (a.tfd < 0) {
            perror("timerfd_create");
            return 1;
        }
        ax_spec sub = ab_spec(submitter, &a, AX_PRIO_HIGH, 600000, NULL, NULL);
        ab_check(ax_submit(s, &sub, NULL), "ax_submit submitter");
    } else {
        for (size_t i = 0, b = 0; i < n; b++) {
            bu_sleep_until(base + b * period);
            submit_burst(&a, &i);
        }
    }
    ab_wait_all(&done, 600, "latency");
    if (a.tfd >= 0)
        close(a.tfd);
    double cpu = (bu_cpu_seconds() - cpu0) / ((double)(bu_now_ns() - base) / 1e9);

    size_t skip = n / 10, m = n - skip;
    int64_t *lat = bu_xcalloc(m, sizeof *lat);
    for (size_t i = 0; i < m; i++)
        lat[i] = (int64_t)(started[skip + i] - submitted[skip + i]);
    /* The first task of each burst, and the others (before the sort below). */
    int64_t *first = NULL, *rest = NULL;
    size_t nf = 0, nr = 0;
    if (!gap_ms && burst > 1) {
        first = bu_xcalloc(m, sizeof *first);
        rest = bu_xcalloc(m, sizeof *rest);
        for (size_t i = 0; i < m; i++) {
            if ((skip + i) % burst == 0)
                first[nf++] = lat[i];
            else
                rest[nr++] = lat[i];
        }
    }
    printf("%s_p50_us %.2f\n", key, (double)bu_percentile(lat, m, 50) / 1e3);
    printf("%s_p99_us %.2f\n", key, (double)bu_percentile(lat, m, 99) / 1e3);
    if (first) {
        printf("%s_first_p50_us %.2f\n", key, (double)bu_percentile(first, nf, 50) / 1e3);
        printf("%s_first_p99_us %.2f\n", key, (double)bu_percentile(first, nf, 99) / 1e3);
        printf("%s_rest_p50_us %.2f\n", key, (double)bu_percentile(rest, nr, 50) / 1e3);
        printf("%s_rest_p99_us %.2f\n", key, (double)bu_percentile(rest, nr, 99) / 1e3);
        free(first);
        free(rest);
    }
    printf("%s_cpu %.3f\n", key, cpu);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
