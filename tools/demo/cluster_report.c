/* cluster_report.c - what ax-demo --cluster reports: the text table (per
 * worker and in total), results.json's "cluster" section and report.html
 * with the per-worker rows and one chart (executions per second per
 * worker, the kill marked). Counts come from cluster.c's join; see there
 * for what they prove.
 */
#include "cluster.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static void row(const char *label, const struct dm_cluster_result *r,
                uint64_t (*get)(const struct dm_cluster_worker *), uint64_t total)
{
    printf("  %-28s", label);
    for (unsigned i = 0; i < r->n; i++)
        printf("%14llu", (unsigned long long)get(&r->w[i]));
    printf("%14llu\n", (unsigned long long)total);
}

static uint64_t g_exec(const struct dm_cluster_worker *w) { return w->executed; }
static uint64_t g_ok(const struct dm_cluster_worker *w) { return w->ok; }
static uint64_t g_failed(const struct dm_cluster_worker *w) { return w->failed; }
static uint64_t g_to(const struct dm_cluster_worker *w) { return w->timed_out; }
static uint64_t g_redel(const struct dm_cluster_worker *w) { return w->redeliveries; }
static uint64_t g_dup(const struct dm_cluster_worker *w) { return w->duplicates; }
static uint64_t g_dead(const struct dm_cluster_worker *w) { return w->dead; }
static uint64_t g_claimed(const struct dm_cluster_worker *w) { return w->claimed; }

static uint64_t sum(const struct dm_cluster_result *r, uint64_t (*get)(const struct dm_cluster_worker *))
{
    uint64_t s = 0;
    for (unsigned i = 0; i < r->n; i++)
        s += get(&r->w[i]);
    return s;
}

void dm_cluster_print(const struct dm_scenario *sc, const struct dm_cluster_result *r)
{
    (void)sc;
    printf("\ncluster: %u ax-worker processes on one Redis queue (appendfsync always), %s "
           "killed with SIGKILL at %.1f s (incident), in the middle of the peak, holding %llu "
           "messages\n",
           r->n, r->w[r->killed].name, r->kill_t_ms / 1000, (unsigned long long)r->kill_held);
    printf("  %-28s", "");
    for (unsigned i = 0; i < r->n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%s%s", r->w[i].name, r->w[i].killed ? " (killed)" : "");
        printf("%14s", b);
    }
    printf("%14s\n", "total");
    row("tasks run (executions)", r, g_exec, r->executed);
    row("  succeeded", r, g_ok, sum(r, g_ok));
    row("  failed (HTTP, no answer)", r, g_failed, sum(r, g_failed));
    row("  timed out", r, g_to, sum(r, g_to));
    row("redeliveries", r, g_redel, r->redeliveries);
    row("duplicates executed", r, g_dup, r->duplicates);
    row("dead letters", r, g_dead, r->dead_stream);
    row("claimed from others", r, g_claimed, sum(r, g_claimed));
    printf("  (%s's dead letters and claims: it could not report them; its dead letters are "
           "the total's rest)\n",
           r->w[r->killed].name);
    printf("\n  messages  generated %llu = admitted %llu + shed %llu + rejected %llu + "
           "unconfirmed %llu\n",
           (unsigned long long)r->generated, (unsigned long long)r->admitted,
           (unsigned long long)r->shed, (unsigned long long)r->rejected,
           (unsigned long long)r->unconfirmed);
    printf("  terminal  admitted %llu = succeeded %llu + dead-lettered %llu + lost %llu "
           "(ids with two terminal records: %llu)\n",
           (unsigned long long)r->admitted, (unsigned long long)r->terminal_ok,
           (unsigned long long)r->terminal_dead, (unsigned long long)r->lost,
           (unsigned long long)r->multi);
    printf("  Redis     succeeded %llu, dead %llu, retried %llu, claimed %llu; left: %llu in "
           "the streams, %llu pending, %llu delayed (%s after %.1f s)\n",
           (unsigned long long)r->stats_succeeded, (unsigned long long)r->stats_dead,
           (unsigned long long)r->stats_retried, (unsigned long long)r->stats_claimed,
           (unsigned long long)r->left_length, (unsigned long long)r->left_pending,
           (unsigned long long)r->left_delayed, r->drained ? "drained" : "NOT drained",
           r->drain_s);
    if (r->upstream_requests)
        printf("  upstream  %llu requests counted by ax-upstream, %llu executions in the ledgers: "
               "%lld calls left no line (the killed worker's, in flight)\n",
               (unsigned long long)r->upstream_requests, (unsigned long long)r->executed,
               (long long)r->upstream_requests - (long long)r->executed);
    printf("  producer  longest submit round trip %.0f ms (wall; Redis answers after its fsync: "
           "appendfsync always)\n",
           r->max_batch_ms);
    printf("  lost      %llu%s\n", (unsigned long long)r->lost,
           r->lost ? "  <- admitted messages with no terminal record" : "  (must be 0)");
}

