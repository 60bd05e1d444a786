/* test_orphans.c - orphans: coroutines still running after their attempt
 * timed out or was cancelled (ax.h ax_stats.orphans; DESIGN.md §7).
 *
 *  1. A retry never runs next to its own orphan. workers = 2; attempt 0
 *     ignores its deadline: it spins 600 ms (raw clock, no ax call) with
 *     timeout_ms 100; max_retry 1, back-off 10 ms (jitter 0). The function
 *     counts the attempts inside it: the count never exceeds 1 (the retry
 *     runs the same fn/arg, and could run on the other worker while attempt
 *     0 still spins), attempt 1 starts only after attempt 0 returned
 *     (timestamps), and the task ends SUCCEEDED with attempts == 2 (attempt
 *     1 returns 0 at once).
 *
 * With AX_HAVE_V2 (the API additions, ax.h):
 *  2. config.callback_queue bounds the on_timeout queue and
 *     ax_stats.callback_dropped counts what a full queue dropped:
 *     callback_threads 1, callback_queue 16; one on_timeout blocks the only
 *     callback thread, then exactly 100 more tasks time out: 100 - 16 are
 *     dropped, and once the blocked callback is released exactly 1 + 16
 *     on_timeout calls have run.
 *  3. config.shutdown_timeout_ms bounds ax_free: in a forked child
 *     (shutdown_timeout_ms 300) a task spins forever without ax calls;
 *     ax_free returns anyway and says on stderr what it leaked ("leak").
 *     The parent kills the child and fails if it has not exited in 30 s.
 *  4. config.max_orphans: orphans count against it, and while orphans >=
 *     max_orphans no new attempt starts. max_orphans 1: while X spins past
 *     its timeout ax_stats.orphans == 1, and a task Y submitted after X
 *     timed out starts only after X's coroutine returned.
 *  7. At max_orphans the workers that cannot start anything sleep instead
 *     of spinning, and the orphan's return wakes them. workers 2,
 *     max_orphans 1: G blocks its worker thread in usleep (no ax call, no
 *     CPU) past its 50 ms timeout; the watchdog ends its attempt, so G is
 *     the one orphan. Q, submitted then, must not start, and the other
 *     worker must use at most 5 clock ticks of CPU over one second (it
 *     used to busy-loop through dispatch the whole time: on a loaded
 *     machine that CPU is what the held worker needs to return its
 *     orphans). The probe is first shown able to see a busy thread. When G
 *     returns, Q starts (after G's return) and succeeds.
 *
 *  5, 6. A retry whose back-off ended while its previous attempt's coroutine
 *     still ran waits for that coroutine, and is queued the moment it
 *     returns, even while the worker it returned on is then held. Fixture
 *     (one worker): R parks for a while, then holds the worker until the
 *     test releases it; the waiters W park in a long ax_sleep past their
 *     100 ms timeout (max_retry 1, back-off 1 ms); the hog H holds the
 *     worker until every W's attempt 0 was ended by its deadline (on_timeout)
 *     and their back-offs are over. While H holds: delayed == orphans == the
 *     number of W, nothing queued. When H lets go, every W returns, then R
 *     holds the worker (no dispatch in between): the retries must be in
 *     their bucket at once (queued == W, delayed 0), though no worker can
 *     dispatch until R lets go.
 *  5. One W, cancelled once its coroutine returned (ax_cancel 0, on_done
 *     once: CANCELLED, its retry never runs); a task N with delay_ms 1000
 *     submitted right after takes the freed slot. Once R lets go, N must not
 *     start before its delay (the requeue of W once went to a slot that N
 *     then held, starting N at once and leaking stats.delayed), ends
 *     SUCCEEDED, and delayed / queued are back to 0.
 *  6. Several waiting at once: four W; the fourth is cancelled while its
 *     coroutine still runs (its return re-queues nothing); of the other
 *     three, the one that returned second is cancelled after they returned.
 *     The two others must still retry (on_done once each: SUCCEEDED,
 *     attempts 2, retry run once); nothing stays queued or delayed.
 */
#include "util.h"
#include "fork_capture.h"

#include <pthread.h>

#ifdef AX_HAVE_V2
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#endif

/* The raw clock: a task that ignores its deadline makes no ax call at all. */
static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin_ms(uint64_t ms)
{
    uint64_t end = mono_ns() + ms * 1000000u;
    volatile uint64_t spins = 0;
    while (mono_ns() < end)
        spins++;
}

