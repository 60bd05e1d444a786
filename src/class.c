/* class.c - task classes and the overload controls they carry (DESIGN.md
 * §11; the seed's §4 fixes, applied by ax itself).
 *
 * The seed's operators healed their incident by hand: the concurrency cap
 * moved 500 -> 200 -> 600, LOW retries went off, back-off became
 * exponential, each kind of call got its own timeout (§4.2-4.4). A class
 * is the unit those fixes apply to -- one kind of upstream call -- and each
 * of them is a controller here that acts on its own measurements:
 *
 *   at submit     the breaker: open -> AX_EOPEN at once, nothing queued;
 *   at dispatch   (s->lock; class_dispatch_locked) the queue-time budget
 *                 (waited too long -> FAILED AX_EEXPIRED, never started), the
 *                 breaker (open -> FAILED AX_EOPEN; half-open -> only its
 *                 probes start), the concurrency limit (in_flight < limit,
 *                 else the job is parked off its bucket's list until the
 *                 class has room: sched.c); a first attempt that starts is
 *                 the retry budget's deposit;
 *   at an attempt's end (class_attempt_done, c->lk) its latency feeds the
 *                 limiter, its outcome the breaker (only attempts whose
 *                 function ran and was not cancelled: a stack that could
 *                 not be had says nothing about the upstream);
 *   at a retry decision (class_retry_room: a peek) the retry budget,
 *                 reserved by the winner of the CAS that ends the attempt
 *                 only (class_retry_decided): several parties decide, one
 *                 wins. Two attempts deciding at the same instant may both
 *                 see the last retry's room: the budget can be overdrawn by
 *                 the decisions in flight at once. The reservation enters
 *                 the window when the retry's function is entered
 *                 (class_started) and is given back if the job leaves that
 *                 attempt otherwise (class_retry_dropped): a retry
 *                 cancelled in its back-off, past its deadline, shut down or
 *                 refused at dispatch never reached the upstream.
 *
 * The controllers themselves are pure state machines (overload/).
 *
 * Cost: a job without a class pays one byte test on each of these paths.
 * A class job pays an uncontended c->lk section at the end of each attempt
 * (limiter and breaker: ~100 ns) and atomics on in_flight.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ax_class_config_default(ax_class_config *c)
{
    if (!c)
        return;
    memset(c, 0, sizeof *c);
    c->priority = AX_PRIO_NORMAL;
    c->timeout_ms = 1000;
    c->max_retry = 0;
    c->retry.mode = AX_BACKOFF_EXPONENTIAL;
    c->retry.base_ms = 1000;
    c->retry.max_ms = 30000;
    c->retry.jitter_ms = 1000;
    c->queue_budget = true;
    c->queue_budget_ms = 0;
    c->adaptive = true;
    c->limit_min = 1;
    c->limit_max = 0;
    c->limit_initial = 0;
    c->retry_budget = true;
    c->retry_budget_ratio = AX_BUDGET_DEFAULT_RATIO;
    c->retry_budget_min_per_s = AX_BUDGET_DEFAULT_MIN_PER_S;
    c->retry_budget_window_ms = (uint32_t)(AX_BUDGET_DEFAULT_WINDOW_NS / 1000000u);
    c->retry_throttle_tokens = AX_THROTTLE_DEFAULT_TOKENS;
    c->retry_throttle_ratio = AX_THROTTLE_DEFAULT_RATIO;
    c->protect_high = true;
    c->breaker = true;
    c->breaker_failure_rate = AX_BREAKER_DEFAULT_FAILURE_RATE;
    c->breaker_min_calls = AX_BREAKER_DEFAULT_MIN_CALLS;
    c->breaker_window_ms = (uint32_t)(AX_BREAKER_DEFAULT_WINDOW_NS / 1000000u);
    c->breaker_open_ms = (uint32_t)(AX_BREAKER_DEFAULT_OPEN_NS / 1000000u);
    c->breaker_half_open_calls = AX_BREAKER_DEFAULT_HALF_OPEN_CALLS;
}

const char *ax_breaker_state_name(ax_breaker_state b)
{
    switch (b) {
    case AX_BREAKER_CLOSED: return "closed";
    case AX_BREAKER_OPEN: return "open";
    case AX_BREAKER_HALF_OPEN: return "half-open";
    default: return "invalid"; /* as ax_state_name and the other names */
    }
}

#define MAX_MS (365ull * 24 * 3600 * 1000) /* one year, as spec.timeout_ms */

static int check_name(const char *name)
{
    if (!name)
        return ax_fail_static(AX_EINVAL, "class.name is NULL");
    size_t n = strnlen(name, AX_CLASS_NAME_MAX);
    if (n == 0 || n >= AX_CLASS_NAME_MAX)
        return ax_fail(AX_EINVAL, "class.name must be 1-%d bytes", AX_CLASS_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '_' || ch == '.' || ch == '-';
        if (!ok)
            return ax_fail(AX_EINVAL,
                           "class.name may hold only [A-Za-z0-9_.-] (byte %zu: 0x%02x)", i, ch);
    }
    return AX_OK;
}

