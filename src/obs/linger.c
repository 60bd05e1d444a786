/* linger.c - lingering tasks (seed §3.4, DESIGN.md §7).
 *
 * A timed-out task's slot is freed at its deadline, but C cannot kill its
 * coroutine: if the function ignores AX_ETIMEDOUT it goes on. The seed's
 * answer was to log the goroutine's stack and alert when it still held
 * resources 3 s later; ax reports such a task once, grace_ms after its
 * deadline, as a LINGERING event (or on stderr when no event sink listens)
 * with its id, how long it has overrun, and a symbolised backtrace, and
 * counts it in ax_stats.lingering.
 *
 * Two cases, because a backtrace can only be taken on the task's own stack:
 *  - parked (in ax_sleep, ax_wait_fd, ax_join, ax_yield): its worker tracks
 *    it from the deadline on; when grace_ms passes the worker resumes it with
 *    bt_req set, run_park records backtrace() and switches straight back, so
 *    the task itself never observes it (one found woken, waiting to run,
 *    the same: its frames are where it parked);
 *  - running without yielding on a held worker: the watchdog sends SIGURG
 *    to the worker thread -- only while that thread still runs that task
 *    (its published seqlock value is unchanged) -- and the handler records
 *    backtrace() of the running coroutine. backtrace() is preloaded at start
 *    so the handler does not load libgcc; the watchdog waits at most
 *    BT_WAIT_MS for it. The handler acts only if this thread's current run
 *    is the one asked about and it interrupted code on that run's stack
 *    (else the watchdog asks again), is installed only when a hog first
 *    lingers, and passes signals that are not its own to the handler the
 *    host had.
 * Either way only return addresses are recorded there; obs/symbols.c names
 * them afterwards: the worker itself for a parked task (only when no other
 * thread is naming: else at a later pass of its loop; the tables are read
 * ahead on a thread of its own when a task first outlives its attempt, so
 * the worker's naming takes microseconds), a thread of its own
 * for a hog ("ax-symbols", one at a time in the process: every naming takes
 * symbols.c's one lock, and one that never ends holds one thread).
 *
 * The watchdog never waits for a hog's report: it is the only thread that
 * ends a held worker's attempts and hands its queued work back, and the
 * first naming reads the modules' symbol tables (58 ms for a small test
 * program here, more for a service's binary), during which it did neither
 * (test_linger_report_async). A report is a `struct linger_pending` on its
 * worker, taken a step further at each of the watchdog's polls (POLL_MS):
 * the signal sent, the addresses taken (or BT_WAIT_MS without them), named
 * on the naming thread, then reported. The naming thread owns no part of
 * the scheduler: it writes into the report, which the last of the two
 * threads to let go of it frees. Reports only being named are looked at
 * every NAMING_POLL_MS (watchdog.c), not every POLL_MS.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BT_WAIT_MS 100
#define NAME_DEFER_MS 2000 /* a parked task's report waits this long for the tables */
#define LINGER_SIGNAL SIGURG

static struct sigaction old_action;

/* A hog's report in progress (the watchdog's): w->lg_pend while its
 * addresses are being taken, then on w->lg_naming while they are named. */
struct linger_pending {
    struct linger_pending *next; /* w->lg_naming */
    _Atomic int refs;  /* the watchdog's, and the naming thread's while it runs */
    _Atomic int named; /* the naming thread wrote text: it may be reported */
    bool started;      /* on w->lg_naming: its naming thread runs (or ran) */
    uint64_t seq;      /* the worker's sequence of the hog's run */
    uint64_t since_ns; /* the capture's start */
    struct job snap;   /* what the report says of the job (see linger_hog_check) */
    struct job_ext snap_ext;
    struct ev_attempt a;
    struct bt_cut cut;
    int bt_n;
    void *bt[AX_BT_MAX];
    char head[128]; /* "still running 12.4 ms after its timeout on worker 3 without yielding:" */
    char text[AX_EVENT_MESSAGE_MAX]; /* head and the named frames */
};

/* Ours if the watchdog of this process sent it to this worker (tgkill:
 * SI_TKILL from our own pid, with a send not yet taken: bt_sent); anything
 * else goes to the handler the host had (SIGURG is rarely used, but it is
 * not ours alone: it is installed only when a hog first lingers, and
 * chains). Deciding by the worker's state alone passed ax's own signal to
 * the host when it came after the run moved on, and took the host's for
 * ax's while a capture was pending (review: the host's handler saw ax's
 * tgkill 1-3 times in 3 000 hogs). Two signals sent before one is taken are
 * delivered once (standard signals do not queue): the exchange takes all.
 *
 * The handler runs on the worker's alternate signal stack (SA_ONSTACK):
 * on the task's own, the signal's frame and the unwinder's few KiB pushed
 * a hog within ~4 KiB of its stack's end into the guard -- ax's sampling
 * turned into a false "stack overflow" and an abort, or, with less room,
 * a SIGSEGV the kernel forces that removed ax's fault handler (review).
 * backtrace() unwinds through the signal frame into the task's stack. */
