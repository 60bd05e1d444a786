/* ax.h - the whole public API of libax.
 *
 * ax runs many short, bursty tasks inside one process: callers *submit* a task
 * and ax alone decides when it runs (three priority buckets with quota rounds),
 * on which worker thread (each task is a coroutine), for how long (a deadline
 * every blocking ax call honours), and what happens when it fails or overruns
 * (retries with back-off through a timing wheel, or a terminal callback).
 *
 * Conventions
 *  - Every function that can fail returns 0 (AX_OK) or a negative AX_E* code.
 *    ax_strerror() names the code; ax_error_detail() gives the detailed
 *    message of the last failure on the calling thread ("spec.timeout_ms must
 *    be > 0", "config.quota_high: ...").
 *  - Types are opaque; configuration structs are filled by *_default() and
 *    then overridden field by field.
 *  - Times are milliseconds unless a name ends in _ns. Deadlines are absolute
 *    on the CLOCK_MONOTONIC scale of ax_now_ns().
 *  - Every admitted task reaches exactly one terminal state and its on_done
 *    runs exactly once: after success, failure, timeout, cancellation and at
 *    shutdown. A rejected submission creates no task and allocates nothing.
 */
#ifndef AX_H
#define AX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AX_VERSION_MAJOR 0
#define AX_VERSION_MINOR 1
#define AX_VERSION_PATCH 0

/* ---- errors ------------------------------------------------------------ */

enum {
    AX_OK = 0,
    AX_EINVAL = -1,     /* an argument or config field is invalid (see ax_error_detail) */
    AX_ENOMEM = -2,     /* out of memory, or the scheduler's task table is full */
    AX_EFULL = -3,      /* the task's priority bucket is at its bound */
    AX_ESHED = -4,      /* overload: NORMAL/LOW shed once the load reaches shed_ratio of capacity */
    AX_ERATE = -5,      /* submission rate limit exceeded */
    AX_ESHUTDOWN = -6,  /* the scheduler is shutting down */
    AX_ETIMEDOUT = -7,  /* timed out: the task's deadline, or a call's own timeout_ms,
                           passed (ax_error_detail says which) */
    AX_ECANCELED = -8,  /* the task was cancelled */
    AX_ENOTFOUND = -9,  /* no such task (never existed, or already finished and released),
                           class (ax_class_find) or registration (ax_metrics_unappend) */
    AX_ESTATE = -10,    /* not allowed in the current state (e.g. in-task call outside its task) */
    AX_ESYS = -11,      /* a system call failed; ax_error_detail() has errno's text */
    AX_EPANIC = -12,    /* the task called ax_panic */
    AX_EBUSY = -13,     /* resource already in use (e.g. another task on the same
                           worker waits on this fd in the same direction) */
    AX_ENET = -14,      /* a network transfer failed: refused, reset, DNS, TLS (detail says) */
    AX_EOPEN = -15,     /* the task's class has its circuit breaker open: failing fast */
    AX_EEXPIRED = -16,  /* waited in its bucket past its class's queue-time budget */
};

/* Short English name of a code ("timed out"); never NULL. */
const char *ax_strerror(int code);
/* Detailed message of the last failure on this thread; "" if none. */
const char *ax_error_detail(void);

/* ---- time -------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds: the scale of every absolute deadline. */
uint64_t ax_now_ns(void);

/* ---- tasks: priorities, states, results -------------------------------- */

/* NORMAL is 0 so that a zero-initialised spec does not jump the queue. Index
 * per-priority arrays with these names, not by rank. */
typedef enum { AX_PRIO_NORMAL = 0, AX_PRIO_HIGH = 1, AX_PRIO_LOW = 2 } ax_priority;
#define AX_PRIO_COUNT 3

typedef enum {
    AX_STATE_PENDING = 0, /* admitted, waiting in its bucket (or its delay) */
    AX_STATE_RUNNING,     /* holds a concurrency slot, its coroutine exists */
    AX_STATE_SUCCEEDED,   /* terminal: the function returned 0 */
    AX_STATE_FAILED,      /* terminal: non-zero return or ax_panic, no retry left */
    AX_STATE_TIMED_OUT,   /* terminal: the deadline passed, no retry left */
    AX_STATE_RETRYING,    /* waiting out a back-off delay before PENDING again */
    AX_STATE_CANCELLED,   /* terminal: ax_cancel, or queued/running at shutdown */
    AX_STATE_REJECTED,    /* never admitted (appears in events only) */
} ax_state;

const char *ax_priority_name(ax_priority p); /* "high", "normal", "low" */
const char *ax_state_name(ax_state s);       /* "pending", ..., "cancelled" */

#define AX_TRACE_ID_MAX 32 /* bytes, including the terminating NUL */
#define AX_REF_MAX 64      /* ax_spec.ref / ax_event.ref, including the NUL */
#define AX_ERROR_MAX 128

/* What a callback or a join learns about a task. Self-contained: no pointer
 * into ax's memory, so it may be copied and kept. */
typedef struct ax_result {
    uint64_t id;
    char trace_id[AX_TRACE_ID_MAX];
    ax_priority priority;
    ax_state state;        /* the terminal state (TIMED_OUT for on_timeout) */
    unsigned attempts;     /* attempts that started or were due (1 = no retry) */
    int code;              /* 0, the function's return, or AX_ETIMEDOUT/ECANCELED/EPANIC */
    uint64_t wait_ns;      /* queue wait of the last attempt */
    uint64_t run_ns;       /* run time of the last attempt: > 0 (at least 1) exactly when
                              its function was entered, 0 if it never ran */
    char error[AX_ERROR_MAX]; /* human-readable reason, "" on success */
    unsigned class_id;     /* the task's class, 0 if none */
} ax_result;

typedef struct ax_sched ax_sched; /* a scheduler: buckets, workers, timers */
typedef struct ax_task ax_task;   /* one running attempt, handed to the task function */

/* The task function. Return 0 for success; any other value fails the attempt
 * (and is reported as result.code). Returned after the attempt's deadline,
 * either way (or after ax_panic) the attempt is TIMED_OUT (code
 * AX_ETIMEDOUT): exactly, or to within one kernel tick (1-4 ms) when
 * another task's on_done or on_release ran just before it on its worker. */
typedef int (*ax_fn)(ax_task *t, void *arg);
/* on_done / on_timeout. Must not block for long: on_done runs on the thread
 * that ended the task -- its worker, the caller of ax_cancel/ax_shutdown, or
 * the callback pool's finisher thread ("ax-finish") for a task whose worker
 * was held past its deadline (by another task, or by the task itself
 * running on without yielding); never on the watchdog.
 * on_timeout runs on the callback pool ("ax-callback-N"). */
typedef void (*ax_callback)(const ax_result *r, void *cb_arg);

