/* test_u10_lossless_cb_submit - with ax_events_lossless(s, true), an
 * event callback (ax_events_callback's fn, on ax's event thread) that
 * calls an ax function which itself produces an event (here ax_submit,
 * refused or admitted) deadlocks the whole scheduler once the event
 * buffer is full: the event thread waits for room in a buffer only it
 * drains (events.c wait_for_room), then every worker and every submitter
 * waits in ev_reserve behind it. Nothing in ax.h forbids calling ax from
 * the logger callback. Expected: every task of the burst ends. */
#include "util.h"

#include <pthread.h>

static ax_sched *S;
static atomic_long cb_calls;

static int ok(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void evfn(const ax_event *e, void *arg)
{
    (void)arg;
    atomic_fetch_add(&cb_calls, 1);
    if (e->kind == AX_EV_SUCCEEDED && e->id % 4 == 0) {
        /* e.g. a follow-up job for some results */
        ax_spec sp = {.fn = ok, .timeout_ms = 1000};
        (void)ax_submit(S, &sp, NULL);
    }
}

static atomic_long admitted;
static atomic_int submitter_done;

static void *submitter(void *arg)
{
    (void)arg;
    for (int i = 0; i < 50000; i++) {
        ax_spec sp = {.fn = ok, .timeout_ms = 1000};
        if (ax_submit(S, &sp, NULL) == 0)
            atomic_fetch_add(&admitted, 1);
    }
    atomic_store(&submitter_done, 1);
    return NULL;
}

int main(void)
{
    S = test_sched(2, 100);
    CHECK_EQ(ax_events_callback(S, evfn, NULL), 0);
    CHECK_EQ(ax_events_lossless(S, true), 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, submitter, NULL), 0);
    bool submitted = WAIT_UNTIL(atomic_load(&submitter_done) == 1, 20000);
    fprintf(stderr, "submitter %s, %ld admitted, %ld callbacks\n",
            submitted ? "finished" : "still blocked in ax_submit", atomic_load(&admitted),
            atomic_load(&cb_calls));
    CHECK(submitted); /* fails today: ax_submit waits forever in ev_reserve */
    pthread_join(th, NULL);
    /* Idle and balanced: every admitted task (and follow-up) ended. */
    bool idle = WAIT_UNTIL(({
                               ax_stats st = test_stats(S);
                               st.submitted == st.succeeded + st.failed + st.timed_out +
                                                   st.cancelled &&
                                   st.running + st.queued[0] + st.queued[1] + st.queued[2] == 0;
                           }),
                           10000);
    ax_stats st = test_stats(S);
    fprintf(stderr, "submitted %llu succeeded %llu running %llu queued %llu, callbacks %ld\n",
            (unsigned long long)st.submitted, (unsigned long long)st.succeeded,
            (unsigned long long)st.running,
            (unsigned long long)(st.queued[0] + st.queued[1] + st.queued[2]),
            atomic_load(&cb_calls));
    CHECK(idle); /* fails today: the scheduler is deadlocked */
    ax_free(S);
    return 0;
}
