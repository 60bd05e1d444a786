/* a task whose fd is closed while it waits on it must not, when
 * it is woken (cancel, timeout), take the epoll registration of another
 * task that now waits on a new socket with the same fd number.
 *
 * Task A waits on fd X; another thread closes X (the kernel drops A's
 * registration with the file); a new socket reuses the number X; task B
 * (same worker) waits on it. A is cancelled: its wake-up removes "fd X"
 * from the worker's epoll -- B's registration -- so B never learns that its
 * socket became readable and sleeps until its own bound. */
#include "util.h"

#include <sys/socket.h>

static int fd_a, fd_b;
static atomic_int a_parked, b_parked, a_done, b_done;
static atomic_int a_rc = 99, b_rc = 99;

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_parked, 1);
    atomic_store(&a_rc, ax_wait_fd(t, fd_a, AX_READ, -1));
    atomic_store(&a_done, 1);
    return 0;
}

static int task_b(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&b_parked, 1); /* one worker: nothing runs until B is parked */
    atomic_store(&b_rc, ax_wait_fd(t, fd_b, AX_READ, 20000)); /* liveness bound only */
    atomic_store(&b_done, 1);
    return 0;
}

/* Runs on the one worker after A has parked: once it ran, A's epoll_ctl
 * happened before (also for TSan, which otherwise reports the test's own
 * close() racing A's registration). */
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
    int sa[2], sb[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sa), 0);
    fd_a = sa[0];
    uint64_t id_a;
    ax_spec sp = {.fn = task_a, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, &id_a), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_parked), 60000));
    sp = (ax_spec){.fn = marker, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&marker_ran), 60000));
    usleep(20000);

    close(sa[0]); /* A's fd goes away under it */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sb), 0);
    CHECK_EQ(sb[0], fd_a); /* the lowest free number: reused */
    fd_b = sb[0];
    sp = (ax_spec){.fn = task_b, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&b_parked), 60000));
    usleep(20000);

    CHECK_EQ(ax_cancel(s, id_a), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_done), 60000));
    CHECK_EQ(atomic_load(&a_rc), AX_ECANCELED);

    /* B's socket becomes readable: B must wake with 0, long before its bound. */
    uint64_t t0 = test_now_ms();
    CHECK_EQ(write(sb[1], "x", 1), 1);
    CHECK(WAIT_UNTIL(atomic_load(&b_done), 60000));
    fprintf(stderr, "B woke after %llu ms with %d\n", (unsigned long long)(test_now_ms() - t0),
            atomic_load(&b_rc));
    CHECK_EQ(atomic_load(&b_rc), 0);

    close(sa[1]);
    close(sb[0]);
    close(sb[1]);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