static void on_signal(int sig, siginfo_t *info, void *ctx)
{
    struct worker *w = ax_current_worker;
    if (w && info && info->si_code == SI_TKILL && info->si_pid == getpid() &&
        atomic_exchange(&w->bt_sent, 0) > 0) {
        int want = 1;
        /* The run asked about, and the same stretch of it (bt_seq: the
         * sequence the watchdog saw it hold the worker with, exact here on
         * the worker's own thread): a run struct is reused, and a late
         * signal could otherwise take the next task's frames for the last
         * one's report (review of ddb972a). A late one is dropped. */
        if (atomic_load(&w->bt_state) == 1 && ax_current_run &&
            ax_current_run == atomic_load(&w->bt_run) &&
            atomic_load(&w->bt_seq) == atomic_load_explicit(&w->pub_seq, memory_order_relaxed)) {
            /* The frames must be the task's: the stack the signal
             * interrupted must be the task's stack -- not the worker's, in
             * the instants around a switch where ax_current_run is already
             * or still set. Else say so, and the watchdog asks again. */
            const struct ax_stack *st = ax_current_run->stack;
            uintptr_t sp = AX_SIGNAL_SP_KNOWN ? bt_signal_sp(ctx)
                                              : (uintptr_t)__builtin_frame_address(0);
            bool on_task = st && sp - (uintptr_t)st->lo < st->size;
            if (on_task) {
                w->bt_n = backtrace(w->bt, AX_BT_MAX);
                w->bt_pc = bt_signal_pc(ctx);
            }
            atomic_compare_exchange_strong(&w->bt_state, &want, on_task ? 2 : 3);
        }
        return;
    }
    /* The host's handler, in the form it was installed with. SIG_IGN and
     * SIG_DFL (SIGURG's default is to ignore it) may come back with
     * SA_SIGINFO set too: they are not functions. */
    if (old_action.sa_handler == SIG_DFL || old_action.sa_handler == SIG_IGN)
        return;
    sigset_t prev;
    pthread_sigmask(SIG_BLOCK, &old_action.sa_mask, &prev);
    if (old_action.sa_flags & SA_SIGINFO)
        old_action.sa_sigaction(sig, info, ctx);
    else
        old_action.sa_handler(sig);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_once_t once_signal = PTHREAD_ONCE_INIT;

static void preload(void)
{
    void *frames[4];
    backtrace(frames, 4); /* load the unwinder now, not in a signal handler */
}

static void install_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    /* On the alternate stack only where the interrupted SP can be read:
     * elsewhere the handler's own frame is how it tells the task's stack
     * (review: with SA_ONSTACK there, no backtrace was ever taken). */
    /* SA_RESTART always: ax samples a hog that may be blocked in a system
     * call of its own, which must not see EINTR because of ax. Following
     * the host's own handler's choice instead (tried: a host interrupting
     * its own threads' calls with SIGURG found them restarted) made the
     * sampled hogs' calls fail with EINTR (review). The host's SIGURGs
     * restart too once this is installed: README says so. */
    sa.sa_flags = SA_RESTART | SA_SIGINFO | (AX_SIGNAL_SP_KNOWN ? SA_ONSTACK : 0);
    sigemptyset(&sa.sa_mask);
    /* The host's handler read first: a signal of the host's arriving in
     * the same call as the install found old_action still empty. */
    sigaction(LINGER_SIGNAL, NULL, &old_action);
    sigaction(LINGER_SIGNAL, &sa, NULL);
}

void linger_thread_signals(struct worker *w)
{
    atomic_store_explicit(&w->urg_blocked, sigismember(&w->sigmask, LINGER_SIGNAL) == 1,
                          memory_order_relaxed);
}

/* Ask w's thread for its backtrace; false if no signal went (the thread has
 * left its loop, or blocks the signal: see linger_hog_check). Under
 * sig_lk, which the worker takes as it leaves: ax_free joins the workers
 * before it stops the watchdog, and a pthread_kill of a joined thread is
 * undefined (its id may name a new thread). */
