/* bench_util.h - small helpers shared by the C benchmark programs (ax and the
 * thread-pool peer): clocks, RSS and CPU readings, a count-down latch,
 * percentiles and "key=value" arguments.
 *
 * Every benchmark program prints its figures as "name value" lines on stdout
 * (bench/run collects them) and diagnostics on stderr; it exits non-zero when
 * the work did not complete as expected, so a broken scheduler never yields a
 * flattering number.
 */
#ifndef AX_BENCH_UTIL_H
#define AX_BENCH_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t bu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleep until an absolute CLOCK_MONOTONIC time in ns. */
static inline void bu_sleep_until(uint64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000u),
                          .tv_nsec = (long)(t_ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static inline void bu_sleep_ms(uint64_t ms)
{
    bu_sleep_until(bu_now_ns() + ms * 1000000u);
}

/* Resident set size of this process, from /proc/self/statm. */
static inline int64_t bu_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2) {
        fprintf(stderr, "cannot read /proc/self/statm\n");
        exit(1);
    }
    fclose(f);
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

/* User + system CPU seconds of the whole process (all threads). getrusage is
 * used rather than /proc/self/stat because its resolution is 1 us, not a
 * 10 ms clock tick, which matters for "about zero". */
static inline double bu_cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* "name=value" from argv, or def. */
/* Arguments are key=value, each key once and known to the program:
 * bu_arg and bu_arg_str mark the arguments they read, and bu_args_done,
 * called after the last of them, refuses any left over (a misspelt
 * `submiters=4` used to run the default silently), like a repeated key or
 * a value that is not a whole number. Exit status 2 with a message. */
#define BU_MAX_ARGS 64
static unsigned char bu_used[BU_MAX_ARGS];

static inline const char *bu_prog(char **argv)
{
    const char *p = argv[0] ? strrchr(argv[0], '/') : NULL;
    return p ? p + 1 : argv[0] ? argv[0] : "bench";
}

/* The index of name=... in argv, or 0; marks it read. */
static inline int bu_find(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    int at = 0;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], name, n) != 0 || argv[i][n] != '=')
            continue;
        if (at) {
            fprintf(stderr, "%s: %s= given twice\n", bu_prog(argv), name);
            exit(2);
        }
        at = i;
    }
    if (at && at < BU_MAX_ARGS)
        bu_used[at] = 1;
    return at;
}

/* name=N, a whole number (decimal), or def when absent. */
static inline uint64_t bu_arg(int argc, char **argv, const char *name, uint64_t def)
{
    int i = bu_find(argc, argv, name);
    if (!i)
        return def;
    const char *v = argv[i] + strlen(name) + 1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno) {
        fprintf(stderr, "%s: %s=%s: not a whole number\n", bu_prog(argv), name, v);
        exit(2);
    }
    return x;
}

/* name=TEXT, or def when absent. */
static inline const char *bu_arg_str(int argc, char **argv, const char *name, const char *def)
{
    int i = bu_find(argc, argv, name);
    return i ? argv[i] + strlen(name) + 1 : def;
}

/* After the last bu_arg: refuse the arguments none of them read. */
static inline void bu_args_done(int argc, char **argv)
{
    if (argc > BU_MAX_ARGS) {
        fprintf(stderr, "%s: %d arguments: at most %d\n", bu_prog(argv), argc - 1,
                BU_MAX_ARGS - 1);
        exit(2);
    }
    for (int i = 1; i < argc; i++)
        if (!bu_used[i]) {
            fprintf(stderr, "%s: unknown argument '%s'\n", bu_prog(argv), argv[i]);
            exit(2);
        }
}

/* A count-down latch: only the last count_down takes the lock, so it costs
 * one atomic per task on the hot path. The count has 128 bytes to itself
 * (a line and the one the adjacent-line prefetcher pairs with it): a latch
 * on the submitting thread's stack shared its line with that thread's
 * locals, and in ax_spawn with `tasks`, which the spawning loop reads after
 * each submit, so every count-down also moved the submitter's line, and
 * the benchmarks measured that as the library's cost. */
struct bu_latch {
    _Alignas(128) atomic_long left;
    _Alignas(128) uint64_t done_ns; /* when the count reached zero */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static inline void bu_latch_init(struct bu_latch *l, long n)
{
    atomic_init(&l->left, n);
    l->done_ns = 0;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
}

static inline void bu_latch_count_down(struct bu_latch *l)
{
    if (atomic_fetch_sub(&l->left, 1) == 1) {
        uint64_t t = bu_now_ns();
        pthread_mutex_lock(&l->mu);
        l->done_ns = t;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
    }
}

/* Wait until zero or timeout_s passes; false on timeout. */
static inline bool bu_latch_wait(struct bu_latch *l, unsigned timeout_s)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_s;
    pthread_mutex_lock(&l->mu);
    while (atomic_load(&l->left) > 0 || l->done_ns == 0)
        if (pthread_cond_timedwait(&l->cv, &l->mu, &dl) == ETIMEDOUT)
            break;
    bool ok = atomic_load(&l->left) <= 0 && l->done_ns != 0;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

static inline int bu_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile (p in 0..100) of v[0..n); sorts v. */
static inline int64_t bu_percentile(int64_t *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, bu_cmp_i64);
    size_t k = (size_t)(p / 100.0 * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return v[k - 1];
}

static inline void *bu_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "out of memory (%zu x %zu)\n", n, size);
        exit(1);
    }
    return p;
}

#endif
