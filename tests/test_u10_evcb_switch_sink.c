/* test_u10_evcb_switch_sink - turning the event sink off (or switching
 * it) from inside the host's event callback: ax_events_callback(s, NULL,
 * NULL) and ax_events_json(s, NULL) called on ax's event thread never
 * return (they wait until the event thread has written out what was
 * buffered and left the old sink: the caller itself). ax.h says a switch
 * from a task cannot wait and does not; from the event thread it
 * deadlocks. Expected: the call returns promptly (0 or AX_ESTATE). */
#include "util.h"

static ax_sched *S;
static atomic_int entered, returned;

static void evfn(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind != AX_EV_SUCCEEDED || atomic_exchange(&entered, 1))
        return;
    (void)ax_events_callback(S, NULL, NULL); /* "enough logging" */
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
    ax_free(S);
    return 0;
}
