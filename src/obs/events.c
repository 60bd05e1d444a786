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
 * of the worker rings and then out of the shared ring, merges the batch
 * into time order and hands it to the sinks; while batches come in big
 * (BUSY_BATCH) it drains again at once. In lossless mode a producer that
 * finds its ring full waits on `room`, which the writer signals as soon as
 * it has made the text of a batch. Reading the worker rings before the shared
 * one keeps cause before effect across rings: an event another thread emits
 * because of a worker's event (ax_cancel of a STARTED task) is produced
 * after it, so it is found in the same or a later batch.
 *
 * With no sink the mask is 0: every emission point costs one relaxed load.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "utf8.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define RING_CAP 4096   /* records per ring (power of two) */
#define EV_INLINE_MSG 108 /* longer messages (backtraces) take the locked long ring */
#define FLUSH_MS 10
#define BUSY_BATCH 256 /* a drain this big: drain again at once */
#define RELEASE_EVERY 256 /* records formatted between looks for waiting producers */

/* What a ring holds: an event without its 512-byte message buffer (most
 * events have no message at all). 192 bytes, three cache lines, of which
 * an event with no message and a generated trace id (every event of a
 * task that succeeds) writes only the first: the numbers and the class
 * name's pointer, then the trace id's first byte at offset 52. The slot was last read by the event
 * thread on another core, so each line written is a line fetched; with
 * the old layout (records at offset 72, the message's NUL always written)
 * an event wrote 2 to 3 lines. */
struct ev_rec {
    uint64_t time_ns, id, wait_ns, run_ns;
    const char *cls; /* its class's name (lives as long as the scheduler), or NULL */
    int32_t code;
    uint32_t attempt;
    uint8_t kind, prio;
    uint8_t msglen; /* < EV_INLINE_MSG */
    uint8_t reflen; /* the task's ref (ax_spec.ref), at msg + msglen + 1; 0: none */
    char trace_id[AX_TRACE_ID_MAX]; /* "": generated from id (rec_to_event) */
    char msg[EV_INLINE_MSG];        /* msglen bytes and a NUL, then reflen bytes of the
                                       ref; untouched if both are 0 */
} __attribute__((aligned(AX_CACHELINE)));
_Static_assert(sizeof(struct ev_rec) == 3 * AX_CACHELINE, "an ev_rec is three cache lines");
_Static_assert(offsetof(struct ev_rec, trace_id) < AX_CACHELINE, "trace_id[0] in line 0");

struct ev_ring {
    _Atomic unsigned head; /* producer: next slot to write */
    char pad[AX_CACHELINE - sizeof(unsigned)];
    _Atomic unsigned tail; /* consumer: next slot to read */
    struct ev_rec rec[RING_CAP]; /* cache-line aligned: allocate with ev_zalloc */
};

/* Zeroed memory aligned for the rings (calloc only promises 16 bytes):
 * fresh anonymous pages, which the kernel zeroes when first touched. A
 * ring is 768 KiB (the state, with the shared ring, as much): zeroed here
 * with memset, each worker cost ~3.3 ms and 860 KiB of RSS at ax_new even
 * with no sink, where a ring is never written (a new user's trial: 256
 * workers 0.84 s and 216 MB, 1 024 workers 6.7 s and 879 MB). Now a ring's
 * pages become resident as events first pass through them. */
