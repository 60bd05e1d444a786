/* join.c - fan-out / fan-in: a task spawns children and joins them.
 *
 * A child is an ordinary job (same admission, priorities, retries) that also
 * carries the JH_PARENT hold (state.h), so its result -- state, code and
 * error text -- survives until the parent joins it or the parent's attempt
 * ends (then the child is released, not cancelled: it finishes on its own).
 * The parent records its children in its run; ax_join looks there, so only
 * the parent can join.
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

int ax_spawn(ax_task *parent, const ax_spec *spec, uint64_t *id_out)
{
    if (!parent)
        return ax_fail_static(AX_EINVAL, "ax_spawn: parent task is NULL");
    /* Refusals with a scheduler to count them in, as ax_submit's are. */
    if (parent != ax_current_run) {
        ax_fail_static(AX_ESTATE, "ax_spawn: called outside the parent's own coroutine");
        return submit_refused(parent->s, spec, AX_ESTATE);
    }
    if (parent->nchildren == parent->child_cap) {
        unsigned cap = parent->child_cap * 2;
        struct job **c = malloc(cap * sizeof *c);
        if (!c) {
            ax_fail(AX_ENOMEM, "ax_spawn: out of memory for %u children", cap);
            return submit_refused(parent->s, spec, AX_ENOMEM);
        }
        memcpy(c, parent->children, parent->nchildren * sizeof *c);
        if (parent->children != parent->child_inline)
            free(parent->children);
        parent->children = c;
        parent->child_cap = cap;
    }
    uint64_t id;
    struct job *j;
    int rc = submit_common(parent->s, spec, &id, parent, &j);
    if (rc)
        return rc;
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
    int rc = run_blocking_entry(t, "ax_join");
    if (rc)
        return rc;
    struct ax_sched *s = t->s;
    struct job *c = t->children[i];

    pthread_mutex_lock(&s->lock);
    bool done = c->joiner == JOIN_DONE; /* its terminal path published the result */
    if (!done) {
        c->joiner = t;
        c->joiner_gen = park_gen_next(t->park_gen); /* the gen run_park is about to take */
        c->joiner_life = t->life_gen;
    }
    pthread_mutex_unlock(&s->lock);

    if (!done) {
        if (timeout_ms >= 0)
            worker_timer_add(t->w, &t->wait_timer.node,
                             now_ns() + ms_to_ns_capped(timeout_ms));
        t->join_child = c;
        t->rs = RS_PARK_JOIN;
        rc = run_park(t);
        t->join_child = NULL;
        /* Which one: a caller that gave the join a bound may join again,
         * one whose attempt ended must return (a new user could not tell
         * them apart: the code is AX_ETIMEDOUT for both, as for every wait).
         * Past the deadline it is the deadline's, though its timer may not
         * have ended the attempt yet: the bound's tick can come before the
         * deadline's in the pass that wakes it (test_join_bound_at_deadline). */
        int ended = run_detached_rc(t);
        if (rc == AX_ETIMEDOUT && !ended && now_ns() < t->deadline_ns)
            return ax_fail(rc,
                           "ax_join: its bound of %lld ms passed before task %llu ended (still "
                           "an unjoined child: ax_join may wait for it again)",
                           (long long)timeout_ms, (unsigned long long)child_id);
        /* Woken by the child's end too (rc 0) when its deadline ended the
         * attempt in the same pass (a child inherits it): the join's text
         * all the same, not the blocking entry's (test_join under TSan). */
        if (rc || ended) {
            if (ended == AX_ECANCELED || (!ended && rc == AX_ECANCELED))
                return ax_fail(rc ? rc : ended,
                               "ax_join: the task was cancelled while it waited for task %llu",
                               (unsigned long long)child_id);
            return ax_fail(rc ? rc : ended,
                           "ax_join: the task's deadline passed while it waited for task %llu",
                           (unsigned long long)child_id);
        }
    }
    /* Terminal: the finishing thread wrote the result before it released
     * s->lock, and we took the lock (or were woken after it) since. */
    if (out) {
        pthread_mutex_lock(&s->lock);
        uint64_t w = atomic_load(&c->sw);
        /* The attempt the terminal path reported (finish.c), not the
         * word's: after a back-off that never ended, that is the next. */
        result_fill(c, c->ended_attempt, js_state(w), c->code,
                    c->ext && c->ext->err ? c->ext->err : "", out);
        pthread_mutex_unlock(&s->lock);
    }
    child_remove(t, i);
    job_release(s, t->w, c, JH_PARENT);
    return AX_OK;
}

/* A child ended for good (s->lock held): take its joiner, if parked. */
bool join_notify_locked(struct ax_sched *s, struct job *j, struct wake_msg *out)
{
    (void)s;
    struct ax_task *joiner = j->joiner;
    j->joiner = JOIN_DONE;
    if (!joiner)
        return false;
    out->run = joiner;
    out->life_gen = j->joiner_life;
    out->park_gen = j->joiner_gen;
    out->rc = 0;
    return true;
}

/* The parent's attempt ended: release the children it did not join. */
void join_release_children(struct worker *w, struct ax_task *t)
{
    for (unsigned i = 0; i < t->nchildren; i++)
        job_release(t->s, w, t->children[i], JH_PARENT);
    t->nchildren = 0;
}
