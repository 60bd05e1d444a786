/* submit.c - layer 1: validate, assign an id, compute the deadline budget,
 * admit or reject (seed §2.1, §2.3, §5.3).
 *
 * Validation happens before any lock and allocates nothing. Admission, in
 * this order, under s->lock:
 *   shutting down           -> AX_ESHUTDOWN
 *   rate limit (token bucket, seed §4.3 "refuse traffic above 1.5 x peak")
 *                           -> AX_ERATE
 *   NORMAL/LOW while load >= shed_at, where load = queued + running +
 *   delayed and shed_at = shed_ratio x total capacity, rounded up (seed §5.3)
 *                           -> AX_ESHED   (HIGH is never shed)
 *   the bucket, plus its tasks waiting out a delay or a retry's back-off
 *   (delayed_prio), at its bound
 *                           -> AX_EFULL
 * A rejection returns before a job is taken from the table: it allocates
 * nothing and only bumps a counter. Memory is bounded by configuration.
 *
 * Retries re-enter their bucket without the bound check: they were admitted
 * once, and ax never drops an admitted task. A retry holds its bucket's room
 * while it waits out its back-off, so a new submission cannot take the room
 * a failed attempt left (a new-user trial: HIGH tasks failing into a 60 s
 * back-off, never shed, let 1 000 000 be admitted against a capacity of 10).
 * Only an admission adds a live task, and it needs queued + delayed of its
 * priority under capacity[p]; so the live tasks of a priority are at most
 * capacity[p] + max_concurrency (the running ones may all fail into
 * back-offs while the bucket is full). A retry decided but not armed yet
 * (its slot freed in finish.c attempt_end, or by the watchdog for a held
 * worker, before retry_schedule takes the lock, which for the watchdog's is
 * as long as the ax-finish thread takes to reach it) counts as well:
 * retry_unarmed (review of da73730: 11 live against a bound of 8, with an
 * on_done that blocked that thread 2.5 s).
 *
 * The new job's state word (state.h) is written here, under the lock and
 * before the job is in a bucket: QUEUED (or DELAYED), attempt 0, holding
 * JH_END (and JH_PARENT for a child of ax_spawn).
 *
 * Hot: ax_submit -> submit_common (one lock section, O(1)).
 */
#include "internal.h"
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

#define AX_MAX_TIMEOUT_MS (365ull * 24 * 3600 * 1000) /* one year */

/* spec.ref: the rules of a trace id (valid UTF-8, no control character),
 * with its own bound. Off the plain path: only a spec with a ref gets here. */
static __attribute__((noinline)) int validate_ref(const char *ref)
{
    size_t n = strnlen(ref, AX_REF_MAX);
    if (n >= AX_REF_MAX)
        return ax_fail(AX_EINVAL, "spec.ref is longer than %d bytes", AX_REF_MAX - 1);
    size_t bad = utf8_invalid_at(ref, n);
    if (bad < n)
        return ax_fail(AX_EINVAL, "spec.ref is not valid UTF-8 (byte %zu: 0x%02x)", bad,
                       (unsigned char)ref[bad]);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)ref[i];
        if (c < 0x20 || c == 0x7f || (c == 0xc2 && (unsigned char)ref[i + 1] < 0xa0))
            return ax_fail(AX_EINVAL, "spec.ref has a control character (byte %zu: 0x%02x)", i,
                           c);
    }
    return AX_OK;
}

/* The allocation (struct job_ext) of a task with a ref or an on_release,
 * made before the lock; NULL with *rc = AX_ENOMEM when none can be had. */
static __attribute__((noinline)) struct job_ext *spec_ext(const ax_spec *sp, int *rc)
{
    struct job_ext *x = malloc(sizeof *x);
    if (!x) {
        *rc = ax_fail_static(AX_ENOMEM, sp->ref && sp->ref[0]
                                            ? "ax_submit: out of memory for spec.ref"
                                            : "ax_submit: out of memory for spec.on_release");
        return NULL;
    }
    x->err = NULL;
    x->release = sp->on_release;
    x->timeouts_queued = 0;
    x->ref[0] = 0;
    if (sp->ref)
        memcpy(x->ref, sp->ref, strlen(sp->ref) + 1); /* validated: < AX_REF_MAX */
    return x;
}

