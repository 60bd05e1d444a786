/* cluster.c - ax-demo --cluster N: the demo's traffic through a shared
 * ax_redis queue (DESIGN.md §12), N ax-worker processes consuming it, one
 * killed with SIGKILL in the middle of the peak (issue 13).
 *
 * The run, in the ax-demo process (single-threaded; every child is exec'd
 * and dies with it, PR_SET_PDEATHSIG):
 *   1. redis-server on a free loopback port in a temporary directory, with
 *      appendonly yes and appendfsync always (the setting under which
 *      nothing admitted is lost, ax_redis.h);
 *   2. ax-upstream with the scenario, as for every configuration;
 *   3. N ax-worker (w1..wN), each with its own --ledger;
 *   4. the producer: the scenario's arrivals (the schedule, priorities and
 *      classes of dm_traffic) submitted at their time with
 *      ax_redis_submit_batch (what is due in one round trip), every id
 *      Redis admitted written to OUT/cluster/admitted;
 *   5. in the middle of the busiest phase, once it holds messages, SIGKILL
 *      to the second worker, w2;
 *   6. after the traffic, the drain: until every stream, pending list and
 *      the delayed set are empty (bounded: 60 s of wall time), then SIGTERM
 *      to the others, which print their counters;
 *   7. the join: the admitted ids against the ledgers' executions and the
 *      dead-letter stream (OUT/cluster/dead: one origin id a line).
 *
 * What the join proves. A worker appends a ledger line for an execution
 * before its handler returns, so before the consumer can write the
 * message's terminal record; an id with an "ok" line was therefore run to
 * success by some worker (killed or not), and an id in the dead-letter
 * stream was ended there by a script that removed its entry. The
 * terminal record of an id is its dead letter if it has one (an "ok" line
 * beside it is an execution Redis never recorded: its worker died before
 * acknowledging, or the answer came as the attempt's deadline ended it),
 * else its "ok" line. "lost" is an admitted id with neither; "multi" one
 * with two dead letters. The ids succeeded this way must equal Redis' own
 * counter `succeeded` (the acknowledgements), which the test checks. The
 * join does not prove that one success was acknowledged, nor count an upstream
 * call whose worker died before its line was written (such a message was
 * not acknowledged either: it is run again, and that second run is the one
 * in the ledger) -- so "duplicates" counts executions the ledgers saw twice
 * for one stream entry, a lower bound on the upstream's extra calls.
 */
#include "cluster.h"

#include "ax.h"
#include "ax_redis.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RETRY 3        /* per message; retries go through Redis' delayed set */
#define SLOTS 64           /* messages a worker holds at most */
#define VISIBILITY_MS 2000 /* wall: a dead worker's messages are claimed after this */
#define CLAIM_MS 250       /* wall */
#define DRAIN_BOUND_S 60   /* wall: the longest the drain is waited for */
#define BATCH 256

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static double mono_ms(void)
{
    return (double)ax_now_ns() / 1e6;
}

static void sleep_ms(double ms)
{
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool find_exe(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s:/usr/bin:/usr/sbin:/usr/local/bin", path ? path : "");
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save))
        if (snprintf(out, len, "%s/%s", d, name) < (int)len && access(out, X_OK) == 0)
            return true;
    return false;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* fork + exec with stdout and stderr to files; the child dies with us. */
static pid_t spawn(char *const argv[], const char *out_path, const char *err_path)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    if (o >= 0) dup2(o, 1);
    if (e >= 0) dup2(e, 2);
    if (in >= 0) dup2(in, 0);
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static bool file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static void tail_of(const char *path, char *out, size_t len)
{
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0]) snprintf(out, len, "%.300s", line);
    }
    fclose(f);
}

