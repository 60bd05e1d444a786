/* eng_ax.c - the configurations under test: ax, through its public API only.
 *
 * The profile becomes an ax_config (max_concurrency, bucket bounds, shed
 * ratio, the default retry policy, grace) plus, per task, an ax_spec: the
 * priority, the timeout (one for all, or the task class's, seed §4.4), the
 * retry count and policy. "No LOW retries" is ax_set_retry_enabled, the
 * run-time switch an operator would flip in the incident (§4.2). A task is
 * one GET to the upstream through ax_http_get, bounded by the task's
 * deadline; a non-200 answer fails the attempt, so ax retries it.
 *
 * Outcomes come from on_done (exactly once per admitted task: counted, and
 * a second call for a task would be counted as a duplicate); refusals from
 * ax_submit's return (AX_ESHED = shed, AX_EFULL/AX_ERATE = rejected). The
 * lifecycle events go, in lossless mode, to a callback sink that only counts
 * them, to check the seed's fifth goal against the callbacks.
 *
 * ax-auto (issue 12) is ax_config_default and one ax task class per scenario
 * class, registered from ax_class_config_default with only the class's name,
 * timeout and retries (count and policy) set: the adaptive limit, the retry
 * budget, the breaker and the queue-time budget run at their defaults. Each
 * submission names its class and keeps its own priority (AX_SPEC_PRIORITY).
 * The only numbers changed are durations, divided by the speed like every
 * other duration in the demo (grace, the classes' windows): counts and
 * ratios are ax's. AX_EOPEN at submit counts as rejected; AX_EOPEN and
 * AX_EEXPIRED terminal failures as failed (and apart, in results.json).
 */
#include "run.h"

#include "ax_http.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ax_sched *S;
static ax_retry_policy policy;
static _Atomic uint64_t ev_submitted, ev_terminal;
static unsigned max_orphans;
static unsigned class_id[DM_MAX_CLASSES];
static unsigned nclasses;

static ax_priority ax_prio(unsigned p)
{
    return p == DM_HIGH ? AX_PRIO_HIGH : p == DM_LOW ? AX_PRIO_LOW : AX_PRIO_NORMAL;
}

static uint32_t wall_ms(double incident_ms)
{
    double v = incident_ms / dm_run_g.speed;
    return v < 1 ? 1 : (uint32_t)llround(v);
}

static void on_event(const ax_event *ev, void *arg)
{
    (void)arg;
    switch (ev->kind) {
    case AX_EV_SUBMITTED:
        atomic_fetch_add_explicit(&ev_submitted, 1, memory_order_relaxed);
        break;
    case AX_EV_SUCCEEDED:
    case AX_EV_FAILED:
    case AX_EV_TIMED_OUT:
    case AX_EV_CANCELLED:
        atomic_fetch_add_explicit(&ev_terminal, 1, memory_order_relaxed);
        break;
    default:
        break;
    }
}

/* A wall-time rendering of an incident-time default (ms). */
static uint32_t scaled_ms(uint64_t incident_ms)
{
    return wall_ms((double)incident_ms);
}

static int auto_start(char *err, size_t errlen)
{
    const struct dm_profile *p = dm_run_g.p;
    const struct dm_scenario *sc = dm_run_g.sc;
    ax_config c;
    ax_config_default(&c);
    c.grace_ms = wall_ms(3000);
    /* ax's default bound on orphans: 0 means max_concurrency, at least 64. */
    max_orphans = c.max_orphans ? c.max_orphans : (c.max_concurrency > 64 ? c.max_concurrency : 64);
    int rc = ax_new(&c, &S);
    if (rc) {
        snprintf(err, errlen, "ax_new: %s: %s", ax_strerror(rc), ax_error_detail());
        return -1;
    }
    policy.mode = AX_BACKOFF_EXPONENTIAL;
    policy.base_ms = wall_ms(p->retry_base_ms > 0 ? p->retry_base_ms : 1000);
    policy.max_ms = wall_ms(p->retry_max_ms > 0 ? p->retry_max_ms : 1000);
    if (policy.max_ms < policy.base_ms) policy.max_ms = policy.base_ms;
    policy.jitter_ms = p->retry_jitter_ms > 0 ? wall_ms(p->retry_jitter_ms) : 0;
    nclasses = 0;
    for (unsigned i = 0; i < sc->ncls; i++) {
        ax_class_config cc;
        ax_class_config_default(&cc);
        cc.name = sc->cls[i].name;
        cc.timeout_ms = dm_run_g.timeout_wall_ms[i];
        cc.max_retry = p->retry == RETRY_NONE ? 0 : p->max_retry;
        cc.retry = policy;
        /* Durations at the demo's speed; the defaults' counts and ratios as they are. */
        cc.retry_budget_window_ms = scaled_ms(cc.retry_budget_window_ms);
        cc.retry_budget_min_per_s *= dm_run_g.speed;
        cc.breaker_window_ms = scaled_ms(cc.breaker_window_ms);
        cc.breaker_open_ms = scaled_ms(cc.breaker_open_ms);
        if (cc.queue_budget_ms) cc.queue_budget_ms = scaled_ms(cc.queue_budget_ms);
        rc = ax_class_register(S, &cc, &class_id[i]);
        if (rc) {
            snprintf(err, errlen, "ax_class_register(%s): %s: %s", cc.name, ax_strerror(rc),
                     ax_error_detail());
            ax_free(S);
            S = NULL;
            return -1;
        }
        nclasses++;
    }
    return 0;
}

