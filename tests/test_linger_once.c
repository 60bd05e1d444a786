/* test_linger_once.c - a lingering hog is reported once, every one is, and
 * a backtrace that cannot be taken does not hold the reports up
 * (obs/linger.c; review of ca00bc6). One worker, grace_ms 20, events to a
 * callback. Checked:
 *   B. (first: the process's first naming) H1 lingers and its report is
 *      being named, held here (libdw's dwfl_linux_proc_report replaced);
 *      H1 returns; H2 then lingers 60 ms on the same worker and returns.
 *      Let go, each is reported exactly once, with its own function named.
 *      Before: a worker had one report in progress at a time, and H2,
 *      gone by the time it was free, was never reported. Needs libdw.
 *   A. a timed-out task that spins 40 ms and yields, five times: one
 *      LINGERING event, ax_stats.lingering 1. Before: reported again after
 *      every yield (2 to 5), the watchdog keyed on the run's sequence,
 *      which a yield changes, not on its attempt.
 *   C. a hog spinning on a stack of its own (ucontext), where the signal
 *      that takes a backtrace finds it off the task's stack: reported
 *      (without a backtrace) while it still spins. Before: the watchdog
 *      asked again at every poll without a bound, and gave up only if a
 *      poll came before the handler had answered; made certain here by a
 *      pthread_kill that returns once the handler has (the report came
 *      only after the hog stopped, 10 s). Not under TSan (swapcontext).
 *   D. the watchdog's signal for H1's backtrace delayed (a pthread_kill
 *      held here, as a watchdog preempted after its checks) until H1 has
 *      returned and H2 runs on the same worker (and run struct): H1's
 *      report has no frame of H2's. Before: the handler matched the run
 *      struct only, and named H2's frames in H1's report (review of
 *      ddb972a). Not under TSan (the same pthread_kill); needs libdw for
 *      the names.
 *   E. an orphan that calls ax_sleep on (ignoring AX_ETIMEDOUT) beside a
 *      task that spins 150 ms between yields, on the one worker: its
 *      pauses end while the spinner holds the worker, so each pass of the
 *      worker finds it woken, never parked: reported all the same, once,
 *      with its frames (where it parked last: resumed for them, as a
 *      parked task is). Before: never (a new-user trial's orphans, calling
 *      on for 300 ms); then without a backtrace (CI:
 *      test_linger_parked_naming, one worker whose only wake-ups were the
 *      orphan's own timers).
 *   F. beside the same spinner, a task that honours its timeout: its wait
 *      fails at the deadline, it makes two cleanup calls (each checked:
 *      the first returns at once, the second pauses) and returns when
 *      resumed. Not reported (E's first rule blamed it: review).
 *   G. a task that panics after its timeout, one of its cleanups calling
 *      ax_sleep on: its report names the cleanup, where it is. Before
 *      (review of 874737d): the frames of its panic, kept for the panic's
 *      report, were taken for where it was.
 * States and counts only; the waits bound liveness. */
#include "util.h"

#include "internal.h" /* bt_symbolised */

#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <ucontext.h>

static int (*real_report)(void *, pid_t);
static atomic_int in_naming, let_go = 1;

/* libdw is a shared library: libax's symbols.c binds to this one. */
int dwfl_linux_proc_report(void *dwfl, pid_t pid)
{
    atomic_store(&in_naming, 1);
    WAIT_UNTIL(atomic_load(&let_go), 60000);
    return real_report(dwfl, pid);
}

#define MAXIDS 4
static atomic_ullong ids[MAXIDS];
static atomic_int reports[MAXIDS], named[MAXIDS], others;
static const char *want_fn[MAXIDS];
static char first_text[AX_EVENT_MESSAGE_MAX]; /* ids[0]'s first report */

static char panic_text[AX_EVENT_MESSAGE_MAX]; /* the last panic's report (G) */
static atomic_int panics;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_PANIC) {
        snprintf(panic_text, sizeof panic_text, "%s", e->message);
        atomic_fetch_add(&panics, 1);
    }
    if (e->kind != AX_EV_LINGERING) return;
    for (int k = 0; k < MAXIDS; k++) {
        if (atomic_load(&ids[k]) != e->id) continue;
        if (k == 0 && atomic_load(&reports[k]) == 0)
            snprintf(first_text, sizeof first_text, "%s", e->message);
        atomic_fetch_add(&reports[k], 1);
        if (want_fn[k] && strstr(e->message, want_fn[k])) atomic_fetch_add(&named[k], 1);
        return;
    }
    atomic_fetch_add(&others, 1);
}

static void reset(void)
{
    for (int k = 0; k < MAXIDS; k++) {
        atomic_store(&ids[k], 0);
        atomic_store(&reports[k], 0);
        atomic_store(&named[k], 0);
        want_fn[k] = NULL;
    }
    atomic_store(&others, 0);
}