static bool ping(int port)
{
    struct timeval tv = {0, 300000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = false;
    if (c && !c->err) {
        redisReply *r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return ok;
}

/* ---- ids: an open-addressing set of message ids -------------------------------------------- */

struct idrec {
    char id[AX_REDIS_ID_MAX]; /* "" = empty slot */
    bool admitted;
    uint32_t ok, dead;
};

struct idset {
    struct idrec *v;
    size_t cap, n;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static struct idrec *id_get(struct idset *s, const char *id)
{
    if (!*id || strlen(id) >= AX_REDIS_ID_MAX) return NULL;
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1 << 14;
        struct idrec *nv = calloc(cap, sizeof *nv);
        if (!nv) return NULL;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->v[i].id[0]) continue;
            size_t j = hash(s->v[i].id) & (cap - 1);
            while (nv[j].id[0])
                j = (j + 1) & (cap - 1);
            nv[j] = s->v[i];
        }
        free(s->v);
        s->v = nv;
        s->cap = cap;
    }
    size_t j = hash(id) & (s->cap - 1);
    while (s->v[j].id[0]) {
        if (strcmp(s->v[j].id, id) == 0) return &s->v[j];
        j = (j + 1) & (s->cap - 1);
    }
    snprintf(s->v[j].id, sizeof s->v[j].id, "%s", id);
    s->n++;
    return &s->v[j];
}

/* ---- the ledgers ----------------------------------------------------------------------------- */

struct exec {
    char entry[2 * AX_REDIS_ID_MAX]; /* "id entry": entry ids are unique per stream only */
    unsigned deliveries;
    uint8_t worker;
};

static int exec_cmp(const void *a, const void *b)
{
    const struct exec *x = a, *y = b;
    int c = strcmp(x->entry, y->entry);
    if (c) return c;
    return x->deliveries < y->deliveries ? -1 : x->deliveries > y->deliveries;
}

/* Read worker i's ledger: its counts and bins, each execution into *ex, ok
 * executions into the id set. */
static int read_ledger(const char *path, unsigned i, uint64_t t0_unix, double speed,
                       struct dm_cluster_result *r, struct idset *ids, struct exec **ex,
                       size_t *nex, size_t *capex)
{
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : -1; /* a worker that ran nothing */
    struct dm_cluster_worker *w = &r->w[i];
    char line[512];
    while (fgets(line, sizeof line, f)) {
        uint64_t ms;
        char id[AX_REDIS_ID_MAX], entry[AX_REDIS_ID_MAX], outcome[16], kind[32];
        unsigned attempt, deliveries;
        long status;
        if (sscanf(line, "%" SCNu64 " %47s %47s %u %u %15s %31s %ld", &ms, id, entry, &attempt,
                   &deliveries, outcome, kind, &status) != 8)
            continue; /* a line cut by the SIGKILL: no execution finished writing it */
        w->executed++;
        if (deliveries > 1) w->redeliveries++;
        if (strcmp(outcome, "ok") == 0) {
            w->ok++;
            struct idrec *rec = id_get(ids, id);
            if (rec) rec->ok++;
        } else if (strcmp(outcome, "timeout") == 0 || strcmp(outcome, "late") == 0) {
            w->timed_out++;
        } else if (strcmp(outcome, "cancel") == 0) {
            w->cancelled++;
        } else {
            w->failed++;
        }
        double t_inc = ms >= t0_unix ? (double)(ms - t0_unix) * speed : 0;
        unsigned b = (unsigned)(t_inc / r->bin_ms);
        if (b < DM_CLUSTER_BINS) {
            w->bins[b]++;
            if (b + 1 > r->nbins) r->nbins = b + 1;
        }
        if (*nex == *capex) {
            size_t cap = *capex ? 2 * *capex : 1 << 14;
            struct exec *nv = realloc(*ex, cap * sizeof *nv);
            if (!nv) {
                fclose(f);
                return -1;
            }
            *ex = nv;
            *capex = cap;
        }
        struct exec *e = &(*ex)[(*nex)++];
        snprintf(e->entry, sizeof e->entry, "%s %s", id, entry);
        e->deliveries = deliveries;
        e->worker = (uint8_t)i;
    }
    fclose(f);
    return 0;
}

/* "key value" lines a worker printed at SIGTERM. */
static void read_summary(const char *path, struct dm_cluster_worker *w)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char key[64];
    unsigned long long v;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%63s %llu", key, &v) != 2) continue;
        w->summary = true;
        if (strcmp(key, "dead") == 0) w->dead = v;
        else if (strcmp(key, "claimed") == 0) w->claimed = v;
        else if (strcmp(key, "succeeded") == 0) w->succeeded_acked = v;
        else if (strcmp(key, "retried") == 0) w->retried = v;
        else if (strcmp(key, "ack_lost") == 0) w->ack_lost = v;
        else if (strcmp(key, "redis_errors") == 0) w->redis_errors = v;
    }
    fclose(f);
}