/* ---- retries ----------------------------------------------------------- */

typedef enum {
    /* delay = min(max, base * 2^attempt) + random(0, jitter)   (the seed, §5.5) */
    AX_BACKOFF_EXPONENTIAL = 0,
    /* delay = random(0, min(max, base * 2^attempt))            ("full jitter") */
    AX_BACKOFF_FULL_JITTER = 1,
} ax_backoff;

typedef struct ax_retry_policy {
    ax_backoff mode;
    uint32_t base_ms;   /* default 1000 */
    uint32_t max_ms;    /* default 30000; >= base_ms */
    uint32_t jitter_ms; /* default 1000; EXPONENTIAL mode only */
} ax_retry_policy;

/* The delay before retry number `attempt` (0 = first retry) given a uniform
 * random 64-bit value `rnd`. Exposed so callers and tests can check bounds. */
int ax_retry_delay_ms(const ax_retry_policy *p, unsigned attempt, uint64_t rnd, uint64_t *delay_ms);

/* ---- scheduler configuration ------------------------------------------- */

typedef struct ax_config {
    unsigned workers;          /* worker threads; 0 = CPUs online (default 0) */
    unsigned max_concurrency;  /* running tasks at most (default 500) */
    unsigned quota_high;       /* HIGH per round; 0 = max_concurrency/2 (default 0) */
    unsigned quota_normal;     /* NORMAL per round; 0 = max_concurrency/3 (default 0) */
    unsigned low_guaranteed;   /* LOW per round (default 1) */
    unsigned capacity[AX_PRIO_COUNT]; /* bucket bounds, indexed by ax_priority (NORMAL is
                                         index 0): [AX_PRIO_HIGH] 10000, [AX_PRIO_NORMAL]
                                         30000, [AX_PRIO_LOW] 10000. Counts the
                                         bucket and its tasks in a delay or a
                                         retry's back-off */
    double shed_ratio;         /* shed NORMAL/LOW once the load (queued + running + delayed)
                                  reaches this share of total capacity (0.8) */
    double rate_limit;         /* admitted submissions per second, at most 1e12; 0 = off */
    unsigned rate_burst;       /* token-bucket depth (default 0 = rate_limit, min 1) */
    size_t stack_size;         /* coroutine stack bytes (default 64 KiB, min 16 KiB) */
    unsigned max_retry_cap;    /* largest spec.max_retry accepted (default 16) */
    ax_retry_policy retry;     /* default back-off (exponential 1 s .. 30 s, jitter 1 s) */
    bool retry_enabled[AX_PRIO_COUNT]; /* per-priority retry switch (all true) */
    uint32_t grace_ms;         /* a timed-out task still running after this is "lingering" (3000;
                                * 0: reported at the watchdog's first look past its timeout) */
    unsigned callback_threads; /* threads running on_timeout (default 1) */
    uint32_t callback_timeout_ms; /* an on_timeout running longer is counted as overrun and
                                     the pool adds a thread so others are not held up (1000) */
    unsigned callback_queue;   /* on_timeout calls waiting at most; more are dropped and
                                  counted in ax_stats.callback_dropped (1024) */
    unsigned max_orphans;      /* coroutines still running after their attempt ended (timed
                                  out, cancelled): at this many no new attempt starts
                                  until one returns, so there are at most max_orphans +
                                  max_concurrency (0 = max_concurrency, at least 64) */
    uint32_t shutdown_timeout_ms; /* ax_free waits this long for tasks to return, then
                                     reports and leaks what never did (5000) */
    bool overflow_fails_task;  /* a stack overflow fails only its task instead of aborting
                                  the process. UNSAFE: locks the task held (malloc, stdio,
                                  the host's mutexes) stay held. Default false (abort). */
    uint32_t metrics_read_timeout_ms; /* ax_metrics_serve: a connection that has not sent a
                                         whole request this long after it was accepted is
                                         closed; the answer gets as long again (0 = 2000,
                                         at most 3600000) */
    unsigned metrics_max_connections; /* ax_metrics_serve: connections open at most; a new
                                         one beyond evicts the oldest idle one (0 = 64, at
                                         most 1024) */
    bool adaptive_limit;       /* the cap on running tasks follows their measured run time
                                  (Gradient2, as a class's adaptive limit, over every attempt)
                                  between adaptive_min and max_concurrency, which becomes its
                                  bound; ax_stats.limit shows it. With every slot held, work
                                  waiting and no attempt ended for a second (or twice the
                                  usual run time, if longer), it rises by one
                                  (tasks that never end, a poller, cannot hold it down for
                                  good). Default false: the cap is max_concurrency. Task
                                  classes have their own (ax_class_config) */
    unsigned adaptive_min;     /* lowest adaptive cap (0 = 1; <= max_concurrency, checked
                                  only with adaptive_limit: ignored without it) */
    uint32_t idle_poll_us;     /* how long a worker out of work polls for more before it
                                  sleeps in the kernel (0 = 50, the default; at most
                                  1000000; below 50 shortens every worker's spin). Above
                                  50, worker 0 (the thread ax-worker-0; with workers = 1
                                  the only one) polls that long after the last task it
                                  ran, while the others sleep after 50 us: a task
                                  submitted meanwhile starts without waiting for a worker
                                  to wake (40-100 us on a VM). The price is worker 0's
                                  core for as long as tasks run on it (a sleeper's
                                  wake-up counts) more often than every idle_poll_us,
                                  and for idle_poll_us after the last. No poll before
                                  the first task or after ax_shutdown */
} ax_config;

/* Defined since config.idle_poll_us. */
#define AX_HAVE_IDLE_POLL 1

/* Defined since the core v2 fields above (callback_queue, max_orphans,
 * shutdown_timeout_ms, overflow_fails_task, ax_stats.callback_dropped). */
#define AX_HAVE_V2 1

void ax_config_default(ax_config *cfg);

/* Create a scheduler and start its threads. Refuses an inconsistent config
 * with AX_EINVAL and a detail naming the field. The first call in the
 * process installs handlers for SIGSEGV and SIGBUS (overflow and crash
 * reports; a fault ax cannot contain goes to the handler installed before,
 * or with none is reported and repeats under the default); its workers
 * unblock both. SIGURG is taken when a hog first lingers (the watchdog
 * samples its stack with it; any other SIGURG goes to the handler the host
 * had, in either form; a worker whose thread inherited SIGURG blocked gets
 * no signal, and its report says so). README.md, "Signals ax handles". */
int ax_new(const ax_config *cfg, ax_sched **out);
/* fork(): a scheduler's threads are not in the child. There, the calls that
 * would use them refuse a scheduler made before the fork with AX_ESTATE, and
 * ax_free leaks it (README.md, "ax_free"). The child makes its own. */

