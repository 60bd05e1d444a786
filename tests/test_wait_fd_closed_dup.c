/* A task waits to read fd N; another task closes N while the file lives on
 * in a dup, and the number is reused at once by a new socket (nobody waits
 * on that one). The kernel keeps the old (N, old file) epoll entry, armed,
 * with the waiter's gen, and the table still holds the waiter under that
 * gen. When the old file becomes readable, the entry fires and fd_event
 * wakes the waiter with 0 -- although fd N (the new socket) is not ready,
 * and ax.h says closing an fd does not wake its waiter. ax_read then reads
 * the *new* connection: its bytes go to the wrong task.
 * Expected: the wait ends AX_ETIMEDOUT (its bound); the new socket's
 * byte stays unread. */
#include "util.h"

#include <poll.h>
#include <sys/socket.h>

static int fd;
static atomic_int a_parked, a_done, reuse_done;
static atomic_long a_rc = 99;
static char a_buf[8];
static int old_peer, keep, new_peer;

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_parked, 1);
    atomic_store(&a_rc, ax_read(t, fd, a_buf, sizeof a_buf, 1500));
    atomic_store(&a_done, 1);
    return 0;
}

/* Another task on the same worker: closes A's fd and reuses the number. */
static int task_reuse(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    close(fd);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    CHECK_EQ(sv[0], fd); /* the lowest free number: A's */
    new_peer = sv[1];
    CHECK_EQ(write(new_peer, "NEW", 3), 3); /* the new connection's own data */
    atomic_store(&reuse_done, 1);
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 16);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fd = sv[0];
    old_peer = sv[1];
    keep = dup(fd);
    CHECK(keep >= 0);
    ax_spec sp = {.fn = task_a, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_parked), 60000));
    sp = (ax_spec){.fn = task_reuse, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&reuse_done), 60000));
    usleep(20000);
    CHECK_EQ(write(old_peer, "old", 3), 3); /* the closed number's old file */
    CHECK(WAIT_UNTIL(atomic_load(&a_done), 60000));
    long rc = atomic_load(&a_rc);
    fprintf(stderr, "A's ax_read on its closed fd returned %ld%s%.*s\n", rc,
            rc > 0 ? ": " : "", rc > 0 ? (int)rc : 0, a_buf);
    CHECK_EQ(rc, AX_ETIMEDOUT);
    close(fd);
    close(new_peer);
    close(keep);
    close(old_peer);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
