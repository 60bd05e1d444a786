/* test_metrics_fd_limit.c - /metrics answers at the process's fd limit
 * (review of 2a0c1a9).
 *
 * The host's fd limit leaves the metrics server room for ~16 connections;
 * another process opens 100 idle ones, then scrapes. The server used to
 * pause accepting for 100 ms at a time on EMFILE, and evicted an idle
 * connection only after a successful accept, which EMFILE never gave: the
 * scrape waited in the listen backlog until the idle connections' read
 * timeout (20 s here) closed them. Now on EMFILE it evicts its oldest idle
 * connection and accepts again: the scrape is answered. Liveness bound only
 * (10 s against the 20 s timeout); the time is printed.
 */
#include "util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define IDLE 100

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The other process: IDLE idle connections, then one scrape; writes the
 * scrape's status and time in ms to `out`, and holds the idle ones until
 * it is done. */
static void attacker(uint16_t port, int out)
{
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++)
        idle[i] = dial(port);
    usleep(200 * 1000); /* the server takes what its fds allow */
    uint64_t t0 = test_now_ms();
    int status = -1;
    int fd = dial(port);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    if (fd >= 0 && send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
        struct timeval tv = {30, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char head[64] = "";
        ssize_t r = recv(fd, head, sizeof head - 1, 0);
        if (r > 0) sscanf(head, "HTTP/1.1 %d", &status);
    }
    char line[64];
    int n =
        snprintf(line, sizeof line, "%d %llu\n", status, (unsigned long long)(test_now_ms() - t0));
    ssize_t w = write(out, line, (size_t)n);
    (void)w;
    for (int i = 0; i < IDLE; i++)
        if (idle[i] >= 0) close(idle[i]);
    _exit(0);
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.metrics_read_timeout_ms = 20000;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), 0);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    /* Room for ~16 more fds in this process from here on; the attacker
     * (forked after) takes its own limit back. */
    int probe = dup(0);
    CHECK(probe >= 0);
    close(probe);
    struct rlimit rl, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    low = rl;
    low.rlim_cur = (rlim_t)probe + 16;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(3);
        attacker(port, p[1]);
    }
    close(p[1]);
    char line[64] = "";
    ssize_t n = read(p[0], line, sizeof line - 1); /* blocks until the attacker reports */
    CHECK(n > 0);
    int status = 0;
    unsigned long long ms = 0;
    CHECK_EQ(sscanf(line, "%d %llu", &status, &ms), 2);
    printf("scrape behind %d idle connections at the fd limit: status %d in %llu ms\n", IDLE,
           status, ms);
    int ws;
    CHECK_EQ(waitpid(pid, &ws, 0), pid);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    CHECK_EQ(status, 200);
    CHECK_LE(ms, 10000ull);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    puts("test_metrics_fd_limit: ok");
    return 0;
}
