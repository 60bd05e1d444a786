/* ax_http.c - HTTP requests per second through ax + curl against
 * ax-upstream or nginx on loopback, what each request in flight costs, and
 * how many connections it opens.
 *
 *   ax_http url=http://127.0.0.1:PORT/fast inflight=N seconds=S [threads=1]
 *           [warmup_ms=W] [status=http://127.0.0.1:PORT/nginx_status] [tag=T]
 *           [h2c=1] [easy_pool=P]
 *
 * ax (default): N tasks, each looping GETs through ax_http_get for S
 * seconds on the default workers — N requests in flight, parked
 * coroutines, one curl multi handle per worker.
 * threads=1: the `threads` peer — N pthreads, each looping blocking
 * curl_easy_perform on its own reused easy handle (a pool of N threads is
 * what it takes to have N requests in flight that way).
 * The measured window starts W ms (default 0) after all N clients exist,
 * so connections opened at the start can be left out of it. h2c=1: ax asks
 * for HTTP/2 with prior knowledge on plain http:// (ax_http_configure), for
 * a server that speaks it (nginx `listen ... http2;` without TLS).
 * easy_pool=P: ax_http_config.easy_pool (default 64), to see what reusing
 * easy handles saves.
 * Prints, with prefix ax_<T>_ or tp_<T>_ (T: tag, default http) and the
 * in-flight count:
 *   <p>rps_<N>            requests completed in the window per second
 *   <p>rss_per_req_<N>    (peak RSS - RSS before) / N, bytes
 *   <p>threads_<N>        threads of the process at the peak
 *   <p>fds_<N>            open descriptors at the peak
 *   <p>failed_<N>         requests that did not end in a 200
 *   <p>cpu_us_per_req_<N> CPU (user + system, all threads) per request in the
 *                         window, µs: less sensitive than rps to other load
 *   <p>newconn_per_1k_<N> with status=: connections the server accepted in
 *                         the window per 1 000 requests (nginx's stub_status
 *                         `accepts`, less the status request's own)
 * Blocking curl_easy_perform holds three descriptors per request (the
 * connection and the socketpair of the multi handle it makes inside), ax one
 * per request plus a few per worker: under RLIMIT_NOFILE 20 000, a pool of
 * 10 000 threads runs out and its requests fail (counted, not hidden). The
 * sampler therefore reads /proc through descriptors opened at the start.
 */
#include "ax_bench.h"

#include <ax_http.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *url;
static bool h2c;
/* The measured window starts once all N clients exist: 10 000 threads take
 * seconds to create, longer than a whole run. Threads wait at the gate until
 * then (blocked, so the creating thread is not starved); ax tasks start at
 * once, so stop_ns stays at "never" until the window opens. */
static _Atomic uint64_t stop_ns = UINT64_MAX;
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_long completed, failed;

/* Entries of an open /proc directory, re-read from the start. */
static int count_entries(DIR *d)
{
    int n = 0;
    struct dirent *e;
    rewinddir(d);
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    return n;
}