static int check_config(ax_sched *s, const ax_class_config *c, unsigned cap)
{
    int rc = check_name(c->name);
    if (rc)
        return rc;
    if ((unsigned)c->priority >= AX_PRIO_COUNT)
        return ax_fail(AX_EINVAL, "class.priority %d is out of range", (int)c->priority);
    if (c->timeout_ms == 0 || c->timeout_ms > MAX_MS)
        return ax_fail(AX_EINVAL, "class.timeout_ms must be in [1, one year] (got %llu)",
                       (unsigned long long)c->timeout_ms);
    if (c->max_retry > s->cfg.max_retry_cap)
        return ax_fail(AX_EINVAL, "class.max_retry %u exceeds config.max_retry_cap %u",
                       c->max_retry, s->cfg.max_retry_cap);
    rc = retry_policy_check(&c->retry, "class.retry");
    if (rc)
        return rc;
    if (c->queue_budget_ms > MAX_MS)
        return ax_fail_static(AX_EINVAL, "class.queue_budget_ms overflows (max one year)");
    unsigned max = c->limit_max ? c->limit_max : cap;
    if (c->limit_max > AX_MAX_JOBS / 2)
        return ax_fail(AX_EINVAL, "class.limit_max %u is above %u", c->limit_max, AX_MAX_JOBS / 2);
    if (c->adaptive && (c->limit_min == 0 || c->limit_min > max))
        return ax_fail(AX_EINVAL, "class.limit_min must be in [1, limit_max = %u] (got %u)", max,
                       c->limit_min);
    if (c->adaptive && c->limit_initial && (c->limit_initial < c->limit_min || c->limit_initial > max))
        return ax_fail(AX_EINVAL, "class.limit_initial must be in [limit_min, limit_max] (got %u)",
                       c->limit_initial);
    if (c->retry_budget) {
        if (!(c->retry_budget_ratio >= 0.0 && c->retry_budget_ratio <= 10.0))
            return ax_fail(AX_EINVAL, "class.retry_budget_ratio must be in [0, 10] (got %g)",
                           c->retry_budget_ratio);
        if (!(c->retry_budget_min_per_s >= 0.0 && c->retry_budget_min_per_s <= 1e6))
            return ax_fail(AX_EINVAL, "class.retry_budget_min_per_s must be in [0, 1e6] (got %g)",
                           c->retry_budget_min_per_s);
        if (c->retry_budget_window_ms < 100 || c->retry_budget_window_ms > 3600000)
            return ax_fail(AX_EINVAL,
                           "class.retry_budget_window_ms must be in [100, 3600000] (got %u)",
                           c->retry_budget_window_ms);
        if (!(c->retry_throttle_tokens >= 0.0 && c->retry_throttle_tokens <= 1000.0))
            return ax_fail(AX_EINVAL, "class.retry_throttle_tokens must be in [0, 1000] (got %g)",
                           c->retry_throttle_tokens);
        if (c->retry_throttle_tokens > 0 &&
            !(c->retry_throttle_ratio > 0.0 && c->retry_throttle_ratio <= 1.0))
            return ax_fail(AX_EINVAL, "class.retry_throttle_ratio must be in (0, 1] (got %g)",
                           c->retry_throttle_ratio);
    }
    if (c->breaker) {
        if (!(c->breaker_failure_rate > 0.0 && c->breaker_failure_rate <= 1.0))
            return ax_fail(AX_EINVAL, "class.breaker_failure_rate must be in (0, 1] (got %g)",
                           c->breaker_failure_rate);
        if (c->breaker_min_calls == 0 || c->breaker_min_calls > 1000000)
            return ax_fail(AX_EINVAL, "class.breaker_min_calls must be in [1, 1000000] (got %u)",
                           c->breaker_min_calls);
        if (c->breaker_window_ms < 100 || c->breaker_window_ms > 3600000)
            return ax_fail(AX_EINVAL, "class.breaker_window_ms must be in [100, 3600000] (got %u)",
                           c->breaker_window_ms);
        if (c->breaker_open_ms == 0 || c->breaker_open_ms > 3600000)
            return ax_fail(AX_EINVAL, "class.breaker_open_ms must be in [1, 3600000] (got %u)",
                           c->breaker_open_ms);
        if (c->breaker_half_open_calls == 0 || c->breaker_half_open_calls > 10000)
            return ax_fail(AX_EINVAL,
                           "class.breaker_half_open_calls must be in [1, 10000] (got %u)",
                           c->breaker_half_open_calls);
    }
    return AX_OK;
}

/* The scheduler's cap now (ax_set_max_concurrency changes it; with
 * config.adaptive_limit it is the limiter's value). */
static unsigned sched_cap(ax_sched *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned cap = s->cap;
    pthread_mutex_unlock(&s->lock);
    return cap;
}

