/* test_linger_parked_naming.c - a worker never waits for the symbol tables
 * to name a parked task's lingering report (obs/linger.c linger_check,
 * symbols.c bt_warm).
 *
 * A task that ignores its timeout while parked (here, in ax_sleep) is
 * reported by its own worker, with a backtrace named by libdw. The first
 * naming in a process reads the modules' symbol and line tables: 58 ms for
 * a small test program, far more for a service's binary, and the worker
 * did it itself: all its other tasks waited (noticed in a new user's
 * trial). Made certain here: libdw's dwfl_linux_proc_report, the first
 * step of that reading, is replaced by one that waits for the test. One
 * worker, grace_ms 20. O sleeps on past its 5 ms timeout; once the tables
 * are being read, Q is submitted. Checked: Q runs and ends while the
 * reading is held, and O is not reported meanwhile; let go, O is reported
 * once, its function named. The old code: Q waited
 * for the reading (the worker named O's report itself).
 *
 * With the argument "returned": the reading held while O's report is due
 * (a ticker task sleeping 1 ms makes the worker look at O while it is
 * parked), then O returns: its report is made at its return, with the
 * raw addresses, while the reading is still held. Before (review of
 * 5efb6e8): the deferred report was dropped with the returned task.
 *
 * With "panic": the reading held, a task on the same worker panics, then
 * Q is submitted: Q runs while the reading is held, and the panic's
 * report has the raw addresses. Before (review of 5efb6e8): the worker
 * waited for the tables to name the panic's frames, Q with it.
 * With "late": the read-ahead thread (ax-symbols) held before it takes
 * the tables' lock, for 400 ms past O's timeout, a task panicking on the
 * worker meanwhile; then as above. Checked the same: Q runs while the
 * reading is held, and the panic's report has the raw addresses. Before
 * (CI, TSan, 2 of 25 runs on a loaded machine): the worker found the lock
 * free when O's report was due, or at the panic (review), read the tables
 * itself, and Q waited for them.
 * With "hog": no read-ahead; a hog lingers and its naming thread is held
 * before the tables' lock; a task then panics on the worker. Checked: the
 * panic is reported with raw addresses and nobody has entered libdw's
 * reading. Before (review of 5278c09): the worker found the lock free and
 * read the tables itself.
 * Skipped (77) without libdw. */
#include "util.h"

#include "internal.h" /* bt_symbolised */

#include <dlfcn.h>
#include <string.h>
#include <sys/types.h>

static atomic_int in_naming, let_go;
static int (*real_report)(void *, pid_t);

/* libdw is a shared library: libax's symbols.c binds to this one. */
int dwfl_linux_proc_report(void *dwfl, pid_t pid)
{
    atomic_store(&in_naming, 1);
    WAIT_UNTIL(atomic_load(&let_go), 60000);
    return real_report(dwfl, pid);
}

static atomic_int hold_warm, warm_release, symbols_held;
static int (*real_setname)(pthread_t, const char *);

/* libax names its read-ahead thread first thing: held there, before it
 * takes the tables' lock ("late"). */
int pthread_setname_np(pthread_t th, const char *name)
{
    if (atomic_load(&hold_warm) && strcmp(name, "ax-symbols") == 0) {
        atomic_fetch_add(&symbols_held, 1);
        WAIT_UNTIL(atomic_load(&warm_release), 60000);
    }
    return real_setname(th, name);
}

static atomic_int stop, q_done, lingering_n, o_named, o_raw, tick_stop, panic_raw;
static atomic_ullong o_id;
static char o_text[AX_EVENT_MESSAGE_MAX];

static __attribute__((noinline)) int orphan_fn(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&stop))
        ax_sleep(t, 10); /* its code ignored: AX_ETIMEDOUT after 5 ms */
    return 0;
}

static int ticker(ax_task *t, void *arg)
{
    (void)arg;
    while (!atomic_load(&tick_stop))
        ax_sleep(t, 1);
    return 0;
}

static atomic_int hog_stop;

static int hog_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t end = ax_now_ns() + 60000 * 1000000ull; /* liveness only */
    while (!atomic_load(&hog_stop) && ax_now_ns() < end)
        ;
    return 0;
}

static int panicker(ax_task *t, void *arg)
{
    (void)arg;
    ax_panic(t, "on purpose");
    return 0;
}

static int quick(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void q_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_SUCCEEDED)
        atomic_store(&q_done, 1);
}

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_PANIC &&
        strstr(e->message, "on purpose (frames not named: the symbol tables were busy 100 ms)"))
        atomic_store(&panic_raw, 1);
    if (e->kind != AX_EV_LINGERING)
        return;
    if (e->id == atomic_load(&o_id)) {
        snprintf(o_text, sizeof o_text, "%s", e->message);
        if (strstr(e->message, "still running ") && strstr(e->message, " orphan_fn+0x"))
            atomic_store(&o_named, 1);
        if (strstr(e->message, "(frames not named: the symbol tables were busy when it "
                               "returned)\n#0 ") &&
            strncmp(e->message, "ran on ", 7) == 0 && strstr(e->message, "before it returned"))
            atomic_store(&o_raw, 1);
    }
    atomic_fetch_add(&lingering_n, 1);
}

