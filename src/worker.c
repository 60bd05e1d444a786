/* worker.c - layer 3: the worker threads (seed §3.1, §3.2; DESIGN.md §7).
 *
 * Each worker is one thread with its own ready queue, timing wheel, epoll
 * reactor and stack pool; it shares only the scheduler (s->lock: buckets,
 * slots, the scheduler's wheel) and its inbox (wake-ups from other
 * threads). One loop iteration:
 *
 *   1. drain the inbox (cancellations, joins completed on other threads)
 *   2. run timers that are due: deadlines, sleeps, waits (run.c)
 *   3. resume every run that was ready when the iteration began, once each
 *      (a run that yields goes to the back: the next iteration)
 *   4. one lock section (dispatch): free and re-queue what this worker
 *      released, expire the scheduler's wheel, take up to DISPATCH_BATCH jobs
 *      by quota rounds onto the to-start list; then start and resume them
 *   5. nothing ready: spin briefly, then sleep in epoll_wait until the next
 *      timer, fd event or kick. No periodic tick: an idle worker uses no CPU.
 *
 * A task that never yields holds its worker; the other workers keep
 * dispatching (they take jobs themselves), and the watchdog ends that
 * worker's overdue attempts and hands its to-start jobs to the others.
 *
 * Hot: worker_main's loop and dispatch. One lock section per batch.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <assert.h>
#include <errno.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define DIRECT_BUDGET 64
#define STACK_WARM_KEEP 64     /* released stacks kept resident per worker */
/* ... and at most this much of stack size in all: with 8 MiB stacks, 64 of
 * them, warm runs at the depth their tasks reached, kept 387 MiB resident
 * on an idle worker (review). */
#define STACK_WARM_BYTES (4u << 20)
/* With a timer always near: at most this much stack size trimmed per
 * TRIM_FORCE_EVERY_NS, and at least one stack (then less often). A step's
 * madvise costs with the stacks' resident part: 8 stacks of 32 MiB delayed
 * a 1 ms ticker by 11-21 ms (review); 512 KiB is 8 of 64 KiB, ~30 us. */
#define TRIM_FORCE_BYTES (512u << 10)
#define TRIM_FORCE_EVERY_NS 10000000ull
#define TRIM_STEP 32           /* stacks trimmed between two looks at the clock */
#define TRIM_BUDGET_NS 1000000 /* at most this much trimming per idle moment */
#define TRIM_MIN_GAP_NS 2000000 /* and none with a timer due sooner than this */
#define SPIN_NS (AX_IDLE_POLL_DEFAULT_US * 1000ull) /* polling before epoll_wait */

_Thread_local struct worker *ax_current_worker AX_TLS_HOT;

/* ---- the wheel's lock -------------------------------------------------------
 *
 * Each worker's wheel (its runs' deadlines, sleeps, waits) and its
 * to-start list are the worker's, but for the watchdog, which takes them
 * over only while the worker is held (watchdog.c: hand_back, expire_held):
 * a lock the worker takes three times a task and the watchdog almost
 * never. As an exchange on both sides, those three locked instructions
 * were ~22 ns of a ~170 ns drain (SCALING.md "The wheel's lock"). So the
 * watchdog pays instead, where the kernel has membarrier's expedited
 * private command (Linux 4.14):
 *   worker:   own = 1; [compiler barrier]; if lk, back off (own = 0, wait
 *             until !lk, again); ... own = 0
 *   watchdog: exchange lk = 1 (fail if set); membarrier(); if own, undo
 *             (lk = 0) and fail; ... lk = 0
 * membarrier makes every running thread of the process pass a full memory
 * barrier (an interrupt) before it returns, and one not running passed one
 * when it was switched out. If the worker's load of lk came before that
 * point, its store to own is visible after it, and the watchdog sees own
 * set (or the worker already out, its stores visible); if after, the
 * worker sees lk set and backs off. The classic Dekker pair with the
 * barrier on one side only (as userspace RCU's membarrier flavour).
 * Without membarrier (an old kernel, a seccomp filter refusing it, a
 * forked child whose registration fails) and under ThreadSanitizer (which
 * cannot see that barrier), both sides exchange lk, as before. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WHEEL_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(WHEEL_TSAN)
#define WHEEL_TSAN 1
#endif

bool ax_wheel_asym;
static pthread_once_t wheel_once = PTHREAD_ONCE_INIT;

static int membarrier_call(int cmd)
{
#if defined(__NR_membarrier)
    return (int)syscall(__NR_membarrier, cmd, 0, 0);
#else
    (void)cmd;
    errno = ENOSYS;
    return -1;
#endif
}

#if !defined(WHEEL_TSAN)
static bool membarrier_register(void)
{
    int have = membarrier_call(MEMBARRIER_CMD_QUERY);
    return have >= 0 && (have & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
           membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

/* A child of fork: registered again (a kernel may not carry the
 * registration over; 6.x does, and registering twice is harmless), or
 * both sides exchange. Only the forking thread lives on in the child, so
 * no worker is inside a wheel. */
static void wheel_atfork_child(void)
{
    if (ax_wheel_asym)
        ax_wheel_asym = membarrier_register();
}
#endif

