/* internal.h - the structures the three layers share.
 *
 * Data flows one way (DESIGN.md §2):
 *   ax_submit (submit.c) -> bucket (sched.c) -> dispatch -> worker (exec.c)
 *   -> result -> finalize (finish.c) -> [retry: monitor wheel (monitor.c)
 *   -> bucket] -> on_done.
 *
 * Two objects describe a task:
 *  - struct job: the admitted unit of work (what ax_submit created). Lives in
 *    the process-wide job table (job.c) from admission until its terminal
 *    state has been reported and nobody references it. <= 256 bytes: this is
 *    what a queued task costs.
 *  - struct ax_task: one attempt running as a coroutine on one worker (the
 *    handle the task function receives). A job that is retried gets a new
 *    run; a run whose job timed out or was cancelled goes on ("orphan") until
 *    its function returns, then is recycled. Runs live in per-worker pools
 *    that are never unmapped while the worker lives, so a stale pointer plus a
 *    generation number is always safe to check.
 *
 * Who decides an attempt's outcome: the job's 64-bit state word `sw` packs
 * (low 32 bits of the id's sequence, attempt, state). Every party that may end
 * an attempt -- the worker when the function returns, the worker's wheel or
 * the monitor at the deadline, ax_cancel, shutdown -- does one CAS from
 * (seq, attempt, RUNNING/STARTING) to the outcome. The winner finalizes
 * (frees the slot, counts, retries or calls on_done); losers only clean up.
 * Packing the id and attempt makes a stale CAS (a late timer of attempt 1, a
 * monitor reading a recycled job) fail instead of ending the wrong attempt.
 *
 * Locks: one scheduler mutex `s->lock` guards buckets, quota round state,
 * counters, the job table's free list and the monitor's wheel. It is held
 * only for O(1) list operations, never while user code runs. Workers batch
 * their slot releases and counter updates into the lock section in which they
 * take the next task (exec.c), so the common path costs one lock per task on
 * each side (submit; complete + dispatch).
 */
#ifndef AX_INTERNAL_H
#define AX_INTERNAL_H

#include "ax.h"
#include "coro/coro.h"
#include "coro/stack.h"
#include "wheel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define AX_LIKELY(x) __builtin_expect(!!(x), 1)
#define AX_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define AX_CONTAINER_OF(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))
#define AX_CACHELINE 64

static inline void ax_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- ids and the job table (job.c) ------------------------------------- */

/* id = (sequence << AX_SLOT_BITS) | slot: unique in the process (the
 * sequence is a process-wide counter) and O(1) to look up for ax_cancel. */
#define AX_SLOT_BITS 22
#define AX_MAX_JOBS (1u << AX_SLOT_BITS) /* live jobs per scheduler: 4 194 304 */
#define AX_JOB_CHUNK 1024

/* Internal states beyond ax_state. STARTING: taken from its bucket by a
 * worker that is building its coroutine; holds a slot, not yet RUNNING. */
enum { JS_STARTING = 16 };

static inline uint64_t sw_make(uint64_t id, unsigned attempt, unsigned state)
{
    return ((id >> AX_SLOT_BITS) << 32) | ((uint64_t)(attempt & 0xffffff) << 8) | state;
}
static inline unsigned sw_state(uint64_t sw)
{
    return (unsigned)(sw & 0xff);
}

/* Where a queued job sits (guarded by s->lock). */
enum { WHERE_NONE = 0, WHERE_BUCKET, WHERE_DELAY, WHERE_RETRY };

