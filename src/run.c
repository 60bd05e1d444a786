/* run.c - layer 3: one attempt as a coroutine on its worker (seed §3.1,
 * §3.2, DESIGN.md §7).
 *
 * Dispatch makes a job STARTING and puts it on its worker's to-start list
 * (worker.c), from which the watchdog can hand it to another worker while
 * this one is held. Just before the worker switches to it, run_start builds
 * the run (struct ax_task): a pooled stack, the coroutine, the attempt's
 * deadline armed in the worker's wheel. The function is entered only if
 * js_begin wins STARTING -> RUNNING on the coroutine: the deadline and the
 * cancel path exist before the task is RUNNING, and a job cancelled
 * meanwhile never runs. The function never runs on the worker's own stack.
 *
 * The run's own state (t->rs) says where its coroutine is; whether its
 * attempt is still its own is the job's word (run_detached_rc). When the
 * function returns, run_complete decides the outcome unless a deadline or a
 * cancel already did, then recycles the run and drops its JH_RUN hold.
 *
 * Timers: the worker's wheel holds each run's deadline and its wait bound
 * (sleep, fd, join) plus extension timers (curl). The worker takes the
 * wheel's lock around each operation; the watchdog try-locks it to expire
 * the timers of a held worker, ends overdue attempts by CAS and leaves the
 * nodes on w->fired, which the worker handles like its own expiries.
 *
 * Hot: run_start, run_complete, and in internal.h run_resume (in line in
 * the worker's loops), ready_push/pop, the publish seqlock. No malloc once pools are warm, no syscall unless a stack pool
 * grows.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <setjmp.h>
#include "obs/prom.h"

#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define RUN_CHUNK 64

_Thread_local struct ax_task *ax_current_run AX_TLS_HOT;

/* ---- the worker's wheel ---------------------------------------------------- */

void worker_timer_del(struct worker *w, struct ax_wheel_node *n)
{
    wheel_lock(w); /* the watchdog may be taking it out right now */
    ax_wheel_del(&w->wheel, n); /* a no-op if the watchdog took it meanwhile */
    wheel_unlock(w);
}

void worker_timer_arm(struct worker *w, struct run_timer *rt, uint64_t at_ns)
{
    wheel_lock(w);
    ax_wheel_del(&w->wheel, &rt->node);
    rt->kind = TIMER_EXT;
    ax_wheel_add(&w->wheel, &rt->node, ns_to_tick_ceil(at_ns));
    wheel_unlock(w);
}

void worker_timer_disarm(struct worker *w, struct run_timer *rt)
{
    worker_timer_del(w, &rt->node);
}

/* ---- run pool ------------------------------------------------------------ */

static struct ax_task *run_alloc(struct worker *w)
{
    if (AX_UNLIKELY(!w->run_free)) {
        if (w->nrun_chunks == w->run_chunk_cap) {
            unsigned cap = w->run_chunk_cap ? w->run_chunk_cap * 2 : 16;
            struct ax_task **c = realloc(w->run_chunks, cap * sizeof *c);
            if (!c)
                return NULL;
            w->run_chunks = c;
            w->run_chunk_cap = cap;
        }
        struct ax_task *chunk = calloc(RUN_CHUNK, sizeof *chunk);
        if (!chunk)
            return NULL;
        w->run_chunks[w->nrun_chunks++] = chunk;
        for (unsigned i = RUN_CHUNK; i-- > 0;) {
            chunk[i].w = w;
            chunk[i].s = w->s;
            chunk[i].next = w->run_free;
            w->run_free = &chunk[i];
        }
    }
    struct ax_task *t = w->run_free;
    w->run_free = t->next;
    t->next = NULL;
    return t;
}

/* Finished runs whose function returned keep their stack and coroutine
 * (parked at the top of run_entry's loop), up to RUN_WARM_MAX per worker,
 * LIFO so the most recently used stack (still in cache) runs next. Taking
 * one skips the stack pool and ax_coro_init; giving it back skips
 * ax_coro_destroy (callgrind, bench ax_fullpath: ~150 instructions and
 * two atomics per task). The stack pool keeps w->warm_max less these
 * resident when idle (worker.c: trim_stacks); w->warm_max bounds them too:
 * 64 of the default 64 KiB stacks, fewer of larger ones (worker_init). */

/* Let a warm run's coroutine end: resumed with no job, it makes its final
 * switch. On the worker's own stack only. */