static bool ask_backtrace(struct worker *w)
{
    bool sent = false;
    pthread_mutex_lock(&w->sig_lk);
    if (!w->sig_gone) {
        atomic_fetch_add(&w->bt_sent, 1);
        sent = pthread_kill(w->thread, LINGER_SIGNAL) == 0;
        if (!sent)
            atomic_fetch_sub(&w->bt_sent, 1);
    }
    pthread_mutex_unlock(&w->sig_lk);
    return sent;
}

void linger_thread_gone(struct worker *w)
{
    pthread_mutex_lock(&w->sig_lk);
    w->sig_gone = true;
    pthread_mutex_unlock(&w->sig_lk);
}

static atomic_int namers; /* defined below, with its comment */
/* The read-ahead of the symbol tables (warm_symbols): WARM_NONE, or
 * WARM_READING while its thread reads them, then WARM_DONE (also when no
 * thread could start: the worker reads them itself, as before). */
enum { WARM_NONE, WARM_READING, WARM_DONE };
static atomic_int warmed;
/* A symbols thread (the read-ahead, or a hog's naming) has read the
 * tables once: a naming on a worker then takes microseconds. */
static atomic_int tables_read;

/* In a child of fork(): no naming thread of the parent's is there to give
 * `namers` back (review: the child's reports were never named, and its
 * ax_free waited out its whole budget for them); symbols.c resets its own. */
static void linger_atfork_child(void)
{
    atomic_store(&namers, 0);
    int reading = WARM_READING; /* its thread is not in the child either */
    atomic_compare_exchange_strong(&warmed, &reading, WARM_NONE);
}

static void linger_setup(void)
{
    preload();
    symbols_init();
    (void)pthread_atfork(NULL, NULL, linger_atfork_child);
}

int linger_init(void)
{
    pthread_once(&once, linger_setup);
    return AX_OK;
}

/* The numbers of t's attempt, which ended at end_ns: from its run, not
 * from its job, whose attempt, wait and run time a retry scheduled at the
 * timeout moves on (the parked report said attempt 1 for attempt 0), and
 * which the thread scheduling it writes with no order against a report on
 * another thread (TSan, review). t's fields were written before it ran. */
static struct ev_attempt attempt_of(const struct ax_task *t, uint64_t end_ns)
{
    uint64_t run = end_ns > t->start_ns ? end_ns - t->start_ns : 1;
    return (struct ev_attempt){t->attempt, t->wait_ns, run};
}

/* a: the attempt's numbers (attempt_of). */
static void report(struct ax_sched *s, struct worker *w_or_null, const struct job *j,
                   const struct ev_attempt *a, const char *text)
{
    pthread_mutex_lock(&s->lock);
    s->st.lingering++;
    pthread_mutex_unlock(&s->lock);
    if (ev_on(s, AX_EV_LINGERING)) {
        ev_emit_attempt(s, w_or_null, j, AX_EV_LINGERING, AX_ETIMEDOUT, text, a);
    } else {
        char trace[AX_TRACE_ID_MAX];
        trace_format(j, trace);
        report_note(s, report_line("ax: LINGERING task %llu (%s): %s", (unsigned long long)j->id,
                                   trace, text));
    }
}

/* The worker takes the report of t's attempt `expect` (its expect_sw): true
 * if it does, false once it is taken (the watchdog's claim, in
 * linger_hog_check, is the same compare-and-swap from the value it read
 * first). On the worker's thread, where the run struct is reused, a fresh
 * read is that value. */
static bool claim(struct ax_task *t, uint64_t expect)
{
    uint64_t old = atomic_load_explicit(&t->lg_reported_sw, memory_order_relaxed);
    return old != expect &&
           atomic_compare_exchange_strong_explicit(&t->lg_reported_sw, &old, expect,
                                                   memory_order_relaxed, memory_order_relaxed);
}

/* An overrun as a newcomer reads it: "12.4 ms" below a second, "3.2 s"
 * from there (grace_ms is often tens of ms: "0.0 s" read as a
 * contradiction in a new user's trial). */
static const char *overrun(char out[32], uint64_t ns)
{
    if (ns < 1000000000u)
        snprintf(out, 32, "%.1f ms", (double)ns / 1e6);
    else
        snprintf(out, 32, "%.1f s", (double)ns / 1e9);
    return out;
}

static const char *park_name(int parked)
{
    switch (parked) {
    case RS_PARK_SLEEP: return "ax_sleep";
    case RS_PARK_FD: return "ax_wait_fd";
    case RS_PARK_JOIN: return "ax_join";
    case RS_PARK_YIELD: return "ax_yield";
    case RS_PARK_EXT: return "an HTTP transfer";
    default: return "a ready queue";
    }
}