/* ---- the run ------------------------------------------------------------------------------- */

/* Whether consumer `name` holds delivered, unacknowledged messages now
 * (XPENDING's summary of each stream): the kill must leave some behind
 * for the redelivery to be shown. *held gets how many. */
static bool holds(int port, const char *name, uint64_t *held)
{
    struct timeval tv = {0, 500000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    uint64_t n = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        static const char *const stream[] = {"high", "normal", "low"};
        for (int k = 0; k < 3; k++) {
            redisReply *rep = redisCommand(c, "XPENDING ax:{%s}:%s ax", DM_CLUSTER_QUEUE, stream[k]);
            if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 4 &&
                rep->element[3]->type == REDIS_REPLY_ARRAY)
                for (size_t i = 0; i < rep->element[3]->elements; i++) {
                    const redisReply *e = rep->element[3]->element[i];
                    if (e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
                        strcmp(e->element[0]->str, name) == 0)
                        n += strtoull(e->element[1]->str, NULL, 10);
                }
            if (rep) freeReplyObject(rep);
        }
    }
    if (c) redisFree(c);
    *held = n;
    return n > 0;
}

static ax_priority ax_prio(unsigned p)
{
    return p == DM_HIGH ? AX_PRIO_HIGH : p == DM_LOW ? AX_PRIO_LOW : AX_PRIO_NORMAL;
}

static int fail(struct dm_cluster_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(struct dm_cluster_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    return -1;
}

static void stop_pid(pid_t pid, int sig, double bound_ms, int *status)
{
    if (pid <= 0) return;
    kill(pid, sig);
    double until = mono_ms() + bound_ms;
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (mono_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        sleep_ms(10);
    }
    if (status) *status = WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
}

struct procs {
    pid_t redis, worker[DM_CLUSTER_MAX];
    struct dm_upstream up;
    unsigned n;
    char rdir[PATH_MAX]; /* redis-server's temporary directory */
    pid_t janitor;       /* removes it if ax-demo dies first */
};

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

/* No shell: a TMPDIR with a quote in it broke "rm -rf '%s'" (trial). */
static void remove_dir(const char *dir)
{
    if (!dir[0]) return;
    if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        fprintf(stderr, "ax-demo: could not remove %s: %s\n", dir, strerror(errno));
}

/* A process that removes redis-server's directory if ax-demo ends without
 * stop_all (SIGTERM, SIGINT, SIGKILL: a trial found it left behind). It
 * waits for its parent's death (PR_SET_PDEATHSIG), gives redis-server
 * (killed by the same death) a moment to stop writing, and removes it;
 * stop_all kills it first on every ordinary path. */
static pid_t janitor(const char *dir)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL); /* a terminal's Ctrl-C reaches us too: outlive it */
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    if (getppid() == parent) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, SIGUSR1);
        int sig;
        sigwait(&one, &sig);
    }
    for (int i = 0; i < 50; i++) { /* redis-server exits on its own SIGKILL */
        remove_dir(dir);
        if (access(dir, F_OK) != 0) break;
        sleep_ms(100);
    }
    _exit(0);
}

static void stop_all(struct procs *p)
{
    if (p->janitor > 0) stop_pid(p->janitor, SIGKILL, 2000, NULL), p->janitor = 0;
    for (unsigned i = 0; i < p->n; i++)
        if (p->worker[i] > 0) stop_pid(p->worker[i], SIGKILL, 2000, NULL), p->worker[i] = 0;
    dm_upstream_stop(&p->up);
    if (p->redis > 0) stop_pid(p->redis, SIGTERM, 5000, NULL), p->redis = 0;
    remove_dir(p->rdir);
    p->rdir[0] = 0;
}

static int wait_drained(ax_redis_queue *q, struct dm_cluster_result *r, double t_end_ms)
{
    double until = t_end_ms + DRAIN_BOUND_S * 1000.0;
    ax_redis_queue_stats st;
    for (;;) {
        int rc = ax_redis_queue_stats_get(NULL, q, 2000, &st);
        if (rc == 0) {
            r->left_length = st.length[0] + st.length[1] + st.length[2];
            r->left_pending = st.pending[0] + st.pending[1] + st.pending[2];
            r->left_delayed = st.delayed;
            if (r->left_length == 0 && r->left_delayed == 0) {
                r->drained = true;
                break;
            }
        }
        if (mono_ms() > until) break;
        sleep_ms(100);
    }
    r->drain_s = (mono_ms() - t_end_ms) / 1000;
    return 0;
}

