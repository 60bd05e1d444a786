/* The job table's spare chunk (job.c: job_table_prefill). A prefill that
 * finds the free count back up by the time its chunk is ready keeps the
 * chunk as the one spare. While the spare is there, a dip of the free
 * count below JOB_PREFILL_LOW makes no chunk: each such dip used to make
 * one (256 KiB zeroed, populated and numbered) and free it, 260-1 746 times
 * in a run of bench ax_fullpath against 16-47 chunks linked. A dip below
 * JOB_PREFILL_FLOOR links the spare, numbered already (or again, if the
 * table's size it was numbered from went stale).
 *
 * White-box: the test fakes nfree_hint, the lock-free count submitters
 * look at, to stand for a dip that passed by the time the prefill took the
 * lock (in a service: workers freeing jobs meanwhile), with the workers
 * paused so that nothing else moves the table. */
#include "util.h"

#include "internal.h"

static int work(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

struct table {
    unsigned nchunks, nfree;
    struct job *spare;
    uint64_t dropped;
};

static struct table look(ax_sched *s)
{
    pthread_mutex_lock(&s->lock);
    struct table t = {s->nchunks, s->nfree, s->job_spare, s->job_dropped};
    pthread_mutex_unlock(&s->lock);
    return t;
}

/* What submitters would read if the count were n (restored by fake(s, -1)). */
static void fake(ax_sched *s, long n)
{
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->nfree_hint, n < 0 ? s->nfree : (unsigned)n);
    pthread_mutex_unlock(&s->lock);
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.capacity[AX_PRIO_NORMAL] = 8192;
    c.shed_ratio = 1.0;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), 0);
    CHECK_EQ(ax_pause(s), 0);
    ax_spec sp = {.fn = work, .timeout_ms = 60000};
    long queued = 0;

    /* The first submit grows the first chunk, and its prefill a second. */
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    queued++;
    struct table t0 = look(s);
    CHECK_EQ(t0.nchunks, 2u);
    CHECK_EQ(t0.nfree, 2u * AX_JOB_CHUNK - 1);
    CHECK(t0.spare == NULL);

    /* A dip that passed: the chunk becomes the spare. */
    fake(s, 0);
    job_table_prefill(s);
    fake(s, -1);
    struct table t1 = look(s);
    CHECK_EQ(t1.nchunks, 2u);
    CHECK(t1.spare != NULL);
    CHECK_EQ(t1.dropped, 0u);

    /* More dips that pass, shallow and deep: no chunk made, none freed,
     * the spare kept (the old code made one at each and freed it). */
    for (int i = 0; i < 50; i++) {
        fake(s, i % 2 ? JOB_PREFILL_FLOOR : JOB_PREFILL_FLOOR - 1);
        job_table_prefill(s);
        fake(s, -1);
    }
    struct table t2 = look(s);
    CHECK_EQ(t2.dropped, 0u);
    CHECK_EQ(t2.nchunks, 2u);
    CHECK(t2.spare == t1.spare);

    /* The spare numbered from a guess gone stale (a chunk linked between
     * its numbering and its link; here forced: numbered one chunk low):
     * its link numbers it again for its place. */
    pthread_mutex_lock(&s->lock);
    unsigned stale = (s->nchunks - 1) * AX_JOB_CHUNK;
    for (unsigned k = 0; k < AX_JOB_CHUNK; k++)
        s->job_spare[k].id = stale + k;
    s->job_spare_base = stale;
    pthread_mutex_unlock(&s->lock);

    /* Real submits down to the floor: above it nothing happens; the
     * submit that takes the count below it links the spare. */
    for (;;) {
        unsigned before = look(s).nfree;
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        queued++;
        struct table t = look(s);
        if (t.nchunks != 2u) {
            CHECK_EQ(before, (unsigned)JOB_PREFILL_FLOOR);
            break;
        }
        CHECK(t.spare == t1.spare);
        CHECK_LE((unsigned)JOB_PREFILL_FLOOR, t.nfree);
    }
    /* The submit that took the count below the floor linked the spare. */
    struct table t3 = look(s);
    CHECK_EQ(t3.nchunks, 3u);
    CHECK(t3.spare == NULL);
    CHECK_EQ(t3.dropped, 0u);
    CHECK_EQ((long)t3.nfree + queued, 3L * AX_JOB_CHUNK);
    pthread_mutex_lock(&s->lock);
    CHECK(s->chunks[2] == t1.spare);
    for (unsigned ci = 0; ci < s->nchunks; ci++)
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++)
            CHECK_EQ(s->chunks[ci][k].id & (AX_MAX_JOBS - 1), (uint64_t)ci * AX_JOB_CHUNK + k);
    unsigned listed = 0;
    for (struct job *j = s->job_free; j && listed <= s->nfree; j = j->next)
        listed++;
    CHECK_EQ(listed, s->nfree);
    pthread_mutex_unlock(&s->lock);

    /* Every task runs once. */
    ax_stats st;
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL((ax_stats_get(s, &st), st.succeeded == (uint64_t)queued), 60000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    CHECK_EQ(ax_stats_get(s, &st), 0);
    CHECK_EQ(st.succeeded, (uint64_t)queued);
    ax_free(s);
    return 0;
}