static void wheel_decide(void)
{
#if defined(WHEEL_TSAN)
    ax_wheel_asym = false;
#else
    ax_wheel_asym = membarrier_register();
    pthread_atfork(NULL, NULL, wheel_atfork_child);
#endif
}

void wheel_lock_setup(void)
{
    pthread_once(&wheel_once, wheel_decide);
}

/* The coarse clock's tick (internal.h coarse_ns), or 0: not used. */
uint64_t ax_coarse_res_ns;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static void clock_decide(void)
{
    struct timespec r;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &r) == 0 && r.tv_sec == 0 &&
        r.tv_nsec <= 50000000L && r.tv_nsec > 0)
        ax_coarse_res_ns = (uint64_t)r.tv_nsec;
}

bool wheel_trylock_foreign(struct worker *w)
{
    if (atomic_exchange_explicit(&w->wheel_lk, 1, memory_order_acquire))
        return false;
    if (!ax_wheel_asym)
        return true;
    if (AX_UNLIKELY(membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)) {
        /* Registered, yet refused (ENOMEM, or a seccomp filter installed
         * since): the worker's side takes no exchange, so there is no safe
         * way in. Said once; the next poll tries again. */
        static atomic_flag said = ATOMIC_FLAG_INIT;
        if (!atomic_flag_test_and_set(&said))
            fprintf(stderr, "ax: membarrier failed (%s): the watchdog cannot take over a held "
                            "worker's timers until it succeeds\n",
                    strerror(errno));
        atomic_store_explicit(&w->wheel_lk, 0, memory_order_release);
        return false;
    }
    if (atomic_load_explicit(&w->wheel_own, memory_order_acquire)) {
        atomic_store_explicit(&w->wheel_lk, 0, memory_order_release);
        return false; /* the worker is inside: later */
    }
    return true;
}

void wheel_unlock_foreign(struct worker *w)
{
    atomic_store_explicit(&w->wheel_lk, 0, memory_order_release);
}

/* ---- inbox --------------------------------------------------------------- */

static void drain_inbox(struct worker *w)
{
    if (atomic_load_explicit(&w->inbox_hint, memory_order_acquire) == 0)
        return;
    pthread_mutex_lock(&w->inbox_lock);
    unsigned n = w->ninbox;
    if (n == 0) {
        pthread_mutex_unlock(&w->inbox_lock);
        return;
    }
    /* Swap buffers so posting threads never wait for our processing. */
    struct wake_msg *msgs = w->inbox;
    unsigned cap = w->inbox_cap;
    w->inbox = w->inbox_spare;
    w->inbox_cap = w->inbox_spare_cap;
    w->ninbox = 0;
    atomic_store_explicit(&w->inbox_hint, 0, memory_order_relaxed);
    pthread_mutex_unlock(&w->inbox_lock);
    for (unsigned i = 0; i < n; i++) {
        struct wake_msg *m = &msgs[i];
        struct ax_task *t = m->run;
        if (t->life_gen != m->life_gen || t->job == NULL)
            continue; /* the run ended and its struct was reused */
        if (m->park_gen != 0 && t->park_gen != m->park_gen)
            continue; /* a later park: this wake-up was for an earlier one */
        run_wake(t, m->rc);
    }
    pthread_mutex_lock(&w->inbox_lock);
    w->inbox_spare = msgs;
    w->inbox_spare_cap = cap;
    pthread_mutex_unlock(&w->inbox_lock);
}

void worker_post_wake(struct worker *w, const struct wake_msg *m)
{
    pthread_mutex_lock(&w->inbox_lock);
    if (w->ninbox == w->inbox_cap) {
        unsigned cap = w->inbox_cap ? w->inbox_cap * 2 : 64;
        struct wake_msg *n = realloc(w->inbox, cap * sizeof *n);
        if (!n) {
            /* Cannot queue the wake-up: the run stays parked until its own
             * deadline, which still ends it. Say so once rather than lose it
             * silently. */
            pthread_mutex_unlock(&w->inbox_lock);
            fprintf(stderr, "ax: out of memory posting a wake-up; task waits for its deadline\n");
            return;
        }
        w->inbox = n;
        w->inbox_cap = cap;
    }
    w->inbox[w->ninbox++] = *m;
    atomic_store_explicit(&w->inbox_hint, w->ninbox, memory_order_release);
    pthread_mutex_unlock(&w->inbox_lock);
    int one = 1;
    if (atomic_compare_exchange_strong(&w->sleeping, &one, 0))
        worker_kick(w);
}

/* ---- dispatch -------------------------------------------------------------- */

/* Orphans: coroutines alive beyond those whose attempt holds a slot.
 * After running_locked (a run returns before its slot is freed: a normal
 * end is never seen as an orphan). seq_cst: against run.c's
 * run_orphan_returned (no lost wake-up when the bound is released). */
static unsigned orphans_locked(struct ax_sched *s)
{
    uint64_t live = live_runs_total(s, memory_order_seq_cst);
    return live > s->running ? (unsigned)(live - s->running) : 0;
}

/* At max_orphans no attempt starts (a returning orphan wakes a worker:
 * run.c run_orphan_returned). Under s->lock, with running_locked already
 * folded in. */
