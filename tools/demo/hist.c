/* hist.c - a log-linear histogram of microseconds, written by many threads
 * without locks (relaxed atomic increments), read as snapshots.
 *
 * Buckets: exact below 16 us, then 16 per power of two, so a quantile is
 * within about 3 % of the exact value; max is exact. A window (the waits of
 * the last half second, for the charts) is the difference of two snapshots,
 * so writers never reset anything.
 */
#include "demo.h"

static unsigned bucket(uint64_t v)
{
    if (v < DM_HIST_SUB) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= DM_HIST_BITS */
    unsigned idx = (e - DM_HIST_BITS + 1) * DM_HIST_SUB +
                   (unsigned)((v >> (e - DM_HIST_BITS)) & (DM_HIST_SUB - 1));
    return idx < DM_HIST_N ? idx : DM_HIST_N - 1;
}

static double bucket_mid(unsigned idx)
{
    if (idx < DM_HIST_SUB) return idx;
    unsigned e = idx / DM_HIST_SUB + DM_HIST_BITS - 1, sub = idx % DM_HIST_SUB;
    double lo = (double)((uint64_t)(DM_HIST_SUB + sub) << (e - DM_HIST_BITS));
    return lo + (double)(1ull << (e - DM_HIST_BITS)) / 2;
}

void dm_hist_add(struct dm_hist *h, uint64_t us)
{
    atomic_fetch_add_explicit(&h->b[bucket(us)], 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&h->max_us, memory_order_relaxed);
    while (us > m && !atomic_compare_exchange_weak_explicit(
                         &h->max_us, &m, us, memory_order_relaxed, memory_order_relaxed)) {
    }
}

void dm_hist_snapshot(const struct dm_hist *h, uint64_t *out)
{
    for (unsigned i = 0; i < DM_HIST_N; i++)
        out[i] = atomic_load_explicit(&h->b[i], memory_order_relaxed);
}

uint64_t dm_hist_total(const uint64_t *c)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < DM_HIST_N; i++)
        n += c[i];
    return n;
}

double dm_hist_quantile(const uint64_t *c, double q)
{
    uint64_t n = dm_hist_total(c);
    if (n == 0) return -1;
    uint64_t rank = (uint64_t)(q * (double)n);
    if (rank >= n) rank = n - 1;
    uint64_t seen = 0;
    unsigned i = 0;
    for (; i < DM_HIST_N - 1; i++) {
        seen += c[i];
        if (seen > rank) break;
    }
    return bucket_mid(i);
}
