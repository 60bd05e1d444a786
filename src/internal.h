/* internal.h - the structures the three layers share.
 *
 * Data flows one way (DESIGN.md §2, §3a):
 *   ax_submit (submit.c) -> bucket (sched.c) -> dispatch (worker.c)
 *   -> run (run.c) -> end of the attempt (finish.c)
 *   -> [retry: the scheduler's wheel (sched.c) -> bucket] -> on_done.
 * It comes back only through queues: a bucket, the scheduler's wheel, a
 * worker's inbox, the callback pool's queue.
 *
 * Two objects describe a task:
 *  - struct job: the admitted unit of work (what ax_submit created). Lives in
 *    the process-wide job table (job.c) from admission until it is terminal
 *    and nobody holds it. <= 256 bytes: this is what a queued task costs.
 *  - struct ax_task ("run"): one attempt running as a coroutine on one
 *    worker (the handle the task function receives). A job that is retried
 *    gets a new run; a run whose attempt timed out or was cancelled goes on
 *    ("orphan") until its function returns, then is recycled. Runs live in
 *    per-worker pools never unmapped while the worker lives, so a stale
 *    pointer plus its life_gen is always safe to check.
 *
 * A job's whole life is its state word (state.h): state, attempt,
 * generation and the holds that keep it allocated. Every party that may end
 * an attempt -- the worker when the function returns or the deadline fires,
 * the watchdog for a held worker, ax_cancel, shutdown -- does one CAS; the
 * winner runs what follows (finish.c), losers only clean up their own.
 *
 * Locks: one scheduler mutex `s->lock` guards buckets, quota round state,
 * counters, the job table's free list and the scheduler's timer wheel. It is
 * held only for O(1) list operations, never while user code runs. Each
 * worker's wheel has its own lock, taken by the worker around each of its
 * operations (wheel_lock: no locked instruction where membarrier is
 * registered) and only try-locked by the watchdog (wheel_trylock_foreign;
 * worker.c, "The wheel's lock"). Lock order: s->lock before a wheel lock;
 * nobody takes s->lock holding one.
 */
#ifndef AX_INTERNAL_H
#define AX_INTERNAL_H

#include "ax.h"
#include "coro/coro.h"
#include "coro/stack.h"
#include "overload/flight.h"
#include "overload/overload.h"
#include "state.h"
#include "wheel.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define AX_LIKELY(x) __builtin_expect(!!(x), 1)
#define AX_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define AX_CONTAINER_OF(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))
#define AX_CACHELINE 64
#define AX_GUARD_SIZE (64u * 1024u) /* below every coroutine stack */

/* Fetch the line at p for writing: in exclusive state, so the stores (or
 * the atomic RMW) that follow need no second trip to the core that last
 * wrote it. __builtin_prefetch(p, 1) is a plain read prefetch on x86-64
 * unless built with -mprfchw, and a line fetched shared costs another
 * round trip to upgrade (bench ax_fullpath, 1 worker, on a VM with a
 * 410 ns cache-line round trip: 492 -> 449 ns a task with PREFETCHW in
 * job.c's prefetch). PREFETCHW (0F 0D /1) executes as a NOP on the x86-64
 * CPUs without it (pre-Broadwell Intel), so it is emitted unconditionally;
 * valgrind, ASan and TSan accept it. A prefetch never faults. */