static bool orphans_full_locked(struct ax_sched *s)
{
    bool full = orphans_locked(s) >= s->max_orphans;
    if (full) {
        /* The hint first, then the count again: a returning orphan lowers
         * its worker's count, then makes a seq_cst read-modify-write of it
         * and reads the hint (run.c run_orphan_returned), so either it
         * sees the hint and wakes a worker, or we see its return here. */
        atomic_store_explicit(&s->hint_orphans_full, true, memory_order_seq_cst);
        full = orphans_locked(s) >= s->max_orphans;
    }
    if (!full && atomic_load_explicit(&s->hint_orphans_full, memory_order_relaxed))
        atomic_store_explicit(&s->hint_orphans_full, false, memory_order_relaxed);
    return full;
}

/* A slot freed since the last lock holder folded the frees in: by another
 * thread (`freed`) or by a worker (its ends.freed past its folded mark).
 * Read only while every slot was taken at the last dispatch. */
static bool slot_freed_unfolded(struct ax_sched *s)
{
    if (atomic_load_explicit(&s->freed, memory_order_relaxed))
        return true;
    for (unsigned i = 0; i < s->nworkers; i++)
        if (atomic_load_explicit(&s->workers[i].ends.freed, memory_order_relaxed) !=
            atomic_load_explicit(&s->workers[i].folded.freed, memory_order_relaxed))
            return true;
    return false;
}

/* Could a dispatch take something now, by the lock-free hints? Queued work
 * in the buckets' lists while not paused and not every slot is taken (a
 * slot released since shows in `freed`), or a class with parked jobs that
 * may have room. */
static inline bool queued_takeable(struct ax_sched *s)
{
    if (AX_UNLIKELY(atomic_load_explicit(&s->parked_ready, memory_order_relaxed)))
        return true;
    return atomic_load_explicit(&s->hint_queued, memory_order_relaxed) &&
           !atomic_load_explicit(&s->hint_blocked, memory_order_relaxed) &&
           (!atomic_load_explicit(&s->hint_cap_full, memory_order_relaxed) ||
            slot_freed_unfolded(s));
}

/* The watchdog's question about a held worker (watchdog.c): would a
 * sleeping worker find something to start? The same hints a worker reads
 * before it takes the lock, and the orphans gate's. */
bool sched_work_for_sleeper(struct ax_sched *s)
{
    if (!queued_takeable(s))
        return false;
    if (!atomic_load_explicit(&s->hint_orphans_full, memory_order_relaxed))
        return true;
    /* Only a lock holder that looks (a dispatch, a sleeper's last check)
     * refreshes the orphans hint: an orphan that returned while nothing was
     * queued woke no one, and left it set (review of 515b774: B waited for
     * the held worker). Look again, under the lock: the watchdog, once a
     * poll, only while a worker is held, work is queued and the hint says
     * full. */
    pthread_mutex_lock(&s->lock);
    running_locked(s);
    bool full = orphans_full_locked(s);
    pthread_mutex_unlock(&s->lock);
    return !full;
}

static bool jwheel_due(struct ax_sched *s, uint64_t now)
{
    return atomic_load_explicit(&s->jwheel_next, memory_order_relaxed) <= ns_to_tick(now);
}

/* The one lock section of an iteration: apply what this worker released,
 * expire the scheduler's wheel, take new jobs by quota rounds; then start
 * and resume them. */
