/* consumer.c - run a queue's messages as ax tasks (libax_redis, DESIGN.md §12).
 *
 * Two long-lived tasks per consumer, each with its own connection:
 *
 *  puller  reads new messages with XREADGROUP by quota rounds over the
 *          streams high, normal, low -- the same rule as local dispatch
 *          (src/sched.c: a turn takes up to quota[p], a stream that runs dry
 *          passes its turn on, a pass that finds all three empty leaves the
 *          round where it was) -- never more than the free slots (slots -
 *          held), so a slow process pulls less. Every claim_interval_ms it
 *          also moves due retries from the delayed set back to their
 *          streams (RS_PROMOTE) and takes over entries idle past
 *          visibility_ms (RS_CLAIM: XAUTOCLAIM; entries delivered more than
 *          max_deliveries times are dead-lettered there; entries this
 *          process still runs are never taken twice), and resets the idle
 *          time of messages it has held over visibility_ms / 2 (XCLAIM to
 *          itself, JUSTID), so a long handler is not taken over by another
 *          live consumer. When every stream
 *          is empty it blocks in XREADGROUP BLOCK on all three (or, with
 *          fewer than three free slots, waits for a slot up to 5 ms).
 *  acker   writes the terminal record of each finished message (XACK +
 *          XDEL, then succeeded / a retry in the delayed set / a dead
 *          letter), every message that ended since its last round trip in
 *          one pipeline: the successes of a stream in one RS_ACK_OK call,
 *          each other outcome in its own RS_ACK. A message's slot is freed
 *          only once its record is written: while Redis is unreachable the
 *          consumer stops pulling.
 *
 * Hot path, per message: two allocations (struct rmsg, its payload), its
 * share of an XREADGROUP and of an acknowledgement pipeline, one ax_submit.
 * The puller and the acker each hold one connection (conn.c).
 *
 * Each message runs as one ax task at its priority and timeout, with no
 * local retry (retries go through the delayed set, so they survive this
 * process). Its on_done (any thread) puts it on the done list and wakes the
 * acker through an eventfd; the acker wakes the puller through another.
 *
 * Outcomes: SUCCEEDED -> ok; FAILED / TIMED_OUT with retries left and the
 * deadline not passed by the back-off -> retry; else -> dead; CANCELLED
 * (shutdown, consumer stopped) -> no record: the entry stays pending,
 * handed back (hand_back: its idle time set past any visibility_ms) for
 * another consumer's next claim pass.
 */
#define _GNU_SOURCE
#include "redis.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct handler {
    char kind[AX_REDIS_KIND_MAX];
    ax_redis_handler fn;
    void *arg;
    unsigned class_id; /* the ax task class its messages run in, 0 none */
};

/* OUT_REQUEUE: this process refused to start it (its own admission: a full
 * bucket, shedding, rate limit, an open breaker): back to the delayed set
 * for a moment, its attempt not counted -- another process, or this one a
 * little later, runs it. */
enum { OUT_OK, OUT_RETRY, OUT_DEAD, OUT_ABANDON, OUT_REQUEUE };

/* One delivery held by this consumer, from read to terminal record. */
struct rmsg {
    struct rmsg *next;         /* done list */
    struct rmsg *hprev, *hnext; /* held list */
    uint64_t touched_ns;       /* delivered, or its idle time last reset */
    unsigned hb_pass;          /* the heartbeat pass that chose it last (c->hb_pass) */
    unsigned hb_chunk;         /* ... and its round trip in that pass */
    ax_redis_consumer *c;
    int key;                   /* round position of its stream: 0 high, 1 normal, 2 low */
    ax_priority prio;
    char entry_id[AX_REDIS_ID_MAX], origin[AX_REDIS_ID_MAX];
    char kind[AX_REDIS_KIND_MAX], trace[AX_TRACE_ID_MAX];
    char *payload;
    size_t len;
    uint64_t timeout_ms, deadline_ms;
    unsigned max_retry, attempt, deliveries;
    /* The handler's run and the task's on_done each hold the message; the
     * last to let go gives it to the acker, which frees it. A timeout or a
     * cancel ends the attempt (on_done) while the handler may run on until
     * it notices: the acker freed the message under it (ax_redis_msg is
     * valid until the handler returns). */
    atomic_uint holds;
    /* the outcome, filled by on_done */
    int outcome;
    char err[AX_ERROR_MAX];
    /* the RS_ACK command's storage */
    char due[24], next_attempt[12], prio_idx[12], to[24], mr[12], dl[24];
    const char *argv[40];
    size_t lens[40];
};

struct ax_redis_consumer {
    ax_sched *s;
    ax_redis_queue *q;
    ax_redis_consumer_config cfg;
    char name[128];
    struct handler *h;
    size_t nh, hcap;
    ax_redis *pull_conn, *ack_conn;
    int done_efd, slot_efd;
    pthread_mutex_t lock; /* the done list and the held list */
    struct rmsg *done_head, *done_tail;
    struct rmsg *held_head; /* every message held, for the heartbeat */
    unsigned hb_pass; /* heartbeat passes (under lock) */
    atomic_uint held;
    /* Wall ms the delayed set's next retry is due, as the puller's last
     * maintenance pass found it (0: none or taken): for the acker, which
     * promotes it then (retries a stopped or dead consumer left). */
    _Atomic uint64_t promote_hint;
    atomic_bool stopping, started;
    atomic_bool stop_busy; /* an ax_redis_consumer_stop is running */
    struct ax_redis_consumer *reg_next; /* the process's consumers (reg_lock) */
    bool registered;
    atomic_bool puller_running, acker_running; /* cleared by their tasks' on_done */
    atomic_uint live_tasks;     /* of the puller and the acker, submitted and not done */
    atomic_bool ended_by_sched; /* they ended without a stop: the scheduler may be gone */
    atomic_uint inflight; /* message tasks submitted whose on_done has not returned */
    atomic_bool sched_closed; /* ax_submit said AX_ESHUTDOWN: pull no more */
    uint64_t puller_id, acker_id;
    unsigned quota[3]; /* by round position: high, normal, low */
    unsigned rr, taken;
    char cursor[3][AX_REDIS_ID_MAX];
    _Atomic uint64_t pulled, claimed, redelivered, succeeded, retried, dead, ack_lost, errors,
        abandoned, handed_back;
    /* The queue's stats as the puller last read them (every claim
     * interval), for the /metrics scrape: no Redis round trip on the
     * metrics thread. Under lock. */
    ax_redis_queue_stats qstats;
    bool qstats_ok;
    atomic_bool metrics_on;
};

/* The scheduler whose worker this thread is, as far as the consumer can
 * tell: set by each of its tasks (puller, acker, every message) on the
 * thread it runs on, never cleared (a worker serves one scheduler for its
 * life). ax_task_current() tells ax_redis_consumer_stop that it was called
 * from one of the scheduler's tasks; this also catches an on_done or other
 * callback on a thread that runs the consumer's own tasks, where waiting
 * for those tasks would wait for itself. */
static _Thread_local ax_sched *worker_of;

static const int round_key[3] = {KEY_HIGH, KEY_NORMAL, KEY_LOW};
static const ax_priority key_prio[3] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void ax_redis_consumer_config_default(ax_redis_consumer_config *c)
{
    if (!c)
        return;
    memset(c, 0, sizeof *c);
    c->slots = 64;
    c->low_guaranteed = 1;
    c->block_ms = 200;
    c->visibility_ms = 30000;
    c->claim_interval_ms = 1000;
    c->max_deliveries = 5;
    c->retry = (ax_retry_policy){.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 1000, .max_ms = 30000,
                                 .jitter_ms = 1000};
}

static void kick(int efd)
{
    uint64_t one = 1;
    ssize_t n = write(efd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is already non-zero, the reader will wake */
}

static void drain(int efd)
{
    uint64_t v;
    ssize_t n = read(efd, &v, sizeof v);
    (void)n;
}

/* A failed Redis call, for stats.redis_errors. Not one the consumer's own
 * stop or its scheduler's shutdown cancelled (AX_ECANCELED): that is not
 * a Redis failure. */
static void count_err(ax_redis_consumer *c, int rc)
{
    /* AX_EBUSY: the connection was in use by another of our own callers,
     * no Redis call failed */
    if (rc != AX_ECANCELED && rc != AX_EBUSY)
        atomic_fetch_add(&c->errors, 1);
}

static void msg_free(struct rmsg *m)
{
    if (m) {
        free(m->payload);
        free(m);
    }
}

static void hold(ax_redis_consumer *c, struct rmsg *m)
{
    m->touched_ns = ax_now_ns();
    pthread_mutex_lock(&c->lock);
    m->hprev = NULL;
    m->hnext = c->held_head;
    if (c->held_head)
        c->held_head->hprev = m;
    c->held_head = m;
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(&c->held, 1);
}

/* The message's record is written (or given up): free it and its slot. */
static void release(ax_redis_consumer *c, struct rmsg *m)
{
    pthread_mutex_lock(&c->lock);
    if (m->hprev)
        m->hprev->hnext = m->hnext;
    else
        c->held_head = m->hnext;
    if (m->hnext)
        m->hnext->hprev = m->hprev;
    pthread_mutex_unlock(&c->lock);
    msg_free(m);
    /* The puller waits on slot_efd only with 2 free slots or fewer (the
     * puller's loop): a release that leaves more than that wakes no one,
     * and each write(2) saved is ~1 us of the consumer's CPU per message. */
    unsigned was = atomic_fetch_sub(&c->held, 1);
    if (was + 2 >= c->cfg.slots)
        kick(c->slot_efd);
}

static bool is_held(ax_redis_consumer *c, int key, const char *entry_id)
{
    bool found = false;
    pthread_mutex_lock(&c->lock);
    for (struct rmsg *m = c->held_head; m && !found; m = m->hnext)
        found = m->key == key && strcmp(m->entry_id, entry_id) == 0;
    pthread_mutex_unlock(&c->lock);
    return found;
}

/* Wake the acker only when the done list was empty: a non-empty one has
 * been kicked already, and the acker takes the list again after each batch
 * until it finds it empty, before it waits. */
static void push_done(ax_redis_consumer *c, struct rmsg *m)
{
    m->next = NULL;
    pthread_mutex_lock(&c->lock);
    bool was_empty = !c->done_head;
    if (c->done_tail)
        c->done_tail->next = m;
    else
        c->done_head = m;
    c->done_tail = m;
    pthread_mutex_unlock(&c->lock);
    if (was_empty)
        kick(c->done_efd);
}

/* ---- new, handlers, stats ------------------------------------------------------------- */

static bool name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.' || ch == ':' || ch == '-';
}

static bool name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len >= 128)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!name_char(n[i]))
            return false;
    return true;
}

/* The process's consumers, by queue and name: two consumers with one name
 * in one group share a pending list, and each would claim, acknowledge and
 * heartbeat the other's messages as its own (a trial made two on one queue
 * in one process: both were accepted, and both had the default name). */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static ax_redis_consumer *reg_head;