/* ---- results.json -------------------------------------------------------------------------- */

/* A JSON string: the scenario's origin may be a file name. */
static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void jw(FILE *f, const struct dm_cluster_worker *w)
{
    fprintf(f,
            "{\"name\":\"%s\",\"killed\":%s,\"exit_status\":%d,\"executed\":%llu,"
            "\"succeeded\":%llu,\"failed\":%llu,\"timed_out\":%llu,\"cancelled\":%llu,"
            "\"redeliveries\":%llu,\"duplicates\":%llu,\"dead_letters\":%llu,"
            "\"dead_letters_derived\":%s,\"reported\":%s,\"claimed\":%llu,"
            "\"acknowledged_ok\":%llu,\"retried\":%llu,\"ack_lost\":%llu,\"redis_errors\":%llu,"
            "\"executions_per_bin\":[",
            w->name, w->killed ? "true" : "false", w->exit_status,
            (unsigned long long)w->executed, (unsigned long long)w->ok,
            (unsigned long long)w->failed, (unsigned long long)w->timed_out,
            (unsigned long long)w->cancelled, (unsigned long long)w->redeliveries,
            (unsigned long long)w->duplicates, (unsigned long long)w->dead,
            w->dead_derived ? "true" : "false", w->summary ? "true" : "false",
            (unsigned long long)w->claimed, (unsigned long long)w->succeeded_acked,
            (unsigned long long)w->retried, (unsigned long long)w->ack_lost,
            (unsigned long long)w->redis_errors);
}

