/* test_ends_books - the counts a task's end moves without a lock, summed on
 * read, keep exact books whichever thread ends the task.
 *
 * A worker counts the slots it frees, the tasks it takes out of the load,
 * the on_done / on_release calls it begins and ends and its live coroutines
 * on a line of its own (struct worker: ends); every other thread (ax_cancel's
 * caller, the watchdog, the callback pool) on the scheduler's shared counts;
 * the lock holder folds both in (issue 10's hot-path budget). Here every
 * kind of ender works at once, with more workers than cores, the cap
 * small enough to be full most of the time (a slot freed on a worker's own
 * line must still start the next task) and max_orphans small enough that
 * the gate closes and must open again:
 *   - 3 submitting threads, 2 400 tasks each: quick, failing, sleeping,
 *     yielding, cancelled by another thread while queued or running, and
 *     orphans (a 2 ms deadline, then 10 ms of ax_yield ignoring it);
 *   - half of them with an on_release, some slow.
 * Then: on_done exactly once per admitted task, on_release once per task
 * that has one, the outcomes add up to `submitted`, and once the orphans
 * returned no slot, load or orphan is left. Last, ax_shutdown right after a
 * burst of tasks with slow on_done and on_release calls: when it returns
 * every one of them has returned (the callbacks counted on workers' lines
 * are waited for like the others). */
#include "util.h"

#include <pthread.h>

#define SUBMITTERS 3
#define PER_THREAD 2400
#define TOTAL (SUBMITTERS * PER_THREAD)
#define LATE 400 /* the burst before ax_shutdown */

static ax_sched *s;
static atomic_uchar done_once[TOTAL + LATE];
static atomic_uint done_n, released_n, with_release_n, admitted_n, late_admitted_n;
static atomic_uint orphans_begun, orphans_returned;
static _Atomic uint64_t cancel_ids[TOTAL];
static atomic_uint ncancel_ids;
static atomic_bool submitting_over;

struct targ {
    unsigned i;
    unsigned kind;
};
static struct targ static_args[TOTAL + LATE];

static int task_fn(ax_task *t, void *arg)
{
    struct targ *a = arg;
    switch (a->kind) {
    case 0:
        return 0;
    case 1:
        return 7;
    case 2:
        return ax_sleep(t, 2) == 0 ? 0 : 1;
    case 3: { /* an orphan: ignores its 2 ms deadline */
        atomic_fetch_add(&orphans_begun, 1);
        uint64_t end = ax_now_ns() + 10000000u;
        while (ax_now_ns() < end)
            (void)ax_yield(t);
        atomic_fetch_add(&orphans_returned, 1);
        return 0;
    }
    case 4:
        for (int k = 0; k < 5; k++)
            (void)ax_yield(t);
        return 0;
    default: /* 5: cancelled by the cancelling thread, queued or here */
        return ax_sleep(t, 20) == 0 ? 0 : 1;
    }
}

static void on_done(const ax_result *r, void *cb_arg)
{
    unsigned i = (unsigned)(uintptr_t)cb_arg;
    CHECK_EQ(atomic_fetch_add(&done_once[i], 1), 0); /* exactly once */
    if (i >= TOTAL && i % 4 == 0)
        usleep(3000); /* a slow on_done in the burst before ax_shutdown */
    (void)r;
    atomic_fetch_add(&done_n, 1);
}

static void on_release(void *arg)
{
    struct targ *a = arg;
    if (a->i % 10 == 0 || a->i >= TOTAL)
        usleep(a->i >= TOTAL ? 3000 : 500);
    free(a);
    atomic_fetch_add(&released_n, 1);
}

static unsigned kind_of(unsigned i)
{
    /* one in 40 an orphan: enough to hold the gate, few enough to end */
    return i % 40 == 3 ? 3 : (i % 6 == 3 ? 0 : i % 6);
}

static int submit_one(unsigned i, unsigned kind)
{
    /* With an on_release the arg is the task's until then (freed there:
     * ASan sees a release missed or doubled); without, it must outlive an
     * orphan's run, so it is static. */
    bool rel = i % 2 == 0;
    struct targ *a = rel ? malloc(sizeof *a) : &static_args[i];
    CHECK(a != NULL);
    a->i = i;
    a->kind = kind;
    ax_spec sp = {.fn = task_fn,
                  .arg = a,
                  .on_done = on_done,
                  .cb_arg = (void *)(uintptr_t)i,
                  .timeout_ms = kind == 3 ? 2 : 30000,
                  .priority = (ax_priority)(i % 3),
                  .on_release = rel ? on_release : NULL};
    uint64_t id = 0;
    int rc;
    while ((rc = ax_submit(s, &sp, &id)) == AX_EFULL || rc == AX_ESHED)
        usleep(200);
    if (rc != 0) {
        if (rel)
            free(a);
        return rc;
    }
    if (rel)
        atomic_fetch_add(&with_release_n, 1);
    if (kind == 5)
        atomic_store(&cancel_ids[atomic_fetch_add(&ncancel_ids, 1)], id);
    return 0;
}

