/* Live task dump (seed §4.2): lists the tasks a test holds open — queued,
 * delayed and running (with the worker) — and works from a signal. */
#include "util.h"

#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int running;

static int hold(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&running, 1);
    ax_sleep(t, 10000);
    return 0;
}

static bool file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strstr(buf, needle) != NULL;
}

static size_t count(const char *buf, const char *needle)
{
    size_t n = 0;
    for (const char *p = buf; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* A fault's signal is refused: a handler that returns sends the thread
 * back to the faulting instruction. A child registers the signal that
 * __builtin_trap() raises on this architecture (SIGILL for x86's ud2,
 * SIGTRAP for arm64's brk), then traps: it dies by that signal, as it
 * would without ax. Before, the signal was taken, and the child faulted
 * and dumped until the alarm killed it (20 s). */
#if defined(__aarch64__)
#define TRAP_SIG SIGTRAP
#else
#define TRAP_SIG SIGILL
#endif

static void fault_signal(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* no core file of the expected death */
        alarm(20);
        ax_sched *c = test_sched(1, 1);
        int rc = ax_dump_on_signal(c, TRAP_SIG, stderr);
        fprintf(stderr, "child: ax_dump_on_signal(%d) %d: %s\n", TRAP_SIG, rc, ax_error_detail());
        __builtin_trap();
    }
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != TRAP_SIG)
        fprintf(stderr, "child ended %s %d\n", WIFSIGNALED(st) ? "by signal" : "with exit",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == TRAP_SIG);
}

int main(void)
{
    fault_signal();
    ax_sched *s = test_sched(2, 3);
    for (int i = 0; i < 3; i++) {
        ax_spec sp = {.fn = hold, .priority = AX_PRIO_HIGH, .timeout_ms = 20000,
                      .trace_id = "held-running"};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&running) == 3, 3000));
    for (int i = 0; i < 4; i++) {
        ax_spec sp = {.fn = hold, .priority = AX_PRIO_LOW, .timeout_ms = 20000,
                      .trace_id = "held-queued", .deadline_ns = ax_now_ns() + 60000000000ull};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    ax_spec sp = {.fn = hold, .timeout_ms = 20000, .delay_ms = 60000, .trace_id = "held-delayed"};
    uint64_t delayed_id;
    CHECK_EQ(ax_submit(s, &sp, &delayed_id), 0);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_EQ(ax_dump(s, f, 0), 0);
    fclose(f);
    CHECK(strstr(buf, "ax dump: 8 tasks") != NULL);
    CHECK_EQ(count(buf, "trace=held-running prio=high state=running"), 3);
    CHECK_EQ(count(buf, "trace=held-queued prio=low state=pending"), 4);
    CHECK_EQ(count(buf, "trace=held-delayed prio=normal state=delayed"), 1);
    CHECK_EQ(count(buf, " worker="), 3);
    CHECK_EQ(count(buf, "deadline_in=-"), 1); /* only the delayed one has none */
    char want[64];
    snprintf(want, sizeof want, "id=%llu ", (unsigned long long)delayed_id);
    CHECK(strstr(buf, want) != NULL);
    free(buf);

    /* A cap on lines. */
    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK_EQ(ax_dump(s, f, 2), 0);
    fclose(f);
    CHECK_EQ(count(buf, "  id="), 2);
    CHECK(strstr(buf, "... 6 more") != NULL);
    free(buf);

    /* On SIGUSR1, to a file. */
    char path[] = "/tmp/ax_dump_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *out = fdopen(fd, "w+");
    CHECK_EQ(ax_dump_on_signal(s, SIGKILL, out), AX_EINVAL);
    int faults[] = {SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(ax_dump_on_signal(s, faults[i], out), AX_EINVAL);
        CHECK(strstr(ax_error_detail(), "reports a fault") != NULL);
    }
    CHECK_EQ(ax_dump_on_signal(s, SIGUSR1, NULL), AX_EINVAL);
    CHECK_EQ(ax_dump_on_signal(s, SIGUSR1, out), 0);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK(WAIT_UNTIL(file_contains(path, "trace=held-delayed"), 3000));
    CHECK(file_contains(path, "ax dump: 8 tasks"));
    CHECK_EQ(ax_dump_on_signal(s, 0, NULL), 0);
    CHECK_EQ(ax_dump(NULL, stderr, 0), AX_EINVAL);
    /* A file that cannot take the dump: the failure is returned, not
     * AX_OK (a new user's trial, /dev/full). */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        CHECK_EQ(ax_dump(s, full, 0), AX_ESYS);
        CHECK(strstr(ax_error_detail(), "ax_dump: writing the dump failed: No space left") != NULL);
        fclose(full);
    }
    ax_free(s);
    fclose(out);
    unlink(path);
    return 0;
}