/* What limit_max 0 means: max_concurrency as last set, not the adaptive
 * cap of the moment (review of a3a7dd5: registered while a timeout storm
 * held it at 31 of 64, a class kept 31 as its bound for good). */
static unsigned sched_cap_max(ax_sched *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned cap = s->cap_max;
    pthread_mutex_unlock(&s->lock);
    return cap;
}

int ax_class_register(ax_sched *s, const ax_class_config *cfg, unsigned *id_out)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_class_register");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_class_register: scheduler is NULL");
    if (!cfg)
        return ax_fail_static(AX_EINVAL, "ax_class_register: config is NULL");
    if (atomic_load_explicit(&s->closing, memory_order_relaxed))
        return ax_fail_static(AX_ESHUTDOWN, "ax_class_register: the scheduler is shutting down");
    pthread_mutex_lock(&s->class_reg_lock);
    unsigned cap = sched_cap_max(s);
    int rc = check_config(s, cfg, cap);
    if (rc) {
        pthread_mutex_unlock(&s->class_reg_lock);
        return rc;
    }
    unsigned n = atomic_load_explicit(&s->nclasses, memory_order_relaxed);
    for (unsigned i = 1; i <= n; i++) {
        if (strcmp(s->classes[i]->name, cfg->name) == 0) {
            pthread_mutex_unlock(&s->class_reg_lock);
            return ax_fail(AX_EBUSY, "class \"%s\" is already registered (id %u)", cfg->name, i);
        }
    }
    if (n >= AX_CLASS_MAX) {
        pthread_mutex_unlock(&s->class_reg_lock);
        return ax_fail(AX_ENOMEM, "at most %d classes per scheduler", AX_CLASS_MAX);
    }
    struct ax_class_rt *c = calloc(1, sizeof *c);
    if (!c) {
        pthread_mutex_unlock(&s->class_reg_lock);
        return ax_fail_static(AX_ENOMEM, "out of memory for a class");
    }
    snprintf(c->name, sizeof c->name, "%s", cfg->name);
    c->cfg = *cfg;
    c->cfg.name = c->name;
    c->id = n + 1;
    atomic_init(&c->timeout_ms, cfg->timeout_ms);
    pthread_mutex_init(&c->lk, NULL);
    uint64_t now = now_ns();
    unsigned max = cfg->limit_max ? cfg->limit_max : cap;
    c->limit_follows_cap = cfg->limit_max == 0;
    if (cfg->adaptive) {
        struct ax_limit_cfg lc = {
            .min = cfg->limit_min,
            .max = max,
            .initial = cfg->limit_initial ? cfg->limit_initial : max,
            .smoothing = AX_LIMIT_DEFAULT_SMOOTHING,
            .tolerance = AX_LIMIT_DEFAULT_TOLERANCE,
            .window_ns = AX_LIMIT_DEFAULT_WINDOW_NS,
            .window_samples = AX_LIMIT_DEFAULT_WINDOW_SAMPLES,
            .long_window = AX_LIMIT_DEFAULT_LONG_WINDOW,
        };
        ax_limit_init(&c->lim, &lc, now);
        atomic_init(&c->limit, ax_limit_get(&c->lim));
    } else {
        /* No adaptive limit and no limit_max: the scheduler's cap is the
         * only bound (dispatch checks it anyway). */
        atomic_init(&c->limit, cfg->limit_max ? cfg->limit_max : UINT32_MAX);
    }
    if (cfg->retry_budget) {
        struct ax_budget_cfg bc = {cfg->retry_budget_ratio, cfg->retry_budget_min_per_s,
                                   (uint64_t)cfg->retry_budget_window_ms * 1000000u,
                                   cfg->retry_throttle_tokens, cfg->retry_throttle_ratio};
        ax_budget_init(&c->bud, &bc, now);
    }
    if (cfg->breaker) {
        struct ax_breaker_cfg kc = {cfg->breaker_failure_rate, cfg->breaker_min_calls,
                                    (uint64_t)cfg->breaker_window_ms * 1000000u,
                                    (uint64_t)cfg->breaker_open_ms * 1000000u,
                                    cfg->breaker_half_open_calls};
        ax_breaker_init(&c->brk, &kc, now);
    }
    atomic_init(&c->brk_state, AX_BRK_CLOSED);
    s->classes[n + 1] = c;
    atomic_store_explicit(&s->nclasses, n + 1, memory_order_release);
    pthread_mutex_unlock(&s->class_reg_lock);
    if (id_out)
        *id_out = n + 1;
    return AX_OK;
}

int ax_class_find(ax_sched *s, const char *name, unsigned *id_out)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_class_find");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_class_find: scheduler is NULL");
    if (!name)
        return ax_fail_static(AX_EINVAL, "ax_class_find: name is NULL");
    unsigned n = atomic_load_explicit(&s->nclasses, memory_order_acquire);
    for (unsigned i = 1; i <= n; i++) {
        if (strcmp(s->classes[i]->name, name) == 0) {
            if (id_out)
                *id_out = i;
            return AX_OK;
        }
    }
    return ax_fail(AX_ENOTFOUND, "no class named \"%.40s\"", name);
}

