/* demo.h - the parts of ax-demo, the incident replay (seed §4).
 *
 *   scenario.c   the built-in scenario (seed §1.1, §4.1-4.4), the --config
 *                file syntax that replaces it, --print-config
 *   traffic.c    the arrival schedule: a seeded Poisson process per phase,
 *                priority and class drawn from the same stream, so every
 *                configuration sees the very same tasks at the same times
 *   hist.c       a lock-free latency histogram with windowed quantiles
 *   upstream.c   starting and stopping ax-upstream, reading its /stats,
 *                checking that a --url answers
 *   url.c        the rule for a --url (ax-worker's too)
 *   run.c        one configuration, in a forked child: submit, sample every
 *                100 ms, drain, tally (engines: eng_ax.c, eng_threads.c)
 *   verdict.c    the seed's five goals (§1.3), PASS/FAIL per configuration
 *   report.c     results.json and report.html (inline SVG, nothing fetched)
 *   ../ax-demo.c flags, the loop over configurations, the text summary
 *
 * Time. Everything in a scenario is in *incident time*: the seconds of the
 * seed's incident. --speed S runs it S times faster: arrival gaps, upstream
 * latencies, timeouts, back-offs and phase lengths are all divided by S, so
 * the dynamics keep their shape while the counts (tasks, queue lengths,
 * bytes) stay at full scale. Every duration ax-demo reports is converted
 * back to incident time (measured wall time x S).
 */
#ifndef AX_DEMO_H
#define AX_DEMO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DM_MAX_CLASSES 8
#define DM_MAX_PHASES 16
#define DM_MAX_PROFILES 8
#define DM_NAME_MAX 24
#define DM_PATH_MAX 128
#define DM_SPEC_MAX 256
#define DM_URL_MAX 512
#define DM_MAX_SAMPLES 2400 /* time-series points per configuration */
/* The built-in overload scenario is the seed's incident with every rate,
 * cap and queue bound divided by this (scenario.c). */
#define DM_OVERLOAD_SCALE 10

/* Priorities in display order (ax's enum values differ: NORMAL is 0). */
enum { DM_HIGH, DM_NORMAL, DM_LOW, DM_NPRIO };
extern const char *const dm_prio_name[DM_NPRIO]; /* "HIGH", "NORMAL", "LOW" */

/* ---- scenario (scenario.c) ------------------------------------------------ */

/* A task class: one upstream endpoint with its own latency and, in a
 * configuration that times out per class, its own timeout (seed §4.4). */
struct dm_class {
    char name[DM_NAME_MAX];
    char path[DM_PATH_MAX];    /* appended to the upstream's base URL */
    char latency[DM_SPEC_MAX]; /* ax-upstream latency model, incident ms */
    double share;              /* relative weight in the traffic */
    double timeout_ms;         /* the per-class timeout */
};

/* A phase of the incident: traffic rate and what the upstream does. */
struct dm_phase {
    char name[DM_NAME_MAX];
    double duration_ms;
    double rate;                /* task arrivals per second (incident time) */
    char upstream[DM_SPEC_MAX]; /* ax-upstream phase keys ("slow=7 error=0.05") */
};

/* ENG_AX_AUTO: ax_config_default plus one ax task class per scenario class
 * (name, timeout, retries), every overload control at its default. */
enum dm_engine { ENG_THREADS, ENG_AX, ENG_AX_AUTO };
enum dm_retry { RETRY_NONE, RETRY_FIXED, RETRY_EXP };

/* A configuration under test. */
struct dm_profile {
    char name[DM_NAME_MAX];
    enum dm_engine engine;
    unsigned cap;             /* max_concurrency, or the pool's thread count */
    unsigned queue[DM_NPRIO]; /* bucket bounds; 0 = unbounded */
    double shed_ratio;        /* ax only */
    enum dm_retry retry;
    double retry_base_ms, retry_max_ms, retry_jitter_ms;
    unsigned max_retry;
    bool retry_low;    /* false: LOW is never retried (seed §4.2) */
    double timeout_ms; /* one timeout for every task; 0 = per class */
    char about[320];   /* one line for the report */
};

