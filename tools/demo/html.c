/* html.c - report.html: one self-contained page (inline CSS and SVG drawn
 * here; no script, nothing fetched), the configurations side by side.
 *
 *   - what ran: the scenario, the upstream, each configuration's settings;
 *   - the summary table (the text summary's figures) and the verdicts;
 *   - one row of charts per quantity, one column per configuration, every
 *     chart of a row on the same axes so that columns compare at a glance:
 *     queue length per bucket, in flight vs limit, wait p99 per priority,
 *     upstream latency, outcomes and requests per second, RSS. Phases are
 *     shaded and named along the top of each chart.
 * Waits and latencies use a log scale (they span 1 ms to a minute); counts
 * and memory are linear. Time is incident time, as everywhere.
 */
#include "demo.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#define CW 460 /* chart width and height (px, SVG user units) */
#define CH 210
#define ML 58 /* margins */
#define MR 12
#define MT 24
#define MB 26
#define MAXPTS 700 /* points drawn per line at most */

static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* ---- numbers ------------------------------------------------------------------ */

static void fmt_count(char *b, size_t n, double v)
{
    if (v >= 1e6)
        snprintf(b, n, "%.3gM", v / 1e6);
    else if (v >= 1e4)
        snprintf(b, n, "%.3gk", v / 1e3);
    else
        snprintf(b, n, "%.4g", v);
}

static void fmt_ms(char *b, size_t n, double ms)
{
    if (!(ms >= 0))
        snprintf(b, n, "–");
    else if (ms < 1)
        snprintf(b, n, "%.2f ms", ms);
    else if (ms < 10)
        snprintf(b, n, "%.1f ms", ms);
    else if (ms < 1000)
        snprintf(b, n, "%.0f ms", ms);
    else if (ms < 60000)
        snprintf(b, n, "%.3g s", ms / 1000);
    else
        snprintf(b, n, "%.0f s", ms / 1000);
}

static void fmt_axis_ms(char *b, size_t n, double ms)
{
    if (ms < 1000)
        snprintf(b, n, "%gms", ms);
    else
        snprintf(b, n, "%gs", ms / 1000);
}

static double nice_step(double range, int target)
{
    double raw = range / target;
    double mag = pow(10, floor(log10(raw)));
    double r = raw / mag;
    double step = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
    return step * mag;
}

/* ---- charts -------------------------------------------------------------------- */

/* What a line draws: a recorded series, or one derived from it (rates). */
enum { D_NONE, D_REQ, D_OK, D_BAD, D_REFUSED, D_N };

struct line {
    const char *label;
    const char *color;
    const char *dash; /* stroke-dasharray or NULL */
    enum dm_series s; /* the series, when derived == D_NONE */
    int derived;
    bool step; /* a limit: draw as steps */
    int cls;   /* >= 0: task class cls's series cs (or its rate, derived CD_*) */
    int cs;
};

#define MAXLINES 12 /* 4 classes x 3 lines */

struct chart {
    const char *title;
    const char *unit; /* for the y axis label */
    bool log, ms;     /* log scale; values are milliseconds */
    bool classes;     /* per task class: only configurations with classes */
    bool states;      /* the breaker: 0 closed, 1 half-open, 2 open */
    double ymin, ymax;
    unsigned nlines;
    struct line l[MAXLINES];
};

struct axes {
    double x0, x1; /* incident seconds */
};

/* Rates per incident second, derived from the cumulative series. */
enum { CD_NONE, CD_ALLOWED, CD_DENIED, CD_N };
struct derived {
    float y[D_N][DM_MAX_SAMPLES];
    float cls[DM_MAX_CLASSES][CD_N][DM_MAX_SAMPLES]; /* retries allowed, denied per second */
};
static struct derived derived_of[DM_MAX_PROFILES];

/* The values of line l for configuration i (NaN = gap; NULL = none here). */
static const float *line_y(const struct line *l, struct dm_result *const *res, unsigned i)
{
    if (l->cls >= 0) {
        if ((unsigned)l->cls >= res[i]->nclasses) return NULL;
        return l->derived ? derived_of[i].cls[l->cls][l->derived] : res[i]->cls[l->cls][l->cs];
    }
    return l->derived ? derived_of[i].y[l->derived] : res[i]->series[l->s];
}

static double ymap(const struct chart *c, double v)
{
    double h = CH - MT - MB;
    double f;
    if (c->log) {
        double lv = log10(v > c->ymin ? v : c->ymin);
        f = (lv - log10(c->ymin)) / (log10(c->ymax) - log10(c->ymin));
    } else {
        f = (v - c->ymin) / (c->ymax - c->ymin);
    }
    if (f < 0) f = 0;
    if (f > 1) f = 1;
    return MT + h * (1 - f);
}

static double xmap(const struct axes *a, double t)
{
    double w = CW - ML - MR;
    return ML + w * (t - a->x0) / (a->x1 - a->x0);
}

