/* Review finding (pre-existing, lifecycle.c:231 and :281): ax_shutdown
 * computes now + timeout_ms * 1000000 in uint64_t. For timeout_ms =
 * INT64_MAX (the natural "let running tasks finish, however long") the
 * product wraps to 2^64 - 10^6, so the deadline is 1 ms in the past: running
 * tasks are cancelled at once instead of being let finish, and the grace
 * period wraps the same way. A task that needs 200 ms ends CANCELLED. */
#include "util.h"

#include <stdint.h>
#include <stdio.h>

static atomic_int state = -1;

static int slow(ax_task *t, void *arg)
{
    (void)arg;
    ax_sleep(t, 200);
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&state, (int)r->state);
}

int main(void)
{
    ax_sched *s = test_sched(1, 2);
    ax_spec sp = {.fn = slow, .timeout_ms = 5000, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    ax_stats st;
    CHECK(WAIT_UNTIL((ax_stats_get(s, &st), st.started == 1), 2000));
    int rc = ax_shutdown(s, INT64_MAX);
    fprintf(stderr, "ax_shutdown(INT64_MAX): rc %d, the running task ended %s\n", rc,
            ax_state_name(state));
    CHECK_EQ(rc, 0);
    CHECK_EQ(atomic_load(&state), AX_STATE_SUCCEEDED);
    ax_free(s);
    printf("ok\n");
    return 0;
}
