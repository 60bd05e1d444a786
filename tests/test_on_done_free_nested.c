/* Review finding (8e77314): the terminal path marks the thread as the
 * scheduler's callback (ax_current_cb_sched = s) around on_done, so that
 * ax_free(s) inside it is refused. The thread-local holds only the innermost
 * scheduler: an on_done of A that runs an on_done of B inline (ax_cancel(B)
 * of a queued task, or ax_shutdown(B)) overwrites it with B, and inside B's
 * on_done ax_free(A) is no longer refused. It waits shutdown_timeout_ms for
 * A's on_done (this very thread), frees A, and A's terminal path then
 * touches the freed scheduler (in_on_done, job_release) when the outer
 * on_done returns: use after free (ASan). Expected: ax_free(A) refused as
 * for a direct call, A still usable afterwards. */
#include "util.h"

static ax_sched *A, *B;
static uint64_t b_id;
static atomic_int b_done, a_done;

static int never(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void on_done_b(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    ax_free(A); /* still inside A's on_done on this thread: must be refused */
    atomic_store(&b_done, 1);
}

static void on_done_a(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    ax_cancel(B, b_id); /* runs on_done_b here */
    atomic_store(&a_done, 1);
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 2;
    c.shutdown_timeout_ms = 200;
    A = test_sched_cfg(&c);
    B = test_sched_cfg(&c);
    CHECK_EQ(ax_pause(A), 0);
    CHECK_EQ(ax_pause(B), 0);
    uint64_t a_id;
    ax_spec sa = {.fn = never, .timeout_ms = 5000, .on_done = on_done_a};
    ax_spec sb = {.fn = never, .timeout_ms = 5000, .on_done = on_done_b};
    CHECK_EQ(ax_submit(A, &sa, &a_id), 0);
    CHECK_EQ(ax_submit(B, &sb, &b_id), 0);
    CHECK_EQ(ax_cancel(A, a_id), 0); /* on_done_a on this thread */
    CHECK_EQ(atomic_load(&a_done), 1);
    CHECK_EQ(atomic_load(&b_done), 1);
    /* A was not freed: it still answers. */
    ax_stats st;
    CHECK_EQ(ax_stats_get(A, &st), 0);
    CHECK_EQ(ax_shutdown(A, 1000), 0);
    ax_free(A);
    CHECK_EQ(ax_shutdown(B, 1000), 0);
    ax_free(B);
    printf("ok\n");
    return 0;
}