/* The same Redis queue: its name and server. */
static bool same_queue(const ax_redis_queue *a, const ax_redis_queue *b)
{
    if (a == b)
        return true;
    if (strcmp(a->name, b->name) != 0 || a->conn.port != b->conn.port)
        return false;
    const char *ah = a->conn.host ? a->conn.host : "", *bh = b->conn.host ? b->conn.host : "";
    const char *au = a->conn.unix_path ? a->conn.unix_path : "",
               *bu = b->conn.unix_path ? b->conn.unix_path : "";
    return strcmp(ah, bh) == 0 && strcmp(au, bu) == 0;
}

static bool name_taken_locked(const ax_redis_queue *q, const char *name)
{
    for (ax_redis_consumer *o = reg_head; o; o = o->reg_next)
        if (same_queue(o->q, q) && strcmp(o->name, name) == 0)
            return true;
    return false;
}

/* Name c (cfg's, or HOST-PID, then HOST-PID-2, -3, ... for the next ones
 * of this process on the queue) and register it; AX_EBUSY for a name of
 * cfg's already taken. */
static int register_consumer(ax_redis_consumer *c, const char *want)
{
    pthread_mutex_lock(&reg_lock);
    int rc = AX_OK;
    if (want) {
        snprintf(c->name, sizeof c->name, "%s", want);
        if (name_taken_locked(c->q, c->name))
            rc = ax_fail(AX_EBUSY,
                         "ax_redis_consumer_new: a consumer named %s of queue %s exists in this "
                         "process (a name is unique per process and queue)",
                         c->name, c->q->name);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        snprintf(c->name, sizeof c->name, "%s-%ld", host, (long)getpid());
        for (char *p = c->name; *p; p++) /* a metrics label: keep it plain */
            if (!name_char(*p))
                *p = '_';
        char base[sizeof c->name];
        memcpy(base, c->name, sizeof base);
        for (unsigned k = 2; name_taken_locked(c->q, c->name); k++)
            snprintf(c->name, sizeof c->name, "%.100s-%u", base, k);
    }
    if (!rc) {
        c->reg_next = reg_head;
        reg_head = c;
        c->registered = true;
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

static void unregister_consumer(ax_redis_consumer *c)
{
    if (!c->registered)
        return;
    pthread_mutex_lock(&reg_lock);
    for (ax_redis_consumer **pp = &reg_head; *pp; pp = &(*pp)->reg_next)
        if (*pp == c) {
            *pp = c->reg_next;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    c->registered = false;
}

int ax_redis_consumer_new(ax_sched *s, ax_redis_queue *q, const ax_redis_consumer_config *cfg,
                          ax_redis_consumer **out)
{
    if (!s || !q || !out)
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_new: s, q and out are required");
    *out = NULL;
    /* Said here, not first at ax_redis_consumer_start: a consumer of a
     * scheduler that is shutting down could never run one message. */
    if (atomic_load(&s->closing))
        return ax_fail_static(AX_ESHUTDOWN, "ax_redis_consumer_new: the scheduler is shutting "
                                            "down (ax_shutdown was called)");
    ax_redis_consumer_config d;
    if (!cfg) {
        ax_redis_consumer_config_default(&d);
        cfg = &d;
    }
    if (cfg->slots == 0 || cfg->slots > 1000000)
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_config.slots must be 1..1000000");
    if (cfg->low_guaranteed == 0)
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_config.low_guaranteed must be > 0");
    if (cfg->block_ms == 0 || cfg->visibility_ms == 0 || cfg->claim_interval_ms == 0 ||
        cfg->max_deliveries == 0)
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_config: block_ms, visibility_ms, "
                                         "claim_interval_ms and max_deliveries must be > 0");
    if ((uint64_t)cfg->claim_interval_ms * 2 >= cfg->visibility_ms)
        return ax_fail(AX_EINVAL,
                       "ax_redis_consumer_config.claim_interval_ms %u must be < visibility_ms / 2 "
                       "(%u): the heartbeat resets a running message's idle time only every "
                       "claim interval, so another consumer would take it over",
                       cfg->claim_interval_ms, cfg->visibility_ms);
    uint64_t probe;
    int rc = ax_retry_delay_ms(&cfg->retry, 0, 0, &probe);
    if (rc)
        return rc;
    if (cfg->name && !name_ok(cfg->name))
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_config.name must be 1-127 bytes of "
                                         "[A-Za-z0-9_.:-]");
    ax_redis_consumer *c = calloc(1, sizeof *c);
    if (!c)
        return ax_fail_static(AX_ENOMEM, "ax_redis_consumer_new: out of memory");
    c->done_efd = c->slot_efd = -1;
    c->s = s;
    c->q = q;
    atomic_fetch_add(&q->consumers, 1); /* ax_redis_consumer_free gives it back */
    c->cfg = *cfg;
    pthread_mutex_init(&c->lock, NULL);
    if ((rc = register_consumer(c, cfg->name))) {
        ax_redis_consumer_free(c);
        return rc;
    }
    c->cfg.name = c->name;
    unsigned sl = cfg->slots;
    c->quota[0] = cfg->quota_high ? cfg->quota_high : (sl / 2 ? sl / 2 : 1);
    c->quota[1] = cfg->quota_normal ? cfg->quota_normal : (sl / 3 ? sl / 3 : 1);
    c->quota[2] = cfg->low_guaranteed;
    for (int k = 0; k < 3; k++)
        snprintf(c->cursor[k], sizeof c->cursor[k], "0-0");
    c->done_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->slot_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->done_efd < 0 || c->slot_efd < 0) {
        rc = ax_fail(AX_ESYS, "ax_redis_consumer_new: eventfd: %s", strerror(errno));
        ax_redis_consumer_free(c);
        return rc;
    }
    if ((rc = ax_redis_new(&q->conn, &c->pull_conn)) || (rc = ax_redis_new(&q->conn, &c->ack_conn))) {
        ax_redis_consumer_free(c);
        return rc;
    }
    *out = c;
    return AX_OK;
}

int ax_redis_handle(ax_redis_consumer *c, const char *kind, ax_redis_handler fn, void *arg)
{
    return ax_redis_handle_class(c, kind, 0, fn, arg);
}

int ax_redis_handle_class(ax_redis_consumer *c, const char *kind, unsigned class_id,
                          ax_redis_handler fn, void *arg)
{
    if (!c || !kind || !*kind || strlen(kind) >= AX_REDIS_KIND_MAX || !fn)
        return ax_fail_static(AX_EINVAL, "ax_redis_handle: consumer, a 1-63 byte kind and fn are "
                                         "required");
    /* The rules ax_redis_submit applies to a message's kind: a kind it
     * refuses could never reach this handler. */
    int krc = rq_text_check("ax_redis_handle: kind", kind, AX_REDIS_KIND_MAX);
    if (krc)
        return krc;
    if (atomic_load(&c->started))
        return ax_fail_static(AX_ESTATE, "ax_redis_handle: the consumer has started");
    /* Ids come from ax_class_register only: one not registered now never
     * will be (checked here, not as dead letters at run time). */
    if (class_id > ax_class_count(c->s))
        return ax_fail(AX_EINVAL,
                       "ax_redis_handle_class: class_id %u is not a registered class of the "
                       "consumer's scheduler (%u registered)",
                       class_id, ax_class_count(c->s));
    for (size_t i = 0; i < c->nh; i++)
        if (strcmp(c->h[i].kind, kind) == 0)
            return ax_fail(AX_EBUSY, "ax_redis_handle: kind \"%s\" has a handler", kind);
    if (c->nh == c->hcap) {
        size_t cap = c->hcap ? 2 * c->hcap : 8;
        struct handler *nh = realloc(c->h, cap * sizeof *nh);
        if (!nh)
            return ax_fail_static(AX_ENOMEM, "ax_redis_handle: out of memory");
        c->h = nh;
        c->hcap = cap;
    }
    struct handler *h = &c->h[c->nh++];
    snprintf(h->kind, sizeof h->kind, "%s", kind);
    h->fn = fn;
    h->arg = arg;
    h->class_id = class_id;
    return AX_OK;
}

int ax_redis_consumer_stats_get(ax_redis_consumer *c, ax_redis_consumer_stats *o)
{
    if (!c || !o)
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_stats_get: consumer and out are required");
    /* held first: a settled message is counted in its outcome before it
     * leaves held, so a held of 0 read here comes with complete outcomes.
     * The takes (pulled, claimed) last: a message is counted taken before
     * its task exists (dispatch), so takes read after the outcomes are at
     * least the outcomes, never behind them (review: read first, a message
     * taken and settled between the reads showed succeeded ahead). */
    o->held = atomic_load(&c->held);
    o->succeeded = atomic_load(&c->succeeded);
    o->retried = atomic_load(&c->retried);
    o->dead = atomic_load(&c->dead);
    o->ack_lost = atomic_load(&c->ack_lost);
    o->abandoned = atomic_load(&c->abandoned);
    o->handed_back = atomic_load(&c->handed_back);
    o->redis_errors = atomic_load(&c->errors);
    o->redelivered = atomic_load(&c->redelivered);
    o->pulled = atomic_load(&c->pulled);
    o->claimed = atomic_load(&c->claimed);
    return AX_OK;
}

long ax_redis_consumer_prometheus(ax_redis_consumer *c, char *buf, size_t len)
{
    if (!c || (!buf && len))
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_prometheus: consumer and buf");
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(c, &st);
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } fam[] = {
        {"pulled_total", "counter", "New deliveries read.",
         offsetof(ax_redis_consumer_stats, pulled)},
        {"claimed_total", "counter", "Entries taken over from other consumers.",
         offsetof(ax_redis_consumer_stats, claimed)},
        {"redelivered_total", "counter", "Messages run again after a delivery elsewhere.",
         offsetof(ax_redis_consumer_stats, redelivered)},
        {"succeeded_total", "counter", "Successes recorded by this consumer.",
         offsetof(ax_redis_consumer_stats, succeeded)},
        {"retried_total", "counter", "Messages sent to the delayed set: failed attempts to retry, and messages the scheduler refused or never ran, handed back.",
         offsetof(ax_redis_consumer_stats, retried)},
        {"dead_total", "counter", "Messages dead-lettered by this consumer.",
         offsetof(ax_redis_consumer_stats, dead)},
        {"ack_lost_total", "counter", "Outcomes another consumer had recorded first.",
         offsetof(ax_redis_consumer_stats, ack_lost)},
        {"redis_errors_total", "counter", "Failed Redis calls (each retried).",
         offsetof(ax_redis_consumer_stats, redis_errors)},
        {"abandoned_total", "counter", "Messages left pending unrun (their task cancelled).",
         offsetof(ax_redis_consumer_stats, abandoned)},
        {"handed_back_total", "counter",
         "Abandoned messages made claimable by other consumers at once.",
         offsetof(ax_redis_consumer_stats, handed_back)},
        {"held", "gauge", "Messages pulled and not yet acknowledged.",
         offsetof(ax_redis_consumer_stats, held)},
    };
    size_t pos = 0;
    if (len)
        buf[0] = 0;
    for (size_t i = 0; i < sizeof fam / sizeof *fam; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&st + fam[i].off, sizeof v);
        size_t room = pos < len ? len - pos : 0;
        int n = snprintf(room ? buf + pos : NULL, room,
                         "# HELP ax_redis_consumer_%s %s\n# TYPE ax_redis_consumer_%s %s\n"
                         "ax_redis_consumer_%s{queue=\"%s\",consumer=\"%s\"} %" PRIu64 "\n",
                         fam[i].name, fam[i].help, fam[i].name, fam[i].type, fam[i].name,
                         c->q->name, c->name, v);
        if (n > 0)
            pos += (size_t)n;
    }
    return (long)pos;
}