/* ---- 1. the retry waits for its orphan ------------------------------------- */

#define HOG_SPIN_MS 600
#define HOG_TIMEOUT_MS 100

static atomic_int active, max_active, entries;
static _Atomic uint64_t att_start_ns[2], att_end_ns[2];
static atomic_int retry_done_calls;
static ax_result retry_last;

static int hog_then_ok_fn(ax_task *t, void *arg)
{
    (void)arg;
    int now_active = atomic_fetch_add(&active, 1) + 1;
    for (int m = atomic_load(&max_active); now_active > m;)
        if (atomic_compare_exchange_weak(&max_active, &m, now_active))
            break;
    unsigned a = ax_task_attempt(t);
    atomic_fetch_add(&entries, 1);
    if (a < 2)
        atomic_store(&att_start_ns[a], mono_ns());
    if (a == 0)
        spin_ms(HOG_SPIN_MS); /* ignores its 100 ms deadline */
    if (a < 2)
        atomic_store(&att_end_ns[a], mono_ns());
    atomic_fetch_sub(&active, 1);
    return 0;
}

static void retry_done(const ax_result *r, void *arg)
{
    (void)arg;
    retry_last = *r;
    atomic_fetch_add(&retry_done_calls, 1);
}

static void test_retry_waits_for_orphan(void)
{
    ax_sched *s = test_sched(2, 8);
    static const ax_retry_policy backoff = {AX_BACKOFF_EXPONENTIAL, 10, 10, 0};
    ax_spec sp = {.fn = hog_then_ok_fn,
                  .timeout_ms = HOG_TIMEOUT_MS,
                  .max_retry = 1,
                  .retry = &backoff,
                  .on_done = retry_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&retry_done_calls) == 1, 5000));
    CHECK(WAIT_UNTIL(atomic_load(&att_end_ns[0]) != 0, 5000)); /* attempt 0 returned */
    usleep(50 * 1000);
    uint64_t s0 = atomic_load(&att_start_ns[0]), e0 = atomic_load(&att_end_ns[0]);
    uint64_t s1 = atomic_load(&att_start_ns[1]);
    fprintf(stderr,
            "orphan retry: attempt 0 ran %llu..%llu ms, attempt 1 started at %llu ms; "
            "at most %d attempts inside the function at once\n",
            0ull, (unsigned long long)((e0 - s0) / 1000000u),
            s1 ? (unsigned long long)((s1 - s0) / 1000000u) : 0ull, atomic_load(&max_active));
    CHECK_LE(atomic_load(&max_active), 1);
    CHECK(s1 != 0);
    CHECK(s1 >= e0); /* the retry starts after its orphan returned */
    CHECK_EQ(atomic_load(&retry_done_calls), 1);
    CHECK_EQ(retry_last.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(retry_last.code, 0);
    CHECK_EQ(retry_last.attempts, 2);
    CHECK_EQ(atomic_load(&entries), 2);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.started, 2);
    CHECK_EQ(st.retried, 1);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(st.timed_out + st.failed, 0);
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 2000));
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

#ifdef AX_HAVE_V2

/* ---- 2. the bounded on_timeout queue ---------------------------------------- */

#define CB_QUEUE 16
#define CB_FLOOD 100

static atomic_int cb_blocker_in, cb_release, cb_calls, flood_done_calls, flood_bad;

static int sleep_fn(ax_task *t, void *arg)
{
    (void)arg;
    ax_sleep(t, 10000); /* ends at the 50 ms timeout */
    return 0;
}

static void blocking_on_timeout(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_store(&cb_blocker_in, 1);
    while (!atomic_load(&cb_release))
        usleep(1000);
    atomic_fetch_add(&cb_calls, 1);
}

static void counting_on_timeout(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&cb_calls, 1);
}

static void flood_done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state != AX_STATE_TIMED_OUT || r->code != AX_ETIMEDOUT)
        atomic_fetch_add(&flood_bad, 1);
    atomic_fetch_add(&flood_done_calls, 1);
}

