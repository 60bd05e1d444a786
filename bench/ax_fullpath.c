/* ax_fullpath.c - the full path of a task, from one submitting thread.
 *
 * The main thread ax_submit()s `tasks` empty tasks, priorities cycling
 * HIGH, NORMAL, LOW, each with a 1 s timeout armed; each goes through
 * admission, its priority bucket, quota-round dispatch, a coroutine on a
 * worker, completion and on_done (which counts a latch down). `workers`
 * worker threads (1, 2, or 4 = more workers than the 2 cores). Prints
 *   ax_fullpath_w<workers>_ns  (last on_done - first submit) / tasks
 * With batch=B (B > 1) the same tasks go through ax_submit_batch, B specs
 * per call (a burst: one lock section per 8), and it prints
 *   ax_fullpath_w<workers>_b<B>_ns
 * The thread pool and Go have no batch submission: their rows are the
 * per-task ones.
 * With split=1 it times the two pipelines of the full path apart, in two
 * rounds on one scheduler (the first grows the job table, the second finds
 * it grown): the same N tasks submitted while the workers are paused
 * (ax_pause: the submit loop alone, no worker touching the lock or the
 * buckets), then ax_resume until the last on_done (the workers alone,
 * draining the backlog). Prints
 *   ax_fullpath_w<workers>_submit_cold_ns, ..._drain_cold_ns
 *   ax_fullpath_w<workers>_submit_warm_ns, ..._drain_warm_ns
 * per task. No peer: the figures show which pipeline bounds the whole path
 * and what running both at once adds (src/SCALING.md).
 * With submitters=S (S > 1) S threads submit tasks/S each at once (a
 * pthread barrier starts them together), one task a call, and it prints
 *   ax_fullpath_w<workers>_s<S>_ns  (last on_done - first submitter's
 *                                    start after the barrier) / tasks
 * beside peer_threadpool's submitters=S: several request threads of one
 * service feeding one scheduler, the case where the lock has more than one
 * contender from outside.
 *
 * Per task, ax does what its peers do not:
 *   - admission (bucket bound, shed ratio, rate limit) and an id in the
 *     process-wide task table;
 *   - three priority buckets drained by quota rounds (the thread pool:
 *     strict priority; idiomatic Go: no priority);
 *   - the task queued beyond max_concurrency (500), where idiomatic Go
 *     blocks the submitter on its semaphore instead;
 *   - a deadline armed and cancelled in the worker's timing wheel (the
 *     pool: none on the task, only the submitter's timed wait);
 *   - a coroutine with its own stack, switched to and back;
 *   - on_done with an ax_result (state, code, wait/run times, trace id),
 *     and wait/run histograms.
 * What each peer does that ax does not:
 *   - idiomatic Go (go/idiomatic.go, GOMAXPROCS = workers): a goroutine, a
 *     context.WithTimeout (allocated, runtime timer armed and stopped), a
 *     semaphore channel send and receive, WaitGroup Add/Done;
 *   - the seed's Go scheduler (go/seed.go + go/fullpath.go): channel round
 *     trips to its loop goroutine, two goroutines, a context timer, a done
 *     channel, select, recover;
 *   - the thread pool (peer_threadpool.c, threads = workers): a malloc'd
 *     task + future (mutex + condvar initialised and destroyed), a condvar
 *     signal per submission, the submitter's pthread_cond_timedwait per
 *     future.
 * bench/run also runs this program under callgrind at two task counts for
 * "instructions per task".
 */
#include "ax_bench.h"

