/* verdict.c - the seed's five hard goals, checked against one run. Every
 * claim is measured by the demo itself, on the task functions' side, not
 * read from the engine under test: each function records its entry and
 * exit, the submitter counts what waits, the sampler reads this process's
 * RSS. The engine's own gauges are shown next to them, never judged.
 *
 *   1 cap       "a configurable concurrency cap, so that a burst cannot blow
 *               up memory": the task functions running at once (exact) never
 *               above the cap plus the orphans the configuration allows (an
 *               orphan is an attempt its deadline ended while its function
 *               still ran: its slot is free, its function is not), and a
 *               backlog, when one formed, had a bound (otherwise memory
 *               follows the backlog: the seed's 6 GB).
 *   2 latency   "a NORMAL task starts within 100 ms of its submission": the
 *               p99 of NORMAL's submit -> first entry into its function,
 *               counting tasks that never started with the time they waited.
 *   3 timeout   "a task over its time frees its resources, whatever it
 *               does": no task function still ran 3 s (the seed's alarm,
 *               ax's grace; plus the longest the machine stalled the demo's
 *               own thread) after its deadline. Functions back later than a
 *               slack are orphans: shown, and counted at once by goal 1.
 *   4 priority  "urgent tasks jump the queue, LOW never starves": when a
 *               queue formed (at least 1 % of the tasks arrived while every
 *               slot was busy, enough to show in a p99, and at least 100 of
 *               them HIGH, so that its p99 is not a handful's maximum), HIGH's wait p99 is
 *               at most half LOW's, and LOW tasks still started during the
 *               peak; N/A when no queue formed, since then there was nothing
 *               to jump.
 *   5 observe   "every task's lifecycle is observable": one terminal
 *               callback per admitted task, and the lifecycle events agree.
 *               A thread pool has no task lifecycle to observe: N/A.
 * A verdict states its numbers and a FAIL leads with the fact that failed.
 * When most upstream answers (or all requests) had no 2xx the upstream is not
 * serving the demo, and no verdict is given (N/A, saying why).
 */
#include "demo.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#define GOAL_WAIT_MS 100.0
/* Slack allowed past a timeout for the worker to notice it: 50 ms of wall
 * time on a busy machine, at least 100 ms of incident time. */
#define SLACK_WALL_MS 50.0
#define SLACK_MIN_MS 100.0
/* A function still running this long after its deadline is lingering
 * (ax's grace_ms, as the demo configures it). */
#define GRACE_MS 3000.0
/* A queue shows in a p99 once more than 1 % of the tasks met one. */
#define QUEUE_SHARE 0.01
/* A p99 of fewer samples is the maximum of a handful: goal 4 needs this many
 * HIGH tasks to have met the queue (a FIFO can otherwise pass by chance). */
#define MIN_HIGH_QUEUED 100
/* A run whose own thread the machine held off the CPU longer than this (wall)
 * is flagged: its timings measure the machine. */
#define STALL_WARN_WALL_MS 100.0
#define PRESSURE_WARN_PCT 80.0

static unsigned long long ull(uint64_t v)
{
    return (unsigned long long)v;
}

double dm_slack_ms(const struct dm_scenario *sc)
{
    return fmax(SLACK_MIN_MS, SLACK_WALL_MS * sc->speed);
}

uint64_t dm_answered_2xx(const struct dm_result *r)
{
    uint64_t n = 0;
    for (unsigned c = 0; c < DM_MAX_CLASSES; c++)
        for (unsigned k = 200; k < 300; k++)
            n += r->status[c][k];
    return n;
}

static uint64_t dm_class_answered(const struct dm_result *r, unsigned c)
{
    uint64_t n = 0;
    for (unsigned k = 1; k < DM_NSTATUS; k++)
        n += r->status[c][k];
    return n;
}

uint64_t dm_status_total(const struct dm_result *r)
{
    uint64_t n = 0;
    for (unsigned c = 0; c < DM_MAX_CLASSES; c++)
        for (unsigned k = 0; k < DM_NSTATUS; k++)
            n += r->status[c][k];
    return n;
}