/* ---- one message as an ax task ----------------------------------------------------------- */

/* Let go of m: the last hold hands it to the acker (and is the last touch
 * of m and of its consumer). */
static void msg_hold_drop(struct rmsg *m)
{
    if (atomic_fetch_sub(&m->holds, 1) != 1)
        return;
    ax_redis_consumer *c = m->c;
    push_done(c, m);
    atomic_fetch_sub(&c->inflight, 1); /* last touch of c */
}

static void run_msg_end(void *arg)
{
    msg_hold_drop(arg); /* the handler is done with it */
}

static int run_msg(ax_task *t, void *arg)
{
    struct rmsg *m = arg;
    ax_redis_consumer *c = m->c;
    worker_of = c->s;
    /* The run's hold is let go by a cleanup, registered first so that it
     * runs last (after the handler's own, which may still read the
     * message): cleanups also run when the handler panics, and ax_panic
     * never returns here (review: a panicking handler's message stayed
     * held for ever). Without room for it, at the return. */
    bool deferred = ax_defer(t, run_msg_end, m) == AX_OK;
    int rc = -1;
    size_t i = 0;
    while (i < c->nh && strcmp(c->h[i].kind, m->kind) != 0)
        i++;
    if (i < c->nh) {
        ax_redis_msg rm = {.id = m->origin, .entry_id = m->entry_id, .kind = m->kind,
                           .payload = m->payload, .len = m->len, .trace_id = m->trace,
                           .priority = m->prio, .attempt = m->attempt,
                           .deliveries = m->deliveries,
                           .submitted_ms = strtoull(m->origin + 2, NULL, 10)};
        rc = c->h[i].fn(t, &rm, c->h[i].arg);
    } else {
        ax_task_set_error(t, "no handler for kind \"%s\"", m->kind);
    }
    if (!deferred)
        msg_hold_drop(m); /* the handler is done with it */
    return rc;
}

/* The outcome of a failed attempt: a retry if allowed, else a dead letter. */
static void fail_outcome(struct rmsg *m, const char *err)
{
    snprintf(m->err, sizeof m->err, "%s", err && *err ? err : "failed");
    m->outcome = m->attempt < m->max_retry ? OUT_RETRY : OUT_DEAD;
    if (m->outcome == OUT_RETRY) {
        uint64_t delay = 0;
        ax_retry_delay_ms(&m->c->cfg.retry, m->attempt, ax_rand64(), &delay);
        uint64_t due = wall_ms() + delay;
        if (m->deadline_ms && due >= m->deadline_ms) {
            m->outcome = OUT_DEAD;
            size_t n = strlen(m->err);
            snprintf(m->err + n, sizeof m->err - n, "; its deadline ends before a retry");
        }
        snprintf(m->due, sizeof m->due, "%" PRIu64, due);
    }
}

static void msg_done(const ax_result *r, void *arg)
{
    struct rmsg *m = arg;
    if (r->state == AX_STATE_SUCCEEDED) {
        m->outcome = OUT_OK;
    } else if (r->state == AX_STATE_CANCELLED) {
        m->outcome = OUT_ABANDON;
    } else if (r->code == AX_EOPEN && r->run_ns == 0) {
        /* Its class's breaker opened while it waited here and ended it
         * unstarted: the refusal ax_submit gives once it is open, so
         * handed back the same way (its attempt not counted). */
        int k = snprintf(m->err, sizeof m->err, "handed back: %s: ", ax_strerror(r->code));
        if (k > 0 && (size_t)k < sizeof m->err)
            memccpy(m->err + k, r->error, 0, sizeof m->err - (size_t)k - 1);
        m->err[sizeof m->err - 1] = 0;
        snprintf(m->due, sizeof m->due, "%" PRIu64, wall_ms() + 50 + ax_rand64() % 51);
        m->outcome = OUT_REQUEUE;
    } else {
        fail_outcome(m, r->error);
    }
    /* run_ns 0: its attempt never ran (ax_result's contract), so run_msg
     * holds nothing; else the handler lets go when it returns. */
    if (r->run_ns == 0)
        atomic_fetch_sub(&m->holds, 1);
    msg_hold_drop(m);
}

static const redisReply *field(const redisReply *f, const char *name)
{
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING && strcmp(f->element[i]->str, name) == 0)
            return f->element[i + 1];
    return NULL;
}

static uint64_t num(const redisReply *v)
{
    return v && v->type == REDIS_REPLY_STRING ? strtoull(v->str, NULL, 10) : 0;
}

/* False (dst empty) when v is absent, not a string or does not fit. */
static bool copy_str(char *dst, size_t cap, const redisReply *v)
{
    dst[0] = 0;
    if (!v || v->type != REDIS_REPLY_STRING || v->len >= cap)
        return false;
    memcpy(dst, v->str, v->len + 1);
    return true;
}

/* Take one delivered entry: hold it and start its task (or record its
 * outcome at once). */
/* False when it could not take the message (out of memory): it stays
 * pending, claimed after visibility_ms, and is not counted as pulled or
 * claimed (the books: pulled + claimed = what was held since). `taken`
 * (pulled or claimed) is counted here, before its task is submitted: the
 * task may run and end on another worker before the caller's next line
 * (CI, ASan: a claimed message succeeded while claimed still read 0). */
static bool dispatch(ax_redis_consumer *c, int key, const redisReply *id, const redisReply *fields,
                     unsigned deliveries, _Atomic uint64_t *taken)
{
    struct rmsg *m = calloc(1, sizeof *m);
    if (!m)
        return false;
    atomic_fetch_add(taken, 1);
    m->c = c;
    m->key = key;
    m->prio = key_prio[key];
    m->deliveries = deliveries;
    copy_str(m->entry_id, sizeof m->entry_id, id);
    hold(c, m);
    if (deliveries > 1)
        atomic_fetch_add(&c->redelivered, 1);
    const redisReply *k = field(fields, "k"), *p = field(fields, "p"), *o = field(fields, "o");
    bool kind_ok = copy_str(m->kind, sizeof m->kind, k) && m->kind[0];
    copy_str(m->trace, sizeof m->trace, field(fields, "t"));
    /* The origin id is the handler's idempotency key: one that does not
     * fit is not cut (two messages would share a key) nor emptied (every
     * such message would share ""): the message is dead-lettered, under
     * the id its entry gives it. */
    bool origin_ok = !o || (copy_str(m->origin, sizeof m->origin, o) && m->origin[0]);
    if (!o || !origin_ok)
        snprintf(m->origin, sizeof m->origin, "%c:%.40s", rq_prio_letter(m->prio), m->entry_id);
    m->timeout_ms = num(field(fields, "to"));
    m->max_retry = (unsigned)num(field(fields, "r"));
    m->deadline_ms = num(field(fields, "dl"));
    m->attempt = (unsigned)num(field(fields, "a"));
    if (p && p->type == REDIS_REPLY_STRING) {
        m->payload = malloc(p->len + 1);
        if (m->payload) {
            memcpy(m->payload, p->str, p->len);
            m->payload[p->len] = 0;
            m->len = p->len;
        }
    }
    const char *bad =
        !kind_ok    ? "malformed message: its kind (field k) is missing, empty or longer than 63 bytes"
        : !origin_ok ? "malformed message: its origin id (field o) is empty or longer than 47 bytes"
        : m->timeout_ms == 0 ? "malformed message: it has no timeout (field to)"
        : (p && !m->payload) ? "out of memory for its payload"
                             : NULL;
    _Static_assert(AX_REDIS_KIND_MAX == 64 && AX_REDIS_ID_MAX == 48, "the messages above");
    if (bad) {
        snprintf(m->err, sizeof m->err, "%s", bad);
        m->outcome = OUT_DEAD;
        push_done(c, m);
        return true;
    }
    uint64_t now = wall_ms();
    if (m->deadline_ms && now >= m->deadline_ms) {
        snprintf(m->err, sizeof m->err, "its deadline passed before it started");
        m->outcome = OUT_DEAD;
        push_done(c, m);
        return true;
    }
    /* ref: the message id, so that its task's lifecycle events name the
     * message (grep the logs of every process for one id) */
    ax_spec sp = {.fn = run_msg, .arg = m, .priority = m->prio, .timeout_ms = m->timeout_ms,
                  .trace_id = m->trace, .on_done = msg_done, .cb_arg = m, .ref = m->origin};
    /* The kind's task class, if it has one: its overload control (limit,
     * breaker, queue-time budget) applies; the message keeps its priority,
     * its timeout and no local retry (retries go through the delayed set). */
    for (size_t i = 0; i < c->nh; i++)
        if (c->h[i].class_id && strcmp(c->h[i].kind, m->kind) == 0) {
            sp.class_id = c->h[i].class_id;
            sp.overrides = AX_SPEC_PRIORITY | AX_SPEC_MAX_RETRY;
        }
    if (m->deadline_ms)
        sp.deadline_ns = ax_now_ns() + (m->deadline_ms - now) * 1000000u;
    atomic_fetch_add(&c->inflight, 1);
    atomic_store(&m->holds, 2); /* the handler's run and on_done (msg_hold_drop) */
    int rc = ax_submit(c->s, &sp, NULL);
    if (rc)
        atomic_fetch_sub(&c->inflight, 1); /* refused: no on_done */
    if (rc == AX_ESHUTDOWN) {
        /* The scheduler is shutting down: pull no more (the puller leaves
         * its loop), and hand this one back through the delayed set at
         * once, its attempt not counted (its entry leaves the pending list,
         * so this delivery does not count towards max_deliveries either).
         * If the acker is gone before it writes that, it stays pending. */
        atomic_store(&c->sched_closed, true);
        snprintf(m->err, sizeof m->err, "handed back: %s: %s", ax_strerror(rc), ax_error_detail());
        snprintf(m->due, sizeof m->due, "%" PRIu64, wall_ms());
        m->outcome = OUT_REQUEUE;
        push_done(c, m);
    } else if (rc == AX_EFULL || rc == AX_ESHED || rc == AX_ERATE || rc == AX_EOPEN) {
        snprintf(m->err, sizeof m->err, "handed back: %s: %s", ax_strerror(rc), ax_error_detail());
        snprintf(m->due, sizeof m->due, "%" PRIu64, wall_ms() + 50 + ax_rand64() % 51);
        m->outcome = OUT_REQUEUE;
        push_done(c, m);
    } else if (rc) {
        char e[AX_ERROR_MAX];
        snprintf(e, sizeof e, "local submit: %s: %s", ax_strerror(rc), ax_error_detail());
        fail_outcome(m, e);
        push_done(c, m);
    }
    return true;
}