static void dispatch(struct worker *w)
{
    struct ax_sched *s = w->s;
    struct job *take[DISPATCH_BATCH];
    unsigned n = 0, requeued = 0;
    bool more = false;
    struct worker_pending *p = &w->pend;
    struct job *ended = NULL;

    if (AX_UNLIKELY(w->clock_stale)) { /* once per batch, not per task */
        w->now_ns = now_ns();
        w->clock_stale = false;
    }

    /* Fast path: nothing to apply, nothing due, nothing we could take. */
    if (!p->free_list && !jwheel_due(s, w->now_ns) && !queued_takeable(s) &&
        !sched_adaptive_stall_due(s, w->now_ns))
        return;

    if (AX_UNLIKELY(s->ev_lossless))
        ev_reserve(s);
    pthread_mutex_lock(&s->lock);
    unsigned running = running_locked(s);
    while (p->free_list) {
        struct job *j = p->free_list;
        p->free_list = j->next;
        job_free_locked(s, j);
    }
    requeued += sched_expire_locked(s, w->now_ns, &ended);
    if (s->closing && running == 0)
        pthread_cond_broadcast(&s->idle_cond);
    /* Take new work even while runs are ready (a task yielding in a loop
     * must not keep queued tasks out), but no more than a batch in all. */
    unsigned want = w->nready < DISPATCH_BATCH ? DISPATCH_BATCH - w->nready : 1;
    /* Cleared before the pick, which looks at every parked job's class
     * (even paused: the flag must not keep workers coming back). */
    bool room = atomic_load_explicit(&s->parked_ready, memory_order_relaxed);
    if (AX_UNLIKELY(room))
        atomic_store_explicit(&s->parked_ready, false, memory_order_seq_cst);
    if (AX_UNLIKELY(s->cfg.adaptive_limit)) {
        if (sched_adaptive_quiet(s, w->now_ns))
            sched_adaptive_nudge_locked(
                s, w->now_ns,
                s->running >= s->cap && !s->paused && !s->closing && !orphans_full_locked(s) &&
                    (bucket_nonempty(&s->b[0]) || bucket_nonempty(&s->b[1]) ||
                     bucket_nonempty(&s->b[2])));
        sched_adaptive_apply_locked(s);
    }
    /* No more than this worker's share of what could start now: a burst
     * of a few tasks that compute for milliseconds each went whole to the
     * first worker to take the lock, one after another, while the others
     * found nothing (test_dispatch_share). What could start: the queued
     * jobs, not counting class jobs parked off their lists, and no more
     * than the free slots (the first worker took every slot of a small cap
     * and then each one it freed: new-user trial), after the adaptive
     * limit's move above. Shared among share_div workers; with 16 per
     * worker to start, a full batch. Not when a class made room for parked
     * jobs (`room`): they are not in the count, so the share would take one
     * of them and the rest of the room stayed unused until the next class
     * event (review); the class's limit bounds that pick. The rest stays
     * in the buckets for the workers that what queued it woke (a
     * submission one each, ax_resume all, the scheduler's wheel as many as
     * it requeued, below), and for this one when it comes back. */
    bool by_share = false;
    if (!room) {
        unsigned startable = s->b[0].n + s->b[1].n + s->b[2].n - s->parked_total;
        unsigned slots = s->cap > s->running ? s->cap - s->running : 0;
        if (startable > slots)
            startable = slots;
        unsigned share = (startable + s->share_div - 1) / s->share_div;
        by_share = want > share;
        if (by_share)
            want = share ? share : 1;
    }
    if (!s->paused && !s->closing && !orphans_full_locked(s)) {
        struct job *j;
        sched_prefetch_locked(s, want);
        uint8_t rr0 = (uint8_t)s->rr;
        unsigned taken0 = s->rr_taken;
        while (n < want && s->running < s->cap &&
               (j = sched_pick_locked(s, w->now_ns, &ended))) {
            w->batch_rr[n] = rr0; /* the round before this pick, for a hand-back */
            w->batch_taken[n] = taken0;
            rr0 = (uint8_t)s->rr;
            taken0 = s->rr_taken;
            js_dispatch(&j->sw); /* QUEUED, under the lock */
            /* Its queued deadline's timer, or its class's queue-time
             * budget's: a QUEUED job's tnode is armed only for one of the
             * two (sched.c), and the common job's cold line stays unread
             * (struct job). */
            if (AX_UNLIKELY(j->deadline_ns | j->cls))
                jtimer_del_locked(s, j);
            else
                assert(!ax_wheel_node_armed(&j->tnode));
            s->running++;
            if (AX_UNLIKELY(s->cfg.adaptive_limit))
                sched_adaptive_take(s, j);
            j->wait_ns = w->now_ns > j->enqueue_ns ? w->now_ns - j->enqueue_ns : 0;
            j->run_ns = 0;
            take[n++] = j;
        }
        if (n)
            w->batch_gen = ++s->dispatch_gen;
        /* A full batch calls for help; a batch the share cut short does not:
         * what queued the rest woke workers for it (above), and a wake-up
         * here came on top of theirs, one per dispatch (new-user trial, 8
         * workers, bursts of 2-8 empty tasks: 1.5x the CPU a task). Nor do
         * parked jobs after a short batch (review: while any job was
         * parked, every dispatch of one task woke a worker for nothing),
         * unless their class had room at this dispatch. */
        more = n == want && s->running < s->cap &&
               ((!by_share && (bucket_nonempty(&s->b[0]) || bucket_nonempty(&s->b[1]) ||
                               bucket_nonempty(&s->b[2]) || s->parked_total)) ||
                (s->parked_total && room));
        /* Parking in this pick may have found room appear meanwhile. */
        if (AX_UNLIKELY(atomic_load_explicit(&s->parked_ready, memory_order_relaxed)))
            more = true;
    }
    /* Every slot taken: no worker spins on the queued work (queued_takeable)
     * until a slot is released or the cap changes. */
    bool full = s->running >= s->cap;
    if (full != atomic_load_explicit(&s->hint_cap_full, memory_order_relaxed))
        atomic_store_explicit(&s->hint_cap_full, full, memory_order_relaxed);
    pthread_mutex_unlock(&s->lock);
    /* More work than one batch: get help. Jobs the scheduler's wheel
     * requeued here (delays, back-offs) woke nobody yet: as many workers as
     * there are such jobs beyond this batch, up to share_div (review: one,
     * then each took its share and woke no one, and 64 retries ran on two
     * of 8 workers). */
    if (requeued > n)
        sched_wake_workers(s, requeued - n < s->share_div ? requeued - n : s->share_div);
    else if (more)
        sched_wake_workers(s, 1);
    /* Onto the to-start list first, where the watchdog can see them (and
     * hand them to another worker if this one is held, even by an on_done
     * below); then start them one by one. A new sighting first: the batch
     * may be handed back only after HOLD_MS since it was picked, not since
     * the worker's last switch (review: after a 15 ms on_done, a batch
     * picked next was handed back at the first stall of a few ms before
     * its first run, a new stack's mmap: the task behind a yielder had not
     * started when the yielder was resumed). Once a batch, not a task. */
    if (n) {
        worker_publish(w, NULL);
        wheel_lock(w);
        w->batch_next = 0;
        for (unsigned i = 0; i < n; i++) {
            take[i]->next = NULL;
            if (w->tostart_tail)
                w->tostart_tail->next = take[i];
            else
                w->tostart_head = take[i];
            w->tostart_tail = take[i];
        }
        wheel_unlock(w);
    }
    if (AX_UNLIKELY(ended != NULL)) {
        while (ended) {
            struct job *j = ended;
            ended = j->next;
            if (AX_LIKELY(j->end_why <= END_DEADLINE_RETRY_TIMED)) {
                char buf[96];
                finish_attempt(s, w, j, j->handoff, JS_TIMED_OUT, JS_TIMED_OUT, AX_ETIMEDOUT,
                               deadline_text(j, buf, sizeof buf), FIN_NO_SLOT, 0, 0);
            } else { /* its class ended it: queue-time budget, breaker open */
                class_finish_unstarted(s, w, j, j->handoff, 0);
            }
        }
        w->now_ns = now_ns(); /* on_done ran: the clock moved */
    }
    if (n == 0)
        return;
    for (;;) {
        wheel_lock(w);
        struct job *j = w->tostart_head;
        if (j) {
            w->batch_next++;
            w->tostart_head = j->next;
            if (!w->tostart_head)
                w->tostart_tail = NULL;
        }
        wheel_unlock(w);
        if (!j)
            break;
        /* The start's time: after the on_done or on_release the last run
         * of this batch ran inline, not before it (the attempt's deadline
         * and run_ns count from it: a 6 ms on_done made the next task's
         * deadline 6 ms early, and run_complete then ended it TIMED_OUT
         * after 0.3 ms of a 3 ms timeout: review of 9cef82b). Read again
         * only when the kernel's tick moved since the last reading (the
         * coarse clock, ~6 ns): reading it for every task with an on_done
         * cost the full path 1.078 (bench/ab, 9 pairs). Else the start
         * is early by less than a tick, which run_start notes
         * (start_slack) for run_complete. */
        if (AX_UNLIKELY(w->clock_stale) &&
            (ax_coarse_res_ns == 0 || coarse_ns() > w->now_ns)) {
            w->now_ns = now_ns();
            w->clock_stale = false;
        }
        struct ax_task *t = run_start(w, j);
        if (t)
            run_resume(w, t);
    }
}

