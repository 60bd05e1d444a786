/* ax_bench.h - helpers for the benchmark programs that drive ax through its
 * public API (include/ax.h) only. */
#ifndef AX_BENCH_AX_BENCH_H
#define AX_BENCH_AX_BENCH_H

#include "bench_util.h"

#include "ax.h"

/* Inserted in the printed keys: "" linked to libax.a, "_so" for the copies
 * of a program linked to libax.so (bench/CMakeLists.txt). */
#ifndef AB_LIB
#define AB_LIB ""
#endif

/* Exit with the code's name and ax's detail when an ax call fails. */
static inline void ab_check(int rc, const char *what)
{
    if (rc != AX_OK) {
        fprintf(stderr, "%s: %s (%d) %s\n", what, ax_strerror(rc), rc, ax_error_detail());
        exit(1);
    }
}

/* Raise the bucket bounds to hold n_high / n_normal / n_low tasks at once
 * without reaching the shed threshold (shed_ratio of the total capacity). ax
 * caps the total, so a bound is only raised as far as the run needs. */
static inline void ab_room_for(ax_config *cfg, unsigned n_high, unsigned n_normal, unsigned n_low)
{
    unsigned want[AX_PRIO_COUNT];
    want[AX_PRIO_HIGH] = n_high;
    want[AX_PRIO_NORMAL] = n_normal;
    want[AX_PRIO_LOW] = n_low;
    unsigned total = 0, queued = n_high + n_normal + n_low;
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        if (cfg->capacity[p] < want[p] + 64)
            cfg->capacity[p] = want[p] + 64;
        total += cfg->capacity[p];
    }
    if (cfg->shed_ratio * total < (double)queued + 64.0)
        cfg->shed_ratio = 1.0;
}

/* A spec for fn(arg) with a timeout armed; on_done counts the latch down. */
static inline ax_spec ab_spec(ax_fn fn, void *arg, ax_priority prio, uint64_t timeout_ms,
                              ax_callback on_done, void *cb_arg)
{
    ax_spec s;
    memset(&s, 0, sizeof s);
    s.fn = fn;
    s.arg = arg;
    s.priority = prio;
    s.timeout_ms = timeout_ms;
    s.on_done = on_done;
    s.cb_arg = cb_arg;
    return s;
}

/* Failures seen by ab_done (a task that did not succeed). */
static atomic_long ab_failures;

/* on_done for benchmarks whose every task must succeed: counts the latch in
 * cb_arg down and remembers failures so the program can refuse its figure. */
static inline void ab_done(const ax_result *r, void *cb_arg)
{
    if (r->state != AX_STATE_SUCCEEDED) {
        if (atomic_fetch_add(&ab_failures, 1) < 3)
            fprintf(stderr, "task %llu ended %s: %s (%s)\n", (unsigned long long)r->id,
                    ax_state_name(r->state), ax_strerror(r->code), r->error);
    }
    bu_latch_count_down((struct bu_latch *)cb_arg);
}

/* Wait for the latch; exit if it times out or a task failed. */
static inline void ab_wait_all(struct bu_latch *l, unsigned timeout_s, const char *what)
{
    if (!bu_latch_wait(l, timeout_s)) {
        fprintf(stderr, "%s: %ld tasks still unfinished after %u s\n", what,
                atomic_load(&l->left), timeout_s);
        exit(1);
    }
    if (atomic_load(&ab_failures) != 0) {
        fprintf(stderr, "%s: %ld tasks did not succeed\n", what, atomic_load(&ab_failures));
        exit(1);
    }
}

#endif
