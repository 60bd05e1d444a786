/* test_free_on_done_stuck.c - ax_free with an on_done that never returns
 * says so (a new user's trial of 2a0c1a9: it said "0 task(s) never
 * returned" and listed the task as succeeded, naming no cause).
 *
 * In a forked child (ax_free leaks the held scheduler): one task whose
 * on_done blocks its worker for good, shutdown_timeout_ms 300. Expected:
 * ax_free returns, and stderr names the on_done still running.
 */
#include "fork_capture.h"

#include <string.h>

static atomic_int in_cb;

static int quick(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void stuck(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_store(&in_cb, 1);
    for (;;)
        usleep(1000);
}

static void child(int out_fd)
{
    if (dup2(out_fd, STDERR_FILENO) < 0) _exit(10);
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.shutdown_timeout_ms = 300;
    ax_sched *s = NULL;
    if (ax_new(&c, &s) != 0) _exit(11);
    ax_spec sp = {.fn = quick, .timeout_ms = 1000, .on_done = stuck};
    if (ax_submit(s, &sp, NULL) != 0) _exit(12);
    if (!WAIT_UNTIL(atomic_load(&in_cb) == 1, 30000)) _exit(13);
    ax_free(s);
    fprintf(stderr, "ax_free returned\n");
    fflush(stderr);
    _exit(0);
}

int main(void)
{
    static char out[65536];
    fork_capture_ok("child", child, out, sizeof out, 60000);
    CHECK(strstr(out, "ax_free returned") != NULL);
    CHECK(strstr(out, "1 on_done / on_release callback(s) still running") != NULL);
    puts("test_free_on_done_stuck: ok");
    return 0;
}