static void draw_phases(FILE *f, const struct dm_scenario *sc, const struct axes *a)
{
    double t = 0, peak_rate = -1;
    for (unsigned i = 0; i < sc->nph; i++)
        if (sc->ph[i].rate > peak_rate) peak_rate = sc->ph[i].rate;
    for (unsigned i = 0; i <= sc->nph; i++) {
        bool drain = i == sc->nph;
        double d = drain ? sc->drain_ms / 1000 : sc->ph[i].duration_ms / 1000;
        double x0 = xmap(a, t), x1 = xmap(a, fmin(t + d, a->x1));
        if (x1 > x0 + 1) {
            const char *fill = drain                                        ? "#f2f2f2"
                               : sc->ph[i].rate == peak_rate && sc->nph > 1 ? "#fdecea"
                                                                            : "none";
            if (strcmp(fill, "none") != 0)
                fprintf(f, "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='%s'/>", x0, MT,
                        x1 - x0, CH - MT - MB, fill);
            fprintf(f, "<text x='%.1f' y='%d' class='ph'>", (x0 + x1) / 2, MT - 6);
            esc(f, drain ? "drain" : sc->ph[i].name);
            fputs("</text>", f);
            if (i > 0)
                fprintf(f, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' class='pb'/>", x0, MT, x0,
                        CH - MB);
        }
        t += d;
    }
}

static void draw_axes(FILE *f, const struct chart *c, const struct axes *a)
{
    /* y grid and labels */
    if (c->log) {
        for (double v = c->ymin; v <= c->ymax * 1.0001; v *= 10) {
            double y = ymap(c, v);
            char b[32];
            if (c->ms)
                fmt_axis_ms(b, sizeof b, v);
            else
                fmt_count(b, sizeof b, v);
            fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' class='g'/>", ML, y, CW - MR, y);
            fprintf(f, "<text x='%d' y='%.1f' class='yl'>%s</text>", ML - 5, y + 4, b);
        }
    } else if (c->states) {
        static const char *const name[] = {"closed", "half-open", "open"};
        for (int v = 0; v <= 2; v++) {
            double y = ymap(c, v);
            fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' class='g'/>", ML, y, CW - MR, y);
            fprintf(f, "<text x='%d' y='%.1f' class='yl'>%s</text>", ML - 5, y + 4, name[v]);
        }
    } else {
        double step = nice_step(c->ymax - c->ymin, 4);
        for (double v = c->ymin; v <= c->ymax * 1.0001; v += step) {
            double y = ymap(c, v);
            char b[32];
            fmt_count(b, sizeof b, v);
            fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' class='g'/>", ML, y, CW - MR, y);
            fprintf(f, "<text x='%d' y='%.1f' class='yl'>%s</text>", ML - 5, y + 4, b);
        }
    }
    /* x ticks */
    double step = nice_step(a->x1 - a->x0, 6);
    for (double t = ceil(a->x0 / step) * step; t <= a->x1 + 1e-9; t += step) {
        double x = xmap(a, t);
        fprintf(f, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' class='ax'/>", x, CH - MB, x,
                CH - MB + 4);
        fprintf(f, "<text x='%.1f' y='%d' class='xl'>%gs</text>", x, CH - MB + 16, t);
    }
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' class='ax'/>", ML, CH - MB, CW - MR, CH - MB);
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' class='ax'/>", ML, MT, ML, CH - MB);
    fprintf(f, "<text transform='translate(12,%d) rotate(-90)' class='yt'>", (MT + CH - MB) / 2);
    esc(f, c->unit);
    fputs("</text>", f);
}

static void draw_line(FILE *f, const struct chart *c, const struct axes *a,
                      const struct dm_result *r, const struct line *l, const float *yv)
{
    unsigned n = r->nsamples;
    unsigned stride = n > MAXPTS ? (n + MAXPTS - 1) / MAXPTS : 1;
    bool open = false;
    double prev_y = 0;
    for (unsigned i = 0; i < n; i += stride) {
        double v = yv[i];
        double t = r->series[S_T][i] / 1000.0;
        if (!isfinite(v) || (c->log && v <= 0)) {
            if (open) fputs("'/>", f);
            open = false;
            continue;
        }
        double x = xmap(a, t), y = ymap(c, v);
        if (!open) {
            fprintf(f, "<polyline class='ln' stroke='%s'%s%s%s points='", l->color,
                    l->dash ? " stroke-dasharray='" : "", l->dash ? l->dash : "",
                    l->dash ? "'" : "");
            open = true;
        } else if (l->step) {
            fprintf(f, "%.1f,%.1f ", x, prev_y);
        }
        fprintf(f, "%.1f,%.1f ", x, y);
        prev_y = y;
    }
    if (open) fputs("'/>", f);
}

static void draw_chart(FILE *f, const struct dm_scenario *sc, const struct chart *c,
                       const struct axes *a, struct dm_result *const *res, unsigned i)
{
    const struct dm_result *r = res[i];
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 %d %d' class='chart' "
            "role='img'><title>",
            CW, CH);
    esc(f, c->title);
    fputs(" — ", f);
    esc(f, r->name);
    fputs("</title>", f);
    if (!r->ok || r->nsamples == 0) {
        fprintf(f, "<text x='%d' y='%d' class='na'>did not run</text></svg>", CW / 2, CH / 2);
        return;
    }
    if (c->classes && r->nclasses == 0) {
        fprintf(f, "<text x='%d' y='%d' class='na'>no task classes</text></svg>", CW / 2, CH / 2);
        return;
    }
    draw_phases(f, sc, a);
    draw_axes(f, c, a);
    for (unsigned k = 0; k < c->nlines; k++) {
        const float *y = line_y(&c->l[k], res, i);
        if (y) draw_line(f, c, a, r, &c->l[k], y);
    }
    fputs("</svg>", f);
}

