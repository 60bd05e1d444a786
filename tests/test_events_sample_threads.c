/* test_events_sample_threads - ax_events_filter's sample_every keeps about
 * 1 task in N whatever each thread submits, a thread per request included.
 *
 * Review of 5e6205b: sampling was by id, and a thread takes the ids'
 * sequence in blocks of 256 (job.c), so a thread that submits one task
 * always took the first number of a block: with sample_every 2, 400 threads
 * of one task each kept none (0 SUBMITTED events, against 200 before the
 * blocks); 100 threads of 100 tasks with sample_every 256 kept none either
 * (39 before). Now each thread keeps 1 in N of its own submissions from a
 * random one. The counts are binomial: the bounds below are 8 standard
 * deviations from the mean (a chance below 1e-14 of a false failure), far
 * from the 0 of the defect. Every sampled task has all three events.
 *
 * Review of 5a1824d: a plain per-thread counter kept all of one scheduler's
 * tasks and none of the other's when a thread submits to two in turn
 * (now: one at a random position of each window of N); and threads made
 * one after another drew the same random start from a coarse clock (400 x
 * 1 kept 292, 112, 86 with a 4 ms clock): CTest runs this test a second
 * time with CLOCK_MONOTONIC at 4 ms (coarse_clock.c). */
#include "util.h"

#include <pthread.h>

static ax_sched *s;
static atomic_uint ev_count[AX_EV_COUNT];
static unsigned per_thread;

static void on_event(const ax_event *ev, void *arg)
{
    (void)arg;
    atomic_fetch_add(&ev_count[ev->kind], 1);
}

static int ok(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void *submitter(void *arg)
{
    (void)arg;
    for (unsigned k = 0; k < per_thread; k++) {
        ax_spec sp = {.fn = ok, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    return NULL;
}

/* nthreads threads one after another (each a fresh thread), per_thread
 * tasks each, sample_every every; the SUBMITTED events kept. */
static unsigned round_of(unsigned nthreads, unsigned n, unsigned every)
{
    s = test_sched(2, 64);
    for (int k = 0; k < AX_EV_COUNT; k++)
        atomic_store(&ev_count[k], 0);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    CHECK_EQ(ax_events_filter(s, AX_EVMASK_ALL, every), 0);
    CHECK_EQ(ax_events_lossless(s, true), 0); /* counts, not a full buffer's drops */
    per_thread = n;
    for (unsigned i = 0; i < nthreads; i++) {
        pthread_t th;
        CHECK_EQ(pthread_create(&th, NULL, submitter, NULL), 0);
        CHECK_EQ(pthread_join(th, NULL), 0);
    }
    /* Every task ran (ax_shutdown would cancel the queued ones). */
    CHECK(WAIT_UNTIL(test_stats(s).succeeded == (uint64_t)nthreads * n, 120000));
    CHECK_EQ(ax_shutdown(s, 60000), 0);
    CHECK_EQ(ax_events_flush(s), 0);
    unsigned sub = atomic_load(&ev_count[AX_EV_SUBMITTED]);
    fprintf(stderr, "%u threads x %u tasks, sample_every %u: %u SUBMITTED kept (mean %u)\n",
            nthreads, n, every, sub, nthreads * n / every);
    CHECK_EQ(ax_events_dropped(s), 0);
    CHECK_EQ(atomic_load(&ev_count[AX_EV_STARTED]), sub);
    CHECK_EQ(atomic_load(&ev_count[AX_EV_SUCCEEDED]), sub);
    ax_free(s);
    return sub;
}

/* One thread submits to two schedulers in turn, 200 tasks each, both
 * sampling 1 in 2: each keeps about half of its own. */
static atomic_uint two_count[2];

static void on_event_two(const ax_event *ev, void *arg)
{
    if (ev->kind == AX_EV_SUBMITTED)
        atomic_fetch_add(&two_count[(uintptr_t)arg], 1);
}

static void two_schedulers(void)
{
    ax_sched *t[2];
    for (uintptr_t k = 0; k < 2; k++) {
        t[k] = test_sched(1, 64);
        atomic_store(&two_count[k], 0);
        CHECK_EQ(ax_events_callback(t[k], on_event_two, (void *)k), 0);
        CHECK_EQ(ax_events_filter(t[k], AX_EVMASK_ALL, 2), 0);
        CHECK_EQ(ax_events_lossless(t[k], true), 0);
    }
    for (int i = 0; i < 400; i++) {
        ax_spec sp = {.fn = ok, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(t[i % 2], &sp, NULL), 0);
    }
    for (int k = 0; k < 2; k++) {
        CHECK(WAIT_UNTIL(test_stats(t[k]).succeeded == 200, 120000));
        CHECK_EQ(ax_shutdown(t[k], 60000), 0);
        CHECK_EQ(ax_events_flush(t[k]), 0);
    }
    unsigned a = atomic_load(&two_count[0]), b = atomic_load(&two_count[1]);
    fprintf(stderr, "one thread, two schedulers in turn, sample_every 2: %u and %u of 200 kept\n",
            a, b);
    /* Binomial(200, 1/2) each: mean 100, sd 7.1; together exactly 200. */
    CHECK(a >= 43 && a <= 157);
    CHECK_EQ(a + b, 200);
    ax_free(t[0]);
    ax_free(t[1]);
}

int main(void)
{
    /* Binomial(400, 1/2): mean 200, sd 10. */
    unsigned a = round_of(400, 1, 2);
    CHECK(a >= 120 && a <= 280);
    /* 100 threads x 100 tasks, 1 in 256: each thread keeps 0 or 1 (its
     * random start), 100/256 on average: mean 39.1, sd 4.9. */
    unsigned b = round_of(100, 100, 256);
    CHECK(b >= 1 && b <= 78);
    /* One thread, consecutive submissions: exact. */
    unsigned c = round_of(1, 400, 4);
    CHECK_EQ(c, 100);
    two_schedulers();
    return 0;
}
