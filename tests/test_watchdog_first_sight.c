/* test_watchdog_first_sight.c - the watchdog judges a worker held only after
 * HOLD_MS (10 ms) of its own sightings without a switch, from a worker's
 * very first moments too.
 *
 * The defect (CI of 1922052, test_hog_returns_late part F, 1 run in ~60
 * beside the suite): a worker's watch record started at sequence 0 seen
 * "since 0", and a new worker is busy at sequence 0 until it publishes
 * its first run. A watchdog whose first look came then (both threads
 * started late on a busy machine, the worker's first loop finding work)
 * judged the worker held at once and handed its to-start list back: a
 * task that yielded was resumed before the task behind it had started.
 *
 * Made deterministic here: the threads are held at their naming
 * (pthread_setname_np, the first thing each does) until the test opens
 * their gates. Worker 0 alone finds the work: J0, whose deadline passed
 * while queued, and A. Its dispatch puts A on its to-start list, then
 * runs J0's on_done inline, before its first run: there the watchdog and
 * worker 1 are let go (time T), and the on_done waits up to 9 ms for A.
 * A can start during it only if the watchdog handed A back, and with
 * sightings from T on, only at T + 10 ms or later. Checked: no A entered
 * during the on_done before T + 10 ms; then both tasks' ends, exactly.
 * (The old code: A entered on worker 1 within ~0.1 ms of T.) */
#include "util.h"

#include <dlfcn.h>
#include <string.h>

static atomic_int gate_w0, gate_rest, gated; /* gated: threads held here */

/* The real one, looked up in main before any thread starts. */
static int (*real_setname)(pthread_t, const char *);

/* libax is linked in statically: its calls bind to this one. */
int pthread_setname_np(pthread_t th, const char *name)
{
    if (strcmp(name, "ax-worker-0") == 0) {
        atomic_fetch_add(&gated, 1);
        WAIT_UNTIL(atomic_load(&gate_w0), 60000);
    } else if (strcmp(name, "ax-worker-1") == 0 || strcmp(name, "ax-watchdog") == 0) {
        atomic_fetch_add(&gated, 1);
        WAIT_UNTIL(atomic_load(&gate_rest), 60000);
    }
    return real_setname(th, name);
}

static atomic_int a_in, a_done_n, j0_done_n, j0_state, done_returned;
static atomic_ullong a_in_ns, gate_ns;

static int task_a(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&a_in_ns, ax_now_ns());
    atomic_store(&a_in, 1);
    return 0;
}

static int never(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static atomic_int a_in_during; /* A entered while J0's on_done ran */
static atomic_ullong a_in_during_ns;

static void j0_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&j0_state, (int)r->state);
    /* On worker 0, before its first run: the watchdog's first look can
     * come only from now on. */
    uint64_t t = ax_now_ns();
    atomic_store(&gate_ns, t);
    atomic_store(&gate_rest, 1);
    while (!atomic_load(&a_in) && ax_now_ns() < t + 9000000u)
        ;
    if (atomic_load(&a_in)) {
        atomic_store(&a_in_during, 1);
        atomic_store(&a_in_during_ns, atomic_load(&a_in_ns) - t);
    }
    atomic_fetch_add(&j0_done_n, 1);
    atomic_store(&done_returned, 1);
}

static void a_done(const ax_result *r, void *arg)
{
    (void)arg;
    CHECK_EQ(r->state, AX_STATE_SUCCEEDED);
    atomic_fetch_add(&a_done_n, 1);
}

int main(void)
{
    real_setname = (int (*)(pthread_t, const char *))dlsym(RTLD_NEXT, "pthread_setname_np");
    CHECK(real_setname != NULL);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    ax_sched *s = test_sched_cfg(&c);
    /* J0's deadline passes while it is queued: worker 0's first dispatch
     * ends it there and runs its on_done inline. */
    ax_spec j0 = {.fn = never, .timeout_ms = 10000, .deadline_ns = ax_now_ns() + 1000000u,
                  .on_done = j0_done};
    ax_spec a = {.fn = task_a, .timeout_ms = 10000, .on_done = a_done};
    CHECK_EQ(ax_submit(s, &j0, NULL), AX_OK);
    CHECK_EQ(ax_submit(s, &a, NULL), AX_OK);
    uint64_t until = ax_now_ns() + 5000000u; /* past it by 4 ms: the wheel's ticks */
    while (ax_now_ns() < until)
        ;
    atomic_store(&gate_w0, 1);

    CHECK(WAIT_UNTIL(atomic_load(&a_done_n) == 1 && atomic_load(&j0_done_n) == 1,
                     30000 * TEST_SLOW));
    CHECK_EQ(atomic_load(&j0_state), AX_STATE_TIMED_OUT);
    if (atomic_load(&a_in_during)) {
        uint64_t d = atomic_load(&a_in_during_ns);
        fprintf(stderr, "A entered %llu us after the watchdog was let go, during J0's on_done\n",
                (unsigned long long)(d / 1000u));
        /* A hand-back at or past HOLD_MS is the watchdog's right (worker 0
         * preempted that long); before it, a judgement from no sighting. */
        CHECK(d >= 10000000u);
    }
    CHECK_EQ(atomic_load(&gated), 3); /* the gates held what they were meant to */
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    CHECK_EQ(atomic_load(&a_done_n), 1);
    CHECK_EQ(atomic_load(&j0_done_n), 1);
    return 0;
}
