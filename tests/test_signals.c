/* The signals ax handles beside a host's (review of crash.c and linger.c):
 *   A  a hog within a few KiB of its stack's end, sampled for its LINGERING
 *      backtrace: the handler runs on the worker's alternate stack, so the
 *      sampling neither overflows the task (it aborted as "stack overflow")
 *      nor makes the kernel force a SIGSEGV (which removed ax's handler);
 *   B  a host that blocked every signal before ax_new: its workers still
 *      report an overflow (they died with a bare SIGSEGV), and a hog's
 *      report says why it has no backtrace (it waited 100 ms in vain);
 *   C  ax's own SIGURG arriving after the capture gave up is dropped, not
 *      passed to the host's SIGURG handler;
 *   D  a host SIGSEGV handler that recovers faults (a GC's barrier) is
 *      called for them, silently, and ax still reports a later overflow
 *      (it printed "fatal signal" and gave up its handler for good); one
 *      that faults itself kills the process, as without ax (called with
 *      SIGSEGV unblocked, it re-entered itself through ax's for ever);
 *   E  a SIGSEGV sent with kill() is raised again, not reported and lost.
 * Each case runs in a child process (this binary again, with a mode), so
 * a crash cannot take the test with it. */
#include "fork_capture.h"
#include "util.h"

#include "internal.h" /* struct ax_task's stack: how deep a hog may go */

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define STACK (64 * 1024)

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define PLAIN 1 /* a sanitizer's runtime takes fatal signals its own way */
#else
#define PLAIN 0
#endif

static atomic_int lingered, ndone;
static char linger_msg[AX_EVENT_MESSAGE_MAX];
static ax_result done_r;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_LINGERING && !atomic_load(&lingered)) {
        snprintf(linger_msg, sizeof linger_msg, "%s", e->message);
        atomic_store(&lingered, 1);
    }
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    done_r = *r;
    atomic_fetch_add(&ndone, 1);
}

/* Spin (without yielding) until the LINGERING event came, 10 s at most. */
__attribute__((noinline)) static void spin_until_reported(void)
{
    uint64_t end = test_now_ms() + 10000;
    while (!atomic_load(&lingered) && test_now_ms() < end)
        ;
}

static size_t leave; /* bytes left between the deepest frame and the guard */
static uintptr_t stack_lo;

/* Frames of ~200 bytes until `leave` bytes are left, then the hog. */
__attribute__((noinline)) int eat_stack(int n)
{
    volatile char pad[128];
    pad[0] = (char)n;
    if ((uintptr_t)__builtin_frame_address(0) - stack_lo > leave + 512)
        return eat_stack(n + 1) + pad[0];
    spin_until_reported();
    return pad[0] & 0;
}

static int deep_hog(ax_task *t, void *arg)
{
    (void)arg;
    stack_lo = (uintptr_t)t->stack->lo;
    return eat_stack(0);
}

static int plain_hog(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    spin_until_reported();
    return 0;
}

__attribute__((noinline)) int deep_recursion(int n)
{
    volatile char pad[256];
    pad[0] = (char)n;
    if (n < 0) /* never */
        return 0;
    return deep_recursion(n + 1) + pad[0];
}

static int overflows(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return deep_recursion(0);
}

static ax_sched *child_sched(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.stack_size = STACK;
    c.grace_ms = 20;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    return s;
}

static void run_one_within(ax_sched *s, ax_fn fn, uint64_t timeout_ms)
{
    int before = atomic_load(&ndone);
    ax_spec sp = {.fn = fn, .timeout_ms = timeout_ms, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == before + 1, 30000));
}

/* 20 ms: the hogs linger at once (grace_ms 20). */
static void run_one(ax_sched *s, ax_fn fn)
{
    int before = atomic_load(&ndone);
    ax_spec sp = {.fn = fn, .timeout_ms = 20, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == before + 1, 30000));
}

