/* ax_redis.h - shared priority queues on Redis Streams (libax_redis; README:
 * "Shared queues on Redis Streams").
 *
 * Many processes on many machines share one set of priority queues held by
 * Redis; each process runs what it pulled as ax tasks, with the same
 * buckets, quota rounds, deadlines and retries as local tasks.
 *
 * Three layers, each usable alone:
 *   ax_redis          one connection, driven from inside an ax task through
 *                     the worker's reactor (ax_wait_fd): no thread per
 *                     connection, every call bounded by the task's deadline
 *                     and a per-call timeout. Outside a task (t == NULL) the
 *                     same calls block the calling thread with poll().
 *   ax_redis_queue    a queue NAME and its producer side: ax_redis_submit.
 *   ax_redis_consumer handlers by kind, a puller task, acknowledgements.
 *
 * Connection model: a connection serves ONE task at a time (a per-queue
 * pool lends one to each submitting task; a consumer owns two). Not one per
 * worker pipelining several tasks' commands, because:
 *   - a call that times out or is cancelled leaves its reply on the wire, so
 *     its connection must be closed; on a connection shared by a worker that
 *     would fail every other task's command in flight on it (one slow task's
 *     deadline becoming everyone's error);
 *   - per task, a call is plain straight-line code over ax_wait_fd, no
 *     callbacks into the worker loop and no reply routing;
 *   - the throughput of a shared connection is kept where it matters: the
 *     consumer pipelines its acknowledgements (one round trip for every
 *     message that ended since the last one) and reads in batches.
 * The cost: a submit is one round trip on its own connection (a producer
 * that has many sends them in one with ax_redis_submit_batch), and the
 * process holds as many connections as tasks submitting at once.
 *
 * Keys of queue NAME, all under one hash tag so Redis Cluster keeps them on
 * one shard and a script may touch them together:
 *   ax:{NAME}:high  ax:{NAME}:normal  ax:{NAME}:low   streams; group "ax"
 *   ax:{NAME}:delayed  sorted set: retries waiting out their back-off
 *                      (score = due time, Unix ms)
 *   ax:{NAME}:dead     stream: dead letters, with their last error; a
 *                      member of the delayed set ax did not write (not one
 *                      of its retries) is moved here when due, as fields
 *                      e (the error) and m (its bytes), counted in dead
 *   ax:{NAME}:conf     hash: the bounds (the first producer's config wins)
 *   ax:{NAME}:stats    hash: succeeded, retried, dead, claimed counters
 * A message's fields: k (kind), p (payload), t (trace id), to (timeout ms),
 * r (max retries), dl (deadline, Unix ms, 0 none), a (attempts so far),
 * o (origin id: the id submit returned, kept across retries), e (last error).
 * A message id is the first entry's id prefixed by its stream, "h:", "n:"
 * or "l:" (entry ids are unique only within one stream).
 *
 * Delivery is at least once: a message leaves its stream only by a script
 * that, in the same atomic step, writes its terminal record (XACK + XDEL,
 * then count it, schedule its retry in the delayed set or dead-letter it);
 * due retries go back to their stream in one script (XADD + ZREM). The
 * record is written once per entry: the script acts only if XACK removed
 * the entry from the pending list, so a late second consumer's
 * acknowledgement is a no-op. A consumer that dies holds its messages in
 * the group's pending list until another consumer's XAUTOCLAIM takes them
 * over, visibility_ms after their last delivery (a live consumer keeps
 * resetting that time for the messages it runs); a message ran twice only
 * if its first consumer died or stalled between running it and writing its
 * record, so the duplicates are at most what that consumer held (its
 * slots). Nothing admitted is lost
 * while Redis itself loses nothing: across a Redis restart that needs
 * appendonly yes with appendfsync always (everysec may lose the last
 * second of submits and acknowledgements).
 *
 * Link with libax_redis and hiredis: pkg-config ax_redis, or CMake
 * find_package(ax) and ax::ax_redis (static) / ax::ax_redis_shared.
 */
