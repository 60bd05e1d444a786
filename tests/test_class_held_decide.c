/* test_class_held_decide.c - an attempt the watchdog ends while
 * its worker is held is decided twice, on two threads.
 *
 * expire_held (watchdog.c:162) calls finish_decide -> class_retry_allowed
 * (spends or denies a retry; a denial writes j->end_why) and wins the CAS;
 * the callback pool's finisher runs the terminal path (reads j->end_why).
 * When the hog returns, the worker handles w->fired: deadline_fired ->
 * finish_running -> finish_decide again for the same attempt (a second
 * budget decision, a second end_why write from the worker thread, unordered
 * with the finisher's read), then loses its CAS.
 *
 * Here: 1 worker; a class task (timeout 50 ms, max_retry 1, a retry budget
 * of zero) parks in ax_sleep; a classless hog holds the worker 400 ms.
 * Expected: the one attempt's retry was denied once (retries_denied == 1).
 * Under TSan: a data race on job.end_why (finish.c:91 vs finish.c:110).
 */
#include "class_common.h"

static int hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t end = ax_now_ns() + 400 * 1000000ull;
    while (ax_now_ns() < end) {
    }
    return 0;
}

static atomic_int parked;
static int park(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&parked, 1);
    return ax_sleep(t, 5000);
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config c = rc_plain("held");
    c.timeout_ms = 50;
    c.max_retry = 1;
    c.retry_budget = true;
    c.retry_budget_ratio = 0;
    c.retry_budget_min_per_s = 0; /* no retry at all */
    c.retry_budget_window_ms = 10000;
    unsigned id;
    CHECK_EQ(ax_class_register(s, &c, &id), AX_OK);
    ax_spec p = {.fn = park, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &p, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&parked) == 1, 5000));
    ax_spec h = {.fn = hog, .timeout_ms = 5000, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 2, 10000));
    usleep(100 * 1000); /* the orphan's return, too */
    ax_class_stats st = rc_cstats(s, id);
    fprintf(stderr, "class retries_allowed=%llu retries_denied=%llu timed_out=%llu\n",
            (unsigned long long)st.retries_allowed, (unsigned long long)st.retries_denied,
            (unsigned long long)st.timed_out);
    CHECK_EQ(st.timed_out, 1u);
    CHECK_EQ(st.retries_allowed, 0u);
    CHECK_EQ(st.retries_denied, 1u);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
