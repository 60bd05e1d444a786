/* scenario.c - what the upstream does: endpoints by path, and a schedule of
 * phases that changes it over time. One syntax for flags and files:
 *
 *   endpoint PATTERN key=value ...      (--endpoint 'PATTERN key=value ...')
 *   phase DURATION[:NAME] key=value ... (--phase 'DURATION[:NAME] key=value ...')
 *   loop                                (--loop: repeat the schedule)
 *   seed=N                              (--seed N)
 *
 * Items are separated by spaces or commas (so a flag needs no quoting:
 * --phase 20s:degraded,latency=fixed:2s); '#' starts a comment. PATTERN is
 * an exact path ("/fast"), a prefix ending in '*' (/api/ then a star), or "*" for
 * every other path; an endpoint given twice keeps the keys of both, the later
 * winning. A phase changes, for its duration, the keys it names on every
 * endpoint, or only on the one whose pattern is its path= key. The phase
 * names healthy, degraded and down are presets (their keys apply first):
 *   healthy   nothing changed: the endpoints as declared
 *   degraded  slow=7 error=0.05 error_code=503  (seed §4.1: 300 ms became 2 s)
 *   down      hang=1: accepts and never answers (seed §1.1: "sometimes dies")
 *
 * Built once before serving: eff[phase][endpoint], the behaviour each
 * endpoint has in each phase, so a request does one table lookup.
 */
#include "upstream.h"
#include "../read_line.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 32
#define SPEC_MAX 2048

static const struct behaviour defaults = {
    .lat = {LAT_FIXED, 0, 0},
    .stall_lat = {LAT_FIXED, UP_MAX_LATENCY_MS, 0},
    .slow = 1,
    .error_code = 500,
    .overload = 1,
    .body = -1,
};

void scenario_init(struct scenario *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->seed = 1;
}

void scenario_free(struct scenario *sc)
{
    free(sc->eff);
    sc->eff = NULL;
}

static int fail(char *err, size_t errlen, const char *origin, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, const char *origin, const char *fmt, ...)
{
    int n = snprintf(err, errlen, "%s: ", origin);
    if (n < 0 || (size_t)n >= errlen) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A plain non-negative decimal ("12", "0.5", ".5"); strtod alone would also
 * take "inf", "0x10", " 1" and "-0". Returns the end, NULL if none. */
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
    if (!digits) return NULL;
    char tmp[64];
    size_t n = (size_t)(p - s);
    if (n >= sizeof tmp) return NULL;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    errno = 0;
    *out = strtod(tmp, NULL);
    if (errno || !isfinite(*out)) return NULL;
    return p;
}

int parse_duration(const char *s, double bare_ms, double *out_ms)
{
    double v;
    const char *u = decimal(s, &v);
    if (!u) return -1;
    double mul;
    if (*u == 0)
        mul = bare_ms;
    else if (strcmp(u, "ms") == 0)
        mul = 1;
    else if (strcmp(u, "s") == 0)
        mul = 1000;
    else if (strcmp(u, "m") == 0)
        mul = 60000;
    else if (strcmp(u, "h") == 0)
        mul = 3600000;
    else
        return -1;
    *out_ms = v * mul;
    return isfinite(*out_ms) ? 0 : -1;
}

static int parse_prob(const char *v, double *out)
{
    const char *e = decimal(v, out);
    return e && *e == 0 && *out <= 1.0 ? 0 : -1;
}

static int parse_uint(const char *v, unsigned long max, unsigned long *out)
{
    if (!isdigit((unsigned char)*v)) return -1;
    errno = 0;
    char *e;
    unsigned long x = strtoul(v, &e, 10);
    if (errno || *e || x > max) return -1;
    *out = x;
    return 0;
}

/* One latency value: a duration, bare = milliseconds, within the cap. */
static int lat_value(const char *s, double *ms)
{
    return parse_duration(s, 1, ms) == 0 && *ms <= UP_MAX_LATENCY_MS ? 0 : -1;
}

