/* test_metrics_append_reenter.c - an appender that calls ax_metrics_append
 * or ax_metrics_unappend (which ax.h forbids) is refused with AX_ESTATE
 * and a detail naming the reason; the scrape it runs in still answers over
 * HTTP with the appender's text, and ax_shutdown and ax_free return.
 *
 * Before the refusal the call waited for mappend_lock, which the scrape
 * running the appender holds: the `ax-metrics` thread deadlocked, the
 * scrape never answered and ax_shutdown hung joining that thread. A
 * deadlock is what this test would find, so an alarm bounds it: it fails
 * (exit 1, saying where it was) instead of hanging. The bound is for
 * liveness only, generous for sanitizers and a loaded machine.
 *
 * The appender also calls ax_shutdown and ax_free on its own scheduler,
 * which ax.h refuses from the scheduler's own callbacks. Before they were
 * (a new user's trial), ax_shutdown returned 0 after stopping the endpoint
 * from the thread it was answering on: its server freed under it, a
 * heap-use-after-free (ASan) or "free(): corrupted unsorted chunks"; and
 * ax_free freed the whole scheduler there. Another scheduler's are refused
 * there too: two schedulers' appenders shutting each other down joined
 * each other's metrics thread for ever (a review, 4 of 4 runs).
 */
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define LIVENESS_S 60

static const char *volatile stage = "start";

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_metrics_append_reenter: no progress within the bound, at: ";
    /* best effort: the exit status is what fails the test */
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    w += write(STDERR_FILENO, stage, strlen(stage));
    w += write(STDERR_FILENO, "\n", 1);
    (void)w;
    _exit(1);
}

/* What the reentering appender saw, by the thread that runs it. */
static ax_sched *other; /* a second scheduler: refused there too */
static int rc_unappend, rc_append, rc_other, rc_shutdown, rc_shutdown_other, rc_flush_other;
static char detail_unappend[256], detail_append[256], detail_shutdown[256];
static int calls;

static int nothing(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return 0;
}

static long quiet(char *buf, size_t len, void *arg)
{
    (void)buf, (void)len, (void)arg;
    return 0;
}

static long reenter(char *buf, size_t len, void *arg)
{
    ax_sched *s = arg;
    calls++;
    rc_unappend = ax_metrics_unappend(s, reenter, arg);
    snprintf(detail_unappend, sizeof detail_unappend, "%s", ax_error_detail());
    rc_append = ax_metrics_append(s, quiet, NULL);
    snprintf(detail_append, sizeof detail_append, "%s", ax_error_detail());
    rc_other = ax_metrics_append(other, quiet, NULL);
    rc_shutdown = ax_shutdown(s, 10);
    snprintf(detail_shutdown, sizeof detail_shutdown, "%s", ax_error_detail());
    ax_free(s); /* refused: a line on stderr, nothing freed */
    /* Another scheduler's too: two appenders stopping each other's
     * scheduler joined each other's metrics thread for ever (review). */
    rc_shutdown_other = ax_shutdown(other, 10);
    ax_free(other);
    rc_flush_other = ax_events_flush(other); /* waits for an event thread */
    return snprintf(buf, len, "reenter_up 1\n");
}

/* GET /metrics on port: the whole answer, within LIVENESS_S (the alarm). */
static char *get_metrics(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(send(fd, req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    CHECK(out != NULL);
    for (ssize_t r; (r = read(fd, out + n, cap - 1 - n)) != 0;) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == ECONNRESET)
            break;
        CHECK(r > 0);
        n += (size_t)r;
        CHECK(n < cap - 1);
    }
    out[n] = 0;
    close(fd);
    return out;
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    alarm(LIVENESS_S);

    ax_sched *s = test_sched(1, 4);
    other = test_sched(1, 4);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), AX_OK);
    CHECK_EQ(ax_metrics_append(s, reenter, s), AX_OK);

    stage = "first scrape (the appender calls unappend and append)";
    char *t = get_metrics(port);
    CHECK(strncmp(t, "HTTP/1.1 200", 12) == 0);
    CHECK(strstr(t, "\nreenter_up 1\n") != NULL);
    CHECK(strstr(t, "ax_tasks_submitted_total") != NULL);
    free(t);
    CHECK_EQ(calls, 1);
    CHECK_EQ(rc_unappend, AX_ESTATE);
    CHECK(strstr(detail_unappend, "ax_metrics_unappend: called from a metrics appender") != NULL);
    CHECK_EQ(rc_append, AX_ESTATE);
    CHECK(strstr(detail_append, "ax_metrics_append: called from a metrics appender") != NULL);
    CHECK_EQ(rc_other, AX_ESTATE);
    CHECK_EQ(rc_shutdown, AX_ESTATE);
    CHECK_EQ(rc_shutdown_other, AX_ESTATE);
    CHECK_EQ(rc_flush_other, AX_ESTATE);
    CHECK(strstr(detail_shutdown, "ax_shutdown: called from one of its own tasks or callbacks") !=
          NULL);
    /* Not shutting down: still admits work */
    CHECK_EQ(ax_submit(s, &(ax_spec){.fn = nothing, .timeout_ms = 1000}, NULL), AX_OK);

    /* Refused, so nothing changed: the appender is still there and quiet
     * never was; outside an appender both calls work. */
    stage = "second scrape";
    t = get_metrics(port);
    CHECK(strstr(t, "\nreenter_up 1\n") != NULL);
    free(t);
    CHECK_EQ(calls, 2);
    CHECK_EQ(ax_metrics_unappend(s, quiet, NULL), AX_ENOTFOUND);
    CHECK_EQ(ax_metrics_unappend(other, quiet, NULL), AX_ENOTFOUND);
    CHECK_EQ(ax_metrics_unappend(s, reenter, s), AX_OK);
    CHECK_EQ(ax_metrics_append(s, quiet, NULL), AX_OK);
    stage = "third scrape";
    t = get_metrics(port);
    CHECK(strstr(t, "reenter_up") == NULL);
    free(t);
    CHECK_EQ(calls, 2);

    /* Registered again: ax_shutdown stops the endpoint (joins the thread
     * that ran the appender) and returns. */
    CHECK_EQ(ax_metrics_append(s, reenter, s), AX_OK);
    stage = "ax_shutdown";
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    stage = "ax_free";
    ax_free(s);
    ax_free(other);
    alarm(0);
    return 0;
}
