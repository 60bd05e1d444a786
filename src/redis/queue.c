/* queue.c - a queue's names and the producer side (libax_redis).
 *
 * A queue NAME owns the keys ax:{NAME}:high|normal|low|delayed|dead|conf|
 * stats (ax_redis.h). ax_redis_submit is one script call (script.c,
 * RS_SUBMIT): bounds and shed line are checked and the message added
 * atomically on the server, so producers on every machine agree on the
 * same AX_EFULL / AX_ESHED at the same point.
 *
 * Connections: a pool of idle ones under a mutex; a submit borrows one for
 * its single round trip and gives it back (a failed one too: it reconnects
 * on its next use, after its back-off). The pool holds as many as were ever
 * used at once.
 */
#define _GNU_SOURCE
#include "redis.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

static const char *const key_suffix[KEY_COUNT] = {"high",    "normal", "low",  "delayed",
                                                  "dead",    "conf",   "stats"};

int rq_stream_key(ax_priority p)
{
    return p == AX_PRIO_HIGH ? KEY_HIGH : p == AX_PRIO_LOW ? KEY_LOW : KEY_NORMAL;
}

char rq_prio_letter(ax_priority p)
{
    return p == AX_PRIO_HIGH ? 'h' : p == AX_PRIO_LOW ? 'l' : 'n';
}

void ax_redis_queue_config_default(ax_redis_queue_config *c)
{
    if (!c)
        return;
    memset(c, 0, sizeof *c);
    ax_redis_config_default(&c->conn);
    c->capacity[AX_PRIO_HIGH] = 10000;
    c->capacity[AX_PRIO_NORMAL] = 30000;
    c->capacity[AX_PRIO_LOW] = 10000;
    c->shed_ratio = 0.8;
}

static bool name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len >= AX_REDIS_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = n[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '_' || ch == '.' || ch == ':' || ch == '-';
        if (!ok)
            return false;
    }
    return true;
}

int ax_redis_queue_new(const ax_redis_queue_config *c, ax_redis_queue **out)
{
    if (!c || !out)
        return ax_fail_static(AX_EINVAL, "ax_redis_queue_new: config and out are required");
    *out = NULL;
    if (!c->name || !name_ok(c->name))
        return ax_fail_static(AX_EINVAL,
                              "ax_redis_queue_config.name must be 1-63 bytes of [A-Za-z0-9_.:-]");
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        if (c->capacity[p] == 0)
            return ax_fail(AX_EINVAL, "ax_redis_queue_config.capacity[%s] must be > 0",
                           ax_priority_name((ax_priority)p));
    if (!(c->shed_ratio > 0 && c->shed_ratio <= 1))
        return ax_fail_static(AX_EINVAL, "ax_redis_queue_config.shed_ratio must be in (0, 1]");
    ax_redis *probe; /* validates the connection settings */
    int rc = ax_redis_new(&c->conn, &probe);
    if (rc)
        return rc;
    ax_redis_queue *q = calloc(1, sizeof *q);
    if (!q) {
        ax_redis_free(probe);
        return ax_fail_static(AX_ENOMEM, "ax_redis_queue_new: out of memory");
    }
    snprintf(q->name, sizeof q->name, "%s", c->name);
    for (int k = 0; k < KEY_COUNT; k++)
        snprintf(q->key[k], sizeof q->key[k], "ax:{%s}:%s", q->name, key_suffix[k]);
    q->cfg = *c;
    q->cfg.name = q->name;
    bool oom = false;
    q->host = c->conn.host ? strdup(c->conn.host) : NULL;
    q->unix_path = c->conn.unix_path ? strdup(c->conn.unix_path) : NULL;
    q->password = c->conn.password ? strdup(c->conn.password) : NULL;
    oom = (c->conn.host && !q->host) || (c->conn.unix_path && !q->unix_path) ||
          (c->conn.password && !q->password);
    q->conn = c->conn;
    q->conn.host = q->host;
    q->conn.unix_path = q->unix_path;
    q->conn.password = q->password;
    q->cfg.conn = q->conn;
    pthread_mutex_init(&q->lock, NULL);
    q->pool_cap = 8;
    q->pool = malloc(q->pool_cap * sizeof *q->pool);
    if (oom || !q->pool) {
        ax_redis_free(probe);
        ax_redis_queue_free(q);
        return ax_fail_static(AX_ENOMEM, "ax_redis_queue_new: out of memory");
    }
    q->pool[q->npool++] = probe;
    *out = q;
    return AX_OK;
}