int main(int argc, char **argv)
{
    bool returned = argc > 1 && strcmp(argv[1], "returned") == 0;
    bool panic = argc > 1 && strcmp(argv[1], "panic") == 0;
    bool late = argc > 1 && strcmp(argv[1], "late") == 0;
    bool hog_naming = argc > 1 && strcmp(argv[1], "hog") == 0;
    if (!bt_symbolised()) {
        fprintf(stderr, "skipped: ax built without libdw\n");
        return 77;
    }
    real_report = (int (*)(void *, pid_t))dlsym(RTLD_NEXT, "dwfl_linux_proc_report");
    CHECK(real_report != NULL);
    real_setname = (int (*)(pthread_t, const char *))dlsym(RTLD_NEXT, "pthread_setname_np");
    CHECK(real_setname != NULL);
    atomic_store(&hold_warm, late || hog_naming);
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.grace_ms = 20;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);

    if (hog_naming) {
        /* A hog's report: its naming thread held before the tables' lock
         * (no read-ahead: the naming thread is the first symbols thread).
         * A panic on the worker then must not read the tables itself. */
        ax_spec h = {.fn = hog_fn, .timeout_ms = 5};
        CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&symbols_held) == 1, 30000 * TEST_SLOW));
        atomic_store(&hog_stop, 1);
        ax_spec pk = {.fn = panicker, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &pk, NULL), AX_OK);
        bool raw = WAIT_UNTIL(atomic_load(&panic_raw), 10000 * TEST_SLOW);
        if (!raw)
            fprintf(stderr, "the panic's report did not come: the worker reads the tables (%d)\n",
                    atomic_load(&in_naming));
        CHECK(raw);
        CHECK_EQ(atomic_load(&in_naming), 0); /* nobody reads them yet */
        atomic_store(&warm_release, 1);
        atomic_store(&let_go, 1);
        CHECK(WAIT_UNTIL(atomic_load(&lingering_n) == 1, 30000 * TEST_SLOW)); /* the hog's */
        CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
        ax_free(s);
        return 0;
    }

    uint64_t id = 0;
    ax_spec o = {.fn = orphan_fn, .timeout_ms = 5};
    CHECK_EQ(ax_submit(s, &o, &id), AX_OK);
    atomic_store(&o_id, id);
    if (late) {
        usleep(200000); /* O's report due meanwhile, the read-ahead not begun */
        ax_spec pk = {.fn = panicker, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &pk, NULL), AX_OK);
        usleep(200000);
        atomic_store(&warm_release, 1);
    }
    CHECK(WAIT_UNTIL(atomic_load(&in_naming), 30000 * TEST_SLOW));

    if (returned) {
        ax_spec tk = {.fn = ticker, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &tk, NULL), AX_OK);
        usleep(500000); /* O's pauses grow to 100 ms: found parked, its report waits */
        CHECK_EQ(atomic_load(&lingering_n), 0);
        atomic_store(&stop, 1);
        bool made = WAIT_UNTIL(atomic_load(&lingering_n) == 1, 10000 * TEST_SLOW);
        if (!made)
            fprintf(stderr, "O returned, its report never made\n");
        CHECK(made);
        if (!atomic_load(&o_raw))
            fprintf(stderr, "O's report: %s\n", o_text);
        CHECK_EQ(atomic_load(&o_raw), 1);
        atomic_store(&tick_stop, 1);
        atomic_store(&let_go, 1);
        CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
        ax_stats st;
        CHECK_EQ(ax_stats_get(s, &st), AX_OK);
        CHECK_EQ(st.lingering, 1);
        ax_free(s);
        CHECK_EQ(atomic_load(&lingering_n), 1);
        return 0;
    }

    if (panic) {
        ax_spec pk = {.fn = panicker, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &pk, NULL), AX_OK);
    }
    ax_spec q = {.fn = quick, .timeout_ms = 60000, .on_done = q_on_done};
    CHECK_EQ(ax_submit(s, &q, NULL), AX_OK);
    bool ran = WAIT_UNTIL(atomic_load(&q_done), 10000 * TEST_SLOW);
    if (!ran)
        fprintf(stderr, "Q not run in 10 s while the symbol tables were being read: the "
                        "worker waits for them\n");
    CHECK(ran);
    CHECK_EQ(atomic_load(&lingering_n), 0);
    if (panic || late)
        CHECK(WAIT_UNTIL(atomic_load(&panic_raw), 10000 * TEST_SLOW));

    atomic_store(&let_go, 1);
    CHECK(WAIT_UNTIL(atomic_load(&lingering_n) == 1, 30000 * TEST_SLOW));
    if (!atomic_load(&o_named))
        fprintf(stderr, "O's report: %s\n", o_text);
    CHECK_EQ(atomic_load(&o_named), 1);
    atomic_store(&stop, 1);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), AX_OK);
    CHECK_EQ(st.lingering, 1);
    ax_free(s);
    CHECK_EQ(atomic_load(&lingering_n), 1);
    return 0;
}
