/* ax_wait_fd when the fd a task waits on is closed under it (src/reactor.c).
 * Linux keys an epoll entry by the fd's number and the open file behind it,
 * and drops it only when the file's last descriptor closes; a MOD or DEL
 * goes by the number to the file behind it now. Each case failed on the
 * code of its day (two new-user trials and two reviews); one worker, so
 * every wait shares its epoll instance. Cases:
 *   reuse       A's fd is closed and its number reused by B's socket; A's
 *               cancel deleted B's registration by number: B slept to its
 *               bound (old: AX_ETIMEDOUT after 20 s);
 *   stale       A's fd is closed while a dup keeps the file; the entry
 *               named A's run struct, which C reused: the old file's data
 *               woke C (0 for a never-ready fd), and the level-triggered
 *               entry spun the worker at 100 % CPU;
 *   closed_dup  the same, the number reused at once by a new socket that
 *               nobody waits on: the old file's event woke A with 0 and its
 *               ax_read took the new socket's bytes;
 *   dup_back    A's wake could not delete the entry (its number closed);
 *               once dup2 gave the number back to that file, every wait on
 *               it was AX_EBUSY "in use by ax_http";
 *   swap_busy   the same after another file's wait on the number in
 *               between (a mark that said "ours" was overwritten);
 *   swap_wake   dup2 swapping two files on one number: an event of the
 *               file no longer there woke R though its fd was not ready.
 * What holds now: closing an fd does not wake its waiter (it waits out its
 * bound, ax.h), no event wakes a waiter whose fd is not ready, the worker
 * stays idle, and a number brought back to a file can be waited on.
 * `test_wait_fd_close CASE` runs one case. */
#include "util.h"

#include <poll.h>
#include <sys/socket.h>

/* One task waiting on an fd: ax_wait_fd(AX_READ), or ax_read into buf. */
struct waiter {
    int fd;
    int64_t ms; /* the wait's bound */
    bool read;
    atomic_int parked, done;
    atomic_long rc;
    int readable; /* after a 0 from ax_wait_fd: poll said the fd was */
    char err[200], buf[8];
};

static int waiter_fn(ax_task *t, void *arg)
{
    struct waiter *w = arg;
    atomic_store(&w->parked, 1);
    long rc = w->read ? (long)ax_read(t, w->fd, w->buf, sizeof w->buf, w->ms)
                      : ax_wait_fd(t, w->fd, AX_READ, w->ms);
    if (rc < 0)
        snprintf(w->err, sizeof w->err, "%s: %s", ax_strerror((int)rc), ax_error_detail());
    if (rc == 0 && !w->read) {
        struct pollfd p = {.fd = w->fd, .events = POLLIN};
        w->readable = poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
    }
    atomic_store(&w->rc, rc);
    atomic_store(&w->done, 1);
    return 0;
}

static atomic_int marker_ran;
static int marker(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    atomic_store(&marker_ran, 1);
    return 0;
}

/* Once this returns, the one worker has run everything submitted before:
 * a parked waiter's epoll_ctl happened (TSan also learns that order). */
static void sync_worker(ax_sched *s)
{
    atomic_store(&marker_ran, 0);
    ax_spec sp = {.fn = marker, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&marker_ran), 60000));
}

/* Start w's task and return once its wait is registered. */
static uint64_t start_wait(ax_sched *s, struct waiter *w)
{
    uint64_t id;
    ax_spec sp = {.fn = waiter_fn, .arg = w, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&w->parked), 60000));
    sync_worker(s);
    return id;
}

/* Its wait's result (liveness bound only). */
static long result(struct waiter *w)
{
    CHECK(WAIT_UNTIL(atomic_load(&w->done), 60000));
    return atomic_load(&w->rc);
}

static void pair(int sv[2])
{
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
}

