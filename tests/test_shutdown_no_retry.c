/* test_shutdown_no_retry.c - a task that fails during ax_shutdown's drain
 * with retries left says why it was not retried (a new user's trial of
 * 16d186c: its result read only "task returned 5", attempts 1, though it
 * had max_retry 3; a class's retry budget says "not retried: ...").
 *
 * Expected: FAILED after 1 attempt, its error the task's own followed by
 * "; not retried: the scheduler is shutting down". A control task failing
 * before the shutdown is retried (the text appears only because of it).
 */
#include "util.h"

#include <pthread.h>
#include <string.h>

static atomic_int go, started, control_runs;
static atomic_int done_n;
static ax_result last[2];

static int fail_when_told(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&started, 1);
    while (!atomic_load(&go))
        if (ax_sleep(t, 2) == AX_ETIMEDOUT)
            break;
    return 5;
}

static int fail_twice(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return atomic_fetch_add(&control_runs, 1) < 2 ? 5 : 0;
}

static void on_done(const ax_result *r, void *arg)
{
    last[(intptr_t)arg] = *r;
    atomic_fetch_add(&done_n, 1);
}

static void *shutdown_thread(void *arg)
{
    ax_shutdown(arg, 30000);
    return NULL;
}

static const ax_retry_policy quick = {.mode = AX_BACKOFF_FULL_JITTER, .base_ms = 1, .max_ms = 1};

int main(void)
{
    ax_sched *s = test_sched(1, 8);

    /* Control: before the shutdown, failures are retried. */
    ax_spec c = {.fn = fail_twice, .max_retry = 3, .retry = &quick, .timeout_ms = 60000,
                 .on_done = on_done, .cb_arg = (void *)0};
    CHECK_EQ(ax_submit(s, &c, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == 1, 10000));
    CHECK_EQ(last[0].state, AX_STATE_SUCCEEDED);
    CHECK_EQ(last[0].attempts, 3);

    ax_spec f = {.fn = fail_when_told, .max_retry = 3, .retry = &quick,
                 .timeout_ms = 60000, .on_done = on_done, .cb_arg = (void *)1};
    CHECK_EQ(ax_submit(s, &f, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&started), 10000));
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, shutdown_thread, s), 0);
    /* The drain has begun once submissions are refused. */
    ax_spec probe = {.fn = fail_twice, .timeout_ms = 1000};
    CHECK(WAIT_UNTIL(ax_submit(s, &probe, NULL) == AX_ESHUTDOWN, 10000));
    atomic_store(&go, 1);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(atomic_load(&done_n), 2);
    fprintf(stderr, "error: %s\n", last[1].error);
    CHECK_EQ(last[1].state, AX_STATE_FAILED);
    CHECK_EQ(last[1].attempts, 1);
    CHECK(strstr(last[1].error, "returned 5") != NULL);
    CHECK(strstr(last[1].error, "; not retried: the scheduler is shutting down") != NULL);
    ax_free(s);
    return 0;
}
