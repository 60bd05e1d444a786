/* test_redis_hand_back.c - a stopping consumer hands its abandoned messages
 * back: another consumer runs them at its next claim pass, not after the
 * stopped one's visibility_ms.
 *
 * Before: a message whose task was cancelled (ax_shutdown during a drain
 * that timed out, as ax-worker and a rolling restart do) stayed pending to
 * the stopped consumer with the idle time of its delivery, so another
 * consumer took it only once that passed its visibility_ms (30 s by
 * default; 120 s here, so the 30 s liveness bound below tells the two
 * apart). Now its idle time is set past any visibility_ms at the stop.
 *
 *  1. consumer A pulls 6 messages whose handler hangs; stop (times out),
 *     ax_shutdown cancels them, stop again (the ax-worker sequence): 6
 *     abandoned, 6 handed back. Consumer B (visibility 120 s, claim every
 *     200 ms) runs all 6, each on its second delivery.
 *  2. an entry another consumer took meanwhile is not the stopping one's to
 *     hand back: A's entries XCLAIMed to "ghost" before the stop stay
 *     ghost's, with their idle time (handed back 0).
 *  3. a stop that timed out, then ax_free and ax_redis_consumer_free (the
 *     order ax_redis.h gives, no second stop): the free hands them back;
 *  4. 150 messages held: all handed back, in several script calls.
 */
#include "redis_server.h"
#include "redis_queue.h"
#include "util.h"

#include <ax_redis.h>

static atomic_int hanging, ran_b, second_delivery;

static int hang(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m, (void)arg;
    atomic_fetch_add(&hanging, 1);
    return ax_sleep(t, 600000); /* until cancelled */
}

static int quick(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)arg;
    if (m->deliveries == 2) atomic_fetch_add(&second_delivery, 1);
    atomic_fetch_add(&ran_b, 1);
    return 0;
}

static ax_redis_consumer *consumer(ax_sched *s, ax_redis_queue *q, const char *name,
                                   ax_redis_handler fn, unsigned slots)
{
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = name;
    cc.slots = slots;
    cc.visibility_ms = 120000;
    cc.claim_interval_ms = 200;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "job", fn, NULL), 0);
    return c;
}

/* A's messages pulled and hanging; then the ax-worker stop sequence. */
static ax_redis_consumer_stats stop_a(ax_sched *sa, ax_redis_consumer *a)
{
    CHECK_EQ(ax_redis_consumer_stop(a, 200), AX_ETIMEDOUT); /* handlers still run */
    CHECK_EQ(ax_shutdown(sa, 0), 0);                        /* cancels them */
    CHECK_EQ(ax_redis_consumer_stop(a, 5000), 0);
    ax_redis_consumer_stats st;
    CHECK_EQ(ax_redis_consumer_stats_get(a, &st), 0);
    return st;
}

enum { N = 6 };

static void submit_n(ax_redis_queue *q, int n)
{
    for (int i = 0; i < n; i++) {
        ax_redis_spec sp = {.kind = "job", .timeout_ms = 300000};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }
}

/* Queue `name` with N messages, and consumer A on *sa holding them all in
 * handlers that hang. */
static ax_redis_queue *pulled_and_hanging_n(const char *name, int port, int n, ax_sched **sa,
                                            ax_redis_consumer **a)
{
    atomic_store(&hanging, 0);
    ax_redis_queue *q = rs_queue(port, name);
    submit_n(q, n);
    *sa = test_sched(2, (unsigned)n + 8);
    *a = consumer(*sa, q, "a", hang, n > 8 ? (unsigned)n : 8);
    CHECK_EQ(ax_redis_consumer_start(*a), 0);
    CHECK(WAIT_UNTIL(atomic_load(&hanging) == n, 30000));
    return q;
}

static ax_redis_queue *pulled_and_hanging(const char *name, int port, ax_sched **sa,
                                          ax_redis_consumer **a)
{
    return pulled_and_hanging_n(name, port, N, sa, a);
}

