/* report.c - results.json: everything a run measured, for scripts and CI.
 *
 * One object: the scenario as it ran, then one entry per configuration with
 * its settings, task accounting (generated = admitted + shed + rejected;
 * admitted = succeeded + failed + timed_out + cancelled), waits per priority,
 * run times, retries and requests (amplification = requests per started
 * task), peak RSS and threads, lifecycle counts, the verdicts, and the time
 * series the report draws (null where a window had no data). Times are
 * incident time (wall x speed) unless a name says _wall.
 */
#include "demo.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <string.h>
#include <time.h>

static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void jnum(FILE *f, double v)
{
    if (!isfinite(v))
        fputs("null", f);
    else if (v == floor(v) && fabs(v) < 1e15)
        fprintf(f, "%.0f", v);
    else
        fprintf(f, "%.6g", v);
}

static void jdist(FILE *f, const struct dm_dist *d)
{
    fputs("{\"p50_ms\":", f);
    jnum(f, d->count ? d->p50 : NAN);
    fputs(",\"p99_ms\":", f);
    jnum(f, d->count ? d->p99 : NAN);
    fputs(",\"max_ms\":", f);
    jnum(f, d->count ? d->max : NAN);
    fprintf(f, ",\"count\":%llu}", (unsigned long long)d->count);
}

static const char *const series_name[DM_NSERIES] = {"t_s",
                                                    "queued_high",
                                                    "queued_normal",
                                                    "queued_low",
                                                    "retry_wait",
                                                    "running",
                                                    "limit",
                                                    "wait_p99_high_ms",
                                                    "wait_p99_normal_ms",
                                                    "wait_p99_low_ms",
                                                    "latency_p50_ms",
                                                    "latency_p99_ms",
                                                    "upstream_service_mean_ms",
                                                    "upstream_in_flight",
                                                    "rss_mb",
                                                    "threads",
                                                    "generated",
                                                    "admitted",
                                                    "refused",
                                                    "succeeded",
                                                    "failed",
                                                    "timed_out",
                                                    "requests",
                                                    "latency_all_p50_ms",
                                                    "latency_all_p99_ms",
                                                    "timed_out_calls_pct",
                                                    "wait_p99_all_ms"};

static const char *const class_series_name[DM_NCS] = {
    "limit",           "in_flight",      "queued",  "breaker",         "retry_budget_left",
    "retries_allowed", "retries_denied", "expired", "breaker_rejected", "limit_mark"};

static const char *const out_name[DM_NOUT] = {"succeeded", "failed", "timed_out",
                                              "cancelled", "shed",   "rejected"};

/* The run's configurations, for ax-auto's targets against seed-tuned. */
static struct dm_result *const *g_res;
static unsigned g_nres;

