/* report.c - the library's own stderr lines from threads that must never
 * block on the host's stderr (the watchdog).
 *
 * The watchdog wrote its lines (a LINGERING task with no event sink, a
 * callback overrun) with fprintf, the overrun's under the callback pool's
 * lock. A stderr nobody reads (a pipe to a logger that died, a full pipe)
 * then stopped the watchdog for good: no held worker's deadline expired any
 * more, no batch was handed back, and the pool's threads waited on its lock
 * (test_report_blocked_stderr). Here a line is formatted by its caller and
 * queued; one process-wide thread, "ax-report", started at the first line,
 * writes the queue to fd 2 in order. A full queue drops the line and counts
 * it; the count is written before the next line that gets through. The
 * thread blocks SIGPIPE (a closed stderr is EPIPE here, not the process's
 * death). ax_free gives the queue a bounded time to drain (report_drain),
 * so the lines of a scheduler that is freed right after are not lost to
 * the process's exit when stderr is being read. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define REPORT_SLOTS 64
#define REPORT_LEN 768 /* a LINGERING line: AX_EVENT_MESSAGE_MAX of text after its prefix */

static pthread_mutex_t rep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rep_more = PTHREAD_COND_INITIALIZER;
static pthread_cond_t rep_drained = PTHREAD_COND_INITIALIZER;
static char rep_ring[REPORT_SLOTS][REPORT_LEN];
static unsigned rep_len[REPORT_SLOTS];
static unsigned rep_head, rep_tail; /* free-running: tail - head lines queued */
static bool rep_writing;            /* a line taken off the queue, not yet written */
static bool rep_started, rep_failed;
static unsigned long rep_dropped; /* since the last line written */
static bool rep_atfork_set;

/* A child of fork has no "ax-report" thread (and the lock may have been
 * held by a thread it does not have): start afresh, the parent's queued
 * lines are the parent's. */
static void rep_atfork_child(void)
{
    pthread_mutex_init(&rep_lock, NULL);
    pthread_cond_init(&rep_more, NULL);
    pthread_cond_init(&rep_drained, NULL);
    rep_head = rep_tail = 0;
    rep_writing = rep_started = rep_failed = false;
    rep_dropped = 0;
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* EPIPE, EBADF...: nowhere to write to */
        p += w;
        n -= (size_t)w;
    }
}

static void *report_main(void *arg)
{
    (void)arg; /* every signal blocked, from its creator: SIGPIPE above all */
    pthread_setname_np(pthread_self(), "ax-report");
    char line[REPORT_LEN], note[96];
    pthread_mutex_lock(&rep_lock);
    for (;;) {
        while (rep_head == rep_tail)
            pthread_cond_wait(&rep_more, &rep_lock);
        unsigned i = rep_head % REPORT_SLOTS;
        size_t n = rep_len[i];
        memcpy(line, rep_ring[i], n);
        rep_head++;
        unsigned long dropped = rep_dropped;
        rep_dropped = 0;
        rep_writing = true;
        pthread_mutex_unlock(&rep_lock);
        if (dropped) {
            int k = snprintf(note, sizeof note,
                             "ax: %lu report lines dropped (stderr was not keeping up)\n", dropped);
            write_all(note, (size_t)k);
        }
        write_all(line, n);
        pthread_mutex_lock(&rep_lock);
        rep_writing = false;
        pthread_cond_broadcast(&rep_drained);
    }
    return NULL;
}

void report_line(const char *fmt, ...)
{
    char buf[REPORT_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof buf - 2 ? (size_t)n : sizeof buf - 2;
    if (len == 0 || buf[len - 1] != '\n') buf[len++] = '\n'; /* a cut line still ends its line */
    pthread_mutex_lock(&rep_lock);
    if (!rep_started && !rep_failed) {
        pthread_t th;
        pthread_attr_t a;
        sigset_t all, old;
        sigfillset(&all);
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (!rep_atfork_set) rep_atfork_set = pthread_atfork(NULL, NULL, rep_atfork_child) == 0;
        pthread_sigmask(SIG_BLOCK, &all, &old); /* inherited: none lands there */
        if (pthread_create(&th, &a, report_main, NULL) == 0)
            rep_started = true;
        else
            rep_failed = true; /* no thread: lines are dropped and counted */
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&a);
    }
    if (!rep_started || rep_tail - rep_head == REPORT_SLOTS) {
        rep_dropped++;
    } else {
        unsigned i = rep_tail % REPORT_SLOTS;
        memcpy(rep_ring[i], buf, len);
        rep_len[i] = (unsigned)len;
        rep_tail++;
        pthread_cond_signal(&rep_more);
    }
    pthread_mutex_unlock(&rep_lock);
}

void report_drain(unsigned timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until); /* the condvar's default clock */
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&rep_lock);
    while (rep_started && (rep_head != rep_tail || rep_writing))
        if (pthread_cond_timedwait(&rep_drained, &rep_lock, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&rep_lock);
}