/* Stop admitting (ax_submit returns AX_ESHUTDOWN), cancel every queued and
 * delayed task (they end CANCELLED with their on_done), let running tasks
 * finish for up to timeout_ms (<= 0: none), then cancel them too, and give
 * their coroutines up to max(timeout_ms, 1000) ms more to return. Returns 0
 * when every task's coroutine has ended and every on_done and on_release
 * has returned: no on_release runs after it (a task's on_release waits
 * for its orphan and its on_timeout calls, so these are waited for too);
 * AX_ETIMEDOUT if some cancelled task still has not returned (its on_done
 * has run; its coroutine is still on a worker) or a callback has not. Not
 * waited for: the on_timeout calls of tasks without an on_release; ax_free
 * waits for those too (within shutdown_timeout_ms). The on_done and
 * on_release of the tasks it cancels before they ran run on the calling
 * thread, one after another: their time is not bounded by timeout_ms (nor,
 * in ax_free, by shutdown_timeout_ms). Safe to call more than once;
 * AX_ESTATE from one of the scheduler's own tasks or callbacks (it would
 * wait for itself), and from any scheduler's metrics appender or events
 * callback (it could wait for a thread waiting for that one). */
int ax_shutdown(ax_sched *s, int64_t timeout_ms);

/* Shut down (if not yet, with no wait) and free everything, all within
 * config.shutdown_timeout_ms (its last tenth, 10 to 100 ms, is the worker
 * threads' to exit in; workers on no task's stack get up to 100 ms more,
 * all together): if a task's coroutine never returns, ax_free
 * names it on stderr and returns, leaking the scheduler rather than freeing
 * memory its worker still uses; so too if the event thread is still in a
 * write its sink does not take (a pipe nobody reads) or in an events
 * callback (then at least 10 ms after the workers), or if a callback on the
 * callback pool (an on_timeout, or an on_done / on_release run there) has
 * not returned. NULL is ok. Once it returns, its event sinks (the JSON
 * file, the callback and its arg) are not used again, leaked or not: what
 * the sink has not taken by then is dropped (its count said on stderr),
 * but for a write or callback still in progress when the time ran out.
 * Refused (a message on stderr,
 * nothing freed) from one of the scheduler's own tasks or callbacks, and
 * from any scheduler's metrics appender or events callback. */
void ax_free(ax_sched *s);

/* ---- submission -------------------------------------------------------- */

typedef struct ax_spec {
    ax_fn fn;                 /* required */
    void *arg;
    ax_priority priority;     /* default (0) NORMAL */
    uint64_t timeout_ms;      /* per attempt, required > 0, at most a year (else
                                 AX_EINVAL) */
    uint64_t deadline_ns;     /* absolute (ax_now_ns scale), covers queue wait and all
                                 attempts; 0 = none. Already past, or before delay_ms
                                 ends: AX_EINVAL, nothing admitted (ax_spawn from a
                                 parent past its own deadline: AX_ETIMEDOUT) */
    uint64_t delay_ms;        /* start no earlier than this from now; 0 = now; at most
                                 a year (else AX_EINVAL) */
    unsigned max_retry;       /* retries after the first attempt (0 = none) */
    const ax_retry_policy *retry; /* NULL = the scheduler's default */
    const char *trace_id;     /* copied; < AX_TRACE_ID_MAX bytes of valid UTF-8, no
                                 control character (else AX_EINVAL, the detail
                                 gives the first bad byte's offset); NULL or "" =
                                 generated
                                 ("ax-" and the id in 16 hex digits) */
    ax_callback on_done;      /* exactly once per admitted task; may be NULL */
    ax_callback on_timeout;   /* each timed-out attempt, on the callback pool, and once
                                 when deadline_ns passes before an attempt could run
                                 (queued, or in a retry's back-off); may be NULL. Not
                                 ordered with on_done: it may run after on_done has
                                 returned (a cancel that ends the task first), so
                                 free what it reads in on_release, which waits for it */
    void *cb_arg;
    /* A task class (ax_class_register; 0 = none). With a class, timeout_ms 0
     * and retry NULL take the class's (its timeout as it is at submit time);
     * priority and max_retry are the class's unless `overrides` has
     * AX_SPEC_PRIORITY / AX_SPEC_MAX_RETRY, which keep the spec's. */
    unsigned class_id;
    unsigned overrides;
    /* An external reference the task's lifecycle events carry ("ref" in
     * the JSON lines, ax_event.ref): the id of the message, request or job
     * the task works for (libax_redis sets the message id). Copied; <
     * AX_REF_MAX bytes of valid UTF-8 without control characters, as
     * trace_id (else AX_EINVAL naming the bad byte); NULL or "" = none. A
     * task without one costs nothing more: the copy lives in a small
     * allocation of its own, made only for tasks that have one. */
    const char *ref;
    /* Called once with `arg` when neither ax nor any attempt's function can
     * use it any more: free arg here, not in on_done. on_done runs when the
     * task ends, and a running attempt that is cancelled or times out ends
     * at once while its function goes on (an orphan: see the blocking calls
     * below):
     * it may still read arg, and may not even have reached its first line
     * yet. on_release runs after on_done has returned, after the last
     * attempt's coroutine has returned (at once for a task that was not
     * running, when the orphan returns for one that was) and after every
     * on_timeout of the task ran or was dropped. Children (ax_spawn) are
     * tasks of their own: a child given this arg must be joined (or end)
     * first. An unjoined child's on_release also waits for its parent's
     * function to return (the parent holds the child's result until then,
     * an orphan parent too). It runs on the
     * thread that let go last (the task's worker, the caller of ax_cancel
     * or ax_shutdown, a parent's ax_join, or the callback pool's finisher;
     * never the watchdog), and like on_done it must not block for long nor
     * call ax_free / ax_shutdown. An orphan that never returns keeps its
     * arg: ax_free then leaks it with the scheduler. NULL = none; a task
     * with one costs a small allocation at submit, as a ref does. */
    void (*on_release)(void *arg);
} ax_spec;

#define AX_SPEC_PRIORITY 1u  /* ax_spec.overrides: keep spec.priority over the class's */
#define AX_SPEC_MAX_RETRY 2u /* ax_spec.overrides: keep spec.max_retry over the class's */

/* Validate, assign an id, apply admission, queue. From any thread, including
 * from inside a task. On success *id_out (if not NULL) gets the task id,
 * unique in the process; it is written after the task is queued, so the
 * task and its on_done may run before: there, use ax_task_id / r->id.
 * Errors, in the order they are checked: AX_EINVAL; AX_EOPEN (spec.class_id's
 * circuit breaker is open; not for HIGH with the class's protect_high, and
 * AX_ESHUTDOWN instead once shutting down); AX_ESHUTDOWN, AX_ERATE, AX_ESHED,
 * AX_EFULL, AX_ENOMEM. */
