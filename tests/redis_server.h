/* redis_server.h - a private redis-server for one test (libax_redis tests).
 *
 * rs_start() runs redis-server on a free loopback port in a fresh temporary
 * directory (no RDB snapshots, no AOF unless asked), waits until it answers
 * PING, and makes sure it dies with the test: killed at exit, on a failed
 * CHECK (SIGABRT) or a crash, and -- if the test is killed outright -- by
 * the kernel (PR_SET_PDEATHSIG). A test exits 77 (CTest: skipped) only when
 * redis-server is not installed. Forked children of the test never kill
 * it: only the process that started it does.
 *
 * rs_cluster_start() runs a Redis Cluster instead: n masters
 * (--cluster-enabled yes) on free loopback ports in the same directory,
 * joined by `redis-cli --cluster create ... --cluster-replicas 0`, and
 * returns once every node reports cluster_state:ok. The nodes die with the
 * test as the single server does; 77 when redis-cli is not installed.
 */
#ifndef AX_TEST_REDIS_SERVER_H
#define AX_TEST_REDIS_SERVER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t rs_pid = 0, rs_owner = 0;
enum { RS_CLUSTER_MAX = 8 };
static pid_t rs_node_pid[RS_CLUSTER_MAX]; /* cluster nodes (rs_cluster_start) */
static int rs_node_port[RS_CLUSTER_MAX];
static int rs_nodes;
static char rs_dir[128];
static char rs_bin[256];
static int rs_port;

static inline void rs_kill_server(void)
{
    if (rs_pid > 0 && getpid() == rs_owner) {
        kill(rs_pid, SIGKILL);
        waitpid(rs_pid, NULL, 0);
        rs_pid = 0;
    }
    for (int i = 0; i < rs_nodes && getpid() == rs_owner; i++)
        if (rs_node_pid[i] > 0) {
            kill(rs_node_pid[i], SIGKILL);
            waitpid(rs_node_pid[i], NULL, 0);
            rs_node_pid[i] = 0;
        }
}

static inline void rs_cleanup(void)
{
    if (getpid() != rs_owner)
        return;
    rs_kill_server();
    if (rs_dir[0]) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", rs_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "redis_server.h: could not remove %s\n", rs_dir);
        rs_dir[0] = 0;
    }
}

static inline void rs_on_fatal(int sig)
{
    if (rs_pid > 0 && getpid() == rs_owner)
        kill(rs_pid, SIGKILL); /* async-signal-safe; the directory stays in /tmp */
    for (int i = 0; i < rs_nodes && getpid() == rs_owner; i++)
        if (rs_node_pid[i] > 0)
            kill(rs_node_pid[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Path of program `name` (redis-server, redis-cli) into buf, or exit 77
 * when it is not installed. */
static inline const char *rs_find_prog(const char *name, char *bin, size_t cap)
{
    static const char *dirs[] = {"/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"};
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path ? path : "");
    for (char *save, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(bin, cap, "%s/%s", d, name);
        if (access(bin, X_OK) == 0)
            return bin;
    }
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(bin, cap, "%s/%s", dirs[i], name);
        if (access(bin, X_OK) == 0)
            return bin;
    }
    fprintf(stderr, "%s is not installed (Debian: %s): skipped\n", name,
            strcmp(name, "redis-cli") == 0 ? "redis-tools" : "redis-server");
    exit(77);
}

/* Path of redis-server, or exit 77 when it is not installed. */
static inline const char *rs_find(void)
{
    static const char *dirs[] = {"/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"};
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path ? path : "");
    for (char *save, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(rs_bin, sizeof rs_bin, "%s/redis-server", d);
        if (access(rs_bin, X_OK) == 0)
            return rs_bin;
    }
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(rs_bin, sizeof rs_bin, "%s/redis-server", dirs[i]);
        if (access(rs_bin, X_OK) == 0)
            return rs_bin;
    }
    fprintf(stderr, "redis-server is not installed (Debian: redis-server): skipped\n");
    exit(77);
}

static inline int rs_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        perror("rs_free_port");
        abort();
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* Whether a loopback TCP port can be bound now (then let go). */
static inline bool rs_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A port for a cluster node: redis-server also listens on port + 10000 (the
 * cluster bus) and refuses a port above 55535. The kernel's free ports
 * (rs_free_port) come from 32768-60999 and one after another, so several
 * in a row were above 55535 (CI: "Redis port number too high", the node
 * exited five times). A random port of 20000-55535 whose bus port is free
 * too. */
