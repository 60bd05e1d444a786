/* crash.c - panics and stack overflows never end the process silently
 * (seed §5.4 "recover", DESIGN.md §7).
 *
 * ax_panic records a backtrace on the task's own stack before it unwinds;
 * run_complete reports it (PANIC event, or stderr when no sink listens).
 *
 * A stack overflow runs into the guard region below the coroutine's stack
 * (64 KiB: no frame of code built with -fstack-clash-protection, which ax
 * is, can step over it) and raises SIGSEGV. Every worker thread has an
 * alternate signal stack, so the handler runs though the task's stack is
 * exhausted. It asks the worker's stack pool whether the fault address lies
 * in the guard of the stack the current task runs on:
 *   - yes, by default: the report names the task (id, trace id, worker, the
 *     fault address, the stack size) and gives a backtrace, written with
 *     async-signal-safe code only (write(2), our own number formatting,
 *     backtrace_symbols_fd with the unwinder loaded at start), then the
 *     process aborts -- as Go and Rust do. Abandoning a coroutine mid-frame
 *     would leave every lock it held held (malloc's arena, stdio, the host's
 *     mutexes, the scheduler's own), its defers unrun: a later deadlock far
 *     from the cause is worse than a clear crash here.
 *   - yes, and config.overflow_fails_task (opt-in, documented UNSAFE when
 *     the task may hold locks): after the same report the handler marks
 *     the attempt panicked and switches from the signal frame straight back
 *     to the worker's loop, abandoning the coroutine. The attempt ends
 *     FAILED (or retries) like a panic.
 *   - no, and the host had a handler of its own when ax installed this one
 *     (a garbage collector's write barrier, libsigsegv, a wasm runtime, a
 *     crash reporter, a sanitizer's runtime): that handler is called, as the
 *     kernel would have called it, and decides; ax says nothing and stays
 *     installed. (It used to report a fault the host then recovered as
 *     "fatal" and give the signal back to the host's handler for good, so
 *     a later overflow died with a bare SIGSEGV: review.) A host handler
 *     installed with SA_RESETHAND is given the signal back as it asked.
 *   - no, and no handler of the host's: a real crash. The same report names
 *     the running task, the default disposition is restored and the handler
 *     returns, so the fault repeats and the process dies the usual way (core
 *     dump). A SIGSEGV or SIGBUS *sent* by a process (kill, raise,
 *     pthread_kill: si_code <= 0) would not repeat: it is raised again
 *     under the default disposition (it used to be reported and then lost,
 *     the process going on without ax's handler), or dropped if the host
 *     ignores it.
 * Every worker unblocks SIGSEGV and SIGBUS as it starts (crash_thread_signals):
 * a thread created with them blocked, as a host that blocks every signal
 * before ax_new has its workers, would die of its first overflow with no
 * report. Sanitizer builds install their own SIGSEGV handlers first: they
 * are the host's handler above.
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
#define PANIC_NAME_MS 100 /* a panic's report waits this long for the symbol tables */

static struct sigaction old_segv, old_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* A report's header is made in a buffer and written with one write(2):
 * the other threads' lines (a panic's, printed by another worker with one
 * write each) then cannot land inside it (CI: 7 of 300 headers split by
 * them, though the fault reports were one at a time). Async-signal-safe. */
struct line {
    char b[512];
    size_t n;
};

static void put_str(struct line *l, const char *s)
{
    size_t k = strlen(s);
    if (k > sizeof l->b - 1 - l->n)
        k = sizeof l->b - 1 - l->n;
    memcpy(l->b + l->n, s, k);
    l->n += k;
}

/* Async-signal-safe decimal / hex formatting into a static-free buffer. */
static void put_u64(struct line *l, uint64_t v, unsigned base)
{
    char buf[24];
    int i = (int)sizeof buf - 1;
    buf[i] = 0;
    do {
        buf[--i] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v && i > 2);
    if (base == 16) {
        buf[--i] = 'x';
        buf[--i] = '0';
    }
    put_str(l, buf + i);
}

static void write_str(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

/* One report at a time on stderr: two workers overflowing at once wrote
 * their many write(2)s into each other's lines (trial: 8 of 1 000 headers
 * split). A flag, not a lock (async-signal-safe); a thread that faults
 * again while it writes (SA_NODEFER) or one that waits past ~50 ms writes
 * anyway rather than stall a crash. */
static atomic_flag report_busy = ATOMIC_FLAG_INIT;

static bool report_enter(void)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0); /* async-signal-safe */
    for (unsigned i = 1;; i++) {
        if (!atomic_flag_test_and_set_explicit(&report_busy, memory_order_acquire))
            return true;
        ax_cpu_relax();
        if ((i & 1023) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 50000000L)
                return false;
        }
    }
}