struct dm_scenario {
    char origin[DM_PATH_MAX]; /* "built-in", "built-in (short)" or the file */
    double speed;
    uint64_t seed;
    double mix[DM_NPRIO];            /* HIGH/NORMAL/LOW shares of the traffic */
    double drain_ms;                 /* after the last phase: time to finish the backlog */
    double deadline_ms;              /* a success counts as goodput within this of its submit */
    double ctx_bytes;                /* business context a task carries (seed §4.3: 2 KB) */
    char upstream_base[DM_SPEC_MAX]; /* keys every endpoint gets (capacity=, overload=) */
    unsigned ncls, nph, nprof;
    struct dm_class cls[DM_MAX_CLASSES];
    struct dm_phase ph[DM_MAX_PHASES];
    struct dm_profile prof[DM_MAX_PROFILES];
};

/* The built-in scenarios: "overload" (the default) and "retry-storm".
 * -1 for an unknown name. */
int dm_scenario_builtin(struct dm_scenario *sc, const char *name, bool short_mode);
extern const char *const dm_scenario_names; /* "overload, retry-storm" */
/* The degraded stretch: from the first phase with upstream= keys to the end
 * of the last one; false if no phase changes the upstream. */
bool dm_degraded_window(const struct dm_scenario *sc, double *from_ms, double *to_ms);
/* Replace *sc by the file's scenario; on error, err says FILE:LINE: why. */
int dm_scenario_file(struct dm_scenario *sc, const char *path, char *err, size_t errlen);
void dm_scenario_print(const struct dm_scenario *sc, FILE *f);
double dm_scenario_length_ms(const struct dm_scenario *sc); /* phases, without the drain */
/* The phase in force at incident time t_ms (the last one after the end). */
unsigned dm_phase_at(const struct dm_scenario *sc, double t_ms);
int dm_parse_duration(const char *s, double *ms); /* "300ms", "1.5s", "2m"; bare = s */

/* ---- traffic (traffic.c) -------------------------------------------------- */

struct dm_arrival {
    double t_ms;   /* incident time of the submission */
    unsigned prio; /* DM_HIGH.. */
    unsigned cls;
};

struct dm_traffic {
    const struct dm_scenario *sc;
    uint64_t rng;
    unsigned phase;
    double t_ms;
    bool done;
};

void dm_traffic_init(struct dm_traffic *tr, const struct dm_scenario *sc);
/* The next arrival; false once the last phase has ended. */
bool dm_traffic_next(struct dm_traffic *tr, struct dm_arrival *a);
uint64_t dm_rand(uint64_t *state);
double dm_rand_unit(uint64_t *state);

/* ---- histogram (hist.c) ---------------------------------------------------- */

#define DM_HIST_BITS 4
#define DM_HIST_SUB (1u << DM_HIST_BITS)
#define DM_HIST_N (44 * DM_HIST_SUB) /* microseconds up to 2^47 */

struct dm_hist {
    _Atomic uint64_t b[DM_HIST_N];
    _Atomic uint64_t max_us;
};

void dm_hist_add(struct dm_hist *h, uint64_t us);
/* Quantile (microseconds) of the counts in c[DM_HIST_N]; -1 if empty. */
double dm_hist_quantile(const uint64_t *c, double q);
/* Snapshot the counters (for windows: subtract an older snapshot). */
void dm_hist_snapshot(const struct dm_hist *h, uint64_t *out);
uint64_t dm_hist_total(const uint64_t *c);

/* ---- results (run.c fills them in a child; the parent reads them) --------- */

enum dm_outcome {
    OUT_SUCCEEDED,
    OUT_FAILED,
    OUT_TIMED_OUT,
    OUT_CANCELLED,
    OUT_SHED,
    OUT_REJECTED,
    DM_NOUT
};