static inline void ax_prefetch_w(const void *p)
{
#if defined(__x86_64__) && !defined(__PRFCHW__)
    __asm__("prefetchw %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

static inline void ax_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- ids and the job table (job.c), the state word (state.h) ----------- */

/* id = (sequence << AX_SLOT_BITS) | slot: unique in the process (the
 * sequence is a process-wide counter, never 0, that each thread takes in
 * blocks: job.c id_seq_next) and O(1) to look up for
 * ax_cancel. The state word carries the sequence as its generation, so a
 * freed or reused slot matches no older id (job_find). */
#define AX_SLOT_BITS 22
#define AX_MAX_JOBS (1u << AX_SLOT_BITS) /* live jobs per scheduler: 4 194 304 */
#define AX_JOB_CHUNK 1024
#define AX_IDLE_POLL_DEFAULT_US 50u /* config.idle_poll_us: worker.c's SPIN_NS */
#define AX_IDLE_POLL_MAX_US 1000000u

struct job {
    /* ---- Hot: what the common path touches (a submit, a dispatch, a run
     * and its end with no retry, class, parent or trace id of its own).
     * Kept together at the front so that a job's hot part spans 3 or 4
     * cache lines, not the whole job's 4 or 5 (job_prefetch_hot). */
    struct job *next; /* a class's park list; the free list; hand-off lists */
    union {               /* s->lock */
        struct job *prev; /* parked: a class's park list (doubly linked) */
        uint32_t bpos;    /* queued, not parked: its position in its bucket's ring */
    };
    _Atomic uint64_t sw; /* the state word: state.h is its only writer */
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
    struct ax_task *run;  /* current run; written by its worker before RUNNING */
    struct job_ext *ext;  /* rare fields (job_ext below), NULL for most jobs */
    uint32_t run_life;    /* run->life_gen of the current run, for ax_cancel */
    int32_t code;         /* the terminal code, for ax_join (set by the terminal path) */
    uint16_t max_retry;
    uint8_t prio;
    uint8_t is_child; /* spawned by a task that may join it */
    uint8_t cls;      /* its class (class.c), 0 = none */
    uint8_t end_why;  /* END_*: why dispatch ended it, or a retry was denied */
    uint8_t parked;   /* on its class's park list, not its bucket's (s->lock) */
    uint8_t probe;    /* a half-open breaker permit it holds: its spell's tag; 0 none */
    /* ext holds a ref (ax_spec.ref), set at submit before the job is
     * published and never changed after: the event producers read ext only
     * when this is set, so a child's error text allocating ext later
     * (finish.c) races with none of them. */
    uint8_t has_ref : 1;
    /* ext->release (ax_spec.on_release) is set: written at submit before
     * the job is published, cleared when it is freed, like has_ref (one
     * byte: both are written only then). Such a job counts among the
     * callbacks in progress (cb_begin) from its terminal path until its
     * on_release has returned (finish.c, job.c). */
    uint8_t has_release : 1;
    /* ax_events_filter's sample_every left this task's SUBMITTED, STARTED
     * and SUCCEEDED events out: decided once at submit (ev_sample_skip),
     * under s->lock before any worker can take the job, so a sampled task
     * has all of them. */
    uint8_t ev_skip : 1;
    /* trace_id below holds the submitter's trace id; else it is generated
     * from the id (trace_format) and trace_id is not read. Written at
     * every submit, like ev_skip. */
    uint8_t has_trace : 1;
    /* Its class's drop count (low byte) when this attempt took its slot:
     * whether it began before the last dropped sample (class.c). */
    uint8_t cls_drops;
    uint8_t alim_drops; /* the same for config.adaptive_limit (sched.c) */
    /* FLM_*: its sample is in while it holds its slot (overload/flight.h);
     * the slot's free undoes it. Written by the thread ending the attempt. */
    uint8_t fl_marks;
    /* ---- Cold: only a delay, a back-off, a queued deadline, a class's
     * park, a retry, a parent's join, a trace id of the submitter's, or an
     * attempt handed over (the watchdog, a drain list) reads or writes
     * these. The common path must not touch them: submit writes retry only
     * with max_retry, joiner only for a child, trace_id only with has_trace;
     * dispatch reads tnode only for a job with a deadline or a class. */
    /* How an attempt ended, for whoever finishes it later: the callback
     * pool's finisher (the watchdog ended it) or a drain list. Its own field,
     * not shared with `code`: a cancel may run the terminal path (and write
     * `code`) while the finisher has yet to read this. */
    uint32_t handoff;
    struct ax_wheel_node tnode; /* scheduler wheel: delay, back-off, queued deadline (s->lock) */
    ax_retry_policy retry;      /* read only when max_retry > 0 */
    struct ax_task *joiner;     /* parent parked in ax_join; JOIN_DONE once ended (s->lock) */
    union {
        uint32_t joiner_gen;     /* the joiner's park_gen, until the end (s->lock) */
        uint32_t ended_attempt;  /* from the end (joiner JOIN_DONE): the attempt
                                    on_done reported, for ax_join (s->lock) */
    };
    uint32_t joiner_life;       /* the joiner's life_gen */
    char trace_id[AX_TRACE_ID_MAX];
};
#define FLM_CLS 1u
#define FLM_ALIM 2u
/* Fields ordered to stay at 248 bytes: memory per queued task is a target
 * (bench "memory per queued task", <= 256 bytes). */
_Static_assert(sizeof(void *) != 8 || sizeof(struct job) == 248, "struct job grew");
/* The hot part: the bytes before the first cold field. */
#define JOB_HOT_BYTES offsetof(struct job, handoff)
_Static_assert(sizeof(void *) != 8 || JOB_HOT_BYTES == 156, "struct job's hot part moved");

/* Fetch, for writing, every line of a job's hot part: the next job a submit
 * takes (job.c) and the next a dispatch picks (sched.c). 156 bytes at one
 * of the table's 248-byte strides span 3 lines at 5 of its 8 offsets and 4
 * at the other 3 (the whole job: 4 at 2, 5 at 6): 3.4 lines a job on
 * average where all of it took 4.75. The last address covers
 * the fourth line when there is one; else it repeats the third. */
static inline void job_prefetch_hot(const struct job *j)
{
    const char *c = (const char *)j;
    ax_prefetch_w(c);
    ax_prefetch_w(c + 64);
    ax_prefetch_w(c + 128);
    ax_prefetch_w(c + JOB_HOT_BYTES - 1);
}

/* What few jobs have, kept off struct job: allocated at submit for a task
 * with a ref or an on_release, or at its end for a child that failed with
 * an error text (which ax_join reports); freed with the job
 * (job_free_locked). */
struct job_ext {
    char *err;              /* a child's terminal error text (malloc), or NULL */
    void (*release)(void *arg); /* ax_spec.on_release, set at submit; NULL if none */
    unsigned timeouts_queued;   /* its on_timeouts on the callback pool (s->lock):
                                   JH_CB is held while > 0, so on_release (which
                                   may free cb_arg) comes after them */
    char ref[AX_REF_MAX];   /* ax_spec.ref, "" if none */
};

/* Why a class job ended without running, or was not retried (its text:
 * class_end_text). */
/* END_DEADLINE: its deadline passed before it ever ran; END_DEADLINE_RETRY:
 * an attempt ran and failed, and the deadline passed in the back-off or
 * while the retry waited in its bucket (finish.c: deadline_text);
 * END_DEADLINE_RETRY_TIMED: the same after an attempt that timed out.
 * While a retry waits, end_why says how the attempt before it ended (0 or
 * END_DEADLINE_RETRY_TIMED: sched_retry_locked) for the expiry to keep. */
enum {
    END_DEADLINE = 0,
    END_DEADLINE_RETRY,
    END_DEADLINE_RETRY_TIMED,
    END_EXPIRED,
    END_OPEN,
    END_BUDGET,
    END_THROTTLED
};

/* j->joiner, besides NULL (none) and a parked parent's run: the child's
 * terminal path recorded its result (ended_attempt) but the child has not
 * let go yet (its on_done, its coroutine), and then that it has (join.c). */
#define JOIN_DONE ((struct ax_task *)1)
#define JOIN_ENDED ((struct ax_task *)2)

static inline uint64_t job_gen(const struct job *j)
{
    return js_gen_of_id(j->id, AX_SLOT_BITS);
}

struct ax_sched;
struct worker;
int job_alloc_locked(struct ax_sched *s, struct job **out); /* s->lock held */
void job_free_locked(struct ax_sched *s, struct job *j);   /* s->lock held */
/* The live job with this id, or NULL (s->lock held: the id is stable). */
struct job *job_find_locked(struct ax_sched *s, uint64_t id);
/* Drop holds (JH_*, one or more in one atomic step); frees the job if they
 * were the last on a terminal job, re-queues a waiting retry if JH_RUN was.
 * w: the calling worker (applied in its next lock section) or NULL. */
void job_released(struct ax_sched *s, struct worker *w, struct job *j, uint64_t word);
/* The same for the watchdog, which runs no user code: a job whose last
 * hold it drops and that has an on_release goes to the finisher. */
void job_release_nouser(struct ax_sched *s, struct job *j, uint64_t hold);
/* A freeable job's on_release (if any), on the calling thread (job.c). */
void job_run_release(struct ax_sched *s, struct worker *w, struct job *j);
void join_let_go(struct ax_sched *s, struct job *j, uint64_t word);
/* A child (JH_PARENT) whose last other hold went with this release: it
 * ended, its on_done returned, its coroutine returned. */
static inline bool job_let_go(uint64_t hold, uint64_t n)
{
    return (n & JH_ALL) == JH_PARENT && (hold & ~JH_PARENT);
}
static inline void job_release(struct ax_sched *s, struct worker *w, struct job *j, uint64_t hold)
{
    uint64_t n = js_release(&j->sw, hold);
    bool requeue = (hold & JH_RUN) && js_state(n) == JS_RETRYING && (n & JF_WAIT);
    if (AX_UNLIKELY(requeue) || js_freeable(n))
        job_released(s, w, j, n); /* free it, or queue its retry */
    else if (AX_UNLIKELY(n & JH_PARENT) && job_let_go(hold, n))
        join_let_go(s, j, n); /* its parent's ax_join may return */
}
void job_table_destroy(struct ax_sched *s);
#define JOB_PREFILL_LOW AX_JOB_CHUNK /* free jobs below which submitters grow the table */
#define JOB_PREFILL_FLOOR 128 /* ... and below which they wait for the one doing it */
#define JOB_PREFILL_WAIT_NS 20000000u /* ... at most this long (job.c) */
_Static_assert(JOB_PREFILL_FLOOR < JOB_PREFILL_LOW, "submitters would wait for every prefill");
void job_table_prefill(struct ax_sched *s); /* no lock held */
/* Whether a submitter should call job_table_prefill. */
#define job_table_low(s)                                                                      \
    (atomic_load_explicit(&(s)->nfree_hint, memory_order_relaxed) < JOB_PREFILL_LOW)
/* A zeroed chunk of n jobs whose pages are faulted in (job.c); NULL when
 * out of memory. Free with free(). */
struct job *job_chunk_new(size_t n);

/* ---- runs (struct ax_task) ---------------------------------------------- */

/* A run's own state (t->rs): where its coroutine is. The job's state is in
 * the job's word; this says only what the worker must undo to wake it.
 * RS_PARK_EXT: parked by an extension (http.c) that gets run->on_unpark(run)
 * when the run is woken for any other reason (deadline, cancel). */
enum {
    RS_NEW = 0,    /* built, its function not entered yet */
    RS_ACTIVE,     /* running or ready */
    RS_PARK_SLEEP, /* ax_sleep */
    RS_PARK_FD,    /* ax_wait_fd */
    RS_PARK_JOIN,  /* ax_join */
    RS_PARK_YIELD, /* ax_yield: in the ready queue */
    RS_PARK_EXT,   /* an extension's wait (http.c) */
    RS_EXITED,     /* returned, panicked or never began: to be recycled */
};

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
/* The file behind an extension's registration was closed (which took it
 * out of epoll): drop its count and mark, touching no number. */
void reactor_src_gone(struct worker *w, int fd);
/* One fd's runs parked in ax_wait_fd on a worker (w->fdw[fd]): a reader and
 * a writer (one run may be both) share one epoll registration, whose data
 * carries the fd and `gen`; a registration that outlived its file's fd
 * number (closed while waited on) has an older gen and wakes nothing. */
struct fd_wait {
    struct ax_task *rd, *wr;
    uint32_t gen;    /* of the current registration */
    uint32_t events; /* registered EPOLLIN / EPOLLOUT, 0: none of ours */
    bool src;        /* ax_http's registration holds the number */
    bool haunted;    /* a registration of ours outlived its file here (a
                        MOD/DEL by number failed): files are told apart by
                        identity (dev, ino) from then on */
    dev_t dev;       /* the registered file's, when haunted */
    ino_t ino;
};
/* io.c: SIGPIPE held back on the calling thread around a write ax makes
 * to a file of the host's (ax_write to a pipe, ax_dump), so that a reader
 * that left is EPIPE, not the process killed: when the writes failed, one
 * they raised is taken back at the release; one pending before the hold
 * is someone else's and stays, and so does one that came while writes
 * that did not fail were held (sent to the process by someone else). Not
 * for the thread's life: its mask passes to the programs it starts. */
struct sigpipe_hold {
    sigset_t old;
    bool had;
};
void sigpipe_hold(struct sigpipe_hold *h);
void sigpipe_release(const struct sigpipe_hold *h, bool failed);
/* task.c: ax_wait_fd for the public call `who` (io.c: ax_read, ax_write,
 * ax_accept, ax_connect), whose name begins its messages. */
int task_wait_fd(ax_task *t, const char *who, int fd, unsigned events, int64_t timeout_ms);
/* Register t as fd's AX_READ and/or AX_WRITE waiter (ax_wait_fd); `who`,
 * the public call made, begins any error's message. */
int reactor_fd_wait(struct worker *w, struct ax_task *t, const char *who, int fd,
                    unsigned events);
/* t's wait ended without its fd (a timer, a cancel): leave the table. */
void reactor_fd_unwait(struct worker *w, struct ax_task *t);
struct epoll_event;
void reactor_dispatch(struct worker *w, struct epoll_event *ev, int n);
int reactor_wait(struct worker *w, struct epoll_event *ev, int max, const struct timespec *ts);
/* Arm / disarm an extension timer on the calling worker's wheel. */
void worker_timer_arm(struct worker *w, struct run_timer *rt, uint64_t at_ns);
void worker_timer_disarm(struct worker *w, struct run_timer *rt);

struct ax_task {
    struct ax_coro coro;
    struct ax_sched *s;
    struct worker *w;
    struct job *job;
    uint64_t expect_sw; /* job->sw while this attempt is RUNNING, holds masked out */
    uint64_t gen;       /* the job's generation: with attempt, names this attempt */
    uint64_t id;        /* copies, valid after the job moved on */
    uint64_t start_ns, deadline_ns;
    uint64_t wait_ns;   /* this attempt's queue wait (the job's moves on to a retry's) */
    struct run_timer deadline_timer; /* the attempt's deadline */
    struct run_timer wait_timer;     /* a sleep / wait bound */
    struct ax_task *next;                /* ready queue, or the free list */
    uint32_t park_gen;                   /* bumped at every park; stale wakes compare it */
    uint32_t attempt;
    uint8_t rs;       /* RS_*: the run's own state */
    uint8_t panicked;
    void *unwind; /* run_exit's jmp_buf while it runs the cleanups, else NULL */
    uint8_t began;    /* its function was entered (js_begin won) */
    uint8_t switched; /* parked or handed off since it was entered (run_park, run_switch_direct) */
    /* start_ns may be early by up to ax_coarse_res_ns: an on_done ran
     * inline since the worker last read the clock, and no tick since
     * (worker.c, before run_start). */
    uint8_t start_slack;
    uint8_t prio;
    int wake_rc;      /* what the parked call returns */
    int wait_fd;      /* RS_PARK_FD: its entry in w->fdw, -1 once detached */
    int code;         /* the function's return */
    struct ax_stack *stack;
    struct job *join_child; /* RS_PARK_JOIN: the child waited for */
    /* RS_PARK_JOIN, s->lock: the child ended (join_ended) and reported
     * attempt join_attempt, kept here while the child's joiner_gen (its
     * union with ended_attempt) names this park (join.c). */
    uint32_t join_attempt;
    uint8_t join_ended;
    void (*on_unpark)(struct ax_task *t); /* RS_PARK_EXT */
    void *ext;                            /* RS_PARK_EXT: the extension's state */
    uint32_t life_gen;      /* bumped when the run struct is reused */
    unsigned ndefers, defer_cap;
    struct defer_entry *defers;
    struct defer_entry defer_inline[AX_DEFER_INLINE];
    unsigned nchildren, child_cap;
    struct job **children;
    struct job *child_inline[AX_CHILD_INLINE];
    char err[AX_ERROR_MAX];
    char trace[AX_TRACE_ID_MAX]; /* formatted on first ax_task_trace_id */
    uint8_t bt_req;              /* resumed only to record where it is parked */
    uint8_t bt_in_park;          /* ... and it was parked in run_park (else in the
                                    yield hand-off): run_bt_serve */
    uint8_t overflowed;          /* ran into its guard page (obs/crash.c) */
    uint8_t detached_calls;      /* blocking calls made after its attempt ended */
    uint8_t warm;                /* its function returned: the coroutine waits at the
                                    top of run_entry's loop for another job (run.c) */
    int bt_n;
    uintptr_t bt_pc; /* the pc a stack overflow faulted at (bt_cut.signal_pc) */
    void *bt[AX_BT_MAX];
    /* The expect_sw of the attempt reported lingering (obs/linger.c): by
     * the watchdog (a hog) or this run's worker (parked). Each attempt is
     * reported once, however often it yields and is held again. */
    _Atomic uint64_t lg_reported_sw;
};

/* ---- workers (worker.c, run.c, reactor.c) ------------------------------- */

/* A wake-up from another thread: resume `run` with rc if it is still the
 * same run (life_gen) and, when park_gen != 0, still in the same park. */
struct wake_msg {
    struct ax_task *run;
    uint32_t life_gen, park_gen;
    int rc;
};

/* Deferred work a worker applies in its next lock section. */
struct worker_pending {
    struct job *free_list;    /* jobs whose last hold dropped */
};

/* Terminal outcomes counted by a worker without the lock (single writer,
 * relaxed load + store); ax_stats_get adds them up. ended[p][k]: tasks of
 * priority p that ended in terminal state JS_SUCCEEDED + k (succeeded,
 * failed, timed out, cancelled): one counter per task, as before the
 * per-priority books, only indexed. */
#define WC_ENDS (JS_CANCELLED - JS_SUCCEEDED + 1)
struct worker_counts {
    _Atomic uint64_t started, panicked;
    _Atomic uint64_t ended[AX_PRIO_COUNT][WC_ENDS];
};
static inline void wc_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* The per-worker wheel's lock: wheel_lock / wheel_unlock (below struct
 * worker) for the worker, around each of its own wheel operations;
 * wheel_trylock_foreign for the watchdog, which only ever try-locks it, to
 * expire the timers of a worker that is held (worker.c, "The wheel's
 * lock"). True once membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is
 * registered: the worker's side then has no locked instruction. */
extern bool ax_wheel_asym;

/* Jobs a worker takes in one lock section, at most; and never more than
 * its share of what could start (worker.c dispatch). 16, not the 8 of the
 * first version: half the lock hand-overs per task. Binaries alternating
 * in the same minutes, slow placement (SCALING.md "Dispatch batches"):
 * 16 with the share against 8, medians of 7 pairs: full path 1 worker
 * 0.903, 2 workers 0.911, spawn 0.787; 32 and 64 were slower than 16
 * (2 workers 2.0x, bimodal; not taken apart). */
#define DISPATCH_BATCH 16

struct worker {
    struct ax_sched *s;
    unsigned index;
    pthread_t thread;
    struct ax_coro main;
    struct ax_task *current;
    struct ax_task *ready_head, *ready_tail;
    unsigned nready;
    uint64_t now_ns;
    bool clock_stale;         /* an on_done ran on this worker since now_ns was read */
    /* config.idle_poll_us (worker.c idle_poll, worker 0 only): runs
     * resumed (a start included), ever; the count when the current poll's
     * end was set, and that end. The poll lasts from the last run, not
     * from each return to the loop (a timer cascade, a trim step). */
    uint64_t resumes, poll_resumes, poll_end_ns;
    unsigned warm_max;      /* stacks kept resident released or warm (worker.c warm_keep) */
    uint64_t trim_forced_ns; /* the last trim step taken with a timer near (trim_stacks) */
    struct ax_wheel wheel;    /* this worker's run timers, wheel_lk */
    _Atomic int wheel_lk;     /* the watchdog's hold (or both sides', not ax_wheel_asym) */
    _Atomic int wheel_own;    /* the worker inside (ax_wheel_asym) */
    struct ax_wheel_node *fired; /* timers the watchdog expired for us, wheel_lk */
    _Atomic int fired_hint;
    int epfd, evfd;
    struct ax_stack_pool stacks;
    unsigned nfd_waits;       /* runs parked in ax_wait_fd, and extension fds */
    struct fd_wait *fdw;      /* by fd: runs parked in ax_wait_fd (reactor.c) */
    size_t fdw_cap;
    unsigned direct_budget;   /* direct yields left this iteration */
    struct run_timer **expired; /* expire_timers' scratch array */
    size_t expired_cap;
    _Atomic int busy;         /* out of epoll_wait: the watchdog watches it */
    bool joined;              /* its thread was joined (lifecycle.c) */
    struct ax_task *run_free; /* recycled runs, without a stack */
    struct ax_task *run_warm; /* recycled runs keeping their stack and live coroutine */
    unsigned nrun_warm;
    unsigned long long fpenv; /* the thread's FP control state, each task's start (coro.h) */
    struct ax_task **run_chunks;
    unsigned nrun_chunks, run_chunk_cap;
    unsigned live_runs;       /* runs not yet recycled, orphans included */
    struct worker_pending pend;
    struct worker_counts counts;
    /* Jobs dispatch gave this worker (STARTING) whose run is not built yet,
     * FIFO through j->next, under wheel_lk: the watchdog hands them to other
     * workers while this one is held. At most one dispatch batch. */
    struct job *tostart_head, *tostart_tail;
    /* The quota round as it stood before each job of the last batch was
     * picked, and s->dispatch_gen after it (written under s->lock before the
     * batch goes on the list; read by the watchdog under wheel_lk while it is
     * there, when the worker writes none of it). batch_next: the index in
     * the batch of tostart_head (wheel_lk). See watchdog.c: hand_back. */
    uint8_t batch_rr[DISPATCH_BATCH];
    unsigned batch_taken[DISPATCH_BATCH];
    unsigned batch_next;
    uint64_t batch_gen;
    /* remote wake-ups (other threads -> this worker), inbox_lock */
    pthread_mutex_t inbox_lock;
    struct wake_msg *inbox, *inbox_spare;
    unsigned ninbox, inbox_cap, inbox_spare_cap;
    _Atomic unsigned inbox_hint; /* ninbox, readable without the lock */
    _Atomic int sleeping; /* parked in epoll_wait; a waker CASes 1 -> 0 and writes evfd */
    /* What is on this worker's CPU, for the watchdog: a seqlock, odd while
     * it changes. Bumped when a run is switched in and again when the worker
     * is back on its own stack (pub_run NULL), when it starts or comes back
     * from idle, and when it picks a batch, so an unchanged even value over
     * time means the worker is held by one run or one callback. */
    _Atomic uint64_t pub_seq;
    _Atomic(struct ax_task *) pub_run;
    _Atomic(struct job *) pub_job; /* the run's job: job-shaped memory, never freed */
    _Atomic uint64_t pub_expect;   /* the run's expect_sw (generation, attempt) */
    _Atomic uint64_t pub_deadline; /* the run's deadline */
    _Atomic uint64_t stacks_in_use;
    struct ev_ring *ev_ring; /* lifecycle events this worker produced (obs/events.c) */
    struct ax_metrics_snapshot *m; /* this worker's wait/run histograms (obs/metrics.c) */
    void *http;                      /* http.c's per-worker state (curl multi handle) */
    void (*http_destroy)(void *http);
    void (*reactor_done)(struct worker *w); /* after each batch of epoll events */
    /* lingering (obs/linger.c): timed-out runs still alive on this worker */
    struct linger_entry *linger;
    unsigned nlinger, linger_cap;
    /* the watchdog's view of this worker (watchdog thread only) */
    uint64_t wd_seq, wd_since_ns;  /* pub_seq last seen (UINT64_MAX: none), and since when */
    uint64_t wd_started;           /* counts.started at the watchdog's last pass */
    /* hogs' reports in progress (obs/linger.c): the one whose backtrace is
     * being taken (it uses bt below), and those being named */
    struct linger_pending *lg_pend, *lg_naming;
    /* a backtrace taken by the worker itself on a signal (obs/linger.c) */
    _Atomic int bt_state; /* 0 idle, 1 requested, 2 taken, 3 not on the task's stack */
    _Atomic int bt_sent;  /* signals the watchdog sent and the handler has not taken */
    _Atomic bool urg_blocked; /* the thread's mask blocks the signal: none is sent */
    pthread_mutex_t sig_lk;   /* the watchdog's signalling against the thread's exit */
    bool sig_gone;            /* the thread has left worker_main (sig_lk) */
    sigset_t sigmask;         /* the thread's mask in its loop (crash_thread_signals) */
    _Atomic(struct ax_task *) bt_run; /* the run it is asked for */
    _Atomic uint64_t bt_seq;          /* and its pub_seq then (the same stretch of it) */
    int bt_n;
    uintptr_t bt_pc; /* the pc the signal interrupted */
    void *bt[AX_BT_MAX];
    /* What this worker's thread moves once per task it ends, with no
     * locked instruction and on a line of its own (issue 10's hot-path
     * budget: per-worker counters summed on read). Only this worker's
     * thread writes them (a load and a release store: ends_add); every
     * other thread adds to the scheduler's shared figures instead. freed,
     * unloaded, cb_begun, cb_returned only grow; live is the runs whose
     * coroutine has not returned (run.c run_live_drop). */
    _Alignas(AX_CACHELINE) struct {
        _Atomic uint64_t freed;       /* slots freed (s->freed: other threads') */
        _Atomic uint64_t unloaded;    /* tasks out of the load (s->unloaded) */
        _Atomic uint64_t cb_begun;    /* callbacks counted in progress (cb_begin) */
        _Atomic uint64_t cb_returned; /* and returned (cb_return) */
        _Atomic uint64_t live;        /* runs live, orphans included */
    } ends;
    /* How much of ends.freed / ends.unloaded is in s->running / s->load:
     * written by the lock holder that folds them in (running_locked,
     * load_locked), read without the lock by queued_takeable. */
    _Alignas(AX_CACHELINE) struct {
        _Atomic uint64_t freed, unloaded;
    } folded;
} __attribute__((aligned(AX_CACHELINE)));

/* ---- the scheduler ------------------------------------------------------ */

/* A bucket's queue is a ring of job slots (job_slot) in FIFO order, not a
 * list through the jobs. With a list the submitter wrote the previous
 * job's line (tail->next) and the dispatching worker the next job's
 * (next->prev), so job lines crossed between the cores more than once per
 * task; perf of bench ax_fullpath put that miss, under s->lock, as the
 * largest single cost of a dispatch. With the ring a submitter writes its
 * own job and a slot number, a worker reads slot numbers 16 to a line.
 * (Prefetching the next jobs from the ring was measured once at +4 % for
 * 1 worker and -10 % for 2, a line fetched by one worker often taken by
 * the other; measured again with 8 ahead, it gained for both:
 * sched_prefetch_locked.) A job removed
 * from the middle (cancelled, parked, ended) leaves RING_GONE; the two ends
 * always hold a job. Positions run free (uint32, wrapping); a job keeps its
 * position in j->bpos. The ring holds at least twice the live jobs of its
 * priority (s->live_prio, reserved at admission: bucket_reserve_locked), so
 * a push never allocates and a full ring compacts to half. (sched.c) */
#define RING_GONE UINT32_MAX
struct bucket {
    uint32_t *ring;
    uint32_t mask;   /* ring size - 1; no ring yet: ring NULL */
    uint32_t rh, rt; /* positions of the first job and one past the last */
    unsigned n;      /* queued jobs of this priority: the ring's + parked ones */
    unsigned parked; /* of n, parked on their class's list (class.h) */
};

struct ax_sched {
    ax_config cfg;
    /* --- s->lock --- */
    /* Three lines hold what both a submitter and a dispatching worker write
     * under the lock per task or per batch (the lock word with the slot and
     * load counts; HIGH's and NORMAL's buckets; LOW's with the round, the
     * per-priority counts and the free list's head), so each lock hand-over
     * between them moves three lines, not five (asserted below the struct,
     * on x86-64 and aarch64, whose mutex is 8 bytes longer). What mostly
     * the workers write there (dispatch_gen, the free list's tail) is on a
     * line of its own below, away from what the submitter reads (cap, the
     * bounds). SCALING.md has the figures. */
    _Alignas(AX_CACHELINE) pthread_mutex_t lock;
    unsigned running;               /* slots held (STARTING + RUNNING) */
    unsigned rr_taken;              /* taken in the current turn */
    /* queued + running + delayed, for shedding; 64 bits: unfolded (below)
     * it only overstates, and must not wrap under the shed line */
    uint64_t load;
    _Alignas(AX_CACHELINE) struct bucket b[AX_PRIO_COUNT];
    unsigned live_prio[AX_PRIO_COUNT]; /* admitted and not freed, per priority */
    unsigned nfree;               /* jobs on job_free */
    _Atomic unsigned nfree_hint;  /* nfree, readable without the lock */
    unsigned rr;                  /* index into the round order H, N, L */
    struct job *job_free;         /* FIFO (job.c): the oldest freed is reused first */
    unsigned quota[AX_PRIO_COUNT];
    bool quota_auto[AX_PRIO_COUNT]; /* follows max_concurrency */
    unsigned cap;                   /* running tasks at most now */
    unsigned cap_max;               /* ax_set_max_concurrency's; cap follows the adaptive
                                       limit below it when config.adaptive_limit */
    unsigned delayed;               /* DELAYED + RETRYING */
    unsigned parked_total;          /* class jobs parked off their bucket's list (sched.c) */
    unsigned delayed_prio[AX_PRIO_COUNT]; /* `delayed` by priority (DELAYED, and RETRYING
                                             in its back-off): counted in bucket bounds */
    /* Retries decided whose slot is freed but whose back-off is not armed
     * yet (finish.c retry_unarmed_add, dropped in retry_schedule's lock
     * section): counted in bucket bounds too. Written once each way per
     * retry, read by admission. */
    _Atomic unsigned retry_unarmed[AX_PRIO_COUNT];
    unsigned total_capacity;
    unsigned shed_at;               /* load at which NORMAL/LOW are shed */
    unsigned max_orphans;
    bool paused;
    _Atomic bool closing;
    _Atomic bool retry_enabled[AX_PRIO_COUNT];
    double rate, burst, tokens;
    uint64_t rate_last_ns;
    struct ax_stats st;             /* counters (gauges are filled on read) */
    struct job **chunks;
    unsigned nchunks;
    _Atomic unsigned nchunks_hint;  /* nchunks, read by a prefill outside the lock (job.c) */
    _Atomic bool prefilling;        /* a submitter is growing the table (job.c) */
    struct job *job_spare;          /* a populated chunk not linked yet (job.c) */
    unsigned job_spare_base;        /* the base its prefill numbered it from */
    uint64_t job_prefilled, job_grow_cold; /* chunks populated by a prefill / grown cold */
    /* The scheduler's timer wheel (sched.c): delays, back-offs and queued
     * deadlines of jobs that are in no worker's hands. Expired by whichever
     * worker dispatches next; worker 0 sleeps until its next expiry; the
     * watchdog expires it only when no worker got to it in time. */
    struct ax_wheel jwheel;
    _Atomic uint64_t jwheel_next; /* ax_wheel_next(&jwheel), readable without the lock */
    pthread_cond_t idle_cond;     /* signalled when running drops to 0 while closing */
    /* --- watchdog thread (watchdog.c) --- */
    pthread_t watchdog;
    pthread_cond_t watchdog_cond; /* with s->lock */
    bool watchdog_stop, watchdog_started;
    uint64_t watchdog_until; /* watchdog_stop's bound for the exit's reports (s->lock) */
    _Atomic bool watchdog_idle; /* sleeping with no worker to watch: workers kick it */
    /* s->lock, written by dispatching workers (the tail also by whoever
     * frees a job or grows the table, rarely; see `lock` above). */
    _Alignas(AX_CACHELINE) uint64_t dispatch_gen; /* batches dispatched, ever (worker.c, watchdog.c) */
    struct job *job_free_tail;
    /* Lock-free hints for the worker loop's fast path, stored under s->lock:
     * a worker with nothing to apply skips the lock when no job is
     * dispatchable. A stale hint only delays a dispatch to the next
     * iteration or wake-up (every change that makes work dispatchable also
     * wakes a sleeping worker). */
    /* Its own cache line (as the two groups below): read by every worker
     * loop, stored when the lists turn empty or non-empty. */
    _Alignas(64) _Atomic unsigned hint_queued; /* 1: jobs in the three buckets' lists
                                                  (parked ones not); else 0 */
    _Atomic int hint_blocked;       /* paused or closing */
    /* The last dispatch found orphans at max_orphans: no worker may start
     * an attempt, so none spins waiting for one, and the run that returns
     * (run_recycle) wakes a sleeping worker to dispatch. */
    _Atomic bool hint_orphans_full;
    /* Slots released without the lock (a completion, a timeout): folded
     * into `running` by the next lock holder (running_locked), so a slot is
     * free for admission and dispatch the moment its task ends, even while
     * that worker runs another long slice. */
    /* Added to by a thread that ends a task and is not one of the workers
     * (ax_cancel's caller, the watchdog, the callback pool); a worker
     * counts in its own ends.freed / ends.unloaded, which the lock holder
     * folds in with these. Read by a submitter only when the figures it
     * holds reach a bound (submit.c): a line apart from the submitters'
     * (perf, bench ax_fullpath: sharing one with hint_queued and nsleeping
     * moved it twice per task). */
    _Alignas(64) _Atomic unsigned freed;
    _Atomic uint64_t unloaded; /* likewise for `load`: tasks ended without the lock */
    /* Tasks out of the load whose on_done (or on_release) has not returned
     * yet: ax_shutdown waits for them too (the load itself drops before
     * on_done, so that an on_done submitting the next task is not shed by
     * its own task). Counted by threads that are not workers of s; a
     * worker counts in its own ends (callbacks_in_progress sums them). */
    _Atomic uint64_t cb_begun, cb_returned;
    _Alignas(64) struct worker_counts shared_counts; /* outcomes ended on other threads */
    /* --- workers --- */
    struct worker *workers;
    unsigned nworkers;
    /* The workers among which dispatch splits what could start: nworkers,
     * or the CPUs in the affinity mask of ax_new's thread (the workers
     * inherit it) if fewer; a cgroup CPU quota is not seen (worker.c
     * dispatch: more workers than CPUs cannot compute in parallel, and a
     * share of one task each only woke them one after another). */
    unsigned share_div;
    _Atomic unsigned nsleeping;
    _Atomic int stop;               /* workers leave their loop once idle */
    /* --- task classes (class.c): published once, never removed --- */
    struct ax_class_rt *classes[AX_CLASS_MAX + 1]; /* [1 .. nclasses] */
    _Atomic unsigned nclasses;
    /* Serialises ax_class_register and ax_set_max_concurrency: a class
     * that follows the cap reads it at registration, and each change walks
     * the registered classes, so either order ends with every class at the
     * last cap (new-user trial: a class registered during a change, or two
     * changes at once, left a class's limit off the cap for good). Taken
     * before s->lock, alim_lk and a class's lk. */
    pthread_mutex_t class_reg_lock;
    /* Some class with parked jobs may start one again (class.c room_made):
     * the next dispatch looks, even if the buckets' lists are empty. Set by
     * whoever made the room, after it, then a sleeping worker is woken;
     * cleared by a dispatch before it picks. */
    _Atomic bool parked_ready;
    /* config.adaptive_limit (sched.c): the limiter over every attempt, fed
     * at the end of each attempt under alim_lk; dispatch applies its value
     * to `cap` (s->lock). */
    pthread_mutex_t alim_lk;
    struct ax_limit alim;
    _Atomic unsigned alim_value;
    _Atomic uint64_t alim_flight; /* slots held (running - freed), samples in, drops (flight.h) */
    /* When it last had news: its last sample, or its last nudge (a stall
     * with every slot held and work waiting; sched.c). */
    _Atomic uint64_t alim_news_ns;
    _Atomic uint64_t alim_quiet_ns; /* how long without news is a stall (sched.c) */
    /* The last dispatch left every slot taken (s->lock): workers do not spin
     * on queued work until a slot is released (`freed` moves) or the cap
     * changes. */
    _Atomic bool hint_cap_full;
    /* --- callback pool (callback.c) --- */
    struct cb_pool *cbp;
    _Atomic uint64_t cb_overruns, cb_dropped; /* ax_stats; outlive the pool */
    /* --- libax_http (http.c): ax_http_configure's settings --- */
    void *http_conf;              /* an ax_http_config, s->lock; NULL = defaults */
    _Atomic unsigned http_conf_gen; /* bumped by each ax_http_configure: workers re-read */
    /* --- metrics (obs/metrics.c) --- */
    struct ax_metrics_snapshot *m_shared; /* histograms of non-worker threads, s->lock */
    struct metrics_server *msrv; /* the /metrics endpoint (obs/metrics_serve.c) */
    /* ax_metrics_append (obs/metrics.c): held while an appender runs, so
     * ax_metrics_unappend returns only once it is not running. */
    pthread_mutex_t mappend_lock;
    struct {
        ax_metrics_appender fn;
        void *arg;
    } mappend[AX_METRICS_APPENDERS];
    unsigned nmappend;
    /* --- lifecycle events (obs/events.c) --- */
    struct ev_state *ev;
    _Atomic unsigned ev_mask; /* kinds produced; 0 while no sink is set */
    _Atomic unsigned ev_sample; /* ax_events_filter may change it while workers emit */
    _Atomic bool ev_lossless; /* a full ring makes the producer wait */
    _Atomic uint64_t ev_dropped;
    /* The last stderr line queued for this scheduler (obs/report.c), which
     * ax_free lets the writer finish. Raised by the watchdog and by the
     * workers (linger_check): report_note. */
    _Atomic uint64_t report_ticket;
    unsigned fork_gen; /* ax_fork_gen at ax_new (sched_forked) */
};
/* The three lines of the lock section (see `lock` above). */
#define AX_SCHED_LINE(f) (offsetof(struct ax_sched, f) / AX_CACHELINE)
_Static_assert(AX_SCHED_LINE(load) == AX_SCHED_LINE(lock), "load left the lock's line");
_Static_assert(AX_SCHED_LINE(job_free) == AX_SCHED_LINE(b) + 1 &&
                   AX_SCHED_LINE(rr) == AX_SCHED_LINE(b) + 1 &&
                   (offsetof(struct ax_sched, b) + 2 * sizeof(struct bucket)) / AX_CACHELINE ==
                       AX_SCHED_LINE(b) + 1,
               "the lock section's third line is split");

/* ---- cross-file functions ----------------------------------------------- */

/* clock */
static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
/* CLOCK_MONOTONIC as of the kernel's last tick: never ahead of now_ns(),
 * behind it by less than ax_coarse_res_ns (one tick: 4 ms on this
 * project's VM), ~6 ns a read against now_ns()'s ~22 (vDSO, 10 M reads).
 * ax_coarse_res_ns is 0 where the clock is missing or coarser than 50 ms
 * (worker.c clock_setup): callers then read now_ns() instead. */
extern uint64_t ax_coarse_res_ns;
static inline uint64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
/* A caller's timeout in ms as nanoseconds, at most a year (ax_sleep's
 * bound): INT64_MAX means "no bound of its own" and must not wrap around to
 * a time already past. ms must be >= 0. */
#define AX_MS_MAX (365ull * 24 * 3600 * 1000)
static inline uint64_t ms_to_ns_capped(int64_t ms)
{
    return ((uint64_t)ms > AX_MS_MAX ? AX_MS_MAX : (uint64_t)ms) * 1000000u;
}
/* Wheel ticks (the workers' and the scheduler's wheels) are 2^16 ns =
 * 65.536 us of CLOCK_MONOTONIC. Deadlines are rounded up to a tick so that
 * nothing fires early; a timer is therefore late by less than one tick plus
 * the time the worker takes to notice (issue 10, "timer lateness").
 *
 * Why not 1 ms (what the wheel had before): rounding up to a whole
 * millisecond made every sleep 0.5 ms late on average (p50 of bench
 * ax_lateness 0.82 ms with nothing else in the way), and put all the
 * wake-ups of one millisecond into one batch, so the last of a batch of
 * hundreds waited for all the others. At 65.5 us a tick is about the
 * kernel's own timer slack (50 us): finer would buy nothing. A power of two
 * makes the conversion a shift. The wheel's six levels then span 2^36 ticks
 * = 52 days; later expiries (ax_sleep's cap is a year) wait in its overflow
 * slot, which the wheel re-files exactly (wheel.c). */
#define AX_TICK_SHIFT 16
#define AX_TICK_NS ((uint64_t)1 << AX_TICK_SHIFT)
static inline uint64_t ns_to_tick_ceil(uint64_t ns)
{
    /* Not (ns + AX_TICK_NS - 1) >> shift: a deadline_ns near UINT64_MAX
     * ("never") would wrap to tick 0 and fire at once. */
    return (ns >> AX_TICK_SHIFT) + ((ns & (AX_TICK_NS - 1)) != 0);
}
static inline uint64_t ns_to_tick(uint64_t ns)
{
    return ns >> AX_TICK_SHIFT;
}
/* The first nanosecond of a tick; saturates (UINT64_MAX: "never"). */
static inline uint64_t tick_to_ns(uint64_t tick)
{
    return tick > (UINT64_MAX >> AX_TICK_SHIFT) ? UINT64_MAX : tick << AX_TICK_SHIFT;
}

/* error.c: set the thread's detail message, return code. */
int ax_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ax_fail_static(int code, const char *msg);
/* Whether code is one of ax's AX_E* (else: a task function's own return). */
bool error_is_ax(int code);
void ax_clear_error(void);

/* config.c */
int config_validate(const ax_config *c, ax_config *resolved);

/* retry.c: per-thread random numbers */
uint64_t ax_rand64(void);
int retry_policy_check(const ax_retry_policy *p, const char *who);

/* ax_state as the API reports it, from a job's internal state. */
static inline ax_state js_public(unsigned st)
{
    switch (st) {
    case JS_RETRYING: return AX_STATE_RETRYING;
    case JS_STARTING:
    case JS_RUNNING: return AX_STATE_RUNNING;
    case JS_SUCCEEDED: return AX_STATE_SUCCEEDED;
    case JS_FAILED: return AX_STATE_FAILED;
    case JS_TIMED_OUT: return AX_STATE_TIMED_OUT;
    case JS_CANCELLED: return AX_STATE_CANCELLED;
    default: return AX_STATE_PENDING;
    }
}

/* sched.c (s->lock held for *_locked) */
void bucket_push_locked(struct ax_sched *s, struct job *j);
/* Room in priority p's ring for one more admitted job; AX_ENOMEM if not. */
int bucket_reserve_locked(struct ax_sched *s, unsigned p);
void buckets_destroy(struct ax_sched *s);
static inline bool bucket_nonempty(const struct bucket *b)
{
    return b->rh != b->rt;
}
void bucket_push_front_locked(struct ax_sched *s, struct job *j);
void bucket_remove_locked(struct ax_sched *s, struct job *j);
struct job *sched_pick_locked(struct ax_sched *s, uint64_t now, struct job **ended);
/* Prefetch every line of the next min(n, PICK_AHEAD) jobs of the bucket
 * whose turn it is, before a batch of picks; each pick then prefetches the
 * one PICK_AHEAD further on (sched.c, prefetch_slot). perf of the drain with 2 workers (bench
 * ax_fullpath split=1): half of worker_main's samples were dispatch's
 * atomic RMW on each job's state word, misses taken one after another
 * under s->lock (a locked instruction lets no later load start). One job
 * ahead overlapped little; 8 ahead, against one (alternating pairs,
 * 500 000 tasks): full path 1 worker 0.922x, drain 1 worker 0.916x,
 * 2 workers 0.92-0.96x; 16 ahead no better than 8. */
#define PICK_AHEAD 8
void sched_prefetch_locked(const struct ax_sched *s, unsigned n);
/* config.adaptive_limit (sched.c): set up the limiter; feed it one ended
 * attempt (any thread); apply its value to s->cap (dispatch, s->lock). */
void sched_adaptive_init(struct ax_sched *s);
void sched_adaptive_take(struct ax_sched *s, struct job *j); /* j took a slot (s->lock) */
void sched_adaptive_sample(struct ax_sched *s, struct job *j, uint64_t run_ns, bool dropped,
                           uint64_t now, bool slot_freed);
/* j held a slot and never ran (sched.c): back for a drop that counted it;
 * unstart also frees its slot (the watchdog's hand-back, s->lock). */
void sched_adaptive_unran(struct ax_sched *s, struct job *j); /* its slot still held */
void sched_adaptive_unstart(struct ax_sched *s, struct job *j);
void sched_adaptive_apply_locked(struct ax_sched *s);
/* No sample for AX_ALIM_STALL_NS, or twice the limiter's baseline run time
 * if longer: with every slot held and work waiting, the limiter has no
 * evidence and must not stay where it is (sched.c). */
#define AX_ALIM_STALL_NS 1000000000ull
/* `now` a worker's cached clock, which may be older than news another
 * worker stored: not a stall (review: the difference wrapped, and the limit
 * rose by one now and then under full load). */
static inline bool sched_adaptive_quiet(struct ax_sched *s, uint64_t now)
{
    uint64_t news = atomic_load_explicit(&s->alim_news_ns, memory_order_relaxed);
    return now > news &&
           now - news >= atomic_load_explicit(&s->alim_quiet_ns, memory_order_relaxed);
}
static inline bool sched_adaptive_stall_due(struct ax_sched *s, uint64_t now)
{
    return AX_UNLIKELY(s->cfg.adaptive_limit) &&
           atomic_load_explicit(&s->hint_cap_full, memory_order_relaxed) &&
           atomic_load_explicit(&s->hint_queued, memory_order_relaxed) &&
           sched_adaptive_quiet(s, now);
}
/* A dispatch found the limiter quiet for AX_ALIM_STALL_NS: raise it by one
 * if `stalled` (every slot held, work it could start waiting); either way
 * the next look is a stall's length later. */
void sched_adaptive_nudge_locked(struct ax_sched *s, uint64_t now, bool stalled);

void sched_recompute_locked(struct ax_sched *s);
void sched_hint_locked(struct ax_sched *s);
/* What a worker's single-writer count `cur` gained since the lock holder
 * last folded it in (`folded`, s->lock). acquire: what its worker did
 * before the count (a task's end, a callback counted) is seen after. */
static inline uint64_t ends_fold(_Atomic uint64_t *cur, _Atomic uint64_t *folded)
{
    uint64_t v = atomic_load_explicit(cur, memory_order_acquire);
    uint64_t f = atomic_load_explicit(folded, memory_order_relaxed);
    if (v == f)
        return 0;
    atomic_store_explicit(folded, v, memory_order_relaxed);
    return v - f;
}
/* The true load and running: every thread's ends folded in. One load of
 * each worker's ends line, a miss only if that worker ended a task since
 * (src/SCALING.md: the lock holder reads what each ender wrote, instead
 * of every ender queueing on one shared counter). */
static inline unsigned load_locked(struct ax_sched *s)
{
    /* Read first: the exchange, a locked instruction on a line other
     * threads write, only when one of them ended a task since. */
    uint64_t u = atomic_load_explicit(&s->unloaded, memory_order_relaxed)
                     ? atomic_exchange_explicit(&s->unloaded, 0, memory_order_acq_rel)
                     : 0;
    for (unsigned i = 0; i < s->nworkers; i++)
        u += ends_fold(&s->workers[i].ends.unloaded, &s->workers[i].folded.unloaded);
    s->load -= u;
    return (unsigned)s->load; /* the true load: at most the jobs alive */
}
/* The on_done and on_release calls counted and not returned yet, every
 * thread's. Every return is read first and every begin after: a callback's
 * begin happens before its return (on whatever thread each ran), so a
 * return seen has its begin seen too, and the difference never reads low.
 * After the load (wait_idle_until): a task leaves it only once counted. */
static inline unsigned callbacks_in_progress(struct ax_sched *s)
{
    uint64_t r = atomic_load_explicit(&s->cb_returned, memory_order_acquire);
    for (unsigned i = 0; i < s->nworkers; i++)
        r += atomic_load_explicit(&s->workers[i].ends.cb_returned, memory_order_acquire);
    uint64_t b = atomic_load_explicit(&s->cb_begun, memory_order_acquire);
    for (unsigned i = 0; i < s->nworkers; i++)
        b += atomic_load_explicit(&s->workers[i].ends.cb_begun, memory_order_acquire);
    return (unsigned)(b - r);
}
/* Runs whose coroutine has not returned, orphans included (run.c). order:
 * seq_cst for the max_orphans gate (worker.c orphans_full_locked). */
static inline uint64_t live_runs_total(struct ax_sched *s, memory_order order)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < s->nworkers; i++)
        n += atomic_load_explicit(&s->workers[i].ends.live, order);
    return n;
}
static inline unsigned running_locked(struct ax_sched *s)
{
    uint64_t f = atomic_load_explicit(&s->freed, memory_order_relaxed)
                     ? atomic_exchange_explicit(&s->freed, 0, memory_order_acq_rel)
                     : 0;
    for (unsigned i = 0; i < s->nworkers; i++)
        f += ends_fold(&s->workers[i].ends.freed, &s->workers[i].folded.freed);
    s->running -= (unsigned)f;
    /* The slots just folded in are no longer in `freed`, where the hint's
     * readers look: say it here (worker.c queued_takeable). */
    if (f && atomic_load_explicit(&s->hint_cap_full, memory_order_relaxed))
        atomic_store_explicit(&s->hint_cap_full, false, memory_order_relaxed);
    return s->running;
}
void sched_wake_workers(struct ax_sched *s, unsigned n); /* no lock needed */
bool sched_work_for_sleeper(struct ax_sched *s);      /* worker.c; no lock needed */
/* A slot's attempt ended: free it now, without the lock; wake a sleeping
 * worker for queued work if `wake`. */
