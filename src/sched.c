/* sched.c - layer 2: priority buckets and quota rounds (seed §2.2, §3.3).
 *
 * Three FIFO buckets. Dispatch works in rounds over the fixed order
 * HIGH, NORMAL, LOW: a turn takes up to quota[p] tasks from bucket p, then
 * passes to the next bucket; a bucket that is empty passes its turn at once.
 * So with all three busy a round is quota_high H, quota_normal N,
 * low_guaranteed L, and the head of LOW waits at most
 * quota_high + quota_normal dispatches; when HIGH and NORMAL are empty, LOW
 * takes every turn. With max_concurrency = 1 and quotas 2/1/1, H×4 N×4 L×4
 * start as H H N L H H N L N L N L (tests/test_quota.c).
 *
 * The round state (rr, rr_taken) survives between dispatches and between
 * bursts: a burst does not reset LOW's guarantee.
 *
 * Slots and load: `running` counts slots held (STARTING + RUNNING), `load`
 * every admitted job not yet terminal (the shed line). Both are changed
 * under s->lock, or without it through counts that the next lock holder
 * folds in (running_locked, load_locked), so a slot is free the moment its
 * attempt ends, whoever ends it: a worker's own `ends.freed` /
 * `ends.unloaded` (one writer each, no locked instruction), or the shared
 * `freed` / `unloaded` atomics for every other thread.
 *
 * The scheduler's timer wheel (jwheel) holds the timers of jobs that sit in
 * no worker's hands: the end of a delay (DELAYED), of a back-off (RETRYING),
 * and the absolute deadline of a queued job. They belong with the buckets
 * (they move jobs into and out of them) and are guarded by the same lock.
 * sched_expire_locked runs in a worker's dispatch lock section; worker 0
 * sleeps until the wheel's next expiry; the watchdog expires it only if no
 * worker got to it in time (all held). Terminal paths of jobs it ends run
 * on that worker after the unlock, or on the callback pool, never under the
 * lock and never on the watchdog.
 *
 * Everything here runs under s->lock and is O(1) (a pick may look at three
 * buckets). Hot: bucket_push_locked (every submit), sched_pick_locked (every
 * dispatch).
 */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static const uint8_t round_order[AX_PRIO_COUNT] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};

/* Whether a worker could take a job from the buckets' lists (parked ones
 * it cannot). Stored only when that changes: every worker loop reads the
 * hint, so a store on every push and pick (the count, before) moved its
 * line to the storing core and back twice a task, and the store drained
 * before the unlock did (bench ax_fullpath, 1 worker, on a VM with a
 * 430 ns cache-line round trip between its vCPUs: see job.c). */
static inline void hint_queued_locked(struct ax_sched *s)
{
    unsigned any = s->b[0].n + s->b[1].n + s->b[2].n > s->parked_total;
    if (atomic_load_explicit(&s->hint_queued, memory_order_relaxed) != any)
        atomic_store_explicit(&s->hint_queued, any, memory_order_relaxed);
}

/* ---- the buckets' rings (internal.h: struct bucket) ------------------------ */

static inline uint32_t job_slot(const struct job *j)
{
    return (uint32_t)(j->id & (AX_MAX_JOBS - 1));
}

static inline struct job *slot_job(const struct ax_sched *s, uint32_t slot)
{
    return &s->chunks[slot / AX_JOB_CHUNK][slot % AX_JOB_CHUNK];
}

static inline uint32_t ring_used(const struct bucket *b)
{
    return b->rt - b->rh; /* jobs and RING_GONE between the ends */
}

/* The first job of p's ring, or NULL. */
static inline struct job *ring_first(const struct ax_sched *s, const struct bucket *b)
{
    return bucket_nonempty(b) ? slot_job(s, b->ring[b->rh & b->mask]) : NULL;
}

/* Move to a ring of `size` entries (a power of two >= ring_used): the
 * positions stay, so no job's bpos changes. */
static int ring_resize(struct bucket *b, uint32_t size)
{
    uint32_t *r = malloc((size_t)size * sizeof *r);
    if (!r)
        return ax_fail_static(AX_ENOMEM, "out of memory for a priority bucket");
    for (uint32_t pos = b->rh; pos != b->rt; pos++)
        r[pos & (size - 1)] = b->ring[pos & b->mask];
    free(b->ring);
    b->ring = r;
    b->mask = size - 1;
    return AX_OK;
}

/* The ring is full (of jobs and gaps): close the gaps, keeping the order.
 * At most half are jobs (bucket_reserve_locked), so this frees half. */
static void ring_compact(struct ax_sched *s, struct bucket *b)
{
    uint32_t to = b->rh;
    for (uint32_t pos = b->rh; pos != b->rt; pos++) {
        uint32_t slot = b->ring[pos & b->mask];
        if (slot == RING_GONE)
            continue;
        b->ring[to & b->mask] = slot;
        slot_job(s, slot)->bpos = to;
        to++;
    }
    b->rt = to;
}

int bucket_reserve_locked(struct ax_sched *s, unsigned p)
{
    struct bucket *b = &s->b[p];
    uint64_t want = 2 * ((uint64_t)s->live_prio[p] + 1);
    if (b->ring && want <= (uint64_t)b->mask + 1)
        return AX_OK;
    uint64_t size = b->ring ? (uint64_t)b->mask + 1 : 64;
    while (size < want)
        size *= 2;
    if (size > (uint64_t)2 * AX_MAX_JOBS)
        return ax_fail_static(AX_ENOMEM, "a priority bucket is at its largest");
    return ring_resize(b, (uint32_t)size);
}