/* A fork while another thread wrote a report left the flag set in the
 * child, with no thread to clear it (review). */
static void crash_atfork_child(void)
{
    atomic_flag_clear(&report_busy);
}

/* The report: who faulted, where, and the frames. Async-signal-safe. */
static void report_fault(int sig, const siginfo_t *si, struct worker *w, struct ax_task *t,
                         bool overflow)
{
    bool entered = report_enter();
    struct line l;
    l.n = 0;
    if (overflow)
        put_str(&l, "ax: stack overflow");
    else {
        put_str(&l, "ax: fatal signal ");
        put_u64(&l, (uint64_t)sig, 10);
    }
    if (si->si_code <= 0) { /* sent, not a fault: no address */
        put_str(&l, " (sent by process ");
        put_u64(&l, (uint64_t)si->si_pid, 10);
    } else {
        put_str(&l, " (fault address ");
        put_u64(&l, (uint64_t)(uintptr_t)si->si_addr, 16);
    }
    put_str(&l, ")");
    if (t) {
        char trace[AX_TRACE_ID_MAX];
        trace_format(t->job, trace); /* memcpy and a table: safe here */
        put_str(&l, " in task ");
        put_u64(&l, t->id, 10);
        put_str(&l, " (");
        put_str(&l, trace);
        put_str(&l, "), attempt ");
        put_u64(&l, t->attempt, 10);
        put_str(&l, ", on worker ");
        put_u64(&l, w ? w->index : 0, 10);
        if (overflow && t->stack) {
            put_str(&l, ", below its ");
            put_u64(&l, t->stack->size / 1024, 10);
            put_str(&l, " KiB coroutine stack");
        }
    } else {
        put_str(&l, " outside any task");
    }
    put_str(&l, "\n");
    ssize_t r = write(2, l.b, l.n);
    (void)r;
    void *bt[AX_BT_MAX];
    int n = backtrace(bt, AX_BT_MAX); /* the unwinder was loaded at start */
    backtrace_symbols_fd(bt, n, 2);
    if (entered)
        atomic_flag_clear_explicit(&report_busy, memory_order_release);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    struct worker *w = ax_current_worker;
    struct ax_task *t = ax_current_run;
    if (w && t && t->stack && sig == SIGSEGV) {
        int in_guard = 0;
        struct ax_stack *stk = ax_stack_owner_of(&w->stacks, si->si_addr, &in_guard);
        if (stk == t->stack && in_guard) {
            report_fault(sig, si, w, t, true);
            if (!w->s->cfg.overflow_fails_task) {
                write_str("ax: aborting: a coroutine cannot be abandoned safely mid-frame "
                          "(set config.overflow_fails_task to fail only the task, unsafe)\n");
                abort();
            }
            /* Opt-in, unsafe: fail only this task. */
            t->bt_n = backtrace(t->bt, AX_BT_MAX);
            t->bt_pc = bt_signal_pc(uc);
            static const char msg[] = "stack overflow";
            memcpy(t->err, msg, sizeof msg);
            t->panicked = 1;
            t->overflowed = 1;
            t->code = AX_EPANIC;
            t->rs = RS_EXITED;
            /* No sigreturn will restore the mask: the worker's own, not the
             * one of whatever this fault interrupted. */
            pthread_sigmask(SIG_SETMASK, &w->sigmask, NULL);
            ax_coro_switch_final(&t->coro, &w->main);
            abort(); /* unreachable */
        }
    }
    /* Not an overflow we can contain. */
    const struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;
    bool sent = si->si_code <= 0;
    if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        if (old->sa_flags & SA_RESETHAND) { /* one-shot: theirs, then the default */
            sigaction(sig, old, NULL);
            if (sent)
                raise(sig);
            return; /* a fault repeats under their handler */
        }
        /* The host's handler decides, with its own mask added, and the
         * signal itself unless it asked for SA_NODEFER: as the kernel would
         * call it, a fault inside it is then fatal. ax's own handler runs
         * with SA_NODEFER (an overflow in a task may follow a fault
         * handled meanwhile); left so, a host handler that faulted
         * re-entered itself through this one for ever, down and around the
         * alternate stack (review: a million entries, the worker spinning,
         * the process never dying). */
        sigset_t prev, mask = old->sa_mask;
        if (!(old->sa_flags & SA_NODEFER))
            sigaddset(&mask, sig);
        pthread_sigmask(SIG_BLOCK, &mask, &prev);
        if (old->sa_flags & SA_SIGINFO)
            old->sa_sigaction(sig, si, uc);
        else
            old->sa_handler(sig);
        pthread_sigmask(SIG_SETMASK, &prev, NULL);
        return;
    }
    if (sent && old->sa_handler == SIG_IGN)
        return; /* the host ignores sent ones */
    /* Say whose it was, then die the usual way. */
    report_fault(sig, si, w, t, false);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (sent)
        raise(sig); /* a sent signal does not repeat by itself */
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
    (void)pthread_atfork(NULL, NULL, crash_atfork_child);
}