unsigned ax_class_count(ax_sched *s)
{
    return s ? atomic_load_explicit(&s->nclasses, memory_order_acquire) : 0;
}

static struct ax_class_rt *class_arg(ax_sched *s, unsigned id, const char *fn)
{
    if (!s) {
        ax_fail(AX_EINVAL, "%s: scheduler is NULL", fn);
        return NULL;
    }
    struct ax_class_rt *c = class_get(s, id);
    if (!c)
        ax_fail(AX_ENOTFOUND, "%s: no class with id %u (%u registered)", fn, id,
                ax_class_count(s));
    return c;
}

int ax_class_set_timeout(ax_sched *s, unsigned id, uint64_t timeout_ms)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_class_set_timeout");
    struct ax_class_rt *c = class_arg(s, id, "ax_class_set_timeout");
    if (!c)
        return s ? AX_ENOTFOUND : AX_EINVAL;
    if (timeout_ms == 0 || timeout_ms > MAX_MS)
        return ax_fail(AX_EINVAL, "timeout_ms must be in [1, one year] (got %llu)",
                       (unsigned long long)timeout_ms);
    atomic_store_explicit(&c->timeout_ms, timeout_ms, memory_order_relaxed);
    return AX_OK;
}

int ax_class_stats_get(ax_sched *s, unsigned id, ax_class_stats *out)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_class_stats_get");
    struct ax_class_rt *c = class_arg(s, id, "ax_class_stats_get");
    if (!c)
        return s ? AX_ENOTFOUND : AX_EINVAL;
    if (!out)
        return ax_fail_static(AX_EINVAL, "ax_class_stats_get: out is NULL");
    memset(out, 0, sizeof *out);
    memcpy(out->name, c->name, sizeof out->name);
    out->priority = c->cfg.priority;
    out->timeout_ms = atomic_load_explicit(&c->timeout_ms, memory_order_relaxed);
    out->limit = atomic_load_explicit(&c->limit, memory_order_relaxed);
    if (out->limit == UINT32_MAX)
        out->limit = sched_cap(s); /* no class limit: the scheduler's cap */
    out->in_flight = class_in_flight(c, memory_order_relaxed);
    pthread_mutex_lock(&s->lock);
    out->queued = c->queued;
    pthread_mutex_unlock(&s->lock);
    uint64_t now = now_ns();
    pthread_mutex_lock(&c->lk);
    out->rtt_short_ns = c->rtt_short_ns;
    if (c->cfg.adaptive) {
        out->rtt_short_ns = (uint64_t)c->lim.last_short;
        out->rtt_long_ns = (uint64_t)c->lim.long_rtt;
        /* The limit again, under the lock, with its mark: one moment. */
        out->limit = ax_limit_get(&c->lim);
        out->limit_mark = c->lim.mark > 0 ? (unsigned)ceil(c->lim.mark) : 0; /* 0.5 is a mark */
        out->limit_doublings = c->lim.doublings;
    }
    if (c->cfg.breaker) {
        unsigned calls = 0;
        out->breaker = (ax_breaker_state)ax_breaker_poll(&c->brk, now);
        out->failure_rate = ax_breaker_failure_rate(&c->brk, now, &calls);
        out->breaker_calls = calls;
        out->breaker_opened = c->brk.opened;
        atomic_store_explicit(&c->brk_state, (int)out->breaker, memory_order_relaxed);
    }
    out->retry_budget_left = c->cfg.retry_budget ? ax_budget_left(&c->bud, now) : INFINITY;
    out->retry_tokens = c->cfg.retry_budget ? c->bud.tokens : 0;
    pthread_mutex_unlock(&c->lk);
    out->breaker_rejected = atomic_load_explicit(&c->open_refused, memory_order_relaxed);
    out->retries_allowed = atomic_load_explicit(&c->retries_allowed, memory_order_relaxed);
    out->retries_denied = atomic_load_explicit(&c->retries_denied, memory_order_relaxed);
    out->expired = atomic_load_explicit(&c->expired, memory_order_relaxed);
    out->submitted = atomic_load_explicit(&c->submitted, memory_order_relaxed);
    out->started = atomic_load_explicit(&c->started, memory_order_relaxed);
    out->succeeded = atomic_load_explicit(&c->succeeded, memory_order_relaxed);
    out->failed = atomic_load_explicit(&c->failed, memory_order_relaxed);
    out->timed_out = atomic_load_explicit(&c->timed_out, memory_order_relaxed);
    out->cancelled = atomic_load_explicit(&c->cancelled, memory_order_relaxed);
    return AX_OK;
}

/* ---- the paths of a task ------------------------------------------------------ */

