/* test_http_10k - 10 000 concurrent in-flight requests to ax-upstream all
 * complete (issue 4), through ax + libcurl, over loopback.
 *
 * The real ax-upstream binary (its path is argv[1], from CMake) runs as a
 * separate process on a free 127.0.0.1 port with one endpoint answering
 * after a fixed LATENCY_MS. One scheduler (2 workers, max_concurrency N)
 * runs N tasks, each one ax_http_get. The test proves that:
 *   - every request returns 200: none failed, none timed out;
 *   - all N were inside ax_http_get at the same moment (an atomic counter
 *     around the call, its peak == N);
 *   - they were in flight on the wire at once, not queued inside curl: the
 *     upstream's /stats saw all N in flight on the endpoint at once, and the
 *     whole run takes about one LATENCY_MS (bound: LATENCY_MS + 30 s, loose
 *     on purpose — the machine is shared), where serialized requests would
 *     take N x LATENCY_MS;
 *   - no thread per request: the process never has more than the threads ax
 *     started (workers, monitor, callback pool) + 2;
 *   - the upstream's own /stats counted >= N requests on that endpoint;
 *   - ax-upstream then stops cleanly on SIGTERM (exit 0; under the
 *     sanitizers that also means no report from it).
 *
 * Both processes need N sockets: RLIMIT_NOFILE's soft limit is raised to
 * the hard one (the child inherits it), and a hard limit too low is raised
 * when the test may (root); if it still is too low the test prints SKIP and exits 77 (SKIP_RETURN_CODE in tests/CMakeLists.txt).
 * Under ThreadSanitizer N is 1 000 (see LATENCY_MS below for why not the
 * 5 000 other tests use there).
 *
 * usage: test_http_10k path/to/ax-upstream
 */
#include "util.h"

#include "ax_http.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>

/* LATENCY_MS must outlast starting all N tasks and sending their requests,
 * so that the first answer leaves after the last request arrived: that takes
 * 1 to 2 s for 10 000 in a Debug or ASan build on 2 cores, 3 s with two
 * busy loops beside it (superlinear: curl scans its connections to the host
 * for each new transfer).
 * Under TSan every fiber costs about 1 MB of resident memory and TSan's
 * clock operations grow with the number of fibers: at 5 000 (the other
 * tests' TSan size) each process held 5 GB and the start took 7 to 27 s on a
 * busy machine, against ax-upstream's longest latency, 30 s. 2 500 started
 * in about 3 s, 4.5 s beside two busy loops, on the machines of November
 * 2026; on December's (a VM whose page faults cost several times more:
 * perf shows TSan's fiber creation faulting in fresh pages) 2 409 of 2 500
 * were in within 20 s (CI, twice). 1 000 start in about 8 s there, within
 * the 30 s latency. The 10 000 run in the gcc and ASan+UBSan suites, with
 * 20 s: on December's VM beside other work (two suites under TSan) their
 * start took 3.7-6.6 s, and 2 runs of 12 were still starting after 8 s
 * (peaks 8 268 and 9 353 of 10 000), the latency this used before. */
#ifdef TEST_TSAN
#define N 1000
#define LATENCY_MS 30000
#else
#define N 10000
#define LATENCY_MS 20000
#endif
#define WORKERS 2
#define SKIP_CODE 77
#define FD_SLACK 500 /* descriptors beyond N: epoll, eventfds, stdio, curl's own */
#define STR_(x) #x
#define STR(x) STR_(x)

static char url[64], stats_url[64];

/* ---- the upstream process ------------------------------------------------ */

static pid_t upstream_pid;

