/* io.c - deadline-aware socket I/O inside tasks (DESIGN.md §11, issue 4).
 *
 * Each call tries the non-blocking system call first and parks the
 * coroutine in ax_wait_fd only on EAGAIN, so a ready socket costs one
 * syscall and no epoll registration. The wait is bounded by the call's own
 * timeout and always by the task's deadline; cancellation ends it with
 * AX_ECANCELED. The thread never blocks.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static int ensure_nonblock(int fd, const char *what)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return ax_fail(AX_EINVAL, "%s: fd %d: %s", what, fd, strerror(errno));
    if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return ax_fail(AX_ESYS, "%s: fd %d: cannot set O_NONBLOCK: %s", what, fd, strerror(errno));
    return AX_OK;
}

void sigpipe_hold(struct sigpipe_hold *h)
{
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    h->had = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_set, &h->old);
}

void sigpipe_release(const struct sigpipe_hold *h, bool failed)
{
    int e = errno;
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    if (failed && !h->had && sigismember(&pending, SIGPIPE) == 1) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &h->old, NULL);
    errno = e;
}

/* write(2) for an fd that is not a socket (a pipe): a pipe with no reader
 * is EPIPE, as send's MSG_NOSIGNAL makes it for sockets. */
static ssize_t pipe_write(int fd, const void *buf, size_t len)
{
    struct sigpipe_hold h;
    sigpipe_hold(&h);
    ssize_t n = write(fd, buf, len);
    sigpipe_release(&h, n < 0 && errno == EPIPE);
    return n;
}

/* Remaining time of a call-level timeout that began at `start`. */
static int64_t remaining(int64_t timeout_ms, uint64_t start)
{
    if (timeout_ms < 0)
        return -1;
    uint64_t spent = (now_ns() - start) / 1000000u;
    return spent >= (uint64_t)timeout_ms ? 0 : timeout_ms - (int64_t)spent;
}

/* `what` the public call, `sys` the system call that failed in it. */
static int sys_fail(const char *what, const char *sys, int fd)
{
    int e = errno;
    if (e == EBADF || e == ENOTSOCK)
        return ax_fail(AX_EINVAL, "%s: %s: fd %d: %s", what, sys, fd, strerror(e));
    return ax_fail(AX_ESYS, "%s: %s: %s", what, sys, strerror(e));
}

/* The check every call starts with, before its other arguments (as every
 * in-task call: a NULL task with a NULL buffer said "buf is NULL"): its
 * own task. Then the call's arguments, then io_enter. */
static int io_task(const ax_task *t, const char *what)
{
    if (!t)
        return ax_fail(AX_EINVAL, "%s: task is NULL", what);
    if (t != ax_current_run)
        return ax_fail(AX_ESTATE, "%s: called outside the task's own coroutine", what);
    return AX_OK;
}

/* After the arguments: the fd made non-blocking. */
static int io_enter(int fd, const char *what)
{
    return ensure_nonblock(fd, what);
}

ssize_t ax_read(ax_task *t, int fd, void *buf, size_t len, int64_t timeout_ms)
{
    int rc = io_task(t, "ax_read");
    if (rc)
        return rc;
    if (!buf && len)
        return ax_fail_static(AX_EINVAL, "ax_read: buf is NULL");
    if (len > SSIZE_MAX)
        return ax_fail_static(AX_EINVAL, "ax_read: len is larger than SSIZE_MAX");
    if ((rc = io_enter(fd, "ax_read")))
        return rc;
    uint64_t start = now_ns();
    for (;;) {
        if ((rc = run_blocking_entry(t, "ax_read")))
            return rc;
        ssize_t n = read(fd, buf, len);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return sys_fail("ax_read", "read", fd);
        if ((rc = task_wait_fd(t, "ax_read", fd, AX_READ, remaining(timeout_ms, start))))
            return rc;
    }
}

ssize_t ax_write(ax_task *t, int fd, const void *buf, size_t len, int64_t timeout_ms)
{
    int rc = io_task(t, "ax_write");
    if (rc)
        return rc;
    if (!buf && len)
        return ax_fail_static(AX_EINVAL, "ax_write: buf is NULL");
    if (len > SSIZE_MAX)
        return ax_fail_static(AX_EINVAL, "ax_write: len is larger than SSIZE_MAX");
    if ((rc = io_enter(fd, "ax_write")))
        return rc;
    if (len == 0) /* nothing to write, but an ended attempt still says so */
        return run_blocking_entry(t, "ax_write");
    uint64_t start = now_ns();
    size_t done = 0;
    while (done < len) {
        if ((rc = run_blocking_entry(t, "ax_write")))
            return rc;
        ssize_t n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == ENOTSOCK)
            n = pipe_write(fd, (const char *)buf + done, len - done);
        if (n >= 0) {
            done += (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return sys_fail("ax_write", "write", fd);
        if ((rc = task_wait_fd(t, "ax_write", fd, AX_WRITE, remaining(timeout_ms, start))))
            return rc;
    }
    return (ssize_t)done;
}

int ax_accept(ax_task *t, int lfd, struct sockaddr *addr, socklen_t *addrlen, int64_t timeout_ms)
{
    int rc = io_task(t, "ax_accept");
    if (rc || (rc = io_enter(lfd, "ax_accept")))
        return rc;
    uint64_t start = now_ns();
    for (;;) {
        if ((rc = run_blocking_entry(t, "ax_accept")))
            return rc;
        int fd = accept4(lfd, addr, addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            return fd;
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return sys_fail("ax_accept", "accept", lfd);
        if ((rc = task_wait_fd(t, "ax_accept", lfd, AX_READ, remaining(timeout_ms, start))))
            return rc;
    }
}

int ax_connect(ax_task *t, int fd, const struct sockaddr *addr, socklen_t addrlen,
               int64_t timeout_ms)
{
    int rc = io_task(t, "ax_connect");
    if (rc)
        return rc;
    if (!addr)
        return ax_fail_static(AX_EINVAL, "ax_connect: addr is NULL");
    /* A length no address has: a bad argument, not a failed system call
     * (trial: addrlen 0 was AX_ESYS "connect: Invalid argument"). */
    /* ... nor one shorter than its family's address (trial: 3 for AF_INET
     * was AX_ESYS too). */
    if (addrlen < sizeof(sa_family_t) || addrlen > sizeof(struct sockaddr_storage) ||
        (addr->sa_family == AF_INET && addrlen < sizeof(struct sockaddr_in)) ||
        (addr->sa_family == AF_INET6 && addrlen < 24)) /* SIN6_LEN_RFC2133: no scope id */
        return ax_fail(AX_EINVAL, "ax_connect: addrlen %u is not the length of an address",
                       (unsigned)addrlen);
    if ((rc = io_enter(fd, "ax_connect")))
        return rc;
    if ((rc = run_blocking_entry(t, "ax_connect")))
        return rc;
    if (connect(fd, addr, addrlen) == 0)
        return AX_OK;
    if (errno != EINPROGRESS && errno != EINTR)
        return sys_fail("ax_connect", "connect", fd);
    if ((rc = task_wait_fd(t, "ax_connect", fd, AX_WRITE, timeout_ms)))
        return rc;
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
        return sys_fail("ax_connect", "getsockopt", fd);
    if (err) {
        errno = err;
        return sys_fail("ax_connect", "connect", fd);
    }
    return AX_OK;
}
