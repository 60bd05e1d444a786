/* test_hist.c - the log-linear histogram (src/obs/hist.c).
 *
 * Quantiles against the exact ones from sorting on uniform, log-uniform,
 * lognormal, constant and bimodal data (200k values each); the bucket
 * geometry value by value; merge == recording into one; edge values (0, 1,
 * 2^47, UINT64_MAX); the empty histogram; a reader racing the writer.
 * Deterministic: a fixed-seed xorshift generator.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "obs/hist.h"

#include <math.h>
#include <pthread.h>

#define N 200000

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) /* xorshift64* */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static double unit(void) /* (0, 1) */
{
    return ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(void) /* Box-Muller */
{
    return sqrt(-2.0 * log(unit())) * cos(6.283185307179586 * unit());
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static struct ax_hist h, h2, h3; /* 11 KB each: static, like a worker's */
static uint64_t vals[N], sorted[N];

/* Record vals[0..n) and compare every reported figure with the exact one. */
static void check_quantiles(const char *what, size_t n)
{
    ax_hist_reset(&h);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        ax_hist_record(&h, vals[i]);
        sum += vals[i];
    }
    memcpy(sorted, vals, n * sizeof *vals);
    qsort(sorted, n, sizeof *sorted, cmp_u64);

    CHECK_EQ(ax_hist_count(&h), n);
    CHECK(ax_hist_sum(&h) == sum);
    CHECK(ax_hist_max(&h) == sorted[n - 1]);
    CHECK(ax_hist_quantile(&h, 1.0) == sorted[n - 1]);

    static const double qs[] = {0.0, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999};
    for (size_t k = 0; k < sizeof qs / sizeof *qs; k++) {
        size_t rank = (size_t)ceil(qs[k] * (double)n);
        if (rank < 1) rank = 1;
        uint64_t exact = sorted[rank - 1];
        uint64_t est = ax_hist_quantile(&h, qs[k]);
        double err = fabs((double)est - (double)exact);
        if (err > 0.05 * (double)exact || err > (double)exact / 64.0) {
            fprintf(stderr, "%s: q=%g exact %" PRIu64 " estimate %" PRIu64 " (%.2f%%)\n", what,
                    qs[k], exact, est, 100.0 * err / (double)exact);
            CHECK(!"quantile outside 1/64 (and 5 %) of the exact value");
        }
    }
    printf("%-12s p50 %" PRIu64 " p90 %" PRIu64 " p99 %" PRIu64 " max %" PRIu64 " ns\n", what,
           ax_hist_quantile(&h, 0.5), ax_hist_quantile(&h, 0.9), ax_hist_quantile(&h, 0.99),
           ax_hist_max(&h));
}

static void test_distributions(void)
{
    for (size_t i = 0; i < N; i++) /* uniform, 1 us .. 100 ms */
        vals[i] = 1000 + rnd() % 100000000;
    check_quantiles("uniform", N);

    for (size_t i = 0; i < N; i++) /* log-uniform over the whole range, 1 us .. 1 day */
        vals[i] = (uint64_t)exp(log(1e3) + unit() * (log(86400e9) - log(1e3)));
    check_quantiles("loguniform", N);

    for (size_t i = 0; i < N; i++) /* lognormal, median 50 us, sigma 2: a heavy tail */
        vals[i] = (uint64_t)(50e3 * exp(2.0 * gauss()));
    check_quantiles("lognormal", N);

    for (size_t i = 0; i < N; i++) /* constant */
        vals[i] = 123456789;
    check_quantiles("constant", N);

    for (size_t i = 0; i < N; i++) { /* bimodal: 90 % ~ 20 us, 10 % ~ 500 ms */
        double g = gauss();
        vals[i] = rnd() % 10 ? (uint64_t)(20e3 * (1 + 0.1 * g)) : (uint64_t)(500e6 * (1 + 0.1 * g));
    }
    check_quantiles("bimodal", N);

    for (size_t i = 0; i < N; i++) /* tiny values: exact buckets below 64 ns */
        vals[i] = rnd() % 200;
    check_quantiles("small", N);
}

/* Every value lies in its bucket; buckets tile [0, UINT64_MAX] in order and
 * are at most 1/32 of their lower bound wide. */
static void test_geometry(void)
{
    CHECK(sizeof(struct ax_hist) <= 16384);
    CHECK_EQ(ax_hist_bucket_lower(0), 0);
    for (unsigned i = 0; i + 1 < AX_HIST_NBUCKETS; i++) {
        uint64_t lo = ax_hist_bucket_lower(i), hi = ax_hist_bucket_upper(i);
        CHECK(lo <= hi);
        CHECK(ax_hist_bucket_lower(i + 1) == hi + 1);
        CHECK_EQ(ax_hist_index(lo), i);
        CHECK_EQ(ax_hist_index(hi), i);
        if (i >= 2 * AX_HIST_SUB)
            CHECK((hi - lo + 1) * AX_HIST_SUB <= lo);
        else
            CHECK(lo == hi && lo == i);
    }
    CHECK(ax_hist_bucket_lower(AX_HIST_OVERFLOW) == AX_HIST_LIMIT);
    CHECK(ax_hist_bucket_upper(AX_HIST_OVERFLOW) == UINT64_MAX);

    for (unsigned e = 0; e < 64; e++) {
        uint64_t p = (uint64_t)1 << e;
        uint64_t around[] = {p - 1, p, p + 1, p + p / 2};
        for (unsigned k = 0; k < 4; k++) {
            unsigned i = ax_hist_index(around[k]);
            CHECK(i < AX_HIST_NBUCKETS);
            CHECK(ax_hist_bucket_lower(i) <= around[k] && around[k] <= ax_hist_bucket_upper(i));
        }
    }
    for (int k = 0; k < 1000000; k++) {
        uint64_t v = rnd() >> (rnd() % 64);
        unsigned i = ax_hist_index(v);
        CHECK(ax_hist_bucket_lower(i) <= v && v <= ax_hist_bucket_upper(i));
    }
    /* 1 us and 1 day are resolved to within 5 %. */
    uint64_t probes[] = {1000, 86400000000000ull};
    for (unsigned k = 0; k < 2; k++) {
        unsigned i = ax_hist_index(probes[k]);
        CHECK(i < AX_HIST_OVERFLOW);
        CHECK((double)(ax_hist_bucket_upper(i) - ax_hist_bucket_lower(i)) <= 0.05 * probes[k]);
    }
}

static void test_merge(void)
{
    ax_hist_reset(&h);
    ax_hist_reset(&h2);
    ax_hist_reset(&h3);
    for (int i = 0; i < N; i++) {
        uint64_t a = (uint64_t)(50e3 * exp(2.0 * gauss())), b = rnd() % 5000000;
        ax_hist_record(&h, a);
        ax_hist_record(&h2, b);
        ax_hist_record(&h3, a);
        ax_hist_record(&h3, b);
    }
    ax_hist_record(&h2, AX_HIST_LIMIT + 5); /* the overflow bucket merges too */
    ax_hist_record(&h3, AX_HIST_LIMIT + 5);

    static struct ax_hist m; /* zero = empty */
    ax_hist_merge(&m, &h);
    ax_hist_merge(&m, &h2);
    CHECK(memcmp(&m, &h3, sizeof m) == 0);
    CHECK_EQ(ax_hist_count(&m), 2 * N + 1);
    CHECK(ax_hist_max(&m) == AX_HIST_LIMIT + 5);
    for (double q = 0; q <= 1.0; q += 0.01)
        CHECK(ax_hist_quantile(&m, q) == ax_hist_quantile(&h3, q));

    /* Merging an empty histogram changes nothing; sums saturate. */
    static struct ax_hist empty;
    ax_hist_merge(&m, &empty);
    CHECK(memcmp(&m, &h3, sizeof m) == 0);
    ax_hist_reset(&h2);
    ax_hist_record(&h2, UINT64_MAX - 10);
    ax_hist_merge(&m, &h2);
    CHECK(ax_hist_sum(&m) == UINT64_MAX);
    CHECK(ax_hist_max(&m) == UINT64_MAX - 10);
}

static void test_edges(void)
{
    ax_hist_reset(&h);
    ax_hist_record(&h, 0);
    ax_hist_record(&h, 1);
    ax_hist_record(&h, UINT64_MAX);
    CHECK_EQ(ax_hist_count(&h), 3);
    CHECK(ax_hist_max(&h) == UINT64_MAX);
    CHECK(ax_hist_sum(&h) == UINT64_MAX); /* saturated, not wrapped to 0 */
    CHECK(ax_hist_quantile(&h, 0.0) == 0);
    CHECK(ax_hist_quantile(&h, 0.33) == 0);
    CHECK(ax_hist_quantile(&h, 0.5) == 1);
    CHECK(ax_hist_quantile(&h, 0.9) == UINT64_MAX); /* overflow bucket: the exact max */
    CHECK(ax_hist_quantile(&h, 1.0) == UINT64_MAX);
    CHECK(ax_hist_quantile(&h, -3.0) == 0); /* clamped */
    CHECK(ax_hist_quantile(&h, 7.0) == UINT64_MAX);
    CHECK(ax_hist_quantile(&h, NAN) == 0);
    CHECK_EQ(ax_hist_index(0), 0);
    CHECK_EQ(ax_hist_index(1), 1);
    CHECK_EQ(ax_hist_index(63), 63);
    CHECK_EQ(ax_hist_index(64), 64);
    CHECK_EQ(ax_hist_index(AX_HIST_LIMIT - 1), AX_HIST_OVERFLOW - 1);
    CHECK_EQ(ax_hist_index(AX_HIST_LIMIT), AX_HIST_OVERFLOW);
    CHECK_EQ(ax_hist_index(UINT64_MAX), AX_HIST_OVERFLOW);

    /* Bucket walk: 0, 1, overflow; cumulative ends at the count. */
    struct ax_hist_iter it;
    ax_hist_iter_init(&it, &h);
    CHECK(ax_hist_iter_next(&it));
    CHECK(it.upper == 0 && it.count == 1 && it.cumulative == 1);
    CHECK(ax_hist_iter_next(&it));
    CHECK(it.upper == 1 && it.count == 1 && it.cumulative == 2);
    CHECK(ax_hist_iter_next(&it));
    CHECK(it.index == AX_HIST_OVERFLOW && it.lower == AX_HIST_LIMIT);
    CHECK(it.upper == UINT64_MAX && it.cumulative == 3);
    CHECK(!ax_hist_iter_next(&it));

    /* A value in the top tracked bucket: the quantile is clamped to max. */
    ax_hist_reset(&h);
    ax_hist_record(&h, AX_HIST_LIMIT - 1000);
    CHECK(ax_hist_quantile(&h, 0.5) <= AX_HIST_LIMIT - 1000);
    CHECK(ax_hist_quantile(&h, 0.5) >= ax_hist_bucket_lower(AX_HIST_OVERFLOW - 1));
}

static void test_empty(void)
{
    static struct ax_hist e; /* zero-initialised = empty */
    CHECK_EQ(ax_hist_count(&e), 0);
    CHECK_EQ(ax_hist_sum(&e), 0);
    CHECK_EQ(ax_hist_max(&e), 0);
    CHECK_EQ(ax_hist_quantile(&e, 0.0), 0);
    CHECK_EQ(ax_hist_quantile(&e, 0.5), 0);
    CHECK_EQ(ax_hist_quantile(&e, 1.0), 0);
    struct ax_hist_iter it;
    ax_hist_iter_init(&it, &e);
    CHECK(!ax_hist_iter_next(&it));

    ax_hist_reset(&h); /* reset returns to exactly the zero state */
    ax_hist_record(&h, 42);
    ax_hist_reset(&h);
    CHECK(memcmp(&h, &e, sizeof e) == 0);
}

/* One writer, one reader, no lock: the reader sees counts that only grow
 * and quantiles inside the recorded range. (Meaningful under TSan too: the
 * relaxed atomics are the whole protocol.) */
#define RACE_N 2000000
static _Atomic int race_done;

static void *race_writer(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; i < RACE_N; i++)
        ax_hist_record(&h, 1000 + (i * 7919) % 1000000);
    atomic_store(&race_done, 1);
    return NULL;
}

static void test_race(void)
{
    ax_hist_reset(&h);
    pthread_t w;
    CHECK(pthread_create(&w, NULL, race_writer, NULL) == 0);
    uint64_t last = 0;
    int reads = 0;
    while (!atomic_load(&race_done) || reads < 10) {
        uint64_t n = ax_hist_count(&h);
        CHECK(n >= last && n <= RACE_N);
        last = n;
        uint64_t q = ax_hist_quantile(&h, 0.5);
        if (n) CHECK(q >= 1000 - 1000 / 64 && q <= 1000000);
        reads++;
    }
    CHECK(pthread_join(w, NULL) == 0);
    CHECK_EQ(ax_hist_count(&h), RACE_N);
    CHECK(ax_hist_max(&h) == 1000 + 999999); /* 7919 is prime to 10^6: every residue occurs */
}

int main(void)
{
    test_geometry();
    test_empty();
    test_edges();
    test_merge();
    test_distributions();
    test_race();
    printf("test_hist: ok\n");
    return 0;
}
