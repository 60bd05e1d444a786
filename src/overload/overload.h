/* overload.h - the three controllers of overload control (DESIGN.md §11),
 * as pure state machines: no lock, no clock, no allocation. The caller
 * passes the time (CLOCK_MONOTONIC ns) and serialises calls on one object
 * (class.c holds the class's lock around them). Unit tests drive them with
 * synthetic series (tests/test_limit.c, test_budget.c, test_breaker.c).
 *
 *  - limit.c   adaptive concurrency: the limit follows measured latency
 *              (Netflix concurrency-limits Gradient2; Envoy's adaptive
 *              concurrency filter);
 *  - budget.c  retry budget: retries stay under a share of first attempts
 *              over a sliding window, plus a floor per second (Finagle's
 *              RetryBudget, gRPC retry throttling);
 *  - breaker.c circuit breaker: closed -> open on a failure rate over a
 *              window with a minimum of calls, half-open probes
 *              (resilience4j's CircuitBreaker).
 */
#ifndef AX_OVERLOAD_H
#define AX_OVERLOAD_H

#include <stdbool.h>
#include <stdint.h>

/* ---- adaptive concurrency limit (limit.c) ------------------------------- */

/* Defaults the class config uses (limit.c's header says why):
 * a window closes after 100 ms and at least 10 samples, the baseline spans
 * 600 windows (about 60 s at full rate), a new estimate weighs 0.2, and the
 * latency may reach 1.5 x its baseline before the limit drops. */
#define AX_LIMIT_DEFAULT_SMOOTHING 0.2
#define AX_LIMIT_DEFAULT_TOLERANCE 1.5
#define AX_LIMIT_DEFAULT_WINDOW_NS 100000000ull /* 100 ms */
#define AX_LIMIT_DEFAULT_WINDOW_SAMPLES 10u
#define AX_LIMIT_DEFAULT_LONG_WINDOW 600u
/* The baseline's first windows are averaged plainly, not exponentially:
 * the first one alone ends on the fastest attempts (limit.c: the warm-up).
 * Gradient2's warm-up is 10 too. */
#define AX_LIMIT_WARMUP_WINDOWS 10u
/* ... but only windows without drops and at most this many times the
 * baseline: a bigger jump is a slowdown, not the start's bias. */
#define AX_LIMIT_WARMUP_MAX_RATIO 3.0
/* The gradient's floor: one window never cuts the estimate by more than half
 * (Gradient2's 0.5); a window with dropped samples has a gradient of at most
 * 1 - dropped/samples, never below this floor. */
#define AX_LIMIT_MIN_GRADIENT 0.5
/* Growth beyond the queue headroom while the window's latency is below its
 * baseline: the gradient may reach long/short, at most this (Envoy's 2). */
#define AX_LIMIT_MAX_GROWTH 2.0

struct ax_limit_cfg {
    unsigned min;       /* >= 1 */
    unsigned max;       /* >= min */
    unsigned initial;   /* in [min, max] */
    double smoothing;   /* (0, 1]: weight of a new estimate (Gradient2: 0.2) */
    double tolerance;   /* >= 1: long/short latency ratio tolerated before the
                           limit drops (Gradient2's rttTolerance 1.5) */
    uint64_t window_ns; /* a short-latency window closes after this long ... */
    unsigned window_samples; /* ... and at least this many samples (>= 1) */
    unsigned long_window; /* windows (not samples) the long (baseline)
                             exponential average spans, >= 1 (600) */
};

struct ax_limit {
    struct ax_limit_cfg cfg;
    double limit;          /* current, in [min, max] */
    double long_rtt;       /* baseline latency, exponential average (ns) */
    double short_sum;      /* latency sum of the open window (ns) */
    unsigned short_n;      /* samples in the open window */
    unsigned short_dropped; /* ... of which dropped */
    unsigned max_inflight; /* most in flight seen in the open window */
    uint64_t window_start; /* ns */
    bool has_long;
    uint64_t updates;      /* windows closed */
    double last_short;     /* average latency of the last closed window (ns), for stats */
    double last_gradient;  /* the gradient that window applied, for stats and tests */
    double mark;           /* slow start doubles the limit up to here; 0: none (limit.c) */
    bool slow;             /* the last window was a slow-start doubling */
    uint64_t doublings;    /* slow-start doublings so far, for stats */
    unsigned clean_run;    /* clean windows in a row (limit.c) */
    unsigned unclean_run;  /* windows since the last clean one; a mark this old is dropped */
    uint64_t last_drop_ns; /* when the last dropped sample came in (0: never) */
    uint64_t drop_rtt_ns;  /* its latency: the timeout, so the storm's last attempts are back
                              drop_rtt_ns after it */
    uint64_t quiet_until;  /* the attempts beside the drops are past their timeouts by
                              then: the wait's upper bound, whatever the count */
    unsigned drop_pending; /* attempts in flight beside it then, not yet back; UINT_MAX:
                              none was, the timeout decides (limit.c) */
};

