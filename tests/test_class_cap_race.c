/* test_class_cap_race.c - a class whose limit follows the cap (limit_max 0,
 * adaptive) stays in step with it when ax_set_max_concurrency runs at the
 * same time as (1) ax_class_register or (2) another ax_set_max_concurrency
 * (new-user trial of 460650d).
 *
 * Old code: ax_class_register read the cap before publishing the class, and
 * ax_set_max_concurrency walked the published classes after its unlock, so
 *  1. a class registered during a cap change kept the old cap as its
 *     limiter's bound for good (1 052 of 3 000 rounds: class limit 2 with
 *     the cap at 400; 20 class tasks of 200 ms then ran 2 at a time);
 *  2. two cap changes at once could apply the classes' update in the
 *     opposite order to the cap's (1 371 of 5 000: cap 400, class 2).
 * Each round here: the cap at one of 2 / 400, the two calls released by a
 * barrier, then with no load the class's limit must equal ax_stats.limit.
 */
#include "util.h"

#include <pthread.h>

#define ROUNDS 400
#define PER_SCHED 60 /* classes per scheduler: AX_CLASS_MAX is 64 */

static ax_sched *S;
static pthread_barrier_t bar;
static unsigned cap_a, cap_b;
static char name[32];
static unsigned cid;
static atomic_int reg_rc;

static void *set_a(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&bar);
    CHECK_EQ(ax_set_max_concurrency(S, cap_a), AX_OK);
    return NULL;
}

static void *set_b(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&bar);
    CHECK_EQ(ax_set_max_concurrency(S, cap_b), AX_OK);
    return NULL;
}

static void *reg(void *arg)
{
    (void)arg;
    ax_class_config c;
    ax_class_config_default(&c); /* adaptive, limit_max 0: follows the cap */
    c.name = name;
    pthread_barrier_wait(&bar);
    atomic_store(&reg_rc, ax_class_register(S, &c, &cid));
    return NULL;
}

static unsigned class_limit(unsigned id)
{
    ax_class_stats cs;
    CHECK_EQ(ax_class_stats_get(S, id, &cs), AX_OK);
    return cs.limit;
}

static unsigned sched_limit(void)
{
    ax_stats st;
    CHECK_EQ(ax_stats_get(S, &st), AX_OK);
    return (unsigned)st.limit;
}

int main(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    cfg.max_concurrency = 2;
    pthread_barrier_init(&bar, NULL, 2);

    /* 1. registration against a cap change */
    int off = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (r % PER_SCHED == 0) {
            if (S)
                ax_free(S);
            S = test_sched_cfg(&cfg);
        }
        CHECK_EQ(ax_set_max_concurrency(S, r % 2 ? 2 : 400), AX_OK);
        cap_a = r % 2 ? 400 : 2;
        snprintf(name, sizeof name, "c%d", r);
        pthread_t a, b;
        pthread_create(&a, NULL, set_a, NULL);
        pthread_create(&b, NULL, reg, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        CHECK_EQ(atomic_load(&reg_rc), AX_OK);
        unsigned cl = class_limit(cid), sl = sched_limit();
        if (cl != sl && off++ < 3)
            fprintf(stderr, "register round %d: cap -> %u, class limit %u, scheduler %u\n", r,
                    cap_a, cl, sl);
    }
    fprintf(stderr, "register vs cap change: %d of %d rounds off the cap\n", off, ROUNDS);
    CHECK_EQ(off, 0);

    /* 2. two cap changes at once, one class registered before */
    ax_free(S);
    S = test_sched_cfg(&cfg);
    ax_class_config c;
    ax_class_config_default(&c);
    c.name = "follower";
    unsigned id;
    CHECK_EQ(ax_class_register(S, &c, &id), AX_OK);
    off = 0;
    for (int r = 0; r < ROUNDS; r++) {
        cap_a = r % 2 ? 2 : 400;
        cap_b = r % 2 ? 400 : 2;
        pthread_t a, b;
        pthread_create(&a, NULL, set_a, NULL);
        pthread_create(&b, NULL, set_b, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        unsigned cl = class_limit(id), sl = sched_limit();
        if (cl != sl && off++ < 3)
            fprintf(stderr, "two changes round %d: class limit %u, scheduler %u\n", r, cl, sl);
    }
    fprintf(stderr, "two cap changes: %d of %d rounds off the cap\n", off, ROUNDS);
    CHECK_EQ(off, 0);

    CHECK_EQ(ax_shutdown(S, 1000), 0);
    ax_free(S);
    pthread_barrier_destroy(&bar);
    return 0;
}
