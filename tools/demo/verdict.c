/* verdict.c - the seed's five hard goals (§1.3), checked against one run.
 *
 *   1 cap       "concurrency cap configurable, default <= 500, so that a burst
 *               cannot blow up memory": slots in use never above the limit,
 *               and the queues are bounded (otherwise memory follows the
 *               backlog, the seed's 6 GB of §2.3).
 *   2 latency   "a NORMAL task starts <= 100 ms after submission": the p99 of
 *               NORMAL's submit -> first start, counting tasks that never
 *               started with the time they waited.
 *   3 timeout   "a task over its time must free its resources, whatever the
 *               task does": no attempt held its slot past its timeout plus a
 *               scheduling slack (50 ms of wall time, at least 100 ms), and
 *               (ax) no task was reported lingering.
 *   4 priority  "urgent tasks jump the queue, LOW never starves": HIGH's
 *               wait p99 is at most half LOW's (or within the 100 ms goal),
 *               and LOW tasks still started while the peak lasted.
 *   5 observe   "every task's lifecycle is observable": one terminal
 *               callback per admitted task, and the lifecycle events agree.
 *               A thread pool has no task lifecycle to observe: N/A.
 * A verdict states its numbers, so a FAIL says by how much.
 */
#include "demo.h"

#include <math.h>
#include <string.h>

#define GOAL_WAIT_MS 100.0
/* Slack allowed past a timeout for the worker to notice it: 50 ms of wall
 * time on a busy machine, at least 100 ms of incident time. */
#define SLACK_WALL_MS 50.0
#define SLACK_MIN_MS 100.0

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
    char a[32], b[32];
    memset(v, 0, sizeof(struct dm_verdict) * DM_NGOALS);

    v[0].goal = "1 concurrency cap";
    bool cap_ok = r->max_in_flight <= r->limit;
    bool bounded = r->queue_bound > 0;
    v[0].mark = cap_ok && bounded ? MARK_PASS : MARK_FAIL;
    if (bounded)
        snprintf(v[0].text, sizeof v[0].text,
                 "max in flight %llu <= %llu; queues bounded (peak %llu queued of %llu)",
                 (unsigned long long)r->max_in_flight, (unsigned long long)r->limit,
                 (unsigned long long)r->max_queued, (unsigned long long)r->queue_bound);
    else
        snprintf(v[0].text, sizeof v[0].text,
                 "max in flight %llu %s %llu; queues unbounded (peak %llu queued, memory "
                 "follows the backlog)",
                 (unsigned long long)r->max_in_flight, cap_ok ? "<=" : ">",
                 (unsigned long long)r->limit, (unsigned long long)r->max_queued);

    v[1].goal = "2 NORMAL latency";
    double w = r->wait[DM_NORMAL].p99;
    fmt_ms(a, sizeof a, w);
    v[1].mark = r->wait[DM_NORMAL].count && w <= GOAL_WAIT_MS ? MARK_PASS : MARK_FAIL;
    snprintf(v[1].text, sizeof v[1].text, "NORMAL submit->start p99 %s %s 100 ms", a,
             v[1].mark == MARK_PASS ? "<=" : ">");

    v[2].goal = "3 timeouts free slots";
    double slack = fmax(SLACK_MIN_MS, SLACK_WALL_MS * sc->speed);
    double bound = r->max_timeout_ms + slack;
    fmt_ms(a, sizeof a, r->max_slot_ms);
    fmt_ms(b, sizeof b, r->max_timeout_ms);
    bool t_ok = r->max_slot_ms <= bound && r->lingering == 0;
    v[2].mark = t_ok ? MARK_PASS : MARK_FAIL;
    snprintf(v[2].text, sizeof v[2].text,
             "longest slot hold %s %s timeout %s + %.0f ms slack; %llu lingering", a,
             r->max_slot_ms <= bound ? "<=" : ">", b, slack, (unsigned long long)r->lingering);

    v[3].goal = "4 priority, no starvation";
    double hi = r->wait[DM_HIGH].p99, lo = r->wait[DM_LOW].p99;
    bool jump = hi >= 0 && (hi <= GOAL_WAIT_MS || (lo >= 0 && hi <= lo / 2));
    bool fed = r->low_started_in_peak > 0 || r->admitted[DM_LOW] == 0;
    v[3].mark = jump && fed ? MARK_PASS : MARK_FAIL;
    fmt_ms(a, sizeof a, hi);
    fmt_ms(b, sizeof b, lo);
    snprintf(v[3].text, sizeof v[3].text,
             "wait p99 HIGH %s vs LOW %s (%s); %llu LOW started during the peak", a, b,
             jump ? "HIGH jumps the queue" : "HIGH waits like LOW",
             (unsigned long long)r->low_started_in_peak);

    v[4].goal = "5 lifecycle observed";
    uint64_t adm = dm_sum_admitted(r);
    if (p->engine == ENG_THREADS) {
        v[4].mark = MARK_NA;
        snprintf(v[4].text, sizeof v[4].text,
                 "a thread pool has no task lifecycle: the demo counted outcomes itself");
    } else {
        bool ok = r->on_done_calls == adm && r->ev_dropped == 0 && r->ev_submitted == adm &&
                  r->ev_terminal == adm;
        v[4].mark = ok ? MARK_PASS : MARK_FAIL;
        snprintf(v[4].text, sizeof v[4].text,
                 "on_done %llu %s admitted %llu; events: %llu submitted, %llu terminal, %llu "
                 "dropped",
                 (unsigned long long)r->on_done_calls,
                 r->on_done_calls == adm ? "==" : "!=", (unsigned long long)adm,
                 (unsigned long long)r->ev_submitted, (unsigned long long)r->ev_terminal,
                 (unsigned long long)r->ev_dropped);
    }
}
