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
 * entry live on (a dup of the file elsewhere) or be gone. These rules keep
 * that harmless (two trials and two reviews found each broken):
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
 *   - a number where one of our registrations outlived its file (a MOD or
 *     DEL by number failed) is `haunted`: that entry may live on, and a
 *     MOD/DEL by number could reach it instead of the current one, so from
 *     then on the registered file's identity (dev, ino: one fstat) is
 *     checked before every wake, share and re-arm (review: dup2 swapping
 *     two files on one number woke a waiter for the other file's data);
 *   - an EEXIST that is neither a waiter's, nor ax_http's (`src`, set and
 *     cleared with its registration), nor the worker's eventfd is our own
 *     entry for a file brought back to the number: taken over (MOD, a new
 *     gen), not refused as busy.
 * A reader and a writer on one fd share the entry (EPOLL_CTL_MOD), so the
 * full-duplex pattern works wherever the two tasks run.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void fd_detach_all(struct worker *w, struct fd_wait *e);
static int fd_room(struct worker *w, const char *who, int fd);

int reactor_src_add(struct worker *w, int fd, uint32_t events, struct reactor_src *src, bool mod)
{
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)(uintptr_t)src | 1u};
    if (epoll_ctl(w->epfd, mod ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
        return -errno;
    if (mod)
        return 0;
    /* The number is ax_http's: ax_wait_fd must neither take its entry over
     * nor delete it. Without room to say so, no entry. */
    if (fd_room(w, "ax_http", fd) != AX_OK) {
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
        return -ENOMEM;
    }
    w->nfd_waits++;
    struct fd_wait *e = &w->fdw[fd];
    /* The ADD succeeding proves an ax_wait_fd registration of this number
     * stale (its fd was closed and the number reused, here by curl):
     * detach its waiters before their wake deletes or modifies the new
     * entry by number (review). */
    if (e->events)
        fd_detach_all(w, e);
    e->src = true;
    return 0;
}

void reactor_src_del(struct worker *w, int fd)
{
    if (epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) == 0)
        w->nfd_waits--;
    if ((size_t)fd < w->fdw_cap)
        w->fdw[fd].src = false;
}

void reactor_src_gone(struct worker *w, int fd)
{
    w->nfd_waits--;
    if ((size_t)fd < w->fdw_cap)
        w->fdw[fd].src = false;
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
 * keep waiting (their bound ends it), detached from it. The kernel may keep
 * its entry while the file lives on elsewhere (a dup): the number is
 * haunted from now on. */
static void fd_detach_all(struct worker *w, struct fd_wait *e)
{
    if (e->rd)
        fd_leave(w, e, e->rd);
    if (e->wr)
        fd_leave(w, e, e->wr);
    e->events = 0;
    e->haunted = true;
}

/* Is the file behind fd the registered one? Trusted until the number is
 * haunted; then by identity (one fstat). */
static bool fd_same(int fd, const struct fd_wait *e)
{
    if (!e->haunted)
        return true;
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == e->dev && st.st_ino == e->ino;
}

/* Re-arm our registration for the waiters rd/wr (MOD), or delete it if
 * there are none (DEL). Both go by the number to the entry of the file
 * behind it now: false proves our registration is not that file's (the fd
 * was closed since, maybe reused). */
static bool fd_rearm(struct worker *w, int fd, const struct fd_wait *e, struct ax_task *rd,
                     struct ax_task *wr)
{
    if (!rd && !wr)
        return epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL) == 0;
    struct fd_wait next = {.rd = rd, .wr = wr, .gen = e->gen};
    return fd_ctl(w, EPOLL_CTL_MOD, fd, &next) == 0;
}

static int fd_room(struct worker *w, const char *who, int fd)
{
    if ((size_t)fd < w->fdw_cap)
        return AX_OK;
    size_t cap = w->fdw_cap ? w->fdw_cap : 64;
    while (cap <= (size_t)fd)
        cap *= 2;
    struct fd_wait *n = realloc(w->fdw, cap * sizeof *n);
    if (!n)
        return ax_fail(AX_ENOMEM, "%s: out of memory for fd %d's entry", who, fd);
    memset(n + w->fdw_cap, 0, (cap - w->fdw_cap) * sizeof *n);
    w->fdw = n;
    w->fdw_cap = cap;
    return AX_OK;
}

static void fd_join(struct worker *w, struct ax_task *t, int fd)
{
    t->wait_fd = fd;
    w->nfd_waits++;
}