void buckets_destroy(struct ax_sched *s)
{
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        free(s->b[p].ring);
        s->b[p].ring = NULL;
    }
}

/* Take j out of its bucket's ring: the ends move past any gaps. */
static void ring_remove(struct bucket *b, struct job *j)
{
    b->ring[j->bpos & b->mask] = RING_GONE;
    if (j->bpos == b->rh)
        while (b->rh != b->rt && b->ring[b->rh & b->mask] == RING_GONE)
            b->rh++;
    else if (j->bpos == b->rt - 1)
        while (b->rt != b->rh && b->ring[(b->rt - 1) & b->mask] == RING_GONE)
            b->rt--;
}

void bucket_push_locked(struct ax_sched *s, struct job *j)
{
    struct bucket *b = &s->b[j->prio];
    if (AX_UNLIKELY(ring_used(b) > b->mask))
        ring_compact(s, b);
    j->bpos = b->rt;
    b->ring[b->rt++ & b->mask] = job_slot(j);
    b->n++;
    hint_queued_locked(s);
    if (AX_UNLIKELY(j->cls))
        s->classes[j->cls]->queued++;
}

/* Off its class's park list (s->lock): back to plain QUEUED-in-a-bucket
 * bookkeeping, in no list. */
static void unpark_unlink_locked(struct ax_sched *s, struct job *j)
{
    struct ax_class_rt *c = s->classes[j->cls];
    unsigned p = j->prio;
    if (j->prev)
        j->prev->next = j->next;
    else
        c->park[p].head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        c->park[p].tail = j->prev;
    j->next = j->prev = NULL;
    j->parked = 0;
    s->b[p].parked--;
    s->parked_total--;
    atomic_store_explicit(&c->nparked, atomic_load_explicit(&c->nparked, memory_order_relaxed) - 1,
                          memory_order_relaxed);
}

void bucket_remove_locked(struct ax_sched *s, struct job *j)
{
    struct bucket *b = &s->b[j->prio];
    if (AX_UNLIKELY(j->parked)) {
        unpark_unlink_locked(s, j); /* cancelled, expired or drained while parked */
    } else {
        ring_remove(b, j);
    }
    b->n--;
    hint_queued_locked(s);
    if (AX_UNLIKELY(j->cls))
        s->classes[j->cls]->queued--;
}

/* A job handed back by the watchdog goes to the head: it was first. */
void bucket_push_front_locked(struct ax_sched *s, struct job *j)
{
    struct bucket *b = &s->b[j->prio];
    if (AX_UNLIKELY(ring_used(b) > b->mask))
        ring_compact(s, b);
    j->bpos = --b->rh;
    b->ring[b->rh & b->mask] = job_slot(j);
    b->n++;
    hint_queued_locked(s);
    if (AX_UNLIKELY(j->cls))
        s->classes[j->cls]->queued++;
}

/* ---- parking: jobs of a class at its limit wait off their bucket's list ---- */

static void class_end_locked(struct ax_sched *s, struct job *j, unsigned why, uint64_t now,
                             struct job **ended);

/* When a parked job's wait must be looked at again: its queue-time
 * budget's end, or its deadline if that comes first (0: neither). */
static uint64_t parked_due(struct ax_class_rt *c, const struct job *j)
{
    uint64_t due = c->cfg.queue_budget ? j->enqueue_ns + class_queue_budget_ns(c, j) + 1 : 0;
    if (j->deadline_ns && (!due || j->deadline_ns < due))
        due = j->deadline_ns;
    return due;
}

/* Move j (in its bucket's list; its class cannot start it now) onto its
 * class's park list for its priority, kept in queue order (enqueue_ns), so
 * that the pick can take the oldest one first. It stays QUEUED and counted
 * in b->n (bounds, stats) and in the class's queued; only hint_queued drops.
 * Its timer now also covers its queue-time budget: a parked job past it ends
 * at that time (sched_expire_locked), not when its class next has room.
 * limit_blocked: blocked by the limit (not by half-open probes, whose
 * outcomes wake the class): room that appeared meanwhile is flagged here. */
static void park_locked(struct ax_sched *s, struct job *j, bool limit_blocked)
{
    struct bucket *b = &s->b[j->prio];
    struct ax_class_rt *c = s->classes[j->cls];
    ring_remove(b, j);
    unsigned p = j->prio;
    struct job *after = c->park[p].tail; /* the last one queued before j */
    while (after && after->enqueue_ns > j->enqueue_ns)
        after = after->prev;
    j->prev = after;
    j->next = after ? after->next : c->park[p].head;
    if (j->next)
        j->next->prev = j;
    else
        c->park[p].tail = j;
    if (after)
        after->next = j;
    else
        c->park[p].head = j;
    j->parked = 1;
    b->parked++;
    s->parked_total++;
    hint_queued_locked(s);
    uint64_t due = parked_due(c, j);
    if (due) {
        jtimer_del_locked(s, j);
        jtimer_arm_locked(s, j, due);
    }
    /* Published before the room is read again: a finisher decrements
     * in_flight, then reads nparked (class.c room_made); one of the two
     * sees the other. */
    atomic_store_explicit(&c->nparked, atomic_load_explicit(&c->nparked, memory_order_relaxed) + 1,
                          memory_order_seq_cst);
    if (limit_blocked && class_in_flight(c, memory_order_seq_cst) <
                             atomic_load_explicit(&c->limit, memory_order_seq_cst))
        atomic_store_explicit(&s->parked_ready, true, memory_order_relaxed);
}

