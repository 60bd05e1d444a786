/* prom.c - Prometheus text exposition, format 0.0.4 (DESIGN.md §9).
 *
 * What it owns
 * ------------
 * The metric names, their help text and the rendering of one
 * struct ax_metrics_snapshot into a caller's buffer. Exposed families, in
 * output order:
 *
 *   counters   ax_tasks_{submitted,started,succeeded,failed,timed_out,
 *              cancelled,retried,rejected,shed,panicked,lingering}_total,
 *              ax_callback_{overruns,dropped}_total, ax_events_dropped_total,
 *              per priority (label priority) ax_priority_{submitted,
 *              rejected,shed,succeeded,failed,timed_out,cancelled}_total
 *   gauges     ax_queue_length{priority}, ax_tasks_delayed, ax_tasks_running,
 *              ax_concurrency_limit, ax_tasks_orphaned, ax_stacks_in_use
 *   histograms ax_wait_seconds{priority}, ax_run_seconds{priority}
 *   per task class (when classes are registered), label class:
 *              gauges ax_class_{limit,in_flight,queue_length,breaker_state,
 *              retry_budget_left,retry_tokens,latency_seconds,
 *              latency_baseline_seconds},
 *              counters ax_class_{submitted,started,succeeded,failed,
 *              timed_out,cancelled,expired,breaker_opened,breaker_rejected,
 *              retries_allowed,retries_denied}_total
 *
 * priority is "high", "normal", "low", in that order; class in
 * registration order.
 *
 * Format rules kept here (what promtool and the Go parser insist on): every
 * family has one HELP and one TYPE line before its samples and its samples
 * are contiguous; label values escape \ " and newline, HELP text \ and
 * newline; numbers are printed exactly as the Go client prints float64s
 * (strconv 'g', shortest round-trip, so 1234567 is "1.234567e+06"); a
 * histogram's buckets are cumulative, end with le="+Inf" equal to _count,
 * then _sum and _count; the text ends with a newline.
 *
 * Histogram buckets. The fine log-linear buckets of hist.h (3 % wide) are
 * folded into a fixed, readable set of `le` bounds, 10 us .. 60 s. A fine
 * bucket counts under every bound >= its midpoint, so a bound is effectively
 * placed within 1.6 % of its nominal value. _sum is in seconds.
 *
 * Complexity: O(families + 2 * 3 * AX_HIST_NBUCKETS); about 16 KB of text.
 * ax_prom_merge (appenders' text, up to 16 MiB each) is O(bytes) expected:
 * families by name and samples by name and labels are found in hash
 * tables, never by scanning what came before.
 */
#include "prom.h"
#include "internal.h" /* ax_rand64 */

#include <math.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double ax_prom_bounds[AX_PROM_NBOUNDS] = {
    1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,  0.1,     0.25,  0.5,    1,       2.5,    5,     10,     30,    60,
};

/* Exposition order of the priority label, and its value. */
static const struct {
    ax_priority prio;
    const char *name;
} prio_order[AX_PRIO_COUNT] = {
    {AX_PRIO_HIGH, "high"},
    {AX_PRIO_NORMAL, "normal"},
    {AX_PRIO_LOW, "low"},
};

/* ---- bounded writer: snprintf semantics over many appends ------------------ */

struct out {
    char *buf;
    size_t len; /* capacity including the NUL */
    size_t n;   /* bytes the full text needs so far */
};

static void put(struct out *o, const char *s, size_t k)
{
    if (o->len > 0 && o->n < o->len - 1) {
        size_t room = o->len - 1 - o->n;
        memcpy(o->buf + o->n, s, k < room ? k : room);
    }
    o->n += k;
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void putc_(struct out *o, char c)
{
    put(o, &c, 1);
}

static void put_double(struct out *o, double v)
{
    char tmp[32];
    put(o, tmp, ax_prom_format_double(v, tmp));
}

/* Label value: \ -> \\, " -> \", newline -> \n. HELP text: the same but
 * without the quote. */
static void put_escaped(struct out *o, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            puts_(o, "\\\\");
        else if (*s == '\n')
            puts_(o, "\\n");
        else if (*s == '"' && quote)
            puts_(o, "\\\"");
        else
            putc_(o, *s);
    }
}

