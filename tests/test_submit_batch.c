/* ax_submit_batch: a burst admitted in runs under one lock each, with
 * exactly the outcomes of as many ax_submit calls: every admitted task runs
 * once with the id it was given, quota rounds and FIFO order hold, each
 * refusal is its own (code, count, nothing run) and does not stop the
 * others, the call returns the first one's code and detail, specs that go
 * to ax_submit alone (a class, a ref, lossless events, an invalid spec)
 * behave as there, and several threads bursting at once lose nothing. */
#include "util.h"

#include <pthread.h>
#include <stdlib.h>

enum { MAXT = 40000 };
static atomic_int ran[MAXT];   /* by arg: how often each task ran */
static atomic_int done[MAXT];  /* by arg: how often its on_done came */
static uint64_t done_id[MAXT]; /* by arg: the id its on_done reported */
static atomic_int ndone;

static int work(ax_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add(&ran[(intptr_t)arg], 1);
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    intptr_t i = (intptr_t)arg;
    done_id[i] = r->id;
    atomic_fetch_add(&done[i], 1);
    atomic_fetch_add(&ndone, 1);
}

static ax_spec spec(intptr_t i, ax_priority p)
{
    return (ax_spec){.fn = work, .arg = (void *)i, .priority = p, .timeout_ms = 10000,
                     .on_done = on_done, .cb_arg = (void *)i};
}

static char order[512];
static atomic_int nslot, norder; /* slots taken; slots written (read by main) */
static int record(ax_task *t, void *arg)
{
    static const char name[] = {[AX_PRIO_HIGH] = 'H', [AX_PRIO_NORMAL] = 'N', [AX_PRIO_LOW] = 'L'};
    int i = atomic_fetch_add(&nslot, 1);
    if (i < (int)sizeof order - 1)
        order[i] = arg ? (char)(intptr_t)arg : name[ax_task_priority(t)];
    atomic_fetch_add(&norder, 1); /* after the write: main reads order once it counts all */
    return 0;
}

struct burst {
    ax_sched *s;
    int base, n, batch;
};

static void *burster(void *arg)
{
    struct burst *b = arg;
    ax_spec *sp = malloc(sizeof *sp * (size_t)b->batch);
    uint64_t *ids = malloc(sizeof *ids * (size_t)b->batch);
    for (int i = 0; i < b->n; i += b->batch) {
        int k = b->n - i < b->batch ? b->n - i : b->batch;
        for (int j = 0; j < k; j++)
            sp[j] = spec(b->base + i + j, (ax_priority)((i + j) % 3));
        CHECK_EQ(ax_submit_batch(b->s, sp, (size_t)k, NULL, ids), 0);
        for (int j = 0; j < k; j++)
            CHECK(ids[j] != 0);
    }
    free(sp);
    free(ids);
    return NULL;
}