static void test_callback_queue(void)
{
    ax_config c;
    ax_config_default(&c);
    CHECK_EQ(c.callback_queue, 1024); /* the documented default */
    c.workers = 2;
    c.max_concurrency = 256;
    c.callback_threads = 1;
    c.callback_queue = CB_QUEUE;
    /* The blocked callback must stay the only one running: no extra pool
     * thread for an overrun during this test. */
    c.callback_timeout_ms = 600000;
    ax_sched *s = NULL;
    CHECK_EQ(ax_new(&c, &s), 0);

    ax_spec blk = {.fn = sleep_fn, .timeout_ms = 50, .on_timeout = blocking_on_timeout};
    CHECK_EQ(ax_submit(s, &blk, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&cb_blocker_in), 5000));

    for (int i = 0; i < CB_FLOOD; i++) {
        ax_spec sp = {.fn = sleep_fn,
                      .timeout_ms = 50,
                      .on_timeout = counting_on_timeout,
                      .on_done = flood_done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    /* on_timeout is queued (or dropped) before on_done runs. */
    CHECK(WAIT_UNTIL(atomic_load(&flood_done_calls) == CB_FLOOD, 10000));
    CHECK_EQ(atomic_load(&flood_bad), 0);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.callback_dropped, CB_FLOOD - CB_QUEUE);
    CHECK_EQ(st.timed_out, 1 + CB_FLOOD);
    CHECK_EQ(atomic_load(&cb_calls), 0); /* the only callback thread is still held */

    atomic_store(&cb_release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&cb_calls) == 1 + CB_QUEUE, 5000));
    usleep(200 * 1000);
    CHECK_EQ(atomic_load(&cb_calls), 1 + CB_QUEUE);
    st = test_stats(s);
    CHECK_EQ(st.callback_dropped, CB_FLOOD - CB_QUEUE);
    CHECK_EQ(atomic_load(&flood_done_calls), CB_FLOOD);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

/* ---- 3. ax_free does not wait forever ---------------------------------------- */

#define CHILD_WAIT_MS 30000

static atomic_int forever_running;

static int forever_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&forever_running, 1);
    volatile uint64_t spins = 0;
    for (;;)
        spins++; /* never returns, never calls ax */
    return 0;
}

static void child_shutdown_leak(int err_fd)
{
    if (dup2(err_fd, STDERR_FILENO) < 0)
        _exit(10);
    close(err_fd);
    ax_config c;
    ax_config_default(&c);
    if (c.shutdown_timeout_ms != 5000) /* the documented default */
        _exit(11);
    c.workers = 2;
    c.max_concurrency = 8;
    c.shutdown_timeout_ms = 300;
    ax_sched *s = NULL;
    if (ax_new(&c, &s) != 0)
        _exit(12);
    ax_spec sp = {.fn = forever_fn, .timeout_ms = 50};
    if (ax_submit(s, &sp, NULL) != 0)
        _exit(13);
    if (!WAIT_UNTIL(atomic_load(&forever_running), 5000))
        _exit(14);
    ax_free(s); /* must come back although the task never returns */
    _exit(0);
}

static void test_shutdown_leak(void)
{
    static char out[65536];
    int status = 0;
    bool exited = fork_capture(child_shutdown_leak, out, sizeof out, CHILD_WAIT_MS, &status);
    fprintf(stderr, "shutdown child's stderr: <<%s>>\n", out);
    if (!exited)
        fprintf(stderr, "ax_free did not return within %d ms: child killed\n", CHILD_WAIT_MS);
    CHECK(exited);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK(strstr(out, "leak") != NULL);
}

/* ---- 4. max_orphans --------------------------------------------------------- */

#define X_SPIN_CAP_MS 30000 /* liveness only: X spins until released */

static _Atomic uint64_t x_end_ns, y_start_ns;
static atomic_int x_release;
static atomic_int x_running, x_done_calls, x_done_state = -1, y_done_calls, y_done_state = -1;

static int x_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&x_running, 1);
    /* Ignores its 50 ms timeout until the test has looked: not a fixed
     * 400 ms, which a loaded machine (TSan) could use up before the
     * watchdog, the callback pool and the test had each had their turn. */
    uint64_t end = mono_ns() + X_SPIN_CAP_MS * 1000000ull;
    while (!atomic_load(&x_release) && mono_ns() < end)
        ;
    atomic_store(&x_end_ns, mono_ns());
    return 0;
}

static void x_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&x_done_state, (int)r->state);
    atomic_fetch_add(&x_done_calls, 1);
}

static int y_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&y_start_ns, mono_ns());
    return 0;
}

static void y_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&y_done_state, (int)r->state);
    atomic_fetch_add(&y_done_calls, 1);
}

