/* stats.c - a queue's numbers as the server holds them (libax_redis).
 *
 * One pipelined round trip: XLEN and XPENDING (summary form) of the three
 * streams, ZCARD of the delayed set, XLEN of the dead letters, and the
 * counters the scripts keep in ax:{NAME}:stats. Not on a hot path: for
 * tools, dashboards and Prometheus scrapes.
 */
#define _GNU_SOURCE
#include "redis.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t as_u64(const redisReply *r)
{
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer > 0 ? (uint64_t)r->integer : 0;
    if (r->type == REDIS_REPLY_STRING)
        return strtoull(r->str, NULL, 10);
    return 0;
}

int ax_redis_queue_stats_get(ax_task *t, ax_redis_queue *q, int64_t timeout_ms,
                             ax_redis_queue_stats *out)
{
    if (!q || !out)
        return ax_fail_static(AX_EINVAL, "ax_redis_queue_stats_get: queue and out are required");
    memset(out, 0, sizeof *out);
    RTIMEOUT_CHECK("ax_redis_queue_stats_get", timeout_ms);
    enum { NCMD = 3 + 3 + 3 };
    const char *argv[NCMD][8];
    size_t lens[NCMD][8];
    struct rcmd cmds[NCMD];
    int n = 0;
    for (int k = 0; k < 3; k++) {
        argv[n][0] = "XLEN", argv[n][1] = q->key[k];
        cmds[n] = (struct rcmd){2, argv[n], lens[n]}, n++;
        argv[n][0] = "XPENDING", argv[n][1] = q->key[k], argv[n][2] = RGROUP;
        cmds[n] = (struct rcmd){3, argv[n], lens[n]}, n++;
    }
    argv[n][0] = "ZCARD", argv[n][1] = q->key[KEY_DELAYED];
    cmds[n] = (struct rcmd){2, argv[n], lens[n]}, n++;
    argv[n][0] = "XLEN", argv[n][1] = q->key[KEY_DEAD];
    cmds[n] = (struct rcmd){2, argv[n], lens[n]}, n++;
    const char *hm[] = {"HMGET", q->key[KEY_STATS], "succeeded", "retried", "dead", "claimed"};
    for (int i = 0; i < 6; i++)
        argv[n][i] = hm[i];
    cmds[n] = (struct rcmd){6, argv[n], lens[n]}, n++;
    for (int c = 0; c < n; c++)
        for (int i = 0; i < cmds[c].argc; i++)
            lens[c][i] = strlen(argv[c][i]);
    ax_redis *r = rq_conn_get(q);
    if (!r)
        return ax_fail_static(AX_ENOMEM, "ax_redis_queue_stats_get: out of memory");
    redisReply *reps[NCMD];
    int rc = rconn_pipeline(t, r, timeout_ms, (size_t)n, cmds, reps);
    rq_conn_put(q, r);
    if (rc)
        return rc;
    /* An error reply is an error (a trial read zeros for a stream key that
     * held a string), except XPENDING's before the group exists. */
    for (int c = 0; c < n && !rc; c++) {
        const redisReply *e = reps[c];
        bool pending = c < 6 && c % 2 == 1;
        if (e->type == REDIS_REPLY_ERROR &&
            !(pending && (strncmp(e->str, "NOGROUP", 7) == 0 || strstr(e->str, "no such key"))))
            rc = ax_fail(AX_ENET, "ax_redis_queue_stats_get: queue %s: %s (%s %s)", q->name,
                         e->str, argv[c][0], argv[c][1]);
    }
    if (rc) {
        for (int c = 0; c < n; c++)
            freeReplyObject(reps[c]);
        return rc;
    }
    static const ax_priority prio[3] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    for (int k = 0; k < 3; k++) {
        out->length[prio[k]] = as_u64(reps[2 * k]);
        const redisReply *p = reps[2 * k + 1]; /* an error when the group is not there yet */
        if (p->type == REDIS_REPLY_ARRAY && p->elements >= 1)
            out->pending[prio[k]] = as_u64(p->element[0]);
    }
    out->delayed = as_u64(reps[6]);
    out->dead_letters = as_u64(reps[7]);
    const redisReply *h = reps[8];
    if (h->type == REDIS_REPLY_ARRAY && h->elements == 4) {
        out->succeeded = as_u64(h->element[0]);
        out->retried = as_u64(h->element[1]);
        out->dead = as_u64(h->element[2]);
        out->claimed = as_u64(h->element[3]);
    }
    for (int c = 0; c < n; c++)
        freeReplyObject(reps[c]);
    return AX_OK;
}

struct out {
    char *buf;
    size_t len, pos;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->pos < o->len ? o->len - o->pos : 0;
    int n = vsnprintf(room ? o->buf + o->pos : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->pos += (size_t)n;
}

long ax_redis_queue_prometheus(const ax_redis_queue *q, const ax_redis_queue_stats *st, char *buf,
                               size_t len)
{
    if (!q || !st || (!buf && len))
        return ax_fail_static(AX_EINVAL, "ax_redis_queue_prometheus: queue, stats and buf");
    struct out o = {buf, len, 0};
    if (len)
        buf[0] = 0;
    static const ax_priority ps[3] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    put(&o, "# HELP ax_redis_queue_length Entries per stream (waiting + unacknowledged).\n"
            "# TYPE ax_redis_queue_length gauge\n");
    for (int k = 0; k < 3; k++)
        put(&o, "ax_redis_queue_length{queue=\"%s\",priority=\"%s\"} %" PRIu64 "\n", q->name,
            ax_priority_name(ps[k]), st->length[ps[k]]);
    put(&o, "# HELP ax_redis_queue_pending Delivered, not yet acknowledged.\n"
            "# TYPE ax_redis_queue_pending gauge\n");
    for (int k = 0; k < 3; k++)
        put(&o, "ax_redis_queue_pending{queue=\"%s\",priority=\"%s\"} %" PRIu64 "\n", q->name,
            ax_priority_name(ps[k]), st->pending[ps[k]]);
    put(&o,
        "# HELP ax_redis_queue_delayed Retries waiting out their back-off.\n"
        "# TYPE ax_redis_queue_delayed gauge\n"
        "ax_redis_queue_delayed{queue=\"%s\"} %" PRIu64 "\n"
        "# HELP ax_redis_queue_dead_letters Entries in the dead-letter stream.\n"
        "# TYPE ax_redis_queue_dead_letters gauge\n"
        "ax_redis_queue_dead_letters{queue=\"%s\"} %" PRIu64 "\n",
        q->name, st->delayed, q->name, st->dead_letters);
    const char *names[4] = {"succeeded", "retried", "dead", "claimed"};
    const char *help[4] = {"Messages that succeeded", "Failed attempts sent to the delayed set",
                           "Messages dead-lettered", "Entries taken over from another consumer"};
    const uint64_t v[4] = {st->succeeded, st->retried, st->dead, st->claimed};
    for (int i = 0; i < 4; i++)
        put(&o,
            "# HELP ax_redis_queue_%s_total %s.\n# TYPE ax_redis_queue_%s_total counter\n"
            "ax_redis_queue_%s_total{queue=\"%s\"} %" PRIu64 "\n",
            names[i], help[i], names[i], names[i], q->name, v[i]);
    return (long)o.pos;
}