/* ---- the puller ---------------------------------------------------------------------------- */

static int pull_cmd(ax_task *t, ax_redis_consumer *c, int64_t timeout_ms, int argc,
                    const char **argv, redisReply **rep)
{
    size_t lens[16];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    struct rcmd cmd = {argc, argv, lens};
    int rc = rconn_pipeline(t, c->pull_conn, timeout_ms, 1, &cmd, rep);
    bool expected = false;
    if (rc == AX_OK && (*rep)->type == REDIS_REPLY_ERROR) {
        /* XGROUP CREATE of a group that exists: the answer create_groups
         * expects at every start, not a failure */
        expected = strncmp((*rep)->str, "BUSYGROUP", 9) == 0;
        rc = ax_fail(AX_ENET, "redis: %s: %s", argv[0], (*rep)->str);
        freeReplyObject(*rep);
        *rep = NULL;
    }
    if (rc && !expected)
        count_err(c, rc);
    return rc;
}

static int create_groups(ax_task *t, ax_redis_consumer *c)
{
    for (int k = 0; k < 3; k++) {
        const char *argv[] = {"XGROUP", "CREATE", c->q->key[round_key[k]], RGROUP, "0", "MKSTREAM"};
        redisReply *rep;
        int rc = pull_cmd(t, c, -1, 6, argv, &rep);
        if (rc && !strstr(ax_error_detail(), "BUSYGROUP"))
            return rc;
        if (!rc)
            freeReplyObject(rep);
    }
    return AX_OK;
}

/* Hand out the entries of an XREADGROUP reply; returns how many. */
static int take_read(ax_redis_consumer *c, const redisReply *rep)
{
    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        return 0; /* nil: nothing new */
    int got = 0;
    for (int k = 0; k < 3; k++) /* in priority order, whatever the reply's */
        for (size_t i = 0; i < rep->elements; i++) {
            const redisReply *s = rep->element[i];
            if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 ||
                strcmp(s->element[0]->str, c->q->key[round_key[k]]) != 0)
                continue;
            const redisReply *es = s->element[1];
            for (size_t j = 0; j < es->elements; j++) {
                const redisReply *e = es->element[j];
                if (e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
                    e->element[1]->type == REDIS_REPLY_ARRAY) {
                    if (dispatch(c, k, e->element[0], e->element[1], 1, &c->pulled))
                        got++;
                }
            }
        }
    return got;
}

static int read_stream(ax_task *t, ax_redis_consumer *c, int k, unsigned n)
{
    char count[16];
    snprintf(count, sizeof count, "%u", n);
    const char *argv[] = {"XREADGROUP", "GROUP", RGROUP, c->name, "COUNT", count,
                          "STREAMS",    c->q->key[round_key[k]], ">"};
    redisReply *rep = NULL;
    int rc = pull_cmd(t, c, -1, 9, argv, &rep);
    if (rc)
        return rc;
    int got = take_read(c, rep);
    freeReplyObject(rep);
    return got;
}

/* One pass of the quota rounds with `free` slots: as sched_pick_locked. */
static int read_rounds(ax_task *t, ax_redis_consumer *c, unsigned free)
{
    unsigned rr0 = c->rr, taken0 = c->taken;
    int total = 0;
    for (int tries = 0; tries <= 3 && free > 0; tries++) {
        unsigned k = c->rr;
        unsigned n = c->quota[k] - c->taken;
        if (n > free)
            n = free;
        int got = read_stream(t, c, (int)k, n);
        if (got < 0)
            return got;
        if (atomic_load(&c->sched_closed))
            return total + got;
        total += got;
        free -= (unsigned)got;
        c->taken += (unsigned)got;
        if ((unsigned)got == n && c->taken < c->quota[k])
            break; /* out of slots mid-turn: the turn goes on next time */
        c->rr = (c->rr + 1) % 3; /* quota spent or the stream ran dry */
        c->taken = 0;
    }
    if (total == 0) { /* all empty: leave the round where it was */
        c->rr = rr0;
        c->taken = taken0;
    }
    return total;
}

static int read_blocking(ax_task *t, ax_redis_consumer *c, uint32_t block_ms)
{
    char bl[16];
    snprintf(bl, sizeof bl, "%u", block_ms);
    const char *argv[] = {"XREADGROUP", "GROUP", RGROUP, c->name, "COUNT", "1", "BLOCK", bl,
                          "STREAMS", c->q->key[KEY_HIGH], c->q->key[KEY_NORMAL], c->q->key[KEY_LOW],
                          ">", ">", ">"};
    redisReply *rep = NULL;
    /* Redis ends a BLOCK only when its event loop next looks at the
     * blocked clients: up to a serverCron period (1 / hz: 100 ms at the
     * default hz 10) after the BLOCK's end. With command_timeout_ms of 100
     * an idle consumer's reads timed out 6-9 times in 8 s (review), each a
     * reconnect and a redis_error. Hence the allowance on top. */
    enum { REDIS_BLOCK_LATE_MS = 250 };
    int rc = pull_cmd(t, c,
                      (int64_t)block_ms + c->q->conn.command_timeout_ms + REDIS_BLOCK_LATE_MS, 15,
                      argv, &rep);
    if (rc)
        return rc;
    int got = take_read(c, rep);
    freeReplyObject(rep);
    return got;
}

/* Move due retries from the delayed set to their streams, on connection
 * `conn`. *next_ms: in how many ms the next one left there is due (1 if it
 * is due already: more than one call's 1 000 were; 0: none). */
static int promote(ax_task *t, ax_redis_consumer *c, ax_redis *conn, uint64_t *next_ms)
{
    char now[24];
    uint64_t wall = wall_ms();
    *next_ms = 0;
    snprintf(now, sizeof now, "%" PRIu64, wall);
    const char *keys[] = {c->q->key[KEY_HIGH],    c->q->key[KEY_NORMAL], c->q->key[KEY_LOW],
                          c->q->key[KEY_DELAYED], c->q->key[KEY_DEAD],   c->q->key[KEY_STATS]};
    const char *args[] = {now, "1000"};
    redisReply *rep = NULL;
    int rc = rscript_call(t, conn, -1, RS_PROMOTE, 6, keys, 2, args, NULL, &rep);
    if (rc == AX_OK && rep->type == REDIS_REPLY_ERROR)
        rc = ax_fail(AX_ENET, "redis: promote: %s", rep->str);
    if (rc == AX_OK && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
        rep->element[1]->type == REDIS_REPLY_STRING) {
        /* The score: wall ms, maybe fractional; "-1" when the set is empty. */
        double due = strtod(rep->element[1]->str, NULL);
        if (due >= 0 && due <= (double)wall)
            *next_ms = 1;
        else if (due > (double)wall && due - (double)wall < 1e12) /* a score set by hand: no UB */
            *next_ms = (uint64_t)(due - (double)wall) + 1;
    }
    if (rep)
        freeReplyObject(rep);
    if (rc)
        count_err(c, rc);
    return rc;
}

/* Claim into at most `free` slots; *taken: how many it dispatched. */
static int claim(ax_task *t, ax_redis_consumer *c, unsigned free, unsigned *taken)
{
    unsigned asked = free;
    *taken = 0;
    char idle[16], count[16], maxd[16];
    snprintf(idle, sizeof idle, "%u", c->cfg.visibility_ms);
    snprintf(maxd, sizeof maxd, "%u", c->cfg.max_deliveries);
    for (int k = 0; k < 3 && free > 0 && !atomic_load(&c->sched_closed); k++) {
        snprintf(count, sizeof count, "%u", free);
        const char *keys[] = {c->q->key[round_key[k]], c->q->key[KEY_DEAD], c->q->key[KEY_STATS]};
        const char letter[2] = {rq_prio_letter(key_prio[k]), 0};
        const char *args[] = {c->name, idle, c->cursor[k], count, maxd, letter};
        redisReply *rep = NULL;
        int rc = rscript_call(t, c->pull_conn, -1, RS_CLAIM, 3, keys, 6, args, NULL, &rep);
        if (rc == AX_OK && rep->type == REDIS_REPLY_ERROR)
            rc = ax_fail(AX_ENET, "redis: claim: %s", rep->str);
        if (rc) {
            if (rep)
                freeReplyObject(rep);
            count_err(c, rc);
            return rc;
        }
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2) {
            /* entries it dead-lettered (delivered more than max_deliveries
             * times): taken over by this consumer and recorded dead */
            if (rep->elements >= 3 && rep->element[2]->type == REDIS_REPLY_INTEGER &&
                rep->element[2]->integer > 0) {
                atomic_fetch_add(&c->claimed, (uint64_t)rep->element[2]->integer);
                atomic_fetch_add(&c->dead, (uint64_t)rep->element[2]->integer);
            }
            copy_str(c->cursor[k], sizeof c->cursor[k], rep->element[0]);
            if (!c->cursor[k][0])
                snprintf(c->cursor[k], sizeof c->cursor[k], "0-0");
            const redisReply *list = rep->element[1];
            for (size_t i = 0; i < list->elements; i++) {
                const redisReply *e = list->element[i];
                if (e->type != REDIS_REPLY_ARRAY || e->elements != 3 ||
                    e->element[1]->type != REDIS_REPLY_ARRAY)
                    continue;
                unsigned d = e->element[2]->type == REDIS_REPLY_INTEGER
                                 ? (unsigned)e->element[2]->integer
                                 : 2;
                if (e->element[0]->type != REDIS_REPLY_STRING ||
                    is_held(c, k, e->element[0]->str))
                    continue; /* ours, still running (this process stalled): not twice */
                if (!dispatch(c, k, e->element[0], e->element[1], d, &c->claimed))
                    continue;
                free--;
            }
        }
        freeReplyObject(rep);
    }
    *taken = asked - free;
    return AX_OK;
}

/* After a heartbeat pass: the messages it sent in round trip k on a
 * stream whose XCLAIM succeeded (ok[k][stream]) had their idle time reset
 * at sent[k] or later. One scan of the held list. */
static void heartbeat_done(ax_redis_consumer *c, unsigned pass, bool (*ok)[3],
                           const uint64_t *sent, size_t nchunks)
{
    pthread_mutex_lock(&c->lock);
    for (struct rmsg *m = c->held_head; m; m = m->hnext)
        if (m->hb_pass == pass && m->hb_chunk < nchunks && ok[m->hb_chunk][m->key])
            m->touched_ns = sent[m->hb_chunk];
    pthread_mutex_unlock(&c->lock);
}

