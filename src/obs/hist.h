/* hist.h - log-linear latency histogram over nanosecond values (internal;
 * see hist.c for the design and its numbers).
 *
 * One writer, many readers, no locks. Each histogram has exactly one writer
 * thread (the worker that owns it); any thread may read it at any time (a
 * stats call). The writer updates every field with a relaxed atomic load and
 * a relaxed atomic store - never a read-modify-write - which on x86-64 and
 * aarch64 compiles to plain loads and stores. Readers load relaxed. A reader
 * racing the writer sees every bucket count as of some recent moment (counts
 * only grow), so a quantile or a rendering is never torn into nonsense; sum,
 * max and the buckets may be a few records apart from one another.
 *
 * Hot: ax_hist_record (once per task start and once per task end).
 * Cold: everything else (reader side, O(AX_HIST_NBUCKETS)).
 *
 * Zero-initialised = empty, so a histogram embedded in a calloc'd or static
 * worker needs no init call. Fixed size: sizeof(struct ax_hist) is about
 * 11 KiB, so a worker can hold wait and run time for each priority (6).
 */
#ifndef AX_OBS_HIST_H
#define AX_OBS_HIST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Geometry. Values below 2^(SUB_BITS+1) = 64 ns have a bucket each (exact).
 * Above, every power of two [2^e, 2^(e+1)) is cut into AX_HIST_SUB equal
 * sub-buckets of width 2^(e-SUB_BITS), so a bucket's width is at most 1/32 of
 * any value in it (3.1 %), and the midpoint the quantiles report is within
 * 1.6 % of it. Values >= 2^AX_HIST_LIMIT_BITS ns (2^47 ns = 39.1 hours) all
 * land in the last bucket, the overflow bucket: counted, but its only
 * resolved value is the exact max. There is no underflow bucket: 0 has a
 * bucket of its own. */
#define AX_HIST_SUB_BITS 5
#define AX_HIST_SUB (1u << AX_HIST_SUB_BITS) /* 32 sub-buckets per power of two */
#define AX_HIST_LIMIT_BITS 47                /* first value in overflow: 2^47 ns */
#define AX_HIST_LIMIT ((uint64_t)1 << AX_HIST_LIMIT_BITS)
#define AX_HIST_OVERFLOW ((AX_HIST_LIMIT_BITS - AX_HIST_SUB_BITS + 1) * AX_HIST_SUB) /* 1376 */
#define AX_HIST_NBUCKETS (AX_HIST_OVERFLOW + 1)                                      /* 1377 */

struct ax_hist {
    _Atomic uint64_t sum;                      /* ns, saturates at UINT64_MAX */
    _Atomic uint64_t max;                      /* exact largest value recorded */
    _Atomic uint64_t bucket[AX_HIST_NBUCKETS]; /* count per bucket; total = their sum */
};

/* Bucket of value v: index = (shift << SUB_BITS) + (v >> shift) with
 * shift = max(0, floor(log2 v) - SUB_BITS), clamped to the overflow bucket.
 * Branch-free: one bsr/lzcnt, two shifts, an add and a cmov. */
static inline unsigned ax_hist_index(uint64_t v)
{
    unsigned e = 63u - (unsigned)__builtin_clzll(v | AX_HIST_SUB); /* >= SUB_BITS */
    unsigned shift = e - AX_HIST_SUB_BITS;
    uint64_t i = ((uint64_t)shift << AX_HIST_SUB_BITS) + (v >> shift);
    return i < AX_HIST_OVERFLOW ? (unsigned)i : AX_HIST_OVERFLOW;
}

/* Hot. Record one value (ns). Single writer only: the relaxed load+store
 * pairs are not atomic increments; two threads recording into the same
 * histogram lose counts. O(1); one branch, never taken (sum saturation). */
static inline void ax_hist_record(struct ax_hist *h, uint64_t v)
{
    _Atomic uint64_t *b = &h->bucket[ax_hist_index(v)];
    atomic_store_explicit(b, atomic_load_explicit(b, memory_order_relaxed) + 1,
                          memory_order_relaxed);

    uint64_t s = atomic_load_explicit(&h->sum, memory_order_relaxed);
    if (__builtin_add_overflow(s, v, &s)) s = UINT64_MAX;
    atomic_store_explicit(&h->sum, s, memory_order_relaxed);

    uint64_t m = atomic_load_explicit(&h->max, memory_order_relaxed);
    atomic_store_explicit(&h->max, v > m ? v : m, memory_order_relaxed);
}

/* Writer side: empty h again. Readers racing a reset may see a mix. */
void ax_hist_reset(struct ax_hist *h);

/* Reader side: dst += src. dst must be private to the caller (a snapshot
 * being assembled); src may have a live writer. Merging equals recording
 * both streams into one histogram. */
void ax_hist_merge(struct ax_hist *dst, const struct ax_hist *src);

/* Reader side. The value at quantile q in [0, 1] (clamped): the midpoint of
 * the bucket holding the ceil(q * count)-th smallest value (rank >= 1),
 * never more than max; q = 1 returns max exactly. 0 if empty. */
uint64_t ax_hist_quantile(const struct ax_hist *h, double q);

uint64_t ax_hist_count(const struct ax_hist *h); /* values recorded (sum of buckets) */
uint64_t ax_hist_sum(const struct ax_hist *h);   /* ns, UINT64_MAX if it saturated */
uint64_t ax_hist_max(const struct ax_hist *h);   /* 0 if empty */

/* Bucket i's value range, [lower, upper], both inclusive. The overflow
 * bucket's upper is UINT64_MAX. */
uint64_t ax_hist_bucket_lower(unsigned i);
uint64_t ax_hist_bucket_upper(unsigned i);

/* Walk the non-empty buckets in value order:
 *
 *     struct ax_hist_iter it;
 *     ax_hist_iter_init(&it, h);
 *     while (ax_hist_iter_next(&it))
 *         use(it.lower, it.upper, it.count, it.cumulative);
 *
 * it.upper is the bucket's inclusive upper bound (ns), it.cumulative the
 * number of values <= it.upper as of the walk. */
struct ax_hist_iter {
    const struct ax_hist *h;
    unsigned next;  /* next bucket to look at */
    unsigned index; /* bucket just returned */
    uint64_t lower; /* its inclusive bounds, ns */
    uint64_t upper;
    uint64_t count;      /* values in it */
    uint64_t cumulative; /* values in it and every bucket before it */
};
void ax_hist_iter_init(struct ax_hist_iter *it, const struct ax_hist *h);
bool ax_hist_iter_next(struct ax_hist_iter *it);

#endif /* AX_OBS_HIST_H */