void ax_redis_queue_free(ax_redis_queue *q)
{
    if (!q)
        return;
    unsigned n = atomic_load(&q->consumers);
    if (n) {
        fprintf(stderr,
                "ax_redis_queue_free: queue %s still has %u consumer(s) not freed; not freed "
                "(leaked): stop and free its consumers first\n",
                q->name, n);
        return;
    }
    for (size_t i = 0; i < q->npool; i++)
        ax_redis_free(q->pool[i]);
    free(q->pool);
    pthread_mutex_destroy(&q->lock);
    free(q->host);
    free(q->unix_path);
    free(q->password);
    free(q);
}

const char *ax_redis_queue_name(const ax_redis_queue *q)
{
    return q ? q->name : "";
}

ax_redis *rq_conn_get(ax_redis_queue *q)
{
    ax_redis *r = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->npool)
        r = q->pool[--q->npool];
    pthread_mutex_unlock(&q->lock);
    if (!r && ax_redis_new(&q->conn, &r) != AX_OK)
        return NULL;
    return r;
}

void rq_conn_put(ax_redis_queue *q, ax_redis *r)
{
    pthread_mutex_lock(&q->lock);
    if (q->npool == q->pool_cap) {
        ax_redis **np = realloc(q->pool, 2 * q->pool_cap * sizeof *np);
        if (!np) {
            pthread_mutex_unlock(&q->lock);
            ax_redis_free(r);
            return;
        }
        q->pool = np;
        q->pool_cap *= 2;
    }
    q->pool[q->npool++] = r;
    pthread_mutex_unlock(&q->lock);
}

/* ---- the producer ------------------------------------------------------------------- */

/* The rules of ax_spec.trace_id (ax_submit, src/submit.c): shorter than
 * max, strict UTF-8, no control character (C0, DEL, C1). Checked here so a
 * message the consumers' local ax_submit would refuse is refused at submit,
 * not dead-lettered unrun. */
int rq_text_check(const char *field, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    if (n >= max)
        return ax_fail(AX_EINVAL, "%s is longer than %zu bytes", field, max - 1);
    size_t bad = utf8_invalid_at(s, n);
    if (bad < n)
        return ax_fail(AX_EINVAL, "%s is not valid UTF-8 (byte %zu: 0x%02x)", field, bad,
                       (unsigned char)s[bad]);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || (c == 0xc2 && (unsigned char)s[i + 1] < 0xa0))
            return ax_fail(AX_EINVAL, "%s has a control character (byte %zu: 0x%02x)", field, i,
                           c);
    }
    return AX_OK;
}

/* One submit's EVALSHA command and the storage its arguments point into. */
struct sub_cmd {
    char trace[AX_TRACE_ID_MAX];
    char prio[12], caps[3][16], shed[32], to[24], mr[12], dl[24];
    const char *argv[3 + 5 + 19];
    size_t lens[3 + 5 + 19];
    struct rcmd cmd;
};

/* Validate sp and fill b with its script call. Hot for producers: no
 * allocation, a few snprintf. */
