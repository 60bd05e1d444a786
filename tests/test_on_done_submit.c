/* Review finding (eb9092f): a task now leaves the load only after its
 * on_done has returned, so an on_done that submits the next NORMAL/LOW task
 * of a chain sees its own, already finished task still counted in the load
 * that the shed line is checked against. submit.c documents load as
 * "queued + running + delayed"; a task running its on_done is none of them.
 * Here the shed line is 1: with nothing queued, running or delayed, the
 * follow-up submission from on_done must be admitted, and it is shed
 * (AX_ESHED). Before eb9092f it was admitted. */
#include "util.h"

#include <stdio.h>

static ax_sched *S;
static atomic_int follow_rc = 100;
static atomic_int follow_ran;

static int follow(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&follow_ran, 1);
    return 0;
}

static int first(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    ax_spec sp = {.fn = follow, .timeout_ms = 1000, .priority = AX_PRIO_NORMAL};
    atomic_store(&follow_rc, ax_submit(S, &sp, NULL));
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 4;
    c.capacity[AX_PRIO_HIGH] = 1;
    c.capacity[AX_PRIO_NORMAL] = 1;
    c.capacity[AX_PRIO_LOW] = 1;
    c.shed_ratio = 0.33; /* shed_at = 1 (0.99 rounded up): shed once one task is in the load */
    S = test_sched_cfg(&c);
    ax_spec sp = {.fn = first, .timeout_ms = 1000, .priority = AX_PRIO_NORMAL,
                  .on_done = on_done};
    CHECK_EQ(ax_submit(S, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&follow_rc) != 100, 2000));
    fprintf(stderr, "follow-up submit from on_done: %d (%s)\n", (int)follow_rc,
            ax_strerror(follow_rc));
    CHECK_EQ(atomic_load(&follow_rc), 0);
    CHECK(WAIT_UNTIL(atomic_load(&follow_ran), 2000));
    CHECK_EQ(ax_shutdown(S, 1000), 0);
    ax_free(S);
    printf("ok\n");
    return 0;
}
