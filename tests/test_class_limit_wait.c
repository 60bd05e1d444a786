/* test_class_limit_wait.c - the class limiter's slow-start wait and mark
 * through the scheduler; each case failed before its fix (adversarial
 * review of the counted wait). Run one: test_class_limit_wait
 * short|lone|stale|cap (no argument: all).
 *
 * short: an attempt cut short by its task's deadline_ns (or a per-spec
 *        timeout_ms) reaches the limiter as a drop whose latency is far
 *        below the class timeout; the wait ended that latency after it,
 *        whatever drop_pending said. (Not covered, by design: attempts
 *        beside a drop whose own timeout is longer than the class's, e.g.
 *        taken before ax_class_set_timeout lowered it: the wait's bound is
 *        the class's timeout, limit.c.)
 * lone:  the bound is a timeout, not a running maximum: after an attempt
 *        with a 1 h timeout came back, a lone drop with nothing beside it
 *        waits the class's 1 s, not an hour (second review of a running
 *        maximum of start + timeout).
 * stale: a worker's cached clock (w->now_ns) is stale when dispatch runs
 *        after an on_done in the ready loop (worker.c: run_resume refreshes
 *        it before run_complete, not after); run_start stamps the next
 *        attempt's start_ns with it. An attempt picked after a drop's
 *        in_flight read then looks begun before the drop and counts one
 *        back: drop_pending reaches 0 while an attempt beside the drop is
 *        still out. Its run_ns (and wait_ns) are off by the on_done's time.
 * cap:   ax_set_max_concurrency lowers a class's limit_max (limit_max 0)
 *        under its mark: limit_mark stays above the limit and the cap, and
 *        limit_doublings counts every clean window though the limit never
 *        moves.
 */
#include "class_common.h"

#include "internal.h"

#include <limits.h>


struct limsnap {
    uint64_t last_drop, drop_rtt, doublings;
    unsigned pending, limit;
    double mark;
};

static struct limsnap snap(struct ax_class_rt *cr)
{
    struct limsnap v;
    pthread_mutex_lock(&cr->lk);
    v.last_drop = cr->lim.last_drop_ns;
    v.drop_rtt = cr->lim.drop_rtt_ns;
    v.pending = cr->lim.drop_pending;
    v.doublings = cr->lim.doublings;
    v.mark = cr->lim.mark;
    v.limit = ax_limit_get(&cr->lim);
    pthread_mutex_unlock(&cr->lk);
    return v;
}

static atomic_int release_b;

static int long_sleep(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 5000);
}

/* ---- short --------------------------------------------------------------- */

static void short_case(int how)
{
    static const char *names[] = {"deadline_ns", "spec.timeout_ms"};
    atomic_store(&release_b, 0);
    ax_sched *s = test_sched(1, 64);
    ax_class_config c = rc_adaptive("short", 32);
    c.timeout_ms = 10000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    struct ax_class_rt *cr = s->classes[id];
    /* 12 attempts of the storm, stalled, at the class's 10 s timeout. */
    ax_spec b = {.fn = rc_block, .arg = &release_b, .class_id = id};
    for (int i = 0; i < 12; i++)
        CHECK_EQ(ax_submit(s, &b, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 12, 5000));
    /* The attempt cut short. A deadline_ns counts from the submission: on
     * a machine busy enough (TSan beside other tests) it can pass while the
     * task is still queued, which times it out unstarted, no drop. Then
     * again with twice the time, up to 1.6 s. */
    uint64_t timed_out = 0;
    for (unsigned ms = 50; snap(cr).last_drop == 0; ms *= 2) {
        CHECK(ms <= 1600);
        if (ms > 50)
            fprintf(stderr, "short/%s: the %u ms attempt timed out before it started; "
                            "again with %u ms\n", names[how], ms / 2, ms);
        ax_spec a = {.fn = long_sleep, .class_id = id};
        if (how == 0)
            a.deadline_ns = ax_now_ns() + ms * 1000000ull;
        else
            a.timeout_ms = ms;
        CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);
        timed_out++;
        CHECK(WAIT_UNTIL(rc_cstats(s, id).timed_out == timed_out, 20000));
    }
    struct limsnap v = snap(cr);
    /* Before the fix the wait ended drop_rtt after the drop. */
    uint64_t look_ns = v.drop_rtt * 2 > 100 * 1000000ull ? v.drop_rtt * 2 : 100 * 1000000ull;
    usleep((useconds_t)(look_ns / 1000));
    uint64_t now = ax_now_ns();
    pthread_mutex_lock(&cr->lk);
    bool quiet = !v.last_drop || !v.pending || now >= cr->lim.quiet_until;
    pthread_mutex_unlock(&cr->lk);
    unsigned out = rc_cstats(s, id).in_flight;
    fprintf(stderr, "short/%s: drop_rtt %llu ms (the 12 beside: %u ms timeouts), drop_pending %u; "
                    "%llu ms later quiet=%d with %u of them still in flight\n",
            names[how], (unsigned long long)(v.drop_rtt / 1000000u), 10000u, v.pending,
            (unsigned long long)(look_ns / 1000000u), quiet, out);
    CHECK_SOFT(!quiet, "the wait after the drop is over with %u attempts beside it still out", out);
    atomic_store(&release_b, 1);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- lone ---------------------------------------------------------------- */