/* on_done came at the deadline; the hog returns once its report came. */
static void print_linger(void)
{
    CHECK(WAIT_UNTIL(atomic_load(&lingered), 30000));
    printf("lingering: %s\n", linger_msg);
    printf("done: %s\n", ax_state_name(done_r.state));
    fflush(stdout);
}

/* Open fds from 3 up that a program this process runs would inherit. */
static int inheritable_fds(bool print)
{
    int n = 0;
    for (int fd = 3; fd < 1024; fd++) {
        int f = fcntl(fd, F_GETFD);
        if (f >= 0 && !(f & FD_CLOEXEC)) {
            char path[64], target[256] = "";
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            ssize_t k = readlink(path, target, sizeof target - 1);
            if (print)
                printf("inheritable fd %d: %s\n", fd, k > 0 ? target : "?");
            n++;
        }
    }
    return n;
}

/* A: a hog that leaves `leave` bytes of its stack. Also: what naming its
 * frames opened (libdw's files, kept for the process) is closed on exec.
 * A sanitizer's interceptors (the hog's clock_gettime) take several KiB of
 * stack themselves: there the hog leaves that much more. */
static int child_deep(size_t left)
{
    leave = left + (PLAIN ? 0 : 16 * 1024);
    int fds = inheritable_fds(false);
    ax_sched *s = child_sched();
    run_one(s, deep_hog);
    print_linger();
    ax_free(s);
    printf("inheritable fds opened: %d\n", inheritable_fds(true) - fds);
    printf("exit normally\n");
    return 0;
}

static void block_all(void)
{
    sigset_t all;
    sigfillset(&all);
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, &all, NULL), 0);
}

/* B: every signal blocked before ax_new, then a hog, then an overflow. */
static int child_blocked(bool overflow)
{
    block_all();
    ax_sched *s = child_sched();
    if (overflow) {
        printf("overflowing\n");
        fflush(stdout);
        run_one(s, overflows);
        printf("survived\n"); /* never: the overflow aborts */
        return 0;
    }
    run_one(s, plain_hog);
    print_linger();
    ax_free(s);
    return 0;
}

/* C: a host SIGURG handler, and a hog that blocks SIGURG until its
 * LINGERING report came without a backtrace. */
static atomic_int host_urg_tkill;

static void host_urg(int sig, siginfo_t *si, void *ctx)
{
    (void)sig, (void)ctx;
    if (si->si_code == SI_TKILL && si->si_pid == getpid())
        atomic_fetch_add(&host_urg_tkill, 1);
}

static int hog_blocking_urg(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    sigset_t urg, old;
    sigemptyset(&urg);
    sigaddset(&urg, SIGURG);
    pthread_sigmask(SIG_BLOCK, &urg, &old);
    spin_until_reported();
    pthread_sigmask(SIG_SETMASK, &old, NULL); /* ax's signal, pending: delivered now */
    return 0;
}

static int child_late_urg(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = host_urg;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGURG, &sa, NULL), 0);
    ax_sched *s = child_sched();
    run_one(s, hog_blocking_urg);
    run_one(s, plain_hog); /* ran on the worker after the late signal was taken */
    print_linger();
    printf("host saw %d SIGURG of ax's\n", atomic_load(&host_urg_tkill));
    ax_free(s);
    return 0;
}

/* D: a host handler that makes a PROT_NONE page writable when touched. */
static char *guarded[2];
static long page;
static atomic_int host_faults;

static void host_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)sig, (void)ctx;
    char *a = (char *)((uintptr_t)si->si_addr & ~(uintptr_t)(page - 1));
    for (int i = 0; i < 2; i++) {
        if (a == guarded[i]) {
            mprotect(a, (size_t)page, PROT_READ | PROT_WRITE);
            atomic_fetch_add(&host_faults, 1);
            return;
        }
    }
    signal(SIGSEGV, SIG_DFL); /* not ours: die */
}

static int touches_guarded(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    *(volatile char *)guarded[1] = 1;
    return 0;
}

