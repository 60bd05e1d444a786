/* test_events_stuck_sink.c - lossless events and a sink that takes nothing
 * at the end of a scheduler's life (review, 2026-12-06).
 *
 * A-C: lossless mode, a sink that stopped taking events (a JSON file that
 * is a pipe nobody reads; an events callback that never returns), 4 000
 * tasks queued behind a 60 s delay. Shutting down cancels them, one
 * CANCELLED event each, into a ring the event thread no longer empties:
 * the cancelling thread waited for room for ever, so ax_free never
 * returned (5 of 5 runs) although ax.h promises it returns within
 * shutdown_timeout_ms, leaking the scheduler, when the event thread is
 * stuck in its sink. Now lossless producers wait only until the shutdown's
 * time has run out, then drop and count. Each case runs in a forked child
 * (ax_free leaks the scheduler there) and must say it returned:
 *   A  ax_free alone (shutdown_timeout_ms 1000)
 *   B  ax_shutdown(s, 200) first: returns 0, every task cancelled, events
 *      past the bound counted in ax_events_dropped; then ax_free
 *   C  an events callback that blocks for good, then ax_free
 * D: an events callback that reads ax_stats_get while ax_free runs (ax.h:
 *    a callback "may read stats"): ax_free freed the callback pool, whose
 *    overrun and drop counts the stats read, before it stopped the event
 *    thread (TSan: a race with the free, 4 of 4 runs). In this process, so
 *    that TSan's report fails the test.
 * E: a sink slower than shutdown_timeout_ms allows (a callback of 1 ms an
 *    event, 3 000 events buffered, 500 ms): ax_free leaked the scheduler and
 *    its event thread went on calling the callback after ax_free returned,
 *    when the host had freed its argument (new-user trial: ASan, 4 of 4
 *    runs). Now the sink is given up a few ms before the time runs out: not
 *    one call after ax_free returns, the thread joined, nothing leaked.
 */
#include "fork_capture.h"

#include <string.h>

#define N 4000

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 100000);
}

static atomic_int block_cb;
static atomic_int cb_calls;

static void blocking_cb(const ax_event *e, void *arg)
{
    (void)e;
    (void)arg;
    atomic_fetch_add(&cb_calls, 1);
    while (atomic_load(&block_cb))
        usleep(1000);
}

/* Delayed tasks, then lossless on: their SUBMITTED events alone fill the
 * pipe and block the event thread in its write (those past the ring are
 * dropped: lossless was off). */
static ax_sched *setup(int out_fd, bool json)
{
    if (dup2(out_fd, STDERR_FILENO) < 0) _exit(10);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.shutdown_timeout_ms = 1000;
    c.capacity[AX_PRIO_NORMAL] = 2 * N;
    ax_sched *s = NULL;
    if (ax_new(&c, &s) != 0) _exit(11);
    if (json) {
        int p[2];
        if (pipe(p) != 0) _exit(12);
        FILE *f = fdopen(p[1], "w"); /* p[0] stays open, never read */
        if (!f || ax_events_json(s, f) != 0) _exit(13);
    } else {
        if (ax_events_callback(s, blocking_cb, NULL) != 0) _exit(13);
    }
    for (int i = 0; i < N; i++) {
        ax_spec sp = {.fn = sleeper, .timeout_ms = 100000, .delay_ms = 60000};
        if (ax_submit(s, &sp, NULL) != 0) _exit(14);
    }
    if (!json) { /* the next event's callback never returns */
        if (ax_events_flush(s) != 0) _exit(15);
        atomic_store(&block_cb, 1);
    }
    if (ax_events_lossless(s, true) != 0) _exit(16);
    return s;
}

static void child_free_json(int fd)
{
    ax_sched *s = setup(fd, true);
    ax_free(s);
    fprintf(stderr, "ax_free returned\n");
    fflush(stderr);
    _exit(0);
}

