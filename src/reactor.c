/* reactor.c - each worker's fd readiness: epoll, the wake-up eventfd, and
 * extension sources (DESIGN.md §2).
 *
 * The epoll instance belongs to its worker; only the worker adds and
 * removes fds (runs in ax_wait_fd, curl's sockets through reactor_src) and
 * waits on it. Other threads reach a sleeping worker only by writing its
 * eventfd (worker_kick). epoll data: an fd's ax_wait_fd registration
 * (gen << 32 | fd << 1, never 0), an extension source (its pointer with bit
 * 0 set), or 0 for the eventfd.
 *
 * ax_wait_fd's registrations (w->fdw, one entry per fd): the kernel keys an
 * epoll entry by the fd number *and* the open file behind it, and removes
 * it only when that file's last descriptor closes. So a task's fd can be
 * closed while it waits, its number reused for another socket, and the old
 * entry live on (a dup of the file elsewhere) or be gone. Three rules keep
 * that harmless (a new user's trial found each broken):
 *   - the data names the fd and the registration's gen, never a run: an
 *     event of an entry that outlived its registration has an older gen
 *     and wakes nothing (it used to wake whatever run reused the struct);
 *   - EPOLLONESHOT: such an entry fires at most once and then stays
 *     disarmed (a level-triggered one kept the worker spinning for ever);
 *     a live one is re-armed for the waiters left, or deleted with the last;
 *   - a wait whose ADD succeeds although the table holds a waiter in the
 *     same direction proves the old registration was not for the file now
 *     behind the number: its waiters are detached (they wait out their
 *     bound: closing an fd does not wake its waiter) and never delete the
 *     new registration (the old code's DEL by number removed it); so does
 *     an ADD of ax_http's;
 *   - an event wakes only after the re-arm (MOD) or delete (DEL) by number
 *     succeeded: both reach the entry of the file behind the number now, so
 *     a failure proves the entry that fired belonged to a file closed there
 *     (kept alive by a dup), and its waiters are detached, not woken (they
 *     read whatever socket had taken the number: a second trial);
 *   - an entry of ours whose DEL failed is `leftover`: if the number later
 *     points at that file again (dup2), EEXIST is ours and taken over.
 * A reader and a writer on one fd share the entry (EPOLL_CTL_MOD), so the
 * full-duplex pattern works wherever the two tasks run.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

static void fd_detach_all(struct worker *w, struct fd_wait *e);

int reactor_src_add(struct worker *w, int fd, uint32_t events, struct reactor_src *src, bool mod)
{
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)(uintptr_t)src | 1u};
    if (epoll_ctl(w->epfd, mod ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
        return -errno;
    if (!mod) {
        w->nfd_waits++;
        /* The ADD succeeding proves an ax_wait_fd registration of this
         * number stale (its fd was closed and the number reused, here by
         * curl): detach its waiters before their wake deletes or modifies
         * the new entry by number (review). */
        if ((size_t)fd < w->fdw_cap) {
            if (w->fdw[fd].events)
                fd_detach_all(w, &w->fdw[fd]);
            w->fdw[fd].leftover = false; /* the number's entry is curl's now */
        }
    }
    return 0;
}

void reactor_src_del(struct worker *w, int fd)
{
    if (epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) == 0)
        w->nfd_waits--;
}

#define FD_IN (EPOLLIN | EPOLLRDHUP)
#define FD_OUT EPOLLOUT

static uint32_t fd_events(const struct fd_wait *e)
{
    return (e->rd ? FD_IN : 0) | (e->wr ? FD_OUT : 0);
}

static int fd_ctl(struct worker *w, int op, int fd, const struct fd_wait *e)
{
    struct epoll_event ev = {.events = fd_events(e) | EPOLLONESHOT,
                             .data.u64 = (uint64_t)e->gen << 32 | (uint64_t)fd << 1};
    return epoll_ctl(w->epfd, op, fd, &ev) == 0 ? 0 : errno;
}

/* A run leaves the table without its fd's event (or is detached). */
static void fd_leave(struct worker *w, struct fd_wait *e, struct ax_task *t)
{
    if (e->rd == t)
        e->rd = NULL;
    if (e->wr == t)
        e->wr = NULL;
    t->wait_fd = -1;
    w->nfd_waits--;
}

/* The registration no longer matches the file behind the fd: its waiters
 * keep waiting (their bound ends it), detached from it; the kernel may keep
 * its entry while the file lives on elsewhere (a dup). */
static void fd_detach_all(struct worker *w, struct fd_wait *e)
{
    if (e->rd)
        fd_leave(w, e, e->rd);
    if (e->wr)
        fd_leave(w, e, e->wr);
    e->events = 0;
    e->leftover = true;
}

/* Re-arm the registration for the waiters in `next` (MOD), or delete it if
 * none is left (DEL). Both go by the fd's number to the file behind it
 * now, so they succeed only if our registration is that file's: false
 * proves the fd was closed (and maybe reused) since it was made. */
static bool fd_rearm(struct worker *w, int fd, const struct fd_wait *next)
{
    if (!next->rd && !next->wr)
        return epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) == 0;
    return fd_ctl(w, EPOLL_CTL_MOD, fd, next) == 0;
}

