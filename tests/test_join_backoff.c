/* test_join_backoff.c - ax_join reports the child's end as the child's own
 * on_done does, when the child ended in a retry's back-off: cancelled there,
 * or its deadline_ns passed there.
 *
 * A job ended while RETRYING keeps the next attempt's number in its state
 * word; every terminal path reports the attempt that ran (js_report_attempt),
 * but ax_join read the number from the word, so its result said one attempt
 * more than on_done (an adversarial review: "join ... attempts 2 | on_done
 * ... attempts 1", every run).
 *
 * Two parents, each spawning a child that fails at once with one retry after
 * a 3 s back-off. The first cancels its child in that back-off; the
 * second's child has a deadline 1 s ahead, which passes in it. Each
 * parent then joins. Both results must equal on_done's: state, code and
 * attempts 1.
 */
#include "util.h"

static atomic_int done_state[2], done_code[2], done_calls[2];
static atomic_uint done_attempts[2];
static ax_result joined[2];
static atomic_int join_rc[2] = {1, 1}, joins[2];

static int child(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return 1;
}

static void child_done(const ax_result *r, void *arg)
{
    int i = (int)(intptr_t)arg;
    atomic_store(&done_state[i], (int)r->state);
    atomic_store(&done_code[i], r->code);
    atomic_store(&done_attempts[i], r->attempts);
    atomic_fetch_add(&done_calls[i], 1);
}

static int parent(ax_task *t, void *arg)
{
    /* Seconds, not 300/100 ms: the parent acts within the back-off, and
     * attempt 0 runs within the deadline, on a loaded machine too. */
    static const ax_retry_policy slow = {AX_BACKOFF_EXPONENTIAL, 3000, 3000, 0};
    int mode = (int)(intptr_t)arg; /* 0: cancelled in the back-off; 1: its deadline there */
    ax_spec c = {.fn = child, .timeout_ms = 1000, .max_retry = 1, .retry = &slow,
                 .on_done = child_done, .cb_arg = arg};
    if (mode == 1)
        c.deadline_ns = ax_now_ns() + 1000 * 1000000ull;
    uint64_t id;
    CHECK_EQ(ax_spawn(t, &c, &id), AX_OK);
    /* Attempt 0 fails at once: wait until its back-off is armed (the
     * retry counted; the first parent's child counts for the second). */
    while (test_stats(ax_task_sched(t)).retried < (uint64_t)mode + 1 && ax_sleep(t, 1) == AX_OK)
        ;
    if (mode == 0)
        CHECK_EQ(ax_cancel(ax_task_sched(t), id), AX_OK);
    atomic_store(&join_rc[mode], ax_join(t, id, -1, &joined[mode]));
    atomic_fetch_add(&joins[mode], 1);
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(2, 8);
    for (int mode = 0; mode < 2; mode++) {
        ax_spec p = {.fn = parent, .arg = (void *)(intptr_t)mode, .timeout_ms = 10000};
        CHECK_EQ(ax_submit(s, &p, NULL), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&joins[mode]) == 1, 10000));
    }
    static const ax_state want[2] = {AX_STATE_CANCELLED, AX_STATE_TIMED_OUT};
    for (int m = 0; m < 2; m++) {
        CHECK_EQ(atomic_load(&join_rc[m]), AX_OK);
        CHECK_EQ(atomic_load(&done_calls[m]), 1);
        CHECK_EQ(atomic_load(&done_state[m]), (int)want[m]);
        CHECK_EQ(atomic_load(&done_attempts[m]), 1);
        CHECK_EQ((int)joined[m].state, atomic_load(&done_state[m]));
        CHECK_EQ(joined[m].code, atomic_load(&done_code[m]));
        CHECK_EQ(joined[m].attempts, atomic_load(&done_attempts[m]));
    }
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    return 0;
}
