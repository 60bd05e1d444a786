/* scenario.c - what ax-demo replays: the built-in incidents (seed §1.1, §4),
 * and the --config file that replaces any part of them.
 *
 * Both built-in scenarios share, in incident time:
 *   - three task classes, each an endpoint of the upstream with its own
 *     latency: quote (p50 120 ms, p99 330 ms), search (300/660 ms), report
 *     (700 ms/2 s); weighted 40/40/20 they average the seed's "300 ms". Their
 *     per-class timeouts are the seed's 0.5/1/3 s (§4.4), which is also its
 *     rule "timeout = upstream p99 x 1.5" (§2.3) applied to each class.
 *   - priorities HIGH/NORMAL/LOW 10/50/40 of the traffic, 2 KiB of context
 *     per task (§4.3), a 5 s deadline for goodput (§4.3: "a backlog of at
 *     most 5 s").
 *   - steady traffic, then a peak during which the upstream degrades: a
 *     third of its requests stall behind something slow (4 s median, 20 s
 *     p99) and 15 % are 503s, so its mean goes from 300 ms to about 2 s while
 *     most answers stay quick (§1.1: "50 ms to 30 s"; §4.1: "300 ms became
 *     2 s"); then recovery at the steady rate, then a drain with no traffic.
 *   - the configurations: threads (§1.1's thread pool), seed-before
 *     (§4.1-4.2), seed-tuned (§4.4) and ax-auto (ax's defaults and task
 *     classes, issue 12).
 *
 * "overload" (the default) is the seed's incident at its real severity,
 * every rate, cap and queue bound divided by one factor, DM_OVERLOAD_SCALE
 * = 10, so that every ratio holds and the machine can carry it:
 *
 *     seed (full scale)                         here (/10)
 *     steady 1 000 tasks/s                      100/s     8 s
 *     peak   3 000 tasks/s (§4.3)               300/s     20 s, upstream degraded
 *     recovery 1 000 tasks/s                    100/s     24 s, then 8 s drain
 *     threads: 500 threads                      50
 *     seed-before: cap 500, unbounded queues    cap 50, unbounded
 *     seed-tuned: cap 600, 10 000/30 000/10 000 cap 60, 1 000/3 000/1 000
 *     upstream: 1 000 requests per endpoint     capacity=100 per endpoint
 *       at once before it slows (overload=1:     (ax-upstream's
 *       processor sharing)                       capacity=, overload=)
 *
 * At the peak, seed-before's 50 slots at the degraded mean of 2 s serve 25
 * tasks/s against 300 offered: 12 x (the seed's 3 000/s against 500 / 2 s =
 * 250/s); even counting a stalled call at its 2 s timeout (a slot is held
 * ~0.9 s on average) it is 5 x. Its backlog reaches thousands, waits reach
 * seconds, memory follows the backlog. Durations (timeouts, back-offs,
 * latencies) are not scaled: the seed's. ax-auto is never scaled either:
 * ax_config_default's cap 500 and bounds 10 000/30 000/10 000 are full
 * scale, so nothing in it is tuned to the scenario -- its adaptive limit,
 * not its cap, has to hold its in-flight requests down, and the upstream's
 * capacity makes extra concurrency cost latency.
 *
 * "retry-storm" is the moderate scenario ax-demo had before (numbers
 * unchanged, unscaled): steady 150/s, peak 400/s, recovery 150/s. No
 * configuration is overloaded by it; seed-before's fixed 1 s retries x7
 * multiply stalled calls into more calls, which push its 500 slots past
 * what they serve, while seed-tuned's back-off and "no LOW retries" add
 * fewer calls than its 600 slots carry (tools/README.md).
 *
 * File syntax (one item per line, '#' starts a comment; --print-config
 * writes the built-in scenario in it):
 *   speed 3 | seed 42 | drain 10s | context 2048
 *   mix high=10 normal=50 low=40
 *   upstream KEY=V,...|none              keys every ax-upstream endpoint gets
 *   class NAME path=/p latency=MODEL share=W timeout=D
 *   phase NAME DURATION rate=R [upstream=KEY=V,KEY=V]
 *   config NAME engine=ax|threads cap=N [queues=unbounded|H/N/L] [shed=R]
 *          [retry=none|fixed:D|exp:BASE:MAX:JITTER] [max_retry=N]
 *          [low_retry=on|off] timeout=D|class
 * Durations: 300ms, 1.5s, 2m; a bare number is seconds (milliseconds inside a
 * latency model, as in ax-upstream). The class, phase and config lines of a
 * file each replace the built-in list of their kind; a kind the file does not
 * mention keeps the built-in one.
 */
#include "demo.h"
#include "../read_line.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const dm_prio_name[DM_NPRIO] = {"HIGH", "NORMAL", "LOW"};

static void add_class(struct dm_scenario *sc, const char *name, const char *path, const char *lat,
                      double share, double timeout_ms)
{
    struct dm_class *c = &sc->cls[sc->ncls++];
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->path, sizeof c->path, "%s", path);
    snprintf(c->latency, sizeof c->latency, "%s", lat);
    c->share = share;
    c->timeout_ms = timeout_ms;
}

