/* test_watchdog.c - the thread that watches time for everybody must neither
 * misread a worker that runs host code, nor let a task that never yields hold
 * other tasks' deadlines and slots, nor run host callbacks itself.
 *
 *  linger         A task that succeeded long before its timeout, whose
 *                 on_done (on the worker) sleeps 1.5 s, is not "lingering":
 *                 no LINGERING event, stats.lingering 0, and no signal cuts
 *                 the callback's nanosleep short.
 *  hog_deadline   1 worker: B parks in ax_sleep(5000) with a 1 s timeout,
 *                 then A hogs the worker until the test has looked. B ends
 *                 TIMED_OUT near its
 *                 deadline while A still spins (not when A returns), its slot
 *                 is freed (running 1), and its on_done does not run on the
 *                 watchdog thread.
 *  hog_unstarted  2 workers: a hog and 7 trivial tasks queued behind it in a
 *                 paused scheduler. After ax_resume the 7 all finish within a
 *                 second, while the hog spins: jobs a worker took but did not
 *                 start yet are not stuck behind a hog on it.
 *  slow_on_done   An on_done that sleeps 1.5 s, for a task the watchdog ended
 *                 (a hog past its timeout; a queued task past its
 *                 deadline_ns), does not run on the watchdog thread and does
 *                 not hold up another task's 200 ms retry back-off.
 *
 * `test_watchdog PART` runs one part ("slow_on_done hog" / "slow_on_done
 * queued" one of its two cases); no argument runs them all. Time bounds are
 * liveness bounds, generous against a busy 2-core machine and TSan.
 */
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

/* Spin on the raw clock: a hog makes no ax call at all. */
static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void spin_ms(uint64_t ms)
{
    uint64_t start = mono_ms();
    volatile uint64_t n = 0;
    while (mono_ms() - start < ms)
        n++;
}

/* The name of the calling thread ("" if it cannot be read). */
static void thread_name(char out[16])
{
    if (pthread_getname_np(pthread_self(), out, 16) != 0)
        out[0] = 0;
}

/* After the fix the threads are "ax-worker-N", "ax-watchdog" and
 * "ax-callback-N"; a host callback must never run on the watchdog. */
static void check_not_watchdog(const char *name)
{
    CHECK(strcmp(name, "ax-watchdog") != 0);
    CHECK(strcmp(name, "ax-monitor") != 0);
}

static ax_sched *new_sched(unsigned workers, unsigned cap, uint32_t grace_ms)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = workers;
    c.max_concurrency = cap;
    if (grace_ms)
        c.grace_ms = grace_ms;
    return test_sched_cfg(&c);
}

/* ---- linger: a slow on_done on the worker is not a lingering task --------- */

static atomic_int lg_events, lg_done_returned, lg_state = -1;
static atomic_int lg_sleep_rc = 1, lg_sleep_errno;
static _Atomic uint64_t lg_sleep_ms;

static void lg_on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_LINGERING)
        atomic_fetch_add(&lg_events, 1);
}

static int lg_task(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 10); /* succeeds ~10 ms into its 100 ms timeout */
}

static void lg_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&lg_state, (int)r->state);
    /* One call whose result is kept: an EINTR must show. If it was cut
     * short, sleep out the rest so the callback still lasts its 1.5 s. */
    struct timespec ts = {1, 500000000}, rem;
    uint64_t t0 = mono_ms();
    int rc = nanosleep(&ts, &rem);
    int err = errno;
    atomic_store(&lg_sleep_ms, mono_ms() - t0);
    atomic_store(&lg_sleep_errno, rc == 0 ? 0 : err);
    atomic_store(&lg_sleep_rc, rc);
    while (rc != 0 && errno == EINTR) {
        ts = rem;
        rc = nanosleep(&ts, &rem);
    }
    atomic_store(&lg_done_returned, 1);
}

