/* ax_redis_queue_free while a consumer of the queue runs used to free the
 * keys and connection settings under its puller (SIGSEGV). The queue counts
 * its consumers: freeing it with one alive prints a line on stderr and
 * leaves it allocated. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>
#include <fcntl.h>

static int quick(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m;
    (void)arg;
    return ax_sleep(t, 5);
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "qfree";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    ax_sched *s = test_sched(2, 8 + 2);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 8;
    cc.claim_interval_ms = 50;
    cc.block_ms = 20;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "work", quick, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    usleep(100000);
    char path[256];
    snprintf(path, sizeof path, "%s/stderr", rs_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    ax_redis_queue_free(q); /* misuse: its consumer runs */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[1024] = {0};
    CHECK(pread(fd, buf, sizeof buf - 1, 0) > 0);
    close(fd);
    fprintf(stderr, "captured: %s", buf);
    CHECK(strstr(buf, "ax_redis_queue_free") && strstr(buf, "not freed"));
    /* the consumer goes on: submits still work and run */
    char id[AX_REDIS_ID_MAX];
    for (int i = 0; i < 20; i++)
        CHECK_EQ(ax_redis_submit(NULL, q, &(ax_redis_spec){.kind = "work", .timeout_ms = 1000}, 1000,
                                 id),
                 0);
    ax_redis_consumer_stats st;
    WAIT_UNTIL((ax_redis_consumer_stats_get(c, &st), st.succeeded == 20), 5000);
    CHECK_EQ(st.succeeded, 20);
    CHECK_EQ(ax_redis_consumer_stop(c, 2000), 0);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q); /* now it is freed */
    ax_free(s);
    printf("ok\n");
    return 0;
}
