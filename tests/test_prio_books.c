/* Per-priority books (ax_stats.prio, ax_priority_*_total): every admission,
 * refusal and terminal state lands in its priority's counters, exactly, and
 * each field sums over the priorities to its total. First a paused scheduler
 * with small buckets, where each refusal is known in advance (bucket full,
 * shed, invalid spec, cancelled while queued); then four threads submitting
 * mixed priorities and outcomes while others cancel, checked against what
 * on_done saw. The Prometheus text carries the same numbers. */
#include "util.h"
#include "internal.h" /* AX_CHILD_INLINE: the children a parent holds before its array grows */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { K_OK, K_FAIL, K_TIMEOUT, K_NKINDS };

/* malloc failing on demand, on this thread only (not under a sanitizer,
 * whose runtime owns malloc): spec.ref's copy refused for memory. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FAIL_MALLOC 1
extern void *__libc_malloc(size_t);
static _Thread_local int malloc_fails;
void *malloc(size_t n)
{
    return malloc_fails ? NULL : __libc_malloc(n);
}
#endif

/* What on_done saw: [priority][state]. */
static _Atomic uint64_t seen[AX_PRIO_COUNT][AX_STATE_REJECTED + 1];
static _Atomic uint64_t seen_total;

static int body(ax_task *t, void *arg)
{
    switch ((int)(uintptr_t)arg) {
    case K_FAIL:
        return -5;
    case K_TIMEOUT:
        return ax_sleep(t, 60000); /* its timeout (40 ms) ends it */
    default:
        return 0;
    }
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    CHECK((unsigned)r->priority < AX_PRIO_COUNT);
    CHECK((unsigned)r->state <= AX_STATE_REJECTED);
    atomic_fetch_add(&seen[r->priority][r->state], 1);
    atomic_fetch_add(&seen_total, 1);
}

static ax_spec spec_of(ax_priority p, int kind)
{
    ax_spec sp = {.fn = body,
                  .arg = (void *)(uintptr_t)kind,
                  .priority = p,
                  .timeout_ms = kind == K_TIMEOUT ? 40 : 10000,
                  .on_done = on_done};
    return sp;
}

static const ax_priority prios[AX_PRIO_COUNT] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};