static void part_linger(void)
{
    ax_sched *s = new_sched(2, 16, 200);
    CHECK_EQ(ax_events_callback(s, lg_on_event, NULL), 0);
    /* 1 s: the task's 10 ms sleep must end well inside it on a busy
     * machine; on_done's 1.5 s still runs past deadline + grace (1.2 s). */
    ax_spec sp = {.fn = lg_task, .timeout_ms = 1000, .on_done = lg_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&lg_done_returned), 5000));
    usleep(100 * 1000); /* a report the watchdog was making has landed */
    CHECK_EQ(ax_events_flush(s), 0);
    ax_stats st = test_stats(s);
    fprintf(stderr,
            "linger: on_done's first nanosleep(1.5 s) returned %d (%s) after %llu ms; "
            "stats.lingering %llu, LINGERING events %d\n",
            atomic_load(&lg_sleep_rc), strerror(atomic_load(&lg_sleep_errno)),
            (unsigned long long)atomic_load(&lg_sleep_ms), (unsigned long long)st.lingering,
            atomic_load(&lg_events));
    CHECK_EQ(atomic_load(&lg_state), AX_STATE_SUCCEEDED);
    CHECK_EQ(st.lingering, 0);
    CHECK_EQ(atomic_load(&lg_events), 0);
    CHECK_EQ(atomic_load(&lg_sleep_rc), 0); /* not cut short by a signal */
    CHECK_EQ(atomic_load(&lg_sleep_errno), 0);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(st.timed_out, 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

/* ---- hog_deadline: a hog does not hold the deadline of a parked task ------ */

#define HD_HOG_CAP_MS 30000 /* liveness only: A spins until the test has looked */
#define HD_B_TIMEOUT_MS 1000 /* A starts within it (300 ms: not on a loaded machine) */

static atomic_int hd_b_parked, hd_b_returned, hd_b_sleep_rc = 1, hd_b_done_calls;
static atomic_int hd_b_state = -1, hd_b_saw_a_spinning = -1;
static _Atomic uint64_t hd_b_deadline_ns, hd_b_done_ms;
static char hd_b_thread[16], hd_b_error[128];
static atomic_int hd_a_spinning, hd_a_done_calls, hd_a_state = -1, hd_a_release;
static _Atomic uint64_t hd_a_start_ns;

static int hd_b(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&hd_b_deadline_ns, ax_task_deadline_ns(t));
    atomic_store(&hd_b_parked, 1);
    int rc = ax_sleep(t, 5000);
    atomic_store(&hd_b_sleep_rc, rc);
    atomic_store(&hd_b_returned, 1);
    return rc;
}

static void hd_b_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&hd_b_done_ms, mono_ms());
    atomic_store(&hd_b_saw_a_spinning, atomic_load(&hd_a_spinning));
    atomic_store(&hd_b_state, (int)r->state);
    snprintf(hd_b_error, sizeof hd_b_error, "%s", r->error);
    thread_name(hd_b_thread);
    atomic_fetch_add(&hd_b_done_calls, 1);
}

static int hd_a(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&hd_a_start_ns, ax_now_ns());
    atomic_store(&hd_a_spinning, 1);
    uint64_t end = mono_ms() + HD_HOG_CAP_MS;
    while (!atomic_load(&hd_a_release) && mono_ms() < end)
        ;
    atomic_store(&hd_a_spinning, 0);
    return 0;
}

static void hd_a_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&hd_a_state, (int)r->state);
    atomic_fetch_add(&hd_a_done_calls, 1);
}

static void part_hog_deadline(void)
{
    ax_sched *s = new_sched(1, 4, 0);
    /* B first, parked on the only worker; then A holds that worker. */
    uint64_t b_submit_ms = mono_ms();
    ax_spec b = {.fn = hd_b, .timeout_ms = HD_B_TIMEOUT_MS, .on_done = hd_b_done};
    CHECK_EQ(ax_submit(s, &b, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&hd_b_parked), 2000));
    ax_spec a = {.fn = hd_a, .timeout_ms = 10000, .on_done = hd_a_done};
    CHECK_EQ(ax_submit(s, &a, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&hd_a_spinning), 2000));
    /* The setup holds: A had the worker before B's deadline. */
    CHECK(atomic_load(&hd_a_start_ns) < atomic_load(&hd_b_deadline_ns));

    CHECK(WAIT_UNTIL(atomic_load(&hd_b_done_calls) == 1, 4000));
    uint64_t took = atomic_load(&hd_b_done_ms) - b_submit_ms;
    fprintf(stderr,
            "hog_deadline: B (timeout %d ms) ended %s %llu ms after its submission, "
            "A still spinning: %d, on_done on thread \"%s\"\n",
            HD_B_TIMEOUT_MS, ax_state_name((ax_state)atomic_load(&hd_b_state)),
            (unsigned long long)took, atomic_load(&hd_b_saw_a_spinning), hd_b_thread);
    CHECK_EQ(atomic_load(&hd_b_state), AX_STATE_TIMED_OUT);
    /* B's message says why it could not return: another task held it. */
    CHECK_STR(hd_b_error, "timed out after 1000 ms (its worker was held)");
    _Static_assert(HD_B_TIMEOUT_MS == 1000, "the text above");
    CHECK_LE(took, HD_B_TIMEOUT_MS + 700); /* near its deadline, not when A returns */
    CHECK_EQ(atomic_load(&hd_b_saw_a_spinning), 1);
    /* B's slot is free while A still spins. */
    CHECK(WAIT_UNTIL(test_stats(s).running == 1, 500));
    CHECK_EQ(atomic_load(&hd_a_spinning), 1);
    check_not_watchdog(hd_b_thread);
    atomic_store(&hd_a_release, 1);

    /* A ends on its own; B's coroutine then sees its timeout. */
    CHECK(WAIT_UNTIL(atomic_load(&hd_a_done_calls) == 1, 5000));
    CHECK_EQ(atomic_load(&hd_a_state), AX_STATE_SUCCEEDED);
    CHECK(WAIT_UNTIL(atomic_load(&hd_b_returned), 2000));
    CHECK_EQ(atomic_load(&hd_b_sleep_rc), AX_ETIMEDOUT);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0 && test_stats(s).orphans == 0, 2000));
    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&hd_b_done_calls), 1);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.timed_out, 1);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