/* Naming threads running, in the process: one at most. Every naming takes
 * symbols.c's one lock anyway, and a naming that never ends (libdw stuck on
 * a debuginfo file) then holds one thread, not one per later report. */
static atomic_int namers;

/* A detached thread for symbols.c's work (a naming, a warm-up): it owns
 * no part of a scheduler, and starts with every signal blocked (the
 * host's are not ours to take). The caller holds `namers`. */
static bool symbols_thread(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t th;
    sigset_t all, old;
    sigfillset(&all);
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        rc = pthread_create(&th, &attr, fn, arg);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    return rc == 0;
}

static void *warm_main(void *fn)
{
    pthread_setname_np(pthread_self(), "ax-symbols");
    bt_warm(fn, (const void *)run_park);
    atomic_store(&tables_read, 1);
    atomic_store(&warmed, WARM_DONE);
    atomic_fetch_sub(&namers, 1);
    return NULL;
}

/* A task outlived its attempt: its report may be named grace_ms from now,
 * by its worker (linger_check), and the first naming in a process reads
 * the modules' tables (58 ms for a small test program, more for a
 * service's binary), which its worker's other tasks would wait for. Read
 * them now, once, on a thread of its own (not if a naming thread runs: it
 * reads them). */
static void warm_symbols(const void *fn)
{
    if (!bt_symbolised() || atomic_load_explicit(&warmed, memory_order_relaxed) != WARM_NONE)
        return;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&namers, &idle, 1))
        return; /* a naming thread reads them; tried again at the next */
    int none = WARM_NONE;
    if (!atomic_compare_exchange_strong(&warmed, &none, WARM_READING)) {
        atomic_fetch_sub(&namers, 1);
        return;
    }
    if (!symbols_thread(warm_main, (void *)(uintptr_t)fn)) {
        atomic_store(&warmed, WARM_DONE); /* no thread: the worker reads them */
        atomic_fetch_sub(&namers, 1);
    }
}

/* The read-ahead has started and not ended. A worker then names nothing
 * itself, even when it finds the tables' lock free: the thread may not
 * have taken it yet (it was started a grace_ms earlier, but on a busy
 * machine a thread can wait longer than that for a CPU), and the worker
 * would read the tables itself while its other tasks waited (CI, TSan:
 * test_linger_parked_naming found the worker in libdw's first read). */
static bool warm_reading(void)
{
    return atomic_load(&warmed) == WARM_READING;
}

/* The tables may be read at this moment by a thread of ours that has not
 * taken their lock yet: the read-ahead, or a hog's naming thread before
 * any thread has read them (review: a worker found the lock free while a
 * hog's naming thread was starting, and read them itself). */
static bool symbols_busy(void)
{
    return warm_reading() || (atomic_load(&namers) > 0 && !atomic_load(&tables_read));
}

