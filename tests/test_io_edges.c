/* ax_read / ax_write at their edges (a new user's trial found each wrong):
 *   - ax_write to a pipe whose reader has gone returns AX_ESYS (EPIPE): the
 *     process is not killed by SIGPIPE (it was: exit 141), and no SIGPIPE
 *     is left pending on the worker;
 *   - ax_write of 0 bytes after the attempt was cancelled returns
 *     AX_ECANCELED, as every blocking call does (it returned 0);
 *   - a len above SSIZE_MAX is AX_EINVAL, a bad argument (it was AX_ESYS
 *     "Bad address");
 *   - every message names the call made: a negative or closed fd said
 *     "fd -1: Bad file descriptor", a broken pipe "write: Broken pipe"
 *     (a new user's trial). */
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>

static int pfd[2];
static atomic_long pipe_rc = 99, zero_rc = 99, big_read = 99, big_write = 99;
static atomic_int pending_after = -1, done;
static char pipe_msg[256], neg_msg[256], closed_msg[256], accept_msg[256];

static void detail_to(char *out)
{
    snprintf(out, 256, "%s", ax_error_detail());
}

static int to_pipe(ax_task *t, void *arg)
{
    (void)arg;
    char b[64] = {0};
    atomic_store(&pipe_rc, (long)ax_write(t, pfd[1], b, sizeof b, 10000));
    detail_to(pipe_msg);
    CHECK_EQ(ax_read(t, -1, b, 1, 10000), AX_EINVAL);
    detail_to(neg_msg);
    int gone = dup(pfd[1]);
    CHECK(gone >= 0);
    close(gone); /* nothing opens a file in between: still closed below */
    CHECK_EQ(ax_write(t, gone, b, 1, 10000), AX_EINVAL);
    detail_to(closed_msg);
    CHECK_EQ(ax_accept(t, pfd[1], NULL, NULL, 10000), AX_EINVAL); /* not a socket */
    detail_to(accept_msg);
    sigset_t p;
    sigpending(&p);
    atomic_store(&pending_after, sigismember(&p, SIGPIPE));
    atomic_store(&big_read, (long)ax_read(t, pfd[1], b, (size_t)SSIZE_MAX + 1, 10000));
    atomic_store(&big_write, (long)ax_write(t, pfd[1], b, SIZE_MAX, 10000));
    atomic_fetch_add(&done, 1);
    return 0;
}

static int cancelled_write(ax_task *t, void *arg)
{
    (void)arg;
    ax_cancel(ax_task_sched(t), ax_task_id(t));
    atomic_store(&zero_rc, (long)ax_write(t, pfd[1], "", 0, 10000));
    atomic_fetch_add(&done, 1);
    return 0;
}

int main(void)
{
    CHECK_EQ(pipe(pfd), 0);
    close(pfd[0]); /* no reader */
    ax_sched *s = test_sched(1, 4);
    ax_spec sp = {.fn = to_pipe, .timeout_ms = 60000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&done) == 1, 60000));
    CHECK_EQ(atomic_load(&pipe_rc), AX_ESYS);
    CHECK_STR(pipe_msg, "ax_write: write: Broken pipe");
    CHECK_STR(neg_msg, "ax_read: fd -1: Bad file descriptor");
    char want[256];
    CHECK(strncmp(closed_msg, "ax_write: fd ", 13) == 0 && strstr(closed_msg, ": Bad file descriptor"));
    snprintf(want, sizeof want, "ax_accept: accept: fd %d: Socket operation on non-socket", pfd[1]);
    CHECK_STR(accept_msg, want);
    CHECK_EQ(atomic_load(&pending_after), 0);
    CHECK_EQ(atomic_load(&big_read), AX_EINVAL);
    CHECK_EQ(atomic_load(&big_write), AX_EINVAL);

    sp = (ax_spec){.fn = cancelled_write, .timeout_ms = 60000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&done) == 2, 60000));
    CHECK_EQ(atomic_load(&zero_rc), AX_ECANCELED);

    CHECK_EQ(ax_shutdown(s, 10000), 0);
    ax_free(s);
    close(pfd[1]);
    printf("ok\n");
    return 0;
}