/* ---- Go's strconv.FormatFloat(v, 'g', -1, 64) -------------------------------- */

/* Decimal digits dig[0..nd) and exponent x: the value d.ddd * 10^x. */
struct decimal {
    char dig[20];
    int nd, x;
};

/* Does the decimal read back as a (> 0)? Printed as an integer mantissa so
 * that no locale decimal point is involved. */
static double decimal_value(const struct decimal *d)
{
    char s[48];
    memcpy(s, d->dig, (size_t)d->nd);
    snprintf(s + d->nd, sizeof s - (size_t)d->nd, "e%d", d->x - (d->nd - 1));
    return strtod(s, NULL);
}

/* a (> 0, finite) correctly rounded to p significant digits. */
static void decimal_round(struct decimal *d, double a, int p)
{
    char tmp[40];
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, a);
    d->nd = 0;
    const char *s = tmp;
    for (; *s && *s != 'e'; s++) /* skips the locale's decimal point */
        if (*s >= '0' && *s <= '9' && d->nd < (int)sizeof d->dig) d->dig[d->nd++] = *s;
    d->x = *s == 'e' ? (int)strtol(s + 1, NULL, 10) : 0;
}

/* The next p-digit decimal up: add one unit in the last place. */
static void decimal_up(struct decimal *d)
{
    int i = d->nd - 1;
    while (i >= 0 && d->dig[i] == '9')
        d->dig[i--] = '0';
    if (i >= 0) {
        d->dig[i]++;
    } else { /* 99..9 -> 100..0 */
        d->dig[0] = '1';
        d->x++;
    }
}

/* Shortest digits that read back as a, the closest such if there are
 * several (what Go's shortest mode returns). The correctly rounded p-digit
 * decimal is the closest; the one above it can still be the only one that
 * reads back when a is a power of two (the gap below a is half the gap
 * above). */
static void decimal_shortest(struct decimal *d, double a)
{
    for (int p = 1; p <= 17; p++) {
        decimal_round(d, a, p);
        double r = decimal_value(d);
        if (r == a) break;
        if (r < a) {
            struct decimal up = *d;
            decimal_up(&up);
            if (decimal_value(&up) == a) {
                *d = up;
                break;
            }
        }
    }
    while (d->nd > 1 && d->dig[d->nd - 1] == '0')
        d->nd--;
}

size_t ax_prom_format_double(double v, char out[32])
{
    /* The Go client's writeFloat special cases, then strconv. */
    if (v == 1) return (size_t)snprintf(out, 32, "1");
    if (v == 0) return (size_t)snprintf(out, 32, "0");
    if (v == -1) return (size_t)snprintf(out, 32, "-1");
    if (isnan(v)) return (size_t)snprintf(out, 32, "NaN");
    if (isinf(v)) return (size_t)snprintf(out, 32, v > 0 ? "+Inf" : "-Inf");

    bool neg = v < 0;
    struct decimal d;
    decimal_shortest(&d, neg ? -v : v);
    const char *dig = d.dig;
    int nd = d.nd, x = d.x;

    /* strconv 'g' with shortest digits: %e when the exponent is < -4 or
     * >= 6 (eprec is 6 for the shortest form), else %f with just the digits
     * needed. */
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (x < -4 || x >= 6) {
        out[k++] = dig[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++)
                out[k++] = dig[i];
        }
        out[k++] = 'e';
        out[k++] = x < 0 ? '-' : '+';
        int ax = x < 0 ? -x : x;
        k += (size_t)snprintf(out + k, 32 - k, "%02d", ax);
    } else {
        int dp = x + 1; /* digits before the point; -3 .. 6 */
        if (dp <= 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -dp; i++)
                out[k++] = '0';
            for (int i = 0; i < nd; i++)
                out[k++] = dig[i];
        } else {
            for (int i = 0; i < dp; i++)
                out[k++] = i < nd ? dig[i] : '0';
            if (nd > dp) {
                out[k++] = '.';
                for (int i = dp; i < nd; i++)
                    out[k++] = dig[i];
            }
        }
        out[k] = '\0';
    }
    return k;
}

