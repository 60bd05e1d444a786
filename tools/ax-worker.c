/* ax-worker.c - a consumer process of an ax_redis queue (libax_redis, issue
 * 13): it serves the demo's task kinds against an HTTP upstream.
 *
 * One kind per task class of the demo's scenario (tools/demo/scenario.c:
 * quote, search, report by default; --scenario / --config as ax-demo's),
 * each registered as an ax task class (ax_class_register) so the adaptive
 * limit, the breaker and the queue-time budget apply per kind, and each
 * handled by one GET of --url + the class's path through libax_http, as
 * ax-demo's engines do (tools/demo/eng_ax.c): a 200 succeeds, any other
 * status or none fails the attempt, and the queue's retry / dead-letter
 * rules take over.
 *
 * The ledger (--ledger FILE): one line per execution of a handler, appended
 * with one write(2) on an O_APPEND descriptor before the handler returns,
 * so before the consumer can acknowledge the message: a process killed with
 * SIGKILL leaves a line for every execution that got an answer before it
 * died, acknowledged or not. ax-demo --cluster joins the ledgers with the
 * ids its producers were given (tools/README.md says what that proves).
 *
 *   <unix ms> <id> <entry id> <attempt> <deliveries> <outcome> <kind> <http status>
 *
 * outcome: ok (200), late (200, but the attempt's deadline had passed:
 * ax ends it TIMED_OUT), fail (another status, or no answer), timeout (the
 * attempt's deadline), cancel (shutdown).
 *
 * Signals: SIGTERM and SIGINT are blocked in every thread and taken by the
 * main thread (sigtimedwait); it stops the consumer with a bounded drain,
 * prints one "key value" line per counter on stdout and exits 0.
 */
#include "demo/demo.h"

#include "ax.h"
#include "ax_http.h"
#include "ax_redis.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <arpa/inet.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const usage_text =
    "usage: ax-worker --url BASE [--redis HOST:PORT] [--queue NAME] [--name NAME]\n"
    "                 [--slots N] [--workers N] [--metrics ADDR] [--ledger FILE]\n"
    "                 [--scenario NAME | --config FILE] [--visibility MS]\n"
    "                 [--claim-interval MS] [--retry BASE:MAX:JITTER] [--drain MS]\n"
    "       ax-worker --help\n"
    "\n"
    "A consumer of an ax_redis queue: runs the demo's task kinds (one per class of\n"
    "the scenario: quote, search, report) as ax tasks, each one GET of BASE + the\n"
    "class's path. SIGTERM or SIGINT: stop pulling, let what it holds finish (up to\n"
    "--drain), print one 'key value' line per counter, exit 0.\n"
    "\n"
    "  --url BASE          the HTTP upstream, e.g. http://127.0.0.1:8080 (required)\n"
    "  --redis HOST:PORT   the Redis server (default 127.0.0.1:6379; numeric address\n"
    "                      or localhost, no host names)\n"
    "  --queue NAME        the queue (default demo)\n"
    "  --name NAME         consumer name in the group, unique (default HOST-PID)\n"
    "  --slots N           messages held at most (default 64)\n"
    "  --workers N         ax worker threads (default: one per CPU)\n"
    "  --metrics ADDR      serve Prometheus /metrics on ADDR (e.g. 127.0.0.1:9464;\n"
    "                      port 0 picks one, printed as 'metrics on ADDR:PORT')\n"
    "  --ledger FILE       append one line per execution (before its acknowledgement)\n"
    "  --scenario NAME     whose classes to serve: overload (default) or retry-storm\n"
    "  --config FILE       an ax-demo scenario file: its class lines\n"
    "  --visibility MS     a message held this long by a dead consumer is claimed\n"
    "                      (default 30000)\n"
    "  --claim-interval MS how often to claim, move due retries, heartbeat (default 1000;\n"
    "                      --visibility must be more than twice it)\n"
    "  --retry B:M:J       back-off of failed attempts, ms: base, max, jitter\n"
    "                      (default 1000:30000:1000)\n"
    "  --drain MS          on SIGTERM, wait this long for held messages (default 10000)\n"
    "\n"
    "Exit status: 0 after a signal, 1 when it cannot run (the ledger cannot be\n"
    "opened, --queue or --metrics refused; an unreachable Redis is retried, not\n"
    "an exit), 2 for bad arguments.\n";

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ax-worker: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n\n", stderr);
    fputs(usage_text, stderr);
    exit(2);
}