bool dm_machine_stalled(const struct dm_scenario *sc, const struct dm_result *r)
{
    return r->stall_ms / sc->speed > STALL_WARN_WALL_MS || r->cpu_pressure_pct > PRESSURE_WARN_PCT;
}

bool dm_upstream_failing(const struct dm_result *r)
{
    /* Calls that got no answer (timeouts: the scenario's stalls, a busy
     * machine) are the demo's business; answers that are not 2xx, or no
     * 2xx at all, mean the upstream is not serving the class paths. */
    uint64_t all = dm_status_total(r), good = dm_answered_2xx(r);
    uint64_t answered = 0;
    for (unsigned c = 0; c < DM_MAX_CLASSES; c++)
        answered += dm_class_answered(r, c);
    return all > 0 && (good == 0 || 2 * good < answered);
}

const char *dm_mark_name(enum dm_mark m)
{
    return m == MARK_PASS ? "PASS" : m == MARK_FAIL ? "FAIL" : "N/A";
}

uint64_t dm_total(const struct dm_result *r, enum dm_outcome o)
{
    uint64_t n = 0;
    for (unsigned p = 0; p < DM_NPRIO; p++)
        n += r->out[p][o];
    return n;
}

uint64_t dm_sum_admitted(const struct dm_result *r)
{
    return r->admitted[0] + r->admitted[1] + r->admitted[2];
}

double dm_requests_per_task(const struct dm_result *r)
{
    uint64_t started = r->started[0] + r->started[1] + r->started[2];
    return started ? (double)r->requests / (double)started : 0;
}

double dm_requests_per_generated(const struct dm_result *r)
{
    return r->generated ? (double)r->requests / (double)r->generated : 0;
}

static void fmt_ms(char *b, size_t n, double ms)
{
    if (ms < 0)
        snprintf(b, n, "-");
    else if (ms < 10)
        snprintf(b, n, "%.1f ms", ms);
    else if (ms < 10000)
        snprintf(b, n, "%.0f ms", ms);
    else
        snprintf(b, n, "%.1f s", ms / 1000);
}