/* The y range of a row: the same for every configuration. */
static void fit(struct chart *c, struct dm_result *const *res, unsigned n)
{
    double lo = INFINITY, hi = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!res[i]->ok) continue;
        for (unsigned k = 0; k < c->nlines; k++) {
            const float *y = line_y(&c->l[k], res, i);
            if (!y) continue;
            for (unsigned j = 0; j < res[i]->nsamples; j++) {
                double v = y[j];
                if (!isfinite(v)) continue;
                if (v > hi) hi = v;
                if (v > 0 && v < lo) lo = v;
            }
        }
    }
    if (c->states) {
        c->ymin = -0.15;
        c->ymax = 2.15;
    } else if (c->log) {
        if (!(hi > 0)) hi = 1000;
        if (!isfinite(lo)) lo = 1;
        c->ymin = pow(10, floor(log10(lo)));
        c->ymax = pow(10, ceil(log10(hi)));
        if (c->ymax <= c->ymin) c->ymax = c->ymin * 10;
        if (c->ymin < c->ymax / 1e6) c->ymin = c->ymax / 1e6;
    } else {
        c->ymin = 0;
        if (!(hi > 0)) hi = 1;
        double step = nice_step(hi, 4);
        c->ymax = ceil(hi * 1.05 / step) * step;
    }
}

/* Rates from a cumulative series: per incident second, over a few samples. */
static void rate_from(const struct dm_result *r, const float *cum, float *out)
{
    const unsigned w = 3;
    for (unsigned i = 0; i < r->nsamples; i++) {
        unsigned j = i >= w ? i - w : 0;
        double dt = (r->series[S_T][i] - r->series[S_T][j]) / 1000.0;
        out[i] = dt > 0 ? (float)((cum[i] - cum[j]) / dt) : NAN;
    }
}

static void rate_of(const struct dm_result *r, enum dm_series s, float *out)
{
    rate_from(r, r->series[s], out);
}

static void add(struct chart *c, const char *label, const char *color, const char *dash,
                enum dm_series s, int derived, bool step)
{
    if (c->nlines < MAXLINES)
        c->l[c->nlines++] = (struct line){label, color, dash, s, derived, step, -1, 0};
}

static void add_cls(struct chart *c, const char *label, const char *color, const char *dash,
                    int cls, int cs, int derived, bool step)
{
    if (c->nlines < MAXLINES)
        c->l[c->nlines++] = (struct line){label, color, dash, S_T, derived, step, cls, cs};
}

static const char *const class_color[DM_MAX_CLASSES] = {"#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
                                                        "#7f7f7f", "#bcbd22", "#17becf", "#1f77b4"};

/* ---- the page ----------------------------------------------------------------- */

static const char *const css =
    "body{font:14px/1.45 -apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif;"
    "color:#222;margin:24px auto;max-width:1500px;padding:0 16px;background:#fff}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px "
    "solid #ddd;padding-bottom:4px}h3{font-size:14px;margin:18px 0 2px}"
    ".sub{color:#555;margin:0 0 12px}code{background:#f4f4f4;padding:0 3px;border-radius:3px}"
    "table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;border-bottom:1px solid "
    "#eee;text-align:right;vertical-align:top}th{background:#fafafa}"
    "td.l,th.l{text-align:left}tr.grp td{border-top:1px solid #ccc}"
    ".PASS{color:#1a7f37;font-weight:600}.FAIL{color:#c62828;font-weight:600}"
    ".NA{color:#777;font-weight:600}.vt{color:#444;text-align:left;font-size:13px}"
    ".grid{display:grid;gap:10px}.cfg{font-weight:600}.about{color:#555;font-size:12.5px}"
    ".legend span{display:inline-block;margin-right:14px;font-size:12.5px}"
    ".legend i{display:inline-block;width:18px;height:0;border-top:3px solid;margin-right:5px;"
    "vertical-align:middle}.legend i.d{border-top-style:dashed}"
    ".chart{width:100%;height:auto;background:#fff}"
    ".chart .g{stroke:#eee;stroke-width:1}.chart .ax{stroke:#999;stroke-width:1}"
    ".chart .pb{stroke:#d9a3a3;stroke-width:1;stroke-dasharray:3 3}"
    ".chart .ln{fill:none;stroke-width:1.8;stroke-linejoin:round}"
    ".chart text{font:11px sans-serif;fill:#555}.chart .yl{text-anchor:end}"
    ".chart .xl{text-anchor:middle}.chart .ph{text-anchor:middle;fill:#a05050;font-size:11px}"
    ".chart .yt{text-anchor:middle;font-size:11px}.chart .na{text-anchor:middle;font-size:16px}"
    ".note{color:#555;font-size:12.5px;max-width:1100px}";

static void legend(FILE *f, const struct chart *c)
{
    fputs("<div class='legend'>", f);
    for (unsigned k = 0; k < c->nlines; k++) {
        fprintf(f, "<span><i%s style='border-color:%s'></i>", c->l[k].dash ? " class='d'" : "",
                c->l[k].color);
        esc(f, c->l[k].label);
        fputs("</span>", f);
    }
    fputs("</div>", f);
}

static void summary_row(FILE *f, const char *label, struct dm_result *const *res, unsigned n,
                        const char *const *cells, bool group_start)
{
    fprintf(f, "<tr%s><td class='l'>", group_start ? " class='grp'" : "");
    esc(f, label);
    fputs("</td>", f);
    for (unsigned i = 0; i < n; i++) {
        fputs("<td>", f);
        esc(f, res[i]->ok ? cells[i] : "–");
        fputs("</td>", f);
    }
    fputs("</tr>\n", f);
}