static inline int rs_free_cluster_port(void)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 1000; tries++) {
        int p = 20000 + (int)(rand_r(&seed) % (55535 - 20000 + 1));
        if (rs_port_free(p) && rs_port_free(p + 10000))
            return p;
    }
    fprintf(stderr, "rs_free_cluster_port: no free pair of ports\n");
    abort();
}

/* Whether the server answering on `port` is up (PONG) and is the process
 * `pid`: a server that lost the port to another process between
 * rs_free_port and its bind exits, but a PING meanwhile may reach whoever
 * took the port (another test's redis-server), whose end would then end
 * ours mid-test. */
static inline bool rs_up_and_ours(int port, pid_t pid)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ours = false;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        bool up = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r)
            freeReplyObject(r);
        r = up ? redisCommand(c, "INFO server") : NULL;
        if (r && r->type == REDIS_REPLY_STRING) {
            const char *f = strstr(r->str, "process_id:");
            ours = f && atol(f + 11) == (long)pid;
        }
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ours;
}

/* The temporary directory and the fatal-signal handlers (once). */
static inline void rs_setup(void)
{
    if (rs_owner)
        return;
    rs_owner = getpid();
    snprintf(rs_dir, sizeof rs_dir, "/tmp/ax-redis-test-XXXXXX");
    if (!mkdtemp(rs_dir)) {
        perror("mkdtemp");
        abort();
    }
    atexit(rs_cleanup);
    signal(SIGABRT, rs_on_fatal);
    signal(SIGSEGV, rs_on_fatal);
    signal(SIGTERM, rs_on_fatal);
    signal(SIGINT, rs_on_fatal);
}

/* Start (or restart, on port > 0: the same port) the server; returns its port. */
static inline int rs_start_on(int port, bool appendonly)
{
    const char *bin = rs_find();
    rs_setup();
    for (int attempt = 0; attempt < 5; attempt++) {
        int p = port > 0 ? port : rs_free_port();
        char ps[16], logf[200];
        snprintf(ps, sizeof ps, "%d", p);
        snprintf(logf, sizeof logf, "%s/redis.log", rs_dir);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            abort();
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            execl(bin, bin, "--port", ps, "--bind", "127.0.0.1", "--dir", rs_dir, "--save", "",
                  "--appendonly", appendonly ? "yes" : "no", "--appendfsync", "always",
                  "--daemonize", "no", "--logfile", logf, "--protected-mode", "no", (char *)NULL);
            _exit(127);
        }
        rs_pid = pid;
        for (int i = 0; i < 1000; i++) { /* 10 s */
            if (rs_up_and_ours(p, pid)) {
                rs_port = p;
                return p;
            }
            if (waitpid(pid, NULL, WNOHANG) == pid) {
                rs_pid = 0;
                break;
            }
            usleep(10000);
        }
        rs_kill_server();
        if (port > 0)
            usleep(200000); /* the old one may still hold the port */
    }
    fprintf(stderr, "redis-server did not start (see %s/redis.log)\n", rs_dir);
    abort();
}

static inline int rs_start(void)
{
    return rs_start_on(0, false);
}

/* A blocking hiredis connection for the test's own checks. */
static inline redisContext *rs_connect(void)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", rs_port, tv);
    if (!c || c->err) {
        fprintf(stderr, "rs_connect: %s\n", c ? c->errstr : "no memory");
        abort();
    }
    redisSetTimeout(c, tv);
    return c;
}

/* Field `name` of a stream entry's flat field/value reply, NULL if absent. */
static inline const char *rs_field(const redisReply *f, const char *name)
{
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (strcmp(f->element[i]->str, name) == 0)
            return f->element[i + 1]->str;
    return NULL;
}

/* An integer answer (INTEGER, or a number in a STRING, nil = 0). */
static inline long long rs_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        fprintf(stderr, "rs_int: %s\n", c->errstr);
        abort();
    }
    long long v = 0;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    else if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "rs_int: %s\n", r->str);
        abort();
    }
    freeReplyObject(r);
    return v;
}


/* ---- a Redis Cluster (rs_cluster_start) ----------------------------------- */

/* A line of INFO cluster / CLUSTER INFO of the node on port, e.g.
 * "cluster_state:ok", into out; false if it does not answer. */