int dm_cluster_run(const struct dm_cluster_opts *o, struct dm_cluster_result *r)
{
    const struct dm_scenario *sc = o->sc;
    memset(r, 0, sizeof *r);
    r->n = o->n;
    r->killed = o->n >= 2 ? 1 : 0;
    r->max_retry = MAX_RETRY;
    r->slots = SLOTS;
    r->visibility_ms = VISIBILITY_MS;
    r->claim_ms = CLAIM_MS;
    r->bin_ms = 500;
    char redis_exe[PATH_MAX];
    if (!find_exe("redis-server", redis_exe, sizeof redis_exe))
        return fail(r, "redis-server is not installed (Debian: apt-get install redis-server)");

    char dir[PATH_MAX], path[2 * PATH_MAX];
    snprintf(dir, sizeof dir, "%s/cluster", o->out);
    mkdir(dir, 0777);
    /* Absolute: redis-server opens its --logfile after its chdir to --dir
     * (a relative --out, the default ".", failed every run: trial). */
    char abs_dir[PATH_MAX];
    if (!realpath(dir, abs_dir)) return fail(r, "%s: %s", dir, strerror(errno));
    snprintf(dir, sizeof dir, "%s", abs_dir);
    /* Redis' files in a temporary directory of their own, removed at the
     * end (the AOF is not the demo's output; the ledgers are). */
    struct procs p = {.n = o->n, .up = {.log_fd = -1}};
    const char *tmp = getenv("TMPDIR");
    snprintf(p.rdir, sizeof p.rdir, "%.*s/ax-demo-redis-XXXXXX", PATH_MAX - 32,
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(p.rdir)) return fail(r, "mkdtemp %s: %s", p.rdir, strerror(errno));
    p.janitor = janitor(p.rdir);
    /* A previous run's files would join into this one's. */
    for (unsigned i = 0; i < DM_CLUSTER_MAX; i++) {
        snprintf(path, sizeof path, "%s/ledger.w%u", dir, i + 1);
        unlink(path);
    }

    int port = -1;
    for (int attempt = 0; attempt < 5 && p.redis <= 0; attempt++) {
        port = free_port();
        char ps[16], logf[2 * PATH_MAX];
        snprintf(ps, sizeof ps, "%d", port);
        snprintf(logf, sizeof logf, "%s/redis.log", dir);
        char *argv[] = {redis_exe, "--port", ps, "--bind", "127.0.0.1", "--dir", p.rdir,
                        "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                        "--daemonize", "no", "--logfile", logf, "--protected-mode", "no", NULL};
        snprintf(path, sizeof path, "%s/redis.out", dir);
        p.redis = spawn(argv, path, path);
        if (p.redis < 0) return fail(r, "fork: %s", strerror(errno));
        bool up = false;
        for (int i = 0; i < 500 && !up; i++) { /* 10 s */
            up = ping(port);
            if (!up && waitpid(p.redis, NULL, WNOHANG) == p.redis) break;
            if (!up) sleep_ms(20);
        }
        if (!up) stop_pid(p.redis, SIGKILL, 1000, NULL), p.redis = 0;
    }
    if (p.redis <= 0) {
        stop_all(&p);
        return fail(r, "redis-server did not start (see %s/redis.log)", dir);
    }

    char err[800];
    if (dm_upstream_start(o->upstream_exe, sc, &p.up, err, sizeof err) != 0) {
        stop_all(&p);
        return fail(r, "%s", err);
    }
    /* The workers serve the scenario's classes: give them the scenario. */
    char conf[2 * PATH_MAX];
    snprintf(conf, sizeof conf, "%s/scenario.conf", dir);
    FILE *cf = fopen(conf, "w");
    if (!cf) {
        stop_all(&p);
        return fail(r, "%s: %s", conf, strerror(errno));
    }
    dm_scenario_print(sc, cf);
    fclose(cf);
    char redis_addr[32], slots[16], vis[16], claim[16], retry[64];
    snprintf(redis_addr, sizeof redis_addr, "127.0.0.1:%d", port);
    snprintf(slots, sizeof slots, "%u", SLOTS);
    snprintf(vis, sizeof vis, "%u", VISIBILITY_MS);
    snprintf(claim, sizeof claim, "%u", CLAIM_MS);
    /* The seed's tuned back-off (1 s .. 30 s, + up to 1 s), at the demo's speed. */
    snprintf(retry, sizeof retry, "%.0f:%.0f:%.0f", ceil(1000 / sc->speed),
             ceil(30000 / sc->speed), ceil(1000 / sc->speed));
    for (unsigned i = 0; i < o->n; i++) {
        struct dm_cluster_worker *w = &r->w[i];
        snprintf(w->name, sizeof w->name, "w%u", i + 1);
        char ledger[2 * PATH_MAX], outp[2 * PATH_MAX], errp[2 * PATH_MAX];
        snprintf(ledger, sizeof ledger, "%s/ledger.%s", dir, w->name);
        snprintf(outp, sizeof outp, "%s/%s.out", dir, w->name);
        snprintf(errp, sizeof errp, "%s/%s.err", dir, w->name);
        char *argv[] = {(char *)o->worker_exe, "--url", p.up.base_url, "--redis", redis_addr,
                        "--queue", DM_CLUSTER_QUEUE, "--name", w->name, "--slots", slots,
                        "--workers", "1", "--ledger", ledger, "--config", conf,
                        "--visibility", vis, "--claim-interval", claim, "--retry", retry,
                        "--drain", "5000", NULL};
        p.worker[i] = spawn(argv, outp, errp);
        if (p.worker[i] < 0) {
            stop_all(&p);
            return fail(r, "fork: %s", strerror(errno));
        }
    }
    for (unsigned i = 0; i < o->n; i++) {
        char outp[2 * PATH_MAX], errp[2 * PATH_MAX];
        snprintf(outp, sizeof outp, "%s/%s.out", dir, r->w[i].name);
        snprintf(errp, sizeof errp, "%s/%s.err", dir, r->w[i].name);
        bool ready = false;
        for (int k = 0; k < 1000 && !ready; k++) { /* 10 s */
            ready = file_has(outp, "consuming ");
            if (!ready && waitpid(p.worker[i], NULL, WNOHANG) == p.worker[i]) {
                p.worker[i] = 0;
                break;
            }
            if (!ready) sleep_ms(10);
        }
        if (!ready) {
            char last[400];
            tail_of(errp, last, sizeof last);
            stop_all(&p);
            return fail(r, "ax-worker %s did not start: %s", r->w[i].name,
                        last[0] ? last : "(no message)");
        }
    }

    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = DM_CLUSTER_QUEUE;
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    int rc = ax_redis_queue_new(&qc, &q);
    if (rc) {
        stop_all(&p);
        return fail(r, "ax_redis_queue_new: %s: %s", ax_strerror(rc), ax_error_detail());
    }
    snprintf(path, sizeof path, "%s/admitted", dir);
    FILE *adm = fopen(path, "w");
    if (!adm) {
        ax_redis_queue_free(q);
        stop_all(&p);
        return fail(r, "%s: %s", path, strerror(errno));
    }

    /* The middle of the busiest phase. */
    double kill_at = 0, kill_end = 0, t = 0, best = -1;
    for (unsigned i = 0; i < sc->nph; i++) {
        if (sc->ph[i].rate > best) {
            best = sc->ph[i].rate;
            kill_at = t + sc->ph[i].duration_ms / 2;
            kill_end = t + sc->ph[i].duration_ms;
        }
        t += sc->ph[i].duration_ms;
    }
    double kill_wall = kill_at / sc->speed;
    /* ... once the worker holds messages (it nearly always does in the
     * peak), else at the peak's end at the latest. */
    double kill_last = kill_end / sc->speed;
    bool killed = false;

    static struct idset ids;
    memset(&ids, 0, sizeof ids);
    static ax_redis_spec specs[BATCH];
    static char payload[BATCH][32];
    static int rcs[BATCH];
    static char idout[BATCH][AX_REDIS_ID_MAX];
    struct dm_traffic tr;
    dm_traffic_init(&tr, sc);
    struct dm_arrival a;
    bool have = dm_traffic_next(&tr, &a);
    uint64_t t0_unix = unix_ms();
    double t0 = mono_ms();
    double last_progress = t0;
    while (have || !killed) {
        double now = mono_ms() - t0;
        if (!killed && now >= kill_wall &&
            (holds(port, r->w[r->killed].name, &r->kill_held) || now >= kill_last)) {
            kill(p.worker[r->killed], SIGKILL);
            killed = true;
            r->kill_t_ms = now * sc->speed;
            /* What it held when it died, read again once it is dead (not
             * reaped: stop_pid takes its status at the end): the count
             * above was read before the kill, and a worker may take more
             * in between (a run printed "holding 62" beside 63
             * redeliveries). */
            siginfo_t si;
            while (waitid(P_PID, (id_t)p.worker[r->killed], &si, WEXITED | WNOWAIT) < 0 &&
                   errno == EINTR) {
            }
            holds(port, r->w[r->killed].name, &r->kill_held);
            fprintf(stderr, "%scluster: SIGKILL to %s at %.1f s (incident), holding %" PRIu64
                            " messages\n",
                    o->tty ? "\r" : "", r->w[r->killed].name, r->kill_t_ms / 1000, r->kill_held);
        }
        size_t n = 0;
        while (have && a.t_ms / sc->speed <= now && n < BATCH) {
            ax_redis_spec *s = &specs[n];
            snprintf(payload[n], sizeof payload[n], "%" PRIu64, r->generated + n);
            double to = sc->cls[a.cls].timeout_ms / sc->speed;
            *s = (ax_redis_spec){.kind = sc->cls[a.cls].name, .priority = ax_prio(a.prio),
                                 .payload = payload[n], .len = strlen(payload[n]),
                                 .timeout_ms = to < 1 ? 1 : (uint64_t)llround(to),
                                 .max_retry = MAX_RETRY};
            n++;
            have = dm_traffic_next(&tr, &a);
        }
        if (n) {
            r->generated += n;
            double b0 = mono_ms();
            rc = ax_redis_submit_batch(NULL, q, specs, n, 5000, rcs, idout);
            double took = mono_ms() - b0;
            if (took > r->max_batch_ms) r->max_batch_ms = took;
            for (size_t i = 0; i < n; i++) {
                int x = rc ? rc : rcs[i];
                if (x == 0) {
                    r->admitted++;
                    fprintf(adm, "%s\n", idout[i]);
                    struct idrec *rec = id_get(&ids, idout[i]);
                    if (rec) rec->admitted = true;
                } else if (x == AX_ESHED) {
                    r->shed++;
                } else if (x == AX_EFULL) {
                    r->rejected++;
                } else {
                    r->unconfirmed++; /* admitted or not: its reply was lost */
                }
            }
            continue;
        }
        double next = have ? a.t_ms / sc->speed : kill_wall;
        if (!killed && kill_wall < next) next = kill_wall;
        if (mono_ms() - last_progress >= 2000 || o->tty) {
            if (o->tty || mono_ms() - last_progress >= 2000) {
                fprintf(stderr, "%scluster: %.0f s of %.0f, %" PRIu64 " submitted%s",
                        o->tty ? "\r" : "", now * sc->speed / 1000,
                        dm_scenario_length_ms(sc) / 1000, r->generated, o->tty ? "   " : "\n");
                last_progress = mono_ms();
            }
        }
        sleep_ms(next - (mono_ms() - t0) < 20 ? next - (mono_ms() - t0) : 20);
    }
    fclose(adm);
    double t_end = mono_ms();
    if (o->tty) fputc('\n', stderr);
    fprintf(stderr, "cluster: traffic over (%" PRIu64 " admitted); waiting for the queue to drain\n",
            r->admitted);
    wait_drained(q, r, t_end);
    r->wall_s = (mono_ms() - t0) / 1000;
    r->incident_s = r->wall_s * sc->speed;

    /* Redis' own account, before the workers go. */
    ax_redis_queue_stats st;
    if (ax_redis_queue_stats_get(NULL, q, 5000, &st) == 0) {
        r->stats_succeeded = st.succeeded;
        r->stats_retried = st.retried;
        r->stats_dead = st.dead;
        r->stats_claimed = st.claimed;
        r->dead_stream = st.dead_letters;
    }
    CURL *curl = curl_easy_init();
    struct dm_upstream_stats us = {0};
    if (curl) dm_upstream_stats(curl, p.up.base_url, 2000, &us), curl_easy_cleanup(curl);
    r->upstream_requests = us.ok ? us.requests : 0;

    /* The dead letters' origin ids. */
    snprintf(path, sizeof path, "%s/dead", dir);
    FILE *dead = fopen(path, "w");
    struct timeval tv = {5, 0};
    redisContext *rc_ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (rc_ctx && !rc_ctx->err) {
        redisSetTimeout(rc_ctx, tv);
        char key[128];
        snprintf(key, sizeof key, "ax:{%s}:dead", DM_CLUSTER_QUEUE);
        redisReply *rep = redisCommand(rc_ctx, "XRANGE %s - +", key);
        for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
            const redisReply *e = rep->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2) continue;
            const redisReply *f = e->element[1];
            for (size_t k = 0; k + 1 < f->elements; k += 2)
                if (f->element[k]->type == REDIS_REPLY_STRING && strcmp(f->element[k]->str, "o") == 0) {
                    struct idrec *rec = id_get(&ids, f->element[k + 1]->str);
                    if (rec) rec->dead++;
                    if (dead) fprintf(dead, "%s\n", f->element[k + 1]->str);
                }
        }
        if (rep) freeReplyObject(rep);
    }
    if (rc_ctx) redisFree(rc_ctx);
    if (dead) fclose(dead);
    ax_redis_queue_free(q);

    /* SIGTERM: each survivor drains what it holds and prints its counters. */
    for (unsigned i = 0; i < o->n; i++)
        if (i != r->killed) kill(p.worker[i], SIGTERM);
    for (unsigned i = 0; i < o->n; i++) {
        stop_pid(p.worker[i], i == r->killed ? SIGKILL : SIGTERM, 15000, &r->w[i].exit_status);
        p.worker[i] = 0;
        r->w[i].killed = i == r->killed;
    }
    dm_upstream_stop(&p.up);
    stop_all(&p); /* redis-server and its directory */

    /* The join. */
    struct exec *ex = NULL;
    size_t nex = 0, capex = 0;
    uint64_t dead_survivors = 0;
    for (unsigned i = 0; i < o->n; i++) {
        snprintf(path, sizeof path, "%s/ledger.%s", dir, r->w[i].name);
        if (read_ledger(path, i, t0_unix, sc->speed, r, &ids, &ex, &nex, &capex) != 0) {
            free(ex);
            free(ids.v);
            return fail(r, "%s: %s", path, strerror(errno));
        }
        snprintf(path, sizeof path, "%s/%s.out", dir, r->w[i].name);
        read_summary(path, &r->w[i]);
        if (r->w[i].summary) dead_survivors += r->w[i].dead;
    }
    struct dm_cluster_worker *kw = &r->w[r->killed];
    kw->dead = r->dead_stream >= dead_survivors ? r->dead_stream - dead_survivors : 0;
    kw->dead_derived = true;
    qsort(ex, nex, sizeof *ex, exec_cmp);
    for (size_t i = 1; i < nex; i++)
        if (strcmp(ex[i].entry, ex[i - 1].entry) == 0) r->w[ex[i].worker].duplicates++;
    free(ex);
    for (size_t i = 0; i < ids.cap; i++) {
        const struct idrec *rec = &ids.v[i];
        if (!rec->id[0]) continue;
        if (!rec->admitted) {
            r->unknown_ids++;
            continue;
        }
        /* A dead letter is a terminal record whatever the ledgers say: an
         * "ok" line of the same id is an execution Redis never recorded as
         * a success (its worker died before acknowledging, or the answer
         * raced the attempt's deadline and lost). Without one, an "ok" line
         * is the success. */
        unsigned terminal = rec->dead ? rec->dead : rec->ok ? 1 : 0;
        if (rec->dead) r->terminal_dead++;
        else if (rec->ok) r->terminal_ok++;
        if (terminal == 0) r->lost++;
        if (terminal > 1) r->multi++;
    }
    free(ids.v);
    for (unsigned i = 0; i < o->n; i++) {
        r->executed += r->w[i].executed;
        r->redeliveries += r->w[i].redeliveries;
        r->duplicates += r->w[i].duplicates;
    }
    r->ok = true;
    return 0;
}
