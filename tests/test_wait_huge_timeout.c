/* Review finding (pre-existing, task.c:151, join.c:85, the same class as
 * ax_http_get's): ax_wait_fd / ax_join take int64_t timeout_ms (< 0: none)
 * and compute now + timeout_ms * 1000000 in uint64_t. For INT64_MAX the
 * product wraps to 2^64 - 10^6: the timer is armed 1 ms in the past and the
 * wait ends at once with AX_ETIMEDOUT instead of waiting for the fd. */
#include "util.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static int pfd[2];
static atomic_int wait_rc = 100;

static int waiter(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&wait_rc, ax_wait_fd(t, pfd[0], AX_READ, INT64_MAX));
    return 0;
}

int main(void)
{
    CHECK_EQ(pipe(pfd), 0);
    ax_sched *s = test_sched(1, 2);
    ax_spec sp = {.fn = waiter, .timeout_ms = 5000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    usleep(100000);
    CHECK_EQ(write(pfd[1], "x", 1), 1);
    CHECK(WAIT_UNTIL(atomic_load(&wait_rc) != 100, 3000));
    fprintf(stderr, "ax_wait_fd(INT64_MAX): %d (%s)\n", (int)wait_rc, ax_strerror(wait_rc));
    CHECK_EQ(atomic_load(&wait_rc), 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    printf("ok\n");
    return 0;
}