/* The books at rest: per priority as expected, and each total the sum. */
static void check_books(ax_sched *s, const ax_prio_stats *want, uint64_t unattributed_rejects)
{
    ax_stats st = test_stats(s);
    ax_prio_stats sum = {0};
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        ax_priority p = prios[i];
        const ax_prio_stats *g = &st.prio[p], *w = &want[p];
        if (memcmp(g, w, sizeof *g) != 0)
            fprintf(stderr,
                    "priority %d: got sub %llu rej %llu shed %llu ok %llu fail %llu to %llu "
                    "cancel %llu; want %llu %llu %llu %llu %llu %llu %llu\n",
                    (int)p, (unsigned long long)g->submitted, (unsigned long long)g->rejected,
                    (unsigned long long)g->shed, (unsigned long long)g->succeeded,
                    (unsigned long long)g->failed, (unsigned long long)g->timed_out,
                    (unsigned long long)g->cancelled, (unsigned long long)w->submitted,
                    (unsigned long long)w->rejected, (unsigned long long)w->shed,
                    (unsigned long long)w->succeeded, (unsigned long long)w->failed,
                    (unsigned long long)w->timed_out, (unsigned long long)w->cancelled);
        CHECK(memcmp(g, w, sizeof *g) == 0);
        /* The balance a user checks: admitted = ended, per priority. */
        CHECK_EQ(g->submitted, g->succeeded + g->failed + g->timed_out + g->cancelled);
        /* And what on_done reported, per priority and state. */
        CHECK_EQ(g->succeeded, atomic_load(&seen[p][AX_STATE_SUCCEEDED]));
        CHECK_EQ(g->failed, atomic_load(&seen[p][AX_STATE_FAILED]));
        CHECK_EQ(g->timed_out, atomic_load(&seen[p][AX_STATE_TIMED_OUT]));
        CHECK_EQ(g->cancelled, atomic_load(&seen[p][AX_STATE_CANCELLED]));
        sum.submitted += g->submitted;
        sum.rejected += g->rejected;
        sum.shed += g->shed;
        sum.succeeded += g->succeeded;
        sum.failed += g->failed;
        sum.timed_out += g->timed_out;
        sum.cancelled += g->cancelled;
    }
    CHECK_EQ(st.submitted, sum.submitted);
    CHECK_EQ(st.rejected, sum.rejected + unattributed_rejects);
    CHECK_EQ(st.shed, sum.shed);
    CHECK_EQ(st.succeeded, sum.succeeded);
    CHECK_EQ(st.failed, sum.failed);
    CHECK_EQ(st.timed_out, sum.timed_out);
    CHECK_EQ(st.cancelled, sum.cancelled);

    /* /metrics: one sample per priority per family, the same numbers. */
    long need = ax_metrics_prometheus(s, NULL, 0);
    CHECK(need > 0);
    char *text = malloc((size_t)need + 1);
    CHECK(text != NULL);
    CHECK_EQ(ax_metrics_prometheus(s, text, (size_t)need + 1), need);
    static const char *pname[AX_PRIO_COUNT] = {
        [AX_PRIO_HIGH] = "high", [AX_PRIO_NORMAL] = "normal", [AX_PRIO_LOW] = "low"};
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        ax_priority p = prios[i];
        const ax_prio_stats *g = &st.prio[p];
        const struct {
            const char *fam;
            uint64_t v;
        } f[] = {{"submitted", g->submitted}, {"rejected", g->rejected},
                 {"shed", g->shed},           {"succeeded", g->succeeded},
                 {"failed", g->failed},       {"timed_out", g->timed_out},
                 {"cancelled", g->cancelled}};
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
            char line[128];
            snprintf(line, sizeof line, "\nax_priority_%s_total{priority=\"%s\"} %llu\n", f[k].fam,
                     pname[p], (unsigned long long)f[k].v);
            if (!strstr(text, line)) fprintf(stderr, "missing:%s", line);
            CHECK(strstr(text, line) != NULL); /* small values print as integers */
        }
    }
    free(text);
}

/* ---- 1. paused: each refusal known in advance -------------------------------- */