int main(void)
{
    /* 1. Bad arguments. */
    CHECK_EQ(ax_submit_batch(NULL, NULL, 0, NULL, NULL), AX_EINVAL);
    ax_sched *s = test_sched(2, 64);
    /* specs NULL with n > 0: one refused call, counted once as
     * ax_submit(s, NULL) is, whatever n. An n this wrong is not a count
     * (new-user trial: counting n, SIZE_MAX wrapped ax_stats.rejected and
     * ax_tasks_rejected_total went backwards, 2 -> 1). */
    CHECK_EQ(ax_submit_batch(s, NULL, SIZE_MAX, NULL, NULL), AX_EINVAL);
    CHECK_EQ(test_stats(s).rejected, 1);
    CHECK_EQ(ax_submit_batch(s, NULL, 3, NULL, NULL), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "specs is NULL") != NULL);
    CHECK_EQ(test_stats(s).rejected, 2);
    CHECK_EQ(ax_submit_batch(s, NULL, 0, NULL, NULL), AX_OK); /* submits nothing */
    CHECK_EQ(test_stats(s).rejected, 2);

    /* 2. 1000 tasks in one call (125 runs of 8): each runs once, its
     * on_done reports the id the call gave it, the counters agree. */
    enum { N = 1000 };
    static ax_spec sp[N];
    static uint64_t ids[N];
    static int rcs[N];
    for (int i = 0; i < N; i++) {
        sp[i] = spec(i, (ax_priority)(i % 3));
        rcs[i] = 12345;
    }
    CHECK_EQ(ax_submit_batch(s, sp, N, rcs, ids), AX_OK);
    for (int i = 0; i < N; i++)
        CHECK_EQ(rcs[i], 0);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == N, 20000));
    for (int i = 0; i < N; i++) {
        CHECK_EQ(atomic_load(&ran[i]), 1);
        CHECK_EQ(atomic_load(&done[i]), 1);
        CHECK_EQ(done_id[i], ids[i]);
        if (i)
            CHECK(ids[i] > ids[i - 1]); /* issued in order */
    }
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, N);
    CHECK_EQ(st.succeeded, N);
    ax_free(s);
    printf("1000 in one call: each ran once, with its id\n");

    /* 3. Quota rounds and FIFO within a priority, as for ax_submit: paused,
     * one worker, cap 1, quotas 2/1/1; LOW first, then NORMAL, then HIGH,
     * in one call. */
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 1;
    c.quota_high = 2;
    c.quota_normal = 1;
    c.low_guaranteed = 1;
    s = test_sched_cfg(&c);
    CHECK_EQ(ax_pause(s), 0);
    ax_spec q[12];
    for (int i = 0; i < 12; i++)
        q[i] = (ax_spec){.fn = record, .priority = i < 4 ? AX_PRIO_LOW : i < 8 ? AX_PRIO_NORMAL
                                                                             : AX_PRIO_HIGH,
                         .timeout_ms = 5000};
    CHECK_EQ(ax_submit_batch(s, q, 12, NULL, NULL), AX_OK);
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL(atomic_load(&norder) == 12, 5000));
    CHECK_STR(order, "HHNLHHNLNLNL");
    /* FIFO: 26 NORMAL tasks, each naming itself. */
    CHECK_EQ(ax_pause(s), 0);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 5000));
    memset(order, 0, sizeof order);
    atomic_store(&nslot, 0);
    atomic_store(&norder, 0);
    ax_spec f[26];
    for (int i = 0; i < 26; i++)
        f[i] = (ax_spec){.fn = record, .arg = (void *)(intptr_t)('a' + i),
                         .priority = AX_PRIO_NORMAL, .timeout_ms = 5000};
    CHECK_EQ(ax_submit_batch(s, f, 26, NULL, NULL), AX_OK);
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL(atomic_load(&norder) == 26, 5000));
    CHECK_STR(order, "abcdefghijklmnopqrstuvwxyz");
    ax_free(s);
    printf("quota rounds and FIFO order: as ax_submit's\n");

    /* 4. Refusals are each its own: LOW holds 5, ten LOW specs and a HIGH
     * one -> 5 LOW admitted, AX_EFULL for the other five (each counted),
     * the HIGH one after them admitted; the call returns the first
     * refusal's code and detail. */
    ax_config_default(&c);
    c.workers = 1;
    c.capacity[AX_PRIO_LOW] = 5;
    c.shed_ratio = 1.0;
    s = test_sched_cfg(&c);
    CHECK_EQ(ax_pause(s), 0);
    atomic_store(&ndone, 0);
    memset(ran, 0, sizeof ran);
    memset(done, 0, sizeof done);
    ax_spec lo[11];
    uint64_t lids[11];
    int lrcs[11];
    for (int i = 0; i < 10; i++)
        lo[i] = spec(i, AX_PRIO_LOW);
    lo[10] = spec(10, AX_PRIO_HIGH);
    CHECK_EQ(ax_submit_batch(s, lo, 11, lrcs, lids), AX_EFULL);
    CHECK(strstr(ax_error_detail(), "LOW bucket is full") != NULL);
    for (int i = 0; i < 11; i++) {
        CHECK_EQ(lrcs[i], i < 5 || i == 10 ? 0 : AX_EFULL);
        CHECK_EQ(lids[i] != 0, i < 5 || i == 10);
    }
    st = test_stats(s);
    CHECK_EQ(st.submitted, 6);
    CHECK_EQ(st.rejected, 5);
    /* Invalid specs in the middle: refused as ax_submit refuses them
     * (counted), the others admitted; the detail is the first refusal's
     * (timeout_ms), not the last one's (the priority). */
    ax_spec mid[5] = {spec(20, AX_PRIO_HIGH), spec(21, AX_PRIO_HIGH), spec(22, AX_PRIO_HIGH),
                      spec(23, AX_PRIO_HIGH), spec(24, AX_PRIO_HIGH)};
    mid[2].timeout_ms = 0;
    mid[4].priority = (ax_priority)7;
    int mrcs[5];
    CHECK_EQ(ax_submit_batch(s, mid, 5, mrcs, NULL), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "timeout_ms") != NULL);
    CHECK(mrcs[0] == 0 && mrcs[1] == 0 && mrcs[2] == AX_EINVAL && mrcs[3] == 0 &&
          mrcs[4] == AX_EINVAL);
    st = test_stats(s);
    CHECK_EQ(st.submitted, 9);
    CHECK_EQ(st.rejected, 7);
    /* A class and a ref in the burst: submitted alone, as ax_submit. */
    ax_class_config cc;
    ax_class_config_default(&cc);
    cc.name = "burst";
    unsigned cid;
    CHECK_EQ(ax_class_register(s, &cc, &cid), 0);
    ax_spec mixed[3] = {spec(30, AX_PRIO_HIGH), spec(31, AX_PRIO_HIGH), spec(32, AX_PRIO_HIGH)};
    mixed[1].class_id = cid;
    mixed[1].timeout_ms = 0; /* the class's */
    mixed[2].ref = "msg-32";
    CHECK_EQ(ax_submit_batch(s, mixed, 3, NULL, NULL), AX_OK);
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL(atomic_load(&ndone) == 12, 5000));
    for (int i = 0; i < 11; i++)
        CHECK_EQ(atomic_load(&ran[i]), i < 5 || i == 10);
    CHECK(atomic_load(&ran[20]) == 1 && atomic_load(&ran[21]) == 1 && atomic_load(&ran[22]) == 0 &&
          atomic_load(&ran[23]) == 1 && atomic_load(&ran[24]) == 0);
    CHECK(atomic_load(&ran[30]) == 1 && atomic_load(&ran[31]) == 1 && atomic_load(&ran[32]) == 1);
    /* After shutdown: AX_ESHUTDOWN for each. */
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    CHECK_EQ(ax_submit_batch(s, lo, 3, lrcs, NULL), AX_ESHUTDOWN);
    CHECK(lrcs[0] == AX_ESHUTDOWN && lrcs[1] == AX_ESHUTDOWN && lrcs[2] == AX_ESHUTDOWN);
    ax_free(s);
    printf("refusals each its own, the first one returned; a class, a ref, shutdown: as "
           "ax_submit\n");

    /* 5. Four threads bursting at once (batches of 100, 2 workers), with
     * lossless events on a second run (every spec then goes alone). */
    for (int lossless = 0; lossless < 2; lossless++) {
        atomic_store(&ndone, 0);
        memset(ran, 0, sizeof ran);
        memset(done, 0, sizeof done);
        ax_config_default(&c);
        c.workers = 2;
        c.max_concurrency = 256;
        for (int p = 0; p < 3; p++)
            c.capacity[p] = MAXT;
        c.shed_ratio = 1.0;
        s = test_sched_cfg(&c);
        FILE *ev = NULL;
        if (lossless) {
            ev = tmpfile();
            CHECK_EQ(ax_events_json(s, ev), 0);
            CHECK_EQ(ax_events_lossless(s, true), 0);
        }
        enum { T = 4, PER = 5000 };
        pthread_t th[T];
        struct burst b[T];
        for (int i = 0; i < T; i++) {
            b[i] = (struct burst){s, i * PER, PER, 100};
            CHECK_EQ(pthread_create(&th[i], NULL, burster, &b[i]), 0);
        }
        for (int i = 0; i < T; i++)
            pthread_join(th[i], NULL);
        CHECK(WAIT_UNTIL(atomic_load(&ndone) == T * PER, 60000));
        for (int i = 0; i < T * PER; i++) {
            CHECK_EQ(atomic_load(&ran[i]), 1);
            CHECK_EQ(atomic_load(&done[i]), 1);
        }
        st = test_stats(s);
        CHECK_EQ(st.submitted, T * PER);
        CHECK_EQ(st.succeeded, T * PER);
        if (lossless) {
            CHECK_EQ(ax_events_flush(s), 0);
            CHECK_EQ(ax_events_dropped(s), 0);
        }
        ax_free(s);
        if (ev)
            fclose(ev);
        printf("4 threads x %d in bursts of 100%s: each ran once\n", PER,
               lossless ? ", lossless events" : "");
    }
    printf("test_submit_batch: ok\n");
    return 0;
}
