/* upstream.h - the parts of ax-upstream, the unstable HTTP upstream that ax's
 * demos and tests run against (seed §1.1: third-party sources answering in
 * 50 ms to 30 s, sometimes never; §4.1: an upstream that slowed from 300 ms to
 * 2 s once it was overloaded).
 *
 *   scenario.c   endpoints, phases, the flag and file syntax that sets them
 *   model.c      what one request gets: latency, error, hang or reset
 *   http.c       the HTTP/1.1 request parser (pure: bytes in, verdict out)
 *   stats.c      counters, the served-latency histogram, the /stats JSON
 *   server.c     the accept task and one task per connection, on ax
 *   ../ax-upstream.c   flags, the listening socket, signals, the main loop
 *
 * Everything the connection tasks read while serving (the scenario and its
 * table of effective behaviours) is built before the first task starts and
 * never changes; what they write is atomic counters. So there is no lock
 * anywhere on the request path.
 */
#ifndef AX_UPSTREAM_H
#define AX_UPSTREAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UP_MAX_ENDPOINTS 64
#define UP_MAX_PHASES 256
#define UP_PATTERN_MAX 128
#define UP_NAME_MAX 32
#define UP_ORIGIN_MAX 160
/* The seed's upstream answers within 30 s when it answers at all: every
 * latency, after the phase's slow-down and the overload growth, is capped here. */
#define UP_MAX_LATENCY_MS 30000.0
#define UP_MAX_HEAD 8192             /* request line + headers; more is 431 */
#define UP_MAX_HEADERS 100           /* header fields; more is 431 */
#define UP_MAX_REQ_BODY (1u << 20)   /* request body; more is 413 */
#define UP_MAX_RESP_BODY (16u << 20) /* body=N of an endpoint */

/* ---- behaviour: what an endpoint does (scenario.c, model.c) ------------- */

enum lat_kind { LAT_FIXED, LAT_UNIFORM, LAT_LOGNORMAL };

struct latency {
    enum lat_kind kind;
    double a_ms, b_ms; /* fixed: a; uniform: [a, b]; lognormal: p50 a, p99 b */
};

/* Which keys a spec line named: a phase overrides exactly those. */
enum {
    K_LATENCY = 1u << 0,
    K_SLOW = 1u << 1,
    K_ERROR = 1u << 2,
    K_ERROR_CODE = 1u << 3,
    K_HANG = 1u << 4,
    K_RESET = 1u << 5,
    K_CAPACITY = 1u << 6,
    K_OVERLOAD = 1u << 7,
    K_BODY = 1u << 8,
    K_STALL = 1u << 9,
    K_STALL_LATENCY = 1u << 10,
};

struct behaviour {
    unsigned set; /* K_* bits */
    struct latency lat;
    double stall;             /* probability that a request stalls: its latency is drawn */
    struct latency stall_lat; /* from stall_lat instead (a slow shard, a lock convoy) */
    double slow;       /* latency multiplier (a phase's "the upstream got 7x slower") */
    double error;      /* probability of a 5xx */
    int error_code;    /* 500, 503, or 0: each half the time */
    double hang;       /* probability of never answering */
    double reset;      /* probability of closing mid-response */
    unsigned capacity; /* requests in flight before latency grows; 0 = unlimited */
    double overload;   /* growth exponent k: latency x (in_flight / capacity)^k */
    long body;         /* body bytes of a 200; -1 = a short JSON document */
};

struct endpoint {
    char pattern[UP_PATTERN_MAX]; /* as written: "/fast", "*", or a prefix and a star */
    size_t prefix_len;            /* pattern without its trailing '*' */
    bool is_prefix;               /* pattern ended in '*' */
    char origin[UP_ORIGIN_MAX];   /* "file:line" or "--endpoint" for messages */
    struct behaviour b;
    /* counters, written by connection tasks */
    _Atomic uint64_t requests, in_flight, max_in_flight;
};

struct phase {
    char name[UP_NAME_MAX];
    uint64_t duration_ms;
    char target[UP_PATTERN_MAX]; /* path=: the one endpoint it changes; "" = all */
    char origin[UP_ORIGIN_MAX];
    struct behaviour over; /* preset keys, then the line's own keys */
};

struct scenario {
    struct endpoint ep[UP_MAX_ENDPOINTS];
    unsigned nep;
    struct phase ph[UP_MAX_PHASES];
    unsigned nph;
    bool loop;
    uint64_t seed;
    /* built by scenario_finish(): eff[phase * nep + endpoint] */
    struct behaviour *eff;
    uint64_t cycle_ms; /* sum of the phases' durations */
};

/* Parse one "--endpoint" / "--phase" value or a whole scenario file; on error
 * fill err (the message, prefixed by the file:line for a file) and return -1. */
