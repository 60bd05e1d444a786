/* exec.c - layer 3: workers run tasks as coroutines (seed §3.1, §3.2).
 *
 * Each worker is one thread with its own ready queue, timing wheel, epoll
 * reactor and stack pool; nothing here is shared except through s->lock
 * (dispatch) and the inbox (wake-ups from other threads). One loop
 * iteration:
 *
 *   1. drain the inbox (cancellations, joins completed on other threads)
 *   2. advance the wheel: deadlines and sleeps that are due
 *   3. resume every run that was ready when the iteration began, once each
 *      (a run that yields goes to the back: the next iteration)
 *   4. one lock section: apply this iteration's slot releases and counters,
 *      take up to DISPATCH_BATCH jobs by quota rounds, start them
 *   5. nothing ready: spin briefly, then sleep in epoll_wait until the next
 *      timer, fd event or kick. No periodic tick: an idle worker uses no CPU.
 *
 * Starting a job (start_job): acquire a stack, build the coroutine, arm the
 * attempt's deadline in the wheel, publish the run in the job, and only then
 * CAS STARTING -> RUNNING, so the timeout and cancel paths exist before the
 * task is RUNNING (DESIGN.md §3). The task function never runs on the
 * worker's own stack.
 *
 * A task that never yields holds its worker; the other workers keep
 * dispatching (they take jobs themselves), and the monitor thread enforces
 * that task's deadline from outside (monitor.c). DISPATCH_BATCH bounds how
 * many freshly taken jobs can be stuck behind such a task.
 *
 * Hot: worker_loop, resume, start_job, complete_run, dispatch. No malloc on
 * them once pools are warm (runs and stacks are recycled), no syscall unless
 * a stack pool grows or the worker goes to sleep.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DISPATCH_BATCH 8
#define RUN_CHUNK 64
#define DIRECT_BUDGET 16
#define STACK_WARM_KEEP 64   /* released stacks kept resident per worker */
#define STACK_TRIM_CHUNK 128 /* stacks trimmed per idle moment */
#define SPIN_NS 50000 /* polling before epoll_wait */

_Thread_local struct ax_task *ax_current_run;
_Thread_local struct worker *ax_current_worker;

void ready_push(struct worker *w, struct ax_task *t)
{
    t->next = NULL;
    if (w->ready_tail)
        w->ready_tail->next = t;
    else
        w->ready_head = t;
    w->ready_tail = t;
    w->nready++;
}

static struct ax_task *ready_pop(struct worker *w)
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

static void run_recycle(struct worker *w, struct ax_task *t)
{
    ax_coro_destroy(&t->coro);
    if (t->stack) {
        ax_stack_release(&w->stacks, t->stack);
        t->stack = NULL;
        atomic_fetch_sub_explicit(&w->stacks_in_use, 1, memory_order_relaxed);
    }
    if (t->defers != t->defer_inline)
        free(t->defers);
    if (t->children != t->child_inline)
        free(t->children);
    t->defers = NULL;
    t->children = NULL;
    t->life_gen++;
    t->park_gen++;
    t->next = w->run_free;
    w->run_free = t;
    w->live_runs--;
    /* release: ax_shutdown reads 0 here as "every coroutine and its fds are done" */
    atomic_fetch_sub_explicit(&w->s->total_live_runs, 1, memory_order_release);
}

/* Drop a job reference from the worker: the last one is freed in the next
 * dispatch lock section instead of taking the lock now. */
static void worker_unref(struct worker *w, struct job *j)
{
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1) {
        j->next = w->pend.free_list;
        w->pend.free_list = j;
    }
}

/* ---- the coroutine side --------------------------------------------------- */

/* Run cleanups LIFO and leave the coroutine for good. Called on the task's
 * stack, by a normal return and by ax_panic. */
_Noreturn void run_exit(struct ax_task *t)
{
    while (t->ndefers > 0) {
        struct defer_entry d = t->defers[--t->ndefers];
        d.fn(d.arg);
    }
    t->finished = 1;
    ax_coro_switch_final(&t->coro, &t->w->main);
    abort(); /* unreachable: a finished coroutine is never resumed */
}

static void run_entry(void *arg)
{
    struct ax_task *t = arg;
    struct job *j = t->job;
    t->started = 1;
    t->code = j->fn(t, j->arg);
    run_exit(t);
}