/* ---- the scheduler's timer wheel ---------------------------------------- */

static void jwheel_publish_locked(struct ax_sched *s)
{
    uint64_t next = ax_wheel_next(&s->jwheel);
    uint64_t old = atomic_exchange_explicit(&s->jwheel_next, next, memory_order_seq_cst);
    /* Earlier than worker 0 planned to wake: it must look again. */
    if (next < old) {
        struct worker *w0 = &s->workers[0];
        int one = 1;
        if (atomic_compare_exchange_strong(&w0->sleeping, &one, 0))
            worker_kick(w0);
    }
}

void jtimer_arm_locked(struct ax_sched *s, struct job *j, uint64_t when_ns)
{
    ax_wheel_add(&s->jwheel, &j->tnode, ns_to_tick_ceil(when_ns));
    jwheel_publish_locked(s);
}

void jtimer_del_locked(struct ax_sched *s, struct job *j)
{
    if (!ax_wheel_node_armed(&j->tnode))
        return;
    ax_wheel_del(&s->jwheel, &j->tnode);
    atomic_store_explicit(&s->jwheel_next, ax_wheel_next(&s->jwheel), memory_order_relaxed);
}

/* Into its bucket for a new attempt (s->lock held; the word says QUEUED).
 * run_ns is the new attempt's, none yet: a retry ended before it runs
 * reports 0, not its failed predecessor's (ax_result.run_ns: > 0 exactly
 * when the last attempt ran; a review found the stale figure). */
static void enqueue_locked(struct ax_sched *s, struct job *j, uint64_t now)
{
    j->enqueue_ns = now;
    j->run_ns = 0;
    bucket_push_locked(s, j);
    if (j->deadline_ns)
        jtimer_arm_locked(s, j, j->deadline_ns);
}

void sched_enqueue_new_locked(struct ax_sched *s, struct job *j, uint64_t now, uint64_t delay_ns)
{
    if (delay_ns) {
        s->delayed++;
        s->delayed_prio[j->prio]++;
        jtimer_arm_locked(s, j, now + delay_ns);
    } else {
        enqueue_locked(s, j, now);
    }
}

void sched_leave_locked(struct ax_sched *s, struct job *j, uint64_t word)
{
    if (AX_UNLIKELY(j->cls))
        class_retry_dropped(s, j, word); /* s->lock, then c->lk: the order */
    /* `load` is folded lazily (submit.c folds it only near the shed line;
     * 64 bits, so the unfolded figure cannot wrap): a job leaving here is a
     * cold path, fold it on the way. Not in dispatch: with 2 workers that
     * exchange moved the enders' line at every batch (bench ax_fullpath,
     * 2 workers: ~8 %). */
    load_locked(s);
    jtimer_del_locked(s, j);
    switch (js_state(word)) {
    case JS_QUEUED:
        bucket_remove_locked(s, j);
        break;
    case JS_DELAYED:
        s->delayed--;
        s->delayed_prio[j->prio]--;
        break;
    case JS_RETRYING:
        if (word & JF_RETRY_ARMED) {
            s->delayed--;
            s->delayed_prio[j->prio]--;
        }
        break;
    default:
        break;
    }
}

int sched_retry_locked(struct ax_sched *s, struct job *j, unsigned attempt, bool timed_out,
                       uint64_t at_ns, uint64_t run_ns)
{
    uint64_t old;
    /* Still RETRYING for this attempt: ax_cancel and shutdown may have ended
     * it between the CAS that chose the retry and this lock section. */
    if (!js_move(&j->sw, job_gen(j), attempt, JS_BIT(JS_RETRYING), JS_RETRYING, -1,
                 JF_RETRY_ARMED, 0, &old))
        return 0;
    /* Ours while RETRYING under the lock: ax_cancel and expiry take it too. */
    j->run_ns = run_ns;
    /* A retry denied by a losing decision is not this one's; how this
     * attempt ended is, for the text if the deadline ends the wait. */
    j->end_why = timed_out ? END_DEADLINE_RETRY_TIMED : 0;
    s->delayed++;
    s->delayed_prio[j->prio]++; /* a back-off holds its bucket's room (submit.c) */
    s->st.retried++;
    if (j->deadline_ns && at_ns > j->deadline_ns)
        at_ns = j->deadline_ns; /* ends TIMED_OUT then, not after a longer back-off */
    jtimer_arm_locked(s, j, at_ns);
    return 1;
}

void sched_orphan_returned_locked(struct ax_sched *s, struct job *j, uint64_t gen, uint64_t now)
{
    uint64_t w;
    if (js_requeue(&j->sw, gen, &w) != 1)
        return; /* cancelled or timed out meanwhile */
    if (w & JF_RETRY_ARMED) {
        s->delayed--;
        s->delayed_prio[j->prio]--;
    }
    jtimer_del_locked(s, j); /* the deadline armed while it waited */
    enqueue_locked(s, j, now);
}