unsigned linger_warm_wait(unsigned max_ms)
{
    unsigned k = 0;
    for (; k < max_ms && symbols_busy(); k++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return symbols_busy() ? max_ms + 1 : k;
}

void linger_track(struct worker *w, struct ax_task *t)
{
    if (t->expect_sw == atomic_load_explicit(&t->lg_reported_sw, memory_order_relaxed))
        return; /* the watchdog already reported it while it held the worker */
    if (w->nlinger == w->linger_cap) {
        unsigned cap = w->linger_cap ? w->linger_cap * 2 : 16;
        struct linger_entry *e = realloc(w->linger, cap * sizeof *e);
        if (!e)
            return; /* not tracked: it only loses the report */
        w->linger = e;
        w->linger_cap = cap;
    }
    w->linger[w->nlinger++] = (struct linger_entry){.run = t,
                                                    .life_gen = t->life_gen,
                                                    .woken_calls = LINGER_UNSEEN,
                                                    .since_ns = t->deadline_ns};
    warm_symbols((const void *)t->job->fn);
}

/* e's report (its task past due, not reported): made now (true), or, the
 * symbol tables busy, deferred to a later pass with the backtrace taken
 * now (false) -- never when `final` (the task returns: linger_orphan_returned). */
static bool entry_report(struct worker *w, struct linger_entry *e, bool woken, bool final)
{
    struct ax_task *t = e->run;
    uint64_t grace = (uint64_t)w->s->cfg.grace_ms * 1000000u;
    int rs = e->deferred ? e->deferred_rs : t->rs;
    char text[AX_EVENT_MESSAGE_MAX], over[32];
    overrun(over, w->now_ns - e->since_ns);
    if (final) /* made at its return: what it did when the report was due */
        snprintf(text, sizeof text,
                 "ran on %s after its timeout before it returned; when its report was due it "
                 "%s%s:",
                 over, e->deferred_calls ? "was calling blocking functions that return "
                                           "AX_ETIMEDOUT, last parked in "
                                         : "was parked in ",
                 park_name(rs));
    else if (t->detached_calls > 1)
        snprintf(text, sizeof text,
                 "still running %s after its timeout, calling blocking functions "
                 "that return AX_ETIMEDOUT without returning itself (each call pauses "
                 "up to 100 ms):",
                 over);
    else
        snprintf(text, sizeof text, "still running %s after its timeout, parked in %s:", over,
                 park_name(rs));
    /* Parked, or woken and not resumed since (its frames are where it
     * parked last: run_park, which its real resume returns from later).
     * One that panicked and runs its cleanups holds its panic's frames in
     * t->bt, for the panic's report at its end: kept aside and put back
     * (review: the report named where it had panicked, not the cleanup
     * it was in). */
    void *panic_bt[AX_BT_MAX];
    int panic_n = -1;
    uint8_t panic_in_park = 0;
    if (!e->deferred && (t->bt_n == 0 || t->panicked) && t->began && t->rs != RS_EXITED) {
        if (t->panicked) {
            memcpy(panic_bt, t->bt, sizeof panic_bt);
            panic_n = t->bt_n;
            panic_in_park = t->bt_in_park;
        }
        /* Resume it just to record where it is; run_park switches back. */
        t->bt_req = 1;
        ax_current_run = t;
        ax_coro_switch(&w->main, &t->coro);
        ax_current_run = NULL;
    }
    /* The task's frames begin after run_bt_serve's, and run_park's when it
     * was parked there (not in the yield hand-off). */
    struct bt_cut cut = {(const void *)run_bt_serve, t->bt_in_park, 1 + t->bt_in_park,
                         (const void *)t->job->fn, 0};
    if (e->deferred && (t->panicked || t->overflowed)) {
        /* Its panic wrote its own frames over the ones taken (review). */
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len,
                 " (no backtrace: it panicked before the frames taken were named)");
    } else if (symbols_busy() || !bt_format_within(text, sizeof text, t->bt, t->bt_n, &cut, 0)) {
        /* Another thread reads or names with the symbol tables (the
         * warm-up, a hog's report): the worker does not wait for it --
         * its other tasks would (test_linger_parked_naming) -- but
         * looks again at a later pass, with the backtrace it has.
         * NAME_DEFER_MS past due, the report goes with the raw
         * addresses (addr2line): libdw may be stuck on a debuginfo
         * file (review: a naming that never ended stopped the worker's
         * queued work too, and ax_free leaked it). */
        if (!final && panic_n < 0 && w->now_ns < e->since_ns + grace + NAME_DEFER_MS * 1000000ull) {
            e->deferred = 1;
            e->deferred_rs = (uint8_t)rs;
            e->deferred_woken = woken;
            e->deferred_calls = t->detached_calls > 1;
            return false;
        }
        bt_format_raw(text, sizeof text, t->bt, t->bt_n, &cut,
                      final       ? "the symbol tables were busy when it returned"
                      : panic_n >= 0 ? "the symbol tables were busy"
                                     : "the symbol tables were busy 2000 ms");
        _Static_assert(NAME_DEFER_MS == 2000, "the text above says 2000 ms");
    }
    if (panic_n >= 0) {
        memcpy(t->bt, panic_bt, sizeof panic_bt);
        t->bt_n = panic_n;
        t->bt_in_park = panic_in_park;
    }
    struct ev_attempt a = attempt_of(t, e->since_ns);
    if (claim(t, t->expect_sw))
        report(w->s, w, t->job, &a, text);
    return true;
}

