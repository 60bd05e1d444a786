#define _DEFAULT_SOURCE /* usleep */
/* Built against an installed libax_http by scripts/test (CMake, static and
 * shared; pkg-config): one request from a task, to a loopback port where
 * nothing listens, must come back refused through curl and the worker's
 * reactor. */
#include <arpa/inet.h>
#include <ax_http.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char url[64];
static atomic_int result = 1;

static int get(ax_task *t, void *arg)
{
    (void)arg;
    ax_http_response r;
    int rc = ax_http_get(t, url, 2000, &r);
    ax_http_response_free(&r);
    atomic_store(&result, rc);
    return 0;
}

int main(void)
{
    /* A port that is bound but not listening: connecting is refused. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        return 1;
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", ntohs(a.sin_port));
    ax_config c;
    ax_config_default(&c);
    ax_sched *s;
    if (ax_new(&c, &s) != AX_OK)
        return 1;
    ax_http_config hc;
    ax_http_config_default(&hc);
    hc.max_host_connections = 8;
    ax_spec sp = {.fn = get, .timeout_ms = 5000};
    if (ax_http_configure(s, &hc) != AX_OK || ax_submit(s, &sp, NULL) != AX_OK)
        return 1;
    for (int i = 0; i < 5000 && atomic_load(&result) == 1; i++)
        usleep(1000);
    ax_free(s);
    close(fd);
    int rc = atomic_load(&result);
    printf("consumer_http: %s (%s)\n", rc == AX_ENET ? "ok" : "FAILED", ax_strerror(rc));
    return rc == AX_ENET ? 0 : 1;
}