unsigned sched_expire_locked(struct ax_sched *s, uint64_t now, struct job **ended)
{
    uint64_t tick = ns_to_tick(now);
    if (ax_wheel_next(&s->jwheel) > tick)
        return 0;
    struct ax_wheel_node *list = NULL;
    unsigned requeued = 0;
    ax_wheel_advance(&s->jwheel, tick, &list);
    while (list) {
        struct job *j = AX_CONTAINER_OF(list, struct job, tnode);
        list = list->next;
        j->tnode.next = NULL;
        uint64_t w = atomic_load_explicit(&j->sw, memory_order_acquire);
        unsigned st = js_state(w);
        bool past = j->deadline_ns && now >= j->deadline_ns;
        if (AX_UNLIKELY(st == JS_QUEUED && !past && j->parked)) {
            /* A parked job's queue-time budget (park_locked armed it). */
            struct ax_class_rt *c = s->classes[j->cls];
            if (class_queue_expired(c, j, now))
                class_end_locked(s, j, END_EXPIRED, now, ended);
            else
                jtimer_arm_locked(s, j, parked_due(c, j)); /* not yet (tick rounding) */
            continue;
        }
        if (st == JS_QUEUED || past) {
            /* A queued deadline, or a delay / back-off that reached it. */
            uint64_t old;
            if (!js_end_queued(&j->sw, job_gen(j), JS_TIMED_OUT, &old))
                continue;
            sched_leave_locked(s, j, old);
            j->handoff = js_report_attempt(old);
            if (st == JS_RETRYING || (st == JS_QUEUED && js_attempt(old) > 0))
                j->end_why = j->end_why == END_DEADLINE_RETRY_TIMED ? END_DEADLINE_RETRY_TIMED
                                                                    : END_DEADLINE_RETRY;
            else
                j->end_why = END_DEADLINE;
            if (st == JS_QUEUED)
                j->wait_ns = now > j->enqueue_ns ? now - j->enqueue_ns : 0;
            j->next = *ended;
            *ended = j;
            continue;
        }
        int r = js_requeue(&j->sw, job_gen(j), &w);
        if (r == 1) {
            if (st == JS_DELAYED || (w & JF_RETRY_ARMED)) {
                s->delayed--;
                s->delayed_prio[j->prio]--;
            }
            enqueue_locked(s, j, now);
            requeued++;
        } else if (r == 0 && j->deadline_ns) {
            /* Its previous attempt's coroutine still runs: it waits (still
             * counted as delayed) and ends TIMED_OUT at its deadline. */
            jtimer_arm_locked(s, j, j->deadline_ns);
        }
    }
    atomic_store_explicit(&s->jwheel_next, ax_wheel_next(&s->jwheel), memory_order_relaxed);
    return requeued;
}

/* ---- slots --------------------------------------------------------------- */

void sched_slot_free(struct ax_sched *s, bool wake)
{
    /* release: whoever folds it in (running_locked) sees the slot's
     * attempt ended. A worker of s counts on its own line: that worker goes
     * back to its loop, which sees the slot (worker.c queued_takeable). */
    struct worker *me = own_worker(s);
    if (me)
        ends_add(&me->ends.freed, 1);
    else
        atomic_fetch_add_explicit(&s->freed, 1, memory_order_release);
    if (wake && atomic_load_explicit(&s->hint_queued, memory_order_relaxed) &&
        !atomic_load_explicit(&s->hint_blocked, memory_order_relaxed))
        sched_wake_workers(s, 1);
}

/* Refresh hint_blocked after running, cap, paused or closing changed. */
void sched_hint_locked(struct ax_sched *s)
{
    atomic_store_explicit(&s->hint_blocked, s->paused || s->closing, memory_order_relaxed);
    atomic_store_explicit(&s->hint_cap_full, false, memory_order_relaxed); /* the next dispatch says */
}

/* A class job dispatch may not start now: it ends here (queue-time budget
 * past, breaker open; onto *ended, for the caller to finish after the
 * unlock) or stays where it is (its class at its limit). */
static void class_end_locked(struct ax_sched *s, struct job *j, unsigned why, uint64_t now,
                             struct job **ended)
{
    uint64_t old;
    if (!js_end_queued(&j->sw, job_gen(j), JS_FAILED, &old))
        return; /* cannot happen under s->lock for a QUEUED job; be safe */
    sched_leave_locked(s, j, old);
    j->handoff = js_report_attempt(old);
    j->wait_ns = now > j->enqueue_ns ? now - j->enqueue_ns : 0;
    j->end_why = (uint8_t)why;
    j->next = *ended;
    *ended = j;
}

/* The job of priority p to start next, or NULL: the oldest startable one
 * (enqueue_ns) among the first startable one of the bucket's list and the
 * head of each class's park list for p. On the way, list jobs whose class
 * cannot start them now are parked (off the list: the jobs behind them are
 * not held up), jobs past their queue-time budget or of an open breaker
 * end. Each list job looked at leaves the list, so the walk is paid once per
 * job; at most PICK_WALK per call, the rest next time. The job returned has
 * its class place taken (class_take_locked). */
