/* crash.c - panics and stack overflows end their task, never silently the
 * process (seed §5.4 "recover", DESIGN.md §7).
 *
 * ax_panic records a backtrace on the task's own stack before it unwinds;
 * complete_run reports it (PANIC event, or stderr when no sink listens).
 *
 * A stack overflow runs into the guard page below the coroutine's stack and
 * raises SIGSEGV. Every worker thread has an alternate signal stack, so the
 * handler runs even though the task's stack is exhausted. It asks the
 * worker's stack pool whether the fault address lies in the guard page of
 * the stack the current task runs on:
 *   - yes: the overflow is recognised. The handler records a backtrace,
 *     marks the attempt panicked with "stack overflow", and switches from
 *     the signal frame straight back to the worker's loop, abandoning the
 *     coroutine (its cleanups cannot run: there is no stack left to run them
 *     on). The handler is installed with SA_NODEFER, so leaving it without
 *     returning leaves SIGSEGV unblocked. The attempt ends FAILED (or
 *     retries) like any panic; the process and every other task go on.
 *   - no: a real crash. The handler writes a report naming the task that was
 *     running (id, trace id, worker) and a backtrace to stderr, restores the
 *     previous disposition and returns, so the fault repeats and the process
 *     dies the usual way (core dump) — never silently.
 * Sanitizer builds install their own SIGSEGV handlers first; ours replaces
 * them for the duration of the process.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALTSTACK_SIZE (64 * 1024)

static struct sigaction old_segv, old_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void write_str(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    struct worker *w = ax_current_worker;
    struct ax_task *t = ax_current_run;
    if (w && t && t->stack && sig == SIGSEGV) {
        int in_guard = 0;
        struct ax_stack *stk = ax_stack_owner_of(&w->stacks, si->si_addr, &in_guard);
        if (stk == t->stack && in_guard) {
            t->bt_n = backtrace(t->bt, AX_BT_MAX);
            snprintf(t->err, sizeof t->err,
                     "stack overflow: fault at %p below a %zu KiB coroutine stack", si->si_addr,
                     t->stack->size / 1024);
            t->panicked = 1;
            t->overflowed = 1;
            t->code = AX_EPANIC;
            t->finished = 1;
            ax_coro_switch_final(&t->coro, &w->main);
            abort(); /* unreachable */
        }
    }
    /* Not an overflow we can contain: say whose it was, then die. */
    char line[256];
    if (t) {
        char trace[AX_TRACE_ID_MAX];
        trace_format(t->job, trace);
        snprintf(line, sizeof line,
                 "ax: fatal signal %d (fault address %p) in task %llu (%s) on worker %u\n", sig,
                 si->si_addr, (unsigned long long)t->id, trace, w ? w->index : 0u);
    } else {
        snprintf(line, sizeof line, "ax: fatal signal %d (fault address %p) outside any task\n",
                 sig, si->si_addr);
    }
    write_str(line);
    void *bt[AX_BT_MAX];
    int n = backtrace(bt, AX_BT_MAX);
    backtrace_symbols_fd(bt, n, 2);
    sigaction(sig, sig == SIGSEGV ? &old_segv : &old_bus, NULL);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
}

void crash_init(void)
{
    pthread_once(&once, install);
}

/* On each worker thread: the stack the fault handler runs on. mmap, not
 * malloc: it is allocated when a worker starts, and the heap must not move
 * under a caller measuring it (test_admission checks rejections allocate
 * nothing). */
void *crash_altstack_enter(void)
{
    stack_t ss = {.ss_size = ALTSTACK_SIZE, .ss_flags = 0};
    ss.ss_sp = mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ss.ss_sp == MAP_FAILED)
        return NULL;
    if (sigaltstack(&ss, NULL) != 0) {
        munmap(ss.ss_sp, ALTSTACK_SIZE);
        return NULL;
    }
    return ss.ss_sp;
}

void crash_altstack_leave(void *mem)
{
    if (!mem)
        return;
    stack_t ss = {.ss_flags = SS_DISABLE};
    sigaltstack(&ss, NULL);
    munmap(mem, ALTSTACK_SIZE);
}

/* Panic and overflow report of a finished run (worker, after the switch). */
void crash_report(struct worker *w, struct ax_task *t)
{
    char text[AX_EVENT_MESSAGE_MAX];
    snprintf(text, sizeof text, "%s", t->err);
    bt_format(text, sizeof text, t->bt, t->bt_n, t->overflowed ? 2 : 1);
    if (ev_on(w->s, AX_EV_PANIC)) {
        ev_emit(w->s, w, t->job, AX_EV_PANIC, AX_EPANIC, text);
    } else {
        char trace[AX_TRACE_ID_MAX];
        trace_format(t->job, trace);
        fprintf(stderr, "ax: PANIC in task %llu (%s), attempt %u: %s\n", (unsigned long long)t->id,
                trace, t->attempt, text);
    }
}