static bool work_available(struct worker *w)
{
    struct ax_sched *s = w->s;
    bool yes;
    pthread_mutex_lock(&w->inbox_lock);
    yes = w->ninbox > 0;
    pthread_mutex_unlock(&w->inbox_lock);
    if (yes || atomic_load(&w->fired_hint) || w->pend.free_list)
        return true;
    pthread_mutex_lock(&s->lock);
    yes = !s->paused && !s->closing && running_locked(s) < s->cap &&
          (bucket_nonempty(&s->b[0]) || bucket_nonempty(&s->b[1]) || bucket_nonempty(&s->b[2])) &&
          !orphans_full_locked(s);
    yes = yes || atomic_load_explicit(&s->parked_ready, memory_order_seq_cst);
    pthread_mutex_unlock(&s->lock);
    return yes;
}

/* The next tick this worker must wake for: its own wheel, for worker 0
 * the scheduler's wheel too (delays, back-offs, queued deadlines; the
 * watchdog expires it when worker 0 is held), and for every worker a due
 * adaptive-limit stall. */
static uint64_t next_wake_tick(struct worker *w)
{
    wheel_lock(w);
    uint64_t next = ax_wheel_next(&w->wheel);
    wheel_unlock(w);
    struct ax_sched *s = w->s;
    if (w->index == 0) {
        uint64_t jn = atomic_load_explicit(&s->jwheel_next, memory_order_seq_cst);
        if (jn < next)
            next = jn;
    }
    /* config.adaptive_limit with every slot held and work waiting: look
     * again when the stall is due (sched_adaptive_nudge_locked). Every
     * worker, not worker 0 alone: held by a task that never yields, it
     * looked no more, and the work waited until the hog returned
     * (test_adaptive_limit_stall_w0). The first to look nudges and moves
     * the next look a stall's length on; the others find it not due. At
     * most one wake-up per worker per stall period (a second or more). */
    if (AX_UNLIKELY(s->cfg.adaptive_limit) &&
        atomic_load_explicit(&s->hint_cap_full, memory_order_relaxed) &&
        atomic_load_explicit(&s->hint_queued, memory_order_relaxed)) {
        uint64_t at =
            ns_to_tick_ceil(atomic_load_explicit(&s->alim_news_ns, memory_order_relaxed) +
                            atomic_load_explicit(&s->alim_quiet_ns, memory_order_relaxed));
        if (at < next)
            next = at;
    }
    return next;
}

/* Work another thread has announced through the lock-free hints. */
static bool work_hinted(struct worker *w)
{
    struct ax_sched *s = w->s;
    /* Its own ended jobs to free first (dispatch): else a poll went on
     * its whole length with them pending, and work_available then sent the
     * worker round the loop into a second poll (new-user trial). */
    return w->pend.free_list || atomic_load_explicit(&w->inbox_hint, memory_order_relaxed) ||
           atomic_load_explicit(&w->fired_hint, memory_order_relaxed) ||
           (queued_takeable(s) &&
            !atomic_load_explicit(&s->hint_orphans_full, memory_order_relaxed));
}

