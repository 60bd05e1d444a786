/* redis.h - what the files of libax_redis share (src/redis/).
 *
 *   conn.c      one connection: connect, pipeline, deadlines, back-off
 *   script.c    the Lua scripts, SHA-1, EVALSHA with EVAL fallback
 *   queue.c     queue names and keys, the producer (ax_redis_submit)
 *   consumer.c  handlers, the puller (quota rounds, claims, due retries),
 *               the acker (terminal records)
 */
#ifndef AX_REDIS_INTERNAL_H
#define AX_REDIS_INTERNAL_H

#include "ax_redis.h"
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- conn.c --------------------------------------------------------------- */

struct rcmd {
    int argc; /* or RCMD_FORMATTED: argv[0] is a whole RESP command, lens[0] bytes */
    const char **argv;
    const size_t *lens;
};
#define RCMD_FORMATTED (-1)

/* Send n commands in one write and read their n replies, bounded by
 * timeout_ms (< 0: the configured command timeout) and t's deadline.
 * replies[i] are set on success (caller frees them); on failure none are
 * left and the connection is closed. */
int rconn_pipeline(ax_task *t, ax_redis *r, int64_t timeout_ms, size_t n, const struct rcmd *cmds,
                   redisReply **replies);
/* "host:port" or the socket path, for messages. */
const char *rconn_addr(const ax_redis *r);

/* ---- script.c -------------------------------------------------------------- */

enum { RS_SUBMIT, RS_ACK, RS_ACK_OK, RS_CLAIM, RS_PROMOTE, RS_RELEASE, RS_COUNT };

/* Fill cmd (argv storage of at least 3 + nkeys + nargs, lens likewise) as
 * EVALSHA of script id with its keys and args. */
void rscript_evalsha(int id, struct rcmd *cmd, const char **argv, size_t *lens, int nkeys,
                     const char *const *keys, int nargs, const char *const *args,
                     const size_t *arglens);
/* Turn an EVALSHA command into EVAL of the same script (after NOSCRIPT). */
void rscript_to_eval(int id, struct rcmd *cmd);
bool rscript_noscript(const redisReply *reply);
/* One script call with the EVAL fallback. */
int rscript_call(ax_task *t, ax_redis *r, int64_t timeout_ms, int id, int nkeys,
                 const char *const *keys, int nargs, const char *const *args,
                 const size_t *arglens, redisReply **reply);

/* ---- queue.c ---------------------------------------------------------------- */

enum { KEY_HIGH, KEY_NORMAL, KEY_LOW, KEY_DELAYED, KEY_DEAD, KEY_CONF, KEY_STATS, KEY_COUNT };
#define RKEY_MAX (AX_REDIS_NAME_MAX + 16)

struct ax_redis_queue {
    char name[AX_REDIS_NAME_MAX];
    char key[KEY_COUNT][RKEY_MAX];
    ax_redis_queue_config cfg;
    ax_redis_config conn; /* strings below */
    char *host, *unix_path, *password;
    pthread_mutex_t lock;  /* the pool */
    ax_redis **pool;       /* idle connections */
    size_t npool, pool_cap;
    atomic_uint consumers; /* consumers of this queue not freed (ax_redis_queue_free refuses) */
};

/* timeout_ms == 0 at a public entry: AX_EINVAL (it could only time out,
 * possibly after the command reached the server). */
#define RTIMEOUT_CHECK(fn, timeout_ms)                                                        \
    do {                                                                                      \
        if ((timeout_ms) == 0)                                                                \
            return ax_fail_static(AX_EINVAL, fn ": timeout_ms is 0: use < 0 for the "        \
                                            "connection's command_timeout_ms or > 0 ms");    \
    } while (0)

/* The stream key of a priority. */
int rq_stream_key(ax_priority p);
/* ax_spec.trace_id's rules for a text field of a message (queue.c): shorter
 * than max, strict UTF-8, no control character. AX_EINVAL naming `field`. */
int rq_text_check(const char *field, const char *s, size_t max);
/* The message id is "h:", "n:" or "l:" and the first entry id: entry ids
 * are unique only within a stream. */
char rq_prio_letter(ax_priority p);
/* Borrow and return a pooled connection (NULL: out of memory). */
ax_redis *rq_conn_get(ax_redis_queue *q);
void rq_conn_put(ax_redis_queue *q, ax_redis *r);

#define RGROUP "ax"

#endif
