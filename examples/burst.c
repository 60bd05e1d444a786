/* burst.c - a burst of calls to a flaky upstream, run through ax.
 *
 * 3 000 tasks in HIGH, NORMAL and LOW fan out to a simulated upstream whose
 * latency is 50 ms .. 3 s with a 10% error rate (an ax_sleep stands in for
 * the network wait: the coroutine parks, the worker thread does not). Each
 * task has a 1 s timeout and up to 2 retries with exponential back-off; the
 * scheduler caps concurrency at 500 and sheds NORMAL/LOW above 80% of its
 * queues. The burst goes in with one ax_submit_batch call: each task is
 * admitted or refused as ax_submit would, with the scheduler's lock taken
 * once per 8 tasks. At the end it prints what happened to every task.
 *
 * Build: cc -std=c11 burst.c $(pkg-config --cflags --libs ax) -o burst
 * Run:   ./burst            (about 12 s)
 *        ./burst --quick    300 tasks instead (the test suite runs this)
 * Exit status 1 if a task admitted did not end exactly once.
 */
#define _DEFAULT_SOURCE
#include <ax.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_uint ended[8];

/* The "upstream call": 90% answer after 50 ms..3 s, 10% fail at once. */
static int call_upstream(ax_task *t, void *arg)
{
    (void)arg;
    unsigned r = (unsigned)(ax_task_id(t) * 2654435761u >> 7) ^ ax_task_attempt(t) * 977u;
    if (r % 10 == 0) {
        ax_task_set_error(t, "upstream answered 503");
        return 503;
    }
    uint64_t latency_ms = 50 + r % 2950;
    int rc = ax_sleep(t, latency_ms); /* returns AX_ETIMEDOUT at the deadline */
    return rc;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_fetch_add(&ended[r->state], 1);
}

int main(int argc, char **argv)
{
    unsigned ntasks = 3000;
    if (argc == 2 && strcmp(argv[1], "--quick") == 0) {
        ntasks = 300;
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    ax_config cfg;
    ax_config_default(&cfg); /* cap 500, queues 10k/30k/10k, shed at 80% */
    cfg.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 100, 1000, 50};
    ax_sched *s;
    int rc = ax_new(&cfg, &s);
    if (rc != AX_OK) {
        fprintf(stderr, "ax_new: %s: %s\n", ax_strerror(rc), ax_error_detail());
        return 1;
    }
    ax_spec *specs = calloc(ntasks, sizeof *specs);
    int *rcs = calloc(ntasks, sizeof *rcs);
    if (!specs || !rcs) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < ntasks; i++)
        specs[i] = (ax_spec){
            .fn = call_upstream,
            .priority = i % 10 == 0 ? AX_PRIO_HIGH : i % 3 ? AX_PRIO_NORMAL : AX_PRIO_LOW,
            .timeout_ms = 1000,
            .max_retry = 2,
            .on_done = on_done,
        };
    /* One call for the burst; rcs[i] is what ax_submit would have said
     * (AX_ESHED / AX_EFULL / AX_ERATE under overload). */
    ax_submit_batch(s, specs, ntasks, rcs, NULL);
    unsigned admitted = 0, refused = 0;
    for (unsigned i = 0; i < ntasks; i++) {
        if (rcs[i] == AX_OK)
            admitted++;
        else
            refused++;
    }
    free(specs);
    free(rcs);
    printf("submitted %u tasks: %u admitted, %u refused\n", ntasks, admitted, refused);
    ax_stats st;
    do {
        sleep(1);
        ax_stats_get(s, &st);
        printf("running %3llu/%llu  queued H %llu N %llu L %llu  waiting to retry %llu  "
               "done %llu\n",
               (unsigned long long)st.running, (unsigned long long)st.limit,
               (unsigned long long)st.queued[AX_PRIO_HIGH],
               (unsigned long long)st.queued[AX_PRIO_NORMAL],
               (unsigned long long)st.queued[AX_PRIO_LOW], (unsigned long long)st.delayed,
               (unsigned long long)(st.succeeded + st.failed + st.timed_out + st.cancelled));
    } while (st.succeeded + st.failed + st.timed_out + st.cancelled < admitted);
    ax_shutdown(s, 1000);
    ax_stats_get(s, &st);
    printf("succeeded %u, failed %u, timed out %u (after %llu retries, %llu attempts)\n",
           atomic_load(&ended[AX_STATE_SUCCEEDED]), atomic_load(&ended[AX_STATE_FAILED]),
           atomic_load(&ended[AX_STATE_TIMED_OUT]), (unsigned long long)st.retried,
           (unsigned long long)st.started);
    ax_free(s);
    unsigned ends = 0;
    for (int i = 0; i < 8; i++)
        ends += atomic_load(&ended[i]);
    if (ends != admitted) {
        fprintf(stderr, "%u tasks admitted, %u ended\n", admitted, ends);
        return 1;
    }
    return 0;
}