/* Idle: return the memory of released stacks beyond STACK_WARM_KEEP, but
 * only out of time the worker has to spare. True while some are left.
 *
 * Each stack is one madvise(MADV_DONTNEED), and each of those a TLB
 * shootdown: an IPI to every other core running this process, ~5-10 us
 * here. Trimming a fixed 128 stacks whenever the worker went idle (before
 * issue 10) cost ~1 ms, during which the timers due next waited: perf of
 * bench ax_lateness (100 k sleepers waking over ~150 ms, so the worker idles
 * between ticks) had ax_stack_pool_trim at 16 % of all samples, and not
 * trimming alone took the lateness p99 from 5 ms to 1.3 ms. So trim only
 * in a real pause: none while a timer is due within TRIM_MIN_GAP_NS (with
 * sleepers due every tick the worker idles for tens of microseconds at a
 * time, less than one step of TRIM_STEP stacks takes, and trimming there
 * put the p99 back at 4-6 ms), then for at most half the time left before
 * the next timer (the other half covers the IPIs' cost to the other
 * workers and the step that overshoots), at most TRIM_BUDGET_NS, and stop
 * as soon as work is announced. A worker idle for longer still trims
 * everything, TRIM_BUDGET_NS at a time. */
/* Released stacks kept resident: w->warm_max in all (STACK_WARM_KEEP, fewer
 * of stacks larger than 64 KiB: STACK_WARM_BYTES), counting those of warm
 * runs (run.c). */
static inline size_t warm_keep(const struct worker *w)
{
    return w->nrun_warm < w->warm_max ? w->warm_max - w->nrun_warm : 0;
}

static bool trim_stacks(struct worker *w, uint64_t next_tick)
{
    size_t keep = warm_keep(w);
    uint64_t now = now_ns(), next = tick_to_ns(next_tick); /* UINT64_MAX: none */
    uint64_t gap = next > now ? next - now : 0;
    if (gap < TRIM_MIN_GAP_NS) {
        /* A timer is near: later. But not never: one task ticking every
         * millisecond kept a burst's 8 000 released stacks (190 MB)
         * resident for good (review). A small step now and then, when no
         * timer is due yet and no work waits: TRIM_FORCE_BYTES of stack
         * size every 10 ms (8 stacks of 64 KiB: 800 a second, ~0.3 % of
         * the worker's time), one larger stack less often. */
        size_t size = w->s->cfg.stack_size, step = TRIM_FORCE_BYTES / size;
        uint64_t every = TRIM_FORCE_EVERY_NS;
        if (step == 0) { /* one stack, as often as its size allows */
            step = 1;
            every = TRIM_FORCE_EVERY_NS * size / TRIM_FORCE_BYTES;
        }
        if (gap == 0 || now - w->trim_forced_ns < every || work_hinted(w))
            return w->stacks.n_warm > keep;
        w->trim_forced_ns = now;
        size_t n = w->stacks.n_warm;
        ax_stack_pool_trim(&w->stacks, n - keep > step ? n - step : keep);
        return w->stacks.n_warm > keep;
    }
    uint64_t end = now + (gap / 2 < TRIM_BUDGET_NS ? gap / 2 : TRIM_BUDGET_NS);
    while (w->stacks.n_warm > keep && now < end && !work_hinted(w)) {
        size_t n = w->stacks.n_warm;
        ax_stack_pool_trim(&w->stacks, n - keep > TRIM_STEP ? n - TRIM_STEP : keep);
        now = now_ns();
    }
    return w->stacks.n_warm > keep;
}

/* Back from idle (a sleep, a poll): busy again, and a new sighting for the
 * watchdog. A worker the OS kept off its CPU through the whole sleep never
 * showed busy at 0, and without the sighting the watchdog would count the
 * sleep as HOLD_MS without a switch (and hand back the batch we take
 * next); and one that went to sleep for good while we were idle must
 * watch what we run next. */
static void worker_unidle(struct worker *w)
{
    struct ax_sched *s = w->s;
    worker_publish(w, NULL);
    atomic_store(&w->busy, 1);
    if (atomic_load_explicit(&s->watchdog_idle, memory_order_seq_cst))
        watchdog_kick(s);
}

/* config.idle_poll_us past SPIN_NS: worker 0 goes on polling until `end`,
 * so that the next task after a quiet spell finds a worker awake instead of
 * paying for a wake-up: an eventfd write by its submitter and the kernel
 * waking a vCPU, 40-100 us on this project's VM (bench ax_latency: the
 * first task of each burst waited ~50 us at the median with the default,
 * ~2-5 us with idle_poll_us=2000).
 *
 * One worker, and always the same one. All polling would hold every CPU
 * the submitters and the tasks need. And whichever worker ran out first
 * (a token, tried first) spread the work over both workers of the bench
 * (2 CPUs): the one not polling woke for its own parked tasks' timers and
 * took a CPU from the submitter, and the p99 was 140-310 us, against
 * 22-76 us with worker 0 polling (3 runs each, the same minutes). A fixed
 * poller concentrates a light load on one worker; when it is busy the
 * others are woken as without polling.
 *
 * Idle as far as the watchdog goes (busy 0): polling longer than HOLD_MS
 * is not a held worker, and must not keep the watchdog polling either.
 * Ends at once for work in the hints, a timer due (its own or the
 * scheduler's wheel), an adaptive-limit stall due, ax_shutdown or ax_free,
 * or (with fds
 * waited on, which the hints do not show) an epoll event, looked for
 * without blocking every ~1024 turns. True: found work (or a timer), back
 * to the loop; false: the time is up, the caller goes to sleep. */