static void lone_case(void)
{
    ax_sched *s = test_sched(1, 64);
    ax_class_config c = rc_adaptive("lone", 32);
    c.timeout_ms = 1000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    struct ax_class_rt *cr = s->classes[id];
    ax_spec x = {.fn = rc_noop, .class_id = id, .timeout_ms = 3600 * 1000}; /* back at once */
    CHECK_EQ(ax_submit(s, &x, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).succeeded == 1, 5000));
    ax_spec d = {.fn = long_sleep, .class_id = id, .timeout_ms = 50}; /* nothing beside it */
    CHECK_EQ(ax_submit(s, &d, NULL), AX_OK);
    CHECK(WAIT_UNTIL(snap(cr).last_drop != 0, 5000));
    pthread_mutex_lock(&cr->lk);
    uint64_t last = cr->lim.last_drop_ns, until = cr->lim.quiet_until;
    pthread_mutex_unlock(&cr->lk);
    fprintf(stderr, "lone: a 50 ms drop alone, after a 1 h attempt came back: the wait is %.3f s\n",
            (double)(until - last) / 1e9);
    CHECK_SOFT(until - last == 1000 * 1000000ull, "the wait is not the class's timeout");
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

/* ---- stale --------------------------------------------------------------- */

static atomic_uint_fast64_t j_run_ns, j_wait_ns;
static atomic_int j_done;

static int sleep_ms_arg(ax_task *t, void *arg)
{
    return ax_sleep(t, (int64_t)(uintptr_t)arg);
}

static int t1_fn(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 100); /* resumed from the ready loop */
}

static void t1_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    usleep(2000 * 1000); /* a slow on_done, on the worker, past T2's deadline */
}

static void j_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&j_run_ns, r->run_ns);
    atomic_store(&j_wait_ns, r->wait_ns);
    atomic_store(&j_done, 1);
}

static void stale_case(void)
{
    atomic_store(&j_done, 0);
    ax_sched *s = test_sched(1, 64);
    ax_class_config c = rc_adaptive("stale", 32);
    c.timeout_ms = 10000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    struct ax_class_rt *cr = s->classes[id];
    /* Beside the drop: 10 back after 3 s, one after 8 s. */
    ax_spec b = {.fn = sleep_ms_arg, .arg = (void *)(uintptr_t)3000, .class_id = id};
    for (int i = 0; i < 10; i++)
        CHECK_EQ(ax_submit(s, &b, NULL), AX_OK);
    b.arg = (void *)(uintptr_t)8000;
    CHECK_EQ(ax_submit(s, &b, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 11, 5000));
    /* T2 times out at 1 s while the worker is held in T1's on_done: the
     * watchdog's drop. (300 ms: on a loaded machine T1, 100 ms asleep, was
     * not back by then, and was counted beside the drop: 12.) */
    ax_spec t2 = {.fn = long_sleep, .class_id = id, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(s, &t2, NULL), AX_OK);
    ax_spec t1 = {.fn = t1_fn, .class_id = id, .on_done = t1_done};
    CHECK_EQ(ax_submit(s, &t1, NULL), AX_OK);
    CHECK(WAIT_UNTIL(snap(cr).last_drop != 0, 5000));
    struct limsnap v = snap(cr);
    fprintf(stderr, "stale: drop at +%llu ms, drop_pending %u (the 11 sleepers)\n",
            (unsigned long long)((ax_now_ns() - v.last_drop) / 1000000u), v.pending);
    CHECK_EQ(v.pending, 11);
    /* J: queued while the worker is still in on_done; it starts after. */
    ax_spec j = {.fn = rc_noop, .class_id = id, .on_done = j_on_done};
    uint64_t j_submit = ax_now_ns();
    CHECK_EQ(ax_submit(s, &j, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&j_done), 5000));
    uint64_t j_end = ax_now_ns();
    fprintf(stderr, "stale: J (returns at once) submitted after the drop: run_ns %llu ms, "
                    "wait_ns %llu ms (it waited ~%llu ms); drop_pending now %u\n",
            (unsigned long long)(atomic_load(&j_run_ns) / 1000000u),
            (unsigned long long)(atomic_load(&j_wait_ns) / 1000000u),
            (unsigned long long)((j_end - j_submit) / 1000000u), snap(cr).pending);
    CHECK_SOFT(atomic_load(&j_run_ns) < 400 * 1000000ull, "J's run_ns includes the on_done before it");
    CHECK_SOFT(snap(cr).pending == 11, "J began after the drop but counted one back");
    /* The ten 3 s sleepers come back. */
    CHECK(WAIT_UNTIL(rc_cstats(s, id).in_flight == 1, 20000));
    usleep(50 * 1000);
    v = snap(cr);
    unsigned out = rc_cstats(s, id).in_flight;
    fprintf(stderr, "stale: ten back: drop_pending %u, still in flight beside the drop: %u\n",
            v.pending, out);
    CHECK_SOFT(!(v.pending == 0 && out > 0), "count reached 0 with %u attempt(s) beside the drop out",
         out);
    CHECK_EQ(ax_shutdown(s, 10000), 0);
    ax_free(s);
}