/* Time series, one point per sample; times in incident ms, NaN = no data. */
enum dm_series {
    S_T, /* incident time of the sample */
    S_Q_HIGH,
    S_Q_NORMAL,
    S_Q_LOW,   /* queued per bucket */
    S_DELAYED, /* waiting out a retry back-off */
    S_RUNNING,
    S_LIMIT, /* slots in use, the cap */
    S_WAIT_HIGH,
    S_WAIT_NORMAL,
    S_WAIT_LOW, /* wait p99 of tasks started recently */
    S_LAT_P50,
    S_LAT_P99, /* response time of answered requests */
    S_UP_MEAN,
    S_UP_INFLIGHT, /* ax-upstream: service time, requests it holds */
    S_RSS_MB,
    S_THREADS,
    S_GENERATED,
    S_ADMITTED,
    S_REFUSED,
    S_SUCCEEDED,
    S_FAILED,
    S_TIMED_OUT,
    S_REQUESTS,
    S_LAT_ALL_P50,
    S_LAT_ALL_P99, /* every call, a timed-out one counted at its timeout (censored) */
    S_TIMEOUT_PCT, /* % of the window's calls that timed out */
    S_WAIT_ALL,    /* wait p99 of tasks started recently, every priority */
    DM_NSERIES
};

/* HTTP statuses counted per class: 100..599 by code, 0 = no answer (the
 * call timed out, was cancelled, or the connection failed). */
#define DM_NSTATUS 600

/* Per task class, ax-auto only: what ax_class_stats_get says, sampled. */
enum dm_class_series {
    CS_LIMIT,           /* the class's concurrency limit */
    CS_IN_FLIGHT,       /* attempts of the class holding a slot */
    CS_QUEUED,          /* waiting in a bucket */
    CS_BREAKER,         /* 0 closed, 1 half-open, 2 open */
    CS_BUDGET_LEFT,     /* retries the budget allows now */
    CS_RETRIES_ALLOWED, /* cumulative */
    CS_RETRIES_DENIED,  /* cumulative */
    CS_EXPIRED,         /* cumulative: failed at dispatch past the queue-time budget */
    CS_OPEN_REJECTED,   /* cumulative: refused or failed with AX_EOPEN */
    CS_MARK,            /* slow start's mark: the limit doubles back up to it; 0 none */
    DM_NCS
};

struct dm_dist {
    double p50, p99, max; /* incident ms; -1 if no sample */
    uint64_t count;
};