static bool idle_poll(struct worker *w, uint64_t end, uint64_t next_tick)
{
    struct ax_sched *s = w->s;
    atomic_store(&w->busy, 0);
    bool found = false;
    for (unsigned i = 1;; i++) {
        if (work_hinted(w)) {
            found = true;
            break;
        }
        if ((i & 63) == 0) {
            if (atomic_load_explicit(&s->stop, memory_order_relaxed) ||
                atomic_load_explicit(&s->closing, memory_order_relaxed))
                break; /* nothing new to start: sleep (its runs still wake it) */
            uint64_t now = now_ns();
            /* The scheduler's wheel too: a delay armed meanwhile kicks
             * worker 0 only when it sleeps (sched.c jtimer_arm_locked);
             * and the adaptive limit's stall nudge, whose wake-up for work
             * queued behind a full cap (submit.c ENQ_STALL) reaches only
             * sleeping workers (review: 800 ms late with a 1 s poll). */
            if (ns_to_tick(now) >= next_tick || jwheel_due(s, now) ||
                sched_adaptive_stall_due(s, now)) {
                found = true; /* the loop fires it */
                break;
            }
            if (now >= end)
                break;
            if (w->nfd_waits && (i & 1023) == 0) {
                struct epoll_event ev[64];
                const struct timespec zero = {0, 0};
                int n = reactor_wait(w, ev, 64, &zero);
                if (n > 0) {
                    worker_unidle(w);
                    reactor_dispatch(w, ev, n);
                    return true;
                }
            }
        }
        ax_cpu_relax();
    }
    if (found)
        worker_unidle(w);
    return found;
}

static void worker_sleep(struct worker *w)
{
    struct ax_sched *s = w->s;
    struct epoll_event ev[64];

    /* Spin a little before sleeping: a burst usually brings more work
     * within microseconds, while sleeping costs the next task an eventfd
     * write and a wake-up (~50-100 µs on this VM: bench "dispatch latency").
     * The spin reads only the lock-free hints, and ends after SPIN_NS (or
     * config.idle_poll_us if shorter) or as soon as a timer is due. Sockets
     * do not show in the hints: with fds waited on, spin briefly. A longer
     * idle_poll_us goes on in idle_poll, on worker 0. */
    uint64_t t0 = now_ns(), poll_ns = (uint64_t)s->cfg.idle_poll_us * 1000u;
    uint64_t spin_ns = poll_ns < SPIN_NS ? poll_ns : SPIN_NS;
    uint64_t spin_end = t0 + (w->nfd_waits ? spin_ns / 10 : spin_ns);
    uint64_t next_tick = next_wake_tick(w);
    bool timer_due = false;
    for (unsigned i = 1;; i++) {
        if (work_hinted(w))
            return;
        if ((i & 63) == 0) {
            uint64_t now = now_ns();
            timer_due = ns_to_tick(now) >= next_tick;
            if (now >= spin_end || timer_due)
                break;
        }
        ax_cpu_relax();
    }
    if (poll_ns > SPIN_NS && w->index == 0 && !timer_due) {
        /* idle_poll_us from the last run, however often the worker comes
         * back here meanwhile without one (a timer's cascade, a trim step):
         * measured from each return, one task polled twice as long as
         * asked, and stack trimming after a burst made it 3 s for 1 s. No
         * run yet (ax_new): no poll. */
        if (w->resumes != w->poll_resumes) {
            w->poll_resumes = w->resumes;
            w->poll_end_ns = t0 + poll_ns;
        }
        if (w->poll_end_ns > t0 && idle_poll(w, w->poll_end_ns, next_tick))
            return;
    }
    /* Idle: return released stacks' memory in the time to spare before
     * the next timer; come back in a millisecond for more. */
    bool trim_more = w->stacks.n_warm > warm_keep(w) && trim_stacks(w, next_tick);
    atomic_fetch_add(&s->nsleeping, 1);
    atomic_store(&w->sleeping, 1);
    atomic_store(&w->busy, 0);
    if (work_available(w) || (atomic_load(&s->stop) && w->live_runs == 0)) {
        atomic_store(&w->sleeping, 0);
        atomic_fetch_sub(&s->nsleeping, 1);
        /* busy was 0 for a moment (or a whole poll): back as from a sleep */
        worker_unidle(w);
        return;
    }
    /* Sleep until the next tick with work, to the nanosecond (computed
     * after `sleeping` is set: a job timer armed earlier kicks worker 0). */
    uint64_t next = next_wake_tick(w);
    struct timespec ts, *tsp = NULL;
    if (next != UINT64_MAX) {
        uint64_t now = now_ns(), at = tick_to_ns(next);
        uint64_t d = at > now ? at - now : 0;
        if (d > 86400ull * 1000000000u)
            d = 86400ull * 1000000000u;
        ts.tv_sec = (time_t)(d / 1000000000u);
        ts.tv_nsec = (long)(d % 1000000000u);
        tsp = &ts;
    }
    if (trim_more && (!tsp || ts.tv_sec > 0 || ts.tv_nsec > 1000000)) {
        ts.tv_sec = 0;
        ts.tv_nsec = 1000000;
        tsp = &ts;
    }
    int n = reactor_wait(w, ev, 64, tsp);
    atomic_store(&w->sleeping, 0);
    atomic_fetch_sub(&s->nsleeping, 1);
    worker_unidle(w);
    if (n > 0)
        reactor_dispatch(w, ev, n);
}