static int parse_latency(const char *v, struct latency *l, const char **why)
{
    char buf[128];
    if (strlen(v) >= sizeof buf) {
        *why = "too long";
        return -1;
    }
    strcpy(buf, v);
    char *parts[4];
    int n = 0;
    for (char *p = buf, *save = NULL; n < 4 && (p = strtok_r(p, ":", &save)); p = NULL)
        parts[n++] = p;
    *why = "latency is fixed:D, uniform:MIN:MAX or lognormal:P50:P99, durations from 0 to 30s "
           "(ms, s; a bare number is ms)";
    if (n == 1 && lat_value(parts[0], &l->a_ms) == 0) { /* "300ms" means fixed:300ms */
        l->kind = LAT_FIXED;
        return 0;
    }
    if (n == 2 && strcmp(parts[0], "fixed") == 0 && lat_value(parts[1], &l->a_ms) == 0) {
        l->kind = LAT_FIXED;
        return 0;
    }
    if (n != 3 || lat_value(parts[1], &l->a_ms) || lat_value(parts[2], &l->b_ms)) return -1;
    if (strcmp(parts[0], "uniform") == 0) {
        l->kind = LAT_UNIFORM;
        if (l->a_ms > l->b_ms) {
            *why = "uniform:MIN:MAX needs MIN <= MAX";
            return -1;
        }
        return 0;
    }
    if (strcmp(parts[0], "lognormal") == 0) {
        l->kind = LAT_LOGNORMAL;
        if (!(l->a_ms > 0) || l->a_ms > l->b_ms) {
            *why = "lognormal:P50:P99 needs 0 < P50 <= P99";
            return -1;
        }
        return 0;
    }
    return -1;
}

/* Apply key=value to b. `target` is non-NULL for a phase (path= allowed). */
static int apply_kv(struct behaviour *b, const char *kv, char *target, const char *origin,
                    char *err, size_t errlen)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) return fail(err, errlen, origin, "'%s' is not key=value", kv);
    size_t kl = (size_t)(eq - kv);
    const char *v = eq + 1;
    char key[32];
    if (kl >= sizeof key) return fail(err, errlen, origin, "unknown key '%.*s'", (int)kl, kv);
    memcpy(key, kv, kl);
    key[kl] = 0;
    if (!*v) return fail(err, errlen, origin, "%s: the value is empty", key);
    unsigned long u;
    const char *why = NULL;
    if (strcmp(key, "latency") == 0 || strcmp(key, "stall_latency") == 0) {
        bool stall = key[0] == 's';
        if (parse_latency(v, stall ? &b->stall_lat : &b->lat, &why))
            return fail(err, errlen, origin, "%s=%s: %s", key, v, why);
        b->set |= stall ? K_STALL_LATENCY : K_LATENCY;
    } else if (strcmp(key, "slow") == 0) {
        const char *e = decimal(v, &b->slow);
        if (!e || *e || !(b->slow > 0) || b->slow > 1000)
            return fail(err, errlen, origin, "slow=%s: a factor in (0, 1000]", v);
        b->set |= K_SLOW;
    } else if (strcmp(key, "error") == 0 || strcmp(key, "hang") == 0 || strcmp(key, "reset") == 0 ||
               strcmp(key, "stall") == 0) {
        double p;
        if (parse_prob(v, &p))
            return fail(err, errlen, origin, "%s=%s: a probability from 0 to 1", key, v);
        if (key[0] == 'e')
            b->error = p, b->set |= K_ERROR;
        else if (key[0] == 'h')
            b->hang = p, b->set |= K_HANG;
        else if (key[0] == 'r')
            b->reset = p, b->set |= K_RESET;
        else
            b->stall = p, b->set |= K_STALL;
    } else if (strcmp(key, "error_code") == 0) {
        if (strcmp(v, "500") == 0)
            b->error_code = 500;
        else if (strcmp(v, "503") == 0)
            b->error_code = 503;
        else if (strcmp(v, "mix") == 0)
            b->error_code = 0;
        else
            return fail(err, errlen, origin, "error_code=%s: 500, 503 or mix", v);
        b->set |= K_ERROR_CODE;
    } else if (strcmp(key, "capacity") == 0) {
        if (parse_uint(v, 1000000, &u))
            return fail(err, errlen, origin,
                        "capacity=%s: requests in flight, 0 (unlimited) to 1000000", v);
        b->capacity = (unsigned)u;
        b->set |= K_CAPACITY;
    } else if (strcmp(key, "overload") == 0) {
        const char *e = decimal(v, &b->overload);
        if (!e || *e || !(b->overload > 0) || b->overload > 8)
            return fail(err, errlen, origin, "overload=%s: an exponent in (0, 8]", v);
        b->set |= K_OVERLOAD;
    } else if (strcmp(key, "body") == 0) {
        if (parse_uint(v, UP_MAX_RESP_BODY, &u))
            return fail(err, errlen, origin, "body=%s: bytes, 0 to %u", v, UP_MAX_RESP_BODY);
        b->body = (long)u;
        b->set |= K_BODY;
    } else if (target && strcmp(key, "path") == 0) {
        if (strlen(v) >= UP_PATTERN_MAX) return fail(err, errlen, origin, "path=%s: too long", v);
        strcpy(target, v);
    } else {
        return fail(err, errlen, origin, "unknown key '%s'", key);
    }
    return 0;
}

