/* Released stacks are given back to the system when the worker can spare
 * the time, even while a timer is always near, and a worker keeps at most
 * ~4 MiB of stacks resident for reuse whatever their size (review):
 *   A  a burst of 4 000 tasks, each touching 24 KiB of its stack, beside
 *      one task that sleeps 1 ms in a loop (a timer always due within
 *      2 ms): their 96 MB stayed resident for good; now a few stacks are
 *      trimmed every 10 ms.
 *   B  stacks of 2 MiB, 80 tasks each touching 1.5 MiB: 64 warm runs kept
 *      ~96 MiB resident on an idle worker; now 2.
 * RSS from /proc/self/status, waited for (a liveness bound, generous).
 * Skipped (77) under a sanitizer, whose shadow memory for the touched
 * stacks stays resident whatever ax gives back. */
#include "util.h"

#include <stdlib.h>

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            v = atol(line + 6);
    fclose(f);
    return v;
}

static atomic_int touched, ended, stop_ticker, release_all;
static size_t touch_bytes;

__attribute__((noinline)) static int touch_stack(ax_task *t, size_t n)
{
    char *buf = __builtin_alloca(n);
    memset(buf, 1, n);
    atomic_fetch_add(&touched, 1);
    int rc = 0;
    while (!atomic_load(&release_all) && !rc) /* all parked at once, touched */
        rc = ax_sleep(t, 5);
    __asm__ volatile("" : : "r"(buf) : "memory");
    return rc ? 0 : buf[n / 2] - 1;
}

static int burst(ax_task *t, void *arg)
{
    (void)arg;
    int rc = touch_stack(t, touch_bytes);
    atomic_fetch_add(&ended, 1);
    return rc;
}

static int ticker(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_ticker))
        if (ax_sleep(t, 1))
            break;
    return 0;
}

static void run_case(const char *name, size_t stack, size_t touch, int n, bool with_ticker,
                     long want_drop_kib)
{
    atomic_store(&ended, 0);
    atomic_store(&touched, 0);
    atomic_store(&release_all, 0);
    atomic_store(&stop_ticker, 0);
    touch_bytes = touch;
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.stack_size = stack;
    c.max_concurrency = 10000;
    ax_sched *s = test_sched_cfg(&c);
    if (with_ticker) {
        ax_spec sp = {.fn = ticker, .timeout_ms = 3600000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    for (int i = 0; i < n; i++) {
        ax_spec sp = {.fn = burst, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&touched) == n, 60000));
    long peak = rss_kib();
    atomic_store(&release_all, 1);
    CHECK(WAIT_UNTIL(atomic_load(&ended) == n, 60000));
    bool dropped = WAIT_UNTIL(rss_kib() < peak - want_drop_kib, 60000);
    fprintf(stderr, "%s: RSS %ld KiB with the burst parked, %ld KiB after it (want %ld less)\n",
            name, peak, rss_kib(), want_drop_kib);
    CHECK(dropped);
    atomic_store(&stop_ticker, 1);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    fprintf(stderr, "sanitizer build: skipped\n");
    return 77;
#endif
    /* A: 4 000 x 24 KiB = ~94 MiB touched; at least 85 MiB of it given back. */
    run_case("A (1 ms ticker)", 64 * 1024, 24 * 1024, 4000, true, 85 * 1024);
    /* B: 80 x 1.5 MiB = 120 MiB touched; 64 warm runs kept ~96 MiB, now
     * 2 warm runs and 2 released stacks at most: 80 MiB given back. */
    run_case("B (2 MiB stacks)", 2 * 1024 * 1024, 1536 * 1024, 80, false, 80 * 1024);
    return 0;
}
