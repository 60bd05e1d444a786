/* test_free_budget.c - ax_free keeps within config.shutdown_timeout_ms
 * when workers are held (a new user's trial of 16d186c).
 *
 * ax.h promises ax_free does everything "all within
 * config.shutdown_timeout_ms". It spent the budget on the drain, then gave
 * every worker not yet joined at least 100 ms more, one after the other:
 * 100 ms past the budget per held worker (8 held, 200 ms budget: 1 043 ms).
 *
 * In a forked child (ax_free leaks a held scheduler and its threads), six
 * workers, five of them held by tasks that block their thread in usleep and
 * never return, shutdown_timeout_ms 1000. Expected: ax_free returns within
 * the budget (checked with 350 ms to spare for a busy machine; the old code
 * needs at least 1 100 + 5 x 100 ms), and says 5 workers are held, not 6:
 * the one no task holds is still joined.
 */
#include "fork_capture.h"

#include <string.h>

#define WORKERS 6
#define HELD 5
#define BUDGET_MS 1000
#define SLACK_MS 350

static atomic_int holding;

static int hold_thread(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&holding, 1);
    for (;;)
        usleep(1000); /* blocks the worker's thread; no ax call, no CPU */
    return 0;
}

static void child(int out_fd)
{
    if (dup2(out_fd, STDERR_FILENO) < 0)
        _exit(10);
    ax_config c;
    ax_config_default(&c);
    c.workers = WORKERS;
    c.max_concurrency = 16;
    c.shutdown_timeout_ms = BUDGET_MS;
    ax_sched *s = NULL;
    if (ax_new(&c, &s) != 0)
        _exit(11);
    for (int i = 0; i < HELD; i++) {
        ax_spec sp = {.fn = hold_thread, .timeout_ms = 600000};
        if (ax_submit(s, &sp, NULL) != 0)
            _exit(12);
    }
    /* A held worker hands its queued jobs to the others (the watchdog):
     * liveness only. */
    if (!WAIT_UNTIL(atomic_load(&holding) == HELD, 20000))
        _exit(13);
    child_free_timed(s);
    _exit(0);
}

int main(void)
{
    static char out[65536];
    fork_capture_ok("child", child, out, sizeof out, 120000);
    unsigned long long ms = fork_capture_free_ms(out);
    CHECK_LE(ms, BUDGET_MS + SLACK_MS);
    char held[64];
    snprintf(held, sizeof held, "%d worker thread(s) still held", HELD);
    CHECK(strstr(out, held) != NULL);
    return 0;
}