static void paused_books(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 4;
    c.capacity[AX_PRIO_HIGH] = 10;
    c.capacity[AX_PRIO_NORMAL] = 20;
    c.capacity[AX_PRIO_LOW] = 10;
    c.shed_ratio = 0.75; /* shed NORMAL/LOW from 30 of 40 */
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_pause(s), 0);
    ax_prio_stats want[AX_PRIO_COUNT] = {0};
    uint64_t ids[AX_PRIO_COUNT][16];

    /* 10 HIGH, 10 LOW, 10 NORMAL admitted (load 30), kinds cycling. */
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        ax_priority p = prios[i];
        for (int k = 0; k < 10; k++) {
            ax_spec sp = spec_of(p, k % K_NKINDS);
            CHECK_EQ(ax_submit(s, &sp, &ids[p][k]), 0);
            want[p].submitted++;
        }
    }
    /* HIGH's bucket is full; NORMAL and LOW are shed (load 30 >= 30) before
     * their bounds are looked at; HIGH is never shed. */
    ax_spec h = spec_of(AX_PRIO_HIGH, K_OK), n = spec_of(AX_PRIO_NORMAL, K_OK),
            l = spec_of(AX_PRIO_LOW, K_OK);
    CHECK_EQ(ax_submit(s, &h, NULL), AX_EFULL);
    CHECK_EQ(ax_submit(s, &h, NULL), AX_EFULL);
    want[AX_PRIO_HIGH].rejected += 2;
    CHECK_EQ(ax_submit(s, &n, NULL), AX_ESHED);
    want[AX_PRIO_NORMAL].shed++;
    CHECK_EQ(ax_submit(s, &l, NULL), AX_ESHED);
    CHECK_EQ(ax_submit(s, &l, NULL), AX_ESHED);
    CHECK_EQ(ax_submit(s, &l, NULL), AX_ESHED);
    want[AX_PRIO_LOW].shed += 3;
    /* In a batch too: one HIGH full, one LOW shed, one invalid LOW. */
    ax_spec batch[3] = {h, l, spec_of(AX_PRIO_LOW, K_OK)};
    batch[2].fn = NULL;
    int rcs[3];
    CHECK_EQ(ax_submit_batch(s, batch, 3, rcs, NULL), AX_EFULL);
    CHECK_EQ(rcs[0], AX_EFULL);
    CHECK_EQ(rcs[1], AX_ESHED);
    CHECK_EQ(rcs[2], AX_EINVAL);
    want[AX_PRIO_HIGH].rejected++;
    want[AX_PRIO_LOW].shed++;
    want[AX_PRIO_LOW].rejected++;
    /* Invalid: a spec of a valid priority counts there; a NULL spec or an
     * out-of-range priority counts in the total only. */
    ax_spec bad = spec_of(AX_PRIO_NORMAL, K_OK);
    bad.timeout_ms = 0;
    CHECK_EQ(ax_submit(s, &bad, NULL), AX_EINVAL);
    want[AX_PRIO_NORMAL].rejected++;
    CHECK_EQ(ax_submit(s, NULL, NULL), AX_EINVAL);
    bad = spec_of(AX_PRIO_NORMAL, K_OK);
    bad.priority = (ax_priority)7;
    CHECK_EQ(ax_submit(s, &bad, NULL), AX_EINVAL);
    bad.priority = (ax_priority)-1;
    CHECK_EQ(ax_submit(s, &bad, NULL), AX_EINVAL);
    /* Cancelled while queued: 3 HIGH, 2 NORMAL, 1 LOW, each a K_OK one
     * (k = 0, 3, 6: kinds cycle with k). */
    const int ncancel[AX_PRIO_COUNT] = {
        [AX_PRIO_HIGH] = 3, [AX_PRIO_NORMAL] = 2, [AX_PRIO_LOW] = 1};
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        ax_priority p = prios[i];
        for (int k = 0; k < ncancel[p]; k++)
            CHECK_EQ(ax_cancel(s, ids[p][3 * k]), 0);
        want[p].cancelled += (uint64_t)ncancel[p];
    }
    CHECK_EQ(ax_resume(s), 0);
    CHECK(WAIT_UNTIL(atomic_load(&seen_total) == 30, 60000));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 10000));
    /* Of each priority's 10, kinds k % 3: OK at k = 0, 3, 6, 9 (less the
     * cancelled), FAIL at 1, 4, 7, TIMEOUT at 2, 5, 8. */
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        ax_priority p = prios[i];
        want[p].succeeded = 4 - (uint64_t)ncancel[p];
        want[p].failed = 3;
        want[p].timed_out = 3;
    }
    check_books(s, want, 3);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- refusals before admission's own: a class's priority, memory ------------- */

static void early_refusals(void)
{
    memset(seen, 0, sizeof seen);
    atomic_store(&seen_total, 0);
    ax_sched *s = test_sched(1, 4);
    ax_class_config cc;
    ax_class_config_default(&cc);
    cc.name = "lowcls";
    cc.priority = AX_PRIO_LOW;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &cc, &id), 0);
    ax_prio_stats want[AX_PRIO_COUNT] = {0};
    /* A class spec with unknown override bits: booked under the class's
     * priority (LOW), as its other refusals are (review: under
     * spec.priority, NORMAL). With AX_SPEC_PRIORITY, under the spec's. */
    ax_spec a = {.fn = body, .class_id = id, .overrides = 4};
    CHECK_EQ(ax_submit(s, &a, NULL), AX_EINVAL);
    a.trace_id = "bad\nid";
    a.overrides = 0;
    CHECK_EQ(ax_submit(s, &a, NULL), AX_EINVAL);
    want[AX_PRIO_LOW].rejected += 2;
    a.trace_id = NULL;
    a.overrides = AX_SPEC_PRIORITY | 8;
    a.priority = AX_PRIO_HIGH;
    CHECK_EQ(ax_submit(s, &a, NULL), AX_EINVAL);
    want[AX_PRIO_HIGH].rejected++;
