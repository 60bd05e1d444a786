/* test_wait_fd.c - ax_wait_fd parks the coroutine, never the thread (ax.h;
 * DESIGN.md §7).
 *
 *  1. A task waits on a pipe's read end; another thread writes 100 ms later;
 *     the wait returns 0 after the write and the task reads the byte. The
 *     same fd can be waited on again afterwards (no stale registration), and
 *     AX_WRITE on a writable pipe returns 0.
 *  2. timeout_ms 50 with no writer returns AX_ETIMEDOUT near 50 ms, and the
 *     task itself goes on (it is not timed out). timeout_ms < 0 is bounded by
 *     the task's deadline: AX_ETIMEDOUT at it, the task ends TIMED_OUT.
 *     ax_cancel wakes a waiting task with AX_ECANCELED.
 *  3. 200 tasks each wait on their own pipe on 2 workers: no thread is added
 *     (the /proc/self/task count stays put), another task still runs
 *     meanwhile, and all 200 wake and read their own byte.
 *  4. AX_EINVAL for fd -1, a closed fd, events 0 and events 8; and for
 *     numbers far above any open fd (4 000 000, 2^30) without the worker's
 *     fd table growing to them first (new-user trial of 460650d: +192 MB of
 *     resident memory for 4 000 000, AX_ENOMEM after a 96 GiB realloc for
 *     2^30, and an abort under ASan).
 */
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>

static void make_pipe(int p[2])
{
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    CHECK_EQ(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
}

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

struct outcome {
    atomic_int calls;
    atomic_int state;
};

static void on_done(const ax_result *r, void *arg)
{
    struct outcome *o = arg;
    atomic_store(&o->state, (int)r->state);
    atomic_fetch_add(&o->calls, 1);
}

static void submit(ax_sched *s, ax_fn fn, void *arg, uint64_t timeout_ms, struct outcome *o,
                   uint64_t *id)
{
    ax_spec sp = {.fn = fn, .arg = arg, .timeout_ms = timeout_ms, .on_done = on_done, .cb_arg = o};
    CHECK_EQ(ax_submit(s, &sp, id), 0);
}

/* ---- 1. woken by a writer ---------------------------------------------- */

struct reader {
    int fd;
    unsigned events;
    int64_t timeout_ms;
    atomic_int entered;
    atomic_int rc;
    atomic_int byte;
    atomic_int after; /* ax_cancelled after the wait */
    _Atomic uint64_t call_ns, return_ns, deadline_ns;
    char detail[AX_ERROR_MAX]; /* ax_error_detail() after the wait, read once rc is set */
};

static int reader_fn(ax_task *t, void *arg)
{
    struct reader *r = arg;
    atomic_store(&r->deadline_ns, ax_task_deadline_ns(t));
    atomic_store(&r->call_ns, ax_now_ns());
    atomic_store(&r->entered, 1);
    int rc = ax_wait_fd(t, r->fd, r->events, r->timeout_ms);
    snprintf(r->detail, sizeof r->detail, "%s", ax_error_detail());
    atomic_store(&r->return_ns, ax_now_ns());
    atomic_store(&r->rc, rc);
    if (rc == 0 && (r->events & AX_READ)) {
        unsigned char c;
        atomic_store(&r->byte, read(r->fd, &c, 1) == 1 ? c : -1);
    }
    atomic_store(&r->after, ax_cancelled(t));
    return 0;
}

struct writer {
    int fd;
    unsigned delay_ms;
    char byte;
    _Atomic uint64_t write_ns;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    usleep(w->delay_ms * 1000);
    atomic_store(&w->write_ns, ax_now_ns());
    CHECK_EQ(write(w->fd, &w->byte, 1), 1);
    return NULL;
}

static void wait_for_writer(ax_sched *s, int p[2], char byte)
{
    static struct reader r;
    static struct outcome o;
    r = (struct reader){.fd = p[0], .events = AX_READ, .timeout_ms = -1, .rc = 1, .byte = -1};
    o = (struct outcome){0};
    submit(s, reader_fn, &r, 5000, &o, NULL);
    CHECK(WAIT_UNTIL(atomic_load(&r.entered), 2000));
    struct writer w = {.fd = p[1], .delay_ms = 100, .byte = byte};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, writer_main, &w), 0);
    CHECK(WAIT_UNTIL(atomic_load(&o.calls) == 1, 3000));
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(atomic_load(&r.rc), 0);
    CHECK_EQ(atomic_load(&r.byte), (unsigned char)byte);
    CHECK_EQ(atomic_load(&r.after), 0);
    CHECK_EQ(atomic_load(&o.state), AX_STATE_SUCCEEDED);
    /* Woken by the write (not before it), and promptly. */
    CHECK(atomic_load(&r.return_ns) >= atomic_load(&w.write_ns));
    CHECK_LE((atomic_load(&r.return_ns) - atomic_load(&w.write_ns)) / 1000000u, 1000);
}

