/* The job table grows ahead of several submitters (job.c: job_table_prefill).
 * Four threads queue 50 000 tasks each into a paused scheduler, so the
 * table must grow by ~196 chunks while they race. Every task is admitted,
 * and after ax_resume each runs once. And the chunks after the first are
 * populated outside the lock by a prefill, not grown cold under it: one
 * submitter populates, and the others, below JOB_PREFILL_FLOOR free jobs,
 * wait for it instead of taking more, so the table cannot run dry under
 * four threads unless the prefiller is held up past JOB_PREFILL_WAIT_NS
 * (20 ms), after which the waiters go on. Reviews found versions
 * where the others ran it dry: 309-334 of 391 chunks grown cold with 256
 * jobs of headroom and two submitters, 53-82 of 197 with a chunk's worth
 * and four, 71 of 212 in a CI run with the headroom doubling. */
#include "util.h"

#include "internal.h"

#include <pthread.h>

#define THREADS 4
#define PER 50000

static ax_sched *S;
static atomic_long ran, refused;

static int work(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&ran, 1);
    return 0;
}

static void *submitter(void *arg)
{
    (void)arg;
    ax_spec sp = {.fn = work, .timeout_ms = 60000};
    for (int i = 0; i < PER; i++)
        if (ax_submit(S, &sp, NULL) != AX_OK)
            atomic_fetch_add(&refused, 1);
    return NULL;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.capacity[AX_PRIO_NORMAL] = THREADS * PER + 64;
    c.shed_ratio = 1.0;
    CHECK_EQ(ax_new(&c, &S), 0);
    CHECK_EQ(ax_pause(S), 0);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, submitter, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(atomic_load(&refused), 0);

    pthread_mutex_lock(&S->lock);
    uint64_t chunks = S->nchunks, prefilled = S->job_prefilled, cold = S->job_grow_cold;
    pthread_mutex_unlock(&S->lock);
    fprintf(stderr, "chunks %" PRIu64 ": %" PRIu64 " by a prefill, %" PRIu64 " grown cold\n", chunks,
            prefilled, cold);
    CHECK_LE((uint64_t)THREADS * PER / AX_JOB_CHUNK, chunks);
    /* The first chunk, by the first submit; and at most a few more where
     * the prefiller was kept off its CPU past JOB_PREFILL_WAIT_NS (20 ms)
     * and the waiters went on. */
    CHECK_LE(1, cold);
    CHECK_LE(cold, 4);
    CHECK_EQ(prefilled + cold, chunks);
    /* Every job, queued or free, carries its own slot in its id: a prefill
     * numbers its chunk outside the lock from a guess of the table's size,
     * and the guess must have been right or corrected (link_chunk_locked).
     * And the free list holds the nfree jobs not queued. */
    pthread_mutex_lock(&S->lock);
    for (unsigned ci = 0; ci < S->nchunks; ci++)
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++)
            CHECK_EQ(S->chunks[ci][k].id & (AX_MAX_JOBS - 1), (uint64_t)ci * AX_JOB_CHUNK + k);
    unsigned listed = 0;
    for (struct job *j = S->job_free; j && listed <= S->nfree; j = j->next)
        listed++;
    CHECK_EQ(listed, S->nfree);
    CHECK_EQ((uint64_t)S->nfree + THREADS * PER, (uint64_t)S->nchunks * AX_JOB_CHUNK);
    pthread_mutex_unlock(&S->lock);

    CHECK_EQ(ax_resume(S), 0);
    CHECK(WAIT_UNTIL(atomic_load(&ran) == THREADS * PER, 120000));
    CHECK_EQ(ax_shutdown(S, 5000), 0);
    CHECK_EQ(atomic_load(&ran), THREADS * PER);
    ax_free(S);
    return 0;
}
