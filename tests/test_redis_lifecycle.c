/* libax_redis at the edges of a consumer's life and of its inputs, each
 * case one a new user's trial hit:
 *   - a binary payload is never read past its len (ax_redis_submit ran
 *     strlen on it: a payload ending at a page boundary crashed);
 *   - a consumer stopped right after its start stops and frees (its puller
 *     and acker, cancelled still queued, never cleared their flags: stop
 *     said AX_ETIMEDOUT for ever and free leaked it);
 *   - ax_free, then ax_redis_consumer_free of a consumer never stopped
 *     (free's implicit stop touched the freed scheduler);
 *   - stop before start, then start: AX_ESTATE, not a consumer that
 *     silently pulls nothing;
 *   - a handler kind submit would refuse, an empty command, a payload over
 *     Redis's bulk limit: AX_EINVAL;
 *   - two consumers of one queue in one process get distinct default names
 *     (both were "HOST-PID", sharing one pending list), and a name given
 *     twice is AX_EBUSY;
 *   - a handler that reads its message after its attempt timed out reads
 *     it intact (the acker freed it as soon as on_done had run: a use after
 *     free; ax_redis_msg is valid until the handler returns), and a handler
 *     that panics gets its message dead-lettered (the fix first left it held
 *     for ever: ax_panic never returns to the code after the handler). */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>
#include <fcntl.h>
#include <sys/mman.h>

static atomic_int runs;

static int work(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t;
    (void)m;
    (void)arg;
    atomic_fetch_add(&runs, 1);
    return 0;
}

/* stderr of fn(arg), into buf. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, "%s/stderr.%d", rs_dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    memset(buf, 0, len);
    CHECK(pread(fd, buf, len - 1, 0) >= 0);
    close(fd);
}

static void free_consumer(void *c)
{
    ax_redis_consumer_free(c);
}

static void free_queue(void *q)
{
    ax_redis_queue_free(q);
}

static ax_redis_consumer *consumer(ax_sched *s, ax_redis_queue *q)
{
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    cc.slots = 4;
    ax_redis_consumer *c;
    CHECK_EQ(ax_redis_consumer_new(s, q, &cc, &c), 0);
    CHECK_EQ(ax_redis_handle(c, "work", work, NULL), 0);
    return c;
}

static atomic_int late_ok, late_seen;

static int late_reader(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)arg;
    ax_sleep(t, 5000); /* AX_ETIMEDOUT at the message's 100 ms timeout */
    atomic_fetch_add(&late_seen, 1);
    usleep(300000); /* its attempt is over: the acker writes its dead letter meanwhile */
    if (m->len == 16 && memcmp(m->payload, "late-late-late-!", 16) == 0 &&
        strcmp(m->kind, "late") == 0)
        atomic_fetch_add(&late_ok, 1);
    return 0;
}

static int panics(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)m;
    (void)arg;
    ax_panic(t, "boom");
    return 0;
}

static int empty_command(ax_task *t, void *arg)
{
    ax_redis *r = arg;
    redisReply *rep = NULL;
    uint64_t t0 = ax_now_ns();
    CHECK_EQ(ax_redis_command(t, r, 5000, &rep, ""), AX_EINVAL);
    CHECK(strcmp(ax_error_detail(), "ax_redis_command: the command is empty") == 0);
    CHECK(ax_now_ns() - t0 < 2000000000ull); /* refused, not waited out (5 s) */
    CHECK_EQ(ax_redis_command(t, r, 5000, &rep, "PING"), 0);
    CHECK(rep != NULL);
    freeReplyObject(rep);
    return 0;
}