static void run_warm_end(struct worker *w, struct ax_task *t)
{
    t->job = NULL;
    t->warm = 0;
    ax_coro_switch(&w->main, &t->coro);
}

static void run_release_stack(struct worker *w, struct ax_task *t)
{
    ax_coro_destroy(&t->coro);
    if (t->stack) {
        ax_stack_release(&w->stacks, t->stack);
        t->stack = NULL;
    }
}

static inline void stacks_in_use_add(struct worker *w, int d)
{
    /* Written by this worker only, read by ax_stats: no locked add. */
    atomic_store_explicit(&w->stacks_in_use,
                          atomic_load_explicit(&w->stacks_in_use, memory_order_relaxed) + d,
                          memory_order_relaxed);
}

static void run_recycle(struct worker *w, struct ax_task *t)
{
    bool keep = t->warm && w->nrun_warm < w->warm_max;
    if (!keep) {
        if (t->warm)
            run_warm_end(w, t);
        run_release_stack(w, t);
    }
    if (t->defers != t->defer_inline)
        free(t->defers);
    if (t->children != t->child_inline)
        free(t->children);
    t->defers = NULL;
    t->children = NULL;
    t->job = NULL;
    t->life_gen++;
    t->park_gen = park_gen_next(t->park_gen);
    stacks_in_use_add(w, -1);
    if (keep) {
        t->next = w->run_warm;
        w->run_warm = t;
        w->nrun_warm++;
    } else {
        t->next = w->run_free;
        w->run_free = t;
    }
    w->live_runs--;
}

/* The run's coroutine has returned (or never began): it no longer counts
 * as live, before its attempt's end frees the slot and runs on_done, so
 * that live - running (ax_stats.orphans, the max_orphans gate) never counts
 * it as an orphan meanwhile. Its worker's count, on the worker's own line:
 * no locked instruction per task. release: ax_shutdown reads 0 here as
 * "every coroutine and its fds are done". */
static void run_live_drop(struct worker *w)
{
    atomic_store_explicit(&w->ends.live, atomic_load_explicit(&w->ends.live, memory_order_relaxed) - 1,
                          memory_order_release);
}

/* The run that just returned was an orphan: its attempt had ended without
 * it (a deadline, a cancel), its slot freed then. Only such a return lowers
 * live - running, so only it can release the max_orphans gate, where the
 * other workers sleep rather than spin: wake one. Pairs with a worker
 * going to sleep there, which sets hint_orphans_full and then reads the
 * live counts again (worker.c orphans_full_locked): the seq_cst read-modify
 * -write of this worker's count (adding 0: the return is already in it)
 * and the seq_cst read of the hint after it make either that worker see
 * this return, or this see its hint. (Not a fence: ThreadSanitizer does
 * not model fences; an RMW on the worker's own line, on this rare path
 * only.) */
static void run_orphan_returned(struct worker *w)
{
    atomic_fetch_add_explicit(&w->ends.live, 0, memory_order_seq_cst);
    if (AX_UNLIKELY(atomic_load_explicit(&w->s->hint_orphans_full, memory_order_seq_cst)) &&
        atomic_load_explicit(&w->s->hint_queued, memory_order_relaxed))
        sched_wake_workers(w->s, 1);
}

/* End warm runs until at most keep are left (the worker's exit: 0). */
void run_warm_drop(struct worker *w, unsigned keep)
{
    while (w->nrun_warm > keep) {
        struct ax_task *t = w->run_warm;
        w->run_warm = t->next;
        w->nrun_warm--;
        run_warm_end(w, t);
        run_release_stack(w, t);
        t->next = w->run_free;
        w->run_free = t;
    }
}

void run_pool_destroy(struct worker *w)
{
    for (unsigned i = 0; i < w->nrun_chunks; i++)
        free(w->run_chunks[i]);
    free(w->run_chunks);
    w->run_chunks = NULL;
    w->nrun_chunks = 0;
}

/* ---- the coroutine side --------------------------------------------------- */

static inline void run_defers(struct ax_task *t)
{
    while (t->ndefers > 0) {
        struct defer_entry d = t->defers[--t->ndefers];
        d.fn(d.arg);
    }
}

/* Run cleanups LIFO and leave the coroutine for good. Called on the task's
 * stack by ax_panic (from any depth: the stack is not reused). A cleanup
 * that panics in turn (ax_panic while panicked) jumps back here, to the
 * next cleanup, instead of calling run_exit on top of its own frames
 * (review: ~400 bytes a level, so 180 cleanups that each panicked
 * overflowed a 64 KiB stack and aborted the process, and with
 * overflow_fails_task only the first 152 of 300 ran). */
