/* script.c - the Lua scripts of a queue, run with EVALSHA (EVAL fallback).
 *
 * Everything that must be atomic across producers and consumers on many
 * machines is one script: admission (bounds, shed line and XADD), the
 * terminal record of a message (XACK + XDEL, then count it, schedule its
 * retry or dead-letter it), moving due retries back to their streams, and
 * claiming idle entries (XAUTOCLAIM, dead-lettering those delivered too
 * often). Every key a script touches is passed in KEYS and shares the
 * queue's hash tag, so the scripts run unchanged on Redis Cluster.
 *
 * Calls go as EVALSHA with the SHA-1 of the body (computed here once, so
 * there is no SCRIPT LOAD round trip); a NOSCRIPT answer (a restarted or
 * failed-over server, SCRIPT FLUSH) is retried once as EVAL, which also
 * caches the script on that server for the next EVALSHA.
 */
#define _GNU_SOURCE
#include "redis.h"

#include <stdio.h>
#include <string.h>

/* Admission. KEYS: high normal low delayed conf. ARGV: priority index into
 * KEYS (1..3), the three bounds (high normal low), shed ratio, then the
 * message's field/value pairs. Returns the new id, -3 (full), -4 (shed).
 * Load = entries of the three streams + delayed retries, as local
 * admission counts queued + running + delayed (src/submit.c). */
static const char submit_lua[] =
    "local c = redis.call('HMGET', KEYS[5], 'high', 'normal', 'low', 'shed')\n"
    "if not c[1] then\n"
    "  redis.call('HSET', KEYS[5], 'high', ARGV[2], 'normal', ARGV[3], 'low', ARGV[4],\n"
    "             'shed', ARGV[5])\n"
    "  c = {ARGV[2], ARGV[3], ARGV[4], ARGV[5]}\n"
    "end\n"
    "local p = tonumber(ARGV[1])\n"
    "local n = {}\n"
    "local load = redis.call('ZCARD', KEYS[4])\n"
    "for i = 1, 3 do n[i] = redis.call('XLEN', KEYS[i]); load = load + n[i] end\n"
    "local total = tonumber(c[1]) + tonumber(c[2]) + tonumber(c[3])\n"
    "local x = total * tonumber(c[4])\n"
    "local line = math.ceil(x - 1e-9 - x * 1e-12)\n"
    "if line < 1 then line = 1 end\n"
    "if p ~= 1 and load >= line then return -4 end\n"
    "if n[p] >= tonumber(c[p]) then return -3 end\n"
    "if redis.call('EXISTS', KEYS[p]) == 0 then\n"
    "  redis.call('XGROUP', 'CREATE', KEYS[p], 'ax', '0', 'MKSTREAM')\n"
    "end\n"
    "return redis.call('XADD', KEYS[p], '*', unpack(ARGV, 6))\n";

/* Every script that takes an entry off its stream first checks the keys
 * its later writes go to: Redis does not undo a script's earlier writes
 * when a later command fails, so with a string at the dead-letter key the
 * XACK and XDEL stood and the XADD failed, and the message was gone (a new
 * user's trial). want(key, type) is an error reply naming the key if it
 * holds another type, nil if it holds that type or nothing. */
#define RS_WANT_TYPE                                                                        \
    "local function want(k, ty)\n"                                                          \
    "  local t = redis.call('TYPE', k)['ok']\n"                                             \
    "  if t ~= 'none' and t ~= ty then\n"                                                   \
    "    return redis.error_reply('WRONGTYPE ' .. k .. ' holds a ' .. t .. ', not a ' .. ty)\n" \
    "  end\n"                                                                               \
    "end\n"

/* The terminal record of one delivery. KEYS: stream delayed dead stats.
 * ARGV: entry id, outcome ok|retry|dead, due time (Unix ms, retry), then
 * for retry the priority index and the fields of the next attempt, for
 * dead a placeholder and the fields with the error. Acts only if XACK took
 * the entry off the pending list (returns 1), else returns 0: another
 * consumer recorded this message already. */
