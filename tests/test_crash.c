/* Crashes (seed §5.4): ax_panic and a stack overflow into the guard region
 * produce a report naming the task and a backtrace. By default an overflow
 * then aborts the process (a coroutine abandoned mid-frame keeps its locks);
 * with config.overflow_fails_task it fails only its task and the process
 * goes on. The overflows run in child processes so that a failure cannot
 * take the test runner with it. */
#include "fork_capture.h"
#include "util.h"

#include "internal.h" /* bt_symbolised: was ax built with libdw */

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char panic_msg[AX_EVENT_MESSAGE_MAX];
static uint64_t panic_id;
static atomic_int panics;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_PANIC) {
        snprintf(panic_msg, sizeof panic_msg, "%s", e->message);
        panic_id = e->id;
        atomic_fetch_add(&panics, 1);
    }
}

/* "+ 1" keeps the calls from becoming tail calls, whose frames vanish. */
__attribute__((noinline)) int panicking_helper(ax_task *t)
{
    return ax_panic(t, "invariant broken: %s", "queue empty") + 1;
}

static int panicker(ax_task *t, void *arg)
{
    (void)arg;
    return panicking_helper(t) + 1;
}

__attribute__((noinline)) int deep_recursion(int n)
{
    volatile char pad[256];
    pad[0] = (char)n;
    if (n < 0) /* never: keeps the compiler from calling this infinite */
        return 0;
    return deep_recursion(n + 1) + pad[0];
}

/* One frame far larger than a page: without stack-clash probes and a guard
 * larger than a page its first write lands below the guard, in another
 * coroutine's stack, and nothing faults. */
__attribute__((noinline)) int big_frames(int n)
{
    volatile char big[48 * 1024];
    big[0] = (char)n;
    if (n < 0) /* never */
        return 0;
    int r = big_frames(n + 1); /* the frame stays live across the call */
    return r + big[0];
}

static int overflows_big(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return big_frames(0);
}

static int overflows(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return deep_recursion(0);
}

static int fine(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return 0;
}

static ax_result results[2];
static atomic_int ndone;
static void on_done(const ax_result *r, void *arg)
{
    results[(intptr_t)arg] = *r;
    atomic_fetch_add(&ndone, 1);
}

/* Child: overflow one task, then run another; print what happened. */
static int child(bool fail_task, bool big)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 10;
    c.overflow_fails_task = fail_task;
    ax_sched *s = NULL;
    CHECK_EQ(ax_new(&c, &s), 0);
    uint64_t id;
    printf("child started\n");
    fflush(stdout);
    ax_spec sp = {.fn = big ? overflows_big : overflows, .timeout_ms = 5000, .on_done = on_done,
                  .cb_arg = (void *)0};
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == 1, 5000));
    sp = (ax_spec){.fn = fine, .timeout_ms = 5000, .on_done = on_done, .cb_arg = (void *)1};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == 2, 5000));
    printf("overflow task %llu: state=%s code=%d error=%s\n", (unsigned long long)id,
           ax_state_name(results[0].state), results[0].code, results[0].error);
    printf("next task: state=%s\n", ax_state_name(results[1].state));
    fflush(stdout);
    ax_free(s);
    return 0;
}

/* Run this binary with `mode` in a child; its stdout and stderr together. */
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child(false, false);
    if (argc > 1 && strcmp(argv[1], "child-fail-task") == 0)
        return child(true, false);
    if (argc > 1 && strcmp(argv[1], "child-big-frame") == 0)
        return child(false, true);

    /* ax_panic: an event naming the task with a backtrace through the
     * function that panicked. */
    ax_sched *s = test_sched(2, 10);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    uint64_t id;
    ax_spec sp = {.fn = panicker, .timeout_ms = 1000, .trace_id = "crash-test"};
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&panics) == 1, 3000));
    CHECK_EQ(panic_id, id);
    CHECK(strstr(panic_msg, "invariant broken: queue empty") != NULL);
    CHECK(strstr(panic_msg, "panicking_helper") != NULL);
    /* The task's frames only, named: the one that panicked first, the
     * task's function last (ax's coroutine entry below it is cut), each
     * with this file's line when ax has libdw. */
    if (!strstr(panic_msg, "\n#0 panicking_helper+0x"))
        fprintf(stderr, "%s\n", panic_msg);
    CHECK(strstr(panic_msg, "\n#0 panicking_helper+0x") != NULL);
    if (bt_symbolised()) { /* dladdr knows neither panicker (static) nor run_entry */
        CHECK(strstr(strrchr(panic_msg, '#'), " panicker+0x") != NULL);
        CHECK(strstr(panic_msg, "run_entry") == NULL);
        const char *line = strstr(panic_msg, "panicking_helper+0x");
        CHECK(line != NULL && strncmp(strchr(line, ' '), " (test_crash.c:", 15) == 0);
    }
    ax_free(s);

    /* Stack overflow, by default: report, then abort. */
    int status;
    char *buf = exec_capture(argv[0], "child", &status);
    CHECK(strstr(buf, "ax: stack overflow (fault address 0x") != NULL);
    CHECK(strstr(buf, "in task ") != NULL);
    CHECK(strstr(buf, "KiB coroutine stack") != NULL);
    CHECK(strstr(buf, "next task") == NULL); /* it never got there */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* Sanitizer runtimes may take the fault themselves; the report above is
     * what is required of them. */
    CHECK(strstr(buf, "ax: aborting") != NULL);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK(strstr(buf, "deep_recursion") != NULL); /* the report's backtrace */
#endif
    free(buf);

    /* Frames of 48 KiB: each still hits the guard (stack-clash probes, a
     * 64 KiB guard), never another coroutine's stack. */
    buf = exec_capture(argv[0], "child-big-frame", &status);
    CHECK(strstr(buf, "ax: stack overflow (fault address 0x") != NULL);
    CHECK(strstr(buf, "next task") == NULL);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#endif
    free(buf);

    /* Opt-in: the overflow fails only its task. */
    buf = exec_capture(argv[0], "child-fail-task", &status);
    CHECK(strstr(buf, "ax: stack overflow (fault address 0x") != NULL);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(strstr(buf, "state=failed code=-12 error=stack overflow") != NULL);
    CHECK(strstr(buf, "next task: state=succeeded") != NULL);
    CHECK(strstr(buf, "deep_recursion") != NULL); /* the PANIC report's backtrace (stderr) */
#endif
    free(buf);
    return 0;
}
