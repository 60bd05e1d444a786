/* events.c - lifecycle events: one per state change, buffered per worker,
 * written by a background thread (DESIGN.md §9, seed §1.3 "every task's
 * life is observable").
 *
 * Producers never block and never format:
 *  - a worker writes into its own single-producer ring (no lock, no atomic
 *    RMW: a relaxed load of the consumer index and a release store of its
 *    own);
 *  - any other thread (a submitter, ax_cancel, a callback-pool thread) writes into one
 *    shared ring under its own small mutex.
 * A full ring drops the event and counts it (ax_events_dropped): logging
 * must never stall the scheduler it observes.
 *
 * The event thread wakes every FLUSH_MS while a sink is set (and at once
 * when a ring passes half full or on ax_events_flush), takes everything out
 * of the worker rings and then out of the shared ring, sorts the batch by
 * time and hands it to the sinks. Reading the worker rings before the shared
 * one keeps cause before effect across rings: an event another thread emits
 * because of a worker's event (ax_cancel of a STARTED task) is produced
 * after it, so it is found in the same or a later batch.
 *
 * With no sink the mask is 0: every emission point costs one relaxed load.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

#define RING_CAP 4096   /* records per ring (power of two) */
#define EV_INLINE_MSG 104 /* longer messages (backtraces) take the locked long ring */
#define FLUSH_MS 10

/* What a ring holds: an event without its 512-byte message buffer (most
 * events have no message at all). 192 bytes. */
struct ev_rec {
    uint64_t time_ns, id, wait_ns, run_ns;
    const char *cls; /* its class's name (lives as long as the scheduler), or NULL */
    int32_t code;
    uint32_t attempt;
    uint8_t kind, prio;
    uint16_t msglen;
    char trace_id[AX_TRACE_ID_MAX];
    char msg[EV_INLINE_MSG];
};

struct ev_ring {
    _Atomic unsigned head; /* producer: next slot to write */
    char pad[AX_CACHELINE - sizeof(unsigned)];
    _Atomic unsigned tail; /* consumer: next slot to read */
    struct ev_rec rec[RING_CAP];
};

/* A batch entry: an event still in its ring (released after writing). */
struct ev_item {
    uint64_t time_ns;
    const struct ev_rec *rec;  /* compact, or */
    const ax_event *full;      /* from the long ring */
};

#define LONG_CAP 256

struct ev_state {
    pthread_mutex_t lock; /* sinks, shared and long ring producers, flush handshake */
    pthread_cond_t cond;
    pthread_t thread;
    bool started, stop, kick;
    uint64_t flush_req, flush_done;
    FILE *json;
    ax_event_fn fn;
    void *fn_arg;
    unsigned want_mask; /* mask asked for; effective only while a sink is set */
    struct ev_ring shared;
    ax_event long_ev[LONG_CAP]; /* events with long messages (lock) */
    unsigned long_head, long_tail;
    struct ev_item *batch; /* the event thread's */
    unsigned batch_cap;
    char *out;             /* JSON text of a batch */
    size_t out_cap;
    time_t ts_sec;         /* cached "YYYY-MM-DDTHH:MM:SS" of ts_sec */
    char ts_prefix[24];
};

const char *ax_event_name(ax_event_kind k)
{
    static const char *const names[AX_EV_COUNT] = {
        "submitted", "rejected", "shed",      "started",   "succeeded", "failed",
        "timed_out", "retry_scheduled", "cancelled", "lingering", "panic"};
    return (unsigned)k < AX_EV_COUNT ? names[k] : "invalid";
}

/* ---- producing ------------------------------------------------------------ */

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void kick_locked(struct ev_state *st)
{
    st->kick = true;
    pthread_cond_signal(&st->cond);
}

/* Claim a slot (single producer per ring: a worker, or shared under lock). */
static struct ev_rec *ring_slot(struct ev_ring *r)
{
    unsigned h = atomic_load_explicit(&r->head, memory_order_relaxed);
    unsigned t = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (h - t >= RING_CAP)
        return NULL;
    return &r->rec[h & (RING_CAP - 1)];
}

