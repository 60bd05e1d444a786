/* ax_redis_e2e.c - libax_redis end to end: XADD -> handler -> XACK.
 *
 *   ax_redis_e2e port=P tasks=N [consumers=2] [slots=64] [workers=1] [batch=1000]
 *                [rate=R]
 *
 * One producer process (this one) and `consumers` consumer processes
 * (forked before the first submit), against the redis-server on
 * 127.0.0.1:P (bench/run starts it and flushes it before each run). Each
 * consumer is its own ax scheduler (`workers` threads, 1 by default: a
 * BullMQ worker process runs its jobs on one JavaScript thread) with one
 * ax_redis_consumer of `slots` slots and an empty handler. The producer
 * waits until every consumer has joined the group on every stream, then
 * sends the N messages (NORMAL, 60 s timeout) with ax_redis_submit_batch,
 * `batch` per round trip, with t == NULL (no scheduler in the producer).
 *
 * Measured, by CLOCK_REALTIME (the clock every process on the machine
 * shares):
 *   tasks/s  N / (last acknowledgement - first submit). A consumer's last
 *            acknowledgement is when its `succeeded` counter (written by
 *            the acker once XACK's script has run) last moved, read every
 *            millisecond by its main thread;
 *   submit -> start, p50 / p99: the producer writes the time it hands a
 *            batch to ax_redis_submit_batch into each message's payload
 *            (8 bytes); the handler subtracts it from its own start time.
 * With rate=R (messages/s) the producer paces itself instead: a batch of
 * R/100 messages (at least 1) every 10 ms, so that submit -> start is the
 * path's latency at a load both sides sustain, not the time a burst waits
 * behind the ones before it; only the latencies are printed then
 * (ax_redis_e2e_paced_p50_us, _p99_us).
 *
 * Every message must succeed exactly once (no retry, no dead letter, no
 * redelivery), else the program exits 1 and prints no figure.
 *
 * consumer CPU per task: the consumer processes' user + system time (wait4)
 * over N, start-up and shut-down included; less sensitive to other load on
 * the machine than tasks/s.
 *
 * Prints ax_redis_e2e_tasks_per_s, ax_redis_e2e_p50_us, ax_redis_e2e_p99_us,
 * ax_redis_e2e_cpu_us_per_task.
 */
#include "ax_bench.h"

#include <ax_redis.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

enum { MAX_CONSUMERS = 16 };

/* Shared by the producer and the consumers (MAP_SHARED before fork). */
struct shared {
    _Atomic uint64_t succeeded[MAX_CONSUMERS];   /* acknowledged successes, per consumer */
    _Atomic uint64_t last_ack_ns[MAX_CONSUMERS]; /* realtime of the last one */
    _Atomic uint64_t bad[MAX_CONSUMERS];         /* retried + dead + redelivered + ack_lost */
    atomic_int stop;
    _Atomic uint64_t nlat;
    int64_t lat_ns[]; /* submit -> start, one per execution */
};

static struct shared *sh;
static uint64_t n_tasks;

static uint64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The empty handler: only the latency sample. */
static int handler(ax_task *t, const ax_redis_msg *m, void *arg)
{
    (void)t, (void)arg;
    uint64_t start = real_ns(), sent;
    if (m->len != sizeof sent) return -1;
    memcpy(&sent, m->payload, sizeof sent);
    uint64_t i = atomic_fetch_add(&sh->nlat, 1);
    if (i < n_tasks) sh->lat_ns[i] = (int64_t)(start - sent);
    return 0;
}

static ax_redis_queue *open_queue(uint16_t port)
{
    ax_redis_queue_config qc;
    ax_redis_queue_config_default(&qc);
    qc.name = "e2e";
    qc.conn.port = port;
    /* room for every message at once, no shedding: the bench measures the
     * path, not admission refusals */
    qc.capacity[AX_PRIO_NORMAL] = (unsigned)n_tasks + 1000;
    qc.shed_ratio = 1.0;
    ax_redis_queue *q;
    ab_check(ax_redis_queue_new(&qc, &q), "ax_redis_queue_new");
    return q;
}