static void child_shutdown_json(int fd)
{
    ax_sched *s = setup(fd, true);
    uint64_t before = ax_events_dropped(s);
    int rc = ax_shutdown(s, 200);
    ax_stats st;
    if (ax_stats_get(s, &st) != 0) _exit(20);
    fprintf(stderr, "ax_shutdown %d cancelled %llu dropped_more %d\n", rc,
            (unsigned long long)st.cancelled, ax_events_dropped(s) > before);
    ax_free(s);
    fprintf(stderr, "ax_free returned\n");
    fflush(stderr);
    _exit(0);
}

static void child_free_callback(int fd)
{
    ax_sched *s = setup(fd, false);
    ax_free(s);
    fprintf(stderr, "ax_free returned\n");
    fflush(stderr);
    _exit(0);
}

static ax_sched *stats_s;
static atomic_int stats_reads;

static void stats_cb(const ax_event *e, void *arg)
{
    (void)e;
    (void)arg;
    ax_stats st;
    if (ax_stats_get(stats_s, &st) == 0)
        atomic_fetch_add(&stats_reads, 1);
    usleep(20);
}

static atomic_int slow_calls, late_calls, freed_flag;

static void slow_cb(const ax_event *e, void *arg)
{
    (void)e;
    (void)arg;
    if (atomic_load(&freed_flag))
        atomic_fetch_add(&late_calls, 1);
    atomic_fetch_add(&slow_calls, 1);
    usleep(1000);
}

static int quick(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

int main(void)
{
    static char out[65536];
    const int wait_ms = 60000 * TEST_SLOW;

    fork_capture_ok("A: ax_free, JSON pipe nobody reads", child_free_json, out, sizeof out,
                    wait_ms);
    CHECK(strstr(out, "ax_free returned") != NULL);
    CHECK(strstr(out, "leaking the scheduler") != NULL); /* the event thread is stuck */

    fork_capture_ok("B: ax_shutdown, JSON pipe nobody reads", child_shutdown_json, out,
                    sizeof out, wait_ms);
    CHECK(strstr(out, "ax_shutdown 0 cancelled 4000 dropped_more 1") != NULL);
    CHECK(strstr(out, "ax_free returned") != NULL);

    fork_capture_ok("C: ax_free, events callback that never returns", child_free_callback, out,
                    sizeof out, wait_ms);
    CHECK(strstr(out, "ax_free returned") != NULL);
    CHECK(strstr(out, "leaking the scheduler") != NULL);

    /* D */
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.shutdown_timeout_ms = 30000;
    c.capacity[AX_PRIO_NORMAL] = 2 * N;
    CHECK_EQ(ax_new(&c, &stats_s), 0);
    CHECK_EQ(ax_events_callback(stats_s, stats_cb, NULL), 0);
    int n = TEST_SLOW > 1 ? N / 4 : N;
    for (int i = 0; i < n; i++) {
        ax_spec sp = {.fn = sleeper, .timeout_ms = 100000, .delay_ms = 60000};
        CHECK_EQ(ax_submit(stats_s, &sp, NULL), 0);
    }
    CHECK_EQ(ax_events_flush(stats_s), 0);
    int before = atomic_load(&stats_reads);
    CHECK_EQ(before, n); /* one read a SUBMITTED event */
    ax_free(stats_s); /* n CANCELLED events, each a stats read, while the pool stops */
    CHECK_EQ(atomic_load(&stats_reads), 2 * n);

    /* E */
    ax_sched *s = NULL;
    ax_config_default(&c);
    c.workers = 2;
    c.shutdown_timeout_ms = 500;
    CHECK_EQ(ax_new(&c, &s), 0);
    CHECK_EQ(ax_events_callback(s, slow_cb, NULL), 0);
    for (int i = 0; i < 1000; i++) {
        ax_spec sp = {.fn = quick, .timeout_ms = 10000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    ax_free(s);
    atomic_store(&freed_flag, 1);
    int at_free = atomic_load(&slow_calls);
    usleep(300 * 1000);
    CHECK_EQ(atomic_load(&late_calls), 0);
    CHECK_EQ(atomic_load(&slow_calls), at_free);
    CHECK(at_free < 3000); /* it was given up, not waited for */
    puts("test_events_stuck_sink: ok");
    return 0;
}
