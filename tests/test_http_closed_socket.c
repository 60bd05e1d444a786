/* test_http_closed_socket.c - a socket curl closes before it says
 * CURL_POLL_REMOVE leaves nothing behind in the worker's reactor.
 *
 * Found by TSan in CI (stop 29, ax-demo under -fsanitize=thread): libcurl
 * 7.88 closes a transfer's socket when the transfer's own timeout
 * (CURLOPT_TIMEOUT_MS) ends it inside curl_multi_socket_action, and only
 * later in the same call reports CURL_POLL_REMOVE for it. http.c then
 * deleted the number from the worker's epoll: the file was gone (its
 * entry went with it), so the delete failed and the worker's count of
 * registrations (nfd_waits) stayed up for good -- the worker then polls
 * epoll on every turn of its loop, a system call per turn while busy --
 * and by then the number could be another thread's new socket (TSan's
 * report) or one of this worker's own registrations. http.c now takes
 * curl's sockets out of epoll in CURLOPT_CLOSESOCKETFUNCTION, before the
 * close, and a later REMOVE touches no number.
 *
 * One worker; an upstream that accepts and reads but never answers; 20
 * tasks each ax_http_get with timeout_ms 50 (the task's own timeout 10 s,
 * so it is curl's timer that ends each transfer). Every call must return
 * AX_ETIMEDOUT, and then a task on that worker must find its count of fd
 * registrations back at 0 (read on the worker's own thread).
 */
#include "util.h"

#include "ax_http.h"
#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define N 40

static int lfd;
static uint16_t port;
static int held[256];
static _Atomic int nheld;

/* Per connection: read a request, answer by its path. /hang: never (the
 * connection is kept open); /rst: reset; /close: a response with
 * "Connection: close", then close; /eof: a keep-alive response, then
 * close anyway (curl finds the cached connection dead later); else a
 * keep-alive response and the next request. */
static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    for (;;) {
        char buf[4096];
        size_t n = 0;
        while (n < sizeof buf - 1) {
            ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
            if (r <= 0) {
                close(fd);
                return NULL;
            }
            n += (size_t)r;
            buf[n] = 0;
            if (strstr(buf, "\r\n\r\n"))
                break;
        }
        if (strstr(buf, "GET /hang")) {
            int i = atomic_fetch_add(&nheld, 1);
            if (i < (int)(sizeof held / sizeof held[0]))
                held[i] = fd;
            return NULL;
        }
        if (strstr(buf, "GET /rst")) {
            struct linger l = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
            close(fd);
            return NULL;
        }
        bool close_hdr = strstr(buf, "GET /close") != NULL;
        char resp[128];
        int rl = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n%s\r\nok",
                          close_hdr ? "Connection: close\r\n" : "");
        if (write(fd, resp, (size_t)rl) != rl || close_hdr || strstr(buf, "GET /eof")) {
            close(fd);
            return NULL;
        }
    }
}

static void *upstream(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_t th;
        if (pthread_create(&th, NULL, conn_main, (void *)(intptr_t)fd) == 0)
            pthread_detach(th);
        else
            close(fd);
    }
}

static _Atomic int timed_out, failed, ok;

static const char *const paths[] = {"hang", "rst", "close", "eof", "keep"};
#define NPATHS 5

static int get_task(ax_task *t, void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/%s", port, paths[k % NPATHS]);
    ax_http_response r;
    int rc = ax_http_get(t, url, 200, &r);
    ax_http_response_free(&r);
    if (rc == AX_ETIMEDOUT)
        atomic_fetch_add(&timed_out, 1);
    else if (rc)
        atomic_fetch_add(&failed, 1);
    else
        atomic_fetch_add(&ok, 1);
    return 0;
}

static _Atomic int probed = -1;

static int probe_task(ax_task *t, void *arg)
{
    (void)arg;
    (void)t;
    /* On the worker's own thread: nfd_waits is its alone. */
    atomic_store(&probed, (int)ax_current_worker->nfd_waits);
    return 0;
}

int main(void)
{
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(lfd, 128), 0);
    socklen_t al = sizeof a;
    CHECK_EQ(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
    port = ntohs(a.sin_port);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, upstream, NULL), 0);

    ax_sched *s = test_sched(1, 64);
    for (unsigned round = 0; round < 3; round++) {
        int before = atomic_load(&timed_out) + atomic_load(&failed) + atomic_load(&ok);
        for (unsigned i = 0; i < N; i++) {
            ax_spec sp = {.fn = get_task, .arg = (void *)(uintptr_t)(i + round), .timeout_ms = 10000};
            CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        }
        CHECK(WAIT_UNTIL(atomic_load(&timed_out) + atomic_load(&failed) + atomic_load(&ok) ==
                             before + N,
                         60000 * TEST_SLOW));
    }
    /* Each kind came out as it must: /hang by curl's timeout, /rst failed,
     * the others answered (an /eof connection found dead is retried by
     * curl on a new one). */
    CHECK_EQ(atomic_load(&timed_out), 3 * N / NPATHS);
    CHECK_EQ(atomic_load(&failed), 3 * N / NPATHS);
    CHECK_EQ(atomic_load(&ok), 3 * N * 3 / NPATHS);
    ax_spec sp = {.fn = probe_task, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&probed) >= 0, 30000 * TEST_SLOW));
    if (atomic_load(&probed) != 0)
        fprintf(stderr, "the worker still counts %d fd registrations after every transfer "
                        "ended (sockets curl closed before its CURL_POLL_REMOVE)\n",
                atomic_load(&probed));
    CHECK_EQ(atomic_load(&probed), 0);
    ax_free(s);
    shutdown(lfd, SHUT_RDWR);
    close(lfd);
    pthread_join(th, NULL);
    for (int i = 0; i < atomic_load(&nheld) && i < 256; i++)
        close(held[i]);
    printf("ok - %d transfers (hung, reset, closed, keep-alive); the worker's reactor is empty again\n",
           3 * N);
    return 0;
}