static void *ev_zalloc(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void ev_zfree(void *p, size_t n)
{
    if (p)
        munmap(p, n);
}

/* A batch entry: an event still in its ring (released after writing). */
struct ev_item {
    uint64_t time_ns;
    const struct ev_rec *rec;  /* compact, or */
    const ax_event *full;      /* from the long ring */
    unsigned ring;             /* rec's: a worker's index, or nworkers (shared) */
};

#define LONG_CAP 256

struct ev_state {
    pthread_mutex_t lock; /* sinks, shared and long ring producers, flush handshake */
    pthread_cond_t cond;
    pthread_cond_t room;        /* lossless producers waiting for ring slots */
    _Atomic unsigned room_waiters;
    /* Lossless producers wait for room only until then (CLOCK_MONOTONIC
     * ns; 0: no bound): set when a shutdown begins (ev_bound_waits). */
    _Atomic uint64_t wait_until;
    /* ax_free gave up waiting for the sink (ev_abandon): the sinks are the
     * host's again; the event thread calls them no more, dropping what is
     * left (counted here and in ax_events_dropped). */
    _Atomic bool abandoned;
    _Atomic uint64_t abandoned_lost;
    pthread_t thread;
    bool started, stop, kick;
    bool finished;  /* ev_main has returned its last drain (lock) */
    bool json_failed; /* a write to the JSON sink failed: said once on stderr (lock) */
    uint64_t flush_req, flush_done;
    FILE *json;
    ax_event_fn fn;
    void *fn_arg;
    unsigned want_mask; /* mask asked for; effective only while a sink is set */
    struct ev_ring shared;
    ax_event long_ev[LONG_CAP]; /* events with long messages (lock) */
    /* Written under lock; ev_reserve reads them without it. */
    _Atomic unsigned long_head, long_tail;
    struct ev_item *batch; /* the event thread's */
    unsigned batch_cap;
    struct ev_item *scratch; /* order_batch's second array */
    unsigned scratch_cap;
    char *out;             /* JSON text of a batch */
    size_t out_cap;
    time_t ts_sec;         /* cached "YYYY-MM-DDTHH:MM:SS" of ts_sec */
    char ts_prefix[24];
    uint8_t ts_len;
    /* pieces_init: `Z","event":"<name>","id":` by kind (AX_EV_COUNT:
     * invalid), `,"priority":"<name>","attempt":` by priority */
    char kind_piece[AX_EV_COUNT + 1][48];
    char prio_piece[AX_PRIO_COUNT + 1][40];
    uint8_t kind_len[AX_EV_COUNT + 1], prio_len[AX_PRIO_COUNT + 1];
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

/* The ref of j (ax_spec.ref) and its length, or 0 for a task without one:
 * only a job with has_ref set has its ext read (struct job's comment). */
static inline size_t job_reflen(const struct job *j)
{
    return j && AX_UNLIKELY(j->has_ref) ? strnlen(j->ext->ref, AX_REF_MAX - 1) : 0;
}

/* at: the event's time (CLOCK_REALTIME ns), 0 for now. */
static void fill(struct ax_sched *s, struct ev_rec *e, unsigned kind, const struct job *j,
                 const struct ev_attempt *a, int code, const char *msg, size_t msglen,
                 size_t reflen, uint64_t at)
{
    e->kind = (uint8_t)kind;
    e->cls = j && j->cls ? s->classes[j->cls]->name : NULL;
    e->time_ns = at ? at : realtime_ns();
    e->code = code;
    if (j) {
        e->id = j->id;
        /* A generated trace id is made by the event thread (rec_to_event):
         * 90 instructions, ~1/3 of an emission, off the worker. */
        if (j->has_trace)
            memcpy(e->trace_id, j->trace_id, AX_TRACE_ID_MAX);
        else
            e->trace_id[0] = 0;
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
    e->msglen = (uint8_t)msglen;
    e->reflen = (uint8_t)reflen;
    if (msglen) { /* else the message's lines stay untouched */
        memcpy(e->msg, msg, msglen);
        e->msg[msglen < EV_INLINE_MSG ? msglen : EV_INLINE_MSG - 1] = 0;
    }
    if (AX_UNLIKELY(reflen)) /* fits: ev_emit_attempt checked */
        memcpy(e->msg + msglen + 1, j->ext->ref, reflen);
}

static void rec_to_event(const struct ev_rec *r, ax_event *e)
{
    e->kind = (ax_event_kind)r->kind;
    e->time_ns = r->time_ns;
    e->id = r->id;
    if (r->trace_id[0])
        memcpy(e->trace_id, r->trace_id, sizeof e->trace_id);
    else
        trace_format_id(r->id, e->trace_id); /* fill left it to us */
    e->priority = (ax_priority)r->prio;
    e->attempt = r->attempt;
    e->wait_ns = r->wait_ns;
    e->run_ns = r->run_ns;
    e->code = r->code;
    memcpy(e->message, r->msg, r->msglen);
    e->message[r->msglen] = 0;
    if (r->cls)
        memcpy(e->class_name, r->cls, strlen(r->cls) + 1);
    else
        e->class_name[0] = 0;
    memcpy(e->ref, r->msg + r->msglen + 1, r->reflen);
    e->ref[r->reflen] = 0;
}

/* Lossless mode: wait until ring r holds fewer than `limit` records. Wakes
 * the writer, then sleeps until it gives slots back (drain signals `room`
 * when someone waits), at most a millisecond at a time.
 *
 * It used to sleep a fixed 20 us, which is ~70 us with the kernel's timer
 * slack: in bench ax_obs (3 threads on 2 cores) 650 such sleeps per 400 k
 * tasks, ~10 % of the run, most of it after the writer had made room. The
 * waiter count and the ring's tail are both seq_cst, so either the writer
 * sees the waiter, or the waiter sees the room before it sleeps. */
static void room_wait_locked(struct ev_state *st)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&st->room, &st->lock, &ts);
}

static unsigned long_used(struct ev_state *st)
{
    return atomic_load(&st->long_head) - atomic_load(&st->long_tail);
}

/* r NULL: the long ring. */
static void wait_for_room(struct ev_state *st, struct ev_ring *r, unsigned limit)
{
    pthread_mutex_lock(&st->lock);
    kick_locked(st);
    atomic_fetch_add(&st->room_waiters, 1);
    if ((r ? atomic_load_explicit(&r->head, memory_order_relaxed) - atomic_load(&r->tail)
           : long_used(st)) >= limit)
        room_wait_locked(st);
    atomic_fetch_sub(&st->room_waiters, 1);
    pthread_mutex_unlock(&st->lock);
}

/* May a lossless producer (still) wait for room? Not once the time of a
 * shutdown under way has run out: a sink that takes nothing (a pipe nobody
 * reads, a callback that never returns) held ax_free's and ax_shutdown's
 * cancelling of thousands of queued tasks for ever, one CANCELLED event
 * each (review: ax_free never returned, 5 of 5 runs). Past it an event
 * that finds its ring full is dropped and counted, as without lossless. */
static bool room_wait_allowed(struct ev_state *st)
{
    uint64_t until = atomic_load_explicit(&st->wait_until, memory_order_relaxed);
    return until == 0 || now_ns() < until;
}

void ev_bound_waits(struct ax_sched *s, uint64_t until)
{
    if (!s->ev)
        return;
    atomic_store_explicit(&s->ev->wait_until, until ? until : 1, memory_order_relaxed);
    /* Waiters look again within a millisecond (room_wait_locked). */
}

/* Each thread keeps 1 in sample_every of its own submissions: of every
 * window of sample_every consecutive ones, the one at a random position
 * (stratified). Exact over a thread's consecutive submissions, and fair
 * whatever the pattern: a thread per request keeps 1 in N of its requests,
 * a thread that submits to two schedulers in turn keeps 1 in N of each
 * (a plain counter kept all of one and none of the other: review of
 * 5a1824d). Not by id: a thread takes the ids' sequence in blocks (job.c),
 * so a thread that submits a few tasks a block would always land on the
 * same residues (review of 5880c48: 400 threads of one task each,
 * sample_every 2, kept none). A change of sample_every starts a window. */
static _Thread_local unsigned sample_every_seen AX_TLS_HOT, sample_pos AX_TLS_HOT,
    sample_pick AX_TLS_HOT;

bool ev_sample_skip(struct ax_sched *s)
{
    unsigned every = atomic_load_explicit(&s->ev_sample, memory_order_relaxed);
    if (every <= 1)
        return false;
    if (every != sample_every_seen || sample_pos >= every) {
        sample_every_seen = every;
        sample_pos = 0;
    }
    if (sample_pos == 0)
        sample_pick = (unsigned)(ax_rand64() % every);
    return sample_pos++ != sample_pick;
}

static bool sampled_out(unsigned kind, const struct job *j)
{
    return j && j->ev_skip &&
           (kind == AX_EV_SUBMITTED || kind == AX_EV_STARTED || kind == AX_EV_SUCCEEDED);
}

/* Set while the caller holds s->lock: a lossless sink must not make it
 * wait there (every worker would stall behind it); ev_reserve made room. */
_Thread_local bool ev_under_lock;

void ev_reserve(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    if (ax_current_ev_sched)
        return; /* an event thread: see ev_emit_attempt */
    while (s->ev_lossless && atomic_load_explicit(&s->ev_mask, memory_order_relaxed) &&
           room_wait_allowed(st)) {
        if (atomic_load_explicit(&st->shared.head, memory_order_relaxed) -
                atomic_load_explicit(&st->shared.tail, memory_order_acquire) >=
            RING_CAP * 3 / 4)
            wait_for_room(st, &st->shared, RING_CAP * 3 / 4);
        else if (long_used(st) >= LONG_CAP * 3 / 4) /* a refusal's detail and ref can be long */
            wait_for_room(st, NULL, LONG_CAP * 3 / 4);
        else
            break;
    }
}

void ev_emit(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind, int code,
             const char *msg)
{
    ev_emit_attempt(s, w, j, kind, code, msg, NULL);
}

static void emit_at(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind,
                    int code, const char *msg, const struct ev_attempt *a, uint64_t at)
{
    /* The event thread is the ring's only reader: an event it produces
     * itself (its callback submitting or cancelling) never waits for room,
     * it would wait for itself. Nor does one an event callback produces in
     * another scheduler: that scheduler's callback may be waiting for room
     * in this thread's ring (a trial: two schedulers' callbacks flushing
     * each other hung both event threads and, lossless, every worker).
     * Such an event is dropped when the ring is full, even in lossless mode
     * (ax.h: ax_events_lossless). */
    bool may_wait = s->ev_lossless && !ev_under_lock && !ax_current_ev_sched;
    if (sampled_out(kind, j))
        return;
    struct ev_state *st = s->ev;
    size_t msglen = msg ? strnlen(msg, AX_EVENT_MESSAGE_MAX - 1) : 0;
    size_t reflen = job_reflen(j);
    if (msglen + (reflen ? reflen + 1 : 0) >= EV_INLINE_MSG) {
        /* Rare (backtraces, a long message with a ref): a full event in the
         * long ring, under the lock. */
        pthread_mutex_lock(&st->lock);
        while (may_wait && long_used(st) >= LONG_CAP && room_wait_allowed(st)) { /* as below */
            kick_locked(st);
            atomic_fetch_add(&st->room_waiters, 1);
            room_wait_locked(st);
            atomic_fetch_sub(&st->room_waiters, 1);
        }
        if (long_used(st) < LONG_CAP) {
            struct ev_rec tmp;
            fill(s, &tmp, kind, j, a, code, NULL, 0, 0, at);
            ax_event *e = &st->long_ev[atomic_load(&st->long_head) % LONG_CAP];
            rec_to_event(&tmp, e);
            memcpy(e->message, msg, msglen);
            e->message[msglen] = 0;
            if (reflen)
                memcpy(e->ref, j->ext->ref, reflen + 1);
            atomic_fetch_add(&st->long_head, 1);
            kick_locked(st);
        } else {
            atomic_fetch_add_explicit(&s->ev_dropped, 1, memory_order_relaxed);
        }
        pthread_mutex_unlock(&st->lock);
        return;
    }
    if (w && w == ax_current_worker) {
        struct ev_rec *e = ring_slot(w->ev_ring);
        while (!e && may_wait && room_wait_allowed(st)) {
            wait_for_room(st, w->ev_ring, RING_CAP);
            e = ring_slot(w->ev_ring);
        }
        if (!e) {
            atomic_fetch_add_explicit(&s->ev_dropped, 1, memory_order_relaxed);
            return;
        }
        fill(s, e, kind, j, a, code, msg, msglen, reflen, at);
        if (ring_commit(w->ev_ring)) {
            pthread_mutex_lock(&st->lock); /* half full: flush early (rare) */
            kick_locked(st);
            pthread_mutex_unlock(&st->lock);
        }
        return;
    }
    pthread_mutex_lock(&st->lock);
    struct ev_rec *e = ring_slot(&st->shared);
    while (!e && may_wait && room_wait_allowed(st)) {
        pthread_mutex_unlock(&st->lock);
        wait_for_room(st, &st->shared, RING_CAP);
        pthread_mutex_lock(&st->lock);
        e = ring_slot(&st->shared);
    }
    if (e) {
        fill(s, e, kind, j, a, code, msg, msglen, reflen, at);
        if (ring_commit(&st->shared))
            kick_locked(st);
    } else {
        atomic_fetch_add_explicit(&s->ev_dropped, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&st->lock);
}

void ev_emit_attempt(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind,
                     int code, const char *msg, const struct ev_attempt *a)
{
    emit_at(s, w, j, kind, code, msg, a, 0);
}

/* STARTED in two steps around the attempt's begin (run.c run_entry), so
 * that nothing waits between the begin and the event and the event's time
 * precedes anything that ends the attempt: emitted after js_begin with a
 * wait for room in between, a cancel that won the attempt's end meanwhile
 * wrote CANCELLED before it (review: "submitted cancelled started" for 2-4
 * tasks of 20 000 with a slow lossless sink). ev_started_room, before the
 * begin: in lossless mode, waits until the worker's own ring has a slot
 * (only this worker fills it, so the slot stays free), and returns the
 * time the event will carry. A task whose ref makes its STARTED a long
 * event (a ref over ~100 bytes) goes to the shared long ring, where room
 * cannot be held: it may still wait there. */
uint64_t ev_started_room(struct ax_sched *s, struct worker *w)
{
    struct ev_state *st = s->ev;
    if (AX_UNLIKELY(s->ev_lossless) && !ev_under_lock && !ax_current_ev_sched &&
        w == ax_current_worker)
        while (!ring_slot(w->ev_ring) && room_wait_allowed(st))
            wait_for_room(st, w->ev_ring, RING_CAP);
    return realtime_ns();
}

void ev_emit_started(struct ax_sched *s, struct worker *w, const struct job *j, uint64_t at)
{
    emit_at(s, w, j, AX_EV_STARTED, 0, NULL, NULL, at);
}

void ev_emit_attempt_at(struct ax_sched *s, struct worker *w, const struct job *j, unsigned kind,
                        int code, const char *msg, const struct ev_attempt *a, uint64_t at)
{
    emit_at(s, w, j, kind, code, msg, a, at);
}

uint64_t ev_clock(void)
{
    return realtime_ns();
}

void ev_emit_refusal(struct ax_sched *s, const ax_spec *sp, unsigned kind, int code,
                     const char *msg)
{
    struct job fake;
    struct job_ext fake_ext;
    memset(&fake, 0, sizeof fake);
    if (sp) {
        /* a refused task's ref, if it is one ax_submit would take */
        if (AX_UNLIKELY(sp->ref && sp->ref[0]) && strnlen(sp->ref, AX_REF_MAX) < AX_REF_MAX &&
            utf8_invalid_at(sp->ref, strlen(sp->ref)) == strlen(sp->ref)) {
            memcpy(fake_ext.ref, sp->ref, strlen(sp->ref) + 1);
            fake.ext = &fake_ext;
            fake.has_ref = 1;
        }
        /* Out of range: "invalid", not the NORMAL a zeroed job would say
         * (user trial: priority 77 was reported "normal"). */
        fake.prio = (unsigned)sp->priority < AX_PRIO_COUNT ? (uint8_t)sp->priority
                                                            : (uint8_t)AX_PRIO_COUNT;
        if (sp->trace_id)
            snprintf(fake.trace_id, sizeof fake.trace_id, "%s", sp->trace_id);
        if (class_get(s, sp->class_id))
            fake.cls = (uint8_t)sp->class_id;
    }
    if (!fake.trace_id[0])
        memcpy(fake.trace_id, "-", 2);
    fake.has_trace = 1; /* as given, or "-": never one made from the id (0) */
    ev_emit(s, NULL, &fake, kind, code, msg);
}

/* ---- writing ---------------------------------------------------------------- */

/* The JSON writer: hand-rolled, straight into one buffer per batch, written
 * with one fwrite. It is the event thread's whole job and, in lossless
 * mode, what the workers wait for.
 *
 * Profile (valgrind --tool=callgrind, bench ax_obs: 1 worker, 3 events per
 * task, 20 k tasks), before issue 10: 1 990 instructions per event in the
 * event thread, of which put_str 610 (a memcpy call per byte), qsort of the
 * batch 370, put_u64/put_us 520 (a division and a memcpy per digit), the
 * rest the ~20 put() calls of each line and the copy of each record into
 * an ax_event. Now 640: a run of plain bytes is copied at once, checked 8
 * bytes at a time; integers two digits at a time from a table, written in
 * place; the constant parts of a line, with the event and priority names,
 * pre-rendered (ev_init); lines made from the ring records in place; the
 * batch merged (the rings are each in time order already) instead of
 * sorted. What is left per event: ~200 bytes of text to make (the fields
 * are fixed), the trace id, and write(2)'s copy into the page cache, which
 * now costs the event thread about as much as the formatting (bench
 * ax_obs, 1 M tasks to a file: ~55 % of the thread's CPU is system time). */
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

#define LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) + sizeof(s) - 1)

static const char digits2[201] = "00010203040506070809101112131415161718192021222324"
                                 "25262728293031323334353637383940414243444546474849"
                                 "50515253545556575859606162636465666768697071727374"
                                 "75767778798081828384858687888990919293949596979899";

/* Decimal, written in place: count the digits, then fill from the end two
 * at a time (a multiply, not a division, per pair). */
static char *w_u64(char *p, uint64_t v)
{
    static const uint64_t pow10[20] = {1ull,
                                       10ull,
                                       100ull,
                                       1000ull,
                                       10000ull,
                                       100000ull,
                                       1000000ull,
                                       10000000ull,
                                       100000000ull,
                                       1000000000ull,
                                       10000000000ull,
                                       100000000000ull,
                                       1000000000000ull,
                                       10000000000000ull,
                                       100000000000000ull,
                                       1000000000000000ull,
                                       10000000000000000ull,
                                       100000000000000000ull,
                                       1000000000000000000ull,
                                       10000000000000000000ull};
    if (v < 10) {
        *p = (char)('0' + v);
        return p + 1;
    }
    unsigned t = ((64u - (unsigned)__builtin_clzll(v)) * 1233u) >> 12; /* ~log10 */
    unsigned n = t + 1 - (v < pow10[t]);
    char *q = p + n;
    while (v >= 100) {
        q -= 2;
        memcpy(q, digits2 + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10)
        memcpy(q - 2, digits2 + 2 * v, 2);
    else
        q[-1] = (char)('0' + v);
    return p + n;
}

static char *w_i64(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return w_u64(p, (uint64_t)(-(v + 1)) + 1);
    }
    return w_u64(p, (uint64_t)v);
}

/* ns as microseconds with three decimals. */
static char *w_us(char *p, uint64_t ns)
{
    unsigned r = (unsigned)(ns % 1000);
    p = w_u64(p, ns / 1000);
    p[0] = '.';
    p[1] = (char)('0' + r / 100);
    memcpy(p + 2, digits2 + 2 * (r % 100), 2);
    return p + 4;
}

/* A JSON string that every strict decoder accepts: valid UTF-8 passes
 * through, and a byte that does not begin a valid character (a task's own
 * error text, a message cut inside a character) becomes U+FFFD. Runs of
 * printable ASCII (all of a generated trace id) are copied with one
 * memcpy; n = strlen(s). At most 6 bytes out per byte in, plus 2. */
static char *w_str(char *p, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s, *end = u + n;
    *p++ = '"';
    for (;;) {
        const unsigned char *run = u;
        /* Eight bytes at a time while none needs care (SWAR: a byte below
         * 0x20, from 0x80, '"' or '\\' sets its top bit in `care`; no
         * false negatives), then byte by byte up to the one that does. */
        while (end - u >= 8) {
            uint64_t x, ones = 0x0101010101010101ull, tops = 0x8080808080808080ull;
            memcpy(&x, u, 8);
            uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
            uint64_t care = ((x - ones * 0x20) & ~x) | x | ((q - ones) & ~q) | ((b - ones) & ~b);
            if (care & tops)
                break;
            u += 8;
        }
        while (u < end && *u >= 0x20 && *u < 0x80 && *u != '"' && *u != '\\')
            u++;
        memcpy(p, run, (size_t)(u - run));
        p += u - run;
        if (u == end)
            break;
        unsigned char c = *u;
        if (c >= 0x80) {
            size_t k = utf8_char_len(u, (size_t)(end - u));
            if (k) {
                memcpy(p, u, k);
                p += k;
                u += k;
            } else {
                p = LIT(p, "\\ufffd");
                u++;
            }
            continue;
        }
        u++;
        *p++ = '\\';
        if (c == '"' || c == '\\') {
            *p++ = (char)c;
        } else if (c == '\n') {
            *p++ = 'n';
        } else if (c == '\r') {
            *p++ = 'r';
        } else if (c == '\t') {
            *p++ = 't';
        } else {
            p = LIT(p, "u00");
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        }
    }
    *p++ = '"';
    return p;
}

/* The constant parts of a line around the event and priority names, built
 * once from ax_event_name / ax_priority_name (the names' only source). */
static void pieces_init(struct ev_state *st)
{
    for (unsigned k = 0; k <= AX_EV_COUNT; k++) {
        int n = snprintf(st->kind_piece[k], sizeof st->kind_piece[k], "Z\",\"event\":\"%s\",\"id\":",
                         ax_event_name((ax_event_kind)k)); /* AX_EV_COUNT: "invalid" */
        st->kind_len[k] = (uint8_t)n;
    }
    for (unsigned k = 0; k <= AX_PRIO_COUNT; k++) {
        int n = snprintf(st->prio_piece[k], sizeof st->prio_piece[k],
                         ",\"priority\":\"%s\",\"attempt\":", ax_priority_name((ax_priority)k));
        st->prio_len[k] = (uint8_t)n;
    }
}

/* One line's fields, pointing into a ring record or a full ax_event: the
 * writer formats records in place, without copying each into an ax_event
 * (which only a callback sink needs). trace == NULL: generated from id. */
struct ev_line {
    uint64_t time_ns, id, wait_ns, run_ns;
    int32_t code;
    uint32_t attempt;
    unsigned kind, prio;
    const char *trace, *msg;
    size_t tlen, msglen;
    const char *cls; /* the task's class name, NULL if none */
    size_t clen;
    const char *ref; /* the task's ref, NULL if none */
    size_t reflen;
};

static void line_of_rec(const struct ev_rec *r, struct ev_line *l)
{
    *l = (struct ev_line){r->time_ns, r->id, r->wait_ns, r->run_ns, r->code, r->attempt,
                          r->kind, r->prio, NULL, r->msg, 0, r->msglen, NULL, 0, NULL, 0};
    if (r->trace_id[0]) {
        l->trace = r->trace_id;
        l->tlen = strnlen(r->trace_id, AX_TRACE_ID_MAX - 1);
    }
    if (r->cls) {
        l->cls = r->cls;
        l->clen = strnlen(r->cls, AX_CLASS_NAME_MAX - 1);
    }
    if (AX_UNLIKELY(r->reflen)) {
        l->ref = r->msg + r->msglen + 1;
        l->reflen = r->reflen;
    }
}

static void line_of_event(const ax_event *e, struct ev_line *l)
{
    *l = (struct ev_line){e->time_ns, e->id, e->wait_ns, e->run_ns, e->code, e->attempt,
                          (unsigned)e->kind, (unsigned)e->priority, e->trace_id, e->message,
                          strnlen(e->trace_id, AX_TRACE_ID_MAX - 1), strlen(e->message), NULL, 0,
                          NULL, 0};
    if (e->class_name[0]) {
        l->cls = e->class_name;
        l->clen = strnlen(e->class_name, AX_CLASS_NAME_MAX - 1);
    }
    if (e->ref[0]) {
        l->ref = e->ref;
        l->reflen = strnlen(e->ref, AX_REF_MAX - 1);
    }
}

static void put_event(struct ev_state *st, struct out *o, const struct ev_line *e)
{
    /* Worst case: escaping can grow a string 6x. */
    if (!out_room(st, o, 400 + 6 * (AX_TRACE_ID_MAX + AX_CLASS_NAME_MAX + AX_REF_MAX + e->msglen)))
        return;
    time_t sec = (time_t)(e->time_ns / 1000000000u);
    if (sec != st->ts_sec) {
        struct tm tm;
        gmtime_r(&sec, &tm);
        st->ts_len = (uint8_t)strftime(st->ts_prefix, sizeof st->ts_prefix, "%Y-%m-%dT%H:%M:%S", &tm);
        st->ts_sec = sec;
    }
    char *p = o->p + o->len;
    /* The three pieces are copied whole (a fixed size: a few vector moves)
     * and the length kept: with their lengths as memcpy's size gcc emitted
     * rep movsq, whose start-up made them ~15 % of this function's samples
     * (perf, 400 k tasks). The line's room above covers the overhang. */
    p = LIT(p, "{\"ts\":\"");
    memcpy(p, st->ts_prefix, sizeof st->ts_prefix);
    p += st->ts_len;
    unsigned us = (unsigned)(e->time_ns % 1000000000u / 1000u);
    *p = '.';
    memcpy(p + 1, digits2 + 2 * (us / 10000), 2);
    memcpy(p + 3, digits2 + 2 * (us / 100 % 100), 2);
    memcpy(p + 5, digits2 + 2 * (us % 100), 2);
    p += 7;
    unsigned k = e->kind < AX_EV_COUNT ? e->kind : AX_EV_COUNT;
    memcpy(p, st->kind_piece[k], sizeof st->kind_piece[k]); /* Z","event":"…","id": */
    p = w_u64(p + st->kind_len[k], e->id);
    p = LIT(p, ",\"trace_id\":");
    if (e->trace) {
        p = w_str(p, e->trace, e->tlen);
    } else { /* "ax-" and 16 hex digits: nothing to escape */
        *p = '"';
        trace_format_id(e->id, p + 1); /* 19 bytes and a NUL, overwritten */
        p[20] = '"';
        p += 21;
    }
    if (e->cls) {
        p = LIT(p, ",\"class\":");
        p = w_str(p, e->cls, e->clen);
    }
    if (e->ref) {
        p = LIT(p, ",\"ref\":");
        p = w_str(p, e->ref, e->reflen);
    }
    k = e->prio < AX_PRIO_COUNT ? e->prio : AX_PRIO_COUNT;
    memcpy(p, st->prio_piece[k], sizeof st->prio_piece[k]); /* ,"priority":"…","attempt": */
    p = w_u64(p + st->prio_len[k], e->attempt);
    p = LIT(p, ",\"wait_us\":");
    p = w_us(p, e->wait_ns);
    p = LIT(p, ",\"run_us\":");
    p = w_us(p, e->run_ns);
    p = LIT(p, ",\"code\":");
    p = w_i64(p, e->code);
    if (e->code) {
        p = LIT(p, ",\"error\":");
        if (error_is_ax(e->code)) {
            const char *text = ax_strerror(e->code);
            p = w_str(p, text, strlen(text));
        } else { /* the task function's own return code */
            char b[40], *q = LIT(b, "task returned ");
            q = w_i64(q, e->code);
            p = w_str(p, b, (size_t)(q - b));
        }
    }
    p = LIT(p, ",\"message\":");
    p = w_str(p, e->msg, e->msglen);
    p = LIT(p, "}\n");
    o->len = (size_t)(p - o->p);
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

/* Point batch items at r's records [tail, h); returns the new count and
 * the ring position to release up to (*upto). The records are stable: a
 * producer writes only at and after head. */
static unsigned take(struct ev_state *st, struct ev_ring *r, unsigned ring, unsigned h,
                     unsigned n, unsigned *from, unsigned *upto)
{
    unsigned t = *from = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (; t != h && batch_room(st, n); t++, n++) {
        const struct ev_rec *rec = &r->rec[t & (RING_CAP - 1)];
        st->batch[n] = (struct ev_item){rec->time_ns, rec, NULL, ring};
    }
    *upto = t;
    return n;
}

/* Put the batch in time order. It is made of runs, one per ring, each
 * already in time order: a ring has one producer at a time (a worker, or
 * the lock's holder), which reads the clock as it fills the slot. So merge
 * the runs pairwise, O(n log runs), stable: events of equal time keep
 * their ring order, and a ring's own order (its producer's) is kept even
 * if the wall clock steps back. Returns the ordered array (st->batch or
 * st->scratch); qsort's when no scratch memory can be had. */
static struct ev_item *order_batch(struct ev_state *st, unsigned n, unsigned *bound,
                                   unsigned nruns)
{
    struct ev_item *a = st->batch, *b;
    if (nruns <= 1 || n < 2)
        return a;
    if (st->scratch_cap < st->batch_cap) {
        free(st->scratch);
        st->scratch = malloc(st->batch_cap * sizeof *st->scratch);
        st->scratch_cap = st->scratch ? st->batch_cap : 0;
        if (!st->scratch) {
            qsort(a, n, sizeof *a, by_time);
            return a;
        }
    }
    b = st->scratch;
    while (nruns > 1) {
        unsigned out = 0;
        for (unsigned r = 0; r < nruns; r += 2) {
            unsigned i = bound[r], mid = bound[r + 1 < nruns ? r + 1 : nruns],
                     end = bound[r + 2 < nruns ? r + 2 : nruns], k = i, j = mid;
            while (i < mid && j < end)
                b[k++] = a[j].time_ns < a[i].time_ns ? a[j++] : a[i++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < end)
                b[k++] = a[j++];
            bound[out++] = bound[r];
        }
        bound[out] = n;
        nruns = out;
        struct ev_item *t = a;
        a = b;
        b = t;
    }
    return a;
}

/* Give the taken slots back, and wake lossless producers waiting for
 * them. The tails are seq_cst against wait_for_room's waiter count. */
static void release(struct ax_sched *s, const unsigned *upto, unsigned lh)
{
    struct ev_state *st = s->ev;
    unsigned nw = s->nworkers;
    for (unsigned i = 0; i < nw; i++)
        atomic_store(&s->workers[i].ev_ring->tail, upto[i]);
    atomic_store(&st->shared.tail, upto[nw]);
    if (atomic_load(&st->long_tail) != lh || atomic_load(&st->room_waiters)) {
        pthread_mutex_lock(&st->lock);
        atomic_store(&st->long_tail, lh);
        pthread_cond_broadcast(&st->room);
        pthread_mutex_unlock(&st->lock);
    }
}

/* Mid-batch: give back the slots whose records are formatted already, if a
 * producer waits for them. A ring's records are consumed in ring order (the
 * merge keeps it), so they are the first done[i] from from[i]. Without this
 * a lossless producer waited for a whole batch, up to 2 rings' worth:
 * ~1 ms each time, 47 times per 200 k tasks in bench ax_obs. */
static void release_some(struct ax_sched *s, const unsigned *from, const unsigned *done)
{
    struct ev_state *st = s->ev;
    unsigned nw = s->nworkers;
    if (!atomic_load(&st->room_waiters))
        return;
    for (unsigned i = 0; i < nw; i++)
        atomic_store(&s->workers[i].ev_ring->tail, from[i] + done[i]);
    atomic_store(&st->shared.tail, from[nw] + done[nw]);
    pthread_mutex_lock(&st->lock);
    pthread_cond_broadcast(&st->room);
    pthread_mutex_unlock(&st->lock);
}

/* Drain every ring and write the batch. Event thread only (or after it
 * stopped). The lock is held only to read the shared ring's head, the
 * long ring's bounds and the sinks: producers of the shared ring (the
 * submitter, under the scheduler's lock) never wait for the batch to be
 * taken. The slots are given back as soon as the text is made, before the
 * write(2). */
/* Write a batch's text to the JSON sink. A sink that fails (a pipe whose
 * reader left: EPIPE, SIGPIPE being blocked on this thread; a full disk)
 * loses the batch: its events are counted in ax_events_dropped, all of
 * them (stdio does not say which of the bytes it took reached the file:
 * glibc drops its buffer when a write fails, and fwrite still counts those
 * bytes as taken), and the first failure of a sink is said on stderr (user
 * trial: SIGPIPE killed the host from this thread, and with SIGPIPE
 * ignored the losses were counted nowhere). */
static void write_batch(struct ax_sched *s, FILE *f, const struct out *o)
{
    struct ev_state *st = s->ev;
    size_t put = fwrite(o->p, 1, o->len, f);
    int err = put < o->len ? errno : 0;
    if (fflush(f) != 0) {
        if (!err)
            err = errno;
    } else if (put == o->len) {
        return;
    }
    uint64_t lost = 0;
    for (size_t i = 0; i < o->len; i++)
        lost += o->p[i] == '\n';
    atomic_fetch_add_explicit(&s->ev_dropped, lost, memory_order_relaxed);
    clearerr(f); /* try the next batch: the failure may pass (EAGAIN, ENOSPC) */
    pthread_mutex_lock(&st->lock);
    bool first = !st->json_failed;
    st->json_failed = true;
    pthread_mutex_unlock(&st->lock);
    if (first) {
        fprintf(stderr,
                "ax: writing events to the JSON sink failed (%s); the events of each batch it "
                "fails on are counted in ax_events_dropped\n",
                err ? strerror(err) : "short write");
    }
}

static unsigned drain(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    unsigned n = 0, nw = s->nworkers, nruns = 0;
    unsigned from[nw + 1], upto[nw + 1], done[nw + 1], bound[nw + 3], head[nw];
    /* Every ring's head first, the workers' before the shared and long
     * rings', all before any record is taken: an event that another thread
     * causes after a worker's (a cancel's CANCELLED in the shared ring
     * after the worker's STARTED) is then in this batch only if the
     * worker's was committed when its ring was looked at, a moment before.
     * Read with the records taken in between (and the lock's wait), a
     * cancel racing a slow sink's batches wrote "submitted cancelled
     * started" for 88 tasks of 20 000 (review's program). An event the
     * shared ring causes on a worker (SUBMITTED, RETRY_SCHEDULED before a
     * STARTED) is safe either way: committed before it, so before the
     * shared head is read. What is left is a worker preempted between an
     * attempt's begin and its STARTED's commit, a few instructions. */
    for (unsigned i = 0; i < nw; i++)
        head[i] = atomic_load_explicit(&s->workers[i].ev_ring->head, memory_order_acquire);
    unsigned sh = atomic_load_explicit(&st->shared.head, memory_order_acquire);
    unsigned lh = atomic_load(&st->long_head), lt = atomic_load(&st->long_tail);
    for (unsigned i = 0; i < nw; i++) {
        bound[nruns] = n;
        n = take(st, s->workers[i].ev_ring, i, head[i], n, &from[i], &upto[i]);
        nruns += n > bound[nruns];
    }
    pthread_mutex_lock(&st->lock);
    FILE *f = st->json;
    ax_event_fn fn = st->fn;
    void *arg = st->fn_arg;
    pthread_mutex_unlock(&st->lock);
    bound[nruns] = n;
    n = take(st, &st->shared, nw, sh, n, &from[nw], &upto[nw]);
    nruns += n > bound[nruns];
    bound[nruns] = n;
    for (unsigned k = lt; k != lh && batch_room(st, n); k++, n++) {
        const ax_event *e = &st->long_ev[k % LONG_CAP];
        st->batch[n] = (struct ev_item){e->time_ns, NULL, e, 0};
    }
    nruns += n > bound[nruns];
    bound[nruns] = n;
    if (n == 0) {
        release(s, upto, lh);
        return 0;
    }
    struct ev_item *items = order_batch(st, n, bound, nruns);
    struct out o = {st->out, 0, st->out_cap};
    ax_event e;
    struct ev_line l;
    memset(done, 0, sizeof done);
    unsigned i;
    for (i = 0; i < n; i++) {
        /* Between two events, never inside a sink's call (ev_abandon). */
        if (AX_UNLIKELY(atomic_load_explicit(&st->abandoned, memory_order_acquire)))
            break;
        const ax_event *ev = items[i].full;
        if ((i & (RELEASE_EVERY - 1)) == RELEASE_EVERY - 1)
            release_some(s, from, done);
        if (f) {
            if (ev)
                line_of_event(ev, &l);
            else
                line_of_rec(items[i].rec, &l);
            put_event(st, &o, &l);
        }
        if (fn) {
            if (!ev) {
                rec_to_event(items[i].rec, &e);
                ev = &e;
            }
            fn(ev, arg);
        }
        if (!items[i].full)
            done[items[i].ring]++;
    }
    release(s, upto, lh);
    if (AX_UNLIKELY(atomic_load_explicit(&st->abandoned, memory_order_acquire))) {
        uint64_t lost = f ? n : n - i; /* the batch's text is not written */
        atomic_fetch_add_explicit(&st->abandoned_lost, lost, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->ev_dropped, lost, memory_order_relaxed);
        return n;
    }
    if (f && o.len)
        write_batch(s, f, &o);
    return n;
}

_Thread_local const struct ax_sched *ax_current_ev_sched;

static void *ev_main(void *arg)
{
    struct ax_sched *s = arg;
    ax_current_ev_sched = s;
    /* A JSON sink that is a pipe whose reader left must fail the write with
     * EPIPE, not kill the host with SIGPIPE from this thread: it is ax's
     * write, not the program's (README: ax holds SIGPIPE back from its own
     * writes). Blocked for good here; one raised stays pending on this
     * thread, delivered nowhere. */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    /* Named like every thread of ax: an events callback runs here, and a
     * host reading top -H or a debugger's thread list should see whose. */
    pthread_setname_np(pthread_self(), "ax-events");
    struct ev_state *st = s->ev;
    bool busy = false;
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        bool active = st->json || st->fn;
        if (!busy && !st->kick && st->flush_req == st->flush_done) {
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
        /* A big batch: more is on its way; take it while the producers
         * make it rather than after they wait for room (lossless) or
         * kick us (a futex wake-up, ~50-100 us here, each time). */
        busy = drain(s) >= BUSY_BATCH;
        pthread_mutex_lock(&st->lock);
        st->flush_done = req;
        pthread_cond_broadcast(&st->cond);
    }
    pthread_mutex_unlock(&st->lock);
    drain(s);
    pthread_mutex_lock(&st->lock);
    st->finished = true;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

/* ---- control ---------------------------------------------------------------- */

int ev_init(struct ax_sched *s)
{
    struct ev_state *st = ev_zalloc(sizeof *st);
    if (!st)
        return ax_fail_static(AX_ENOMEM, "out of memory for the event buffers");
    pthread_mutex_init(&st->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cond, &ca);
    pthread_cond_init(&st->room, &ca);
    pthread_condattr_destroy(&ca);
    st->want_mask = AX_EVMASK_ALL;
    st->ts_sec = (time_t)-1; /* no prefix cached yet */
    pieces_init(st);
    s->ev = st;
    atomic_store_explicit(&s->ev_sample, 1, memory_order_relaxed);
    for (unsigned i = 0; i < s->nworkers; i++) {
        s->workers[i].ev_ring = ev_zalloc(sizeof(struct ev_ring));
        if (!s->workers[i].ev_ring)
            return ax_fail_static(AX_ENOMEM, "out of memory for the event buffers");
    }
    if (pthread_create(&st->thread, NULL, ev_main, s) != 0)
        return ax_fail_static(AX_ESYS, "cannot start the event thread");
    st->started = true;
    return AX_OK;
}

/* Wait on st->cond until `until` (CLOCK_MONOTONIC ns; 0: no bound); false
 * once it has passed. */
static bool cond_wait_until(struct ev_state *st, uint64_t until)
{
    if (!until) {
        pthread_cond_wait(&st->cond, &st->lock);
        return true;
    }
    uint64_t now = now_ns();
    if (now >= until)
        return false;
    struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
    pthread_cond_timedwait(&st->cond, &st->lock, &ts);
    return true;
}

bool ev_flush_until(struct ax_sched *s, uint64_t until)
{
    struct ev_state *st = s->ev;
    bool done = true;
    pthread_mutex_lock(&st->lock);
    uint64_t want = ++st->flush_req;
    pthread_cond_broadcast(&st->cond);
    while (st->flush_done < want && !st->stop && (done = cond_wait_until(st, until)))
        ;
    pthread_mutex_unlock(&st->lock);
    return done;
}

void ev_abandon(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    if (!st)
        return;
    /* Not stopped: the thread goes on draining, dropping (a held worker's
     * task may still emit), and stays alive with the leaked scheduler, as
     * it did before; one that exited unjoined is a thread leak to TSan. */
    atomic_store_explicit(&st->abandoned, true, memory_order_release);
}

/* The thread writes what is buffered, then exits. A sink too slow for the
 * time left (a callback taking 1 ms an event, thousands buffered) kept the
 * thread calling it after ax_free had returned, leaking the scheduler, and
 * the host had freed the callback's argument by then (new-user trial:
 * ASan, 4 of 4 runs). So up to 20 ms before `until` the sinks are abandoned
 * (ev_abandon): the thread drops what is left after the call it is in, and
 * is joined if that call returns by `until`; else (a sink that takes
 * nothing) it is left in its call, with the scheduler leaked, and never
 * calls a sink again. */
#define EV_ABANDON_NS 20000000u
bool ev_stop_until(struct ax_sched *s, uint64_t until)
{
    struct ev_state *st = s->ev;
    if (!st)
        return true;
    if (st->started) {
        uint64_t now = now_ns(), soft = until;
        if (until) {
            uint64_t left = until > now ? until - now : 0;
            soft = until - (left / 2 < EV_ABANDON_NS ? left / 2 : EV_ABANDON_NS);
        }
        pthread_mutex_lock(&st->lock);
        st->stop = true;
        pthread_cond_broadcast(&st->cond);
        bool in_time = true;
        while (!st->finished && (in_time = cond_wait_until(st, soft)))
            ;
        if (!st->finished) {
            atomic_store_explicit(&st->abandoned, true, memory_order_release);
            while (!st->finished && (in_time = cond_wait_until(st, until)))
                ;
        }
        pthread_mutex_unlock(&st->lock);
        if (!in_time) {
            /* Still in a write or a callback: leave it all be. Detached: if
             * that call returns, the thread exits (dropping the rest) with
             * nobody to join it, a thread leak to TSan (CI, a callback of
             * 1 ms slower than the abandon window under TSan). */
            pthread_detach(st->thread);
            return false;
        }
        pthread_join(st->thread, NULL);
        uint64_t lost = atomic_load(&st->abandoned_lost);
        if (lost)
            fprintf(stderr,
                    "ax_free: the event sink had not taken every event when "
                    "shutdown_timeout_ms (%u ms) ran out: %llu event(s) not written\n",
                    s->cfg.shutdown_timeout_ms, (unsigned long long)lost);
    }
    for (unsigned i = 0; i < s->nworkers; i++) {
        ev_zfree(s->workers[i].ev_ring, sizeof(struct ev_ring));
        s->workers[i].ev_ring = NULL;
    }
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->cond);
    pthread_cond_destroy(&st->room);
    free(st->batch);
    free(st->scratch);
    free(st->out);
    ev_zfree(st, sizeof *st);
    s->ev = NULL;
    return true;
}

void ev_stop(struct ax_sched *s)
{
    ev_stop_until(s, 0);
}

static void apply_mask_locked(struct ax_sched *s)
{
    struct ev_state *st = s->ev;
    unsigned m = (st->json || st->fn) ? st->want_mask : 0;
    atomic_store_explicit(&s->ev_mask, m, memory_order_release);
    pthread_cond_signal(&st->cond);
}

/* A drain reads the sinks once, under the lock, then writes outside it: one
 * that began just before a switch (the event thread drains again at once
 * when kicked or busy) still writes to the old sink after it. A flush after
 * the switch waits for a drain that read the sinks after it, so the ones
 * before have ended: on return the old file or callback argument is the
 * host's again (it may close or free it). */
/* The event thread of s is the one running the callback: it cannot wait
 * for its own drain, nor switch the sink the drain it is in goes on using.
 * Nor may it wait for another scheduler's event thread, whose callback may
 * be waiting for this one (a trial: two callbacks flushing each other's
 * scheduler, both threads stuck for good). Nor may a metrics appender wait for any scheduler's event thread: that
 * thread's callback may be stopping the appender's scheduler, which joins
 * the thread the appender runs on (review: a deadlock, 3 of 3 runs). */
static int refuse_on_event_thread(const struct ax_sched *s, const char *what)
{
    if (ax_current_appender_sched)
        return ax_fail(AX_ESTATE, "%s: called from a metrics appender (it would wait for an "
                                  "event thread); call it from another thread",
                       what);
    if (!ax_current_ev_sched)
        return AX_OK;
    if (ax_current_ev_sched == s)
        return ax_fail(AX_ESTATE,
                       "%s: called from the event callback (the event thread would wait for "
                       "itself); call it from another thread",
                       what);
    return ax_fail(AX_ESTATE,
                   "%s: called from another scheduler's event callback (two event threads "
                   "would wait for each other); call it from another thread",
                   what);
}

int ax_events_json(ax_sched *s, FILE *f)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_events_json");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_json: scheduler is NULL");
    int rc = refuse_on_event_thread(s, "ax_events_json");
    if (rc)
        return rc;
    ax_events_flush(s); /* what was buffered goes to the old sink */
    pthread_mutex_lock(&s->ev->lock);
    s->ev->json = f;
    s->ev->json_failed = false; /* a new sink's first failure is said again */
    apply_mask_locked(s);
    pthread_mutex_unlock(&s->ev->lock);
    ax_events_flush(s); /* no drain still writes to the old one */
    return AX_OK;
}

int ax_events_callback(ax_sched *s, ax_event_fn fn, void *arg)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_events_callback");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_callback: scheduler is NULL");
    int rc = refuse_on_event_thread(s, "ax_events_callback");
    if (rc)
        return rc;
    ax_events_flush(s);
    pthread_mutex_lock(&s->ev->lock);
    s->ev->fn = fn;
    s->ev->fn_arg = arg;
    apply_mask_locked(s);
    pthread_mutex_unlock(&s->ev->lock);
    ax_events_flush(s); /* no drain still calls the old one */
    return AX_OK;
}