/* ---- families ------------------------------------------------------------------ */

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    puts_(o, "# HELP ");
    puts_(o, name);
    putc_(o, ' ');
    put_escaped(o, help, false);
    puts_(o, "\n# TYPE ");
    puts_(o, name);
    putc_(o, ' ');
    puts_(o, type);
    putc_(o, '\n');
}

/* name[suffix]{label="value"[,le="bound"]} v */
static void sample(struct out *o, const char *name, const char *suffix, const char *label,
                   const char *value, const double *le, double v)
{
    puts_(o, name);
    puts_(o, suffix);
    if (label || le) {
        putc_(o, '{');
        if (label) {
            puts_(o, label);
            puts_(o, "=\"");
            put_escaped(o, value, true);
            putc_(o, '"');
        }
        if (le) {
            puts_(o, label ? ",le=\"" : "le=\"");
            put_double(o, *le);
            putc_(o, '"');
        }
        putc_(o, '}');
    }
    putc_(o, ' ');
    put_double(o, v);
    putc_(o, '\n');
}

static void counter(struct out *o, const char *name, const char *help, uint64_t v)
{
    family(o, name, "counter", help);
    sample(o, name, "", NULL, NULL, NULL, (double)v);
}

static void gauge(struct out *o, const char *name, const char *help, uint64_t v)
{
    family(o, name, "gauge", help);
    sample(o, name, "", NULL, NULL, NULL, (double)v);
}

/* One histogram series: fold the fine buckets into ax_prom_bounds. */
static void hist_series(struct out *o, const char *name, const char *prio, const struct ax_hist *h)
{
    uint64_t cum[AX_PROM_NBOUNDS];
    unsigned j = 0;
    struct ax_hist_iter it;
    ax_hist_iter_init(&it, h);
    uint64_t below = 0; /* values in fine buckets already passed */
    while (ax_hist_iter_next(&it)) {
        double mid =
            it.index == AX_HIST_OVERFLOW ? INFINITY : ((double)it.lower + (double)it.upper) / 2e9;
        while (j < AX_PROM_NBOUNDS && mid > ax_prom_bounds[j])
            cum[j++] = below;
        below = it.cumulative;
    }
    while (j < AX_PROM_NBOUNDS)
        cum[j++] = below;

    for (unsigned b = 0; b < AX_PROM_NBOUNDS; b++)
        sample(o, name, "_bucket", "priority", prio, &ax_prom_bounds[b], (double)cum[b]);
    double inf = INFINITY;
    sample(o, name, "_bucket", "priority", prio, &inf, (double)below);
    sample(o, name, "_sum", "priority", prio, NULL, (double)ax_hist_sum(h) / 1e9);
    sample(o, name, "_count", "priority", prio, NULL, (double)below);
}

static void histogram(struct out *o, const char *name, const char *help,
                      const struct ax_hist h[AX_PRIO_COUNT])
{
    family(o, name, "histogram", help);
    for (unsigned i = 0; i < AX_PRIO_COUNT; i++)
        hist_series(o, name, prio_order[i].name, &h[prio_order[i].prio]);
}

/* One counter family with a sample per priority: the ax_prio_stats field
 * at offset off. */
static void prio_counter(struct out *o, const ax_stats *st, const char *name, const char *help,
                         size_t off)
{
    family(o, name, "counter", help);
    for (unsigned i = 0; i < AX_PRIO_COUNT; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&st->prio[prio_order[i].prio] + off, sizeof v);
        sample(o, name, "", "priority", prio_order[i].name, NULL, (double)v);
    }
}