#ifndef AX_REDIS_H
#define AX_REDIS_H

#include <ax.h>
#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one connection ------------------------------------------------------ */

typedef struct ax_redis ax_redis;

typedef struct ax_redis_config {
    const char *host;            /* numeric IPv4 / IPv6 address or "localhost"
                                    (default "127.0.0.1", also when NULL; "" is
                                    AX_EINVAL); no DNS: it would block.
                                    Anything else is AX_EINVAL from ax_redis_new
                                    (and ax_redis_queue_new) */
    uint16_t port;               /* default 6379 */
    const char *unix_path;       /* a Unix socket instead of host:port (default NULL) */
    const char *password;        /* AUTH after connecting (default NULL) */
    uint32_t connect_timeout_ms; /* default 1000 */
    uint32_t command_timeout_ms; /* calls with timeout_ms < 0 (default 5000) */
    uint32_t reconnect_min_ms;   /* back-off after the 2nd failure in a row (default 50) */
    uint32_t reconnect_max_ms;   /* cap of the doubling back-off (default 5000) */
} ax_redis_config;

void ax_redis_config_default(ax_redis_config *c);

/* A connection handle; no I/O yet (the first call connects). Strings of
 * cfg are copied. AX_EINVAL names a bad field. */
int ax_redis_new(const ax_redis_config *cfg, ax_redis **out);
void ax_redis_free(ax_redis *r);

/* One command, formatted as hiredis' redisCommand ("SET %s %b", ...), from
 * task t (or t == NULL: blocking the calling thread). Connects (again) if
 * needed. Bounded by timeout_ms (< 0: config.command_timeout_ms; 0 is
 * AX_EINVAL, nothing sent: it could only time out) and by the task's
 * deadline. Every call of this header that takes a timeout_ms takes it so. Returns 0 with *reply set (free it with
 * freeReplyObject; it may be an error reply: REDIS_REPLY_ERROR), or
 *   AX_ENET       unreachable, refused, reset, closed, or waiting out the
 *                 reconnect back-off (detail: address, cause, next attempt)
 *   AX_ETIMEDOUT  no answer within timeout_ms or the task's deadline
 *                 (detail says which); the connection is closed
 *   AX_ECANCELED  the task was cancelled; the connection is closed
 *   AX_EINVAL / AX_ESTATE as for every ax call.
 * Reconnecting: after a failure the next call connects again at once; each
 * further failure in a row doubles the wait before the next attempt
 * (reconnect_min_ms .. reconnect_max_ms, plus up to as much again of
 * random jitter). A call made during the wait sleeps it out if its own
 * bound allows, else fails at once with AX_ENET. One task at a time per
 * connection: two tasks using it at once get AX_EBUSY. */
int ax_redis_command(ax_task *t, ax_redis *r, int64_t timeout_ms, redisReply **reply,
                     const char *fmt, ...);
int ax_redis_command_argv(ax_task *t, ax_redis *r, int64_t timeout_ms, redisReply **reply,
                          int argc, const char **argv, const size_t *argvlen);
/* Redis Cluster: a MOVED answer re-points the connection to the node it
 * names and sends the command there (up to two hops), for
 * every command and queue call (a queue's keys share one hash tag, so one
 * node serves them all). An ASK answer (the slot is being migrated and the
 * command's keys are on the importing node) sends that command once more,
 * after ASKING, to the node it names over a connection made for it and
 * closed after; that node's answer is the reply, and this connection stays
 * where it was (the slot's other keys are still served there). A script
 * whose keys the migration has split between the two nodes is answered
 * TRYAGAIN: the queue calls fail with AX_ENET and are retried by their
 * callers. */
/* Whether the connection is up now (no I/O). */
bool ax_redis_connected(const ax_redis *r);

/* ---- a queue: names, bounds, producers ----------------------------------- */

typedef struct ax_redis_queue ax_redis_queue;

#define AX_REDIS_NAME_MAX 64 /* queue name bytes, including the NUL */
#define AX_REDIS_ID_MAX 48   /* a message id "h:ms-seq", including the NUL */
#define AX_REDIS_KIND_MAX 64 /* a kind (handler name), including the NUL */

