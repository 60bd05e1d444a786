/* libax_redis connections: errors and timeouts against a closed port and a
 * stalled listener, from a task and from a plain thread; the reconnect
 * back-off; a real server from a task, restarted under the connection. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>

/* A loopback port that refuses (bound, not listening) or stalls (listening,
 * never accepting: the kernel completes the handshake, nobody answers). */
static int port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    return ntohs(a.sin_port);
}

static int bound_socket(bool listening)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    if (listening)
        CHECK_EQ(listen(fd, 16), 0);
    return fd;
}

static ax_redis *conn(int port, uint32_t min_ms)
{
    ax_redis_config c;
    ax_redis_config_default(&c);
    c.port = (uint16_t)port;
    c.reconnect_min_ms = min_ms;
    c.reconnect_max_ms = min_ms * 4;
    ax_redis *r;
    CHECK_EQ(ax_redis_new(&c, &r), 0);
    return r;
}

/* ---- a Redis Cluster node that owns nothing: MOVED to the real server -------------- */

static int moved_fd, moved_to;
static atomic_int moved_stop, moved_sent;

static void *moved_node(void *arg)
{
    (void)arg;
    while (!atomic_load(&moved_stop)) {
        struct pollfd p = {.fd = moved_fd, .events = POLLIN};
        if (poll(&p, 1, 50) != 1)
            continue;
        int c = accept(moved_fd, NULL, NULL);
        if (c < 0)
            continue;
        char buf[4096], ans[64];
        int n = snprintf(ans, sizeof ans, "-MOVED 1234 127.0.0.1:%d\r\n", moved_to);
        while (read(c, buf, sizeof buf) > 0) { /* one command per read here */
            /* Counted before it is sent: the client may follow it and the
             * test look at the count before this thread runs again. */
            atomic_fetch_add(&moved_sent, 1);
            if (write(c, ans, (size_t)n) != n)
                break;
        }
        close(c);
    }
    return NULL;
}

struct closer_arg {
    int lfd;
};

/* Accept one connection and close it with a reset (unread data pending). */
static void *accept_close(void *arg)
{
    struct closer_arg *ca = arg;
    int a = accept(ca->lfd, NULL, NULL);
    if (a >= 0) {
        char b[1024];
        (void)!read(a, b, sizeof b); /* some of the command: closing now resets */
        close(a);
    }
    return NULL;
}

/* ---- in a task ---------------------------------------------------------------- */

struct job {
    ax_redis *r;
    int64_t timeout_ms;
    const char *cmd;
    int rc;
    char detail[256];
    char answer[64];
    uint64_t elapsed_ms;
    atomic_int done;
};

static int run_cmd(ax_task *t, void *arg)
{
    struct job *j = arg;
    uint64_t t0 = test_now_ms();
    redisReply *rep = NULL;
    j->rc = ax_redis_command(t, j->r, j->timeout_ms, &rep, j->cmd);
    j->elapsed_ms = test_now_ms() - t0;
    snprintf(j->detail, sizeof j->detail, "%s", ax_error_detail());
    if (rep) {
        snprintf(j->answer, sizeof j->answer, "%s", rep->str ? rep->str : "");
        freeReplyObject(rep);
    }
    atomic_store(&j->done, 1);
    return 0;
}

static void in_task(ax_sched *s, struct job *j, uint64_t task_timeout_ms)
{
    atomic_store(&j->done, 0);
    j->answer[0] = 0;
    ax_spec sp = {.fn = run_cmd, .arg = j, .timeout_ms = task_timeout_ms};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&j->done), 30000));
}