static void prio_counters(struct out *o, const ax_stats *st)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } f[] = {
        {"ax_priority_submitted_total", "Tasks of each priority admitted.",
         offsetof(ax_prio_stats, submitted)},
        {"ax_priority_rejected_total",
         "Submissions of each priority refused (not shed): invalid, bucket full, rate limit, "
         "shutdown, breaker open.",
         offsetof(ax_prio_stats, rejected)},
        {"ax_priority_shed_total", "Submissions of each priority refused by load shedding.",
         offsetof(ax_prio_stats, shed)},
        {"ax_priority_succeeded_total", "Tasks of each priority that ended successfully.",
         offsetof(ax_prio_stats, succeeded)},
        {"ax_priority_failed_total", "Tasks of each priority that ended failed, no retry left.",
         offsetof(ax_prio_stats, failed)},
        {"ax_priority_timed_out_total",
         "Tasks of each priority that ended timed out, no retry left.",
         offsetof(ax_prio_stats, timed_out)},
        {"ax_priority_cancelled_total", "Tasks of each priority that ended cancelled.",
         offsetof(ax_prio_stats, cancelled)},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        prio_counter(o, st, f[i].name, f[i].help, f[i].off);
}

/* One family with a sample per class; field() picks the value. */
static void class_family(struct out *o, const struct ax_metrics_snapshot *m, const char *name,
                         const char *type, const char *help,
                         double (*field)(const ax_class_stats *c))
{
    family(o, name, type, help);
    for (unsigned i = 0; i < m->nclasses; i++)
        sample(o, name, "", "class", m->cls[i].name, NULL, field(&m->cls[i]));
}

#define CLASS_FIELD(fn, expr)                                                                      \
    static double fn(const ax_class_stats *c) { return (double)(expr); }
CLASS_FIELD(cf_limit, c->limit)
CLASS_FIELD(cf_in_flight, c->in_flight)
CLASS_FIELD(cf_queued, c->queued)
CLASS_FIELD(cf_breaker, c->breaker)
CLASS_FIELD(cf_budget, c->retry_budget_left)
CLASS_FIELD(cf_tokens, c->retry_tokens)
CLASS_FIELD(cf_rtt, (double)c->rtt_short_ns / 1e9)
CLASS_FIELD(cf_rtt_long, (double)c->rtt_long_ns / 1e9)
CLASS_FIELD(cf_mark, c->limit_mark)
CLASS_FIELD(cf_doublings, c->limit_doublings)
CLASS_FIELD(cf_submitted, c->submitted)
CLASS_FIELD(cf_started, c->started)
CLASS_FIELD(cf_cancelled, c->cancelled)
CLASS_FIELD(cf_succeeded, c->succeeded)
CLASS_FIELD(cf_failed, c->failed)
CLASS_FIELD(cf_timed_out, c->timed_out)
CLASS_FIELD(cf_expired, c->expired)
CLASS_FIELD(cf_opened, c->breaker_opened)
CLASS_FIELD(cf_rejected, c->breaker_rejected)
CLASS_FIELD(cf_allowed, c->retries_allowed)
CLASS_FIELD(cf_denied, c->retries_denied)