void sched_slot_free(struct ax_sched *s, bool wake);
/* The scheduler's timer wheel (delays, back-offs, queued deadlines). */
void jtimer_arm_locked(struct ax_sched *s, struct job *j, uint64_t when_ns);
void jtimer_del_locked(struct ax_sched *s, struct job *j);
/* A new job (its word QUEUED or DELAYED): into its bucket or the wheel. */
void sched_enqueue_new_locked(struct ax_sched *s, struct job *j, uint64_t now, uint64_t delay_ns);
/* A waiting job whose word just left `word` (QUEUED/DELAYED/RETRYING) for a
 * terminal state: out of its bucket and the wheel, counters adjusted, a
 * class's retry reservation given back (class_retry_dropped). */
void sched_leave_locked(struct ax_sched *s, struct job *j, uint64_t word);
/* Arm the back-off of a job the CAS made RETRYING (attempt = the next one;
 * timed_out: the one that ended timed out); 0 if it was cancelled
 * meanwhile. Capped at the job's deadline. */
int sched_retry_locked(struct ax_sched *s, struct job *j, unsigned attempt, bool timed_out,
                       uint64_t at_ns, uint64_t run_ns);
/* The coroutine of a RETRYING + JF_WAIT job returned: queue the retry. */
void sched_orphan_returned_locked(struct ax_sched *s, struct job *j, uint64_t gen, uint64_t now);
/* Expire the scheduler's wheel: due delays and back-offs re-enter their
 * bucket (returns how many); jobs whose deadline passed while waiting are
 * ended TIMED_OUT and linked on *ended for the caller's terminal path, with
 * the attempt to report in j->handoff. */
