/* Review finding (d86ee1e): linger.c's on_signal now chains a host SIGURG
 * disposition installed with SA_SIGINFO by calling old_action.sa_sigaction
 * whenever it is non-NULL. A host that ignores SIGURG with
 * `sa_handler = SIG_IGN, sa_flags = SA_SIGINFO` (the flags are kept by the
 * kernel and given back as old_action) then gets a call through
 * (void (*)(int, siginfo_t *, void *))SIG_IGN, i.e. address 1: a SIGURG that
 * is not ax's (TCP urgent data with F_SETOWN, kill -URG) crashes the process
 * once any task has lingered. Before d86ee1e it was ignored, as the host
 * asked. */
#include "util.h"

#include <signal.h>
#include <string.h>

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
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGURG, &sa, NULL), 0);
    raise(SIGURG); /* control: ignored */

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

    raise(SIGURG); /* not ax's, and the host ignores it: must not crash */
    printf("ok\n");
    return 0;
}