void scenario_init(struct scenario *sc);
int scenario_endpoint(struct scenario *sc, const char *spec, const char *origin, char *err,
                      size_t errlen);
int scenario_phase(struct scenario *sc, const char *spec, const char *origin, char *err,
                   size_t errlen);
int scenario_file(struct scenario *sc, const char *path, char *err, size_t errlen);
/* Resolve targets, add the default endpoint and phase if missing, build eff. */
int scenario_finish(struct scenario *sc, char *err, size_t errlen);
void scenario_free(struct scenario *sc);
/* Durations: a decimal with unit ms, s, m or h; a bare number is `bare_ms`
 * milliseconds per unit (1 for latencies, 1000 for phase lengths and flags). */
int parse_duration(const char *s, double bare_ms, double *out_ms);

/* The phase in force `elapsed_ms` after start, and how long it has run. */
unsigned scenario_phase_at(const struct scenario *sc, uint64_t elapsed_ms, uint64_t *in_phase_ms);
/* The endpoint serving `path` (exact match, else longest prefix, else "*"). */
unsigned scenario_route(const struct scenario *sc, const char *path, size_t len);
static inline const struct behaviour *scenario_eff(const struct scenario *sc, unsigned phase,
                                                   unsigned ep)
{
    return &sc->eff[(size_t)phase * sc->nep + ep];
}

/* ---- model: one request's fate (model.c) --------------------------------- */

struct rng {
    uint64_t s;
};
void rng_seed(struct rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(struct rng *r);
double rng_unit(struct rng *r); /* uniform in [0, 1) */

enum outcome { OUT_OK, OUT_ERROR, OUT_HANG, OUT_RESET };

struct fate {
    enum outcome out;
    int status; /* 200, 500 or 503 (OUT_OK / OUT_ERROR) */
    uint64_t latency_ms;
    double overload_factor; /* >= 1 */
};

/* Decide one request given the endpoint's behaviour and how many requests
 * are in flight on it, this one included. */
void model_decide(const struct behaviour *b, uint64_t in_flight, struct rng *r, struct fate *f);
double model_sample_latency(const struct latency *l, struct rng *r);

/* ---- HTTP/1.1 requests (http.c) ------------------------------------------ */

struct http_req {
    const char *method;
    size_t method_len;
    const char *path; /* origin-form path, query and fragment cut off */
    size_t path_len;
    int minor;       /* HTTP/1.minor: 0 or 1 */
    bool keep_alive; /* after this request (version default and Connection:) */
    bool head;       /* HEAD: the response has no body */
    bool expect_continue;
    uint64_t content_length;
};

/* Parse the head of the request at the start of buf[0, len). Returns its
 * length once the blank line after the headers is in, 0 while more bytes are
 * needed, or -STATUS for a request to refuse (400, 411, 417, 431, 501, 505,
 * 413 for a Content-Length above `max_body`); *why says what was wrong. */
int http_parse(const char *buf, size_t len, uint64_t max_body, struct http_req *rq,
               const char **why);
const char *http_reason(int status);

/* ---- statistics (stats.c) ------------------------------------------------- */

#define UP_HIST_SUB 16 /* buckets per power of two: about +-3 % */
#define UP_HIST_N (64 * UP_HIST_SUB)

struct up_stats {
    _Atomic uint64_t conns_accepted, conns_open, conns_max_open, conns_refused, accept_errors;
    /* requests.total == sum(status) + resets + unanswered + in_flight */
    _Atomic uint64_t requests, in_flight, max_in_flight;
    _Atomic uint64_t hangs, resets, unanswered, stats_requests;
    _Atomic uint64_t status[600];
    _Atomic uint64_t lat_count, lat_sum_us, lat_max_us;
    _Atomic uint64_t lat_hist[UP_HIST_N];
};

extern struct up_stats up_stats;

void stats_max(_Atomic uint64_t *max, uint64_t v);
void stats_latency(uint64_t us);
/* out[k]: the served latency below which a fraction q[k] fell, in µs. */
void stats_quantiles_us(const double *q, double *out, unsigned n);
/* The /stats document; malloc'd, NUL-terminated, *len set. NULL if out of memory. */
char *stats_json(const struct scenario *sc, uint64_t start_ns, uint64_t now_ns, size_t *len);

/* ---- the server (server.c) ------------------------------------------------ */

struct server_opts {
    const struct scenario *sc;
    int listen_fd;
    uint64_t start_ns;    /* ax_now_ns() when the schedule began */
    int64_t idle_ms;      /* between requests, and for a request's remaining bytes */
    uint64_t lifetime_ms; /* a connection's task timeout */
};

struct ax_sched;
/* Submit the accept task; it submits one task per connection. */
int server_start(struct ax_sched *s, const struct server_opts *o);

#endif