int ax_events_filter(ax_sched *s, unsigned mask, unsigned sample_every)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_events_filter");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_filter: scheduler is NULL");
    if (mask & ~(unsigned)AX_EVMASK_ALL)
        return ax_fail(AX_EINVAL, "ax_events_filter: unknown bits 0x%x in mask",
                       mask & ~(unsigned)AX_EVMASK_ALL);
    if (sample_every == 0)
        return ax_fail_static(AX_EINVAL, "ax_events_filter: sample_every must be >= 1");
    pthread_mutex_lock(&s->ev->lock);
    s->ev->want_mask = mask;
    atomic_store_explicit(&s->ev_sample, sample_every, memory_order_relaxed);
    apply_mask_locked(s);
    pthread_mutex_unlock(&s->ev->lock);
    return AX_OK;
}

int ax_events_flush(ax_sched *s)
{
    if (s && sched_forked(s))
        return sched_forked_fail("ax_events_flush");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_flush: scheduler is NULL");
    if (ax_current_worker && ax_current_worker->s == s)
        return ax_fail_static(AX_ESTATE, "ax_events_flush: called on a worker (would stall it)");
    int rc = refuse_on_event_thread(s, "ax_events_flush");
    if (rc)
        return rc;
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
    if (s && sched_forked(s))
        return sched_forked_fail("ax_events_lossless");
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_events_lossless: scheduler is NULL");
    s->ev_lossless = on;
    return AX_OK;
}

uint64_t ax_events_dropped(ax_sched *s)
{
    return s ? atomic_load(&s->ev_dropped) : 0;
}
