#define _DEFAULT_SOURCE /* usleep */
/* Built against an installed libax_redis by scripts/test (CMake, static and
 * shared; pkg-config): a submit from a task, to a loopback port where
 * nothing listens, must come back AX_ENET through hiredis and the worker's
 * reactor. */
#include <arpa/inet.h>
#include <ax_redis.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static ax_redis_queue *q;
static atomic_int result = 1;

static int submit(ax_task *t, void *arg)
{
    (void)arg;
    ax_redis_spec sp = {.kind = "k", .timeout_ms = 1000};
    atomic_store(&result, ax_redis_submit(t, q, &sp, 2000, NULL));
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
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "consumer";
    qc.conn.port = ntohs(a.sin_port);
    ax_config c;
    ax_config_default(&c);
    ax_sched *s;
    if (ax_redis_queue_new(&qc, &q) != AX_OK || ax_new(&c, &s) != AX_OK)
        return 1;
    ax_spec sp = {.fn = submit, .timeout_ms = 5000};
    if (ax_submit(s, &sp, NULL) != AX_OK)
        return 1;
    for (int i = 0; i < 5000 && atomic_load(&result) == 1; i++)
        usleep(1000);
    ax_free(s);
    ax_redis_queue_free(q);
    close(fd);
    int rc = atomic_load(&result);
    printf("consumer_redis: %s (%s)\n", rc == AX_ENET ? "ok" : "FAILED", ax_strerror(rc));
    return rc == AX_ENET ? 0 : 1;
}