unsigned sched_expire_locked(struct ax_sched *s, uint64_t now, struct job **ended);

/* worker.c */
void *worker_main(void *arg);
void worker_post_wake(struct worker *w, const struct wake_msg *m);
void worker_kick(struct worker *w);
int worker_init(struct ax_sched *s, struct worker *w, unsigned index);
void worker_destroy(struct worker *w);
/* The task running on this thread, or NULL. */
/* The two thread-locals of every task call and switch use the initial-exec
 * model: in libax.so a read is then two moves instead of a call through a
 * TLS descriptor or __tls_get_addr (CMakeLists.txt: ax_binding). That marks
 * libax.so (and libax_http.so, which reads ax_current_run) STATIC_TLS: the
 * library's whole TLS segment, ~350 bytes with the error detail's buffer,
 * goes in the static TLS block, where glibc keeps spare room for modules
 * loaded by dlopen (512 bytes by default; a dlopen of libax_http.so works
 * with glibc.rtld.optional_static_tls=200: review). In an executable
 * linked to libax.a the linker makes them local-exec anyway. */
#define AX_TLS_HOT __attribute__((tls_model("initial-exec")))
extern _Thread_local struct ax_task *ax_current_run AX_TLS_HOT;
/* The worker this thread is, or NULL. */
extern _Thread_local struct worker *ax_current_worker AX_TLS_HOT;

