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
 *   2. H (20 ms timeout) spins on the one worker and submits S, whose
 *      deadline_ns is 30 ms away: S stays queued, and only the watchdog
 *      can end it while H holds the worker; it must, while H still spins;
 *   3. H spins on until it has been reported lingering (grace_ms past its
 *      deadline: the second line), then submits S2 the same way: the
 *      watchdog must end S2 too, after writing the LINGERING line;
 *   4. the child tells the parent, which starts reading the pipe; the
 *      child waits for its lines to be written and frees the scheduler.
 * Each wait of H is bounded at 10 s (liveness). The parent checks the
 * child's exit status and that both lines arrived, in order. The old code:
 * S ended only when H gave up, 10 s later; with only the LINGERING line
 * written the old way, S2 did (review of 07802f5). */
#include "util.h"

#include "internal.h" /* report_drain: the lines written before the exit */

#include <fcntl.h>
#include <sys/wait.h>

static ax_sched *S_;
static atomic_int t1_release, t1_in_cb, h_spinning, lingered;
static atomic_int s_done[2], s_state[2] = {-1, -1}, s_while_h[2];

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
    int k = (int)(intptr_t)arg;
    atomic_store(&s_state[k], (int)r->state);
    atomic_store(&s_while_h[k], atomic_load(&h_spinning));
    atomic_store(&s_done[k], 1);
}

static int never(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

/* Queued behind H with a deadline 30 ms away: only the watchdog ends it. */
static void submit_s(int k)
{
    ax_spec sp = {.fn = never, .timeout_ms = 1000, .deadline_ns = ax_now_ns() + 30000000u,
                  .on_done = s_on_done, .cb_arg = (void *)(intptr_t)k};
    CHECK_EQ(ax_submit(S_, &sp, NULL), AX_OK);
}

static void spin_until(atomic_int *flag)
{
    uint64_t end = ax_now_ns() + 10000000000ull * TEST_SLOW;
    while (!atomic_load(flag) && ax_now_ns() < end)
        ;
}

static int hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&h_spinning, 1);
    submit_s(0);
    spin_until(&s_done[0]);
    spin_until(&lingered); /* set by the child's main thread */
    submit_s(1);
    spin_until(&s_done[1]);
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
    S_ = s;
    ax_spec t1 = {.fn = sleeper, .timeout_ms = 10, .on_timeout = t1_on_timeout};
    CHECK_EQ(ax_submit(s, &t1, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&t1_in_cb), 30000 * TEST_SLOW));
    CHECK(WAIT_UNTIL(test_stats(s).callback_overruns == 1, 30000 * TEST_SLOW));

    ax_spec hp = {.fn = hog, .timeout_ms = 20};
    CHECK_EQ(ax_submit(s, &hp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&s_done[0]), 60000 * TEST_SLOW));
    /* H lingers (grace_ms past its deadline, still spinning): a line. */
    CHECK(WAIT_UNTIL(test_stats(s).lingering == 1 || !atomic_load(&h_spinning), 60000));
    atomic_store(&lingered, 1);
    CHECK(WAIT_UNTIL(atomic_load(&s_done[1]), 60000 * TEST_SLOW));
    int ok = 1;
    for (int k = 0; k < 2; k++)
        ok &= atomic_load(&s_state[k]) == AX_STATE_TIMED_OUT && atomic_load(&s_while_h[k]);
    ok &= test_stats(s).lingering == 1;

    atomic_store(&t1_release, 1);
    char one = ok ? 'y' : 'n';
    CHECK_EQ(write(status_fd, &one, 1), 1);
    /* The parent reads now: wait until both lines are written (the
     * drain's own bound is 100 ms; liveness: 60 s). */
    CHECK(WAIT_UNTIL(report_drain(UINT64_MAX), 60000 * TEST_SLOW));
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