void ax_limit_init(struct ax_limit *l, const struct ax_limit_cfg *cfg, uint64_t now);
/* One more, up to max: the caller saw no sample for a long while with
 * every slot held and work waiting (sched.c). */
void ax_limit_nudge(struct ax_limit *l);
/* Start over from `value` (clamped to [min, max]): an operator's new bound. */
void ax_limit_restart(struct ax_limit *l, unsigned value);
/* One finished attempt: its latency, the attempts in flight when it ended,
 * and whether it was dropped (timed out: its latency is a lower bound). May
 * close the window and move the limit. A dropped sample counts at rtt_ns in
 * the window's mean; a window with drops never grows the limit and its
 * gradient is at most 1 - dropped/samples (limit.c says why). */
void ax_limit_sample(struct ax_limit *l, uint64_t now, uint64_t rtt_ns, unsigned inflight,
                     bool dropped);
unsigned ax_limit_get(const struct ax_limit *l);
/* As ax_limit_sample (whose drop waits its own latency, and which takes
 * now - rtt_ns < the last drop's time as "began before it"); a drop's wait
 * lasts up to timeout_ns after it (how long the attempts beside it may
 * still run), whatever its own latency, and before_drop says whether this
 * attempt began before the last drop, that is, was among the attempts in
 * flight that drop noted (class.c knows it from a count, not a clock). */
void ax_limit_sample_timeout(struct ax_limit *l, uint64_t now, uint64_t rtt_ns, unsigned inflight,
                             bool dropped, uint64_t timeout_ns, bool before_drop);
/* Move max (at least min); the limit and the slow start's mark follow it
 * down. */
void ax_limit_set_max(struct ax_limit *l, unsigned max);
/* An attempt is back without a sample: it never ran (a hand-back, or an end
 * between dispatch and start), so it never reached the upstream. If it
 * began before the last drop, that drop has one fewer to wait for. */
void ax_limit_back(struct ax_limit *l, bool before_drop);

/* ---- retry budget (budget.c) --------------------------------------------- */

#define AX_BUDGET_SLOTS 10 /* the window is kept as this many sub-windows */
/* Defaults the class config uses: Finagle's 20 %, 10 retries/s, 10 s. */
#define AX_BUDGET_DEFAULT_RATIO 0.2
#define AX_BUDGET_DEFAULT_MIN_PER_S 10.0
#define AX_BUDGET_DEFAULT_WINDOW_NS 10000000000ull
/* gRPC's retry throttling, as its service configs usually set it. */
#define AX_THROTTLE_DEFAULT_TOKENS 10.0
#define AX_THROTTLE_DEFAULT_RATIO 0.1

struct ax_budget_cfg {
    double ratio;          /* retries per first attempt allowed, in [0, 10] (0.2) */
    double min_per_s;      /* retries per second allowed whatever the ratio (10) */
    uint64_t window_ns;    /* sliding window (10 s) */
    double max_tokens;     /* throttle: gRPC's max_tokens; 0 = no throttle (10) */
    double token_ratio;    /* throttle: tokens a success gives back (0.1) */
};

struct ax_budget {
    struct ax_budget_cfg cfg;
    uint64_t slot_ns;      /* window_ns / AX_BUDGET_SLOTS */
    uint64_t epoch;        /* index of the newest sub-window */
    uint32_t firsts[AX_BUDGET_SLOTS], retries[AX_BUDGET_SLOTS];
    /* Retries allowed whose attempt has not started yet (a back-off, a
     * bucket, a worker's to-start list): they take room as the window's
     * do, and enter the window when they start or leave it when dropped. */
    uint64_t reserved;
    uint64_t allowed, denied; /* totals since init */
    double tokens;         /* throttle: starts at max_tokens */
};

void ax_budget_init(struct ax_budget *b, const struct ax_budget_cfg *cfg, uint64_t now);
/* A first attempt started. */
void ax_budget_first(struct ax_budget *b, uint64_t now);
/* May this retry go? true: counted as a retry in the window; false: denied
 * (counted in `denied`). Allowed while retries in the window + 1 <=
 * ratio x first attempts in the window + min_per_s x window seconds. */
bool ax_budget_try_retry(struct ax_budget *b, uint64_t now);
/* A refusal decided by a caller that checks the room with ax_budget_left
 * first (class.c: several parties decide, only the winner acts). */
void ax_budget_deny(struct ax_budget *b);
/* A retry decided long before its attempt starts (class.c: a back-off, then
 * a bucket): reserve takes its room at the decision, whatever the room is
 * (checked before, as for spend); commit counts it in the window when its
 * attempt starts; unreserve gives the room back when it is dropped before
 * that (cancelled, past its deadline, shut down, refused at dispatch): like
 * a denied retry, it never reached the upstream. */