static void classes(struct out *o, const struct ax_metrics_snapshot *m)
{
    if (m->nclasses == 0)
        return;
    class_family(o, m, "ax_class_limit", "gauge",
                 "Attempts of the class allowed in flight now (adaptive concurrency).", cf_limit);
    class_family(o, m, "ax_class_in_flight", "gauge", "Attempts of the class holding a slot.",
                 cf_in_flight);
    class_family(o, m, "ax_class_queue_length", "gauge", "Tasks of the class waiting in a bucket.",
                 cf_queued);
    class_family(o, m, "ax_class_breaker_state", "gauge",
                 "Circuit breaker of the class: 0 closed, 1 open, 2 half-open.", cf_breaker);
    class_family(o, m, "ax_class_retry_budget_left", "gauge",
                 "Retries the class's retry budget allows now (+Inf without a budget).",
                 cf_budget);
    class_family(o, m, "ax_class_retry_tokens", "gauge",
                 "The class's retry throttle tokens; retries stop at or below half its maximum.",
                 cf_tokens);
    class_family(o, m, "ax_class_latency_seconds", "gauge",
                 "Recent run time of the class's attempts (moving average).", cf_rtt);
    class_family(o, m, "ax_class_latency_baseline_seconds", "gauge",
                 "The concurrency limiter's baseline run time for the class.", cf_rtt_long);
    class_family(o, m, "ax_class_limit_mark", "gauge",
                 "Slow start: after a fall the limit doubles back up to this (0: none).",
                 cf_mark);
    class_family(o, m, "ax_class_limit_doublings_total", "counter",
                 "Limiter windows in which slow start doubled the class's limit.", cf_doublings);
    class_family(o, m, "ax_class_submitted_total", "counter", "Tasks of the class admitted.",
                 cf_submitted);
    class_family(o, m, "ax_class_started_total", "counter",
                 "Attempts of the class whose function was entered.", cf_started);
    class_family(o, m, "ax_class_succeeded_total", "counter",
                 "Tasks of the class that ended successfully.", cf_succeeded);
    class_family(o, m, "ax_class_failed_total", "counter",
                 "Tasks of the class that ended failed (expired and breaker-failed included).",
                 cf_failed);
    class_family(o, m, "ax_class_timed_out_total", "counter",
                 "Tasks of the class that ended timed out.", cf_timed_out);
    class_family(o, m, "ax_class_cancelled_total", "counter",
                 "Tasks of the class that ended cancelled.", cf_cancelled);
    class_family(o, m, "ax_class_expired_total", "counter",
                 "Tasks of the class failed at dispatch past the queue-time budget.", cf_expired);
    class_family(o, m, "ax_class_breaker_opened_total", "counter",
                 "Times the class's circuit breaker opened.", cf_opened);
    class_family(o, m, "ax_class_breaker_rejected_total", "counter",
                 "Submissions refused and queued tasks failed while the breaker was open.",
                 cf_rejected);
    class_family(o, m, "ax_class_retries_allowed_total", "counter",
                 "Retries the class's retry budget allowed (decided; some may be dropped "
                 "before they start).",
                 cf_allowed);
    class_family(o, m, "ax_class_retries_denied_total", "counter",
                 "Retries the class's retry budget denied.", cf_denied);
}

size_t ax_prom_render(const struct ax_metrics_snapshot *m, char *buf, size_t len)
{
    struct out o = {.buf = buf, .len = len};
    const ax_stats *st = &m->st;

    counter(&o, "ax_tasks_submitted_total", "Tasks admitted by ax_submit.", st->submitted);
    counter(&o, "ax_tasks_started_total", "Task attempts started.", st->started);
    counter(&o, "ax_tasks_succeeded_total", "Tasks that ended successfully.", st->succeeded);
    counter(&o, "ax_tasks_failed_total", "Tasks that ended failed, no retry left.", st->failed);
    counter(&o, "ax_tasks_timed_out_total", "Tasks that ended timed out, no retry left.",
            st->timed_out);
    counter(&o, "ax_tasks_cancelled_total", "Tasks that ended cancelled.", st->cancelled);
    counter(&o, "ax_tasks_retried_total", "Retries scheduled.", st->retried);
    counter(&o, "ax_tasks_rejected_total",
            "Submissions refused: invalid, bucket full, rate limit, shutdown or breaker open.",
            st->rejected);
    counter(&o, "ax_tasks_shed_total", "Submissions refused by load shedding.", st->shed);
    counter(&o, "ax_tasks_panicked_total", "Task attempts ended by ax_panic.", st->panicked);
    counter(&o, "ax_tasks_lingering_total",
            "Timed-out tasks reported still running grace_ms after their timeout.", st->lingering);
    counter(&o, "ax_callback_overruns_total",
            "on_timeout callbacks that ran past callback_timeout_ms.", st->callback_overruns);
    counter(&o, "ax_callback_dropped_total",
            "on_timeout callbacks dropped because callback_queue was full.", st->callback_dropped);
    counter(&o, "ax_events_dropped_total",
            "Lifecycle events dropped because a worker's event buffer was full.",
            m->events_dropped);

    prio_counters(&o, st);

    family(&o, "ax_queue_length", "gauge", "Tasks waiting in each priority bucket.");
    for (unsigned i = 0; i < AX_PRIO_COUNT; i++)
        sample(&o, "ax_queue_length", "", "priority", prio_order[i].name, NULL,
               (double)st->queued[prio_order[i].prio]);
    gauge(&o, "ax_tasks_delayed", "Tasks waiting out a delay or a retry back-off.", st->delayed);
    gauge(&o, "ax_tasks_running", "Tasks holding a concurrency slot.", st->running);
    gauge(&o, "ax_concurrency_limit", "Maximum number of tasks running at once.", st->limit);
    gauge(&o, "ax_tasks_orphaned",
          "Coroutines still running after their task timed out or was cancelled.", st->orphans);
    gauge(&o, "ax_stacks_in_use", "Coroutine stacks currently allocated to tasks.",
          st->stacks_in_use);

    histogram(&o, "ax_wait_seconds", "Time a task attempt waited in its bucket before it started.",
              m->wait);
    histogram(&o, "ax_run_seconds", "Run time of a task attempt, start to end.", m->run);
    classes(&o, m);

    if (len > 0) buf[o.n < len ? o.n : len - 1] = '\0';
    return o.n;
}