static ax_sched *make(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.grace_ms = 20;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    return s;
}

static uint64_t submit(ax_sched *s, ax_fn fn, void *arg)
{
    ax_spec sp = {.fn = fn, .arg = arg, .timeout_ms = 5};
    uint64_t id = 0;
    CHECK_EQ(ax_submit(s, &sp, &id), AX_OK);
    return id;
}

/* ---- B ---- */
static atomic_int stop1, stop2, in1, in2;

static __attribute__((noinline)) void spin_one(void)
{
    while (!atomic_load(&stop1))
        __asm__ __volatile__("" ::: "memory");
}

static __attribute__((noinline)) void spin_two(void)
{
    while (!atomic_load(&stop2))
        __asm__ __volatile__("" ::: "memory");
}

static int h1(ax_task *t, void *a)
{
    (void)t;
    (void)a;
    atomic_store(&in1, 1);
    spin_one();
    return 0;
}

static int h2(ax_task *t, void *a)
{
    (void)t;
    (void)a;
    atomic_store(&in2, 1);
    spin_two();
    return 0;
}

static void part_b(void)
{
    reset();
    atomic_store(&let_go, 0);
    ax_sched *s = make();
    want_fn[0] = " spin_one+0x";
    want_fn[1] = " spin_two+0x";
    atomic_store(&ids[0], submit(s, h1, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&in_naming), 30000 * TEST_SLOW)); /* H1's report: named */
    atomic_store(&stop1, 1);
    atomic_store(&ids[1], submit(s, h2, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&in2), 30000 * TEST_SLOW));
    uint64_t until = ax_now_ns() + 60000000u; /* past its deadline and grace_ms */
    while (ax_now_ns() < until)
        ;
    atomic_store(&stop2, 1);
    CHECK_EQ(atomic_load(&reports[0]), 0); /* still being named */
    atomic_store(&let_go, 1);
    CHECK(WAIT_UNTIL(atomic_load(&reports[0]) == 1 && atomic_load(&reports[1]) == 1,
                     30000 * TEST_SLOW));
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), AX_OK);
    ax_free(s);
    fprintf(stderr, "B: H1 %d report(s), %d named; H2 %d, %d named; lingering %llu\n",
            atomic_load(&reports[0]), atomic_load(&named[0]), atomic_load(&reports[1]),
            atomic_load(&named[1]), (unsigned long long)st.lingering);
    CHECK_EQ(atomic_load(&reports[0]), 1);
    CHECK_EQ(atomic_load(&reports[1]), 1);
    CHECK_EQ(atomic_load(&named[0]), 1);
    /* H2's backtrace may have been missed: it spun 60 ms only, and a busy
     * machine can keep its worker off the CPU that long. Its report came. */
    CHECK_EQ(atomic_load(&others), 0);
    CHECK_EQ(st.lingering, 2);
}

/* ---- A ---- */
static atomic_int a_done;

static int spin_yield(ax_task *t, void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++) {
        uint64_t end = ax_now_ns() + 40000000u;
        while (ax_now_ns() < end)
            ;
        ax_yield(t); /* AX_ETIMEDOUT: ignored on purpose, the lingering case */
    }
    atomic_store(&a_done, 1);
    return 0;
}

static void part_a(void)
{
    reset();
    ax_sched *s = make();
    atomic_store(&ids[0], submit(s, spin_yield, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&a_done), 30000 * TEST_SLOW));
    CHECK(WAIT_UNTIL(atomic_load(&reports[0]) >= 1, 30000 * TEST_SLOW));
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), AX_OK);
    ax_free(s);
    fprintf(stderr, "A: %d report(s), lingering %llu\n", atomic_load(&reports[0]),
            (unsigned long long)st.lingering);
    CHECK_EQ(atomic_load(&reports[0]), 1);
    CHECK_EQ(st.lingering, 1);
    CHECK_EQ(atomic_load(&others), 0);
}

/* ---- C ---- */
#ifndef TEST_TSAN
static atomic_int c_stop, c_in, c_signals;
static ucontext_t c_back, c_alt;
static ax_sched *_Atomic c_sched;

static atomic_int d_armed, d_held, d_go;

/* libax is linked in statically: its calls bind to this one. In part C the
 * watchdog's signal returns once the worker's handler has answered; in
 * part D its first one waits for the test before it is sent. */
int pthread_kill(pthread_t th, int sig)
{
    static int (*real)(pthread_t, int);
    if (!real) real = (int (*)(pthread_t, int))dlsym(RTLD_NEXT, "pthread_kill");
    if (sig == SIGURG && atomic_exchange(&d_armed, 0)) {
        atomic_store(&d_held, 1);
        WAIT_UNTIL(atomic_load(&d_go), 60000);
    }
    int rc = real(th, sig);
    ax_sched *s = atomic_load(&c_sched);
    if (rc == 0 && s && sig == SIGURG) {
        atomic_fetch_add(&c_signals, 1);
        WAIT_UNTIL(atomic_load(&s->workers[0].bt_state) != 1, 1000);
    }
    return rc;
}

