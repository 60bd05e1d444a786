/* Review finding: ax_free called from an on_done that runs on the caller of
 * ax_cancel (a task ended in its bucket) is not refused (own_thread() does
 * not know that thread runs a callback). It waits shutdown_timeout_ms for
 * its own task to leave the load, joins the workers, frees the scheduler,
 * and returns into terminal_path, which then writes s->unloaded and
 * releases the job in freed memory (ASan: heap-use-after-free in
 * finish.c terminal_path). Expected: refused, like ax_free from any other
 * callback, and the scheduler freed by the caller afterwards. */
#include "util.h"

#include <stdio.h>

static ax_sched *S;
static atomic_int freed_inside;

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
    ax_free(S); /* must be refused: this is a callback of S */
    freed_inside = 1;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 2;
    c.shutdown_timeout_ms = 200;
    S = test_sched_cfg(&c);
    CHECK_EQ(ax_pause(S), 0);
    ax_spec sp = {.fn = task, .timeout_ms = 1000, .on_done = on_done};
    uint64_t id;
    CHECK_EQ(ax_submit(S, &sp, &id), 0);
    CHECK_EQ(ax_cancel(S, id), 0); /* on_done runs here, on this thread */
    /* If ax_free was refused inside on_done, S is still ours to free. */
    ax_stats st;
    CHECK_EQ(ax_stats_get(S, &st), 0);
    CHECK_EQ(st.cancelled, 1);
    ax_free(S);
    printf("ok\n");
    return 0;
}