static void test_max_orphans(void)
{
    ax_config c;
    ax_config_default(&c);
    CHECK_EQ(c.max_orphans, 0); /* 0 = max_concurrency */
    c.workers = 2;
    c.max_concurrency = 8;
    c.max_orphans = 1;
    ax_sched *s = NULL;
    CHECK_EQ(ax_new(&c, &s), 0);

    ax_spec xs = {.fn = x_fn, .timeout_ms = 50, .on_done = x_done};
    CHECK_EQ(ax_submit(s, &xs, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&x_done_calls) == 1, 2000));
    CHECK_EQ(atomic_load(&x_done_state), AX_STATE_TIMED_OUT);
    ax_stats st = test_stats(s);
    CHECK_EQ(atomic_load(&x_end_ns), 0); /* the snapshot was taken while X spins */
    CHECK_EQ(st.orphans, 1);
    CHECK_EQ(st.running, 0);

    ax_spec ys = {.fn = y_fn, .timeout_ms = 30000, .on_done = y_done};
    CHECK_EQ(ax_submit(s, &ys, NULL), 0);
    usleep(100000);
    CHECK_EQ(atomic_load(&y_start_ns), 0); /* held back while X is out */
    atomic_store(&x_release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&y_done_calls) == 1, 5000));
    CHECK_EQ(atomic_load(&y_done_state), AX_STATE_SUCCEEDED);
    uint64_t xe = atomic_load(&x_end_ns), ys0 = atomic_load(&y_start_ns);
    CHECK(xe != 0);  /* Y ran only after X returned ... */
    CHECK(ys0 >= xe); /* ... by the timestamps too */
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 2000));
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

/* ---- 7. at max_orphans the other workers sleep ----------------------------- */

#define GATE_WINDOW_MS 1000 /* the other worker's CPU is measured this long */
#define GATE_MAX_TICKS 5    /* as test_idle: 50 ms at 100 Hz */
#define GATE_CAP_MS 20000   /* liveness bound of G's block */

static atomic_int g_tid, g_release, g_done_calls, g_done_state = -1, q_done_calls,
    q_done_state = -1;
static _Atomic uint64_t g_end_ns, q_start_ns;

/* utime + stime of one thread of this process, in clock ticks; -1 if the
 * thread is gone. */
static long thread_ticks(int tid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    CHECK(p != NULL);
    unsigned long utime = 0, stime = 0;
    int got = sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime);
    CHECK_EQ(got, 2);
    return (long)(utime + stime);
}

/* The ids of this process's threads named ax-worker-N; returns how many. */
static int worker_tids(int *tids, int max)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f) && strncmp(comm, "ax-worker-", 10) == 0)
            tids[n++] = atoi(e->d_name);
        fclose(f);
    }
    closedir(d);
    return n;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int g_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&g_tid, (int)syscall(SYS_gettid));
    uint64_t end = mono_ns() + GATE_CAP_MS * 1000000ull;
    while (!atomic_load(&g_release) && mono_ns() < end)
        usleep(1000); /* holds the worker thread, ignoring its deadline */
    atomic_store(&g_end_ns, mono_ns());
    return 0;
}

static void g_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&g_done_state, (int)r->state);
    atomic_fetch_add(&g_done_calls, 1);
}

static int q_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&q_start_ns, mono_ns());
    return 0;
}

static void q_done(const ax_result *r, void *arg)
{
    (void)arg;
    atomic_store(&q_done_state, (int)r->state);
    atomic_fetch_add(&q_done_calls, 1);
}

