/* test_free_callback_stuck.c - ax_free within shutdown_timeout_ms when a
 * callback on the callback pool does not return (new-user trial, stop 30:
 * ax_free joined the pool's threads without a bound and waited out a 60 s
 * on_timeout with shutdown_timeout_ms 200; "within shutdown_timeout_ms"
 * is what ax.h promises).
 *
 * In a forked child (ax_free leaks the scheduler the stuck thread may still
 * use): one task times out after 20 ms; its on_timeout blocks its callback
 * thread for good; callback_timeout_ms 100, shutdown_timeout_ms 300; then
 * ax_shutdown(s, 0) and ax_free. Expected: ax_free returns (the child says
 * so), its stderr names the stuck callback and the leak, and the
 * watchdog's overrun line names the on_timeout and its task.
 */
#include "fork_capture.h"

#include <inttypes.h>
#include <string.h>

static atomic_int in_cb;

static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 3600 * 1000); /* AX_ETIMEDOUT at the deadline */
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
    c.callback_timeout_ms = 100;
    c.shutdown_timeout_ms = 300;
    ax_sched *s = NULL;
    if (ax_new(&c, &s) != 0) _exit(11);
    ax_spec sp = {.fn = sleeper, .timeout_ms = 20, .on_timeout = stuck};
    uint64_t id = 0;
    if (ax_submit(s, &sp, &id) != 0) _exit(12);
    if (!WAIT_UNTIL(atomic_load(&in_cb) == 1, 30000)) _exit(13);
    /* The overrun is counted while the on_timeout runs (the watchdog). */
    ax_stats st;
    if (!WAIT_UNTIL(ax_stats_get(s, &st) == 0 && st.callback_overruns == 1, 30000)) _exit(14);
    fprintf(stderr, "task id %" PRIu64 "\n", id);
    if (ax_shutdown(s, 0) != 0) _exit(15); /* on_timeout is not waited for (ax.h) */
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
    CHECK(strstr(out, "a callback on the callback pool") != NULL);
    CHECK(strstr(out, "leaking the scheduler") != NULL);
    /* "ax: an on_timeout of task <id> has been running for more than 100 ms" */
    const char *idl = strstr(out, "task id ");
    CHECK(idl != NULL);
    char want[96];
    unsigned long long id = strtoull(idl + 8, NULL, 10);
    snprintf(want, sizeof want, "an on_timeout of task %llu has been running", id);
    CHECK(strstr(out, want) != NULL);
    puts("test_free_callback_stuck: ok");
    return 0;
}