void dm_verdicts(const struct dm_scenario *sc, const struct dm_profile *p,
                 const struct dm_result *r, struct dm_verdict v[DM_NGOALS])
{
    char a[32], b[32], c[32];
    memset(v, 0, sizeof(struct dm_verdict) * DM_NGOALS);
    v[0].goal = "1 concurrency cap";
    v[1].goal = "2 NORMAL latency";
    v[2].goal = "3 timeouts free slots";
    v[3].goal = "4 priority, no starvation";
    v[4].goal = "5 lifecycle observed";

    if (dm_upstream_failing(r)) {
        uint64_t all = dm_status_total(r), good = dm_answered_2xx(r);
        for (unsigned k = 0; k < DM_NGOALS; k++) {
            v[k].mark = MARK_NA;
            snprintf(v[k].text, sizeof v[k].text,
                     "no verdict: only %llu of %llu upstream requests got a 2xx answer, so the "
                     "upstream did not serve the demo",
                     ull(good), ull(all));
        }
        return;
    }

    uint64_t adm = dm_sum_admitted(r);
    /* A backlog formed when enough tasks met every slot busy to show in a p99. */
    bool queue_formed = adm > 0 && (double)r->met_full > QUEUE_SHARE * (double)adm;
    double met_pct = adm ? 100.0 * (double)r->met_full / (double)adm : 0;

    /* 1: functions running at once vs cap + orphans allowed; the backlog's bound. */
    uint64_t cap = p && p->cap ? p->cap : r->limit;
    uint64_t allowed = cap + r->orphan_allowance;
    bool cap_ok = r->max_in_task <= allowed;
    bool bounded = r->queue_bound > 0;
    bool bound_ok = bounded ? r->max_waiting <= r->queue_bound : !queue_formed;
    v[0].mark = cap_ok && bound_ok ? MARK_PASS : MARK_FAIL;
    char orphans[96];
    if (r->orphan_allowance)
        snprintf(orphans, sizeof orphans, "cap %llu + %llu orphans allowed", ull(cap),
                 ull(r->orphan_allowance));
    else
        snprintf(orphans, sizeof orphans, "cap %llu", ull(cap));
    char backlog[160];
    if (bounded)
        snprintf(backlog, sizeof backlog, "peak backlog %llu waiting %s bound %llu",
                 ull(r->max_waiting), bound_ok ? "<=" : ">", ull(r->queue_bound));
    else if (queue_formed)
        snprintf(backlog, sizeof backlog,
                 "queues unbounded and a backlog formed (peak %llu waiting, %.0f MB RSS): memory "
                 "follows the backlog",
                 ull(r->max_waiting), r->peak_rss_mb);
    else
        snprintf(backlog, sizeof backlog,
                 "queues unbounded, but no backlog formed to test it (peak %llu waiting)",
                 ull(r->max_waiting));
    if (!cap_ok)
        snprintf(v[0].text, sizeof v[0].text,
                 "%llu task functions ran at once > %s (%llu orphans seen); %s",
                 ull(r->max_in_task), orphans, ull(r->overdue), backlog);
    else if (!bound_ok)
        snprintf(v[0].text, sizeof v[0].text, "%s; %llu task functions at once <= %s", backlog,
                 ull(r->max_in_task), orphans);
    else
        snprintf(v[0].text, sizeof v[0].text, "%llu task functions at once <= %s; %s",
                 ull(r->max_in_task), orphans, backlog);

    /* 2 */
    double w = r->wait[DM_NORMAL].p99;
    fmt_ms(a, sizeof a, w);
    v[1].mark = !r->wait[DM_NORMAL].count ? MARK_NA
                : w <= GOAL_WAIT_MS          ? MARK_PASS
                                             : MARK_FAIL;
    if (v[1].mark == MARK_NA) /* not "FAIL ... p99 - > 100 ms" with no NORMAL task (trial) */
        snprintf(v[1].text, sizeof v[1].text, "no NORMAL task started: nothing to judge");
    else
        snprintf(v[1].text, sizeof v[1].text, "NORMAL submit->start p99 %s %s 100 ms", a,
                 v[1].mark == MARK_PASS ? "<=" : ">");

    /* 3: from the functions' side. The seed's line: a task that has not
     * given back its resources 3 s after its timeout raises an alarm. A
     * function back late but within that is an orphan (its slot was freed
     * at the deadline: goal 1 counts those at once); it is shown, and how
     * many came back later than the slack, but a busy machine makes that
     * count move from run to run, so it does not decide the verdict. */
    double slack = r->slack_ms > 0 ? r->slack_ms : dm_slack_ms(sc);
    /* The machine's own stalls (measured on the demo's thread) are no
     * engine's doing: a function held off the CPU that long is late by that
     * much whatever the engine does. */
    double grace = GRACE_MS + r->stall_ms;
    bool linger_ok = r->max_over_ms <= grace;
    v[2].mark = linger_ok ? MARK_PASS : MARK_FAIL;
    fmt_ms(a, sizeof a, r->max_over_ms);
    if (r->late == 0) {
        /* No function was still running at its deadline (a fast upstream,
         * --url): no slot had to be freed, so there is nothing to judge, as
         * goal 4 with no queue to jump. */
        v[2].mark = MARK_NA;
        snprintf(v[2].text, sizeof v[2].text,
                 "no task function was still running at its deadline (0 late returns), so no "
                 "slot had to be freed: nothing to judge");
    } else if (!linger_ok)
        snprintf(v[2].text, sizeof v[2].text,
                 "a task function ran %s past its deadline > the %.0f ms grace (lingering); %llu "
                 "of %llu late returns came back later than the %.0f ms slack",
                 a, grace, ull(r->overdue), ull(r->late), slack);
    else
        snprintf(v[2].text, sizeof v[2].text,
                 "every task function was back within the %.0f ms grace of its deadline (latest "
                 "%s past it); %llu of %llu late returns came back later than the %.0f ms slack "
                 "(orphans)",
                 grace, r->max_over_ms > 0 ? a : "0 ms", ull(r->overdue), ull(r->late), slack);
    if (r->stall_ms > 0 && v[2].mark != MARK_NA) {
        size_t n = strlen(v[2].text);
        snprintf(v[2].text + n, sizeof v[2].text - n,
                 "; grace 3 s and slack %.0f ms, each plus the %.0f ms the machine kept the "
                 "demo's own thread waiting",
                 dm_slack_ms(sc), r->stall_ms);
    }

    /* 4 */
    double hi = r->wait[DM_HIGH].p99, lo = r->wait[DM_LOW].p99;
    bool fed = r->low_started_in_peak > 0 || r->admitted[DM_LOW] == 0;
    fmt_ms(a, sizeof a, hi);
    fmt_ms(b, sizeof b, lo);
    fmt_ms(c, sizeof c, lo / 2);
    if (!r->wait[DM_HIGH].count || !r->wait[DM_LOW].count) {
        /* not "HIGH waits like LOW: ... > half LOW's -" (review) */
        v[3].mark = MARK_NA;
        snprintf(v[3].text, sizeof v[3].text, "no %s task started: no queue jump to judge",
                 !r->wait[DM_HIGH].count ? "HIGH" : "LOW");
    } else if (queue_formed && r->met_full_by[DM_HIGH] < MIN_HIGH_QUEUED) {
        v[3].mark = fed ? MARK_NA : MARK_FAIL;
        snprintf(v[3].text, sizeof v[3].text,
                 "%sa queue formed (%.1f %% of tasks met every slot busy) but only %llu HIGH tasks "
                 "met it, too few for a p99 (%u needed): wait p99 HIGH %s, LOW %s",
                 fed ? "" : "LOW starved: no LOW task started during the peak; ", met_pct,
                 ull(r->met_full_by[DM_HIGH]), MIN_HIGH_QUEUED, a, b);
    } else if (!queue_formed) {
        v[3].mark = fed ? MARK_NA : MARK_FAIL;
        if (fed)
            snprintf(v[3].text, sizeof v[3].text,
                     "no queue formed to jump (%llu tasks, %.2f %%, met every slot busy): wait p99 "
                     "HIGH %s, LOW %s; %llu LOW started during the peak",
                     ull(r->met_full), met_pct, a, b, ull(r->low_started_in_peak));
        else
            snprintf(v[3].text, sizeof v[3].text,
                     "no LOW task started during the peak; no queue formed to jump");
    } else {
        bool jump = hi >= 0 && lo >= 0 && hi <= lo / 2;
        v[3].mark = jump && fed ? MARK_PASS : MARK_FAIL;
        if (!jump)
            snprintf(v[3].text, sizeof v[3].text,
                     "HIGH waits like LOW: wait p99 HIGH %s > half LOW's %s, with a queue (%.1f %% "
                     "of tasks met every slot busy); %llu LOW started during the peak",
                     a, b, met_pct, ull(r->low_started_in_peak));
        else if (!fed)
            snprintf(v[3].text, sizeof v[3].text,
                     "LOW starved: no LOW task started during the peak; wait p99 HIGH %s vs LOW %s",
                     a, b);
        else
            snprintf(
                v[3].text, sizeof v[3].text,
                "HIGH jumps the queue: wait p99 HIGH %s <= half LOW's %s (%.1f %% of tasks met "
                "every slot busy); %llu LOW started during the peak",
                a, b, met_pct, ull(r->low_started_in_peak));
    }

    /* 5 */
    if (p && p->engine == ENG_THREADS) {
        v[4].mark = MARK_NA;
        snprintf(v[4].text, sizeof v[4].text,
                 "a thread pool has no task lifecycle: the demo counted outcomes itself");
    } else {
        bool calls = r->on_done_calls == adm;
        bool events = r->ev_dropped == 0 && r->ev_submitted == adm && r->ev_terminal == adm;
        v[4].mark = calls && events ? MARK_PASS : MARK_FAIL;
        snprintf(v[4].text, sizeof v[4].text,
                 "%s%llu on_done for %llu admitted; events: %llu submitted, %llu terminal, %llu "
                 "dropped",
                 calls && events ? ""
                 : calls         ? "events disagree: "
                                 : "on_done count is off: ",
                 ull(r->on_done_calls), ull(adm), ull(r->ev_submitted), ull(r->ev_terminal),
                 ull(r->ev_dropped));
    }
}

