/* test_events_pipe.c - the JSON event sink as a pipe that fails or stalls
 * (a new user's trial of 2a0c1a9).
 *
 * A. The pipe's reader has left, SIGPIPE at its default: the event thread's
 *    writes used to raise SIGPIPE and kill the host (exit by signal 13, no
 *    output); with SIGPIPE ignored the lost events were counted nowhere.
 *    Now each write fails with EPIPE: the host lives, every event of the
 *    N tasks (3 each) is counted in ax_events_dropped, and stderr says once
 *    that the sink failed.
 * B. The pipe's reader never reads: the event thread blocks in its write
 *    once the pipe is full, and ax_free waited for it forever. Now ax_free
 *    returns (liveness bound only: a shared machine), says why on stderr
 *    and leaks the scheduler.
 * Each case in a forked child (B leaks on purpose).
 */
#include "fork_capture.h"

#include <stdlib.h>
#include <string.h>

#define N 200

static atomic_int done;

static int empty(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&done, 1);
}

static ax_sched *sched_with_sink(FILE *f, unsigned budget_ms)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.shutdown_timeout_ms = budget_ms;
    ax_sched *s = NULL;
    if (ax_new(&c, &s) != 0 || ax_events_json(s, f) != 0) _exit(11);
    return s;
}

static void submit_all(ax_sched *s, int n)
{
    for (int i = 0; i < n; i++) {
        ax_spec sp = {.fn = empty, .timeout_ms = 10000, .on_done = on_done};
        if (ax_submit(s, &sp, NULL) != 0) _exit(12);
    }
    if (!WAIT_UNTIL(atomic_load(&done) == n, 60000)) _exit(13);
}

static void child_reader_gone(int out_fd)
{
    if (dup2(out_fd, STDERR_FILENO) < 0) _exit(10);
    signal(SIGPIPE, SIG_DFL);
    int p[2];
    if (pipe(p) != 0) _exit(14);
    close(p[0]); /* nobody will ever read */
    FILE *f = fdopen(p[1], "w");
    ax_sched *s = sched_with_sink(f, 5000);
    submit_all(s, N);
    /* on_done may run before its task's terminal event is emitted: the
     * shutdown has every task ended, then the flush writes all. */
    if (ax_shutdown(s, 5000) != 0) _exit(16);
    if (ax_events_flush(s) != 0) _exit(15);
    fprintf(stderr, "dropped %llu\n", (unsigned long long)ax_events_dropped(s));
    ax_free(s);
    fclose(f);
    fprintf(stderr, "freed\n");
    fflush(stderr);
    _exit(0);
}

static void child_reader_stalls(int out_fd)
{
    if (dup2(out_fd, STDERR_FILENO) < 0) _exit(10);
    int p[2];
    if (pipe(p) != 0) _exit(14);
    FILE *f = fdopen(p[1], "w"); /* p[0] stays open, never read */
    ax_sched *s = sched_with_sink(f, 300);
    submit_all(s, 2000); /* ~6 000 lines: the pipe holds a few hundred */
    if (ax_shutdown(s, 300) != 0) _exit(16);
    child_free_timed(s);
    _exit(0);
}

int main(void)
{
    static char out[65536];

    fork_capture_ok("A", child_reader_gone, out, sizeof out, 120000); /* not killed by SIGPIPE */
    const char *d = strstr(out, "dropped ");
    CHECK(d != NULL);
    CHECK_EQ(strtoull(d + strlen("dropped "), NULL, 10), 3ull * N);
    CHECK(strstr(out, "writing events to the JSON sink failed (Broken pipe); the events of each batch") != NULL);
    CHECK(strstr(out, "freed") != NULL);

    atomic_store(&done, 0);
    fork_capture_ok("B", child_reader_stalls, out, sizeof out, 60000);
    fork_capture_free_ms(out);
    CHECK(strstr(out, "the event thread was still writing to its sink") != NULL);
    puts("test_events_pipe: ok");
    return 0;
}