static void add_phase(struct dm_scenario *sc, const char *name, double dur_ms, double rate,
                      const char *up)
{
    struct dm_phase *p = &sc->ph[sc->nph++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->duration_ms = dur_ms;
    p->rate = rate;
    snprintf(p->upstream, sizeof p->upstream, "%s", up);
}

static void profile_about(struct dm_profile *p)
{
    if (p->engine == ENG_AX_AUTO) {
        char rt[80];
        if (p->retry == RETRY_NONE || p->max_retry == 0)
            snprintf(rt, sizeof rt, "no retries");
        else if (p->retry == RETRY_FIXED)
            snprintf(rt, sizeof rt, "fixed %g s retry x%u", p->retry_base_ms / 1000, p->max_retry);
        else
            snprintf(rt, sizeof rt, "back-off %g-%g s + jitter x%u", p->retry_base_ms / 1000,
                     p->retry_max_ms / 1000, p->max_retry);
        snprintf(p->about, sizeof p->about,
                 "ax_config_default (cap 500, queues 10000/30000/10000, shed at 0.8) and one "
                 "task class per scenario class (its timeout, %s); adaptive limit, retry "
                 "budget, breaker and queue-time budget at their defaults",
                 rt);
        return;
    }
    char q[64], rt[80], to[32];
    if (p->timeout_ms > 0)
        snprintf(to, sizeof to, "%g s timeout", p->timeout_ms / 1000);
    else
        snprintf(to, sizeof to, "per-class timeouts");
    if (p->engine == ENG_THREADS) {
        snprintf(p->about, sizeof p->about,
                 "%u threads, blocking HTTP, one unbounded FIFO queue, %s per call, no retries",
                 p->cap, to);
        return;
    }
    if (!p->queue[0] && !p->queue[1] && !p->queue[2])
        snprintf(q, sizeof q, "unbounded queues");
    else
        snprintf(q, sizeof q, "queues %u/%u/%u, shed at %g", p->queue[DM_HIGH], p->queue[DM_NORMAL],
                 p->queue[DM_LOW], p->shed_ratio);
    if (p->retry == RETRY_NONE || p->max_retry == 0)
        snprintf(rt, sizeof rt, "no retries");
    else if (p->retry == RETRY_FIXED)
        snprintf(rt, sizeof rt, "fixed %g s retry x%u%s", p->retry_base_ms / 1000, p->max_retry,
                 p->retry_low ? "" : ", none for LOW");
    else
        snprintf(rt, sizeof rt, "back-off %g-%g s + jitter x%u%s", p->retry_base_ms / 1000,
                 p->retry_max_ms / 1000, p->max_retry, p->retry_low ? "" : ", none for LOW");
    snprintf(p->about, sizeof p->about, "ax, cap %u, %s, %s, %s", p->cap, q, rt, to);
}

static struct dm_profile *add_profile(struct dm_scenario *sc, const char *name)
{
    struct dm_profile *p = &sc->prof[sc->nprof++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->engine = ENG_AX;
    p->shed_ratio = 1.0;
    p->retry_low = true;
    return p;
}

const char *const dm_scenario_names = "overload, retry-storm";

/* The three configurations of the seed, cap and queue bounds divided by
 * `scale`, plus ax-auto (ax's defaults, never scaled: nothing in it is
 * tuned to a scenario). */
static void seed_profiles(struct dm_scenario *sc, unsigned scale)
{
    struct dm_profile *p = add_profile(sc, "threads");
    p->engine = ENG_THREADS;
    p->cap = 500 / scale;
    p->retry = RETRY_NONE;
    p->timeout_ms = 2000;

    p = add_profile(sc, "seed-before");
    p->cap = 500 / scale;
    p->retry = RETRY_FIXED;
    p->retry_base_ms = p->retry_max_ms = 1000;
    p->max_retry = 7;
    p->timeout_ms = 2000;

    p = add_profile(sc, "seed-tuned");
    p->cap = 600 / scale;
    p->queue[DM_HIGH] = 10000 / scale;
    p->queue[DM_NORMAL] = 30000 / scale;
    p->queue[DM_LOW] = 10000 / scale;
    p->shed_ratio = 0.8;
    p->retry = RETRY_EXP;
    p->retry_base_ms = 1000;
    p->retry_max_ms = 30000;
    p->retry_jitter_ms = 1000;
    p->max_retry = 7;
    p->retry_low = false;
    p->timeout_ms = 0;

    /* The seed's tuned retry policy (back-off 1 s .. 30 s, 7 retries) and its
     * per-class timeouts are the classes' own settings; everything else is
     * ax's default, LOW retries included (the retry budget decides). */
    p = add_profile(sc, "ax-auto");
    p->engine = ENG_AX_AUTO;
    p->retry = RETRY_EXP;
    p->retry_base_ms = 1000;
    p->retry_max_ms = 30000;
    p->retry_jitter_ms = 1000;
    p->max_retry = 7;
    p->timeout_ms = 0;
}

int dm_scenario_builtin(struct dm_scenario *sc, const char *name, bool short_mode)
{
    bool storm = name && strcmp(name, "retry-storm") == 0;
    if (name && !storm && strcmp(name, "overload") != 0) return -1;
    memset(sc, 0, sizeof *sc);
    snprintf(sc->origin, sizeof sc->origin, "built-in %s%s", storm ? "retry-storm" : "overload",
             short_mode ? ", --short" : "");
    sc->speed = 3.5;
    sc->seed = 42;
    sc->mix[DM_HIGH] = 10;
    sc->mix[DM_NORMAL] = 50;
    sc->mix[DM_LOW] = 40;
    sc->drain_ms = 8000;
    sc->deadline_ms = 5000; /* seed §4.3: a backlog of at most 5 s */
    sc->ctx_bytes = 2048;
    add_class(sc, "quote", "/quote", "lognormal:120ms:330ms", 40, 500);
    add_class(sc, "search", "/search", "lognormal:300ms:660ms", 40, 1000);
    add_class(sc, "report", "/report", "lognormal:700ms:2s", 20, 3000);
    const char *degraded = "stall=0.33,stall_latency=lognormal:4s:20s,error=0.15,error_code=503";
    if (storm) {
        /* Today's moderate peak: no configuration is overloaded by it. */
        add_phase(sc, "steady", 8000, 150, "");
        add_phase(sc, "peak", 20000, 400, degraded);
        add_phase(sc, "recovery", 24000, 150, "");
        seed_profiles(sc, 1);
    } else {
        /* The seed's overload, every rate, cap and bound divided by
         * DM_OVERLOAD_SCALE (10): 1 000/s steady -> 100/s, the peak's
         * 3 000/s -> 300/s, cap 500 -> 50 (600 -> 60), queues 10 000/30 000/
         * 10 000 -> 1 000/3 000/1 000, an upstream that serves 1 000
         * requests at once before it slows -> 100. At the peak 50 slots at
         * the degraded 2 s serve 25 tasks/s against 300 offered: 12 x. */
        snprintf(sc->upstream_base, sizeof sc->upstream_base, "capacity=%u,overload=1",
                 1000 / DM_OVERLOAD_SCALE);
        add_phase(sc, "steady", 8000, 1000.0 / DM_OVERLOAD_SCALE, "");
        add_phase(sc, "peak", 20000, 3000.0 / DM_OVERLOAD_SCALE, degraded);
        add_phase(sc, "recovery", 24000, 1000.0 / DM_OVERLOAD_SCALE, "");
        seed_profiles(sc, DM_OVERLOAD_SCALE);
    }
    if (short_mode) {
        /* CI: the same story in half the incident, run a little faster. */
        sc->speed = 4;
        sc->drain_ms = 4000;
        sc->ph[0].duration_ms = 4000;
        sc->ph[1].duration_ms = 12000;
        sc->ph[2].duration_ms = 10000;
    }
    for (unsigned i = 0; i < sc->nprof; i++)
        profile_about(&sc->prof[i]);
    return 0;
}

bool dm_degraded_window(const struct dm_scenario *sc, double *from_ms, double *to_ms)
{
    double t = 0;
    bool any = false;
    for (unsigned i = 0; i < sc->nph; i++) {
        if (sc->ph[i].upstream[0]) {
            if (!any) *from_ms = t;
            *to_ms = t + sc->ph[i].duration_ms;
            any = true;
        }
        t += sc->ph[i].duration_ms;
    }
    return any;
}

double dm_scenario_length_ms(const struct dm_scenario *sc)
{
    double t = 0;
    for (unsigned i = 0; i < sc->nph; i++)
        t += sc->ph[i].duration_ms;
    return t;
}

unsigned dm_phase_at(const struct dm_scenario *sc, double t_ms)
{
    double end = 0;
    for (unsigned i = 0; i < sc->nph; i++) {
        end += sc->ph[i].duration_ms;
        if (t_ms < end) return i;
    }
    return sc->nph ? sc->nph - 1 : 0;
}

const struct dm_profile *dm_profile_find(const struct dm_scenario *sc, const char *name)
{
    for (unsigned i = 0; i < sc->nprof; i++)
        if (strcmp(sc->prof[i].name, name) == 0) return &sc->prof[i];
    return NULL;
}

/* ---- parsing ------------------------------------------------------------------ */

/* A plain non-negative decimal, to 1e-9; returns the end or NULL. */
static const char *decimal(const char *s, double *out)
{
    const char *p = s;
    int digits = 0, dot = 0;
    for (; *p; p++) {
        if (isdigit((unsigned char)*p))
            digits++;
        else if (*p == '.' && !dot)
            dot = 1;
        else
            break;
    }
    /* 64 characters: more than print_num() ever writes (a value up to 1e11,
     * a point, 40 decimals and a leading "0"), so what --print-config writes
     * is always read back. */
    if (!digits || p - s > 64) return NULL;
    char tmp[72];
    memcpy(tmp, s, (size_t)(p - s));
    tmp[p - s] = 0;
    /* Nine decimals at most: print_num() then writes every value back
     * exactly (in fixed point, so a 1e-41 would print as 0 and a weight
     * that was accepted would be refused on reading back). */
    *out = nearbyint(strtod(tmp, NULL) * 1e9) / 1e9;
    return isfinite(*out) ? p : NULL;
}

static int duration(const char *s, double bare_ms, double *ms)
{
    double v;
    const char *u = decimal(s, &v);
    if (!u) return -1;
    double mul;
    if (!*u)
        mul = bare_ms;
    else if (strcmp(u, "ms") == 0)
        mul = 1;
    else if (strcmp(u, "s") == 0)
        mul = 1000;
    else if (strcmp(u, "m") == 0)
        mul = 60000;
    else
        return -1;
    /* ax keeps time in nanoseconds, so a duration is rounded to one: finer
     * digits mean nothing, and a product such as ".000000000000000000000000008"
     * bare seconds would otherwise need 41 characters to print exactly, which
     * decimal() refuses when --print-config's output is read back. Rounded to
     * 1e-6 ms, every duration prints back exactly with 6 decimals at most. */
    *ms = nearbyint(v * mul * 1e6) / 1e6;
    /* Longer is a typing mistake (ax refuses timeouts above a year), and
     * dm_scenario_print() writes what it reads back without an exponent. */
    return *ms <= 365 * 86400e3 ? 0 : -1;
}

int dm_parse_duration(const char *s, double *ms)
{
    return duration(s, 1000, ms);
}

static int number(const char *s, double lo, double hi, double *out)
{
    double v;
    const char *e = decimal(s, &v);
    if (!e || *e || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

struct parse {
    const char *file;
    unsigned line;
    char *err;
    size_t errlen;
};

static int perr(struct parse *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(struct parse *ps, const char *fmt, ...)
{
    int n = snprintf(ps->err, ps->errlen, "%s:%u: ", ps->file, ps->line);
    if (n < 0 || (size_t)n >= ps->errlen) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A latency model as ax-upstream takes it: D | fixed:D | uniform:A:B |
 * lognormal:P50:P99, bare numbers in ms. Checked here so that a bad file is
 * refused before anything starts. */
static int check_latency(const char *v)
{
    char buf[DM_SPEC_MAX];
    snprintf(buf, sizeof buf, "%s", v);
    char *part[4];
    int n = 0;
    for (char *p = buf, *save = NULL; n < 4 && (p = strtok_r(p, ":", &save)); p = NULL)
        part[n++] = p;
    double a, b;
    if (n == 1) return duration(part[0], 1, &a);
    if (n == 2 && strcmp(part[0], "fixed") == 0) return duration(part[1], 1, &a);
    if (n != 3 || duration(part[1], 1, &a) || duration(part[2], 1, &b)) return -1;
    if (strcmp(part[0], "uniform") == 0) return a <= b ? 0 : -1;
    if (strcmp(part[0], "lognormal") == 0) return a > 0 && a <= b ? 0 : -1;
    return -1;
}

static bool name_ok(const char *s)
{
    if (!*s || strlen(s) >= DM_NAME_MAX) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.') return false;
    return true;
}

/* Split "key=value"; false if there is no '='. */
static bool kv(char *tok, char **k, char **v)
{
    char *eq = strchr(tok, '=');
    if (!eq || eq == tok) return false;
    *eq = 0;
    *k = tok;
    *v = eq + 1;
    return true;
}

static int parse_class(struct parse *ps, struct dm_scenario *sc, char **tok, int n)
{
    if (n < 2 || !name_ok(tok[1]))
        return perr(ps, "class needs a name (letters, digits, - _ .): class NAME key=value...");
    if (sc->ncls == DM_MAX_CLASSES) return perr(ps, "more than %d classes", DM_MAX_CLASSES);
    /* A class is a task class registered by name (ax_class_register) and a
     * kind handled by name (ax_redis_handle_class): a second one of the same
     * name would be refused only at run time. */
    for (unsigned i = 0; i < sc->ncls; i++)
        if (strcmp(sc->cls[i].name, tok[1]) == 0)
            return perr(ps, "class %s is defined twice", tok[1]);
    struct dm_class c = {.share = 1};
    snprintf(c.name, sizeof c.name, "%s", tok[1]);
    bool have_timeout = false;
    for (int i = 2; i < n; i++) {
        char *k, *v;
        if (!kv(tok[i], &k, &v)) return perr(ps, "'%s' is not key=value", tok[i]);
        if (strcmp(k, "path") == 0) {
            if (strlen(v) >= sizeof c.path || (*v && *v != '/'))
                return perr(ps, "path=%s: a path starts with '/' (or is empty)", v);
            snprintf(c.path, sizeof c.path, "%s", v);
        } else if (strcmp(k, "latency") == 0) {
            if (strlen(v) >= sizeof c.latency || check_latency(v))
                return perr(ps,
                            "latency=%s: use D, fixed:D, uniform:MIN:MAX or "
                            "lognormal:P50:P99 (bare numbers are ms)",
                            v);
            snprintf(c.latency, sizeof c.latency, "%s", v);
        } else if (strcmp(k, "share") == 0) {
            if (number(v, 0, 1e9, &c.share)) return perr(ps, "share=%s: a number >= 0", v);
        } else if (strcmp(k, "timeout") == 0) {
            if (dm_parse_duration(v, &c.timeout_ms) || c.timeout_ms < 1)
                return perr(ps, "timeout=%s: a duration of at least 1ms", v);
            have_timeout = true;
        } else {
            return perr(ps, "class: unknown key '%s' (path, latency, share, timeout)", k);
        }
    }
    if (!have_timeout) return perr(ps, "class %s: timeout= is required", c.name);
    if (!c.latency[0]) snprintf(c.latency, sizeof c.latency, "fixed:0");
    sc->cls[sc->ncls++] = c;
    return 0;
}

static int parse_phase(struct parse *ps, struct dm_scenario *sc, char **tok, int n)
{
    if (n < 3 || !name_ok(tok[1]))
        return perr(ps, "phase needs a name and a duration: phase NAME DURATION rate=R "
                        "[upstream=KEY=V,...]");
    if (sc->nph == DM_MAX_PHASES) return perr(ps, "more than %d phases", DM_MAX_PHASES);
    struct dm_phase p = {0};
    snprintf(p.name, sizeof p.name, "%s", tok[1]);
    if (dm_parse_duration(tok[2], &p.duration_ms) || p.duration_ms < 100 || p.duration_ms > 3600e3)
        return perr(ps, "phase %s: '%s' is not a duration from 100ms to 1h", p.name, tok[2]);
    bool have_rate = false;
    for (int i = 3; i < n; i++) {
        char *k, *v;
        if (!kv(tok[i], &k, &v)) return perr(ps, "'%s' is not key=value", tok[i]);
        if (strcmp(k, "rate") == 0) {
            if (number(v, 0, 1e6, &p.rate))
                return perr(ps, "rate=%s: tasks per second, 0 to 1000000", v);
            have_rate = true;
        } else if (strcmp(k, "upstream") == 0) {
            if (strlen(v) >= sizeof p.upstream) return perr(ps, "upstream=: too long");
            snprintf(p.upstream, sizeof p.upstream, "%s", v);
            /* Latencies inside are rescaled: check them here. */
            char buf[DM_SPEC_MAX];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *it = buf, *save = NULL; (it = strtok_r(it, ",", &save)); it = NULL)
                if (strncmp(it, "latency=", 8) == 0 && check_latency(it + 8))
                    return perr(ps, "upstream=...%s: not a latency model", it);
        } else {
            return perr(ps, "phase: unknown key '%s' (rate, upstream)", k);
        }
    }
    if (!have_rate) return perr(ps, "phase %s: rate= is required", p.name);
    sc->ph[sc->nph++] = p;
    return 0;
}

static int parse_config(struct parse *ps, struct dm_scenario *sc, char **tok, int n)
{
    if (n < 2 || !name_ok(tok[1]))
        return perr(ps, "config needs a name: config NAME engine=ax|threads cap=N ...");
    if (sc->nprof == DM_MAX_PROFILES) return perr(ps, "more than %d configs", DM_MAX_PROFILES);
    for (unsigned i = 0; i < sc->nprof; i++)
        if (strcmp(sc->prof[i].name, tok[1]) == 0)
            return perr(ps, "config %s is defined twice", tok[1]);
    struct dm_profile *p = add_profile(sc, tok[1]);
    bool have_cap = false, have_timeout = false;
    for (int i = 2; i < n; i++) {
        char *k, *v;
        double x = 0;
        if (!kv(tok[i], &k, &v)) {
            sc->nprof--;
            return perr(ps, "'%s' is not key=value", tok[i]);
        }
        int bad = 0;
        if (strcmp(k, "engine") == 0) {
            if (strcmp(v, "ax") == 0)
                p->engine = ENG_AX;
            else if (strcmp(v, "ax-auto") == 0)
                p->engine = ENG_AX_AUTO;
            else if (strcmp(v, "threads") == 0)
                p->engine = ENG_THREADS;
            else
                bad = perr(ps, "engine=%s: ax, ax-auto or threads", v);
        } else if (strcmp(k, "cap") == 0) {
            if (number(v, 1, 100000, &x) || x != floor(x))
                bad = perr(ps, "cap=%s: a whole number from 1 to 100000", v);
            p->cap = (unsigned)x;
            have_cap = true;
        } else if (strcmp(k, "queues") == 0) {
            unsigned q[3];
            char tail;
            if (strcmp(v, "unbounded") == 0)
                memset(p->queue, 0, sizeof p->queue);
            else if (sscanf(v, "%u/%u/%u%c", &q[0], &q[1], &q[2], &tail) == 3 && q[0] && q[1] &&
                     q[2] && q[0] <= 600000 && q[1] <= 600000 && q[2] <= 600000)
                memcpy(p->queue, q, sizeof q);
            else
                bad = perr(ps,
                           "queues=%s: unbounded, or HIGH/NORMAL/LOW bounds from 1 to "
                           "600000",
                           v);
        } else if (strcmp(k, "shed") == 0) {
            if (number(v, 0, 1, &p->shed_ratio) || p->shed_ratio <= 0)
                bad = perr(ps, "shed=%s: a ratio in (0, 1]", v);
        } else if (strcmp(k, "retry") == 0) {
            char buf[DM_SPEC_MAX];
            snprintf(buf, sizeof buf, "%s", v);
            char *part[5];
            int m = 0;
            for (char *s = buf, *save = NULL; m < 5 && (s = strtok_r(s, ":", &save)); s = NULL)
                part[m++] = s;
            if (m == 1 && strcmp(part[0], "none") == 0) {
                p->retry = RETRY_NONE;
            } else if (m == 2 && strcmp(part[0], "fixed") == 0 &&
                       dm_parse_duration(part[1], &p->retry_base_ms) == 0 &&
                       p->retry_base_ms >= 1) {
                p->retry = RETRY_FIXED;
                p->retry_max_ms = p->retry_base_ms;
                p->retry_jitter_ms = 0;
            } else if (m == 4 && strcmp(part[0], "exp") == 0 &&
                       dm_parse_duration(part[1], &p->retry_base_ms) == 0 &&
                       dm_parse_duration(part[2], &p->retry_max_ms) == 0 &&
                       dm_parse_duration(part[3], &p->retry_jitter_ms) == 0 &&
                       p->retry_base_ms >= 1 && p->retry_max_ms >= p->retry_base_ms) {
                p->retry = RETRY_EXP;
            } else {
                bad = perr(ps, "retry=%s: none, fixed:DELAY or exp:BASE:MAX:JITTER", v);
            }
        } else if (strcmp(k, "max_retry") == 0) {
            if (number(v, 0, 16, &x) || x != floor(x))
                bad = perr(ps, "max_retry=%s: a whole number from 0 to 16", v);
            p->max_retry = (unsigned)x;
        } else if (strcmp(k, "low_retry") == 0) {
            if (strcmp(v, "on") == 0)
                p->retry_low = true;
            else if (strcmp(v, "off") == 0)
                p->retry_low = false;
            else
                bad = perr(ps, "low_retry=%s: on or off", v);
        } else if (strcmp(k, "timeout") == 0) {
            if (strcmp(v, "class") == 0)
                p->timeout_ms = 0;
            else if (dm_parse_duration(v, &p->timeout_ms) || p->timeout_ms < 1)
                bad = perr(ps, "timeout=%s: a duration, or 'class' for per-class timeouts", v);
            have_timeout = true;
        } else {
            bad = perr(ps,
                       "config: unknown key '%s' (engine, cap, queues, shed, retry, "
                       "max_retry, low_retry, timeout)",
                       k);
        }
        if (bad) {
            sc->nprof--;
            return -1;
        }
    }
    if (p->engine == ENG_AX_AUTO) {
        /* ax's defaults, nothing tuned: only the classes' retries and timeouts. */
        if (have_cap || p->queue[0] || p->shed_ratio != 1.0 || !p->retry_low) {
            sc->nprof--;
            return perr(ps,
                        "config %s: engine=ax-auto takes ax's defaults: only retry=, "
                        "max_retry= and timeout=class",
                        tok[1]);
        }
        if (p->timeout_ms > 0) {
            sc->nprof--;
            return perr(ps,
                        "config %s: engine=ax-auto uses the classes' timeouts "
                        "(timeout=class)",
                        tok[1]);
        }
        have_cap = true;
    }
    if (!have_cap || !have_timeout) {
        sc->nprof--;
        return perr(ps, "config %s: cap= and timeout= are required", tok[1]);
    }
    if (p->engine == ENG_THREADS && (p->retry != RETRY_NONE && p->max_retry > 0)) {
        sc->nprof--;
        return perr(ps, "config %s: the threads engine does not retry (retry=none)", tok[1]);
    }
    if (p->engine == ENG_THREADS && (p->queue[0] || p->queue[1] || p->queue[2])) {
        sc->nprof--;
        return perr(ps, "config %s: the threads engine has one unbounded queue", tok[1]);
    }
    if (p->retry == RETRY_NONE) p->max_retry = 0;
    profile_about(p);
    return 0;
}

#define MAX_TOK 32
int dm_scenario_file(struct dm_scenario *sc, const char *path, char *err, size_t errlen)
{
    struct parse ps = {.file = path, .err = err, .errlen = errlen};
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct dm_scenario *in = calloc(1, sizeof *in);
    if (!in) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *in = *sc;
    in->ncls = in->nph = in->nprof = 0;
    char line[TOOL_LINE_BUF];
    size_t got = 0;
    int rc = 0, rd;
    /* An item of one value, given twice, is refused as a second config or
     * class of one name is: the first would silently lose. */
    static const char *const once[] = {"speed",    "seed",    "mix",     "drain",
                                       "deadline", "context", "upstream"};
    enum { ONCE = sizeof once / sizeof *once };
    unsigned seen[ONCE] = {0}; /* the line of each, 0 = not yet */
    while (rc == 0 && (rd = tool_read_line(f, line, &got)) != 0) {
        ps.line++;
        if (rd == -1) {
            rc = perr(&ps, "line too long (more than %d bytes)", TOOL_MAX_LINE);
            break;
        }
        if (rd == -2) break; /* said below */
        /* A NUL would end the line for every string function below, the
         * rest of it silently dropped. */
        if (memchr(line, 0, got)) {
            rc = perr(&ps, "NUL byte in line");
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *tok[MAX_TOK];
        int n = 0;
        for (char *p = line, *save = NULL; (p = strtok_r(p, " \t\r\n", &save)); p = NULL) {
            if (n == MAX_TOK) {
                rc = perr(&ps, "more than %d items on a line", MAX_TOK);
                break;
            }
            tok[n++] = p;
        }
        if (rc || n == 0) continue;
        const char *what = tok[0];
        double x = 0;
        int k = 0;
        while (k < ONCE && strcmp(what, once[k]) != 0)
            k++;
        if (k < ONCE && seen[k]) {
            rc = perr(&ps, "%s is given twice (first on line %u)", what, seen[k]);
            break;
        }
        if (k < ONCE) seen[k] = ps.line;
        if (strcmp(what, "class") == 0) {
            rc = parse_class(&ps, in, tok, n);
        } else if (strcmp(what, "phase") == 0) {
            rc = parse_phase(&ps, in, tok, n);
        } else if (strcmp(what, "config") == 0) {
            rc = parse_config(&ps, in, tok, n);
        } else if (strcmp(what, "mix") == 0) {
            double m[DM_NPRIO] = {0};
            for (int i = 1; i < n && rc == 0; i++) {
                char *k, *v;
                int pi = -1;
                if (kv(tok[i], &k, &v))
                    pi = strcmp(k, "high") == 0     ? DM_HIGH
                         : strcmp(k, "normal") == 0 ? DM_NORMAL
                         : strcmp(k, "low") == 0    ? DM_LOW
                                                    : -1;
                if (pi < 0 || number(v, 0, 1e9, &m[pi]))
                    rc = perr(&ps, "mix: use high=W normal=W low=W (weights >= 0)");
            }
            if (rc == 0 && m[0] + m[1] + m[2] <= 0) rc = perr(&ps, "mix: the weights add up to 0");
            if (rc == 0) memcpy(in->mix, m, sizeof m);
        } else if (n != 2) {
            rc = perr(&ps,
                      "'%s' takes exactly one value (or: unknown item; see "
                      "ax-demo --print-config)",
                      what);
        } else if (strcmp(what, "speed") == 0) {
            if (number(tok[1], 0.01, 1000, &in->speed))
                rc = perr(&ps, "speed %s: a number from 0.01 to 1000", tok[1]);
        } else if (strcmp(what, "seed") == 0) {
            char *e;
            errno = 0;
            unsigned long long s = strtoull(tok[1], &e, 10);
            if (!isdigit((unsigned char)tok[1][0]) || *e || errno)
                rc = perr(&ps, "seed %s: a whole number", tok[1]);
            in->seed = s;
        } else if (strcmp(what, "deadline") == 0) {
            if (dm_parse_duration(tok[1], &in->deadline_ms) || in->deadline_ms < 1 ||
                in->deadline_ms > 3600e3)
                rc = perr(&ps, "deadline %s: a duration from 1ms to 1h", tok[1]);
        } else if (strcmp(what, "drain") == 0) {
            if (dm_parse_duration(tok[1], &in->drain_ms) || in->drain_ms > 3600e3)
                rc = perr(&ps, "drain %s: a duration up to 1h", tok[1]);
        } else if (strcmp(what, "context") == 0) {
            if (number(tok[1], 0, 1 << 20, &x))
                rc = perr(&ps, "context %s: bytes per task, 0 to 1048576", tok[1]);
            in->ctx_bytes = nearbyint(x); /* whole bytes */
        } else if (strcmp(what, "upstream") == 0) {
            if (strlen(tok[1]) >= sizeof in->upstream_base) rc = perr(&ps, "upstream: too long");
            /* "none": no keys beyond the classes' (the built-in overload has some). */
            snprintf(in->upstream_base, sizeof in->upstream_base, "%s",
                     strcmp(tok[1], "none") == 0 ? "" : tok[1]);
        } else {
            rc = perr(&ps,
                      "unknown item '%s' (speed, seed, mix, drain, deadline, context, upstream, "
                      "class, phase, config)",
                      what);
        }
    }
    if (rc == 0 && ferror(f)) rc = perr(&ps, "read error: %s", strerror(errno));
    fclose(f);
    if (rc == 0) {
        /* Kinds the file did not mention keep the built-in lists. */
        if (!in->ncls) {
            in->ncls = sc->ncls;
            memcpy(in->cls, sc->cls, sizeof sc->cls);
        }
        if (!in->nph) {
            in->nph = sc->nph;
            memcpy(in->ph, sc->ph, sizeof sc->ph);
        }
        if (!in->nprof) {
            in->nprof = sc->nprof;
            memcpy(in->prof, sc->prof, sizeof sc->prof);
        }
        double share = 0;
        for (unsigned i = 0; i < in->ncls; i++)
            share += in->cls[i].share;
        if (share <= 0) {
            ps.line = 0;
            rc = perr(&ps, "the class shares add up to 0");
        }
        if (rc == 0 && dm_scenario_length_ms(in) > 4 * 3600e3) {
            ps.line = 0;
            rc = perr(&ps, "the phases last more than 4 hours");
        }
    }
    if (rc == 0) {
        snprintf(in->origin, sizeof in->origin, "%s", path);
        *sc = *in;
    }
    free(in);
    return rc;
}

/* Numbers as decimal() reads them back: the shortest fixed-point text that
 * is exactly v again, never "1e+06" (%g's way, which decimal() refuses).
 * Every value printed is bounded (durations to a year, weights to 1e9). */
static void print_num(FILE *f, double v)
{
    char b[400];
    for (int prec = 0; prec <= 40; prec++) {
        snprintf(b, sizeof b, "%.*f", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    fputs(b, f);
}

static void print_dur(FILE *f, double ms)
{
    if (ms >= 1000 && fmod(ms, 1000) == 0) {
        print_num(f, ms / 1000);
        fputc('s', f);
    } else {
        print_num(f, ms);
        fputs("ms", f);
    }
}

void dm_scenario_print(const struct dm_scenario *sc, FILE *f)
{
    fprintf(f,
            "# ax-demo scenario (%s). Times are incident time: --speed S divides\n"
            "# every duration by S. Durations: 300ms, 1.5s, 2m; bare numbers are\n"
            "# seconds (ms inside latency models). See tools/README.md.\n\n",
            sc->origin);
    fputs("speed ", f);
    print_num(f, sc->speed);
    fprintf(f, "\nseed %llu\nmix high=", (unsigned long long)sc->seed);
    print_num(f, sc->mix[DM_HIGH]);
    fputs(" normal=", f);
    print_num(f, sc->mix[DM_NORMAL]);
    fputs(" low=", f);
    print_num(f, sc->mix[DM_LOW]);
    fputs("\ndrain ", f);
    print_dur(f, sc->drain_ms);
    fputs("\ndeadline ", f);
    print_dur(f, sc->deadline_ms);
    fputs("\ncontext ", f);
    print_num(f, sc->ctx_bytes);
    fputc('\n', f);
    fprintf(f, "upstream %s\n", sc->upstream_base[0] ? sc->upstream_base : "none");
    fputs("\n# task classes: one upstream endpoint each, with its own latency and timeout\n", f);
    for (unsigned i = 0; i < sc->ncls; i++) {
        const struct dm_class *c = &sc->cls[i];
        fprintf(f, "class %s path=%s latency=%s share=", c->name, c->path, c->latency);
        print_num(f, c->share);
        fputs(" timeout=", f);
        print_dur(f, c->timeout_ms);
        fputc('\n', f);
    }
    fputs("\n# phases: arrivals per second, and ax-upstream keys for the upstream\n", f);
    for (unsigned i = 0; i < sc->nph; i++) {
        const struct dm_phase *p = &sc->ph[i];
        fprintf(f, "phase %s ", p->name);
        print_dur(f, p->duration_ms);
        fputs(" rate=", f);
        print_num(f, p->rate);
        if (p->upstream[0]) fprintf(f, " upstream=%s", p->upstream);
        fputc('\n', f);
    }
    fputs("\n# configurations, run one after the other against the same traffic\n", f);
    for (unsigned i = 0; i < sc->nprof; i++) {
        const struct dm_profile *p = &sc->prof[i];
        if (p->engine == ENG_AX_AUTO)
            fprintf(f, "config %s engine=ax-auto", p->name);
        else
            fprintf(f, "config %s engine=%s cap=%u", p->name,
                    p->engine == ENG_AX ? "ax" : "threads", p->cap);
        if (p->engine == ENG_AX) {
            if (p->queue[0] || p->queue[1] || p->queue[2]) {
                fprintf(f, " queues=%u/%u/%u shed=", p->queue[DM_HIGH], p->queue[DM_NORMAL],
                        p->queue[DM_LOW]);
                print_num(f, p->shed_ratio);
            } else
                fprintf(f, " queues=unbounded");
        }
        if (p->retry == RETRY_NONE) {
            fputs(" retry=none", f);
        } else if (p->retry == RETRY_FIXED) {
            fputs(" retry=fixed:", f);
            print_dur(f, p->retry_base_ms);
        } else {
            fputs(" retry=exp:", f);
            print_dur(f, p->retry_base_ms);
            fputc(':', f);
            print_dur(f, p->retry_max_ms);
            fputc(':', f);
            print_dur(f, p->retry_jitter_ms);
        }
        if (p->retry != RETRY_NONE && p->engine == ENG_AX_AUTO)
            fprintf(f, " max_retry=%u", p->max_retry);
        else if (p->retry != RETRY_NONE)
            fprintf(f, " max_retry=%u low_retry=%s", p->max_retry, p->retry_low ? "on" : "off");
        if (p->timeout_ms > 0) {
            fputs(" timeout=", f);
            print_dur(f, p->timeout_ms);
        } else {
            fputs(" timeout=class", f);
        }
        fputc('\n', f);
    }
}
