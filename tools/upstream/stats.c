/* stats.c - what the upstream has done so far, for GET /stats.
 *
 * Counters are relaxed atomics bumped by the connection tasks; the JSON is a
 * snapshot read field by field, so two fields may be a request apart while
 * traffic runs (and agree exactly once it stops).
 *
 *   requests.total = sum(by_status) + resets + unanswered + in_flight
 *
 * where by_status counts every response sent (including 4xx for malformed
 * requests), resets the responses cut off on purpose, unanswered the
 * requests that ended with no response (a hang the client gave up on, a
 * client gone before its answer, shutdown), and in_flight those still being
 * served (a hang stays in flight until its client leaves). /stats requests
 * are counted apart, in stats_requests, so that a load generator's count can
 * be compared with requests.total.
 *
 * Served latency (from the end of the request to the end of the response,
 * for 200/500/503 from an endpoint) goes into a log-linear histogram: 16
 * buckets per power of two of microseconds, so a quantile is the bucket's
 * midpoint, within about 3 %. max and mean are exact.
 */
#include "upstream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct up_stats up_stats;

void stats_max(_Atomic uint64_t *max, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(max, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(max, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

static unsigned hist_index(uint64_t v)
{
    if (v < 2 * UP_HIST_SUB) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 5 */
    unsigned sub = (unsigned)(v >> (e - 4)) & (UP_HIST_SUB - 1);
    return 2 * UP_HIST_SUB + (e - 5) * UP_HIST_SUB + sub;
}

/* Midpoint of bucket i, in µs. */
static double hist_mid(unsigned i)
{
    if (i < 2 * UP_HIST_SUB) return i;
    unsigned e = 5 + (i - 2 * UP_HIST_SUB) / UP_HIST_SUB;
    unsigned sub = (i - 2 * UP_HIST_SUB) % UP_HIST_SUB;
    double width = (double)(1ull << (e - 4));
    return (UP_HIST_SUB + sub) * width + width / 2;
}

void stats_latency(uint64_t us)
{
    atomic_fetch_add_explicit(&up_stats.lat_hist[hist_index(us)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&up_stats.lat_sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&up_stats.lat_count, 1, memory_order_relaxed);
    stats_max(&up_stats.lat_max_us, us);
}

void stats_quantiles_us(const double *q, double *out, unsigned n)
{
    /* One copy of the buckets, so every quantile comes from the same counts.
     * On the heap: this runs on a connection's coroutine stack. */
    uint64_t *c = malloc(sizeof(uint64_t) * UP_HIST_N), total = 0;
    double max = (double)atomic_load_explicit(&up_stats.lat_max_us, memory_order_relaxed);
    for (unsigned k = 0; k < n; k++)
        out[k] = 0;
    if (!c) return;
    for (unsigned i = 0; i < UP_HIST_N; i++)
        total += c[i] = atomic_load_explicit(&up_stats.lat_hist[i], memory_order_relaxed);
    for (unsigned k = 0; total && k < n; k++) {
        uint64_t rank = (uint64_t)ceil(q[k] * (double)total), seen = 0;
        if (rank < 1) rank = 1;
        unsigned i = 0;
        while (i < UP_HIST_N - 1 && (seen += c[i]) < rank)
            i++;
        double mid = hist_mid(i);
        out[k] = mid > max ? max : mid;
    }
    free(c);
}

static uint64_t ld(_Atomic uint64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

/* A JSON string; patterns are the only user text and may hold anything but
 * spaces and commas. */
static void json_str(FILE *f, const char *s)
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

char *stats_json(const struct scenario *sc, uint64_t start_ns, uint64_t now_ns, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    uint64_t el_ms = (now_ns - start_ns) / 1000000u, in_ms;
    unsigned ph = scenario_phase_at(sc, el_ms, &in_ms);
    bool last = ph + 1 == sc->nph && !sc->loop;
    fprintf(f, "{\"uptime_s\":%.3f,", (double)(now_ns - start_ns) / 1e9);
    fprintf(f, "\"phase\":{\"index\":%u,\"name\":", ph);
    json_str(f, sc->ph[ph].name);
    fprintf(f, ",\"elapsed_s\":%.3f,\"remaining_s\":", in_ms / 1e3);
    if (last)
        fputs("null", f);
    else
        fprintf(f, "%.3f", (double)(sc->ph[ph].duration_ms - in_ms) / 1e3);
    fprintf(f, ",\"count\":%u,\"loop\":%s},", sc->nph, sc->loop ? "true" : "false");

    fprintf(f,
            "\"connections\":{\"accepted\":%llu,\"open\":%llu,\"max_open\":%llu,"
            "\"refused\":%llu,\"accept_errors\":%llu},",
            (unsigned long long)ld(&up_stats.conns_accepted),
            (unsigned long long)ld(&up_stats.conns_open),
            (unsigned long long)ld(&up_stats.conns_max_open),
            (unsigned long long)ld(&up_stats.conns_refused),
            (unsigned long long)ld(&up_stats.accept_errors));

    fprintf(f,
            "\"requests\":{\"total\":%llu,\"in_flight\":%llu,\"max_in_flight\":%llu,"
            "\"hangs\":%llu,\"resets\":%llu,\"unanswered\":%llu,\"by_status\":{",
            (unsigned long long)ld(&up_stats.requests), (unsigned long long)ld(&up_stats.in_flight),
            (unsigned long long)ld(&up_stats.max_in_flight),
            (unsigned long long)ld(&up_stats.hangs), (unsigned long long)ld(&up_stats.resets),
            (unsigned long long)ld(&up_stats.unanswered));
    const char *sep = "";
    for (unsigned s = 100; s < 600; s++) {
        uint64_t n = ld(&up_stats.status[s]);
        if (n) {
            fprintf(f, "%s\"%u\":%llu", sep, s, (unsigned long long)n);
            sep = ",";
        }
    }
    fprintf(f, "}},\"stats_requests\":%llu,", (unsigned long long)ld(&up_stats.stats_requests));

    uint64_t cnt = ld(&up_stats.lat_count);
    static const double qs[3] = {0.50, 0.90, 0.99};
    double qv[3];
    stats_quantiles_us(qs, qv, 3);
    fprintf(f,
            "\"latency_ms\":{\"count\":%llu,\"mean\":%.3f,\"p50\":%.3f,\"p90\":%.3f,"
            "\"p99\":%.3f,\"max\":%.3f},",
            (unsigned long long)cnt, cnt ? (double)ld(&up_stats.lat_sum_us) / cnt / 1e3 : 0.0,
            qv[0] / 1e3, qv[1] / 1e3, qv[2] / 1e3, (double)ld(&up_stats.lat_max_us) / 1e3);

    fputs("\"endpoints\":[", f);
    for (unsigned i = 0; i < sc->nep; i++) {
        struct endpoint *e = (struct endpoint *)&sc->ep[i];
        fputs(i ? ",{\"path\":" : "{\"path\":", f);
        json_str(f, e->pattern);
        fprintf(f, ",\"requests\":%llu,\"in_flight\":%llu,\"max_in_flight\":%llu}",
                (unsigned long long)ld(&e->requests), (unsigned long long)ld(&e->in_flight),
                (unsigned long long)ld(&e->max_in_flight));
    }
    fputs("]}\n", f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
