/* test_ratelimit.c - the submission rate limit (config.rate_limit /
 * ax_set_rate_limit, a token bucket) with one and several submitting threads.
 *
 * Dispatch is paused, the buckets are large and shed_ratio is 1, so nothing
 * but the rate limit can refuse a submission and nothing runs. 1, 2 and 4
 * threads submit in a tight loop for WINDOW_MS at 1000/s with a burst of 10.
 * Checks, for each case:
 *   - every refusal is AX_ERATE, and the stats count exactly the admitted
 *     (submitted) and refused (rejected) submissions, nothing shed;
 *   - admitted <= burst + rate * elapsed * 1.05 + 5, where elapsed runs from
 *     before the first submission to after the last one returned. A bucket
 *     that refills when two threads read the clock in one order and take the
 *     lock in the other admits many times that;
 *   - admitted >= burst (the bucket starts full; a liveness floor only).
 * (The 2-thread defect shows in nearly every window, sometimes only a few
 * times over the bound: the 2-thread case runs twice, once configured by
 * ax_set_rate_limit.)
 * Queued tasks end CANCELLED at shutdown.
 */
#include "util.h"

#include <pthread.h>
#include <sched.h>

#define RATE 1000.0
#define BURST 10u
#define WINDOW_MS 500u
#define MIN_TRIES 20 /* per thread, even if it starts after the window */
#define MAX_THREADS 4
/* A thread stops once it alone got 20 times what the window allows: the
 * check fails anyway, and the queue stays small. */
#define STOP_AT (20 * (long)(BURST + RATE * WINDOW_MS / 1000))

struct submitter {
    pthread_t th;
    ax_sched *s;
    long admitted, refused, other;
    int other_rc;
};

static atomic_int go;
static _Atomic uint64_t end_ns;

static int nop(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void *submit_loop(void *arg)
{
    struct submitter *w = arg;
    while (!atomic_load(&go))
        sched_yield();
    uint64_t end = atomic_load(&end_ns);
    ax_spec sp = {.fn = nop, .timeout_ms = 1000};
    for (long n = 0; (n < MIN_TRIES || ax_now_ns() < end) && w->admitted < STOP_AT; n++) {
        int rc = ax_submit(w->s, &sp, NULL);
        if (rc == 0)
            w->admitted++;
        else if (rc == AX_ERATE)
            w->refused++;
        else {
            w->other++;
            w->other_rc = rc;
        }
    }
    return NULL;
}

static ax_sched *rate_sched(double rate, unsigned burst)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.capacity[AX_PRIO_NORMAL] = 1000000; /* far above what 1000/s can admit */
    c.shed_ratio = 1.0;
    c.rate_limit = rate;
    c.rate_burst = burst;
    ax_sched *s = NULL;
    int rc = ax_new(&c, &s);
    if (rc) {
        fprintf(stderr, "ax_new: %s: %s\n", ax_strerror(rc), ax_error_detail());
        abort();
    }
    CHECK_EQ(ax_pause(s), 0);
    return s;
}

/* nthreads submit for WINDOW_MS; set_limit: configure through
 * ax_set_rate_limit rather than ax_config. */