int run_detached_rc(const struct ax_task *t)
{
    uint64_t sw = atomic_load_explicit(&t->job->sw, memory_order_acquire);
    if (AX_LIKELY(sw == t->expect_sw))
        return 0;
    return now_ns() >= t->deadline_ns ? AX_ETIMEDOUT : AX_ECANCELED;
}

int run_park(struct ax_task *t)
{
    t->park_gen++;
    ax_coro_switch(&t->coro, &t->w->main);
    while (AX_UNLIKELY(t->bt_req)) {
        /* Resumed only so that a lingering report can say where we are. */
        t->bt_n = backtrace(t->bt, AX_BT_MAX);
        t->bt_req = 0;
        ax_coro_switch(&t->coro, &t->w->main);
    }
    return t->wake_rc;
}

void run_wake(struct ax_task *t, int rc)
{
    struct worker *w = t->w;
    switch (t->parked) {
    case PARK_NONE:
    case PARK_YIELD:
        return;
    case PARK_FD:
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, t->wait_fd, NULL);
        w->nfd_waits--;
        break;
    case PARK_EXT:
        if (t->on_unpark)
            t->on_unpark(t);
        break;
    case PARK_JOIN: {
        struct job *c = t->join_child;
        pthread_mutex_lock(&w->s->lock);
        if (c->joiner == t)
            c->joiner = NULL;
        pthread_mutex_unlock(&w->s->lock);
        break;
    }
    default:
        break;
    }
    ax_wheel_del(&w->wheel, &t->wait_timer.node);
    t->parked = PARK_NONE;
    t->wake_rc = rc;
    ready_push(w, t);
}

/* ---- the worker side ---------------------------------------------------- */

static void publish_current(struct worker *w, struct ax_task *t)
{
    /* A seqlock so the monitor reads (job, sw, deadline) of one run, never a
     * mix of two: odd while writing. Relaxed stores plus fences: on x86 this
     * costs a few plain moves per switch. */
    uint64_t seq = atomic_load_explicit(&w->pub_seq, memory_order_relaxed);
    atomic_store_explicit(&w->pub_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&w->pub_job, t->job, memory_order_relaxed);
    atomic_store_explicit(&w->pub_sw, t->expect_sw, memory_order_relaxed);
    atomic_store_explicit(&w->pub_deadline_ns, t->deadline_ns, memory_order_relaxed);
    atomic_store_explicit(&w->pub_seq, seq + 2, memory_order_release);
}

static void complete_run(struct worker *w, struct ax_task *t);

/* ax_yield's fast path: from the running task straight to the next ready
 * one, without a round trip through the worker loop (one switch instead of
 * two plus a loop iteration). Allowed DIRECT_BUDGET times per iteration so
 * that timers, the inbox and dispatch are still looked at regularly. */
bool run_switch_direct(struct ax_task *t)
{
    struct worker *w = t->w;
    if (w->direct_budget == 0 || !w->ready_head)
        return false;
    w->direct_budget--;
    struct ax_task *next = ready_pop(w);
    ready_push(w, t);
    w->current = next;
    ax_current_run = next;
    publish_current(w, next);
    ax_coro_switch(&t->coro, &next->coro);
    return true;
}

static void resume(struct worker *w, struct ax_task *t)
{
    w->current = t;
    ax_current_run = t;
    publish_current(w, t);
    ax_coro_switch(&w->main, &t->coro);
    /* Not necessarily t: a yield may have switched straight to another run
     * (run_switch_direct), and that one came back. */
    t = w->current;
    ax_current_run = NULL;
    w->current = NULL;
    w->now_ns = now_ns();
    if (t->finished)
        complete_run(w, t);
}

/* The function returned (or panicked): decide the outcome unless a timeout
 * or cancellation already did, then recycle the run. Worker stack. */
static void complete_run(struct worker *w, struct ax_task *t)
{
    struct job *j = t->job;
    ax_wheel_del(&w->wheel, &t->deadline_timer.node);
    ax_wheel_del(&w->wheel, &t->wait_timer.node);
    if (t->nchildren)
        join_release_children(t);
    unsigned state = t->code == 0 && !t->panicked ? AX_STATE_SUCCEEDED : AX_STATE_FAILED;
    if (t->panicked)
        crash_report(w, t);
    uint64_t expect = t->expect_sw;
    if (atomic_compare_exchange_strong(&j->sw, &expect, sw_make(j->id, t->attempt, state))) {
        j->run_ns = w->now_ns - t->start_ns;
        int code = t->panicked ? AX_EPANIC : t->code;
        if (state == AX_STATE_FAILED && t->err[0] == 0)
            snprintf(t->err, sizeof t->err, "task returned %d", t->code);
        finish_attempt(w->s, w, j, state, code, state == AX_STATE_SUCCEEDED ? "" : t->err, true);
    }
    if (t->panicked)
        wc_inc(&w->counts.panicked);
    t->finished = 0;
    t->job = NULL;
    run_recycle(w, t);
    worker_unref(w, j);
}