static void consumer(int i, uint16_t port, unsigned slots, unsigned workers)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = workers;
    cfg.max_concurrency = slots + 2; /* the puller and the acker hold one each */
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");
    ax_redis_queue *q = open_queue(port);
    ax_redis_consumer_config cc;
    ax_redis_consumer_config_default(&cc);
    char name[16];
    snprintf(name, sizeof name, "c%d", i);
    cc.name = name;
    cc.slots = slots;
    ax_redis_consumer *c;
    ab_check(ax_redis_consumer_new(s, q, &cc, &c), "ax_redis_consumer_new");
    ab_check(ax_redis_handle(c, "e2e", handler, NULL), "ax_redis_handle");
    ab_check(ax_redis_consumer_start(c), "ax_redis_consumer_start");
    uint64_t seen = 0;
    while (!atomic_load(&sh->stop)) {
        ax_redis_consumer_stats st;
        ax_redis_consumer_stats_get(c, &st);
        if (st.succeeded != seen) {
            seen = st.succeeded;
            atomic_store(&sh->last_ack_ns[i], real_ns());
            atomic_store(&sh->succeeded[i], seen);
        }
        atomic_store(&sh->bad[i], st.retried + st.dead + st.redelivered + st.ack_lost);
        usleep(1000);
    }
    int rc = ax_redis_consumer_stop(c, 10000);
    ax_free(s);
    ax_redis_consumer_free(c);
    ax_redis_queue_free(q);
    _exit(rc == AX_OK ? 0 : 1);
}

/* Clients blocked in a command (INFO clients): a consumer whose puller
 * found the streams empty waits in XREADGROUP BLOCK. */
static long blocked(ax_redis *r)
{
    redisReply *rep = NULL;
    if (ax_redis_command(NULL, r, 2000, &rep, "INFO clients") != AX_OK) return -1;
    const char *b = rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "blocked_clients:") : NULL;
    long n = b ? strtol(b + 16, NULL, 10) : 0;
    freeReplyObject(rep);
    return n;
}

