/* test_events_order.c - a task's events in the order they happened, with a
 * slow lossless sink and cancels racing the starts (review, 2026-12-06).
 *
 * 20 000 tasks (5 000 under TSan) queued behind a 700 ms delay, lossless
 * events to a callback that stalls once for 400 ms just as they become
 * due, so the workers' rings fill and the workers wait for room; then
 * every task is cancelled while they start. Before the fix:
 *   - "submitted cancelled started" (2-88 tasks a run): a worker made the
 *     attempt RUNNING, then waited for room for STARTED while the cancel
 *     won the attempt's end and wrote CANCELLED; and the event thread read
 *     the shared ring's head only after taking every worker's records;
 *   - with a retry policy (every attempt fails, one retry after 2 s):
 *     "submitted started cancelled retry_scheduled" (7-19 tasks a run):
 *     RETRY_SCHEDULED was emitted after the lock section that armed the
 *     retry, where a cancel could end it first.
 * Checked per task: exactly one SUBMITTED, exactly one terminal event, and,
 * by the events' times (ax_event.time_ns, the JSON "ts"), no STARTED or
 * RETRY_SCHEDULED after the terminal one; no event dropped. The order the
 * sink received them in is counted and printed, not checked: a worker
 * preempted between its attempt's begin and its STARTED's commit while a
 * cancel and a whole batch of the event thread pass can still deliver
 * STARTED one batch late, with its earlier time (ax.h: ax_event.time_ns);
 * 1 task in 6 runs of 2 x 20 000 beside a busy helper, against 2-88 a run
 * in arrival order, and times out of order too, before the fix.
 */
#define _GNU_SOURCE
#include "check.h"
#include "util.h"

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#ifdef TEST_TSAN
#define N 5000
#else
#define N 20000
#endif
#define MAXEV 8

static uint64_t ids[N];
static uint8_t kinds[N][MAXEV];
static uint64_t times[N][MAXEV];
static int nev[N];
static atomic_int stall_once;
static int fail_mode;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (atomic_exchange(&stall_once, 0))
        usleep(400 * 1000); /* a sink's hiccup */
    if (e->trace_id[0] != 't')
        return;
    long i = atol(e->trace_id + 1);
    CHECK(i >= 0 && i < N);
    CHECK(nev[i] < MAXEV);
    times[i][nev[i]] = e->time_ns;
    kinds[i][nev[i]++] = (uint8_t)e->kind;
}

static int body(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return fail_mode ? 7 : 0;
}

static void run(int mode)
{
    fail_mode = mode;
    memset(nev, 0, sizeof nev);
    ax_retry_policy rp = {AX_BACKOFF_EXPONENTIAL, 2000, 2000, 0};
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 64;
    c.capacity[AX_PRIO_NORMAL] = N;
    ax_sched *s = NULL;
    CHECK_EQ(ax_new(&c, &s), 0);
    CHECK_EQ(ax_events_lossless(s, true), 0);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    for (int i = 0; i < N; i++) {
        char tid[16];
        snprintf(tid, sizeof tid, "t%d", i);
        ax_spec sp = {.fn = body, .timeout_ms = 10000, .delay_ms = 700, .trace_id = tid,
                      .max_retry = mode ? 1 : 0, .retry = &rp};
        CHECK_EQ(ax_submit(s, &sp, &ids[i]), 0);
    }
    CHECK_EQ(ax_events_flush(s), 0);
    atomic_store(&stall_once, 1); /* the next event holds the sink 400 ms */
    usleep(900 * 1000);           /* due at ~700 ms: the workers' rings fill */
    for (int i = 0; i < N; i++)
        (void)ax_cancel(s, ids[i]); /* AX_ENOTFOUND for those already ended */
    CHECK_EQ(ax_shutdown(s, 30000), 0);
    CHECK_EQ(ax_events_flush(s), 0);
    CHECK_EQ(ax_events_dropped(s), 0);
    int bad = 0, arrival = 0;
    for (int i = 0; i < N; i++) {
        int submitted = 0, terminal = 0;
        bool late = false, late_arrival = false;
        uint64_t t_end = 0;
        for (int k = 0; k < nev[i]; k++) {
            unsigned kd = kinds[i][k];
            if (kd != AX_EV_SUBMITTED && kd != AX_EV_STARTED && kd != AX_EV_RETRY_SCHEDULED) {
                terminal++;
                t_end = times[i][k];
            }
        }
        for (int k = 0; k < nev[i]; k++) {
            unsigned kd = kinds[i][k];
            if (kd == AX_EV_SUBMITTED) {
                submitted++;
            } else if (kd == AX_EV_STARTED || kd == AX_EV_RETRY_SCHEDULED) {
                late |= times[i][k] > t_end;
                for (int m = 0; m < k; m++)
                    late_arrival |= kinds[i][m] != AX_EV_SUBMITTED &&
                                    kinds[i][m] != AX_EV_STARTED &&
                                    kinds[i][m] != AX_EV_RETRY_SCHEDULED;
            }
        }
        arrival += late_arrival;
        if (submitted != 1 || terminal != 1 || late) {
            if (bad++ < 5) {
                fprintf(stderr, "mode %d, task %d:", mode, i);
                for (int k = 0; k < nev[i]; k++)
                    fprintf(stderr, " %s", ax_event_name((ax_event_kind)kinds[i][k]));
                fprintf(stderr, "\n");
            }
        }
    }
    printf("mode %d: %d task(s) whose STARTED or RETRY_SCHEDULED arrived after the terminal "
           "event (in time order)\n",
           mode, arrival);
    CHECK_EQ(bad, 0);
    ax_free(s);
}

int main(void)
{
    run(0);
    run(1);
    puts("test_events_order: ok");
    return 0;
}
