/* libax_redis heartbeat: a live consumer's messages are not taken over by
 * a peer while it runs them. Margins of a second or more either way, so
 * that a busy machine (TSan, other suites) neither fails the fixed code
 * nor passes the old one.
 *
 * A. One heartbeat that Redis refuses. Consumer a holds 4 messages whose
 * handlers run 8 s (visibility 6 s: its heartbeat resets their idle time
 * from 3 s on, every claim pass of 100 ms); a live peer b claims entries
 * idle 4.8 s (its own visibility_ms). XCLAIM is refused (ACL) from 2.0 to
 * 3.6 s after the delivery, so a's first heartbeat, at ~3 s, fails. It
 * must try again at its next passes (after 3.6 s: idle reset ~1.2 s before
 * b's 4.8 s). Before, the failed heartbeat marked the messages as reset,
 * the next try came at ~6 s, and b took and ran all 4 while a still ran
 * them (review: a pause or a refused XCLAIM shorter than half the
 * visibility ran every message twice).
 *
 * B. More messages due than one round trip carries (512). a holds 1 100,
 * visibility 6 s, claim passes every 2 s; before, a pass reset the 512
 * newest and left the rest to the next passes, the last 76 at 7-9 s, and
 * b (claiming at 6 s) took them (review).
 *
 * C. A stop's drain. a is stopped with a 30 s drain while its 2 handlers
 * run 5 s (visibility 3 s); the puller, which heartbeats, is gone.
 * Before, nothing reset their idle time during the drain: b took both and
 * ran them again, and the stop still returned 0 (review). */
#include "redis_server.h"
#include "redis_queue.h"
#include "util.h"

#include <ax_redis.h>

#define N 4

static atomic_int starts;
static _Atomic uint64_t first_start_ms;
static int handler_ms = 4000;

static int long_one(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&first_start_ms, &zero, test_now_ms());
    atomic_fetch_add(&starts, 1);
    return ax_sleep(t, handler_ms);
}

static ax_redis_consumer *consumer(ax_sched *s, ax_redis_queue *q, const char *name,
                                   uint32_t visibility_ms, uint32_t claim_ms, unsigned slots)
{
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = name;
    cc.slots = slots;
    cc.visibility_ms = visibility_ms;
    cc.claim_interval_ms = claim_ms;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "long", long_one, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    return c;
}

static void sleep_until_ms(uint64_t at)
{
    uint64_t now = test_now_ms();
    if (at > now) usleep((useconds_t)(at - now) * 1000);
}

static void refused_heartbeat(int port, redisContext *rc)
{
    ax_redis_queue *q = rs_queue(port, "hb");
    ax_sched *s = test_sched(2, 16);

    handler_ms = 8000;
    ax_redis_consumer *a = consumer(s, q, "a", 6000, 100, N);
    ax_redis_spec sp = {.kind = "long", .timeout_ms = 30000};
    for (int i = 0; i < N; i++)
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&starts) == N, 30000));
    uint64_t t0 = atomic_load(&first_start_ms); /* the delivery, near enough */
    ax_redis_consumer *b = consumer(s, q, "b", 4800, 50, N);

    sleep_until_ms(t0 + 2000);
    redisReply *r = redisCommand(rc, "ACL SETUSER default -xclaim");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    sleep_until_ms(t0 + 3600);
    r = redisCommand(rc, "ACL SETUSER default +xclaim");
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);

    ax_redis_consumer_stats sa, sb;
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(a, &sa), ax_redis_consumer_stats_get(b, &sb),
                      sa.succeeded + sb.succeeded + sb.ack_lost >= N),
                     30000));
    usleep(300000); /* claim passes after the end */
    ax_redis_consumer_stats_get(a, &sa);
    ax_redis_consumer_stats_get(b, &sb);
    printf("starts %d; a: pulled %llu succeeded %llu errors %llu; b: claimed %llu ack_lost %llu\n",
           atomic_load(&starts), (unsigned long long)sa.pulled, (unsigned long long)sa.succeeded,
           (unsigned long long)sa.redis_errors, (unsigned long long)sb.claimed,
           (unsigned long long)sb.ack_lost);
    CHECK_EQ(atomic_load(&starts), N); /* each ran once: b took none over */
    CHECK_EQ(sb.claimed, 0);
    CHECK_EQ(sa.pulled, N);
    CHECK_EQ(sa.succeeded, N);
    CHECK_LE(1, sa.redis_errors); /* the refused heartbeat, counted */

    CHECK_EQ(ax_redis_consumer_stop(a, 5000), 0);
    CHECK_EQ(ax_redis_consumer_stop(b, 5000), 0);
    ax_free(s);
    ax_redis_consumer_free(a);
    ax_redis_consumer_free(b);
    ax_redis_queue_free(q);
}