static int ax_start(char *err, size_t errlen)
{
    const struct dm_profile *p = dm_run_g.p;
    nclasses = 0;
    if (p->engine == ENG_AX_AUTO) {
        if (auto_start(err, errlen) != 0) return -1;
        goto events;
    }
    ax_config c;
    ax_config_default(&c);
    c.max_concurrency = p->cap;
    bool bounded = p->queue[0] || p->queue[1] || p->queue[2];
    for (unsigned i = 0; i < DM_NPRIO; i++)
        /* "Unbounded": as large as ax's task table allows (2 million in all). */
        c.capacity[ax_prio(i)] = bounded ? p->queue[i] : 600000;
    c.shed_ratio = bounded ? p->shed_ratio : 1.0;
    c.max_retry_cap = 16;
    policy.mode = AX_BACKOFF_EXPONENTIAL;
    policy.base_ms = wall_ms(p->retry_base_ms > 0 ? p->retry_base_ms : 1000);
    policy.max_ms = wall_ms(p->retry_max_ms > 0 ? p->retry_max_ms : 1000);
    if (policy.max_ms < policy.base_ms) policy.max_ms = policy.base_ms;
    policy.jitter_ms = p->retry_jitter_ms > 0 ? wall_ms(p->retry_jitter_ms) : 0;
    c.retry = policy;
    c.grace_ms = wall_ms(3000);
    /* An attempt ended by its deadline while its function still runs (an
     * orphan) gives up its slot, so the functions running at once can pass
     * the cap by the orphans alive. ax bounds them (max_orphans: at the
     * bound no new attempt starts); its default, the cap itself, would let
     * twice the cap run. The demo allows 2 % of the cap (at least 4) and
     * goal 1 counts against cap + that. */
    c.max_orphans = p->cap / 50 > 4 ? p->cap / 50 : 4;
    max_orphans = c.max_orphans;
    int rc = ax_new(&c, &S);
    if (rc) {
        snprintf(err, errlen, "ax_new: %s: %s", ax_strerror(rc), ax_error_detail());
        return -1;
    }
    if (!p->retry_low) ax_set_retry_enabled(S, AX_PRIO_LOW, false);
events:
    ax_events_callback(S, on_event, NULL);
    /* Goal 5 asks for every task's lifecycle: a producer that finds its
     * ring full waits rather than drops (the default drops, and the ~20 000
     * CANCELLED events of seed-before's shutdown overflow a ring at once). */
    ax_events_lossless(S, true);
    ax_events_filter(S,
                     AX_EVMASK(AX_EV_SUBMITTED) | AX_EVMASK(AX_EV_SUCCEEDED) |
                         AX_EVMASK(AX_EV_FAILED) | AX_EVMASK(AX_EV_TIMED_OUT) |
                         AX_EVMASK(AX_EV_CANCELLED),
                     1);
    return 0;
}

static int attempt(ax_task *t, void *arg)
{
    struct dm_task *tk = arg;
    /* tk lives until on_release, which ax runs only after this function
     * returned: on_done, which may run before this function's first line
     * (a cancel at shutdown) or while the call is in progress (the
     * deadline), only counts the end. */
    unsigned cls = tk->cls;
    uint64_t t0 = dm_attempt_begin(tk);
    ax_http_response resp;
    int rc = ax_http_get(t, dm_run_g.url[cls], -1, &resp);
    long status = rc == 0 ? resp.status : 0;
    ax_http_response_free(&resp);
    dm_attempt_end(cls, t0, status);
    if (rc) return rc;
    if (status != 200) {
        ax_task_set_error(t, "HTTP %ld", status);
        return 1;
    }
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    struct dm_task *tk = arg;
    atomic_fetch_add_explicit(&dm_run_g.on_done_calls, 1, memory_order_relaxed);
    enum dm_outcome o = r->state == AX_STATE_SUCCEEDED   ? OUT_SUCCEEDED
                        : r->state == AX_STATE_TIMED_OUT ? OUT_TIMED_OUT
                        : r->state == AX_STATE_CANCELLED ? OUT_CANCELLED
                                                         : OUT_FAILED;
    if (nclasses && o != OUT_SUCCEEDED) {
        if (r->code == AX_EOPEN)
            atomic_fetch_add_explicit(&dm_run_g.open_failed, 1, memory_order_relaxed);
        else if (r->code == AX_EEXPIRED)
            atomic_fetch_add_explicit(&dm_run_g.expired, 1, memory_order_relaxed);
        /* "retry budget exhausted" or "retries throttled" (class.c) */
        if (strstr(r->error, "not retried: class"))
            atomic_fetch_add_explicit(&dm_run_g.budget_denied, 1, memory_order_relaxed);
    }
    dm_task_account(tk, o);
}