void dm_status_text(const struct dm_result *r, unsigned cls, unsigned top, char *out, size_t len)
{
    /* The top commonest answers, then how many others. */
    const uint64_t *st = r->status[cls];
    bool used[DM_NSTATUS] = {0};
    size_t n = 0;
    uint64_t shown = 0, all = 0;
    out[0] = 0;
    for (unsigned k = 0; k < DM_NSTATUS; k++)
        all += st[k];
    for (unsigned round = 0; round < top; round++) {
        unsigned best = DM_NSTATUS;
        for (unsigned k = 0; k < DM_NSTATUS; k++)
            if (st[k] && !used[k] && (best == DM_NSTATUS || st[k] > st[best])) best = k;
        if (best == DM_NSTATUS) break;
        used[best] = true;
        shown += st[best];
        char code[8];
        snprintf(code, sizeof code, best ? "%u" : "none", best);
        n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s:%llu", n ? " " : "", code,
                              ull(st[best]));
    }
    if (all > shown)
        snprintf(out + n, n < len ? len - n : 0, "%sother:%llu", n ? " " : "", ull(all - shown));
    if (!all) snprintf(out, len, "-");
}

/* ---- the overload measures and ax-auto's targets (issue 12) ------------------ */

double dm_requests_per_degraded_task(const struct dm_result *r)
{
    return r->degraded_tasks ? (double)r->degraded_requests / (double)r->degraded_tasks : NAN;
}

