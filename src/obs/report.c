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
 * writes the queue to fd 2 in order, with every signal blocked (SIGPIPE: a
 * closed stderr is EPIPE here, not the process's death).
 *
 * What a queue costs against a synchronous write, and how it is paid:
 *  - a full queue (REPORT_SLOTS lines waiting) drops the line; the count
 *    goes with the next line queued and is written just before it;
 *  - a thread that could not be started is tried again a second later;
 *    meanwhile lines are dropped and counted the same way;
 *  - lines still queued at exit() would die with the process: an atexit
 *    handler, and ax_free for its own scheduler's lines (report_drain,
 *    up to the last line that scheduler queued), give the thread a
 *    bounded time (REPORT_DRAIN_MS) to write them, so a scheduler whose
 *    stderr is blocked costs its own ax_free 100 ms, no one else's;
 *  - fork: the child has no writer thread; a child handler registered
 *    before any line (report_init, from ax_new, outside every lock) starts
 *    it afresh: new lock, empty queue. No prepare handler takes the lock:
 *    a host's signal handler that forks (or exits: the atexit drain takes
 *    the lock with a bound) on a thread inside report_line would wait for
 *    itself (review of 29f43f3);
 *  - libax.so is linked -z nodelete (CMakeLists.txt): the detached writer
 *    must not outlive its code at dlclose. */
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
#define REPORT_DRAIN_MS 100
#define REPORT_RETRY_NS 1000000000ull

static pthread_mutex_t rep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rep_more = PTHREAD_COND_INITIALIZER;
static pthread_cond_t rep_drained; /* CLOCK_MONOTONIC: report_init */
static char rep_ring[REPORT_SLOTS][REPORT_LEN];
static unsigned rep_len[REPORT_SLOTS];
static unsigned long rep_drops_before[REPORT_SLOTS]; /* dropped just before this line */
/* Free-running line numbers: queued lines are rep_head..rep_tail-1; every
 * line numbered below rep_done has been written (or given up on). */
static uint64_t rep_head, rep_tail, rep_done;
static bool rep_started;
static uint64_t rep_failed_ns;    /* when a start last failed (0: never) */
static unsigned long rep_dropped; /* since the last line queued */
static pthread_once_t rep_once = PTHREAD_ONCE_INIT;

static void rep_cond_init(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rep_drained, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&rep_more, NULL);
}

/* The child of a fork: no writer, and the lock, the condvars and the queue
 * as some other thread may have left them mid-change: all anew (the
 * parent's lines are the parent's). */
static void rep_child(void)
{
    pthread_mutex_init(&rep_lock, NULL);
    rep_cond_init();
    rep_head = rep_tail = rep_done = 0;
    rep_started = false;
    rep_failed_ns = 0;
    rep_dropped = 0;
}

static void rep_at_exit(void)
{
    report_drain(UINT64_MAX);
}

static void rep_setup(void)
{
    rep_cond_init();
    (void)pthread_atfork(NULL, NULL, rep_child);
    (void)atexit(rep_at_exit);
}

void report_init(void)
{
    pthread_once(&rep_once, rep_setup);
}

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* EPIPE, EBADF, EAGAIN...: nowhere to write to */
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
        unsigned i = (unsigned)(rep_head % REPORT_SLOTS);
        size_t n = rep_len[i];
        memcpy(line, rep_ring[i], n);
        unsigned long dropped = rep_drops_before[i];
        rep_head++;
        pthread_mutex_unlock(&rep_lock);
        if (dropped) {
            int k = snprintf(note, sizeof note,
                             "ax: %lu report lines dropped (stderr was not keeping up)\n", dropped);
            write_all(note, (size_t)k);
        }
        write_all(line, n);
        pthread_mutex_lock(&rep_lock);
        rep_done = rep_head;
        pthread_cond_broadcast(&rep_drained);
    }
    return NULL;
}

/* Under rep_lock: the writer running, or tried again a second after a
 * failed start. */
static void ensure_writer_locked(void)
{
    if (rep_started) return;
    uint64_t now = now_ns();
    if (rep_failed_ns && now - rep_failed_ns < REPORT_RETRY_NS) return;
    pthread_t th;
    pthread_attr_t a;
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* inherited: none lands there */
    if (pthread_create(&th, &a, report_main, NULL) == 0)
        rep_started = true;
    else
        rep_failed_ns = now ? now : 1; /* lines are dropped and counted meanwhile */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

uint64_t report_line(const char *fmt, ...)
{
    char buf[REPORT_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return 0;
    size_t len = (size_t)n < sizeof buf - 2 ? (size_t)n : sizeof buf - 2;
    if (len == 0 || buf[len - 1] != '\n') buf[len++] = '\n'; /* a cut line still ends its line */
    report_init();                                           /* ax_new did, as a rule */
    uint64_t ticket = 0;
    pthread_mutex_lock(&rep_lock);
    ensure_writer_locked();
    if (!rep_started || rep_tail - rep_head == REPORT_SLOTS) {
        rep_dropped++;
    } else {
        unsigned i = (unsigned)(rep_tail % REPORT_SLOTS);
        memcpy(rep_ring[i], buf, len);
        rep_len[i] = (unsigned)len;
        rep_drops_before[i] = rep_dropped;
        rep_dropped = 0;
        ticket = ++rep_tail; /* written once rep_done >= ticket */
        pthread_cond_signal(&rep_more);
    }
    pthread_mutex_unlock(&rep_lock);
    return ticket;
}

bool report_drain(uint64_t ticket)
{
    if (ticket == 0) return true;
    report_init();
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)REPORT_DRAIN_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    /* Bounded: exit() from a signal handler on a thread inside
     * report_line would otherwise wait for itself. (A try-lock loop, not
     * pthread_mutex_clocklock: the sanitizers' runtimes see this one.) */
    uint64_t give_up = now_ns() + (uint64_t)REPORT_DRAIN_MS * 1000000u;
    while (pthread_mutex_trylock(&rep_lock) != 0) {
        if (now_ns() >= give_up) return false;
        usleep(200);
    }
    if (ticket > rep_tail) ticket = rep_tail; /* UINT64_MAX: all queued so far */
    while (rep_started && rep_done < ticket)
        if (pthread_cond_timedwait(&rep_drained, &rep_lock, &until) == ETIMEDOUT) break;
    bool done = !rep_started || rep_done >= ticket;
    pthread_mutex_unlock(&rep_lock);
    return done;
}
