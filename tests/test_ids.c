/* test_ids.c - task ids and liveness after tasks finish (ax.h: ax_dump lists
 * "every queued, delayed and running task"; ax_cancel returns AX_ENOTFOUND
 * for a task that "never existed, or already finished").
 *
 *  1. NTASKS trivial tasks run to success (every on_done ran, the stats
 *     settled): ax_dump then lists 0 tasks — no line, no "pending" entry for
 *     a finished task or a free slot.
 *  2. After that, ax_cancel of every id in [0, NPROBE) — ids never issued,
 *     which are slot numbers of the job table — and of every finished task's
 *     id returns AX_ENOTFOUND. Then: every on_done ran exactly once, with
 *     its own id and SUCCEEDED; succeeded + failed + timed_out + cancelled ==
 *     submitted with nothing cancelled; a NORMAL and a LOW submission are
 *     admitted (not AX_ESHED) and succeed; the ids of two more tasks differ
 *     from each other and from every earlier id, and each on_done reports
 *     the id its submission returned.
 */
#include "util.h"

#define NTASKS 1000
#define NPROBE 4096
#define NLATE 4 /* NORMAL, LOW, then two more */

struct outcome {
    atomic_int calls;
    atomic_int state;
    _Atomic uint64_t id;
};

static struct outcome out[NTASKS + NLATE];
static uint64_t ids[NTASKS + NLATE];

static int nop(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    struct outcome *o = arg;
    atomic_store(&o->state, (int)r->state);
    atomic_store(&o->id, r->id);
    atomic_fetch_add(&o->calls, 1);
}

static uint64_t submit(ax_sched *s, ax_priority prio, int i)
{
    ax_spec sp = {.fn = nop, .priority = prio, .timeout_ms = 5000, .on_done = on_done,
                  .cb_arg = &out[i]};
    uint64_t id = 0;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    return id;
}

static bool settled(ax_sched *s, uint64_t n)
{
    ax_stats st = test_stats(s);
    return st.succeeded == n && st.running == 0 && st.queued[AX_PRIO_NORMAL] == 0;
}

/* ax_dump into memory; returns the "ax dump: N tasks" count, *lines the
 * number of task lines and *pending those in state pending. verbose: show
 * the start of a non-empty dump. */
static long dump_total(ax_sched *s, size_t *lines, size_t *pending, bool verbose)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    CHECK_EQ(ax_dump(s, f, 0), 0);
    fclose(f);
    long total = -1;
    CHECK_EQ(sscanf(buf, "ax dump: %ld tasks", &total), 1);
    *lines = *pending = 0;
    for (const char *p = buf; (p = strstr(p, "  id=")); p++)
        ++*lines;
    for (const char *p = buf; (p = strstr(p, " state=pending")); p++)
        ++*pending;
    if (verbose && total != 0)
        fprintf(stderr, "dump after %d finished tasks (first lines):\n%.400s\n", NTASKS, buf);
    free(buf);
    return total;
}

/* ---- 1. the dump after every task finished ------------------------------- */

static void test_dump_empty(ax_sched *s)
{
    for (int i = 0; i < NTASKS; i++)
        ids[i] = submit(s, AX_PRIO_NORMAL, i);
    for (int i = 0; i < NTASKS; i++)
        CHECK(WAIT_UNTIL(atomic_load(&out[i].calls) >= 1, 5000));
    CHECK(WAIT_UNTIL(settled(s, NTASKS), 2000));

    size_t lines, pending;
    /* A worker may apply its last releases a moment after the last on_done. */
    (void)WAIT_UNTIL(dump_total(s, &lines, &pending, false) == 0, 1000);
    long total = dump_total(s, &lines, &pending, true);
    CHECK_EQ(total, 0);
    CHECK_EQ(lines, 0);
    CHECK_EQ(pending, 0);
}

/* ---- 2. cancelling ids that are not live ---------------------------------- */

static void test_cancel_unknown(ax_sched *s)
{
    long found = 0;
    int first_rc = 0;
    uint64_t first = 0;
    for (uint64_t k = 0; k < NPROBE; k++) {
        int rc = ax_cancel(s, k);
        if (rc != AX_ENOTFOUND && found++ == 0) {
            first = k;
            first_rc = rc;
        }
    }
    if (found)
        fprintf(stderr, "ax_cancel(%llu) returned %d (%s); %ld of ids 0..%d were not AX_ENOTFOUND\n",
                (unsigned long long)first, first_rc, ax_strerror(first_rc), found, NPROBE - 1);
    CHECK_EQ(found, 0);
    for (int i = 0; i < NTASKS; i++)
        CHECK_EQ(ax_cancel(s, ids[i]), AX_ENOTFOUND);

    usleep(20 * 1000); /* a second on_done, if any, has had time to run */
    for (int i = 0; i < NTASKS; i++) {
        CHECK_EQ(atomic_load(&out[i].calls), 1);
        CHECK_EQ(atomic_load(&out[i].state), AX_STATE_SUCCEEDED);
        CHECK_EQ(atomic_load(&out[i].id), ids[i]);
    }
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, NTASKS);
    CHECK_EQ(st.succeeded, NTASKS);
    CHECK_EQ(st.cancelled, 0);
    CHECK_EQ(st.succeeded + st.failed + st.timed_out + st.cancelled, st.submitted);

    /* The load is back to 0: NORMAL and LOW are admitted, not shed. */
    ids[NTASKS] = submit(s, AX_PRIO_NORMAL, NTASKS);
    ids[NTASKS + 1] = submit(s, AX_PRIO_LOW, NTASKS + 1);
    ids[NTASKS + 2] = submit(s, AX_PRIO_NORMAL, NTASKS + 2);
    ids[NTASKS + 3] = submit(s, AX_PRIO_HIGH, NTASKS + 3);
    for (int i = NTASKS; i < NTASKS + NLATE; i++) {
        CHECK(WAIT_UNTIL(atomic_load(&out[i].calls) >= 1, 3000));
        for (int k = 0; k < i; k++)
            CHECK(ids[k] != ids[i]);
    }
    CHECK(WAIT_UNTIL(settled(s, NTASKS + NLATE), 2000));
    for (int i = NTASKS; i < NTASKS + NLATE; i++) {
        CHECK_EQ(atomic_load(&out[i].calls), 1);
        CHECK_EQ(atomic_load(&out[i].state), AX_STATE_SUCCEEDED);
        CHECK_EQ(atomic_load(&out[i].id), ids[i]);
    }
    st = test_stats(s);
    CHECK_EQ(st.submitted, NTASKS + NLATE);
    CHECK_EQ(st.succeeded, NTASKS + NLATE);
    CHECK_EQ(st.shed, 0);
    CHECK_EQ(st.rejected, 0);
    CHECK_EQ(st.succeeded + st.failed + st.timed_out + st.cancelled, st.submitted);
}

int main(void)
{
    ax_sched *s = test_sched(2, 100);
    test_dump_empty(s);
    test_cancel_unknown(s);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