static int child_host_segv(void)
{
    page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < 2; i++) {
        guarded[i] = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(guarded[i] != MAP_FAILED);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = host_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGSEGV, &sa, NULL), 0);
    ax_sched *s = child_sched();
    *(volatile char *)guarded[0] = 1; /* outside any task */
    /* Inside one, with time for the host's handler: 20 ms was not enough
     * under TSan on a busy machine (CI: "the task timed_out"). */
    run_one_within(s, touches_guarded, 30000);
    printf("host handled %d fault(s), the task %s\n", atomic_load(&host_faults),
           ax_state_name(done_r.state));
    printf("overflowing\n");
    fflush(stdout);
    run_one(s, overflows);
    printf("survived\n"); /* never */
    return 0;
}

/* D2: a host handler that itself faults: the process dies of it, as
 * without ax (it re-entered itself through ax's handler for ever). */
static void host_segv_faulting(int sig, siginfo_t *si, void *ctx)
{
    (void)sig, (void)si, (void)ctx;
    atomic_fetch_add(&host_faults, 1);
    /* A frame of a few KiB, as a crash reporter's formatting has: nested
     * entries then step past the alternate stack's end between faults. */
    char report[6000];
    int n = snprintf(report, sizeof report, "host handler entered %d\n", atomic_load(&host_faults));
    if (n > 0 && atomic_load(&host_faults) < 3) {
        ssize_t w = write(2, report, (size_t)n);
        (void)w;
    }
    static char *volatile nowhere; /* NULL, unknown to the compiler */
    *nowhere = report[0];
}

static int child_host_segv_faulting(void)
{
    alarm(20); /* a hang ends as SIGALRM, which the parent tells apart */
    page = sysconf(_SC_PAGESIZE);
    guarded[0] = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(guarded[0] != MAP_FAILED);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = host_segv_faulting;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGSEGV, &sa, NULL), 0);
    ax_sched *s = child_sched();
    printf("touching\n");
    fflush(stdout);
    guarded[1] = guarded[0];
    run_one(s, touches_guarded); /* on a worker: ax's handler on its alternate stack */
    printf("survived, host handler entered %d times\n", atomic_load(&host_faults));
    ax_free(s);
    return 0;
}

/* F: overflows on two workers at once, with overflow_fails_task: each
 * report's header line whole (8 of 1 000 were split by the other worker's
 * writes: trial). */
static int child_many_overflows(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.stack_size = STACK;
    c.overflow_fails_task = true;
    ax_sched *s = test_sched_cfg(&c);
    enum { N = 300 };
    for (int i = 0; i < N; i++) {
        ax_spec sp = {.fn = overflows, .timeout_ms = 60000, .on_done = on_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == N, 120000));
    fflush(NULL);
    ax_free(s);
    return 0;
}

/* E: SIGSEGV sent to the process. */
static int child_sent_segv(void)
{
    ax_sched *s = child_sched();
    run_one(s, plain_hog); /* the workers run: the signal may land on one */
    kill(getpid(), SIGSEGV);
    usleep(200 * 1000);
    printf("survived\n");
    fflush(stdout);
    ax_free(s);
    return 0;
}