void linger_check(struct worker *w)
{
    uint64_t grace = (uint64_t)w->s->cfg.grace_ms * 1000000u;
    for (unsigned i = 0; i < w->nlinger;) {
        struct linger_entry *e = &w->linger[i];
        struct ax_task *t = e->run;
        if (t->life_gen != e->life_gen || t->job == NULL ||
            t->expect_sw == atomic_load_explicit(&t->lg_reported_sw, memory_order_relaxed)) {
            /* It ended, or the watchdog reported it since (a hog that
             * parked after it had held its worker past grace_ms). */
            w->linger[i] = w->linger[--w->nlinger];
            continue;
        }
        if (w->now_ns < e->since_ns + grace) {
            i++;
            continue;
        }
        /* Woken but not resumed since, at this pass: a worker held by
         * another task kept it from running (or its own timer just woke
         * it). But a worker a hog holds all but the moments it yields
         * finds it woken at every pass (a new-user trial: orphans calling
         * on for 300 ms, never reported). So, BT_WAIT_MS
         * past due and once it has run since its attempt ended: its calls
         * since (detached_calls) are noted, and it is reported at a later
         * pass only if it has called on twice more.
         * Not for the calls alone: a task that checks its codes may make a
         * cleanup call or two and return when resumed (review of 5264f22:
         * such a task was blamed). Decided once: a deferred report is
         * made as it was found. */
        bool woken = e->deferred ? e->deferred_woken : t->rs == RS_ACTIVE;
        if (woken && !e->deferred) {
            unsigned calls = t->detached_calls;
            if (w->now_ns < e->since_ns + grace + BT_WAIT_MS * 1000000ull || calls == 0) {
                i++;
                continue;
            }
            if (e->woken_calls == LINGER_UNSEEN) {
                e->woken_calls = (uint16_t)calls;
                i++;
                continue;
            }
            /* The count stops at UINT8_MAX: by then it has called on. */
            if (calls < e->woken_calls + 2u && calls < UINT8_MAX) {
                i++;
                continue;
            }
        }
        if (!entry_report(w, e, woken, false)) {
            i++;
            continue;
        }
        w->linger[i] = w->linger[--w->nlinger];
    }
}

void linger_orphan_returned(struct worker *w, struct ax_task *t)
{
    for (unsigned i = 0; i < w->nlinger; i++) {
        struct linger_entry *e = &w->linger[i];
        if (e->run != t || e->life_gen != t->life_gen)
            continue;
        if (e->deferred)
            entry_report(w, e, e->deferred_woken, true);
        w->linger[i] = w->linger[--w->nlinger];
        return;
    }
}

void linger_returned(struct worker *w, struct ax_task *t)
{
    if (!claim(t, t->expect_sw))
        return; /* reported while it ran on */
    char text[AX_EVENT_MESSAGE_MAX], over[32];
    snprintf(text, sizeof text,
             "ran on %s after its timeout on worker %u without yielding, and returned "
             "before it was seen (no backtrace: one is taken only while it runs)",
             overrun(over, w->now_ns - t->deadline_ns), w->index);
    struct ev_attempt a = attempt_of(t, t->deadline_ns);
    report(w->s, w, t->job, &a, text);
}

static void pending_report(struct ax_sched *s, struct linger_pending *p, const char *text);