/* The attempt's deadline fired on this worker's wheel. */
static void deadline_fired(struct worker *w, struct ax_task *t)
{
    struct job *j = t->job;
    uint64_t expect = t->expect_sw;
    bool won = atomic_compare_exchange_strong(&j->sw, &expect,
                                              sw_make(j->id, t->attempt, AX_STATE_TIMED_OUT));
    if (won || sw_state(expect) == AX_STATE_TIMED_OUT)
        linger_track(w, t); /* timed out (by us or the monitor), not cancelled */
    if (won) {
        j->run_ns = w->now_ns - t->start_ns;
        char msg[64];
        snprintf(msg, sizeof msg, "timed out after %llu ms",
                 (unsigned long long)((t->deadline_ns - t->start_ns) / 1000000u));
        finish_attempt(w->s, w, j, AX_STATE_TIMED_OUT, AX_ETIMEDOUT, msg, true);
    }
    t->orphan = 1; /* whoever won, the run now goes on without its job */
    run_wake(t, AX_ETIMEDOUT);
}

static void expire_timers(struct worker *w)
{
    uint64_t tick = ns_to_tick(w->now_ns);
    if (ax_wheel_next(&w->wheel) > tick)
        return;
    struct ax_wheel_node *list = NULL;
    size_t n = ax_wheel_advance(&w->wheel, tick, &list);
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
                if (rt->kind == TIMER_DEADLINE)
                    deadline_fired(w, rt->run);
                else if (rt->kind == TIMER_WAIT)
                    run_wake(rt->run, rt->run->parked == PARK_SLEEP ? 0 : AX_ETIMEDOUT);
                else
                    rt->fire(rt, w);
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
        if (ax_wheel_node_armed(&rt->node))
            continue; /* re-armed by an earlier handler: it fires later */
        rt->node.next = NULL;
        /* A sleep and the deadline of one run may expire together: the
         * deadline was armed first, so it comes out first and the sleep's
         * timer is disarmed by the wake. */
        if (rt->kind == TIMER_DEADLINE)
            deadline_fired(w, rt->run);
        else if (rt->kind == TIMER_EXT)
            rt->fire(rt, w);
        else
            run_wake(rt->run, rt->run->parked == PARK_SLEEP ? 0 : AX_ETIMEDOUT);
    }
}

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
        if (m->rc == AX_ECANCELED && run_detached_rc(t))
            t->orphan = 1;
        if (m->park_gen != 0 && t->park_gen != m->park_gen)
            continue; /* a later park: this wake-up was for an earlier one */
        run_wake(t, m->rc);
    }
    pthread_mutex_lock(&w->inbox_lock);
    w->inbox_spare = msgs;
    w->inbox_spare_cap = cap;
    pthread_mutex_unlock(&w->inbox_lock);
}

int reactor_src_add(struct worker *w, int fd, uint32_t events, struct reactor_src *src, bool mod)
{
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)(uintptr_t)src | 1u};
    if (epoll_ctl(w->epfd, mod ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
        return -errno;
    if (!mod)
        w->nfd_waits++;
    return 0;
}

void reactor_src_del(struct worker *w, int fd)
{
    if (epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) == 0)
        w->nfd_waits--;
}

void worker_timer_arm(struct worker *w, struct run_timer *rt, uint64_t at_ns)
{
    ax_wheel_del(&w->wheel, &rt->node);
    rt->kind = TIMER_EXT;
    ax_wheel_add(&w->wheel, &rt->node, ns_to_tick_ceil(at_ns));
}

void worker_timer_disarm(struct worker *w, struct run_timer *rt)
{
    ax_wheel_del(&w->wheel, &rt->node);
}