typedef struct ax_redis_queue_config {
    const char *name;        /* required: 1-63 bytes of [A-Za-z0-9_.:-] */
    ax_redis_config conn;    /* ax_redis_config_default */
    /* Admission, as local (ax_config's capacity and shed_ratio): entries per stream at most
     * (waiting + delivered and not yet acknowledged), indexed by ax_priority;
     * NORMAL/LOW refused with AX_ESHED once all three streams and the
     * delayed set hold shed_ratio of the total. The first producer's values
     * are stored in ax:{NAME}:conf and every producer uses those. */
    unsigned capacity[AX_PRIO_COUNT]; /* HIGH 10000, NORMAL 30000, LOW 10000 */
    double shed_ratio;                /* 0.8 */
} ax_redis_queue_config;

void ax_redis_queue_config_default(ax_redis_queue_config *c);
int ax_redis_queue_new(const ax_redis_queue_config *c, ax_redis_queue **out);
/* Every task must be done with the queue (and its consumers freed). A
 * queue with a consumer not yet freed (ax_redis_consumer_free, including
 * one it left allocated) is not freed: one line on stderr says why and the
 * queue is left allocated (a leak, not a crash in the consumer's puller). */
void ax_redis_queue_free(ax_redis_queue *q);
const char *ax_redis_queue_name(const ax_redis_queue *q);

/* A message's payload at most: Redis's default proto-max-bulk-len, past
 * which the server closes the connection. */
#define AX_REDIS_PAYLOAD_MAX (512u * 1024 * 1024)

typedef struct ax_redis_spec {
    const char *kind;        /* required: the handler's name, 1-63 bytes of UTF-8, no
                                control character (as trace_id) */
    ax_priority priority;    /* default NORMAL */
    const void *payload;     /* binary-safe; may be NULL with len 0 */
    size_t len;              /* at most AX_REDIS_PAYLOAD_MAX (AX_EINVAL beyond) */
    uint64_t timeout_ms;     /* per attempt, required > 0, at most one year (as
                                ax_spec.timeout_ms) */
    unsigned max_retry;      /* retries after the first attempt (0 = none), at most 100 */
    const char *trace_id;    /* as ax_spec.trace_id: shorter than AX_TRACE_ID_MAX, valid
                                UTF-8, no control character (else AX_EINVAL naming the
                                field, at submit: not dead-lettered unrun by the
                                consumer's ax_submit); NULL or "" = generated */
    uint64_t deadline_ms;    /* absolute, Unix ms (machines share no monotonic
                                clock); a message not started by then is
                                dead-lettered; 0 = none */
} ax_redis_spec;

/* Admit a message: bounds and shed line checked and the message added in
 * one script on the server (EVALSHA, EVAL when the server lost the script),
 * so every producer sees the same AX_EFULL / AX_ESHED at the same point.
 * id_out (if not NULL) gets the new message id, the consumers' idempotency
 * key. t and timeout_ms as for ax_redis_command. Errors: AX_EINVAL,
 * AX_EFULL, AX_ESHED, AX_ENET (also for a server error reply, in the
 * detail), AX_ETIMEDOUT, AX_ECANCELED; after AX_ENET / AX_ETIMEDOUT /
 * AX_ECANCELED the message may have been admitted all the same (its reply
 * was lost): a producer that retries must accept a duplicate. Safe from
 * many tasks and threads at once (each borrows a pooled connection). */
int ax_redis_submit(ax_task *t, ax_redis_queue *q, const ax_redis_spec *spec, int64_t timeout_ms,
                    char id_out[AX_REDIS_ID_MAX]);

/* What the queue holds now and what happened to it, from the server (every
 * producer's and consumer's records), read in one pipelined round trip. */