static void test_orphan_bound_sleeps(void)
{
    /* The probe sees a busy thread: this one, for 200 ms of its own CPU. */
    int self = (int)syscall(SYS_gettid);
    long p0 = thread_ticks(self);
    uint64_t c0 = thread_cpu_ns();
    while (thread_cpu_ns() - c0 < 200000000u)
        ;
    CHECK(thread_ticks(self) - p0 >= 10);

    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = 8;
    c.max_orphans = 1;
    c.grace_ms = 60000; /* no lingering report (and its backtrace) meanwhile */
    ax_sched *s = test_sched_cfg(&c);

    ax_spec gs = {.fn = g_fn, .timeout_ms = 50, .on_done = g_done};
    CHECK_EQ(ax_submit(s, &gs, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&g_done_calls) == 1, 5000)); /* the watchdog ended it */
    CHECK_EQ(atomic_load(&g_done_state), AX_STATE_TIMED_OUT);
    CHECK_EQ(test_stats(s).orphans, 1);

    ax_spec qs = {.fn = q_fn, .timeout_ms = 30000, .on_done = q_done};
    CHECK_EQ(ax_submit(s, &qs, NULL), 0);
    usleep(100 * 1000); /* Q's wake-up: a worker looks, finds the bound, sleeps */

    int tids[8], n = worker_tids(tids, 8);
    CHECK_EQ(n, 2);
    int other = tids[0] == atomic_load(&g_tid) ? tids[1] : tids[0];
    CHECK(other != atomic_load(&g_tid));
    long t0 = thread_ticks(other);
    usleep(GATE_WINDOW_MS * 1000);
    long used = thread_ticks(other) - t0;
    fprintf(stderr, "orphan bound: the worker with nothing it may start used %ld ticks in %d ms\n",
            used, GATE_WINDOW_MS);
    CHECK(used <= GATE_MAX_TICKS);
    CHECK_EQ(atomic_load(&q_start_ns), 0); /* still at the bound */
    CHECK_EQ(atomic_load(&g_end_ns), 0);

    atomic_store(&g_release, 1);
    CHECK(WAIT_UNTIL(atomic_load(&q_done_calls) == 1, 10000));
    CHECK_EQ(atomic_load(&q_done_state), AX_STATE_SUCCEEDED);
    uint64_t ge = atomic_load(&g_end_ns), qs0 = atomic_load(&q_start_ns);
    CHECK(ge != 0);
    CHECK(qs0 >= ge);
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 5000));
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

#endif /* AX_HAVE_V2 */

/* ---- 5, 6. retries waiting for their orphan's return ------------------------ */

#define WQ_MAX 4
#define WQ_TIMEOUT_MS 1000 /* the waiters' attempt timeout; R parks this long too: R, the
                            * W and H start within it (all queued at ax_resume) */
#define WQ_DELAY_MS 1000  /* N's delay (test 5) */
#ifdef TEST_TSAN
#define WQ_SETTLE_MS 300 /* H holds on this long after the last on_timeout */
#else
#define WQ_SETTLE_MS 100
#endif
#define WQ_CAP_MS 20000 /* liveness bound of every wait inside a task */

struct waiter {
    uint64_t id;
    atomic_int att0_rc;    /* what ax_sleep returned to attempt 0 */
    atomic_int order;      /* 1, 2, ...: when its attempt 0 returned among the W */
    atomic_int retry_runs; /* attempts >= 1 that entered the function */
    atomic_int timeouts;   /* on_timeout calls */
    atomic_int done_calls;
    ax_result last; /* written by on_done before done_calls */
};

static struct waiter wq[WQ_MAX];
static int wq_n;
static atomic_int wq_returned, wq_timeouts, wq_hog_settled, wq_hog_go, wq_hold_in, wq_release;

static void wq_reset(int n)
{
    wq_n = n;
    for (int i = 0; i < WQ_MAX; i++) {
        wq[i].id = 0;
        atomic_store(&wq[i].att0_rc, -1000);
        atomic_store(&wq[i].order, 0);
        atomic_store(&wq[i].retry_runs, 0);
        atomic_store(&wq[i].timeouts, 0);
        atomic_store(&wq[i].done_calls, 0);
        memset(&wq[i].last, 0, sizeof wq[i].last);
    }
    atomic_store(&wq_returned, 0);
    atomic_store(&wq_timeouts, 0);
    atomic_store(&wq_hog_settled, 0);
    atomic_store(&wq_hog_go, 0);
    atomic_store(&wq_hold_in, 0);
    atomic_store(&wq_release, 0);
}

/* Blocks the worker thread (no ax call) until flag is set; bounded. */
static void wq_block_until(atomic_int *flag)
{
    uint64_t end = mono_ns() + WQ_CAP_MS * 1000000ull;
    while (!atomic_load(flag) && mono_ns() < end)
        usleep(1000);
}

/* R: parked while H holds the worker; ready again together with the W. */
static int wq_holder_fn(ax_task *t, void *arg)
{
    (void)arg;
    CHECK_EQ(ax_sleep(t, WQ_TIMEOUT_MS), 0);
    /* Let every W return first: a yield runs the others already ready,
     * with no dispatch in between. */
    for (int i = 0; i < 1000 && atomic_load(&wq_returned) < wq_n; i++)
        CHECK_EQ(ax_yield(t), 0);
    atomic_store(&wq_hold_in, 1);
    wq_block_until(&wq_release);
    return 0;
}