/* The worker's side of its wheel's lock; only its own thread calls it. */
static inline void wheel_lock(struct worker *w)
{
#ifndef NDEBUG
    if (ax_current_worker != w && !w->joined)
        abort(); /* another thread than its worker's: not the lock's protocol */
#endif
    if (AX_LIKELY(ax_wheel_asym)) {
        for (;;) {
            atomic_store_explicit(&w->wheel_own, 1, memory_order_relaxed);
            /* For the compiler; for the CPU the watchdog's membarrier is the
             * barrier between this store and the load below. */
            atomic_signal_fence(memory_order_seq_cst);
            if (AX_LIKELY(!atomic_load_explicit(&w->wheel_lk, memory_order_acquire)))
                return;
            atomic_store_explicit(&w->wheel_own, 0, memory_order_release);
            while (atomic_load_explicit(&w->wheel_lk, memory_order_acquire))
                ax_cpu_relax();
        }
    }
    while (atomic_exchange_explicit(&w->wheel_lk, 1, memory_order_acquire))
        while (atomic_load_explicit(&w->wheel_lk, memory_order_relaxed))
            ax_cpu_relax();
}
static inline void wheel_unlock(struct worker *w)
{
    if (AX_LIKELY(ax_wheel_asym))
        atomic_store_explicit(&w->wheel_own, 0, memory_order_release);
    else
        atomic_store_explicit(&w->wheel_lk, 0, memory_order_release);
}
/* The watchdog's side (worker.c): false when the worker is inside, or
 * another foreign holder is. */