typedef struct ax_redis_queue_stats {
    uint64_t length[AX_PRIO_COUNT];  /* entries per stream (waiting + delivered and not
                                        yet acknowledged), indexed by ax_priority */
    uint64_t pending[AX_PRIO_COUNT]; /* delivered, not yet acknowledged */
    uint64_t delayed;                /* retries waiting out their back-off */
    uint64_t dead_letters;           /* entries in the dead-letter stream */
    uint64_t succeeded, retried, dead, claimed; /* terminal records and take-overs so far */
} ax_redis_queue_stats;

/* t and timeout_ms as for ax_redis_command. */
int ax_redis_queue_stats_get(ax_task *t, ax_redis_queue *q, int64_t timeout_ms,
                             ax_redis_queue_stats *out);
/* The stats in Prometheus text format (ax_redis_queue_* families, label
 * queue="NAME"), snprintf-style: the length needed, excluding the NUL. */
long ax_redis_queue_prometheus(const ax_redis_queue *q, const ax_redis_queue_stats *st,
                               char *buf, size_t len);

/* n submits in one round trip (pipelined; each is its own atomic script
 * run, checked and admitted alone, in order). rcs[i] gets each one's result
 * as ax_redis_submit's, ids[i] (if ids is not NULL) its id. Returns 0 when
 * the round trip completed (look at rcs), else the transport's error
 * (AX_ENET, AX_ETIMEDOUT, AX_ECANCELED), also in every rcs[i] that was
 * sent: such a message may or may not have been admitted (its reply was
 * lost). n at most AX_REDIS_BATCH_MAX. */
#define AX_REDIS_BATCH_MAX 4096
int ax_redis_submit_batch(ax_task *t, ax_redis_queue *q, const ax_redis_spec *specs, size_t n,
                          int64_t timeout_ms, int *rcs, char (*ids)[AX_REDIS_ID_MAX]);

/* ---- consumers ------------------------------------------------------------ */

typedef struct ax_redis_consumer ax_redis_consumer;

/* What a handler gets. Valid until the handler returns. */
typedef struct ax_redis_msg {
    const char *id;          /* the id submit returned: the idempotency key (stable
                                across retries and redeliveries) */
    const char *entry_id;    /* this delivery's stream entry */
    const char *kind;
    const void *payload;     /* len bytes, followed by a NUL (not counted) */
    size_t len;
    const char *trace_id;
    ax_priority priority;
    unsigned attempt;        /* 0 on the first attempt (retries counted) */
    unsigned deliveries;     /* deliveries of this entry (> 1: redelivered after a
                                consumer died or stalled) */
    uint64_t submitted_ms;   /* when it was admitted, Unix ms by the Redis server's clock
                                (the time part of its id): submit -> start latency */
} ax_redis_msg;

/* Run as the message's ax task: return 0 for success; anything else fails
 * the attempt (ax_task_set_error's text becomes the message's error). */
typedef int (*ax_redis_handler)(ax_task *t, const ax_redis_msg *m, void *arg);

typedef struct ax_redis_consumer_config {
    const char *name;        /* consumer name in the group, 1-127 bytes of
                                [A-Za-z0-9_.:-]; unique per process and queue
                                (AX_EBUSY if taken). Default "HOST-PID", then
                                "HOST-PID-2", "-3", ... for the process's next
                                consumers of the queue */
    unsigned slots;          /* messages held at most (pulled, not yet acknowledged)
                                (default 64) */
    /* Quota rounds across the three streams, as local dispatch (ax_config's
     * quotas): 0 = slots/2 and slots/3 (at least 1); low_guaranteed default 1. */
    unsigned quota_high, quota_normal, low_guaranteed;
    uint32_t block_ms;       /* an XREADGROUP waits at most this for news (default 200) */
    uint32_t visibility_ms;  /* a delivered message idle this long is claimed by another
                                consumer (default 30000). While its handler runs, its
                                consumer resets the idle time (XCLAIM JUSTID) once it
                                passes visibility_ms / 2: only a dead or stalled
                                process loses its messages */
    uint32_t claim_interval_ms; /* how often to claim and reset the idle time of running
                                   messages, and at the latest move due retries (each is
                                   moved by its consumer within ~10 ms of its back-off's
                                   end; one a stopped consumer left, at the next pass)
                                   (default 1000; must be under visibility_ms / 2, else
                                   AX_EINVAL from ax_redis_consumer_new) */
    unsigned max_deliveries; /* an entry delivered more often (consumers died holding
                                it) is dead-lettered (default 5) */
    ax_retry_policy retry;   /* back-off of failed attempts (ax's default) */
} ax_redis_consumer_config;