static void die(const char *what, int rc) __attribute__((noreturn));
static void die(const char *what, int rc)
{
    fprintf(stderr, "ax-worker: %s: %s: %s\n", what, ax_strerror(rc), ax_error_detail());
    exit(1);
}

enum { AX_WORKER_NAME_MAX = 128 }; /* a consumer name, its NUL included (ax_redis's bound) */

struct options {
    const char *url, *redis, *queue, *name, *metrics, *ledger, *scenario, *config;
    unsigned slots, workers;
    uint32_t visibility_ms, claim_ms, drain_ms;
    ax_retry_policy retry;
};

static unsigned long number(const char *opt, const char *v, unsigned long lo, unsigned long hi)
{
    char *e;
    errno = 0;
    unsigned long n = strtoul(v, &e, 10);
    if (*v < '0' || *v > '9' || *e || errno || n < lo || n > hi)
        usage_error("%s: '%s' is not a whole number from %lu to %lu", opt, v, lo, hi);
    return n;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    static const char *const names[] = {
        "--url",        "--redis",  "--queue",  "--name",       "--slots",
        "--workers",    "--metrics", "--ledger", "--scenario",  "--config",
        "--visibility", "--claim-interval", "--retry", "--drain"};
    enum { NV = sizeof names / sizeof *names };
    bool seen[NV] = {0};
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) usage_error("unexpected argument '%s'", a);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int f = -1;
        for (int k = 0; k < NV; k++)
            if (strlen(names[k]) == len && strncmp(a, names[k], len) == 0) f = k;
        if (f < 0) usage_error("unknown option '%.*s'", (int)len, a);
        const char *v;
        if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) usage_error("%s needs a value", names[f]);
            v = argv[++i];
        }
        if (!*v) usage_error("%s: the value is empty", names[f]);
        if (seen[f]) usage_error("%s is given twice", names[f]);
        seen[f] = true;
        switch (f) {
        case 0: o->url = v; break;
        case 1: o->redis = v; break;
        case 2: o->queue = v; break;
        case 3: o->name = v; break;
        case 4: o->slots = (unsigned)number(names[f], v, 1, 100000); break;
        case 5: o->workers = (unsigned)number(names[f], v, 1, 1024); break;
        case 6: o->metrics = v; break;
        case 7: o->ledger = v; break;
        case 8: o->scenario = v; break;
        case 9: o->config = v; break;
        case 10: o->visibility_ms = (uint32_t)number(names[f], v, 1, 86400000); break;
        case 11: o->claim_ms = (uint32_t)number(names[f], v, 1, 86400000); break;
        case 12: {
            unsigned long b, m, j;
            char tail;
            if (sscanf(v, "%lu:%lu:%lu%c", &b, &m, &j, &tail) != 3 || b == 0 || m < b ||
                m > 86400000 || j > 86400000)
                usage_error("--retry: '%s' is not BASE:MAX:JITTER in ms (0 < BASE <= MAX)", v);
            o->retry = (ax_retry_policy){.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = b,
                                         .max_ms = m, .jitter_ms = j};
            break;
        }
        case 13: o->drain_ms = (uint32_t)number(names[f], v, 0, 3600000); break;
        }
    }
    if (!o->url) usage_error("--url is required (the HTTP upstream the handlers call)");
    char why[DM_URL_MAX + 100];
    if (dm_url_base_check(o->url, why, sizeof why) != 0)
        usage_error("--url: %s", why); /* ax-demo's rule */
    if (o->scenario && o->config) usage_error("--scenario and --config: give one");
    /* Not cut: two names that differ after byte 127 would share one consumer. */
    if (o->name && strlen(o->name) >= AX_WORKER_NAME_MAX)
        usage_error("--name must be 1-%d bytes (it has %zu)", AX_WORKER_NAME_MAX - 1,
                    strlen(o->name));
    /* ax_redis's alphabet, checked here so that a bad name is a bad
     * argument (exit 2) whatever is wrong with it, as a long one is. */
    if (o->name && (!o->name[0] || o->name[strspn(o->name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                          "abcdefghijklmnopqrstuvwxyz"
                                                          "0123456789_.:-")]))
        usage_error("--name '%s': only A-Z a-z 0-9 _ . : - (ax_redis's consumer names)", o->name);
}

