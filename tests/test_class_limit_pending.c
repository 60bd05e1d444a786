/* test_class_limit_pending.c - the slow start's count of attempts out beside
 * a drop (limit.c, drop_pending), through the scheduler on the worker's own
 * path: the attempt's deadline fires on its worker, whose slot is still held
 * when the sample is taken (finish.c attempt_end: sample, then slot free).
 * test_class_limit_held_pending is the watchdog's path; test_limit has the
 * rule itself with synthetic samples.
 *
 * One worker, an adaptive class. Ten tasks B park in ax_sleep (in flight,
 * begun before the drop: a window's samples, the fewest the count is
 * trusted with). A sleeps past its 100 ms timeout, so its deadline ends it
 * on the worker. Expected: the drop's sample notes the ten (drop_pending
 * 10); as each B comes back (2 s after it began) it counts one down, to 0
 * once all ten are back.
 * One B fewer in flight and the drop counts nothing (drop_pending UINT_MAX:
 * the timeout decides).
 */
#include "class_common.h"

#include "internal.h"

#include <limits.h>

#define NB 10

static atomic_int b_parked, b_done;
static atomic_bool release_b;

/* Parked in ax_sleep until the test has looked, however slow the machine. */
static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    atomic_fetch_add(&b_parked, 1);
    while (!atomic_load(&release_b)) {
        int rc = ax_sleep(t, 5);
        if (rc != AX_OK) return rc;
    }
    return 0;
}

static void b_on_done(const ax_result *r, void *arg)
{
    atomic_fetch_add(&b_done, 1);
    rc_on_done(r, arg);
}

static int late(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 5000); /* ended at its 100 ms deadline */
}

static void read_lim(struct ax_class_rt *cr, uint64_t *last_drop, unsigned *pending)
{
    pthread_mutex_lock(&cr->lk);
    *last_drop = cr->lim.last_drop_ns;
    *pending = cr->lim.drop_pending;
    pthread_mutex_unlock(&cr->lk);
}

static void run(unsigned nb, unsigned want_pending)
{
    atomic_store(&rc_done_n, 0);
    atomic_store(&b_parked, 0);
    atomic_store(&b_done, 0);
    atomic_store(&release_b, false);
    ax_sched *s = test_sched(1, 16);
    ax_class_config c = rc_adaptive("pend", 16);
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    struct ax_class_rt *cr = s->classes[id];

    ax_spec b = {.fn = sleeper, .class_id = id, .timeout_ms = 10000, .on_done = b_on_done};
    for (unsigned i = 0; i < nb; i++)
        CHECK_EQ(ax_submit(s, &b, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&b_parked) == (int)nb && rc_cstats(s, id).in_flight == nb,
                     10000));
    ax_spec a = {.fn = late, .class_id = id, .timeout_ms = 100, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);

    /* The drop's sample is in. */
    uint64_t last_drop = 0;
    unsigned pending = 0;
    CHECK(WAIT_UNTIL((read_lim(cr, &last_drop, &pending), last_drop != 0), 10000));
    fprintf(stderr, "%u beside: drop_pending %u at the drop (%d of them back)\n", nb, pending,
            atomic_load(&b_done));
    CHECK_EQ(atomic_load(&b_done), 0); /* the B stay out until released */
    CHECK_EQ(pending, want_pending);
    atomic_store(&release_b, true);

    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == (int)nb + 1, 20000));
    read_lim(cr, &last_drop, &pending);
    fprintf(stderr, "%u beside: drop_pending %u once all are back\n", nb, pending);
    CHECK_EQ(pending, want_pending == UINT_MAX ? UINT_MAX : 0u);
    CHECK_EQ(atomic_load(&b_done), (int)nb);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(void)
{
    run(NB, NB);
    run(NB - 1, UINT_MAX);
    printf("test_class_limit_pending: ok\n");
    return 0;
}
