/* fuzz_upstream_scenario.c - ax-upstream's scenario syntax
 * (tools/upstream/scenario.c): a --scenario file, or --endpoint / --phase
 * flag values, from arbitrary bytes.
 *
 * First byte even: the rest is a scenario file. Odd: the rest is lines, each
 * "e SPEC" (an --endpoint value), "p SPEC" (a --phase value) or "d DUR" (a
 * duration). Whatever is accepted must then build (scenario_finish) into a
 * table the server can use without checks of its own: every phase lookup and
 * route lands inside it, and every behaviour in it gives finite latencies of
 * at least 0 (model.c trusts this: "NaN cannot happen with validated input").
 */
#include "fuzz_memfile.h"
#include "upstream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check_behaviour(const struct behaviour *b, struct rng *r)
{
    for (int k = 0; k < 4; k++) {
        double a = model_sample_latency(&b->lat, r);
        double s = model_sample_latency(&b->stall_lat, r);
        if (!(a >= 0) || !isfinite(a) || !(s >= 0) || !isfinite(s)) abort();
        struct fate f;
        model_decide(b, (uint64_t)k * 1000, r, &f);
        if (f.latency_ms > (uint64_t)UP_MAX_LATENCY_MS) abort();
        if (f.out == OUT_OK && f.status != 200) abort();
        if (f.out == OUT_ERROR && (f.status < 500 || f.status > 599)) abort();
    }
}

static void check_built(const struct scenario *sc, const uint8_t *data, size_t size)
{
    if (!sc->eff || sc->nep == 0 || sc->nph == 0) abort();
    struct rng r;
    rng_seed(&r, sc->seed, 0);
    for (unsigned p = 0; p < sc->nph; p++)
        for (unsigned e = 0; e < sc->nep; e++)
            check_behaviour(scenario_eff(sc, p, e), &r);
    static const uint64_t at[] = {0, 1, 999, 1000, 60000, 3600000, UINT64_MAX / 2, UINT64_MAX};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        uint64_t in_phase;
        if (scenario_phase_at(sc, at[i], &in_phase) >= sc->nph) abort();
    }
    for (unsigned e = 0; e < sc->nep; e++) {
        const char *pat = sc->ep[e].pattern;
        if (scenario_route(sc, pat, strlen(pat)) >= sc->nep) abort();
    }
    if (scenario_route(sc, (const char *)data, size) >= sc->nep) abort();
    if (scenario_route(sc, "/", 1) >= sc->nep) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int flags = data[0] & 1;
    data++, size--;
    struct scenario *sc = malloc(sizeof *sc);
    if (!sc) return 0;
    scenario_init(sc);
    char err[512];
    int rc = 0;
    if (!flags) {
        rc = scenario_file(sc, fuzz_memfile(data, size), err, sizeof err);
    } else {
        char *text = malloc(size + 1);
        if (!text) abort();
        memcpy(text, data, size);
        text[size] = '\0';
        for (char *line = text, *next; rc == 0 && line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = '\0';
            if (line[0] == 'e' && line[1] == ' ')
                rc = scenario_endpoint(sc, line + 2, "--endpoint", err, sizeof err);
            else if (line[0] == 'p' && line[1] == ' ')
                rc = scenario_phase(sc, line + 2, "--phase", err, sizeof err);
            else if (line[0] == 'd' && line[1] == ' ') {
                double ms = -1;
                if (parse_duration(line + 2, 1000, &ms) == 0 && (!(ms >= 0) || !isfinite(ms)))
                    abort();
            }
        }
        free(text);
    }
    if (rc == 0) rc = scenario_finish(sc, err, sizeof err);
    if (rc == 0)
        check_built(sc, data, size);
    else if (rc != -1 || !err[0] || !memchr(err, '\0', sizeof err))
        abort(); /* a refusal always says why */
    scenario_free(sc);
    free(sc);
    return 0;
}