/* Reset the idle time of the messages held longer than half the visibility
 * timeout (XCLAIM to ourselves, JUSTID: the delivery count stays), so a
 * handler that runs long is not taken over while this process is alive.
 * A message counts as reset only once Redis said so: before, it was marked
 * when chosen, so one heartbeat lost to a timeout, a reconnect or an error
 * reply (NOPERM, LOADING, BUSY: not even counted) put off the next try by
 * another half visibility, past the visibility itself, and a live peer's
 * XAUTOCLAIM took every message this process was still running (review:
 * all 8 of 8 ran twice, in 5 runs of 10 with a 450 ms pause, 2 of 2 with
 * XCLAIM refused for 1.3 s). Now the next maintenance pass tries again.
 * Every message due goes out in one pass, HB_CHUNK per round trip: one
 * round trip a pass left all but the 512 newest (the held list is newest
 * first) for the next passes, and with 1 100 held a live peer took the 76
 * oldest (review). The held list is scanned twice a pass under the lock
 * (to choose, and to mark what Redis reset), whatever the number of round
 * trips: a scan a round trip made a pass O(held^2 / 512), 6 s at 300 000
 * held (review). An error reply fails its stream's messages, counted in
 * redis_errors, and the pass goes on; only a failed round trip (the
 * connection) ends it and is returned, as it also fails the claim that
 * follows. deadline_ns: when each round trip must be over (0: the
 * connection's command_timeout_ms). */
enum { HB_CHUNK = 512 };

static int heartbeat(ax_task *t, ax_redis_consumer *c, uint64_t deadline_ns)
{
    uint64_t half = (uint64_t)c->cfg.visibility_ms * 500000u, now = ax_now_ns();
    size_t cap = atomic_load(&c->held) + 1, n = 0;
    char (*ids)[AX_REDIS_ID_MAX] = malloc(cap * sizeof *ids);
    int *keys = malloc(cap * sizeof *keys);
    size_t nchunks_max = cap / HB_CHUNK + 1;
    bool (*ok)[3] = calloc(nchunks_max, sizeof *ok);
    uint64_t *sent = malloc(nchunks_max * sizeof *sent);
    const char **argv = malloc((HB_CHUNK + 6 * 3) * sizeof *argv);
    size_t *lens = malloc((HB_CHUNK + 6 * 3) * sizeof *lens);
    int rc = AX_OK;
    if (!ids || !keys || !ok || !sent || !argv || !lens) {
        rc = ax_fail_static(AX_ENOMEM, "heartbeat: out of memory");
        goto out;
    }
    pthread_mutex_lock(&c->lock);
    unsigned pass = ++c->hb_pass ? c->hb_pass : ++c->hb_pass; /* never 0, a message's first */
    for (struct rmsg *m = c->held_head; m && n < cap; m = m->hnext)
        if (now - m->touched_ns >= half) {
            m->hb_pass = pass;
            m->hb_chunk = (unsigned)(n / HB_CHUNK);
            keys[n] = m->key;
            memcpy(ids[n++], m->entry_id, AX_REDIS_ID_MAX);
        }
    pthread_mutex_unlock(&c->lock);
    size_t nchunks = 0;
    for (size_t first = 0; first < n; first += HB_CHUNK) {
        size_t last = first + HB_CHUNK < n ? first + HB_CHUNK : n;
        struct rcmd cmds[3];
        redisReply *reps[3];
        int cmd_key[3];
        size_t nc = 0, a = 0;
        for (int k = 0; k < 3; k++) {
            size_t start = a;
            const char *head[] = {"XCLAIM", c->q->key[round_key[k]], RGROUP, c->name, "0"};
            for (size_t i = 0; i < 5; i++)
                argv[a++] = head[i];
            for (size_t i = first; i < last; i++)
                if (keys[i] == k)
                    argv[a++] = ids[i];
            if (a == start + 5) {
                a = start;
                continue;
            }
            argv[a++] = "JUSTID";
            for (size_t i = start; i < a; i++)
                lens[i] = strlen(argv[i]);
            cmd_key[nc] = k;
            cmds[nc++] = (struct rcmd){(int)(a - start), argv + start, lens + start};
        }
        int64_t timeout_ms = -1;
        sent[nchunks] = ax_now_ns();
        if (deadline_ns) {
            timeout_ms = deadline_ns > sent[nchunks]
                             ? (int64_t)((deadline_ns - sent[nchunks]) / 1000000u)
                             : 0;
            if (timeout_ms < 1) {
                rc = ax_fail_static(AX_ETIMEDOUT, "heartbeat: no time left");
                break;
            }
        }
        if ((rc = rconn_pipeline(t, c->pull_conn, timeout_ms, nc, cmds, reps)) != AX_OK) {
            count_err(c, rc);
            break;
        }
        for (size_t i = 0; i < nc; i++) {
            if (reps[i]->type == REDIS_REPLY_ERROR)
                count_err(c, ax_fail(AX_ENET, "redis: heartbeat: XCLAIM: %s", reps[i]->str));
            else
                ok[nchunks][cmd_key[i]] = true;
            freeReplyObject(reps[i]);
        }
        nchunks++;
    }
    if (nchunks)
        heartbeat_done(c, pass, ok, sent, nchunks);
out:
    free(ids);
    free(keys);
    free(ok);
    free(sent);
    free(argv);
    free(lens);
    return rc;
}

static unsigned free_slots(ax_redis_consumer *c)
{
    unsigned h = atomic_load(&c->held);
    return h >= c->cfg.slots ? 0 : c->cfg.slots - h;
}

static int wait_efd(ax_task *t, int efd, uint64_t ms)
{
    int rc = ax_wait_fd(t, efd, AX_READ, (int64_t)ms);
    if (rc == AX_OK)
        drain(efd);
    if (rc == AX_ETIMEDOUT && ax_cancelled(t) == 0)
        rc = AX_OK; /* our own bound */
    return rc;
}

/* After a failed read: did the server lose the group (a Redis restarted
 * without persistence, FLUSHALL)? Then create it again before reading. */
static bool lost_group(void)
{
    const char *d = ax_error_detail();
    return strstr(d, "NOGROUP") || strstr(d, "no longer exists");
}

static void consumer_task_end(ax_redis_consumer *c, atomic_bool *running);

static int puller(ax_task *t, void *arg)
{
    ax_redis_consumer *c = arg;
    worker_of = c->s;
    bool groups = false;
    /* Each maintenance pass owes one claim pass, which takes the first slots
     * free from then on: a consumer kept full by its backlog found no free
     * slot at its maintenance passes and claimed a dead consumer's entries
     * only once the backlog was gone (new user's trial: ~10 s after a 2 s
     * visibility, 3 of 3), or never. One pass per claim_interval_ms, not
     * until nothing is left: claims run ahead of new messages of every
     * priority, and while a dead consumer's LOW entries were all claimed
     * first, new HIGH messages waited behind them (review: 1.25 s instead of
     * 2-8 ms). */
    bool claim_owed = false;
    uint64_t next_maint = 0;
    while (!atomic_load(&c->stopping) && !ax_cancelled(t) && !atomic_load(&c->sched_closed)) {
        int rc;
        if (!groups) {
            if ((rc = create_groups(t, c))) {
                ax_sleep(t, 50);
                continue;
            }
            groups = true;
        }
        uint64_t now = ax_now_ns();
        if (now >= next_maint) {
            /* The heartbeat whatever promote said: the messages this
             * process runs must keep their idle time down in any case. */
            /* Due retries: each consumer's acker promotes its own when
             * they are due; this pass takes those a dead consumer left. */
            uint64_t due_ms;
            int prc = promote(t, c, c->pull_conn, &due_ms);
            if (prc == AX_OK && due_ms) {
                atomic_store(&c->promote_hint, wall_ms() + due_ms);
                kick(c->done_efd);
            }
            claim_owed = heartbeat(t, c, 0) == AX_OK && prc == AX_OK;
            ax_redis_queue_stats qs;
            int src = ax_redis_queue_stats_get(t, c->q, -1, &qs);
            if (src == AX_OK) {
                pthread_mutex_lock(&c->lock);
                c->qstats = qs;
                c->qstats_ok = true;
                pthread_mutex_unlock(&c->lock);
            } else {
                count_err(c, src);
            }
            next_maint = now + (uint64_t)c->cfg.claim_interval_ms * 1000000u;
            now = ax_now_ns();
        }
        uint64_t to_maint = next_maint > now ? (next_maint - now) / 1000000u + 1 : 1;
        unsigned free = free_slots(c);
        if (free == 0) {
            wait_efd(t, c->slot_efd, to_maint);
            continue;
        }
        if (claim_owed) {
            unsigned taken = 0;
            claim_owed = false;
            claim(t, c, free, &taken);
            if (taken)
                continue; /* the slots it left, if any, for new messages */
        }
        int got = read_rounds(t, c, free);
        if (got < 0) {
            groups = !lost_group();
            ax_sleep(t, 20); /* the connection's back-off paces the retries */
            continue;
        }
        if (got > 0)
            continue;
        if (free >= 3) {
            uint32_t bl = c->cfg.block_ms < to_maint ? c->cfg.block_ms : (uint32_t)to_maint;
            if (read_blocking(t, c, bl ? bl : 1) < 0) {
                groups = !lost_group();
                ax_sleep(t, 20);
            }
        } else {
            wait_efd(t, c->slot_efd, to_maint < 5 ? to_maint : 5);
        }
    }
    consumer_task_end(c, &c->puller_running); /* last touch of c */
    return 0;
}

/* ---- the acker --------------------------------------------------------------------------- */

#define ACK_BATCH 128

static void build_ack(ax_redis_consumer *c, struct rmsg *m, struct rcmd *cmd)
{
    const char *keys[] = {c->q->key[rq_stream_key(m->prio)], c->q->key[KEY_DELAYED],
                          c->q->key[KEY_DEAD], c->q->key[KEY_STATS]};
    const char *args[32];
    size_t al[32];
    int n = 0;
    args[n++] = m->entry_id;
    bool retry = m->outcome == OUT_RETRY || m->outcome == OUT_REQUEUE;
    args[n++] = m->outcome == OUT_OK ? "ok" : retry ? "retry" : "dead";
    args[n++] = retry ? m->due : "0";
    if (m->outcome != OUT_OK) {
        snprintf(m->prio_idx, sizeof m->prio_idx, "%d", rq_stream_key(m->prio) + 1);
        snprintf(m->next_attempt, sizeof m->next_attempt, "%u",
                 m->attempt + (m->outcome == OUT_REQUEUE ? 0 : 1));
        snprintf(m->to, sizeof m->to, "%" PRIu64, m->timeout_ms);
        snprintf(m->mr, sizeof m->mr, "%u", m->max_retry);
        snprintf(m->dl, sizeof m->dl, "%" PRIu64, m->deadline_ms);
        args[n++] = m->prio_idx;
        const char *f[] = {"k", m->kind,  "p", m->payload ? m->payload : "", "t", m->trace,
                           "to", m->to,   "r", m->mr, "dl", m->dl, "a", m->next_attempt,
                           "o", m->origin, "e", m->err};
        for (size_t i = 0; i < sizeof f / sizeof *f; i++)
            args[n++] = f[i];
    }
    for (int i = 0; i < n; i++)
        al[i] = strlen(args[i]);
    if (m->outcome != OUT_OK)
        al[4 + 3] = m->len; /* the payload, binary-safe */
    rscript_evalsha(RS_ACK, cmd, m->argv, m->lens, 4, keys, n, args, al);
}

