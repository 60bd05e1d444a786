/* test_dump_signal_restore.c - ax_dump_on_signal gives a signal back
 * (a new user's trial of 16d186c).
 *
 * It installed its handler without keeping the one it replaced, and
 * neither "signo 0 turns it off", ax_free, nor moving a scheduler to
 * another signal put anything back: the program's own SIGUSR1 handler never
 * ran again, and a signal whose default action ends the process was
 * swallowed for good.
 *
 * Expected: once no scheduler dumps on a signal, the action that was there
 * before ax took it is back, unless the program has installed another one
 * meanwhile (that one is left alone).
 */
#include "util.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t host_runs;
static void host_handler(int sig)
{
    (void)sig;
    host_runs++;
}
static void other_handler(int sig)
{
    (void)sig;
}

static void (*handler_of(int sig))(int)
{
    struct sigaction cur;
    CHECK_EQ(sigaction(sig, NULL, &cur), 0);
    return cur.sa_handler;
}

static ax_sched *sched(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), AX_OK);
    return s;
}

int main(void)
{
    FILE *out = tmpfile();
    CHECK(out != NULL);
    CHECK(signal(SIGUSR1, host_handler) != SIG_ERR);
    CHECK(signal(SIGUSR2, SIG_DFL) != SIG_ERR);

    /* 1. On, a dump instead of the host's handler; off, the host's again. */
    ax_sched *a = sched();
    CHECK_EQ(ax_dump_on_signal(a, SIGUSR1, out), AX_OK);
    CHECK(handler_of(SIGUSR1) != host_handler);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK(WAIT_UNTIL(ftell(out) > 0, 5000));
    CHECK_EQ(host_runs, 0);
    CHECK_EQ(ax_dump_on_signal(a, 0, NULL), AX_OK);
    CHECK(handler_of(SIGUSR1) == host_handler);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(host_runs, 1);

    /* 2. Moved to another signal: the first one is given back. SIGUSR2's
     * default action (end the process) is back once it is off. */
    CHECK_EQ(ax_dump_on_signal(a, SIGUSR1, out), AX_OK);
    CHECK_EQ(ax_dump_on_signal(a, SIGUSR2, out), AX_OK);
    CHECK(handler_of(SIGUSR1) == host_handler);
    CHECK(handler_of(SIGUSR2) != SIG_DFL);
    CHECK_EQ(ax_dump_on_signal(a, 0, NULL), AX_OK);
    CHECK(handler_of(SIGUSR2) == SIG_DFL);

    /* 3. Two schedulers on one signal: it is given back when the last one
     * stops, here by ax_free. */
    ax_sched *b = sched();
    CHECK_EQ(ax_dump_on_signal(a, SIGUSR1, out), AX_OK);
    CHECK_EQ(ax_dump_on_signal(b, SIGUSR1, out), AX_OK);
    ax_free(a);
    CHECK(handler_of(SIGUSR1) != host_handler);
    ax_free(b);
    CHECK(handler_of(SIGUSR1) == host_handler);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(host_runs, 2);

    /* 4. The program took the signal back itself meanwhile: left alone. */
    a = sched();
    CHECK_EQ(ax_dump_on_signal(a, SIGUSR1, out), AX_OK);
    CHECK(signal(SIGUSR1, other_handler) != SIG_ERR);
    CHECK_EQ(ax_dump_on_signal(a, 0, NULL), AX_OK);
    CHECK(handler_of(SIGUSR1) == other_handler);

    /* 5. ... and a registration after that takes it again (review: it
     * returned AX_OK and left the program's handler in place), giving back
     * the program's newer handler when it ends. */
    CHECK_EQ(ax_dump_on_signal(a, SIGUSR1, out), AX_OK);
    CHECK(signal(SIGUSR1, host_handler) != SIG_ERR);
    CHECK_EQ(ax_dump_on_signal(a, SIGUSR1, out), AX_OK);
    CHECK(handler_of(SIGUSR1) != host_handler);
    long before = ftell(out);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK(WAIT_UNTIL(ftell(out) > before, 5000));
    CHECK_EQ(host_runs, 2);
    ax_free(a);
    CHECK(handler_of(SIGUSR1) == host_handler);

    fclose(out);
    return 0;
}