int ax_submit(ax_sched *s, const ax_spec *spec, uint64_t *id_out);

/* n submissions at once, for a burst: each spec checked and admitted alone,
 * in order, exactly as n calls of ax_submit would (the same codes, counters
 * and events; a refusal does not stop the others), with the scheduler's
 * lock taken once for each run of up to 8 specs instead of once per spec
 * (a spec with a class, overrides, a ref or an on_release, and every spec while events are
 * lossless, goes through ax_submit alone). rcs[i] (if rcs is not NULL) gets
 * each one's result, ids[i] (if ids is not NULL) its id, 0 when refused.
 * Returns AX_OK when all n were admitted, else the first refusal's code
 * with its ax_error_detail. AX_EINVAL (nothing submitted) for a NULL s, or
 * a NULL specs with n > 0 (then the call counts one refusal in
 * ax_stats.rejected, with one REJECTED event, whatever n: an n beside a
 * NULL array is not trusted; rcs and ids are not written); n 0 is AX_OK. */
int ax_submit_batch(ax_sched *s, const ax_spec *specs, size_t n, int *rcs, uint64_t *ids);

/* Cancel a task from any thread: a queued or delayed task ends CANCELLED at
 * once; a running one ends CANCELLED at once (slot freed) and every blocking
 * ax call in it returns AX_ECANCELED. AX_ENOTFOUND if it already ended. */
int ax_cancel(ax_sched *s, uint64_t id);

/* ---- inside a task (t is the handle the task function received) --------- */

uint64_t ax_task_id(const ax_task *t);
const char *ax_task_trace_id(const ax_task *t);
ax_priority ax_task_priority(const ax_task *t);
unsigned ax_task_attempt(const ax_task *t); /* 0 on the first attempt */
uint64_t ax_task_deadline_ns(const ax_task *t); /* this attempt's deadline */
ax_sched *ax_task_sched(const ax_task *t);
/* The task running on the calling thread, NULL outside one (a library can
 * refuse a call that would wait for its own scheduler's tasks). */
ax_task *ax_task_current(void);

/* Each blocking call parks the coroutine (never the thread) and returns 0,
 * or AX_ETIMEDOUT once the task's deadline passed, or AX_ECANCELED once the
 * task was cancelled, or AX_ESTATE when called outside the task's own
 * coroutine. After the deadline (or a cancel) every blocking call -- these,
 * ax_wait_fd, ax_read/ax_write/ax_accept/ax_connect, ax_join, ax_http_* --
 * returns AX_ETIMEDOUT / AX_ECANCELED instead of doing its work, and so does
 * every later one in that attempt (after a pause of up to 100 ms, so a loop
 * does not spin): the slot is already free. Check each
 * return code and return (ax_defer does the cleanup); a task that goes on
 * lives as an orphan.
 *
 * A coroutine never moves to another worker. A task that runs without
 * yielding holds its worker, and the tasks parked on that worker cannot
 * resume until it yields: the watchdog ends their attempts at their
 * deadlines ("timed out after N ms (its worker was held)"; the holder's
 * own attempt, at its deadline: "... (it ran on without yielding past its
 * deadline)") and hands the worker's not-yet-started jobs to the other
 * workers. */
int ax_sleep(ax_task *t, uint64_t ms); /* ms above a year sleeps a year (the
                                          task's deadline, under a year, ends it first) */
int ax_yield(ax_task *t);
#define AX_READ 1u
#define AX_WRITE 2u
/* Wait until fd is readable/writable. timeout_ms < 0: only the task's deadline
 * bounds it; a timeout_ms that ends first returns AX_ETIMEDOUT too. On one
 * worker, one task may wait to read an fd and one to write it (the two
 * share its registration); a second reader (or writer) of the same fd on
 * the same worker gets AX_EBUSY, as does an fd that ax_http uses there.
 * AX_EINVAL: a bad fd or events. Closing an fd a task waits on does not
 * wake the task: it waits out its bound (and the fd's number may be reused
 * by another task's wait meanwhile, which is safe). */
int ax_wait_fd(ax_task *t, int fd, unsigned events, int64_t timeout_ms);
/* Deadline-aware socket I/O on non-blocking fds (these set O_NONBLOCK if
 * needed): each retries on EAGAIN by parking in ax_wait_fd, bounded by
 * timeout_ms (< 0: only the task's deadline). They return the byte count
 * (0 = end of stream for ax_read), the new fd for ax_accept, 0 for
 * ax_connect, or a negative AX_E* code (AX_EINVAL for an fd that is not open,
 * a NULL buffer or address, an addrlen no address has; AX_ESYS with errno's
 * text in the
 * detail for a failed system call: refused, reset, ...). */
ssize_t ax_read(ax_task *t, int fd, void *buf, size_t len, int64_t timeout_ms);
/* Writes all len bytes unless an error or the deadline intervenes; then it
 * returns the code, and how much of buf went out before is not reported
 * (write in pieces to know it). A len above SSIZE_MAX is AX_EINVAL. A pipe
 * with no reader is AX_ESYS (EPIPE): SIGPIPE is held back for the write and
 * the one it raised taken back. */
ssize_t ax_write(ax_task *t, int fd, const void *buf, size_t len, int64_t timeout_ms);
int ax_accept(ax_task *t, int listen_fd, struct sockaddr *addr, socklen_t *addrlen,
              int64_t timeout_ms);
int ax_connect(ax_task *t, int fd, const struct sockaddr *addr, socklen_t addrlen,
               int64_t timeout_ms);

/* 0 while the task may go on; AX_ETIMEDOUT or AX_ECANCELED once it should
 * stop; AX_ESTATE when not called from t's own coroutine. */
int ax_cancelled(const ax_task *t);

/* Register a cleanup; cleanups run last-in first-out when the task function
 * returns, when it panics, and when a timed-out or cancelled task returns.
 * Not after a stack overflow that config.overflow_fails_task turns into a
 * failure: the coroutine is abandoned mid-frame, its stack unusable. */
int ax_defer(ax_task *t, void (*fn)(void *), void *arg);
/* End the task now: run its cleanups, fail the attempt with the message
 * (code AX_EPANIC). Does not return when called from the task; returns
 * AX_ESTATE otherwise. A cleanup that panics while the task unwinds from a
 * panic keeps the first message: "first; then a defer panicked: second",
 * and the cleanups registered before it still run. */
