/* libax_redis admission: bounds and the shed line are checked on the server
 * in one script, so two producer processes submitting at once get exactly
 * the bound admitted between them and the rest AX_EFULL / AX_ESHED, as
 * local admission (DESIGN.md §5: HIGH never shed). One producer submits
 * from ax tasks, the other from its main thread. */
#include "redis_server.h"
#include "util.h"

#include <ax_redis.h>

static int port;

static int noop_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}
const char *rscript_sha(int id); /* src/redis/script.c: the SHA-1 EVALSHA names */

static ax_redis_queue *queue(void)
{
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "adm";
    qc.conn.port = (uint16_t)port;
    qc.capacity[AX_PRIO_HIGH] = 50;
    qc.capacity[AX_PRIO_NORMAL] = 100;
    qc.capacity[AX_PRIO_LOW] = 50;
    qc.shed_ratio = 0.8; /* shed NORMAL/LOW at a load of 160 */
    ax_redis_queue *q;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    return q;
}

struct counts {
    int ok, full, shed, other;
};

static void count(struct counts *c, int rc)
{
    if (rc == 0)
        c->ok++;
    else if (rc == AX_EFULL)
        c->full++;
    else if (rc == AX_ESHED)
        c->shed++;
    else {
        fprintf(stderr, "submit: %s: %s\n", ax_strerror(rc), ax_error_detail());
        c->other++;
    }
}

struct prod {
    ax_redis_queue *q;
    ax_priority prio;
    int n;
    struct counts c;
    atomic_int done;
};

static int produce_task(ax_task *t, void *arg)
{
    struct prod *p = arg;
    for (int i = 0; i < p->n; i++) {
        ax_redis_spec sp = {.kind = "k", .priority = p->prio, .payload = "x", .len = 1,
                            .timeout_ms = 1000};
        char id[AX_REDIS_ID_MAX];
        int rc = ax_redis_submit(t, p->q, &sp, 5000, id);
        if (rc == 0)
            CHECK(id[1] == ':' && strchr(id, '-') != NULL);
        count(&p->c, rc);
    }
    atomic_store(&p->done, 1);
    return 0;
}

/* A producer process: waits for the go byte, submits n, writes its counts. */
static pid_t producer(bool in_task, ax_priority prio, int n, int go_fd, int out_fd)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid)
        return pid;
    char b;
    CHECK_EQ(read(go_fd, &b, 1), 1);
    struct prod p = {.q = queue(), .prio = prio, .n = n};
    if (in_task) {
        ax_sched *s = test_sched(2, 8);
        ax_spec sp = {.fn = produce_task, .arg = &p, .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        CHECK(WAIT_UNTIL(atomic_load(&p.done), 60000));
        ax_free(s);
    } else {
        for (int i = 0; i < n; i++) {
            ax_redis_spec sp = {.kind = "k", .priority = prio, .timeout_ms = 1000};
            count(&p.c, ax_redis_submit(NULL, p.q, &sp, 5000, NULL));
        }
    }
    CHECK_EQ(write(out_fd, &p.c, sizeof p.c), (ssize_t)sizeof p.c);
    ax_redis_queue_free(p.q);
    _exit(0);
}

/* Two producers of n each at once; the sum of their counts. */
static struct counts phase(ax_priority prio, int n)
{
    int go[2], out[2];
    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(out), 0);
    pid_t a = producer(true, prio, n, go[0], out[1]);
    pid_t b = producer(false, prio, n, go[0], out[1]);
    CHECK_EQ(write(go[1], "gg", 2), 2);
    struct counts sum = {0}, c;
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(read(out[0], &c, sizeof c), (ssize_t)sizeof c);
        sum.ok += c.ok, sum.full += c.full, sum.shed += c.shed, sum.other += c.other;
    }
    int st;
    CHECK_EQ(waitpid(a, &st, 0), a);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(waitpid(b, &st, 0), b);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(go[0]), close(go[1]), close(out[0]), close(out[1]);
    CHECK_EQ(sum.other, 0);
    return sum;
}