static int sub_build(ax_redis_queue *q, const ax_redis_spec *sp, struct sub_cmd *b)
{
    if (!sp->kind || !*sp->kind || strlen(sp->kind) >= AX_REDIS_KIND_MAX)
        return ax_fail_static(AX_EINVAL, "ax_redis_spec.kind must be 1-63 bytes");
    int rc = rq_text_check("ax_redis_spec.kind", sp->kind, AX_REDIS_KIND_MAX);
    if (rc)
        return rc;
    if (sp->priority != AX_PRIO_HIGH && sp->priority != AX_PRIO_NORMAL && sp->priority != AX_PRIO_LOW)
        return ax_fail(AX_EINVAL, "ax_redis_spec.priority %d is not a priority", (int)sp->priority);
    if (!sp->payload && sp->len)
        return ax_fail_static(AX_EINVAL, "ax_redis_spec.payload is NULL with len > 0");
    /* Redis refuses a bulk string over proto-max-bulk-len (512 MB by
     * default) by closing the connection: a trial's 600 MB payload read
     * "write: Connection reset by peer". Said here, before any I/O. */
    if (sp->len > AX_REDIS_PAYLOAD_MAX)
        return ax_fail(AX_EINVAL,
                       "ax_redis_spec.len %zu is over %u bytes (Redis's default "
                       "proto-max-bulk-len, 512 MB)",
                       sp->len, AX_REDIS_PAYLOAD_MAX);
    if (sp->timeout_ms == 0)
        return ax_fail_static(AX_EINVAL, "ax_redis_spec.timeout_ms must be > 0");
    if (sp->timeout_ms > 365ull * 24 * 3600 * 1000) /* as ax_spec.timeout_ms (submit.c) */
        return ax_fail(AX_EINVAL, "ax_redis_spec.timeout_ms %llu overflows (max one year)",
                       (unsigned long long)sp->timeout_ms);
    if (sp->max_retry > 100)
        return ax_fail(AX_EINVAL, "ax_redis_spec.max_retry %u exceeds 100", sp->max_retry);
    if (sp->trace_id && *sp->trace_id) {
        if ((rc = rq_text_check("ax_redis_spec.trace_id", sp->trace_id, AX_TRACE_ID_MAX)))
            return rc;
        snprintf(b->trace, sizeof b->trace, "%s", sp->trace_id);
    } else {
        snprintf(b->trace, sizeof b->trace, "ax-%016" PRIx64, ax_rand64());
    }
    snprintf(b->prio, sizeof b->prio, "%d", rq_stream_key(sp->priority) + 1);
    snprintf(b->caps[0], sizeof b->caps[0], "%u", q->cfg.capacity[AX_PRIO_HIGH]);
    snprintf(b->caps[1], sizeof b->caps[1], "%u", q->cfg.capacity[AX_PRIO_NORMAL]);
    snprintf(b->caps[2], sizeof b->caps[2], "%u", q->cfg.capacity[AX_PRIO_LOW]);
    /* Every digit: the script computes the shed line from it exactly as
     * sched.c does from the double (review: "%.6f" moved 0.4000004's line
     * from 7 to 6 and made 4.9e-7 shed into an empty queue). */
    snprintf(b->shed, sizeof b->shed, "%.17g", q->cfg.shed_ratio);
    snprintf(b->to, sizeof b->to, "%" PRIu64, sp->timeout_ms);
    snprintf(b->mr, sizeof b->mr, "%u", sp->max_retry);
    snprintf(b->dl, sizeof b->dl, "%" PRIu64, sp->deadline_ms);
    const char *keys[5] = {q->key[KEY_HIGH], q->key[KEY_NORMAL], q->key[KEY_LOW],
                           q->key[KEY_DELAYED], q->key[KEY_CONF]};
    const char *args[] = {b->prio, b->caps[0], b->caps[1], b->caps[2], b->shed,
                          "k", sp->kind, "p", sp->payload ? (const char *)sp->payload : "",
                          "t", b->trace, "to", b->to, "r", b->mr, "dl", b->dl, "a", "0"};
    enum { NARGS = sizeof args / sizeof *args };
    size_t lens[NARGS];
    for (int i = 0; i < NARGS; i++) /* the payload (8) is binary: never strlen it */
        lens[i] = i == 8 ? sp->len : strlen(args[i]);
    rscript_evalsha(RS_SUBMIT, &b->cmd, b->argv, b->lens, 5, keys, NARGS, args, lens);
    return AX_OK;
}

/* The script's answer: 0 and the id, AX_EFULL, AX_ESHED, AX_ENET. */
static int sub_result(ax_redis_queue *q, const ax_redis_spec *sp, const redisReply *rep,
                      char *id_out)
{
    if (rep->type == REDIS_REPLY_INTEGER && (rep->integer == AX_EFULL || rep->integer == AX_ESHED)) {
        int rc = (int)rep->integer;
        return ax_fail(rc, "queue %s: %s", q->name,
                       rc == AX_EFULL ? "the priority's stream is at its bound"
                                      : "overloaded: NORMAL/LOW shed above shed_ratio");
    }
    if (rep->type == REDIS_REPLY_STRING && rep->len + 2 < AX_REDIS_ID_MAX) {
        if (id_out) /* entry ids repeat across the three streams: name the stream */
            snprintf(id_out, AX_REDIS_ID_MAX, "%c:%s", rq_prio_letter(sp->priority), rep->str);
        return AX_OK;
    }
    return ax_fail(AX_ENET, "queue %s: submit: server answered %s", q->name,
                   rep->type == REDIS_REPLY_ERROR ? rep->str : "an unexpected reply");
}

