/* events.c - lifecycle events: one per state change, buffered per worker,
 * written by a background thread (DESIGN.md §9, seed §1.3 "every task's
 * life is observable").
 *
 * Producers never block and never format:
 *  - a worker writes into its own single-producer ring (no lock, no atomic
 *    RMW: a relaxed load of the consumer index and a release store of its
 *    own);
 *  - any other thread (a submitter, ax_cancel, the monitor) writes into one
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

#include <stdlib.h>
#include <string.h>

#define RING_CAP 1024 /* events per ring (power of two) */
#define FLUSH_MS 10

struct ev_ring {
    _Atomic unsigned head; /* producer: next slot to write */
    char pad[AX_CACHELINE - sizeof(unsigned)];
    _Atomic unsigned tail; /* consumer: next slot to read */
    ax_event ev[RING_CAP];
};

struct ev_state {
    pthread_mutex_t lock; /* sinks, shared ring producers, flush handshake */
    pthread_cond_t cond;
    pthread_t thread;
    bool started, stop, kick;
    uint64_t flush_req, flush_done;
    FILE *json;
    ax_event_fn fn;
    void *fn_arg;
    unsigned want_mask; /* mask asked for; effective only while a sink is set */
    struct ev_ring shared;
    ax_event *batch;    /* the event thread's sort buffer */
    unsigned batch_cap;
};

const char *ax_event_name(ax_event_kind k)
{
    static const char *const names[AX_EV_COUNT] = {
        "submitted", "rejected", "shed",      "started",   "succeeded", "failed",
        "timed_out", "retry_scheduled", "cancelled", "lingering", "panic"};
    return (unsigned)k < AX_EV_COUNT ? names[k] : "invalid";
}

/* ---- producing ------------------------------------------------------------ */

static ax_event *ring_slot(struct ev_ring *r)
{
    unsigned h = atomic_load_explicit(&r->head, memory_order_relaxed);
    unsigned t = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (h - t >= RING_CAP)
        return NULL;
    return &r->ev[h & (RING_CAP - 1)];
}

static void ring_commit(struct ax_sched *s, struct ev_ring *r)
{
    unsigned h = atomic_load_explicit(&r->head, memory_order_relaxed) + 1;
    atomic_store_explicit(&r->head, h, memory_order_release);
    if ((h - atomic_load_explicit(&r->tail, memory_order_relaxed)) == RING_CAP / 2) {
        /* Half full: ask for an early flush (rare; a lock is fine). */
        pthread_mutex_lock(&s->ev->lock);
        s->ev->kick = true;
        pthread_cond_signal(&s->ev->cond);
        pthread_mutex_unlock(&s->ev->lock);
    }
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fill(ax_event *e, unsigned kind, const struct job *j, int code, const char *msg)
{
    e->kind = (ax_event_kind)kind;
    e->time_ns = realtime_ns();
    e->code = code;
    if (j) {
        e->id = j->id;
        trace_format(j, e->trace_id);
        e->priority = (ax_priority)j->prio;
        e->attempt = j->attempt;
        e->wait_ns = j->wait_ns;
        e->run_ns = kind == AX_EV_STARTED ? 0 : j->run_ns;
    }
    size_t n = msg ? strnlen(msg, sizeof e->message - 1) : 0;
    memcpy(e->message, msg ? msg : "", n);
    e->message[n] = 0;
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

void ev_emit(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind, int code,
             const char *msg)
{
    if (sampled_out(s, kind, j))
        return;
    if (w && w == ax_current_worker) {
        ax_event *e = ring_slot(w->ev_ring);
        if (!e) {
            atomic_fetch_add_explicit(&s->ev_dropped, 1, memory_order_relaxed);
            return;
        }
        memset(e, 0, offsetof(ax_event, message));
        fill(e, kind, j, code, msg);
        ring_commit(s, w->ev_ring);
        return;
    }
    struct ev_state *st = s->ev;
    pthread_mutex_lock(&st->lock);
    ax_event *e = ring_slot(&st->shared);
    if (e) {
        memset(e, 0, offsetof(ax_event, message));
        fill(e, kind, j, code, msg);
        unsigned h = atomic_load_explicit(&st->shared.head, memory_order_relaxed) + 1;
        atomic_store_explicit(&st->shared.head, h, memory_order_release);
        if (h - atomic_load_explicit(&st->shared.tail, memory_order_relaxed) == RING_CAP / 2) {
            st->kick = true;
            pthread_cond_signal(&st->cond);
        }
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
    }
    if (!fake.trace_id[0])
        memcpy(fake.trace_id, "-", 2);
    ev_emit(s, NULL, &fake, kind, code, msg);
}

/* ---- writing ---------------------------------------------------------------- */

static void json_string(FILE *f, const char *p)
{
    fputc('"', f);
    for (; *p; p++) {
        unsigned char c = (unsigned char)*p;
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f); /* UTF-8 bytes pass through */
        }
    }
    fputc('"', f);
}