static void summary(FILE *f, const struct dm_scenario *sc, struct dm_result *const *res, unsigned n,
                    bool own_upstream)
{
    char buf[DM_MAX_PROFILES][256];
    const char *cells[DM_MAX_PROFILES];
    for (unsigned i = 0; i < n; i++)
        cells[i] = buf[i];
    fputs("<table><tr><th class='l'></th>", f);
    for (unsigned i = 0; i < n; i++) {
        fputs("<th>", f);
        esc(f, res[i]->name);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
#define ROW(label, grp, ...)                                                                       \
    do {                                                                                           \
        for (unsigned i = 0; i < n; i++) {                                                         \
            const struct dm_result *r = res[i];                                                    \
            (void)r;                                                                               \
            snprintf(buf[i], sizeof buf[i], __VA_ARGS__);                                          \
        }                                                                                          \
        summary_row(f, label, res, n, cells, grp);                                                 \
    } while (0)
    ROW("tasks generated", true, "%llu", (unsigned long long)r->generated);
    ROW("admitted", false, "%llu", (unsigned long long)dm_sum_admitted(r));
    ROW("succeeded", false, "%llu", (unsigned long long)dm_total(r, OUT_SUCCEEDED));
    ROW("failed", false, "%llu", (unsigned long long)dm_total(r, OUT_FAILED));
    ROW("timed out", false, "%llu", (unsigned long long)dm_total(r, OUT_TIMED_OUT));
    ROW("cancelled at the end (still queued or waiting)", false, "%llu",
        (unsigned long long)dm_total(r, OUT_CANCELLED));
    ROW("shed (AX_ESHED)", false, "%llu", (unsigned long long)dm_total(r, OUT_SHED));
    ROW("rejected (bucket full)", false, "%llu", (unsigned long long)dm_total(r, OUT_REJECTED));
    for (unsigned p = 0; p < DM_NPRIO; p++) {
        char label[64];
        snprintf(label, sizeof label, "wait p50 / p99 / max, %s", dm_prio_name[p]);
        for (unsigned i = 0; i < n; i++) {
            char a[24], b[24], c[24];
            fmt_ms(a, sizeof a, res[i]->wait[p].p50);
            fmt_ms(b, sizeof b, res[i]->wait[p].p99);
            fmt_ms(c, sizeof c, res[i]->wait[p].max);
            snprintf(buf[i], sizeof buf[i], "%s / %s / %s", a, b, c);
        }
        summary_row(f, label, res, n, cells, p == 0);
    }
    for (unsigned i = 0; i < n; i++) {
        char a[24], b[24];
        fmt_ms(a, sizeof a, res[i]->run.p50);
        fmt_ms(b, sizeof b, res[i]->run.p99);
        snprintf(buf[i], sizeof buf[i], "%s / %s", a, b);
    }
    summary_row(f, "run p50 / p99, per attempt", res, n, cells, false);
    ROW("retries", true, "%llu", (unsigned long long)r->retries);
    ROW("upstream requests sent", false, "%llu", (unsigned long long)r->requests);
    if (own_upstream)
        ROW("… counted by ax-upstream", false, "%llu", (unsigned long long)r->upstream_requests);
    ROW("requests per task sent (amplification)", false, "%.2f", dm_requests_per_task(r));
    ROW("requests per task generated", false, "%.2f", dm_requests_per_generated(r));
    if (own_upstream)
        ROW("most requests the upstream held at once", false, "%llu",
            (unsigned long long)r->upstream_max_in_flight);
    ROW("slots in use at most (limit)", true, "%llu (%llu)", (unsigned long long)r->max_in_flight,
        (unsigned long long)r->limit);
    ROW("task functions running at once, at most (cap + orphans allowed)", false,
        "%llu (%llu + %llu)", (unsigned long long)r->max_in_task, (unsigned long long)r->limit,
        (unsigned long long)r->orphan_allowance);
    ROW("tasks waiting to start, at most (counted by the demo)", false, "%llu",
        (unsigned long long)r->max_waiting);
    ROW("latest return past a deadline; returns later than the slack (orphans)", false,
        "%.0f ms; %llu of %llu", r->max_over_ms, (unsigned long long)r->overdue,
        (unsigned long long)r->late);
    for (unsigned c = 0; c < sc->ncls; c++) {
        char label[64];
        snprintf(label, sizeof label, "HTTP answers, %s (none: no answer)", sc->cls[c].name);
        for (unsigned i = 0; i < n; i++)
            dm_status_text(res[i], c, DM_NSTATUS, buf[i], sizeof buf[i]);
        summary_row(f, label, res, n, cells, c == 0);
    }
    ROW("peak RSS", true, "%.0f MB", r->peak_rss_mb);
    ROW("peak threads", false, "%u", r->peak_threads);
    ROW("run time (wall)", false, "%.1f s", r->wall_s);
    /* The overload measures (tools/README.md, "Reading the results"). */
    for (unsigned i = 0; i < n; i++)
        fmt_ms(buf[i], sizeof buf[i],
               res[i]->wait_high_peak.count ? res[i]->wait_high_peak.p99 : -1);
    summary_row(f, "HIGH wait p99, tasks submitted in the peak", res, n, cells, true);
    for (unsigned i = 0; i < n; i++) {
        double q = dm_requests_per_degraded_task(res[i]);
        if (isfinite(q))
            snprintf(buf[i], sizeof buf[i], "%.2f", q);
        else
            snprintf(buf[i], sizeof buf[i], "–");
    }
    summary_row(f, "upstream requests per task admitted while degraded", res, n, cells, false);
    ROW("most upstream requests one task made", false, "%llu",
        (unsigned long long)r->max_task_requests);
    for (unsigned i = 0; i < n; i++) {
        char a[24];
        if (!isfinite(res[i]->recovery_ms))
            snprintf(buf[i], sizeof buf[i], "n/a");
        else if (res[i]->recovery_ms < 0)
            snprintf(buf[i], sizeof buf[i], "not before the traffic ended");
        else {
            fmt_ms(a, sizeof a, res[i]->recovery_ms);
            snprintf(buf[i], sizeof buf[i], "%s", a);
        }
    }
    summary_row(f, "recovery after the upstream's (wait p99 ≤ 2 × steady)", res, n, cells, false);
    ROW("goodput: succeeded within the deadline, per second", false, "%.1f /s", dm_goodput(sc, r));
    /* No HIGH task in the mix: "-", not "nan %" (trial). */
    ROW("HIGH success rate (of HIGH tasks generated)", false, isfinite(dm_high_success(r)) ? "%.1f %%" : "-",
        100 * dm_high_success(r));
    ROW("refused: breaker open (AX_EOPEN)", false, "%llu", (unsigned long long)r->open_refused);
    ROW("failed: breaker open / queue-time budget (AX_EEXPIRED)", false, "%llu / %llu",
        (unsigned long long)r->open_failed, (unsigned long long)r->expired);
#undef ROW
    fputs("</table>\n", f);
}

static void verdicts(FILE *f, const struct dm_scenario *sc, struct dm_result *const *res,
                     unsigned n)
{
    fputs("<table><tr><th class='l'>the seed's goal</th>", f);
    for (unsigned i = 0; i < n; i++) {
        fputs("<th class='l'>", f);
        esc(f, res[i]->name);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    struct dm_verdict v[DM_MAX_PROFILES][DM_NGOALS];
    for (unsigned i = 0; i < n; i++)
        if (res[i]->ok) dm_verdicts(sc, dm_profile_find(sc, res[i]->name), res[i], v[i]);
    static const char *const goal_text[DM_NGOALS] = {
        "1 · concurrency cap, memory bounded", "2 · NORMAL starts ≤ 100 ms after submit",
        "3 · a timeout frees the slot", "4 · HIGH jumps the queue, LOW never starves",
        "5 · every task's lifecycle observed"};
    for (unsigned k = 0; k < DM_NGOALS; k++) {
        fprintf(f, "<tr><td class='l'>%s</td>", goal_text[k]);
        for (unsigned i = 0; i < n; i++) {
            if (!res[i]->ok) {
                fputs("<td class='vt'>did not run</td>", f);
                continue;
            }
            if (k == 0 && dm_machine_stalled(sc, res[i]))
                fprintf(f,
                        "<td class='vt'><em>A busy machine: the demo's own thread was kept off "
                        "the CPU for up to %.0f ms of wall time, and some thread waited for a "
                        "CPU %.0f %% of the run; this run's waits and deadlines include "
                        "that.</em><br>",
                        res[i]->stall_ms / sc->speed, res[i]->cpu_pressure_pct);
            else
                fputs("<td class='vt'>", f);
            const char *m = dm_mark_name(v[i][k].mark);
            fprintf(f, "<span class='%s'>%s</span> ", v[i][k].mark == MARK_NA ? "NA" : m, m);
            esc(f, v[i][k].text);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* ax-auto's targets (issue 12), against seed-tuned in the same run. */
static void targets(FILE *f, const struct dm_scenario *sc, struct dm_result *const *res, unsigned n)
{
    const struct dm_result *tuned = NULL;
    for (unsigned j = 0; j < n; j++)
        if (strcmp(res[j]->name, "seed-tuned") == 0) tuned = res[j];
    for (unsigned i = 0; i < n; i++) {
        const struct dm_profile *p = dm_profile_find(sc, res[i]->name);
        if (!p || p->engine != ENG_AX_AUTO || !res[i]->ok) continue;
        struct dm_verdict v[DM_NTARGETS];
        dm_targets(sc, res[i], tuned, v);
        fputs("<h3>", f);
        esc(f, res[i]->name);
        fputs(": issue 12's targets, against seed-tuned in this run</h3>\n<table>", f);
        for (unsigned k = 0; k < DM_NTARGETS; k++) {
            const char *m = dm_mark_name(v[k].mark);
            fputs("<tr><td class='l'>", f);
            esc(f, v[k].goal);
            fprintf(f, "</td><td class='vt'><span class='%s'>%s</span> ",
                    v[k].mark == MARK_NA ? "NA" : m, m);
            esc(f, v[k].text);
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n", f);
    }
}

#define HIGH_C "#d62728"
#define NORMAL_C "#1f77b4"
#define LOW_C "#2ca02c"

int dm_write_html(const char *path, const struct dm_scenario *sc, const char *url,
                  struct dm_result *const *res, unsigned n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        static float tmp[DM_MAX_SAMPLES];
        struct derived *d = &derived_of[i];
        rate_of(res[i], S_SUCCEEDED, d->y[D_OK]);
        rate_of(res[i], S_FAILED, d->y[D_BAD]);
        rate_of(res[i], S_TIMED_OUT, tmp);
        for (unsigned j = 0; j < res[i]->nsamples; j++)
            d->y[D_BAD][j] += tmp[j];
        rate_of(res[i], S_REFUSED, d->y[D_REFUSED]);
        rate_of(res[i], S_REQUESTS, d->y[D_REQ]);
        for (unsigned c = 0; c < res[i]->nclasses; c++) {
            rate_from(res[i], res[i]->cls[c][CS_RETRIES_ALLOWED], d->cls[c][CD_ALLOWED]);
            rate_from(res[i], res[i]->cls[c][CS_RETRIES_DENIED], d->cls[c][CD_DENIED]);
        }
    }

    time_t now = time(NULL);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    fputs("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
          "<meta name='viewport' content='width=device-width,initial-scale=1'>"
          "<title>ax-demo: the seed's incident, side by side</title><style>",
          f);
    fputs(css, f);
    fputs("</style></head><body>\n", f);
    fputs("<h1>ax-demo: a traffic peak while the upstream degrades, side by side</h1>\n"
          "<p class='sub'>The incident of the write-up ax answers: at a traffic peak the "
          "upstream slowed from 300 ms to 2 s per call, fixed one-second retries piled on, the "
          "queues and memory grew. It is replayed here against a thread pool, ax with the "
          "incident's settings, ax with the settings tuned after it and, where it ran, ax "
          "by itself (ax-auto: its defaults and task classes). ",
          f);
    double len = dm_scenario_length_ms(sc) / 1000;
    fprintf(f, "Scenario <code>");
    esc(f, sc->origin);
    fprintf(f,
            "</code>, %g s of incident (+ up to %g s drain) replayed at %g× speed; "
            "generated %s. All times are incident time (wall time × %g); counts are at full "
            "scale.</p>\n",
            len, sc->drain_ms / 1000, sc->speed, when, sc->speed);

    /* What ran. */
    fputs("<h2>What ran</h2>\n<table><tr><th class='l'>phase</th><th>length</th><th>arrivals/s"
          "</th><th class='l'>upstream</th></tr>\n",
          f);
    for (unsigned i = 0; i < sc->nph; i++) {
        fputs("<tr><td class='l'>", f);
        esc(f, sc->ph[i].name);
        fprintf(f, "</td><td>%g s</td><td>%g</td><td class='l'>", sc->ph[i].duration_ms / 1000,
                sc->ph[i].rate);
        if (url)
            fputs("(your upstream)", f);
        else if (sc->ph[i].upstream[0])
            esc(f, sc->ph[i].upstream);
        else
            fputs("as declared (healthy)", f);
        fputs("</td></tr>\n", f);
    }
    fprintf(f,
            "<tr><td class='l'>drain</td><td>≤ %g s</td><td>0</td><td class='l'>as the last "
            "phase</td></tr></table>\n",
            sc->drain_ms / 1000);
    double msum = sc->mix[0] + sc->mix[1] + sc->mix[2];
    fprintf(f,
            "<p>Priorities HIGH/NORMAL/LOW %.0f/%.0f/%.0f %%, each task carrying %g bytes of "
            "context. Task classes (one upstream endpoint each):",
            100 * sc->mix[0] / msum, 100 * sc->mix[1] / msum, 100 * sc->mix[2] / msum,
            sc->ctx_bytes);
    double csum = 0;
    for (unsigned i = 0; i < sc->ncls; i++)
        csum += sc->cls[i].share;
    for (unsigned i = 0; i < sc->ncls; i++) {
        fputs(i ? "; <code>" : " <code>", f);
        esc(f, sc->cls[i].name);
        if (url) {
            /* A real upstream: its latency is its own, the model is not used. */
            fprintf(f, "</code> %.0f %%, <code>GET ", 100 * sc->cls[i].share / csum);
            esc(f, url);
            esc(f, sc->cls[i].path);
        } else {
            fprintf(f, "</code> %.0f %%, latency <code>", 100 * sc->cls[i].share / csum);
            esc(f, sc->cls[i].latency);
        }
        fprintf(f, "</code>, class timeout %g s", sc->cls[i].timeout_ms / 1000);
    }
    fputs(". Upstream: ", f);
    if (url) {
        fputs("<code>", f);
        esc(f, url);
        fputs("</code> (yours, not restarted between configurations).</p>\n", f);
    } else {
        fputs("ax-upstream on loopback, a fresh process per configuration, so each meets the "
              "same phase schedule from t = 0.</p>\n",
              f);
    }
    fputs("<table><tr><th class='l'>configuration</th><th class='l'>settings</th></tr>\n", f);
    for (unsigned i = 0; i < n; i++) {
        const struct dm_profile *p = dm_profile_find(sc, res[i]->name);
        fputs("<tr><td class='l cfg'>", f);
        esc(f, res[i]->name);
        fputs("</td><td class='l'>", f);
        esc(f, p ? p->about : "");
        if (!res[i]->ok) {
            fputs(" — <span class='FAIL'>did not run: ", f);
            esc(f, res[i]->error);
            fputs("</span>", f);
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);

    fputs("<h2>Summary</h2>\n", f);
    summary(f, sc, res, n, !url);
    fputs("<p class='note'>Waits are submit → first start; a task still queued when the run "
          "ended counts with the time it had waited. <em>Requests per task sent</em> "
          "divides the requests the upstream received by the tasks that reached it at least "
          "once: what retries add (1.00 = none). <em>Per task generated</em> divides by all "
          "the traffic, so refusing at the door lowers it too.</p>\n",
          f);
    fputs("<h2>Verdicts on the seed's five goals</h2>\n", f);
    verdicts(f, sc, res, n);
    targets(f, sc, res, n);
    fputs("<p class='note'>Every verdict is measured by the demo, not read from the engine "
          "under test: each task function records its entry and exit, the submitter counts the "
          "tasks waiting to start, every upstream answer is counted. <em>Orphans</em>: when a "
          "deadline (or a cancel) ends an attempt whose function has not returned yet, ax frees "
          "its slot at once and the function returns later; meanwhile the functions running at "
          "once can exceed the cap by the orphans alive. ax bounds those (max_orphans, set by "
          "the demo to 2 % of the cap), so goal 1 allows cap + that. Goal 3 fails when a "
          "function still runs 3 s after its deadline (the seed's alarm); returns later than "
          "the slack are shown as orphans. Goal 4 needs a queue to judge: more than 1 % of the "
          "tasks arriving with every slot busy; otherwise it is N/A.</p>\n",
          f);

    /* Charts. */
    struct axes ax = {0, 0};
    for (unsigned i = 0; i < n; i++)
        if (res[i]->ok && res[i]->nsamples)
            ax.x1 = fmax(ax.x1, res[i]->series[S_T][res[i]->nsamples - 1] / 1000.0);
    if (ax.x1 <= 0) ax.x1 = (dm_scenario_length_ms(sc) + sc->drain_ms) / 1000;

    fputs("<h2>Over time</h2>\n<p class='note'>One column per configuration; the charts of a "
          "row share their axes. x: incident time in seconds.</p>\n",
          f);
    fprintf(f, "<div class='grid' style='grid-template-columns:repeat(%u,1fr)'>", n);
    for (unsigned i = 0; i < n; i++) {
        const struct dm_profile *p = dm_profile_find(sc, res[i]->name);
        fputs("<div><div class='cfg'>", f);
        esc(f, res[i]->name);
        fputs("</div><div class='about'>", f);
        esc(f, p ? p->about : "");
        fputs("</div></div>", f);
    }
    fputs("</div>\n", f);

    bool any_classes = false;
    for (unsigned i = 0; i < n; i++)
        if (res[i]->ok && res[i]->nclasses) any_classes = true;
    /* Label strings for the class lines: "quote limit", ... */
    static char cls_label[DM_MAX_CLASSES][4][DM_NAME_MAX + 24];
    for (unsigned k = 0; k < sc->ncls && k < DM_MAX_CLASSES; k++) {
        snprintf(cls_label[k][0], sizeof cls_label[k][0], "%s limit", sc->cls[k].name);
        snprintf(cls_label[k][1], sizeof cls_label[k][1], "%s in flight", sc->cls[k].name);
        snprintf(cls_label[k][2], sizeof cls_label[k][2], "%s denied/s", sc->cls[k].name);
        snprintf(cls_label[k][3], sizeof cls_label[k][3], "%s slow-start mark", sc->cls[k].name);
    }
    unsigned ncl = sc->ncls < 4 ? sc->ncls : 4; /* lines per chart stay readable */

    enum { ROWS = 9 };
    for (unsigned row = 0; row < ROWS; row++) {
        struct chart c;
        memset(&c, 0, sizeof c);
        const char *note = "";
        if (row >= 2 && row <= 4 && !any_classes) continue;
        switch (row) {
        case 0:
            c.title = "Queue length per bucket";
            c.unit = "tasks";
            add(&c, "HIGH queued", HIGH_C, NULL, S_Q_HIGH, D_NONE, false);
            add(&c, "NORMAL queued", NORMAL_C, NULL, S_Q_NORMAL, D_NONE, false);
            add(&c, "LOW queued", LOW_C, NULL, S_Q_LOW, D_NONE, false);
            add(&c, "waiting to retry", "#9467bd", "5 3", S_DELAYED, D_NONE, false);
            note = "Tasks admitted and not yet started (the thread pool's single FIFO is split "
                   "by priority for the picture); a retry waits out its back-off, then queues "
                   "again at the back of its bucket.";
            break;
        case 1:
            c.title = "In flight vs limit";
            c.unit = "requests";
            add(&c, "in flight (slots in use)", "#ff7f0e", NULL, S_RUNNING, D_NONE, false);
            add(&c, "limit (cap / pool size)", "#444", "6 4", S_LIMIT, D_NONE, true);
            if (!url)
                add(&c, "held by the upstream (incl. abandoned)", "#8c564b", "2 3", S_UP_INFLIGHT,
                    D_NONE, false);
            note = "A timed-out call frees its slot at once, but the upstream keeps working on "
                   "the request it was sent: that is the gap between the two lines.";
            break;
        case 2:
            c.title = "Concurrency limit per task class (ax-auto's adaptive limit)";
            c.unit = "attempts";
            c.classes = true;
            c.log = true; /* from the cap (500) down to a few: both ends readable */
            for (unsigned k = 0; k < ncl; k++) {
                add_cls(&c, cls_label[k][0], class_color[k], NULL, (int)k, CS_LIMIT, CD_NONE, true);
                add_cls(&c, cls_label[k][1], class_color[k], "2 3", (int)k, CS_IN_FLIGHT, CD_NONE,
                        false);
                add_cls(&c, cls_label[k][3], class_color[k], "8 3", (int)k, CS_MARK, CD_NONE, true);
            }
            note = "ax_class_stats_get at every sample (log scale): the limit each class's "
                   "attempts in flight may not pass (it follows the class's measured latency "
                   "between its bounds), the attempts in flight (dotted; gaps: none), and "
                   "after a fall the slow-start mark (dashed: half the limit it fell from; "
                   "once every attempt begun before the last timed-out one is back, the "
                   "limit doubles per clean window up to it). Above the limit, tasks wait in "
                   "their bucket, where priority and the queue-time budget act.";
            break;
        case 3:
            c.title = "Retry budget per task class";
            c.unit = "retries";
            c.classes = true;
            for (unsigned k = 0; k < ncl; k++) {
                add_cls(&c, sc->cls[k].name, class_color[k], NULL, (int)k, CS_BUDGET_LEFT, CD_NONE,
                        false);
                add_cls(&c, cls_label[k][2], class_color[k], "2 3", (int)k, CS_RETRIES_DENIED,
                        CD_DENIED, false);
            }
            note = "Solid: the retries the budget allows now (a share of the class's first "
                   "attempts over its window, plus a floor per second). Dotted: retries refused "
                   "per incident second; such an attempt's failure is final.";
            break;
        case 4:
            c.title = "Circuit breaker state per task class";
            c.unit = "";
            c.classes = true;
            c.states = true;
            for (unsigned k = 0; k < ncl; k++)
                add_cls(&c, sc->cls[k].name, class_color[k], k ? (k == 1 ? "6 3" : "2 2") : NULL,
                        (int)k, CS_BREAKER, CD_NONE, true);
            note = "Open: the class fails fast (AX_EOPEN at submit and at dispatch); half-open: "
                   "a few probes decide whether it closes again.";
            break;
        case 5:
            c.title = "Wait p99 per priority (tasks started in the last half second of wall time)";
            c.unit = "submit → start";
            c.log = c.ms = true;
            add(&c, "HIGH", HIGH_C, NULL, S_WAIT_HIGH, D_NONE, false);
            add(&c, "NORMAL", NORMAL_C, NULL, S_WAIT_NORMAL, D_NONE, false);
            add(&c, "LOW", LOW_C, NULL, S_WAIT_LOW, D_NONE, false);
            note = "Gaps: no task of that priority started in the window. The seed's goal is "
                   "NORMAL ≤ 100 ms.";
            break;
        case 6:
            c.title = "Upstream latency";
            c.unit = "latency";
            c.log = c.ms = true;
            add(&c, "answered calls p50", "#17becf", NULL, S_LAT_P50, D_NONE, false);
            add(&c, "answered calls p99", "#1f3b73", NULL, S_LAT_P99, D_NONE, false);
            add(&c, "all calls p99, timed-out ones at their timeout (censored)", "#c62828", "4 3",
                S_LAT_ALL_P99, D_NONE, false);
            if (!url)
                add(&c, "ax-upstream mean service time", "#8c564b", "5 3", S_UP_MEAN, D_NONE,
                    false);
            note = "Client side. Answered calls only, and (red, dashed) every call with the "
                   "timed-out ones counted at their timeout: their real latency is longer "
                   "(censored), so where the red line sits on a timeout it is a lower bound. "
                   "The share of calls timed out per window is timed_out_calls_pct in "
                   "results.json. ax-upstream's own mean also counts the requests the client "
                   "had given up on.";
            break;
        case 7:
            c.title = "Outcomes and upstream requests per second";
            c.unit = "per second";
            add(&c, "upstream requests", "#444", NULL, S_T, D_REQ, false);
            add(&c, "succeeded", "#1a7f37", NULL, S_T, D_OK, false);
            add(&c, "failed + timed out", "#c62828", NULL, S_T, D_BAD, false);
            add(&c, "refused (shed, full)", "#e6a100", "5 3", S_T, D_REFUSED, false);
            note = "Per incident second. Requests above successes are retries and failures.";
            break;
        case 8:
            c.title = "Resident memory (RSS)";
            c.unit = "MB";
            add(&c, "RSS", "#6a3d9a", NULL, S_RSS_MB, D_NONE, false);
            note = "Of the process running the configuration (queued tasks carry their context).";
            break;
        }
        fit(&c, res, n);
        fputs("<h3>", f);
        esc(f, c.title);
        fputs("</h3>", f);
        legend(f, &c);
        fprintf(f, "<div class='grid' style='grid-template-columns:repeat(%u,1fr)'>", n);
        for (unsigned i = 0; i < n; i++) {
            fputs("<div>", f);
            draw_chart(f, sc, &c, &ax, res, i);
            fputs("</div>", f);
        }
        fputs("</div>", f);
        fputs("<p class='note'>", f);
        esc(f, note);
        fputs("</p>\n", f);
    }
    fputs("<p class='note'>Written by <code>ax-demo</code>; the same figures are in "
          "<code>results.json</code>. Shaded: the busiest phase (red) and the drain (grey).</p>\n",
          f);
    fputs("</body></html>\n", f);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