/* W: attempt 0 parks past its deadline; the retry succeeds at once. */
static int wq_waiter_fn(ax_task *t, void *arg)
{
    struct waiter *w = arg;
    if (ax_task_attempt(t) > 0) {
        atomic_fetch_add(&w->retry_runs, 1);
        return 0;
    }
    atomic_store(&w->att0_rc, ax_sleep(t, 60000));
    atomic_store(&w->order, atomic_fetch_add(&wq_returned, 1) + 1);
    return 1;
}

static void wq_on_timeout(const ax_result *r, void *arg)
{
    (void)r;
    struct waiter *w = arg;
    atomic_fetch_add(&w->timeouts, 1);
    atomic_fetch_add(&wq_timeouts, 1);
}

static void wq_done(const ax_result *r, void *arg)
{
    struct waiter *w = arg;
    w->last = *r;
    atomic_fetch_add(&w->done_calls, 1);
}

/* H: holds the worker until every W's attempt ended and its back-off is
 * over (the back-off timer is expired by the watchdog: the worker is held),
 * then until the test lets it go. */
static int wq_hog_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t end = mono_ns() + WQ_CAP_MS * 1000000ull;
    while (atomic_load(&wq_timeouts) < wq_n && mono_ns() < end)
        usleep(1000);
    usleep(WQ_SETTLE_MS * 1000);
    atomic_store(&wq_hog_settled, 1);
    wq_block_until(&wq_hog_go);
    return 0;
}

static bool wq_all_queued(ax_sched *s, int n)
{
    ax_stats st = test_stats(s);
    return st.queued[AX_PRIO_NORMAL] == (uint64_t)n && st.queued[AX_PRIO_HIGH] == 0 &&
           st.queued[AX_PRIO_LOW] == 0 && st.delayed == 0 && st.orphans == 0 && st.running == 1;
}

/* Submits R, n waiters and H on one worker; returns once R holds the worker
 * after every W returned. early >= 0: that W is cancelled while its
 * coroutine still runs (while H holds the worker). */
static ax_sched *wq_start(int n, int early)
{
    wq_reset(n);
    ax_sched *s = test_sched(1, 8);
    static const ax_retry_policy backoff = {AX_BACKOFF_EXPONENTIAL, 1, 1, 0};
    ax_spec r = {.fn = wq_holder_fn, .timeout_ms = 60000};
    ax_spec h = {.fn = wq_hog_fn, .timeout_ms = 60000};
    CHECK_EQ(ax_pause(s), 0);
    CHECK_EQ(ax_submit(s, &r, NULL), 0);
    for (int i = 0; i < n; i++) {
        ax_spec w = {.fn = wq_waiter_fn,
                     .arg = &wq[i],
                     .timeout_ms = WQ_TIMEOUT_MS,
                     .max_retry = 1,
                     .retry = &backoff,
                     .on_done = wq_done,
                     .on_timeout = wq_on_timeout,
                     .cb_arg = &wq[i]};
        CHECK_EQ(ax_submit(s, &w, &wq[i].id), 0);
    }
    CHECK_EQ(ax_submit(s, &h, NULL), 0);
    CHECK_EQ(ax_resume(s), 0);

    /* H holds the worker; every W's attempt ended, its coroutine parked. */
    CHECK(WAIT_UNTIL(atomic_load(&wq_hog_settled), WQ_CAP_MS));
    ax_stats st = test_stats(s);
    fprintf(stderr, "waiting retries (%d): while held: delayed %llu, orphans %llu, queued %llu\n",
            n, (unsigned long long)st.delayed, (unsigned long long)st.orphans,
            (unsigned long long)st.queued[AX_PRIO_NORMAL]);
    CHECK_EQ(st.delayed, n); /* each retry waits for its coroutine */
    CHECK_EQ(st.orphans, n);
    CHECK_EQ(st.running, 2); /* R and H */
    CHECK_EQ(st.queued[AX_PRIO_NORMAL], 0);
    CHECK_EQ(atomic_load(&wq_returned), 0);
    for (int i = 0; i < n; i++) {
        CHECK_EQ(atomic_load(&wq[i].timeouts), 1);
        CHECK_EQ(atomic_load(&wq[i].done_calls), 0);
    }
    if (early >= 0) {
        CHECK_EQ(ax_cancel(s, wq[early].id), 0);
        CHECK(WAIT_UNTIL(atomic_load(&wq[early].done_calls) == 1, 5000));
        CHECK_EQ(wq[early].last.state, AX_STATE_CANCELLED);
        st = test_stats(s);
        CHECK_EQ(st.delayed, n - 1);
    }
    atomic_store(&wq_hog_go, 1);

    CHECK(WAIT_UNTIL(atomic_load(&wq_hold_in), WQ_CAP_MS));
    CHECK_EQ(atomic_load(&wq_returned), n);
    for (int i = 0; i < n; i++)
        CHECK_EQ(atomic_load(&wq[i].att0_rc), AX_ETIMEDOUT);
    return s;
}