static void on_release(void *arg)
{
    free(arg); /* the struct dm_task: no attempt of it can run any more */
}

static int ax_submit_task(struct dm_task *tk)
{
    const struct dm_profile *p = dm_run_g.p;
    ax_spec sp = {
        .fn = attempt,
        .arg = tk,
        .priority = ax_prio(tk->prio),
        .timeout_ms = dm_run_g.timeout_wall_ms[tk->cls],
        .max_retry = p->retry == RETRY_NONE ? 0 : p->max_retry,
        .retry = &policy,
        .on_done = on_done,
        .cb_arg = tk,
        .on_release = on_release,
    };
    if (nclasses) {
        /* The class's timeout, retry count and policy; the task's own priority. */
        sp.class_id = class_id[tk->cls];
        sp.overrides = AX_SPEC_PRIORITY;
        sp.timeout_ms = 0;
        sp.max_retry = 0;
        sp.retry = NULL;
    }
    int rc = ax_submit(S, &sp, NULL);
    if (rc == 0) return 0;
    if (rc == AX_EOPEN) atomic_fetch_add_explicit(&dm_run_g.open_refused, 1, memory_order_relaxed);
    return rc == AX_ESHED ? OUT_SHED : OUT_REJECTED;
}

static void ax_gauges(struct dm_gauges *g)
{
    ax_stats st;
    memset(g, 0, sizeof *g);
    if (ax_stats_get(S, &st) != 0) return;
    for (unsigned i = 0; i < DM_NPRIO; i++)
        g->queued[i] = st.queued[ax_prio(i)];
    g->delayed = st.delayed;
    g->running = st.running;
    g->limit = st.limit;
}

static bool ax_idle(void)
{
    ax_stats st;
    if (ax_stats_get(S, &st) != 0) return false;
    return st.queued[0] + st.queued[1] + st.queued[2] + st.delayed + st.running == 0;
}

static void ax_stop(void)
{
    /* Queued and waiting-to-retry tasks end CANCELLED (on_done runs for
     * each); running ones are cancelled too: the run is over. */
    ax_shutdown(S, 0);
}

static void ax_finish(struct dm_result *r)
{
    ax_events_flush(S);
    ax_metrics m;
    if (ax_metrics_get(S, &m) == 0) {
        r->retries = m.stats.retried;
        /* ax's own account of how long an attempt held its slot. */
        for (unsigned p = 0; p < AX_PRIO_COUNT; p++) {
            double ms = (double)m.run[p].max_ns / 1e6 * dm_run_g.speed;
            if (ms > r->max_slot_ms) r->max_slot_ms = ms;
        }
        r->lingering = m.stats.lingering;
        r->orphans = m.stats.orphans;
    }
    r->orphan_allowance = max_orphans;
    r->ev_submitted = atomic_load(&ev_submitted);
    r->ev_terminal = atomic_load(&ev_terminal);
    r->ev_dropped = ax_events_dropped(S);
    ax_free(S);
    S = NULL;
}

static void ax_class_sample(struct dm_result *r, unsigned i)
{
    r->nclasses = 0;
    for (unsigned c = 0; c < nclasses && c < DM_MAX_CLASSES; c++) {
        ax_class_stats st;
        float(*cs)[DM_MAX_SAMPLES] = r->cls[c];
        if (ax_class_stats_get(S, class_id[c], &st) != 0) {
            for (unsigned k = 0; k < DM_NCS; k++)
                cs[k][i] = NAN;
            continue;
        }
        cs[CS_LIMIT][i] = (float)st.limit;
        cs[CS_IN_FLIGHT][i] = (float)st.in_flight;
        cs[CS_QUEUED][i] = (float)st.queued;
        cs[CS_BREAKER][i] = st.breaker == AX_BREAKER_OPEN        ? 2.0f
                            : st.breaker == AX_BREAKER_HALF_OPEN ? 1.0f
                                                                 : 0.0f;
        cs[CS_BUDGET_LEFT][i] = (float)st.retry_budget_left;
        cs[CS_RETRIES_ALLOWED][i] = (float)st.retries_allowed;
        cs[CS_RETRIES_DENIED][i] = (float)st.retries_denied;
        cs[CS_EXPIRED][i] = (float)st.expired;
        cs[CS_OPEN_REJECTED][i] = (float)st.breaker_rejected;
        cs[CS_MARK][i] = (float)st.limit_mark;
    }
    r->nclasses = nclasses;
}

const struct dm_engine_ops dm_engine_ax = {
    .start = ax_start,
    .submit = ax_submit_task,
    .gauges = ax_gauges,
    .idle = ax_idle,
    .stop = ax_stop,
    .finish = ax_finish,
    .class_sample = ax_class_sample,
};