/* Split spec into items at spaces and commas, cutting at a '#' that starts
 * an item. Returns the count, -1 if there are too many. */
static int tokenize(char *buf, char **tok)
{
    int n = 0;
    for (char *p = buf;;) {
        while (*p && (isspace((unsigned char)*p) || *p == ','))
            p++;
        if (!*p || *p == '#') return n;
        if (n == MAX_TOKENS) return -1;
        tok[n++] = p;
        while (*p && !isspace((unsigned char)*p) && *p != ',')
            p++;
        if (*p) *p++ = 0;
    }
}

static int split(const char *spec, char *buf, char **tok, const char *origin, char *err,
                 size_t errlen)
{
    if (strlen(spec) >= SPEC_MAX)
        return fail(err, errlen, origin, "longer than %d characters", SPEC_MAX - 1);
    strcpy(buf, spec);
    int n = tokenize(buf, tok);
    if (n < 0) return fail(err, errlen, origin, "more than %d items", MAX_TOKENS);
    return n;
}

static void merge(struct behaviour *dst, const struct behaviour *src)
{
    unsigned s = src->set;
    if (s & K_LATENCY) dst->lat = src->lat;
    if (s & K_STALL) dst->stall = src->stall;
    if (s & K_STALL_LATENCY) dst->stall_lat = src->stall_lat;
    if (s & K_SLOW) dst->slow = src->slow;
    if (s & K_ERROR) dst->error = src->error;
    if (s & K_ERROR_CODE) dst->error_code = src->error_code;
    if (s & K_HANG) dst->hang = src->hang;
    if (s & K_RESET) dst->reset = src->reset;
    if (s & K_CAPACITY) dst->capacity = src->capacity;
    if (s & K_OVERLOAD) dst->overload = src->overload;
    if (s & K_BODY) dst->body = src->body;
    dst->set |= s;
}

int scenario_endpoint(struct scenario *sc, const char *spec, const char *origin, char *err,
                      size_t errlen)
{
    char buf[SPEC_MAX], *tok[MAX_TOKENS];
    int n = split(spec, buf, tok, origin, err, errlen);
    if (n < 0) return -1;
    if (n == 0)
        return fail(err, errlen, origin, "endpoint needs a path pattern (/path, /prefix/* or *)");
    const char *pat = tok[0];
    size_t pl = strlen(pat);
    if (pl >= UP_PATTERN_MAX) return fail(err, errlen, origin, "pattern '%s' is too long", pat);
    if (strcmp(pat, "*") != 0) {
        if (pat[0] != '/')
            return fail(err, errlen, origin,
                        "pattern '%s' must start with '/' (or be * for every other path)", pat);
        const char *star = strchr(pat, '*');
        if (star && star != pat + pl - 1)
            return fail(err, errlen, origin, "pattern '%s': '*' may only end it", pat);
        for (const char *c = pat; *c; c++)
            if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f || *c == '"' || *c == '\\')
                return fail(err, errlen, origin,
                            "pattern '%s': printable ASCII other than '\"' and '\\' only", pat);
        if (strcmp(pat, "/stats") == 0)
            return fail(err, errlen, origin, "/stats is the server's own statistics");
    }
    struct behaviour b = {0};
    for (int i = 1; i < n; i++)
        if (apply_kv(&b, tok[i], NULL, origin, err, errlen)) return -1;
    for (unsigned i = 0; i < sc->nep; i++) {
        if (strcmp(sc->ep[i].pattern, pat) == 0) { /* declared again: later keys win */
            merge(&sc->ep[i].b, &b);
            return 0;
        }
    }
    if (sc->nep == UP_MAX_ENDPOINTS)
        return fail(err, errlen, origin, "more than %d endpoints", UP_MAX_ENDPOINTS);
    struct endpoint *e = &sc->ep[sc->nep++];
    memcpy(e->pattern, pat, pl + 1);
    e->is_prefix = pat[pl - 1] == '*';
    e->prefix_len = e->is_prefix ? pl - 1 : pl;
    snprintf(e->origin, sizeof e->origin, "%s", origin);
    e->b = defaults;
    merge(&e->b, &b);
    return 0;
}

