/* Review finding: linger.c installs a SIGURG handler when a hog first
 * lingers and promises to pass "signals that are not its own to the handler
 * the host had". on_signal chains only to a plain sa_handler: a host handler
 * installed with SA_SIGINFO (the usual way today) is silently dropped, so
 * the host's SIGURG (TCP urgent data with F_SETOWN, Go-style preemption
 * signals, ...) stops working once any task lingers. */
#include "util.h"

#include <signal.h>
#include <string.h>

static atomic_int host_calls;

static void host_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
    atomic_fetch_add(&host_calls, 1);
}

static __attribute__((noinline)) void spin_until(uint64_t until_ns)
{
    while (ax_now_ns() < until_ns)
        __asm__ __volatile__("" ::: "memory");
}

static int hog(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    spin_until(ax_now_ns() + 600u * 1000000u); /* ignores its 50 ms deadline */
    return 0;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = host_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGURG, &sa, NULL), 0);
    raise(SIGURG);
    CHECK_EQ(atomic_load(&host_calls), 1); /* control: the host's handler works */

    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 2;
    c.grace_ms = 100;
    ax_sched *s = test_sched_cfg(&c);
    ax_spec sp = {.fn = hog, .timeout_ms = 50};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    ax_stats st;
    CHECK(WAIT_UNTIL((ax_stats_get(s, &st), st.lingering >= 1), 3000)); /* ax's handler is in */
    CHECK_EQ(ax_shutdown(s, 2000), 0);
    ax_free(s);

    raise(SIGURG); /* not ax's: must reach the host's handler */
    fprintf(stderr, "host SIGURG handler calls: %d (want 2)\n", atomic_load(&host_calls));
    CHECK_EQ(atomic_load(&host_calls), 2);
    printf("ok\n");
    return 0;
}
