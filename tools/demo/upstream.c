/* upstream.c - ax-upstream as ax-demo drives it: one fresh process per
 * configuration, so each configuration meets the very same upstream (the
 * phase schedule starts when the process starts; its counters start at 0).
 *
 * The scenario is in incident time; ax-upstream gets it compressed: phase
 * lengths and every latency= and stall_latency= model divided by --speed
 * (stall= without stall_latency= keeps ax-upstream's 30 s). Other keys
 * (slow=, error=, capacity=, ...) are ratios and counts and pass unchanged.
 *
 * Also here: reading /stats (a blocking curl call from the sampler, a few
 * hundred bytes every sample) and checking that a --url answers at all.
 */
#include "demo.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* "lognormal:120ms:330ms" -> "lognormal:40.000ms:110.000ms" at speed 3. */
static void scale_latency(const char *model, double speed, char *out, size_t len)
{
    char buf[DM_SPEC_MAX];
    snprintf(buf, sizeof buf, "%s", model);
    size_t n = 0;
    out[0] = 0;
    char *save = NULL;
    for (char *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        const char *sep = n ? ":" : "";
        double v;
        char *e;
        v = strtod(p, &e);
        if (e != p && (*e == 0 || strcmp(e, "ms") == 0 || strcmp(e, "s") == 0)) {
            if (strcmp(e, "s") == 0) v *= 1000;
            n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%.3fms", sep, v / speed);
        } else {
            n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s", sep, p);
        }
    }
}