struct dm_result {
    char name[DM_NAME_MAX];
    bool ran, ok;
    char error[256];
    double wall_s, incident_s;
    uint64_t generated, generated_by[DM_NPRIO];
    uint64_t out[DM_NPRIO][DM_NOUT]; /* every generated task ends in exactly one */
    uint64_t admitted[DM_NPRIO];
    uint64_t started[DM_NPRIO];            /* tasks that began at least one attempt */
    uint64_t low_started_in_peak;          /* LOW first starts while the peak phase ran */
    uint64_t on_done_calls, on_done_dupes; /* ax: terminal callbacks */
    uint64_t retries, requests, answered, upstream_requests, upstream_max_in_flight;
    uint64_t ev_submitted, ev_terminal, ev_dropped; /* ax lifecycle events */
    uint64_t lingering, orphans;
    struct dm_dist wait[DM_NPRIO]; /* submit -> first start, incl. never started */
    struct dm_dist run;            /* every attempt */
    double max_attempt_ms;         /* longest attempt, as the task function saw it */
    double max_slot_ms;            /* longest an attempt held its slot (the engine's
                                      account; the thread pool: max_attempt_ms) */
    double max_timeout_ms;         /* the longest timeout any task had */
    uint64_t max_in_flight, limit; /* slots in use (sampled), the cap */
    uint64_t max_in_task;          /* task functions executing at once (exact) */
    uint64_t max_waiting;          /* admitted, not started yet (exact, demo-counted) */
    uint64_t met_full;             /* admitted tasks that arrived while every slot was busy */
    uint64_t met_full_by[DM_NPRIO];
    double max_over_ms;        /* longest a function ran past its deadline */
    uint64_t overdue;          /* attempts past their deadline + slack: orphans */
    uint64_t late;             /* attempts back after their deadline at all */
    double stall_ms;           /* the worst the machine delayed the demo's own wake-up */
    double slack_ms;           /* goal 3's slack: dm_slack_ms + stall_ms */
    double max_submit_ms;      /* the longest one submission took (the engine blocked) */
    double max_sample_ms;      /* the longest one sample took */
    double cpu_pressure_pct;   /* share of the run some thread waited for a CPU; -1 n/a */
    uint64_t orphan_allowance; /* ax: max_orphans; the thread pool: 0 */
    uint64_t status[DM_MAX_CLASSES][DM_NSTATUS]; /* upstream answers per class */
    uint64_t max_queued;                         /* all buckets together */
    uint64_t queue_bound;                        /* 0 = unbounded */
    double peak_rss_mb;
    unsigned peak_threads;
    /* The overload measures (tools/README.md, "Reading the results"). */
    struct dm_dist wait_high_peak; /* HIGH tasks submitted during the peak */
    struct dm_dist wait_steady;    /* every task submitted during the first phase */
    uint64_t degraded_tasks;       /* admitted while degraded, ended by the engine */
    uint64_t degraded_requests;    /* ... the upstream requests they made */
    uint64_t max_task_requests;    /* the most requests one task made */
    double recovery_ms;            /* after the upstream recovered; -1: never, NAN: n/a */
    double recovery_limit_ms;      /* the wait p99 it had to get back under */
    double recovery_window_ms;     /* the starts that first good p99 covered: the last
                                      recovery_window_ms of incident time (NAN: n/a) */
    /* The upstream's own recovery, as its answers show it (NAN: n/a): their
     * p50 in the steady phase (mean of the samples), at the end of the
     * degradation, and from when after that end it stayed within
     * ANSWERS_BACK (1.5) x the steady figure until the traffic ended. Abandoned calls the upstream still
     * works on (ax-upstream's capacity= counts them) keep it slow. */
    double ans_p50_steady_ms, ans_p50_at_recovery_ms, ans_back_ms;
    uint64_t good;                 /* succeeded within the scenario's deadline */
    uint64_t good_degraded;        /* ... of those submitted while degraded */
    uint64_t open_refused;         /* AX_EOPEN at submit (in OUT_REJECTED) */
    uint64_t open_failed, expired; /* AX_EOPEN, AX_EEXPIRED terminal failures (in OUT_FAILED) */
    uint64_t budget_denied;        /* failures whose retry the budget refused (in their state) */
    unsigned nsamples;
    double sample_ms; /* wall ms between samples */
    float series[DM_NSERIES][DM_MAX_SAMPLES];
    unsigned nclasses; /* ax task classes sampled (ax-auto), 0 otherwise */
    float cls[DM_MAX_CLASSES][DM_NCS][DM_MAX_SAMPLES];
};

/* ---- running (run.c, eng_ax.c, eng_threads.c, upstream.c) ------------------ */

struct dm_run_opts {
    const struct dm_scenario *sc;
    const struct dm_profile *prof;
    char base_url[DM_URL_MAX]; /* class paths are appended */
    bool own_upstream;         /* ax-upstream: /stats is there */
    uint64_t t0_ns;            /* ax_now_ns() when the upstream's schedule began */
    bool tty;                  /* progress on one rewritten line */
};

/* Run one configuration in this process and fill *r. */
void dm_run(const struct dm_run_opts *o, struct dm_result *r);

/* ax-upstream, started for one configuration. */
struct dm_upstream {
    int pid;
    int log_fd; /* its stderr, kept for an error message */
    char base_url[DM_URL_MAX];
};
int dm_upstream_start(const char *exe, const struct dm_scenario *sc, struct dm_upstream *u,
                      char *err, size_t errlen);
void dm_upstream_stop(struct dm_upstream *u);
/* Fetch base/stats (bounded by timeout_ms); fills what it finds. */
struct dm_upstream_stats {
    bool ok;
    uint64_t requests, in_flight, max_in_flight, lat_count;
    double lat_mean_ms;
};
void dm_upstream_stats(void *curl_easy, const char *base, long timeout_ms,
                       struct dm_upstream_stats *st);
