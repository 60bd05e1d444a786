/* cancel.c - ax_cancel from any thread (seed §3.1: the cancel path).
 *
 * Under s->lock the job is found by id in O(1) (job.c) and its state read:
 *   PENDING / RETRYING  it leaves its bucket or the monitor's wheel and ends
 *                       CANCELLED at once, on the caller's thread;
 *   STARTING / RUNNING  one CAS ends the attempt CANCELLED; its slot is freed
 *                       and on_done runs now, on the caller's thread; the
 *                       coroutine, if parked, is woken on its worker with
 *                       AX_ECANCELED, and every later ax call it makes
 *                       returns AX_ECANCELED;
 *   terminal / unknown  AX_ENOTFOUND.
 * A cancel racing the task's own completion is decided by the CAS: exactly
 * one of them ends the attempt, and on_done runs once.
 */
#include "internal.h"

int ax_cancel(ax_sched *s, uint64_t id)
{
    if (!s)
        return ax_fail_static(AX_EINVAL, "ax_cancel: scheduler is NULL");
    for (;;) {
        pthread_mutex_lock(&s->lock);
        struct job *j = job_lookup(s, id);
        if (!j || j->id != id || !j->in_system) {
            pthread_mutex_unlock(&s->lock);
            return ax_fail(AX_ENOTFOUND, "ax_cancel: no live task %llu",
                           (unsigned long long)id);
        }
        uint64_t sw = atomic_load(&j->sw);
        unsigned st = sw_state(sw);
        if (st == AX_STATE_PENDING || st == AX_STATE_RETRYING) {
            if (j->where == WHERE_BUCKET)
                bucket_remove_locked(s, j);
            if (ax_wheel_node_armed(&j->tnode))
                monitor_del_locked(s, j);
            j->where = WHERE_NONE;
            atomic_store(&j->sw, (sw & ~(uint64_t)0xff) | AX_STATE_CANCELLED);
            job_ref(j);
            pthread_mutex_unlock(&s->lock);
            finish_attempt(s, NULL, j, AX_STATE_CANCELLED, AX_ECANCELED, "cancelled", false);
            job_unref(s, j);
            return AX_OK;
        }
        if (st == AX_STATE_RUNNING || st == JS_STARTING) {
            if (!finish_try_cas(j, sw, AX_STATE_CANCELLED)) {
                pthread_mutex_unlock(&s->lock);
                continue; /* it moved on meanwhile: look again */
            }
            struct wake_msg m = {0};
            if (st == AX_STATE_RUNNING)
                m = (struct wake_msg){j->run, j->run_life, 0, AX_ECANCELED};
            job_ref(j);
            pthread_mutex_unlock(&s->lock);
            if (st == AX_STATE_RUNNING)
                j->run_ns = now_ns() - (j->enqueue_ns + j->wait_ns);
            finish_attempt(s, NULL, j, AX_STATE_CANCELLED, AX_ECANCELED, "cancelled", true);
            if (m.run)
                worker_post_wake(m.run->w, &m);
            job_unref(s, j);
            return AX_OK;
        }
        pthread_mutex_unlock(&s->lock);
        return ax_fail(AX_ENOTFOUND, "ax_cancel: task %llu already ended",
                       (unsigned long long)id);
    }
}
