/* libax_redis: a message's task carries the message id in its lifecycle
 * events (ax_spec.ref = the id submit returned). 300 messages, every fifth
 * failing its first attempt (its retry runs as another task, with the same
 * id); the scheduler's events go to a callback. Every event of a task that
 * ran a message carries exactly that message's id; every message id shows
 * up; the consumer's own tasks (puller, acker) carry none. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>
#include <pthread.h>

enum { M = 300, MAX_EV = 20000, MAX_RUNS = 2 * M };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct ev {
    uint64_t task;
    unsigned kind;
    char ref[AX_REF_MAX];
} evs[MAX_EV];
static unsigned nev;
static struct run {
    uint64_t task;
    char msg[AX_REDIS_ID_MAX];
} runs[MAX_RUNS];
static unsigned nruns;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    if (nev < MAX_EV) {
        evs[nev].task = e->id;
        evs[nev].kind = e->kind;
        memcpy(evs[nev].ref, e->ref, AX_REF_MAX);
        nev++;
    }
    pthread_mutex_unlock(&mu);
}

static int work(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    CHECK(nruns < MAX_RUNS);
    runs[nruns].task = ax_task_id(t);
    snprintf(runs[nruns].msg, sizeof runs[nruns].msg, "%s", m->id);
    nruns++;
    pthread_mutex_unlock(&mu);
    int n = atoi((const char *)m->payload);
    if (n % 5 == 0 && m->attempt == 0) {
        ax_task_set_error(t, "first attempt of %d fails", n);
        return 1;
    }
    return 0;
}

static const struct run *run_of(uint64_t task)
{
    for (unsigned i = 0; i < nruns; i++)
        if (runs[i].task == task) return &runs[i];
    return NULL;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "ref";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    static char ids[M][AX_REDIS_ID_MAX];
    for (int i = 0; i < M; i++) {
        char pl[16];
        int n = snprintf(pl, sizeof pl, "%d", i);
        ax_redis_spec sp = {.kind = "w",
                            .priority = i % 3 ? AX_PRIO_NORMAL : AX_PRIO_HIGH,
                            .payload = pl,
                            .len = (size_t)n,
                            .timeout_ms = 60000,
                            .max_retry = 1};
        CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, ids[i]), 0);
    }

    ax_sched *s = test_sched(2, 34);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    CHECK_EQ(ax_events_lossless(s, true), 0);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 32;
    cc.claim_interval_ms = 20; /* due retries come back soon */
    cc.retry = (ax_retry_policy){.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 10, .max_ms = 10};
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "w", work, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    redisContext *rc = rs_connect();
    CHECK(WAIT_UNTIL(rs_int(rc, "HGET ax:{ref}:stats succeeded") == M, 60000));
    CHECK_EQ(rs_int(rc, "HGET ax:{ref}:stats retried"), M / 5);
    CHECK_EQ(ax_redis_consumer_stop(c, 5000), 0);
    CHECK_EQ(ax_events_flush(s), 0);

    pthread_mutex_lock(&mu);
    CHECK_EQ(nruns, M + M / 5);
    static bool id_seen[M];
    unsigned with_ref = 0, started = 0;
    for (unsigned i = 0; i < nev; i++) {
        const struct run *r = run_of(evs[i].task);
        if (!r) { /* the puller's and the acker's: no ref */
            CHECK_STR(evs[i].ref, "");
            continue;
        }
        CHECK_STR(evs[i].ref, r->msg); /* exactly its message's id */
        with_ref++;
        started += evs[i].kind == AX_EV_STARTED;
        for (int k = 0; k < M; k++)
            if (strcmp(ids[k], evs[i].ref) == 0) id_seen[k] = true;
    }
    for (int k = 0; k < M; k++)
        CHECK(id_seen[k]);
    /* each run: submitted, started, succeeded or failed */
    CHECK_EQ(started, M + M / 5);
    CHECK_EQ(with_ref, 3 * (M + M / 5));
    pthread_mutex_unlock(&mu);
    printf("%u events, %u with a message id\n", nev, with_ref);

    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    redisFree(rc);
    return 0;
}
