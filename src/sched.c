/* sched.c - layer 2: priority buckets and quota rounds (seed §2.2, §3.3).
 *
 * Three FIFO buckets. Dispatch works in rounds over the fixed order
 * HIGH, NORMAL, LOW: a turn takes up to quota[p] tasks from bucket p, then
 * passes to the next bucket; a bucket that is empty passes its turn at once.
 * So with all three busy a round is quota_high H, quota_normal N,
 * low_guaranteed L, and the head of LOW waits at most
 * quota_high + quota_normal dispatches; when HIGH and NORMAL are empty, LOW
 * takes every turn. With max_concurrency = 1 and quotas 2/1/1, H×4 N×4 L×4
 * start as H H N L H H N L N L N L (tests/test_quota.c).
 *
 * The round state (rr, rr_taken) survives between dispatches and between
 * bursts: a burst does not reset LOW's guarantee.
 *
 * Everything here runs under s->lock and is O(1) (a pick may look at three
 * buckets). Hot: bucket_push_locked (every submit), sched_pick_locked (every
 * dispatch).
 */
#include "internal.h"

#include <unistd.h>

static const uint8_t round_order[AX_PRIO_COUNT] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};

void bucket_push_locked(struct ax_sched *s, struct job *j)
{
    struct bucket *b = &s->b[j->prio];
    j->next = NULL;
    j->prev = b->tail;
    if (b->tail)
        b->tail->next = j;
    else
        b->head = j;
    b->tail = j;
    b->n++;
    j->where = WHERE_BUCKET;
    atomic_store_explicit(&s->hint_queued, s->b[0].n + s->b[1].n + s->b[2].n,
                          memory_order_relaxed);
}

void bucket_remove_locked(struct ax_sched *s, struct job *j)
{
    struct bucket *b = &s->b[j->prio];
    if (j->prev)
        j->prev->next = j->next;
    else
        b->head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        b->tail = j->prev;
    j->next = j->prev = NULL;
    b->n--;
    j->where = WHERE_NONE;
    atomic_store_explicit(&s->hint_queued, s->b[0].n + s->b[1].n + s->b[2].n,
                          memory_order_relaxed);
}

/* Refresh hint_blocked after running, cap, paused or closing changed. */
void sched_hint_locked(struct ax_sched *s)
{
    atomic_store_explicit(&s->hint_blocked, s->paused || s->closing, memory_order_relaxed);
}

/* The next job by quota rounds, or NULL when every bucket is empty. Does not
 * look at the concurrency cap or pause: the caller does. */
struct job *sched_pick_locked(struct ax_sched *s)
{
    /* Nothing queued: leave the round where it is (an empty pick must not
     * move LOW's turn). */
    if (!s->b[0].head && !s->b[1].head && !s->b[2].head)
        return NULL;
    for (int tries = 0; tries <= AX_PRIO_COUNT; tries++) {
        unsigned p = round_order[s->rr];
        if (s->b[p].head && s->rr_taken < s->quota[p]) {
            struct job *j = s->b[p].head;
            bucket_remove_locked(s, j);
            s->rr_taken++;
            return j;
        }
        s->rr = (s->rr + 1) % AX_PRIO_COUNT;
        s->rr_taken = 0;
    }
    return NULL;
}

/* Recompute quotas that follow max_concurrency, and the shed threshold. */
void sched_recompute_locked(struct ax_sched *s)
{
    if (s->quota_auto[AX_PRIO_HIGH])
        s->quota[AX_PRIO_HIGH] = s->cap / 2 ? s->cap / 2 : 1;
    if (s->quota_auto[AX_PRIO_NORMAL])
        s->quota[AX_PRIO_NORMAL] = s->cap / 3 ? s->cap / 3 : 1;
    s->total_capacity = 0;
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        s->total_capacity += s->cfg.capacity[p];
    /* A NORMAL/LOW submission is shed once load >= shed_at, i.e. admitting
     * it would take queued + running past shed_ratio of the total capacity. */
    s->shed_at = (unsigned)(s->cfg.shed_ratio * (double)s->total_capacity);
}

