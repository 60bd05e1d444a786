/* reactor.c - each worker's fd readiness: epoll, the wake-up eventfd, and
 * extension sources (DESIGN.md §2).
 *
 * The epoll instance belongs to its worker; only the worker adds and
 * removes fds (runs in ax_wait_fd, curl's sockets through reactor_src) and
 * waits on it. Other threads reach a sleeping worker only by writing its
 * eventfd (worker_kick). epoll data: a run waiting in ax_wait_fd (bit 0
 * clear), an extension source (bit 0 set), or NULL for the eventfd.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

int reactor_src_add(struct worker *w, int fd, uint32_t events, struct reactor_src *src, bool mod)
{
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)(uintptr_t)src | 1u};
    if (epoll_ctl(w->epfd, mod ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
        return -errno;
    if (!mod)
        w->nfd_waits++;
    return 0;
}

void reactor_src_del(struct worker *w, int fd)
{
    if (epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) == 0)
        w->nfd_waits--;
}

void worker_kick(struct worker *w)
{
    uint64_t one = 1;
    ssize_t r = write(w->evfd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is already non-zero, the worker will wake */
}

void reactor_dispatch(struct worker *w, struct epoll_event *ev, int n)
{
    for (int i = 0; i < n; i++) {
        if (ev[i].data.u64 & 1) {
            struct reactor_src *src = (struct reactor_src *)(uintptr_t)(ev[i].data.u64 & ~1ull);
            src->on_event(src, w, ev[i].events);
            continue;
        }
        struct ax_task *t = ev[i].data.ptr;
        if (t == NULL) {
            uint64_t v;
            ssize_t r = read(w->evfd, &v, sizeof v);
            (void)r;
            continue;
        }
        if (t->rs == RS_PARK_FD)
            run_wake(t, 0);
    }
    if (w->reactor_done)
        w->reactor_done(w);
}

/* epoll_pwait2 (Linux >= 5.11) takes a nanosecond timeout; older kernels
 * get epoll_wait with the timeout rounded up to a millisecond. */
int reactor_wait(struct worker *w, struct epoll_event *ev, int max, const struct timespec *ts)
{
    static _Atomic int no_pwait2;
#ifdef SYS_epoll_pwait2
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        int n = (int)syscall(SYS_epoll_pwait2, w->epfd, ev, max, ts, NULL, 0);
        if (n >= 0 || errno != ENOSYS)
            return n;
        atomic_store(&no_pwait2, 1);
    }
#endif
    int ms = -1;
    if (ts)
        ms = (int)(ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000);
    return epoll_wait(w->epfd, ev, max, ms);
}