/* "HOST:PORT" (IPv6 in brackets) into host and port. */
static void parse_redis(const char *v, char *host, size_t hostlen, uint16_t *port)
{
    if (strstr(v, "://"))
        usage_error("--redis: '%s': give HOST:PORT, not a URL (no scheme: 127.0.0.1:6379)", v);
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v) usage_error("--redis: '%s' is not HOST:PORT", v);
    const char *h = v;
    size_t hl = (size_t)(colon - v);
    bool bracketed = h[0] == '[' && hl >= 2 && h[hl - 1] == ']';
    if (bracketed)
        h++, hl -= 2;
    else if (memchr(h, ':', hl)) /* "::1:6379" is itself an address: which colon ends it? */
        usage_error("--redis: '%s': an IPv6 address goes in brackets, [ADDR]:PORT", v);
    if (hl >= hostlen) usage_error("--redis: '%s': the host is too long", v);
    memcpy(host, h, hl);
    host[hl] = 0;
    unsigned char a[sizeof(struct in6_addr)];
    if (strcmp(host, "localhost") != 0 && inet_pton(AF_INET, host, a) != 1 &&
        inet_pton(AF_INET6, host, a) != 1)
        usage_error("--redis: '%s': the host must be a numeric IPv4 / IPv6 address or localhost "
                    "(no DNS: it would block a worker)", v);
    *port = (uint16_t)number("--redis (port)", colon + 1, 1, 65535);
}

/* ---- the handlers ----------------------------------------------------------------------- */

static struct dm_scenario sc;
static char class_url[DM_MAX_CLASSES][DM_URL_MAX + DM_PATH_MAX];
static int ledger_fd = -1;
static _Atomic uint64_t n_exec, n_ok, n_fail, n_timeout, n_cancel, n_redelivered_exec;

/* One ledger line, one write(2): O_APPEND makes it atomic with respect to
 * the other handlers' lines (a pipe-sized line on a local file). */