double dm_goodput(const struct dm_scenario *sc, const struct dm_result *r)
{
    double s = dm_scenario_length_ms(sc) / 1000;
    return s > 0 ? (double)r->good / s : NAN;
}

double dm_high_success(const struct dm_result *r)
{
    return r->generated_by[DM_HIGH]
               ? (double)r->out[DM_HIGH][OUT_SUCCEEDED] / (double)r->generated_by[DM_HIGH]
               : NAN;
}

#define TARGET_HIGH_WAIT_MS 100.0
#define TARGET_REQ_PER_TASK 1.1
#define TARGET_RECOVERY_MS 2000.0

static void target(struct dm_verdict *v, const char *goal, bool judged, bool pass, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));
static void target(struct dm_verdict *v, const char *goal, bool judged, bool pass, const char *fmt,
                   ...)
{
    v->goal = goal;
    v->mark = !judged ? MARK_NA : pass ? MARK_PASS : MARK_FAIL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->text, sizeof v->text, fmt, ap);
    va_end(ap);
}

void dm_targets(const struct dm_scenario *sc, const struct dm_result *a, const struct dm_result *t,
                struct dm_verdict v[DM_NTARGETS])
{
    bool vs = t && t->ok;
    const char *no = "no seed-tuned run to compare with";

    double w = a->wait_high_peak.p99;
    if (!a->wait_high_peak.count) /* not "p99 -1.0 ms <= 100 ms (0 HIGH tasks)" (review) */
        target(&v[0], "T1 HIGH wait in the peak", false, false,
               "no HIGH task started in the peak: nothing to judge");
    else
        target(&v[0], "T1 HIGH wait in the peak", true, w <= TARGET_HIGH_WAIT_MS,
               "HIGH submit -> start p99 %.1f ms %s %.0f ms (%llu HIGH tasks)", w,
               w <= TARGET_HIGH_WAIT_MS ? "<=" : ">", TARGET_HIGH_WAIT_MS,
               ull(a->wait_high_peak.count));