/* Publish the claimed slot; true when the ring just passed half full. */
static bool ring_commit(struct ev_ring *r)
{
    unsigned h = atomic_load_explicit(&r->head, memory_order_relaxed) + 1;
    atomic_store_explicit(&r->head, h, memory_order_release);
    return h - atomic_load_explicit(&r->tail, memory_order_relaxed) == RING_CAP / 2;
}

static void fill(struct ax_sched *s, struct ev_rec *e, unsigned kind, const struct job *j,
                 const struct ev_attempt *a, int code, const char *msg, size_t msglen)
{
    e->kind = (uint8_t)kind;
    e->cls = j && j->cls ? s->classes[j->cls]->name : NULL;
    e->time_ns = realtime_ns();
    e->code = code;
    if (j) {
        e->id = j->id;
        trace_format(j, e->trace_id);
        e->prio = j->prio;
        if (a) {
            e->attempt = a->attempt;
            e->wait_ns = a->wait_ns;
            e->run_ns = a->run_ns;
        } else {
            e->attempt = js_attempt(atomic_load_explicit(&j->sw, memory_order_acquire));
            e->wait_ns = j->wait_ns;
            e->run_ns = kind == AX_EV_STARTED ? 0 : j->run_ns;
        }
    } else {
        e->id = e->wait_ns = e->run_ns = 0;
        e->attempt = 0;
        e->prio = AX_PRIO_NORMAL;
        memcpy(e->trace_id, "-", 2);
    }
    e->msglen = (uint16_t)msglen;
    memcpy(e->msg, msg ? msg : "", msglen);
    e->msg[msglen < EV_INLINE_MSG ? msglen : EV_INLINE_MSG - 1] = 0;
}

static void rec_to_event(const struct ev_rec *r, ax_event *e)
{
    e->kind = (ax_event_kind)r->kind;
    e->time_ns = r->time_ns;
    e->id = r->id;
    memcpy(e->trace_id, r->trace_id, sizeof e->trace_id);
    e->priority = (ax_priority)r->prio;
    e->attempt = r->attempt;
    e->wait_ns = r->wait_ns;
    e->run_ns = r->run_ns;
    e->code = r->code;
    memcpy(e->message, r->msg, (size_t)r->msglen + 1);
    if (r->cls)
        memcpy(e->class_name, r->cls, strlen(r->cls) + 1);
    else
        e->class_name[0] = 0;
}

