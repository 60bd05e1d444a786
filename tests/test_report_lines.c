/* test_report_lines.c - obs/report.c's queue of stderr lines, on its own
 * (review of 07802f5), with fd 2 a pipe this test reads:
 *   A. 200 lines while stderr is blocked (the pipe full): every line comes
 *      out at most once and in order, and each gap is announced by a
 *      dropped-count line just before the first line after it, with the
 *      gap's exact size; every line queued (a non-zero ticket) comes out;
 *      then a line after the pipe drains comes out too;
 *   B. a 2 000-byte line comes out cut to REPORT_LEN - 1 bytes, ending in
 *      its newline;
 *   C. after fork, the child's lines come out (the child has no writer
 *      thread of its parent's: it starts its own); not under TSan, which
 *      starts no thread in the child of a process with threads, nor under
 *      qemu-user (AX_TEST_QEMU, scripts/test), which aborts there;
 *   D. report_drain of nothing returns at once. */
#include "util.h"

#include "internal.h"

#include <fcntl.h>
#include <sys/wait.h>

/* TSan does not start threads in the child of a multi-threaded fork: C
 * cannot run under it. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

static int rd_fd;
static char *buf;
static size_t len, cap = 1u << 22;
static atomic_int reading;
static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;

static void *reader(void *arg)
{
    (void)arg;
    char tmp[4096];
    for (;;) {
        while (!atomic_load(&reading))
            usleep(1000);
        ssize_t n = read(rd_fd, tmp, sizeof tmp);
        if (n <= 0)
            return NULL;
        pthread_mutex_lock(&buf_lock);
        if (len + (size_t)n < cap) {
            memcpy(buf + len, tmp, (size_t)n);
            len += (size_t)n;
            buf[len] = 0;
        }
        pthread_mutex_unlock(&buf_lock);
    }
}

static bool has(const char *s)
{
    pthread_mutex_lock(&buf_lock);
    bool yes = strstr(buf, s) != NULL;
    pthread_mutex_unlock(&buf_lock);
    return yes;
}

int main(void)
{
    buf = calloc(1, cap + 1);
    CHECK(buf != NULL);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    int saved = dup(2);
    /* Fill the pipe before it becomes stderr: nobody reads it yet. */
    int fl = fcntl(p[1], F_GETFL);
    CHECK_EQ(fcntl(p[1], F_SETFL, fl | O_NONBLOCK), 0);
    char junk[4096];
    memset(junk, '.', sizeof junk);
    size_t filled = 0;
    for (ssize_t w; (w = write(p[1], junk, sizeof junk)) > 0;)
        filled += (size_t)w;
    CHECK_EQ(fcntl(p[1], F_SETFL, fl), 0);
    CHECK_EQ(dup2(p[1], 2), 2);
    close(p[1]);
    rd_fd = p[0];
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, reader, NULL), 0);

    /* D */
    uint64_t t0 = ax_now_ns();
    report_drain(0);
    CHECK(ax_now_ns() - t0 < 1000000000ull); /* liveness: no wait at all */

    /* A: 200 lines into a blocked stderr. */
    enum { N = 200 };
    uint64_t ticket[N];
    for (int i = 0; i < N; i++)
        ticket[i] = report_line("test line %03d", i);
    atomic_store(&reading, 1);
    int last = -1;
    for (int i = 0; i < N; i++)
        if (ticket[i])
            last = i;
    CHECK(last >= 0);
    char want[32];
    snprintf(want, sizeof want, "test line %03d\n", last);
    CHECK(WAIT_UNTIL(has(want), 30000 * TEST_SLOW)); /* the queue written out */
    uint64_t after = report_line("test line after");
    CHECK(after != 0);
    report_drain(UINT64_MAX);
    CHECK(WAIT_UNTIL(has("test line after\n"), 30000 * TEST_SLOW));

    /* B */
    char big[2001];
    memset(big, 'x', 2000);
    big[2000] = 0;
    CHECK(report_line("%s", big) != 0);
    report_line("test line B end");
    CHECK(WAIT_UNTIL(has("test line B end\n"), 30000 * TEST_SLOW));

    /* C */
    if (!UNDER_TSAN && !getenv("AX_TEST_QEMU")) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            uint64_t t = report_line("child line");
            WAIT_UNTIL(report_drain(t), 30000 * TEST_SLOW);
            _exit(t ? 0 : 1);
        }
        int status = 0;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(WAIT_UNTIL(has("child line\n"), 30000 * TEST_SLOW));
    }

    /* The checks, on what came out past the filling. */
    pthread_mutex_lock(&buf_lock);
    char *out = strdup(buf + (len > filled ? filled : len));
    pthread_mutex_unlock(&buf_lock);
    dup2(saved, 2); /* the pipe's last writer gone: the reader sees its end */
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK(out != NULL);
    int next = 0, shown = 0;
    unsigned long announced = 0; /* a dropped count just read, for the next line */
    bool saw_after = false, saw_big = false;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned long d;
        int k;
        if (sscanf(line, "ax: %lu report lines dropped", &d) == 1) {
            CHECK_EQ(announced, 0ul);
            announced = d;
        } else if (sscanf(line, "test line %d", &k) == 1) {
            CHECK(k >= next);
            CHECK_EQ((unsigned long)(k - next), announced); /* the gap, exactly */
            for (int i = next; i < k; i++)
                CHECK_EQ(ticket[i], 0u); /* only dropped lines are missing */
            CHECK(ticket[k] != 0);
            announced = 0;
            next = k + 1;
            shown++;
        } else if (strcmp(line, "test line after") == 0) {
            CHECK_EQ((unsigned long)(N - next), announced);
            for (int i = next; i < N; i++)
                CHECK_EQ(ticket[i], 0u);
            announced = 0;
            saw_after = true;
        } else if (line[0] == 'x') {
            CHECK_EQ(strlen(line), 766u); /* REPORT_LEN 768: 766 bytes and its newline */
            saw_big = true;
        }
    }
    fprintf(stderr, "A: %d of %d lines shown, the rest announced as dropped\n", shown, N);
    CHECK(saw_after);
    CHECK(saw_big);
    CHECK(shown >= 64); /* a queue's worth at least */
    CHECK(shown < N);   /* the pipe was full: some were dropped */
    free(out);
    return 0;
}