int class_resolve_spec(struct ax_sched *s, const ax_spec *in, ax_spec *out,
                       struct ax_class_rt **cp)
{
    *cp = NULL;
    struct ax_class_rt *c = in->class_id ? class_get(s, in->class_id) : NULL;
    if (in->class_id && !c)
        return ax_fail(AX_EINVAL, "spec.class_id %u is not a registered class (%u registered)",
                       in->class_id, ax_class_count(s));
    *out = *in;
    /* Before any check below: a refusal is booked under the priority the
     * task would have had (ax_stats.prio; review: unknown bits were booked
     * under spec.priority, NORMAL for a LOW class). */
    if (c && !(in->overrides & AX_SPEC_PRIORITY))
        out->priority = c->cfg.priority;
    if (in->overrides & ~(AX_SPEC_PRIORITY | AX_SPEC_MAX_RETRY))
        return ax_fail(AX_EINVAL, "spec.overrides has unknown bits 0x%x",
                       in->overrides & ~(AX_SPEC_PRIORITY | AX_SPEC_MAX_RETRY));
    if (!c)
        return AX_OK;
    if (!(in->overrides & AX_SPEC_MAX_RETRY))
        out->max_retry = c->cfg.max_retry;
    if (!in->timeout_ms)
        out->timeout_ms = atomic_load_explicit(&c->timeout_ms, memory_order_relaxed);
    if (!in->retry)
        out->retry = &c->cfg.retry;
    *cp = c;
    return AX_OK;
}

bool class_open_now(struct ax_class_rt *c, uint64_t now)
{
    if (!c->cfg.breaker)
        return false;
    /* Closed is the common case: no lock. A stale "closed" admits one more
     * task, which dispatch then fails fast if the breaker is open by then. */
    if (atomic_load_explicit(&c->brk_state, memory_order_relaxed) == AX_BRK_CLOSED)
        return false;
    pthread_mutex_lock(&c->lk);
    int st = ax_breaker_poll(&c->brk, now);
    atomic_store_explicit(&c->brk_state, st, memory_order_relaxed);
    pthread_mutex_unlock(&c->lk);
    return st == AX_BRK_OPEN;
}

int class_refuse_open(struct ax_class_rt *c, uint64_t now)
{
    (void)now;
    atomic_fetch_add_explicit(&c->open_refused, 1, memory_order_relaxed);
    return ax_fail(AX_EOPEN,
                   "class \"%s\": circuit breaker open (its attempts failed at >= %.0f%% "
                   "over the last %u ms): failing fast",
                   c->name, c->cfg.breaker_failure_rate * 100.0, c->cfg.breaker_window_ms);
}

static uint64_t queue_budget_ns(const struct ax_class_rt *c, const struct job *j)
{
    return c->cfg.queue_budget_ms ? c->cfg.queue_budget_ms * 1000000u : j->timeout_ns;
}

uint64_t class_queue_budget_ns(const struct ax_class_rt *c, const struct job *j)
{
    return queue_budget_ns(c, j);
}

bool class_queue_expired(const struct ax_class_rt *c, const struct job *j, uint64_t now)
{
    return c->cfg.queue_budget && now > j->enqueue_ns &&
           now - j->enqueue_ns > queue_budget_ns(c, j);
}

int class_check_locked(struct ax_sched *s, struct ax_class_rt *c, const struct job *j,
                       uint64_t now)
{
    (void)s;
    if (class_queue_expired(c, j, now))
        return CLASS_END_EXPIRED;
    if (class_high_lane(c, j))
        return CLASS_START;
    unsigned limit = atomic_load_explicit(&c->limit, memory_order_relaxed);
    unsigned inflight = class_in_flight(c, memory_order_relaxed);
    if (c->cfg.breaker &&
        atomic_load_explicit(&c->brk_state, memory_order_relaxed) != AX_BRK_CLOSED) {
        /* Open fails fast even when the class is also at its limit. */
        pthread_mutex_lock(&c->lk);
        int st = ax_breaker_poll(&c->brk, now);
        bool permit = st == AX_BRK_HALF_OPEN && c->brk.probes_out < c->brk.cfg.half_open_calls;
        atomic_store_explicit(&c->brk_state, st, memory_order_relaxed);
        pthread_mutex_unlock(&c->lk);
        if (st == AX_BRK_OPEN)
            return CLASS_END_OPEN;
        if (st == AX_BRK_HALF_OPEN && !permit)
            return CLASS_BLOCKED_PROBE; /* its probes' outcomes wake the class */
    }
    return inflight < limit ? CLASS_START : CLASS_BLOCKED;
}