/* Wake up to n sleeping workers. Called after work appeared (a submit, a
 * freed slot, a resume). Lock-free: a worker sets `sleeping` before its final
 * check for work and the waker clears it before writing the eventfd, so a
 * wake-up is never lost (see worker_sleep in exec.c). */
void sched_wake_workers(struct ax_sched *s, unsigned n)
{
    if (atomic_load_explicit(&s->nsleeping, memory_order_seq_cst) == 0)
        return;
    for (unsigned i = 0; i < s->nworkers && n > 0; i++) {
        struct worker *w = &s->workers[i];
        int one = 1;
        if (atomic_load_explicit(&w->sleeping, memory_order_relaxed) &&
            atomic_compare_exchange_strong(&w->sleeping, &one, 0)) {
            worker_kick(w);
            n--;
        }
    }
}

int ax_pause(ax_sched *s)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_pause: scheduler is NULL");
    pthread_mutex_lock(&s->lock);
    s->paused = true;
    sched_hint_locked(s);
    pthread_mutex_unlock(&s->lock);
    return AX_OK;
}

int ax_resume(ax_sched *s)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_resume: scheduler is NULL");
    pthread_mutex_lock(&s->lock);
    s->paused = false;
    sched_hint_locked(s);
    pthread_mutex_unlock(&s->lock);
    sched_wake_workers(s, s->nworkers);
    return AX_OK;
}

int ax_set_max_concurrency(ax_sched *s, unsigned n)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_max_concurrency: scheduler is NULL");
    if (n == 0 || n > AX_MAX_JOBS / 2)
        return ax_fail(AX_EINVAL, "max_concurrency must be in [1, %u] (got %u)", AX_MAX_JOBS / 2,
                       n);
    pthread_mutex_lock(&s->lock);
    s->cap = n;
    sched_recompute_locked(s);
    sched_hint_locked(s);
    pthread_mutex_unlock(&s->lock);
    sched_wake_workers(s, s->nworkers);
    return AX_OK;
}

int ax_set_quotas(ax_sched *s, unsigned high, unsigned normal, unsigned low_guaranteed)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_quotas: scheduler is NULL");
    if (low_guaranteed == 0)
        return ax_fail(AX_EINVAL, "low_guaranteed must be >= 1 (LOW would starve)");
    pthread_mutex_lock(&s->lock);
    s->quota_auto[AX_PRIO_HIGH] = high == 0;
    s->quota_auto[AX_PRIO_NORMAL] = normal == 0;
    s->quota[AX_PRIO_HIGH] = high;
    s->quota[AX_PRIO_NORMAL] = normal;
    s->quota[AX_PRIO_LOW] = low_guaranteed;
    sched_recompute_locked(s);
    pthread_mutex_unlock(&s->lock);
    return AX_OK;
}

int ax_set_retry_enabled(ax_sched *s, ax_priority p, bool enabled)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_retry_enabled: scheduler is NULL");
    if ((unsigned)p >= AX_PRIO_COUNT)
        return ax_fail(AX_EINVAL, "priority %d is out of range", (int)p);
    pthread_mutex_lock(&s->lock);
    s->retry_enabled[p] = enabled;
    pthread_mutex_unlock(&s->lock);
    return AX_OK;
}

int ax_set_rate_limit(ax_sched *s, double per_second, unsigned burst)
{
    if (!s)
        return ax_fail(AX_EINVAL, "ax_set_rate_limit: scheduler is NULL");
    if (!(per_second >= 0.0) || per_second > 1e12)
        return ax_fail(AX_EINVAL, "rate limit must be in [0, 1e12] per second (got %g)",
                       per_second);
    pthread_mutex_lock(&s->lock);
    s->rate = per_second;
    s->burst = burst ? (double)burst : (per_second >= 1.0 ? per_second : 1.0);
    s->tokens = s->burst;
    s->rate_last_ns = now_ns();
    pthread_mutex_unlock(&s->lock);
    return AX_OK;
}
