/* join.c - fan-out / fan-in: a task spawns children and joins them.
 *
 * A child is an ordinary job (same admission, priorities, retries) that also
 * carries the JH_PARENT hold (state.h), so its result -- state, code and
 * error text -- survives until the parent joins it or the parent's function
 * returns (then the child is released, not cancelled: it finishes on its
 * own). A parent cancelled or past its deadline that runs on (an orphan)
 * holds its unjoined children, and delays their on_release, until it
 * returns (run_complete).
 * The parent records its children in its run; ax_join looks there, so only
 * the parent can join.
 *
 * A join returns once the child has let go, not merely ended: its terminal
 * path done (on_done returned), its coroutine returned (its cleanups ran),
 * and for a child with an on_release its queued on_timeouts run: every
 * hold but the parent's released. Then what the parent gave the child is
 * the parent's again (new user's trial: the join returned before the
 * child's on_done ran, or before a cancelled child's cleanups, and the
 * parent freed what they used). A child that runs on without returning
 * (an orphan) is never let go: the join's bound or the parent's deadline
 * ends the wait.
 *
 * j->joiner, under s->lock: NULL, a parked parent's run, JOIN_ENDED (the
 * terminal path recorded the result: ended_attempt) or JOIN_DONE (and the
 * child let go). The attempt shares its field with the joiner's park
 * generation, so while a parent is parked it is kept in the parent's run
 * (join_attempt) and moved back when the parent leaves the park.
 *
 * Race between a child letting go and its parent parking: both sides take
 * s->lock. The parent registers itself as the joiner only if the child has
 * not let go; whoever releases the child's last other hold
 * (job_release: job_let_go) takes the joiner out under the same lock and
 * posts a wake-up carrying the parent's (life_gen, park_gen), so a wake-up
 * that arrives after the parent gave up (timeout, cancel) is ignored.
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
    /* An ended attempt's code first, whatever the id (ax.h: every blocking
     * call returns it instead of doing its work). */
    int rc = run_blocking_entry(t, "ax_join");
    if (rc)
        return rc;
    unsigned i;
    for (i = 0; i < t->nchildren; i++)
        if (t->children[i]->id == child_id)
            break;
    if (i == t->nchildren)
        return ax_fail(AX_ENOTFOUND, "ax_join: %llu is not an unjoined child of this task",
                       (unsigned long long)child_id);
    struct ax_sched *s = t->s;
    struct job *c = t->children[i];

    pthread_mutex_lock(&s->lock);
    bool done = c->joiner == JOIN_DONE; /* ended and let go: the result is published */
    if (!done) {
        t->join_ended = c->joiner == JOIN_ENDED;
        if (t->join_ended)
            t->join_attempt = c->ended_attempt; /* its field becomes joiner_gen */
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
        if (rc == AX_ETIMEDOUT && !ended && now_ns() < t->deadline_ns) {
            /* The child may have let go as the bound's timer woke us (it
             * found us unparked): joined after all (review). */
            pthread_mutex_lock(&s->lock);
            bool let_go = c->joiner == JOIN_DONE;
            pthread_mutex_unlock(&s->lock);
            if (let_go)
                goto joined;
            if (js_terminal(js_state(atomic_load_explicit(&c->sw, memory_order_acquire))))
                return ax_fail(rc,
                               "ax_join: its bound of %lld ms passed before task %llu let go: "
                               "it ended, but its on_done or its function (cancelled or past "
                               "its deadline, not returning: an orphan) still runs (still an "
                               "unjoined child: ax_join may wait for it again)",
                               (long long)timeout_ms, (unsigned long long)child_id);
            return ax_fail(rc,
                           "ax_join: its bound of %lld ms passed before task %llu ended (still "
                           "an unjoined child: ax_join may wait for it again)",
                           (long long)timeout_ms, (unsigned long long)child_id);
        }
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
joined:
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

/* The child's terminal path (s->lock): its result is recorded. A parent
 * parked on it keeps the attempt in its run (its park gen is in the job's
 * field); else the job does, JOIN_ENDED. Never JOIN_DONE yet: letting go
 * needs JH_END, which the terminal path drops last. */
void join_ended_locked(struct job *j, unsigned attempt)
{
    struct ax_task *joiner = j->joiner;
    if (joiner && joiner != JOIN_ENDED) {
        joiner->join_attempt = attempt;
        joiner->join_ended = 1;
    } else {
        j->ended_attempt = attempt;
        j->joiner = JOIN_ENDED;
    }
}

/* The child's last hold but its parent's went (`word`, the word that
 * release left): wake the parent if it is parked in ax_join. Not under
 * s->lock. The job is held until the parent releases JH_PARENT, which it
 * may do meanwhile (its function returned: join_release_children), and the job
 * then be freed and reused: under the lock the generation says whether it
 * is still this child (a free takes the lock too). */
void join_let_go(struct ax_sched *s, struct job *j, uint64_t word)
{
    struct wake_msg msg = {0};
    pthread_mutex_lock(&s->lock);
    uint64_t now_word = atomic_load_explicit(&j->sw, memory_order_acquire);
    if (js_gen(now_word) == js_gen(word) && (now_word & JH_PARENT)) {
        struct ax_task *joiner = j->joiner;
        if (joiner != JOIN_ENDED && joiner != JOIN_DONE && joiner) {
            msg = (struct wake_msg){joiner, j->joiner_life, j->joiner_gen, 0};
            j->ended_attempt = joiner->join_attempt; /* joiner_gen is read */
        }
        j->joiner = JOIN_DONE;
    }
    pthread_mutex_unlock(&s->lock);
    if (msg.run)
        worker_post_wake(msg.run->w, &msg);
}

/* The parent parked on c left the park another way (its bound, its
 * deadline, a cancel; s->lock held): the attempt goes back to the job. */
void join_unpark_locked(struct ax_task *t, struct job *c)
{
    if (c->joiner != t)
        return;
    if (t->join_ended) {
        c->ended_attempt = t->join_attempt;
        c->joiner = JOIN_ENDED;
    } else {
        c->joiner = NULL; /* not ended */
    }
}

/* The parent's function returned (run_complete; for an orphan, when it
 * returns): release the children it did not join. */
void join_release_children(struct worker *w, struct ax_task *t)
{
    for (unsigned i = 0; i < t->nchildren; i++)
        job_release(t->s, w, t->children[i], JH_PARENT);
    t->nchildren = 0;
}