void linger_hog_check(struct ax_sched *s, struct worker *w, uint64_t now, struct ax_task *t,
                      struct job *j, uint64_t expect, uint64_t deadline, uint64_t seq)
{
    /* Once an attempt (however often it yields and holds its worker again);
     * one backtrace taken at a time a worker (the next poll after it). */
    uint64_t seen = atomic_load_explicit(&t->lg_reported_sw, memory_order_relaxed);
    if (now < deadline + (uint64_t)s->cfg.grace_ms * 1000000u || w->lg_pend || seen == expect)
        return;
    /* Its attempt must have ended: a run still inside its own attempt is
     * timed out by its deadline first (watchdog.c), never reported. The
     * job pointer came from the same seqlock read as the run, and while its
     * coroutine lives the job is held (JH_RUN): same generation, or the run
     * moved on and this snapshot is stale. */
    uint64_t word = atomic_load_explicit(&j->sw, memory_order_acquire);
    if (js_gen(word) != js_gen(expect) ||
        (word & ~(JH_ALL | JF_WAIT | JF_RETRY_ARMED)) == expect ||
        atomic_load_explicit(&w->pub_seq, memory_order_acquire) != seq)
        return;
    /* What the report says about the job, copied now: the watchdog holds
     * no hold on it, and once the hog returns (while the backtrace is being
     * named, which can take long the first time) the job may be freed. */
    struct job snap;
    struct job_ext snap_ext;
    memset(&snap, 0, sizeof snap);
    snap.id = j->id;
    snap.prio = j->prio;
    snap.cls = j->cls; /* classes are never removed: the event's "class" */
    trace_format(j, snap.trace_id);
    snap.has_trace = 1; /* the copy: the snapshot's id is the hog's */
    if (j->has_ref) {
        /* Under s->lock, which job_free_locked takes to free ext: the hog
         * may return and its job be freed at any moment (the watchdog holds
         * no hold). Same generation under the lock: still the hog's job. */
        pthread_mutex_lock(&s->lock);
        uint64_t now_word = atomic_load_explicit(&j->sw, memory_order_acquire);
        if (js_gen(now_word) == js_gen(expect) && j->has_ref && j->ext) {
            memcpy(snap_ext.ref, j->ext->ref, sizeof snap_ext.ref);
            snap_ext.err = NULL;
            snap.ext = &snap_ext;
            snap.has_ref = 1;
        }
        pthread_mutex_unlock(&s->lock);
    }
    struct ev_attempt a = attempt_of(t, deadline);
    const void *task_fn = (const void *)j->fn;
    /* It returned meanwhile: the copy may be of another job. The check is
     * a read-don't-modify-write (adds 0) with release order, not a load:
     * an acquire load keeps later accesses after it but lets the plain
     * reads of the job above drift past it on a weakly ordered CPU (ARM),
     * where they could then see a reused job that the check passed. A
     * release RMW keeps them before it, and needs no fence, which gcc's
     * TSan refuses (Boehm, "Can seqlocks get along with programming
     * language memory models?", 2012). It writes the value it read: the
     * worker's own publish (a load, then stores) loses nothing to it. On
     * x86 the reads already stay in order: no test here can show the
     * difference. */
    if (atomic_fetch_add_explicit(&w->pub_seq, 0, memory_order_acq_rel) != seq)
        return;
    struct linger_pending *p = malloc(sizeof *p);
    if (!p)
        return; /* the next poll tries again */
    memset(p, 0, sizeof *p);
    atomic_init(&p->refs, 1);
    atomic_init(&p->named, 0);
    p->seq = seq;
    p->since_ns = now;
    p->snap = snap;
    if (snap.ext) {
        p->snap_ext = snap_ext;
        p->snap.ext = &p->snap_ext;
    }
    p->a = a;
    p->cut = (struct bt_cut){(const void *)on_signal, 1, 2, task_fn, 0};
    char over[32];
    snprintf(p->head, sizeof p->head,
             "still running %s after its timeout on worker %u without yielding:",
             overrun(over, now - deadline), w->index);
    /* Reported from now on: neither this check nor the worker's own
     * (linger_check, linger_returned) takes it up again. If the worker took
     * any report on this run struct since `seen` was read -- this attempt's
     * (the hog parked or returned since the checks above), or, the struct
     * reused, a later task's -- this one is dropped: a claim from a fresh
     * read reported the hog twice when the watchdog was kept off its CPU
     * here that long (review of a7b5383). After the checks: a run that
     * moved on is not marked (its next attempt would not match anyway:
     * expect names the attempt). */
    if (!atomic_compare_exchange_strong_explicit(&t->lg_reported_sw, &seen, expect,
                                                 memory_order_relaxed, memory_order_relaxed)) {
        free(p);
        return;
    }
    if (atomic_load_explicit(&w->urg_blocked, memory_order_relaxed)) {
        /* A host that blocks every signal before ax_new has its workers
         * block this one too: ax does not unblock a signal the host may
         * take with sigwait or signalfd. Said, not asked for 100 ms in
         * vain (and the signal left pending on the worker). */
        char text[AX_EVENT_MESSAGE_MAX];
        snprintf(text, sizeof text,
                 "%s (no backtrace: SIGURG is blocked on its worker's thread, as it was on the "
                 "thread that called ax_new)",
                 p->head);
        pending_report(s, p, text);
        return;
    }
    pthread_once(&once_signal, install_signal);
    atomic_store(&w->bt_run, t);
    atomic_store(&w->bt_seq, seq);
    /* Only a thread still running that timed-out task is signalled. */
    atomic_store(&w->bt_state, 1);
    ask_backtrace(w); /* none sent: reported without one after BT_WAIT_MS */
    w->lg_pend = p;
}

static void pending_unref(struct linger_pending *p)
{
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
        free(p);
}

static void pending_report(struct ax_sched *s, struct linger_pending *p, const char *text)
{
    report(s, NULL, &p->snap, &p->a, text);
    pending_unref(p);
}

static void *naming_main(void *arg)
{
    struct linger_pending *p = arg;
    pthread_setname_np(pthread_self(), "ax-symbols");
    bt_format(p->text, sizeof p->text, p->bt, p->bt_n, &p->cut);
    atomic_store(&tables_read, 1);
    atomic_store_explicit(&p->named, 1, memory_order_release);
    pending_unref(p);
    atomic_fetch_sub(&namers, 1);
    return NULL;
}

/* Start p's naming thread if none runs; false if one does (p waits on
 * w->lg_naming for a later poll) or none can start, in which case p is
 * named here, on the watchdog, as every report was before (*inline_done):
 * the report is not lost. The thread starts with every signal blocked
 * (the host's are not ours to take). */