static bool exited_0(int status)
{
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        const char *m = argv[1];
        if (!strcmp(m, "deep-1k"))
            return child_deep(1024);
        if (!strcmp(m, "deep-3k"))
            return child_deep(3072);
        if (!strcmp(m, "blocked-hog"))
            return child_blocked(false);
        if (!strcmp(m, "blocked-overflow"))
            return child_blocked(true);
        if (!strcmp(m, "many-overflows"))
            return child_many_overflows();
        if (!strcmp(m, "late-urg"))
            return child_late_urg();
        if (!strcmp(m, "host-segv"))
            return child_host_segv();
        if (!strcmp(m, "host-segv-faulting"))
            return child_host_segv_faulting();
        if (!strcmp(m, "sent-segv"))
            return child_sent_segv();
        return 2;
    }
    int status;
    char *buf;

    /* A: sampled within 1 and 3 KiB of the stack's end. */
    const char *deep[] = {"deep-1k", "deep-3k"};
    for (int i = 0; i < 2; i++) {
        buf = exec_capture(argv[0], deep[i], &status);
        CHECK(strstr(buf, "stack overflow") == NULL);
        CHECK(strstr(buf, "fatal signal") == NULL);
        CHECK(strstr(buf, "done: timed_out") != NULL);
        CHECK(strstr(buf, "exit normally") != NULL);
        CHECK(exited_0(status));
        /* The report has the hog's frames, taken from the alternate stack. */
        const char *l = strstr(buf, "lingering: ");
        CHECK(l != NULL && strstr(l, "without yielding:") != NULL);
        CHECK(strstr(l, "no backtrace") == NULL);
        CHECK(strstr(l, "#0 ") != NULL && strstr(l, "eat_stack") != NULL);
        CHECK(strstr(buf, "inheritable fds opened: 0\n") != NULL);
        free(buf);
    }

    /* B: every signal blocked by the thread that called ax_new. */
    buf = exec_capture(argv[0], "blocked-hog", &status);
    CHECK(strstr(buf, "no backtrace: SIGURG is blocked on its worker's thread") != NULL);
    CHECK(strstr(buf, "done: timed_out") != NULL);
    CHECK(exited_0(status));
    free(buf);
    buf = exec_capture(argv[0], "blocked-overflow", &status);
    CHECK(strstr(buf, "overflowing") != NULL);
    CHECK(strstr(buf, "ax: stack overflow (fault address 0x") != NULL);
    CHECK(strstr(buf, "survived") == NULL);
#if PLAIN
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#endif
    free(buf);

    /* C: ax's SIGURG, late, is not the host's. */
    buf = exec_capture(argv[0], "late-urg", &status);
    CHECK(strstr(buf, "did not answer within") != NULL);
    CHECK(strstr(buf, "host saw 0 SIGURG of ax's") != NULL);
    CHECK(exited_0(status));
    free(buf);

    /* D: a host's recoverable faults are the host's. */
    buf = exec_capture(argv[0], "host-segv", &status);
    CHECK(strstr(buf, "host handled 2 fault(s), the task succeeded") != NULL);
    CHECK(strstr(buf, "fatal signal") == NULL);
    CHECK(strstr(buf, "ax: stack overflow (fault address 0x") != NULL);
    CHECK(strstr(buf, "survived") == NULL);
#if PLAIN
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#endif
    free(buf);

    buf = exec_capture(argv[0], "host-segv-faulting", &status);
    CHECK(strstr(buf, "touching") != NULL);
    CHECK(strstr(buf, "survived") == NULL);
    CHECK(!exited_0(status) && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM));
#if PLAIN /* (UBSan reports the NULL store itself and exits) */
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
#endif
    free(buf);

#if PLAIN
    buf = exec_capture(argv[0], "many-overflows", &status);
    CHECK(exited_0(status));
    int headers = 0, whole = 0;
    for (char *l = buf; (l = strstr(l, "ax: stack overflow")) != NULL; l++) {
        headers++;
        char *end = strchr(l, '\n');
        if (end && memmem(l, (size_t)(end - l), "KiB coroutine stack", 19))
            whole++;
    }
    fprintf(stderr, "many-overflows: %d report headers, %d whole\n", headers, whole);
    CHECK_EQ(headers, 300);
    CHECK_EQ(whole, headers);
    free(buf);
#endif

    /* E: a sent SIGSEGV ends the process as it would without ax. */
    buf = exec_capture(argv[0], "sent-segv", &status);
    CHECK(strstr(buf, "survived") == NULL);
    CHECK(!exited_0(status));
#if PLAIN
    CHECK(strstr(buf, "ax: fatal signal 11 (sent by process ") != NULL);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
#endif
    free(buf);
    return 0;
}
