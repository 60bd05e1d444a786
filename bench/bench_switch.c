/* bench_switch.c - cost of one coroutine switch.
 *
 * Two coroutines ping-pong (A -> B -> A ...) 10,000,000 switches per run;
 * the figure is the median of 5 runs, in ns per switch (one direction).
 * The same ping-pong with raw glibc getcontext/makecontext/swapcontext is
 * printed for comparison (fewer switches: each costs a sigprocmask syscall).
 *
 * Output (one "name value" per line, for scripts):
 *   coro_switch_ns 4.2
 *   ucontext_switch_ns 250.0
 */
#define _GNU_SOURCE
#include "coro/coro.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>

#define RUNS 5
#define CORO_SWITCHES 10000000L
#define UC_SWITCHES 1000000L
#define STACK (64 * 1024)

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

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* ---- ax_coro -------------------------------------------------------------- */

static struct ax_coro c_main, c_a, c_b;
static volatile long c_left;

static void coro_a(void *arg)
{
    (void)arg;
    for (;;) {
        while (c_left > 0) {
            c_left = c_left - 1;
            ax_coro_switch(&c_a, &c_b);
        }
        ax_coro_switch(&c_a, &c_main);
    }
}

static void coro_b(void *arg)
{
    (void)arg;
    for (;;) {
        c_left = c_left - 1;
        ax_coro_switch(&c_b, &c_a);
    }
}

static double bench_coro(void)
{
    void *sa = malloc(STACK), *sb = malloc(STACK);
    double ns[RUNS];
    ax_coro_init_main(&c_main);
    ax_coro_init(&c_a, sa, STACK, coro_a, NULL);
    ax_coro_init(&c_b, sb, STACK, coro_b, NULL);
    c_left = 100000; /* warm-up */
    ax_coro_switch(&c_main, &c_a);
    for (int r = 0; r < RUNS; r++) {
        c_left = CORO_SWITCHES;
        double t0 = now_ns();
        ax_coro_switch(&c_main, &c_a);
        ns[r] = (now_ns() - t0) / (double)(CORO_SWITCHES + 2);
    }
    /* a and b stay parked; their stacks are reclaimed at exit */
    return median(ns, RUNS);
}

/* ---- raw ucontext --------------------------------------------------------- */

static ucontext_t u_main, u_a, u_b;
static volatile long u_left;

static void uc_a(void)
{
    for (;;) {
        while (u_left > 0) {
            u_left = u_left - 1;
            swapcontext(&u_a, &u_b);
        }
        swapcontext(&u_a, &u_main);
    }
}

static void uc_b(void)
{
    for (;;) {
        u_left = u_left - 1;
        swapcontext(&u_b, &u_a);
    }
}

static double bench_ucontext(void)
{
    double ns[RUNS];
    getcontext(&u_a);
    u_a.uc_stack.ss_sp = malloc(STACK);
    u_a.uc_stack.ss_size = STACK;
    makecontext(&u_a, uc_a, 0);
    getcontext(&u_b);
    u_b.uc_stack.ss_sp = malloc(STACK);
    u_b.uc_stack.ss_size = STACK;
    makecontext(&u_b, uc_b, 0);
    u_left = 10000;
    swapcontext(&u_main, &u_a);
    for (int r = 0; r < RUNS; r++) {
        u_left = UC_SWITCHES;
        double t0 = now_ns();
        swapcontext(&u_main, &u_a);
        ns[r] = (now_ns() - t0) / (double)(UC_SWITCHES + 2);
    }
    return median(ns, RUNS);
}

int main(void)
{
    printf("# backend %s, median of %d runs\n", ax_coro_backend(), RUNS);
    printf("coro_switch_ns %.1f\n", bench_coro());
    printf("ucontext_switch_ns %.1f\n", bench_ucontext());
    return 0;
}