/* ---- cap ----------------------------------------------------------------- */

static int sleep2(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 2);
}

static void cap_case(void)
{
    ax_sched *s = test_sched(2, 32);
    ax_class_config c = rc_adaptive("cap", 0); /* limit_max 0: follows the cap */
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    struct ax_class_rt *cr = s->classes[id];
    usleep(150 * 1000);
    /* One window of 10 drops (20 ms timeouts): 32 -> 28.8, mark 16. */
    ax_spec d = {.fn = long_sleep, .class_id = id, .timeout_ms = 20};
    for (int i = 0; i < 10; i++)
        CHECK_EQ(ax_submit(s, &d, NULL), AX_OK);
    CHECK(WAIT_UNTIL(rc_cstats(s, id).timed_out == 10, 5000));
    struct limsnap v = snap(cr);
    fprintf(stderr, "cap: after the drops: limit %u, mark %.1f\n", v.limit, v.mark);
    CHECK(v.mark >= 14);
    CHECK_EQ(ax_set_max_concurrency(s, 4), AX_OK);
    uint64_t d0 = snap(cr).doublings;
    /* 2 s of healthy, saturating traffic. */
    ax_spec f = {.fn = sleep2, .class_id = id};
    uint64_t end = ax_now_ns() + 2000 * 1000000ull;
    while (ax_now_ns() < end) {
        if (rc_cstats(s, id).queued < 20)
            for (int i = 0; i < 20; i++)
                CHECK_EQ(ax_submit(s, &f, NULL), AX_OK);
        usleep(2000);
    }
    ax_class_stats st = rc_cstats(s, id);
    static char buf[1 << 16];
    long n = ax_metrics_prometheus(s, buf, sizeof buf);
    CHECK(n > 0);
    char *m = strstr(buf, "ax_class_limit_mark{");
    char *dd = strstr(buf, "ax_class_limit_doublings_total{");
    fprintf(stderr, "cap: cap 4 for 2 s: stats limit %u, limit_mark %u, limit_doublings +%llu\n",
            st.limit, st.limit_mark, (unsigned long long)(st.limit_doublings - d0));
    if (m) fprintf(stderr, "cap: /metrics %.*s\n", (int)strcspn(m, "\n"), m);
    if (dd) fprintf(stderr, "cap: /metrics %.*s\n", (int)strcspn(dd, "\n"), dd);
    CHECK_SOFT(st.limit_mark == 0 || st.limit_mark > st.limit, "mark %u not above limit %u",
         st.limit_mark, st.limit);
    CHECK_SOFT(st.limit_mark <= 4, "limit_mark %u above the cap 4", st.limit_mark);
    CHECK_SOFT(st.limit_doublings - d0 <= 2, "%llu doublings with the limit at %u throughout",
         (unsigned long long)(st.limit_doublings - d0), st.limit);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || !strcmp(only, "short"))
        for (int how = 0; how < 2; how++)
            short_case(how);
    if (!*only || !strcmp(only, "lone"))
        lone_case();
    if (!*only || !strcmp(only, "stale"))
        stale_case();
    if (!*only || !strcmp(only, "cap"))
        cap_case();
    return check_soft_result("test_class_limit_wait");
}
