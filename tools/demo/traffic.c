/* traffic.c - the arrival schedule: the same tasks at the same times for
 * every configuration.
 *
 * Arrivals are a Poisson process whose rate is constant within a phase: the
 * gap to the next task is exponential with the phase's rate; a gap that
 * crosses into the next phase is redrawn from the boundary at the new rate
 * (the process is memoryless, so this is exact). Each task's priority (by
 * the scenario's mix) and class (by the class shares) come from the same
 * splitmix64 stream, seeded by the scenario's seed: the sequence depends on
 * nothing else, so every configuration, in its own process, replays the
 * very same traffic.
 */
#include "demo.h"

#include <math.h>

uint64_t dm_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double dm_rand_unit(uint64_t *s)
{
    return (double)(dm_rand(s) >> 11) * 0x1.0p-53;
}

void dm_traffic_init(struct dm_traffic *tr, const struct dm_scenario *sc)
{
    tr->sc = sc;
    tr->rng = sc->seed * 0x2545F4914F6CDD1Dull + 1;
    tr->phase = 0;
    tr->t_ms = 0;
    tr->done = sc->nph == 0;
}

static unsigned pick(uint64_t *rng, const double *w, unsigned n)
{
    double total = 0;
    for (unsigned i = 0; i < n; i++)
        total += w[i];
    double x = dm_rand_unit(rng) * total;
    for (unsigned i = 0; i < n; i++) {
        if (x < w[i]) return i;
        x -= w[i];
    }
    return n - 1;
}

bool dm_traffic_next(struct dm_traffic *tr, struct dm_arrival *a)
{
    const struct dm_scenario *sc = tr->sc;
    while (!tr->done) {
        double end = 0;
        for (unsigned i = 0; i <= tr->phase; i++)
            end += sc->ph[i].duration_ms;
        double rate = sc->ph[tr->phase].rate;
        double gap = rate > 0 ? -log(1.0 - dm_rand_unit(&tr->rng)) * 1000.0 / rate : INFINITY;
        if (tr->t_ms + gap < end) {
            tr->t_ms += gap;
            a->t_ms = tr->t_ms;
            a->prio = pick(&tr->rng, sc->mix, DM_NPRIO);
            double share[DM_MAX_CLASSES];
            for (unsigned i = 0; i < sc->ncls; i++)
                share[i] = sc->cls[i].share;
            a->cls = pick(&tr->rng, share, sc->ncls);
            return true;
        }
        tr->t_ms = end;
        if (++tr->phase == sc->nph) tr->done = true;
    }
    return false;
}