static void write_config(FILE *f, const struct dm_scenario *sc, const struct dm_result *r)
{
    const struct dm_profile *p = dm_profile_find(sc, r->name);
    fputs("{\"name\":", f);
    jstr(f, r->name);
    fputs(",\"engine\":", f);
    jstr(f, p && p->engine == ENG_THREADS   ? "threads"
            : p && p->engine == ENG_AX_AUTO ? "ax-auto"
                                            : "ax");
    fputs(",\"about\":", f);
    jstr(f, p ? p->about : "");
    fprintf(f, ",\"ok\":%s,\"error\":", r->ok ? "true" : "false");
    jstr(f, r->error);
    if (p) {
        fprintf(f, ",\"settings\":{\"cap\":%llu,\"queues\":",
                (unsigned long long)(p->cap ? p->cap : r->limit));
        if (p->engine == ENG_AX_AUTO)
            fputs("\"ax default\",\"shed_ratio\":\"ax default\"", f);
        else if (p->queue[0] || p->queue[1] || p->queue[2])
            fprintf(f, "{\"HIGH\":%u,\"NORMAL\":%u,\"LOW\":%u},\"shed_ratio\":%g", p->queue[0],
                    p->queue[1], p->queue[2], p->shed_ratio);
        else
            fputs("null,\"shed_ratio\":null", f);
        fprintf(f,
                ",\"retry\":\"%s\",\"retry_base_ms\":%g,\"retry_max_ms\":%g,"
                "\"retry_jitter_ms\":%g,\"max_retry\":%u,\"retry_low\":%s,\"timeout_ms\":",
                p->retry == RETRY_NONE    ? "none"
                : p->retry == RETRY_FIXED ? "fixed"
                                          : "exponential",
                p->retry_base_ms, p->retry_max_ms, p->retry_jitter_ms, p->max_retry,
                p->retry_low ? "true" : "false");
        if (p->timeout_ms > 0)
            jnum(f, p->timeout_ms);
        else
            fputs("\"per class\"", f);
        fputc('}', f);
    }
    if (!r->ok) {
        fputc('}', f);
        return;
    }
    fprintf(f, ",\"wall_s\":%.3f,\"incident_s\":%.3f", r->wall_s, r->incident_s);
    uint64_t adm = dm_sum_admitted(r), started = r->started[0] + r->started[1] + r->started[2];
    fprintf(f, ",\"tasks\":{\"generated\":%llu,\"admitted\":%llu,\"started\":%llu",
            (unsigned long long)r->generated, (unsigned long long)adm, (unsigned long long)started);
    for (unsigned o = 0; o < DM_NOUT; o++)
        fprintf(f, ",\"%s\":%llu", out_name[o],
                (unsigned long long)dm_total(r, (enum dm_outcome)o));
    fputs("},\"by_priority\":{", f);
    for (unsigned pr = 0; pr < DM_NPRIO; pr++) {
        fprintf(f, "%s\"%s\":{\"generated\":%llu,\"admitted\":%llu,\"started\":%llu", pr ? "," : "",
                dm_prio_name[pr], (unsigned long long)r->generated_by[pr],
                (unsigned long long)r->admitted[pr], (unsigned long long)r->started[pr]);
        for (unsigned o = 0; o < DM_NOUT; o++)
            fprintf(f, ",\"%s\":%llu", out_name[o], (unsigned long long)r->out[pr][o]);
        fputs(",\"wait\":", f);
        jdist(f, &r->wait[pr]);
        fputc('}', f);
    }
    fputs("},\"run\":", f);
    jdist(f, &r->run);
    fprintf(f, ",\"retries\":%llu,\"upstream_requests\":%llu,\"answered\":%llu",
            (unsigned long long)r->retries, (unsigned long long)r->requests,
            (unsigned long long)r->answered);
    fputs(",\"upstream_requests_counted_by_upstream\":", f);
    if (r->upstream_requests || r->upstream_max_in_flight)
        fprintf(f, "%llu", (unsigned long long)r->upstream_requests);
    else
        fputs("null", f);
    fputs(",\"requests_per_task\":", f);
    jnum(f, dm_requests_per_task(r));
    fputs(",\"requests_per_generated_task\":", f);
    jnum(f, dm_requests_per_generated(r));
    fprintf(f, ",\"max_in_flight\":%llu,\"max_in_task\":%llu,\"limit\":%llu,\"max_queued\":%llu",
            (unsigned long long)r->max_in_flight, (unsigned long long)r->max_in_task,
            (unsigned long long)r->limit, (unsigned long long)r->max_queued);
    fputs(",\"queue_bound\":", f);
    if (r->queue_bound)
        fprintf(f, "%llu", (unsigned long long)r->queue_bound);
    else
        fputs("null", f);
    fprintf(f,
            ",\"max_attempt_ms\":%.1f,\"max_slot_ms\":%.1f,\"max_timeout_ms\":%.1f,"
            "\"peak_rss_mb\":%.1f,\"peak_threads\":%u",
            r->max_attempt_ms, r->max_slot_ms, r->max_timeout_ms, r->peak_rss_mb, r->peak_threads);
    fprintf(f, ",\"upstream_max_in_flight\":%llu", (unsigned long long)r->upstream_max_in_flight);
    /* The demo's own measurements, from the task functions' side. */
    fprintf(
        f,
        ",\"measured\":{\"max_functions_at_once\":%llu,\"orphan_allowance\":%llu,"
        "\"max_waiting\":%llu,\"tasks_met_all_slots_busy\":%llu,\"high_met_all_slots_busy\":%llu,"
        "\"max_past_deadline_ms\":%.1f,\"returned_past_deadline\":%llu,"
        "\"returned_past_slack\":%llu,\"slack_ms\":%.0f,\"machine_stall_ms\":%.0f,"
        "\"max_submit_ms\":%.1f,\"max_sample_ms\":%.1f}",
        (unsigned long long)r->max_in_task, (unsigned long long)r->orphan_allowance,
        (unsigned long long)r->max_waiting, (unsigned long long)r->met_full,
        (unsigned long long)r->met_full_by[DM_HIGH], r->max_over_ms, (unsigned long long)r->late,
        (unsigned long long)r->overdue, r->slack_ms, r->stall_ms, r->max_submit_ms,
        r->max_sample_ms);
    /* Upstream answers per class: {"quote":{"200":n,"404":n,"none":n},...}. */
    fputs(",\"http_status\":{", f);
    for (unsigned c = 0; c < sc->ncls; c++) {
        if (c) fputc(',', f);
        jstr(f, sc->cls[c].name);
        fputs(":{", f);
        bool first = true;
        for (unsigned k = 0; k < DM_NSTATUS; k++) {
            if (!r->status[c][k]) continue;
            if (k)
                fprintf(f, "%s\"%u\":%llu", first ? "" : ",", k,
                        (unsigned long long)r->status[c][k]);
            else
                fprintf(f, "%s\"none\":%llu", first ? "" : ",",
                        (unsigned long long)r->status[c][k]);
            first = false;
        }
        fputc('}', f);
    }
    fprintf(f, "},\"machine_stalled\":%s,\"cpu_pressure_pct\":",
            dm_machine_stalled(sc, r) ? "true" : "false");
    jnum(f, r->cpu_pressure_pct >= 0 ? r->cpu_pressure_pct : NAN);
    fprintf(f, ",\"answered_2xx\":%llu,\"upstream_failing\":%s",
            (unsigned long long)dm_answered_2xx(r), dm_upstream_failing(r) ? "true" : "false");
    fprintf(f,
            ",\"lifecycle\":{\"on_done\":%llu,\"events_submitted\":%llu,"
            "\"events_terminal\":%llu,\"events_dropped\":%llu,\"lingering\":%llu,"
            "\"orphans\":%llu,\"low_started_in_peak\":%llu}",
            (unsigned long long)r->on_done_calls, (unsigned long long)r->ev_submitted,
            (unsigned long long)r->ev_terminal, (unsigned long long)r->ev_dropped,
            (unsigned long long)r->lingering, (unsigned long long)r->orphans,
            (unsigned long long)r->low_started_in_peak);
    /* The overload measures (tools/README.md, "Reading the results"). */
    fputs(",\"overload\":{\"high_wait_peak\":", f);
    jdist(f, &r->wait_high_peak);
    fputs(",\"wait_steady\":", f);
    jdist(f, &r->wait_steady);
    fputs(",\"high_wait_p99_peak_ms\":", f);
    jnum(f, r->wait_high_peak.count ? r->wait_high_peak.p99 : NAN);
    fprintf(f,
            ",\"degraded_tasks\":%llu,\"degraded_requests\":%llu,\"max_requests_one_task\":%llu,"
            "\"requests_per_task_degraded\":",
            (unsigned long long)r->degraded_tasks, (unsigned long long)r->degraded_requests,
            (unsigned long long)r->max_task_requests);
    jnum(f, dm_requests_per_degraded_task(r));
    fputs(",\"peak_rss_mb\":", f);
    jnum(f, r->peak_rss_mb);
    fputs(",\"recovery_s\":", f);
    jnum(f, isfinite(r->recovery_ms) && r->recovery_ms >= 0 ? r->recovery_ms / 1000 : NAN);
    fprintf(f, ",\"recovered\":%s,\"recovery_limit_ms\":",
            !isfinite(r->recovery_ms) ? "null"
            : r->recovery_ms >= 0     ? "true"
                                      : "false");
    jnum(f, r->recovery_limit_ms);
    fputs(",\"recovery_window_s\":", f);
    jnum(f, r->recovery_window_ms / 1000);
    fputs(",\"answer_p50_steady_ms\":", f);
    jnum(f, r->ans_p50_steady_ms);
    fputs(",\"answer_p50_at_recovery_ms\":", f);
    jnum(f, r->ans_p50_at_recovery_ms);
    fputs(",\"answers_back_s\":", f);
    jnum(f, r->ans_back_ms / 1000);
    fprintf(f, ",\"deadline_ms\":%g,\"good\":%llu,\"good_degraded\":%llu,\"goodput_per_s\":",
            sc->deadline_ms, (unsigned long long)r->good, (unsigned long long)r->good_degraded);
    jnum(f, dm_goodput(sc, r));
    fputs(",\"high_success_rate\":", f);
    jnum(f, dm_high_success(r));
    fprintf(f,
            ",\"refused_breaker_open\":%llu,\"failed_breaker_open\":%llu,"
            "\"failed_expired\":%llu,\"retry_budget_exhausted\":%llu}",
            (unsigned long long)r->open_refused, (unsigned long long)r->open_failed,
            (unsigned long long)r->expired, (unsigned long long)r->budget_denied);
    if (p && p->engine == ENG_AX_AUTO) {
        const struct dm_result *tuned = NULL;
        for (unsigned j = 0; j < g_nres; j++)
            if (strcmp(g_res[j]->name, "seed-tuned") == 0) tuned = g_res[j];
        struct dm_verdict tv[DM_NTARGETS];
        dm_targets(sc, r, tuned, tv);
        fputs(",\"targets\":[", f);
        for (unsigned k = 0; k < DM_NTARGETS; k++) {
            fputs(k ? ",{\"target\":" : "{\"target\":", f);
            jstr(f, tv[k].goal);
            fputs(",\"result\":", f);
            jstr(f, dm_mark_name(tv[k].mark));
            fputs(",\"text\":", f);
            jstr(f, tv[k].text);
            fputc('}', f);
        }
        fputc(']', f);
    }
    struct dm_verdict v[DM_NGOALS];
    dm_verdicts(sc, p, r, v);
    fputs(",\"verdicts\":[", f);
    for (unsigned k = 0; k < DM_NGOALS; k++) {
        fputs(k ? ",{\"goal\":" : "{\"goal\":", f);
        jstr(f, v[k].goal);
        fputs(",\"result\":", f);
        jstr(f, dm_mark_name(v[k].mark));
        fputs(",\"text\":", f);
        jstr(f, v[k].text);
        fputc('}', f);
    }
    fprintf(f, "],\"series\":{\"sample_ms_wall\":%g", r->sample_ms);
    for (unsigned s = 0; s < DM_NSERIES; s++) {
        fprintf(f, ",\n\"%s\":[", series_name[s]);
        for (unsigned i = 0; i < r->nsamples; i++) {
            if (i) fputc(',', f);
            double x = r->series[s][i];
            if (s == S_T) x /= 1000;
            if (!isfinite(x))
                fputs("null", f);
            else if (x == floor(x))
                fprintf(f, "%.0f", x);
            else
                fprintf(f, "%.4g", x);
        }
        fputc(']', f);
    }
    fputc('}', f);
    /* ax-auto: each task class over time, from ax_class_stats_get. */
    fputs(",\"class_series\":", f);
    if (!r->nclasses) {
        fputs("null}", f);
        return;
    }
    fputc('{', f);
    for (unsigned c = 0; c < r->nclasses && c < sc->ncls; c++) {
        fputs(c ? ",\n" : "\n", f);
        jstr(f, sc->cls[c].name);
        fputs(":{", f);
        for (unsigned k = 0; k < DM_NCS; k++) {
            fprintf(f, "%s\"%s\":[", k ? "," : "", class_series_name[k]);
            for (unsigned i = 0; i < r->nsamples; i++) {
                if (i) fputc(',', f);
                double x = r->cls[c][k][i];
                if (!isfinite(x))
                    fputs("null", f);
                else if (x == floor(x))
                    fprintf(f, "%.0f", x);
                else
                    fprintf(f, "%.4g", x);
            }
            fputc(']', f);
        }
        fputc('}', f);
    }
    fputs("}}", f);
}