static const char ack_lua[] =
    RS_WANT_TYPE
    "local e = want(KEYS[4], 'hash')\n"
    "if not e and ARGV[2] == 'retry' then e = want(KEYS[2], 'zset')\n"
    "elseif not e and ARGV[2] ~= 'ok' then e = want(KEYS[3], 'stream') end\n"
    "if e then return e end\n"
    "if redis.call('XACK', KEYS[1], 'ax', ARGV[1]) == 0 then return 0 end\n"
    "redis.call('XDEL', KEYS[1], ARGV[1])\n"
    "if ARGV[2] == 'ok' then\n"
    "  redis.call('HINCRBY', KEYS[4], 'succeeded', 1)\n"
    "elseif ARGV[2] == 'retry' then\n"
    "  redis.call('ZADD', KEYS[2], ARGV[3], cmsgpack.pack({unpack(ARGV, 4)}))\n"
    "  redis.call('HINCRBY', KEYS[4], 'retried', 1)\n"
    "else\n"
    "  redis.call('XADD', KEYS[3], '*', unpack(ARGV, 5))\n"
    "  redis.call('HINCRBY', KEYS[4], 'dead', 1)\n"
    "end\n"
    "return 1\n";

/* The records of many successes of one stream in one call: KEYS stream
 * stats, ARGV entry ids. For each id, as ack_lua's ok: acts only if XACK
 * took it off the pending list. Returns one 1/0 per id. */
static const char ack_ok_lua[] =
    RS_WANT_TYPE
    "local e = want(KEYS[2], 'hash')\n"
    "if e then return e end\n"
    "local out, n = {}, 0\n"
    "for i = 1, #ARGV do\n"
    "  if redis.call('XACK', KEYS[1], 'ax', ARGV[i]) == 1 then\n"
    "    redis.call('XDEL', KEYS[1], ARGV[i])\n"
    "    n = n + 1\n"
    "    out[i] = 1\n"
    "  else\n"
    "    out[i] = 0\n"
    "  end\n"
    "end\n"
    "if n > 0 then redis.call('HINCRBY', KEYS[2], 'succeeded', n) end\n"
    "return out\n";

/* Claim idle entries of one stream. KEYS: stream dead stats. ARGV:
 * consumer, min idle ms, cursor, count, max deliveries, the stream's
 * letter (h, n, l: a dead letter's id "h:<entry>" when it has no o). Returns {next
 * cursor, {{id, fields, deliveries}...}, dead}; entries delivered more than max
 * times go to the dead-letter stream instead (dead: how many). */
static const char claim_lua[] =
    RS_WANT_TYPE
    "local e = want(KEYS[2], 'stream') or want(KEYS[3], 'hash')\n"
    "if e then return e end\n"
    "local function set(f, k, v, keep)\n"
    "  for i = 1, #f, 2 do\n"
    "    if f[i] == k then if not keep then f[i + 1] = v end; return end\n"
    "  end\n"
    "  f[#f + 1] = k; f[#f + 1] = v\n"
    "end\n"
    "local r = redis.call('XAUTOCLAIM', KEYS[1], 'ax', ARGV[1], ARGV[2], ARGV[3], 'COUNT',\n"
    "                     ARGV[4])\n"
    "local out, maxd, dead = {}, tonumber(ARGV[5]), 0\n"
    "for _, e in ipairs(r[2]) do\n"
    "  local id, f = e[1], e[2]\n"
    "  if f then\n"
    "    local pe = redis.call('XPENDING', KEYS[1], 'ax', id, id, 1)\n"
    "    local d = (pe[1] and pe[1][4]) or 1\n"
    "    if d > maxd then\n"
    "      redis.call('XACK', KEYS[1], 'ax', id)\n"
    "      redis.call('XDEL', KEYS[1], id)\n"
    "      set(f, 'e', 'delivered ' .. d .. ' times without an outcome (consumers died or stalled)')\n"
    "      set(f, 'o', ARGV[6] .. ':' .. id, true)\n"
    "      redis.call('XADD', KEYS[2], '*', unpack(f))\n"
    "      redis.call('HINCRBY', KEYS[3], 'dead', 1)\n"
    "      dead = dead + 1\n"
    "    else\n"
    "      out[#out + 1] = {id, f, d}\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if #out > 0 then redis.call('HINCRBY', KEYS[3], 'claimed', #out) end\n"
    "return {r[1], out, dead}\n";

