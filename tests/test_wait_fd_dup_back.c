/* An fd closed while a task waits on it, its file kept open by a dup, and
 * the number then given back to the same file (dup2(keep, fd) -- or any
 * dup(keep) that lands on the lowest free number). The waiter's bound ends;
 * its wake-up's EPOLL_CTL_DEL by the closed number fails (EBADF), so the
 * kernel keeps the (fd, file) epoll entry. Once the number names that file
 * again, every ax_wait_fd on it on that worker gets EPOLL_CTL_ADD EEXIST
 * and is refused AX_EBUSY "in use by this worker's own I/O (an ax_http
 * transfer)" -- with no ax_http anywhere, and for as long as the file lives.
 * Expected: the wait on the readable-again fd returns 0. */
#include "util.h"

#include <poll.h>
#include <sys/socket.h>

static int fd;
static atomic_int a_parked, a_done, d_done;
static atomic_int a_rc = 99, d_rc = 99;
static char d_err[256];

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_parked, 1);
    atomic_store(&a_rc, ax_wait_fd(t, fd, AX_READ, 300)); /* never readable while it waits */
    atomic_store(&a_done, 1);
    return 0;
}

static int task_d(ax_task *t, void *arg)
{
    (void)arg;
    int rc = ax_wait_fd(t, fd, AX_READ, 5000);
    if (rc)
        snprintf(d_err, sizeof d_err, "%s: %s", ax_strerror(rc), ax_error_detail());
    atomic_store(&d_rc, rc);
    atomic_store(&d_done, 1);
    return 0;
}

static atomic_int marker_ran;
static int marker(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&marker_ran, 1);
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 16);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fd = sv[0];
    int keep = dup(sv[0]);
    CHECK(keep >= 0);
    ax_spec sp = {.fn = task_a, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_parked), 60000));
    sp = (ax_spec){.fn = marker, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&marker_ran), 60000));
    close(fd); /* while A waits; the file lives on in keep */
    CHECK(WAIT_UNTIL(atomic_load(&a_done), 60000));
    CHECK_EQ(atomic_load(&a_rc), AX_ETIMEDOUT);

    CHECK_EQ(dup2(keep, fd), fd); /* the number names the same file again */
    CHECK_EQ(write(sv[1], "x", 1), 1);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 0), 1);

    sp = (ax_spec){.fn = task_d, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&d_done), 60000));
    fprintf(stderr, "D's wait on the readable fd %d returned %d (%s)\n", fd,
            atomic_load(&d_rc), d_err);
    CHECK_EQ(atomic_load(&d_rc), 0);

    close(fd);
    close(keep);
    close(sv[1]);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
