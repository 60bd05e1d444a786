/* Review finding: ax_http_get/post with a huge timeout_ms ("at most
 * timeout_ms"; INT64_MAX is the natural "no bound of my own") must fall back
 * to the task's deadline. request() computes now + timeout_ms * 1000000 in
 * uint64_t, which wraps to now - 1 ms for INT64_MAX, so the call fails at
 * once with "the deadline has passed" without sending anything. */
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
        const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        ssize_t w = write(fd, resp, strlen(resp));
        (void)w;
        close(fd);
    }
}

static atomic_int rc_seen = -1;
static _Atomic long status_seen = -1;
static char detail[256];

static int get_task(ax_task *t, void *arg)
{
    int64_t timeout_ms = *(int64_t *)arg;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", port);
    ax_http_response r;
    int rc = ax_http_get(t, url, timeout_ms, &r);
    snprintf(detail, sizeof detail, "%s", ax_error_detail());
    status_seen = r.status;
    ax_http_response_free(&r);
    rc_seen = rc; /* last: the main thread reads the others once it is set */
    return 0;
}

static void run_one(ax_sched *s, int64_t timeout_ms)
{
    rc_seen = -1;
    status_seen = -1;
    ax_spec sp = {.fn = get_task, .arg = &timeout_ms, .timeout_ms = 5000};
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(rc_seen != -1, 6000));
    if (rc_seen != 0)
        fprintf(stderr, "timeout_ms=%lld: rc %d (%s)\n", (long long)timeout_ms, rc_seen, detail);
    CHECK_EQ(rc_seen, 0);
    CHECK_EQ(status_seen, 200);
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

    ax_sched *s = test_sched(1, 4);
    run_one(s, 1000);      /* control: an ordinary bound works */
    run_one(s, -1);        /* control: the task's deadline only */
    run_one(s, INT64_MAX); /* "at most INT64_MAX ms": must not fail at once */
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    printf("ok\n");
    return 0;
}
