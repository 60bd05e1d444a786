/* ax-upstream.c - an unstable HTTP/1.1 upstream, served by ax's own
 * coroutines and socket I/O (issue 4; seed §1.1 and §4).
 *
 * The seed's scheduler existed because its upstreams were third-party HTTP
 * sources that answered in 50 ms to 30 s and sometimes not at all, and its
 * incident (§4.1) was an upstream that slowed from 300 ms to 2 s once
 * overloaded. ax-upstream plays that upstream for ax's demos, tests and
 * benchmarks: per-endpoint latency models, 500/503 errors, hangs, resets,
 * an overload model, and a schedule of phases (healthy -> degraded ->
 * healthy), with its own counts at GET /stats.
 *
 * It is also ax's first real server: one accept task, one task per
 * connection (thousands of keep-alive connections, each a parked coroutine),
 * simulated latency as ax_sleep. See upstream/upstream.h for the parts and
 * tools/README.md for the flags and the scenario format.
 *
 * The main thread only waits for signals (SIGINT/SIGTERM are blocked in
 * every thread and taken with sigtimedwait), logs phase changes on stderr,
 * and on a signal or at --duration shuts the scheduler down. stdout carries
 * exactly one line, "listening on ADDR:PORT", flushed at once, so scripts
 * can find a --port 0 server.
 */
#include "upstream/upstream.h"

#include "ax.h"
#include "listen_addr.h" /* src/: the rule ax_metrics_serve uses too */

#include <arpa/inet.h>
#include <pthread.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *const usage_text =
    "usage: ax-upstream [--port N] [--bind ADDR] [--scenario FILE]...\n"
    "                   [--endpoint 'PATTERN key=value ...']... [--phase 'DUR[:NAME] "
    "key=value ...']...\n"
    "                   [--loop] [--seed N] [--duration DUR] [--idle-timeout DUR]\n"
    "                   [--conn-lifetime DUR] [--max-conns N] [--workers N]\n"
    "       ax-upstream --help\n"
    "\n"
    "An unstable HTTP/1.1 upstream on ax coroutines. Prints 'listening on ADDR:PORT'\n"
    "as its first line; GET /stats returns its counts as JSON; SIGINT/SIGTERM stop it.\n"
    "\n"
    "  --port N             TCP port, 0 = any free one (default 0)\n"
    "  --bind ADDR          localhost, or a numeric IPv4 or IPv6 address (default 127.0.0.1)\n"
    "  --scenario FILE      endpoint/phase/loop/seed=N lines (see below); repeatable,\n"
    "                       its items added in order, as the flags' are\n"
    "  --endpoint SPEC      PATTERN key=value...: /exact, /prefix/* or * (everything else)\n"
    "  --phase SPEC         DUR[:NAME] key=value...: a step of the schedule, in order\n"
    "  --loop               repeat the schedule (default: stay in the last phase)\n"
    "  --seed N             random seed, per connection (default 1)\n"
    "  --duration DUR       stop after this long (default: run until a signal)\n"
    "  --idle-timeout DUR   close a connection idle this long between requests (60s)\n"
    "  --conn-lifetime DUR  close a connection this old, even if busy (1h)\n"
    "  --max-conns N        connections served at once; more wait (20000)\n"
    "  --workers N          ax worker threads (default: one per CPU)\n"
    "\n"
    "keys (endpoints and phases):\n"
    "  latency=fixed:D | uniform:MIN:MAX | lognormal:P50:P99   0 to 30s (default fixed:0)\n"
    "  stall=P       probability that a request stalls: its latency is drawn from\n"
    "  stall_latency=MODEL  instead (a latency= model; default fixed:30s)\n"
    "  slow=F        multiply latency by F (default 1)\n"
    "  error=P       probability of a 5xx; error_code=500|503|mix (default 500)\n"
    "  hang=P        probability of never answering\n"
    "  reset=P       probability of closing mid-response with RST\n"
    "  capacity=C    in flight beyond C: latency x (in_flight/C)^overload (0 = off)\n"
    "  overload=K    the exponent K (default 1: processor sharing)\n"
    "  body=N        bytes of a 200's body (default: a short JSON document)\n"
    "  path=PATTERN  (phases only) change only this endpoint; default all\n"
    "Phase names healthy, degraded (slow=7 error=0.05 error_code=503) and down\n"
    "(hang=1) are presets. Items are separated by spaces or commas. DUR: 300ms, 1.5s,\n"
    "2m, 1h; a bare number is ms in latency= and seconds elsewhere.\n"
    "\n"
    "Values may be written --flag V or --flag=V. Exit status: 0 stopped cleanly,\n"
    "1 cannot serve (port in use, ...) or tasks stuck at shutdown, 2 bad arguments\n"
    "or scenario.\n";

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ax-upstream: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n\n", stderr);
    fputs(usage_text, stderr);
    exit(2);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ax-upstream: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

