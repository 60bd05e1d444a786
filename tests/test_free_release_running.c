/* test_free_release_running.c - ax_free does not free the scheduler under
 * an on_release still running on a thread of the user's (review of stop
 * 30: ax_free's wait for callbacks in progress ran out, it freed the job
 * table anyway, and the on_release's return in ax_cancel's thread freed
 * its job into it: ASan, heap-use-after-free in job_free_locked).
 *
 * In a forked child (ax_free leaks the scheduler): a delayed task with an
 * on_release that runs until ax_free has returned; another thread cancels it, which runs the
 * on_release in that thread; once it runs, ax_free with
 * shutdown_timeout_ms 200. Expected: ax_free returns, says on stderr that
 * a callback still ran and that it leaks the scheduler, and the on_release
 * and ax_cancel then finish (ax_cancel returns 0) without touching freed
 * memory (ASan/TSan builds would report it).
 */
#include "fork_capture.h"

#include <pthread.h>
#include <string.h>

static atomic_int in_rel, rel_done, free_returned;
static ax_sched *sched;
static uint64_t task_id;
static atomic_int cancel_rc = -1;

static int quick(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void slow_release(void *arg)
{
    (void)arg;
    atomic_store(&in_rel, 1);
    /* Until ax_free has returned (a cap of 30 s): not a fixed 600 ms, which
     * a loaded machine could use up before ax_free's 200 ms did. */
    WAIT_UNTIL(atomic_load(&free_returned), 30000);
    atomic_store(&rel_done, 1);
}

static void *canceller(void *arg)
{
    (void)arg;
    atomic_store(&cancel_rc, ax_cancel(sched, task_id));
    return NULL;
}

static void child(int out_fd)
{
    if (dup2(out_fd, STDERR_FILENO) < 0) _exit(10);
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.shutdown_timeout_ms = 200;
    if (ax_new(&c, &sched) != 0) _exit(11);
    ax_spec sp = {.fn = quick, .timeout_ms = 1000, .delay_ms = 60000, .on_release = slow_release};
    if (ax_submit(sched, &sp, &task_id) != 0) _exit(12);
    pthread_t th;
    if (pthread_create(&th, NULL, canceller, NULL) != 0) _exit(13);
    if (!WAIT_UNTIL(atomic_load(&in_rel) == 1, 30000)) _exit(14);
    ax_free(sched);
    bool done = atomic_load(&rel_done);
    atomic_store(&free_returned, 1);
    fprintf(stderr, "ax_free returned, on_release %s\n", done ? "done" : "still running");
    pthread_join(th, NULL);
    fprintf(stderr, "ax_cancel returned %d\n", atomic_load(&cancel_rc));
    fflush(stderr);
    _exit(0);
}

int main(void)
{
    static char out[65536];
    fork_capture_ok("child", child, out, sizeof out, 60000);
    CHECK(strstr(out, "ax_free returned, on_release still running") != NULL);
    CHECK(strstr(out, "1 on_done / on_release callback(s) still running or waiting to run") !=
          NULL);
    CHECK(strstr(out, "leaking the scheduler") != NULL);
    CHECK(strstr(out, "ax_cancel returned 0") != NULL);
    puts("test_free_release_running: ok");
    return 0;
}