static int fd_room(struct worker *w, int fd)
{
    if ((size_t)fd < w->fdw_cap)
        return AX_OK;
    size_t cap = w->fdw_cap ? w->fdw_cap : 64;
    while (cap <= (size_t)fd)
        cap *= 2;
    struct fd_wait *n = realloc(w->fdw, cap * sizeof *n);
    if (!n)
        return ax_fail(AX_ENOMEM, "ax_wait_fd: out of memory for fd %d's entry", fd);
    memset(n + w->fdw_cap, 0, (cap - w->fdw_cap) * sizeof *n);
    w->fdw = n;
    w->fdw_cap = cap;
    return AX_OK;
}

int reactor_fd_wait(struct worker *w, struct ax_task *t, int fd, unsigned events)
{
    int rc = fd_room(w, fd);
    if (rc)
        return rc;
    struct fd_wait *e = &w->fdw[fd];
    bool rd = events & AX_READ, wr = events & AX_WRITE;
    if (e->events && !((rd && e->rd) || (wr && e->wr))) {
        /* The other direction's waiter is registered: share its entry. */
        struct fd_wait next = *e;
        if (rd)
            next.rd = t;
        if (wr)
            next.wr = t;
        if (fd_rearm(w, fd, &next)) {
            *e = next;
            e->events = fd_events(e);
            t->wait_fd = fd;
            w->nfd_waits++;
            return AX_OK;
        }
        fd_detach_all(w, e); /* not the file registered any more */
    }
    /* A fresh registration; with a waiter in our direction in the table, the
     * ADD tells whether it is still the file's (EEXIST: busy) or stale. */
    struct fd_wait fresh = {rd ? t : NULL, wr ? t : NULL, e->gen + 1 ? e->gen + 1 : 1, 0,
                            e->leftover};
    int err = fd_ctl(w, EPOLL_CTL_ADD, fd, &fresh);
    if (err == EEXIST && !e->events && e->leftover) {
        /* Our own entry, left when a DEL by number failed, and the fd
         * points at its file again (dup2): take it over (trial). */
        err = fd_ctl(w, EPOLL_CTL_MOD, fd, &fresh) == 0 ? 0 : EEXIST;
    }
    if (err == EEXIST) {
        if (e->events)
            return ax_fail(AX_EBUSY, "ax_wait_fd: another task on this worker waits to %s fd %d",
                           rd && e->rd ? "read" : "write", fd);
        return ax_fail(AX_EBUSY, "ax_wait_fd: fd %d is in use by this worker's own I/O "
                                 "(an ax_http transfer)", fd);
    }
    if (err == EBADF || err == EPERM)
        return ax_fail(AX_EINVAL, "ax_wait_fd: fd %d cannot be waited on: %s", fd, strerror(err));
    if (err)
        return ax_fail(AX_ESYS, "ax_wait_fd: epoll_ctl: %s", strerror(err));
    if (e->events)
        fd_detach_all(w, e); /* theirs was for a file no longer behind fd */
    *e = fresh;
    e->events = fd_events(e);
    t->wait_fd = fd;
    w->nfd_waits++;
    return AX_OK;
}

void reactor_fd_unwait(struct worker *w, struct ax_task *t)
{
    int fd = t->wait_fd;
    if (fd < 0)
        return; /* detached: its registration is gone */
    struct fd_wait *e = &w->fdw[fd];
    fd_leave(w, e, t);
    if (!e->events)
        return;
    if (fd_rearm(w, fd, e))
        e->events = fd_events(e);
    else
        fd_detach_all(w, e);
}

/* An event of fd's registration `gen`: wake its waiters for what came --
 * once the re-arm (or delete) by number has shown that the entry which
 * fired is the one of the file behind fd now. An entry that outlived its
 * fd (closed while waited on, the file dup'd elsewhere) keeps its gen
 * until someone registers the number again: its event wakes nobody (a
 * trial: the waiter woke with 0 and read the socket that had taken the
 * number), the waiters are detached, as a close leaves them. */
static void fd_event(struct worker *w, int fd, uint32_t gen, uint32_t got)
{
    if ((size_t)fd >= w->fdw_cap)
        return;
    struct fd_wait *e = &w->fdw[fd];
    if (!e->events || e->gen != gen)
        return; /* an entry that outlived its registration: oneshot, now off */
    uint32_t any = EPOLLERR | EPOLLHUP;
    struct ax_task *r = (got & (FD_IN | any)) ? e->rd : NULL;
    struct ax_task *x = (got & (FD_OUT | any)) ? e->wr : NULL;
    struct fd_wait next = *e;
    if (next.rd && (next.rd == r || next.rd == x))
        next.rd = NULL;
    if (next.wr && (next.wr == r || next.wr == x))
        next.wr = NULL;
    /* Oneshot: the entry is off until re-armed for the waiters left. */
    if (!fd_rearm(w, fd, &next)) {
        fd_detach_all(w, e);
        return;
    }
    if (r)
        fd_leave(w, e, r);
    if (x && x != r)
        fd_leave(w, e, x);
    e->events = fd_events(e);
    if (r)
        run_wake(r, 0);
    if (x && x != r)
        run_wake(x, 0);
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
        uint64_t d = ev[i].data.u64;
        if (d == 0) {
            uint64_t v;
            ssize_t r = read(w->evfd, &v, sizeof v);
            (void)r;
            continue;
        }
        fd_event(w, (int)((d >> 1) & 0x7fffffff), (uint32_t)(d >> 32), ev[i].events);
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