/* Move due retries back to their streams. KEYS: high normal low delayed
 * dead stats. ARGV: now (Unix ms), count. Returns {how many moved, the
 * next due score or -1, how many dead-lettered}. A member that is not a
 * retry ack_lua wrote (not msgpack, a priority other than 1-3, fields not
 * in pairs or not strings, or more of them than ax writes (19; unpack's
 * limit, ~8 000, would fail the XADD): written by hand or by another
 * program) goes to
 * the dead-letter stream with an error and its raw bytes (field `m`),
 * counted in `dead`: left in place it failed the script at every call and
 * held every later retry back (a new user's trial). The dead and stats
 * keys' types are checked before the first such write (not up front: a
 * wrong dead key must not hold back the retries, test_redis_wrongtype);
 * the retries moved before it stay moved, each whole. */
static const char promote_lua[] =
    RS_WANT_TYPE
    "local e = want(KEYS[4], 'zset')\n"
    "if e then return e end\n"
    "local function retry_of(m)\n"
    "  local ok, f = pcall(cmsgpack.unpack, m)\n"
    "  if not ok or type(f) ~= 'table' or #f < 3 or #f > 63 or #f % 2 == 0 then\n"
    "    return nil\n"
    "  end\n"
    "  local p = tonumber(f[1])\n"
    "  if p ~= 1 and p ~= 2 and p ~= 3 then return nil end\n"
    "  for i = 2, #f do\n"
    "    local t = type(f[i])\n"
    "    if t ~= 'string' and t ~= 'number' then return nil end\n"
    "  end\n"
    "  return p, f\n"
    "end\n"
    "local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[1], 'LIMIT', 0,\n"
    "                       tonumber(ARGV[2]))\n"
    "local bad, checked = 0, false\n"
    "for _, m in ipairs(due) do\n"
    "  local p, f = retry_of(m)\n"
    "  if not p and not checked then\n"
    "    e = want(KEYS[5], 'stream') or want(KEYS[6], 'hash')\n"
    "    if e then return e end\n"
    "    checked = true\n"
    "  end\n"
    "  if p then\n"
    "    if redis.call('EXISTS', KEYS[p]) == 0 then\n"
    "      redis.call('XGROUP', 'CREATE', KEYS[p], 'ax', '0', 'MKSTREAM')\n"
    "    end\n"
    "    redis.call('XADD', KEYS[p], '*', unpack(f, 2))\n"
    "  else\n"
    "    redis.call('XADD', KEYS[5], '*', 'e',\n"
    "               'not a retry ax wrote: a member of ' .. KEYS[4] .. ' set by hand?', 'm', m)\n"
    "    bad = bad + 1\n"
    "  end\n"
    "  redis.call('ZREM', KEYS[4], m)\n"
    "end\n"
    "if bad > 0 then redis.call('HINCRBY', KEYS[6], 'dead', bad) end\n"
    "local nxt = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')\n"
    "return {#due, nxt[2] or '-1', bad}\n";

/* Hand entries back: a consumer that will not run them (their tasks were
 * cancelled: it is stopping, or its scheduler shut down) makes them
 * claimable at once, instead of after its visibility_ms. KEYS: stream.
 * ARGV: consumer, idle ms, then the entry ids. Only an entry still pending
 * to this consumer is touched: one another consumer took meanwhile (it ran
 * past the visibility) stays with it, which a plain XCLAIM would have
 * taken back and exposed to a second claim while it runs there. XCLAIM to
 * itself with IDLE and JUSTID sets the entry's idle time and leaves its
 * delivery count alone. Returns how many were handed back. */
static const char release_lua[] =
    "local n = 0\n"
    "for i = 3, #ARGV do\n"
    "  local p = redis.call('XPENDING', KEYS[1], 'ax', ARGV[i], ARGV[i], 1, ARGV[1])\n"
    "  if #p == 1 then\n"
    "    redis.call('XCLAIM', KEYS[1], 'ax', ARGV[1], 0, ARGV[i], 'IDLE', ARGV[2], 'JUSTID')\n"
    "    n = n + 1\n"
    "  end\n"
    "end\n"
    "return n\n";

static const char *const bodies[RS_COUNT] = {submit_lua, ack_lua,     ack_ok_lua,
                                              claim_lua,  promote_lua, release_lua};
