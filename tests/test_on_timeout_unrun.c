/* test_on_timeout_unrun.c - on_timeout runs once for each attempt that
 * timed out, and once when deadline_ns passes before an attempt could run
 * (README "Per task", ax.h ax_spec.on_timeout; a new user's trial found
 * the second case undocumented). Checked, one worker, each count exact
 * after ax_shutdown (which waits for the on_timeout calls):
 *   A. queued past its deadline (paused): TIMED_OUT, "deadline passed
 *      before it could run", on_timeout once, the function never called;
 *   B. an attempt that failed, its deadline passing in the back-off:
 *      TIMED_OUT, "... while its retry waited (attempt 1 failed)",
 *      on_timeout once;
 *   C. an attempt that timed out, then the deadline passing in the
 *      back-off: on_timeout twice (the attempt, then the deadline), and
 *      the message says "(attempt 1 timed out)" (it said "failed": the job
 *      kept no record of how the attempt before its retry ended);
 *   D. a task that succeeds within its deadline: no on_timeout. */
#include "util.h"

enum { A, B, C, D, N };
static atomic_int done[N], timeouts[N], calls[N], state[N];
static char err[N][AX_ERROR_MAX];

static void on_done(const ax_result *r, void *arg)
{
    int k = (int)(intptr_t)arg;
    atomic_store(&state[k], (int)r->state);
    snprintf(err[k], sizeof err[k], "%s", r->error);
    atomic_fetch_add(&done[k], 1);
}

static void on_timeout(const ax_result *r, void *arg)
{
    int k = (int)(intptr_t)arg;
    CHECK_EQ(r->state, AX_STATE_TIMED_OUT);
    atomic_fetch_add(&timeouts[k], 1);
}

static int fn(ax_task *t, void *arg)
{
    int k = (int)(intptr_t)arg;
    atomic_fetch_add(&calls[k], 1);
    if (k == B)
        return 9;
    if (k == C)
        return ax_sleep(t, 60000) == AX_ETIMEDOUT ? 0 : 1; /* its 5 ms timeout ends it */
    return 0;
}

static void submit(ax_sched *s, int k, uint64_t timeout_ms, uint64_t deadline_in_ms,
                   unsigned max_retry, const ax_retry_policy *rp)
{
    ax_spec sp = {.fn = fn,
                  .arg = (void *)(intptr_t)k,
                  .timeout_ms = timeout_ms,
                  .deadline_ns = deadline_in_ms ? ax_now_ns() + deadline_in_ms * 1000000u : 0,
                  .max_retry = max_retry,
                  .retry = rp,
                  .on_done = on_done,
                  .on_timeout = on_timeout,
                  .cb_arg = (void *)(intptr_t)k};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    /* A: queued while paused until its deadline has passed. */
    CHECK_EQ(ax_pause(s), AX_OK);
    submit(s, A, 1000, 5, 0, NULL);
    uint64_t until = ax_now_ns() + 20000000u;
    while (ax_now_ns() < until)
        ;
    CHECK_EQ(ax_resume(s), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done[A]) == 1, 30000 * TEST_SLOW));

    /* B and C: a back-off (10 s) far past their deadline (2 s, time
     * enough for the first attempt to start on a busy machine). */
    ax_retry_policy slow = {AX_BACKOFF_EXPONENTIAL, 10000, 10000, 0};
    submit(s, B, 1000, 2000, 3, &slow);
    submit(s, C, 5, 2000, 3, &slow);
    /* D: well within its deadline. */
    submit(s, D, 10000, 60000, 0, NULL);
    for (int k = B; k < N; k++)
        CHECK(WAIT_UNTIL(atomic_load(&done[k]) == 1, 30000 * TEST_SLOW));
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);

    for (int k = 0; k < N; k++)
        fprintf(stderr, "%c: state %s, on_timeout %d, calls %d, \"%s\"\n", 'A' + k,
                ax_state_name((ax_state)atomic_load(&state[k])), atomic_load(&timeouts[k]),
                atomic_load(&calls[k]), err[k]);
    CHECK_EQ(atomic_load(&calls[A]), 0);
    CHECK_EQ(atomic_load(&state[A]), AX_STATE_TIMED_OUT);
    CHECK(strstr(err[A], "deadline passed before it could run") != NULL);
    CHECK_EQ(atomic_load(&timeouts[A]), 1);

    CHECK_EQ(atomic_load(&calls[B]), 1);
    CHECK_EQ(atomic_load(&state[B]), AX_STATE_TIMED_OUT);
    CHECK(strstr(err[B], "while its retry waited (attempt 1 failed)") != NULL);
    CHECK_EQ(atomic_load(&timeouts[B]), 1);

    CHECK_EQ(atomic_load(&calls[C]), 1);
    CHECK_EQ(atomic_load(&state[C]), AX_STATE_TIMED_OUT);
    CHECK(strstr(err[C], "while its retry waited (attempt 1 timed out)") != NULL);
    CHECK_EQ(atomic_load(&timeouts[C]), 2);

    CHECK_EQ(atomic_load(&calls[D]), 1);
    CHECK_EQ(atomic_load(&state[D]), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&timeouts[D]), 0);
    for (int k = 0; k < N; k++)
        CHECK_EQ(atomic_load(&done[k]), 1);
    return 0;
}
