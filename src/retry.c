/* retry.c - back-off delays (seed §3.4, §5.5) and per-thread random numbers.
 *
 * EXPONENTIAL (the seed): delay = min(max, base * 2^attempt) + random(0, jitter)
 * FULL_JITTER:            delay = random(0, min(max, base * 2^attempt))
 * Both are inclusive of their bounds. base * 2^attempt is computed without
 * overflow (saturates at max once 2^attempt would exceed max/base). Jitter
 * spreads retries of tasks that failed together so they do not return as one
 * "thundering herd" against an upstream that is trying to recover.
 */
#include "internal.h"

static _Thread_local uint64_t rng_state;
static _Atomic uint64_t rng_threads;

/* splitmix64: seeded per thread from the clock, the thread's address and
 * how many threads seeded before it. The count: a thread created after
 * another one was joined gets the same thread-local address, and a coarse
 * clock (jiffies on a VM without a stable TSC) the same time, so without
 * it such threads drew the same numbers (review of 5a1824d: with a 4 ms
 * clock, 400 threads of one task sampled 1 in 2 kept 292, 112, 86 of 400;
 * retry jitter the same). */
uint64_t ax_rand64(void)
{
    if (AX_UNLIKELY(rng_state == 0))
        rng_state = now_ns() ^ (uint64_t)(uintptr_t)&rng_state ^ 0x9e3779b97f4a7c15ull ^
                    atomic_fetch_add_explicit(&rng_threads, 1, memory_order_relaxed) *
                        0xd1b54a32d192ed03ull;
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int policy_check(const ax_retry_policy *p, const char *who)
{
    if (p->mode != AX_BACKOFF_EXPONENTIAL && p->mode != AX_BACKOFF_FULL_JITTER)
        return ax_fail(AX_EINVAL, "%s.mode: unknown back-off mode %d", who, (int)p->mode);
    if (p->base_ms == 0)
        return ax_fail(AX_EINVAL, "%s.base_ms must be > 0", who);
    if (p->max_ms < p->base_ms)
        return ax_fail(AX_EINVAL, "%s.max_ms (%u) must be >= base_ms (%u)", who, p->max_ms,
                       p->base_ms);
    return AX_OK;
}

int retry_policy_check(const ax_retry_policy *p, const char *who)
{
    return policy_check(p, who);
}

int ax_retry_delay_ms(const ax_retry_policy *p, unsigned attempt, uint64_t rnd, uint64_t *delay_ms)
{
    if (!p || !delay_ms)
        return ax_fail(AX_EINVAL, "ax_retry_delay_ms: NULL %s", p ? "delay_ms" : "policy");
    int rc = policy_check(p, "policy");
    if (rc)
        return rc;
    uint64_t cap = p->base_ms;
    for (unsigned i = 0; i < attempt && cap < p->max_ms; i++)
        cap <<= 1; /* base < 2^32, so at most 33 doublings before cap >= max */
    if (cap > p->max_ms)
        cap = p->max_ms;
    if (p->mode == AX_BACKOFF_FULL_JITTER)
        *delay_ms = rnd % (cap + 1);
    else
        *delay_ms = cap + (p->jitter_ms ? rnd % ((uint64_t)p->jitter_ms + 1) : 0);
    return AX_OK;
}