void worker_kick(struct worker *w)
{
    uint64_t one = 1;
    ssize_t r = write(w->evfd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is already non-zero, the worker will wake */
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

/* Build the coroutine for a job taken from its bucket and make it ready.
 * The job is STARTING and holds a slot. */
static void start_job(struct worker *w, struct job *j)
{
    struct ax_sched *s = w->s;
    uint64_t now = w->now_ns;
    unsigned attempt = j->attempt;
    uint64_t starting = sw_make(j->id, attempt, JS_STARTING);

    if (j->deadline_ns && now >= j->deadline_ns) {
        uint64_t e = starting;
        if (atomic_compare_exchange_strong(&j->sw, &e,
                                           sw_make(j->id, attempt, AX_STATE_TIMED_OUT)))
            finish_attempt(s, w, j, AX_STATE_TIMED_OUT, AX_ETIMEDOUT,
                           "deadline passed while queued", true);
        worker_unref(w, j); /* the reference dispatch took for the run */
        return;
    }
    struct ax_task *t = run_alloc(w);
    struct ax_stack *stk = NULL;
    if (!t || ax_stack_acquire(&w->stacks, &stk) != 0) {
        if (t) {
            t->next = w->run_free;
            w->run_free = t;
        }
        uint64_t e = starting;
        if (atomic_compare_exchange_strong(&j->sw, &e, sw_make(j->id, attempt, AX_STATE_FAILED)))
            finish_attempt(s, w, j, AX_STATE_FAILED, AX_ENOMEM,
                           "out of memory for a coroutine stack", true);
        worker_unref(w, j);
        return;
    }
    atomic_fetch_add_explicit(&w->stacks_in_use, 1, memory_order_relaxed);
    w->live_runs++;
    atomic_fetch_add_explicit(&s->total_live_runs, 1, memory_order_relaxed);
    /* The run owns the reference dispatch took: a cancel that ends the job
     * while it is STARTING cannot free it under us. */

    t->job = j;
    t->id = j->id;
    t->attempt = attempt;
    t->prio = j->prio;
    t->stack = stk;
    stk->user = t;
    t->start_ns = now;
    t->deadline_ns = now + j->timeout_ns;
    if (j->deadline_ns && j->deadline_ns < t->deadline_ns)
        t->deadline_ns = j->deadline_ns;
    t->expect_sw = sw_make(j->id, attempt, AX_STATE_RUNNING);
    t->parked = PARK_NONE;
    t->panicked = t->finished = t->orphan = t->started = t->bt_req = t->overflowed = 0;
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
    ax_coro_init(&t->coro, stk->lo, stk->size, run_entry, t);

    /* Arm the deadline and publish the run before the task is RUNNING. */
    ax_wheel_add(&w->wheel, &t->deadline_timer.node, ns_to_tick_ceil(t->deadline_ns));
    j->run = t;
    j->run_life = t->life_gen;
    uint64_t e = starting;
    if (!atomic_compare_exchange_strong(&j->sw, &e, t->expect_sw)) {
        /* Cancelled while STARTING: the canceller finalized the job and
         * released the slot. The function never runs. */
        ax_wheel_del(&w->wheel, &t->deadline_timer.node);
        t->job = NULL;
        run_recycle(w, t);
        worker_unref(w, j);
        return;
    }
    metrics_record_wait(s, w, j->prio, j->wait_ns);
    EV(s, w, j, AX_EV_STARTED, 0, NULL);
    ready_push(w, t);
}

/* The one lock section of an iteration: apply what this worker finished,
 * take new jobs by quota rounds. */
static void dispatch(struct worker *w)
{
    struct ax_sched *s = w->s;
    struct job *take[DISPATCH_BATCH];
    unsigned n = 0;
    bool more = false;
    struct worker_pending *p = &w->pend;

    /* Fast path: nothing to apply and nothing we could take. */
    if (!p->free_list &&
        (atomic_load_explicit(&s->hint_queued, memory_order_relaxed) == 0 ||
         atomic_load_explicit(&s->hint_blocked, memory_order_relaxed)))
        return;

    pthread_mutex_lock(&s->lock);
    unsigned running = running_locked(s);
    if (p->free_list) {
        while (p->free_list) {
            struct job *j = p->free_list;
            p->free_list = j->next;
            job_free_locked(s, j);
        }
        *p = (struct worker_pending){0};
    }
    if (s->closing && running == 0)
        pthread_cond_broadcast(&s->idle_cond);
    /* Take new work even while runs are ready (a task yielding in a loop
     * must not keep queued tasks out), but no more than a batch in all. */
    unsigned want = w->nready < DISPATCH_BATCH ? DISPATCH_BATCH - w->nready : 1;
    if (!s->paused && !s->closing && want) {
        struct job *j;
        while (n < want && s->running < s->cap && (j = sched_pick_locked(s))) {
            if (ax_wheel_node_armed(&j->tnode))
                monitor_del_locked(s, j); /* its queued-deadline timer */
            atomic_store_explicit(&j->sw, sw_make(j->id, j->attempt, JS_STARTING),
                                  memory_order_relaxed);
            job_ref(j); /* becomes the run's reference (start_job) */
            s->running++;
            s->st.started++;
            j->wait_ns = w->now_ns > j->enqueue_ns ? w->now_ns - j->enqueue_ns : 0;
            j->run_ns = 0;
            take[n++] = j;
        }
        more = n == want && s->running < s->cap &&
               (s->b[0].head || s->b[1].head || s->b[2].head);
    }
    pthread_mutex_unlock(&s->lock);
    if (more)
        sched_wake_workers(s, 1); /* more work than one batch: get help */
    for (unsigned i = 0; i < n; i++)
        start_job(w, take[i]);
}

static bool work_available(struct worker *w)
{
    struct ax_sched *s = w->s;
    bool yes;
    pthread_mutex_lock(&w->inbox_lock);
    yes = w->ninbox > 0;
    pthread_mutex_unlock(&w->inbox_lock);
    if (yes)
        return true;
    pthread_mutex_lock(&s->lock);
    yes = !s->paused && !s->closing && running_locked(s) < s->cap &&
          (s->b[0].head || s->b[1].head || s->b[2].head);
    yes = yes || w->pend.free_list;
    pthread_mutex_unlock(&s->lock);
    return yes;
}

/* Handle fd events; returns true if any run became ready. */
static void reactor_dispatch(struct worker *w, struct epoll_event *ev, int n)
{
    for (int i = 0; i < n; i++) {
        if (ev[i].data.u64 & 1) {
            struct reactor_src *src = (struct reactor_src *)(uintptr_t)(ev[i].data.u64 & ~1ull);
            src->on_event(src, w, ev[i].events);
            continue;
        }
        struct ax_task *t = ev[i].data.ptr;
        if (t == NULL) {
            uint64_t v;
            ssize_t r = read(w->evfd, &v, sizeof v);
            (void)r;
            continue;
        }
        if (t->parked == PARK_FD)
            run_wake(t, 0);
    }
    if (w->reactor_done)
        w->reactor_done(w);
}

/* epoll_pwait2 (Linux >= 5.11) takes a nanosecond timeout; older kernels
 * get epoll_wait with the timeout rounded up to a millisecond. */
static int reactor_wait(struct worker *w, struct epoll_event *ev, int max, const struct timespec *ts)
{
    static _Atomic int no_pwait2;
#ifdef SYS_epoll_pwait2
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        int n = (int)syscall(SYS_epoll_pwait2, w->epfd, ev, max, ts, NULL, 0);
        if (n >= 0 || errno != ENOSYS)
            return n;
        atomic_store(&no_pwait2, 1);
    }
#endif
    int ms = -1;
    if (ts)
        ms = (int)(ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000);
    return epoll_wait(w->epfd, ev, max, ms);
}

static void worker_sleep(struct worker *w)
{
    struct ax_sched *s = w->s;
    struct epoll_event ev[64];

    /* Spin a little before sleeping: a burst usually brings more work
     * within microseconds, while sleeping costs the next task an eventfd
     * write and a wake-up (~50-100 µs on this VM: bench "dispatch latency").
     * The spin reads only the lock-free hints, and ends after SPIN_NS or as
     * soon as a timer is due. */
    /* Sockets do not show in the hints: with fds waited on, spin briefly. */
    uint64_t spin_end = now_ns() + (w->nfd_waits ? SPIN_NS / 10 : SPIN_NS);
    uint64_t next_tick = ax_wheel_next(&w->wheel);
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&w->inbox_hint, memory_order_relaxed) ||
            (atomic_load_explicit(&s->hint_queued, memory_order_relaxed) &&
             !atomic_load_explicit(&s->hint_blocked, memory_order_relaxed)))
            return;
        if ((i & 63) == 0) {
            uint64_t now = now_ns();
            if (now >= spin_end || ns_to_tick(now) >= next_tick)
                break;
        }
        ax_cpu_relax();
    }
    /* Sleep until the next tick with work, to the nanosecond: epoll_wait's
     * whole milliseconds made timers up to a millisecond later still. */
    uint64_t next = ax_wheel_next(&w->wheel);
    struct timespec ts, *tsp = NULL;
    if (next != UINT64_MAX) {
        uint64_t now = now_ns(), at = next * 1000000u;
        uint64_t d = at > now ? at - now : 0;
        if (d > 86400ull * 1000000000u)
            d = 86400ull * 1000000000u;
        ts.tv_sec = (time_t)(d / 1000000000u);
        ts.tv_nsec = (long)(d % 1000000000u);
        tsp = &ts;
    }
    /* Idle: return released stacks' memory, a chunk at a time so a burst of
     * timers is not kept waiting; come back in a millisecond for more. */
    if (w->stacks.n_warm > STACK_WARM_KEEP) {
        size_t keep = w->stacks.n_warm - STACK_TRIM_CHUNK;
        ax_stack_pool_trim(&w->stacks, keep > STACK_WARM_KEEP ? keep : STACK_WARM_KEEP);
        if (w->stacks.n_warm > STACK_WARM_KEEP && (!tsp || ts.tv_sec > 0 || ts.tv_nsec > 1000000)) {
            ts.tv_sec = 0;
            ts.tv_nsec = 1000000;
            tsp = &ts;
        }
    }
    atomic_fetch_add(&s->nsleeping, 1);
    atomic_store(&w->sleeping, 1);
    atomic_store(&w->busy, 0);
    if (work_available(w) || (atomic_load(&s->stop) && w->live_runs == 0)) {
        atomic_store(&w->sleeping, 0);
        atomic_fetch_sub(&s->nsleeping, 1);
        /* busy was 0 for a moment: the monitor may have gone to sleep for
         * good meanwhile, and must watch what we run next. */
        atomic_store(&w->busy, 1);
        if (atomic_load_explicit(&s->monitor_idle, memory_order_seq_cst))
            monitor_kick(s);
        return;
    }
    int n = reactor_wait(w, ev, 64, tsp);
    atomic_store(&w->sleeping, 0);
    atomic_fetch_sub(&s->nsleeping, 1);
    atomic_store(&w->busy, 1);
    if (atomic_load_explicit(&s->monitor_idle, memory_order_seq_cst))
        monitor_kick(s);
    if (n > 0)
        reactor_dispatch(w, ev, n);
}