struct options {
    struct scenario sc;
    unsigned long port;
    const char *bind;
    double duration_ms; /* 0 = until a signal */
    double idle_ms, lifetime_ms;
    unsigned long max_conns, workers;
    bool seed_given;
    unsigned long long seed;
};

static unsigned long parse_count(const char *flag, const char *v, unsigned long lo,
                                 unsigned long hi)
{
    char *e;
    errno = 0;
    unsigned long x = strtoul(v, &e, 10);
    if (!*v || *v == '-' || *v == '+' || *e || errno || x < lo || x > hi)
        usage_error("%s: '%s' is not a whole number from %lu to %lu", flag, v, lo, hi);
    return x;
}

static double parse_dur_flag(const char *flag, const char *v, double lo_ms, double hi_ms)
{
    double ms;
    if (parse_duration(v, 1000, &ms) || ms < lo_ms || ms > hi_ms)
        usage_error("%s: '%s' is not a duration from %gms to %gs (e.g. 30s, 500ms, 2m)", flag, v,
                    lo_ms, hi_ms / 1000);
    return ms;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    enum {
        PORT,
        BIND,
        SCENARIO,
        ENDPOINT,
        PHASE,
        LOOP,
        SEED,
        DURATION,
        IDLE,
        LIFETIME,
        MAXC,
        WORKERS,
        NFLAGS
    };
    static const char *const names[NFLAGS] = {
        "--port", "--bind",     "--scenario",     "--endpoint",      "--phase",     "--loop",
        "--seed", "--duration", "--idle-timeout", "--conn-lifetime", "--max-conns", "--workers"};
    bool seen[NFLAGS] = {0};
    char err[512];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') usage_error("unexpected argument '%s'", a);
        if (a[1] != '-') usage_error("unknown option '%s'", a);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int f = 0;
        while (f < NFLAGS && !(strlen(names[f]) == len && strncmp(a, names[f], len) == 0))
            f++;
        if (f == NFLAGS) usage_error("unknown option '%.*s'", (int)len, a);
        if (f == LOOP) {
            if (eq) usage_error("--loop takes no value");
            o->sc.loop = true;
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) usage_error("%s needs a value", names[f]);
            v = argv[++i];
        }
        if (*v == '\0') usage_error("%s: the value is empty", names[f]);
        if (seen[f] && f != ENDPOINT && f != PHASE && f != SCENARIO)
            usage_error("%s is given twice", names[f]);
        seen[f] = true;
        char origin[UP_ORIGIN_MAX];
        snprintf(origin, sizeof origin, "%s '%.100s'", names[f], v);
        switch (f) {
        case PORT:
            o->port = parse_count(names[f], v, 0, 65535);
            break;
        case BIND:
            o->bind = v;
            break;
        case SCENARIO:
            if (scenario_file(&o->sc, v, err, sizeof err)) {
                fprintf(stderr, "ax-upstream: %s\n(ax-upstream --help describes the format)\n",
                        err);
                exit(2);
            }
            break;
        case ENDPOINT:
            if (scenario_endpoint(&o->sc, v, origin, err, sizeof err)) usage_error("%s", err);
            break;
        case PHASE:
            if (scenario_phase(&o->sc, v, origin, err, sizeof err)) usage_error("%s", err);
            break;
        case SEED: {
            char *e;
            errno = 0;
            o->seed = strtoull(v, &e, 10);
            if (*v == '-' || *v == '+' || *e || errno)
                usage_error("--seed: '%s' is not a whole number", v);
            o->seed_given = true;
            break;
        }
        case DURATION:
            o->duration_ms = parse_dur_flag(names[f], v, 1, 365.0 * 86400e3);
            break;
        case IDLE:
            o->idle_ms = parse_dur_flag(names[f], v, 1, 86400e3);
            break;
        case LIFETIME:
            o->lifetime_ms = parse_dur_flag(names[f], v, 1, 365.0 * 86400e3);
            break;
        case MAXC:
            o->max_conns = parse_count(names[f], v, 1, 1000000);
            break;
        case WORKERS:
            o->workers = parse_count(names[f], v, 1, 1024);
            break;
        }
    }
    if (o->seed_given) o->sc.seed = o->seed;
    if (scenario_finish(&o->sc, err, sizeof err)) usage_error("%s", err);
}

/* Socket bound and listening; *printable gets "127.0.0.1:PORT" / "[::1]:PORT". */
static int listen_on(const char *addr, unsigned port, char *printable, size_t plen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    /* the rule of ax_metrics_serve: localhost, numeric IPv4 or IPv6 */
    if (listen_addr_parse("--bind", addr, (uint16_t)port, &ss, &sl))
        usage_error("%s", ax_error_detail());
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0)
        die("bind %s port %u: %s", addr, port, strerror(errno));
    /* The kernel caps this at net.core.somaxconn. */
    if (listen(fd, 65535) != 0) die("listen: %s", strerror(errno));
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    char host[INET6_ADDRSTRLEN];
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &a4->sin_addr, host, sizeof host);
        snprintf(printable, plen, "%s:%u", host, ntohs(a4->sin_port));
    } else {
        inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
        snprintf(printable, plen, "[%s]:%u", host, ntohs(a6->sin6_port));
    }
    return fd;
}