static void write_json(FILE *f, const ax_event *e)
{
    time_t sec = (time_t)(e->time_ns / 1000000000u);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char ts[40];
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - n, ".%06uZ", (unsigned)(e->time_ns % 1000000000u / 1000u));
    fprintf(f, "{\"ts\":\"%s\",\"event\":\"%s\",\"id\":%llu,\"trace_id\":", ts,
            ax_event_name(e->kind), (unsigned long long)e->id);
    json_string(f, e->trace_id);
    fprintf(f, ",\"priority\":\"%s\",\"attempt\":%u,\"wait_us\":%.3f,\"run_us\":%.3f,\"code\":%d",
            ax_priority_name(e->priority), e->attempt, (double)e->wait_ns / 1e3,
            (double)e->run_ns / 1e3, e->code);
    if (e->code)
        fprintf(f, ",\"error\":\"%s\"", ax_strerror(e->code));
    fputs(",\"message\":", f);
    json_string(f, e->message);
    fputs("}\n", f);
}

static int by_time(const void *a, const void *b)
{
    const ax_event *x = a, *y = b;
    return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}

static unsigned take(struct ev_state *st, struct ev_ring *r, unsigned n)
{
    unsigned t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    unsigned h = atomic_load_explicit(&r->head, memory_order_acquire);
    for (; t != h; t++) {
        if (n == st->batch_cap) {
            unsigned cap = st->batch_cap ? st->batch_cap * 2 : RING_CAP;
            ax_event *b = realloc(st->batch, cap * sizeof *b);
            if (!b)
                break;
            st->batch = b;
            st->batch_cap = cap;
        }
        st->batch[n++] = r->ev[t & (RING_CAP - 1)];
    }
    atomic_store_explicit(&r->tail, t, memory_order_release);
    return n;
}

/* Drain every ring and write the batch. Event thread only (or after it
 * stopped). */
static void drain(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    unsigned n = 0;
    for (unsigned i = 0; i < s->nworkers; i++)
        if (s->workers[i].ev_ring)
            n = take(st, s->workers[i].ev_ring, n);
    pthread_mutex_lock(&st->lock);
    n = take(st, &st->shared, n);
    FILE *f = st->json;
    ax_event_fn fn = st->fn;
    void *arg = st->fn_arg;
    pthread_mutex_unlock(&st->lock);
    if (n == 0)
        return;
    qsort(st->batch, n, sizeof *st->batch, by_time);
    for (unsigned i = 0; i < n; i++) {
        if (f)
            write_json(f, &st->batch[i]);
        if (fn)
            fn(&st->batch[i], arg);
    }
    if (f)
        fflush(f);
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

uint64_t ax_events_dropped(ax_sched *s)
{
    return s ? atomic_load(&s->ev_dropped) : 0;
}
