/* bench_hist.c - cost of the latency histogram (src/obs/hist.c).
 *
 * Prints one "name value" line per figure, each the median of 5 runs:
 *   hist_record_ns    ax_hist_record of one value, the worker's hot path;
 *                     values cycle through 4096 precomputed lognormal-ish
 *                     latencies (median ~50 us) so the bucket index varies
 *                     the way it does under a real load
 *   hist_quantile_ns  ax_hist_quantile(p99) on a filled histogram (reader)
 *   hist_merge_ns     ax_hist_merge of one filled histogram (reader)
 * Build: cc -std=c11 -O2 -Isrc src/obs/hist.c bench/bench_hist.c -lm -o bench_hist
 */
#define _POSIX_C_SOURCE 200809L
#include "obs/hist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RUNS 5
#define NVALS 4096

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnd(void) /* xorshift64*: cheap and deterministic */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v)
{
    qsort(v, RUNS, sizeof *v, cmp_double);
    return v[RUNS / 2];
}

static struct ax_hist hist, dst; /* static, like a worker's */
static uint64_t vals[NVALS];

static double bench_record(void)
{
    enum { OPS = 1 << 25 };
    double t0 = now_ns();
    for (uint32_t i = 0; i < OPS; i++)
        ax_hist_record(&hist, vals[i & (NVALS - 1)]);
    return (now_ns() - t0) / OPS;
}

static volatile uint64_t sink;

static double bench_quantile(void)
{
    enum { OPS = 1 << 12 };
    double t0 = now_ns();
    for (int i = 0; i < OPS; i++)
        sink += ax_hist_quantile(&hist, 0.99);
    return (now_ns() - t0) / OPS;
}

static double bench_merge(void)
{
    enum { OPS = 1 << 12 };
    double t0 = now_ns();
    for (int i = 0; i < OPS; i++)
        ax_hist_merge(&dst, &hist);
    return (now_ns() - t0) / OPS;
}

int main(void)
{
    for (int i = 0; i < NVALS; i++) { /* exp of a sum of uniforms: a skewed spread */
        double g = 0;
        for (int k = 0; k < 4; k++)
            g += (double)(rnd() >> 11) / 9007199254740992.0 - 0.5;
        vals[i] = (uint64_t)(50e3 * exp(3.0 * g));
    }
    double r[RUNS], q[RUNS], m[RUNS];
    bench_record(); /* warm up: page in, settle the clock */
    for (int i = 0; i < RUNS; i++) {
        r[i] = bench_record();
        q[i] = bench_quantile();
        m[i] = bench_merge();
    }
    printf("hist_record_ns %.2f\n", median(r));
    printf("hist_quantile_ns %.0f\n", median(q));
    printf("hist_merge_ns %.0f\n", median(m));
    return 0;
}