static bool try_start_naming(struct linger_pending *p, bool *inline_done)
{
    *inline_done = false;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&namers, &idle, 1))
        return false;
    atomic_store_explicit(&p->refs, 2, memory_order_relaxed);
    if (!symbols_thread(naming_main, p)) {
        atomic_store_explicit(&p->refs, 1, memory_order_relaxed);
        atomic_fetch_sub(&namers, 1);
        bt_format(p->text, sizeof p->text, p->bt, p->bt_n, &p->cut);
        *inline_done = true;
        return false;
    }
    p->started = true;
    return true;
}

/* The addresses are taken (w->bt is free again): p goes on w->lg_naming,
 * its naming started now or at a later poll. */
static void start_naming(struct ax_sched *s, struct worker *w, struct linger_pending *p)
{
    memcpy(p->text, p->head, sizeof p->head);
    bool inline_done;
    try_start_naming(p, &inline_done);
    if (inline_done) {
        pending_report(s, p, p->text);
        return;
    }
    p->next = w->lg_naming;
    w->lg_naming = p;
}

/* The capture (w->lg_pend): the handler took the addresses (state 2), or
 * found the thread off the task's stack (3: asked again), or nothing came
 * within BT_WAIT_MS or the task moved on (reported without a backtrace). */
static void capture_step(struct ax_sched *s, struct worker *w, uint64_t now)
{
    struct linger_pending *p = w->lg_pend;
    int st = atomic_load(&w->bt_state);
    if (st == 2) { /* ours to copy, then free for the next capture */
        p->bt_n = w->bt_n;
        p->cut.signal_pc = w->bt_pc;
        memcpy(p->bt, w->bt, sizeof p->bt);
        atomic_store(&w->bt_state, 0);
        w->lg_pend = NULL;
        start_naming(s, w, p);
        return;
    }
    bool moved = atomic_load_explicit(&w->pub_seq, memory_order_acquire) != p->seq;
    if (!moved && now - p->since_ns < BT_WAIT_MS * 1000000ull) {
        if (st == 3) { /* again, within the same bound (review: it asked for ever) */
            atomic_store(&w->bt_seq, p->seq);
            atomic_store(&w->bt_state, 1);
            ask_backtrace(w);
        }
        return;
    }
    atomic_store(&w->bt_state, 0);
    w->lg_pend = NULL;
    char text[AX_EVENT_MESSAGE_MAX];
    snprintf(text, sizeof text,
             "%s (no backtrace: the task moved on, or its worker did not answer within %d ms)",
             p->head, BT_WAIT_MS);
    pending_report(s, p, text);
}

int linger_pending_step(struct ax_sched *s, struct worker *w, uint64_t now)
{
    if (w->lg_pend)
        capture_step(s, w, now);
    for (struct linger_pending **pp = &w->lg_naming; *pp;) {
        struct linger_pending *p = *pp;
        bool inline_done = false;
        if (!p->started && !try_start_naming(p, &inline_done) && !inline_done) {
            pp = &p->next; /* another naming runs: a later poll */
            continue;
        }
        if (!inline_done && !atomic_load_explicit(&p->named, memory_order_acquire)) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        pending_report(s, p, p->text);
    }
    return w->lg_pend ? 2 : w->lg_naming ? 1 : 0;
}

void linger_pending_flush(struct ax_sched *s, uint64_t until)
{
    for (unsigned i = 0; i < s->nworkers; i++) {
        struct worker *w = &s->workers[i];
        if (w->lg_pend) {
            struct linger_pending *p = w->lg_pend;
            atomic_store(&w->bt_state, 0);
            w->lg_pend = NULL;
            char text[AX_EVENT_MESSAGE_MAX];
            snprintf(text, sizeof text, "%s (no backtrace: the scheduler stopped first)", p->head);
            pending_report(s, p, text);
        }
        while (w->lg_naming) {
            struct linger_pending *p = w->lg_naming;
            w->lg_naming = p->next;
            /* Until ax_free's budget (one deadline for all): then the
             * report goes without its frames, and the naming thread frees
             * it when it is done. One not started waits for its turn. */
            bool inline_done = false;
            while (!p->started && !inline_done && now_ns() < until &&
                   !try_start_naming(p, &inline_done)) {
                if (inline_done)
                    break;
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
            while (p->started && !atomic_load_explicit(&p->named, memory_order_acquire) &&
                   now_ns() < until) {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
            if (inline_done ||
                (p->started && atomic_load_explicit(&p->named, memory_order_acquire))) {
                pending_report(s, p, p->text);
            } else {
                char text[AX_EVENT_MESSAGE_MAX];
                snprintf(text, sizeof text,
                         "%s (backtrace not named: still being named when the scheduler stopped)",
                         p->head);
                pending_report(s, p, text);
            }
        }
    }
}