struct job {
    struct job *next, *prev;    /* bucket FIFO, or the free list */
    struct ax_wheel_node tnode; /* monitor wheel: delay, back-off, queued deadline */
    _Atomic uint64_t sw;        /* state word, see above */
    uint64_t id;
    ax_fn fn;
    void *arg;
    ax_callback on_done, on_timeout;
    void *cb_arg;
    uint64_t timeout_ns;  /* per attempt */
    uint64_t deadline_ns; /* absolute over all attempts; 0 = none */
    uint64_t submit_ns;   /* admitted (for ages in ax_dump) */
    uint64_t enqueue_ns;  /* entered its bucket for the current attempt */
    uint64_t wait_ns;     /* last attempt: queue wait */
    uint64_t run_ns;      /* last attempt: run time */
    ax_retry_policy retry;
    struct ax_task *run;       /* current run; written by its worker before RUNNING */
    struct ax_task *joiner;    /* parent parked in ax_join (s->lock) */
    uint32_t joiner_gen;     /* the joiner's park_gen */
    uint32_t joiner_life;    /* the joiner's life_gen */
    uint32_t run_life;       /* run->life_gen of the current run, for ax_cancel */
    _Atomic uint32_t refs;     /* the system's own ref + runs + parent + messages */
    int32_t code;              /* last attempt's code, for ax_join */
    uint16_t max_retry;
    uint16_t attempt;          /* current attempt, 0-based */
    uint8_t prio;
    uint8_t where;             /* WHERE_*, s->lock */
    uint8_t is_child;          /* spawned by a task that may join it */
    uint8_t in_system;         /* counted in load (queued + running + delayed), s->lock */
    char trace_id[AX_TRACE_ID_MAX];
};

struct ax_sched;
int job_alloc_locked(struct ax_sched *s, struct job **out); /* s->lock held */
void job_free_locked(struct ax_sched *s, struct job *j);   /* s->lock held */
struct job *job_lookup(struct ax_sched *s, uint64_t id);    /* racy: caller checks j->id */
static inline void job_ref(struct job *j)
{
    atomic_fetch_add_explicit(&j->refs, 1, memory_order_relaxed);
}
/* Drop a ref; the last one frees the job (takes s->lock). */
void job_unref(struct ax_sched *s, struct job *j);
void job_table_destroy(struct ax_sched *s);

/* ---- runs (struct ax_task) ---------------------------------------------- */

/* PARK_EXT: parked by an extension (http.c) that gets run->on_unpark(run)
 * when the run is woken for any other reason (deadline, cancel). */
enum { PARK_NONE = 0, PARK_SLEEP, PARK_FD, PARK_JOIN, PARK_YIELD, PARK_EXT };

struct defer_entry {
    void (*fn)(void *);
    void *arg;
};
#define AX_DEFER_INLINE 8
#define AX_CHILD_INLINE 8

struct worker;
#define AX_BT_MAX 24

/* A timer in a worker's wheel, tagged so expiry knows what it was for. */
enum { TIMER_DEADLINE = 1, TIMER_WAIT = 2, TIMER_EXT = 3 };
struct run_timer {
    struct ax_wheel_node node;
    struct ax_task *run; /* TIMER_DEADLINE / TIMER_WAIT */
    int kind;
    void (*fire)(struct run_timer *rt, struct worker *w); /* TIMER_EXT */
};

/* An extension's fd in a worker's epoll (http.c: curl's sockets). Stored
 * in epoll data with bit 0 set; runs waiting in ax_wait_fd have it clear. */
struct reactor_src {
    void (*on_event)(struct reactor_src *src, struct worker *w, uint32_t events);
};
int reactor_src_add(struct worker *w, int fd, uint32_t events, struct reactor_src *src, bool mod);
void reactor_src_del(struct worker *w, int fd);
/* Arm / disarm an extension timer on the calling worker's wheel. */
void worker_timer_arm(struct worker *w, struct run_timer *rt, uint64_t at_ns);
void worker_timer_disarm(struct worker *w, struct run_timer *rt);

