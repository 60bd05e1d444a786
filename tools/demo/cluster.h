/* cluster.h - ax-demo --cluster N (issue 13): the demo's traffic through a
 * shared ax_redis queue served by N ax-worker processes, one of them killed
 * with SIGKILL in the middle of the peak, and an exact account of every
 * admitted message from the workers' ledgers and Redis' dead letters.
 *
 *   cluster.c         the run: redis-server, ax-upstream, the workers, the
 *                     producer, the kill, the drain, the join
 *   cluster_report.c  the text table, results.json's "cluster" section and
 *                     report.html's cluster section
 */
#ifndef AX_DEMO_CLUSTER_H
#define AX_DEMO_CLUSTER_H

#include "demo.h"

#define DM_CLUSTER_MAX 16     /* workers */
#define DM_CLUSTER_BINS 1200  /* per-worker executions over time */
#define DM_CLUSTER_QUEUE "demo"

struct dm_cluster_opts {
    const struct dm_scenario *sc;
    unsigned n;                 /* workers, 2..DM_CLUSTER_MAX */
    const char *worker_exe;     /* ax-worker */
    const char *upstream_exe;   /* ax-upstream */
    const char *out;            /* the output directory (ledgers and logs go there too) */
    bool tty;
};

struct dm_cluster_worker {
    char name[16];
    bool killed;          /* SIGKILLed in the peak */
    bool summary;         /* printed its counters at SIGTERM (the killed one cannot) */
    int exit_status;      /* -signal when killed by one */
    /* From its ledger (exact, the killed worker's too): */
    uint64_t executed, ok, failed, timed_out, cancelled;
    uint64_t redeliveries; /* executions of a delivery > 1 (a message it claimed) */
    uint64_t duplicates;   /* executions of an entry another execution (earlier
                              delivery) had run already */
    /* From its summary at SIGTERM; the killed worker's dead letters are the
     * total's rest (dead_derived). */
    uint64_t dead, claimed, succeeded_acked, retried, ack_lost, redis_errors;
    bool dead_derived;
    float bins[DM_CLUSTER_BINS]; /* executions per bin */
};

struct dm_cluster_result {
    bool ok;
    char error[512];
    unsigned n, killed;           /* index of the killed worker */
    double kill_t_ms;             /* incident time of the kill */
    uint64_t kill_held;           /* messages it held then (XPENDING) */
    double bin_ms;                /* incident ms per bin */
    unsigned nbins;
    double incident_s, wall_s;
    unsigned max_retry, slots;
    uint32_t visibility_ms, claim_ms; /* wall */
    /* The producer: */
    double max_batch_ms;          /* the longest one submit round trip took (wall) */
    uint64_t generated, admitted, shed, rejected, unconfirmed; /* unconfirmed: transport
                                                                  error, fate unknown */
    /* The join, over admitted ids: */
    uint64_t terminal_ok;     /* ids with at least one successful execution */
    uint64_t terminal_dead;   /* ids in the dead-letter stream */
    uint64_t lost;            /* admitted ids with no terminal record */
    uint64_t multi;           /* ids with more than one terminal record */
    uint64_t unknown_ids;     /* ids in a ledger or dead letter that no producer admitted */
    uint64_t executed, redeliveries, duplicates;
    /* Redis at the end: */
    bool drained;             /* streams, pending lists and delayed set empty */
    double drain_s;           /* wall seconds from the end of the traffic */
    uint64_t stats_succeeded, stats_retried, stats_dead, stats_claimed, dead_stream;
    uint64_t left_length, left_pending, left_delayed;
    uint64_t upstream_requests;
    struct dm_cluster_worker w[DM_CLUSTER_MAX];
};

/* 0 when the run was carried out (r->lost may still be > 0), else -1 with
 * r->error set (no redis-server, a process that did not start). */
int dm_cluster_run(const struct dm_cluster_opts *o, struct dm_cluster_result *r);

void dm_cluster_print(const struct dm_scenario *sc, const struct dm_cluster_result *r);
int dm_cluster_write_json(const char *path, const struct dm_scenario *sc,
                          const struct dm_cluster_result *r, char *err, size_t errlen);
int dm_cluster_write_html(const char *path, const struct dm_scenario *sc,
                          const struct dm_cluster_result *r, char *err, size_t errlen);

#endif