static void test_writer(ax_sched *s)
{
    int p[2];
    make_pipe(p);
    wait_for_writer(s, p, 'x');
    wait_for_writer(s, p, 'y'); /* the same fd again */

    static struct reader r;
    static struct outcome o;
    r = (struct reader){.fd = p[1], .events = AX_WRITE, .timeout_ms = 1000, .rc = 1};
    submit(s, reader_fn, &r, 5000, &o, NULL);
    CHECK(WAIT_UNTIL(atomic_load(&o.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&r.rc), 0);
    CHECK_LE((atomic_load(&r.return_ns) - atomic_load(&r.call_ns)) / 1000000u, 500);
    close(p[0]);
    close(p[1]);
}

/* ---- 2. timeouts and cancellation --------------------------------------- */

static void test_timeouts(ax_sched *s)
{
    int p[2];
    make_pipe(p);

    /* The wait's own timeout: the task goes on. */
    static struct reader r1;
    static struct outcome o1;
    r1 = (struct reader){.fd = p[0], .events = AX_READ, .timeout_ms = 50, .rc = 1, .after = 1};
    submit(s, reader_fn, &r1, 5000, &o1, NULL);
    CHECK(WAIT_UNTIL(atomic_load(&o1.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&r1.rc), AX_ETIMEDOUT);
    /* Its own bound, said so (both said "its own bound or the task's deadline"). */
    CHECK(strstr(r1.detail, "ax_wait_fd: its own bound passed") != NULL);
    uint64_t el = (atomic_load(&r1.return_ns) - atomic_load(&r1.call_ns)) / 1000000u;
    CHECK(el >= 49);
    CHECK_LE(el, 1000);
    CHECK_EQ(atomic_load(&r1.after), 0);
    CHECK_EQ(atomic_load(&o1.state), AX_STATE_SUCCEEDED);

    /* Only the task's deadline (150 ms) bounds it. */
    static struct reader r2;
    static struct outcome o2;
    r2 = (struct reader){.fd = p[0], .events = AX_READ, .timeout_ms = -1, .rc = 1, .after = 1};
    submit(s, reader_fn, &r2, 150, &o2, NULL);
    CHECK(WAIT_UNTIL(atomic_load(&o2.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&o2.state), AX_STATE_TIMED_OUT);
    CHECK(WAIT_UNTIL(atomic_load(&r2.rc) != 1, 1000));
    CHECK_EQ(atomic_load(&r2.rc), AX_ETIMEDOUT);
    CHECK(strstr(r2.detail, "ax_wait_fd: the task's deadline passed") != NULL);
    CHECK(atomic_load(&r2.return_ns) >= atomic_load(&r2.deadline_ns));
    CHECK_LE((atomic_load(&r2.return_ns) - atomic_load(&r2.deadline_ns)) / 1000000u, 1000);
    CHECK(WAIT_UNTIL(atomic_load(&r2.after) != 1, 1000));
    CHECK_EQ(atomic_load(&r2.after), AX_ETIMEDOUT);

    /* Cancelled while waiting. */
    static struct reader r3;
    static struct outcome o3;
    r3 = (struct reader){.fd = p[0], .events = AX_READ, .timeout_ms = -1, .rc = 1, .after = 1};
    uint64_t id;
    submit(s, reader_fn, &r3, 10000, &o3, &id);
    CHECK(WAIT_UNTIL(atomic_load(&r3.entered), 2000));
    usleep(30 * 1000);
    CHECK_EQ(ax_cancel(s, id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&r3.rc) != 1, 1000));
    CHECK_EQ(atomic_load(&r3.rc), AX_ECANCELED);
    CHECK_EQ(atomic_load(&o3.calls), 1);
    CHECK_EQ(atomic_load(&o3.state), AX_STATE_CANCELLED);
    close(p[0]);
    close(p[1]);
}

/* ---- 3. many waiters, few threads --------------------------------------- */

#define NWAIT 200

static int pipes[NWAIT][2];
static struct reader many[NWAIT];
static struct outcome many_o[NWAIT];

static int probe_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void test_many(ax_sched *s)
{
    int base = count_threads();
    for (int i = 0; i < NWAIT; i++) {
        make_pipe(pipes[i]);
        many[i] = (struct reader){
            .fd = pipes[i][0], .events = AX_READ, .timeout_ms = -1, .rc = 1, .byte = -1};
        submit(s, reader_fn, &many[i], 10000, &many_o[i], NULL);
    }
    for (int i = 0; i < NWAIT; i++)
        CHECK(WAIT_UNTIL(atomic_load(&many[i].entered), 3000));
    usleep(50 * 1000);
    CHECK_EQ(test_stats(s).running, NWAIT);
    /* Parked, not blocking: no thread was added, and a new task still runs. */
    CHECK_LE(count_threads(), base);
    static struct outcome probe;
    submit(s, probe_fn, NULL, 1000, &probe, NULL);
    CHECK(WAIT_UNTIL(atomic_load(&probe.calls) == 1, 1000));
    CHECK_EQ(atomic_load(&probe.state), AX_STATE_SUCCEEDED);
    for (int i = 0; i < NWAIT; i++)
        CHECK_EQ(atomic_load(&many_o[i].calls), 0);

    for (int i = 0; i < NWAIT; i++) {
        unsigned char c = (unsigned char)i;
        CHECK_EQ(write(pipes[i][1], &c, 1), 1);
    }
    for (int i = 0; i < NWAIT; i++) {
        CHECK(WAIT_UNTIL(atomic_load(&many_o[i].calls) == 1, 5000));
        CHECK_EQ(atomic_load(&many_o[i].state), AX_STATE_SUCCEEDED);
        CHECK_EQ(atomic_load(&many[i].rc), 0);
        CHECK_EQ(atomic_load(&many[i].byte), i);
    }
    CHECK_LE(count_threads(), base);
    for (int i = 0; i < NWAIT; i++) {
        close(pipes[i][0]);
        close(pipes[i][1]);
    }
}

/* ---- 4. invalid arguments ------------------------------------------------ */

static int bad_fd_num;
static atomic_int bad_neg = 1, bad_closed = 1, bad_ev0 = 1, bad_ev8 = 1, bad_detail = 1;
static atomic_int bad_huge = 1, bad_vast = 1;
static atomic_long bad_grew_kb = -1;

/* Resident memory in KiB (statm's second field, in pages). */
static long rss_kb(void)
{
    long pages = -1, res = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = -1;
        fclose(f);
    }
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}
static atomic_int bad_done;

static int bad_fn(ax_task *t, void *arg)
{
    int fd = *(int *)arg;
    atomic_store(&bad_neg, ax_wait_fd(t, -1, AX_READ, 10));
    int detail = ax_error_detail()[0] != 0;
    atomic_store(&bad_closed, ax_wait_fd(t, bad_fd_num, AX_READ, 10));
    detail &= ax_error_detail()[0] != 0;
    atomic_store(&bad_ev0, ax_wait_fd(t, fd, 0, 10));
    detail &= ax_error_detail()[0] != 0;
    atomic_store(&bad_ev8, ax_wait_fd(t, fd, 8, 10));
    detail &= ax_error_detail()[0] != 0;
    long before = rss_kb();
    atomic_store(&bad_huge, ax_wait_fd(t, 4000000, AX_READ, 10));
    detail &= ax_error_detail()[0] != 0;
    atomic_store(&bad_grew_kb, rss_kb() - before);
    atomic_store(&bad_vast, ax_wait_fd(t, 1 << 30, AX_READ, 10));
    detail &= ax_error_detail()[0] != 0;
    atomic_store(&bad_detail, detail);
    atomic_store(&bad_done, 1);
    return 0;
}

static void test_bad(ax_sched *s)
{
    int p[2], q[2];
    make_pipe(p);
    make_pipe(q);
    bad_fd_num = q[0];
    close(q[0]); /* nothing in this test opens an fd meanwhile */
    close(q[1]);
    static struct outcome o;
    submit(s, bad_fn, &p[0], 5000, &o, NULL);
    CHECK(WAIT_UNTIL(atomic_load(&o.calls) == 1, 2000));
    CHECK_EQ(atomic_load(&bad_done), 1);
    CHECK_EQ(atomic_load(&bad_neg), AX_EINVAL);
    CHECK_EQ(atomic_load(&bad_closed), AX_EINVAL);
    CHECK_EQ(atomic_load(&bad_ev0), AX_EINVAL);
    CHECK_EQ(atomic_load(&bad_ev8), AX_EINVAL);
    CHECK_EQ(atomic_load(&bad_huge), AX_EINVAL);
    long grew = atomic_load(&bad_grew_kb);
    printf("rss growth across ax_wait_fd(4000000): %ld KiB\n", grew);
    CHECK(grew < 16 * 1024); /* the old table: 48 bytes x 4 M = 192 MB */
    CHECK_EQ(atomic_load(&bad_vast), AX_EINVAL);
    CHECK_EQ(atomic_load(&bad_detail), 1);
    CHECK_EQ(atomic_load(&o.state), AX_STATE_SUCCEEDED);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    ax_sched *s = test_sched(2, 500);
    test_writer(s);
    test_timeouts(s);
    test_many(s);
    test_bad(s);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 2000));
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    return 0;
}
