/* dump.c - the live task dump (seed §4.2: "we read the goroutine dump").
 *
 * ax_dump copies a line's worth of facts about each live job under s->lock
 * (one pass over the job table, O(table size)) and formats outside it, so
 * the workers are held up only for the copy. For RUNNING jobs the worker is
 * read through job->run, which the worker published before the RUNNING CAS
 * (js_begin). Only live jobs are listed: the state word says which (a
 * finished job whose on_done is still running is not listed)
 * (acquire on the state word). Time to deadline: the attempt's deadline for
 * a running task, the absolute deadline (if any) otherwise.
 *
 * ax_dump_on_signal: an async-signal-safe handler writes one byte to a pipe;
 * a thread blocked on the pipe performs the dumps of every registered
 * scheduler. Registrations are process-wide (signals are).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dump_line {
    uint64_t id, age_ns;
    int64_t deadline_in_ns; /* INT64_MIN: none */
    char trace[AX_TRACE_ID_MAX];
    uint8_t prio, state;
    unsigned attempt;
    int worker;
};

static const char *state_name(unsigned st)
{
    switch (st) {
    case JS_DELAYED: return "delayed";
    case JS_STARTING: return "starting";
    default: return ax_state_name(js_public(st));
    }
}

int ax_dump(ax_sched *s, FILE *f, size_t max_tasks)
{
    if (!s || !f)
        return ax_fail_static(AX_EINVAL, "ax_dump: NULL scheduler or file");
    if (sched_forked(s))
        return sched_forked_fail("ax_dump");
    size_t cap = 1024, n = 0, total = 0;
    struct dump_line *lines = malloc(cap * sizeof *lines);
    if (!lines)
        return ax_fail_static(AX_ENOMEM, "ax_dump: out of memory");
    uint64_t now = now_ns();
    ax_stats st;
    ax_stats_get(s, &st);
    pthread_mutex_lock(&s->lock);
    for (unsigned c = 0; c < s->nchunks; c++) {
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++) {
            struct job *j = &s->chunks[c][k];
            uint64_t sw = atomic_load_explicit(&j->sw, memory_order_acquire);
            if (!js_is(sw, JS_LIVE_MASK))
                continue; /* free, or ended (its on_done may still be running) */
            total++;
            if (max_tasks && n >= max_tasks)
                continue;
            if (n == cap) {
                struct dump_line *m = realloc(lines, cap * 2 * sizeof *m);
                if (!m)
                    continue;
                lines = m;
                cap *= 2;
            }
            struct dump_line *l = &lines[n++];
            l->id = j->id;
            trace_format(j, l->trace);
            for (char *c = l->trace; *c; c++) /* one task, one line: no control bytes */
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                    *c = '?';
            l->prio = j->prio;
            l->state = (uint8_t)js_state(sw);
            l->attempt = js_attempt(sw);
            l->age_ns = now > j->submit_ns ? now - j->submit_ns : 0;
            l->worker = -1;
            uint64_t dl = j->deadline_ns;
            if (l->state == JS_RUNNING || l->state == JS_STARTING) {
                uint64_t attempt_dl = j->enqueue_ns + j->wait_ns + j->timeout_ns;
                if (!dl || attempt_dl < dl)
                    dl = attempt_dl;
                if (l->state == JS_RUNNING && j->run)
                    l->worker = (int)j->run->w->index;
            }
            l->deadline_in_ns = dl ? (int64_t)(dl - now) : INT64_MIN;
        }
    }
    pthread_mutex_unlock(&s->lock);

    /* A file that is a pipe whose reader left fails the dump with EPIPE,
     * not the host's thread killed by SIGPIPE (a trial: ax_dump never
     * returned its AX_ESYS). */
    struct sigpipe_hold hold;
    sigpipe_hold(&hold);
    fprintf(f,
            "ax dump: %zu tasks (running %llu, queued high %llu normal %llu low %llu, "
            "delayed %llu, limit %llu, orphans %llu)\n",
            total, (unsigned long long)st.running, (unsigned long long)st.queued[AX_PRIO_HIGH],
            (unsigned long long)st.queued[AX_PRIO_NORMAL],
            (unsigned long long)st.queued[AX_PRIO_LOW], (unsigned long long)st.delayed,
            (unsigned long long)st.limit, (unsigned long long)st.orphans);
    for (size_t i = 0; i < n; i++) {
        struct dump_line *l = &lines[i];
        fprintf(f, "  id=%llu trace=%s prio=%s state=%s attempt=%u age=%.3fs",
                (unsigned long long)l->id, l->trace, ax_priority_name((ax_priority)l->prio),
                state_name(l->state), l->attempt, (double)l->age_ns / 1e9);
        if (l->deadline_in_ns != INT64_MIN)
            fprintf(f, " deadline_in=%.3fs", (double)l->deadline_in_ns / 1e9);
        else
            fputs(" deadline_in=-", f);
        if (l->worker >= 0)
            fprintf(f, " worker=%d", l->worker);
        fputc('\n', f);
    }
    if (total > n)
        fprintf(f, "  ... %zu more\n", total - n);
    errno = 0;
    bool failed = fflush(f) != 0 || ferror(f);
    int err = errno;
    sigpipe_release(&hold, failed && err == EPIPE);
    free(lines);
    if (failed)
        return ax_fail(AX_ESYS, "ax_dump: writing the dump failed: %s",
                       err ? strerror(err) : "the stream's error flag is set");
    return AX_OK;
}