/* ---- merging appended families (ax_prom_merge) ------------------------------ */

struct pm_line {
    const char *p;
    size_t n;
};

struct pm_family {
    struct pm_line name, help, type;
    struct pm_line *lines; /* samples and other comments, in order */
    size_t nlines, cap;
};

/* The metric name a line is about: after "# HELP " / "# TYPE ", or a
 * sample's leading name. Empty for other comments. */
static struct pm_line pm_name(const char *p, size_t n, bool *is_help, bool *is_type)
{
    *is_help = n > 7 && memcmp(p, "# HELP ", 7) == 0;
    *is_type = n > 7 && memcmp(p, "# TYPE ", 7) == 0;
    size_t i = 0;
    if (*is_help || *is_type)
        i = 7;
    else if (n && p[0] == '#')
        return (struct pm_line){p, 0};
    size_t b = i;
    while (i < n && p[i] != ' ' && p[i] != '{' && p[i] != '\t')
        i++;
    return (struct pm_line){p + b, i - b};
}

/* A sample's identity: its name and labels (up to the value), quoted label
 * values and their escapes skipped over. */
static size_t pm_key_len(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && p[i] != ' ' && p[i] != '{')
        i++;
    if (i < n && p[i] == '{') {
        bool q = false;
        for (i++; i < n; i++) {
            if (q && p[i] == '\\') {
                i++; /* the escaped byte (the loop's i++ may pass n: clamped below) */
                continue;
            }
            if (p[i] == '"')
                q = !q;
            else if (!q && p[i] == '}') {
                i++;
                break;
            }
        }
    }
    return i < n ? i : n;
}

