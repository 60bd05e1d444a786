/* Socket I/O inside tasks: accept/connect/read/write park the coroutine,
 * honour their timeout and the task's deadline, and report errors. */
#include "util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static int listen_fd;
static uint16_t port;
static atomic_int echoed, clients_ok, server_done;

static int echo_conn(ax_task *t, void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[256];
    ssize_t n;
    while ((n = ax_read(t, fd, buf, sizeof buf, 20000)) > 0)
        if (ax_write(t, fd, buf, (size_t)n, 20000) != n)
            break;
    close(fd);
    atomic_fetch_add(&echoed, 1);
    return 0;
}

static int server(ax_task *t, void *arg)
{
    int want = (int)(intptr_t)arg;
    for (int i = 0; i < want; i++) {
        int fd = ax_accept(t, listen_fd, NULL, NULL, 20000);
        CHECK(fd >= 0);
        ax_spec sp = {.fn = echo_conn, .arg = (void *)(intptr_t)fd, .timeout_ms = 30000};
        CHECK_EQ(ax_submit(ax_task_sched(t), &sp, NULL), 0);
    }
    /* Nobody else connects: accept times out. */
    CHECK_EQ(ax_accept(t, listen_fd, NULL, NULL, 50), AX_ETIMEDOUT);
    /* The message names the call made, not the wait inside it. */
    CHECK_STR(ax_error_detail(), "ax_accept: its own bound passed (the task's attempt goes on)");
    atomic_store(&server_done, 1);
    return 0;
}

static struct sockaddr_in addr_of(uint16_t p)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int client(ax_task *t, void *arg)
{
    (void)arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = addr_of(port);
    /* Liveness bounds only, generous: under TSan with the suite's other
     * tests beside it, one echo read took over 1 s (CI). */
    CHECK_EQ(ax_connect(t, fd, (struct sockaddr *)&a, sizeof a, 20000), 0);
    char msg[64], back[64] = {0};
    int len = snprintf(msg, sizeof msg, "hello from %llu", (unsigned long long)ax_task_id(t));
    CHECK_EQ(ax_write(t, fd, msg, (size_t)len, 20000), len);
    ssize_t got = 0;
    while (got < len) {
        ssize_t n = ax_read(t, fd, back + got, sizeof back - 1 - (size_t)got, 20000);
        CHECK(n > 0);
        got += n;
    }
    CHECK_STR(back, msg);
    /* The server echoes only what it gets: a further read times out. */
    CHECK_EQ(ax_read(t, fd, back, sizeof back, 50), AX_ETIMEDOUT);
    CHECK_STR(ax_error_detail(), "ax_read: its own bound passed (the task's attempt goes on)");
    close(fd);
    atomic_fetch_add(&clients_ok, 1);
    return 0;
}

static atomic_int refused_ok;
static int refused(ax_task *t, void *arg)
{
    uint16_t p = (uint16_t)(uintptr_t)arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = addr_of(p);
    int rc = ax_connect(t, fd, (struct sockaddr *)&a, sizeof a, 1000);
    CHECK_EQ(rc, AX_ESYS);
    CHECK(strstr(ax_error_detail(), "refused") != NULL);
    close(fd);
    /* Bad fds and arguments. */
    char b[4];
    CHECK_EQ(ax_read(t, -1, b, 4, 10), AX_EINVAL);
    CHECK_EQ(ax_write(t, 12345, b, 4, 10), AX_EINVAL);
    CHECK_EQ(ax_connect(t, fd, NULL, 0, 10), AX_EINVAL);
    /* (trial) a length no address has: AX_EINVAL naming it, not AX_ESYS */
    int fd2 = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(ax_connect(t, fd2, (struct sockaddr *)&a, 0, 10), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "addrlen 0") != NULL);
    CHECK_EQ(ax_connect(t, fd2, (struct sockaddr *)&a, 4096, 10), AX_EINVAL);
    /* (trial) shorter than its family's address: AX_EINVAL too, not the
     * kernel's EINVAL as AX_ESYS */
    CHECK_EQ(ax_connect(t, fd2, (struct sockaddr *)&a, 3, 10), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "addrlen 3 is not the length of an address") != NULL);
    close(fd2);
    atomic_store(&refused_ok, 1);
    return 0;
}

static atomic_int deadline_ok;
static int reads_past_deadline(ax_task *t, void *arg)
{
    (void)arg;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char b[4];
    uint64_t t0 = ax_now_ns();
    CHECK_EQ(ax_read(t, sv[0], b, sizeof b, -1), AX_ETIMEDOUT); /* only the deadline bounds it */
    CHECK_STR(ax_error_detail(), "ax_read: the task's deadline passed while it waited");
    CHECK(ax_now_ns() >= ax_task_deadline_ns(t));
    CHECK(ax_now_ns() - t0 < 2000000000ull);
    close(sv[0]);
    close(sv[1]);
    atomic_store(&deadline_ok, 1);
    return 0;
}

int main(void)
{
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = addr_of(0);
    CHECK_EQ(bind(listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(listen_fd, 128), 0);
    socklen_t al = sizeof a;
    CHECK_EQ(getsockname(listen_fd, (struct sockaddr *)&a, &al), 0);
    port = ntohs(a.sin_port);

    ax_sched *s = test_sched(2, 500);
    const int n = 100;
    ax_spec sp = {.fn = server, .arg = (void *)(intptr_t)n, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    for (int i = 0; i < n; i++) {
        ax_spec c = {.fn = client, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &c, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&clients_ok) == n, 120000));
    CHECK(WAIT_UNTIL(atomic_load(&echoed) == n && atomic_load(&server_done), 60000));

    /* A port nobody listens on: find one by binding and closing. */
    int tmp = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in b = addr_of(0);
    CHECK_EQ(bind(tmp, (struct sockaddr *)&b, sizeof b), 0);
    al = sizeof b;
    getsockname(tmp, (struct sockaddr *)&b, &al);
    close(tmp);
    sp = (ax_spec){.fn = refused, .arg = (void *)(uintptr_t)ntohs(b.sin_port), .timeout_ms = 2000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp = (ax_spec){.fn = reads_past_deadline, .timeout_ms = 100};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&refused_ok) && atomic_load(&deadline_ok), 5000));
    /* Outside a task: refused. */
    char c;
    CHECK_EQ(ax_read(NULL, 0, &c, 1, 0), AX_EINVAL);
    ax_free(s);
    close(listen_fd);
    return 0;
}