static void off_stack_spin(void)
{
    while (!atomic_load(&c_stop))
        __asm__ __volatile__("" ::: "memory");
}

static int off_stack(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    size_t size = 1u << 16;
    char *stk = malloc(size);
    CHECK(stk != NULL);
    CHECK_EQ(getcontext(&c_alt), 0);
    c_alt.uc_stack.ss_sp = stk;
    c_alt.uc_stack.ss_size = size;
    c_alt.uc_link = &c_back;
    makecontext(&c_alt, off_stack_spin, 0);
    atomic_store(&c_in, 1);
    CHECK_EQ(swapcontext(&c_back, &c_alt), 0);
    free(stk);
    return 0;
}

static void part_c(void)
{
    reset();
    ax_sched *s = make();
    atomic_store(&c_sched, s);
    atomic_store(&ids[0], submit(s, off_stack, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&c_in), 30000 * TEST_SLOW));
    bool reported = WAIT_UNTIL(atomic_load(&reports[0]) == 1, 10000);
    atomic_store(&c_stop, 1);
    fprintf(stderr, "C: reported %d, %d signal(s) sent\n", reported, atomic_load(&c_signals));
    if (!reported) fprintf(stderr, "C: not reported in 10 s while it spun off its stack\n");
    CHECK(reported);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    atomic_store(&c_sched, NULL);
    ax_free(s);
    CHECK_EQ(atomic_load(&reports[0]), 1);
}

/* ---- D ---- */
static atomic_int d_stop1, d_stop2, d_in2;

static __attribute__((noinline)) void spin_d1(void)
{
    while (!atomic_load(&d_stop1))
        __asm__ __volatile__("" ::: "memory");
}

static __attribute__((noinline)) void spin_d2(void)
{
    while (!atomic_load(&d_stop2))
        __asm__ __volatile__("" ::: "memory");
}

static int d1(ax_task *t, void *a)
{
    (void)t;
    (void)a;
    spin_d1();
    return 0;
}

static int d2(ax_task *t, void *a)
{
    (void)t;
    (void)a;
    atomic_store(&d_in2, 1);
    spin_d2();
    return 0;
}

static void part_d(void)
{
    reset();
    ax_sched *s = make();
    want_fn[0] = " spin_d2+0x"; /* named[0]: H2's frame in H1's report */
    atomic_store(&d_armed, 1);
    atomic_store(&ids[0], submit(s, d1, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&d_held), 30000 * TEST_SLOW)); /* about to signal */
    atomic_store(&d_stop1, 1);
    ax_spec sp = {.fn = d2, .timeout_ms = 60000};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&d_in2), 30000 * TEST_SLOW));
    atomic_store(&d_go, 1); /* the signal lands on H2 */
    CHECK(WAIT_UNTIL(atomic_load(&reports[0]) == 1, 30000 * TEST_SLOW));
    atomic_store(&d_stop2, 1);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_free(s);
    fprintf(stderr, "D: H1 %d report(s), with H2's frames %d\n", atomic_load(&reports[0]),
            atomic_load(&named[0]));
    CHECK_EQ(atomic_load(&reports[0]), 1);
    CHECK_EQ(atomic_load(&named[0]), 0);
}
#endif

/* ---- E ---- */
static atomic_int e_stop, e_in;

static int e_orphan(ax_task *t, void *a)
{
    (void)a;
    atomic_store(&e_in, 1);
    while (!atomic_load(&e_stop))
        (void)ax_sleep(t, 5); /* AX_ETIMEDOUT once its attempt ended: ignored */
    return 0;
}

static int e_spinner(ax_task *t, void *a)
{
    (void)a;
    while (!atomic_load(&e_stop)) {
        uint64_t end = ax_now_ns() + 150000000u;
        while (ax_now_ns() < end && !atomic_load(&e_stop))
            ;
        (void)ax_yield(t);
    }
    return 0;
}