int main(int argc, char **argv)
{
    uint16_t port = (uint16_t)bu_arg(argc, argv, "port", 0);
    n_tasks = bu_arg(argc, argv, "tasks", 100000);
    unsigned nc = (unsigned)bu_arg(argc, argv, "consumers", 2);
    unsigned slots = (unsigned)bu_arg(argc, argv, "slots", 64);
    unsigned workers = (unsigned)bu_arg(argc, argv, "workers", 1);
    size_t batch = bu_arg(argc, argv, "batch", 1000);
    uint64_t rate = bu_arg(argc, argv, "rate", 0);
    bu_args_done(argc, argv);
    if (rate)
        batch = rate / 100 ? rate / 100 : 1;
    if (!port || !n_tasks || !nc || nc > MAX_CONSUMERS || !batch || batch > AX_REDIS_BATCH_MAX) {
        fprintf(stderr,
                "usage: ax_redis_e2e port=P tasks=N [consumers=1..%d] [slots=64] "
                "[workers=1] [batch=1..%d] [rate=R]\n",
                MAX_CONSUMERS, AX_REDIS_BATCH_MAX);
        return 2;
    }
    size_t shsz = sizeof *sh + n_tasks * sizeof sh->lat_ns[0];
    sh = mmap(NULL, shsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pid_t pids[MAX_CONSUMERS];
    for (unsigned i = 0; i < nc; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* no consumer outlives a killed run */
            consumer((int)i, port, slots, workers);
        }
    }

    /* Ready: every consumer's puller waits in XREADGROUP BLOCK (the groups
     * exist and it found the streams empty), so the first message finds
     * them waiting. */
    ax_redis_config rc_cfg;
    ax_redis_config_default(&rc_cfg);
    rc_cfg.port = port;
    ax_redis *r;
    ab_check(ax_redis_new(&rc_cfg, &r), "ax_redis_new");
    uint64_t give_up = bu_now_ns() + 30000000000u;
    while (blocked(r) < (long)nc) {
        if (bu_now_ns() > give_up) {
            fprintf(stderr, "ax_redis_e2e: the consumers did not join within 30 s\n");
            return 1;
        }
        bu_sleep_ms(5);
    }

    ax_redis_queue *q = open_queue(port);
    ax_redis_spec *specs = bu_xcalloc(batch, sizeof *specs);
    uint64_t *stamps = bu_xcalloc(batch, sizeof *stamps);
    int *rcs = bu_xcalloc(batch, sizeof *rcs);
    for (size_t i = 0; i < batch; i++)
        specs[i] = (ax_redis_spec){.kind = "e2e",
                                   .priority = AX_PRIO_NORMAL,
                                   .payload = &stamps[i],
                                   .len = sizeof stamps[i],
                                   .timeout_ms = 60000};
    uint64_t t0 = real_ns(), next = bu_now_ns();
    for (uint64_t sent = 0; sent < n_tasks;) {
        size_t n = n_tasks - sent < batch ? (size_t)(n_tasks - sent) : batch;
        if (rate) { /* paced: this batch's turn */
            bu_sleep_until(next);
            next += (uint64_t)n * 1000000000u / rate;
        }
        uint64_t now = real_ns();
        for (size_t i = 0; i < n; i++)
            stamps[i] = now;
        ab_check(ax_redis_submit_batch(NULL, q, specs, n, 30000, rcs, NULL), "submit_batch");
        for (size_t i = 0; i < n; i++)
            ab_check(rcs[i], "submit_batch (one message)");
        sent += n;
    }
    uint64_t t_sent = real_ns(); /* the last batch is in its stream */

    uint64_t total = 0;
    give_up = bu_now_ns() + 300000000000u;
    for (;;) {
        total = 0;
        for (unsigned i = 0; i < nc; i++)
            total += atomic_load(&sh->succeeded[i]);
        if (total >= n_tasks || bu_now_ns() > give_up) break;
        bu_sleep_ms(5);
    }
    uint64_t t_end = 0, bad = 0;
    for (unsigned i = 0; i < nc; i++) {
        uint64_t l = atomic_load(&sh->last_ack_ns[i]);
        if (l > t_end) t_end = l;
        bad += atomic_load(&sh->bad[i]);
    }
    atomic_store(&sh->stop, 1);
    int failed = 0;
    double cpu_s = 0;
    for (unsigned i = 0; i < nc; i++) {
        int st;
        struct rusage ru;
        if (wait4(pids[i], &st, 0, &ru) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed = 1;
        cpu_s += (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    }
    uint64_t nlat = atomic_load(&sh->nlat);
    if (total != n_tasks || bad || nlat != n_tasks || failed) {
        fprintf(stderr,
                "ax_redis_e2e: %llu of %llu acknowledged, %llu handler runs, %llu "
                "retried/dead/redelivered/lost, consumer exit %s\n",
                (unsigned long long)total, (unsigned long long)n_tasks, (unsigned long long)nlat,
                (unsigned long long)bad, failed ? "failed" : "ok");
        return 1;
    }
    double secs = (double)(t_end - t0) / 1e9;
    int64_t p50 = bu_percentile(sh->lat_ns, n_tasks, 50);
    int64_t p99 = bu_percentile(sh->lat_ns, n_tasks, 99);
    const char *key = rate ? "ax_redis_e2e_paced" : "ax_redis_e2e";
    if (!rate)
        printf("%s_tasks_per_s %.0f\n", key, (double)n_tasks / secs);
    printf("%s_p50_us %.1f\n", key, (double)p50 / 1e3);
    printf("%s_p99_us %.1f\n", key, (double)p99 / 1e3);
    printf("%s_cpu_us_per_task %.2f\n", key, cpu_s * 1e6 / (double)n_tasks);
    if (!rate)
        printf("%s_submit_per_s %.0f\n", key, (double)n_tasks * 1e9 / (double)(t_sent - t0));
    fprintf(stderr, "ax_redis_e2e: %llu tasks in %.3f s, submitted in %.3f s\n",
            (unsigned long long)n_tasks, secs, (double)(t_sent - t0) / 1e9);
    free(specs);
    free(stamps);
    free(rcs);
    ax_redis_queue_free(q);
    ax_redis_free(r);
    return 0;
}
