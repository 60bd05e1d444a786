/* cancel.c - ax_cancel from any thread (seed §3.1: the cancel path).
 *
 * Under s->lock the job is found by id in O(1) (job.c: the id must match
 * the slot's issued id and the word's generation, so an id never issued, or
 * a finished task's, finds nothing). Then one CAS on its state word decides:
 *   QUEUED / DELAYED / RETRYING  it leaves its bucket or the scheduler's
 *                       wheel and ends CANCELLED;
 *   STARTING / RUNNING  the attempt ends CANCELLED; its slot is freed now;
 *                       a parked coroutine is woken on its worker with
 *                       AX_ECANCELED, and every later ax call it makes
 *                       returns AX_ECANCELED;
 *   terminal            AX_ENOTFOUND ("already ended").
 * The winner of the CAS runs the terminal path; here that is the caller's
 * thread, after the unlock (on_done runs before ax_cancel returns). A cancel
 * racing the task's own end is decided by the CAS: exactly one ends it. The
 * retry decision is part of the CAS that ends an attempt (finish.c), so a
 * cancel that finds RETRYING cancels the retry: it is never lost.
 */
#include "internal.h"

int ax_cancel(ax_sched *s, uint64_t id)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_cancel: scheduler is NULL");
    if (sched_forked(s))
        return sched_forked_fail("ax_cancel");
    if (AX_UNLIKELY(s->ev_lossless))
        ev_reserve(s);
    pthread_mutex_lock(&s->lock);
    struct job *j = job_find_locked(s, id);
    if (!j) {
        pthread_mutex_unlock(&s->lock);
        return ax_fail(AX_ENOTFOUND,
                       "ax_cancel: no live task %llu on this scheduler (ended, never issued, "
                       "or another scheduler's: ids are unique in the process)",
                       (unsigned long long)id);
    }
    uint64_t gen = job_gen(j), old;
    for (;;) {
        uint64_t w = atomic_load_explicit(&j->sw, memory_order_acquire);
        unsigned st = js_state(w);
        if (js_is(w, JS_WAITING_MASK)) {
            if (!js_end_queued(&j->sw, gen, JS_CANCELLED, &old))
                continue; /* its back-off ended meanwhile: look again */
            sched_leave_locked(s, j, old);
            /* JH_END is ours to drop: the job stays allocated until the
             * terminal path below has run. */
            pthread_mutex_unlock(&s->lock);
            if (st == JS_QUEUED)
                j->wait_ns = now_ns() - j->enqueue_ns;
            if (js_state(old) == JS_RETRYING && !(old & (JF_RETRY_ARMED | JF_WAIT)) &&
                (old & JF_RAN)) {
                /* Between the CAS that chose the retry and the lock section
                 * that would have armed it (and stored the failed attempt's
                 * run time): that attempt ran, so run_ns must not say 0
                 * (ax_result.run_ns; libax_redis drops a message's hold on a
                 * 0). Its end is not known here: measured to now, as a cancel
                 * of a running attempt is. Its finisher, whose lock section
                 * now fails, writes nothing. */
                uint64_t begun = j->enqueue_ns + j->wait_ns, now = now_ns();
                j->run_ns = now > begun ? now - begun : 1;
            }
            finish_terminal(s, NULL, j, js_report_attempt(old), JS_CANCELLED, AX_ECANCELED,
                            "cancelled", 0);
            return AX_OK;
        }
        if (js_is(w, JS_SLOT_MASK)) {
            unsigned attempt = js_attempt(w);
            if (!js_end_attempt(&j->sw, gen, attempt, JS_CANCELLED, &old))
                continue; /* it moved on meanwhile: look again */
            if (AX_UNLIKELY(j->cls))
                class_retry_dropped(s, j, old); /* a retry not yet entered */
            struct wake_msg m = {0};
            if (js_state(old) == JS_RUNNING)
                m = (struct wake_msg){j->run, j->run_life, 0, AX_ECANCELED};
            pthread_mutex_unlock(&s->lock);
            uint64_t run_ns =
                js_state(old) == JS_RUNNING ? now_ns() - (j->enqueue_ns + j->wait_ns) : 0;
            if (js_state(old) == JS_RUNNING && run_ns == 0)
                run_ns = 1; /* it ran: never 0 (ax_result.run_ns), whatever the clock's grain */
            if (m.run)
                worker_post_wake(m.run->w, &m);
            finish_attempt(s, NULL, j, attempt, JS_CANCELLED, JS_CANCELLED, AX_ECANCELED,
                           "cancelled", FIN_SLOT, run_ns, 0);
            return AX_OK;
        }
        pthread_mutex_unlock(&s->lock);
        return ax_fail(AX_ENOTFOUND, "ax_cancel: task %llu already ended",
                       (unsigned long long)id);
    }
}