void crash_init(void)
{
    pthread_once(&once, install);
}

void crash_thread_signals(struct worker *w)
{
    sigset_t faults;
    sigemptyset(&faults);
    sigaddset(&faults, SIGSEGV);
    sigaddset(&faults, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &faults, &w->sigmask);
    sigdelset(&w->sigmask, SIGSEGV);
    sigdelset(&w->sigmask, SIGBUS);
}

/* On each worker thread: the stack the fault handler runs on. mmap, not
 * malloc: it is allocated when a worker starts, and the heap must not move
 * under a caller measuring it (test_admission checks rejections allocate
 * nothing). A page below it is left inaccessible: the host's handlers run
 * on it too when ax passes a signal on, and one that needs more than its
 * 64 KiB must fault, not write into whatever is mapped below. */
void *crash_altstack_enter(void)
{
    size_t guard = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, guard + ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    stack_t ss = {.ss_sp = m + guard, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
    if (mprotect(m, guard, PROT_NONE) != 0 || sigaltstack(&ss, NULL) != 0) {
        munmap(m, guard + ALTSTACK_SIZE);
        return NULL;
    }
    return m;
}

void crash_altstack_leave(void *mem)
{
    if (!mem)
        return;
    stack_t ss = {.ss_flags = SS_DISABLE};
    sigaltstack(&ss, NULL);
    munmap(mem, (size_t)sysconf(_SC_PAGESIZE) + ALTSTACK_SIZE);
}

/* Panic and overflow report of a finished run (worker, after the switch). */
void crash_report(struct worker *w, struct ax_task *t)
{
    char text[AX_EVENT_MESSAGE_MAX];
    snprintf(text, sizeof text, "%s", t->err);
    if (!ev_on(w->s, AX_EV_PANIC)) {
        /* To stderr as it is: the task's own text must not start lines of
         * its own or move the terminal (ax_dump prints them as '?' too;
         * the JSON writer escapes them). */
        for (char *c = text; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
    }
    struct bt_cut cut = {t->overflowed ? (const void *)on_fault : (const void *)ax_panic,
                         t->overflowed ? 1 : 0, t->overflowed ? 2 : 1, (const void *)t->job->fn,
                         t->overflowed ? t->bt_pc : 0};
    /* Not waiting long for the symbol tables: another thread may be
     * reading them (the warm-up, a hog's naming; libdw stuck on a
     * debuginfo file) and this worker's other tasks would wait (review of
     * 5efb6e8: a panic behind a held reading stopped its worker). */
    unsigned waited = linger_warm_wait(PANIC_NAME_MS); /* the read-ahead's thread reads them */
    if (waited > PANIC_NAME_MS ||
        !bt_format_within(text, sizeof text, t->bt, t->bt_n, &cut, PANIC_NAME_MS - waited))
        bt_format_raw(text, sizeof text, t->bt, t->bt_n, &cut,
                      "the symbol tables were busy 100 ms");
    _Static_assert(PANIC_NAME_MS == 100, "the text above says 100 ms");
    if (ev_on(w->s, AX_EV_PANIC)) {
        /* This run's attempt and run time: the same as its FAILED event's
         * (run_complete measures with the same clock reading). */
        struct ev_attempt a = {t->attempt, t->job->wait_ns, w->now_ns - t->start_ns};
        ev_emit_attempt(w->s, w, t->job, AX_EV_PANIC, AX_EPANIC, text, &a);
    } else {
        char trace[AX_TRACE_ID_MAX];
        trace_format(t->job, trace);
        fprintf(stderr, "ax: PANIC in task %llu (%s), attempt %u: %s\n", (unsigned long long)t->id,
                trace, t->attempt, text);
    }
}