int reactor_fd_wait(struct worker *w, struct ax_task *t, const char *who, int fd,
                    unsigned events)
{
    if (fd == w->evfd)
        return ax_fail(AX_EINVAL, "%s: fd %d is the worker's own wake-up eventfd", who, fd);
    /* The table is indexed by number: before it grows to one, make sure an
     * fd of that number is open (a bogus 4 000 000 grew it by 192 MB, 2^30
     * failed a 96 GiB realloc: new-user trial). One fcntl, only when the
     * table would grow. */
    if ((size_t)fd >= w->fdw_cap && fcntl(fd, F_GETFD) < 0 && errno == EBADF)
        return ax_fail(AX_EINVAL, "%s: fd %d is not open", who, fd);
    int rc = fd_room(w, who, fd);
    if (rc)
        return rc;
    struct fd_wait *e = &w->fdw[fd];
    if (e->src)
        return ax_fail(AX_EBUSY, "%s: fd %d is in use by this worker's own I/O (an ax_http transfer)",
                       who, fd);
    bool rd = events & AX_READ, wr = events & AX_WRITE;
    if (e->events && !fd_same(fd, e))
        fd_detach_all(w, e); /* registered for a file no longer behind fd */
    if (e->events && !((rd && e->rd) || (wr && e->wr))) {
        /* The other direction's waiter is registered: share its entry. */
        struct ax_task *nr = rd ? t : e->rd, *nw = wr ? t : e->wr;
        if (fd_rearm(w, fd, e, nr, nw)) {
            e->rd = nr;
            e->wr = nw;
            e->events = fd_events(e);
            fd_join(w, t, fd);
            return AX_OK;
        }
        fd_detach_all(w, e); /* not the file registered any more */
    }
    /* A fresh registration. With a waiter in our direction in the table,
     * the ADD tells whether its registration is still the file's (EEXIST:
     * busy) or stale. */
    struct fd_wait fresh = {.rd = rd ? t : NULL, .wr = wr ? t : NULL,
                            .gen = e->gen + 1 ? e->gen + 1 : 1};
    int err = fd_ctl(w, EPOLL_CTL_ADD, fd, &fresh);
    if (err == EEXIST) {
        if (e->events)
            return ax_fail(AX_EBUSY, "%s: another task on this worker waits to %s fd %d", who,
                           rd && e->rd ? "read" : "write", fd);
        /* Neither a waiter's nor ax_http's nor the eventfd's: our own entry
         * for this file, left when it was closed here while waited on and
         * brought back since (dup2). Take it over with the new gen. */
        err = fd_ctl(w, EPOLL_CTL_MOD, fd, &fresh) == 0 ? 0 : errno;
    }
    if (err == EBADF || err == EPERM)
        return ax_fail(AX_EINVAL, "%s: fd %d cannot be waited on: %s", who, fd, strerror(err));
    if (err)
        return ax_fail(AX_ESYS, "%s: epoll_ctl: %s", who, strerror(err));
    if (e->events)
        fd_detach_all(w, e); /* theirs was for a file no longer behind fd */
    /* On a haunted number the registered file is known by its identity
     * (if fstat fails, the fd was closed since: no file is ever the same,
     * and the wait ends at its bound, as a close leaves it). */
    struct stat st = {0};
    if (e->haunted && fstat(fd, &st) != 0)
        st.st_dev = 0, st.st_ino = 0;
    e->rd = fresh.rd;
    e->wr = fresh.wr;
    e->gen = fresh.gen;
    e->events = fd_events(e);
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    fd_join(w, t, fd);
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
    if (fd_same(fd, e) && fd_rearm(w, fd, e, e->rd, e->wr))
        e->events = fd_events(e);
    else
        fd_detach_all(w, e);
}

/* An event of fd's registration `gen`: wake its waiters for what came, once
 * it is sure the entry that fired is the one of the file behind fd now:
 * the re-arm (or delete) by number succeeded, and on a haunted number the
 * file's identity matches. An entry that outlived its fd (closed while
 * waited on, the file kept alive by a dup) keeps its gen until the number
 * is registered again: its event wakes nobody (a trial: the waiter woke
 * with 0 and read the socket that had taken the number); its waiters are
 * detached, as a close leaves them. */
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
    struct ax_task *lr = e->rd && e->rd != r && e->rd != x ? e->rd : NULL;
    struct ax_task *lw = e->wr && e->wr != r && e->wr != x ? e->wr : NULL;
    /* Oneshot: the entry is off until re-armed for the waiters left. */
    if (!fd_same(fd, e) || !fd_rearm(w, fd, e, lr, lw)) {
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