int main(void)
{
    rs_find(); /* skip early when there is no redis-server */
    signal(SIGPIPE, SIG_DFL); /* a closed peer must not kill us: AX_ENET */

    /* A peer that closes (with a reset) while a 4 MiB command is being
     * written: whether the kernel says ECONNRESET or EPIPE, the call fails
     * with AX_ENET and the process lives, SIGPIPE at its default action. */
    {
        int lfd = bound_socket(true);
        ax_redis *big = conn(port_of(lfd), 50);
        static char payload[4 << 20];
        memset(payload, 'x', sizeof payload);
        const char *argv[] = {"SET", "k", payload};
        size_t lens[] = {3, 1, sizeof payload};
        redisReply *rep = NULL;
        pthread_t closer;
        struct closer_arg ca = {lfd};
        CHECK_EQ(pthread_create(&closer, NULL, accept_close, &ca), 0);
        int rc = ax_redis_command_argv(NULL, big, 5000, &rep, 3, argv, lens);
        CHECK_EQ(rc, AX_ENET);
        CHECK(strstr(ax_error_detail(), "write") != NULL || strstr(ax_error_detail(), "read") != NULL);
        pthread_join(closer, NULL);
        ax_redis_free(big);
        close(lfd);
    }

    /* Refused, from the calling thread: AX_ENET naming the cause. */
    int refuse = bound_socket(false);
    ax_redis *r = conn(port_of(refuse), 300);
    redisReply *rep = NULL;
    CHECK_EQ(ax_redis_command(NULL, r, 1000, &rep, "PING"), AX_ENET);
    CHECK(rep == NULL);
    CHECK(strstr(ax_error_detail(), "Connection refused") != NULL);
    /* The first call after a failure connects again at once ... */
    CHECK_EQ(ax_redis_command(NULL, r, 1000, &rep, "PING"), AX_ENET);
    CHECK(strstr(ax_error_detail(), "Connection refused") != NULL);
    /* ... the next waits out a back-off of 300..600 ms: a call bounded by
     * 50 ms fails at once, saying when the next attempt is. */
    uint64_t t0 = test_now_ms();
    CHECK_EQ(ax_redis_command(NULL, r, 50, &rep, "PING"), AX_ENET);
    CHECK(strstr(ax_error_detail(), "next attempt in") != NULL);
    CHECK(strstr(ax_error_detail(), "refused") != NULL);
    CHECK_LE(test_now_ms() - t0, 250); /* no wait (the back-off is >= 300 ms) */
    /* A call whose bound covers the back-off sleeps it out, then tries. */
    t0 = test_now_ms();
    CHECK_EQ(ax_redis_command(NULL, r, 3000, &rep, "PING"), AX_ENET);
    CHECK(strstr(ax_error_detail(), "Connection refused") != NULL);
    CHECK_LE(250, test_now_ms() - t0);
    ax_redis_free(r);

    ax_sched *s = test_sched(2, 16);
    /* Refused, from a task. */
    struct job j = {.r = conn(port_of(refuse), 50), .timeout_ms = 1000, .cmd = "PING"};
    in_task(s, &j, 5000);
    CHECK_EQ(j.rc, AX_ENET);
    CHECK(strstr(j.detail, "Connection refused") != NULL);
    ax_redis_free(j.r);
    close(refuse);

    /* Stalled: the per-call timeout ends it with AX_ETIMEDOUT, from a task ... */
    int stall = bound_socket(true);
    j = (struct job){.r = conn(port_of(stall), 50), .timeout_ms = 200, .cmd = "PING"};
    in_task(s, &j, 10000);
    CHECK_EQ(j.rc, AX_ETIMEDOUT);
    CHECK(strstr(j.detail, "no answer within 200 ms") != NULL);
    CHECK_LE(190, j.elapsed_ms);
    CHECK_LE(j.elapsed_ms, 5000);
    CHECK(!ax_redis_connected(j.r)); /* its reply would be out of step: closed */
    /* ... and the task's deadline bounds a call with no timeout of its own
     * (command_timeout_ms 5000 is longer than the task's 300 ms). */
    j.timeout_ms = -1;
    in_task(s, &j, 300);
    CHECK_EQ(j.rc, AX_ETIMEDOUT);
    CHECK(strstr(j.detail, "deadline") != NULL);
    CHECK_LE(j.elapsed_ms, 5000);
    ax_redis_free(j.r);
    /* ... and from the calling thread. */
    r = conn(port_of(stall), 50);
    t0 = test_now_ms();
    CHECK_EQ(ax_redis_command(NULL, r, 150, &rep, "PING"), AX_ETIMEDOUT);
    CHECK(strstr(ax_error_detail(), "no answer within 150 ms") != NULL);
    CHECK_LE(140, test_now_ms() - t0);
    ax_redis_free(r);
    close(stall);

    /* A real server, from a task: commands, binary-safe arguments. */
    int port = rs_start();
    j = (struct job){.r = conn(port, 50), .timeout_ms = 2000, .cmd = "PING"};
    in_task(s, &j, 5000);
    CHECK_EQ(j.rc, 0);
    CHECK_STR(j.answer, "PONG");
    CHECK(ax_redis_connected(j.r));
    r = conn(port, 50);
    const char bin[] = {'a', 0, 'b'};
    CHECK_EQ(ax_redis_command(NULL, r, 1000, &rep, "SET k %b", bin, sizeof bin), 0);
    freeReplyObject(rep);
    CHECK_EQ(ax_redis_command(NULL, r, 1000, &rep, "GET k"), 0);
    CHECK_EQ(rep->type, REDIS_REPLY_STRING);
    CHECK_EQ(rep->len, 3);
    CHECK(memcmp(rep->str, bin, 3) == 0);
    freeReplyObject(rep);
    /* An error reply is a reply, not a failure. */
    CHECK_EQ(ax_redis_command(NULL, r, 1000, &rep, "INCR k"), 0);
    CHECK_EQ(rep->type, REDIS_REPLY_ERROR);
    freeReplyObject(rep);
    ax_redis_free(r);

    /* Redis Cluster: a node that does not own the slot answers MOVED; the
     * connection follows it to the owner and stays there. */
    moved_fd = bound_socket(true);
    moved_to = port;
    pthread_t mt;
    CHECK_EQ(pthread_create(&mt, NULL, moved_node, NULL), 0);
    r = conn(port_of(moved_fd), 50);
    const char *ping[] = {"PING"};
    /* (review) A NULL element crashed in hiredis's strlen: refused. */
    const char *holed[] = {"ECHO", NULL};
    const size_t holed_lens[] = {4, 0};
    rep = (redisReply *)&rep;
    CHECK_EQ(ax_redis_command_argv(NULL, r, 2000, &rep, 2, holed, NULL), AX_EINVAL);
    CHECK(rep == NULL);
    CHECK(strstr(ax_error_detail(), "argv[1] is NULL") != NULL);
    CHECK_EQ(ax_redis_command_argv(NULL, r, 2000, &rep, 2, holed, holed_lens), AX_EINVAL);
    CHECK_EQ(ax_redis_command_argv(NULL, r, 2000, &rep, 1, ping, NULL), 0);
    CHECK_EQ(rep->type, REDIS_REPLY_STATUS);
    CHECK_STR(rep->str, "PONG");
    freeReplyObject(rep);
    CHECK_EQ(atomic_load(&moved_sent), 1);
    CHECK_EQ(ax_redis_command_argv(NULL, r, 2000, &rep, 1, ping, NULL), 0); /* no hop now */
    freeReplyObject(rep);
    CHECK_EQ(atomic_load(&moved_sent), 1);
    ax_redis_free(r);
    r = conn(port_of(moved_fd), 50); /* the formatted form follows it too */
    CHECK_EQ(ax_redis_command(NULL, r, 2000, &rep, "ECHO %s", "hop"), 0);
    CHECK_EQ(rep->type, REDIS_REPLY_STRING);
    CHECK_STR(rep->str, "hop");
    freeReplyObject(rep);
    CHECK_EQ(atomic_load(&moved_sent), 2);
    ax_redis_free(r);
    /* ... and so does a submit, its script sent where the slot lives. */
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "moved";
    qc.conn.port = (uint16_t)port_of(moved_fd);
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_redis_spec sp = {.kind = "k", .timeout_ms = 1000};
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 2000, NULL), 0);
    CHECK_EQ(atomic_load(&moved_sent), 3);
    ax_redis_queue_free(q);
    redisContext *rc = rs_connect();
    CHECK_EQ(rs_int(rc, "XLEN ax:{moved}:normal"), 1);
    redisFree(rc);
    atomic_store(&moved_stop, 1);
    pthread_join(mt, NULL);
    close(moved_fd);

    /* The server goes away: AX_ENET; it comes back on the same port: the
     * connection reconnects by itself on a later call. */
    rs_kill_server();
    in_task(s, &j, 5000);
    CHECK_EQ(j.rc, AX_ENET);
    rs_start_on(port, false);
    bool back = false;
    for (int i = 0; i < 100 && !back; i++) {
        in_task(s, &j, 5000);
        back = j.rc == 0;
        if (!back) {
            CHECK_EQ(j.rc, AX_ENET);
            usleep(50000);
        }
    }
    CHECK(back);
    CHECK_STR(j.answer, "PONG");
    ax_redis_free(j.r);
    ax_free(s);
    return 0;
}