void class_take_locked(struct ax_sched *s, struct ax_class_rt *c, struct job *j, uint64_t now)
{
    (void)s;
    j->probe = 0;
    if (c->cfg.breaker && !class_high_lane(c, j) &&
        atomic_load_explicit(&c->brk_state, memory_order_relaxed) == AX_BRK_HALF_OPEN) {
        pthread_mutex_lock(&c->lk);
        if (ax_breaker_poll(&c->brk, now) == AX_BRK_HALF_OPEN && ax_breaker_allow(&c->brk, now))
            j->probe = ax_breaker_permit_tag(&c->brk); /* its spell's: release gives it back there */
        pthread_mutex_unlock(&c->lk);
    }
    /* The slot and its stamp, the drop count, in one step (flight.h): a
     * drop counts this attempt exactly when its stamp is older. Not the
     * worker's clock: a worker preempted between reading it and this take
     * stamped the attempt before a drop it followed (CI of 53f7d4e,
     * test_class_limit_stale_start). */
    j->cls_drops = fl_take(&c->flight);
}

void class_room_made(struct ax_sched *s, struct ax_class_rt *c)
{
    /* The in_flight decrement (or limit raise, breaker verdict) comes
     * before this nparked read, both seq_cst; park_locked stores nparked,
     * then re-reads in_flight and the limit: one side sees the other. */
    if (atomic_load_explicit(&c->nparked, memory_order_seq_cst)) {
        atomic_store_explicit(&s->parked_ready, true, memory_order_seq_cst);
        sched_wake_workers(s, 1);
    }
}

void class_slot_free(struct ax_sched *s, struct job *j)
{
    struct ax_class_rt *c = s->classes[j->cls];
    bool sampled = j->fl_marks & FLM_CLS;
    if (sampled)
        j->fl_marks &= (uint8_t)~FLM_CLS;
    fl_free(&c->flight, sampled);
    class_room_made(s, c);
}

static void probe_release(struct ax_sched *s, struct ax_class_rt *c, struct job *j, uint64_t now)
{
    if (!j->probe)
        return;
    uint8_t tag = j->probe;
    j->probe = 0;
    pthread_mutex_lock(&c->lk);
    ax_breaker_release(&c->brk, now, tag);
    pthread_mutex_unlock(&c->lk);
    class_room_made(s, c); /* a permit is free again: a parked job may probe */
}

/* An attempt that still holds its slot but never ran never reached the
 * upstream: if a drop counted it among the attempts out, it is back
 * (ax_limit_back). Marked as sampled like one that ran, so that no later
 * drop counts it while its slot is still held (flight.h). Before, it stayed
 * pending until the class's timeout after the drop
 * (test_limit_sampled_held). Not once its slot is freed: a drop since
 * did not count it, and the stamp cannot tell (review of a4940cb); so the
 * watchdog, which frees the slots of attempts that will never run, calls
 * this first (job_unran), and the finisher does not again. */
static void limit_unran(struct ax_class_rt *c, struct job *j)
{
    if (!c->cfg.adaptive)
        return;
    bool before, marked;
    pthread_mutex_lock(&c->lk);
    fl_sample(&c->flight, j->cls_drops, false, true, &before, &marked);
    if (marked)
        j->fl_marks |= FLM_CLS;
    ax_limit_back(&c->lim, before);
    pthread_mutex_unlock(&c->lk);
}

void class_unran(struct ax_sched *s, struct job *j)
{
    limit_unran(s->classes[j->cls], j);
}

void class_unstart(struct ax_sched *s, struct job *j)
{
    struct ax_class_rt *c = s->classes[j->cls];
    probe_release(s, c, j, now_ns());
    limit_unran(c, j);
    class_slot_free(s, j);
}

void class_started(struct ax_sched *s, struct job *j)
{
    struct ax_class_rt *c = s->classes[j->cls];
    atomic_fetch_add_explicit(&c->started, 1, memory_order_relaxed);
    /* The retry budget's deposit: a first attempt whose function is
     * entered, before any retry decision of its own can ask (Finagle
     * deposits per request); a hand-back or a cancel before this is none.
     * A retry's: its reservation enters the window (it reached the
     * upstream). This attempt's js_begin won: no one else takes it. */
    if (c->cfg.retry_budget) {
        unsigned attempt = js_attempt(atomic_load_explicit(&j->sw, memory_order_relaxed));
        pthread_mutex_lock(&c->lk);
        if (attempt == 0)
            ax_budget_first(&c->bud, now_ns());
        else
            ax_budget_commit(&c->bud, now_ns());
        pthread_mutex_unlock(&c->lk);
    }
}

/* Did the job, as its state word `old` was, hold a reserved retry of its
 * class's budget? From the decision (attempt >= 1 from then on) until its
 * function is entered (RUNNING): in its back-off, its bucket, a worker's
 * to-start list. Every attempt >= 1 was reserved when decided (a retry is
 * decided only through class_retry_decided, and a class's budget is fixed
 * at registration). */
static bool retry_reserved(uint64_t old)
{
    return js_attempt(old) >= 1 &&
           js_is(old, JS_BIT(JS_RETRYING) | JS_BIT(JS_QUEUED) | JS_BIT(JS_STARTING));
}