static void run_case(unsigned nthreads, bool set_limit)
{
    ax_sched *s;
    if (set_limit) {
        s = rate_sched(0, 0);
        CHECK_EQ(ax_set_rate_limit(s, RATE, BURST), 0);
    } else {
        s = rate_sched(RATE, BURST);
    }
    struct submitter w[MAX_THREADS];
    memset(w, 0, sizeof w);
    atomic_store(&go, 0);
    for (unsigned i = 0; i < nthreads; i++) {
        w[i].s = s;
        CHECK_EQ(pthread_create(&w[i].th, NULL, submit_loop, &w[i]), 0);
    }
    uint64_t t0 = ax_now_ns();
    atomic_store(&end_ns, t0 + WINDOW_MS * 1000000ull);
    atomic_store(&go, 1);
    for (unsigned i = 0; i < nthreads; i++)
        CHECK_EQ(pthread_join(w[i].th, NULL), 0);
    uint64_t t1 = ax_now_ns();

    long admitted = 0, refused = 0;
    for (unsigned i = 0; i < nthreads; i++) {
        if (w[i].other)
            fprintf(stderr, "unexpected refusal: %s\n", ax_strerror(w[i].other_rc));
        CHECK_EQ(w[i].other, 0);
        admitted += w[i].admitted;
        refused += w[i].refused;
    }
    double elapsed_s = (double)(t1 - t0) / 1e9;
    long bound = (long)(BURST + RATE * elapsed_s * 1.05) + 5;
    fprintf(stderr, "%u thread(s)%s: %ld admitted, %ld refused in %.3f s (bound %ld)\n",
            nthreads, set_limit ? " (ax_set_rate_limit)" : "", admitted, refused, elapsed_s,
            bound);
    CHECK_LE(admitted, bound);
    CHECK(admitted >= (long)BURST);
    CHECK(refused > 0);

    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, admitted);
    CHECK_EQ(st.rejected, refused);
    CHECK_EQ(st.shed, 0);
    CHECK_EQ(st.started, 0);
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], admitted);

    CHECK_EQ(ax_shutdown(s, 1000), 0);
    st = test_stats(s);
    CHECK_EQ(st.cancelled, admitted);
    ax_free(s);
}

/* Admitted of n submissions now. */
static int admit_n(ax_sched *s, int n)
{
    int ok = 0;
    for (int i = 0; i < n; i++) {
        ax_spec sp = {.fn = nop, .timeout_ms = 1000};
        int rc = ax_submit(s, &sp, NULL);
        if (rc == 0)
            ok++;
        else
            CHECK_EQ(rc, AX_ERATE);
    }
    return ok;
}

/* A change of the limit keeps the bucket's tokens, up to the new burst: set
 * again, the same limit granted a fresh burst (new-user trial: a config
 * reloader re-applying it). A rate of one per 1 000 s adds no token while
 * the test runs. */
static void reconfigure_case(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    ax_sched *s = NULL;
    CHECK_EQ(ax_new(&c, &s), 0);
    CHECK_EQ(ax_pause(s), 0);
    CHECK_EQ(ax_set_rate_limit(s, 0.001, 10), 0); /* turned on: a full bucket */
    CHECK_EQ(admit_n(s, 20), 10);
    CHECK_EQ(ax_set_rate_limit(s, 0.001, 10), 0); /* the same again: no new burst */
    CHECK_EQ(admit_n(s, 20), 0);
    CHECK_EQ(ax_set_rate_limit(s, 0.001, 50), 0); /* a larger burst: still empty */
    CHECK_EQ(admit_n(s, 5), 0);
    CHECK_EQ(ax_set_rate_limit(s, 0, 0), 0); /* off */
    CHECK_EQ(admit_n(s, 3), 3);
    CHECK_EQ(ax_set_rate_limit(s, 0.001, 4), 0); /* on again: full */
    CHECK_EQ(admit_n(s, 10), 4);
    /* A full bucket of 2 idles 1.2 s at 10/s, then its burst is raised to
     * 50: it holds 2, not 2 + the idle time's 12 (review: the refill was
     * not capped at the old burst first). At most one token more comes
     * while the 60 submits run (100 ms at 10/s). */
    CHECK_EQ(ax_set_rate_limit(s, 0, 0), 0);
    CHECK_EQ(ax_set_rate_limit(s, 10, 2), 0); /* on: full, 2 */
    usleep(1200 * 1000);
    CHECK_EQ(ax_set_rate_limit(s, 10, 50), 0);
    int got = admit_n(s, 60);
    CHECK(got >= 2 && got <= 3);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, 17 + got);
    CHECK_EQ(st.rejected, 10 + 20 + 5 + 6 + 60 - got);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

int main(void)
{
    reconfigure_case();
    run_case(1, false);
    run_case(2, false);
    run_case(4, false);
    run_case(2, true);
    return 0;
}