static int empty(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

/* One of `submitters` threads: submits its share, priorities cycling. */
struct submitter {
    ax_sched *s;
    struct bu_latch *done;
    pthread_barrier_t *go;
    long first, count;
    uint64_t t0; /* its start, read after the barrier */
};

static void *submit_share(void *arg)
{
    struct submitter *sub = arg;
    static const ax_priority cycle[3] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    ax_spec spec = ab_spec(empty, NULL, AX_PRIO_NORMAL, 1000, ab_done, sub->done);
    pthread_barrier_wait(sub->go);
    sub->t0 = bu_now_ns();
    for (long i = sub->first; i < sub->first + sub->count; i++) {
        spec.priority = cycle[i % 3];
        int rc = ax_submit(sub->s, &spec, NULL);
        if (rc != 0) {
            fprintf(stderr, "ax_submit #%ld: %s %s\n", i, ax_strerror(rc), ax_error_detail());
            exit(1);
        }
    }
    return NULL;
}

/* submitters=S: S threads at once; time zero is the first of them to
 * start after the barrier (not the main thread's own return from it, which
 * may come later: six threads on two CPUs). */
static void run_submitters(ax_sched *s, long tasks, unsigned workers, unsigned nsub)
{
    struct bu_latch done;
    bu_latch_init(&done, tasks);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, nsub + 1);
    struct submitter *subs = bu_xcalloc(nsub, sizeof *subs);
    pthread_t *tids = bu_xcalloc(nsub, sizeof *tids);
    for (unsigned k = 0; k < nsub; k++) {
        subs[k] = (struct submitter){.s = s, .done = &done, .go = &go,
                                     .first = tasks * k / nsub,
                                     .count = tasks * (k + 1) / nsub - tasks * k / nsub};
        if (pthread_create(&tids[k], NULL, submit_share, &subs[k]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    pthread_barrier_wait(&go);
    ab_wait_all(&done, 600, "fullpath submitters");
    uint64_t t0 = UINT64_MAX;
    for (unsigned k = 0; k < nsub; k++) {
        pthread_join(tids[k], NULL);
        if (subs[k].t0 < t0)
            t0 = subs[k].t0;
    }
    printf("ax_fullpath%s_w%u_s%u_ns %.2f\n", AB_LIB, workers, nsub,
           (double)(done.done_ns - t0) / (double)tasks);
    pthread_barrier_destroy(&go);
    free(subs);
    free(tids);
}

int main(int argc, char **argv)
{
    long tasks = (long)bu_arg(argc, argv, "tasks", 200000);
    unsigned workers = (unsigned)bu_arg(argc, argv, "workers", 1);
    long batch = (long)bu_arg(argc, argv, "batch", 1);
    bool split = bu_arg(argc, argv, "split", 0) != 0;
    uint64_t nsub_arg = bu_arg(argc, argv, "submitters", 1);
    bu_args_done(argc, argv);
    unsigned nsub = nsub_arg > 256 ? 0 : (unsigned)nsub_arg; /* 0: refused below */
    if (tasks < 1) {
        fprintf(stderr, "ax_fullpath: tasks=%ld: at least 1\n", tasks);
        return 2;
    }
    if (batch < 1 || batch > 4096) {
        fprintf(stderr, "ax_fullpath: batch=%ld: 1 to 4096\n", batch);
        return 2;
    }
    if (nsub < 1 || nsub > 256 || (nsub > 1 && (batch > 1 || split))) {
        fprintf(stderr, "ax_fullpath: submitters=%llu: 1 to 256, without batch= or split=\n",
                (unsigned long long)nsub_arg);
        return 2;
    }

    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = workers;
    ab_room_for(&cfg, (unsigned)tasks / 3 + 1, (unsigned)tasks / 3 + 1, (unsigned)tasks / 3 + 1);
    ax_sched *s;
    ab_check(ax_new(&cfg, &s), "ax_new");

    static const ax_priority cycle[3] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    if (nsub > 1) {
        run_submitters(s, tasks, workers, nsub);
        ab_check(ax_shutdown(s, 1000), "ax_shutdown");
        ax_free(s);
        return 0;
    }
    if (split) {
        if (batch > 1) {
            fprintf(stderr, "ax_fullpath: split=1 submits one task a call (no batch=)\n");
            return 2;
        }
        static const char *round_name[2] = {"cold", "warm"};
        for (int round = 0; round < 2; round++) {
            struct bu_latch done;
            bu_latch_init(&done, tasks);
            ax_spec spec = ab_spec(empty, NULL, AX_PRIO_NORMAL, 1000, ab_done, &done);
            ab_check(ax_pause(s), "ax_pause");
            uint64_t t0 = bu_now_ns();
            for (long i = 0; i < tasks; i++) {
                spec.priority = cycle[i % 3];
                ab_check(ax_submit(s, &spec, NULL), "ax_submit");
            }
            uint64_t t1 = bu_now_ns();
            ab_check(ax_resume(s), "ax_resume");
            ab_wait_all(&done, 600, "fullpath split");
            printf("ax_fullpath%s_w%u_submit_%s_ns %.2f\n", AB_LIB, workers, round_name[round],
                   (double)(t1 - t0) / (double)tasks);
            printf("ax_fullpath%s_w%u_drain_%s_ns %.2f\n", AB_LIB, workers, round_name[round],
                   (double)(done.done_ns - t1) / (double)tasks);
        }
        ab_check(ax_shutdown(s, 1000), "ax_shutdown");
        ax_free(s);
        return 0;
    }
    struct bu_latch done;
    bu_latch_init(&done, tasks);
    ax_spec spec = ab_spec(empty, NULL, AX_PRIO_NORMAL, 1000, ab_done, &done);
    ax_spec *many = batch > 1 ? calloc((size_t)batch, sizeof *many) : NULL;
    uint64_t t0 = bu_now_ns();
    if (!many) {
        for (long i = 0; i < tasks; i++) {
            spec.priority = cycle[i % 3];
            int rc = ax_submit(s, &spec, NULL);
            if (rc != 0) {
                fprintf(stderr, "ax_submit #%ld: %s %s\n", i, ax_strerror(rc), ax_error_detail());
                exit(1);
            }
        }
    } else {
        for (long i = 0; i < tasks; i += batch) {
            long k = tasks - i < batch ? tasks - i : batch;
            for (long j = 0; j < k; j++) {
                many[j] = spec;
                many[j].priority = cycle[(i + j) % 3];
            }
            int rc = ax_submit_batch(s, many, (size_t)k, NULL, NULL);
            if (rc != 0) {
                fprintf(stderr, "ax_submit_batch at #%ld: %s %s\n", i, ax_strerror(rc),
                        ax_error_detail());
                exit(1);
            }
        }
    }
    ab_wait_all(&done, 600, "fullpath");
    if (many)
        printf("ax_fullpath%s_w%u_b%ld_ns %.2f\n", AB_LIB, workers, batch,
               (double)(done.done_ns - t0) / (double)tasks);
    else
        printf("ax_fullpath%s_w%u_ns %.2f\n", AB_LIB, workers, (double)(done.done_ns - t0) / (double)tasks);
    free(many);
    ab_check(ax_shutdown(s, 1000), "ax_shutdown");
    ax_free(s);
    return 0;
}