#define PICK_WALK 1024
static struct job *first_startable_locked(struct ax_sched *s, unsigned p, uint64_t now,
                                          struct job **ended)
{
    struct job *best = NULL;
    struct bucket *b = &s->b[p];
    /* Parking or ending a job writes a gap and may move either end: the
     * walk follows the head past gaps, stops at the tail however it moved
     * (positions wrap: compared as a signed distance), and counts only the
     * jobs it looks at (a run of gaps must not use up PICK_WALK: each gap
     * is passed once, as the head moves over it after the walk). */
    unsigned walked = 0;
    for (uint32_t pos = b->rh; walked < PICK_WALK; pos++) {
        if ((int32_t)(b->rh - pos) > 0)
            pos = b->rh;
        if ((int32_t)(b->rt - pos) <= 0)
            break;
        uint32_t slot = b->ring[pos & b->mask];
        if (slot == RING_GONE)
            continue;
        walked++;
        struct job *j = slot_job(s, slot);
        if (!j->cls) {
            best = j;
            break;
        }
        int r = class_check_locked(s, s->classes[j->cls], j, now);
        if (r == CLASS_START) {
            best = j;
            break;
        }
        if (r == CLASS_END_EXPIRED || r == CLASS_END_OPEN)
            class_end_locked(s, j, r == CLASS_END_EXPIRED ? END_EXPIRED : END_OPEN, now, ended);
        else
            park_locked(s, j, r == CLASS_BLOCKED);
    }
    if (s->b[p].parked) {
        unsigned n = atomic_load_explicit(&s->nclasses, memory_order_acquire);
        for (unsigned i = 1; i <= n; i++) {
            struct ax_class_rt *c = s->classes[i];
            struct job *h;
            while ((h = c->park[p].head) && (!best || h->enqueue_ns < best->enqueue_ns)) {
                int r = class_check_locked(s, c, h, now);
                if (r == CLASS_START) {
                    best = h;
                    break;
                }
                if (r != CLASS_END_EXPIRED && r != CLASS_END_OPEN)
                    break; /* this class cannot start its oldest: nor the others */
                class_end_locked(s, h, r == CLASS_END_EXPIRED ? END_EXPIRED : END_OPEN, now,
                                 ended);
            }
        }
    }
    if (best && best->cls)
        class_take_locked(s, s->classes[best->cls], best, now);
    return best;
}

/* sched_pick_locked once class jobs are involved (a bucket's head has a
 * class, or jobs are parked): the same rounds, each priority's candidate
 * from first_startable_locked. */
static __attribute__((noinline)) struct job *pick_classes_locked(struct ax_sched *s, uint64_t now,
                                                                struct job **ended)
{
    for (int tries = 0; tries <= AX_PRIO_COUNT; tries++) {
        unsigned p = round_order[s->rr];
        if ((bucket_nonempty(&s->b[p]) || s->b[p].parked) && s->rr_taken < s->quota[p]) {
            struct job *j = first_startable_locked(s, p, now, ended);
            if (j) {
                bucket_remove_locked(s, j);
                s->rr_taken++;
                return j;
            }
        }
        s->rr = (s->rr + 1) % AX_PRIO_COUNT;
        s->rr_taken = 0;
    }
    return NULL;
}

/* Every line of a queued job's hot part, for writing: written by its
 * submitter on another core, or long ago (a backlog is in memory, not in
 * any cache), and the worker goes on to touch them all (the pick: class
 * and state word; the start: fn, arg, deadline, the run; the end:
 * on_done, cb_arg, run_ns, the free list's link). This prefetched three
 * lines (the class's, the state word's, wait_ns's) until the session of
 * the clock measurements, and the others missed one after another later
 * on. All five of the whole job, `bench/ab --pairs 11` against the three:
 * drain 0.763 warm, 0.865 cold (ax_fullpath split=1), full path 1 worker
 * 0.920 and 0.871, 2 workers 0.859, spawn 0.985 (its children are made
 * on the worker that runs them). Since the job's fields were split into a
 * hot part and a cold one (struct job), only the hot part's 3-4 lines are
 * touched and fetched (SCALING.md "A job's hot part"). job_alloc_locked
 * prefetches the same lines for the submitter. */
static inline void prefetch_slot(const struct ax_sched *s, uint32_t slot)
{
    if (slot == RING_GONE)
        return;
    job_prefetch_hot(slot_job(s, slot));
}

void sched_prefetch_locked(const struct ax_sched *s, unsigned n)
{
    if (AX_UNLIKELY(s->parked_total))
        return;
    const struct bucket *b = &s->b[round_order[s->rr]];
    uint32_t end = b->rh + (n < PICK_AHEAD ? n : PICK_AHEAD);
    for (uint32_t pos = b->rh; pos != end && pos != b->rt; pos++)
        prefetch_slot(s, b->ring[pos & b->mask]);
}

/* The next job by quota rounds, or NULL when no queued job can start (the
 * buckets' lists are empty and no parked job's class has room). Does not
 * look at the concurrency cap or pause: the caller does. A class job
 * returned has its class place taken. Jobs without a class stay on the
 * plain loop (callgrind: the class-aware one in line cost every dispatch
 * ~20 instructions of register saves). */