struct ax_task {
    struct ax_coro coro;
    struct ax_sched *s;
    struct worker *w;
    struct job *job;
    uint64_t expect_sw; /* job->sw while this attempt is RUNNING */
    uint64_t id;        /* copies, valid after the job moved on */
    uint64_t start_ns, deadline_ns;
    struct run_timer deadline_timer; /* the attempt's deadline */
    struct run_timer wait_timer;     /* a sleep / wait bound */
    struct ax_task *next;                /* ready queue, or the free list */
    uint32_t park_gen;                   /* bumped at every park; stale wakes compare it */
    uint32_t attempt;
    uint8_t parked;   /* PARK_* */
    uint8_t panicked;
    uint8_t finished;
    uint8_t prio;
    int wake_rc;      /* what the parked call returns */
    int wait_fd;
    int code;         /* the function's return */
    struct ax_stack *stack;
    struct job *join_child; /* PARK_JOIN: the child waited for */
    void (*on_unpark)(struct ax_task *t); /* PARK_EXT */
    void *ext;                            /* PARK_EXT: the extension's state */
    uint32_t life_gen;      /* bumped when the run struct is reused */
    uint8_t orphan;         /* its job ended without it (timeout, cancel) */
    unsigned ndefers, defer_cap;
    struct defer_entry *defers;
    struct defer_entry defer_inline[AX_DEFER_INLINE];
    unsigned nchildren, child_cap;
    struct job **children;
    struct job *child_inline[AX_CHILD_INLINE];
    char err[AX_ERROR_MAX];
    char trace[AX_TRACE_ID_MAX]; /* formatted on first ax_task_trace_id */
    uint8_t bt_req;              /* resumed only to record where it is parked */
    uint8_t started;             /* its function has begun running */
    uint8_t overflowed;          /* ran into its guard page (obs/crash.c) */
    int bt_n;
    void *bt[AX_BT_MAX];
};

/* ---- workers (exec.c, reactor.c) ---------------------------------------- */

/* A wake-up from another thread: resume `run` with rc if it is still the
 * same run (life_gen) and, when park_gen != 0, still in the same park. */
struct wake_msg {
    struct ax_task *run;
    uint32_t life_gen, park_gen;
    int rc;
};

/* Deferred updates a worker applies in its next lock section. */
/* Deferred work a worker applies in its next lock section. */
struct worker_pending {
    struct job *free_list; /* jobs whose last ref dropped */
};

/* Terminal outcomes counted by a worker without the lock (single writer,
 * relaxed load + store); ax_stats_get adds them up. */
struct worker_counts {
    _Atomic uint64_t succeeded, failed, timed_out, cancelled, panicked;
};
static inline void wc_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

struct worker {
    struct ax_sched *s;
    unsigned index;
    pthread_t thread;
    struct ax_coro main;
    struct ax_task *current;
    struct ax_task *ready_head, *ready_tail;
    unsigned nready;
    uint64_t now_ns;
    struct ax_wheel wheel;
    int epfd, evfd;
    struct ax_stack_pool stacks;
    unsigned nfd_waits;       /* runs parked in ax_wait_fd */
    unsigned direct_budget;   /* direct yields left this iteration */
    struct run_timer **expired; /* expire_timers' scratch array */
    size_t expired_cap;
    _Atomic int busy;         /* out of epoll_wait: the monitor must watch for hogs */
    struct ax_task *run_free; /* recycled runs */
    struct ax_task **run_chunks;
    unsigned nrun_chunks, run_chunk_cap;
    unsigned live_runs;       /* runs not yet recycled, orphans included */
    struct worker_pending pend;
    struct worker_counts counts;
    /* remote wake-ups (other threads -> this worker), inbox_lock */
    pthread_mutex_t inbox_lock;
    struct wake_msg *inbox, *inbox_spare;
    unsigned ninbox, inbox_cap, inbox_spare_cap;
    _Atomic unsigned inbox_hint; /* ninbox, readable without the lock */
    _Atomic int sleeping; /* parked in epoll_wait; a waker CASes 1 -> 0 and writes evfd */
    /* published for the monitor's hog watch (relaxed; validated by CAS) */
    _Atomic uint64_t pub_seq; /* seqlock: odd while the three below change */
    _Atomic(struct job *) pub_job;
    _Atomic uint64_t pub_sw;
    _Atomic uint64_t pub_deadline_ns;
    _Atomic uint64_t stacks_in_use;
    struct ev_ring *ev_ring; /* lifecycle events this worker produced (obs/events.c) */
    struct ax_metrics_snapshot *m; /* this worker's wait/run histograms (obs/metrics.c) */
    void *http;                      /* http.c's per-worker state (curl multi handle) */
    void (*http_destroy)(void *http);
    void (*reactor_done)(struct worker *w); /* after each batch of epoll events */
    /* lingering (obs/linger.c): timed-out runs still alive on this worker */
    struct linger_entry *linger;
    unsigned nlinger, linger_cap;
    /* the monitor's view of an orphan running on this worker (monitor only) */
    uint64_t linger_seen_seq, linger_reported_seq;
    _Atomic uint64_t hog_reported_sw; /* reported by the monitor: the worker skips it */
    /* a backtrace taken by the worker itself on a signal (obs/linger.c) */
    _Atomic int bt_state; /* 0 idle, 1 requested, 2 taken */
    int bt_n;
    void *bt[AX_BT_MAX];
} __attribute__((aligned(AX_CACHELINE)));