void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct ax_sched *s = w->s;
    struct epoll_event ev[64];
    ax_current_worker = w;
    void *altstack = crash_altstack_enter(); /* where a stack overflow is handled */
    ax_coro_init_main(&w->main);
    atomic_store(&w->busy, 1);
    if (atomic_load(&s->monitor_idle))
        monitor_kick(s);
    for (;;) {
        w->now_ns = now_ns();
        drain_inbox(w);
        if (w->nfd_waits) {
            int n = epoll_wait(w->epfd, ev, 64, 0);
            if (n > 0)
                reactor_dispatch(w, ev, n);
        }
        expire_timers(w);
        if (AX_UNLIKELY(w->nlinger))
            linger_check(w);
        w->direct_budget = DIRECT_BUDGET;
        for (unsigned n = w->nready; n > 0; n--) {
            struct ax_task *t = ready_pop(w);
            if (!t)
                break;
            resume(w, t);
        }
        dispatch(w);
        if (w->nready)
            continue;
        if (atomic_load(&s->stop) && w->live_runs == 0)
            break;
        worker_sleep(w);
    }
    atomic_store(&w->busy, 0);
    crash_altstack_leave(altstack);
    return NULL;
}

int worker_init(struct ax_sched *s, struct worker *w, unsigned index)
{
    w->s = s;
    w->index = index;
    w->epfd = w->evfd = -1;
    pthread_mutex_init(&w->inbox_lock, NULL);
    ax_wheel_init(&w->wheel, ns_to_tick(now_ns()));
    struct ax_stack_config sc;
    ax_stack_config_default(&sc);
    sc.stack_size = s->cfg.stack_size;
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
    for (unsigned i = 0; i < w->nrun_chunks; i++)
        free(w->run_chunks[i]);
    free(w->run_chunks);
    free(w->inbox);
    free(w->inbox_spare);
    free(w->expired);
    ax_stack_pool_destroy(&w->stacks);
    pthread_mutex_destroy(&w->inbox_lock);
}
