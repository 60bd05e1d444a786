/* test_event_lossless_refused.c - lossless mode loses no refusal and no
 * long event (user trial, D1/D2).
 *
 * ax_events_lossless(s, true) promises that a producer whose buffer is full
 * waits instead of dropping (only the event callback's own events may be
 * dropped). Two paths dropped anyway when 4 threads submitted refused specs
 * as fast as they could:
 *  - a spec refused at validation (or by an open breaker) emitted its
 *    REJECTED event under the scheduler's lock without reserving room first,
 *    so a full shared ring dropped it (~45 000 of 80 000);
 *  - an event whose message and ref are long (>= 108 bytes) goes to a small
 *    ring of its own, which never waited (~38 000 of 80 000).
 * Checked exactly: 0 dropped, one JSON line per refusal, and each line names
 * the ref when one was given. */
#include "check.h"

#include <ax.h>
#include <pthread.h>

#define THREADS 4
#define PER_THREAD 5000

static ax_sched *S;
static const char *REF = "order-0123456789-0123456789-0123456789-0123456789-0123456789";

static int nop(ax_task *t, void *a)
{
    (void)t;
    (void)a;
    return 0;
}

static void *submitter(void *arg)
{
    bool with_ref = arg != NULL;
    /* max_retry above the cap: refused at validation, a REJECTED event whose
     * message is the detail (long, with the ref) */
    ax_spec sp = {.fn = nop, .timeout_ms = 10, .max_retry = 999, .ref = with_ref ? REF : NULL};
    for (int i = 0; i < PER_THREAD; i++)
        CHECK_EQ(ax_submit(S, &sp, NULL), AX_EINVAL);
    return NULL;
}

static void run(bool with_ref)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    CHECK_EQ(ax_new(&cfg, &S), AX_OK);
    FILE *f = tmpfile();
    CHECK(f != NULL);
    CHECK_EQ(ax_events_json(S, f), AX_OK);
    CHECK_EQ(ax_events_lossless(S, true), AX_OK);
    pthread_t th[THREADS];
    for (int k = 0; k < THREADS; k++)
        CHECK_EQ(pthread_create(&th[k], NULL, submitter, with_ref ? (void *)1 : NULL), 0);
    for (int k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
    CHECK_EQ(ax_events_flush(S), AX_OK);
    ax_stats st;
    CHECK_EQ(ax_stats_get(S, &st), AX_OK);
    CHECK_EQ(st.rejected, THREADS * PER_THREAD);
    unsigned long long dropped = ax_events_dropped(S);
    CHECK_EQ(ax_shutdown(S, 5000), AX_OK);
    ax_free(S);

    rewind(f);
    char line[4096];
    long lines = 0, rejected = 0, with = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        if (strstr(line, "\"event\":\"rejected\"")) rejected++;
        if (strstr(line, REF)) with++;
    }
    fclose(f);
    fprintf(stderr, "%s ref: %ld lines, %ld rejected, %ld naming the ref, %llu dropped\n",
           with_ref ? "with a" : "without a", lines, rejected, with, dropped);
    CHECK_EQ(dropped, 0);
    CHECK_EQ(rejected, THREADS * PER_THREAD);
    CHECK_EQ(lines, THREADS * PER_THREAD);
    CHECK_EQ(with, with_ref ? THREADS * PER_THREAD : 0);
}

int main(void)
{
    run(false); /* short messages: the shared ring */
    run(true);  /* message + ref >= 108 bytes: the long ring */
    return 0;
}