int main(void)
{
    port = rs_start();
    redisContext *rc = rs_connect();
    /* NORMAL: bound 100, load stays under the shed line (160). */
    struct counts c = phase(AX_PRIO_NORMAL, 80);
    CHECK_EQ(c.ok, 100);
    CHECK_EQ(c.full, 60);
    CHECK_EQ(c.shed, 0);
    CHECK_EQ(rs_int(rc, "XLEN ax:{adm}:normal"), 100);
    /* HIGH: its own bound, 50, takes the load to 150. */
    c = phase(AX_PRIO_HIGH, 40);
    CHECK_EQ(c.ok, 50);
    CHECK_EQ(c.full, 30);
    CHECK_EQ(c.shed, 0);
    /* LOW: admitted until the load reaches the shed line, 160; the rest shed. */
    c = phase(AX_PRIO_LOW, 20);
    CHECK_EQ(c.ok, 10);
    CHECK_EQ(c.shed, 30);
    CHECK_EQ(c.full, 0);
    /* HIGH is never shed: over the line it still meets only its bound. */
    c = phase(AX_PRIO_HIGH, 5);
    CHECK_EQ(c.ok, 0);
    CHECK_EQ(c.full, 10);
    CHECK_EQ(rs_int(rc, "XLEN ax:{adm}:high"), 50);
    CHECK_EQ(rs_int(rc, "XLEN ax:{adm}:low"), 10);
    {
        ax_redis_queue *sq = queue();
        ax_redis_queue_stats qs;
        CHECK_EQ(ax_redis_queue_stats_get(NULL, sq, 5000, &qs), 0);
        CHECK_EQ(qs.length[AX_PRIO_HIGH], 50);
        CHECK_EQ(qs.length[AX_PRIO_NORMAL], 100);
        CHECK_EQ(qs.length[AX_PRIO_LOW], 10);
        CHECK_EQ(qs.pending[AX_PRIO_HIGH] + qs.pending[AX_PRIO_NORMAL] + qs.pending[AX_PRIO_LOW], 0);
        ax_redis_queue_free(sq);
    }
    /* The bounds live on the server: a producer configured otherwise uses
     * the first one's. */
    CHECK_EQ(rs_int(rc, "HGET ax:{adm}:conf normal"), 100);
    /* The script was cached by EVAL after NOSCRIPT: flush it, a submit
     * still works (EVAL fallback). */
    redisReply *r = redisCommand(rc, "SCRIPT FLUSH");
    freeReplyObject(r);
    r = redisCommand(rc, "SCRIPT EXISTS %s", rscript_sha(0));
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    CHECK_EQ(r->element[0]->integer, 0);
    freeReplyObject(r);
    ax_redis_queue *q = queue();
    ax_redis_spec sp = {.kind = "k", .priority = AX_PRIO_HIGH, .timeout_ms = 1000};
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), AX_EFULL);
    r = redisCommand(rc, "SCRIPT EXISTS %s", rscript_sha(0)); /* EVAL cached it */
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    CHECK_EQ(r->element[0]->integer, 1);
    freeReplyObject(r);
    /* Refusals are invalid arguments, not server trips. */
    sp.timeout_ms = 0;
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), AX_EINVAL);
    sp.timeout_ms = 1000;
    sp.kind = "";
    CHECK_EQ(ax_redis_submit(NULL, q, &sp, 5000, NULL), AX_EINVAL);
    ax_redis_queue_free(q);

    /* A batch: one round trip, each message admitted alone and in order --
     * the first 20 fit NORMAL's bound, the rest are refused; an invalid
     * spec fails alone. After SCRIPT FLUSH the batch goes again as EVAL. */
    rs_int(rc, "SCRIPT FLUSH");
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "batch";
    qc.conn.port = (uint16_t)port;
    qc.capacity[AX_PRIO_NORMAL] = 20;
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    enum { B = 30 };
    ax_redis_spec specs[B];
    int rcs[B];
    char ids[B][AX_REDIS_ID_MAX];
    for (int i = 0; i < B; i++)
        specs[i] = (ax_redis_spec){.kind = "k", .timeout_ms = 1000};
    specs[5].timeout_ms = 0; /* invalid: not sent */
    CHECK_EQ(ax_redis_submit_batch(NULL, q, specs, B, 5000, rcs, ids), 0);
    for (int i = 0; i < B; i++)
        CHECK_EQ(rcs[i], i == 5 ? AX_EINVAL : i <= 20 ? 0 : AX_EFULL);
    for (int i = 0; i <= 20; i++)
        for (int k = 0; k < i; k++)
            if (i != 5 && k != 5)
                CHECK(strcmp(ids[i], ids[k]) != 0);
    CHECK_EQ(rs_int(rc, "XLEN ax:{batch}:normal"), 20);
    CHECK_EQ(ax_redis_submit_batch(NULL, q, specs, 0, 5000, rcs, ids), AX_EINVAL);

    /* Many tasks submitting at once share the pool, one connection each. */
    ax_sched *s = test_sched(2, 64);
    static struct prod many[32];
    rs_int(rc, "DEL ax:{batch}:normal ax:{batch}:conf");
    qc.capacity[AX_PRIO_NORMAL] = 1000;
    ax_redis_queue_free(q);
    CHECK_EQ(ax_redis_queue_new(&qc, &q), 0);
    for (int i = 0; i < 32; i++) {
        many[i] = (struct prod){.q = q, .prio = AX_PRIO_NORMAL, .n = 20};
        ax_spec sp2 = {.fn = produce_task, .arg = &many[i], .timeout_ms = 60000};
        CHECK_EQ(ax_submit(s, &sp2, NULL), 0);
    }
    for (int i = 0; i < 32; i++) {
        CHECK(WAIT_UNTIL(atomic_load(&many[i].done), 60000));
        CHECK_EQ(many[i].c.ok, 20);
    }
    CHECK_EQ(rs_int(rc, "XLEN ax:{batch}:normal"), 640);
    ax_free(s);
    ax_redis_queue_free(q);
    /* The shed line where the local scheduler puts it, for the same ratio:
     * a line between two loads is reached, not passed (0.5 of 15: admitted
     * at 7, shed at 8); the ratio reaches the script with every digit
     * ("%.6f" moved 0.4000004's line from 7 to 6, and turned 4.9e-7 into
     * 0, which shed into an empty queue: review). */
    static const double ratios[] = {0.5, 0.4000004, 0.4666666, 0.666666667, 4.9e-7, 1.0};
    for (size_t r = 0; r < sizeof ratios / sizeof *ratios; r++) {
        ax_redis_queue_config lc;
        ax_redis_queue_config_default(&lc);
        char name[32];
        snprintf(name, sizeof name, "adm-line-%zu", r);
        lc.name = name;
        lc.conn.port = (uint16_t)port;
        lc.capacity[AX_PRIO_HIGH] = lc.capacity[AX_PRIO_NORMAL] = lc.capacity[AX_PRIO_LOW] = 5;
        lc.shed_ratio = ratios[r];
        ax_redis_queue *lq;
        CHECK_EQ(ax_redis_queue_new(&lc, &lq), 0);
        ax_config cfg;
        ax_config_default(&cfg);
        cfg.workers = 1;
        cfg.capacity[AX_PRIO_HIGH] = cfg.capacity[AX_PRIO_NORMAL] = cfg.capacity[AX_PRIO_LOW] = 5;
        cfg.shed_ratio = ratios[r];
        ax_sched *ls;
        CHECK_EQ(ax_new(&cfg, &ls), 0);
        CHECK_EQ(ax_pause(ls), 0);
        int shed_remote = -1, shed_local = -1;
        for (int load = 0; load < 15; load++) {
            /* a LOW into the empty queue, five HIGH, then LOW until refused */
            ax_priority p = load >= 1 && load <= 5 ? AX_PRIO_HIGH : AX_PRIO_LOW;
            ax_redis_spec sp = {.kind = "k", .priority = p, .payload = "x", .len = 1,
                                .timeout_ms = 1000};
            int rrc = ax_redis_submit(NULL, lq, &sp, 5000, NULL);
            ax_spec ls_sp = {.fn = noop_fn, .priority = p, .timeout_ms = 1000};
            int lrc = ax_submit(ls, &ls_sp, NULL);
            if (rrc == AX_ESHED && shed_remote < 0)
                shed_remote = load;
            if (lrc == AX_ESHED && shed_local < 0)
                shed_local = load;
            if (rrc != 0 || lrc != 0)
                break;
        }
        fprintf(stderr, "shed_ratio %.9g: shed at load %d locally, %d in redis\n", ratios[r],
                shed_local, shed_remote);
        CHECK_EQ(shed_remote, shed_local);
        if (ratios[r] == 0.5)
            CHECK_EQ(shed_local, 8);
        if (ratios[r] == 4.9e-7)
            CHECK_EQ(shed_local, 6); /* the LOW into the empty one admitted */
        ax_free(ls);
        ax_redis_queue_free(lq);
    }
    redisFree(rc);
    return 0;
}