int main(void)
{
    int port = rs_start();
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "life";
    qc.conn.port = (uint16_t)port;
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);

    /* 1. A payload of 16 bytes with no NUL after it, its last byte the
     * last of a readable page. */
    long pg = sysconf(_SC_PAGESIZE);
    char *pages = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    CHECK(pages != MAP_FAILED);
    CHECK_EQ(mprotect(pages + pg, (size_t)pg, PROT_NONE), 0);
    char *payload = pages + pg - 16;
    memset(payload, 'p', 16);
    ax_redis_spec sp = {.kind = "work", .payload = payload, .len = 16, .timeout_ms = 5000};
    char id[AX_REDIS_ID_MAX];
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 2000, id), 0);
    /* Over Redis's bulk limit: refused before any I/O (it was "connection
     * reset by peer" after sending hundreds of MB). */
    ax_redis_spec huge = sp;
    huge.len = (size_t)AX_REDIS_PAYLOAD_MAX + 1;
    CHECK_EQ(ax_redis_submit(NULL, q, &huge, 2000, id), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "proto-max-bulk-len") != NULL);
    ax_redis_spec batch[2] = {sp, sp};
    int rcs[2];
    CHECK_EQ(ax_redis_submit_batch(NULL, q, batch, 2, 2000, rcs, NULL), 0);
    CHECK(rcs[0] == 0 && rcs[1] == 0);
    munmap(pages, 2 * (size_t)pg);
    printf("binary payload at a page's end: submitted\n");

    /* 2. Start, then stop at once, 20 times, with timeouts 0 and 3 s: stop
     * returns 0 and free frees (nothing on stderr). On a queue of its own,
     * empty: a consumer that pulled 1.'s messages would hold them at a
     * stop with timeout 0 (AX_ETIMEDOUT, rightly), and run them again
     * later (at least once), which 6. counts (CI under ASan: it did). */
    ax_redis_queue_config qc2 = qc;
    qc2.name = "life-empty";
    ax_redis_queue *q2;
    CHECK_EQ(ax_redis_queue_new(&qc2, &q2), 0);
    ax_sched *s = test_sched(2, 16);
    char err[1024];
    for (int i = 0; i < 20; i++) {
        ax_redis_consumer *c = consumer(s, q2);
        CHECK_EQ(ax_redis_consumer_start(c), 0);
        int rc = ax_redis_consumer_stop(c, i % 2 ? 3000 : 0);
        if (rc)
            fprintf(stderr, "round %d: %s\n", i, ax_error_detail());
        CHECK_EQ(rc, 0);
        capture_stderr(free_consumer, c, err, sizeof err);
        CHECK_EQ(err[0], 0);
    }
    printf("start then stop at once: stopped and freed, 20 of 20\n");

    /* 3. Stop before start: start refuses. */
    ax_redis_consumer *c = consumer(s, q);
    CHECK_EQ(ax_redis_consumer_stop(c, 1000), 0);
    CHECK_EQ(ax_redis_consumer_start(c), AX_ESTATE);
    CHECK(strstr(ax_error_detail(), "stopped") != NULL);
    ax_redis_consumer_free(c);

    /* 4. Handler kinds by submit's rules. */
    c = consumer(s, q);
    CHECK_EQ(ax_redis_handle(c, "k\x01", work, NULL), AX_EINVAL);
    CHECK(strstr(ax_error_detail(), "control character") != NULL);
    CHECK_EQ(ax_redis_handle(c, "k\xff", work, NULL), AX_EINVAL);
    CHECK_EQ(ax_redis_handle(c, "caf\xc3\xa9", work, NULL), 0);

    /* 4b. Names, unique per process and queue. */
    ax_redis_consumer *d1 = consumer(s, q), *d2 = consumer(s, q);
    char t1[8192], t2[8192];
    CHECK(ax_redis_consumer_prometheus(d1, t1, sizeof t1) > 0);
    CHECK(ax_redis_consumer_prometheus(d2, t2, sizeof t2) > 0);
    char *n1 = strstr(t1, "consumer=\""), *n2 = strstr(t2, "consumer=\"");
    CHECK(n1 && n2);
    *strchr(n1 + 10, '"') = 0;
    *strchr(n2 + 10, '"') = 0;
    fprintf(stderr, "default names: %s, %s\n", n1 + 10, n2 + 10);
    CHECK(strcmp(n1 + 10, n2 + 10) != 0);
    char pid[32];
    snprintf(pid, sizeof pid, "-%ld-", (long)getpid()); /* HOST-PID-k: c took HOST-PID */
    CHECK(strstr(n1 + 10, pid) && strstr(n2 + 10, pid));
    ax_redis_consumer_config nc;
    ax_redis_consumer_config_default(&nc);
    nc.name = "same";
    ax_redis_consumer *e1, *e2 = NULL;
    CHECK_EQ(ax_redis_consumer_new(s, q, &nc, &e1), 0);
    CHECK_EQ(ax_redis_consumer_new(s, q, &nc, &e2), AX_EBUSY);
    CHECK(e2 == NULL && strstr(ax_error_detail(), "same") != NULL);
    ax_redis_consumer_free(e1);
    CHECK_EQ(ax_redis_consumer_new(s, q, &nc, &e2), 0); /* free gave the name back */
    ax_redis_consumer_free(e2);
    ax_redis_consumer_free(d1);
    ax_redis_consumer_free(d2);

    /* 5. An empty command, from a task. */
    ax_redis_config rcfg;
    ax_redis_config_default(&rcfg);
    rcfg.port = (uint16_t)port;
    ax_redis *r;
    CHECK_EQ(ax_redis_new(&rcfg, &r), 0);
    ax_spec ts = {.fn = empty_command, .arg = r, .timeout_ms = 10000};
    uint64_t tid;
    CHECK_EQ(ax_submit(s, &ts, &tid), 0);

    /* 6. The consumer runs the messages of 1., is never stopped; the
     * scheduler is freed, then the consumer: freed, no write into the
     * freed scheduler (ASan), nothing on stderr, the queue then frees. */
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    CHECK(WAIT_UNTIL(atomic_load(&runs) >= 3, 30000)); /* at least once each */
    ax_free(s);
    capture_stderr(free_consumer, c, err, sizeof err);
    if (err[0])
        fprintf(stderr, "consumer free said: %s", err);
    CHECK_EQ(err[0], 0);
    ax_redis_free(r);

    /* 7. A handler past its timeout reads its message intact; the message
     * is dead-lettered once, after the handler returned. */
    s = test_sched(2, 16);
    c = consumer(s, q);
    CHECK_EQ(ax_redis_handle(c, "late", late_reader, NULL), 0);
    CHECK_EQ(ax_redis_handle(c, "panic", panics, NULL), 0);
    CHECK_EQ(ax_redis_consumer_start(c), 0);
    ax_redis_spec ls = {.kind = "late", .payload = "late-late-late-!", .len = 16,
                        .timeout_ms = 100};
    CHECK_EQ(ax_redis_submit(NULL, q, &ls, 2000, id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&late_seen) == 1, 10000));
    ax_redis_consumer_stats cs;
    CHECK(WAIT_UNTIL(ax_redis_consumer_stats_get(c, &cs) == 0 && cs.dead == 1 && cs.held == 0,
                     10000));
    CHECK_EQ(atomic_load(&late_ok), 1);
    /* A panicking handler: its message is dead-lettered, none stays held. */
    ax_redis_spec ps = {.kind = "panic", .payload = "p", .len = 1, .timeout_ms = 1000};
    CHECK_EQ(ax_redis_submit(NULL, q, &ps, 2000, id), 0);
    CHECK(WAIT_UNTIL(ax_redis_consumer_stats_get(c, &cs) == 0 && cs.dead == 2 && cs.held == 0,
                     10000));
    CHECK_EQ(ax_redis_consumer_stop(c, 2000), 0);
    ax_redis_consumer_free(c);
    ax_free(s);
    printf("a handler reading its message after its timeout: intact, dead-lettered once\n");

    capture_stderr(free_queue, q, err, sizeof err);
    CHECK_EQ(err[0], 0);
    capture_stderr(free_queue, q2, err, sizeof err);
    CHECK_EQ(err[0], 0);
    printf("ax_free, then a consumer never stopped: freed\n");
    printf("ok\n");
    return 0;
}