/* ---- hog_unstarted: taken-but-not-started jobs are not stuck behind a hog -- */

#define HU_HOG_MS 2000
#define HU_NC 7

static atomic_int hu_a_started, hu_a_finished, hu_a_done_calls, hu_a_state = -1;
static atomic_int hu_c_done, hu_c_bad, hu_c_saw_a_finished;
static _Atomic uint64_t hu_c_last_ms;

static int hu_a(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&hu_a_started, 1);
    spin_ms(HU_HOG_MS);
    atomic_store(&hu_a_finished, 1);
    return 0;
}

static void hu_a_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&hu_a_state, (int)r->state);
    atomic_fetch_add(&hu_a_done_calls, 1);
}

static int hu_c(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void hu_c_done_cb(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state != AX_STATE_SUCCEEDED)
        atomic_fetch_add(&hu_c_bad, 1);
    if (atomic_load(&hu_a_finished))
        atomic_fetch_add(&hu_c_saw_a_finished, 1);
    uint64_t now = mono_ms(), prev = atomic_load(&hu_c_last_ms);
    while (now > prev && !atomic_compare_exchange_weak(&hu_c_last_ms, &prev, now))
        ;
    atomic_fetch_add(&hu_c_done, 1);
}

static void part_hog_unstarted(void)
{
    ax_sched *s = new_sched(2, 16, 0);
    CHECK_EQ(ax_pause(s), 0);
    ax_spec a = {.fn = hu_a, .timeout_ms = 10000, .on_done = hu_a_done};
    CHECK_EQ(ax_submit(s, &a, NULL), 0);
    for (int i = 0; i < HU_NC; i++) {
        ax_spec c = {.fn = hu_c, .timeout_ms = 10000, .on_done = hu_c_done_cb};
        CHECK_EQ(ax_submit(s, &c, NULL), 0);
    }
    uint64_t resume_ms = mono_ms();
    CHECK_EQ(ax_resume(s), 0);
    bool all = WAIT_UNTIL(atomic_load(&hu_c_done) == HU_NC, 4000);
    uint64_t last = atomic_load(&hu_c_last_ms);
    fprintf(stderr,
            "hog_unstarted: %d/%d trivial tasks done, the last %llu ms after ax_resume; "
            "%d of them after the hog returned\n",
            atomic_load(&hu_c_done), HU_NC,
            (unsigned long long)(last > resume_ms ? last - resume_ms : 0),
            atomic_load(&hu_c_saw_a_finished));
    CHECK(all);
    CHECK_LE(last - resume_ms, 1000); /* not behind the 2 s hog */
    CHECK_EQ(atomic_load(&hu_c_saw_a_finished), 0);
    CHECK_EQ(atomic_load(&hu_c_bad), 0);

    CHECK(WAIT_UNTIL(atomic_load(&hu_a_done_calls) == 1, 5000));
    CHECK_EQ(atomic_load(&hu_a_state), AX_STATE_SUCCEEDED);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 2000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.succeeded, HU_NC + 1);
    CHECK_EQ(st.timed_out, 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

/* ---- slow_on_done: a slow on_done holds up no timer ----------------------- */

#define SOD_SLEEP_NS 1500000000L
#define SOD_BACKOFF_MS 200

static atomic_int sod_entered, sod_returned, sod_state = -1;
static char sod_thread[16], sod_error[128];
static atomic_int r_done_calls, r_state = -1, r_attempts;
static _Atomic uint64_t r_fail_ms, r_retry_ms;

static void sod_slow_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&sod_state, (int)r->state);
    snprintf(sod_error, sizeof sod_error, "%s", r->error);
    thread_name(sod_thread);
    atomic_store(&sod_entered, 1);
    struct timespec ts = {SOD_SLEEP_NS / 1000000000L, SOD_SLEEP_NS % 1000000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    atomic_store(&sod_returned, 1);
}

static int sod_hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    spin_ms(400); /* far past its 50 ms timeout, no ax call */
    return 0;
}