struct job *sched_pick_locked(struct ax_sched *s, uint64_t now, struct job **ended)
{
    if (AX_UNLIKELY(s->parked_total))
        return pick_classes_locked(s, now, ended);
    /* Nothing queued: leave the round where it is (an empty pick must not
     * move LOW's turn). */
    if (!bucket_nonempty(&s->b[0]) && !bucket_nonempty(&s->b[1]) && !bucket_nonempty(&s->b[2]))
        return NULL;
    for (int tries = 0; tries <= AX_PRIO_COUNT; tries++) {
        unsigned p = round_order[s->rr];
        struct bucket *b = &s->b[p];
        if (bucket_nonempty(b) && s->rr_taken < s->quota[p]) {
            struct job *j = ring_first(s, b);
            if (AX_UNLIKELY(j->cls))
                return pick_classes_locked(s, now, ended);
            /* bucket_remove_locked for the head of the ring */
            do
                b->rh++;
            while (b->rh != b->rt && b->ring[b->rh & b->mask] == RING_GONE);
            /* The job PICK_AHEAD picks on, in the same bucket: the batch's
             * misses overlap (sched_prefetch_locked). */
            if ((int32_t)(b->rt - (b->rh + PICK_AHEAD - 1)) > 0)
                prefetch_slot(s, b->ring[(b->rh + PICK_AHEAD - 1) & b->mask]);
            b->n--;
            hint_queued_locked(s);
            s->rr_taken++;
            return j;
        }
        s->rr = (s->rr + 1) % AX_PRIO_COUNT;
        s->rr_taken = 0;
    }
    return NULL;
}

/* Recompute quotas that follow max_concurrency, and the shed threshold. */
void sched_recompute_locked(struct ax_sched *s)
{
    if (s->quota_auto[AX_PRIO_HIGH])
        s->quota[AX_PRIO_HIGH] = s->cap / 2 ? s->cap / 2 : 1;
    if (s->quota_auto[AX_PRIO_NORMAL])
        s->quota[AX_PRIO_NORMAL] = s->cap / 3 ? s->cap / 3 : 1;
    s->total_capacity = 0;
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        s->total_capacity += s->cfg.capacity[p];
    /* A NORMAL/LOW submission is shed once load >= shed_at: once queued +
     * running + delayed has reached shed_ratio of the total capacity, as
     * README says. Rounded up: rounded down, 0.5 of 15 shed at a load of 7
     * (47 %), and 1e-5 of anything shed every task into an empty scheduler
     * (new user's trial). The epsilons keep an exact product (0.8 x 10)
     * from rounding up past it when the multiplication's own rounding puts
     * it a little above (relative: 0.55 x 5e7 came out 27500000.000000004).
     * libax_redis's submit script computes the same line the same way. */
    double x = s->cfg.shed_ratio * (double)s->total_capacity;
    double line = ceil(x - 1e-9 - x * 1e-12);
    s->shed_at = line < 1 ? 1 : line > (double)UINT_MAX ? UINT_MAX : (unsigned)line;
}

/* Wake up to n sleeping workers. Called after work appeared (a submit, a
 * freed slot, a resume). Lock-free: a worker sets `sleeping` before its final
 * check for work and the waker clears it before writing the eventfd, so a
 * wake-up is never lost (see worker_sleep in worker.c). */
void sched_wake_workers(struct ax_sched *s, unsigned n)
{
    if (atomic_load_explicit(&s->nsleeping, memory_order_seq_cst) == 0)
        return;
    for (unsigned i = 0; i < s->nworkers && n > 0; i++) {
        struct worker *w = &s->workers[i];
        int one = 1;
        if (atomic_load_explicit(&w->sleeping, memory_order_relaxed) &&
            atomic_compare_exchange_strong(&w->sleeping, &one, 0)) {
            worker_kick(w);
            n--;
        }
    }
}

int ax_pause(ax_sched *s)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_pause: scheduler is NULL");
    if (sched_forked(s))
        return sched_forked_fail("ax_pause");
    pthread_mutex_lock(&s->lock);
    s->paused = true;
    sched_hint_locked(s);
    pthread_mutex_unlock(&s->lock);
    return AX_OK;
}

int ax_resume(ax_sched *s)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_resume: scheduler is NULL");
    if (sched_forked(s))
        return sched_forked_fail("ax_resume");
    pthread_mutex_lock(&s->lock);
    s->paused = false;
    sched_hint_locked(s);
    pthread_mutex_unlock(&s->lock);
    sched_wake_workers(s, s->nworkers);
    return AX_OK;
}

/* ---- config.adaptive_limit: the cap follows latency -------------------------- */

void sched_adaptive_init(struct ax_sched *s)
{
    pthread_mutex_init(&s->alim_lk, NULL);
    if (!s->cfg.adaptive_limit)
        return;
    struct ax_limit_cfg lc = {
        .min = s->cfg.adaptive_min,
        .max = s->cfg.max_concurrency,
        .initial = s->cfg.max_concurrency,
        .smoothing = AX_LIMIT_DEFAULT_SMOOTHING,
        .tolerance = AX_LIMIT_DEFAULT_TOLERANCE,
        .window_ns = AX_LIMIT_DEFAULT_WINDOW_NS,
        .window_samples = AX_LIMIT_DEFAULT_WINDOW_SAMPLES,
        .long_window = AX_LIMIT_DEFAULT_LONG_WINDOW,
    };
    ax_limit_init(&s->alim, &lc, now_ns());
    atomic_init(&s->alim_value, ax_limit_get(&s->alim));
    atomic_init(&s->alim_news_ns, now_ns());
    atomic_init(&s->alim_quiet_ns, AX_ALIM_STALL_NS);
}

