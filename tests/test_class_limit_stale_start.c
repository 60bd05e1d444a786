/* test_class_limit_stale_start.c - the slow start's count of attempts out
 * beside a drop (limit.c, drop_pending) must not count an attempt that
 * began after the drop, whatever its worker's clock said.
 *
 * The defect (CI of 53f7d4e, test_overload_upstream case 7: a doubling
 * while one stalled attempt of the storm was still out, its drop 100-odd ms
 * later). The count decided "began before the drop" by now - run_ns <
 * the drop's time. Both come from a worker's cached clock (w->now_ns, read
 * once per loop turn): a worker that read its clock, was preempted while
 * another worker sampled a drop, and then took an attempt H, stamped H
 * before the drop. H was not among the attempts in flight the drop noted
 * (its slot was taken after), yet its healthy answer counted one of them
 * back. With one stalled attempt X left beside the drop, that one false
 * count ended the wait and the limit doubled into the rest of the storm.
 *
 * Played here on the class's own calls (class.c), with the clocks a worker
 * would pass: twelve attempts take their slots at T0 (X, ten healthy B, D);
 * D is dropped at T1 (11 noted); H takes a slot after that sample but with
 * its worker's clock still at T1 - 1 ms, and answers healthy at T2; the
 * ten B come back at T3. Expected: drop_pending 1 (X is still out), and no
 * doubling. Old code: 0, and the next clean windows double the limit.
 */
#include "class_common.h"

#include "internal.h"

#include <limits.h>

#define MS 1000000ull

static void take(ax_sched *s, struct ax_class_rt *c, struct job *j, uint64_t now)
{
    pthread_mutex_lock(&s->lock);
    class_take_locked(s, c, j, now);
    pthread_mutex_unlock(&s->lock);
}

/* An attempt ends on its worker: sample, then its slot is freed
 * (finish.c attempt_end). */
static void done(ax_sched *s, struct job *j, unsigned state, uint64_t start, uint64_t now)
{
    class_attempt_done(s, j, state, true, now - start, now, false);
    class_slot_free(s, j);
}

/* nw windows of twenty attempts taken at once and back `span` later: the
 * odd ones dropped (timed out) when `drops`, the others answering in
 * `lat`. Returns the time after the last. */
static uint64_t windows(ax_sched *s, struct ax_class_rt *c, struct job *w, int nw, uint64_t t,
                        uint64_t span, uint64_t lat, bool drops)
{
    for (int k = 0; k < nw; k++) {
        for (int i = 0; i < 20; i++)
            take(s, c, &w[i], t);
        t += span;
        for (int i = 0; i < 20; i++) {
            bool drop = drops && i % 2;
            done(s, &w[i], drop ? JS_TIMED_OUT : JS_SUCCEEDED, drop ? t - span : t - lat, t);
        }
    }
    return t;
}

static unsigned pending(struct ax_class_rt *c)
{
    pthread_mutex_lock(&c->lk);
    unsigned p = c->lim.drop_pending;
    pthread_mutex_unlock(&c->lk);
    return p;
}

int main(void)
{
    ax_sched *s = test_sched(1, 64);
    ax_class_config cc = rc_adaptive("stale", 64);
    cc.limit_min = 2;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &cc, &id), AX_OK);
    struct ax_class_rt *c = s->classes[id];

    static struct job x, d, h, b[10], w[20];
    struct job *all[43];
    size_t n = 0;
    all[n++] = &x, all[n++] = &d, all[n++] = &h;
    for (int i = 0; i < 10; i++)
        all[n++] = &b[i];
    for (int i = 0; i < 20; i++)
        all[n++] = &w[i];
    for (size_t i = 0; i < n; i++) {
        all[i]->cls = (uint8_t)id;
        all[i]->prio = AX_PRIO_LOW;
    }

    /* A timeout storm first: windows of 20 where half time out take the
     * limit from 64 below the slow start's mark (half of 64). */
    uint64_t t = windows(s, c, w, 12, now_ns(), 200 * MS, 50 * MS, true);
    fprintf(stderr, "after the storm: limit %u, mark %.1f\n", atomic_load(&c->limit), c->lim.mark);
    CHECK(c->lim.mark > 0 && atomic_load(&c->limit) < c->lim.mark);

    uint64_t t0 = t + 10 * MS;
    take(s, c, &x, t0);
    for (int i = 0; i < 10; i++)
        take(s, c, &b[i], t0);
    take(s, c, &d, t0);
    CHECK_EQ(class_in_flight(c, memory_order_relaxed), 12u);

    /* D times out: X and the ten B are noted as out beside it. */
    uint64_t t1 = t0 + 200 * MS;
    done(s, &d, JS_TIMED_OUT, t0, t1);
    CHECK_EQ(pending(c), 11u);

    /* H's worker read its clock 1 ms before D's sample, then took H. */
    take(s, c, &h, t1 - 1 * MS);
    uint64_t t2 = t1 + 50 * MS;
    done(s, &h, JS_SUCCEEDED, t1 - 1 * MS, t2);
    fprintf(stderr, "after H (began after the drop, stamped 1 ms before it): drop_pending %u\n",
            pending(c));
    CHECK_EQ(pending(c), 11u);

    uint64_t t3 = t2 + 50 * MS;
    for (int i = 0; i < 10; i++)
        done(s, &b[i], JS_SUCCEEDED, t0, t3);
    fprintf(stderr, "after the ten B: drop_pending %u (X is still out)\n", pending(c));
    CHECK_EQ(pending(c), 1u);

    /* Clean windows from attempts begun after the drop, twenty in flight
     * (not app-limited), answering in 100 ms, within the storm's baseline
     * (so Gradient2's own growth stays slow, below the mark): X is still
     * out, so no doubling (until X is back, or the class's 10 s timeout
     * after the drop). */
    uint64_t before = c->lim.doublings;
    t = windows(s, c, w, 6, t3, 110 * MS, 100 * MS, false);
    fprintf(stderr, "six clean windows after: drop_pending %u, doublings +%llu, limit %u\n",
            pending(c), (unsigned long long)(c->lim.doublings - before), atomic_load(&c->limit));
    CHECK_EQ(pending(c), 1u);
    CHECK_EQ(c->lim.doublings, before);

    /* Control: once X is back (healthy, begun before the drop) the count
     * is done, and the next clean windows double the limit. */
    done(s, &x, JS_SUCCEEDED, t0, t);
    CHECK_EQ(pending(c), 0u);
    windows(s, c, w, 3, t, 110 * MS, 100 * MS, false);
    fprintf(stderr, "X back, three clean windows: doublings +%llu, limit %u\n",
            (unsigned long long)(c->lim.doublings - before), atomic_load(&c->limit));
    CHECK(c->lim.doublings > before);
    CHECK_EQ(class_in_flight(c, memory_order_relaxed), 0u);

    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    printf("test_class_limit_stale_start: ok\n");
    return 0;
}