static int sod_never(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

/* Fails its first attempt, succeeds on the retry. */
static int sod_r(ax_task *t, void *arg)
{
    (void)arg;
    if (ax_task_attempt(t) == 0) {
        atomic_store(&r_fail_ms, mono_ms());
        return 7;
    }
    atomic_store(&r_retry_ms, mono_ms());
    return 0;
}

static void sod_r_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&r_attempts, (int)r->attempts);
    atomic_store(&r_state, (int)r->state);
    atomic_fetch_add(&r_done_calls, 1);
}

/* queued: the slow on_done is that of a task whose deadline_ns passed while
 * it waited in a paused scheduler; otherwise of a hog past its timeout. */
static void part_slow_on_done(bool queued)
{
    const char *what = queued ? "queued" : "hog";
    atomic_store(&sod_entered, 0);
    atomic_store(&sod_returned, 0);
    atomic_store(&sod_state, -1);
    atomic_store(&r_done_calls, 0);
    atomic_store(&r_state, -1);
    atomic_store(&r_attempts, 0);
    atomic_store(&r_fail_ms, 0);
    atomic_store(&r_retry_ms, 0);

    ax_sched *s = new_sched(2, 16, 0);
    if (queued) {
        CHECK_EQ(ax_pause(s), 0);
        ax_spec d = {.fn = sod_never,
                     .timeout_ms = 1000,
                     .deadline_ns = ax_now_ns() + 50 * 1000000ull,
                     .on_done = sod_slow_done};
        CHECK_EQ(ax_submit(s, &d, NULL), 0);
    } else {
        ax_spec h = {.fn = sod_hog, .timeout_ms = 50, .on_done = sod_slow_done};
        CHECK_EQ(ax_submit(s, &h, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&sod_entered), 3000));
    if (queued)
        CHECK_EQ(ax_resume(s), 0);

    /* While that on_done sleeps: R fails, backs off 200 ms, succeeds. */
    static const ax_retry_policy fixed = {AX_BACKOFF_EXPONENTIAL, SOD_BACKOFF_MS, SOD_BACKOFF_MS,
                                          0};
    ax_spec r = {.fn = sod_r,
                 .timeout_ms = 1000,
                 .max_retry = 1,
                 .retry = &fixed,
                 .on_done = sod_r_done};
    CHECK_EQ(ax_submit(s, &r, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&r_done_calls) == 1, 5000));
    uint64_t gap = atomic_load(&r_retry_ms) - atomic_load(&r_fail_ms);
    fprintf(stderr,
            "slow_on_done(%s): R's retry started %llu ms after its first attempt failed "
            "(back-off %d ms); the slow on_done (%s) ran on thread \"%s\"\n",
            what, (unsigned long long)gap, SOD_BACKOFF_MS,
            ax_state_name((ax_state)atomic_load(&sod_state)), sod_thread);
    CHECK_EQ(atomic_load(&r_state), AX_STATE_SUCCEEDED);
    CHECK_EQ(atomic_load(&r_attempts), 2);
    CHECK(atomic_load(&r_fail_ms) != 0 && atomic_load(&r_retry_ms) != 0);
    CHECK(gap >= SOD_BACKOFF_MS - 1);
    CHECK_LE(gap, 1000); /* not after the 1.5 s on_done returned */
    CHECK_EQ(atomic_load(&sod_state), AX_STATE_TIMED_OUT);
    /* The hog's own message names it as the holder, not as a task held
     * by another (new-user trial: both read "its worker was held"). */
    if (!queued)
        CHECK_STR(sod_error,
                  "timed out after 50 ms (it ran on without yielding past its deadline)");
    check_not_watchdog(sod_thread);

    CHECK(WAIT_UNTIL(atomic_load(&sod_returned), 3000));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0 && test_stats(s).orphans == 0, 2000));
    ax_stats st = test_stats(s);
    CHECK_EQ(st.timed_out, 1);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(st.retried, 1);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *sub = argc > 2 ? argv[2] : NULL;
    bool any = false;
#define PART(name) (!only || strcmp(only, name) == 0 ? (any = true) : false)
    if (PART("linger"))
        part_linger();
    if (PART("hog_deadline"))
        part_hog_deadline();
    if (PART("hog_unstarted"))
        part_hog_unstarted();
    if (PART("slow_on_done")) {
        if (!sub || strcmp(sub, "hog") == 0)
            part_slow_on_done(false);
        if (!sub || strcmp(sub, "queued") == 0)
            part_slow_on_done(true);
    }
#undef PART
    if (!any) {
        fprintf(stderr, "usage: %s [linger|hog_deadline|hog_unstarted|slow_on_done [hog|queued]]\n",
                argv[0]);
        return 2;
    }
    return 0;
}