/* Which attempts began before the last drop (the slow start's count,
 * limit.c) is told by a count, as class.c does, not by now - run_ns: both
 * come from workers' cached clocks, and a worker that read its clock, was
 * preempted while another sampled a drop, then took an attempt stamped it
 * before that drop. The attempts in flight are the slots held (freed after
 * an attempt's sample, or before it by the watchdog: slot_freed) whose
 * sample is still to come, not the live coroutines, which a run leaves
 * before its sample (review: a run that left them, then counted back for a
 * drop that had not counted it). Slots, samples in and the drop count are
 * one word (overload/flight.h), so a take, a sample and a free each see
 * the others whole. */
void sched_adaptive_take(struct ax_sched *s, struct job *j)
{
    j->alim_drops = fl_take(&s->alim_flight);
}

/* Every attempt that ran (not cancelled), from whoever ended it, before its
 * slot is freed (or after, by the watchdog: slot_freed). One short lock
 * section per attempt: only with config.adaptive_limit. */
void sched_adaptive_sample(struct ax_sched *s, struct job *j, uint64_t run_ns, bool dropped,
                           uint64_t now, bool slot_freed)
{
    pthread_mutex_lock(&s->alim_lk);
    bool before, marked;
    unsigned inflight = fl_sample(&s->alim_flight, j->alim_drops, dropped, !slot_freed, &before,
                                  &marked);
    if (marked)
        j->fl_marks |= FLM_ALIM; /* job_slot_free undoes it */
    ax_limit_sample_timeout(&s->alim, now, run_ns, inflight, dropped, run_ns, before);
    unsigned v = ax_limit_get(&s->alim);
    atomic_store_explicit(&s->alim_news_ns, now, memory_order_relaxed);
    /* A slow upstream's attempts end seconds apart at a low limit: that is
     * news arriving slowly, not a stall (review: a 1 s rule alone would
     * have held the limit near the run time in seconds). */
    double quiet = 2 * s->alim.long_rtt;
    atomic_store_explicit(&s->alim_quiet_ns,
                          quiet > AX_ALIM_STALL_NS ? (uint64_t)quiet : AX_ALIM_STALL_NS,
                          memory_order_relaxed);
    pthread_mutex_unlock(&s->alim_lk);
    if (v != atomic_load_explicit(&s->alim_value, memory_order_relaxed))
        atomic_store_explicit(&s->alim_value, v, memory_order_relaxed);
}

/* An attempt that still holds its slot but never ran (run_ns 0: ended
 * between dispatch and start) never reached the upstream: if a drop counted
 * it, it is back, and it is marked as sampled so no later drop counts it
 * while its slot is held (class.c limit_unran is the same for a class, and
 * says why not once the slot is freed). */
void sched_adaptive_unran(struct ax_sched *s, struct job *j)
{
    bool before, marked;
    pthread_mutex_lock(&s->alim_lk);
    fl_sample(&s->alim_flight, j->alim_drops, false, true, &before, &marked);
    if (marked)
        j->fl_marks |= FLM_ALIM;
    ax_limit_back(&s->alim, before);
    pthread_mutex_unlock(&s->alim_lk);
}

/* The watchdog hands a to-start job back to its bucket: its slot is free
 * and it never ran; a dispatch takes and stamps it again. */
void sched_adaptive_unstart(struct ax_sched *s, struct job *j)
{
    sched_adaptive_unran(s, j);
    j->fl_marks &= (uint8_t)~FLM_ALIM;
    fl_free(&s->alim_flight, true);
}

/* The limiter moves only on samples, and a sample is an attempt that ends.
 * With every slot held by attempts that do not end (a poller, an accept
 * loop, a Redis consumer's puller and acker: a trial saw the limit fall to
 * 1 in a timeout storm, the poller keep that slot, and 1 810 tasks wait
 * for good after the upstream was fast again) it had no way back. So a
 * dispatch that finds every slot held, work waiting and no sample for
 * AX_ALIM_STALL_NS, or twice the baseline run time if longer, raises the
 * limit by one (every worker wakes for it: worker.c next_wake_tick); an
 * attempt that then ends is news again. In a storm of hanging attempts
 * this adds at most one attempt per quiet period, and only while none of
 * the attempts in flight has ended for that long: the timeouts' drops
 * bring it down again. In s->lock, then
 * alim_lk (no path takes them the other way). */
void sched_adaptive_nudge_locked(struct ax_sched *s, uint64_t now, bool stalled)
{
    pthread_mutex_lock(&s->alim_lk);
    if (sched_adaptive_quiet(s, now)) {
        if (stalled) {
            ax_limit_nudge(&s->alim);
            atomic_store_explicit(&s->alim_value, ax_limit_get(&s->alim), memory_order_relaxed);
        }
        /* Also when it could not act (paused, closing, orphans at their
         * bound): worker 0 would otherwise find the stall due at every turn
         * and spin (review: a paused scheduler, a core at 100 %). Only
         * forward: a sample's later time stays. */
        atomic_store_explicit(&s->alim_news_ns, now, memory_order_relaxed);
    }
    pthread_mutex_unlock(&s->alim_lk);
}