static const struct {
    const char *name, *keys;
} presets[] = {
    {"healthy", ""},
    {"degraded", "slow=7 error=0.05 error_code=503"},
    {"down", "hang=1"},
};

int scenario_phase(struct scenario *sc, const char *spec, const char *origin, char *err,
                   size_t errlen)
{
    char buf[SPEC_MAX], *tok[MAX_TOKENS];
    int n = split(spec, buf, tok, origin, err, errlen);
    if (n < 0) return -1;
    if (n == 0) return fail(err, errlen, origin, "phase needs DURATION[:NAME], e.g. 10s:healthy");
    if (sc->nph == UP_MAX_PHASES)
        return fail(err, errlen, origin, "more than %d phases", UP_MAX_PHASES);
    struct phase *p = &sc->ph[sc->nph];
    memset(p, 0, sizeof *p);
    snprintf(p->origin, sizeof p->origin, "%s", origin);
    char *colon = strchr(tok[0], ':');
    if (colon) *colon = 0;
    double ms;
    if (parse_duration(tok[0], 1000, &ms) || ms < 1 || ms > 365.0 * 86400e3)
        return fail(err, errlen, origin,
                    "'%s' is not a phase duration (1ms to 365 days: 10s, 500ms, 2m; a bare "
                    "number is seconds)",
                    tok[0]);
    p->duration_ms = (uint64_t)llround(ms);
    if (colon) {
        const char *name = colon + 1;
        size_t nl = strlen(name);
        if (nl == 0 || nl >= UP_NAME_MAX)
            return fail(err, errlen, origin, "phase name must be 1 to %d characters",
                        UP_NAME_MAX - 1);
        for (const char *c = name; *c; c++)
            if (!isalnum((unsigned char)*c) && !strchr("_-.", *c))
                return fail(err, errlen, origin,
                            "phase name '%s': letters, digits, '_', '-' and '.' only", name);
        memcpy(p->name, name, nl + 1);
    } else {
        snprintf(p->name, sizeof p->name, "phase%u", sc->nph + 1);
    }
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(p->name, presets[i].name) != 0) continue;
        char pb[128], *pt[8];
        strcpy(pb, presets[i].keys);
        int pn = tokenize(pb, pt);
        for (int k = 0; k < pn; k++)
            apply_kv(&p->over, pt[k], p->target, origin, err, errlen);
    }
    for (int i = 1; i < n; i++)
        if (apply_kv(&p->over, tok[i], p->target, origin, err, errlen)) return -1;
    sc->nph++;
    return 0;
}

int scenario_file(struct scenario *sc, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) return fail(err, errlen, path, "%s", strerror(errno));
    char line[TOOL_LINE_BUF];
    size_t got = 0;
    unsigned lineno = 0;
    int rc = 0, rd = 0;
    while (rc == 0 && (rd = tool_read_line(f, line, &got)) > 0) {
        lineno++;
        char origin[UP_ORIGIN_MAX];
        snprintf(origin, sizeof origin, "%s:%u", path, lineno);
        /* A NUL would end the line for every string function below, the
         * rest of it silently dropped. */
        if (memchr(line, 0, got)) {
            rc = fail(err, errlen, origin, "NUL byte in line");
            break;
        }
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '#') continue;
        char *word = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        size_t wl = (size_t)(p - word);
        if (wl == 8 && strncmp(word, "endpoint", 8) == 0) {
            rc = scenario_endpoint(sc, p, origin, err, errlen);
        } else if (wl == 5 && strncmp(word, "phase", 5) == 0) {
            rc = scenario_phase(sc, p, origin, err, errlen);
        } else if (wl == 4 && strncmp(word, "loop", 4) == 0) {
            char *t[MAX_TOKENS];
            if (tokenize(p, t) != 0) rc = fail(err, errlen, origin, "loop takes nothing after it");
            sc->loop = true;
        } else if (wl > 5 && strncmp(word, "seed=", 5) == 0) {
            unsigned long long s;
            char *e;
            errno = 0;
            s = strtoull(word + 5, &e, 10);
            char *t[MAX_TOKENS];
            if (errno || e != p || !isdigit((unsigned char)word[5]) || tokenize(p, t) != 0)
                rc =
                    fail(err, errlen, origin, "seed=%.*s: a whole number", (int)(wl - 5), word + 5);
            else
                sc->seed = s;
        } else {
            rc = fail(err, errlen, origin,
                      "'%.*s': expected endpoint, phase, loop or seed=N (one per line)", (int)wl,
                      word);
        }
    }
    if (rc == 0 && rd == -1) {
        char origin[UP_ORIGIN_MAX];
        snprintf(origin, sizeof origin, "%s:%u", path, lineno + 1);
        rc = fail(err, errlen, origin, "line too long (more than %d bytes)", TOOL_MAX_LINE);
    }
    if (rc == 0 && rd == -2) rc = fail(err, errlen, path, "read error: %s", strerror(errno));
    fclose(f);
    return rc;
}

