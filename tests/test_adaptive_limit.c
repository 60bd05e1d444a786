/* test_adaptive_limit.c - config.adaptive_limit: the cap on running tasks
 * follows their run time (DESIGN.md §11 "the limit, global ..."), for tasks
 * of no class.
 *
 * A closed loop keeps 150 tasks outstanding on a scheduler with
 * max_concurrency 64 and adaptive_limit on. Each task sleeps (ax_sleep) a
 * uniform 20-80 ms while healthy, 200-800 ms while slow (10x), then healthy
 * again. ax_stats.limit is sampled every 20 ms. Checked, on sample counts
 * and not on how long anything took:
 *  - always within [adaptive_min, 64];
 *  - healthy: the median of the samples is >= 58;
 *  - slow: it falls below 32 (half) (liveness: 30 s; how fast is
 *    test_limit.c's, exactly);
 *  - healthy again: it climbs back to >= 58 (liveness: 30 s);
 * Sleeps of tens of ms, not 2-8 ms: on a busy machine (TSan, other builds)
 * 64 tasks of 2-8 ms keep both workers busy, so a "healthy" run took 12-25
 * ms, varying by more than the limiter's tolerance (1.5x) from window to
 * window, and its baseline, set by its first window at start-up, higher
 * still: the limit fell while healthy (median 55), and against 20-80 ms
 * slow ones the gradient stayed near 1 (the limit stayed at 64 for 3 s, 2
 * runs in 4). A run's time is its sleep, plus what the machine adds.
 *  - every admitted task ends exactly once, all succeeded.
 * Also: adaptive_min above max_concurrency is AX_EINVAL; with the limiter
 * off, the limit stays max_concurrency.
 */
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define OUTSTANDING 150
#define CAP 64

static atomic_int slow;
static atomic_long submitted, done, succeeded;
static _Atomic uint64_t run_ns_sum, run_n; /* the tasks' own run times, per phase */

static int work(ax_task *t, void *arg)
{
    uint64_t t0 = ax_now_ns();
    uint64_t *seed = arg;
    uint64_t r = xorshift(seed) % 61; /* 0..60 */
    uint64_t ms = atomic_load(&slow) ? 200 + 10 * r : 20 + r;
    int rc = ax_sleep(t, ms);
    atomic_fetch_add(&run_ns_sum, ax_now_ns() - t0);
    atomic_fetch_add(&run_n, 1);
    return rc;
}

static double mean_run_ms(void)
{
    uint64_t n = atomic_exchange(&run_n, 0), sum = atomic_exchange(&run_ns_sum, 0);
    return n ? (double)sum / (double)n / 1e6 : 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_SUCCEEDED)
        atomic_fetch_add(&succeeded, 1);
    atomic_fetch_add(&done, 1);
}

static uint64_t seeds[OUTSTANDING * 4];

/* Keep OUTSTANDING tasks in the scheduler for `samples` samples of 20 ms
 * (or until stop(limit) says so); record the limits seen. */
static unsigned drive(ax_sched *s, unsigned samples, unsigned *lim, bool (*stop)(unsigned))
{
    unsigned n = 0;
    uint64_t next = test_now_ms();
    while (n < samples) {
        while (atomic_load(&submitted) - atomic_load(&done) < OUTSTANDING) {
            long k = atomic_fetch_add(&submitted, 1);
            ax_spec sp = {.fn = work,
                          .arg = &seeds[k % (OUTSTANDING * 4)],
                          .timeout_ms = 5000,
                          .on_done = on_done};
            CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
        }
        if (test_now_ms() >= next) {
            unsigned l = (unsigned)test_stats(s).limit;
            CHECK(l >= 1 && l <= CAP);
            lim[n++] = l;
            next += 20;
            if (stop && stop(l))
                break;
        }
        usleep(500);
    }
    return n;
}

static int cmp_u(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

static bool below_half(unsigned l)
{
    return l < CAP / 2;
}

static bool back_up(unsigned l)
{
    return l >= CAP - 6;
}

int main(void)
{
    for (unsigned i = 0; i < OUTSTANDING * 4; i++)
        seeds[i] = 0x9e3779b97f4a7c15ull * (i + 1);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = CAP;
    c.adaptive_limit = true;
    c.adaptive_min = CAP + 1;
    ax_sched *s = NULL;
    CHECK_EQ(ax_new(&c, &s), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "adaptive_min") != NULL);
    c.adaptive_min = 2;
    CHECK_EQ(ax_new(&c, &s), AX_OK);

    static unsigned lim[4096];
    /* Healthy: 75 samples (1.5 s). */
    unsigned n = drive(s, 75, lim, NULL);
    qsort(lim, n, sizeof *lim, cmp_u);
    fprintf(stderr, "adaptive: healthy median limit %u (min %u), mean run %.1f ms\n", lim[n / 2],
            lim[0], mean_run_ms());
    CHECK(lim[n / 2] >= CAP - 6);
    /* Slow: until below half (liveness bound 30 s = 1500 samples). */
    atomic_store(&slow, 1);
    n = drive(s, 1500, lim, below_half);
    fprintf(stderr, "adaptive: slow: below %u after %u samples (last %u), mean run %.1f ms\n",
            CAP / 2, n, lim[n - 1], mean_run_ms());
    CHECK(lim[n - 1] < CAP / 2);
    /* Healthy again: back to >= 58 (liveness bound 30 s = 1500 samples). */
    atomic_store(&slow, 0);
    n = drive(s, 1500, lim, back_up);
    fprintf(stderr, "adaptive: healthy again: %u after %u samples\n", lim[n - 1], n);
    CHECK(lim[n - 1] >= CAP - 6);

    CHECK(WAIT_UNTIL(atomic_load(&done) == atomic_load(&submitted), 30000));
    CHECK_EQ(atomic_load(&succeeded), atomic_load(&submitted));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, (uint64_t)atomic_load(&submitted));
    CHECK_EQ(st.succeeded, (uint64_t)atomic_load(&submitted));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);

    /* Off: the limit is max_concurrency, whatever the latency. */
    c.adaptive_limit = false;
    CHECK_EQ(ax_new(&c, &s), AX_OK);
    atomic_store(&slow, 1);
    atomic_store(&submitted, 0);
    atomic_store(&done, 0);
    n = drive(s, 50, lim, NULL);
    for (unsigned i = 0; i < n; i++)
        CHECK_EQ(lim[i], (unsigned)CAP);
    CHECK(WAIT_UNTIL(atomic_load(&done) == atomic_load(&submitted), 30000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    puts("test_adaptive_limit: ok");
    return 0;
}
