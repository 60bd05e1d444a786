/* Smoke: many empty tasks on 2 workers all succeed and are counted. */
#include "util.h"

/* TSan makes every fiber creation ~100x slower (each run is a TSan fiber):
 * 20 000 runs took 21-26 s under load there, against a 20 s bound. A tenth
 * of them still races every path this test has. */
#if defined(__SANITIZE_THREAD__)
#define N 2000
#else
#define N 20000
#endif

static atomic_int done;
static atomic_int ran;

static int fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&ran, 1);
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    CHECK_EQ(r->state, AX_STATE_SUCCEEDED);
    atomic_fetch_add(&done, 1);
}

int main(void)
{
    ax_sched *s = test_sched(2, 500);
    const int n = N;
    for (int i = 0; i < n; i++) {
        ax_spec sp = {.fn = fn, .priority = (ax_priority)(i % 3), .timeout_ms = 1000,
                      .on_done = on_done};
        int rc;
        while ((rc = ax_submit(s, &sp, NULL)) == AX_ESHED || rc == AX_EFULL)
            usleep(100);
        CHECK_EQ(rc, 0);
    }
    if (!WAIT_UNTIL(atomic_load(&done) == n, 60000)) { /* liveness only */
        ax_stats st = test_stats(s);
        fprintf(stderr,
                "smoke: %d done, %d ran; stats: submitted %llu started %llu succeeded %llu "
                "running %llu queued %llu/%llu/%llu\n",
                atomic_load(&done), atomic_load(&ran), (unsigned long long)st.submitted,
                (unsigned long long)st.started, (unsigned long long)st.succeeded,
                (unsigned long long)st.running, (unsigned long long)st.queued[0],
                (unsigned long long)st.queued[1], (unsigned long long)st.queued[2]);
        CHECK(!"every task done");
    }
    CHECK_EQ(atomic_load(&ran), n);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 1000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted, n);
    CHECK_EQ(st.succeeded, n);
    CHECK_EQ(st.started, n);
    CHECK_EQ(st.running, 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