static void ledger(const char *id, const char *entry, unsigned attempt, unsigned deliveries,
                   const char *outcome, const char *kind, long status)
{
    if (ledger_fd < 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[256];
    int n = snprintf(line, sizeof line, "%" PRIu64 " %s %s %u %u %s %s %ld\n",
                     (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u, id, entry,
                     attempt, deliveries, outcome, kind, status);
    if (n > 0 && n < (int)sizeof line && write(ledger_fd, line, (size_t)n) != n)
        fprintf(stderr, "ax-worker: ledger write: %s\n", strerror(errno));
}

static int handle(ax_task *t, const ax_redis_msg *m, void *arg)
{
    unsigned cls = (unsigned)(uintptr_t)arg;
    /* Copies: once the attempt's deadline passes, the consumer may end the
     * message (and free m) while the call below is still returning. */
    char id[AX_REDIS_ID_MAX], entry[AX_REDIS_ID_MAX];
    snprintf(id, sizeof id, "%s", m->id);
    snprintf(entry, sizeof entry, "%s", m->entry_id);
    unsigned attempt = m->attempt, deliveries = m->deliveries;
    atomic_fetch_add(&n_exec, 1);
    if (deliveries > 1) atomic_fetch_add(&n_redelivered_exec, 1);
    ax_http_response resp;
    int rc = ax_http_get(t, class_url[cls], -1, &resp);
    long status = rc == 0 ? resp.status : 0;
    ax_http_response_free(&resp);
    /* A 200 that came as the deadline passed: ax ends the attempt
     * TIMED_OUT whatever this returns. ("late"; the check narrows the race,
     * it cannot close it: an "ok" line can still lose to the deadline, and
     * the message then ends as a retry or a dead letter.) */
    bool late = rc == 0 && status == 200 && ax_cancelled(t) != 0;
    const char *outcome = rc == AX_ETIMEDOUT ? "timeout"
                          : rc == AX_ECANCELED ? "cancel"
                          : rc || status != 200 ? "fail"
                          : late ? "late"
                                 : "ok";
    ledger(id, entry, attempt, deliveries, outcome, sc.cls[cls].name, status);
    if (rc) {
        atomic_fetch_add(rc == AX_ETIMEDOUT ? &n_timeout : rc == AX_ECANCELED ? &n_cancel : &n_fail,
                         1);
        ax_task_set_error(t, "%s", ax_error_detail());
        return rc;
    }
    if (late) {
        atomic_fetch_add(&n_timeout, 1);
        ax_task_set_error(t, "HTTP 200 after the attempt's deadline");
        return AX_ETIMEDOUT;
    }
    if (status != 200) {
        atomic_fetch_add(&n_fail, 1);
        ax_task_set_error(t, "HTTP %ld", status);
        return 1;
    }
    atomic_fetch_add(&n_ok, 1);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o = {.queue = "demo", .redis = "127.0.0.1:6379", .drain_ms = 10000};
    parse_args(argc, argv, &o);
    char host[128];
    uint16_t port;
    parse_redis(o.redis, host, sizeof host, &port);
    if (o.visibility_ms || o.claim_ms) {
        uint64_t vis = o.visibility_ms ? o.visibility_ms : 30000, cl = o.claim_ms ? o.claim_ms : 1000;
        if (2 * cl >= vis)
            usage_error("--visibility %" PRIu64 " must be more than twice --claim-interval %" PRIu64
                        " (a running message's idle time is reset only every claim interval)",
                        vis, cl);
    }

    if (dm_scenario_builtin(&sc, o.scenario, false) != 0)
        usage_error("--scenario: no built-in scenario '%s' (there are: %s)", o.scenario,
                    dm_scenario_names);
    if (o.config) {
        char err[600];
        if (dm_scenario_file(&sc, o.config, err, sizeof err) != 0) {
            fprintf(stderr, "ax-worker: %s\n", err);
            return 2;
        }
    }
    char base[DM_URL_MAX];
    snprintf(base, sizeof base, "%s", o.url);
    size_t bl = strlen(base);
    if (bl && base[bl - 1] == '/') base[bl - 1] = 0;
    for (unsigned i = 0; i < sc.ncls; i++)
        snprintf(class_url[i], sizeof class_url[i], "%s%s", base, sc.cls[i].path);

    curl_global_init(CURL_GLOBAL_DEFAULT); /* before any thread: not thread-safe */
    if (o.ledger) {
        ledger_fd = open(o.ledger, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (ledger_fd < 0) {
            fprintf(stderr, "ax-worker: --ledger %s: %s\n", o.ledger, strerror(errno));
            return 1;
        }
    }

    /* Every thread ax starts inherits the mask: only sigtimedwait below
     * takes SIGTERM and SIGINT. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    if (o.slots) cc.slots = o.slots;
    if (o.visibility_ms) cc.visibility_ms = o.visibility_ms;
    if (o.claim_ms) cc.claim_interval_ms = o.claim_ms;
    if (o.retry.base_ms) cc.retry = o.retry;
    char name[AX_WORKER_NAME_MAX];
    if (o.name) {
        snprintf(name, sizeof name, "%s", o.name); /* fits: parse_args */
    } else {
        char hn[64] = "host";
        gethostname(hn, sizeof hn);
        hn[sizeof hn - 1] = 0;
        snprintf(name, sizeof name, "%s-%d", hn, (int)getpid());
    }
    cc.name = name;

    ax_config c;
    ax_config_default(&c);
    if (o.workers) c.workers = o.workers;
    /* The consumer's two long-lived tasks hold two slots; the rest are its
     * messages' (the kinds' classes hold them to their adaptive limits). */
    if (c.max_concurrency < cc.slots + 2) c.max_concurrency = cc.slots + 2;
    ax_sched *s;
    int rc = ax_new(&c, &s);
    if (rc) die("ax_new", rc);

    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = o.queue;
    qc.conn.host = host;
    qc.conn.port = port;
    ax_redis_queue *q;
    if ((rc = ax_redis_queue_new(&qc, &q))) die("--queue / --redis", rc);
    ax_redis_consumer *cons;
    if ((rc = ax_redis_consumer_new(s, q, &cc, &cons))) die("the consumer", rc);
    for (unsigned i = 0; i < sc.ncls; i++) {
        ax_class_config k;
        ax_class_config_default(&k);
        k.name = sc.cls[i].name;
        k.timeout_ms = (uint64_t)sc.cls[i].timeout_ms; /* unused: each message has its own */
        unsigned id;
        if ((rc = ax_class_register(s, &k, &id))) die("ax_class_register", rc);
        if ((rc = ax_redis_handle_class(cons, sc.cls[i].name, id, handle, (void *)(uintptr_t)i)))
            die("ax_redis_handle_class", rc);
    }
    if (o.metrics) {
        uint16_t mport = 0;
        /* Not an address at all is a bad argument (2); one that cannot be
         * listened on (in use, not this host's) is a failure (1). */
        if ((rc = ax_metrics_serve(s, o.metrics, &mport)) == AX_EINVAL)
            usage_error("--metrics: %s", ax_error_detail()); /* the detail names the value */
        if (rc) die("--metrics", rc);
        char mhost[128];
        const char *colon = strrchr(o.metrics, ':');
        snprintf(mhost, sizeof mhost, "%.*s", colon ? (int)(colon - o.metrics) : 0, o.metrics);
        printf("metrics on %s:%u\n", mhost, (unsigned)mport);
    }
    if ((rc = ax_redis_consumer_start(cons))) die("ax_redis_consumer_start", rc);
    printf("consuming %s as %s\n", o.queue, name);
    fflush(stdout);
    fprintf(stderr, "ax-worker %s: queue %s on %s:%u, %u slots, kinds", name, o.queue, host,
            (unsigned)port, cc.slots);
    for (unsigned i = 0; i < sc.ncls; i++)
        fprintf(stderr, "%s %s -> %s", i ? "," : "", sc.cls[i].name, class_url[i]);
    fputc('\n', stderr);

    /* Wait for the signal; meanwhile look at Redis once a second (one
     * round trip on the queue's pool): a line on stderr when it cannot be
     * reached, once, and one when it can again -- not silence. */
    int sig;
    bool down = false;
    for (;;) {
        struct timespec one = {1, 0};
        sig = sigtimedwait(&sigs, NULL, &one);
        if (sig >= 0) break;
        if (errno != EAGAIN) continue; /* EINTR */
        ax_redis_queue_stats qs;
        int prc = ax_redis_queue_stats_get(NULL, q, 1000, &qs);
        if (prc && !down) {
            fprintf(stderr, "ax-worker %s: Redis %s:%u unreachable: %s: %s (pulling stopped; "
                            "retrying)\n", name, host, (unsigned)port, ax_strerror(prc),
                    ax_error_detail());
            down = true;
        } else if (!prc && down) {
            fprintf(stderr, "ax-worker %s: Redis %s:%u reachable again\n", name, host,
                    (unsigned)port);
            down = false;
        }
    }
    int stop_rc = ax_redis_consumer_stop(cons, o.drain_ms);
    bool drained = stop_rc == AX_OK;
    /* A drain that timed out leaves handlers parked (a slow HTTP call):
     * they are cancelled here, not later by ax_free, so that each has
     * written its ledger line and counted its outcome before the counters
     * are printed -- executed = _ok + _failed + _timed_out + _cancelled.
     * ax_shutdown returns once their coroutines have ended (1 s at most);
     * the second stop settles their messages as abandoned (pending in
     * Redis for another consumer), which the acker, already gone, could
     * not. */
    if (!drained) {
        if (ax_shutdown(s, 0) != AX_OK)
            fprintf(stderr, "ax-worker %s: a handler did not return after its cancellation: %s\n",
                    name, ax_error_detail());
        ax_redis_consumer_stop(cons, 0);
    }
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(cons, &st);
    printf("signal %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    printf("drained %s\n", drained ? "yes" : "no");
    printf("executed %" PRIu64 "\n", atomic_load(&n_exec));
    printf("executed_ok %" PRIu64 "\n", atomic_load(&n_ok));
    printf("executed_failed %" PRIu64 "\n", atomic_load(&n_fail));
    printf("executed_timed_out %" PRIu64 "\n", atomic_load(&n_timeout));
    printf("executed_cancelled %" PRIu64 "\n", atomic_load(&n_cancel));
    printf("executed_redelivered %" PRIu64 "\n", atomic_load(&n_redelivered_exec));
    printf("pulled %" PRIu64 "\n", st.pulled);
    printf("claimed %" PRIu64 "\n", st.claimed);
    printf("redelivered %" PRIu64 "\n", st.redelivered);
    printf("succeeded %" PRIu64 "\n", st.succeeded);
    printf("retried %" PRIu64 "\n", st.retried);
    printf("dead %" PRIu64 "\n", st.dead);
    printf("ack_lost %" PRIu64 "\n", st.ack_lost);
    printf("held %" PRIu64 "\n", st.held);
    printf("redis_errors %" PRIu64 "\n", st.redis_errors);
    printf("abandoned %" PRIu64 "\n", st.abandoned);
    printf("handed_back %" PRIu64 "\n", st.handed_back);
    fflush(stdout);
    /* After a drain that timed out, the scheduler goes first: a handler
     * that did not return even when cancelled still reaches the consumer
     * through its on_done before the consumer is freed. */
    if (drained) {
        ax_redis_consumer_free(cons);
        ax_free(s);
    } else {
        ax_free(s);
        ax_redis_consumer_free(cons);
    }
    ax_redis_queue_free(q);
    if (ledger_fd >= 0) close(ledger_fd);
    return 0;
}