int dm_write_json(const char *path, const struct dm_scenario *sc, const char *url,
                  struct dm_result *const *res, unsigned n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "{\"tool\":\"ax-demo\",\"generated_at\":\"%s\",\"scenario\":{\"origin\":", when);
    jstr(f, sc->origin);
    fprintf(f,
            ",\"speed\":%g,\"seed\":%llu,\"mix\":{\"HIGH\":%g,\"NORMAL\":%g,\"LOW\":%g},"
            "\"length_s\":%g,\"drain_s\":%g,\"deadline_s\":%g,\"context_bytes\":%g,"
            "\"upstream_base\":",
            sc->speed, (unsigned long long)sc->seed, sc->mix[0], sc->mix[1], sc->mix[2],
            dm_scenario_length_ms(sc) / 1000, sc->drain_ms / 1000, sc->deadline_ms / 1000,
            sc->ctx_bytes);
    jstr(f, sc->upstream_base);
    fputs(",\"classes\":[", f);
    for (unsigned i = 0; i < sc->ncls; i++) {
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        jstr(f, sc->cls[i].name);
        fputs(",\"path\":", f);
        jstr(f, sc->cls[i].path);
        fputs(",\"latency\":", f);
        jstr(f, sc->cls[i].latency);
        fprintf(f, ",\"share\":%g,\"timeout_ms\":%g}", sc->cls[i].share, sc->cls[i].timeout_ms);
    }
    fputs("],\"phases\":[", f);
    for (unsigned i = 0; i < sc->nph; i++) {
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        jstr(f, sc->ph[i].name);
        fprintf(f, ",\"duration_s\":%g,\"rate\":%g,\"upstream\":", sc->ph[i].duration_ms / 1000,
                sc->ph[i].rate);
        jstr(f, sc->ph[i].upstream);
        fputc('}', f);
    }
    fputs("]},\"upstream\":", f);
    if (url) {
        fputs("{\"kind\":\"url\",\"url\":", f);
        jstr(f, url);
        fputc('}', f);
    } else {
        fputs("{\"kind\":\"ax-upstream\",\"restarted_per_config\":true}", f);
    }
    g_res = res;
    g_nres = n;
    fputs(",\n\"configs\":[\n", f);
    for (unsigned i = 0; i < n; i++) {
        if (i) fputs(",\n", f);
        write_config(f, sc, res[i]);
    }
    fputs("\n]}\n", f);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