/* ---- the scheduler ------------------------------------------------------ */

struct bucket {
    struct job *head, *tail;
    unsigned n;
};

struct cb_item;

struct ax_sched {
    ax_config cfg;
    pthread_mutex_t lock;
    /* --- s->lock --- */
    struct bucket b[AX_PRIO_COUNT];
    unsigned quota[AX_PRIO_COUNT];
    bool quota_auto[AX_PRIO_COUNT]; /* follows max_concurrency */
    unsigned rr;                    /* index into the round order H, N, L */
    unsigned rr_taken;              /* taken in the current turn */
    unsigned running;               /* slots held (STARTING + RUNNING) */
    unsigned cap;
    unsigned load;                  /* queued + running + delayed, for shedding */
    unsigned delayed;
    unsigned total_capacity;
    unsigned shed_at;               /* load at which NORMAL/LOW are shed */
    bool paused, closing;
    bool retry_enabled[AX_PRIO_COUNT];
    double rate, burst, tokens;
    uint64_t rate_last_ns;
    struct ax_stats st;             /* counters (gauges are filled on read) */
    struct job **chunks;
    unsigned nchunks;
    struct job *job_free;
    struct ax_wheel delay_wheel;    /* monitor: delays, back-offs, queued deadlines */
    pthread_cond_t idle_cond;       /* signalled when running drops to 0 while closing */
    /* --- monitor thread (monitor.c) --- */
    pthread_t monitor;
    pthread_cond_t monitor_cond;    /* with s->lock */
    bool monitor_stop;
    _Atomic bool monitor_idle; /* sleeping with no hog watch: workers kick it */
    uint64_t monitor_wake_tick; /* when it plans to wake (s->lock) */
    unsigned delayed_new[AX_PRIO_COUNT]; /* delayed submissions, counted in bucket bounds */
    /* Lock-free hints for the worker loop's fast path, stored under s->lock:
     * a worker with nothing to apply skips the lock when no job is
     * dispatchable. A stale hint only delays a dispatch to the next
     * iteration or wake-up (every change that makes work dispatchable also
     * wakes a sleeping worker). */
    _Atomic unsigned hint_queued;   /* jobs in the three buckets */
    _Atomic int hint_blocked;       /* paused or closing */
    /* Slots released by workers without the lock (a completion, a timeout):
     * folded into `running` by the next lock holder (running_locked), so a
     * slot is free for admission and dispatch the moment its task ends,
     * even while that worker runs another long slice. */
    _Atomic unsigned freed;
    _Atomic unsigned unloaded; /* likewise for `load`: tasks ended by workers */
    /* --- workers --- */
    struct worker *workers;
    unsigned nworkers;
    _Atomic unsigned nsleeping;
    _Atomic int stop;               /* workers leave their loop once idle */
    _Atomic uint64_t total_live_runs;
    /* --- callback pool (callback.c) --- */
    struct cb_pool *cbp;
    bool shut_done;
    /* --- metrics (obs/metrics.c) --- */
    struct ax_metrics_snapshot *m_shared; /* histograms of non-worker threads, s->lock */
    bool metrics_serving;
    /* --- lifecycle events (obs/events.c) --- */
    struct ev_state *ev;
    _Atomic unsigned ev_mask; /* kinds produced; 0 while no sink is set */
    unsigned ev_sample;
    _Atomic bool ev_lossless; /* a full ring makes the producer wait */
    _Atomic uint64_t ev_dropped;
};

