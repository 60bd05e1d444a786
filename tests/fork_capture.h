/* fork_capture.h - run a test's child process and collect what it writes.
 *
 * For tests whose subject may leak or hold threads on purpose (ax_free
 * with a task that never returns): the child runs in a forked process,
 * writes its report to the pipe it is given (dup2 it onto stderr), and
 * ends with _exit. */
#ifndef FORK_CAPTURE_H
#define FORK_CAPTURE_H

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

/* Fork, run child(write end of a pipe) in the child, read what it writes
 * into out (cap bytes with the NUL) until it exits; after wait_ms it is
 * killed. *status: waitpid's. True if it exited by itself. */
static inline bool fork_capture(void (*child)(int fd), char *out, size_t cap, int wait_ms,
                                int *status)
{
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    CHECK_EQ(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
    size_t len = 0;
    bool exited = false;
    uint64_t end = test_now_ms() + (uint64_t)wait_ms;
    for (;;) {
        ssize_t r = read(fds[0], out + len, cap - 1 - len);
        if (r > 0)
            len += (size_t)r;
        pid_t w = waitpid(pid, status, WNOHANG);
        CHECK(w >= 0);
        if (w == pid) {
            exited = true;
            break;
        }
        if (test_now_ms() >= end)
            break;
        usleep(10 * 1000);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        CHECK_EQ(waitpid(pid, status, 0), pid);
    }
    /* The rest of what it wrote, up to end of file. */
    CHECK_EQ(fcntl(fds[0], F_SETFL, 0), 0);
    for (ssize_t r; len < cap - 1 && (r = read(fds[0], out + len, cap - 1 - len)) != 0;) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        len += (size_t)r;
    }
    out[len] = 0;
    close(fds[0]);
    return exited;
}

#endif