static void close_all(const int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

static void case_reuse(ax_sched *s)
{
    int sa[2], sb[2];
    pair(sa);
    struct waiter a = {.fd = sa[0], .ms = -1};
    uint64_t id_a = start_wait(s, &a);
    close(sa[0]); /* A's fd goes away under it */
    pair(sb);
    CHECK_EQ(sb[0], a.fd); /* the lowest free number: reused */
    struct waiter b = {.fd = sb[0], .ms = 20000};
    start_wait(s, &b);
    CHECK_EQ(ax_cancel(s, id_a), 0);
    CHECK_EQ(result(&a), AX_ECANCELED);
    uint64_t t0 = test_now_ms();
    CHECK_EQ(write(sb[1], "x", 1), 1); /* B must wake with 0, long before its bound */
    long rc = result(&b);
    fprintf(stderr, "reuse: B woke after %llu ms with %ld\n",
            (unsigned long long)(test_now_ms() - t0), rc);
    CHECK_EQ(rc, 0);
    CHECK_EQ(b.readable, 1);
    close_all((int[]){sa[1], sb[0], sb[1]}, 3);
}

static void case_stale(ax_sched *s)
{
    int sa[2], sc[2];
    pair(sa);
    pair(sc);
    int keep = dup(sa[0]); /* the file outlives the number the task waits on */
    CHECK(keep >= 0);
    struct waiter a = {.fd = sa[0], .ms = -1};
    uint64_t id_a = start_wait(s, &a);
    close(sa[0]);
    CHECK_EQ(ax_cancel(s, id_a), 0);
    CHECK_EQ(result(&a), AX_ECANCELED);
    struct waiter c = {.fd = sc[0], .ms = 1500}; /* never readable */
    start_wait(s, &c);
    long cpu0 = test_cpu_ticks();
    CHECK_EQ(write(sa[1], "x", 1), 1); /* the closed fd's file becomes readable */
    long rc = result(&c);
    usleep(500000);
    long spent = test_cpu_ticks() - cpu0;
    fprintf(stderr, "stale: C's wait returned %ld; CPU over ~0.5 s idle: %ld ticks (of %ld/s)\n",
            rc, spent, sysconf(_SC_CLK_TCK));
    CHECK_EQ(rc, AX_ETIMEDOUT);                /* its fd never became ready */
    CHECK_LE(spent, sysconf(_SC_CLK_TCK) / 4); /* idle: no spinning worker */
    close_all((int[]){keep, sa[1], sc[0], sc[1]}, 4);
}

/* closed_dup: a task on the same worker closes A's fd and reuses it. */
static int closed_fd, new_peer;
static atomic_int reuse_done;
static int reuse_fn(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    close(closed_fd);
    int sv[2];
    pair(sv);
    CHECK_EQ(sv[0], closed_fd); /* the lowest free number: A's */
    new_peer = sv[1];
    CHECK_EQ(write(new_peer, "NEW", 3), 3); /* the new connection's own data */
    atomic_store(&reuse_done, 1);
    return 0;
}

static void case_closed_dup(ax_sched *s)
{
    int sv[2];
    pair(sv);
    int keep = dup(sv[0]);
    CHECK(keep >= 0);
    closed_fd = sv[0];
    struct waiter a = {.fd = sv[0], .ms = 1500, .read = true};
    start_wait(s, &a);
    ax_spec sp = {.fn = reuse_fn, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&reuse_done), 60000));
    CHECK_EQ(write(sv[1], "old", 3), 3); /* the closed number's old file */
    long rc = result(&a);
    fprintf(stderr, "closed_dup: A's ax_read on its closed fd returned %ld%s%.*s\n", rc,
            rc > 0 ? ": " : "", rc > 0 ? (int)rc : 0, a.buf);
    CHECK_EQ(rc, AX_ETIMEDOUT);
    close_all((int[]){closed_fd, new_peer, keep, sv[1]}, 4);
}