int ax_redis_submit(ax_task *t, ax_redis_queue *q, const ax_redis_spec *sp, int64_t timeout_ms,
                    char id_out[AX_REDIS_ID_MAX])
{
    if (!q || !sp)
        return ax_fail_static(AX_EINVAL, "ax_redis_submit: queue and spec are required");
    RTIMEOUT_CHECK("ax_redis_submit", timeout_ms);
    int rc;
    return ax_redis_submit_batch(t, q, sp, 1, timeout_ms, &rc, (char(*)[AX_REDIS_ID_MAX])id_out);
}

int ax_redis_submit_batch(ax_task *t, ax_redis_queue *q, const ax_redis_spec *specs, size_t n,
                          int64_t timeout_ms, int *rcs, char (*ids)[AX_REDIS_ID_MAX])
{
    if (!q || !specs || !rcs || n == 0 || n > AX_REDIS_BATCH_MAX) {
        int rc = ax_fail(AX_EINVAL, "ax_redis_submit: queue, specs and rcs are required, 1 <= n "
                                    "<= %d", AX_REDIS_BATCH_MAX);
        for (size_t i = 0; rcs && i < n && i < AX_REDIS_BATCH_MAX; i++)
            rcs[i] = rc;
        return rc;
    }
    if (timeout_ms == 0) {
        int rc = ax_fail_static(AX_EINVAL, "ax_redis_submit_batch: timeout_ms is 0: use < 0 for "
                                           "the connection's command_timeout_ms or > 0 ms");
        for (size_t i = 0; i < n; i++)
            rcs[i] = rc;
        return rc;
    }
    /* One block: n commands, their replies, the map sent -> spec, and the
     * NOSCRIPT redo (commands, replies, positions). */
    struct sub_cmd *b = malloc(n * (sizeof *b + 2 * sizeof(struct rcmd) + 2 * sizeof(redisReply *) +
                                    2 * sizeof(size_t)));
    if (!b) {
        int rc = ax_fail_static(AX_ENOMEM, "ax_redis_submit: out of memory");
        for (size_t i = 0; i < n; i++)
            rcs[i] = rc;
        return rc;
    }
    struct rcmd *cmds = (struct rcmd *)(b + n), *redo = cmds + n;
    redisReply **reps = (redisReply **)(redo + n), **redo_reps = reps + n;
    size_t *idx = (size_t *)(redo_reps + n), *redo_pos = idx + n;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if ((rcs[i] = sub_build(q, &specs[i], &b[m])) == AX_OK) {
            cmds[m] = b[m].cmd;
            idx[m++] = i;
        }
    int rc = m ? AX_OK : rcs[0];
    ax_redis *r = m ? rq_conn_get(q) : NULL;
    if (m && !r)
        rc = ax_fail_static(AX_ENOMEM, "ax_redis_submit: out of memory for a connection");
    uint64_t start = now_ns();
    if (r && (rc = rconn_pipeline(t, r, timeout_ms, m, cmds, reps)) == AX_OK) {
        /* NOSCRIPT (a restarted or flushed server): those did not run; send
         * them again as EVAL, which caches the script for the next EVALSHA. */
        size_t nredo = 0;
        for (size_t k = 0; k < m; k++)
            if (rscript_noscript(reps[k])) {
                freeReplyObject(reps[k]);
                reps[k] = NULL;
                rscript_to_eval(RS_SUBMIT, &cmds[k]);
                redo[nredo] = cmds[k];
                redo_pos[nredo++] = k;
            }
        if (nredo) {
            int64_t left = timeout_ms;
            if (timeout_ms >= 0) {
                uint64_t spent = (now_ns() - start) / 1000000u;
                left = spent >= (uint64_t)timeout_ms ? 0 : timeout_ms - (int64_t)spent;
            }
            int rc2 = rconn_pipeline(t, r, left, nredo, redo, redo_reps);
            for (size_t j = 0; j < nredo; j++)
                if (rc2 == AX_OK)
                    reps[redo_pos[j]] = redo_reps[j];
                else
                    rcs[idx[redo_pos[j]]] = rc2; /* not run, or unknown */
            if (rc2)
                rc = rc2;
        }
        for (size_t k = 0; k < m; k++)
            if (reps[k]) {
                rcs[idx[k]] = sub_result(q, &specs[idx[k]], reps[k], ids ? ids[idx[k]] : NULL);
                freeReplyObject(reps[k]);
            }
    } else if (m) {
        for (size_t k = 0; k < m; k++)
            rcs[idx[k]] = rc; /* AX_ETIMEDOUT / AX_ENET: admitted or not, unknown */
    }
    if (r)
        rq_conn_put(q, r);
    free(b);
    return n == 1 ? rcs[0] : rc;
}