/* Lossless mode, ring full: wake the writer and give it the CPU. */
static void wait_for_room(struct ev_state *st)
{
    pthread_mutex_lock(&st->lock);
    kick_locked(st);
    pthread_mutex_unlock(&st->lock);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

static bool sampled_out(struct ax_sched *s, unsigned kind, const struct job *j)
{
    unsigned every = s->ev_sample;
    if (every <= 1 || !j)
        return false;
    if (kind != AX_EV_SUBMITTED && kind != AX_EV_STARTED && kind != AX_EV_SUCCEEDED)
        return false;
    return ((j->id >> AX_SLOT_BITS) % every) != 0;
}

/* Set while the caller holds s->lock: a lossless sink must not make it
 * wait there (every worker would stall behind it); ev_reserve made room. */
_Thread_local bool ev_under_lock;

void ev_reserve(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    while (s->ev_lossless && atomic_load_explicit(&s->ev_mask, memory_order_relaxed) &&
           atomic_load_explicit(&st->shared.head, memory_order_relaxed) -
                   atomic_load_explicit(&st->shared.tail, memory_order_acquire) >=
               RING_CAP * 3 / 4)
        wait_for_room(st);
}

void ev_emit(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind, int code,
             const char *msg)
{
    ev_emit_attempt(s, w, j, kind, code, msg, NULL);
}

void ev_emit_attempt(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind,
                     int code, const char *msg, const struct ev_attempt *a)
{
    bool may_wait = s->ev_lossless && !ev_under_lock;
    if (sampled_out(s, kind, j))
        return;
    struct ev_state *st = s->ev;
    size_t msglen = msg ? strnlen(msg, AX_EVENT_MESSAGE_MAX - 1) : 0;
    if (msglen >= EV_INLINE_MSG) {
        /* Rare (backtraces): a full event in the long ring, under the lock. */
        pthread_mutex_lock(&st->lock);
        if (st->long_head - st->long_tail < LONG_CAP) {
            struct ev_rec tmp;
            fill(s, &tmp, kind, j, a, code, NULL, 0);
            ax_event *e = &st->long_ev[st->long_head % LONG_CAP];
            rec_to_event(&tmp, e);
            memcpy(e->message, msg, msglen);
            e->message[msglen] = 0;
            st->long_head++;
            kick_locked(st);
        } else {
            atomic_fetch_add_explicit(&s->ev_dropped, 1, memory_order_relaxed);
        }
        pthread_mutex_unlock(&st->lock);
        return;
    }
    if (w && w == ax_current_worker) {
        struct ev_rec *e = ring_slot(w->ev_ring);
        while (!e && may_wait) {
            wait_for_room(st);
            e = ring_slot(w->ev_ring);
        }
        if (!e) {
            atomic_fetch_add_explicit(&s->ev_dropped, 1, memory_order_relaxed);
            return;
        }
        fill(s, e, kind, j, a, code, msg, msglen);
        if (ring_commit(w->ev_ring)) {
            pthread_mutex_lock(&st->lock); /* half full: flush early (rare) */
            kick_locked(st);
            pthread_mutex_unlock(&st->lock);
        }
        return;
    }
    pthread_mutex_lock(&st->lock);
    struct ev_rec *e = ring_slot(&st->shared);
    while (!e && may_wait) {
        pthread_mutex_unlock(&st->lock);
        wait_for_room(st);
        pthread_mutex_lock(&st->lock);
        e = ring_slot(&st->shared);
    }
    if (e) {
        fill(s, e, kind, j, a, code, msg, msglen);
        if (ring_commit(&st->shared))
            kick_locked(st);
    } else {
        atomic_fetch_add_explicit(&s->ev_dropped, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&st->lock);
}

void ev_emit_refusal(struct ax_sched *s, const ax_spec *sp, unsigned kind, int code,
                     const char *msg)
{
    struct job fake;
    memset(&fake, 0, sizeof fake);
    if (sp) {
        if ((unsigned)sp->priority < AX_PRIO_COUNT)
            fake.prio = (uint8_t)sp->priority;
        if (sp->trace_id)
            snprintf(fake.trace_id, sizeof fake.trace_id, "%s", sp->trace_id);
        if (class_get(s, sp->class_id))
            fake.cls = (uint8_t)sp->class_id;
    }
    if (!fake.trace_id[0])
        memcpy(fake.trace_id, "-", 2);
    ev_emit(s, NULL, &fake, kind, code, msg);
}

/* ---- writing ---------------------------------------------------------------- */

/* Hand-rolled JSON: fprintf was ~1 µs an event, which could not keep up
 * with a worker producing three events per task. */
struct out {
    char *p;
    size_t len, cap;
};

static bool out_room(struct ev_state *st, struct out *o, size_t n)
{
    if (o->len + n <= o->cap)
        return true;
    size_t cap = o->cap ? o->cap * 2 : 1 << 16;
    while (cap < o->len + n)
        cap *= 2;
    char *p = realloc(o->p, cap);
    if (!p)
        return false;
    o->p = st->out = p;
    o->cap = st->out_cap = cap;
    return true;
}

static void put(struct out *o, const char *s, size_t n)
{
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void put_u64(struct out *o, uint64_t v)
{
    char b[24];
    int i = 24;
    do
        b[--i] = (char)('0' + v % 10);
    while ((v /= 10));
    put(o, b + i, (size_t)(24 - i));
}

static void put_i64(struct out *o, int64_t v)
{
    if (v < 0) {
        put(o, "-", 1);
        put_u64(o, (uint64_t)(-(v + 1)) + 1);
    } else {
        put_u64(o, (uint64_t)v);
    }
}

/* ns as microseconds with three decimals. */
static void put_us(struct out *o, uint64_t ns)
{
    put_u64(o, ns / 1000);
    char f[4] = {'.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10),
                 (char)('0' + ns % 10)};
    put(o, f, 4);
}

/* A JSON string that every strict decoder accepts: valid UTF-8 passes
 * through, and a byte that does not begin a valid character (a task's own
 * error text, a message cut inside a character) becomes U+FFFD. */
static void put_str(struct out *o, const char *p)
{
    static const char hex[] = "0123456789abcdef";
    put(o, "\"", 1);
    size_t left = strlen(p);
    for (; *p; p++, left--) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x80) {
            size_t k = utf8_char_len((const unsigned char *)p, left);
            if (k) {
                put(o, p, k);
                p += k - 1;
                left -= k - 1;
            } else {
                put(o, "\\ufffd", 6);
            }
            continue;
        }
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(o, e, 2);
        } else if (c == '\n') {
            put(o, "\\n", 2);
        } else if (c == '\r') {
            put(o, "\\r", 2);
        } else if (c == '\t') {
            put(o, "\\t", 2);
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(o, e, 6);
        } else {
            put(o, (const char *)&c, 1);
        }
    }
    put(o, "\"", 1);
}