static int validate(const ax_sched *s, const ax_spec *sp, uint64_t now)
{
    if (!sp)
        return ax_fail_static(AX_EINVAL, "spec is NULL");
    if (!sp->fn)
        return ax_fail_static(AX_EINVAL, "spec.fn is NULL");
    if ((unsigned)sp->priority >= AX_PRIO_COUNT)
        return ax_fail(AX_EINVAL, "spec.priority %d is out of range (HIGH, NORMAL or LOW)",
                       (int)sp->priority);
    if (sp->timeout_ms == 0)
        return ax_fail_static(AX_EINVAL, "spec.timeout_ms must be > 0");
    if (sp->timeout_ms > AX_MAX_TIMEOUT_MS)
        return ax_fail(AX_EINVAL, "spec.timeout_ms %llu overflows (max one year)",
                       (unsigned long long)sp->timeout_ms);
    if (sp->delay_ms > AX_MAX_TIMEOUT_MS)
        return ax_fail(AX_EINVAL, "spec.delay_ms %llu overflows (max one year)",
                       (unsigned long long)sp->delay_ms);
    if (sp->deadline_ns && sp->deadline_ns <= now)
        return ax_fail_static(AX_EINVAL, "spec.deadline_ns is in the past");
    if (sp->deadline_ns && sp->deadline_ns <= now + sp->delay_ms * 1000000u)
        return ax_fail_static(AX_EINVAL, "spec.deadline_ns falls before the end of spec.delay_ms");
    if (sp->max_retry > s->cfg.max_retry_cap)
        return ax_fail(AX_EINVAL, "spec.max_retry %u exceeds config.max_retry_cap %u",
                       sp->max_retry, s->cfg.max_retry_cap);
    if (sp->retry) {
        int rc = retry_policy_check(sp->retry, "spec.retry");
        if (rc)
            return rc;
    }
    if (sp->trace_id) {
        size_t n = strnlen(sp->trace_id, AX_TRACE_ID_MAX);
        if (n >= AX_TRACE_ID_MAX)
            return ax_fail(AX_EINVAL, "spec.trace_id is longer than %d bytes",
                           AX_TRACE_ID_MAX - 1);
        /* Validated, not escaped: a trace id is a key the host greps for in
         * its logs, and must read the same in every JSON line and result. */
        size_t bad = utf8_invalid_at(sp->trace_id, n);
        if (bad < n)
            return ax_fail(AX_EINVAL, "spec.trace_id is not valid UTF-8 (byte %zu: 0x%02x)", bad,
                           (unsigned char)sp->trace_id[bad]);
        /* No control characters either (C0, DEL, and C1: U+0080..U+009F,
         * 0xc2 0x80..0x9f in UTF-8): the stderr reports print it as it is,
         * and a newline or an escape sequence there could forge a line. */
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)sp->trace_id[i];
            if (c < 0x20 || c == 0x7f ||
                (c == 0xc2 && (unsigned char)sp->trace_id[i + 1] < 0xa0))
                return ax_fail(AX_EINVAL,
                               "spec.trace_id has a control character (byte %zu: 0x%02x)", i, c);
        }
    }
    if (AX_UNLIKELY(sp->ref && sp->ref[0]))
        return validate_ref(sp->ref);
    return AX_OK;
}

/* Token bucket; s->lock held. The clock is read here, under the lock: a
 * time read before it may be older than what another submitter already
 * stored, and must never refill the bucket (it once wrapped the unsigned
 * difference and admitted 80x the rate with two threads). */
static bool rate_admit_locked(struct ax_sched *s)
{
    if (s->rate <= 0.0)
        return true;
    uint64_t now = now_ns();
    if (now > s->rate_last_ns) {
        s->tokens += (double)(now - s->rate_last_ns) / 1e9 * s->rate;
        s->rate_last_ns = now;
    }
    if (s->tokens > s->burst)
        s->tokens = s->burst;
    if (s->tokens < 1.0)
        return false;
    s->tokens -= 1.0;
    return true;
}

