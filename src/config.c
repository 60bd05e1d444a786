/* config.c - defaults (the seed's tuned table, §4.4) and validation.
 *
 * ax_new refuses an inconsistent config rather than "fixing" it, with a
 * message naming the field, because a silently clamped limit is exactly what
 * an operator does not expect in an incident.
 */
#include "internal.h"

#include <math.h>
#include <unistd.h>

#define AX_MIN_STACK (16u * 1024u)
#define AX_MAX_STACK (256u * 1024u * 1024u)

void ax_config_default(ax_config *c)
{
    if (!c)
        return;
    *c = (ax_config){0};
    c->workers = 0;
    c->max_concurrency = 500;
    c->quota_high = 0;
    c->quota_normal = 0;
    c->low_guaranteed = 1;
    c->capacity[AX_PRIO_HIGH] = 10000;
    c->capacity[AX_PRIO_NORMAL] = 30000;
    c->capacity[AX_PRIO_LOW] = 10000;
    c->shed_ratio = 0.8;
    c->rate_limit = 0;
    c->rate_burst = 0;
    c->stack_size = 64u * 1024u;
    c->max_retry_cap = 16;
    c->retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1000, 30000, 1000};
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        c->retry_enabled[p] = true;
    c->grace_ms = 3000;
    c->callback_threads = 1;
    c->callback_timeout_ms = 1000;
    c->callback_queue = 1024;
    c->max_orphans = 0;
    c->shutdown_timeout_ms = 5000;
    c->overflow_fails_task = false;
    c->metrics_read_timeout_ms = 2000;
    c->metrics_max_connections = 64;
    c->adaptive_min = 1; /* as the README's table says (0 is still taken as 1) */
    c->idle_poll_us = AX_IDLE_POLL_DEFAULT_US;
}

/* Fill derived defaults into *r and check every field. */
int config_validate(const ax_config *c, ax_config *r)
{
    if (!c)
        return ax_fail(AX_EINVAL, "config is NULL");
    *r = *c;
    if (r->workers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        r->workers = n > 0 ? (unsigned)n : 1;
    }
    if (r->workers > 1024)
        return ax_fail(AX_EINVAL, "config.workers: %u is more than 1024", r->workers);
    if (r->max_concurrency == 0)
        return ax_fail(AX_EINVAL, "config.max_concurrency must be >= 1");
    if (r->max_concurrency > AX_MAX_JOBS / 2)
        return ax_fail(AX_EINVAL, "config.max_concurrency: %u is more than %u", r->max_concurrency,
                       AX_MAX_JOBS / 2);
    if (r->low_guaranteed == 0)
        return ax_fail(AX_EINVAL, "config.low_guaranteed must be >= 1 (LOW would starve)");
    uint64_t total = 0;
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        if (r->capacity[p] == 0)
            return ax_fail(AX_EINVAL, "config.capacity[%s] must be >= 1",
                           ax_priority_name((ax_priority)p));
        total += r->capacity[p];
    }
    if (total + r->max_concurrency > AX_MAX_JOBS / 2)
        return ax_fail(AX_EINVAL,
                       "config.capacity: total %llu plus max_concurrency exceeds %u tasks",
                       (unsigned long long)total, AX_MAX_JOBS / 2);
    if (!(r->shed_ratio > 0.0 && r->shed_ratio <= 1.0))
        return ax_fail(AX_EINVAL, "config.shed_ratio must be in (0, 1] (got %g)", r->shed_ratio);
    /* The bound ax_set_rate_limit applies: a rate set at creation must be one
     * the run-time setter would accept too. */
    if (!(r->rate_limit >= 0.0) || r->rate_limit > 1e12)
        return ax_fail(AX_EINVAL, "config.rate_limit must be in [0, 1e12] per second (got %g)",
                       r->rate_limit);
    if (r->stack_size < AX_MIN_STACK || r->stack_size > AX_MAX_STACK)
        return ax_fail(AX_EINVAL, "config.stack_size must be in [16 KiB, 256 MiB] (got %zu)",
                       r->stack_size);
    if (r->max_retry_cap > 1000)
        return ax_fail(AX_EINVAL, "config.max_retry_cap: %u is more than 1000", r->max_retry_cap);
    int rc = retry_policy_check(&r->retry, "config.retry");
    if (rc)
        return rc;
    if (r->callback_threads == 0 || r->callback_threads > 64)
        return ax_fail(AX_EINVAL, "config.callback_threads must be in [1, 64]");
    if (r->callback_timeout_ms == 0)
        return ax_fail(AX_EINVAL, "config.callback_timeout_ms must be >= 1");
    if (r->callback_queue == 0 || r->callback_queue > (1u << 24))
        return ax_fail(AX_EINVAL, "config.callback_queue must be in [1, 16777216] (got %u)",
                       r->callback_queue);
    if (r->max_orphans > AX_MAX_JOBS)
        return ax_fail(AX_EINVAL, "config.max_orphans: %u is more than %u", r->max_orphans,
                       AX_MAX_JOBS);
    if (r->metrics_read_timeout_ms == 0)
        r->metrics_read_timeout_ms = 2000;
    if (r->metrics_max_connections == 0)
        r->metrics_max_connections = 64;
    if (r->metrics_read_timeout_ms > 3600000)
        return ax_fail(AX_EINVAL, "config.metrics_read_timeout_ms: %u is more than 3600000",
                       r->metrics_read_timeout_ms);
    if (r->adaptive_min == 0)
        r->adaptive_min = 1;
    if (r->adaptive_limit && r->adaptive_min > r->max_concurrency)
        return ax_fail(AX_EINVAL, "config.adaptive_min: %u is more than max_concurrency %u",
                       r->adaptive_min, r->max_concurrency);
    if (r->idle_poll_us == 0)
        r->idle_poll_us = AX_IDLE_POLL_DEFAULT_US;
    if (r->idle_poll_us > AX_IDLE_POLL_MAX_US)
        return ax_fail(AX_EINVAL, "config.idle_poll_us: %u is more than %u (one second)",
                       (unsigned)r->idle_poll_us, AX_IDLE_POLL_MAX_US);
    if (r->metrics_max_connections > 1024)
        return ax_fail(AX_EINVAL, "config.metrics_max_connections: %u is more than 1024",
                       r->metrics_max_connections);
    return AX_OK;
}