/* ---- cross-file functions ----------------------------------------------- */

/* clock */
static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
/* Wheel ticks are milliseconds; round deadlines up so nothing fires early. */
static inline uint64_t ns_to_tick_ceil(uint64_t ns)
{
    return (ns + 999999u) / 1000000u;
}
static inline uint64_t ns_to_tick(uint64_t ns)
{
    return ns / 1000000u;
}

/* error.c: set the thread's detail message, return code. */
int ax_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ax_fail_static(int code, const char *msg);
void ax_clear_error(void);

/* config.c */
int config_validate(const ax_config *c, ax_config *resolved);

/* retry.c: per-thread random numbers */
uint64_t ax_rand64(void);
int retry_policy_check(const ax_retry_policy *p, const char *who);

/* sched.c (s->lock held for *_locked) */
void bucket_push_locked(struct ax_sched *s, struct job *j);
void bucket_remove_locked(struct ax_sched *s, struct job *j);
struct job *sched_pick_locked(struct ax_sched *s);
void sched_recompute_locked(struct ax_sched *s);
void sched_hint_locked(struct ax_sched *s);
static inline unsigned load_locked(struct ax_sched *s)
{
    s->load -= atomic_exchange_explicit(&s->unloaded, 0, memory_order_acq_rel);
    return s->load;
}
static inline unsigned running_locked(struct ax_sched *s)
{
    unsigned f = atomic_exchange_explicit(&s->freed, 0, memory_order_acq_rel);
    s->running -= f;
    return s->running;
}
void sched_wake_workers(struct ax_sched *s, unsigned n); /* no lock needed */

/* exec.c */
void *worker_main(void *arg);
void worker_post_wake(struct worker *w, const struct wake_msg *m);
void worker_kick(struct worker *w);
int worker_init(struct ax_sched *s, struct worker *w, unsigned index);
void worker_destroy(struct worker *w);
/* The task running on this thread, or NULL. */
extern _Thread_local struct ax_task *ax_current_run;
/* The worker this thread is, or NULL. */
extern _Thread_local struct worker *ax_current_worker;
/* Park the current run (its park kind already set); returns its wake_rc. */
int run_park(struct ax_task *t);
/* Append to the worker's ready queue (worker thread only). */
void ready_push(struct worker *w, struct ax_task *t);
/* ax_yield's fast path; false if it must go through the worker loop. */
bool run_switch_direct(struct ax_task *t);
/* Resume a parked run with rc (worker thread only). No-op if not parked. */
void run_wake(struct ax_task *t, int rc);
/* AX_ETIMEDOUT / AX_ECANCELED if the run's job has moved on without it. */
int run_detached_rc(const struct ax_task *t);
/* Run the cleanups and leave the coroutine for good (task stack only). */
_Noreturn void run_exit(struct ax_task *t);

/* finish.c: end an attempt whose CAS this thread won. `w` is the worker
 * doing it (batched slot release) or NULL (any other thread: lock now).
 * held_slot: the attempt was STARTING/RUNNING (not queued or delayed). */
void finish_attempt(struct ax_sched *s, struct worker *w, struct job *j, unsigned state, int code,
                    const char *err, bool held_slot);
/* Try to end a job's attempt from outside the worker (cancel, monitor). */
bool finish_try_cas(struct job *j, uint64_t expect, unsigned state);
void result_fill(const struct job *j, unsigned state, int code, const char *err, ax_result *r);