/* The spec as submitted derives from its class (defaults the spec leaves
 * to it) and its parent (a child's deadline is at most its parent's
 * attempt's, DESIGN.md §11: work the parent can no longer use is not
 * started on its behalf). eff gets the whole spec, derived. */
static __attribute__((noinline)) int submit_derive(struct ax_sched *s, const ax_spec *sp,
                                                   ax_spec *eff, struct ax_class_rt **cls,
                                                   struct ax_task *parent, uint64_t now)
{
    *eff = *sp; /* also what a refusal event reports */
    int rc = class_resolve_spec(s, sp, eff, cls);
    if (rc)
        return rc;
    /* The spec's own checks first, as ax_submit's (AX_EINVAL before the
     * rest; new user's trial: a bad spec under a parent past its deadline
     * was told AX_ETIMEDOUT, and delay_ms was multiplied below before its
     * bound was checked). The parent's deadline only shortens the spec's
     * below, and delay_ms is checked against it there: not again after. */
    rc = validate(s, eff, now);
    if (rc)
        return rc;
    /* Its attempt ended already (cancelled, or timed out: the deadline
     * test below only sees the clock): nothing may start on its behalf. */
    int ended = parent ? run_detached_rc(parent) : 0;
    if (AX_UNLIKELY(ended))
        return ax_fail_static(ended, ended == AX_ECANCELED
                                         ? "ax_spawn: the parent's attempt was cancelled"
                                         : "ax_spawn: the parent's attempt has timed out");
    if (parent && (!eff->deadline_ns || eff->deadline_ns > parent->deadline_ns)) {
        if (parent->deadline_ns <= now)
            return ax_fail_static(AX_ETIMEDOUT, "ax_spawn: the parent's deadline has passed");
        if (now + eff->delay_ms * 1000000u >= parent->deadline_ns)
            return ax_fail_static(AX_ETIMEDOUT,
                                  "ax_spawn: spec.delay_ms ends after the parent's deadline");
        eff->deadline_ns = parent->deadline_ns;
    }
    return AX_OK;
}

/* A refusal's count (s->lock held): in the totals and, for a spec whose
 * priority is in range, in that priority's books. */
static inline void count_refusal_locked(struct ax_sched *s, const ax_spec *sp, int code)
{
    bool shed = code == AX_ESHED;
    if (shed)
        s->st.shed++;
    else
        s->st.rejected++;
    if (sp && (unsigned)sp->priority < AX_PRIO_COUNT) {
        ax_prio_stats *ps = &s->st.prio[sp->priority];
        if (shed)
            ps->shed++;
        else
            ps->rejected++;
    }
}

/* A refusal at admission (s->lock held, and still held on return): counted,
 * its event emitted, its code returned with msg as the detail. */
static int refuse_locked(struct ax_sched *s, const ax_spec *sp, int code, const char *msg)
{
    unsigned kind = code == AX_ESHED ? AX_EV_SHED : AX_EV_REJECTED;
    count_refusal_locked(s, sp, code);
    if (AX_UNLIKELY(ev_on(s, kind))) {
        ev_under_lock = true;
        ev_emit_refusal(s, sp, kind, code, msg);
        ev_under_lock = false;
    }
    return ax_fail_static(code, msg);
}

