/* bench_wheel.c - cost of the timing wheel's hot operations (src/wheel.c).
 *
 * Prints one "name value" line per figure, each the median of 5 runs:
 *   wheel_arm_cancel_ns        add+del of one timeout, back to back, with a
 *                              steady background of pending timers (the
 *                              "arm + cancel a task timeout" cost)
 *   wheel_arm_cancel_batch_ns  same pair, but 1024 timeouts in flight before
 *                              they are cancelled (slots hold neighbours)
 *   wheel_{insert,cancel,expire}_ns_<N>  per-op cost with N pending timers,
 *                              N = 10k, 100k, 1M, expiries uniform over 60 s
 *                              of 1 ms ticks; expire drives the wheel like a
 *                              worker: advance(ax_wheel_next()) until empty.
 *                              Nodes get random expiries, so at 1M (24 MB of
 *                              nodes) expire is bound by cache misses on the
 *                              list walks (2 cascades + 1 expiry per node);
 *   wheel_expire_memorder_ns_<N>  the same with node memory order following
 *                              expiry order: the wheel's own cost.
 * Build: cc -std=c11 -O2 -Isrc src/wheel.c bench/bench_wheel.c -o bench_wheel
 */
#define _POSIX_C_SOURCE 200809L
#include "wheel.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RUNS 5
#define SPAN_MS 60000u

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnd(void) /* xorshift64*: cheap and deterministic */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v)
{
    qsort(v, RUNS, sizeof *v, cmp_double);
    return v[RUNS / 2];
}

static struct ax_wheel wheel; /* 3.2 KB: static, like a worker's */

/* Background timers keep several levels populated, as in a busy worker. */
static struct ax_wheel_node *background(size_t n)
{
    struct ax_wheel_node *bg = calloc(n, sizeof *bg);
    if (!bg) abort();
    for (size_t i = 0; i < n; i++)
        ax_wheel_add(&wheel, &bg[i], wheel.now + 1 + rnd() % SPAN_MS);
    return bg;
}

static double bench_arm_cancel(size_t inflight)
{
    enum { OPS = 1 << 24 };
    struct ax_wheel_node *nodes = calloc(inflight, sizeof *nodes);
    uint64_t *exp = malloc(1024 * sizeof *exp);
    if (!nodes || !exp) abort();
    for (size_t i = 0; i < 1024; i++) /* timeouts of 1..30 s, precomputed */
        exp[i] = wheel.now + 1000 + rnd() % 29000;

    double t0 = now_ns();
    for (size_t op = 0; op < OPS; op += inflight) {
        for (size_t i = 0; i < inflight; i++)
            ax_wheel_add(&wheel, &nodes[i], exp[(op + i) & 1023]);
        for (size_t i = 0; i < inflight; i++)
            ax_wheel_del(&wheel, &nodes[i]);
    }
    double t1 = now_ns();
    free(exp);
    free(nodes);
    return (t1 - t0) / OPS;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* memorder: node i gets the i-th smallest expiry, so walking a slot walks
 * memory forwards. Otherwise expiries are random per node and every list
 * walk over a 24 MB node array is a chain of cache misses. */
static void bench_scale(size_t n, int memorder, double *ins, double *can, double *exp)
{
    struct ax_wheel_node *nodes = calloc(n, sizeof *nodes);
    uint64_t *when = malloc(n * sizeof *when);
    if (!nodes || !when) abort();

    ax_wheel_init(&wheel, 1000);
    for (size_t i = 0; i < n; i++)
        when[i] = wheel.now + 1 + rnd() % SPAN_MS;
    if (memorder) qsort(when, n, sizeof *when, cmp_u64);

    double t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        ax_wheel_add(&wheel, &nodes[i], when[i]);
    double t1 = now_ns();
    for (size_t i = 0; i < n; i++)
        ax_wheel_del(&wheel, &nodes[i]);
    double t2 = now_ns();

    for (size_t i = 0; i < n; i++)
        ax_wheel_add(&wheel, &nodes[i], when[i]);
    size_t fired = 0;
    double t3 = now_ns();
    while (ax_wheel_count(&wheel)) {
        struct ax_wheel_node *out = NULL;
        fired += ax_wheel_advance(&wheel, ax_wheel_next(&wheel), &out);
    }
    double t4 = now_ns();
    if (fired != n) abort();

    *ins = (t1 - t0) / (double)n;
    *can = (t2 - t1) / (double)n;
    *exp = (t4 - t3) / (double)n;
    free(when);
    free(nodes);
}

int main(void)
{
    double v[RUNS];

    for (int r = 0; r < RUNS; r++) {
        ax_wheel_init(&wheel, 1000);
        struct ax_wheel_node *bg = background(10000);
        v[r] = bench_arm_cancel(1);
        free(bg);
    }
    printf("wheel_arm_cancel_ns %.1f\n", median(v));

    for (int r = 0; r < RUNS; r++) {
        ax_wheel_init(&wheel, 1000);
        struct ax_wheel_node *bg = background(10000);
        v[r] = bench_arm_cancel(1024);
        free(bg);
    }
    printf("wheel_arm_cancel_batch_ns %.1f\n", median(v));

    static const size_t sizes[] = {10000, 100000, 1000000};
    static const char *names[] = {"10k", "100k", "1M"};
    for (int s = 0; s < 3; s++) {
        double ins[RUNS], can[RUNS], exp[RUNS];
        for (int r = 0; r < RUNS; r++)
            bench_scale(sizes[s], 0, &ins[r], &can[r], &exp[r]);
        printf("wheel_insert_ns_%s %.1f\n", names[s], median(ins));
        printf("wheel_cancel_ns_%s %.1f\n", names[s], median(can));
        printf("wheel_expire_ns_%s %.1f\n", names[s], median(exp));
        for (int r = 0; r < RUNS; r++)
            bench_scale(sizes[s], 1, &ins[r], &can[r], &exp[r]);
        printf("wheel_expire_memorder_ns_%s %.1f\n", names[s], median(exp));
    }
    return 0;
}
