/* model.c - the fate of one request: how long it takes, and whether it is
 * answered at all.
 *
 * Latency models (all in milliseconds, then multiplied by `slow`):
 *   fixed:D          always D
 *   uniform:A:B      uniform in [A, B]
 *   lognormal:P50:P99  exp(mu + sigma z), z standard normal, with
 *                    mu = ln P50 and sigma = ln(P99 / P50) / 2.3263 (the 99th
 *                    percentile of z), so P50 and P99 come out as given and the
 *                    long right tail of a real upstream follows from them.
 *
 * Stalls: with probability `stall` a request's latency is drawn from
 * stall_latency instead (default 30 s) -- the few requests stuck behind a
 * slow shard or a lock convoy, which is how a real upstream's mean goes from
 * 300 ms to 2 s while most requests stay quick (seed §1.1: "50 ms to 30 s").
 * The draw happens only when stall > 0, so a scenario without stalls sees
 * the same random sequence as before the key existed.
 *
 * Overload (a server with `capacity` workers): with n requests in flight on
 * the endpoint, n > capacity, each request's latency is multiplied by
 * (n / capacity)^k. With k = 1 this is processor sharing -- n requests share
 * capacity workers, so each gets capacity/n of one and takes n/capacity times
 * as long, which is also what a FIFO queue in front of the workers gives by
 * Little's law. k > 1 models a server that also thrashes (GC, lock
 * contention, retries) as it overloads, the seed's §4.1 upstream that went
 * from 300 ms to 2 s. n is counted when the request arrives and the latency
 * is fixed then; everything is capped at UP_MAX_LATENCY_MS.
 *
 * Outcomes are drawn in order, each from what the previous left: hang with
 * probability `hang`, else reset with probability `reset`, else a 5xx with
 * probability `error`, else 200. So any rates in [0, 1] combine, and
 * hang=1 (the "down" preset) means nothing is answered.
 *
 * The generator is splitmix64: one 64-bit word of state, good enough for a
 * simulation, and seeded per connection from (--seed, connection number) so
 * a connection's sequence of fates does not depend on what other
 * connections do.
 */
#include "upstream.h"

#include <math.h>

#define Z99 2.3263478740408408 /* the standard normal's 99th percentile */

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
    r->s = seed ^ (stream * 0xD1B54A32D192ED03ull);
    rng_next(r);
}

uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static double rng_normal(struct rng *r)
{
    double u1 = 1.0 - rng_unit(r); /* (0, 1]: log() stays finite */
    double u2 = rng_unit(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double model_sample_latency(const struct latency *l, struct rng *r)
{
    switch (l->kind) {
    case LAT_FIXED:
        return l->a_ms;
    case LAT_UNIFORM:
        return l->a_ms + (l->b_ms - l->a_ms) * rng_unit(r);
    case LAT_LOGNORMAL: {
        double sigma = log(l->b_ms / l->a_ms) / Z99;
        return l->a_ms * exp(sigma * rng_normal(r));
    }
    }
    return l->a_ms;
}

void model_decide(const struct behaviour *b, uint64_t in_flight, struct rng *r, struct fate *f)
{
    f->overload_factor = 1.0;
    if (b->capacity && in_flight > b->capacity)
        f->overload_factor = pow((double)in_flight / b->capacity, b->overload);
    const struct latency *lat = b->stall > 0 && rng_unit(r) < b->stall ? &b->stall_lat : &b->lat;
    double ms = model_sample_latency(lat, r) * b->slow * f->overload_factor;
    if (!(ms >= 0)) /* NaN cannot happen with validated input; be safe */
        ms = 0;
    if (ms > UP_MAX_LATENCY_MS) ms = UP_MAX_LATENCY_MS;
    f->latency_ms = (uint64_t)llround(ms);

    f->status = 200;
    if (b->hang > 0 && rng_unit(r) < b->hang) {
        f->out = OUT_HANG;
    } else if (b->reset > 0 && rng_unit(r) < b->reset) {
        f->out = OUT_RESET;
    } else if (b->error > 0 && rng_unit(r) < b->error) {
        f->out = OUT_ERROR;
        f->status = b->error_code ? b->error_code : (rng_next(r) & 1) ? 503 : 500;
    } else {
        f->out = OUT_OK;
    }
}