/* submit.c */
int submit_common(struct ax_sched *s, const ax_spec *spec, uint64_t *id_out, struct ax_task *parent);
void trace_format(const struct job *j, char out[AX_TRACE_ID_MAX]);
/* Re-queue a job after its delay or back-off (s->lock held). */
void submit_requeue_locked(struct ax_sched *s, struct job *j, uint64_t now);

/* monitor.c */
int monitor_start(struct ax_sched *s);
void monitor_stop(struct ax_sched *s);
void monitor_add_locked(struct ax_sched *s, struct job *j, uint64_t when_ns, uint8_t where);
void monitor_del_locked(struct ax_sched *s, struct job *j);
void monitor_kick(struct ax_sched *s);

/* callback.c */
int cb_pool_start(struct ax_sched *s);
void cb_pool_stop(struct ax_sched *s);
void cb_pool_post(struct ax_sched *s, ax_callback fn, void *arg, const ax_result *r);
uint64_t cb_pool_overruns(struct ax_sched *s);
/* monitor: count overruns, add a thread if all are stuck; true while any
 * callback runs (the monitor then keeps polling). */
bool cb_pool_check(struct ax_sched *s, uint64_t now);

/* obs/metrics.c (w: the calling worker, or NULL for any other thread) */
struct ax_metrics_snapshot;
int metrics_init(struct ax_sched *s);
void metrics_destroy(struct ax_sched *s);
void metrics_record_wait(struct ax_sched *s, struct worker *w, unsigned prio, uint64_t ns);
void metrics_record_run(struct ax_sched *s, struct worker *w, unsigned prio, uint64_t ns);

/* obs/crash.c */
void crash_init(void);
void *crash_altstack_enter(void);
void crash_altstack_leave(void *mem);
void crash_report(struct worker *w, struct ax_task *t);
/* obs/linger.c: append "\n#i symbol+off" lines for frames [skip, n). */
void bt_format(char *out, size_t cap, void *const *bt, int n, int skip);

/* obs/dump.c */
void dump_unregister(struct ax_sched *s);

/* obs/linger.c */
struct linger_entry {
    struct ax_task *run;
    uint32_t life_gen;
    uint64_t since_ns; /* its deadline */
};
void linger_track(struct worker *w, struct ax_task *t);
void linger_check(struct worker *w); /* worker loop; cheap when nothing tracked */
/* monitor: the published run of a busy worker (one seqlock read) */
void linger_hog_check(struct ax_sched *s, struct worker *w, uint64_t now, struct job *j, uint64_t sw,
                      uint64_t deadline, uint64_t seq);
int linger_init(void);

/* obs/events.c */
int ev_init(struct ax_sched *s);
void ev_stop(struct ax_sched *s);
static inline bool ev_on(struct ax_sched *s, unsigned kind)
{
    return atomic_load_explicit(&s->ev_mask, memory_order_relaxed) & (1u << kind);
}
/* w: the calling worker (its own ring) or NULL (the shared ring). */
void ev_emit(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind, int code,
             const char *msg);
void ev_emit_refusal(struct ax_sched *s, const ax_spec *sp, unsigned kind, int code,
                     const char *msg);
/* Lossless mode: wait (before taking s->lock) until the shared ring has room
 * for what a lock section will emit; inside it ev_under_lock forbids waiting. */
void ev_reserve(struct ax_sched *s);
extern _Thread_local bool ev_under_lock;
#define EV(s, w, j, kind, code, msg)                                                           \
    do {                                                                                       \
        if (AX_UNLIKELY(ev_on((s), (kind))))                                                   \
            ev_emit((s), (w), (j), (kind), (code), (msg));                                     \
    } while (0)

/* join.c */
void join_release_children(struct ax_task *t);
bool join_notify_locked(struct ax_sched *s, struct job *j, struct wake_msg *out);

#endif
