/* ax_redis_consumer_free on a started consumer whose handlers still run:
 * stop(c, 0) returns with them running and their on_done (msg_done ->
 * push_done) would write into the freed consumer. The consumer is left
 * allocated instead, with one line on stderr saying why. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>
#include <fcntl.h>

static atomic_int runs;

static int slow(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m;
    (void)arg;
    atomic_fetch_add(&runs, 1);
    return ax_sleep(t, 300);
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "freerun";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    enum { N = 40 };
    ax_redis_spec sp[N];
    int rcs[N];
    for (int i = 0; i < N; i++)
        sp[i] = (ax_redis_spec){.kind = "work", .timeout_ms = 5000};
    CHECK_EQ(ax_redis_submit_batch(NULL, q, sp, N, 2000, rcs, NULL), 0);
    ax_sched *s = test_sched(2, 16 + 2);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 16;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "work", slow, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    while (atomic_load(&runs) == 0)
        usleep(1000);
    /* capture stderr */
    char path[256];
    snprintf(path, sizeof path, "%s/stderr", rs_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    ax_redis_consumer_free(c); /* misuse: handlers still running */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[1024] = {0};
    CHECK(pread(fd, buf, sizeof buf - 1, 0) > 0);
    close(fd);
    fprintf(stderr, "captured: %s", buf);
    CHECK(strstr(buf, "ax_redis_consumer_free") && strstr(buf, "not freed"));
    usleep(500000); /* the handlers end; their on_done reach the (refused) consumer */
    /* The order the header gives after a stop that timed out: the
     * scheduler first (its tasks end), then the consumer, then the queue;
     * each frees now, nothing left for the leak checker. */
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    printf("ok\n");
    return 0;
}