static void handed_back_and_run(int port)
{
    ax_sched *sa;
    ax_redis_consumer *a;
    ax_redis_queue *q = pulled_and_hanging("hb", port, &sa, &a);
    ax_redis_consumer_stats st = stop_a(sa, a);
    fprintf(stderr, "A: pulled %llu abandoned %llu handed_back %llu held %llu errors %llu\n",
            (unsigned long long)st.pulled, (unsigned long long)st.abandoned,
            (unsigned long long)st.handed_back, (unsigned long long)st.held,
            (unsigned long long)st.redis_errors);
    CHECK_EQ(st.pulled, N);
    CHECK_EQ(st.abandoned, N);
    CHECK_EQ(st.handed_back, N);
    CHECK_EQ(st.held, 0);
    CHECK_EQ(st.redis_errors, 0);

    /* B: its visibility is 120 s, yet it takes them at its next claim. */
    ax_sched *sb = test_sched(2, 32);
    ax_redis_consumer *b = consumer(sb, q, "b", quick, 8);
    CHECK_EQ(ax_redis_consumer_start(b), 0);
    bool all = WAIT_UNTIL(atomic_load(&ran_b) == N, 30000);
    ax_redis_consumer_stats sbst;
    CHECK_EQ(ax_redis_consumer_stats_get(b, &sbst), 0);
    fprintf(stderr, "B: ran %d (second delivery %d) claimed %llu pulled %llu\n",
            atomic_load(&ran_b), atomic_load(&second_delivery), (unsigned long long)sbst.claimed,
            (unsigned long long)sbst.pulled);
    CHECK(all);
    CHECK_EQ(atomic_load(&second_delivery), N); /* the hand-back is not a delivery */
    CHECK_EQ(sbst.claimed, N);
    CHECK_EQ(sbst.pulled, 0);
    CHECK(WAIT_UNTIL((ax_redis_consumer_stats_get(b, &sbst), sbst.succeeded == N), 30000));
    CHECK_EQ(ax_redis_consumer_stop(b, 5000), 0);
    ax_redis_queue_stats qs;
    CHECK_EQ(ax_redis_queue_stats_get(NULL, q, 2000, &qs), 0);
    CHECK_EQ(qs.pending[AX_PRIO_NORMAL], 0);
    CHECK_EQ(qs.succeeded, N);
    ax_free(sb);
    ax_redis_consumer_free(b);
    ax_free(sa);
    ax_redis_consumer_free(a);
    ax_redis_queue_free(q);
}

static void not_ours_any_more(int port)
{
    ax_sched *sa;
    ax_redis_consumer *a;
    ax_redis_queue *q = pulled_and_hanging("hb2", port, &sa, &a);
    /* Another consumer takes every entry (as a claim after a stall would). */
    redisContext *rc = rs_connect();
    redisReply *r = redisCommand(rc, "XAUTOCLAIM ax:{hb2}:normal ax ghost 0 0 COUNT 100 JUSTID");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2);
    CHECK_EQ(r->element[1]->elements, N);
    freeReplyObject(r);
    ax_redis_consumer_stats st = stop_a(sa, a);
    CHECK_EQ(st.abandoned, N);
    CHECK_EQ(st.handed_back, 0);
    /* Still ghost's, each idle far less than the year a hand-back sets. */
    r = redisCommand(rc, "XPENDING ax:{hb2}:normal ax - + 100");
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    CHECK_EQ(r->elements, N);
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        CHECK(e->type == REDIS_REPLY_ARRAY && e->elements == 4);
        CHECK_STR(e->element[1]->str, "ghost");
        CHECK(e->element[2]->integer < 600000);
    }
    freeReplyObject(r);
    redisFree(rc);
    ax_free(sa);
    ax_redis_consumer_free(a);
    ax_redis_queue_free(q);
}

/* The order ax_redis.h gives after a stop that timed out: ax_free, then
 * ax_redis_consumer_free, no second stop. The free hands them back (it
 * did not: 6 entries left with the idle time of their delivery). */
static void freed_after_timeout(int port)
{
    ax_sched *sa;
    ax_redis_consumer *a;
    ax_redis_queue *q = pulled_and_hanging("hb3", port, &sa, &a);
    CHECK_EQ(ax_redis_consumer_stop(a, 200), AX_ETIMEDOUT);
    ax_free(sa);
    ax_redis_consumer_free(a);
    redisContext *rc = rs_connect();
    redisReply *r = redisCommand(rc, "XPENDING ax:{hb3}:normal ax - + 100");
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    CHECK_EQ(r->elements, N);
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        CHECK(e->type == REDIS_REPLY_ARRAY && e->elements == 4);
        if (e->element[2]->integer < 1000000000ll)
            fprintf(stderr, "entry %s idle %lld ms: not handed back\n", e->element[0]->str,
                    e->element[2]->integer);
        CHECK(e->element[2]->integer >= 1000000000ll); /* the hand-back's year, not ms */
        CHECK_EQ(e->element[3]->integer, 1);           /* still one delivery */
    }
    freeReplyObject(r);
    redisFree(rc);
    ax_redis_queue_free(q);
}

/* More entries of one stream than one script call takes (the default 64
 * slots, all held): every one handed back, in several calls (review: a
 * call with 63 or more ids was refused before any round trip, and none was
 * handed back). */
static void many(int port)
{
    enum { M = 150 };
    ax_sched *sa;
    ax_redis_consumer *a;
    ax_redis_queue *q = pulled_and_hanging_n("hb4", port, M, &sa, &a);
    ax_redis_consumer_stats st = stop_a(sa, a);
    fprintf(stderr, "many: abandoned %llu handed_back %llu errors %llu\n",
            (unsigned long long)st.abandoned, (unsigned long long)st.handed_back,
            (unsigned long long)st.redis_errors);
    CHECK_EQ(st.abandoned, M);
    CHECK_EQ(st.handed_back, M);
    CHECK_EQ(st.redis_errors, 0);
    ax_free(sa);
    ax_redis_consumer_free(a);
    ax_redis_queue_free(q);
}

int main(void)
{
    int port = rs_start();
    handed_back_and_run(port);
    not_ours_any_more(port);
    freed_after_timeout(port);
    many(port);
    puts("test_redis_hand_back: ok");
    return 0;
}