void class_retry_dropped(struct ax_sched *s, struct job *j, uint64_t old)
{
    struct ax_class_rt *c = s->classes[j->cls];
    if (!c->cfg.retry_budget || !retry_reserved(old))
        return;
    pthread_mutex_lock(&c->lk);
    ax_budget_unreserve(&c->bud);
    pthread_mutex_unlock(&c->lk);
}

void class_attempt_done(struct ax_sched *s, struct job *j, unsigned state, bool ran,
                        uint64_t run_ns, uint64_t now, bool slot_freed)
{
    struct ax_class_rt *c = s->classes[j->cls];
    if (!ran || state == JS_CANCELLED) {
        /* No evidence about the upstream; a probe permit goes back. One
         * cancelled while it ran never counts back for a drop (it may have
         * been stalled): the class's timeout ends that wait. */
        probe_release(s, c, j, now);
        if (!ran && !slot_freed)
            limit_unran(c, j);
        return;
    }
    j->probe = 0; /* its outcome is the probe's */
    bool failed = state == JS_FAILED || state == JS_TIMED_OUT;
    pthread_mutex_lock(&c->lk);
    /* For stats without an adaptive limit: an exponential average over
     * about 10 attempts. */
    c->rtt_short_ns = c->rtt_short_ns ? (c->rtt_short_ns * 9 + run_ns) / 10 : run_ns;
    if (c->cfg.adaptive) {
        /* The attempts out beside this one whose samples are still to come,
         * itself included (a drop waits for the others: drop_pending), and
         * whether it began before the last drop: its stamp is older than
         * the count (flight.h). Marked as sampled until its slot is freed
         * (class_slot_free), unless the watchdog freed it already. */
        bool dropped = state == JS_TIMED_OUT, before, marked;
        unsigned inflight = fl_sample(&c->flight, j->cls_drops, dropped, !slot_freed, &before,
                                      &marked);
        if (marked)
            j->fl_marks |= FLM_CLS;
        /* A drop's wait lasts the class's timeout at the latest, not the
         * drop's latency, which a deadline or a per-spec timeout may have
         * made shorter (review) or longer. Attempts beside it with a longer timeout of their own
         * (per-spec, or taken before ax_class_set_timeout lowered the
         * class's) may still be out then: the bound is the class's, not
         * the longest in flight (a running maximum of start + timeout
         * outlived the attempts that set it: second review). */
        uint64_t to = atomic_load_explicit(&c->timeout_ms, memory_order_relaxed) * 1000000u;
        ax_limit_sample_timeout(&c->lim, now, run_ns, inflight, dropped, to, before);
        atomic_store_explicit(&c->limit, ax_limit_get(&c->lim), memory_order_seq_cst);
    }
    if (c->cfg.retry_budget)
        ax_budget_outcome(&c->bud, failed); /* the throttle's tokens */
    if (c->cfg.breaker) {
        ax_breaker_record(&c->brk, now, failed);
        atomic_store_explicit(&c->brk_state, ax_breaker_poll(&c->brk, now),
                              memory_order_seq_cst);
    }
    pthread_mutex_unlock(&c->lk);
    /* A raised limit or a closed breaker may let a parked job start; the
     * slot itself may have been freed before this (the watchdog's path). */
    class_room_made(s, c);
}

bool class_retry_room(struct ax_sched *s, const struct job *j, uint64_t now)
{
    struct ax_class_rt *c = s->classes[j->cls];
    if (!c->cfg.retry_budget || class_high_lane(c, j))
        return true; /* HIGH's retries are spent in it all the same (decided) */
    pthread_mutex_lock(&c->lk);
    /* The failure deciding now is recorded after the decision, by the
     * winner (class_attempt_done): the throttle counts it as pending. */
    bool ok = ax_budget_left(&c->bud, now) >= 1.0 && !ax_budget_throttled(&c->bud, 1);
    pthread_mutex_unlock(&c->lk);
    return ok;
}

void class_retry_decided(struct ax_sched *s, struct job *j, unsigned to, bool denied,
                         uint64_t old)
{
    struct ax_class_rt *c = s->classes[j->cls];
    /* An attempt >= 1 that ended before its function was entered (STARTING)
     * still held its reservation: a retry decided now carries it over;
     * any other end gives it back. (The peek above counted it as taken: such
     * an attempt may be denied a retry the exact count would allow.) */
    bool held = c->cfg.retry_budget && retry_reserved(old);
    if (denied) {
        pthread_mutex_lock(&c->lk);
        /* Which rule said no, as the peek saw it (this failure pending). */
        j->end_why = ax_budget_throttled(&c->bud, 1) ? END_THROTTLED : END_BUDGET;
        ax_budget_deny(&c->bud);
        if (held)
            ax_budget_unreserve(&c->bud);
        pthread_mutex_unlock(&c->lk);
        atomic_fetch_add_explicit(&c->retries_denied, 1, memory_order_relaxed);
        return;
    }
    if (!c->cfg.retry_budget || (to != JS_RETRYING && !held))
        return;
    if (to == JS_RETRYING && !held) {
        pthread_mutex_lock(&c->lk);
        /* Reserved whether or not another attempt took the last room since
         * the peek (documented above: the overdraft is bounded by the
         * decisions in flight at once). */
        ax_budget_reserve(&c->bud);
        pthread_mutex_unlock(&c->lk);
    } else if (to != JS_RETRYING) {
        pthread_mutex_lock(&c->lk);
        ax_budget_unreserve(&c->bud);
        pthread_mutex_unlock(&c->lk);
    }
    if (to == JS_RETRYING)
        atomic_fetch_add_explicit(&c->retries_allowed, 1, memory_order_relaxed);
}