static int64_t rss_bytes(int statm_fd)
{
    char buf[128];
    long size = 0, resident = 0;
    ssize_t k = pread(statm_fd, buf, sizeof buf - 1, 0);
    if (k <= 0) return 0;
    buf[k] = 0;
    if (sscanf(buf, "%ld %ld", &size, &resident) != 2) return 0;
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

static int client(ax_task *t, void *arg)
{
    (void)arg;
    while (bu_now_ns() < stop_ns) {
        ax_http_response r;
        int rc = ax_http_get(t, url, 5000, &r);
        if (rc == 0 && r.status == 200)
            atomic_fetch_add(&completed, 1);
        else
            atomic_fetch_add(&failed, 1);
        ax_http_response_free(&r);
        if (rc == AX_ETIMEDOUT || rc == AX_ECANCELED)
            return rc;
    }
    return 0;
}

static size_t discard(char *p, size_t s, size_t n, void *u)
{
    (void)p, (void)u;
    return s * n;
}

struct text {
    char b[1024];
    size_t len;
};

static size_t keep(char *p, size_t s, size_t n, void *u)
{
    struct text *t = u;
    size_t k = s * n < sizeof t->b - 1 - t->len ? s * n : sizeof t->b - 1 - t->len;
    memcpy(t->b + t->len, p, k);
    t->len += k;
    t->b[t->len] = 0;
    return s * n;
}

/* nginx stub_status's `accepts`: connections accepted since it started,
 * counting the one this request opens. -1 if it cannot be read. */
static long server_accepts(const char *status_url)
{
    struct text t = {.len = 0};
    CURL *e = curl_easy_init();
    if (!e)
        return -1;
    curl_easy_setopt(e, CURLOPT_URL, status_url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, keep);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (h2c)
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    CURLcode c = curl_easy_perform(e);
    curl_easy_cleanup(e);
    const char *p = strstr(t.b, "requests\n");
    long accepts = -1;
    if (c != CURLE_OK || !p || sscanf(p + 9, "%ld", &accepts) != 1)
        return -1;
    return accepts;
}

static void *thread_client(void *arg)
{
    (void)arg;
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    pthread_mutex_lock(&gate_mu);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    while (bu_now_ns() < stop_ns) {
        long status = 0;
        if (curl_easy_perform(e) == CURLE_OK &&
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200)
            atomic_fetch_add(&completed, 1);
        else
            atomic_fetch_add(&failed, 1);
    }
    curl_easy_cleanup(e);
    return NULL;
}

int main(int argc, char **argv)
{
    url = bu_arg_str(argc, argv, "url", NULL);
    const char *status = bu_arg_str(argc, argv, "status", NULL);
    const char *tag = bu_arg_str(argc, argv, "tag", "http");
    if (!url) {
        fprintf(stderr, "usage: ax_http url=http://127.0.0.1:PORT/path inflight=N seconds=S "
                        "[threads=1]\n");
        return 2;
    }
    unsigned inflight = (unsigned)bu_arg(argc, argv, "inflight", 100);
    uint64_t seconds = bu_arg(argc, argv, "seconds", 3);
    bool threads = bu_arg(argc, argv, "threads", 0) != 0;
    uint64_t warmup_ms = bu_arg(argc, argv, "warmup_ms", 0);
    /* ax's HTTP client only (not threads=1): */
    bool h2c_arg = bu_arg(argc, argv, "h2c", 0) != 0;
    uint64_t easy_pool = bu_arg(argc, argv, "easy_pool", UINT64_MAX);
    bu_args_done(argc, argv);
    if (threads && (h2c_arg || easy_pool != UINT64_MAX)) {
        fprintf(stderr, "ax_http: h2c= and easy_pool= are for ax's client, not threads=1\n");
        return 2;
    }
    char p[64];
    snprintf(p, sizeof p, "%s_%s", threads ? "tp" : "ax", tag);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    DIR *tasks = opendir("/proc/self/task"), *fds = opendir("/proc/self/fd");
    int statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (!tasks || !fds || statm < 0) {
        fprintf(stderr, "%s: cannot open /proc/self\n", p);
        return 1;
    }
    int64_t rss0 = rss_bytes(statm);
    int peak_threads = 0, peak_fds = 0;
    int64_t peak_rss = rss0;
    ax_sched *s = NULL;
    pthread_t *th = NULL;
    if (threads) {
        th = calloc(inflight, sizeof *th);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024); /* a frugal pool, not 8 MiB each */
        for (unsigned i = 0; i < inflight; i++)
            if (pthread_create(&th[i], &a, thread_client, NULL) != 0) {
                fprintf(stderr, "%s: pthread_create #%u failed\n", p, i);
                return 1;
            }
    } else {
        ax_config cfg;
        ax_config_default(&cfg);
        cfg.max_concurrency = inflight + 10;
        ab_check(ax_new(&cfg, &s), "ax_new");
        h2c = h2c_arg;
        ax_http_config hc;
        ax_http_config_default(&hc);
        if (h2c)
            hc.http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
        if (easy_pool != UINT64_MAX)
            hc.easy_pool = (unsigned)easy_pool;
        ab_check(ax_http_configure(s, &hc), "ax_http_configure");
        for (unsigned i = 0; i < inflight; i++) {
            ax_spec spec = {.fn = client, .timeout_ms = (seconds + 30) * 1000, .priority = AX_PRIO_HIGH};
            ab_check(ax_submit(s, &spec, NULL), "ax_submit");
        }
    }
    pthread_mutex_lock(&gate_mu);
    gate_open = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    bu_sleep_ms(warmup_ms);
    long acc0 = status ? server_accepts(status) : -1;
    atomic_store(&completed, 0);
    atomic_store(&failed, 0);
    double cpu0 = bu_cpu_seconds();
    uint64_t t0 = bu_now_ns();
    atomic_store(&stop_ns, t0 + seconds * 1000000000u);
    do {
        bu_sleep_ms(100);
        int n = count_entries(tasks), nf = count_entries(fds);
        int64_t r = rss_bytes(statm);
        peak_threads = n > peak_threads ? n : peak_threads;
        peak_fds = nf > peak_fds ? nf : peak_fds;
        peak_rss = r > peak_rss ? r : peak_rss;
    } while (bu_now_ns() < stop_ns);
    /* The window's figures, before the requests still in flight end. */
    double secs = (double)(bu_now_ns() - t0) / 1e9;
    long done = atomic_load(&completed), bad = atomic_load(&failed);
    double cpu = bu_cpu_seconds() - cpu0;
    long acc1 = status ? server_accepts(status) : -1;
    if (threads) {
        for (unsigned i = 0; i < inflight; i++)
            pthread_join(th[i], NULL);
        free(th);
    } else {
        ab_check(ax_shutdown(s, 10000), "ax_shutdown");
    }
    printf("%s_rps_%u %.0f\n", p, inflight, (double)done / secs);
    printf("%s_rss_per_req_%u %.0f\n", p, inflight, (double)(peak_rss - rss0) / inflight);
    printf("%s_threads_%u %d\n", p, inflight, peak_threads);
    printf("%s_fds_%u %d\n", p, inflight, peak_fds);
    printf("%s_failed_%u %ld\n", p, inflight, bad);
    printf("%s_cpu_us_per_req_%u %.2f\n", p, inflight, cpu * 1e6 / (double)(done + bad > 0 ? done + bad : 1));
    if (status && (acc0 < 0 || acc1 < 0)) {
        fprintf(stderr, "%s: cannot read nginx's stub_status at %s\n", p, status);
        return 1;
    }
    if (status)
        printf("%s_newconn_per_1k_%u %.3f\n", p, inflight,
               (double)(acc1 - acc0 - 1) * 1000.0 / (double)(done + bad > 0 ? done + bad : 1));
    if (s)
        ax_free(s);
    closedir(tasks);
    closedir(fds);
    close(statm);
    return 0;
}