void ax_redis_consumer_config_default(ax_redis_consumer_config *c);

/* A consumer of q running on scheduler s. Each message's task has the
 * message id (ax_redis_msg.id) as its ax_spec.ref, so its lifecycle events
 * carry it ("ref" in the JSON lines, ax_event.ref). A message s refuses to admit
 * (AX_EFULL, AX_ESHED, AX_ERATE, AX_EOPEN: s is busy with other work) is
 * handed back through the delayed set for 50-100 ms, its attempt not
 * counted (stats: retried). Once s refuses one with AX_ESHUTDOWN (ax_shutdown
 * called), the consumer pulls no more (its puller ends) and hands that
 * message and any other already read back through the delayed set at
 * once, their attempt and delivery not counted (stats: retried); the
 * messages running go on until ax_shutdown cancels them (stats: abandoned,
 * left pending). It starts two long-lived tasks
 * (HIGH priority) that hold two of s's concurrency slots: the puller (reads,
 * claims, moves due retries) and the acker. Each message runs as one more
 * task of s, at the message's priority and timeout. AX_ESHUTDOWN once
 * ax_shutdown(s) was called. */
int ax_redis_consumer_new(ax_sched *s, ax_redis_queue *q, const ax_redis_consumer_config *c,
                          ax_redis_consumer **out);
/* Register the handler of a kind (before start). AX_EBUSY if taken. A
 * message of a kind with no handler fails its attempt ("no handler"). */
int ax_redis_handle(ax_redis_consumer *c, const char *kind, ax_redis_handler fn, void *arg);
/* The same, and the kind's messages run in ax task class class_id of the
 * consumer's scheduler (ax_class_register; 0 = none): its concurrency limit,
 * breaker and queue-time budget apply per kind. A message the class's
 * breaker refuses (AX_EOPEN, at submit or while it waits here) is handed
 * back as a full bucket is; one past the queue-time budget (AX_EEXPIRED)
 * fails its attempt. The message keeps its own priority and timeout, and is
 * never retried locally. A class_id not registered on the consumer's
 * scheduler is AX_EINVAL. */
int ax_redis_handle_class(ax_redis_consumer *c, const char *kind, unsigned class_id,
                          ax_redis_handler fn, void *arg);
/* Start pulling. Once: AX_ESTATE when started before, or stopped (a
 * stopped consumer does not start again; make a new one). */
int ax_redis_consumer_start(ax_redis_consumer *c);
/* Stop pulling, let the messages held run and be acknowledged for up to
 * timeout_ms, then stop. What is still unacknowledged stays pending in Redis
 * and is claimed by another consumer. Messages whose task was cancelled
 * (ax_shutdown, ax_free: unrun) are handed back, claimable at once (stats:
 * handed_back), by a round trip to Redis that ends within timeout_ms, or
 * within 250 ms when less is left (it never takes more than 1 s, nor the
 * connection's command_timeout_ms); if it fails, they are claimed after
 * visibility_ms. Outcomes of messages that ended after the acker stopped
 * (a handler that finished as the drain ran out) are written by the same
 * bound, so a second stop after them acknowledges them (ax-worker's
 * SIGTERM path). A stop while another stop of the same consumer runs
 * waits for it within its own timeout_ms, else returns AX_ETIMEDOUT. The
 * drain ends early if ax_shutdown cancels the consumer's tasks meanwhile.
 * It returns 0 only once no task of the consumer touches it any more (a
 * handler running on past its cancel: AX_ETIMEDOUT at the bound).
 * Not from one of s's tasks: from any
 * task of s (ax_task_current), or an on_done on a worker thread that has
 * run one of the consumer's tasks, it returns AX_ESTATE at once, nothing
 * stopped, as ax_shutdown does. On a consumer never started it only marks
 * it stopped. When ax_shutdown or ax_free has already ended the consumer's
 * tasks, it touches the scheduler no more (it may be freed). */
