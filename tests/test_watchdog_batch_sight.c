/* test_watchdog_batch_sight.c - a batch a worker picks may be handed back
 * by the watchdog only after HOLD_MS (10 ms) without a switch since it was
 * picked, not since the worker's last switch.
 *
 * The defect (review of the first-sight fix, 398de6d): a worker held
 * legitimately by a 15 ms on_done of its own, then picking a new batch
 * [A, B], kept the sequence the watchdog had judged held; any stall before
 * A's first switch (a new stack's mmap, a page fault, a preemption of a
 * few ms) and the watchdog's next poll handed B back: A, which yields
 * once, was resumed before B, behind it in the same batch, had started
 * (2 runs in 20 with no stall at all, 20 of 20 with 4 ms).
 *
 * Made deterministic: J0 ends in its bucket (its deadline passed while
 * queued) and its on_done, inline on the one worker, spins 15 ms, then
 * submits A and B and arms a 4 ms stall inside the worker's next stack
 * allocation (this test replaces madvise and mprotect, which a new stack
 * slab calls for its guard page): A's start, the worker's first run.
 * Checked: if A was resumed before B started, that is a hand-back, which
 * is the watchdog's right only if A entered 10 ms or more after the pick
 * (the on_done's end precedes it); the old code: ~4 ms. Then the ends.
 *
 * The watchdog is held at its naming (pthread_setname_np, the first thing
 * it does) until J0's on_done begins: else, on a machine that kept the
 * worker off its CPU 10 ms past J0's deadline, the watchdog expired J0
 * itself and its on_done ran on the callback pool, where the stall was
 * armed for a thread that allocates no stack (CI's aarch64 stage under
 * qemu: "stalled == 1 (0 vs 1)"). */
#include "util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

static atomic_int gate_wd; /* the watchdog waits at its naming for this */
static int (*real_setname)(pthread_t, const char *);

/* libax is linked in statically: its calls bind to this one. */
int pthread_setname_np(pthread_t th, const char *name)
{
    if (strcmp(name, "ax-watchdog") == 0)
        WAIT_UNTIL(atomic_load(&gate_wd), 60000);
    return real_setname(th, name);
}

static int (*real_madvise)(void *, size_t, int);
static int (*real_mprotect)(void *, size_t, int);
static atomic_int armed, stalled;
static pthread_t armed_th;

static void maybe_stall(void)
{
    if (atomic_load(&armed) && pthread_equal(pthread_self(), armed_th) &&
        atomic_exchange(&armed, 0)) {
        uint64_t end = ax_now_ns() + 4000000u;
        while (ax_now_ns() < end)
            ;
        atomic_store(&stalled, 1);
    }
}

/* libax is linked in statically: its calls bind to these. */
int madvise(void *a, size_t l, int advice)
{
    maybe_stall();
    return real_madvise(a, l, advice);
}

int mprotect(void *a, size_t l, int prot)
{
    maybe_stall();
    return real_mprotect(a, l, prot);
}

static ax_sched *S;
static atomic_int b_started, a_before_b, a_done, b_done, j0_done_n;
static atomic_ullong a_in_ns, picked_after_ns;

static int task_b(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&b_started, 1);
    return 0;
}

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_in_ns, ax_now_ns());
    ax_yield(t);
    if (!atomic_load(&b_started))
        atomic_store(&a_before_b, 1);
    return 0;
}

static int never(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void count_done(const ax_result *r, void *arg)
{
    CHECK_EQ(r->state, AX_STATE_SUCCEEDED);
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void j0_done(const ax_result *r, void *arg)
{
    (void)arg;
    CHECK_EQ(r->state, AX_STATE_TIMED_OUT);
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    CHECK(strcmp(name, "ax-worker-0") == 0); /* inline on the worker: the watchdog waits */
    atomic_store(&gate_wd, 1);
    uint64_t end = ax_now_ns() + 15000000u; /* held: past HOLD_MS */
    while (ax_now_ns() < end)
        ;
    ax_spec a = {.fn = task_a, .timeout_ms = 10000, .on_done = count_done, .cb_arg = &a_done};
    ax_spec b = {.fn = task_b, .timeout_ms = 10000, .on_done = count_done, .cb_arg = &b_done};
    CHECK_EQ(ax_submit(S, &a, NULL), AX_OK);
    CHECK_EQ(ax_submit(S, &b, NULL), AX_OK);
    armed_th = pthread_self();
    atomic_store(&picked_after_ns, ax_now_ns());
    atomic_store(&armed, 1);
    atomic_fetch_add(&j0_done_n, 1);
}

int main(void)
{
    real_madvise = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "madvise");
    real_mprotect = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "mprotect");
    real_setname = (int (*)(pthread_t, const char *))dlsym(RTLD_NEXT, "pthread_setname_np");
    CHECK(real_madvise != NULL && real_mprotect != NULL && real_setname != NULL);
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    S = test_sched_cfg(&c);
    CHECK_EQ(ax_pause(S), AX_OK);
    /* A deadline 50 ms ahead: 1 ms had passed before the submit under
     * qemu-user (AX_EINVAL, a deadline already past: CI). */
    uint64_t deadline = ax_now_ns() + 50000000u;
    ax_spec j0 = {.fn = never, .timeout_ms = 10000, .deadline_ns = deadline, .on_done = j0_done};
    CHECK_EQ(ax_submit(S, &j0, NULL), AX_OK);
    uint64_t until = deadline + 4000000u; /* past its deadline by 4 ms: the wheel's ticks */
    while (ax_now_ns() < until)
        ;
    CHECK_EQ(ax_resume(S), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&a_done) == 1 && atomic_load(&b_done) == 1, 30000 * TEST_SLOW));
    CHECK_EQ(atomic_load(&stalled), 1); /* the stall happened where it was meant to */
    if (atomic_load(&a_before_b)) {
        uint64_t d = atomic_load(&a_in_ns) - atomic_load(&picked_after_ns);
        fprintf(stderr, "A resumed before B started; A entered %llu us after the pick\n",
                (unsigned long long)(d / 1000u));
        CHECK(d >= 10000000u);
    }
    CHECK_EQ(ax_shutdown(S, 5000), AX_OK);
    ax_free(S);
    CHECK_EQ(atomic_load(&j0_done_n), 1);
    CHECK_EQ(atomic_load(&a_done), 1);
    CHECK_EQ(atomic_load(&b_done), 1);
    return 0;
}