bool wheel_trylock_foreign(struct worker *w);
void wheel_unlock_foreign(struct worker *w);
/* Decide ax_wheel_asym, once, before the first worker starts. */
void wheel_lock_setup(void);
/* The scheduler whose callback pool this thread serves, or NULL. */
extern _Thread_local struct ax_sched *ax_current_cb_sched;

/* This thread's worker if it is one of s's, else NULL: whose ends a
 * count made on this thread goes to (struct worker: ends). */
static inline struct worker *own_worker(struct ax_sched *s)
{
    struct worker *w = ax_current_worker;
    return w && w->s == s ? w : NULL;
}
/* Add to a count only this thread writes: a load and a release store, no
 * locked instruction. */
static inline void ends_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_release);
}
/* A task left the load without the lock: the next lock holder folds it in
 * (load_locked). release: ax_shutdown, which folds the load and then
 * counts the callbacks in progress, sees a callback counted before this.
 * me: own_worker(s), read once by a caller that counts several things. */
static inline void sched_unload(struct ax_sched *s, struct worker *me)
{
    if (me)
        ends_add(&me->ends.unloaded, 1);
    else
        atomic_fetch_add_explicit(&s->unloaded, 1, memory_order_release);
}
/* An on_done about to run, or an on_release to come, counts as a callback
 * in progress until cb_return, which may run on another thread. */
static inline void cb_begin(struct ax_sched *s, struct worker *me)
{
    if (me)
        ends_add(&me->ends.cb_begun, 1);
    else
        atomic_fetch_add_explicit(&s->cb_begun, 1, memory_order_release);
}
static inline void cb_return(struct ax_sched *s, struct worker *me)
{
    if (me)
        ends_add(&me->ends.cb_returned, 1);
    else
        atomic_fetch_add_explicit(&s->cb_returned, 1, memory_order_release);
}
/* Set on the event thread of a scheduler (obs/events.c): its callback. */
extern _Thread_local const struct ax_sched *ax_current_ev_sched;
/* The scheduler whose metrics appenders this thread is running (obs/metrics.c). */
extern _Thread_local const struct ax_sched *ax_current_appender_sched;
/* The on_done calls in progress on this thread, innermost first: an on_done
 * of one scheduler may end a task of another inline (ax_cancel), and
 * ax_free / ax_shutdown must be refused for every scheduler on the chain,
 * not only the innermost (finish.c, lifecycle.c: own_thread). */
struct on_done_frame {
    struct ax_sched *s;
    struct on_done_frame *up;
};
extern _Thread_local struct on_done_frame *ax_on_done_frames;

/* run.c (and, inline below, the few lines of the yield path) */
/* Park the current run (its t->rs already set); returns its wake_rc. */
int run_park(struct ax_task *t);
/* The park_gen after g: never 0, which a wake-up reads as "any park"
 * (worker.c), so a join's wake-up cannot match a later park after the
 * 32-bit count wraps (review of 16d186c). */
static inline uint32_t park_gen_next(uint32_t g)
{
    return g + 1 ? g + 1 : 1;
}
/* Resume a parked run with rc (worker thread only). No-op if not parked. */
void run_wake(struct ax_task *t, int rc);

/* Hot, inline: the yield hand-off is these and one register switch
 * (callgrind: 142 -> ~90 instructions per hand-off once inlined). */

/* The worker's ready queue (worker thread only). */
static inline void ready_push(struct worker *w, struct ax_task *t)
{
    t->next = NULL;
    if (w->ready_tail)
        w->ready_tail->next = t;
    else
        w->ready_head = t;
    w->ready_tail = t;
    w->nready++;
}
static inline struct ax_task *ready_pop(struct worker *w)
{
    struct ax_task *t = w->ready_head;
    if (t) {
        w->ready_head = t->next;
        if (!w->ready_head)
            w->ready_tail = NULL;
        w->nready--;
    }
    return t;
}

/* What is on the worker's CPU, for the watchdog: a seqlock, odd while
 * written. Without fences, which gcc's TSan refuses (-Wtsan, an error
 * under -Werror: review): each field is a release store, so a reader whose
 * acquire load sees one also sees the odd sequence before it, and its
 * second read of the sequence cannot match the first (watchdog.c
 * read_published). Plain moves on x86, as before. */
static inline void worker_publish(struct worker *w, struct ax_task *t)
{
    uint64_t seq = atomic_load_explicit(&w->pub_seq, memory_order_relaxed);
    atomic_store_explicit(&w->pub_seq, seq + 1, memory_order_relaxed);
    atomic_store_explicit(&w->pub_run, t, memory_order_release);
    if (t) {
        atomic_store_explicit(&w->pub_job, t->job, memory_order_release);
        atomic_store_explicit(&w->pub_expect, t->expect_sw, memory_order_release);
        atomic_store_explicit(&w->pub_deadline, t->deadline_ns, memory_order_release);
    }
    atomic_store_explicit(&w->pub_seq, seq + 2, memory_order_release);
}

int run_detached_slow(const struct ax_task *t);
int run_detached_block(struct ax_task *t, const char *who);
/* AX_ETIMEDOUT / AX_ECANCELED if the run's attempt has ended without it. */
static inline int run_detached_rc(const struct ax_task *t)
{
    uint64_t sw = atomic_load_explicit(&t->job->sw, memory_order_acquire);
    if (AX_LIKELY((sw & ~(JH_ALL | JF_WAIT | JF_RETRY_ARMED)) == t->expect_sw))
        return 0;
    return run_detached_slow(t);
}