int ax_redis_consumer_stop(ax_redis_consumer *c, int64_t timeout_ms);
/* Free a stopped consumer. If stop returned AX_ETIMEDOUT (messages still
 * running), free the scheduler first (ax_free: their tasks end and their
 * on_done still reaches the consumer), then the consumer, which hands
 * their messages back as stop does (up to 250 ms); the same when it
 * was never stopped (ax_free, then this). Called on a
 * consumer that still has a task running (its puller or acker, or a
 * message's task whose on_done has not returned: not stopped, or stopped
 * with AX_ETIMEDOUT and its scheduler not freed), it does not free it:
 * it prints one line on stderr saying why and leaves it allocated (a
 * leak, not a write into freed memory), as ax_free does for a similar
 * misuse. */
void ax_redis_consumer_free(ax_redis_consumer *c);

typedef struct ax_redis_consumer_stats {
    uint64_t pulled;        /* new deliveries read */
    uint64_t claimed;       /* entries taken over from other consumers (also those its
                               claim dead-letters at once, delivered more than
                               max_deliveries times: counted in dead too; the queue's
                               claimed counts only those it hands out) */
    uint64_t redelivered;   /* messages run with deliveries > 1 */
    uint64_t succeeded, retried, dead; /* records written by this consumer (dead: also
                                          past max_deliveries, by its claim); retried:
                                          to the delayed set, a failed attempt to retry
                                          or a message handed back unrun (refused by
                                          the scheduler, or read after its shutdown) */
    uint64_t ack_lost;      /* outcomes another consumer had already recorded */
    uint64_t held;          /* pulled and not yet acknowledged, now. Each field is
                               read alone, held first: a message being settled is
                               counted in its outcome just before it leaves held,
                               so the identity below is exact when nothing moves
                               (after a stop), and a held of 0 comes with complete
                               outcomes */
    uint64_t redis_errors;  /* failed Redis calls (each retried); not the expected
                               BUSYGROUP of XGROUP CREATE at start, nor a call its
                               stop or its scheduler's shutdown cancelled */
    uint64_t abandoned;     /* messages whose task was cancelled unfinished (ax_shutdown,
                               ax_cancel): left pending in Redis for another consumer.
                               pulled + claimed = succeeded + retried + dead + ack_lost
                               + abandoned + held */
    uint64_t handed_back;   /* of the abandoned, entries made claimable at once (their
                               idle time set past any visibility_ms, so another
                               consumer's next claim pass takes them); the others
                               (Redis unreachable then, or the entry already taken
                               by another consumer) wait out visibility_ms */
} ax_redis_consumer_stats;
/* Defined since ax_redis_consumer_stats.handed_back. */
#define AX_REDIS_HAVE_HANDED_BACK 1

int ax_redis_consumer_stats_get(ax_redis_consumer *c, ax_redis_consumer_stats *out);
/* This consumer's counters in Prometheus text format (ax_redis_consumer_*
 * families, labels queue and consumer), snprintf-style. */
long ax_redis_consumer_prometheus(ax_redis_consumer *c, char *buf, size_t len);
/* From ax_redis_consumer_start to ax_redis_consumer_stop, a consumer's
 * series are in its scheduler's /metrics (ax_metrics_serve, through
 * ax_metrics_append): ax_redis_queue_prometheus of the queue's stats as its
 * puller last read them -- every claim_interval_ms, so a scrape makes no
 * Redis round trip and may be that much behind -- then
 * ax_redis_consumer_prometheus. Two consumers on one scheduler repeat the
 * families' HELP and TYPE lines (and, of one queue, its series): one
 * consumer per scheduler keeps the exposition valid. */

#ifdef __cplusplus
}
#endif
#endif