/* ---- on a signal ------------------------------------------------------------ */

#define DUMP_MAX 8

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    ax_sched *s;
    FILE *f;
    int signo;
} reg[DUMP_MAX];
static int dump_pipe[2] = {-1, -1};
static pthread_t dump_thread;
/* The scheduler the dump thread is writing about, outside reg_lock (a
 * dump may block on its file: a pipe nobody reads); dump_unregister waits
 * for it to be done with s. Under reg_lock; dump_done signals a change. */
static ax_sched *dumping;
static pthread_cond_t dump_done = PTHREAD_COND_INITIALIZER;
/* The action each signal had before ax took it (valid while `taken`): put
 * back once no scheduler dumps on it, unless the program has installed
 * another action since (a trial found the program's own SIGUSR1 handler
 * gone for good, and SIGUSR2's default action swallowed). Under reg_lock. */
static struct sigaction saved_action[256];
static bool taken[256];

static void on_dump_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    /* Non-blocking: with the pipe full (a signal storm, the dump thread
     * stuck in a write) the wake-up is dropped, not the handler stuck in
     * write(2) (review); the pending ones dump all the same. */
    ssize_t r = write(dump_pipe[1], &b, 1);
    (void)r;
    errno = saved;
}

static void *dump_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "ax-dump");
    /* A dump file that is a pipe whose reader left fails with EPIPE, not
     * SIGPIPE raised on ax's thread (review: it killed the host). */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    unsigned char b;
    for (;;) {
        ssize_t r = read(dump_pipe[0], &b, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return NULL;
        /* Each registration of signal b, written outside reg_lock: a file
         * that blocks holds this thread, not ax_dump_on_signal or ax_free
         * of every scheduler (review: ax_free hung behind it). */
        pthread_mutex_lock(&reg_lock);
        for (int i = 0; i < DUMP_MAX; i++) {
            if (!reg[i].s || reg[i].signo != b)
                continue;
            ax_sched *s = dumping = reg[i].s;
            FILE *f = reg[i].f;
            pthread_mutex_unlock(&reg_lock);
            ax_dump(s, f, 0);
            pthread_mutex_lock(&reg_lock);
            dumping = NULL;
            pthread_cond_broadcast(&dump_done);
        }
        pthread_mutex_unlock(&reg_lock);
    }
}

/* In a child of fork(): none of ax's threads is there, and the pipe is the
 * parent's too. A signal the child took went into the parent's pipe and
 * dumped the parent's scheduler, while the child's registration never
 * dumped (trial). The child starts afresh: no registration (the parent's
 * schedulers cannot run here), its copies of the pipe closed, each signal
 * given back to the action it had before ax took it. */
