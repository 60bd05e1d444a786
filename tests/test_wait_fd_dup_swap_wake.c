/* an event wakes its waiter although the file behind the number is
 * not ready. fd_event treats a successful DEL/MOD by number as proof that
 * the entry which fired is the one of the file behind the number now; a
 * leftover entry of ours for that file (an earlier wait, its fd closed while
 * the file lived on in a dup) makes the DEL succeed anyway.
 *   1. A waits on N (file F2); N is closed (F2 lives in a dup); A's bound
 *      ends, its DEL by number fails: (N, F2) stays in the kernel, armed.
 *   2. N now names F1; R waits to read it: ADD (N, F1), gen g.
 *   3. dup2 puts F2 back at N (F1 lives on in its socketpair).
 *   4. F1 becomes readable: (N, F1, g) fires, gen g matches, the DEL by
 *      number N deletes (N, F2) -- success -- and R is woken with 0,
 *      though fd N (F2) has nothing to read.
 * Expected: R's wait ends AX_ETIMEDOUT (N never becomes readable), or, if
 * it returns 0, N is readable. */
#include "util.h"

#include <poll.h>
#include <sys/socket.h>

#define N 301
static atomic_int a_parked, a_done, r_parked, r_done, marker_ran;
static atomic_int a_rc = 99, r_rc = 99, r_readable = -1;

static int task_a(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&a_parked, 1);
    atomic_store(&a_rc, ax_wait_fd(t, N, AX_READ, 200));
    atomic_store(&a_done, 1);
    return 0;
}

static int task_r(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&r_parked, 1);
    int rc = ax_wait_fd(t, N, AX_READ, 1500);
    struct pollfd p = {.fd = N, .events = POLLIN};
    atomic_store(&r_readable, poll(&p, 1, 0) == 1 && (p.revents & POLLIN));
    atomic_store(&r_rc, rc);
    atomic_store(&r_done, 1);
    return 0;
}

static int marker(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&marker_ran, 1);
    return 0;
}

static void sync_worker(ax_sched *s)
{
    atomic_store(&marker_ran, 0);
    ax_spec sp = {.fn = marker, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&marker_ran), 60000));
}

int main(void)
{
    ax_sched *s = test_sched(1, 16);
    int f2[2], f1[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, f2), 0);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, f1), 0);

    CHECK_EQ(dup2(f2[0], N), N);
    ax_spec sp = {.fn = task_a, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&a_parked), 60000));
    sync_worker(s);
    CHECK_EQ(close(N), 0); /* (N, F2) stays: F2 lives in f2[0] */
    CHECK(WAIT_UNTIL(atomic_load(&a_done), 60000));
    CHECK_EQ(atomic_load(&a_rc), AX_ETIMEDOUT);

    CHECK_EQ(dup2(f1[0], N), N);
    sp = (ax_spec){.fn = task_r, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&r_parked), 60000));
    sync_worker(s);
    CHECK_EQ(dup2(f2[0], N), N); /* N names F2 again; F1 lives in f1[0] */
    CHECK_EQ(write(f1[1], "x", 1), 1); /* F1 -- not N -- becomes readable */

    CHECK(WAIT_UNTIL(atomic_load(&r_done), 60000));
    fprintf(stderr, "R's wait on fd %d returned %d; fd %d readable: %d\n", N,
            atomic_load(&r_rc), N, atomic_load(&r_readable));
    CHECK(atomic_load(&r_rc) != 0 || atomic_load(&r_readable) == 1);

    close(N);
    close(f1[0]);
    close(f1[1]);
    close(f2[0]);
    close(f2[1]);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
