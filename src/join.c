/* join.c - fan-out / fan-in: a task spawns children and joins them.
 *
 * A child is an ordinary job (same admission, priorities, retries) that also
 * holds a reference from the parent's attempt, so its result survives until
 * the parent joins it or the parent's attempt ends (then the child is
 * released, not cancelled: it finishes on its own). The parent records its
 * children in its run; ax_join looks there, so only the parent can join.
 *
 * Race between a child ending and its parent parking: both sides take
 * s->lock. The parent registers itself as the joiner only if the child is
 * not terminal yet; the child's finish takes the joiner out under the same
 * lock and posts a wake-up carrying the parent's (life_gen, park_gen), so a
 * wake-up that arrives after the parent gave up (timeout, cancel) is ignored.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static bool terminal(unsigned st)
{
    return st == AX_STATE_SUCCEEDED || st == AX_STATE_FAILED || st == AX_STATE_TIMED_OUT ||
           st == AX_STATE_CANCELLED;
}

int ax_spawn(ax_task *parent, const ax_spec *spec, uint64_t *id_out)
{
    if (!parent)
        return ax_fail_static(AX_EINVAL, "ax_spawn: parent task is NULL");
    if (parent != ax_current_run)
        return ax_fail_static(AX_ESTATE, "ax_spawn: called outside the parent's own coroutine");
    if (parent->nchildren == parent->child_cap) {
        unsigned cap = parent->child_cap * 2;
        struct job **c = malloc(cap * sizeof *c);
        if (!c)
            return ax_fail(AX_ENOMEM, "ax_spawn: out of memory for %u children", cap);
        memcpy(c, parent->children, parent->nchildren * sizeof *c);
        if (parent->children != parent->child_inline)
            free(parent->children);
        parent->children = c;
        parent->child_cap = cap;
    }
    uint64_t id;
    int rc = submit_common(parent->s, spec, &id, parent);
    if (rc)
        return rc;
    struct job *j = job_lookup(parent->s, id); /* ours: it holds the parent's ref */
    parent->children[parent->nchildren++] = j;
    if (id_out)
        *id_out = id;
    return AX_OK;
}

static void child_remove(ax_task *t, unsigned i)
{
    t->children[i] = t->children[--t->nchildren];
}

int ax_join(ax_task *t, uint64_t child_id, int64_t timeout_ms, ax_result *out)
{
    if (!t)
        return ax_fail_static(AX_EINVAL, "ax_join: task is NULL");
    if (t != ax_current_run)
        return ax_fail_static(AX_ESTATE, "ax_join: called outside the task's own coroutine");
    unsigned i;
    for (i = 0; i < t->nchildren; i++)
        if (t->children[i]->id == child_id)
            break;
    if (i == t->nchildren)
        return ax_fail(AX_ENOTFOUND, "ax_join: %llu is not an unjoined child of this task",
                       (unsigned long long)child_id);
    int rc = run_detached_rc(t);
    if (rc)
        return rc;
    struct ax_sched *s = t->s;
    struct job *c = t->children[i];

    pthread_mutex_lock(&s->lock);
    bool done = !c->in_system;
    if (!done) {
        c->joiner = t;
        c->joiner_gen = t->park_gen + 1; /* the gen run_park is about to take */
        c->joiner_life = t->life_gen;
    }
    pthread_mutex_unlock(&s->lock);

    if (!done) {
        if (timeout_ms >= 0)
            ax_wheel_add(&t->w->wheel, &t->wait_timer.node,
                         ns_to_tick_ceil(now_ns() + (uint64_t)timeout_ms * 1000000u));
        t->join_child = c;
        t->parked = PARK_JOIN;
        rc = run_park(t);
        t->join_child = NULL;
        if (rc)
            return rc;
        if ((rc = run_detached_rc(t)))
            return rc;
    }
    /* Terminal: the finishing thread wrote the result before it released
     * s->lock, and we took the lock (or were woken after it) since. */
    if (out) {
        pthread_mutex_lock(&s->lock);
        unsigned st = sw_state(atomic_load(&c->sw));
        result_fill(c, terminal(st) ? st : AX_STATE_FAILED, c->code, "", out);
        pthread_mutex_unlock(&s->lock);
    }
    child_remove(t, i);
    job_unref(s, c);
    return AX_OK;
}

/* A child ended for good (s->lock held): take its joiner, if parked. */
bool join_notify_locked(struct ax_sched *s, struct job *j, struct wake_msg *out)
{
    (void)s;
    if (!j->joiner)
        return false;
    out->run = j->joiner;
    out->life_gen = j->joiner_life;
    out->park_gen = j->joiner_gen;
    out->rc = 0;
    j->joiner = NULL;
    return true;
}

/* The parent's attempt ended: release the children it did not join. */
void join_release_children(struct ax_task *t)
{
    for (unsigned i = 0; i < t->nchildren; i++)
        job_unref(t->s, t->children[i]);
    t->nchildren = 0;
}