/* In a dispatch's lock section: the cap is the limiter's value, bounded by
 * ax_set_max_concurrency's; the quotas that follow the cap follow it. A
 * lower cap drains as attempts end; a higher one is used by this dispatch. */
void sched_adaptive_apply_locked(struct ax_sched *s)
{
    unsigned v = atomic_load_explicit(&s->alim_value, memory_order_relaxed);
    if (v > s->cap_max)
        v = s->cap_max;
    if (v == s->cap)
        return;
    s->cap = v;
    sched_recompute_locked(s);
    atomic_store_explicit(&s->hint_cap_full, false, memory_order_relaxed);
}

int ax_set_max_concurrency(ax_sched *s, unsigned n)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_set_max_concurrency");
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_max_concurrency: scheduler is NULL");
    if (n == 0 || n > AX_MAX_JOBS / 2)
        return ax_fail(AX_EINVAL, "max_concurrency must be in [1, %u] (got %u)", AX_MAX_JOBS / 2,
                       n);
    /* The bound ax_new checks (config.c): the buckets' capacities plus the
     * slots must fit the job table's half. The capacities never change. */
    uint64_t total = (uint64_t)s->cfg.capacity[0] + s->cfg.capacity[1] + s->cfg.capacity[2];
    if (total + n > AX_MAX_JOBS / 2)
        return ax_fail(AX_EINVAL,
                       "max_concurrency %u plus the buckets' capacities (%llu) exceeds %u tasks", n,
                       (unsigned long long)total, AX_MAX_JOBS / 2);
    pthread_mutex_lock(&s->class_reg_lock); /* internal.h: why */
    if (s->cfg.adaptive_limit) {
        /* The limiter's bound moves, and it starts over from it, as at
         * ax_new: an operator who raises the cap wants more in flight now
         * (a trial raised it to get a stalled limit moving, and the limiter
         * put it straight back). */
        pthread_mutex_lock(&s->alim_lk);
        ax_limit_set_max(&s->alim, n);
        ax_limit_restart(&s->alim, n);
        atomic_store_explicit(&s->alim_value, ax_limit_get(&s->alim), memory_order_relaxed);
        atomic_store_explicit(&s->alim_news_ns, now_ns(), memory_order_relaxed);
        pthread_mutex_unlock(&s->alim_lk);
    }
    pthread_mutex_lock(&s->lock);
    s->cap_max = n;
    s->cap = n;
    if (s->cfg.adaptive_limit)
        sched_adaptive_apply_locked(s);
    sched_recompute_locked(s);
    sched_hint_locked(s);
    pthread_mutex_unlock(&s->lock);
    class_cap_changed(s, n); /* classes whose limit_max is 0 follow the cap */
    pthread_mutex_unlock(&s->class_reg_lock);
    sched_wake_workers(s, s->nworkers);
    return AX_OK;
}

int ax_set_quotas(ax_sched *s, unsigned high, unsigned normal, unsigned low_guaranteed)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_set_quotas");
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_quotas: scheduler is NULL");
    if (low_guaranteed == 0)
        return ax_fail(AX_EINVAL, "low_guaranteed must be >= 1 (LOW would starve)");
    pthread_mutex_lock(&s->lock);
    s->quota_auto[AX_PRIO_HIGH] = high == 0;
    s->quota_auto[AX_PRIO_NORMAL] = normal == 0;
    s->quota[AX_PRIO_HIGH] = high;
    s->quota[AX_PRIO_NORMAL] = normal;
    s->quota[AX_PRIO_LOW] = low_guaranteed;
    sched_recompute_locked(s);
    pthread_mutex_unlock(&s->lock);
    return AX_OK;
}

int ax_set_retry_enabled(ax_sched *s, ax_priority p, bool enabled)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_set_retry_enabled");
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_retry_enabled: scheduler is NULL");
    if ((unsigned)p >= AX_PRIO_COUNT)
        return ax_fail(AX_EINVAL, "priority %d is out of range", (int)p);
    atomic_store(&s->retry_enabled[p], enabled);
    return AX_OK;
}

int ax_set_rate_limit(ax_sched *s, double per_second, unsigned burst)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_set_rate_limit");
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_rate_limit: scheduler is NULL");
    if (!(per_second >= 0.0) || per_second > 1e12)
        return ax_fail(AX_EINVAL, "rate limit must be in [0, 1e12] per second (got %g)",
                       per_second);
    pthread_mutex_lock(&s->lock);
    uint64_t now = now_ns();
    /* A change keeps what the bucket holds (refilled at the old rate up to
     * now), up to the new burst: re-applying the same limit used to refill
     * it, a fresh burst each time (new-user trial: a config reloader
     * applying it periodically). A limit turned on starts full. */
    double tokens = s->tokens;
    if (s->rate > 0.0 && now > s->rate_last_ns)
        tokens += (double)(now - s->rate_last_ns) / 1e9 * s->rate;
    if (tokens > s->burst) /* what the old bucket could hold (review: a raised burst got
                              the whole idle time's refill) */
        tokens = s->burst;
    bool was_on = s->rate > 0.0;
    s->rate = per_second;
    s->burst = burst ? (double)burst : (per_second >= 1.0 ? per_second : 1.0);
    s->tokens = was_on && tokens < s->burst ? tokens : s->burst;
    s->rate_last_ns = now;
    pthread_mutex_unlock(&s->lock);
    return AX_OK;
}