/* Start ax-upstream on a free port; returns the port it printed. */
static unsigned start_upstream(const char *bin, int *out_fd)
{
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
        dup2(p[1], STDOUT_FILENO);        /* dup2 clears O_CLOEXEC on the copy */
        char *argv[] = {(char *)bin, "--port", "0", "--endpoint",
                        "/inflight latency=fixed:" STR(LATENCY_MS) "ms", NULL};
        execv(bin, argv);
        fprintf(stderr, "test_http_10k: exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    upstream_pid = pid;
    /* Its first line: "listening on 127.0.0.1:PORT". */
    char line[128];
    size_t n = 0;
    uint64_t end = test_now_ms() + 10000;
    while (n < sizeof line - 1 && !memchr(line, '\n', n) && test_now_ms() < end) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t r = read(p[0], line + n, sizeof line - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    line[n] = 0;
    unsigned port = 0;
    if (sscanf(line, "listening on 127.0.0.1:%u", &port) != 1 || port == 0) {
        fprintf(stderr, "FAIL: ax-upstream (%s) did not start: first line '%s'\n", bin, line);
        kill(pid, SIGKILL);
        exit(1);
    }
    *out_fd = p[0]; /* kept open: it never writes more, but must not get EPIPE */
    return port;
}

/* SIGTERM, then wait up to 30 s; its exit status. */
static int stop_upstream(void)
{
    kill(upstream_pid, SIGTERM);
    int st = 0;
    uint64_t end = test_now_ms() + 30000;
    for (;;) {
        pid_t r = waitpid(upstream_pid, &st, WNOHANG);
        if (r == upstream_pid)
            break;
        if (test_now_ms() > end) {
            fprintf(stderr, "FAIL: ax-upstream did not stop within 30 s of SIGTERM\n");
            kill(upstream_pid, SIGKILL);
            waitpid(upstream_pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "FAIL: ax-upstream killed by signal %d\n", WTERMSIG(st));
        return -1;
    }
    return WEXITSTATUS(st);
}

/* ---- the clients ----------------------------------------------------------- */

static atomic_int inside, peak, ok_count, bad_count;
static uint64_t t0;                /* the first submit, test_now_ms() */
static _Atomic uint64_t all_in_ms; /* when the N-th entered ax_http_get, from t0 */
static atomic_flag first_bad = ATOMIC_FLAG_INIT;
static char bad_why[512];

static int get_one(ax_task *t, void *arg)
{
    (void)arg;
    int now = atomic_fetch_add(&inside, 1) + 1;
    int p = atomic_load(&peak);
    while (now > p && !atomic_compare_exchange_weak(&peak, &p, now)) {
    }
    if (now == N)
        atomic_store(&all_in_ms, test_now_ms() - t0);
    ax_http_response r;
    int rc = ax_http_get(t, url, -1, &r);
    atomic_fetch_sub(&inside, 1);
    if (rc == 0 && r.status == 200) {
        atomic_fetch_add(&ok_count, 1);
    } else {
        atomic_fetch_add(&bad_count, 1);
        if (!atomic_flag_test_and_set(&first_bad))
            snprintf(bad_why, sizeof bad_why, "rc %d (%s) status %ld: %s", rc, ax_strerror(rc),
                     r.status, rc ? ax_error_detail() : r.body);
    }
    ax_http_response_free(&r);
    return rc;
}

static atomic_int done_count;
static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&done_count, 1);
}

/* GET /stats from a task, into a malloc'd string (NULL on failure). */
static char *stats_body;
static int get_stats(ax_task *t, void *arg)
{
    (void)arg;
    ax_http_response r;
    int rc = ax_http_get(t, stats_url, 5000, &r);
    if (rc == 0 && r.status == 200) {
        stats_body = r.body;
        r.body = NULL;
    } else {
        fprintf(stderr, "GET /stats: rc %d status %ld: %s\n", rc, r.status,
                rc ? ax_error_detail() : "");
    }
    ax_http_response_free(&r);
    return rc;
}

/* The number after `"key":` following `from` in the /stats JSON, or -1. */
static long long json_num(const char *from, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = from ? strstr(from, k) : NULL;
    return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

static int count_threads(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s path/to/ax-upstream\n", argv[0]);
        return 2;
    }
    setvbuf(stderr, NULL, _IONBF, 0);

    /* Descriptors: N sockets here and N in ax-upstream. */
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < N + FD_SLACK) {
        /* Root (CI) may raise the hard limit itself. */
        struct rlimit want = {N + FD_SLACK, N + FD_SLACK};
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
    }
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < N + FD_SLACK) {
        printf("SKIP: RLIMIT_NOFILE hard limit %llu < %d: cannot hold %d connections "
               "(raise it, e.g. ulimit -Hn 65536 as root)\n",
               (unsigned long long)rl.rlim_max, N + FD_SLACK, N);
        return SKIP_CODE;
    }
    rl.rlim_cur = rl.rlim_max;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    fprintf(stderr, "fd limit %llu (soft = hard), %d requests, latency %d ms, %d workers\n",
            (unsigned long long)rl.rlim_cur, N, LATENCY_MS, WORKERS);

    /* Before any thread exists. */
    int up_out;
    unsigned port = start_upstream(argv[1], &up_out);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/inflight", port);
    snprintf(stats_url, sizeof stats_url, "http://127.0.0.1:%u/stats", port);

    ax_sched *s = test_sched(WORKERS, N);
    int threads_before = count_threads();

    t0 = test_now_ms();
    for (int i = 0; i < N; i++) {
        ax_spec sp = {.fn = get_one, .timeout_ms = LATENCY_MS + 90000, .on_done = on_done};
        int rc = ax_submit(s, &sp, NULL);
        if (rc) {
            fprintf(stderr, "FAIL: ax_submit #%d: %s: %s\n", i, ax_strerror(rc), ax_error_detail());
            CHECK_EQ(rc, 0);
        }
    }
    int max_threads = 0;
    while (atomic_load(&done_count) < N && test_now_ms() - t0 < LATENCY_MS + 100000) {
        int n = count_threads();
        max_threads = n > max_threads ? n : max_threads;
        usleep(20000);
    }
    uint64_t took = test_now_ms() - t0;
    ax_stats st = test_stats(s);
    char all_in[64] = "never all at once";
    if (atomic_load(&peak) == N)
        snprintf(all_in, sizeof all_in, "all %d in after %llu ms", N,
                 (unsigned long long)atomic_load(&all_in_ms));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "%d x GET (latency %d ms): %llu ms; ok %d, failed %d; peak inside ax_http_get %d "
            "(%s); threads max %d (ax's %d, %d workers); max RSS %ld MB\n",
            N, LATENCY_MS, (unsigned long long)took, atomic_load(&ok_count),
            atomic_load(&bad_count), atomic_load(&peak), all_in, max_threads, threads_before,
            WORKERS, ru.ru_maxrss / 1024);
    if (atomic_load(&bad_count))
        fprintf(stderr, "FAIL: %d requests failed; the first: %s\n", atomic_load(&bad_count),
                bad_why);
    if (atomic_load(&done_count) < N)
        fprintf(stderr, "FAIL: only %d of %d tasks ended within %d ms\n", atomic_load(&done_count),
                N, LATENCY_MS + 100000);
    CHECK_EQ(atomic_load(&done_count), N); /* all ended */
    CHECK_EQ(atomic_load(&ok_count), N);   /* all 200 */
    CHECK_EQ(st.succeeded, N);
    CHECK_EQ(st.failed + st.timed_out + st.cancelled, 0);
    if (atomic_load(&peak) < N)
        fprintf(stderr,
                "FAIL: only %d requests were inside ax_http_get at once, want %d: "
                "starting them took longer than the latency?\n",
                atomic_load(&peak), N);
    CHECK_EQ(atomic_load(&peak), N); /* all inside ax_http_get at once */
    if (took < LATENCY_MS || took > LATENCY_MS + 30000)
        fprintf(stderr, "FAIL: %llu ms for the run, want %d to %d: one latency, at once\n",
                (unsigned long long)took, LATENCY_MS, LATENCY_MS + 30000);
    CHECK(took >= LATENCY_MS);          /* each waited out the latency */
    CHECK_LE(took, LATENCY_MS + 30000); /* ... concurrently, not one after another */
    if (max_threads > threads_before + 2)
        fprintf(stderr, "FAIL: %d threads during the run, ax started %d: threads per request?\n",
                max_threads, threads_before);
    CHECK_LE(max_threads, threads_before + 2); /* no thread per request */

    /* The upstream's count, asked through the same scheduler. */
    ax_spec sp = {.fn = get_stats, .timeout_ms = 10000, .on_done = on_done};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&done_count) == N + 1, 15000));
    const char *ep = stats_body ? strstr(stats_body, "\"path\":\"/inflight\"") : NULL;
    if (!ep)
        fprintf(stderr, "FAIL: /stats has no /inflight endpoint: %s\n",
                stats_body ? stats_body : "(no answer)");
    CHECK(ep != NULL);
    long long up_requests = json_num(ep, "requests");
    long long up_max_in_flight = json_num(ep, "max_in_flight");
    long long up_max_open = json_num(strstr(stats_body, "\"connections\""), "max_open");
    fprintf(stderr,
            "upstream /stats: %lld requests on /inflight, at most %lld in flight at once, "
            "at most %lld connections open\n",
            up_requests, up_max_in_flight, up_max_open);
    if (up_requests < N)
        fprintf(stderr, "FAIL: the upstream counted %lld requests, want >= %d\n", up_requests, N);
    CHECK(up_requests >= N);
    if (up_max_in_flight < N)
        fprintf(stderr,
                "FAIL: the upstream saw at most %lld of %d requests in flight at once: "
                "held back in curl, or sent later than the latency allows\n",
                up_max_in_flight, N);
    CHECK_EQ(up_max_in_flight, N); /* all on the wire at once */

    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    free(stats_body);
    int rc = stop_upstream();
    if (rc != 0)
        fprintf(stderr, "FAIL: ax-upstream exit status %d after SIGTERM, want 0\n", rc);
    CHECK_EQ(rc, 0);
    close(up_out);
    return 0;
}