static inline bool rs_cluster_info(int port, const char *field, char *out, size_t cap)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = false;
    out[0] = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "CLUSTER INFO");
        const char *f = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
        if (f) {
            size_t n = strcspn(f, "\r\n");
            snprintf(out, cap, "%.*s", (int)n, f);
            ok = true;
        }
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

/* Start n cluster nodes (masters) and join them; ports[i] gets each one's
 * port. Returns once every node says cluster_state:ok (at most 60 s: a
 * busy machine). */
static inline void rs_cluster_start(int n, int *ports)
{
    const char *bin = rs_find();
    static char cli[256];
    rs_find_prog("redis-cli", cli, sizeof cli);
    if (n < 3 || n > RS_CLUSTER_MAX) {
        fprintf(stderr, "rs_cluster_start: 3..%d nodes\n", RS_CLUSTER_MAX);
        abort();
    }
    rs_setup();
    for (int i = 0; i < n; i++) {
        bool up = false;
        for (int attempt = 0; attempt < 5 && !up; attempt++) {
            int p = rs_free_cluster_port();
            char ps[16], logf[200], conf[200];
            snprintf(ps, sizeof ps, "%d", p);
            snprintf(logf, sizeof logf, "%s/redis-%d.log", rs_dir, p);
            snprintf(conf, sizeof conf, "nodes-%d.conf", p); /* in --dir */
            pid_t parent = getpid();
            pid_t pid = fork();
            if (pid < 0) {
                perror("fork");
                abort();
            }
            if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                    _exit(1);
                execl(bin, bin, "--port", ps, "--bind", "127.0.0.1", "--dir", rs_dir, "--save", "",
                      "--appendonly", "no", "--daemonize", "no", "--logfile", logf,
                      "--protected-mode", "no", "--cluster-enabled", "yes", "--cluster-config-file",
                      conf, "--cluster-node-timeout", "30000", (char *)NULL);
                _exit(127);
            }
            rs_node_pid[i] = pid;
            rs_nodes = i + 1;
            for (int k = 0; k < 1000 && !up; k++) { /* 10 s */
                if (rs_up_and_ours(p, pid)) {
                    rs_node_port[i] = ports[i] = p;
                    up = true;
                } else if (waitpid(pid, NULL, WNOHANG) == pid) {
                    rs_node_pid[i] = 0;
                    break;
                } else {
                    usleep(10000);
                }
            }
            if (!up && rs_node_pid[i] > 0) {
                kill(rs_node_pid[i], SIGKILL);
                waitpid(rs_node_pid[i], NULL, 0);
                rs_node_pid[i] = 0;
            }
        }
        if (!up) {
            fprintf(stderr, "a cluster node did not start (see %s)\n", rs_dir);
            abort();
        }
    }
    /* redis-cli --cluster create 127.0.0.1:P1 ... --cluster-replicas 0 --cluster-yes */
    char cmd[1024];
    int len = snprintf(cmd, sizeof cmd, "'%s' --cluster create", cli);
    for (int i = 0; i < n; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " 127.0.0.1:%d", ports[i]);
    snprintf(cmd + len, sizeof cmd - (size_t)len,
             " --cluster-replicas 0 --cluster-yes >'%s/cluster-create.log' 2>&1", rs_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "redis-cli --cluster create failed (see %s/cluster-create.log)\n", rs_dir);
        abort();
    }
    for (int k = 0; k < 6000; k++) { /* 60 s */
        int ok = 0;
        char st[64];
        for (int i = 0; i < n; i++)
            ok += rs_cluster_info(ports[i], "cluster_state:", st, sizeof st) &&
                  strcmp(st, "cluster_state:ok") == 0;
        if (ok == n)
            return;
        usleep(10000);
    }
    fprintf(stderr, "the cluster did not reach cluster_state:ok in 60 s (see %s)\n", rs_dir);
    abort();
}

/* The port of the node that serves hash slot `slot` (CLUSTER SLOTS, asked
 * of the node on `port`), or -1. */
static inline int rs_cluster_owner(int port, long long slot)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int owner = -1;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "CLUSTER SLOTS");
        for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
            const redisReply *e = r->element[i];
            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
                e->element[0]->integer <= slot && slot <= e->element[1]->integer &&
                e->element[2]->type == REDIS_REPLY_ARRAY && e->element[2]->elements >= 2)
                owner = (int)e->element[2]->element[1]->integer;
        }
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return owner;
}

#endif
