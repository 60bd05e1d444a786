/* test_shutdown_retry_runns.c - a task whose failed attempt chose a retry
 * just as ax_shutdown began ends "cancelled at shutdown" with the run time
 * of that attempt: ax_result.run_ns is "> 0 (at least 1) exactly when its
 * function was entered" (ax.h), and libax_redis drops a message's hold on
 * a 0.
 *
 * The window: the worker's retry decision sees the scheduler open and makes
 * the job RETRYING; shutdown sets `closing`; the worker's lock section that
 * arms the back-off (and kept the attempt's run time) sees it and ends the
 * job itself. That end reported run_ns 0 (an adversarial review: 97 of
 * 2000 rounds). Each round: one scheduler, one task that fails once with a
 * retry left; its attempt waits for the main thread's acknowledgement
 * before it returns, so ax_shutdown comes 0..SPREAD_NS after the return.
 * Only rounds that ended in that window ("cancelled at shutdown" after one
 * attempt) are checked; ROUNDS of them are enough to land in it many times
 * (a few per cent do), within BUDGET_MS on a loaded machine.
 */
#include "util.h"

#define ROUNDS 600
#define SPREAD_NS 3000
#define ACK_WAIT_NS 1000000 /* the attempt waits at most this long: never a hang */
#define BUDGET_MS 15000

static atomic_int started, returning, ack, done_calls;
static _Atomic uint64_t done_run_ns;
static atomic_uint done_attempts;
static char done_error[AX_ERROR_MAX];

static int fail_once(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    if (atomic_fetch_add(&started, 1) == 0) {
        atomic_store(&returning, 1);
        uint64_t end = ax_now_ns() + ACK_WAIT_NS;
        while (!atomic_load(&ack) && ax_now_ns() < end)
            ;
    }
    return 1;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&done_run_ns, r->run_ns);
    atomic_store(&done_attempts, r->attempts);
    snprintf(done_error, sizeof done_error, "%s", r->error);
    atomic_fetch_add(&done_calls, 1);
}

int main(void)
{
    static const ax_retry_policy backoff = {AX_BACKOFF_EXPONENTIAL, 50, 50, 0};
    uint64_t rnd = 0x9e3779b97f4a7c15ull, stop_ms = test_now_ms() + BUDGET_MS;
    int rounds = 0, in_window = 0, wrong = 0;
    for (; rounds < ROUNDS && test_now_ms() < stop_ms; rounds++) {
        atomic_store(&started, 0);
        atomic_store(&returning, 0);
        atomic_store(&ack, 0);
        atomic_store(&done_calls, 0);
        ax_sched *s = test_sched(1, 4);
        ax_spec sp = {.fn = fail_once, .on_done = on_done, .timeout_ms = 5000, .max_retry = 1,
                      .retry = &backoff};
        CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&returning), 10000));
        atomic_store(&ack, 1);
        rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
        uint64_t until = ax_now_ns() + rnd % SPREAD_NS;
        while (ax_now_ns() < until)
            ;
        int rc = ax_shutdown(s, 0);
        CHECK(rc == AX_OK || rc == AX_ETIMEDOUT);
        ax_free(s);
        CHECK_EQ(atomic_load(&done_calls), 1);
        if (atomic_load(&done_attempts) != 1 || !strstr(done_error, "cancelled at shutdown"))
            continue; /* the shutdown came before the return, or after the back-off was armed */
        in_window++;
        if (atomic_load(&done_run_ns) == 0 && wrong++ == 0)
            fprintf(stderr, "round %d: \"%s\" after 1 attempt, which ran: run_ns 0\n", rounds,
                    done_error);
    }
    fprintf(stderr, "%d rounds, %d ended cancelled at shutdown after attempt 0, %d with run_ns 0\n",
            rounds, in_window, wrong);
    CHECK_EQ(wrong, 0);
    return 0;
}