static void put_event(struct ev_state *st, struct out *o, const ax_event *e)
{
    /* Worst case: escaping can grow a string 6x. */
    if (!out_room(st, o, 400 + 6 * (AX_TRACE_ID_MAX + strlen(e->message))))
        return;
    time_t sec = (time_t)(e->time_ns / 1000000000u);
    if (sec != st->ts_sec) {
        struct tm tm;
        gmtime_r(&sec, &tm);
        strftime(st->ts_prefix, sizeof st->ts_prefix, "%Y-%m-%dT%H:%M:%S", &tm);
        st->ts_sec = sec;
    }
    put(o, "{\"ts\":\"", 7);
    put(o, st->ts_prefix, strlen(st->ts_prefix));
    uint64_t us = e->time_ns % 1000000000u / 1000u;
    char frac[9] = {'.', 0, 0, 0, 0, 0, 0, 'Z', '"'};
    for (int i = 6; i >= 1; i--, us /= 10)
        frac[i] = (char)('0' + us % 10);
    put(o, frac, 9);
    put(o, ",\"event\":\"", 10);
    const char *name = ax_event_name(e->kind);
    put(o, name, strlen(name));
    put(o, "\",\"id\":", 7);
    put_u64(o, e->id);
    put(o, ",\"trace_id\":", 12);
    put_str(o, e->trace_id);
    if (e->class_name[0]) {
        put(o, ",\"class\":", 9);
        put_str(o, e->class_name);
    }
    put(o, ",\"priority\":\"", 13);
    name = ax_priority_name(e->priority);
    put(o, name, strlen(name));
    put(o, "\",\"attempt\":", 12);
    put_u64(o, e->attempt);
    put(o, ",\"wait_us\":", 11);
    put_us(o, e->wait_ns);
    put(o, ",\"run_us\":", 10);
    put_us(o, e->run_ns);
    put(o, ",\"code\":", 8);
    put_i64(o, e->code);
    if (e->code) {
        put(o, ",\"error\":", 9);
        if (error_is_ax(e->code)) {
            put_str(o, ax_strerror(e->code));
        } else { /* the task function's own return code */
            char b[40];
            snprintf(b, sizeof b, "task returned %d", (int)e->code);
            put_str(o, b);
        }
    }
    put(o, ",\"message\":", 11);
    put_str(o, e->message);
    put(o, "}\n", 2);
}