/* ---- 5. one waiting retry, cancelled; its slot reused ---------------------- */

static atomic_int late_runs, late_done_calls;
static _Atomic uint64_t late_start_ns;
static ax_result late_last;

static int late_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    if (atomic_fetch_add(&late_runs, 1) == 0)
        atomic_store(&late_start_ns, ax_now_ns());
    return 0;
}

static void late_done(const ax_result *r, void *arg)
{
    (void)arg;
    late_last = *r;
    atomic_fetch_add(&late_done_calls, 1);
}

static void test_waiting_retry_cancel_reuse(void)
{
    ax_sched *s = wq_start(1, -1);
    /* W's coroutine returned: its retry is queued, R holds the worker. */
    bool queued = WAIT_UNTIL(wq_all_queued(s, 1), 2000);

    CHECK_EQ(ax_cancel(s, wq[0].id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&wq[0].done_calls) == 1, 5000));

    /* N takes the slot W just freed. The free list is FIFO (job.c): W's
     * slot comes round after the free jobs ahead of it. So N's spec is
     * submitted until it lands there, each miss cancelled (freed behind
     * W's slot; its on_done has run when ax_cancel returns) and not
     * counted. The id's low AX_SLOT_BITS (22) bits are its slot
     * (internal.h). */
    const uint64_t slot_mask = (1ull << 22) - 1;
    uint64_t submit_ns = 0, idn = 0;
    int fillers = 0;
    ax_spec n = {.fn = late_fn, .timeout_ms = 5000, .delay_ms = WQ_DELAY_MS, .on_done = late_done};
    for (int i = 0; i < 4096 && !idn; i++) {
        uint64_t id = 0;
        submit_ns = ax_now_ns();
        CHECK_EQ(ax_submit(s, &n, &id), 0);
        if ((id & slot_mask) == (wq[0].id & slot_mask)) {
            idn = id;
        } else {
            CHECK_EQ(ax_cancel(s, id), 0);
            fillers++;
        }
    }
    CHECK(idn != 0);
    CHECK_EQ(idn & slot_mask, wq[0].id & slot_mask);
    CHECK_EQ(atomic_load(&late_done_calls), fillers);
    CHECK_EQ(atomic_load(&late_runs), 0);
    atomic_store(&late_done_calls, 0);
    ax_stats held = test_stats(s);
    fprintf(stderr, "cancelled waiting retry: W id %#llx, N id %#llx\n",
            (unsigned long long)wq[0].id, (unsigned long long)idn);
    atomic_store(&wq_release, 1); /* R returns: the worker dispatches again */

    CHECK(WAIT_UNTIL(atomic_load(&late_done_calls) == 1, WQ_DELAY_MS + 10000));
    uint64_t start_ns = atomic_load(&late_start_ns);
    fprintf(stderr, "cancelled waiting retry: N (delay %d ms) started after %llu ms\n",
            WQ_DELAY_MS, (unsigned long long)((start_ns - submit_ns) / 1000000u));
    CHECK(start_ns >= submit_ns + WQ_DELAY_MS * 1000000ull); /* never before its delay */
    CHECK_EQ(late_last.state, AX_STATE_SUCCEEDED);
    CHECK_EQ(late_last.attempts, 1);
    CHECK_EQ(atomic_load(&late_runs), 1);

    CHECK(queued);
    CHECK_EQ(held.delayed, 1); /* N only */
    CHECK_EQ(held.queued[AX_PRIO_NORMAL], 0);
    CHECK_EQ(atomic_load(&wq[0].done_calls), 1);
    CHECK_EQ(wq[0].last.state, AX_STATE_CANCELLED);
    CHECK_EQ(wq[0].last.code, AX_ECANCELED);
    CHECK_EQ(wq[0].last.attempts, 2); /* its retry was due */
    CHECK_EQ(atomic_load(&wq[0].retry_runs), 0);

    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 5000)); /* R returned */
    usleep(50 * 1000);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.delayed, 0);
    CHECK_EQ(st.queued[AX_PRIO_HIGH] + st.queued[AX_PRIO_NORMAL] + st.queued[AX_PRIO_LOW], 0);
    CHECK_EQ(st.orphans, 0);
    CHECK_EQ(st.submitted, 4 + (uint64_t)fillers); /* R, W, H, N and the misses */
    CHECK_EQ(st.started, 4);                       /* no retry ran */
    CHECK_EQ(st.retried, 1);
    CHECK_EQ(st.succeeded, 3);
    CHECK_EQ(st.cancelled, 1 + (uint64_t)fillers);
    CHECK_EQ(st.failed + st.timed_out, 0);
    CHECK_EQ(atomic_load(&late_done_calls), 1);
    CHECK_EQ(atomic_load(&wq[0].done_calls), 1);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

