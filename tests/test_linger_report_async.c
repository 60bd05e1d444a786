/* test_linger_report_async.c - naming a lingering hog's backtrace does not
 * stop the watchdog (obs/linger.c).
 *
 * The watchdog alone ends the attempts of a worker a task holds (no yield),
 * and reports a hog still running grace_ms past its deadline with a named
 * backtrace. Naming the first one reads the modules' symbol tables (libdw:
 * 58 ms for a small test program here, far more for a service's binary),
 * and the watchdog did it itself: meanwhile no held worker's deadline was
 * enforced, nothing was handed back. Made certain here: this test replaces
 * libdw's dwfl_linux_proc_report (the first step of naming anything) with
 * one that waits until the test lets it go.
 *
 * Two workers. H1 spins past its 5 ms timeout; grace_ms 20. Once its report
 * is being named (the replacement entered), H2 starts on the other worker
 * and spins past its 30 ms timeout. Checked: H2 ends TIMED_OUT (the
 * watchdog's doing) while the naming is still held; then, let go, both
 * hogs are reported lingering, H1's report with its function named; the
 * counts exact. The old code: H2 ended only after the naming was let go.
 * Skipped (77) without libdw, where nothing reads symbol tables. */
#include "util.h"

#include "internal.h" /* bt_symbolised */

#include <dlfcn.h>
#include <string.h>
#include <sys/types.h>

static atomic_int in_naming, let_go;
static int (*real_report)(void *, pid_t);

/* libdw is a shared library: the test's definition is the one libax's
 * symbols.c binds to. */
int dwfl_linux_proc_report(void *dwfl, pid_t pid)
{
    atomic_store(&in_naming, 1);
    WAIT_UNTIL(atomic_load(&let_go), 60000);
    return real_report(dwfl, pid);
}

static atomic_int stop_spin, h2_in, h2_done_n, h2_state, lingering_n, h1_reported, h1_named;
static atomic_ullong h1_id;

static __attribute__((noinline)) void hog_one_spin(void)
{
    while (!atomic_load(&stop_spin))
        __asm__ __volatile__("" ::: "memory");
}

static int hog_one(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    hog_one_spin();
    return 0;
}

static int hog_two(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&h2_in, 1);
    while (!atomic_load(&stop_spin))
        __asm__ __volatile__("" ::: "memory");
    return 0;
}

static void h2_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&h2_state, (int)r->state);
    atomic_fetch_add(&h2_done_n, 1);
}

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind != AX_EV_LINGERING) return;
    if (e->id == atomic_load(&h1_id)) {
        if (strstr(e->message, " hog_one_spin+0x")) atomic_store(&h1_named, 1);
        atomic_store(&h1_reported, 1);
    }
    atomic_fetch_add(&lingering_n, 1);
}

int main(void)
{
    if (!bt_symbolised()) {
        fprintf(stderr, "skipped: ax built without libdw\n");
        return 77;
    }
    real_report = (int (*)(void *, pid_t))dlsym(RTLD_NEXT, "dwfl_linux_proc_report");
    CHECK(real_report != NULL);
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.grace_ms = 20;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);

    uint64_t id = 0;
    ax_spec h1 = {.fn = hog_one, .timeout_ms = 5};
    CHECK_EQ(ax_submit(s, &h1, &id), AX_OK);
    atomic_store(&h1_id, id);
    /* 5 ms, then grace_ms, then the watchdog's look: its report is named. */
    CHECK(WAIT_UNTIL(atomic_load(&in_naming), 30000 * TEST_SLOW));

    ax_spec h2 = {.fn = hog_two, .timeout_ms = 30, .on_done = h2_done};
    CHECK_EQ(ax_submit(s, &h2, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&h2_in), 30000 * TEST_SLOW));
    /* Only the watchdog can end it: its worker never gets back. */
    bool ended = WAIT_UNTIL(atomic_load(&h2_done_n) == 1, 10000 * TEST_SLOW);
    if (!ended)
        fprintf(stderr, "H2 not ended in 10 s while H1's report was being named: the watchdog "
                        "waits for the naming\n");
    CHECK(ended);
    CHECK_EQ(atomic_load(&h2_state), AX_STATE_TIMED_OUT);
    /* H1's report waits for its names (H2's may not: without a backtrace
     * taken in time, on a busy machine, it has none to name). */
    CHECK_EQ(atomic_load(&h1_reported), 0);

    atomic_store(&let_go, 1);
    CHECK(WAIT_UNTIL(atomic_load(&lingering_n) == 2, 30000 * TEST_SLOW));
    CHECK_EQ(atomic_load(&h1_named), 1);
    atomic_store(&stop_spin, 1);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), AX_OK);
    CHECK_EQ(st.lingering, 2);
    CHECK_EQ(st.timed_out, 2);
    ax_free(s);
    CHECK_EQ(atomic_load(&lingering_n), 2);
    CHECK_EQ(atomic_load(&h2_done_n), 1);
    return 0;
}