static void dump_atfork_child(void)
{
    pthread_mutex_init(&reg_lock, NULL);
    pthread_cond_init(&dump_done, NULL);
    memset(reg, 0, sizeof reg);
    dumping = NULL;
    if (dump_pipe[0] >= 0) {
        close(dump_pipe[0]);
        close(dump_pipe[1]);
        dump_pipe[0] = dump_pipe[1] = -1;
    }
    for (int signo = 1; signo < 256; signo++) {
        if (!taken[signo])
            continue;
        struct sigaction cur;
        if (sigaction(signo, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
            cur.sa_handler == on_dump_signal)
            sigaction(signo, &saved_action[signo], NULL);
        taken[signo] = false;
    }
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void dump_atfork_setup(void)
{
    (void)pthread_atfork(NULL, NULL, dump_atfork_child);
}

/* Wait until the dump thread is done with s (reg_lock held): its file is
 * the caller's to close once ax_dump_on_signal returns (review: turning a
 * dump off, or moving it to another file, returned while the thread still
 * wrote to the old one; an fclose then was a use after free). Unbounded,
 * as it was when the dump held reg_lock: the file is the caller's own. */
static void wait_dump_done_locked(ax_sched *s)
{
    while (dumping == s)
        pthread_cond_wait(&dump_done, &reg_lock);
}

/* Give signo back if no registration uses it any more (reg_lock held). */
static void signal_give_back(int signo)
{
    if (signo <= 0 || !taken[signo])
        return;
    for (int i = 0; i < DUMP_MAX; i++)
        if (reg[i].s && reg[i].signo == signo)
            return;
    struct sigaction cur;
    if (sigaction(signo, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == on_dump_signal)
        sigaction(signo, &saved_action[signo], NULL);
    taken[signo] = false;
}

int ax_dump_on_signal(ax_sched *s, int signo, FILE *f)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_dump_on_signal: scheduler is NULL");
    if (signo < 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP || signo == SIGSEGV ||
        signo == SIGBUS || signo == SIGURG || signo > 255)
        return ax_fail(AX_EINVAL, "ax_dump_on_signal: signal %d cannot be used", signo);
    /* A fault's signal: the handler returns to the faulting instruction,
     * which faults again, for ever (an illegal instruction hung the process,
     * dumping, where it would have died). */
    if (signo == SIGFPE || signo == SIGILL || signo == SIGTRAP || signo == SIGSYS)
        return ax_fail(AX_EINVAL,
                       "ax_dump_on_signal: signal %d (%s) reports a fault in the thread that "
                       "raised it, and cannot be used",
                       signo, sigabbrev_np(signo));
    if (signo && !f)
        return ax_fail_static(AX_EINVAL, "ax_dump_on_signal: file is NULL");
    if (sched_forked(s))
        return sched_forked_fail("ax_dump_on_signal");
    pthread_once(&atfork_once, dump_atfork_setup);
    pthread_mutex_lock(&reg_lock);
    int slot = -1;
    for (int i = 0; i < DUMP_MAX; i++) {
        if (reg[i].s == s)
            slot = i;
        else if (slot < 0 && !reg[i].s && signo)
            slot = i;
    }
    if (slot < 0 && signo) {
        pthread_mutex_unlock(&reg_lock);
        return ax_fail_static(AX_ENOMEM, "ax_dump_on_signal: at most 8 schedulers");
    }
    if (!signo) {
        if (slot >= 0 && reg[slot].s == s) {
            reg[slot].s = NULL;
            signal_give_back(reg[slot].signo);
        }
        wait_dump_done_locked(s);
        pthread_mutex_unlock(&reg_lock);
        return AX_OK;
    }
    if (dump_pipe[0] < 0) {
        /* The write end non-blocking (on_dump_signal), the read end not. */
        if (pipe2(dump_pipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
            fcntl(dump_pipe[0], F_SETFL, fcntl(dump_pipe[0], F_GETFL) & ~O_NONBLOCK) != 0) {
            int e = errno;
            if (dump_pipe[0] >= 0) {
                close(dump_pipe[0]);
                close(dump_pipe[1]);
                dump_pipe[0] = dump_pipe[1] = -1;
            }
            pthread_mutex_unlock(&reg_lock);
            return ax_fail(AX_ESYS, "ax_dump_on_signal: pipe: %s", strerror(e));
        }
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&dump_thread, &a, dump_main, NULL);
        pthread_attr_destroy(&a);
        if (rc != 0) {
            pthread_mutex_unlock(&reg_lock);
            return ax_fail_static(AX_ESYS, "ax_dump_on_signal: cannot start the dump thread");
        }
    }
    /* Install ours unless it is there: the first time, or again when the
     * program installed its own since (a registration takes the signal back,
     * as it always did: review). What it replaces is what goes back later. */
    struct sigaction cur;
    int rc = sigaction(signo, NULL, &cur);
    if (rc == 0 && (!taken[signo] || (cur.sa_flags & SA_SIGINFO) ||
                    cur.sa_handler != on_dump_signal)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_dump_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        rc = sigaction(signo, &sa, &saved_action[signo]);
        if (rc == 0)
            taken[signo] = true;
    }
    if (rc != 0) {
        int e = errno;
        pthread_mutex_unlock(&reg_lock);
        return ax_fail(AX_ESYS, "ax_dump_on_signal: sigaction: %s", strerror(e));
    }
    /* Moved from another signal: that one goes back once nobody uses it. */
    int old = reg[slot].s == s ? reg[slot].signo : 0;
    FILE *old_f = reg[slot].s == s ? reg[slot].f : NULL;
    reg[slot].s = s;
    reg[slot].f = f;
    reg[slot].signo = signo;
    if (old != signo)
        signal_give_back(old);
    if (old_f && old_f != f)
        wait_dump_done_locked(s); /* the old file is the caller's again */
    pthread_mutex_unlock(&reg_lock);
    return AX_OK;
}

bool dump_unregister(struct ax_sched *s, uint64_t until)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < DUMP_MAX; i++)
        if (reg[i].s == s) {
            reg[i].s = NULL;
            signal_give_back(reg[i].signo);
        }
    bool done = true;
    while (dumping == s) {
        uint64_t now = now_ns();
        if (now >= until) {
            done = false;
            break;
        }
        /* dump_done runs on CLOCK_REALTIME (a static initializer): wait
         * in slices, each bounded on its own. */
        uint64_t left = until - now > 10000000u ? 10000000u : until - now;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t at = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + left;
        ts.tv_sec = (time_t)(at / 1000000000u);
        ts.tv_nsec = (long)(at % 1000000000u);
        pthread_cond_timedwait(&dump_done, &reg_lock, &ts);
    }
    pthread_mutex_unlock(&reg_lock);
    return done;
}