/* run_detached_rc, the message begun by `who` (the public call). */
int run_detached_named(const struct ax_task *t, const char *who);

/* At the entry of a blocking call (sleep, yield, fd and I/O waits, HTTP,
 * join): 0 while the attempt is the run's own; else its AX_ETIMEDOUT /
 * AX_ECANCELED, after a pause that grows with each such call, so a task
 * that loops on a blocking call without checking its code waits instead of
 * spinning on its worker (run.c: run_detached_block). `who`, the public
 * call, begins the message. */
static inline int run_blocking_entry(struct ax_task *t, const char *who)
{
    int rc = run_detached_rc(t);
    return AX_UNLIKELY(rc) ? run_detached_block(t, who) : 0;
}

/* ax_yield's fast path: from the running task straight to the next ready
 * one, without a round trip through the worker loop (one switch instead of
 * two plus a loop iteration). Allowed a budget of times per loop iteration
 * so that timers, the inbox and dispatch are still looked at regularly.
 * False if it must go through the worker loop. */
void run_bt_serve(struct ax_task *t, bool in_park);
static inline bool run_switch_direct(struct ax_task *t)
{
    struct worker *w = t->w;
    if (w->direct_budget == 0 || !w->ready_head)
        return false;
    w->direct_budget--;
    t->switched = 1;
    struct ax_task *next = ready_pop(w);
    ready_push(w, t);
    w->current = next;
    ax_current_run = next;
    worker_publish(w, next);
    /* Left by ret, predicted right when the resumed task yielded here too
     * (two tasks yielding to each other: coro/switch_x86_64.S, 22.7 ->
     * 11.3 ns a hand-off); a task parked elsewhere (a sleep, a wait, the
     * loop's turn) costs a mispredicted ret, as the jmp's switch would. */
    ax_coro_switch_peer(&t->coro, &next->coro);
    /* A task parked here, in the ready queue, may be resumed by its
     * lingering report from the worker's loop, as one parked in run_park:
     * it must give its frames and switch back, not run on as if handed
     * the worker (review: it ran its own code there, then was resumed
     * again from the ready queue: "a finished coroutine was resumed"). */
    if (AX_UNLIKELY(t->bt_req))
        run_bt_serve(t, false);
    return true;
}
/* Run the cleanups and leave the coroutine for good (task stack only). */
_Noreturn void run_exit(struct ax_task *t);
/* Build the coroutine for a job dispatch made STARTING (NULL: it ended). */
struct ax_task *run_start(struct worker *w, struct job *j);
/* The run's function returned, panicked or never began: its outcome, then
 * the run recycled (run.c). */
void run_complete(struct worker *w, struct ax_task *t);
/* Switch to a ready run and handle what it did when it comes back. In line
 * in the worker's loops, not a function: the switch leaves the task's call
 * site on the return-stack predictor (coro/switch_x86_64.S), so the first
 * ret after it mispredicted on every task; in line, the loops go on to the
 * next task without one (alternating pairs: full path, 1 worker, 0.962 and
 * 0.972; ax_switch 0.956). */
static inline __attribute__((always_inline)) void run_resume(struct worker *w, struct ax_task *t)
{
    w->current = t;
    ax_current_run = t;
    w->resumes++;
    worker_publish(w, t);
    ax_coro_switch(&w->main, &t->coro);
    /* Not necessarily t: a yield may have switched straight to another run
     * (run_switch_direct), and that one came back. */
    t = w->current;
    ax_current_run = NULL;
    w->current = NULL;
    worker_publish(w, NULL);
    w->now_ns = now_ns();
    w->clock_stale = false; /* fresh: no callback ran since */
    if (t->rs == RS_EXITED)
        run_complete(w, t);
}
/* Handle the run timers that are due (worker's own and the watchdog's). */
void run_expire_timers(struct worker *w);
void run_pool_destroy(struct worker *w);
void run_warm_drop(struct worker *w, unsigned keep);
/* The per-worker wheel, under its lock (wheel_lk). */
static inline void worker_timer_add(struct worker *w, struct ax_wheel_node *n, uint64_t at_ns)
{
    wheel_lock(w);
    ax_wheel_add(&w->wheel, n, ns_to_tick_ceil(at_ns));
    wheel_unlock(w);
}
void worker_timer_del(struct worker *w, struct ax_wheel_node *n);

/* finish.c: the end of an attempt and the terminal path. */
enum { FIN_NO_SLOT = 0, FIN_SLOT = 1, FIN_SLOT_FREED = 2 };
/* OR'd into cb_pool_finish's slot. FIN_UNBEGUN: the attempt's function was
 * never entered. FIN_HOLDER: the attempt was the one holding its worker (it
 * ran on past its deadline without yielding), not one held behind it. */
enum { FIN_UNBEGUN = 8, FIN_HOLDER = 16 };
/* A retry's slot is about to be freed before its back-off is armed: it
 * keeps its room in its bucket's bound meanwhile (submit.c admit_locked).
 * Whoever frees the slot adds (attempt_end, or the watchdog for a held
 * worker's); retry_schedule drops it in the lock section that arms the
 * back-off or ends the task. */
static inline void retry_unarmed_add(struct ax_sched *s, const struct job *j)
{
    atomic_fetch_add_explicit(&s->retry_unarmed[j->prio], 1, memory_order_relaxed);
}
/* The state the CAS that ends an attempt must set: RETRYING or `state`. */
unsigned finish_decide(struct ax_sched *s, const struct job *j, unsigned attempt, unsigned state,
                       int code, uint64_t now, bool *denied);
/* After winning that CAS: slot, on_timeout, then the back-off or the
 * terminal path. `state`: how the attempt ended; `to`: what the CAS set;
 * run_ns: how long it ran. Fields of the job are written only while they
 * are the winner's alone: j->run_ns here when `to` is terminal, under
 * s->lock with the back-off when it is RETRYING (a cancel may own the job
 * the moment the CAS is done). */
void finish_attempt(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                    unsigned state, unsigned to, int code, const char *err, int slot,
                    uint64_t run_ns, uint64_t give);
/* Decide, CAS STARTING/RUNNING -> outcome, and finish if won. */
bool finish_running(struct ax_sched *s, struct worker *w, struct job *j, uint64_t gen,
                    unsigned attempt, unsigned state, int code, const char *err,
                    uint64_t run_ns, uint64_t give);
/* finish_running, but a lost CAS leaves `give` held (the caller drops it). */
bool finish_running_keep(struct ax_sched *s, struct worker *w, struct job *j, uint64_t gen,
                         unsigned attempt, unsigned state, int code, const char *err,
                         uint64_t run_ns, uint64_t give);
/* The one terminal path: exactly once per job. It ends by dropping JH_END
 * and `give`. Every finish_* function consumes `give` (holds the caller
 * drops when it is done: JH_RUN for a worker done with its run), won or
 * lost, in the same atomic step as JH_END when it can; finish_running_keep
 * alone leaves it to the caller when it loses. */
void finish_terminal(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                     unsigned state, int code, const char *err, uint64_t give);
/* The error text of a job its deadline ended outside an attempt (end_why
 * END_DEADLINE, END_DEADLINE_RETRY or END_DEADLINE_RETRY_TIMED), into buf. */
const char *deadline_text(const struct job *j, char *buf, size_t len);
void result_fill(const struct job *j, unsigned attempt, unsigned state, int code, const char *err,
                 ax_result *r);

/* submit.c, trace.c */
int submit_common(struct ax_sched *s, const ax_spec *spec, uint64_t *id_out, struct ax_task *parent,
                  struct job **job_out);
/* A submission its caller refused before admission (ax_spawn outside its
 * parent's coroutine or out of memory for its children; ax_submit_batch
 * without specs), with ax_fail's detail set: counted in ax_stats and
 * emitted as REJECTED like admission's own refusals. Returns code. */
int submit_refused(struct ax_sched *s, const ax_spec *spec, int code);
void trace_format(const struct job *j, char out[AX_TRACE_ID_MAX]);
/* The generated trace id of task `id` (what trace_format gives a job
 * submitted without one). */
void trace_format_id(uint64_t id, char out[AX_TRACE_ID_MAX]);

/* watchdog.c */
int watchdog_start(struct ax_sched *s);
/* until: how long its exit may wait for lingering reports being named. */
void watchdog_stop(struct ax_sched *s, uint64_t until);
void watchdog_kick(struct ax_sched *s);

/* callback.c */
int cb_pool_start(struct ax_sched *s);
void cb_pool_stop(struct ax_sched *s);
/* Stop the pool, waiting for its threads until `until` (CLOCK_MONOTONIC
 * ns); false, with nothing freed, if a callback still runs then. */
bool cb_pool_stop_until(struct ax_sched *s, uint64_t until);
/* Queue on_timeout; dropped (and counted) when callback_queue are waiting. */
void cb_pool_post(struct ax_sched *s, ax_callback fn, void *arg, const ax_result *r);
/* The same for a job's on_timeout when it has an on_release: the job is
 * held (JH_CB) until this and its other queued on_timeouts ran or were
 * dropped, and the last of them may run on_release and free it. */
void cb_pool_post_held(struct ax_sched *s, struct job *j, ax_callback fn, void *arg,
                       const ax_result *r);
/* Finish an attempt the watchdog ended (finish_attempt on a pool thread):
 * never dropped, linked through j->next. */
void cb_pool_finish(struct ax_sched *s, struct job *j, unsigned attempt, unsigned state,
                    unsigned to, int slot);
/* A freeable job with an on_release whose last hold the watchdog dropped:
 * the finisher runs its on_release and frees it (never dropped). */
void cb_pool_release(struct ax_sched *s, struct job *j);
uint64_t cb_pool_overruns(struct ax_sched *s);
uint64_t cb_pool_dropped(struct ax_sched *s);
/* watchdog: count overruns, add a thread if all are stuck; true while any
 * callback runs (the watchdog then keeps polling). */
bool cb_pool_check(struct ax_sched *s, uint64_t now);
bool cb_pool_running(struct ax_sched *s); /* a callback is running now */

/* obs/metrics.c (w: the calling worker, or NULL for any other thread) */
struct ax_metrics_snapshot;
int metrics_init(struct ax_sched *s);
void metrics_destroy(struct ax_sched *s);
void metrics_record_wait(struct ax_sched *s, struct worker *w, unsigned prio, uint64_t ns);
void metrics_record_run(struct ax_sched *s, struct worker *w, unsigned prio, uint64_t ns);
/* The Prometheus text of a fresh snapshot, malloc'd and NUL-terminated, its
 * length in *len; NULL when out of memory. Any thread; changes no counter. */
