/* test_events_cross.c - an event callback never waits for another
 * scheduler's event thread (new user's trial).
 *
 * A: two schedulers whose callbacks each flush (or switch the sinks of) the
 *    other's: both flushes waited for the other event thread, stuck in its
 *    own flush, for good; events stopped for both schedulers. Each call is
 *    now AX_ESTATE, as it is for the callback's own scheduler.
 * B: lossless, a callback that submits into another scheduler whose event
 *    thread is busy (its callback holds it) waited for room in that
 *    scheduler's ring: with the other callback waiting on this one (here:
 *    on the submits' end), both threads hung, and with them every worker
 *    of both in lossless mode. Such events are now dropped and counted, as
 *    a callback's events in its own scheduler are; no task is lost.
 */
#define _DEFAULT_SOURCE
#include "check.h"

#include <ax.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static ax_sched *S[2];

/* ---- A: flushing each other --------------------------------------------- */

static atomic_int entered, finished;
static int rc_flush[2], rc_json[2], rc_cb[2];
static char detail[2][256];

static void noop_cb(const ax_event *e, void *arg)
{
    (void)e;
    (void)arg;
}

static void cross_cb(const ax_event *e, void *arg)
{
    (void)e;
    int me = (int)(intptr_t)arg;
    static atomic_bool once[2];
    if (atomic_exchange(&once[me], true))
        return;
    /* Both callbacks in at once (liveness bound only), so that on the old
     * code each flush waits for a thread that waits for it. */
    atomic_fetch_add(&entered, 1);
    for (int i = 0; i < 10000 && atomic_load(&entered) < 2; i++)
        usleep(1000);
    rc_flush[me] = ax_events_flush(S[!me]);
    snprintf(detail[me], sizeof detail[me], "%s", ax_error_detail());
    rc_json[me] = ax_events_json(S[!me], stderr);
    rc_cb[me] = ax_events_callback(S[!me], noop_cb, NULL);
    atomic_fetch_add(&finished, 1);
}

static int nop(ax_task *t, void *a)
{
    (void)t;
    (void)a;
    return 0;
}

static void flush_each_other(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(ax_new(&cfg, &S[i]), AX_OK);
        CHECK_EQ(ax_events_callback(S[i], cross_cb, (void *)(intptr_t)i), AX_OK);
    }
    ax_spec sp = {.fn = nop, .timeout_ms = 10000};
    for (int i = 0; i < 2; i++)
        CHECK_EQ(ax_submit(S[i], &sp, NULL), AX_OK);
    bool done = false;
    for (int i = 0; i < 30000 && !done; i++) {
        done = atomic_load(&finished) == 2;
        if (!done)
            usleep(1000);
    }
    if (!done) {
        fprintf(stderr, "A: %d of 2 callbacks returned from their calls (the event threads "
                        "wait for each other)\n",
                atomic_load(&finished));
        CHECK(done);
    }
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(rc_flush[i], AX_ESTATE);
        CHECK_EQ(rc_json[i], AX_ESTATE);
        CHECK_EQ(rc_cb[i], AX_ESTATE);
        CHECK(strstr(detail[i], "another scheduler's event callback") != NULL);
    }
    /* The sinks are as they were, and both threads go on. */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(ax_submit(S[i], &sp, NULL), AX_OK);
        CHECK_EQ(ax_events_flush(S[i]), AX_OK);
        CHECK_EQ(ax_shutdown(S[i], 10000), AX_OK);
        ax_free(S[i]);
    }
}

/* ---- B: lossless, submitting into a busy one ---------------------------- */

#define INTO 6000 /* more than an event ring holds (4096) */

static atomic_bool hold_b, b_held, a_done;
static atomic_int ran, admitted;

static void count_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_SUCCEEDED)
        atomic_fetch_add(&ran, 1);
}

/* S[1]'s callback: its first call holds its event thread until the other
 * callback's submits are over (bounded: liveness only). */
static void busy_cb(const ax_event *e, void *arg)
{
    (void)e;
    (void)arg;
    if (!atomic_exchange(&b_held, true))
        for (int i = 0; i < 30000 && atomic_load(&hold_b) && !atomic_load(&a_done); i++)
            usleep(1000);
}

static void submitting_cb(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind != AX_EV_SUCCEEDED || atomic_load(&a_done))
        return;
    ax_spec sp = {.fn = nop, .timeout_ms = 60000, .on_done = count_done};
    for (int i = 0; i < INTO; i++)
        if (ax_submit(S[1], &sp, NULL) == AX_OK)
            atomic_fetch_add(&admitted, 1);
    atomic_store(&a_done, true);
}

static void lossless_into_busy(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    CHECK_EQ(ax_new(&cfg, &S[0]), AX_OK);
    cfg.capacity[AX_PRIO_NORMAL] = INTO + 16;
    CHECK_EQ(ax_new(&cfg, &S[1]), AX_OK);
    CHECK_EQ(ax_events_callback(S[0], submitting_cb, NULL), AX_OK);
    CHECK_EQ(ax_events_callback(S[1], busy_cb, NULL), AX_OK);
    CHECK_EQ(ax_events_lossless(S[0], true), AX_OK);
    CHECK_EQ(ax_events_lossless(S[1], true), AX_OK);
    CHECK_EQ(ax_pause(S[1]), AX_OK); /* its tasks queue: the events are submits */
    atomic_store(&hold_b, true);
    ax_spec sp = {.fn = nop, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(S[1], &sp, NULL), AX_OK); /* S[1]'s event thread into busy_cb */
    for (int i = 0; i < 30000 && !atomic_load(&b_held); i++)
        usleep(1000);
    CHECK(atomic_load(&b_held));
    CHECK_EQ(ax_submit(S[0], &sp, NULL), AX_OK); /* its SUCCEEDED: submitting_cb */
    bool done = false;
    for (int i = 0; i < 30000 && !done; i++) {
        done = atomic_load(&a_done);
        if (!done)
            usleep(1000);
    }
    if (!done) {
        fprintf(stderr, "B: the callback's submits into the busy scheduler did not end "
                        "(%d admitted)\n",
                atomic_load(&admitted));
        CHECK(done);
    }
    atomic_store(&hold_b, false);
    CHECK_EQ(atomic_load(&admitted), INTO);
    CHECK(ax_events_dropped(S[1]) > 0);
    CHECK_EQ(ax_resume(S[1]), AX_OK);
    for (int i = 0; i < 60000 && atomic_load(&ran) < INTO; i++) /* liveness only */
        usleep(1000);
    CHECK_EQ(atomic_load(&ran), INTO); /* every admitted task ran */
    CHECK_EQ(ax_shutdown(S[1], 60000), AX_OK);
    CHECK_EQ(ax_shutdown(S[0], 10000), AX_OK);
    fprintf(stderr, "B: %d submits from S0's callback into S1, %llu of S1's events dropped\n",
            INTO, (unsigned long long)ax_events_dropped(S[1]));
    ax_free(S[1]);
    ax_free(S[0]);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "B") != 0)
        flush_each_other();
    lossless_into_busy();
    return 0;
}