int dm_cluster_write_json(const char *path, const struct dm_scenario *sc,
                          const struct dm_cluster_result *r, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"scenario\":{\"origin\":");
    jstr(f, sc->origin);
    fprintf(f, ",\"speed\":%g,\"seed\":%llu,\"phases\":[", sc->speed,
            (unsigned long long)sc->seed);
    for (unsigned i = 0; i < sc->nph; i++)
        fprintf(f, "%s{\"name\":\"%s\",\"duration_ms\":%g,\"rate\":%g}", i ? "," : "",
                sc->ph[i].name, sc->ph[i].duration_ms, sc->ph[i].rate);
    fprintf(f, "],\"classes\":[");
    for (unsigned i = 0; i < sc->ncls; i++)
        fprintf(f, "%s{\"name\":\"%s\",\"path\":\"%s\",\"timeout_ms\":%g}", i ? "," : "",
                sc->cls[i].name, sc->cls[i].path, sc->cls[i].timeout_ms);
    fprintf(f, "]},\n\"cluster\":{\"ok\":%s,\"workers\":%u,\"killed\":\"%s\",\"kill_t_ms\":%.0f,\"kill_held\":%llu,"
               "\"settings\":{\"queue\":\"%s\",\"max_retry\":%u,\"slots\":%u,"
               "\"visibility_ms_wall\":%u,\"claim_interval_ms_wall\":%u,"
               "\"appendfsync\":\"always\"},\n",
            r->ok ? "true" : "false", r->n, r->w[r->killed].name, r->kill_t_ms,
            (unsigned long long)r->kill_held,
            DM_CLUSTER_QUEUE, r->max_retry, r->slots, r->visibility_ms, r->claim_ms);
    fprintf(f,
            "\"messages\":{\"generated\":%llu,\"admitted\":%llu,\"shed\":%llu,\"rejected\":%llu,"
            "\"unconfirmed\":%llu},\n"
            "\"terminal\":{\"succeeded\":%llu,\"dead_lettered\":%llu,\"lost\":%llu,"
            "\"more_than_one\":%llu,\"unknown_ids\":%llu},\n"
            "\"totals\":{\"executed\":%llu,\"redeliveries\":%llu,\"duplicates\":%llu,"
            "\"dead_letters\":%llu},\n"
            "\"redis\":{\"succeeded\":%llu,\"retried\":%llu,\"dead\":%llu,\"claimed\":%llu,"
            "\"dead_stream\":%llu,\"left_length\":%llu,\"left_pending\":%llu,"
            "\"left_delayed\":%llu,\"drained\":%s,\"drain_s\":%.2f},\n"
            "\"upstream_requests\":%llu,\"lost\":%llu,\"wall_s\":%.2f,\"bin_ms\":%g,"
            "\"max_submit_ms_wall\":%.1f,"
            "\"per_worker\":[\n",
            (unsigned long long)r->generated, (unsigned long long)r->admitted,
            (unsigned long long)r->shed, (unsigned long long)r->rejected,
            (unsigned long long)r->unconfirmed, (unsigned long long)r->terminal_ok,
            (unsigned long long)r->terminal_dead, (unsigned long long)r->lost,
            (unsigned long long)r->multi, (unsigned long long)r->unknown_ids,
            (unsigned long long)r->executed, (unsigned long long)r->redeliveries,
            (unsigned long long)r->duplicates, (unsigned long long)r->dead_stream,
            (unsigned long long)r->stats_succeeded, (unsigned long long)r->stats_retried,
            (unsigned long long)r->stats_dead, (unsigned long long)r->stats_claimed,
            (unsigned long long)r->dead_stream, (unsigned long long)r->left_length,
            (unsigned long long)r->left_pending, (unsigned long long)r->left_delayed,
            r->drained ? "true" : "false", r->drain_s, (unsigned long long)r->upstream_requests,
            (unsigned long long)r->lost, r->wall_s, r->bin_ms, r->max_batch_ms);
    for (unsigned i = 0; i < r->n; i++) {
        jw(f, &r->w[i]);
        for (unsigned b = 0; b < r->nbins; b++)
            fprintf(f, "%s%.0f", b ? "," : "", r->w[i].bins[b]);
        fprintf(f, "]}%s\n", i + 1 < r->n ? "," : "");
    }
    fprintf(f, "]}}\n");
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- report.html --------------------------------------------------------------------------- */

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                     "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* Executions per second (incident) per worker, the kill as a vertical line. */
static void chart(FILE *f, const struct dm_scenario *sc, const struct dm_cluster_result *r)
{
    const double W = 760, H = 260, ml = 56, mr = 110, mt = 20, mb = 30;
    double tmax = r->nbins * r->bin_ms, ymax = 1;
    for (unsigned i = 0; i < r->n; i++)
        for (unsigned b = 0; b < r->nbins; b++)
            if (r->w[i].bins[b] * 1000 / r->bin_ms > ymax) ymax = r->w[i].bins[b] * 1000 / r->bin_ms;
    double step = pow(10, floor(log10(ymax)));
    if (ymax / step < 3) step /= 2;
    ymax = ceil(ymax / step) * step;
    if (tmax <= 0) tmax = 1;
#define X(t) (ml + (t) / tmax * (W - ml - mr))
#define Y(v) (mt + (1 - (v) / ymax) * (H - mt - mb))
    fprintf(f, "<svg width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n", W,
            H, W, H);
    /* Phases shaded, named along the top. */
    double t = 0;
    for (unsigned i = 0; i < sc->nph; i++) {
        double x0 = X(t), x1 = X(fmin(t + sc->ph[i].duration_ms, tmax));
        if (i % 2)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"#f3f3f3\"/>\n",
                    x0, mt, x1 - x0, H - mt - mb);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" fill=\"#777\">%s</text>\n", x0 + 3,
                mt - 6, sc->ph[i].name);
        t += sc->ph[i].duration_ms;
    }
    for (double v = 0; v <= ymax + 1e-9; v += step)
        fprintf(f,
                "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%g</text>\n",
                ml, W - mr, Y(v), Y(v), ml - 4, Y(v) + 3, v);
    double tstep = tmax > 60000 ? 20000 : 10000;
    for (double x = 0; x <= tmax; x += tstep)
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">%.0f s</text>\n",
                X(x), H - mb + 14, x / 1000);
    fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#000\"/>\n", ml,
            W - mr, H - mb, H - mb);
    for (unsigned i = 0; i < r->n; i++) {
        fprintf(f, "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"%s\" points=\"",
                colors[i % 8]);
        for (unsigned b = 0; b < r->nbins; b++)
            fprintf(f, "%.1f,%.1f ", X((b + 0.5) * r->bin_ms), Y(r->w[i].bins[b] * 1000 / r->bin_ms));
        fprintf(f, "\"/>\n<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"%s\">%s%s</text>\n",
                W - mr + 8, mt + 14.0 * (i + 1), colors[i % 8], r->w[i].name,
                r->w[i].killed ? " (killed)" : "");
    }
    fprintf(f,
            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#000\" "
            "stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%.0f\" font-size=\"11\">SIGKILL %s</text>\n",
            X(r->kill_t_ms), X(r->kill_t_ms), mt, H - mb, X(r->kill_t_ms) + 4, mt + 12,
            r->w[r->killed].name);
    fprintf(f, "</svg>\n");
#undef X
#undef Y
}

