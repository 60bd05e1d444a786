/* test_report_blocked_stderr.c - a stderr nobody reads does not stop the
 * watchdog (obs/report.c).
 *
 * The watchdog wrote its own lines with fprintf: a callback overrun (under
 * the callback pool's lock) and a LINGERING task when no event sink
 * listens. With stderr a full pipe (a logger that stopped reading), the
 * first such line blocked it for good: a worker held by a hog kept every
 * other task on it past its deadline until the hog returned. Now the
 * lines are queued and written by their own thread.
 *
 * A child process whose stderr is a pipe filled to the brim: one worker,
 * callback_timeout_ms 20, grace_ms 20.
 *   1. T1 times out while it sleeps; its on_timeout blocks until told:
 *      past 20 ms the watchdog counts an overrun and has a line to write;
 *   2. S parks (ax_sleep, 30 ms timeout), then H, 20 ms timeout, spins
 *      until S's on_done has run and H has been reported lingering (a
 *      second line; liveness bound 10 s): only the watchdog can end S
 *      while H holds the worker; it must, while H still spins;
 *   3. the child tells the parent, which starts reading the pipe; the
 *      child waits for its lines to be written and frees the scheduler.
 * The parent checks the child's exit status and that both lines arrived,
 * in order. The old code: S ended only when H gave up, 10 s later. */
#include "util.h"

#include "internal.h" /* report_drain: the lines written before the exit */

#include <fcntl.h>
#include <sys/wait.h>

static atomic_int t1_release, t1_in_cb, s_done, s_state = -1, h_spinning, s_while_h, h_release;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    ax_sleep(t, 60000);
    return 0;
}

static void t1_on_timeout(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_store(&t1_in_cb, 1);
    WAIT_UNTIL(atomic_load(&t1_release), 60000);
}

static void s_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&s_state, (int)r->state);
    atomic_store(&s_while_h, atomic_load(&h_spinning));
    atomic_store(&s_done, 1);
}

static int hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&h_spinning, 1);
    uint64_t end = ax_now_ns() + 10000000000ull * TEST_SLOW;
    while (!(atomic_load(&s_done) && atomic_load(&h_release)) && ax_now_ns() < end)
        ;
    atomic_store(&h_spinning, 0);
    return 0;
}

static int child(int status_fd)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.callback_timeout_ms = 20;
    c.grace_ms = 20;
    ax_sched *s = test_sched_cfg(&c);
    ax_spec t1 = {.fn = sleeper, .timeout_ms = 10, .on_timeout = t1_on_timeout};
    CHECK_EQ(ax_submit(s, &t1, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&t1_in_cb), 30000 * TEST_SLOW));
    CHECK(WAIT_UNTIL(test_stats(s).callback_overruns == 1, 30000 * TEST_SLOW));

    ax_spec sp = {.fn = sleeper, .timeout_ms = 30, .on_done = s_on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    usleep(5000); /* S parks first (a liveness matter only: H checks nothing about it) */
    ax_spec hp = {.fn = hog, .timeout_ms = 20};
    CHECK_EQ(ax_submit(s, &hp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&s_done), 60000 * TEST_SLOW));
    int ok = atomic_load(&s_state) == AX_STATE_TIMED_OUT && atomic_load(&s_while_h);
    /* H lingers too (20 ms past its deadline, still spinning): a line. */
    CHECK(WAIT_UNTIL(test_stats(s).lingering == 1 || !atomic_load(&h_spinning), 30000));
    atomic_store(&h_release, 1);

    atomic_store(&t1_release, 1);
    char one = ok ? 'y' : 'n';
    CHECK_EQ(write(status_fd, &one, 1), 1);
    report_drain(60000); /* the parent reads now */
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    return ok ? 0 : 1;
}

int main(void)
{
    int err[2], st[2];
    CHECK_EQ(pipe(err), 0);
    CHECK_EQ(pipe(st), 0);
    /* Fill the pipe: stderr that nobody reads. */
    int fl = fcntl(err[1], F_GETFL);
    CHECK_EQ(fcntl(err[1], F_SETFL, fl | O_NONBLOCK), 0);
    char junk[4096];
    memset(junk, '.', sizeof junk);
    size_t filled = 0;
    for (;;) {
        ssize_t w = write(err[1], junk, sizeof junk);
        if (w <= 0)
            break;
        filled += (size_t)w;
    }
    CHECK_EQ(fcntl(err[1], F_SETFL, fl), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(err[0]);
        close(st[0]);
        dup2(err[1], 2);
        close(err[1]);
        _exit(child(st[1]));
    }
    close(err[1]);
    close(st[1]);

    /* The child's word that S has ended (60 s: liveness only). */
    char word = 0;
    struct timeval tv = {60 * TEST_SLOW, 0};
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(st[0], &rd);
    int ready = select(st[0] + 1, &rd, NULL, NULL, &tv);
    if (ready == 1)
        CHECK_EQ(read(st[0], &word, 1), 1);
    /* Drain its stderr to the end (the child exits, or is killed). */
    if (ready != 1)
        kill(pid, SIGKILL);
    size_t cap = filled + (1u << 20), len = 0;
    char *out = malloc(cap + 1);
    CHECK(out != NULL);
    for (;;) {
        ssize_t n = read(err[0], out + len, cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == cap)
            break;
    }
    out[len] = 0;
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    const char *text = out + (len > filled ? filled : len); /* past the filling */
    fprintf(stderr, "child's word %c, exit %d; its stderr after the filling:\n%s",
            word ? word : '-', WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
    CHECK_EQ(ready, 1);
    CHECK_EQ(word, 'y'); /* S ended TIMED_OUT while H held the worker */
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const char *over = strstr(text, "ax: an on_timeout of task");
    const char *ling = strstr(text, "ax: LINGERING task");
    CHECK(over != NULL);
    CHECK(ling != NULL);
    CHECK(over < ling); /* in order */
    free(out);
    return 0;
}
