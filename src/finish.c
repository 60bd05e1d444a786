/* finish.c - the end of an attempt: slot, counters, retry or terminal
 * callback (seed §3.1 state machine, §3.4 handleTimeout, §5.5 back-off).
 *
 * Called by whoever won the CAS that ended the attempt (see internal.h):
 *   - a worker (w != NULL): the slot release and counters are batched into
 *     the worker's next dispatch lock section, so a plain success costs no
 *     extra lock; retries and joined children take the lock now;
 *   - any other thread (w == NULL: monitor, ax_cancel, shutdown): under
 *     s->lock at once, and sleeping workers are woken since a slot freed.
 *
 * Order of effects: the slot is released (a timed-out task's slot is free at
 * the deadline even if its coroutine goes on), on_timeout is posted to the
 * callback pool, then either the job is re-queued through the monitor's
 * wheel after its back-off (state RETRYING) or it is terminal: joiners are
 * woken and on_done runs exactly once, on this thread, with no lock held.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

void result_fill(const struct job *j, unsigned state, int code, const char *err, ax_result *r)
{
    r->id = j->id;
    trace_format(j, r->trace_id);
    r->priority = (ax_priority)j->prio;
    r->state = (ax_state)state;
    r->attempts = j->attempt + 1u;
    r->code = code;
    r->wait_ns = j->wait_ns;
    r->run_ns = j->run_ns;
    size_t n = err ? strnlen(err, sizeof r->error - 1) : 0;
    memcpy(r->error, err ? err : "", n);
    r->error[n] = 0;
}

/* Add one terminal outcome to counters (s->lock held). */
static void count_terminal_locked(struct ax_sched *s, unsigned state)
{
    switch (state) {
    case AX_STATE_SUCCEEDED: s->st.succeeded++; break;
    case AX_STATE_FAILED: s->st.failed++; break;
    case AX_STATE_TIMED_OUT: s->st.timed_out++; break;
    case AX_STATE_CANCELLED: s->st.cancelled++; break;
    default: break;
    }
}

static void count_terminal_worker(struct worker_counts *c, unsigned state)
{
    switch (state) {
    case AX_STATE_SUCCEEDED: wc_inc(&c->succeeded); break;
    case AX_STATE_FAILED: wc_inc(&c->failed); break;
    case AX_STATE_TIMED_OUT: wc_inc(&c->timed_out); break;
    case AX_STATE_CANCELLED: wc_inc(&c->cancelled); break;
    default: break;
    }
}

static unsigned terminal_event(unsigned state)
{
    switch (state) {
    case AX_STATE_SUCCEEDED: return AX_EV_SUCCEEDED;
    case AX_STATE_FAILED: return AX_EV_FAILED;
    case AX_STATE_TIMED_OUT: return AX_EV_TIMED_OUT;
    default: return AX_EV_CANCELLED;
    }
}