int dm_cluster_write_html(const char *path, const struct dm_scenario *sc,
                          const struct dm_cluster_result *r, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<title>ax-demo --cluster</title><style>"
               "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}"
               "table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #ddd;"
               "text-align:right}th:first-child,td:first-child{text-align:left}"
               ".bad{color:#b00;font-weight:bold}.good{color:#070;font-weight:bold}"
               "</style></head><body>\n");
    fprintf(f, "<h1>ax-demo --cluster %u</h1>\n<section id=\"cluster\"><h2>Cluster: one Redis "
               "queue, %u ax-worker processes, one killed</h2>\n",
            r->n, r->n);
    fprintf(f, "<p>The ");
    for (const char *c = sc->origin; *c; c++)
        if (*c == '<') fputs("&lt;", f);
        else if (*c == '>') fputs("&gt;", f);
        else if (*c == '&') fputs("&amp;", f);
        else fputc(*c, f);
    fprintf(f, " scenario at %gx speed, submitted with ax_redis_submit_batch to queue "
               "<code>%s</code> on a redis-server with appendfsync always; %u ax-worker processes "
               "(%u slots each, visibility %u ms, claims every %u ms, up to %u retries through "
               "the delayed set) call ax-upstream. <b>%s was killed with SIGKILL at %.1f s</b> "
               "(incident time), in the middle of the peak.</p>\n",
            sc->speed, DM_CLUSTER_QUEUE, r->n, r->slots, r->visibility_ms, r->claim_ms,
            r->max_retry, r->w[r->killed].name, r->kill_t_ms / 1000);
    fprintf(f, "<table><tr><th>worker</th><th>tasks run</th><th>succeeded</th><th>failed</th>"
               "<th>timed out</th><th>redeliveries</th><th>duplicates</th><th>dead letters</th>"
               "<th>claimed</th></tr>\n");
    for (unsigned i = 0; i < r->n; i++) {
        const struct dm_cluster_worker *w = &r->w[i];
        fprintf(f,
                "<tr><td>%s%s</td><td>%llu</td><td>%llu</td><td>%llu</td><td>%llu</td><td>%llu</td>"
                "<td>%llu</td><td>%llu%s</td><td>%s%llu</td></tr>\n",
                w->name, w->killed ? " (killed)" : "", (unsigned long long)w->executed,
                (unsigned long long)w->ok, (unsigned long long)w->failed,
                (unsigned long long)w->timed_out, (unsigned long long)w->redeliveries,
                (unsigned long long)w->duplicates, (unsigned long long)w->dead,
                w->dead_derived ? " (the rest)" : "", w->summary ? "" : "? ",
                (unsigned long long)w->claimed);
    }
    fprintf(f,
            "<tr><th>total</th><th>%llu</th><th>%llu</th><th>%llu</th><th>%llu</th><th>%llu</th>"
            "<th>%llu</th><th>%llu</th><th>%llu</th></tr></table>\n",
            (unsigned long long)r->executed, (unsigned long long)sum(r, g_ok),
            (unsigned long long)sum(r, g_failed), (unsigned long long)sum(r, g_to),
            (unsigned long long)r->redeliveries, (unsigned long long)r->duplicates,
            (unsigned long long)r->dead_stream, (unsigned long long)sum(r, g_claimed));
    fprintf(f,
            "<p>Messages: generated %llu = admitted %llu + shed %llu + rejected %llu + "
            "unconfirmed %llu. Admitted %llu = succeeded %llu + dead-lettered %llu + "
            "<span class=\"%s\">lost %llu</span>; ids with more than one terminal record: %llu. "
            "Redis counted succeeded %llu, dead %llu, retried %llu, claimed %llu; the queue %s "
            "%.1f s after the traffic.</p>\n",
            (unsigned long long)r->generated, (unsigned long long)r->admitted,
            (unsigned long long)r->shed, (unsigned long long)r->rejected,
            (unsigned long long)r->unconfirmed, (unsigned long long)r->admitted,
            (unsigned long long)r->terminal_ok, (unsigned long long)r->terminal_dead,
            r->lost ? "bad" : "good", (unsigned long long)r->lost, (unsigned long long)r->multi,
            (unsigned long long)r->stats_succeeded, (unsigned long long)r->stats_dead,
            (unsigned long long)r->stats_retried, (unsigned long long)r->stats_claimed,
            r->drained ? "had drained" : "had NOT drained", r->drain_s);
    fprintf(f, "<h3>Executions per second per worker (incident time)</h3>\n");
    chart(f, sc, r);
    fprintf(f, "<p>Lost is computed from an exact ledger: every id a producer was given, joined "
               "with each worker's execution ledger (written before the acknowledgement) and "
               "the dead-letter stream. Duplicates are executions of one stream entry seen "
               "twice in the ledgers (the killed worker ran them and died before acknowledging)."
               "</p>\n</section></body></html>\n");
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