char *metrics_render(struct ax_sched *s, size_t *len);
/* obs/metrics_serve.c: stop the endpoint's thread and close its sockets
 * (ax_shutdown, ax_free); nothing when it does not run. */
void metrics_serve_stop(struct ax_sched *s);

/* lifecycle.c: fork(). A scheduler's threads are not in a child of fork():
 * every entry point that would use them refuses a scheduler made before
 * the fork (AX_ESTATE), and ax_free leaks it, saying so (trial: ax_submit
 * took work nothing would run, ax_free crashed). ax_fork_gen counts the
 * forks this process's line of ancestors made since ax first ran. */
extern _Atomic unsigned ax_fork_gen;
static inline bool sched_forked(const struct ax_sched *s)
{
    return AX_UNLIKELY(s->fork_gen != atomic_load_explicit(&ax_fork_gen, memory_order_relaxed));
}
/* AX_ESTATE: "<who>: the scheduler was created before fork(): ..." */
int sched_forked_fail(const char *who);

/* obs/crash.c */
void crash_init(void);
void *crash_altstack_enter(void);
/* On a worker thread as it starts: SIGSEGV and SIGBUS unblocked (a mask
 * inherited from ax_new's caller must not hide its faults), the mask kept
 * in w->sigmask. */
void crash_thread_signals(struct worker *w);
void crash_altstack_leave(void *mem);
void crash_report(struct worker *w, struct ax_task *t);
/* obs/symbols.c: append "\n#i function+off (file.c:line)" lines for the
 * frames of a backtrace that belong to the task. Not in a signal handler.
 * bt_symbolised: built with libdw (file:line and static functions). */
struct bt_cut {
    const void *through; /* the capture point: drop frames up to its own */
    int then;            /* and this many more (a signal's return trampoline) */
    int fallback;        /* frames to drop when `through` cannot be named */
    const void *task_fn; /* the last frame shown: the task's function */
    uintptr_t signal_pc; /* the pc a signal interrupted (bt_signal_pc), 0 if none:
                          * the frame that holds it is named by it, every other
                          * frame by the call before its return address */
};
/* The pc the signal interrupted, from a handler's ucontext; 0 where this
 * architecture's is not known. Async-signal-safe. */
uintptr_t bt_signal_pc(const void *uctx);
/* Once, at the first ax_new (linger_init): symbols.c's fork handler. */
void symbols_init(void);
/* The stack pointer a signal interrupted; 0 where not known (then
 * AX_SIGNAL_SP_KNOWN is 0, and the hog's signal handler is not asked to
 * run on the alternate stack: it tells the task's stack by its own frame). */
uintptr_t bt_signal_sp(const void *uctx);
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
#define AX_SIGNAL_SP_KNOWN 1
#else
#define AX_SIGNAL_SP_KNOWN 0
#endif
void bt_format(char *out, size_t cap, void *const *bt, int n, const struct bt_cut *cut);
/* The same, unless another thread names for max_ms more (false, out
 * untouched): a worker does not wait long behind a naming thread
 * (obs/linger.c linger_check). */
bool bt_format_within(char *out, size_t cap, void *const *bt, int n, const struct bt_cut *cut,
                      unsigned max_ms);
bool bt_symbolised(void);
/* Read what naming frames in the modules of a and b reads the first time
 * (their symbol and line tables: tens of ms, more for a large binary), so
 * that a later naming takes microseconds. Blocks: called on a thread of
 * its own (obs/linger.c). */
void bt_warm(const void *a, const void *b);
/* Appends " (frames not named: why)" and the raw addresses (for
 * addr2line): the report of a thread that will not wait for the tables. */
void bt_format_raw(char *out, size_t cap, void *const *bt, int n, const struct bt_cut *cut,
                   const char *why);

/* obs/dump.c */
/* ax_free: forget s for signal dumps, and wait until `until` (CLOCK_MONOTONIC
 * ns) for a dump of s in progress (its file may block); false if one still
 * is then. */
bool dump_unregister(struct ax_sched *s, uint64_t until);

/* obs/linger.c */
struct linger_entry {
    struct ax_task *run;
    uint32_t life_gen;
    /* its detached_calls when first found woken past due (linger_check),
     * LINGER_UNSEEN before: reported woken only if it has called on since */
    uint16_t woken_calls;
    /* Its report is due, its backtrace taken, and it waits for the symbol
     * tables (linger_check): made at the task's return at the latest
     * (linger_orphan_returned). With where it was then. */
    uint8_t deferred, deferred_rs, deferred_woken, deferred_calls;
    uint64_t since_ns; /* its deadline */
};
#define LINGER_UNSEEN 0xffffu
void linger_track(struct worker *w, struct ax_task *t);
void linger_check(struct worker *w); /* worker loop; cheap when nothing tracked */
/* Wait up to max_ms (1 ms steps) while the symbol tables' read-ahead is
 * under way: the ms waited, or max_ms + 1 if it still is. A worker never
 * reads the tables itself meanwhile (crash.c crash_report). */
unsigned linger_warm_wait(unsigned max_ms);
/* run_complete: t, a hog, returned grace_ms or more past its deadline;
 * report it unless it was while it ran on (a watchdog kept off its CPU
 * missed it: test_linger_returned). */
void linger_returned(struct worker *w, struct ax_task *t);
/* run_complete: t, tracked past its deadline, returns: a report it was
 * due and waited for the symbol tables for is made now. */
void linger_orphan_returned(struct worker *w, struct ax_task *t);
/* watchdog: the run on a held worker's CPU (one seqlock read): report it
 * once if its attempt ended grace_ms ago and it is still there. */
void linger_hog_check(struct ax_sched *s, struct worker *w, uint64_t now, struct ax_task *t,
                      struct job *j, uint64_t expect, uint64_t deadline, uint64_t seq);
/* watchdog: take w's reports in progress (w->lg_pend, w->lg_naming) a step
 * further, never waiting: 2 while a backtrace is being taken (poll again in
 * POLL_MS), 1 while some are only being named (a slower poll will do), 0.
 * linger_pending_flush: the watchdog's exit, every one reported, the
 * namings waited for until `until` (CLOCK_MONOTONIC ns) at most. */
struct linger_pending;
int linger_pending_step(struct ax_sched *s, struct worker *w, uint64_t now);
void linger_pending_flush(struct ax_sched *s, uint64_t until);
int linger_init(void);
/* On a worker thread as it starts (after crash_thread_signals): whether its
 * mask blocks the backtrace signal. linger_thread_gone: as it leaves; no
 * signal is sent to it after. */
void linger_thread_signals(struct worker *w);
void linger_thread_gone(struct worker *w);

/* obs/report.c: a line for stderr from a thread that must not block on it
 * (the watchdog): queued, written in order by the "ax-report" thread, dropped
 * and counted when 64 wait. report_line returns the line's ticket (0:
 * dropped), which the caller keeps in s->report_ticket (report_note);
 * report_drain waits up to 100 ms for the lines up to a ticket to be
 * written (ax_free; UINT64_MAX: all), and says whether they were. report_init: ax_new, outside locks. */
void report_init(void);
uint64_t report_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool report_drain(uint64_t ticket); /* true: written */
static inline void report_note(struct ax_sched *s, uint64_t ticket)
{
    uint64_t t = atomic_load_explicit(&s->report_ticket, memory_order_relaxed);
    while (ticket > t && !atomic_compare_exchange_weak_explicit(&s->report_ticket, &t, ticket,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed))
        ;
}

/* obs/events.c */
int ev_init(struct ax_sched *s);
void ev_stop(struct ax_sched *s);
/* ev_stop within `until` (CLOCK_MONOTONIC ns, 0 none): false, and nothing
 * freed, if the event thread is still in a sink's write or callback then
 * (a pipe nobody reads); its state is then leaked with the scheduler. */
bool ev_stop_until(struct ax_sched *s, uint64_t until);
/* ax_free leaks the scheduler: the event thread calls no sink again (it
 * goes on draining and dropping, once out of the call it is in, if it ever
 * is; it is not stopped). */
void ev_abandon(struct ax_sched *s);
/* ax_events_flush, giving up at `until`: false if it did. */
bool ev_flush_until(struct ax_sched *s, uint64_t until);
static inline bool ev_on(struct ax_sched *s, unsigned kind)
{
    return atomic_load_explicit(&s->ev_mask, memory_order_relaxed) & (1u << kind);
}
/* At submit: whether ax_events_filter's sample_every leaves the task's
 * SUBMITTED / STARTED / SUCCEEDED events out (struct job: ev_skip). */
bool ev_sample_skip(struct ax_sched *s);
/* w: the calling worker (its own ring) or NULL (the shared ring). */
void ev_emit(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind, int code,
             const char *msg);
/* An event about one attempt whose numbers the job no longer holds (the
 * attempt was already bumped for a retry, or the run outlived it). */
struct ev_attempt {
    unsigned attempt;
    uint64_t wait_ns, run_ns;
};
void ev_emit_attempt(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind,
                     int code, const char *msg, const struct ev_attempt *a);
void ev_emit_refusal(struct ax_sched *s, const ax_spec *sp, unsigned kind, int code,
                     const char *msg);
/* STARTED around an attempt's begin: room (lossless) and its time before
 * js_begin, the event after it succeeded (events.c). */
uint64_t ev_started_room(struct ax_sched *s, struct worker *w);
void ev_emit_started(struct ax_sched *s, struct worker *w, const struct job *j, uint64_t at);
/* An event with the time it happened (`at`, ev_clock's), emitted later. */
void ev_emit_attempt_at(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind,
                        int code, const char *msg, const struct ev_attempt *a, uint64_t at);
uint64_t ev_clock(void); /* an event's clock: CLOCK_REALTIME ns */
/* Lossless mode: wait (before taking s->lock) until the shared ring has room
 * for what a lock section will emit; inside it ev_under_lock forbids waiting. */
void ev_reserve(struct ax_sched *s);
extern _Thread_local bool ev_under_lock;
/* A shutdown began: lossless producers wait for room until `until`
 * (CLOCK_MONOTONIC ns) at the latest, then drop and count (lifecycle.c). */
void ev_bound_waits(struct ax_sched *s, uint64_t until);
#define EV(s, w, j, kind, code, msg)                                                           \
    do {                                                                                       \
        if (AX_UNLIKELY(ev_on((s), (kind))))                                                   \
            ev_emit((s), (w), (j), (kind), (code), (msg));                                     \
    } while (0)

/* join.c */
void join_release_children(struct worker *w, struct ax_task *t);
void join_ended_locked(struct job *j, unsigned attempt);
void join_unpark_locked(struct ax_task *t, struct job *c);

/* task classes (class.c) */
#include "class.h"

#endif
