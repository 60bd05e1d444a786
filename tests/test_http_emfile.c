/* A request that cannot have a socket says why: the process's fd table is
 * full (EMFILE, RLIMIT_NOFILE), not "Couldn't connect to server", which is
 * all curl says (a new user's trial: after a burst near the fd limit every
 * failure read as a refused connection). curl's own CURLINFO_OS_ERRNO is
 * no help: on a reused easy handle it still holds the errno of the earlier
 * connect ("Connection refused"), so the first request here is refused on
 * purpose. The sockets ax_http_get/post open are close-on-exec.
 */
#include "util.h"

#include "ax_http.h"

#include <sys/resource.h>
#include <sys/socket.h>

static atomic_int finished;
static char first[512], second[512];
static int first_rc = 1, second_rc = 1;

static int task(ax_task *t, void *arg)
{
    (void)arg;
    /* A port nothing listens on: refused, and the worker's curl set up
     * (its multi handle's own fds opened) before the limit comes down. */
    ax_http_response r;
    first_rc = ax_http_get(t, "http://127.0.0.1:1/", 10000, &r);
    snprintf(first, sizeof first, "%s", ax_error_detail());
    ax_http_response_free(&r);
    /* The lowest free fd becomes the limit: no new fd can be had. */
    int lowest = dup(0);
    CHECK(lowest >= 0);
    close(lowest);
    struct rlimit old, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = (rlim_t)lowest;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    second_rc = ax_http_get(t, "http://127.0.0.1:1/", 10000, &r);
    snprintf(second, sizeof second, "%s", ax_error_detail());
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    ax_http_response_free(&r);
    atomic_store(&finished, 1);
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_spec sp = {.fn = task, .timeout_ms = 60000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&finished) == 1, 60000));
    fprintf(stderr, "refused: %s\nno fd: %s\n", first, second);
    CHECK_EQ(first_rc, AX_ENET);
    CHECK(strstr(first, "Couldn't connect") != NULL);
    CHECK(strstr(first, "Too many open files") == NULL);
    CHECK_EQ(second_rc, AX_ENET);
    CHECK(strstr(second, "ax_http_get: cannot open a socket: Too many open files") != NULL);
    CHECK(strstr(second, "RLIMIT_NOFILE") != NULL);
    CHECK_EQ(ax_shutdown(s, 10000), 0);
    ax_free(s);
    return 0;
}