/* ---- 6. several retries waiting at once ------------------------------------ */

static void test_waiting_retries_several(void)
{
    ax_sched *s = wq_start(4, 3); /* W3 is cancelled while its coroutine runs */
    bool queued = WAIT_UNTIL(wq_all_queued(s, 3), 2000);

    /* Of the three re-queued, the one that returned second. */
    int second = -1;
    for (int i = 0; i < 3; i++) {
        int before = 0;
        for (int k = 0; k < 3; k++)
            before += atomic_load(&wq[k].order) < atomic_load(&wq[i].order);
        if (before == 1)
            second = i;
    }
    CHECK(second >= 0);
    CHECK_EQ(ax_cancel(s, wq[second].id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&wq[second].done_calls) == 1, 5000));
    atomic_store(&wq_release, 1);

    for (int i = 0; i < 3; i++) {
        if (i == second)
            continue;
        (void)WAIT_UNTIL(atomic_load(&wq[i].done_calls) == 1, 10000); /* liveness */
        fprintf(stderr, "waiting retries: W%d (returned #%d) on_done %d, retry ran %d\n", i,
                atomic_load(&wq[i].order), atomic_load(&wq[i].done_calls),
                atomic_load(&wq[i].retry_runs));
        CHECK_EQ(atomic_load(&wq[i].done_calls), 1); /* its retry was not lost */
        CHECK_EQ(wq[i].last.state, AX_STATE_SUCCEEDED);
        CHECK_EQ(wq[i].last.code, 0);
        CHECK_EQ(wq[i].last.attempts, 2);
        CHECK_EQ(atomic_load(&wq[i].retry_runs), 1);
    }
    CHECK(queued);
    for (int i = 0; i < 4; i++) {
        if (i != second && i != 3)
            continue;
        CHECK_EQ(wq[i].last.state, AX_STATE_CANCELLED);
        CHECK_EQ(wq[i].last.code, AX_ECANCELED);
        CHECK_EQ(atomic_load(&wq[i].retry_runs), 0);
    }
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 5000));
    usleep(50 * 1000);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(atomic_load(&wq[i].done_calls), 1);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.delayed, 0);
    CHECK_EQ(st.queued[AX_PRIO_HIGH] + st.queued[AX_PRIO_NORMAL] + st.queued[AX_PRIO_LOW], 0);
    CHECK_EQ(st.orphans, 0);
    CHECK_EQ(st.submitted, 6);     /* R, 4 W, H */
    CHECK_EQ(st.started, 6 + 2);   /* and two retries */
    CHECK_EQ(st.retried, 4);
    CHECK_EQ(st.succeeded, 2 + 2); /* R, H and two W */
    CHECK_EQ(st.cancelled, 2);
    CHECK_EQ(st.failed + st.timed_out, 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
}

int main(void)
{
#ifdef AX_HAVE_V2
    test_shutdown_leak(); /* first: fork while this process has no other thread */
#endif
    test_retry_waits_for_orphan();
#ifdef AX_HAVE_V2
    test_callback_queue();
    test_max_orphans();
#endif
    test_waiting_retry_cancel_reuse();
    test_waiting_retries_several();
#ifdef AX_HAVE_V2
    test_orphan_bound_sleeps();
#endif
    return 0;
}
