/* test_adaptive_limit_stale_start.c - config.adaptive_limit's slow start
 * counts back only the attempts a drop counted beside it (sched.c,
 * sched_adaptive_take / sched_adaptive_sample); test_class_limit_stale_start
 * is the same rule for a class.
 *
 * Three ways the count went wrong before (the first is the class's CI
 * defect, the other two the review of its fix):
 *  - an attempt taken after the drop, by a worker whose cached clock was
 *    older than the drop, counted back (now - run_ns < the drop's time);
 *  - an attempt whose run had left the live runs (run_complete drops it
 *    before the attempt's sample) was not among those the drop counted,
 *    yet counted back;
 *  - a drop whose slot the watchdog had freed before the sample did not
 *    count itself, so the others were counted one short.
 * The count is now the slots held (freed after an attempt's sample, or
 * before it by the watchdog: slot_freed), and "began before the drop" a
 * stamp of the drop count taken with the slot.
 *
 * Played on the scheduler's own calls, as the dispatch (worker.c) and an
 * attempt's end (finish.c) make them: the slots are taken and freed
 * through the scheduler's accounting, the samples carry the clocks a
 * worker would pass. */
#include "util.h"

#include "internal.h"

#define MS 1000000ull

static ax_sched *s;

static void take(struct job *j)
{
    pthread_mutex_lock(&s->lock);
    s->running++;
    sched_adaptive_take(s, j);
    pthread_mutex_unlock(&s->lock);
}

/* The end of an attempt on its worker: the sample, then the slot. */
static void done(struct job *j, bool dropped, uint64_t start, uint64_t now)
{
    sched_adaptive_sample(s, j, now - start, dropped, now, false);
    job_slot_free(s, j, false);
}

static unsigned pending(void)
{
    pthread_mutex_lock(&s->alim_lk);
    unsigned p = s->alim.drop_pending;
    pthread_mutex_unlock(&s->alim_lk);
    return p;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 64;
    c.adaptive_limit = true;
    s = test_sched_cfg(&c);

    static struct job x, d, h, e, b[10], k[10];
    uint64_t t0 = now_ns();
    take(&x);
    for (int i = 0; i < 10; i++)
        take(&b[i]);
    take(&d);
    CHECK_EQ(fl_held(atomic_load(&s->alim_flight)), 12u);

    /* D times out: X and the ten B are out beside it. */
    uint64_t t1 = t0 + 200 * MS;
    done(&d, true, t0, t1);
    CHECK_EQ(pending(), 11u);

    /* H is taken after that sample, by a worker whose clock read 1 ms
     * before it: not among the eleven. */
    take(&h);
    uint64_t t2 = t1 + 50 * MS;
    done(&h, false, t1 - 1 * MS, t2);
    fprintf(stderr, "after H (taken after the drop, stamped 1 ms before it): drop_pending %u\n",
            pending());
    CHECK_EQ(pending(), 11u);

    for (int i = 0; i < 10; i++)
        done(&b[i], false, t0, t2 + 10 * MS);
    fprintf(stderr, "after the ten B: drop_pending %u (X is still out)\n", pending());
    CHECK_EQ(pending(), 1u);

    /* E is held on its worker past its deadline: the watchdog frees its
     * slot, then its finisher samples the drop. Beside it: X and ten K. */
    for (int i = 0; i < 10; i++)
        take(&k[i]);
    take(&e);
    job_slot_free(s, &e, false);
    uint64_t t3 = t2 + 300 * MS;
    sched_adaptive_sample(s, &e, t3 - t2, true, t3, true);
    fprintf(stderr, "a drop the watchdog ended, X and ten K beside it: drop_pending %u\n",
            pending());
    CHECK_EQ(pending(), 11u);
    for (int i = 0; i < 10; i++)
        done(&k[i], false, t2, t3 + 10 * MS);
    CHECK_EQ(pending(), 1u);
    done(&x, false, t0, t3 + 20 * MS); /* X back: the count is done */
    CHECK_EQ(pending(), 0u);
    CHECK_EQ(fl_held(atomic_load(&s->alim_flight)), 0u);

    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    printf("test_adaptive_limit_stale_start: ok\n");
    return 0;
}