/* Many thousand connections need as many descriptors: take the hard limit. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void log_phase(const struct scenario *sc, unsigned ph)
{
    const struct phase *p = &sc->ph[ph];
    if (ph + 1 == sc->nph && !sc->loop)
        fprintf(stderr, "ax-upstream: phase %u/%u %s (from now on)\n", ph + 1, sc->nph, p->name);
    else
        fprintf(stderr, "ax-upstream: phase %u/%u %s for %.3gs\n", ph + 1, sc->nph, p->name,
                p->duration_ms / 1e3);
}

int main(int argc, char **argv)
{
    struct options *o = calloc(1, sizeof *o);
    if (!o) die("out of memory");
    scenario_init(&o->sc);
    o->bind = "127.0.0.1";
    o->idle_ms = 60000;
    o->lifetime_ms = 3600000;
    o->max_conns = 20000;
    parse_args(argc, argv, o);

    raise_fd_limit();
    /* Before any thread exists, so that every ax thread inherits the mask and
     * only sigtimedwait below takes these. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char where[80];
    int lfd = listen_on(o->bind, (unsigned)o->port, where, sizeof where);

    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = (unsigned)o->workers;
    cfg.max_concurrency = (unsigned)o->max_conns + 1; /* + the accept task */
    /* Connections beyond max_concurrency wait in NORMAL: room for as many
     * again before admission refuses them (then: 503 and close). */
    cfg.capacity[AX_PRIO_NORMAL] = cfg.max_concurrency > 30000 ? cfg.max_concurrency : 30000;
    cfg.shed_ratio = 1.0;
    ax_sched *s;
    if (ax_new(&cfg, &s) != 0) die("ax_new: %s", ax_error_detail());

    struct server_opts so = {
        .sc = &o->sc,
        .listen_fd = lfd,
        .start_ns = ax_now_ns(),
        .idle_ms = (int64_t)o->idle_ms,
        .lifetime_ms = (uint64_t)o->lifetime_ms,
    };
    if (server_start(s, &so) != 0) die("cannot start the accept task: %s", ax_error_detail());
    printf("listening on %s\n", where);
    fflush(stdout);

    unsigned phase = 0;
    log_phase(&o->sc, phase);
    const char *why = "duration reached";
    for (;;) {
        uint64_t el_ms = (ax_now_ns() - so.start_ns) / 1000000u, in_ms;
        unsigned ph = scenario_phase_at(&o->sc, el_ms, &in_ms);
        if (ph != phase) log_phase(&o->sc, phase = ph);
        if (o->duration_ms > 0 && el_ms >= (uint64_t)o->duration_ms) break;
        /* Sleep until the next phase boundary, the end, or at most 1 s. */
        uint64_t wait = 1000;
        if (ph + 1 < o->sc.nph || o->sc.loop) wait = o->sc.ph[ph].duration_ms - in_ms;
        if (o->duration_ms > 0 && (uint64_t)o->duration_ms - el_ms < wait)
            wait = (uint64_t)o->duration_ms - el_ms;
        if (wait > 1000) wait = 1000;
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000),
                              .tv_nsec = (long)(wait % 1000) * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            why = sig == SIGINT ? "SIGINT" : "SIGTERM";
            break;
        }
    }

    /* Cancel everything at once: parked requests and idle keep-alive
     * connections would otherwise hold the shutdown for their full waits.
     * ax_shutdown gives cancelled coroutines a fixed 200 ms to return, and
     * 10 000 parked connections need about twice that on two workers, so
     * ask again (it is idempotent) for up to 5 s before calling it unclean. */
    uint64_t t_stop = ax_now_ns();
    int rc = ax_shutdown(s, 0);
    for (int i = 0; rc == AX_ETIMEDOUT && i < 25; i++)
        rc = ax_shutdown(s, 0);
    char detail[200];
    snprintf(detail, sizeof detail, "%s", rc ? ax_error_detail() : "");
    close(lfd);
    fprintf(
        stderr,
        "ax-upstream: stopping (%s): %llu requests, %llu connections, shutdown %s in %.0f ms%s%s\n",
        why, (unsigned long long)atomic_load(&up_stats.requests),
        (unsigned long long)atomic_load(&up_stats.conns_accepted),
        rc == 0 ? "clean" : ax_strerror(rc), (ax_now_ns() - t_stop) / 1e6, rc ? ": " : "", detail);
    ax_free(s);
    scenario_free(&o->sc);
    free(o);
    return rc == 0 ? 0 : 1;
}
