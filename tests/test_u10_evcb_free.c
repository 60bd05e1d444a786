/* test_u10_evcb_free - README: ax_shutdown / ax_free "may not be called
 * from the scheduler's own tasks or callbacks (AX_ESTATE; ax_free refuses
 * on stderr)". From on_done, on_timeout and a task ax_free refuses. From
 * the host's event callback (ax_events_callback's fn, on ax's event
 * thread) ax_free goes ahead and the process dies with SIGSEGV. Expected:
 * refused like the others, so the owner can still free the scheduler.
 * Another scheduler's ax_shutdown and ax_free too: a callback stopping
 * scheduler A while A's metrics appender waited for this event thread
 * (ax_events_flush) deadlocked, A's shutdown joining the appender's thread
 * (a review, 3 of 3 runs); so ax_events_flush from an appender is refused
 * as well (test_metrics_append_reenter). */
#include "util.h"

static ax_sched *S, *other;
static atomic_int entered, returned, rc_other;

static void evfn(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind != AX_EV_SUCCEEDED || atomic_exchange(&entered, 1))
        return;
    ax_free(S); /* should be refused: it runs on one of S's threads */
    atomic_store(&rc_other, ax_shutdown(other, 10));
    ax_free(other); /* refused too: nothing freed */
    atomic_store(&returned, 1);
}

static int ok(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

int main(void)
{
    S = test_sched(1, 10);
    other = test_sched(1, 10);
    CHECK_EQ(ax_events_callback(S, evfn, NULL), 0);
    ax_spec sp = {.fn = ok, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(S, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&returned) == 1, 3000)); /* today: SIGSEGV first */
    usleep(100000);
    /* Refused, so S is still ours to use and free. */
    CHECK_EQ(ax_submit(S, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(test_stats(S).succeeded == 2, 3000));
    CHECK_EQ(atomic_load(&rc_other), AX_ESTATE);
    CHECK_EQ(ax_submit(other, &sp, NULL), 0); /* not shut down */
    CHECK(WAIT_UNTIL(test_stats(other).succeeded == 1, 3000));
    ax_free(S);
    ax_free(other);
    return 0;
}
