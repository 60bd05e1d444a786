/* an fd closed while a task waits on it, whose file lives on in
 * a duplicate (dup, fork, SCM_RIGHTS), leaves the waiter's registration in
 * the worker's epoll with a pointer to the task's run struct: epoll keeps
 * an entry until the file is released, and the wake-up's EPOLL_CTL_DEL by
 * the closed number fails (EBADF). When the file then becomes readable:
 *  - the run struct, reused by the next task on that worker, is woken:
 *    that task's ax_wait_fd on its own, never-ready fd returns 0;
 *  - the level-triggered stale entry fires on every epoll_wait: the idle
 *    worker spins (an idle ax is meant to use no CPU). */
#include "util.h"

#include <sys/socket.h>

static int fd_a, fd_c;
static atomic_int a_parked, a_done, c_parked, c_done;
static atomic_int a_rc = 99, c_rc = 99;

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_parked, 1);
    atomic_store(&a_rc, ax_wait_fd(t, fd_a, AX_READ, -1));
    atomic_store(&a_done, 1);
    return 0;
}

static int task_c(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&c_parked, 1);
    atomic_store(&c_rc, ax_wait_fd(t, fd_c, AX_READ, 1500)); /* nothing is ever written */
    atomic_store(&c_done, 1);
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
    int sa[2], sc[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sa), 0);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sc), 0);
    int keep = dup(sa[0]); /* the file outlives the number the task waits on */
    CHECK(keep >= 0);
    fd_a = sa[0];
    fd_c = sc[0];
    uint64_t id_a;
    ax_spec sp = {.fn = task_a, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, &id_a), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_parked), 60000));
    sp = (ax_spec){.fn = marker, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&marker_ran), 60000));
    usleep(20000);
    close(sa[0]);
    CHECK_EQ(ax_cancel(s, id_a), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_done), 60000));
    CHECK_EQ(atomic_load(&a_rc), AX_ECANCELED);
    usleep(20000);

    /* The next task on the worker waits on its own fd, never readable. */
    sp = (ax_spec){.fn = task_c, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&c_parked), 60000));
    usleep(20000);

    /* The closed fd's file becomes readable. */
    long cpu0 = test_cpu_ticks();
    CHECK_EQ(write(sa[1], "x", 1), 1);
    CHECK(WAIT_UNTIL(atomic_load(&c_done), 60000));
    usleep(500000);
    long spent = test_cpu_ticks() - cpu0;
    fprintf(stderr, "C's wait returned %d; CPU over ~0.5 s idle: %ld ticks (of %ld/s)\n",
            atomic_load(&c_rc), spent, sysconf(_SC_CLK_TCK));
    CHECK_EQ(atomic_load(&c_rc), AX_ETIMEDOUT); /* its fd never became ready */
    CHECK_LE(spent, sysconf(_SC_CLK_TCK) / 4); /* idle: no spinning worker */

    close(keep);
    close(sa[1]);
    close(sc[0]);
    close(sc[1]);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
