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
#include <stdlib.h>
#include <sys/resource.h>
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

/* fork_capture, its output shown on stderr under `what`, and the child
 * expected to exit by itself with status 0 (not killed: by SIGPIPE, or by
 * us at wait_ms). */
static inline void fork_capture_ok(const char *what, void (*child)(int fd), char *out, size_t cap,
                                   int wait_ms)
{
    int status = 0;
    CHECK(fork_capture(child, out, cap, wait_ms, &status));
    fprintf(stderr, "%s: child's stderr:\n%s", what, out);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

/* In a child: ax_free(s), then "ax_free took N ms" on stderr for the
 * parent to read (fork_capture_free_ms). */
static inline void child_free_timed(ax_sched *s)
{
    uint64_t t0 = test_now_ms();
    ax_free(s);
    fprintf(stderr, "ax_free took %llu ms\n", (unsigned long long)(test_now_ms() - t0));
    fflush(stderr);
}

/* What child_free_timed reported in out; CHECKs that it did. */
static inline unsigned long long fork_capture_free_ms(const char *out)
{
    const char *took = strstr(out, "ax_free took ");
    CHECK(took != NULL);
    return strtoull(took + strlen("ax_free took "), NULL, 10);
}

/* This test's own binary run again in a child as `self mode` (the test's
 * main picks the case by argv[1]), without a core file, for cases that
 * end the process (a fatal signal, an abort). Returns its stdout and
 * stderr together (malloc'd, NUL-terminated; up to 8 MiB), shown on
 * stderr (a long one by its start and end); *status: waitpid's. */
static inline char *exec_capture(const char *self, const char *mode, int *status)
{
    int out[2];
    CHECK_EQ(pipe(out), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(out[1], 2);
        close(out[0]);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        execl("/proc/self/exe", self, mode, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    size_t cap = 1 << 23, n = 0;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    for (ssize_t r; n < cap - 1 && (r = read(out[0], buf + n, cap - 1 - n)) != 0;) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
    close(out[0]);
    CHECK_EQ(waitpid(pid, status, 0), pid);
    if (n > 16384)
        fprintf(stderr, "child (%s) said (%zu bytes):\n%.8000s\n...\n%s\n", mode, n, buf,
                buf + n - 4000);
    else
        fprintf(stderr, "child (%s) said:\n%s\n", mode, buf);
    return buf;
}

#endif
