/* the `leftover` mark is lost when a fresh registration replaces a
 * stale one. A waits to read fd N; N is closed while the file (F1) lives on
 * in a dup, so the kernel keeps the (N, F1) entry. N is reused by a new
 * socket F2 and B waits on it: its ADD succeeds, fd_detach_all marks the
 * slot leftover -- and `*e = fresh` overwrites the mark with the value read
 * before the detach (false). B's wait ends normally (DEL of (N, F2)). Then
 * dup2 brings F1 back to N: D's ADD gets EEXIST from our own (N, F1) entry,
 * and with leftover false it is refused AX_EBUSY "in use by ... ax_http" --
 * the false EBUSY 62cf71b meant to fix, by another path.
 * Expected: D's wait on the readable fd returns 0. */
#include "util.h"

#include <poll.h>
#include <sys/socket.h>

#define N 300
static atomic_int a_parked, a_done, b_parked, b_done, d_done, marker_ran;
static atomic_int a_rc = 99, b_rc = 99, d_rc = 99;
static char d_err[256];

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_parked, 1);
    atomic_store(&a_rc, ax_wait_fd(t, N, AX_READ, 3000)); /* detached: waits out its bound */
    atomic_store(&a_done, 1);
    return 0;
}

static int task_b(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&b_parked, 1);
    atomic_store(&b_rc, ax_wait_fd(t, N, AX_READ, 5000));
    atomic_store(&b_done, 1);
    return 0;
}

static int task_d(ax_task *t, void *arg)
{
    (void)arg;
    int rc = ax_wait_fd(t, N, AX_READ, 5000);
    if (rc)
        snprintf(d_err, sizeof d_err, "%s: %s", ax_strerror(rc), ax_error_detail());
    atomic_store(&d_rc, rc);
    atomic_store(&d_done, 1);
    return 0;
}

static int marker(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&marker_ran, 1);
    return 0;
}

static void sync_worker(ax_sched *s)
{
    atomic_store(&marker_ran, 0);
    ax_spec sp = {.fn = marker, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&marker_ran), 60000));
}

int main(void)
{
    ax_sched *s = test_sched(1, 16);
    int sv1[2], sv2[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv1), 0); /* F1 */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv2), 0); /* F2 */
    CHECK_EQ(dup2(sv1[0], N), N);

    ax_spec sp = {.fn = task_a, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_parked), 60000));
    sync_worker(s);
    CHECK_EQ(close(N), 0); /* (N, F1) stays: F1 lives in sv1[0] */

    CHECK_EQ(dup2(sv2[0], N), N); /* N reused by F2 */
    sp = (ax_spec){.fn = task_b, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&b_parked), 60000));
    sync_worker(s);
    CHECK_EQ(write(sv2[1], "y", 1), 1);
    CHECK(WAIT_UNTIL(atomic_load(&b_done), 60000));
    CHECK_EQ(atomic_load(&b_rc), 0);

    CHECK_EQ(dup2(sv1[0], N), N); /* the number names F1 again */
    CHECK_EQ(write(sv1[1], "x", 1), 1);
    struct pollfd p = {.fd = N, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 0), 1);

    sp = (ax_spec){.fn = task_d, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&d_done), 60000));
    fprintf(stderr, "D's wait on the readable fd %d returned %d (%s)\n", N, atomic_load(&d_rc),
            d_err);
    CHECK_EQ(atomic_load(&d_rc), 0);

    CHECK(WAIT_UNTIL(atomic_load(&a_done), 60000));
    CHECK_EQ(atomic_load(&a_rc), AX_ETIMEDOUT);
    close(N);
    close(sv1[0]);
    close(sv1[1]);
    close(sv2[0]);
    close(sv2[1]);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
