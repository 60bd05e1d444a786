/* libax_redis: a message whose handler ends after a stop's drain ran out
 * (its acker cancelled) is still acknowledged by the next stop.
 *
 * ax-worker's SIGTERM path: ax_redis_consumer_stop(c, drain) times out with
 * a handler still running, the handler then ends (here: succeeds), and a
 * second ax_redis_consumer_stop(c, 0) settles what is left. Before, that
 * stop handed back only the abandoned messages: the succeeded one stayed
 * held and pending in Redis, to run again after visibility_ms (new user's
 * trial: "held 1" after "drained no").
 *
 * B. A stop whose drain runs while ax_shutdown cancels the handlers (and
 * the acker) ends then, and hands the cancelled messages back: before, it
 * waited out its whole timeout, heartbeating the cancelled messages so that
 * no other consumer could take them meanwhile (review: stop(5000) returned
 * after 5 s).
 *
 * C. Two stops at once: one waits for the other; both succeed, and their
 * heartbeats do not collide on the connection (review: one said
 * AX_ETIMEDOUT, and AX_EBUSY was counted as a Redis error). */
#include "redis_server.h"
#include "redis_queue.h"
#include "util.h"

#include <ax_redis.h>
#include <pthread.h>
#include <stdint.h>

static atomic_int started, release_it;

static int slow(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    atomic_fetch_add(&started, 1);
    for (int i = 0; i < 6000 && !atomic_load(&release_it); i++)
        if (ax_sleep(t, 5) != 0) return -1;
    return 0;
}

/* A consumer of q running n messages of "slow", all started. */
static ax_redis_consumer *running(ax_sched *s, ax_redis_queue *q, int n)
{
    atomic_store(&started, 0);
    atomic_store(&release_it, 0);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = "c";
    cc.claim_interval_ms = 50;
    cc.visibility_ms = 2000;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "slow", slow, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    ax_redis_spec sp = {.kind = "slow", .timeout_ms = 60000};
    for (int i = 0; i < n; i++)
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&started) == n, 30000));
    return c;
}

static ax_sched *shut_s;

static void *shut_later(void *arg)
{
    (void)arg;
    usleep(200 * 1000);
    ax_shutdown(shut_s, 0);
    return NULL;
}

static void stop_beside_shutdown(int port)
{
    ax_redis_queue *q = rs_queue(port, "stb");
    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer *c = running(s, q, 8);
    shut_s = s;
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, shut_later, NULL), 0);
    uint64_t t0 = test_now_ms();
    int rc = ax_redis_consumer_stop(c, 30000);
    uint64_t took = test_now_ms() - t0;
    pthread_join(th, NULL);
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(c, &st);
    printf("B: stop %d after %llu ms; abandoned %llu handed_back %llu held %llu\n", rc,
           (unsigned long long)took, (unsigned long long)st.abandoned,
           (unsigned long long)st.handed_back, (unsigned long long)st.held);
    CHECK_EQ(rc, 0);
    CHECK_LE(took, 15000); /* liveness only: its 30 s bound is not waited out */
    CHECK_EQ(st.abandoned, 8);
    CHECK_EQ(st.handed_back, 8);
    CHECK_EQ(st.held, 0);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
}

static ax_redis_consumer *stop_c;
static atomic_int stop_rcs[2];

static void *stopper(void *arg)
{
    int i = (int)(intptr_t)arg;
    atomic_store(&stop_rcs[i], ax_redis_consumer_stop(stop_c, 20000));
    return NULL;
}

static void two_stops(int port)
{
    ax_redis_queue *q = rs_queue(port, "st2");
    ax_sched *s = test_sched(2, 16);
    stop_c = running(s, q, 2);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, stopper, (void *)(intptr_t)i), 0);
    usleep(1500 * 1000); /* both drain past a heartbeat or two */
    atomic_store(&release_it, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(stop_c, &st);
    printf("C: stops %d %d; succeeded %llu held %llu redis_errors %llu\n",
           atomic_load(&stop_rcs[0]), atomic_load(&stop_rcs[1]), (unsigned long long)st.succeeded,
           (unsigned long long)st.held, (unsigned long long)st.redis_errors);
    CHECK_EQ(atomic_load(&stop_rcs[0]), 0);
    CHECK_EQ(atomic_load(&stop_rcs[1]), 0);
    CHECK_EQ(st.succeeded, 2);
    CHECK_EQ(st.held, 0);
    CHECK_EQ(st.redis_errors, 0);
    ax_free(s);
    ax_redis_consumer_free(stop_c);
    ax_redis_queue_free(q);
}

int main(void)
{
    int port = rs_start();
    redisContext *rc = rs_connect();
    ax_redis_queue *q = rs_queue(port, "st");
    ax_sched *s = test_sched(2, 16);
    ax_redis_consumer *c = running(s, q, 1);

    /* The drain runs out with the handler still running. */
    CHECK_EQ(ax_redis_consumer_stop(c, 200), AX_ETIMEDOUT);
    ax_redis_consumer_stats st;
    ax_redis_consumer_stats_get(c, &st);
    CHECK_EQ(st.held, 1);

    /* It ends well after that; its task's on_done has run once the
     * scheduler counts it (the puller and the acker were cancelled). */
    atomic_store(&release_it, 1);
    ax_stats ss;
    CHECK(WAIT_UNTIL((ax_stats_get(s, &ss), ss.succeeded == 1), 30000));

    /* 10 s, not 0: the consumer learns of the end from its task's on_done,
     * which a loaded machine (CI, TSan) ran after the count above, and a
     * stop with no time said AX_ETIMEDOUT for it. */
    CHECK_EQ(ax_redis_consumer_stop(c, 10000), 0);
    ax_redis_consumer_stats_get(c, &st);
    printf("held %llu succeeded %llu abandoned %llu\n", (unsigned long long)st.held,
           (unsigned long long)st.succeeded, (unsigned long long)st.abandoned);
    CHECK_EQ(st.held, 0);
    CHECK_EQ(st.succeeded, 1);
    CHECK_EQ(st.abandoned, 0);
    redisReply *r = redisCommand(rc, "XPENDING ax:{st}:normal ax");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1);
    CHECK_EQ(r->element[0]->integer, 0); /* acknowledged: nothing left to run again */
    freeReplyObject(r);
    CHECK_EQ(rs_int(rc, "HGET ax:{st}:stats succeeded"), 1);

    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);

    stop_beside_shutdown(port);
    two_stops(port);
    redisFree(rc);
    puts("test_redis_stop_settles: ok");
    return 0;
}