static void ack_settled(ax_redis_consumer *c, struct rmsg *m, const redisReply *rep)
{
    if (rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) {
        if (m->outcome == OUT_OK)
            atomic_fetch_add(&c->succeeded, 1);
        else if (m->outcome == OUT_RETRY || m->outcome == OUT_REQUEUE)
            atomic_fetch_add(&c->retried, 1);
        else
            atomic_fetch_add(&c->dead, 1);
    } else if (m->outcome != OUT_ABANDON) {
        atomic_fetch_add(&c->ack_lost, 1);
    }
    release(c, m);
}

/* Write the records of a batch in one pipeline: the successes of a stream
 * together in one RS_ACK_OK call, every other outcome in its own RS_ACK.
 * Settled messages are released and their ms[i] set to NULL; returns 0, or
 * an error with the unsettled ones left for the next try. */
struct ackcmd {
    struct rcmd cmd;
    int script;
    size_t first, count; /* its messages: order[first .. first + count) */
};

/* The time left until deadline_ns for a round trip (-1: no deadline, the
 * connection's command_timeout_ms; 0: none left). */
static int64_t ms_left(uint64_t deadline_ns)
{
    if (!deadline_ns)
        return -1;
    uint64_t now = ax_now_ns();
    return deadline_ns > now ? (int64_t)((deadline_ns - now) / 1000000u) : 0;
}

static int ack_batch(ax_task *t, ax_redis_consumer *c, struct rmsg **ms, size_t n,
                     uint64_t deadline_ns)
{
    struct ackcmd cmds[3 + ACK_BATCH];
    struct rcmd plain[3 + ACK_BATCH];
    redisReply *reps[3 + ACK_BATCH];
    size_t order[ACK_BATCH]; /* indexes into ms, grouped as the commands */
    const char *gargv[3][5 + ACK_BATCH];
    size_t glens[3][5 + ACK_BATCH];
    size_t nc = 0, no = 0;
    for (int k = 0; k < 3; k++) { /* the successes, one call per stream */
        const char *ids[ACK_BATCH];
        size_t first = no;
        for (size_t i = 0; i < n; i++)
            if (ms[i] && ms[i]->outcome == OUT_OK && ms[i]->key == k) {
                ids[no - first] = ms[i]->entry_id;
                order[no++] = i;
            }
        if (no == first)
            continue;
        const char *keys[] = {c->q->key[round_key[k]], c->q->key[KEY_STATS]};
        cmds[nc] = (struct ackcmd){.script = RS_ACK_OK, .first = first, .count = no - first};
        rscript_evalsha(RS_ACK_OK, &cmds[nc].cmd, gargv[k], glens[k], 2, keys, (int)(no - first),
                        ids, NULL);
        nc++;
    }
    for (size_t i = 0; i < n; i++) /* every other outcome alone */
        if (ms[i] && ms[i]->outcome != OUT_OK) {
            cmds[nc] = (struct ackcmd){.script = RS_ACK, .first = no, .count = 1};
            order[no++] = i;
            build_ack(c, ms[i], &cmds[nc++].cmd);
        }
    for (size_t j = 0; j < nc; j++)
        plain[j] = cmds[j].cmd;
    int64_t timeout_ms = ms_left(deadline_ns);
    if (timeout_ms == 0)
        return ax_fail_static(AX_ETIMEDOUT, "acknowledgement: no time left");
    int rc = rconn_pipeline(t, c->ack_conn, timeout_ms, nc, plain, reps);
    if (rc) {
        count_err(c, rc);
        return rc;
    }
    bool failed = false;
    for (size_t j = 0; j < nc; j++) {
        if (rscript_noscript(reps[j])) { /* a restarted server: once more as EVAL */
            freeReplyObject(reps[j]);
            reps[j] = NULL;
            rscript_to_eval(cmds[j].script, &plain[j]);
            timeout_ms = ms_left(deadline_ns);
            rc = timeout_ms == 0 ? ax_fail_static(AX_ETIMEDOUT, "acknowledgement: no time left")
                                 : rconn_pipeline(t, c->ack_conn, timeout_ms, 1, &plain[j], &reps[j]);
            if (rc) {
                count_err(c, rc);
                for (size_t k = j + 1; k < nc; k++) /* unsettled: the next try */
                    freeReplyObject(reps[k]);
                return rc;
            }
        }
        const redisReply *rep = reps[j];
        if (rep->type == REDIS_REPLY_ERROR) {
            /* Nothing was written (LOADING after a restart, READONLY on a
             * replica, BUSY, ...): keep the messages held -- their entries
             * are still pending and kept alive -- and write them again
             * after a pause. Releasing them would get them claimed and
             * run twice. */
            atomic_fetch_add(&c->errors, 1);
            if (!failed)
                ax_fail(AX_ENET, "queue %s: acknowledgement: %s", c->q->name, rep->str);
            failed = true;
            freeReplyObject(reps[j]);
            continue;
        }
        for (size_t x = 0; x < cmds[j].count; x++) {
            size_t i = order[cmds[j].first + x];
            const redisReply *one = rep;
            if (cmds[j].script == RS_ACK_OK)
                one = rep->type == REDIS_REPLY_ARRAY && x < rep->elements ? rep->element[x] : NULL;
            ack_settled(c, ms[i], one);
            ms[i] = NULL;
        }
        freeReplyObject(reps[j]);
    }
    return failed ? AX_ENET : AX_OK;
}

/* Abandoned messages (their tasks cancelled: this consumer will not run
 * them) are handed back: their entries, still pending to this consumer,
 * get an idle time of HAND_BACK_IDLE_MS, so another consumer's next claim
 * pass (every claim_interval_ms) takes them, instead of its claim after
 * this consumer's visibility_ms (30 s by default) -- a rolling restart no
 * longer leaves the messages it interrupted unrun for that long. Only an
 * entry still pending to this consumer is touched (RS_RELEASE). Best
 * effort, by a deadline (hand_back_deadline): if Redis cannot be reached
 * in time, the entries are claimed after visibility_ms as before. Each
 * message's handler has returned (the hold it kept): nothing of this
 * process runs it any more. t: the calling task, NULL on a plain thread;
 * r: a connection no one else uses meanwhile; its round trips end by
 * deadline_ns (hand_back_deadline). */
#define HAND_BACK_IDLE_MS "31536000000" /* a year: past any visibility_ms */
#define HAND_BACK_WAIT_MS 1000
#define HAND_BACK_MIN_MS 250
/* Entry ids per RS_RELEASE call: with its two other arguments, within
 * rscript_call's 64 (review: 128 made every call with 63 or more fail
 * before any round trip, and slots is 64 by default). */
#define HAND_BACK_BATCH 62

/* The hand-back's deadline: by `until` (a stop's own, 0 none), but at
 * least HAND_BACK_MIN_MS from now (a stop with timeout 0 still hands back:
 * ax-worker's second stop, ax_redis_consumer_free) and at most the
 * connection's command_timeout_ms or HAND_BACK_WAIT_MS, the smaller. */
static uint64_t hand_back_deadline(const ax_redis_consumer *c, uint64_t until)
{
    uint64_t now = ax_now_ns();
    uint64_t most = HAND_BACK_WAIT_MS;
    if (c->q->cfg.conn.command_timeout_ms > 0 && c->q->cfg.conn.command_timeout_ms < most)
        most = c->q->cfg.conn.command_timeout_ms;
    uint64_t lo = now + (uint64_t)HAND_BACK_MIN_MS * 1000000u, hi = now + most * 1000000u;
    if (lo > hi)
        lo = hi;
    return until < lo ? lo : until > hi ? hi : until;
}

struct gone_entry {
    int key; /* round position of its stream */
    char id[AX_REDIS_ID_MAX];
};

static void hand_back(ax_redis_consumer *c, ax_task *t, ax_redis *r, const struct gone_entry *e,
                      size_t n, uint64_t deadline_ns)
{
    for (int k = 0; k < 3; k++) {
        size_t i = 0;
        for (;;) {
            const char *args[2 + HAND_BACK_BATCH] = {c->name, HAND_BACK_IDLE_MS};
            int na = 2;
            for (; i < n && na < 2 + HAND_BACK_BATCH; i++)
                if (e[i].key == k)
                    args[na++] = e[i].id;
            if (na == 2)
                break;
            const char *keys[] = {c->q->key[round_key[k]]};
            uint64_t now = ax_now_ns();
            if (now >= deadline_ns)
                return; /* out of time: the rest waits for visibility_ms */
            int64_t wait = (int64_t)((deadline_ns - now + 999999u) / 1000000u);
            redisReply *rep = NULL;
            int rc = rscript_call(t, r, wait, RS_RELEASE, 1, keys, na, args, NULL, &rep);
            if (rc == AX_OK && rep && rep->type == REDIS_REPLY_INTEGER)
                atomic_fetch_add(&c->handed_back, (uint64_t)rep->integer);
            else if (rc != AX_OK && rc != AX_ECANCELED)
                atomic_fetch_add(&c->errors, 1);
            else if (rep && rep->type == REDIS_REPLY_ERROR)
                atomic_fetch_add(&c->errors, 1);
            freeReplyObject(rep);
            if (rc != AX_OK)
                return; /* Redis is away: the rest waits for visibility_ms too */
        }
    }
}

/* The abandoned messages of `list`: counted and released, then their
 * entries handed back through r (NULL: not handed back). Released first:
 * held, an entry's idle time could be reset by this consumer's own
 * keep-alive of its held messages, and its own claim pass would take one
 * back and skip it (review), either way leaving it to visibility_ms; once
 * released, this consumer's claim may take it like any other's. Without
 * memory for the ids, nothing is handed back (best effort). */
static void abandon(ax_redis_consumer *c, ax_task *t, ax_redis *r, struct rmsg *list,
                    uint64_t deadline_ns)
{
    size_t n = 0;
    for (struct rmsg *m = list; m; m = m->next)
        n++;
    struct gone_entry *e = n && r ? malloc(n * sizeof *e) : NULL;
    size_t k = 0;
    while (list) {
        struct rmsg *m = list;
        list = m->next;
        if (e) {
            e[k].key = m->key;
            memcpy(e[k].id, m->entry_id, sizeof e[k].id);
            k++;
        }
        atomic_fetch_add(&c->abandoned, 1);
        release(c, m);
    }
    if (e)
        hand_back(c, t, r, e, k, deadline_ns);
    free(e);
}