static void case_dup_back(ax_sched *s)
{
    int sv[2];
    pair(sv);
    int keep = dup(sv[0]);
    CHECK(keep >= 0);
    struct waiter a = {.fd = sv[0], .ms = 300}; /* never readable while it waits */
    start_wait(s, &a);
    close(sv[0]); /* while A waits; the file lives on in keep */
    CHECK_EQ(result(&a), AX_ETIMEDOUT);
    CHECK_EQ(dup2(keep, sv[0]), sv[0]); /* the number names the same file again */
    CHECK_EQ(write(sv[1], "x", 1), 1);
    struct waiter d = {.fd = sv[0], .ms = 5000};
    start_wait(s, &d);
    long rc = result(&d);
    fprintf(stderr, "dup_back: D's wait on the readable fd %d returned %ld (%s)\n", d.fd, rc,
            d.err);
    CHECK_EQ(rc, 0);
    close_all((int[]){sv[0], keep, sv[1]}, 3);
}

static void case_swap_busy(ax_sched *s)
{
    enum { N = 300 };
    int f1[2], f2[2];
    pair(f1);
    pair(f2);
    CHECK_EQ(dup2(f1[0], N), N);
    struct waiter a = {.fd = N, .ms = 3000}; /* detached: waits out its bound */
    start_wait(s, &a);
    CHECK_EQ(close(N), 0);         /* (N, F1) stays: F1 lives in f1[0] */
    CHECK_EQ(dup2(f2[0], N), N);   /* N reused by F2 */
    struct waiter b = {.fd = N, .ms = 5000};
    start_wait(s, &b);
    CHECK_EQ(write(f2[1], "y", 1), 1);
    CHECK_EQ(result(&b), 0);
    CHECK_EQ(dup2(f1[0], N), N); /* the number names F1 again */
    CHECK_EQ(write(f1[1], "x", 1), 1);
    struct waiter d = {.fd = N, .ms = 5000};
    start_wait(s, &d);
    long rc = result(&d);
    fprintf(stderr, "swap_busy: D's wait on the readable fd %d returned %ld (%s)\n", N, rc, d.err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(result(&a), AX_ETIMEDOUT);
    close_all((int[]){N, f1[0], f1[1], f2[0], f2[1]}, 5);
}

static void case_swap_wake(ax_sched *s)
{
    enum { N = 301 };
    int f1[2], f2[2];
    pair(f2);
    pair(f1);
    CHECK_EQ(dup2(f2[0], N), N);
    struct waiter a = {.fd = N, .ms = 200};
    start_wait(s, &a);
    CHECK_EQ(close(N), 0); /* (N, F2) stays: F2 lives in f2[0] */
    CHECK_EQ(result(&a), AX_ETIMEDOUT);
    CHECK_EQ(dup2(f1[0], N), N);
    struct waiter r = {.fd = N, .ms = 1500};
    start_wait(s, &r);
    CHECK_EQ(dup2(f2[0], N), N);       /* N names F2 again; F1 lives in f1[0] */
    CHECK_EQ(write(f1[1], "x", 1), 1); /* F1 -- not N -- becomes readable */
    long rc = result(&r);
    fprintf(stderr, "swap_wake: R's wait on fd %d returned %ld; readable: %d\n", N, rc,
            r.readable);
    CHECK(rc != 0 || r.readable == 1);
    close_all((int[]){N, f1[0], f1[1], f2[0], f2[1]}, 5);
}

static const struct {
    const char *name;
    void (*run)(ax_sched *s);
} cases[] = {
    {"reuse", case_reuse},         {"stale", case_stale},         {"closed_dup", case_closed_dup},
    {"dup_back", case_dup_back},   {"swap_busy", case_swap_busy}, {"swap_wake", case_swap_wake},
};

int main(int argc, char **argv)
{
    int ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        ax_sched *s = test_sched(1, 16);
        cases[i].run(s);
        CHECK_EQ(ax_shutdown(s, 10000), 0);
        ax_free(s);
        ran++;
    }
    CHECK(ran > 0);
    printf("ok: %d cases\n", ran);
    return 0;
}