static bool pm_eq(struct pm_line a, struct pm_line b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

/* Does sample name s belong to family f (f itself, or a histogram's or
 * summary's _bucket/_sum/_count)? */
static bool pm_member(struct pm_line f, struct pm_line s)
{
    if (f.n == 0 || s.n < f.n || memcmp(s.p, f.p, f.n) != 0)
        return false; /* a comment's nameless family has no members */
    struct pm_line rest = {s.p + f.n, s.n - f.n};
    return rest.n == 0 || pm_eq(rest, (struct pm_line){"_bucket", 7}) ||
           pm_eq(rest, (struct pm_line){"_sum", 4}) || pm_eq(rest, (struct pm_line){"_count", 6});
}

/* Finding a family by name and a sample among the ones its family kept
 * were linear scans: 20 000 label sets in one family took 5.9 s a scrape,
 * 20 000 families without HELP/TYPE (each sample scanning them all) 2.6 s,
 * and ax_free waits out a scrape. With hash tables: 8 ms and 20 ms.
 *
 * pm_table: open addressing, linear probing, at most half full, doubled
 * when it would be more. An entry points into the text; nothing is copied. */
struct pm_entry {
    struct pm_line key; /* a family's name, or a sample's name and labels */
    size_t fam;         /* the family's index; a sample's: the family it was kept in */
    uint64_t hash;      /* 0: a free slot */
};

struct pm_table {
    struct pm_entry *e;
    size_t cap; /* 0 or a power of two */
    size_t n;
    bool by_fam; /* a key matches only within its family (sample keys: the
                  * same name and labels may be kept in two families) */
    uint64_t seed; /* per merge: see pm_hash */
};

/* FNV-1a over the key (and the family, in a by_fam table), its high half
 * folded into the low bits that pick the slot; never 0. Seeded per merge
 * (the table's seed, from ax_rand64, in the offset basis): label values
 * may come from outside (user names, URLs), and with FNV's published
 * constants anyone could compute keys that all probe one slot run, making
 * the merge quadratic again (20 000 of them: seconds a scrape, as before
 * the tables). With a seed no one outside knows, keys chosen in advance
 * collide no more than any others. */
static uint64_t pm_hash(const struct pm_table *t, struct pm_line key, size_t fam)
{
    const uint64_t prime = 1099511628211u;
    uint64_t h = 14695981039346656037u ^ t->seed;
    if (t->by_fam)
        h = (h ^ fam) * prime;
    for (size_t i = 0; i < key.n; i++)
        h = (h ^ (unsigned char)key.p[i]) * prime;
    h ^= h >> 32;
    return h ? h : 1;
}

/* The slot of key: the entry that holds it, or the free one where it would
 * go (there is one: t is at most half full). t->cap > 0. */
static struct pm_entry *pm_slot(const struct pm_table *t, struct pm_line key, size_t fam,
                                uint64_t h)
{
    for (size_t i = (size_t)h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        struct pm_entry *e = &t->e[i];
        if (e->hash == 0 ||
            (e->hash == h && (!t->by_fam || e->fam == fam) && pm_eq(e->key, key)))
            return e;
    }
}

/* The entry of key (within family fam, in a by_fam table), or NULL. */
static const struct pm_entry *pm_get(const struct pm_table *t, struct pm_line key, size_t fam)
{
    if (t->n == 0)
        return NULL;
    const struct pm_entry *e = pm_slot(t, key, fam, pm_hash(t, key, fam));
    return e->hash ? e : NULL;
}

/* Add key, which t does not hold; false when out of memory (t as it was). */
static bool pm_put(struct pm_table *t, struct pm_line key, size_t fam)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        struct pm_table grown = {calloc(cap, sizeof(struct pm_entry)), cap, t->n, t->by_fam,
                                 t->seed};
        if (!grown.e)
            return false;
        for (size_t i = 0; i < t->cap; i++)
            if (t->e[i].hash)
                *pm_slot(&grown, t->e[i].key, t->e[i].fam, t->e[i].hash) = t->e[i];
        free(t->e);
        *t = grown;
    }
    uint64_t h = pm_hash(t, key, fam);
    *pm_slot(t, key, fam, h) = (struct pm_entry){key, fam, h};
    t->n++;
    return true;
}

/* The families so far, in output order, and their names. Names are unique
 * (the nameless one, of comments before any family, included). */
struct pm_families {
    struct pm_family *f;
    size_t n, cap;
    struct pm_table names; /* name -> index into f */
};

static struct pm_family *pm_find(struct pm_families *fs, struct pm_line name)
{
    const struct pm_entry *e = pm_get(&fs->names, name, 0);
    return e ? &fs->f[e->fam] : NULL;
}

/* The first family a sample of this name belongs to (pm_member): the one
 * of the same name, or of its base name for a _bucket, _sum or _count
 * sample, whichever came first; NULL if neither is known. name.n > 0. */
static struct pm_family *pm_owner(struct pm_families *fs, struct pm_line name)
{
    static const struct pm_line suffix[] = {{"_bucket", 7}, {"_sum", 4}, {"_count", 6}};
    const struct pm_entry *own = pm_get(&fs->names, name, 0), *base = NULL;
    /* None of the suffixes ends another: one at most applies. The base is
     * never empty, as a nameless family has no members. */
    for (size_t k = 0; k < sizeof suffix / sizeof suffix[0] && !base; k++)
        if (name.n > suffix[k].n &&
            memcmp(name.p + name.n - suffix[k].n, suffix[k].p, suffix[k].n) == 0)
            base = pm_get(&fs->names, (struct pm_line){name.p, name.n - suffix[k].n}, 0);
    if (own && base)
        return &fs->f[own->fam < base->fam ? own->fam : base->fam];
    return own ? &fs->f[own->fam] : base ? &fs->f[base->fam] : NULL;
}