/* Keys "a=1,latency=X,b=2" with the latency models rescaled, appended to out. */
static void scale_keys(const char *keys, double speed, char *out, size_t len)
{
    char buf[DM_SPEC_MAX];
    snprintf(buf, sizeof buf, "%s", keys);
    size_t n = strlen(out);
    char *save = NULL;
    for (char *p = strtok_r(buf, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
        const char *eq = strchr(p, '=');
        if (eq && (strncmp(p, "latency=", 8) == 0 || strncmp(p, "stall_latency=", 14) == 0)) {
            char lat[DM_SPEC_MAX];
            scale_latency(eq + 1, speed, lat, sizeof lat);
            n += (size_t)snprintf(out + n, n < len ? len - n : 0, " %.*s%s", (int)(eq + 1 - p), p,
                                  lat);
        } else {
            n += (size_t)snprintf(out + n, n < len ? len - n : 0, " %s", p);
        }
    }
}

int dm_upstream_start(const char *exe, const struct dm_scenario *sc, struct dm_upstream *u,
                      char *err, size_t errlen)
{
    enum { MAXARG = 2 * (DM_MAX_CLASSES + DM_MAX_PHASES) + 16 };
    static char argbuf[MAXARG][DM_SPEC_MAX * 3];
    char *argv[MAXARG + 1];
    int n = 0;
    snprintf(argbuf[n], sizeof argbuf[n], "%s", exe), argv[n] = argbuf[n], n++;
    snprintf(argbuf[n], sizeof argbuf[n], "--port=0"), argv[n] = argbuf[n], n++;
    snprintf(argbuf[n], sizeof argbuf[n], "--seed=%llu", (unsigned long long)sc->seed),
        argv[n] = argbuf[n], n++;
    for (unsigned i = 0; i < sc->ncls; i++) {
        const struct dm_class *c = &sc->cls[i];
        char spec[DM_SPEC_MAX * 2];
        char lat[DM_SPEC_MAX];
        scale_latency(c->latency, sc->speed, lat, sizeof lat);
        snprintf(spec, sizeof spec, "%s latency=%s", c->path[0] ? c->path : "*", lat);
        scale_keys(sc->upstream_base, sc->speed, spec, sizeof spec);
        snprintf(argbuf[n], sizeof argbuf[n], "--endpoint=%s", spec), argv[n] = argbuf[n], n++;
    }
    for (unsigned i = 0; i < sc->nph; i++) {
        const struct dm_phase *p = &sc->ph[i];
        char spec[DM_SPEC_MAX * 2];
        snprintf(spec, sizeof spec, "%.3fms:%s", p->duration_ms / sc->speed, p->name);
        scale_keys(p->upstream, sc->speed, spec, sizeof spec);
        snprintf(argbuf[n], sizeof argbuf[n], "--phase=%s", spec), argv[n] = argbuf[n], n++;
    }
    argv[n] = NULL;

    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    int logfd = memfd_create("ax-upstream.log", MFD_CLOEXEC);
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (pid == 0) {
        /* It dies with ax-demo, however ax-demo ends (a SIGTERM from a
         * supervisor left it running for good: trial). */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        dup2(out[1], 1);
        if (logfd >= 0) dup2(logfd, 2);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        signal(SIGPIPE, SIG_DFL);
        execv(exe, argv);
        fprintf(stderr, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    u->pid = pid;
    u->log_fd = logfd;
    /* The first stdout line, "listening on 127.0.0.1:PORT", within 5 s. */
    char line[256];
    size_t len = 0;
    int rc = -1;
    for (int waited = 0; waited < 5000 && len < sizeof line - 1;) {
        struct pollfd pf = {.fd = out[0], .events = POLLIN};
        int pr = poll(&pf, 1, 100);
        waited += 100;
        if (pr <= 0) continue;
        ssize_t r = read(out[0], line + len, sizeof line - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
        line[len] = 0;
        char *nl = strchr(line, '\n');
        if (nl) {
            *nl = 0;
            unsigned port;
            char host[64];
            if (sscanf(line, "listening on %63[^:]:%u", host, &port) == 2) {
                snprintf(u->base_url, sizeof u->base_url, "http://%s:%u", host, port);
                rc = 0;
            }
            break;
        }
    }
    close(out[0]); /* it writes nothing more to stdout */
    if (rc == 0) return 0;
    /* Say why, from its stderr. */
    int status = 0;
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    u->pid = 0;
    char why[600] = "";
    if (logfd >= 0) {
        ssize_t r = pread(logfd, why, sizeof why - 1, 0);
        why[r > 0 ? r : 0] = 0;
        char *nl = strchr(why, '\n');
        if (nl) *nl = 0;
        close(logfd);
    }
    snprintf(err, errlen, "%s did not start%s%s", exe, why[0] ? ": " : "", why);
    return WIFEXITED(status) && WEXITSTATUS(status) == 2 ? -2 : -1;
}

void dm_upstream_stop(struct dm_upstream *u)
{
    if (u->pid > 0) {
        kill(u->pid, SIGTERM);
        int status;
        for (int i = 0; i < 300; i++) {
            if (waitpid(u->pid, &status, WNOHANG) == u->pid) {
                u->pid = 0;
                break;
            }
            nanosleep(&(struct timespec){0, 10000000}, NULL);
        }
        if (u->pid > 0) {
            kill(u->pid, SIGKILL);
            waitpid(u->pid, &status, 0);
        }
        u->pid = 0;
    }
    if (u->log_fd >= 0) close(u->log_fd);
    u->log_fd = -1;
}

/* ---- /stats ---------------------------------------------------------------- */

struct sink {
    char buf[8192];
    size_t len;
};

static size_t sink_write(char *p, size_t size, size_t n, void *userp)
{
    struct sink *s = userp;
    size_t k = size * n;
    size_t room = sizeof s->buf - 1 - s->len;
    size_t c = k < room ? k : room;
    memcpy(s->buf + s->len, p, c);
    s->len += c;
    s->buf[s->len] = 0;
    return k;
}

static bool field_u64(const char *doc, const char *after, const char *key, uint64_t *v)
{
    const char *p = after ? strstr(doc, after) : doc;
    if (!p) return false;
    p = strstr(p, key);
    if (!p) return false;
    *v = strtoull(p + strlen(key), NULL, 10);
    return true;
}

void dm_upstream_stats(void *easy, const char *base, long timeout_ms, struct dm_upstream_stats *st)
{
    memset(st, 0, sizeof *st);
    static struct sink sink; /* one sampler thread per process */
    sink.len = 0;
    sink.buf[0] = 0;
    char url[DM_URL_MAX + 16];
    snprintf(url, sizeof url, "%s/stats", base);
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(easy) != CURLE_OK) return;
    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200) return;
    uint64_t mean_x = 0;
    const char *d = sink.buf;
    st->ok = field_u64(d, "\"requests\":{", "\"total\":", &st->requests) &&
             field_u64(d, "\"requests\":{", "\"in_flight\":", &st->in_flight) &&
             field_u64(d, "\"requests\":{", "\"max_in_flight\":", &st->max_in_flight) &&
             field_u64(d, "\"latency_ms\":{", "\"count\":", &st->lat_count);
    /* requests.total never includes /stats (ax-upstream counts those apart,
     * in stats_requests): nothing to take off (a trial found it taken off
     * twice, the counted row ~100 below what was answered). */
    const char *m = strstr(d, "\"latency_ms\":{");
    if (m && (m = strstr(m, "\"mean\":"))) st->lat_mean_ms = strtod(m + 7, NULL);
    (void)mean_x;
}

/* ---- --url ------------------------------------------------------------------ */

static size_t discard(char *p, size_t size, size_t n, void *userp)
{
    (void)p;
    (void)userp;
    return size * n;
}

int dm_url_check(const char *url, long timeout_ms, long *status, char *err, size_t errlen)
{
    if (status) *status = 0;
    CURL *e = curl_easy_init();
    if (!e) {
        snprintf(err, errlen, "curl_easy_init failed");
        return -1;
    }
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    /* Told apart in an access log from the runs' requests (which send none). */
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ax-demo-check");
    CURLcode c = curl_easy_perform(e);
    if (c == CURLE_OK && status) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(e);
    if (c == CURLE_OK) return 0;
    snprintf(err, errlen, "%s", ebuf[0] ? ebuf : curl_easy_strerror(c));
    return -1;
}
