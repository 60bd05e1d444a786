/* test_wheel_lock.c - the worker's wheel lock (worker.c, "The wheel's
 * lock"): mutual exclusion between a worker's side (a plain store and a
 * load where membarrier is registered) and the watchdog's try-lock.
 *
 * One thread plays the worker (ax_current_worker is its struct), another
 * the watchdog; each adds to a plain counter inside the lock, read and
 * written apart with a pause between (a lost update needs only the two
 * sides inside at once). The counter must equal the worker's additions
 * plus the watchdog's successful try-locks, exactly. Without the
 * membarrier on the watchdog's side, the store buffer lets both in: with
 * it left out (a mutation of worker.c, not a mode of the library) this
 * lost 60-145 updates in 3 of 3 runs, 30-70 k in 5 of 5 of a review's,
 * and 0.7-8 k in 3 of 3 under qemu-aarch64.
 *
 * Also: a scheduler's timers and deadlines through the lock under a
 * watchdog that takes a held worker's wheel (test_watchdog and others
 * cover the behaviour; here the count of tasks and their states). */
#include "util.h"
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

static struct worker wk;
static volatile uint64_t counter;
static _Atomic bool stop;
static uint64_t own_adds;
static _Atomic uint64_t foreign_adds, foreign_fails;

static void pause_a_little(void)
{
    for (int i = 0; i < 20; i++)
        ax_cpu_relax();
}

static void *worker_side(void *arg)
{
    uint64_t ms = *(uint64_t *)arg, end = ax_now_ns() + ms * 1000000u, n = 0;
    ax_current_worker = &wk;
    for (uint64_t i = 0; (i & 255) || ax_now_ns() < end; i++, n++) {
        wheel_lock(&wk);
        uint64_t v = counter;
        pause_a_little();
        counter = v + 1;
        wheel_unlock(&wk);
        if ((i & 63) == 0)
            pause_a_little();
    }
    own_adds = n;
    ax_current_worker = NULL;
    return NULL;
}

static void *watchdog_side(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        if (wheel_trylock_foreign(&wk)) {
            uint64_t v = counter;
            pause_a_little();
            counter = v + 1;
            wheel_unlock_foreign(&wk);
            atomic_fetch_add(&foreign_adds, 1);
        } else {
            atomic_fetch_add(&foreign_fails, 1);
        }
        for (int i = 0; i < 200; i++) /* the worker's turn: most of the time */
            ax_cpu_relax();
    }
    return NULL;
}

static void exclusion(uint64_t ms)
{
    counter = 0;
    atomic_store(&stop, false);
    atomic_store(&foreign_adds, 0);
    atomic_store(&foreign_fails, 0);
    pthread_t a, b;
    CHECK_EQ(pthread_create(&b, NULL, watchdog_side, NULL), 0);
    CHECK_EQ(pthread_create(&a, NULL, worker_side, &ms), 0);
    pthread_join(a, NULL);
    atomic_store(&stop, true);
    pthread_join(b, NULL);
    printf("wheel lock (%s): worker %llu, watchdog %llu in (%llu refused), counter %llu\n",
           ax_wheel_asym ? "membarrier" : "exchange on both sides",
           (unsigned long long)own_adds, (unsigned long long)atomic_load(&foreign_adds),
           (unsigned long long)atomic_load(&foreign_fails), (unsigned long long)counter);
    CHECK_EQ(counter, own_adds + atomic_load(&foreign_adds));
    CHECK(atomic_load(&foreign_adds) > 0); /* both sides did get in */
}

/* The scheduler with the lock: sleepers, deadlines, and a hog holding its
 * worker past the watchdog's 10 ms (the watchdog try-locks that wheel,
 * expires its deadlines, hands back its to-start jobs). */
static atomic_int n_ok, n_timeout, n_other;
static int sleeper(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 1);
}
static int hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t end = ax_now_ns() + 300000000u; /* 300 ms without yielding */
    while (ax_now_ns() < end)
        ;
    return 0;
}
static void done(const ax_result *r, void *arg)
{
    (void)arg;
    if (r->state == AX_STATE_SUCCEEDED)
        atomic_fetch_add(&n_ok, 1);
    else if (r->state == AX_STATE_TIMED_OUT)
        atomic_fetch_add(&n_timeout, 1);
    else
        atomic_fetch_add(&n_other, 1);
}

static void through_sched(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    ax_sched *s = test_sched_cfg(&c);
    enum { ROUNDS = 10, SLEEPERS = 400 };
    int hogs = 0, sleepers = 0;
    for (int r = 0; r < ROUNDS; r++) {
        ax_spec h = {.fn = hog, .timeout_ms = 20, .on_done = done};
        CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
        hogs++;
        for (int i = 0; i < SLEEPERS; i++) {
            ax_spec sp = {.fn = sleeper, .timeout_ms = 5000, .on_done = done};
            CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
            sleepers++;
        }
        usleep(30000);
    }
    CHECK(WAIT_UNTIL(atomic_load(&n_ok) + atomic_load(&n_timeout) + atomic_load(&n_other) ==
                         hogs + sleepers,
                     60000));
    printf("scheduler: %d hogs, %d sleepers: %d succeeded, %d timed out, %d other\n", hogs,
           sleepers, atomic_load(&n_ok), atomic_load(&n_timeout), atomic_load(&n_other));
    /* Each hog runs 300 ms on a 20 ms timeout: the watchdog ends it (it
     * try-locks the hog's wheel) long before it returns. The sleepers
     * (1 ms, 5 s timeout) succeed, also those held behind a hog. */
    CHECK_EQ(atomic_load(&n_timeout), hogs);
    CHECK_EQ(atomic_load(&n_ok), sleepers);
    CHECK_EQ(atomic_load(&n_other), 0);
    ax_free(s);
}

int main(void)
{
    wheel_lock_setup();
    printf("membarrier registered: %s\n", ax_wheel_asym ? "yes" : "no");
    exclusion(500); /* ms */
    through_sched();
    printf("test_wheel_lock: ok\n");
    return 0;
}