/* A new family at the end (grown as needed), name not yet among them;
 * NULL when out of memory. */
static struct pm_family *pm_add(struct pm_families *fs, struct pm_line name)
{
    if (fs->n == fs->cap) {
        size_t nc = fs->cap ? fs->cap * 2 : 32;
        struct pm_family *t = realloc(fs->f, nc * sizeof *t);
        if (!t)
            return NULL;
        fs->f = t;
        fs->cap = nc;
    }
    if (!pm_put(&fs->names, name, fs->n))
        return NULL;
    struct pm_family *f = &fs->f[fs->n++];
    memset(f, 0, sizeof *f);
    f->name = name;
    return f;
}

size_t ax_prom_merge(char *text, size_t len)
{
    uint64_t seed = ax_rand64();
    struct pm_families fs = {.names = {.seed = seed}};
    struct pm_table keys = {.by_fam = true, .seed = seed}; /* every sample kept, by family */
    struct pm_family *cur = NULL;
    char *out = malloc(len + 1);
    bool oom = out == NULL;
    for (size_t at = 0; at < len && !oom;) {
        const char *p = text + at;
        const char *e = memchr(p, '\n', len - at);
        size_t n = e ? (size_t)(e - p) : len - at;
        at += n + (e != NULL);
        if (n == 0)
            continue;
        bool is_help, is_type;
        struct pm_line name = pm_name(p, n, &is_help, &is_type);
        if (is_help || is_type || (name.n && !(cur && pm_member(cur->name, name)))) {
            /* A new family starts here, or a sample outside the current one
             * (a bare sample: its family may have been named before). */
            struct pm_family *f = is_help || is_type ? pm_find(&fs, name) : pm_owner(&fs, name);
            if (!(cur = f ? f : pm_add(&fs, name))) {
                oom = true;
                break;
            }
        }
        /* a comment before any family: a family of its own, nameless */
        if (!cur && !(cur = pm_add(&fs, (struct pm_line){NULL, 0}))) {
            oom = true;
            break;
        }
        if (is_help) {
            if (!cur->help.n)
                cur->help = (struct pm_line){p, n};
            continue;
        }
        if (is_type) {
            if (!cur->type.n)
                cur->type = (struct pm_line){p, n};
            continue;
        }
        if (name.n) { /* a sample: the first of its name and labels wins */
            /* Only samples are in keys: another line of the family (a
             * comment; one led by ' ', '\t' or '{') never has a sample's key. */
            struct pm_line key = {p, pm_key_len(p, n)};
            size_t fi = (size_t)(cur - fs.f);
            if (pm_get(&keys, key, fi))
                continue;
            if (!pm_put(&keys, key, fi)) {
                oom = true;
                break;
            }
        }
        if (cur->nlines == cur->cap) {
            size_t nc = cur->cap ? cur->cap * 2 : 16;
            struct pm_line *t = realloc(cur->lines, nc * sizeof *t);
            if (!t) {
                oom = true;
                break;
            }
            cur->lines = t;
            cur->cap = nc;
        }
        cur->lines[cur->nlines++] = (struct pm_line){p, n};
    }
    size_t o = 0;
    if (!oom) {
        for (size_t i = 0; i < fs.n; i++) {
            struct pm_family *f = &fs.f[i];
            struct pm_line *ls[2] = {&f->help, &f->type};
            for (int k = 0; k < 2; k++)
                if (ls[k]->n) {
                    memcpy(out + o, ls[k]->p, ls[k]->n);
                    o += ls[k]->n;
                    out[o++] = '\n';
                }
            for (size_t k = 0; k < f->nlines; k++) {
                memcpy(out + o, f->lines[k].p, f->lines[k].n);
                o += f->lines[k].n;
                out[o++] = '\n';
            }
        }
        /* Every line went out with a newline: one more byte than the input
         * only if its last line had none. The length must not grow. */
        if (o > len)
            o = len;
        memcpy(text, out, o);
    }
    for (size_t i = 0; i < fs.n; i++)
        free(fs.f[i].lines);
    free(fs.f);
    free(fs.names.e);
    free(keys.e);
    free(out);
    return oom ? len : o;
}
