/* test_u10_retry_deadline_msg - a task that ran, failed, and whose retry
 * back-off would pass its deadline_ns ends TIMED_OUT at the deadline (README
 * "States"). Its on_done result must not claim it never ran: today the error
 * is "deadline passed before it could run" although the attempt ran and
 * returned 9 (the same text a task that waited in its bucket past its
 * deadline gets), so the host cannot tell the two apart from ax_result. */
#include "util.h"

static ax_result res;
static atomic_int ndone;
static atomic_int calls;

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    res = *r;
    atomic_fetch_add(&ndone, 1);
}

static int fails(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&calls, 1);
    return 9;
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_retry_policy slow = {AX_BACKOFF_EXPONENTIAL, 2000, 5000, 0};
    ax_spec sp = {.fn = fails, .timeout_ms = 100, .max_retry = 3, .retry = &slow,
                  /* 1 s: time enough to start on a busy machine (a first
                   * TSan fiber); the 2 s back-off still passes it */
                  .deadline_ns = ax_now_ns() + 1000000000ull, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == 1, 10000));
    fprintf(stderr, "result: state=%s code=%d attempts=%u run_ns=%llu error=\"%s\"\n",
            ax_state_name(res.state), res.code, res.attempts, (unsigned long long)res.run_ns,
            res.error);
    CHECK_EQ(atomic_load(&calls), 1);          /* it ran once */
    CHECK_EQ(res.state, AX_STATE_TIMED_OUT);   /* documented */
    CHECK(strstr(res.error, "before it could run") == NULL); /* fails today */
    ax_free(s);
    return 0;
}