    double q = dm_requests_per_degraded_task(a);
    if (!isfinite(q)) /* not "nan ... > 1.1" */
        target(&v[1], "T2 requests per task, degraded", false, false,
               "no task admitted while degraded (no degraded phase, or no traffic in it)");
    else
        target(&v[1], "T2 requests per task, degraded", true, q <= TARGET_REQ_PER_TASK,
               "%.3f upstream requests per task admitted while degraded %s %.1f (%llu "
               "requests, %llu tasks)",
               q, q <= TARGET_REQ_PER_TASK ? "<=" : ">", TARGET_REQ_PER_TASK,
               ull(a->degraded_requests), ull(a->degraded_tasks));

    if (vs)
        target(&v[2], "T3 peak RSS", true, a->peak_rss_mb <= t->peak_rss_mb,
               "%.1f MB %s seed-tuned's %.1f MB", a->peak_rss_mb,
               a->peak_rss_mb <= t->peak_rss_mb ? "<=" : ">", t->peak_rss_mb);
    else
        target(&v[2], "T3 peak RSS", false, false, "%s", no);

    if (!isfinite(a->recovery_ms))
        target(&v[3], "T4 recovery", false, false, "no degradation or no steady wait to compare");
    else if (a->recovery_ms < 0)
        target(&v[3], "T4 recovery", true, false,
               "the wait p99 never stayed under %.0f ms (2 x steady) before the traffic ended",
               a->recovery_limit_ms);
    else if (!isfinite(a->ans_p50_at_recovery_ms))
        target(&v[3], "T4 recovery", true, a->recovery_ms <= TARGET_RECOVERY_MS,
               "wait p99 back under %.0f ms %.1f s after the upstream recovered %s %.0f s "
               "(that p99 is over the starts of the last %.2f s)",
               a->recovery_limit_ms, a->recovery_ms / 1000,
               a->recovery_ms <= TARGET_RECOVERY_MS ? "<=" : ">", TARGET_RECOVERY_MS / 1000,
               a->recovery_window_ms / 1000);
    else {
        char up[160];
        if (isfinite(a->ans_back_ms))
            snprintf(up, sizeof up, "back within 1.5 x steady %.1f s after", a->ans_back_ms / 1000);
        else
            snprintf(up, sizeof up, "not back within 1.5 x steady before the run ended");
        target(&v[3], "T4 recovery", true, a->recovery_ms <= TARGET_RECOVERY_MS,
               "wait p99 back under %.0f ms %.1f s after the upstream recovered %s %.0f s "
               "(that p99 is over the starts of the last %.2f s); the upstream's answers took "
               "p50 %.0f ms then (%.0f ms steady), %s",
               a->recovery_limit_ms, a->recovery_ms / 1000,
               a->recovery_ms <= TARGET_RECOVERY_MS ? "<=" : ">", TARGET_RECOVERY_MS / 1000,
               a->recovery_window_ms / 1000, a->ans_p50_at_recovery_ms, a->ans_p50_steady_ms,
               up);
    }

    if (vs) {
        double ga = dm_goodput(sc, a), gt = dm_goodput(sc, t);
        target(&v[4], "T5 goodput", true, ga >= gt,
               "%.1f tasks/s succeeded within %.0f s %s seed-tuned's %.1f", ga,
               sc->deadline_ms / 1000, ga >= gt ? ">=" : "<", gt);
        double ha = dm_high_success(a), ht = dm_high_success(t);
        if (!isfinite(ha) || !isfinite(ht)) /* not "nan % < nan %" (trial) */
            target(&v[5], "T6 HIGH success", false, false,
                   "no HIGH task generated: nothing to compare");
        else
            target(&v[5], "T6 HIGH success", true, ha >= ht,
                   "%.1f %% of HIGH tasks %s seed-tuned's %.1f %%", 100 * ha,
                   ha >= ht ? ">=" : "<", 100 * ht);
    } else {
        target(&v[4], "T5 goodput", false, false, "%s", no);
        target(&v[5], "T6 HIGH success", false, false, "%s", no);
    }
}
