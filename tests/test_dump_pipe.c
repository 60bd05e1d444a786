/* test_dump_pipe.c - ax_dump_on_signal with a dump file that fails or
 * blocks (review of 2a0c1a9).
 *
 * A. The file is a pipe whose reader left, SIGPIPE at its default: the
 *    dump thread's write raised SIGPIPE on ax's thread and killed the host
 *    (exit by signal 13). Now the write fails with EPIPE and the host lives.
 * B. The file is a pipe nobody reads, and the dump (100 tasks, ~10 KB, a
 *    one-page pipe) fills it: the dump thread held the registry's lock while
 *    blocked, so ax_free waited for it forever; and a storm of 70 000
 *    signals filled the wake-up pipe, whose write in the handler then
 *    blocked the signalling thread for good. Now the storm returns, and
 *    ax_free returns within its budget (liveness bound only), says why on
 *    stderr and leaks the scheduler.
 * C. Turning the dump off while one is being written waits for it (below).
 * D. ax_dump itself, on the host's thread, into a pipe whose reader left,
 *    SIGPIPE at its default: the process was killed (exit by signal 13, a
 *    new user's trial), where ax.h promises AX_ESYS. Now AX_ESYS with
 *    EPIPE's text, the host alive and no SIGPIPE left pending.
 * Each case in a forked child (B leaks on purpose).
 */
#include "fork_capture.h"

#include <stdio.h>
#include <string.h>

static int parked(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 600000);
}

static ax_sched *sched_new(unsigned budget_ms)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.shutdown_timeout_ms = budget_ms;
    c.max_concurrency = 2000;
    ax_sched *s = NULL;
    if (ax_new(&c, &s) != 0) _exit(11);
    return s;
}

/* In a child, stderr to out_fd and SIGPIPE at its default: a file whose
 * pipe has no reader. */
static FILE *reader_gone_file(int out_fd)
{
    if (dup2(out_fd, STDERR_FILENO) < 0) _exit(10);
    signal(SIGPIPE, SIG_DFL);
    int p[2];
    if (pipe(p) != 0) _exit(14);
    close(p[0]);
    return fdopen(p[1], "w");
}

static void child_reader_gone(int out_fd)
{
    FILE *f = reader_gone_file(out_fd);
    setvbuf(f, NULL, _IONBF, 0);
    ax_sched *s = sched_new(5000);
    if (ax_dump_on_signal(s, SIGUSR1, f) != 0) _exit(15);
    raise(SIGUSR1);
    usleep(300 * 1000); /* the dump thread writes, and fails */
    ax_free(s);
    fprintf(stderr, "alive\n");
    fflush(stderr);
    _exit(0);
}

static void child_dump_reader_gone(int out_fd)
{
    FILE *f = reader_gone_file(out_fd);
    ax_sched *s = sched_new(5000);
    int rc = ax_dump(s, f, 0);
    sigset_t pending;
    sigpending(&pending);
    fprintf(stderr, "alive: rc %d, detail \"%s\", SIGPIPE pending %d\n", rc, ax_error_detail(),
            sigismember(&pending, SIGPIPE));
    fflush(stderr);
    ax_free(s);
    _exit(0);
}

static atomic_int release_b;

/* B's tasks: live while the dump copies them, then let go, so that
 * ax_free has no task to wait for (under TSan on a busy machine, ending
 * 1 000 parked tasks took longer than the budget: CI). */
static int held_until_released(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&release_b))
        if (ax_sleep(t, 20) != 0) return 1;
    return 0;
}

static void child_reader_stalls(int out_fd)
{
    if (dup2(out_fd, STDERR_FILENO) < 0) _exit(10);
    int p[2];
    if (pipe(p) != 0) _exit(14);
    /* A one-page pipe: the dump of 100 tasks (~10 KB) fills it. */
    if (fcntl(p[1], F_SETPIPE_SZ, 4096) < 0) _exit(17);
    FILE *f = fdopen(p[1], "w"); /* p[0] stays open, never read */
    /* 3 s: the worker leaves within it (300 ms was too short under TSan
     * on a loaded machine: ax_free leaked for a worker still held, not
     * for the dump, and TSan reported the thread). */
    ax_sched *s = sched_new(3000);
    for (int i = 0; i < 100; i++) {
        ax_spec sp = {.fn = held_until_released, .timeout_ms = 600000};
        if (ax_submit(s, &sp, NULL) != 0) _exit(12);
    }
    if (!WAIT_UNTIL(test_stats(s).running == 100, 60000)) _exit(13);
    if (ax_dump_on_signal(s, SIGUSR1, f) != 0) _exit(15);
    raise(SIGUSR1);
    usleep(300 * 1000); /* the dump fills the pipe and blocks */
    for (int i = 0; i < 70000; i++)
        raise(SIGUSR1);
    fprintf(stderr, "storm returned\n");
    atomic_store(&release_b, 1);
    if (!WAIT_UNTIL(test_stats(s).running == 0, 60000)) _exit(18);
    child_free_timed(s);
    _exit(0);
}

/* C: a slow file (each write 5 ms): ax_dump_on_signal(s, 0) returns only
 * once the dump in progress is done with it, so the caller may close it
 * (review: it returned at once and the dump went on writing into a closed
 * FILE). */
static atomic_int writes, in_write, off_returned, late_writes;

static ssize_t slow_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    (void)buf;
    atomic_store(&in_write, 1);
    usleep(5 * 1000);
    atomic_fetch_add(&writes, 1);
    if (atomic_load(&off_returned))
        atomic_fetch_add(&late_writes, 1);
    return (ssize_t)n;
}

static void off_waits_for_dump(void)
{
    ax_sched *s = sched_new(5000);
    for (int i = 0; i < 20; i++) {
        ax_spec sp = {.fn = parked, .timeout_ms = 600000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    cookie_io_functions_t io = {.write = slow_write};
    FILE *f = fopencookie(NULL, "w", io);
    CHECK(f != NULL);
    setvbuf(f, NULL, _IONBF, 0); /* every line a write: the dump takes seconds */
    CHECK_EQ(ax_dump_on_signal(s, SIGUSR2, f), 0);
    raise(SIGUSR2);
    CHECK(WAIT_UNTIL(atomic_load(&in_write) == 1, 30000));
    CHECK_EQ(ax_dump_on_signal(s, 0, NULL), 0);
    atomic_store(&off_returned, 1);
    usleep(100 * 1000);
    printf("C: %d writes, %d after ax_dump_on_signal(s, 0) returned\n", atomic_load(&writes),
           atomic_load(&late_writes));
    CHECK_EQ(atomic_load(&late_writes), 0);
    fclose(f);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(void)
{
    static char out[65536];

    fork_capture_ok("A", child_reader_gone, out, sizeof out, 60000); /* not killed by SIGPIPE */
    CHECK(strstr(out, "alive") != NULL);

    fork_capture_ok("D", child_dump_reader_gone, out, sizeof out, 60000);
    CHECK(strstr(out, "alive: rc -") != NULL);
    char want[128];
    snprintf(want, sizeof want, "alive: rc %d, detail \"ax_dump: writing the dump failed: %s\", "
                                "SIGPIPE pending 0",
             AX_ESYS, strerror(EPIPE));
    CHECK(strstr(out, want) != NULL);

    fork_capture_ok("B", child_reader_stalls, out, sizeof out, 60000);
    CHECK(strstr(out, "storm returned") != NULL);
    fork_capture_free_ms(out);
    CHECK(strstr(out, "a dump on signal (ax_dump_on_signal) was still writing") != NULL);
    off_waits_for_dump();
    puts("test_dump_pipe: ok");
    return 0;
}