static void part_e(void)
{
    reset();
    ax_sched *s = make();
    want_fn[0] = "e_orphan";
    atomic_store(&ids[0], submit(s, e_orphan, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&e_in), 30000 * TEST_SLOW));
    ax_spec sp = {.fn = e_spinner, .timeout_ms = 600000};
    uint64_t spinner = 0;
    CHECK_EQ(ax_submit(s, &sp, &spinner), AX_OK);
    atomic_store(&ids[1], spinner);
    CHECK(WAIT_UNTIL(atomic_load(&reports[0]) == 1, 30000 * TEST_SLOW));
    usleep(200000); /* a second report would come by now */
    atomic_store(&e_stop, 1);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), AX_OK);
    ax_free(s);
    fprintf(stderr, "E: orphan %d report(s), spinner %d, lingering %llu\n",
            atomic_load(&reports[0]), atomic_load(&reports[1]), (unsigned long long)st.lingering);
    CHECK_EQ(atomic_load(&reports[0]), 1);
    CHECK_EQ(atomic_load(&reports[1]), 0);
    CHECK_EQ(atomic_load(&others), 0);
    CHECK_EQ(st.lingering, 1);
    /* With its frames (named unless the symbol tables were busy past the
     * report's wait). */
    if (strstr(first_text, "no backtrace"))
        fprintf(stderr, "E: %s\n", first_text);
    CHECK(strstr(first_text, "no backtrace") == NULL);
    if (bt_symbolised() && !strstr(first_text, "not named"))
        CHECK_EQ(atomic_load(&named[0]), 1);
}

/* ---- F ---- */
static atomic_int f_in, f_ret;
static int f_pipe[2];

static int f_polite(ax_task *t, void *a)
{
    (void)a;
    atomic_store(&f_in, 1);
    int rc = ax_sleep(t, 60000); /* AX_ETIMEDOUT at its deadline */
    if (rc) {
        /* cleanup, each call checked: a flush, then a second one */
        if (ax_wait_fd(t, f_pipe[1], AX_WRITE, 0) != 0) (void)ax_wait_fd(t, f_pipe[1], AX_WRITE, 0);
        atomic_store(&f_ret, 1);
        return rc;
    }
    return 0;
}

static void part_f(void)
{
    reset();
    atomic_store(&e_stop, 0);
    CHECK_EQ(pipe(f_pipe), 0);
    ax_sched *s = make();
    atomic_store(&ids[0], submit(s, f_polite, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&f_in), 30000 * TEST_SLOW));
    ax_spec sp = {.fn = e_spinner, .timeout_ms = 600000};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&f_ret), 30000 * TEST_SLOW));
    usleep(400000); /* passes of its worker past its due time and more */
    atomic_store(&e_stop, 1);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_free(s);
    close(f_pipe[0]);
    close(f_pipe[1]);
    fprintf(stderr, "F: %d report(s) of the task that returned\n", atomic_load(&reports[0]));
    CHECK_EQ(atomic_load(&reports[0]), 0);
    CHECK_EQ(atomic_load(&others), 0);
}

/* ---- G ---- */
static atomic_int g_stop, g_panicked;
static ax_task *g_task;

static __attribute__((noinline)) void g_cleanup_waits(void *a)
{
    (void)a;
    while (!atomic_load(&g_stop))
        (void)ax_sleep(g_task, 5); /* AX_ETIMEDOUT: its attempt is over */
}

static __attribute__((noinline)) void g_go_panic(ax_task *t)
{
    atomic_store(&g_panicked, 1);
    ax_panic(t, "after its timeout");
}

static int g_orphan(ax_task *t, void *a)
{
    (void)a;
    g_task = t;
    CHECK_EQ(ax_defer(t, g_cleanup_waits, NULL), AX_OK);
    (void)ax_sleep(t, 10); /* AX_ETIMEDOUT at 5 ms */
    g_go_panic(t);
    return 0;
}

static void part_g(void)
{
    reset();
    ax_sched *s = make();
    want_fn[0] = "g_cleanup_waits";
    atomic_store(&ids[0], submit(s, g_orphan, NULL));
    CHECK(WAIT_UNTIL(atomic_load(&reports[0]) == 1, 30000 * TEST_SLOW));
    atomic_store(&g_stop, 1);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_free(s);
    fprintf(stderr, "G: %s\n", first_text);
    CHECK_EQ(atomic_load(&g_panicked), 1);
    CHECK_EQ(atomic_load(&reports[0]), 1);
    if (bt_symbolised() && !strstr(first_text, "not named")) {
        CHECK_EQ(atomic_load(&named[0]), 1); /* where it is: its cleanup */
    }
    /* Its panic's report, at its end, still has where it panicked. */
    CHECK_EQ(atomic_load(&panics), 1);
    fprintf(stderr, "G's panic: %.200s\n", panic_text);
    CHECK(strstr(panic_text, "g_cleanup_waits") == NULL);
    if (bt_symbolised() && !strstr(panic_text, "not named"))
        CHECK(strstr(panic_text, "g_orphan") != NULL);
}

int main(void)
{
    real_report = (int (*)(void *, pid_t))dlsym(RTLD_NEXT, "dwfl_linux_proc_report");
    if (bt_symbolised()) {
        CHECK(real_report != NULL);
        part_b();
    }
    part_a();
    part_e();
    part_f();
    part_g();
#ifndef TEST_TSAN
    part_c();
    if (bt_symbolised()) part_d();
#endif
    return 0;
}