void finish_attempt(struct ax_sched *s, struct worker *w, struct job *j, unsigned state, int code,
                    const char *err, bool slot)
{
    ax_result r;
    bool want_retry = false;
    uint64_t now = w ? w->now_ns : now_ns();

    if ((state == AX_STATE_FAILED || state == AX_STATE_TIMED_OUT) && j->attempt < j->max_retry &&
        code != AX_ENOMEM && !(j->deadline_ns && now >= j->deadline_ns))
        want_retry = true;

    if (slot)
        metrics_record_run(s, w, j->prio, j->run_ns);
    if (state == AX_STATE_TIMED_OUT && j->on_timeout) {
        result_fill(j, state, code, err, &r);
        cb_pool_post(s, j->on_timeout, j->cb_arg, &r);
    }

    /* Fast path: a worker ends an attempt that neither retries nor has a
     * joiner. Everything counted goes into the next dispatch section. */
    if (w && !want_retry && !j->is_child) {
        EV(s, w, j, terminal_event(state), code, err);
        if (slot) {
            /* Free now, without the lock. After a timeout or a cancel this
             * worker may be about to run a long slice (the attempt ended
             * from outside its code), so a sleeping peer takes queued work
             * now; after a normal end the worker dispatches itself next (a
             * wake-up per task cost the 2-worker full path ~200 ns). */
            atomic_fetch_add_explicit(&s->freed, 1, memory_order_release);
            if (state != AX_STATE_SUCCEEDED && state != AX_STATE_FAILED &&
                atomic_load_explicit(&s->hint_queued, memory_order_relaxed) &&
                !atomic_load_explicit(&s->hint_blocked, memory_order_relaxed))
                sched_wake_workers(s, 1);
        }
        count_terminal_worker(&w->counts, state);
        atomic_fetch_add_explicit(&s->unloaded, 1, memory_order_release);
        j->code = code;
        if (j->on_done) {
            result_fill(j, state, code, err, &r);
            j->on_done(&r, j->cb_arg);
        }
        if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1) {
            j->next = w->pend.free_list;
            w->pend.free_list = j;
        }
        return;
    }

    struct wake_msg msg;
    bool wake_joiner = false;
    uint64_t retry_delay_ms = 0;
    struct job snap;
    pthread_mutex_lock(&s->lock);
    if (slot)
        s->running--;
    unsigned running = running_locked(s);
    if (want_retry && (s->closing || !s->retry_enabled[j->prio]))
        want_retry = false;
    if (want_retry) {
        uint64_t delay_ms = 0;
        ax_retry_delay_ms(&j->retry, j->attempt, ax_rand64(), &delay_ms);
        j->attempt++;
        atomic_store_explicit(&j->sw, sw_make(j->id, j->attempt, AX_STATE_RETRYING),
                              memory_order_release);
        s->st.retried++;
        monitor_add_locked(s, j, now + delay_ms * 1000000u, WHERE_RETRY);
        retry_delay_ms = delay_ms;
        if (AX_UNLIKELY(ev_on(s, AX_EV_RETRY_SCHEDULED)))
            snap = *j; /* the event is emitted after the unlock, from this copy */
    } else {
        count_terminal_locked(s, state);
        s->load--;
        load_locked(s);
        j->in_system = 0;
        j->code = code;
        if (j->is_child)
            wake_joiner = join_notify_locked(s, j, &msg);
    }
    bool wake_workers = slot && running < s->cap && !s->paused &&
                        (s->b[0].head || s->b[1].head || s->b[2].head);
    if (s->closing && (running == 0 || load_locked(s) == 0))
        pthread_cond_broadcast(&s->idle_cond);
    pthread_mutex_unlock(&s->lock);

    if (wake_workers)
        sched_wake_workers(s, 1); /* a sleeping peer can take the freed slot now */
    if (want_retry) {
        /* After the unlock (a lossless event sink may make us wait); the
         * next attempt cannot start before its back-off anyway. */
        if (AX_UNLIKELY(ev_on(s, AX_EV_RETRY_SCHEDULED))) {
            char rmsg[AX_ERROR_MAX + 48];
            snprintf(rmsg, sizeof rmsg, "%s; retry %u in %llu ms", err && *err ? err : "failed",
                     snap.attempt, (unsigned long long)retry_delay_ms);
            ev_emit(s, w, &snap, AX_EV_RETRY_SCHEDULED, code, rmsg);
        }
        return;
    }
    EV(s, w, j, terminal_event(state), code, err);
    if (wake_joiner)
        worker_post_wake(msg.run->w, &msg);
    if (j->on_done) {
        result_fill(j, state, code, err, &r);
        j->on_done(&r, j->cb_arg);
    }
    if (w) {
        if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1) {
            j->next = w->pend.free_list;
            w->pend.free_list = j;
        }
    } else {
        job_unref(s, j);
    }
}

bool finish_try_cas(struct job *j, uint64_t expect, unsigned state)
{
    uint64_t e = expect;
    return atomic_compare_exchange_strong(&j->sw, &e,
                                          (expect & ~(uint64_t)0xff) | (uint64_t)state);
}