void class_count_terminal(struct ax_sched *s, struct job *j, unsigned state)
{
    struct ax_class_rt *c = s->classes[j->cls];
    _Atomic uint64_t *n;
    switch (state) {
    case JS_SUCCEEDED: n = &c->succeeded; break;
    case JS_FAILED: n = &c->failed; break;
    case JS_TIMED_OUT: n = &c->timed_out; break;
    default: n = &c->cancelled; break;
    }
    atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
}

void class_end_text(struct ax_sched *s, const struct job *j, char *buf, size_t len)
{
    struct ax_class_rt *c = s->classes[j->cls];
    switch (j->end_why) {
    case END_EXPIRED:
        /* Fits AX_ERROR_MAX with any class name while the two numbers
         * together have at most 17 digits; past that the tail is cut, which
         * gcc warns of once the call is inlined (-fno-semantic-interposition
         * in libax.so). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
        snprintf(buf, len, "waited %llu ms in its bucket, past class \"%s\"'s queue-time budget "
                           "of %llu ms: not started",
                 (unsigned long long)(j->wait_ns / 1000000u), c->name,
                 (unsigned long long)(queue_budget_ns(c, j) / 1000000u));
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
        break;
    case END_OPEN:
        snprintf(buf, len, "class \"%s\": circuit breaker open: failing fast", c->name);
        break;
    case END_THROTTLED:
        /* Short: it follows the attempt's own error in ax_result.error
         * (AX_ERROR_MAX); the tokens are in ax_class_stats. */
        snprintf(buf, len, "class \"%s\": retries throttled (recent attempts mostly failed)",
                 c->name);
        break;
    default:
        snprintf(buf, len, "class \"%s\": retry budget exhausted (%.0f%% of first attempts "
                           "+ %g/s over %g s)",
                 c->name, c->cfg.retry_budget_ratio * 100.0, c->cfg.retry_budget_min_per_s,
                 c->cfg.retry_budget_window_ms / 1000.0);
        break;
    }
}

void class_finish_unstarted(struct ax_sched *s, struct worker *w, struct job *j, unsigned attempt,
                            uint64_t give)
{
    struct ax_class_rt *c = s->classes[j->cls];
    char why[AX_ERROR_MAX];
    class_end_text(s, j, why, sizeof why);
    bool expired = j->end_why == END_EXPIRED;
    atomic_fetch_add_explicit(expired ? &c->expired : &c->open_refused, 1, memory_order_relaxed);
    finish_attempt(s, w, j, attempt, JS_FAILED, JS_FAILED, expired ? AX_EEXPIRED : AX_EOPEN, why,
                   FIN_NO_SLOT, 0, give);
}

void class_cap_changed(struct ax_sched *s, unsigned cap)
{
    unsigned n = atomic_load_explicit(&s->nclasses, memory_order_acquire);
    for (unsigned i = 1; i <= n; i++) {
        struct ax_class_rt *c = s->classes[i];
        if (!c->limit_follows_cap || !c->cfg.adaptive)
            continue; /* fixed limits, and none at all (the cap bounds it) */
        pthread_mutex_lock(&c->lk);
        unsigned old = ax_limit_get(&c->lim);
        /* A limit at its bound was held there by the cap, not by latency
         * (a class starts at it, and one the cap lowered stays at it): it
         * follows the cap up too. One its latency holds below stays. */
        bool at_bound = old >= c->lim.cfg.max;
        ax_limit_set_max(&c->lim, cap);
        if (at_bound && cap > old)
            ax_limit_restart(&c->lim, cap);
        unsigned now_limit = ax_limit_get(&c->lim);
        atomic_store_explicit(&c->limit, now_limit, memory_order_seq_cst);
        pthread_mutex_unlock(&c->lk);
        if (now_limit > old)
            class_room_made(s, c);
    }
}

void class_free_all(struct ax_sched *s)
{
    unsigned n = atomic_load_explicit(&s->nclasses, memory_order_acquire);
    for (unsigned i = 1; i <= n; i++) {
        pthread_mutex_destroy(&s->classes[i]->lk);
        free(s->classes[i]);
        s->classes[i] = NULL;
    }
    atomic_store(&s->nclasses, 0);
}