static int reject_locked(struct ax_sched *s, const ax_spec *sp, int code, const char *msg)
{
    int rc = refuse_locked(s, sp, code, msg);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Admission of a validated spec of priority p (s->lock held, and still
 * held on return), in the order of the header comment: 0 and *jp, a job
 * from the table with room reserved in its bucket; or the refusal's code,
 * counted. */
static inline __attribute__((always_inline)) int admit_locked(struct ax_sched *s,
                                                              const ax_spec *sp, unsigned p,
                                                              struct job **jp)
{
    if (AX_UNLIKELY(s->closing))
        return refuse_locked(s, sp, AX_ESHUTDOWN, "the scheduler is shutting down");
    if (AX_UNLIKELY(!rate_admit_locked(s)))
        return refuse_locked(s, sp, AX_ERATE, "submission rate limit exceeded");
    /* s->load only overstates (ends not folded in yet): fold them in, a
     * read of the enders' cache line, only when it would shed. */
    if (p != AX_PRIO_HIGH && s->load >= s->shed_at && load_locked(s) >= s->shed_at)
        return refuse_locked(s, sp, AX_ESHED, "overloaded: NORMAL/LOW shed above shed_ratio");
    if (s->b[p].n + s->delayed_prio[p] +
            atomic_load_explicit(&s->retry_unarmed[p], memory_order_relaxed) >=
        s->cfg.capacity[p])
        return refuse_locked(s, sp, AX_EFULL,
                             p == AX_PRIO_HIGH ? "the HIGH bucket is full (its capacity "
                                                 "counts queued tasks and those in a delay "
                                                 "or a retry's back-off)"
                             : p == AX_PRIO_NORMAL ? "the NORMAL bucket is full (its capacity "
                                                     "counts queued tasks and those in a delay "
                                                     "or a retry's back-off)"
                                                   : "the LOW bucket is full (its capacity "
                                                     "counts queued tasks and those in a delay "
                                                     "or a retry's back-off)");
    int rc = bucket_reserve_locked(s, p);
    if (AX_LIKELY(!rc))
        rc = job_alloc_locked(s, jp);
    if (AX_UNLIKELY(rc))
        count_refusal_locked(s, sp, rc);
    return rc;
}

/* Why enqueue_admitted_locked wants a sleeping worker woken: ENQ_WORK, a
 * slot is free for the job; ENQ_STALL, only to set the stall nudge's
 * wake-up (one worker is enough, however many a batch admitted). */
enum { ENQ_WORK = 1, ENQ_STALL = 2 };

/* The admitted job j takes sp's fields, its state word, its counts, and
 * its place in its bucket or the scheduler's wheel (s->lock held). Returns
 * 0, ENQ_WORK or ENQ_STALL. */
static inline __attribute__((always_inline)) unsigned
enqueue_admitted_locked(struct ax_sched *s, const ax_spec *sp, struct job *j, unsigned p,
                        struct ax_class_rt *cls, struct ax_task *parent, struct job_ext *ext,
                        uint64_t now)
{
    j->fn = sp->fn;
    j->arg = sp->arg;
    j->on_done = sp->on_done;
    j->on_timeout = sp->on_timeout;
    j->cb_arg = sp->cb_arg;
    j->timeout_ns = sp->timeout_ms * 1000000u;
    j->deadline_ns = sp->deadline_ns;
    /* The cold fields only when used (struct job): a job whose max_retry
     * is 0 never reads its retry policy, nor one that is not a child its
     * joiner. */
    if (sp->max_retry)
        j->retry = sp->retry ? *sp->retry : s->cfg.retry;
    j->max_retry = (uint16_t)sp->max_retry;
    j->prio = (uint8_t)p;
    j->cls = cls ? (uint8_t)cls->id : 0;
    j->end_why = 0;
    j->is_child = parent != NULL;
    if (parent)
        j->joiner = NULL;
    j->code = 0;
    j->wait_ns = j->run_ns = 0;
    j->run = NULL;
    atomic_store_explicit(&j->sw,
                          js_make(job_gen(j), 0, sp->delay_ms ? JS_DELAYED : JS_QUEUED,
                                  JH_END | (parent ? JH_PARENT : 0)),
                          memory_order_release);
    s->load++;
    s->live_prio[p]++; /* job_free_locked: -- */
    s->st.submitted++;
    s->st.prio[p].submitted++;
    if (cls)
        atomic_fetch_add_explicit(&cls->submitted, 1, memory_order_relaxed);
    j->submit_ns = now;
    /* With the adaptive limit, the first job queued behind a full cap wakes
     * a sleeping worker all the same, to set its wake-up for the stall
     * nudge (worker.c next_wake_tick). Else only worker 0 heard of it (the
     * job's deadline timer kicks it), and a worker 0 held by a task that
     * never yields never looked (test_adaptive_limit_stall_w0 B). */
    bool first_behind = AX_UNLIKELY(s->cfg.adaptive_limit) &&
                        atomic_load_explicit(&s->hint_queued, memory_order_relaxed) == 0;
    sched_enqueue_new_locked(s, j, now, sp->delay_ms * 1000000u);
    unsigned wake = 0;
    if (!sp->delay_ms && !s->paused) {
        if (s->running < s->cap || running_locked(s) < s->cap)
            wake = ENQ_WORK;
        else if (first_behind)
            wake = ENQ_STALL;
    }
    /* An empty trace id means "generated from the id" (trace_format):
     * formatting it here would lengthen the lock section for nothing. */
    j->has_trace = sp->trace_id && sp->trace_id[0];
    if (j->has_trace)
        memcpy(j->trace_id, sp->trace_id, strlen(sp->trace_id) + 1);
    j->ev_skip = ev_sample_skip(s);
    if (AX_UNLIKELY(ext)) { /* a free job: ext NULL, has_ref, has_release 0 (job_free_locked) */
        j->ext = ext;
        j->has_ref = ext->ref[0] != 0;
        j->has_release = ext->release != NULL;
    }
    /* Under the lock: SUBMITTED is produced before any worker can start it. */
    if (AX_UNLIKELY(ev_on(s, AX_EV_SUBMITTED))) {
        ev_under_lock = true;
        ev_emit(s, NULL, j, AX_EV_SUBMITTED, 0, NULL);
        ev_under_lock = false;
    }
    return wake;
}

/* Validate, admit, queue: the body of submit_common, in line twice (the
 * plain path, with cls NULL, and the derived one). rc: a failure found
 * before (deriving the spec), reported like validation's. */
static inline __attribute__((always_inline)) int
submit_body(struct ax_sched *s, const ax_spec *sp, uint64_t *id_out, struct ax_task *parent,
            struct job **job_out, struct ax_class_rt *cls, uint64_t now, int rc, bool validated)
{
    if (!rc && !validated)
        rc = validate(s, sp, now);
    bool open = AX_UNLIKELY(!rc && cls &&
                            !(cls->cfg.protect_high && sp->priority == AX_PRIO_HIGH) &&
                            class_open_now(cls, now));
    /* spec.ref's copy and on_release: a failure is a refusal like the
     * others, counted (review: an AX_ENOMEM here was counted nowhere). */
    struct job_ext *ext = NULL;
    if (AX_UNLIKELY(!rc && !open && ((sp->ref && sp->ref[0]) || sp->on_release)))
        ext = spec_ext(sp, &rc);
    if (AX_UNLIKELY(rc || open)) {
        /* The event is emitted under the lock, where it may not wait: room
         * first (lossless mode), as for every other refusal (user trial:
         * 4 threads of refused specs dropped ~half their events). */
        if (AX_UNLIKELY(s->ev_lossless))
            ev_reserve(s);
        pthread_mutex_lock(&s->lock);
        /* Shutdown before the breaker: a stopped scheduler says so, and its
         * breakers count no refusal (user trial: AX_EOPEN after shutdown). */
        if (open && s->closing)
            return reject_locked(s, sp, AX_ESHUTDOWN, "the scheduler is shutting down");
        if (open)
            rc = class_refuse_open(cls, now);
        count_refusal_locked(s, sp, rc);
        if (AX_UNLIKELY(ev_on(s, AX_EV_REJECTED))) {
            ev_under_lock = true;
            ev_emit_refusal(s, sp, AX_EV_REJECTED, rc, ax_error_detail());
            ev_under_lock = false;
        }
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    unsigned p = (unsigned)sp->priority;
    struct job *j;

    if (AX_UNLIKELY(s->ev_lossless))
        ev_reserve(s);
    pthread_mutex_lock(&s->lock);
    rc = admit_locked(s, sp, p, &j);
    if (AX_UNLIKELY(rc)) {
        pthread_mutex_unlock(&s->lock);
        free(ext);
        return rc;
    }
    unsigned wake = enqueue_admitted_locked(s, sp, j, p, cls, parent, ext, now);
    uint64_t id = j->id;
    pthread_mutex_unlock(&s->lock);

    if (id_out)
        *id_out = id;
    if (job_out)
        *job_out = j; /* a child: JH_PARENT keeps it ours */
    if (wake)
        sched_wake_workers(s, 1);
    if (AX_UNLIKELY(job_table_low(s)))
        job_table_prefill(s);
    return AX_OK;
}

/* A spec with a class or a parent: derive it into a copy (callgrind: the
 * copy and its stack canary on the plain path cost every task ~20
 * instructions). */
static __attribute__((noinline)) int submit_derived(struct ax_sched *s, const ax_spec *sp,
                                                    uint64_t *id_out, struct ax_task *parent,
                                                    struct job **job_out, uint64_t now)
{
    ax_spec eff;
    struct ax_class_rt *cls = NULL;
    int rc = submit_derive(s, sp, &eff, &cls, parent, now);
    return submit_body(s, &eff, id_out, parent, job_out, cls, now, rc, true);
}

int submit_common(struct ax_sched *s, const ax_spec *sp, uint64_t *id_out, struct ax_task *parent,
                  struct job **job_out)
{
    if (AX_UNLIKELY(!s))
        return ax_fail_static(AX_EINVAL, "scheduler is NULL");
    if (sched_forked(s))
        return sched_forked_fail("ax_submit");
    uint64_t now = now_ns();
    if (AX_UNLIKELY(sp && (parent || (sp->class_id | sp->overrides))))
        return submit_derived(s, sp, id_out, parent, job_out, now);
    return submit_body(s, sp, id_out, parent, job_out, NULL, now, AX_OK, false);
}

int ax_submit(ax_sched *s, const ax_spec *spec, uint64_t *id_out)
{
    return submit_common(s, spec, id_out, NULL, NULL);
}

int submit_refused(struct ax_sched *s, const ax_spec *sp, int code)
{
    if (!sp)
        return submit_body(s, NULL, NULL, NULL, NULL, NULL, now_ns(), code, false);
    /* Booked under the priority the task would have had (its class's,
     * unless the spec overrides it), as submit_derive's refusals are. */
    ax_spec eff;
    struct ax_class_rt *cls;
    char detail[256]; /* class_resolve_spec may fail and set its own */
    snprintf(detail, sizeof detail, "%s", ax_error_detail());
    eff = *sp; /* kept as it is if the class is not one (resolve returns first) */
    if (sp->class_id | sp->overrides)
        class_resolve_spec(s, sp, &eff, &cls);
    ax_fail(code, "%s", detail);
    return submit_body(s, &eff, NULL, NULL, NULL, NULL, now_ns(), code, false);
}

/* ---- a burst ---------------------------------------------------------------- */

/* Specs admitted in one lock section of ax_submit_batch. Measured (bench
 * ax_fullpath batch=64, 1 and 2 workers): 4 or 8 beat one lock per task by
 * ~10 % (1 worker) and ~20 % (2), 16 or more lose to it. A longer section
 * outlasts the dispatching worker's adaptive spin on s->lock, and the worker
 * then sleeps in the kernel. */
#define SUBMIT_BATCH_RUN 8

/* A spec ax_submit_batch admits in a run: no class or overrides (deriving
 * may take the class's breaker and budget), no ref or on_release (their
 * allocation). */
static inline bool plain_spec(const ax_spec *sp)
{
    return !(sp->class_id | sp->overrides) && !(sp->ref && sp->ref[0]) && !sp->on_release;
}

struct batch_out {
    int *rcs;
    uint64_t *ids;
    int first;                 /* the first refusal's code */
    char detail[256];          /* and its ax_error_detail (error.c keeps 256) */
};

static void batch_note(struct batch_out *o, size_t k, int rc, uint64_t id)
{
    if (o->rcs)
        o->rcs[k] = rc;
    if (o->ids)
        o->ids[k] = id;
    if (rc && !o->first) {
        o->first = rc;
        snprintf(o->detail, sizeof o->detail, "%s", ax_error_detail());
    }
}

int ax_submit_batch(ax_sched *s, const ax_spec *specs, size_t n, int *rcs, uint64_t *ids)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_submit_batch: scheduler is NULL");
    if (sched_forked(s)) {
        /* Each spec refused, as n calls of ax_submit would be (new-user
         * trial: rcs and ids were left as they were); not beside a NULL
         * specs, whose n is not trusted (below). */
        for (size_t i = 0; specs && i < n; i++) {
            if (rcs)
                rcs[i] = AX_ESTATE;
            if (ids)
                ids[i] = 0;
        }
        return sched_forked_fail("ax_submit_batch");
    }
    if (!specs && n) {
        /* One refused call, counted once as a NULL spec to ax_submit is,
         * with one REJECTED event, whatever n: an n beside a NULL array is
         * not a count to trust (review: an event each made an n that was a
         * negative count cast to size_t run for ever; new-user trial:
         * adding n, SIZE_MAX wrapped ax_stats.rejected, and the Prometheus
         * counter went backwards) */
        static const char msg[] = "ax_submit_batch: specs is NULL with n > 0";
        if (AX_UNLIKELY(s->ev_lossless))
            ev_reserve(s);
        pthread_mutex_lock(&s->lock);
        s->st.rejected++;
        if (AX_UNLIKELY(ev_on(s, AX_EV_REJECTED))) {
            ev_under_lock = true;
            ev_emit_refusal(s, NULL, AX_EV_REJECTED, AX_EINVAL, msg);
            ev_under_lock = false;
        }
        pthread_mutex_unlock(&s->lock);
        /* rcs and ids untouched: an n this wrong may be past their ends */
        return ax_fail_static(AX_EINVAL, msg);
    }
    struct batch_out o = {rcs, ids, AX_OK, ""};
    size_t i = 0;
    while (i < n) {
        /* Alone, as ax_submit: a spec that derives from a class or has a
         * ref; every spec while events are lossless (each reserves its
         * event's room before the lock); an invalid one (which ax_submit
         * refuses with its count and event). */
        const ax_spec *sp = &specs[i];
        uint64_t now = now_ns();
        if (AX_UNLIKELY(s->ev_lossless || !plain_spec(sp) || validate(s, sp, now) != AX_OK)) {
            uint64_t id = 0;
            int rc = submit_common(s, sp, &id, NULL, NULL);
            batch_note(&o, i, rc, id);
            i++;
            continue;
        }
        size_t end = i + 1; /* [i, end): plain and valid */
        while (end < n && end - i < SUBMIT_BATCH_RUN && plain_spec(&specs[end]) &&
               validate(s, &specs[end], now) == AX_OK)
            end++;
        unsigned wake = 0, admitted = 0;
        pthread_mutex_lock(&s->lock);
        for (size_t k = i; k < end; k++) {
            struct job *j;
            unsigned p = (unsigned)specs[k].priority;
            int rc = admit_locked(s, &specs[k], p, &j);
            if (rc) {
                batch_note(&o, k, rc, 0);
                continue;
            }
            wake |= enqueue_admitted_locked(s, &specs[k], j, p, NULL, NULL, NULL, now);
            batch_note(&o, k, AX_OK, j->id); /* under the lock: it may run and end after */
            admitted++;
        }
        pthread_mutex_unlock(&s->lock);
        if (wake & ENQ_WORK)
            sched_wake_workers(s, admitted < s->nworkers ? admitted : s->nworkers);
        else if (wake) /* ENQ_STALL: one worker sets the nudge's wake-up */
            sched_wake_workers(s, 1);
        if (AX_UNLIKELY(job_table_low(s)))
            job_table_prefill(s);
        i = end;
    }
    if (o.first)
        return ax_fail(o.first, "%s", o.detail);
    return AX_OK;
}