static int by_time(const void *a, const void *b)
{
    const struct ev_item *x = a, *y = b;
    return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}

static bool batch_room(struct ev_state *st, unsigned n)
{
    if (n < st->batch_cap)
        return true;
    unsigned cap = st->batch_cap ? st->batch_cap * 2 : RING_CAP;
    struct ev_item *b = realloc(st->batch, cap * sizeof *b);
    if (!b)
        return false;
    st->batch = b;
    st->batch_cap = cap;
    return true;
}

/* Point batch items at everything in r; returns the new count and the
 * ring position to release up to (*upto). */
static unsigned take(struct ev_state *st, struct ev_ring *r, unsigned n, unsigned *upto)
{
    unsigned t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    unsigned h = atomic_load_explicit(&r->head, memory_order_acquire);
    for (; t != h && batch_room(st, n); t++, n++) {
        const struct ev_rec *rec = &r->rec[t & (RING_CAP - 1)];
        st->batch[n] = (struct ev_item){rec->time_ns, rec, NULL};
    }
    *upto = t;
    return n;
}

/* Drain every ring and write the batch. Event thread only (or after it
 * stopped). */
static void drain(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    unsigned n = 0, nw = s->nworkers;
    unsigned upto[nw + 1];
    for (unsigned i = 0; i < nw; i++)
        n = take(st, s->workers[i].ev_ring, n, &upto[i]);
    pthread_mutex_lock(&st->lock);
    n = take(st, &st->shared, n, &upto[nw]);
    unsigned lh = st->long_head, lt = st->long_tail;
    FILE *f = st->json;
    ax_event_fn fn = st->fn;
    void *arg = st->fn_arg;
    pthread_mutex_unlock(&st->lock);
    for (unsigned k = lt; k != lh && batch_room(st, n); k++, n++) {
        const ax_event *e = &st->long_ev[k % LONG_CAP];
        st->batch[n] = (struct ev_item){e->time_ns, NULL, e};
    }
    if (n) {
        qsort(st->batch, n, sizeof *st->batch, by_time);
        struct out o = {st->out, 0, st->out_cap};
        ax_event e;
        for (unsigned i = 0; i < n; i++) {
            const ax_event *ev = st->batch[i].full;
            if (!ev) {
                rec_to_event(st->batch[i].rec, &e);
                ev = &e;
            }
            if (f)
                put_event(st, &o, ev);
            if (fn)
                fn(ev, arg);
        }
        if (f && o.len) {
            fwrite(o.p, 1, o.len, f);
            fflush(f);
        }
    }
    /* Only now give the slots back. */
    for (unsigned i = 0; i < nw; i++)
        atomic_store_explicit(&s->workers[i].ev_ring->tail, upto[i], memory_order_release);
    pthread_mutex_lock(&st->lock);
    atomic_store_explicit(&st->shared.tail, upto[nw], memory_order_release);
    st->long_tail = lh;
    pthread_mutex_unlock(&st->lock);
}

static void *ev_main(void *arg)
{
    struct ax_sched *s = arg;
    struct ev_state *st = s->ev;
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        bool active = st->json || st->fn;
        if (!st->kick && st->flush_req == st->flush_done) {
            if (active) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += FLUSH_MS * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&st->cond, &st->lock, &ts);
            } else {
                pthread_cond_wait(&st->cond, &st->lock);
            }
        }
        st->kick = false;
        uint64_t req = st->flush_req;
        pthread_mutex_unlock(&st->lock);
        drain(s);
        pthread_mutex_lock(&st->lock);
        st->flush_done = req;
        pthread_cond_broadcast(&st->cond);
    }
    pthread_mutex_unlock(&st->lock);
    drain(s);
    return NULL;
}

/* ---- control ---------------------------------------------------------------- */

