/* hist.c - log-linear latency histogram: the reader side (DESIGN.md §9).
 *
 * What it owns
 * ------------
 * Nothing but the struct ax_hist it is handed. The write path,
 * ax_hist_record, is inline in hist.h; this file holds the cold reader
 * functions (merge, quantiles, bucket walk) that a stats call or the
 * Prometheus exposition runs.
 *
 * Geometry and its numbers
 * ------------------------
 * HdrHistogram's layout with 5 sub-bucket bits, in integer nanoseconds:
 *
 *   values          bucket width   buckets   relative width
 *   0 .. 63         1 ns           64        exact
 *   [2^e, 2^(e+1))  2^(e-5) ns     32 each   <= 1/32 = 3.1 %   (6 <= e <= 46)
 *   >= 2^47 ns      -              1         overflow, max only
 *
 * 1376 + 1 buckets of 8 bytes plus sum and max: 11,032 bytes. 1 us falls in
 * [992, 1008) ns, 1 day (8.64e13 ns) in a bucket 2^41 ns wide at 2^46: 2.5 %
 * of the value. The quantiles report a bucket's midpoint, within half a width
 * of every value in it, so a quantile is within 1.6 % of the exact one for
 * any value up to 39 hours, and exact below 64 ns.
 *
 * Why not fewer, wider buckets or a float exponent: 32 sub-buckets are what
 * the 5 % bound needs with margin for the midpoint rule, and an integer
 * index (clz + shifts) is cheaper on the record path than frexp/log.
 *
 * Concurrency
 * -----------
 * The single writer stores with relaxed atomics (no RMW); readers load
 * relaxed. Counts only grow, so a reader summing the buckets twice sees a
 * second total >= the first: the quantile walk below always reaches its rank.
 * The total count is not a separate field: it is the sum of the buckets as
 * read, so a snapshot's count always equals its +Inf bucket.
 */
#include "hist.h"

#include <math.h>

static uint64_t load(const _Atomic uint64_t *p)
{
    return atomic_load_explicit(p, memory_order_relaxed);
}

static void store(_Atomic uint64_t *p, uint64_t v)
{
    atomic_store_explicit(p, v, memory_order_relaxed);
}

uint64_t ax_hist_bucket_lower(unsigned i)
{
    if (i >= AX_HIST_OVERFLOW) return AX_HIST_LIMIT;
    if (i < 2 * AX_HIST_SUB) return i;
    unsigned shift = (i >> AX_HIST_SUB_BITS) - 1;
    uint64_t m = i - ((uint64_t)shift << AX_HIST_SUB_BITS); /* in [SUB, 2*SUB) */
    return m << shift;
}

uint64_t ax_hist_bucket_upper(unsigned i)
{
    if (i >= AX_HIST_OVERFLOW) return UINT64_MAX;
    if (i < 2 * AX_HIST_SUB) return i;
    unsigned shift = (i >> AX_HIST_SUB_BITS) - 1;
    return ax_hist_bucket_lower(i) + ((uint64_t)1 << shift) - 1;
}

void ax_hist_reset(struct ax_hist *h)
{
    store(&h->sum, 0);
    store(&h->max, 0);
    for (unsigned i = 0; i < AX_HIST_NBUCKETS; i++)
        store(&h->bucket[i], 0);
}

void ax_hist_merge(struct ax_hist *dst, const struct ax_hist *src)
{
    for (unsigned i = 0; i < AX_HIST_NBUCKETS; i++) {
        uint64_t c = load(&src->bucket[i]);
        if (c) store(&dst->bucket[i], load(&dst->bucket[i]) + c);
    }
    uint64_t s = load(&dst->sum);
    if (__builtin_add_overflow(s, load(&src->sum), &s)) s = UINT64_MAX;
    store(&dst->sum, s);
    uint64_t m = load(&src->max);
    if (m > load(&dst->max)) store(&dst->max, m);
}

uint64_t ax_hist_count(const struct ax_hist *h)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < AX_HIST_NBUCKETS; i++)
        n += load(&h->bucket[i]);
    return n;
}

uint64_t ax_hist_sum(const struct ax_hist *h)
{
    return load(&h->sum);
}

uint64_t ax_hist_max(const struct ax_hist *h)
{
    return load(&h->max);
}

uint64_t ax_hist_quantile(const struct ax_hist *h, double q)
{
    uint64_t n = ax_hist_count(h);
    if (n == 0) return 0;
    uint64_t max = ax_hist_max(h);
    if (q >= 1.0) return max;
    if (!(q > 0.0)) q = 0.0; /* also NaN */

    /* Rank of the wanted value among n sorted ones, 1-based: ceil(q n). */
    double r = ceil(q * (double)n);
    uint64_t rank = r < 1.0 ? 1 : r >= (double)n ? n : (uint64_t)r;

    uint64_t cum = 0;
    for (unsigned i = 0; i < AX_HIST_NBUCKETS; i++) {
        cum += load(&h->bucket[i]);
        if (cum >= rank) {
            if (i == AX_HIST_OVERFLOW) return max;
            uint64_t lo = ax_hist_bucket_lower(i), hi = ax_hist_bucket_upper(i);
            uint64_t mid = lo + (hi - lo) / 2;
            return mid < max ? mid : max;
        }
    }
    return max; /* unreachable: counts only grow between the two walks */
}

void ax_hist_iter_init(struct ax_hist_iter *it, const struct ax_hist *h)
{
    *it = (struct ax_hist_iter){.h = h};
}

bool ax_hist_iter_next(struct ax_hist_iter *it)
{
    while (it->next < AX_HIST_NBUCKETS) {
        unsigned i = it->next++;
        uint64_t c = load(&it->h->bucket[i]);
        if (c == 0) continue;
        it->index = i;
        it->lower = ax_hist_bucket_lower(i);
        it->upper = ax_hist_bucket_upper(i);
        it->count = c;
        it->cumulative += c;
        return true;
    }
    return false;
}