#ifdef FAIL_MALLOC
    /* spec.ref's copy refused for memory: counted like every refusal
     * (review: counted nowhere). */
    ax_spec r = {.fn = body, .priority = AX_PRIO_HIGH, .timeout_ms = 100, .ref = "msg-1"};
    malloc_fails = 1;
    int rc = ax_submit(s, &r, NULL);
    malloc_fails = 0;
    CHECK_EQ(rc, AX_ENOMEM);
    want[AX_PRIO_HIGH].rejected++;
#else
    puts("test_prio_books: the AX_ENOMEM case is not run under a sanitizer");
#endif
    check_books(s, want, 0);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- 2. four submitting threads, cancels racing completions ------------------ */

#define THREADS 4
#define PER_THREAD 600

struct submitter {
    ax_sched *s;
    unsigned seed;
    uint64_t admitted[AX_PRIO_COUNT];
    uint64_t refused[AX_PRIO_COUNT]; /* invalid specs, by the priority they named */
    uint64_t unattributed;           /* out-of-range priorities */
};

static void *submit_thread(void *arg)
{
    struct submitter *m = arg;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ m->seed;
    for (int i = 0; i < PER_THREAD; i++) {
        ax_priority p = prios[xorshift(&x) % AX_PRIO_COUNT];
        int kind = (int)(xorshift(&x) % 8);
        ax_spec sp = spec_of(p, kind == 7 ? K_TIMEOUT : kind == 6 ? K_FAIL : K_OK);
        if (kind == 5 && i % 2) { /* an invalid spec */
            sp.timeout_ms = 0;
            if (i % 10 == 1) sp.priority = (ax_priority)(3 + i % 5);
        }
        uint64_t id = 0;
        int rc = ax_submit(m->s, &sp, &id);
        if (rc == AX_OK) {
            m->admitted[p]++;
            if (kind == 4) (void)ax_cancel(m->s, id); /* races its start and end */
        } else {
            CHECK_EQ(rc, AX_EINVAL);
            if ((unsigned)sp.priority < AX_PRIO_COUNT)
                m->refused[p]++;
            else
                m->unattributed++;
        }
    }
    return NULL;
}

static void threaded_books(void)
{
    memset(seen, 0, sizeof seen);
    atomic_store(&seen_total, 0);
    ax_sched *s = test_sched(2, 64);
    struct submitter m[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&m[i], 0, sizeof m[i]);
        m[i].s = s;
        m[i].seed = (unsigned)i * 7919u + 1;
        CHECK_EQ(pthread_create(&th[i], NULL, submit_thread, &m[i]), 0);
    }
    ax_prio_stats want[AX_PRIO_COUNT] = {0};
    uint64_t unattributed = 0, admitted = 0;
    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        for (int p = 0; p < AX_PRIO_COUNT; p++) {
            want[p].submitted += m[i].admitted[p];
            want[p].rejected += m[i].refused[p];
            admitted += m[i].admitted[p];
        }
        unattributed += m[i].unattributed;
    }
    CHECK(WAIT_UNTIL(atomic_load(&seen_total) == admitted, 120000));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 10000));
    /* Terminal states: whatever on_done reported (cancels raced), which
     * check_books also compares with the books field by field. */
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        want[p].succeeded = atomic_load(&seen[p][AX_STATE_SUCCEEDED]);
        want[p].failed = atomic_load(&seen[p][AX_STATE_FAILED]);
        want[p].timed_out = atomic_load(&seen[p][AX_STATE_TIMED_OUT]);
        want[p].cancelled = atomic_load(&seen[p][AX_STATE_CANCELLED]);
        CHECK(want[p].submitted > 0 && want[p].rejected > 0);
    }
    CHECK(unattributed > 0);
    check_books(s, want, unattributed);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- refusals ax_spawn and ax_submit_batch make before admission ------------ */

static _Atomic(ax_task *) holder_task;
static atomic_int holder_go;
#ifdef FAIL_MALLOC
static atomic_int spawn_oom_rc;
#endif

/* Parked until told; then, under FAIL_MALLOC, fills its children array and
 * spawns one more with malloc failing. */
static int holder(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&holder_task, t);
    while (!atomic_load(&holder_go)) {
        int rc = ax_sleep(t, 1);
        if (rc)
            return rc;
    }
    atomic_store(&holder_task, NULL);