_Noreturn void run_exit(struct ax_task *t)
{
    jmp_buf top;
    if (!t->unwind) {
        t->unwind = &top;
        (void)setjmp(top); /* 1 again after each nested panic */
    }
    run_defers(t);
    t->rs = RS_EXITED;
    ax_coro_switch_final(&t->coro, &t->w->main);
    abort(); /* unreachable: a finished coroutine is never resumed */
}

/* The coroutine's body: one attempt per turn of the loop. A function that
 * returns leaves the coroutine parked here, warm, and run_start may give it
 * the next job; resumed with none (run_warm_end), it ends. */
static void run_entry(void *arg)
{
    struct ax_task *t = arg;
    struct worker *w = t->w;
    while (t->job) {
        struct job *j = t->job;
        /* STARTED's room and time before the begin (events.c). */
        uint64_t ev_at = AX_UNLIKELY(ev_on(w->s, AX_EV_STARTED)) ? ev_started_room(w->s, w) : 0;
        /* Cancelled since dispatch: this run never enters the function. */
        if (js_begin(&j->sw, t->gen, t->attempt)) {
            if (AX_UNLIKELY(ev_at))
                ev_emit_started(w->s, w, j, ev_at);
            wc_inc(&w->counts.started); /* counted where STARTED is emitted: the two agree */
            /* A reused coroutine keeps what the last task set; each task
             * starts with the worker's rounding mode and masks. */
            ax_coro_fpenv_reset(w->fpenv);
            t->began = 1;
            t->rs = RS_ACTIVE;
            if (AX_UNLIKELY(j->cls))
                class_started(w->s, j);
            ax_hist_record(&w->m->wait[j->prio], j->wait_ns); /* metrics_record_wait, inline */
            t->code = j->fn(t, j->arg);
            run_defers(t);
        }
        t->rs = RS_EXITED;
        t->warm = 1;
        ax_coro_switch(&t->coro, &w->main);
    }
    ax_coro_switch_final(&t->coro, &w->main);
    abort(); /* unreachable */
}

/* How the run's attempt ended without it. The job's word says a cancel
 * when that ended this attempt (CANCELLED, its attempt number); else the
 * clock: a deadline's end may be RETRYING or a later attempt by now. Not
 * the clock alone: a task cancelled that ran on past its deadline was
 * told it timed out (a new user's trial). The job is held (JH_RUN). */
static int detached_cause(const struct ax_task *t, const char **text)
{
    uint64_t sw = atomic_load_explicit(&t->job->sw, memory_order_acquire);
    bool cancelled = js_state(sw) == JS_CANCELLED && js_attempt(sw) == t->attempt;
    if (!cancelled && now_ns() >= t->deadline_ns) {
        *text = "the task's attempt timed out (its deadline passed)";
        return AX_ETIMEDOUT;
    }
    *text = "the task's attempt was cancelled";
    return AX_ECANCELED;
}

int run_detached_slow(const struct ax_task *t)
{
    const char *text;
    int code = detached_cause(t, &text);
    return ax_fail_static(code, text);
}

int run_detached_named(const struct ax_task *t, const char *who)
{
    if (!run_detached_rc(t))
        return 0;
    const char *text;
    int code = detached_cause(t, &text);
    return ax_fail(code, "%s: %s", who, text);
}

/* A blocking call of a run whose attempt has ended returns at once the
 * first time: a task that checks the code unwinds without delay. A task
 * that calls again (a retry loop ignoring the code: `while (!ready)
 * ax_sleep(t, 10);`) would otherwise spin on its worker, starving the
 * other runs there and every attempt it could start. From the second call
 * on, each one parks 1, 2, 4 ... up to 100 ms before returning the code:
 * the orphan costs a timer, not a CPU, and still returns as soon as its
 * loop ends. */
int run_detached_block(struct ax_task *t, const char *who)
{
    if (t->detached_calls < UINT8_MAX)
        t->detached_calls++;
    if (t->detached_calls > 1) {
        unsigned k = t->detached_calls - 2u;
        uint64_t ms = k >= 7 ? 100 : (uint64_t)1 << k;
        worker_timer_add(t->w, &t->wait_timer.node, now_ns() + ms * 1000000u);
        t->rs = RS_PARK_SLEEP;
        run_park(t);
        t->rs = RS_ACTIVE;
    }
    const char *text;
    int code = detached_cause(t, &text);
    return ax_fail(code, "%s: %s", who, text);
}