int ax_panic(ax_task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Set the message reported in result.error when the attempt fails; fmt
 * NULL clears it ("task returned N" is reported then). */
int ax_task_set_error(ax_task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Fan-out / fan-in: submit a child that this attempt may join. Same checks and
 * errors as ax_submit, and AX_ESTATE outside the parent's own coroutine; every
 * refusal with a non-NULL parent is counted in its scheduler's ax_stats
 * (under the child's priority) and emitted as REJECTED. A child not joined
 * is released (not cancelled) when the parent's function returns. */
int ax_spawn(ax_task *parent, const ax_spec *spec, uint64_t *id_out);
/* Wait for a child's terminal state, at most timeout_ms (< 0: until the
 * parent's deadline). Fills *out (may be NULL) and returns 0 once the child
 * ended and let go: its on_done returned and its function returned (its
 * cleanups ran; a cancelled child's too), so what the parent gave it (arg,
 * cb_arg) is the parent's again, but for on_timeout calls still on the
 * callback pool of a child without an on_release. A child that runs on
 * after a cancel or its deadline (an orphan) is joined only once it
 * returns: the bound ends the wait first (AX_ETIMEDOUT, saying so).
 * AX_ETIMEDOUT / AX_ECANCELED as for every wait, AX_ENOTFOUND if id is
 * not an unjoined child of this attempt. Joining does not wait for the
 * child's own success: check out->state. A joining parent keeps its slot
 * (max_concurrency): when every slot is held by parents waiting for
 * children, the children stay queued until the joins time out or the
 * parents' deadlines pass. Bound the joins, or keep the parents that may
 * join at once below the cap (a class of their own with a fixed limit
 * below it does that). */
int ax_join(ax_task *t, uint64_t child_id, int64_t timeout_ms, ax_result *out);

/* ---- run-time control (thread-safe) ------------------------------------- */

/* From any thread, tasks and callbacks included. After ax_shutdown they
 * still return AX_OK and change the setting, which can no longer start
 * anything: the drain runs what had started. Quotas are per round: a large
 * quota_high delays LOW by that many HIGH starts per round (low_guaranteed
 * is what each round owes LOW, not a share of time).
 * Quotas left at 0 in the config follow max_concurrency when it changes.
 * With config.adaptive_limit, n is the limiter's new bound and it starts
 * over from n, as at ax_new. */
int ax_set_max_concurrency(ax_sched *s, unsigned n);
int ax_set_quotas(ax_sched *s, unsigned high, unsigned normal, unsigned low_guaranteed);
/* Whether a failed attempt of priority p may be retried, decided when each
 * attempt ends: a retry already waiting out its back-off when this turns
 * retries off still runs (cancel it to stop it). A task it keeps from a
 * retry ends with "; not retried: retries of its priority are switched off
 * (ax_set_retry_enabled)" in its error. */
int ax_set_retry_enabled(ax_sched *s, ax_priority p, bool enabled);
/* A token bucket on submissions (AX_ERATE past it); per_second 0 turns it
 * off; burst 0 = per_second (at least 1). A limit turned on starts with a
 * full bucket; a change of a limit on keeps the tokens the bucket holds, up
 * to the new burst (setting the same limit again grants no new burst). */
int ax_set_rate_limit(ax_sched *s, double per_second, unsigned burst);
/* Hold and release dispatch: submissions queue, nothing new starts. */
int ax_pause(ax_sched *s);
int ax_resume(ax_sched *s);

/* ---- task classes and overload control (README: "Task classes and overload control") -- */

/* A class names a kind of work (an upstream endpoint: "quote", "search") and
 * carries its defaults and its overload controls, each off-switchable:
 *  - adaptive concurrency: attempts of the class in flight at most `limit`,
 *    which follows the class's measured latency between limit_min and
 *    limit_max (Gradient2: when the latency rises over its baseline the
 *    limit falls, so waiting moves out of the upstream into ax's buckets,
 *    where priority, shedding and the queue-time budget act);
 *  - retry budget: a retry goes only while the class's retries in the last
 *    retry_budget_window_ms stay under retry_budget_ratio x its first
 *    attempts + retry_budget_min_per_s per second (Finagle), and while its
 *    retry tokens are above half of retry_throttle_tokens (gRPC's retry
 *    throttling: each failed attempt takes a token, each success gives back
 *    retry_throttle_ratio, so retries stop while more than about 9 % of
 *    recent attempts fail, at any traffic rate); otherwise the attempt's
 *    failure is final and its error says "retry budget exhausted" or
 *    "retries throttled";
 *  - circuit breaker: opens when at least breaker_failure_rate of the
 *    class's attempts over breaker_window_ms failed or timed out (with at
 *    least breaker_min_calls); while open, submissions get AX_EOPEN and
 *    queued tasks of the class end FAILED with AX_EOPEN at dispatch; after
 *    breaker_open_ms it lets breaker_half_open_calls probes through, whose
 *    outcomes close it or open it again;
 *  - queue-time budget: a task that waited in its bucket longer than
 *    queue_budget_ms (0 = its timeout) ends FAILED with AX_EEXPIRED at
 *    dispatch instead of starting late. Never retried.
 * With protect_high (the default) HIGH tasks are exempt from a class's
 * limit, breaker and budget: see the field.
 * Classes are per scheduler, up to AX_CLASS_MAX, never removed; ids are 1,
 * 2, ... in registration order. */
#define AX_CLASS_MAX 64
#define AX_CLASS_NAME_MAX 32

typedef struct ax_class_config {
    const char *name;          /* required: 1-31 bytes of [A-Za-z0-9_.-]; the metrics
                                  label and the "class" of events */
    ax_priority priority;      /* default NORMAL */
    uint64_t timeout_ms;       /* per attempt (default 1000) */
    unsigned max_retry;        /* default 0; <= config.max_retry_cap */
    ax_retry_policy retry;     /* default: exponential 1 s .. 30 s, jitter 1 s */
    bool queue_budget;         /* default true */
    uint64_t queue_budget_ms;  /* 0 = the task's timeout (default 0) */
    bool adaptive;             /* default true; false: limit_max is a fixed limit
                                  (limit_min and limit_initial are then ignored) */
    unsigned limit_min;        /* default 1 */
    unsigned limit_max;        /* 0 = max_concurrency, and follows ax_set_max_concurrency: a
                                  limit at that bound moves with it both ways, one the
                                  latency holds below it stays (default 0) */
    unsigned limit_initial;    /* 0 = limit_max (default 0) */
    bool retry_budget;         /* default true */
    double retry_budget_ratio; /* default 0.2 (Finagle) */
    double retry_budget_min_per_s; /* default 10 */
    uint32_t retry_budget_window_ms; /* default 10000 */
    double retry_throttle_tokens;    /* gRPC's max_tokens, in [0, 1000]; 0 = no throttle
                                        (default 10) */
    double retry_throttle_ratio;     /* tokens a success gives back, in (0, 1]
                                        (default 0.1) */
    /* HIGH first, also under overload (default true): the class's limit,
     * breaker and retry budget hold back NORMAL and LOW only. HIGH tasks of
     * the class are bounded by the scheduler's cap, quotas and their
     * deadlines alone (their outcomes still feed the limiter and the
     * breaker, their retries are counted in the budget, so they come out of
     * NORMAL's and LOW's share). Shedding NORMAL and LOW first is the seed's
     * contract (§2.2) kept under overload. A class whose own priority is
     * HIGH therefore has no overload control unless this is false. */
    bool protect_high;
    bool breaker;              /* default true */
    double breaker_failure_rate;   /* default 0.5 (resilience4j) */
    unsigned breaker_min_calls;    /* default 20 */
    uint32_t breaker_window_ms;    /* default 10000 */
    uint32_t breaker_open_ms;      /* default 5000 */
    unsigned breaker_half_open_calls; /* default 5 */
} ax_class_config;

void ax_class_config_default(ax_class_config *c);
/* Register a class; *id_out gets its id (id_out may be NULL: ax_class_find
 * gets it by name). AX_EINVAL naming the bad field, AX_EBUSY if the name is
 * taken, AX_ENOMEM past AX_CLASS_MAX, AX_ESHUTDOWN once ax_shutdown began. */
int ax_class_register(ax_sched *s, const ax_class_config *c, unsigned *id_out);
/* The id of a class by name; AX_ENOTFOUND if none. */
int ax_class_find(ax_sched *s, const char *name, unsigned *id_out);
/* Change a class's timeout at run time (seed §4.2 "raise the task timeout"):
 * submissions from now on that take the class's timeout get this one.
 * After ax_shutdown it still returns AX_OK, as the calls of "run-time
 * control": no submission can use it. */
int ax_class_set_timeout(ax_sched *s, unsigned id, uint64_t timeout_ms);

typedef enum { AX_BREAKER_CLOSED = 0, AX_BREAKER_OPEN = 1, AX_BREAKER_HALF_OPEN = 2 } ax_breaker_state;
const char *ax_breaker_state_name(ax_breaker_state b); /* "closed", "open", "half-open" */

typedef struct ax_class_stats {
    char name[AX_CLASS_NAME_MAX];
    ax_priority priority;
    uint64_t timeout_ms;
    unsigned limit;         /* attempts in flight allowed now (max_concurrency if no limit) */
    unsigned in_flight;     /* attempts holding a slot now */
    uint64_t queued;        /* waiting in a bucket now */
    uint64_t rtt_short_ns;  /* the limiter's recent latency (last window) */
    uint64_t rtt_long_ns;   /* ... and its baseline */
    unsigned limit_mark;    /* slow start: after a fall the limit doubles back up to
                               this, half the limit it fell from; 0: none */
    uint64_t limit_doublings; /* windows in which slow start doubled the limit */
    ax_breaker_state breaker;
    double failure_rate;    /* over the breaker's window ... */
    uint64_t breaker_calls; /* ... of this many calls (it opens from breaker_min_calls) */
    uint64_t breaker_opened;   /* times it opened */
    uint64_t breaker_rejected; /* submissions refused and queued tasks failed: AX_EOPEN */
    double retry_budget_left;  /* retries the budget allows now (0 while throttled);
                                  a retry takes room when decided and gives it
                                  back if dropped before it starts */
    double retry_tokens;       /* the throttle's tokens (retries stop at or below half
                                  of retry_throttle_tokens) */
    /* Retries the budget allowed (decided: counted even when the retry is
     * then cancelled, ended by its deadline or shutdown, or refused at
     * dispatch before it starts; the retry attempts that ran are in
     * `started`; HIGH's with protect_high too, which the budget does not
     * limit) and denied. */
    uint64_t retries_allowed, retries_denied;
    uint64_t expired;       /* failed at dispatch past the queue-time budget */
    uint64_t submitted, started, succeeded, failed, timed_out, cancelled;
} ax_class_stats;

int ax_class_stats_get(ax_sched *s, unsigned id, ax_class_stats *out);
/* Classes registered (ids 1 .. this). */
unsigned ax_class_count(ax_sched *s);

/* ---- statistics --------------------------------------------------------- */

/* One priority's books in ax_stats.prio[p]: what was offered at that
 * priority and how it ended. At rest, per priority, submitted = succeeded +
 * failed + timed_out + cancelled (a task keeps its priority for life). */
typedef struct ax_prio_stats {
    uint64_t submitted; /* admitted */
    uint64_t rejected;  /* refused, other than shed, for a spec of this priority
                           (a NULL spec or an out-of-range priority counts in
                           ax_stats.rejected only) */
    uint64_t shed;      /* refused with AX_ESHED */
    uint64_t succeeded, failed, timed_out, cancelled; /* terminal states */
} ax_prio_stats;
/* Defined since ax_stats.prio (and the ax_priority_*_total families): a
 * program built against an older ax.h has a shorter ax_stats and
 * ax_metrics, so rebuild against this one (0.x: the ABI may change). */
#define AX_HAVE_PRIO_STATS 1

typedef struct ax_stats {
    uint64_t queued[AX_PRIO_COUNT]; /* waiting in each bucket; may briefly exceed
                                       capacity[p], which bounds new submissions
                                       only: retries and jobs the watchdog hands
                                       back from a held worker are never refused */
    uint64_t delayed;     /* waiting out a delay or a retry back-off (or about
                             to: an attempt that ended into a retry) */
    uint64_t running;     /* holding a concurrency slot */
    uint64_t limit;       /* the cap on running tasks now: max_concurrency, or
                             config.adaptive_limit's value */
    uint64_t submitted;   /* admitted */
    uint64_t rejected;    /* refused: invalid, full, rate, shutdown */
    uint64_t shed;        /* refused with AX_ESHED */
    uint64_t started;     /* attempts whose function was entered */
    uint64_t succeeded, failed, timed_out, cancelled; /* terminal states */
    uint64_t retried;     /* retries scheduled */
    uint64_t panicked;    /* attempts ended by ax_panic */
    uint64_t orphans;     /* coroutines still running after their task timed out / was cancelled */
    uint64_t lingering;   /* timed-out tasks reported still running grace_ms later */
    uint64_t stacks_in_use;
    uint64_t callback_overruns; /* callback-pool calls that ran past callback_timeout_ms: an
                                   on_timeout, or an on_release run there after one */
    uint64_t callback_dropped;  /* on_timeout calls dropped: callback_queue was full */
    ax_prio_stats prio[AX_PRIO_COUNT]; /* the same books per priority (indexed by
                                          ax_priority): each field's sum over p is
                                          the total above, except rejected */
} ax_stats;

/* A snapshot taken without stopping the workers: each counter is exact, but
 * counters kept by different threads are read one after the other, so a
 * task ending during the call may show in one and not yet in another (the
 * invariant submitted = succeeded + failed + timed_out + cancelled holds
 * exactly once the scheduler is idle). */
int ax_stats_get(ax_sched *s, ax_stats *out);

/* ---- metrics ---------------------------------------------------------------- */

/* A distribution (nanoseconds) from a log-linear histogram: quantiles are
 * within 2% of the exact ones; max is exact. */
typedef struct ax_dist {
    uint64_t count, sum_ns, p50_ns, p90_ns, p99_ns, max_ns;
} ax_dist;

typedef struct ax_metrics {
    ax_stats stats;
    ax_dist wait[AX_PRIO_COUNT]; /* queue wait before each attempt, per priority */
    ax_dist run[AX_PRIO_COUNT];  /* run time of each attempt, per priority */
} ax_metrics;

/* Counters, gauges and the five families of the seed's advice (queue length,
 * wait time, timeouts, retries, run time). Histograms are kept per worker
 * without locks and merged here. */
int ax_metrics_get(ax_sched *s, ax_metrics *out);
/* The Prometheus text exposition (format 0.0.4, names ax_*) into buf,
 * snprintf-style: returns the length it needs (excluding the NUL), or a
 * negative AX_E* code; writes at most len bytes, NUL-terminated if len > 0. */
long ax_metrics_prometheus(ax_sched *s, char *buf, size_t len);
/* Serve GET and HEAD /metrics over HTTP/1.x on addr ("127.0.0.1:9464" if
 * NULL; "host:port" where host is "localhost", a numeric IPv4 address or a
 * numeric IPv6 one in brackets ("[::1]:9464"), the rule of ax-upstream
 * --bind; an IPv6 host without brackets is refused, "::1:0" being
 * ambiguous; the port is decimal digits only, no sign or space; port 0
 * picks a free one, returned in *port_out if not NULL) from a
 * thread of its own, `ax-metrics`, outside the task slots: it answers while
 * every slot is busy and every bucket full, and a scrape changes no counter,
 * histogram or event of the scheduler. One request per connection; other paths get 404,
 * other methods 405, malformed requests 400. Connections are bounded by
 * config.metrics_max_connections and config.metrics_read_timeout_ms.
 * Stops in ax_shutdown (after the drain) and ax_free. One endpoint per
 * scheduler: AX_EBUSY for a second, AX_ESHUTDOWN once shutting down. */
int ax_metrics_serve(ax_sched *s, const char *addr, uint16_t *port_out);

/* A library's or an application's own series in every /metrics scrape
 * (libax_redis: its queues and consumers). fn writes Prometheus text
 * (format 0.0.4, whole lines, its own metric names) into buf,
 * snprintf-style: returns the length it needs (excluding the NUL) and
 * writes at most len bytes, or returns a negative AX_E* code (its text is
 * then left out of this scrape, as it is when the text holds a NUL byte
 * within the length returned, or is longer than 16 MiB). It is called on the `ax-metrics` thread,
 * once per scrape (again with a larger buffer if the first was too small),
 * after libax's own series, under a lock that ax_metrics_unappend takes:
 * so it must not block (render a snapshot its owner keeps, no I/O, no
 * wait on a task; a slow fn delays the scrape and every other one), and
 * must not call ax_metrics_append / ax_metrics_unappend (for any
 * scheduler: they return AX_ESTATE there), nor ax_shutdown / ax_free (of
 * any scheduler: refused there; they wait for scrapes). Not part of
 * ax_metrics_prometheus. At most AX_METRICS_APPENDERS per scheduler
 * (AX_ENOMEM beyond); the same fn and arg twice is AX_EBUSY; AX_ESHUTDOWN
 * once ax_shutdown began (the endpoint stops; ax_metrics_unappend still
 * works). */
#define AX_METRICS_APPENDERS 16
typedef long (*ax_metrics_appender)(char *buf, size_t len, void *arg);
int ax_metrics_append(ax_sched *s, ax_metrics_appender fn, void *arg);
/* Remove it; when this returns, fn is not running and will not be called
 * again (so arg may be freed). AX_ENOTFOUND if it was not registered. */
int ax_metrics_unappend(ax_sched *s, ax_metrics_appender fn, void *arg);

/* ---- live task dump -------------------------------------------------------- */

/* Write every queued, delayed and running task to f, one line each: id,
 * trace id, priority, state, attempt, age, time to deadline, worker — the
 * counterpart of the goroutine dump the seed used in its incident (§4.2).
 * Safe from any thread. From a task it works, but the task's worker runs
 * nothing else while it writes f: prefer another thread or
 * ax_dump_on_signal. Holds the scheduler lock only while it copies (at
 * most `max_tasks` lines; 0 = all). AX_ESYS (errno's text in the detail)
 * when writing or flushing f failed, or f's error flag is set after. */
int ax_dump(ax_sched *s, FILE *f, size_t max_tasks);
/* Dump to f whenever the process receives signo (e.g. SIGUSR1). The handler
 * only writes a byte to a pipe; a background thread does the dump. signo 0
 * turns it off. Once no scheduler dumps on a signal (turned off, moved to
 * another signal, or ax_free), the action it had before is back, unless the
 * program has installed another one since. A file that fails (a pipe whose
 * reader left) fails the write with EPIPE, never SIGPIPE from ax's thread;
 * one that blocks (a pipe nobody reads) holds only the dump thread, and
 * ax_free leaks the scheduler (saying so on stderr) rather than wait for
 * it past shutdown_timeout_ms. Turning it off (signo 0) or moving it to
 * another file waits for a dump in progress to be done with the old file,
 * which may then be closed. A signal that comes while the pipe to the
 * thread is full is dropped (the dumps already pending still run), never
 * waited on in the handler. AX_EINVAL for SIGKILL, SIGSTOP, SIGSEGV, SIGBUS,
 * SIGURG (ax's own) and the signals of a fault (SIGFPE, SIGILL, SIGTRAP,
 * SIGSYS: a handler that returns re-runs the faulting instruction).
 * Allowed after ax_shutdown (a dump then shows what is left: orphans,
 * nothing queued); ax_free turns it off. */
int ax_dump_on_signal(ax_sched *s, int signo, FILE *f);

/* ---- lifecycle events ---------------------------------------------------- */

/* One event per state change of a task (README: "Observability"). */
typedef enum {
    AX_EV_SUBMITTED = 0,  /* admitted */
    AX_EV_REJECTED,       /* refused: invalid, full, rate, shutdown (no task exists) */
    AX_EV_SHED,           /* refused with AX_ESHED (no task exists) */
    AX_EV_STARTED,        /* an attempt starts running (wait_ns set) */
    AX_EV_SUCCEEDED,      /* terminal */
    AX_EV_FAILED,         /* terminal */
    AX_EV_TIMED_OUT,      /* terminal */
    AX_EV_RETRY_SCHEDULED,/* an attempt failed or timed out; message says why and the delay */
    AX_EV_CANCELLED,      /* terminal */
    AX_EV_LINGERING,      /* still running grace_ms after its timeout; message has a backtrace */
    AX_EV_PANIC,          /* ax_panic or a stack overflow; FAILED or RETRY_SCHEDULED follows */
} ax_event_kind;
#define AX_EV_COUNT 11

#define AX_EVMASK(k) (1u << (k))
#define AX_EVMASK_ALL ((1u << AX_EV_COUNT) - 1)
/* Failures only: refusals, failures, timeouts, retries, cancels, lingering, panics. */
#define AX_EVMASK_FAILURES                                                                     \
    (AX_EVMASK(AX_EV_REJECTED) | AX_EVMASK(AX_EV_SHED) | AX_EVMASK(AX_EV_FAILED) |             \
     AX_EVMASK(AX_EV_TIMED_OUT) | AX_EVMASK(AX_EV_RETRY_SCHEDULED) |                           \
     AX_EVMASK(AX_EV_CANCELLED) | AX_EVMASK(AX_EV_LINGERING) | AX_EVMASK(AX_EV_PANIC))

#define AX_EVENT_MESSAGE_MAX 512

typedef struct ax_event {
    ax_event_kind kind;
    uint64_t time_ns;       /* CLOCK_REALTIME when it happened. A task's events
                               are in the order of their times; the sinks get
                               them in that order but for races between two
                               threads (a cancel ending an attempt as it
                               begins or as its retry is scheduled, with a
                               slow sink or a preempted worker): a STARTED or
                               RETRY_SCHEDULED may then come a batch after
                               the terminal event, with the earlier time:
                               order a task's events by time_ns ("ts") */
    uint64_t id;            /* 0 for REJECTED / SHED */
    char trace_id[AX_TRACE_ID_MAX];
    ax_priority priority;   /* AX_PRIO_COUNT ("invalid" in JSON) for a refusal of
                               a spec whose priority is out of range */
    unsigned attempt;       /* 0-based attempt the event belongs to; for
                               RETRY_SCHEDULED the attempt that ended (the next
                               one is attempt + 1), with its wait and run */
    uint64_t wait_ns;       /* queue wait of this attempt (STARTED and later) */
    uint64_t run_ns;        /* run time of this attempt (terminal, retry, panic) */
    int code;               /* AX_E* or the function's return; 0 if none */
    char message[AX_EVENT_MESSAGE_MAX]; /* error text, retry delay, backtrace; "" if none */
    char class_name[AX_CLASS_NAME_MAX]; /* the task's class, "" if none */
    char ref[AX_REF_MAX];   /* the task's ax_spec.ref, "" if none. A refusal
                               (REJECTED, SHED) reports the spec as submitted:
                               its ref and trace_id as given (valid UTF-8 of
                               the bound), which for AX_EINVAL may hold the
                               very control character refused (JSON escapes it) */
} ax_event;

typedef void (*ax_event_fn)(const ax_event *ev, void *arg);

const char *ax_event_name(ax_event_kind k); /* "submitted", ..., "panic" */

/* Events are buffered per worker and written by a background thread, never
 * on a task's path. Sinks (any combination; NULL turns one off):
 *   ax_events_json      one JSON object a line to f (RFC 3339 timestamps, µs),
 *                       always valid UTF-8: a message byte that does not begin
 *                       a valid character (task error texts) is written \ufffd
 *   ax_events_callback  the host's own logger; called on the event thread.
 *                       It may submit, cancel and read stats; it may not
 *                       wait for an event thread: ax_events_json,
 *                       ax_events_callback and ax_events_flush from it
 *                       return AX_ESTATE (of any scheduler: two callbacks
 *                       would wait for each other), ax_shutdown too (of any
 *                       scheduler), and ax_free refuses (as from on_done);
 *                       from a metrics appender, the three events calls
 *                       return AX_ESTATE for any scheduler
 * A full buffer drops events rather than block a worker; ax_events_dropped
 * counts them, and also the events of every batch the JSON sink failed to
 * take (a pipe whose reader left: EPIPE, never SIGPIPE from ax's thread; a
 * full disk), the first such failure said on stderr. Switching a sink first writes out what was buffered to the
 * old one; once the call returns, the old file and callback are not used
 * again (the file may be closed, the callback's arg freed) -- except when
 * the call is made from a task, which cannot wait for the event thread.
 * Allowed after ax_shutdown: the event thread runs until ax_free, and a
 * sink set then gets the events still to come (an orphan's end, the
 * REJECTED of a late submission). A sink that takes nothing (a pipe nobody
 * reads, a callback that never returns) holds the event thread, and with it
 * ax_events_flush and every switch of a sink, which wait for what is
 * buffered to be written (so that the old sink is not used after the
 * call): they return once the sink takes it; only ax_free gives up on it
 * (leaking the scheduler). A callback that submits on every REJECTED or
 * SHED event feeds itself when its own submissions are refused: skip those
 * kinds (or filter them out) in such a callback. */
int ax_events_json(ax_sched *s, FILE *f);
int ax_events_callback(ax_sched *s, ax_event_fn fn, void *arg);
/* Which kinds are produced (AX_EVMASK bits; default AX_EVMASK_ALL once a sink
 * is set), and 1 in sample_every tasks for SUBMITTED/STARTED/SUCCEEDED
 * (chosen when the task is submitted: of every sample_every tasks a thread
 * submits in a row, the one at a random position, so a sampled task has all
 * its events, and a change applies to tasks submitted after it; 1 = every
 * task). */
int ax_events_filter(ax_sched *s, unsigned mask, unsigned sample_every);
/* Lossless mode: a producer that finds its buffer full waits for the event
 * thread instead of dropping (default off: observing never stalls the
 * scheduler; the cost when on is in bench/, "full path with every event").
 * Events produced by an event callback (its submits, cancels, into any
 * scheduler) are the exception: an event thread cannot wait for itself, nor
 * for another whose callback may be waiting for it, so with a full buffer
 * they are dropped and counted. So are events that find their buffer full
 * once a shutdown's time for them has run out (ax_shutdown: timeout_ms and
 * half its coroutines' grace; ax_free: half of shutdown_timeout_ms): a sink
 * that takes nothing (a pipe nobody reads) cannot hold ax_shutdown or
 * ax_free. */
int ax_events_lossless(ax_sched *s, bool on);
/* Write out everything buffered so far (returns when it is written).
 * AX_ESTATE on one of this scheduler's workers (from its tasks, and from
 * on_done / on_release run there: the wait would stall the worker), and
 * from an events callback or a metrics appender (above). */
int ax_events_flush(ax_sched *s);
uint64_t ax_events_dropped(ax_sched *s);

#ifdef __cplusplus
}
#endif
#endif /* AX_H */