/* The messages of batch that ack_batch did not settle (not NULL), back at
 * the end of the done list. */
static void requeue_unsettled(ax_redis_consumer *c, struct rmsg **batch, size_t n)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        if (!batch[i])
            continue;
        batch[i]->next = NULL;
        if (c->done_tail)
            c->done_tail->next = batch[i];
        else
            c->done_head = batch[i];
        c->done_tail = batch[i];
    }
    pthread_mutex_unlock(&c->lock);
}

/* The due times (wall ms) the acker will promote at: a binary min-heap. */
struct due_heap {
    uint64_t *v;
    size_t n, cap;
};

#define DUE_HEAP_MAX 65536 /* beyond: the maintenance passes take them */
/* A promote waits this long past the first due time, to move the retries
 * due meanwhile in the same round trip: 2 000 retries jittered over 1 s
 * took 809 promotes at 1 ms, ~100 at 10 ms. */
#define PROMOTE_GRACE_MS 10

static void due_push(struct due_heap *h, uint64_t x)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        uint64_t *v = cap <= DUE_HEAP_MAX ? realloc(h->v, cap * sizeof *v) : NULL;
        if (!v)
            return;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    for (; i && h->v[(i - 1) / 2] > x; i = (i - 1) / 2)
        h->v[i] = h->v[(i - 1) / 2];
    h->v[i] = x;
}

static void due_pop(struct due_heap *h)
{
    uint64_t x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= h->n)
            break;
        size_t m = l + 1 < h->n && h->v[l + 1] < h->v[l] ? l + 1 : l;
        if (h->v[m] >= x)
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n)
        h->v[i] = x;
}

static int acker(ax_task *t, void *arg)
{
    ax_redis_consumer *c = arg;
    worker_of = c->s;
    struct rmsg *batch[ACK_BATCH];
    /* When to promote: the due time of each retry this acker wrote, and the
     * delayed set's next as the puller's maintenance pass found it. The
     * acker promotes on its own connection, after the write that put the
     * retry there: the puller's maintenance passes moved retries only every
     * claim_interval_ms (up to 1 s late with the defaults, ~250 ms on a
     * 200 ms interval in the new user's trial), and the puller, blocked in
     * XREADGROUP, could not be woken for them (review). The XADD of a
     * promote wakes that XREADGROUP at once. Its own retries only, not the
     * set's whole chain: with several consumers each acker followed every
     * one's (4 consumers: 1 735 promotes where 119 did, review). */
    struct due_heap due = {0};
    for (;;) {
        uint64_t hint = atomic_exchange(&c->promote_hint, 0);
        if (hint)
            due_push(&due, hint);
        uint64_t wall = wall_ms();
        if (due.n && due.v[0] + PROMOTE_GRACE_MS <= wall) {
            uint64_t next_ms = 0;
            int prc = promote(t, c, c->ack_conn, &next_ms);
            while (due.n && due.v[0] <= wall)
                due_pop(&due);
            if (prc != AX_OK)
                due_push(&due, wall + 100); /* again soon: the write may have failed too */
            else if (next_ms == 1)
                due_push(&due, wall + 1); /* more were due than one call moves */
        }
        pthread_mutex_lock(&c->lock);
        size_t n = 0;
        struct rmsg *gone = NULL;
        while (c->done_head && n < ACK_BATCH) {
            struct rmsg *m = c->done_head;
            c->done_head = m->next;
            if (!c->done_head) /* before the lock is let go below */
                c->done_tail = NULL;
            if (m->outcome == OUT_ABANDON) {
                m->next = gone;
                gone = m;
                continue;
            }
            batch[n++] = m;
        }
        if (!c->done_head)
            c->done_tail = NULL;
        pthread_mutex_unlock(&c->lock);
        if (gone)
            abandon(c, t, c->ack_conn, gone, hand_back_deadline(c, 0));
        if (n == 0) {
            if (atomic_load(&c->stopping) && atomic_load(&c->held) == 0)
                break;
            uint64_t wait_ms = 100;
            wall = wall_ms();
            if (due.n) {
                uint64_t at = due.v[0] + PROMOTE_GRACE_MS;
                wait_ms = at <= wall ? 1 : at - wall < 100 ? at - wall : 100;
            }
            if (wait_efd(t, c->done_efd, wait_ms) == AX_ECANCELED || ax_cancelled(t))
                break;
            continue;
        }
        /* Each retry of the batch, promoted when due once written (read
         * before: the write frees what it settles). A retry whose write
         * fails is written again later and pushed again then. */
        for (size_t i = 0; i < n; i++)
            if (batch[i]->outcome == OUT_RETRY || batch[i]->outcome == OUT_REQUEUE)
                due_push(&due, strtoull(batch[i]->due, NULL, 10));
        if (ack_batch(t, c, batch, n, 0) != AX_OK) {
            /* What is not settled goes to the back of the done list and is
             * written again after a pause, with whatever is done by then:
             * one message whose record cannot be written (its queue's
             * dead-letter or delayed key of the wrong type: the scripts
             * refuse it) must not hold back everyone else's (review; it
             * retried the same batch for ever). There ax_redis_consumer_free
             * also finds them if we are cancelled meanwhile (they were
             * lost once, a leak ASan saw); in Redis they stay pending, for
             * another consumer to claim. */
            requeue_unsettled(c, batch, n);
            if (ax_cancelled(t) || ax_sleep(t, 50) != AX_OK)
                goto out;
        }
    }
out:
    free(due.v);
    consumer_task_end(c, &c->acker_running); /* last touch of c */
    return 0;
}

/* ---- start, stop, free --------------------------------------------------------------------- */

static long metrics_text(char *buf, size_t len, void *arg);

/* The end of the puller or the acker: its function returned, or it never
 * ran (cancelled, or ended by ax_shutdown / ax_free, while still queued: a
 * consumer stopped right after its start once kept its flags set for ever,
 * and could not be freed). Its on_done alone cannot say it: a cancel ends a
 * running attempt at once, and the coroutine runs on until it sees it, so
 * on_done acts only for an attempt that never ran (run_ns 0, ax_result's
 * contract). The last of the two to end without a stop takes the consumer
 * off the scrape while the scheduler is still there: ax_redis_consumer_free
 * after ax_free must not touch it (it did: a use after free). Clearing the
 * flag is the last touch of c. */
static void consumer_task_end(ax_redis_consumer *c, atomic_bool *running)
{
    if (atomic_fetch_sub(&c->live_tasks, 1) == 1 && !atomic_load(&c->stopping)) {
        if (atomic_exchange(&c->metrics_on, false))
            ax_metrics_unappend(c->s, metrics_text, c);
        atomic_store(&c->ended_by_sched, true);
    }
    atomic_store(running, false);
}

static void puller_done(const ax_result *r, void *arg)
{
    if (r->run_ns == 0) { /* else the function's end did it, or will */
        ax_redis_consumer *c = arg;
        consumer_task_end(c, &c->puller_running);
    }
}

static void acker_done(const ax_result *r, void *arg)
{
    if (r->run_ns == 0) {
        ax_redis_consumer *c = arg;
        consumer_task_end(c, &c->acker_running);
    }
}

int ax_redis_consumer_start(ax_redis_consumer *c)
{
    if (!c)
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_start: consumer is NULL");
    ax_stats st;
    int rc = ax_stats_get(c->s, &st);
    if (rc)
        return rc;
    if (st.limit < 3) /* else the puller or the acker might never start */
        return ax_fail(AX_EINVAL,
                       "ax_redis_consumer_start: max_concurrency %llu < 3 (the puller, the acker "
                       "and a message; slots + 2 to run them all)",
                       (unsigned long long)st.limit);
    if (atomic_load(&c->stopping))
        return ax_fail_static(AX_ESTATE, "ax_redis_consumer_start: the consumer was stopped (a "
                                         "stopped consumer does not start again: make a new one)");
    if (atomic_exchange(&c->started, true))
        return ax_fail_static(AX_ESTATE, "ax_redis_consumer_start: already started");
    /* Its series in the scheduler's /metrics, before its tasks can end (their
     * on_done takes them off); at the bound of appenders the consumer runs
     * without them (ax_redis_consumer_prometheus still gives them). */
    atomic_store(&c->metrics_on, ax_metrics_append(c->s, metrics_text, c) == AX_OK);
    ax_spec sp = {.fn = acker, .arg = c, .priority = AX_PRIO_HIGH,
                  .timeout_ms = 365ull * 24 * 3600 * 1000, .trace_id = "ax-redis-acker",
                  .on_done = acker_done, .cb_arg = c};
    atomic_store(&c->acker_running, true);
    atomic_store(&c->live_tasks, 1);
    rc = ax_submit(c->s, &sp, &c->acker_id);
    if (rc) {
        atomic_store(&c->live_tasks, 0);
        atomic_store(&c->acker_running, false);
        atomic_store(&c->stopping, true);
        if (atomic_exchange(&c->metrics_on, false))
            ax_metrics_unappend(c->s, metrics_text, c);
        return rc;
    }
    sp.fn = puller;
    sp.trace_id = "ax-redis-puller";
    sp.on_done = puller_done;
    atomic_store(&c->puller_running, true);
    atomic_fetch_add(&c->live_tasks, 1);
    if ((rc = ax_submit(c->s, &sp, &c->puller_id))) {
        atomic_store(&c->puller_running, false);
        /* Stopping before the count goes down: the acker's on_done, when
         * it ends, must not read this as the scheduler ending it. */
        atomic_store(&c->stopping, true);
        atomic_fetch_sub(&c->live_tasks, 1);
        if (atomic_exchange(&c->metrics_on, false))
            ax_metrics_unappend(c->s, metrics_text, c);
        kick(c->done_efd);
        return rc;
    }
    return AX_OK;
}

/* The scheduler's /metrics scrape (ax_metrics_append; the ax-metrics
 * thread): the queue's series from the puller's last reading, then this
 * consumer's counters. Copies under the lock, no I/O. */
static long metrics_text(char *buf, size_t len, void *arg)
{
    ax_redis_consumer *c = arg;
    pthread_mutex_lock(&c->lock);
    ax_redis_queue_stats st = c->qstats;
    bool ok = c->qstats_ok;
    pthread_mutex_unlock(&c->lock);
    long n = 0;
    if (ok && (n = ax_redis_queue_prometheus(c->q, &st, buf, len)) < 0)
        return n;
    long m = ax_redis_consumer_prometheus(c, (size_t)n < len ? buf + n : NULL,
                                          (size_t)n < len ? len - (size_t)n : 0);
    return m < 0 ? m : n + m;
}