/* Resumed only so that a lingering report can say where we are
 * (linger.c entry_report): the frames, then straight back to the loop,
 * until resumed for real. Parked or woken alike: a woken run resumed here
 * is still in the ready queue, and its real resume returns from run_park
 * with its wake-up's code. */
__attribute__((noinline)) void run_bt_serve(struct ax_task *t, bool in_park)
{
    while (t->bt_req) {
        t->bt_n = backtrace(t->bt, AX_BT_MAX);
        t->bt_in_park = in_park; /* the report cuts run_park's frame too */
        t->bt_req = 0;
        ax_coro_switch(&t->coro, &t->w->main);
    }
}

/* Not in line in its callers here: a lingering report's backtrace is cut
 * after its frame (linger.c). */
__attribute__((noinline)) int run_park(struct ax_task *t)
{
    t->park_gen = park_gen_next(t->park_gen);
    t->switched = 1;
    ax_coro_switch(&t->coro, &t->w->main);
    if (AX_UNLIKELY(t->bt_req))
        run_bt_serve(t, true);
    return t->wake_rc;
}

void run_wake(struct ax_task *t, int rc)
{
    struct worker *w = t->w;
    switch (t->rs) {
    case RS_PARK_SLEEP:
        break;
    case RS_PARK_FD:
        reactor_fd_unwait(w, t);
        break;
    case RS_PARK_EXT:
        if (t->on_unpark)
            t->on_unpark(t);
        break;
    case RS_PARK_JOIN: {
        struct job *c = t->join_child;
        pthread_mutex_lock(&w->s->lock);
        join_unpark_locked(t, c); /* not JOIN_DONE: the child has not let go */
        pthread_mutex_unlock(&w->s->lock);
        break;
    }
    default: /* not parked: new, active, in the ready queue, or exited */
        return;
    }
    worker_timer_del(w, &t->wait_timer.node);
    t->rs = RS_ACTIVE;
    t->wake_rc = rc;
    ready_push(w, t);
}

/* ---- the worker side ---------------------------------------------------- */

/* The function returned, panicked, or never began: decide the outcome
 * unless a deadline or a cancel already did, then recycle the run. */
