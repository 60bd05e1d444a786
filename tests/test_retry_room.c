/* A retry holds its room in its bucket's bound from the moment its attempt
 * ends, also while the back-off is not armed yet (submit.c admit_locked,
 * retry_unarmed). The widest such gap: attempts the watchdog ends on a held
 * worker are handed to the ax-finish thread with their slots already free,
 * and wait there behind the callbacks handed before them. A review found
 * admission letting new tasks into that room (11 live HIGH tasks against a
 * bound of capacity 4 + max_concurrency 4).
 *
 * One worker, capacity HIGH 4, max_concurrency 4: three HIGH tasks park in
 * ax_sleep past their 300 ms timeout (one retry, a minute's back-off); a hog
 * then holds the worker; its own timeout (50 ms) ends first and its on_done
 * keeps the ax-finish thread busy until released, so the three retries wait
 * behind it unarmed. New HIGH submissions meanwhile: room for exactly one. */
#include "util.h"

static atomic_int parked, hog_in_done, release, done;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    if (ax_task_attempt(t) == 0)
        atomic_fetch_add(&parked, 1);
    ax_sleep(t, 60000);
    return 1;
}

static int hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t end = test_now_ms() + 20000;
    while (!atomic_load(&release) && test_now_ms() < end) {
    } /* never yields: its worker is held */
    return 0;
}

static void count_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&done, 1);
}

static void hog_done(const ax_result *r, void *arg)
{
    count_done(r, arg);
    atomic_store(&hog_in_done, 1);
    uint64_t end = test_now_ms() + 20000;
    while (!atomic_load(&release) && test_now_ms() < end)
        usleep(1000); /* on the ax-finish thread: what was handed after waits */
}

static int filler(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 4;
    c.capacity[AX_PRIO_HIGH] = 4;
    ax_sched *s = test_sched_cfg(&c);
    static const ax_retry_policy minute = {.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 60000,
                                           .max_ms = 60000, .jitter_ms = 0};
    for (int i = 0; i < 3; i++) {
        ax_spec sp = {.fn = sleeper, .priority = AX_PRIO_HIGH, .timeout_ms = 300, .max_retry = 1,
                      .retry = &minute, .on_done = count_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&parked) == 3, 60000));
    ax_spec hs = {.fn = hog, .priority = AX_PRIO_HIGH, .timeout_ms = 50, .on_done = hog_done};
    CHECK_EQ(ax_submit(s, &hs, NULL), 0);
    /* The hog's attempt ended (its on_done holds ax-finish) and the three
     * sleepers' too: every slot free, nothing armed or queued. */
    CHECK(WAIT_UNTIL(atomic_load(&hog_in_done) && test_stats(s).running == 0, 60000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.queued[AX_PRIO_HIGH], 0);
    CHECK_EQ(st.delayed, 3); /* the three retries, about to start their back-off */
    int admitted = 0, full = 0;
    for (int k = 0; k < 10; k++) {
        ax_spec sp = {.fn = filler, .priority = AX_PRIO_HIGH, .timeout_ms = 10000,
                      .on_done = count_done};
        int rc = ax_submit(s, &sp, NULL);
        if (rc == 0)
            admitted++;
        else if (rc == AX_EFULL)
            full++;
    }
    fprintf(stderr, "fillers admitted %d, refused AX_EFULL %d (retried %llu)\n", admitted, full,
            (unsigned long long)test_stats(s).retried);
    CHECK_EQ(admitted, 1); /* capacity 4 less the three retries */
    CHECK_EQ(full, 9);
    atomic_store(&release, 1);
    /* The retries are armed once ax-finish reaches them; still one room. */
    CHECK(WAIT_UNTIL(test_stats(s).retried == 3, 60000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    st = test_stats(s);
    CHECK_EQ(st.delayed, 0);
    CHECK_EQ(atomic_load(&done), 3 + 1 + admitted); /* every admitted task once */
    ax_free(s);
    return 0;
}