#define MANY 1100

static void many_due(int port)
{
    atomic_store(&starts, 0);
    handler_ms = 8000;
    ax_redis_queue *q = rs_queue(port, "hbmany");
    ax_sched *s = test_sched(2, 2 * MANY + 16);
    ax_redis_spec sp = {.kind = "long", .timeout_ms = 30000};
    for (int i = 0; i < MANY; i++)
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    ax_redis_consumer *a = consumer(s, q, "a", 6000, 2000, MANY);
    CHECK(WAIT_UNTIL(atomic_load(&starts) >= MANY, 30000));
    ax_redis_consumer *b = consumer(s, q, "b", 6000, 100, MANY);
    ax_redis_consumer_stats sa, sb;
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(a, &sa), ax_redis_consumer_stats_get(b, &sb),
                      sa.succeeded + sb.succeeded + sb.ack_lost >= MANY),
                     60000));
    usleep(300000);
    ax_redis_consumer_stats_get(b, &sb);
    printf("many: starts %d of %d; b: claimed %llu\n", atomic_load(&starts), MANY,
           (unsigned long long)sb.claimed);
    CHECK_EQ(atomic_load(&starts), MANY);
    CHECK_EQ(sb.claimed, 0);
    CHECK_EQ(ax_redis_consumer_stop(a, 5000), 0);
    CHECK_EQ(ax_redis_consumer_stop(b, 5000), 0);
    ax_free(s);
    ax_redis_consumer_free(a);
    ax_redis_consumer_free(b);
    ax_redis_queue_free(q);
}

static void stop_drains(int port)
{
    atomic_store(&starts, 0);
    handler_ms = 5000;
    ax_redis_queue *q = rs_queue(port, "hbdrain");
    ax_sched *sa = test_sched(2, 16), *sb = test_sched(2, 16);
    ax_redis_spec sp = {.kind = "long", .timeout_ms = 30000};
    ax_redis_consumer *a = consumer(sa, q, "a", 3000, 200, 4);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&starts) == 2, 30000));
    ax_redis_consumer *b = consumer(sb, q, "b", 3000, 100, 4);
    usleep(500 * 1000);
    CHECK_EQ(ax_redis_consumer_stop(a, 30000), 0); /* the handlers end within it */
    usleep(300 * 1000);
    ax_redis_consumer_stats st_a, st_b;
    ax_redis_consumer_stats_get(a, &st_a);
    ax_redis_consumer_stats_get(b, &st_b);
    printf("drain: starts %d; a: succeeded %llu; b: claimed %llu\n", atomic_load(&starts),
           (unsigned long long)st_a.succeeded, (unsigned long long)st_b.claimed);
    CHECK_EQ(atomic_load(&starts), 2);
    CHECK_EQ(st_a.succeeded, 2);
    CHECK_EQ(st_b.claimed, 0);
    CHECK_EQ(ax_redis_consumer_stop(b, 5000), 0);
    ax_free(sa);
    ax_free(sb);
    ax_redis_consumer_free(a);
    ax_redis_consumer_free(b);
    ax_redis_queue_free(q);
}

int main(void)
{
    int port = rs_start();
    redisContext *rc = rs_connect();
    refused_heartbeat(port, rc);
    many_due(port);
    stop_drains(port);
    redisFree(rc);
    puts("test_redis_heartbeat: ok");
    return 0;
}