static bool wait_flag(atomic_bool *f, uint64_t until_ns)
{
    while (atomic_load(f)) {
        if (ax_now_ns() >= until_ns)
            return false;
        usleep(1000);
    }
    return true;
}

/* With the acker gone: the outcomes it did not reach (a handler that
 * ended as a stop's drain ran out, after the acker was cancelled) are
 * written here, on the acker's connection, by deadline_ns. They stayed
 * held before: a message that had run was left pending, to run again after
 * visibility_ms (new user's trial: "held 1" after "drained no"; ax-worker's
 * counters said one OK execution that was neither succeeded nor
 * abandoned). What cannot be written by then stays held, as before. */
static void settle_outcomes(ax_redis_consumer *c, uint64_t deadline_ns)
{
    struct rmsg *batch[ACK_BATCH];
    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&c->lock);
        for (struct rmsg **pp = &c->done_head; *pp && n < ACK_BATCH;) {
            struct rmsg *m = *pp;
            if (m->outcome == OUT_ABANDON) { /* one that ended since: left as it was */
                pp = &m->next;
                continue;
            }
            *pp = m->next;
            batch[n++] = m;
        }
        struct rmsg *tail = NULL;
        for (struct rmsg *m = c->done_head; m; m = m->next)
            tail = m;
        c->done_tail = tail;
        pthread_mutex_unlock(&c->lock);
        if (n == 0)
            return;
        if (ack_batch(ax_task_current(), c, batch, n, deadline_ns) != AX_OK) {
            requeue_unsettled(c, batch, n);
            return;
        }
    }
}

/* Once the acker is gone: the messages whose task was cancelled unfinished
 * are abandoned (their entries stay pending in Redis, for another
 * consumer), as the acker counts them; the other outcomes not yet written
 * are written (settle_outcomes). ax_shutdown cancels the acker with the
 * handlers, so the ones it had not reached stayed held for good (a trial:
 * abandoned 23, held 41, and ax_redis_consumer_stop said AX_ETIMEDOUT). */
/* The abandoned messages on the done list, taken off it; NULL if none. */
static struct rmsg *take_abandoned(ax_redis_consumer *c)
{
    struct rmsg *gone = NULL, *last = NULL;
    pthread_mutex_lock(&c->lock);
    for (struct rmsg **pp = &c->done_head; *pp;) {
        struct rmsg *m = *pp;
        if (m->outcome == OUT_ABANDON) {
            *pp = m->next;
            m->next = gone;
            gone = m;
        } else {
            last = m;
            pp = &m->next;
        }
    }
    c->done_tail = last;
    pthread_mutex_unlock(&c->lock);
    return gone;
}

static void settle_abandoned(ax_redis_consumer *c, uint64_t until)
{
    uint64_t deadline = hand_back_deadline(c, until);
    /* Twice round: a message cancelled while the outcomes were written
     * (after the first look) is handed back too, not left held (review). */
    for (int round = 0; round < 2; round++) {
        struct rmsg *gone;
        while ((gone = take_abandoned(c))) {
            /* The queue's connections serve blocking callers; the calling
             * task's I/O parks it (stop is refused from the consumer's own
             * scheduler's tasks), a plain thread blocks. The scheduler
             * itself is not touched: it may be freed. */
            ax_redis *r = rq_conn_get(c->q);
            abandon(c, ax_task_current(), r, gone, deadline);
            if (r)
                rq_conn_put(c->q, r);
        }
        if (round == 0)
            settle_outcomes(c, deadline);
    }
}

static int stop_one(ax_redis_consumer *c, uint64_t until);

int ax_redis_consumer_stop(ax_redis_consumer *c, int64_t timeout_ms)
{
    if (!c)
        return ax_fail_static(AX_EINVAL, "ax_redis_consumer_stop: consumer is NULL");
    ax_task *cur = ax_task_current();
    if (worker_of == c->s || (cur && ax_task_sched(cur) == c->s))
        return ax_fail_static(AX_ESTATE, "ax_redis_consumer_stop: called from one of its "
                                         "scheduler's tasks (it would wait for itself)");
    uint64_t until = ax_now_ns() + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000u : 0);
    /* One stop at a time; a second waits for the first within its own
     * bound. Two at once both drained and settled: the one that found the
     * done list emptied by the other said AX_ETIMEDOUT, and their
     * heartbeats collided on the connection (review). Polled, not a mutex:
     * the first may be a task parked on the second's worker. */
    while (atomic_exchange(&c->stop_busy, true)) {
        if (ax_now_ns() >= until)
            return ax_fail_static(AX_ETIMEDOUT, "ax_redis_consumer_stop: another stop of this "
                                                "consumer is still running");
        usleep(1000);
    }
    int rc = stop_one(c, until);
    atomic_store(&c->stop_busy, false);
    return rc;
}

static int stop_one(ax_redis_consumer *c, uint64_t until)
{
    if (atomic_load(&c->ended_by_sched) && !atomic_load(&c->stopping)) {
        /* Its tasks were ended by ax_shutdown, ax_free or ax_cancel: the
         * scheduler may be freed, so it is not touched. Both have passed
         * their count: their flags clear within instructions (review: a
         * free right after could still see one set, and leak). */
        atomic_store(&c->stopping, true);
        wait_flag(&c->puller_running, ax_now_ns() + 1000000000u);
        if (wait_flag(&c->acker_running, ax_now_ns() + 1000000000u))
            settle_abandoned(c, until);
        return atomic_load(&c->held) == 0
                   ? AX_OK
                   : ax_fail(AX_ETIMEDOUT,
                             "ax_redis_consumer_stop: %u messages still held (left pending in "
                             "Redis)", atomic_load(&c->held));
    }
    atomic_store(&c->stopping, true);
    /* Off the scrape first: once this returns, metrics_text does not run. */
    if (atomic_exchange(&c->metrics_on, false))
        ax_metrics_unappend(c->s, metrics_text, c);
    if (atomic_load(&c->puller_running)) {
        ax_cancel(c->s, c->puller_id); /* out of XREADGROUP BLOCK at once */
        wait_flag(&c->puller_running, until > ax_now_ns() ? until : ax_now_ns() + 1000000000u);
    }
    /* The drain: the puller, whose passes heartbeat, is gone, so this
     * loop keeps the held messages' idle time down itself, every claim
     * interval. Without it a drain longer than about half visibility_ms let
     * a live peer take the messages still running and run them twice
     * (review: 2 of 2, with stop returning AX_OK). */
    uint64_t next_hb = 0;
    /* ... and ends when the acker does: nothing else lowers held (an
     * ax_shutdown meanwhile cancelled it with the handlers), and the
     * heartbeat would keep cancelled messages from the other consumers
     * until the timeout (review: a stop(5000) beside an ax_shutdown held
     * them all 5 s). */
    while (atomic_load(&c->held) && ax_now_ns() < until && atomic_load(&c->acker_running)) {
        if (ax_now_ns() >= next_hb && !atomic_load(&c->puller_running)) {
            heartbeat(ax_task_current(), c, until);
            next_hb = ax_now_ns() + (uint64_t)c->cfg.claim_interval_ms * 1000000u;
        }
        usleep(1000);
    }
    kick(c->done_efd);
    bool drained = atomic_load(&c->held) == 0;
    if (!wait_flag(&c->acker_running, until)) {
        ax_cancel(c->s, c->acker_id);
        wait_flag(&c->acker_running, ax_now_ns() + 1000000000u);
    }
    if (atomic_load(&c->puller_running) || atomic_load(&c->acker_running))
        return ax_fail_static(AX_ETIMEDOUT, "ax_redis_consumer_stop: a consumer task did not end");
    /* The drain ended with the acker (an ax_shutdown cancelled both it and
     * the handlers): their messages reach the done list from their
     * on_done, which may come after the acker's end; wait for them, within
     * the bound, or they stay held (CI, a busy machine: stop(30000) beside
     * an ax_shutdown said AX_ETIMEDOUT after 0.5 s). */
    while (atomic_load(&c->held) && atomic_load(&c->inflight) && ax_now_ns() < until)
        usleep(1000);
    settle_abandoned(c, until); /* what the acker, cancelled above, had not reached */
    if (!drained && atomic_load(&c->held) != 0)
        return ax_fail(AX_ETIMEDOUT,
                       "ax_redis_consumer_stop: %u messages still held (left pending in Redis)",
                       atomic_load(&c->held));
    /* A message's last hold hands it to the acker, then lowers inflight as
     * its last touch of c: the acker may have written it, and held reached
     * 0, just before. 0 from here promises ax_redis_consumer_free a consumer
     * nothing touches any more (CI, TSan: stop returned 0 and the free that
     * followed found 1 message in flight, and leaked the consumer). A task
     * that runs on past a cancel keeps it: AX_ETIMEDOUT. */
    while (atomic_load(&c->inflight) && ax_now_ns() < until)
        usleep(100);
    if (atomic_load(&c->inflight))
        return ax_fail(AX_ETIMEDOUT,
                       "ax_redis_consumer_stop: %u message tasks have not ended (a handler "
                       "running on past its cancel)",
                       atomic_load(&c->inflight));
    return AX_OK;
}

void ax_redis_consumer_free(ax_redis_consumer *c)
{
    if (!c)
        return;
    if (atomic_load(&c->started) && !atomic_load(&c->stopping))
        ax_redis_consumer_stop(c, 0); /* touches no scheduler its tasks outlived */
    /* A task of the consumer still running (its puller, its acker, a
     * message's handler or on_done) would write into freed memory: leave
     * the consumer allocated instead, as ax_free does for a similar misuse. */
    if (atomic_load(&c->puller_running) || atomic_load(&c->acker_running) ||
        atomic_load(&c->inflight)) {
        fprintf(stderr,
                "ax_redis_consumer_free: consumer %s of queue %s still has tasks running (%u "
                "messages); not freed (leaked): stop it (ax_redis_consumer_stop returning 0) "
                "or ax_free its scheduler first\n",
                c->name, c->q->name, atomic_load(&c->inflight));
        return;
    }
    /* Stopped with messages still running (AX_ETIMEDOUT), then ax_free:
     * their tasks ended since, and their messages are handed back here, as
     * a second stop would (trial: the order this header gives skipped it,
     * 6 messages left to visibility_ms and counted held, not abandoned). */
    settle_abandoned(c, 0);
    while (c->done_head) {
        struct rmsg *m = c->done_head;
        c->done_head = m->next;
        msg_free(m);
    }
    ax_redis_free(c->pull_conn);
    ax_redis_free(c->ack_conn);
    if (c->done_efd >= 0)
        close(c->done_efd);
    if (c->slot_efd >= 0)
        close(c->slot_efd);
    pthread_mutex_destroy(&c->lock);
    unregister_consumer(c);
    atomic_fetch_sub(&c->q->consumers, 1);
    free(c->h);
    free(c);
}