static void *submitter(void *p)
{
    unsigned base = (unsigned)(uintptr_t)p * PER_THREAD;
    for (unsigned k = 0; k < PER_THREAD; k++) {
        unsigned i = base + k;
        CHECK_EQ(submit_one(i, kind_of(i)), 0);
        atomic_fetch_add(&admitted_n, 1);
    }
    return NULL;
}

static void *canceller(void *p)
{
    (void)p;
    unsigned next = 0;
    for (;;) {
        unsigned n = atomic_load(&ncancel_ids);
        if (next == n) {
            if (atomic_load(&submitting_over) && next == atomic_load(&ncancel_ids))
                return NULL;
            usleep(100);
            continue;
        }
        int rc = ax_cancel(s, atomic_load(&cancel_ids[next++]));
        CHECK(rc == 0 || rc == AX_ENOTFOUND); /* it may have ended first */
    }
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 4;
    c.max_concurrency = 6;
    c.max_orphans = 3;
    c.grace_ms = 60000; /* no lingering reports for the orphans */
    s = test_sched_cfg(&c);

    pthread_t th[SUBMITTERS], ct;
    CHECK_EQ(pthread_create(&ct, NULL, canceller, NULL), 0);
    for (uintptr_t k = 0; k < SUBMITTERS; k++)
        CHECK_EQ(pthread_create(&th[k], NULL, submitter, (void *)k), 0);
    for (int k = 0; k < SUBMITTERS; k++)
        CHECK_EQ(pthread_join(th[k], NULL), 0);
    atomic_store(&submitting_over, true);
    CHECK_EQ(pthread_join(ct, NULL), 0);
    CHECK_EQ(atomic_load(&admitted_n), TOTAL);

    /* Liveness only: generous for a busy machine under a sanitizer. */
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == TOTAL, 240000));
    CHECK(WAIT_UNTIL(atomic_load(&orphans_returned) == atomic_load(&orphans_begun), 60000));
    CHECK(WAIT_UNTIL(atomic_load(&released_n) == atomic_load(&with_release_n), 60000));
    ax_stats st = test_stats(s);
    fprintf(stderr,
            "submitted %llu: succeeded %llu failed %llu timed out %llu cancelled %llu; "
            "orphans begun %u\n",
            (unsigned long long)st.submitted, (unsigned long long)st.succeeded,
            (unsigned long long)st.failed, (unsigned long long)st.timed_out,
            (unsigned long long)st.cancelled, atomic_load(&orphans_begun));
    CHECK_EQ(st.submitted, (uint64_t)TOTAL);
    CHECK_EQ(st.succeeded + st.failed + st.timed_out + st.cancelled, (uint64_t)TOTAL);
    CHECK_EQ(st.running, 0);
    CHECK_EQ(st.orphans, 0);
    for (int p = 0; p < AX_PRIO_COUNT; p++)
        CHECK_EQ(st.queued[p], 0);
    uint64_t n[6] = {0};
    for (unsigned i = 0; i < TOTAL; i++)
        n[kind_of(i)]++;
    CHECK_EQ(st.failed, n[1]);    /* kind 1 only, no retries */
    /* The orphans' 2 ms deadlines (or queued past them); a worker thread
     * the kernel kept off its CPU past the deadline may see its run return
     * first, which then succeeds. */
    CHECK_LE(st.timed_out, n[3]);
    CHECK_LE(st.cancelled, n[5]); /* a cancel may come after the task ended */
    CHECK_EQ(st.succeeded, n[0] + n[2] + n[4] + (n[3] - st.timed_out) + (n[5] - st.cancelled));
    for (unsigned i = 0; i < TOTAL; i++)
        CHECK_EQ(atomic_load(&done_once[i]), 1);

    /* A burst with slow callbacks, then ax_shutdown at once. */
    for (unsigned i = TOTAL; i < TOTAL + LATE; i++) {
        int rc = submit_one(i, i % 3 == 0 ? 2 : 0);
        CHECK_EQ(rc, 0);
        atomic_fetch_add(&late_admitted_n, 1);
    }
    CHECK_EQ(ax_shutdown(s, 120000), 0);
    /* Nothing may still run now: read without waiting. */
    CHECK_EQ(atomic_load(&done_n), TOTAL + LATE);
    CHECK_EQ(atomic_load(&released_n), atomic_load(&with_release_n));
    for (unsigned i = TOTAL; i < TOTAL + LATE; i++)
        CHECK_EQ(atomic_load(&done_once[i]), 1);
    st = test_stats(s);
    CHECK_EQ(st.running, 0);
    CHECK_EQ(st.orphans, 0);
    ax_free(s);
    return 0;
}
