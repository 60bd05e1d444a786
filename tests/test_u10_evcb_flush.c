/* test_u10_evcb_flush - ax_events_flush called from the host's own event
 * callback (ax_events_callback's fn, run on ax's event thread) never
 * returns: it waits for the event thread, which is the caller. From a task
 * or on_done the same call is refused with AX_ESTATE ("called on a worker
 * (would stall it)"); from the event thread it deadlocks, and every later
 * event of the scheduler is stuck behind it. A logger that flushes on an
 * error event is an ordinary thing to write. Expected: it returns (0 or
 * AX_ESTATE) promptly. */
#include "util.h"

static ax_sched *S;
static atomic_int entered, returned, rc_seen;

static void evfn(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind != AX_EV_SUCCEEDED || atomic_exchange(&entered, 1))
        return;
    atomic_store(&rc_seen, ax_events_flush(S));
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
    CHECK_EQ(ax_events_callback(S, evfn, NULL), 0);
    ax_spec sp = {.fn = ok, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(S, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&entered) == 1, 3000));
    CHECK(WAIT_UNTIL(atomic_load(&returned) == 1, 3000)); /* fails today: hangs */
    CHECK(atomic_load(&rc_seen) == 0 || atomic_load(&rc_seen) == AX_ESTATE);
    ax_free(S);
    return 0;
}
