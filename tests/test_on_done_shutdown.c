/* Review finding: an on_done that runs on the caller of ax_cancel (a task
 * ended in its bucket) is a callback of the scheduler, but own_thread()
 * does not see it: ax_shutdown called from it is not refused, and since
 * eb9092f a task leaves the load only after its on_done returns, so that
 * ax_shutdown waits for its own caller -- the whole grace period (>= 1 s)
 * -- and then returns AX_ETIMEDOUT ("an on_done still running?"). Before
 * eb9092f it returned 0 at once. Expected: refused (AX_ESTATE) or done,
 * promptly; never a wait for itself. */
#include "util.h"

#include <stdio.h>

static ax_sched *S;
static atomic_int inner_rc = -100;
static _Atomic uint64_t inner_ms;

static int task(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    uint64_t t0 = test_now_ms();
    int rc = ax_shutdown(S, 0);
    inner_ms = test_now_ms() - t0;
    inner_rc = rc;
}

int main(void)
{
    S = test_sched(1, 2);
    CHECK_EQ(ax_pause(S), 0);
    ax_spec sp = {.fn = task, .timeout_ms = 1000, .on_done = on_done};
    uint64_t id;
    CHECK_EQ(ax_submit(S, &sp, &id), 0);
    /* Queued behind the pause: ax_cancel ends it here, and on_done runs on
     * this thread. */
    CHECK_EQ(ax_cancel(S, id), 0);
    fprintf(stderr, "ax_shutdown inside on_done: rc %d (%s) after %llu ms\n", (int)inner_rc,
            ax_strerror(inner_rc), (unsigned long long)inner_ms);
    CHECK(inner_rc != AX_ETIMEDOUT);
    CHECK_LE(inner_ms, 300);
    ax_free(S);
    printf("ok\n");
    return 0;
}