void run_complete(struct worker *w, struct ax_task *t)
{
    struct ax_sched *s = w->s;
    struct job *j = t->job;
    wheel_lock(w);
    ax_wheel_del(&w->wheel, &t->deadline_timer.node);
    ax_wheel_del(&w->wheel, &t->wait_timer.node);
    bool fired = w->fired != NULL;
    wheel_unlock(w);
    /* The watchdog may have taken this run's deadline onto w->fired: handle
     * those before the run struct can be reused. */
    if (AX_UNLIKELY(fired))
        run_expire_timers(w);
    run_live_drop(w);
    if (t->nchildren)
        join_release_children(w, t);
    bool began = t->began;
    if (began) {
        unsigned state = t->code == 0 && !t->panicked ? JS_SUCCEEDED : JS_FAILED;
        int code = t->panicked ? AX_EPANIC : t->code;
        if (t->panicked) {
            crash_report(w, t); /* reported past its deadline too */
            wc_inc(&w->counts.panicked);
        }
        if (AX_UNLIKELY(w->now_ns >= t->deadline_ns + (t->start_slack ? ax_coarse_res_ns : 0))) {
            /* It returned past its deadline, and neither the worker's
             * wheel (it did not switch after the deadline passed, or the
             * worker resumed it without looking at its timers: a yield's
             * hand-off) nor the watchdog ended it first: the watchdog
             * judges a worker held only after HOLD_MS, and may be late (a
             * report it was writing, its CPU taken). The attempt timed
             * out all the same, whatever it returned: the outcome must
             * not hang on who noticed (a hog of 6 ms under a 1 ms timeout
             * ended SUCCEEDED every time, hogs of 250 ms under 18-44 ms
             * timeouts sometimes did: new user's trial); a panic too
             * (reported above), as when the watchdog ended it first. A
             * start that may be early (start_slack) is given that slack: a
             * task after a slow on_done must not pay for it (review of
             * 9cef82b); so after another task's inline on_done the check
             * is exact to within one kernel tick (worker.c, SCALING.md). */
            state = JS_TIMED_OUT;
            code = AX_ETIMEDOUT;
            unsigned long long ms = (t->deadline_ns - t->start_ns) / 1000000u;
            if (t->switched) /* not a hog: it yielded or waited meanwhile */
                snprintf(t->err, sizeof t->err, "timed out after %llu ms", ms);
            else
                snprintf(t->err, sizeof t->err,
                         "timed out after %llu ms (it ran on without yielding past its "
                         "deadline)",
                         ms);
            /* A hog (it never switched: it ran the whole time) that
             * returned grace_ms past its deadline and was not reported
             * while it ran on: now, while the job is held -- before the
             * end's event if nobody ended the attempt (the worker learns
             * both at once). Not a run that switched: when it was resumed
             * is not known here, and one that honours its timeout but was
             * resumed late must not be blamed (test_linger_once F). */
            if (AX_UNLIKELY(w->nlinger))
                linger_orphan_returned(w, t); /* a report due, waiting for names */
            if (!t->switched && w->now_ns >= t->deadline_ns +
                                                   (t->start_slack ? ax_coarse_res_ns : 0) +
                                                   (uint64_t)s->cfg.grace_ms * 1000000u)
                linger_returned(w, t);
        }
        if (state == JS_FAILED && t->err[0] == 0)
            snprintf(t->err, sizeof t->err, "task returned %d", t->code);
        /* Won: drops the worker's JH_RUN with the job's other holds. */
        if (!finish_running_keep(s, w, j, t->gen, t->attempt, state, code,
                                 state == JS_SUCCEEDED ? "" : t->err, w->now_ns - t->start_ns,
                                 JH_RUN)) {
            /* A deadline or a cancel ended it first. The wake-up before the
             * hold's release, which may run its on_release (user code). */
            run_orphan_returned(w);
            job_release(s, w, j, JH_RUN);
        }
    } else {
        run_orphan_returned(w); /* ended before it began */
        job_release(s, w, j, JH_RUN);
    }
    run_recycle(w, t);
}

/* The attempt's deadline fired (on this worker's wheel, or the watchdog
 * expired it and may have ended the attempt already). */
static void deadline_fired(struct worker *w, struct ax_task *t)
{
    char msg[64];
    snprintf(msg, sizeof msg, "timed out after %llu ms",
             (unsigned long long)((t->deadline_ns - t->start_ns) / 1000000u));
    const char *why;
    /* A cancel that ended the attempt first: its code, the one every later
     * call returns (detached_cause), not AX_ETIMEDOUT for this wait alone
     * (review of ab90b20: 7 in 2000 cancels racing the deadline). */
    bool won = finish_running(w->s, w, t->job, t->gen, t->attempt, JS_TIMED_OUT, AX_ETIMEDOUT,
                              msg, w->now_ns - t->start_ns, 0);
    run_wake(t, won ? AX_ETIMEDOUT : detached_cause(t, &why));
    /* After the wake-up: the first track may start a thread (warm_symbols). */
    if (t->began)
        linger_track(w, t); /* its coroutine goes on without its attempt */
}

static void handle_timer(struct worker *w, struct run_timer *rt)
{
    if (rt->kind == TIMER_DEADLINE)
        deadline_fired(w, rt->run);
    else if (rt->kind == TIMER_EXT)
        rt->fire(rt, w);
    else
        run_wake(rt->run, rt->run->rs == RS_PARK_SLEEP ? 0 : AX_ETIMEDOUT);
}