static void name_thread(const char *fmt, unsigned i)
{
    char name[16];
    snprintf(name, sizeof name, fmt, i);
    pthread_setname_np(pthread_self(), name);
}

void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct ax_sched *s = w->s;
    struct epoll_event ev[64];
    ax_current_worker = w;
    name_thread("ax-worker-%u", w->index);
    void *altstack = crash_altstack_enter(); /* where a stack overflow is handled */
    crash_thread_signals(w);
    linger_thread_signals(w);
    ax_coro_init_main(&w->main);
    w->fpenv = ax_coro_fpenv_get();
    /* Busy, with a sighting of its own: until its first run the sequence
     * would stay at 0 (CI: a watchdog that first looked then judged the new
     * worker held at once and handed back its first batch; a task that
     * yielded was resumed before the one behind it had started:
     * test_watchdog_first_sight). */
    worker_unidle(w);
    for (;;) {
        w->now_ns = now_ns();
        drain_inbox(w);
        if (w->nfd_waits) {
            int n = epoll_wait(w->epfd, ev, 64, 0);
            if (n > 0)
                reactor_dispatch(w, ev, n);
        }
        run_expire_timers(w);
        if (AX_UNLIKELY(w->nlinger))
            linger_check(w);
        w->direct_budget = DIRECT_BUDGET;
        for (unsigned n = w->nready; n > 0; n--) {
            struct ax_task *t = ready_pop(w);
            if (!t)
                break;
            run_resume(w, t);
        }
        dispatch(w);
        if (w->nready)
            continue;
        if (atomic_load(&s->stop) && w->live_runs == 0)
            break;
        worker_sleep(w);
    }
    run_warm_drop(w, 0); /* their coroutines end on this thread */
    atomic_store(&w->busy, 0);
    linger_thread_gone(w);
    crash_altstack_leave(altstack);
    return NULL;
}

int worker_init(struct ax_sched *s, struct worker *w, unsigned index)
{
    w->s = s;
    w->index = index;
    w->epfd = w->evfd = -1;
    w->wd_seq = UINT64_MAX; /* not seen yet: pub_seq is always even (watchdog.c) */
    wheel_lock_setup(); /* before any worker runs */
    pthread_once(&clock_once, clock_decide);
    pthread_mutex_init(&w->inbox_lock, NULL);
    pthread_mutex_init(&w->sig_lk, NULL);
    ax_wheel_init(&w->wheel, ns_to_tick(now_ns()));
    struct ax_stack_config sc;
    ax_stack_config_default(&sc);
    sc.stack_size = s->cfg.stack_size;
    w->warm_max = (unsigned)(STACK_WARM_BYTES / s->cfg.stack_size);
    if (w->warm_max > STACK_WARM_KEEP)
        w->warm_max = STACK_WARM_KEEP;
    if (w->warm_max == 0)
        w->warm_max = 1;
    sc.guard_size = AX_GUARD_SIZE; /* one frame must not step over it (obs/crash.c) */
    /* Never give memory back on the release path: madvise(MADV_DONTNEED)
     * per stack costs a TLB shootdown on every core (perf: 58% of
     * ax_lateness with 20 000 sleepers waking). Stacks beyond
     * STACK_WARM_KEEP are trimmed when the worker is idle (worker_sleep). */
    sc.cache_max = SIZE_MAX / 2;
    int rc = ax_stack_pool_init(&w->stacks, &sc);
    if (rc != 0)
        return ax_fail(AX_ENOMEM, "worker %u: stack pool: %s", index, strerror(-rc));
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0)
        return ax_fail(AX_ESYS, "worker %u: epoll_create1: %s", index, strerror(errno));
    w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->evfd < 0)
        return ax_fail(AX_ESYS, "worker %u: eventfd: %s", index, strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0)
        return ax_fail(AX_ESYS, "worker %u: epoll_ctl: %s", index, strerror(errno));
    return AX_OK;
}

void worker_destroy(struct worker *w)
{
    if (w->http && w->http_destroy)
        w->http_destroy(w->http);
    w->http = NULL;
    if (w->epfd >= 0)
        close(w->epfd);
    if (w->evfd >= 0)
        close(w->evfd);
    run_pool_destroy(w);
    free(w->inbox);
    free(w->inbox_spare);
    free(w->expired);
    free(w->linger);
    free(w->fdw);
    ax_stack_pool_destroy(&w->stacks);
    pthread_mutex_destroy(&w->inbox_lock);
    pthread_mutex_destroy(&w->sig_lk);
}