void ax_budget_reserve(struct ax_budget *b);
void ax_budget_commit(struct ax_budget *b, uint64_t now);
void ax_budget_unreserve(struct ax_budget *b);
/* Whole retries still allowed in the window now (>= 0; >= 1 exactly when
 * ax_budget_try_retry would allow one), for stats and messages. */
double ax_budget_left(struct ax_budget *b, uint64_t now);
/* Throttle: the outcome of an attempt (failed: -1 token, else +token_ratio,
 * within [0, max_tokens]). */
void ax_budget_outcome(struct ax_budget *b, bool failed);
/* Throttle: are retries stopped, counting `pending` failures not yet
 * recorded with ax_budget_outcome? (tokens - pending <= max_tokens / 2;
 * always false without a throttle.) */
bool ax_budget_throttled(const struct ax_budget *b, unsigned pending);

/* ---- circuit breaker (breaker.c) ------------------------------------------ */

enum { AX_BRK_CLOSED = 0, AX_BRK_OPEN = 1, AX_BRK_HALF_OPEN = 2 };
#define AX_BREAKER_SLOTS 10 /* the closed window is kept as this many slots */
/* Defaults the class config uses (resilience4j's rate and probe count; a
 * 10 s time window of at least 20 calls; 5 s open). */
#define AX_BREAKER_DEFAULT_FAILURE_RATE 0.5
#define AX_BREAKER_DEFAULT_MIN_CALLS 20u
#define AX_BREAKER_DEFAULT_WINDOW_NS 10000000000ull
#define AX_BREAKER_DEFAULT_OPEN_NS 5000000000ull
#define AX_BREAKER_DEFAULT_HALF_OPEN_CALLS 5u

struct ax_breaker_cfg {
    double failure_rate;   /* opens at >= this share of failed calls, (0, 1] (0.5) */
    unsigned min_calls;    /* ... over at least this many calls in the window (20) */
    uint64_t window_ns;    /* time-based sliding window (10 s), kept in 10 slots */
    uint64_t open_ns;      /* open this long, then half-open (5 s) */
    unsigned half_open_calls; /* permits handed out half-open (5, >= 1); once
                                 this many outcomes are in, the breaker closes
                                 if their failure rate is below failure_rate,
                                 else opens again */
};

struct ax_breaker {
    struct ax_breaker_cfg cfg;
    int state;
    uint64_t slot_ns, epoch;
    uint32_t calls[AX_BREAKER_SLOTS], fails[AX_BREAKER_SLOTS];
    uint64_t opened_at;    /* ns, when it last opened */
    unsigned probes_out;   /* half-open: permits of this spell handed out */
    unsigned probes_done, probes_failed;
    uint32_t spell;        /* half-open spells begun: names the permits' spell */
    uint64_t opened, rejected; /* times opened; calls refused */
};

void ax_breaker_init(struct ax_breaker *b, const struct ax_breaker_cfg *cfg, uint64_t now);
/* Advance time-driven transitions (open -> half-open) and return the state. */
int ax_breaker_poll(struct ax_breaker *b, uint64_t now);
/* May a call start now? Closed: yes. Open: no (counted in `rejected`).
 * Half-open: yes while permits remain (a permit is taken), else no (not
 * counted: it may wait). */
bool ax_breaker_allow(struct ax_breaker *b, uint64_t now);
/* The outcome of a call. Closed: counted in the window (may open it).
 * Open: ignored (the call began before it opened). Half-open: counted as a
 * probe's outcome whether or not this call took a permit (a call that began
 * while closed and ends now is evidence too); once half_open_calls outcomes
 * are in, it closes or opens again. */
void ax_breaker_record(struct ax_breaker *b, uint64_t now, bool failed);
/* The tag of the permit ax_breaker_allow just handed out half-open: its
 * spell, 1..255 (0 is "no permit" to a caller keeping it in a byte). */
static inline uint8_t ax_breaker_permit_tag(const struct ax_breaker *b)
{
    return (uint8_t)(b->spell % 255u + 1u);
}
/* A call that was allowed but ended with no outcome (cancelled): gives its
 * half-open permit back, if `tag` names the current spell. A permit of an
 * earlier spell (its verdict came from other outcomes while it was out) is
 * not this spell's to return: it would let one more probe out than
 * half_open_calls (review of 16d186c). Modulo 255 spells: a permit out for
 * 255 spells reads as current and frees one probe early. */
void ax_breaker_release(struct ax_breaker *b, uint64_t now, uint8_t tag);
/* Failure rate over the window now (0 if no call), for stats. */
double ax_breaker_failure_rate(struct ax_breaker *b, uint64_t now, unsigned *calls);

#endif