int ev_init(struct ax_sched *s)
{
    struct ev_state *st = calloc(1, sizeof *st);
    if (!st)
        return ax_fail_static(AX_ENOMEM, "out of memory for the event buffers");
    pthread_mutex_init(&st->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cond, &ca);
    pthread_condattr_destroy(&ca);
    st->want_mask = AX_EVMASK_ALL;
    s->ev = st;
    s->ev_sample = 1;
    for (unsigned i = 0; i < s->nworkers; i++) {
        s->workers[i].ev_ring = calloc(1, sizeof(struct ev_ring));
        if (!s->workers[i].ev_ring)
            return ax_fail_static(AX_ENOMEM, "out of memory for the event buffers");
    }
    if (pthread_create(&st->thread, NULL, ev_main, s) != 0)
        return ax_fail_static(AX_ESYS, "cannot start the event thread");
    st->started = true;
    return AX_OK;
}

void ev_stop(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    if (!st)
        return;
    if (st->started) {
        pthread_mutex_lock(&st->lock);
        st->stop = true;
        pthread_cond_signal(&st->cond);
        pthread_mutex_unlock(&st->lock);
        pthread_join(st->thread, NULL);
    }
    for (unsigned i = 0; i < s->nworkers; i++) {
        free(s->workers[i].ev_ring);
        s->workers[i].ev_ring = NULL;
    }
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->cond);
    free(st->batch);
    free(st->out);
    free(st);
    s->ev = NULL;
}

static void apply_mask_locked(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    unsigned m = (st->json || st->fn) ? st->want_mask : 0;
    atomic_store_explicit(&s->ev_mask, m, memory_order_release);
    pthread_cond_signal(&st->cond);
}

int ax_events_json(ax_sched *s, FILE *f)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_json: scheduler is NULL");
    ax_events_flush(s); /* what was buffered goes to the old sink */
    pthread_mutex_lock(&s->ev->lock);
    s->ev->json = f;
    apply_mask_locked(s);
    pthread_mutex_unlock(&s->ev->lock);
    return AX_OK;
}

int ax_events_callback(ax_sched *s, ax_event_fn fn, void *arg)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_callback: scheduler is NULL");
    ax_events_flush(s);
    pthread_mutex_lock(&s->ev->lock);
    s->ev->fn = fn;
    s->ev->fn_arg = arg;
    apply_mask_locked(s);
    pthread_mutex_unlock(&s->ev->lock);
    return AX_OK;
}

int ax_events_filter(ax_sched *s, unsigned mask, unsigned sample_every)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_filter: scheduler is NULL");
    if (mask & ~(unsigned)AX_EVMASK_ALL)
        return ax_fail(AX_EINVAL, "ax_events_filter: unknown bits 0x%x in mask",
                       mask & ~(unsigned)AX_EVMASK_ALL);
    if (sample_every == 0)
        return ax_fail_static(AX_EINVAL, "ax_events_filter: sample_every must be >= 1");
    pthread_mutex_lock(&s->ev->lock);
    s->ev->want_mask = mask;
    s->ev_sample = sample_every;
    apply_mask_locked(s);
    pthread_mutex_unlock(&s->ev->lock);
    return AX_OK;
}

int ax_events_flush(ax_sched *s)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_flush: scheduler is NULL");
    if (ax_current_worker && ax_current_worker->s == s)
        return ax_fail_static(AX_ESTATE, "ax_events_flush: called on a worker (would stall it)");
    struct ev_state *st = s->ev;
    pthread_mutex_lock(&st->lock);
    uint64_t want = ++st->flush_req;
    pthread_cond_broadcast(&st->cond);
    while (st->flush_done < want && !st->stop)
        pthread_cond_wait(&st->cond, &st->lock);
    pthread_mutex_unlock(&st->lock);
    return AX_OK;
}

int ax_events_lossless(ax_sched *s, bool on)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_lossless: scheduler is NULL");
    s->ev_lossless = on;
    return AX_OK;
}

uint64_t ax_events_dropped(ax_sched *s)
{
    return s ? atomic_load(&s->ev_dropped) : 0;
}
