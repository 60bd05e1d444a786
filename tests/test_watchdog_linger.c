/* test_watchdog_linger.c - a worker held by a task that never yields is
 * seen by the watchdog whether the watchdog was asleep (the worker's wake-up
 * kicked it) or still polling after a recent busy spell (watchdog.c
 * LINGER_MS: no kick then, the next poll sees the worker busy).
 *
 * One worker. Each round: a quick task, so the worker was busy; then a gap
 * with nothing to do (the worker sleeps); then a hog with a 200 ms timeout
 * that spins until told to stop. Only the watchdog can end the hog's attempt
 * (its worker is held): its on_done must say TIMED_OUT while it still
 * spins. Gaps: 100 ms (within LINGER_MS: the watchdog polls, unkicked) and
 * 1 500 ms (past it: asleep for good, kicked). Had the linger neither
 * polled nor let the worker kick, the first round would wait for good (a
 * liveness bound of 30 s says so).
 */
#include "util.h"

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

static void round_with_gap(ax_sched *s, unsigned gap_ms)
{
    atomic_store(&quick_done, 0);
    atomic_store(&hog_spinning, 0);
    atomic_store(&hog_release, 0);
    atomic_store(&hog_state, -1);
    atomic_store(&hog_done, 0);
    atomic_store(&spinning_at_done, -1);

    ax_spec q = {.fn = quick_fn, .timeout_ms = 5000, .on_done = quick_on_done};
    CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    uint64_t end = test_now_ms() + 30000;
    while (!atomic_load(&quick_done) && test_now_ms() < end)
        usleep(1000);
    CHECK_EQ(atomic_load(&quick_done), 1);
    usleep(gap_ms * 1000u);

    ax_spec h = {.fn = hog_fn, .timeout_ms = 200, .on_done = hog_on_done};
    uint64_t t0 = test_now_ms();
    CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
    end = t0 + 30000;
    while (!atomic_load(&hog_done) && test_now_ms() < end)
        usleep(1000);
    fprintf(stderr, "gap %u ms: hog on_done %d after %llu ms, state %d, spinning then %d\n", gap_ms,
            atomic_load(&hog_done), (unsigned long long)(test_now_ms() - t0),
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
    round_with_gap(s, 100);  /* the watchdog still polls: no kick */
    round_with_gap(s, 1500); /* asleep for good: the worker kicks it */
    round_with_gap(s, 100);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    printf("test_watchdog_linger: ok\n");
    return 0;
}