/* 0 if url answers a GET within timeout_ms (its HTTP status in *status if
 * not NULL), else -1 with curl's reason. */
int dm_url_check(const char *url, long timeout_ms, long *status, char *err, size_t errlen);
/* url.c: 0 if url is a base URL the tools take (http:// or https://, a
 * host, libcurl's syntax, short enough for a class path after it), else -1
 * with the reason, without the flag's name. Text only: nothing is sent. */
int dm_url_base_check(const char *url, char *err, size_t errlen);

/* ---- verdicts (verdict.c) --------------------------------------------------- */

enum dm_mark { MARK_PASS, MARK_FAIL, MARK_NA };
struct dm_verdict {
    const char *goal; /* "1 concurrency cap", ... */
    enum dm_mark mark;
    char text[400];
};
#define DM_NGOALS 5
/* ax-auto's targets (issue 12), judged against seed-tuned in the same run. */
#define DM_NTARGETS 6
void dm_targets(const struct dm_scenario *sc, const struct dm_result *autor,
                const struct dm_result *tuned, struct dm_verdict v[DM_NTARGETS]);
/* The overload measures. */
double dm_requests_per_degraded_task(const struct dm_result *r);            /* NAN: n/a */
double dm_goodput(const struct dm_scenario *sc, const struct dm_result *r); /* per s */
double dm_high_success(const struct dm_result *r);                          /* 0..1 */
void dm_verdicts(const struct dm_scenario *sc, const struct dm_profile *p,
                 const struct dm_result *r, struct dm_verdict v[DM_NGOALS]);
const char *dm_mark_name(enum dm_mark m);
/* How late past its timeout an attempt may end (incident ms): the time a
 * worker needs to notice the deadline (a run adds the worst stall it saw
 * the machine inflict on its own thread: dm_result.slack_ms). */
double dm_slack_ms(const struct dm_scenario *sc);
/* Requests answered 2xx, and all requests counted per class. */
uint64_t dm_answered_2xx(const struct dm_result *r);
uint64_t dm_status_total(const struct dm_result *r);
/* True when most HTTP answers were not 2xx, or no request got one (calls
 * that got no answer at all, timeouts, do not count against it): the
 * upstream is not serving the class paths, and the verdicts would judge
 * nothing. */
bool dm_upstream_failing(const struct dm_result *r);
/* True when the machine held the demo's own thread off the CPU for more than
 * 100 ms of wall time, or when some thread waited for a CPU more than 80 % of
 * the run (Linux PSI): the run's timings then say more about the machine. */
bool dm_machine_stalled(const struct dm_scenario *sc, const struct dm_result *r);
/* A class's `top` commonest statuses, "200:2650 503:80 none:12 other:3"
 * ("none": no HTTP answer; "other:N": the rest). DM_NSTATUS shows them all. */
void dm_status_text(const struct dm_result *r, unsigned cls, unsigned top, char *out, size_t len);

/* ---- report (report.c) ------------------------------------------------------ */

int dm_write_json(const char *path, const struct dm_scenario *sc, const char *url,
                  struct dm_result *const *res, unsigned n, char *err, size_t errlen);
int dm_write_html(const char *path, const struct dm_scenario *sc, const char *url,
                  struct dm_result *const *res, unsigned n, char *err, size_t errlen);

/* Helpers. */
/* Upstream requests per task sent at least once: the amplification that
 * retries add (1.00 = none). Tasks refused at the door or still queued when
 * the run ended sent nothing and are left out. */
double dm_requests_per_task(const struct dm_result *r);
/* Upstream requests per task generated: the load per unit of traffic,
 * which refusing at the door lowers too. */
double dm_requests_per_generated(const struct dm_result *r);
uint64_t dm_total(const struct dm_result *r, enum dm_outcome o);
uint64_t dm_sum_admitted(const struct dm_result *r);
const struct dm_profile *dm_profile_find(const struct dm_scenario *sc, const char *name);

#endif
