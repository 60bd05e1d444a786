/* prom.h - Prometheus text exposition (format 0.0.4) of a metrics snapshot
 * (internal; see prom.c for the metric list).
 *
 * Cold path: runs on the thread that asks for metrics, never on a worker.
 * Allocates nothing, takes no lock, reads only the snapshot it is given.
 */
#ifndef AX_OBS_PROM_H
#define AX_OBS_PROM_H

#include <stddef.h>

#include "ax.h"
#include "hist.h"

/* Everything one exposition shows. Assemble it privately (ax_stats_get, then
 * ax_hist_merge of every worker's histograms into zeroed ones); rendering
 * reads it, so it must not change under ax_prom_render. */
struct ax_metrics_snapshot {
    ax_stats st;                        /* counters and gauges */
    uint64_t events_dropped;            /* ax_events_dropped */
    struct ax_hist wait[AX_PRIO_COUNT]; /* queue wait, ns, indexed by ax_priority */
    struct ax_hist run[AX_PRIO_COUNT];  /* run time, ns */
    unsigned nclasses;                  /* task classes (ids 1 .. nclasses) */
    ax_class_stats cls[AX_CLASS_MAX];   /* [id - 1] */
};

/* Render m into buf, snprintf-style: writes at most len bytes including a
 * terminating NUL (always written when len > 0) and returns the length of
 * the whole text without the NUL. The output was truncated iff the return
 * value >= len; call again with a buffer of return + 1 bytes. buf may be
 * NULL when len is 0 (to size the buffer). */
size_t ax_prom_render(const struct ax_metrics_snapshot *m, char *buf, size_t len);

/* Make appended text (ax_metrics_append: several libraries' or consumers'
 * texts one after another) a valid exposition: the text format allows one
 * HELP and one TYPE line per family and a family's samples as one group,
 * and Prometheus rejects a whole scrape that breaks either. Families of the
 * same name are merged where the first appears (its HELP and TYPE kept),
 * a sample whose name and labels repeat one before it is dropped, blank
 * lines go. Rewrites text[0..len) in place; returns the new length (<=
 * len). Leaves the text as it is when out of memory. */
size_t ax_prom_merge(char *text, size_t len);

/* The `le` bounds of the exposed histograms, in seconds, ascending; +Inf is
 * implied after the last. */
#define AX_PROM_NBOUNDS 21
extern const double ax_prom_bounds[AX_PROM_NBOUNDS];

/* Format v the way Prometheus' Go client does (strconv 'g', shortest
 * round-trip digits; "+Inf", "-Inf", "NaN"). out needs 32 bytes; returns
 * the length written (NUL not counted). */
size_t ax_prom_format_double(double v, char out[32]);

#endif /* AX_OBS_PROM_H */