int scenario_finish(struct scenario *sc, char *err, size_t errlen)
{
    bool have_default = false;
    for (unsigned i = 0; i < sc->nep; i++)
        have_default |= strcmp(sc->ep[i].pattern, "*") == 0;
    if (!have_default && scenario_endpoint(sc, "*", "default endpoint", err, errlen)) return -1;
    if (sc->nph == 0) {
        struct phase *p = &sc->ph[sc->nph++];
        memset(p, 0, sizeof *p);
        strcpy(p->name, "steady");
        strcpy(p->origin, "default phase");
        p->duration_ms = 1;
        sc->loop = false;
    }
    sc->cycle_ms = 0;
    for (unsigned i = 0; i < sc->nph; i++) {
        struct phase *p = &sc->ph[i];
        sc->cycle_ms += p->duration_ms;
        if (!p->target[0]) continue;
        unsigned e = 0;
        while (e < sc->nep && strcmp(sc->ep[e].pattern, p->target) != 0)
            e++;
        if (e == sc->nep)
            return fail(err, errlen, p->origin, "path=%s names no endpoint", p->target);
    }
    free(sc->eff);
    sc->eff = calloc((size_t)sc->nph * sc->nep, sizeof *sc->eff);
    if (!sc->eff) return fail(err, errlen, "scenario", "out of memory");
    for (unsigned p = 0; p < sc->nph; p++) {
        for (unsigned e = 0; e < sc->nep; e++) {
            struct behaviour *b = &sc->eff[(size_t)p * sc->nep + e];
            *b = sc->ep[e].b;
            if (!sc->ph[p].target[0] || strcmp(sc->ph[p].target, sc->ep[e].pattern) == 0)
                merge(b, &sc->ph[p].over);
        }
    }
    return 0;
}

unsigned scenario_phase_at(const struct scenario *sc, uint64_t elapsed_ms, uint64_t *in_phase_ms)
{
    if (sc->loop && sc->cycle_ms) elapsed_ms %= sc->cycle_ms;
    unsigned i = 0;
    while (i + 1 < sc->nph && elapsed_ms >= sc->ph[i].duration_ms)
        elapsed_ms -= sc->ph[i++].duration_ms;
    if (in_phase_ms) *in_phase_ms = elapsed_ms;
    return i;
}

unsigned scenario_route(const struct scenario *sc, const char *path, size_t len)
{
    unsigned best = UINT32_MAX, fallback = 0;
    size_t best_len = 0;
    for (unsigned i = 0; i < sc->nep; i++) {
        const struct endpoint *e = &sc->ep[i];
        if (e->is_prefix && e->prefix_len == 0) {
            fallback = i; /* "*" */
            continue;
        }
        if (!e->is_prefix) {
            if (e->prefix_len == len && memcmp(e->pattern, path, len) == 0)
                return i; /* exact match wins */
            continue;
        }
        if (e->prefix_len <= len && memcmp(e->pattern, path, e->prefix_len) == 0 &&
            (best == UINT32_MAX || e->prefix_len > best_len)) {
            best = i;
            best_len = e->prefix_len;
        }
    }
    return best != UINT32_MAX ? best : fallback;
}
