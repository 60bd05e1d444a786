/* A consumer kept full by its backlog still claims a dead consumer's
 * entries once they pass their visibility time, ahead of its backlog.
 *
 * The claim pass ran only at a maintenance pass that found a free slot;
 * a saturated consumer refills every slot from new messages as it frees,
 * so it reached its maintenance passes full and claimed a dead consumer's
 * entries only after it had started every newer message (new user's
 * trial: the first redelivery ~10 s after a kill with 2 s of visibility, 3
 * of 3; a stalled consumer's never). Now each maintenance pass owes a
 * claim pass, which takes the next slots that come free (one pass per
 * claim interval: not ahead of every new HIGH message until the dead
 * consumer's entries are all claimed).
 *
 * A victim process takes 4 messages and parks on them; it is killed. The
 * survivor (this process, 4 slots, each message 50 ms, a claim pass due
 * every 50 ms) has a backlog of 400 messages (~5 s of work). Its claims of
 * the victim's 4 entries must come while most of the backlog is still to
 * run; then all 404 end exactly once, the victim's 4 as redeliveries.
 */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>
#include <sys/prctl.h>

enum { BACKLOG = 400, HELD = 4, SLOTS = 4 };

static int port;

static int park(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m;
    (void)arg;
    return ax_sleep(t, 600000); /* the victim holds its messages until killed */
}

static int work(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m;
    (void)arg;
    return ax_sleep(t, 50);
}

static ax_redis_queue *queue(void)
{
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "busy";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    return q;
}

static ax_redis_consumer *consumer(ax_sched *s, ax_redis_queue *q, const char *name,
                                   ax_redis_handler fn)
{
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.name = name;
    cc.slots = SLOTS;
    cc.visibility_ms = 1000;
    cc.claim_interval_ms = 50;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "m", fn, NULL), 0);
    return c;
}

/* Entries delivered to the victim and not acknowledged (its group may not
 * exist yet: 0). */
static long long victim_pending(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "XPENDING ax:{busy}:normal ax - + 100 victim");
    CHECK(r != NULL);
    long long n = r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : 0;
    freeReplyObject(r);
    return n;
}

static void submit(ax_redis_queue *q, int n)
{
    for (int i = 0; i < n; i++) {
        ax_redis_spec sp = {.kind = "m", .payload = "x", .len = 1, .timeout_ms = 600000};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), 0);
    }
}

int main(void)
{
    port = rs_start();
    redisContext *rc = rs_connect();
    ax_redis_queue *q = queue();
    submit(q, HELD);

    pid_t victim = fork();
    CHECK(victim >= 0);
    if (victim == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* not left behind by a failed check */
        ax_redis_queue *vq = queue();
        ax_sched *s = test_sched(1, SLOTS + 2);
        ax_redis_consumer *c = consumer(s, vq, "victim", park);
        CHECK_EQ(ax_redis_consumer_start(c), 0);
        for (;;)
            pause();
    }
    CHECK(WAIT_UNTIL(victim_pending(rc) == HELD, 60000));
    CHECK_EQ(kill(victim, SIGKILL), 0);
    int st;
    CHECK_EQ(waitpid(victim, &st, 0), victim);

    /* The backlog, then the survivor: full from its first read on. */
    submit(q, BACKLOG);
    ax_sched *s = test_sched(2, SLOTS + 2);
    ax_redis_consumer *c = consumer(s, q, "survivor", work);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK(WAIT_UNTIL(rs_int(rc, "HGET ax:{busy}:stats claimed") == HELD, 120000));
    long long done_at_claim = rs_int(rc, "HGET ax:{busy}:stats succeeded");
    fprintf(stderr, "claimed the dead consumer's %d entries with %lld of %d messages done\n", HELD,
           done_at_claim, BACKLOG + HELD);
    /* ~1.2 s in of ~5 s; before the fix, at the end of the backlog. */
    CHECK(done_at_claim < BACKLOG / 2);

    CHECK(WAIT_UNTIL(rs_int(rc, "HGET ax:{busy}:stats succeeded") == BACKLOG + HELD, 120000));
    CHECK_EQ(ax_redis_consumer_stop(c, 10000), 0);
    ax_redis_consumer_stats cs;
    ax_redis_consumer_stats_get(c, &cs);
    CHECK_EQ(cs.succeeded, BACKLOG + HELD);
    CHECK_EQ(cs.claimed, HELD);
    CHECK_EQ(cs.redelivered, HELD);
    CHECK_EQ(cs.ack_lost, 0);
    CHECK_EQ(rs_int(rc, "HGET ax:{busy}:stats dead"), 0);
    CHECK_EQ(rs_int(rc, "XLEN ax:{busy}:normal"), 0);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