void run_expire_timers(struct worker *w)
{
    uint64_t tick = ns_to_tick(w->now_ns);
    struct ax_wheel_node *list = NULL;
    wheel_lock(w);
    if (!w->fired && ax_wheel_next(&w->wheel) > tick) {
        wheel_unlock(w);
        return;
    }
    /* The watchdog's first: they were due earlier. */
    list = w->fired;
    w->fired = NULL;
    atomic_store_explicit(&w->fired_hint, 0, memory_order_relaxed);
    size_t n = 0;
    for (struct ax_wheel_node *p = list; p; p = p->next)
        n++;
    n += ax_wheel_advance(&w->wheel, tick, &list);
    wheel_unlock(w);
    /* Take the whole list apart first: handling one timer can re-arm a
     * later one (curl's timer callback runs inside run_wake), and
     * ax_wheel_add reuses the node's link, so the list must not be walked
     * after anything was handled. */
    if (n > w->expired_cap) {
        size_t cap = w->expired_cap ? w->expired_cap : 64;
        while (cap < n)
            cap *= 2;
        struct run_timer **a = realloc(w->expired, cap * sizeof *a);
        if (!a) {
            /* Out of memory: handle them by walking the list (no curl). */
            while (list) {
                struct run_timer *rt = AX_CONTAINER_OF(list, struct run_timer, node);
                list = list->next;
                rt->node.next = NULL;
                handle_timer(w, rt);
            }
            return;
        }
        w->expired = a;
        w->expired_cap = cap;
    }
    size_t k = 0;
    for (; list; list = list->next)
        w->expired[k++] = AX_CONTAINER_OF(list, struct run_timer, node);
    for (size_t i = 0; i < k; i++) {
        struct run_timer *rt = w->expired[i];
        wheel_lock(w);
        bool rearmed = ax_wheel_node_armed(&rt->node);
        wheel_unlock(w);
        if (rearmed)
            continue; /* re-armed by an earlier handler: it fires later */
        rt->node.next = NULL;
        /* A sleep and the deadline of one run may expire together: the
         * deadline was armed first, so it comes out first and the sleep's
         * timer is disarmed by the wake. */
        handle_timer(w, rt);
    }
}

/* Build the coroutine for a job that dispatch made STARTING (it holds a
 * slot); NULL if the attempt ended instead (deadline passed, no memory). */
struct ax_task *run_start(struct worker *w, struct job *j)
{
    struct ax_sched *s = w->s;
    uint64_t now = w->now_ns;
    unsigned attempt = js_attempt(atomic_load_explicit(&j->sw, memory_order_acquire));
    uint64_t gen = job_gen(j);

    if (j->deadline_ns && now >= j->deadline_ns) {
        finish_running(s, w, j, gen, attempt, JS_TIMED_OUT, AX_ETIMEDOUT,
                       "deadline passed while queued", 0, JH_RUN);
        return NULL;
    }
    struct ax_task *t = w->run_warm;
    struct ax_stack *stk = NULL;
    bool warm = t != NULL;
    if (warm) {
        w->run_warm = t->next;
        w->nrun_warm--;
        t->next = NULL;
        stk = t->stack;
    } else {
        t = run_alloc(w);
        if (!t || ax_stack_acquire(&w->stacks, &stk) != 0) {
            if (t) {
                t->next = w->run_free;
                w->run_free = t;
            }
            finish_running(s, w, j, gen, attempt, JS_FAILED, AX_ENOMEM,
                           "out of memory for a coroutine stack", 0, JH_RUN);
            return NULL;
        }
    }
    stacks_in_use_add(w, 1);
    w->live_runs++;
    ends_add(&w->ends.live, 1);

    t->job = j;
    t->id = j->id;
    t->gen = gen;
    t->attempt = attempt;
    t->prio = j->prio;
    t->stack = stk;
    stk->user = t;
    t->start_ns = now;
    t->wait_ns = j->wait_ns;
    t->deadline_ns = now + j->timeout_ns;
    if (j->deadline_ns && j->deadline_ns < t->deadline_ns)
        t->deadline_ns = j->deadline_ns;
    t->expect_sw = js_make(gen, attempt, JS_RUNNING, 0);
    t->rs = RS_NEW;
    t->panicked = t->began = t->bt_req = t->overflowed = t->detached_calls = t->warm = 0;
    t->switched = 0;
    t->start_slack = w->clock_stale;
    t->unwind = NULL;
    t->bt_n = 0;
    t->code = 0;
    t->err[0] = 0;
    t->trace[0] = 0;
    t->ndefers = 0;
    t->defers = t->defer_inline;
    t->defer_cap = AX_DEFER_INLINE;
    t->nchildren = 0;
    t->children = t->child_inline;
    t->child_cap = AX_CHILD_INLINE;
    t->join_child = NULL;
    t->deadline_timer.run = t;
    t->deadline_timer.kind = TIMER_DEADLINE;
    t->wait_timer.run = t;
    t->wait_timer.kind = TIMER_WAIT;
    if (!warm)
        ax_coro_init(&t->coro, stk->lo, stk->size, run_entry, t);

    /* Arm the deadline and publish the run before the task can be RUNNING. */
    worker_timer_add(w, &t->deadline_timer.node, t->deadline_ns);
    j->run = t;
    j->run_life = t->life_gen;
    return t;
}
