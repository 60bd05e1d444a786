/* An attempt the watchdog ends while its worker is held between arming the
 * attempt's deadline and entering its function (the OS preempted the
 * worker there for longer than the timeout) never ran: its result says
 * run_ns 0, as every attempt that never ran does (libax_redis reads 0 as
 * "the handler never ran"), and its class gets no latency sample and no
 * failure from it. The old code reported the timeout as its run time and
 * counted it as a timed-out call of the class.
 *
 * The preemption is made deterministic by holding the worker inside the
 * switch into the task's coroutine: this test replaces swapcontext, which
 * only the ucontext backend calls (scripts/test's clang-ucontext stage,
 * -DAX_CORO_UCONTEXT=ON). With the asm switch nothing can hold the worker
 * there, and the test says so and is skipped (exit 77). */
#include "util.h"

#include <dlfcn.h>
#include <ucontext.h>

static atomic_int hold_next, held, done;
static ax_result res;
static atomic_int entered;

/* libax is linked in statically: its swapcontext calls bind to this one. */
int swapcontext(ucontext_t *restrict from, const ucontext_t *restrict to)
{
    static int (*real)(ucontext_t *restrict, const ucontext_t *restrict);
    if (!real)
        real = (int (*)(ucontext_t *restrict, const ucontext_t *restrict))dlsym(RTLD_NEXT,
                                                                                   "swapcontext");
    if (atomic_exchange(&hold_next, 0)) {
        atomic_store(&held, 1);
        /* Held until the watchdog has ended the attempt (a liveness bound
         * only: it does so after ~10 ms without a switch). */
        WAIT_UNTIL(atomic_load(&done), 60000);
    }
    return real(from, to);
}

static int never(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    atomic_fetch_add(&entered, 1);
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    res = *r;
    atomic_store(&done, 1);
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_class_config cc;
    ax_class_config_default(&cc);
    cc.name = "held";
    cc.timeout_ms = 20;
    cc.adaptive = false; /* rtt_short_ns is then the average of every sample */
    cc.breaker = true;
    unsigned cls;
    CHECK_EQ(ax_class_register(s, &cc, &cls), 0);
    /* The worker is idle (no task yet): the next switch it makes is the
     * one into this task's coroutine. */
    usleep(50000);
    atomic_store(&hold_next, 1);
    ax_spec sp = {.fn = never, .class_id = cls, .on_done = on_done};
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&done), 60000));
    if (!atomic_load(&held)) {
        ax_free(s);
        printf("skipped: the asm context switch cannot be held from a test; "
               "the ucontext build (-DAX_CORO_UCONTEXT=ON) runs this\n");
        return 77;
    }
    ax_shutdown(s, 30000);
    CHECK_EQ(atomic_load(&entered), 0);
    CHECK_EQ(res.state, AX_STATE_TIMED_OUT);
    CHECK_EQ(res.code, AX_ETIMEDOUT);
    CHECK_EQ(res.run_ns, 0);
    CHECK(strstr(res.error, "before it began") != NULL);
    ax_class_stats cs;
    CHECK_EQ(ax_class_stats_get(s, cls, &cs), 0);
    CHECK_EQ(cs.started, 0);
    CHECK_EQ(cs.timed_out, 1);
    CHECK_EQ(cs.breaker_calls, 0); /* no call of the upstream to judge */
    CHECK_EQ(cs.rtt_short_ns, 0); /* and no latency sample */
    ax_metrics m;
    CHECK_EQ(ax_metrics_get(s, &m), 0);
    CHECK_EQ(m.run[AX_PRIO_NORMAL].count, 0); /* nor a run time of 0 (review) */
    ax_free(s);
    printf("ok: held before its function, ended by the watchdog, run_ns 0\n");
    return 0;
}
