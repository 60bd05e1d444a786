/* test_watchdog_linger.c - a worker held by a task that never yields is
 * seen by the watchdog whether the watchdog was asleep (the worker's wake-up
 * kicked it) or still polling after a run of dense starts (watchdog.c
 * LINGER_MS, LINGER_DENSE_MS: no kick then, the next poll sees the worker
 * busy).
 *
 * One worker. Each round: quick tasks, one every 5 ms (dense) or a single
 * one (sparse); then a gap with nothing to do (the worker sleeps); then a
 * hog with a 200 ms timeout that spins until told to stop. Only the
 * watchdog can end the hog's attempt (its worker is held): its on_done
 * must say TIMED_OUT while it still spins. Dense starts then a 50 ms gap:
 * the watchdog lingers, unkicked; a single start, or a 1 500 ms gap: it
 * sleeps for good and is kicked. Had the linger neither polled nor let the
 * worker kick, the dense rounds would wait for good (a liveness bound of
 * 30 s says so).
 */
#include "util.h"

#include <dirent.h>

static atomic_int quick_done, hog_spinning, hog_release, hog_state = -1, hog_done;
static atomic_int spinning_at_done = -1;

static int quick_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void quick_on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&quick_done, 1);
}

static int hog_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&hog_spinning, 1);
    uint64_t end = test_now_ms() + 30000; /* liveness */
    while (!atomic_load(&hog_release) && test_now_ms() < end) {
    }
    atomic_store(&hog_spinning, 0);
    return 0;
}

static void hog_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&spinning_at_done, atomic_load(&hog_spinning));
    atomic_store(&hog_state, (int)r->state);
    atomic_fetch_add(&hog_done, 1);
}

/* The watchdog thread's context switches so far (-1: not found). */
static long watchdog_switches(void)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    long total = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        bool wd = fgets(line, sizeof line, f) && strncmp(line, "ax-watchdog", 11) == 0;
        fclose(f);
        if (!wd) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        f = fopen(path, "r");
        CHECK(f != NULL);
        long v = 0, nv = 0;
        while (fgets(line, sizeof line, f)) {
            sscanf(line, "voluntary_ctxt_switches: %ld", &v);
            sscanf(line, "nonvoluntary_ctxt_switches: %ld", &nv);
        }
        fclose(f);
        total = v + nv;
    }
    closedir(d);
    return total;
}

/* `n` quick tasks, one every ~6 ms, each done before the next. */
static void dense_starts(ax_sched *s, int n)
{
    atomic_store(&quick_done, 0);
    ax_spec q = {.fn = quick_fn, .timeout_ms = 5000, .on_done = quick_on_done};
    uint64_t end = test_now_ms() + 30000;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
        while (atomic_load(&quick_done) <= i && test_now_ms() < end)
            usleep(1000);
        CHECK_EQ(atomic_load(&quick_done), i + 1);
        usleep(5000);
    }
}

static void round_with_gap(ax_sched *s, int starts, unsigned gap_ms)
{
    atomic_store(&quick_done, 0);
    atomic_store(&hog_spinning, 0);
    atomic_store(&hog_release, 0);
    atomic_store(&hog_state, -1);
    atomic_store(&hog_done, 0);
    atomic_store(&spinning_at_done, -1);

    dense_starts(s, starts);
    usleep(gap_ms * 1000u);

    ax_spec h = {.fn = hog_fn, .timeout_ms = 200, .on_done = hog_on_done};
    uint64_t t0 = test_now_ms();
    CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
    uint64_t end = t0 + 30000;
    while (!atomic_load(&hog_done) && test_now_ms() < end)
        usleep(1000);
    fprintf(stderr, "%d starts, gap %u ms: hog on_done %d after %llu ms, state %d, spinning %d\n",
            starts, gap_ms, atomic_load(&hog_done), (unsigned long long)(test_now_ms() - t0),
            atomic_load(&hog_state), atomic_load(&spinning_at_done));
    CHECK_EQ(atomic_load(&hog_done), 1);
    CHECK_EQ(atomic_load(&hog_state), (int)AX_STATE_TIMED_OUT);
    CHECK_EQ(atomic_load(&spinning_at_done), 1); /* ended by the watchdog, not by returning */
    atomic_store(&hog_release, 1);
    end = test_now_ms() + 30000;
    while (atomic_load(&hog_spinning) && test_now_ms() < end)
        usleep(1000);
    CHECK_EQ(atomic_load(&hog_spinning), 0);
}

int main(void)
{
    ax_sched *s = test_sched(1, 10);
    round_with_gap(s, 20, 50);   /* dense starts: the watchdog still polls, no kick */
    round_with_gap(s, 20, 1500); /* past LINGER_MS: asleep for good, kicked */
    round_with_gap(s, 1, 50);    /* a single start: asleep for good, kicked */
    round_with_gap(s, 20, 50);

    /* The linger ends: dense starts again, then past LINGER_MS with
     * nothing to do the watchdog sleeps for good (an idle scheduler makes
     * no periodic wake-ups). */
    dense_starts(s, 20);
    usleep(500 * 1000);
    long a = watchdog_switches();
    usleep(1000 * 1000);
    long b = watchdog_switches();
    fprintf(stderr, "idle: the watchdog switched %ld times in 1 s\n", b - a);
    CHECK(a >= 0);
    CHECK_EQ(b - a, 0);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    printf("test_watchdog_linger: ok\n");
    return 0;
}
