/* Review of b673951 (ax_wait_fd's per-worker table): a task waits to read
 * fd N; N is closed (allowed: "it waits out its bound") and the number is
 * reused by an ax_http transfer on the same worker, whose socket curl
 * registers in the same epoll (reactor_src_add). When the first task's
 * bound ends, reactor_fd_unwait -> fd_rearm deletes "its" registration by
 * number (EPOLL_CTL_DEL on N): that removes ax_http's entry for the new
 * socket, and the transfer never sees its response (it waits until its own
 * timeout). The same happens with a shared entry, where fd_rearm's
 * EPOLL_CTL_MOD overwrites ax_http's entry with the table's data. */
#include "util.h"

#include "ax_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int lfd;
static uint16_t port;

static void *upstream(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        char buf[4096];
        size_t n = 0;
        while (n < sizeof buf - 1) {
            ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
            if (r <= 0)
                break;
            n += (size_t)r;
            buf[n] = 0;
            if (strstr(buf, "\r\n\r\n"))
                break;
        }
        usleep(1000 * 1000); /* answers after the waiter's 300 ms bound */
        const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        ssize_t w = write(fd, resp, strlen(resp));
        (void)w;
        close(fd);
    }
}

static atomic_int the_fd = -1;
static atomic_int wait_rc = 1;
static atomic_int http_rc = 1;
static _Atomic long http_status = -1;
static _Atomic uint64_t http_ms;
static atomic_int curl_fd = -1;
static char detail[256];

static int waiter(ax_task *t, void *arg)
{
    (void)arg;
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0)
        return 1;
    the_fd = sp[0];
    wait_rc = ax_wait_fd(t, sp[0], AX_READ, 300); /* sp[0] is closed meanwhile */
    close(sp[1]);
    return 0;
}

/* curl's socket takes the closed fd's number. */
static curl_socket_t open_on_n(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)clientp;
    (void)purpose;
    int s = socket(a->family, a->socktype, a->protocol);
    if (s < 0)
        return CURL_SOCKET_BAD;
    int n = the_fd;
    if (dup2(s, n) < 0) {
        close(s);
        return CURL_SOCKET_BAD;
    }
    close(s);
    curl_fd = n;
    return n;
}

static size_t sink(char *p, size_t sz, size_t n, void *u)
{
    (void)p;
    (void)u;
    return sz * n;
}

static int fetcher(ax_task *t, void *arg)
{
    (void)arg;
    close(the_fd); /* the waiter's fd: closed while it waits */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", port);
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_on_n);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    uint64_t t0 = test_now_ms();
    int rc = ax_http_perform(t, e, NULL);
    http_ms = test_now_ms() - t0;
    long st = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
    snprintf(detail, sizeof detail, "%s", rc ? ax_error_detail() : "");
    curl_easy_cleanup(e);
    http_status = st;
    http_rc = rc;
    return 0;
}

int main(void)
{
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(lfd, 16), 0);
    socklen_t al = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &al);
    port = ntohs(a.sin_port);
    pthread_t th;
    pthread_create(&th, NULL, upstream, NULL);
    pthread_detach(th);

    ax_sched *s = test_sched(1, 4); /* one worker: one epoll, one table */
    ax_spec w = {.fn = waiter, .timeout_ms = 20000};
    CHECK_EQ(ax_submit(s, &w, NULL), 0);
    CHECK(WAIT_UNTIL(the_fd >= 0, 10000));
    ax_spec f = {.fn = fetcher, .timeout_ms = 8000}; /* runs once the waiter parked */
    CHECK_EQ(ax_submit(s, &f, NULL), 0);
    CHECK(WAIT_UNTIL(http_rc != 1, 20000));
    CHECK(WAIT_UNTIL(wait_rc != 1, 20000));
    fprintf(stderr, "wait_fd rc %d; curl socket fd %d (waited fd %d); http rc %d status %ld "
                    "after %llu ms %s\n",
            wait_rc, curl_fd, the_fd, http_rc, http_status, (unsigned long long)http_ms, detail);
    CHECK_EQ(curl_fd, the_fd);
    CHECK_EQ(wait_rc, AX_ETIMEDOUT);
    /* The response came after ~1 s: the transfer must see it. */
    CHECK_EQ(http_rc, 0);
    CHECK_EQ(http_status, 200);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    printf("ok\n");
    return 0;
}
