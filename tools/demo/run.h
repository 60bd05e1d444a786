/* run.h - what run.c shares with the two engines that execute tasks:
 * eng_ax.c (ax, the configuration under test) and eng_threads.c (the seed's
 * §1.1 "before": a fixed pool of threads doing blocking calls).
 *
 * One run per process (a forked child), so the run is a global: task
 * functions and callbacks reach it without an argument to thread through.
 */
#ifndef AX_DEMO_RUN_H
#define AX_DEMO_RUN_H

#include "demo.h"

#define DM_MAX_PAST 65536 /* late attempts remembered one by one */

/* One generated task. Its business context (seed §4.3: ~2 KB) follows the
 * struct and lives from submission to the terminal state, as the caller's
 * request would. */
struct dm_task {
    struct dm_task *next; /* the thread pool's queue */
    uint64_t submit_ns;
    unsigned prio, cls;
    atomic_bool started;
    atomic_uint attempts; /* upstream requests it made */
    bool in_peak;         /* submitted during the peak (the busiest phase) */
    bool in_steady;       /* ... during the first phase */
    bool in_degraded;     /* ... while a phase changed the upstream */
    char ctx[];
};

struct dm_gauges {
    uint64_t queued[DM_NPRIO], delayed, running, limit;
};

struct dm_engine_ops {
    int (*start)(char *err, size_t errlen);
    /* 0: admitted; OUT_SHED or OUT_REJECTED: refused (the task is the caller's). */
    int (*submit)(struct dm_task *t);
    void (*gauges)(struct dm_gauges *g);
    bool (*idle)(void);
    /* Traffic is over: end every task still in the system, wait for the rest. */
    void (*stop)(void);
    /* Engine-specific figures (retries, events, lingering), then free all. */
    void (*finish)(struct dm_result *r);
    /* Sample i of the per-class series (ax-auto); NULL: no classes. */
    void (*class_sample)(struct dm_result *r, unsigned i);
};

extern const struct dm_engine_ops dm_engine_ax, dm_engine_threads;

struct dm_run {
    const struct dm_run_opts *o;
    const struct dm_scenario *sc;
    const struct dm_profile *p;
    double speed;
    char url[DM_MAX_CLASSES][DM_URL_MAX];
    uint64_t timeout_wall_ms[DM_MAX_CLASSES]; /* the timeout each class's tasks get */
    double peak_from_ms, peak_to_ms;          /* incident time of the busiest phase */
    double steady_to_ms;                      /* end of the first phase */
    bool degraded;                            /* some phase changes the upstream: */
    double degraded_from_ms, degraded_to_ms;  /* from the first such phase to the last */

    _Atomic uint64_t out[DM_NPRIO][DM_NOUT];
    _Atomic uint64_t generated_by[DM_NPRIO], admitted[DM_NPRIO], started[DM_NPRIO];
    _Atomic uint64_t generated, requests, answered, low_started_in_peak;
    _Atomic uint64_t in_fn, max_in_fn, max_attempt_us;
    _Atomic uint64_t on_done_calls;
    /* Measured on the task functions' side, independently of the engine:
     * tasks admitted and not started yet (exact peak), tasks that arrived
     * while every slot was busy, how far past its deadline a function
     * returned, and the attempts that returned later than the slack allows
     * (orphans: the engine ended them while their function still ran). */
    _Atomic uint64_t waiting, max_waiting, met_full, met_full_by[DM_NPRIO];
    _Atomic uint64_t max_over_us;
    _Atomic uint32_t npast;                /* attempts that came back after their deadline */
    uint32_t past_us[DM_MAX_PAST];         /* by how much, wall us (one writer per index) */
    uint64_t max_stall_us;                 /* the sampler's worst oversleep: the machine's stalls */
    uint64_t max_submit_us, max_sample_us; /* the longest submit call, the longest sample */
    _Atomic uint64_t status[DM_MAX_CLASSES][DM_NSTATUS];

    struct dm_hist wait[DM_NPRIO]; /* wall microseconds */
    struct dm_hist attempt;        /* every attempt */
    struct dm_hist latency;        /* answered requests */
    struct dm_hist latency_all;    /* and timed-out ones, at their timeout (censored) */
    _Atomic uint64_t censored;     /* calls counted at their timeout */

    /* The overload measures (tools/README.md, "Reading the results"). */
    struct dm_hist wait_high_peak, wait_steady;
    _Atomic uint64_t degraded_tasks, degraded_requests, good, good_degraded, max_task_requests;
    _Atomic uint64_t open_refused, open_failed, expired, budget_denied; /* ax-auto */
};

extern struct dm_run dm_run_g;

/* Bookkeeping the engines call. begin returns the attempt's start time.
 * ax runs on_done when an attempt's deadline or a cancel ends it, and the
 * function may still be running then (an orphan), or not yet have reached
 * its first line: so the ax engine accounts the end in on_done
 * (dm_task_account) and frees the task in on_release (ax_spec.on_release),
 * once no function can touch it. begin and account may then meet on one
 * task: whichever comes first counts its wait. */
uint64_t dm_attempt_begin(struct dm_task *t);
void dm_attempt_end(unsigned cls, uint64_t start_ns, long http_status);
/* The task's terminal state, counted; the task stays allocated. */
void dm_task_account(struct dm_task *t, enum dm_outcome o);
/* dm_task_account, then free the task (for an engine whose task function
 * has returned when the task ends). */
void dm_task_done(struct dm_task *t, enum dm_outcome o);

#endif
