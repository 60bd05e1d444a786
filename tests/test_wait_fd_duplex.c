/* one connection, two tasks -- a reader parked in ax_read and a
 * writer whose ax_write fills the socket buffer and must wait for room --
 * the ordinary full-duplex pattern. On one worker the writer's wait is
 * refused with AX_EBUSY ("another task on this worker waits on fd N"):
 * the epoll registration is per fd, not per direction, so whether the
 * pattern works depends on which workers the two tasks landed on, which
 * the caller does not choose. Expected: the writer parks for AX_WRITE while
 * the reader is parked for AX_READ, and both complete. */
#include "util.h"

#include <pthread.h>
#include <sys/socket.h>

#define BIG (4u << 20) /* far more than a socket buffer holds */

static int fd;
static atomic_int reader_parked, reader_done, writer_done;
static atomic_llong reader_rc = 99, writer_rc = 99;
static char *big;

static int reader(ax_task *t, void *arg)
{
    (void)arg;
    char b[16];
    atomic_store(&reader_parked, 1);
    atomic_store(&reader_rc, ax_read(t, fd, b, sizeof b, 60000));
    atomic_store(&reader_done, 1);
    return 0;
}

static int writer(ax_task *t, void *arg)
{
    (void)arg;
    ssize_t n = ax_write(t, fd, big, BIG, 60000);
    if (n < 0)
        fprintf(stderr, "writer: %s: %s\n", ax_strerror((int)n), ax_error_detail());
    atomic_store(&writer_rc, n);
    atomic_store(&writer_done, 1);
    return 0;
}

static atomic_long drained;
static int peer;
static void *drain(void *arg)
{
    (void)arg;
    char b[65536];
    ssize_t n;
    while ((n = read(peer, b, sizeof b)) > 0)
        if (atomic_fetch_add(&drained, n) + n >= (long)BIG)
            break;
    return NULL;
}

int main(void)
{
    big = calloc(1, BIG);
    CHECK(big != NULL);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fd = sv[0];
    peer = sv[1];
    ax_sched *s = test_sched(1, 16);
    ax_spec sp = {.fn = reader, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&reader_parked), 60000));
    usleep(20000);
    sp = (ax_spec){.fn = writer, .timeout_ms = 120000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    usleep(100000); /* the writer has filled the buffer and waits for room */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, drain, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&writer_done), 60000));
    CHECK_EQ(atomic_load(&writer_rc), (long long)BIG);
    pthread_join(th, NULL);
    CHECK_EQ(write(peer, "pong", 4), 4);
    CHECK(WAIT_UNTIL(atomic_load(&reader_done), 60000));
    CHECK_EQ(atomic_load(&reader_rc), 4);
    close(sv[0]);
    close(sv[1]);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    free(big);
    return 0;
}