static char shas[RS_COUNT][41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

/* ---- SHA-1 (FIPS 180-4), only to name the scripts for EVALSHA ---------------------- */

static uint32_t rol(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)
            f = (b & c) | (~b & d), k = 0x5A827999u;
        else if (i < 40)
            f = b ^ c ^ d, k = 0x6ED9EBA1u;
        else if (i < 60)
            f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
        else
            f = b ^ c ^ d, k = 0xCA62C1D6u;
        uint32_t tmp = rol(a, 5) + f + e + k + w[i];
        e = d, d = c, c = rol(b, 30), b = a, a = tmp;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

static void sha1_hex(const char *msg, size_t len, char out[41])
{
    uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
    size_t i = 0;
    for (; i + 64 <= len; i += 64)
        sha1_block(h, (const unsigned char *)msg + i);
    unsigned char tail[128] = {0};
    size_t rest = len - i;
    memcpy(tail, msg + i, rest);
    tail[rest] = 0x80;
    size_t tl = rest + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int k = 0; k < 8; k++)
        tail[tl - 1 - k] = (unsigned char)(bits >> (8 * k));
    for (size_t k = 0; k < tl; k += 64)
        sha1_block(h, tail + k);
    for (int k = 0; k < 5; k++)
        snprintf(out + 8 * k, 9, "%08x", h[k]);
}

static void shas_init(void)
{
    for (int i = 0; i < RS_COUNT; i++)
        sha1_hex(bodies[i], strlen(bodies[i]), shas[i]);
}

const char *rscript_sha(int id); /* tests */
const char *rscript_sha(int id)
{
    pthread_once(&sha_once, shas_init);
    return shas[id];
}

/* ---- calls ------------------------------------------------------------------------- */

void rscript_evalsha(int id, struct rcmd *cmd, const char **argv, size_t *lens, int nkeys,
                     const char *const *keys, int nargs, const char *const *args,
                     const size_t *arglens)
{
    static char nk[8][4] = {"0", "1", "2", "3", "4", "5", "6", "7"};
    pthread_once(&sha_once, shas_init);
    int n = 0;
    argv[n] = "EVALSHA", lens[n++] = 7;
    argv[n] = shas[id], lens[n++] = 40;
    argv[n] = nk[nkeys], lens[n++] = 1;
    for (int i = 0; i < nkeys; i++)
        argv[n] = keys[i], lens[n++] = strlen(keys[i]);
    for (int i = 0; i < nargs; i++)
        argv[n] = args[i], lens[n++] = arglens ? arglens[i] : strlen(args[i]);
    cmd->argc = n;
    cmd->argv = argv;
    cmd->lens = lens;
}

void rscript_to_eval(int id, struct rcmd *cmd)
{
    /* argv and lens are the caller's writable arrays (rscript_evalsha). */
    const char **argv = (const char **)cmd->argv;
    size_t *lens = (size_t *)cmd->lens;
    argv[0] = "EVAL", lens[0] = 4;
    argv[1] = bodies[id], lens[1] = strlen(bodies[id]);
}

bool rscript_noscript(const redisReply *reply)
{
    return reply && reply->type == REDIS_REPLY_ERROR && reply->str &&
           strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

int rscript_call(ax_task *t, ax_redis *r, int64_t timeout_ms, int id, int nkeys,
                 const char *const *keys, int nargs, const char *const *args,
                 const size_t *arglens, redisReply **reply)
{
    const char *argv[3 + 8 + 64];
    size_t lens[3 + 8 + 64];
    if (nkeys > 7 || nargs > 64)
        return ax_fail(AX_EINVAL, "redis script: %d keys, %d args: too many", nkeys, nargs);
    struct rcmd cmd;
    rscript_evalsha(id, &cmd, argv, lens, nkeys, keys, nargs, args, arglens);
    uint64_t start = now_ns();
    int rc = rconn_pipeline(t, r, timeout_ms, 1, &cmd, reply);
    if (rc || !rscript_noscript(*reply))
        return rc;
    freeReplyObject(*reply);
    *reply = NULL;
    rscript_to_eval(id, &cmd);
    if (timeout_ms >= 0) {
        uint64_t spent = (now_ns() - start) / 1000000u;
        timeout_ms = spent >= (uint64_t)timeout_ms ? 0 : timeout_ms - (int64_t)spent;
    }
    return rconn_pipeline(t, r, timeout_ms, 1, &cmd, reply);
}
