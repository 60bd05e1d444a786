/* A bucket's ring (internal.h: struct bucket): FIFO order survives gaps
 * left by cancels in the middle and at both ends, the compaction of a ring
 * full of gaps, growth while jobs are queued, positions wrapping past the
 * ring's size many times. One worker and one slot: the start order is the
 * dispatch order. */
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define MAXN 20000
static int started[MAXN];
static atomic_int nstarted, nrecorded;

static int record(ax_task *t, void *arg)
{
    (void)t;
    int i = atomic_fetch_add(&nstarted, 1);
    if (i < MAXN)
        started[i] = (int)(intptr_t)arg;
    atomic_fetch_add(&nrecorded, 1); /* after the write: the reader waits for this */
    return 0;
}

static ax_sched *make(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 1;
    c.capacity[AX_PRIO_LOW] = MAXN;
    c.capacity[AX_PRIO_NORMAL] = MAXN;
    c.capacity[AX_PRIO_HIGH] = MAXN;
    c.shed_ratio = 1.0;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), 0);
    return s;
}

/* Submit tag as a LOW task; its id in ids[tag]. */
static uint64_t ids[MAXN];
static void submit(ax_sched *s, int tag)
{
    ax_spec sp = {.fn = record, .arg = (void *)(intptr_t)tag, .priority = AX_PRIO_LOW,
                  .timeout_ms = 10000};
    CHECK_EQ(ax_submit(s, &sp, &ids[tag]), 0);
}

static bool gone[MAXN];

/* Resume, wait for `want` starts, and check they came in tag order with no
 * cancelled tag among them. */
static void run_and_check(ax_sched *s, int ntags, int want)
{
    atomic_store(&nstarted, 0);
    atomic_store(&nrecorded, 0);
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL(atomic_load(&nrecorded) == want, 30000));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 5000));
    int k = 0;
    for (int tag = 0; tag < ntags; tag++) {
        if (gone[tag])
            continue;
        CHECK_EQ(started[k], tag);
        k++;
    }
    CHECK_EQ(k, want);
    CHECK_EQ(atomic_load(&nstarted), want);
}

int main(void)
{
    ax_sched *s = make();

    /* 1. Gaps everywhere: cancel the first, the last, and every third one
     * in between, while paused. */
    CHECK_EQ(ax_pause(s), 0);
    int n = 3000, kept = 0;
    for (int tag = 0; tag < n; tag++)
        submit(s, tag);
    memset(gone, 0, sizeof gone);
    for (int tag = 0; tag < n; tag++) {
        if (tag == 0 || tag == n - 1 || tag % 3 == 1) {
            CHECK_EQ(ax_cancel(s, ids[tag]), 0);
            gone[tag] = true;
        }
    }
    for (int tag = 0; tag < n; tag++)
        kept += !gone[tag];
    CHECK_EQ(test_stats(s).queued[AX_PRIO_LOW], (uint64_t)kept);
    run_and_check(s, n, kept);

    /* 2. A ring full of gaps compacts: with a few jobs kept queued, submit
     * and cancel many more than the ring holds, so that its ends are held by
     * live jobs while gaps fill everything between them. */
    CHECK_EQ(ax_pause(s), 0);
    memset(gone, 0, sizeof gone);
    n = 0;
    for (int round = 0; round < 60; round++) {
        int first = n;
        for (int k = 0; k < 250; k++)
            submit(s, n++);
        submit(s, n++); /* kept: behind the 250, so their cancels leave gaps */
        for (int k = first; k < first + 250; k++) {
            CHECK_EQ(ax_cancel(s, ids[k]), 0);
            gone[k] = true;
        }
    }
    submit(s, n++); /* kept */
    CHECK_EQ(test_stats(s).queued[AX_PRIO_LOW], 61);
    run_and_check(s, n, 61);

    /* 3. Wrapping: positions run past the ring's size many times while a
     * small queue moves through it (submit 2, run 1, ...). */
    memset(gone, 0, sizeof gone);
    atomic_store(&nstarted, 0);
    atomic_store(&nrecorded, 0);
    for (int tag = 0; tag < MAXN / 2; tag++)
        submit(s, tag);
    CHECK(WAIT_UNTIL(atomic_load(&nrecorded) == MAXN / 2, 30000));
    for (int k = 0; k < MAXN / 2; k++)
        CHECK_EQ(started[k], k);

    /* 4. Growth while queued, then hand the queue over in order. */
    CHECK_EQ(ax_pause(s), 0);
    memset(gone, 0, sizeof gone);
    for (int tag = 0; tag < MAXN; tag++) {
        submit(s, tag);
        if (tag % 7 == 3) {
            CHECK_EQ(ax_cancel(s, ids[tag]), 0);
            gone[tag] = true;
        }
    }
    kept = 0;
    for (int tag = 0; tag < MAXN; tag++)
        kept += !gone[tag];
    run_and_check(s, MAXN, kept);

    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, st.succeeded + st.cancelled);
    ax_free(s);
    return 0;
}