#ifdef FAIL_MALLOC
    ax_spec c = spec_of(AX_PRIO_LOW, K_OK);
    for (unsigned i = 0; i < AX_CHILD_INLINE; i++)
        CHECK_EQ(ax_spawn(t, &c, NULL), 0);
    malloc_fails = 1;
    atomic_store(&spawn_oom_rc, ax_spawn(t, &c, NULL));
    malloc_fails = 0;
    CHECK(strstr(ax_error_detail(), "out of memory") != NULL);
#endif
    return 0;
}

static void spawn_batch_refusals(void)
{
    memset(seen, 0, sizeof seen);
    atomic_store(&seen_total, 0);
    ax_sched *s = test_sched(1, 4);
    ax_class_config cc;
    ax_class_config_default(&cc);
    cc.name = "lowcls";
    cc.priority = AX_PRIO_LOW;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &cc, &id), 0);
    ax_prio_stats want[AX_PRIO_COUNT] = {0};
    uint64_t unattributed = 0;

    ax_spec h = spec_of(AX_PRIO_NORMAL, K_OK);
    h.fn = holder;
    CHECK_EQ(ax_submit(s, &h, NULL), 0);
    want[AX_PRIO_NORMAL].submitted++;
    want[AX_PRIO_NORMAL].succeeded++;
    CHECK(WAIT_UNTIL(atomic_load(&holder_task) != NULL, 30000));
    ax_task *t = atomic_load(&holder_task);
    /* From outside the parent's coroutine: refused, and booked under the
     * priority the child would have had (review: counted nowhere). */
    ax_spec a = spec_of(AX_PRIO_HIGH, K_OK);
    CHECK_EQ(ax_spawn(t, &a, NULL), AX_ESTATE);
    CHECK(strstr(ax_error_detail(), "outside the parent's own coroutine") != NULL);
    want[AX_PRIO_HIGH].rejected++;
    ax_spec b = {.fn = body, .class_id = id, .on_done = on_done};
    CHECK_EQ(ax_spawn(t, &b, NULL), AX_ESTATE);
    want[AX_PRIO_LOW].rejected++;
    CHECK_EQ(ax_spawn(t, NULL, NULL), AX_ESTATE);
    unattributed++;
    b.class_id = 999; /* no such class: still the ESTATE, under spec.priority */
    b.priority = AX_PRIO_HIGH;
    b.ref = "r-1";
    CHECK_EQ(ax_spawn(t, &b, NULL), AX_ESTATE);
    CHECK(strstr(ax_error_detail(), "outside the parent's own coroutine") != NULL);
    want[AX_PRIO_HIGH].rejected++;
    /* A batch without specs: one refusal, in the total, with one event
     * whatever n; rcs and ids untouched (n may be past their ends). */
    int rcs[3] = {7, 7, 7};
    uint64_t ids[3] = {9, 9, 9};
    CHECK_EQ(ax_submit_batch(s, NULL, 3, rcs, ids), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "specs is NULL") != NULL);
    for (int i = 0; i < 3; i++)
        CHECK(rcs[i] == 7 && ids[i] == 9);
    unattributed += 1;
    atomic_store(&holder_go, 1);
#ifdef FAIL_MALLOC
    /* The children array's growth failing: the child is refused, counted. */
    want[AX_PRIO_LOW].submitted += AX_CHILD_INLINE;
    want[AX_PRIO_LOW].succeeded += AX_CHILD_INLINE;
    want[AX_PRIO_LOW].rejected++;
    CHECK(WAIT_UNTIL(atomic_load(&seen_total) == 1 + AX_CHILD_INLINE, 30000));
    CHECK_EQ(atomic_load(&spawn_oom_rc), AX_ENOMEM);
#else
    CHECK(WAIT_UNTIL(atomic_load(&seen_total) == 1, 30000));
#endif
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 10000));
    check_books(s, want, unattributed);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(void)
{
    paused_books();
    threaded_books();
    early_refusals();
    spawn_batch_refusals();
    puts("test_prio_books: ok");
    return 0;
}
