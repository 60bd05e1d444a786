/* Review of 55ae883 (workers keep SIGPIPE blocked): the signal mask is
 * inherited across fork and kept across exec, so every program a task
 * starts directly (posix_spawn, fork + exec; a dash `sh -c` happens to reset
 * its mask, bash and most programs do not) runs with SIGPIPE blocked. Its
 * writes into a pipe whose reader went away then no longer end it: `yes`
 * under `| head` exits 1 with "write error" instead of dying of SIGPIPE,
 * and a program that ignores write errors keeps running for ever. A program
 * started from a task should see the disposition it would get from any
 * other thread. */
#include "util.h"

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/wait.h>

extern char **environ;

static atomic_int done;
static char blk[64];
static int yes_status = -1;

static int spawner(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    /* The mask a spawned program starts with. */
    int p[2];
    if (pipe(p) != 0)
        return 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    char *grep[] = {"grep", "SigBlk", "/proc/self/status", NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "grep", &fa, NULL, grep, environ) == 0) {
        close(p[1]);
        ssize_t n = read(p[0], blk, sizeof blk - 1);
        blk[n > 0 ? n : 0] = 0;
        waitpid(pid, NULL, 0);
    } else {
        close(p[1]);
    }
    close(p[0]);
    posix_spawn_file_actions_destroy(&fa);

    /* A writer whose reader is gone: SIGPIPE should end it. */
    if (pipe(p) != 0)
        return 1;
    close(p[0]);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *yes[] = {"yes", NULL};
    if (posix_spawnp(&pid, "yes", &fa, NULL, yes, environ) == 0) {
        close(p[1]);
        int st;
        if (waitpid(pid, &st, 0) == pid)
            yes_status = st;
    } else {
        close(p[1]);
    }
    posix_spawn_file_actions_destroy(&fa);
    done = 1;
    return 0;
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    ax_spec sp = {.fn = spawner, .timeout_ms = 60000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(done, 60000));
    blk[strcspn(blk, "\n")] = 0;
    fprintf(stderr, "program spawned by a task: '%s'; yes into a reader-less pipe: %s %d\n", blk,
            WIFSIGNALED(yes_status) ? "killed by signal" : "exited",
            WIFSIGNALED(yes_status) ? WTERMSIG(yes_status) : WEXITSTATUS(yes_status));
    unsigned long long mask = 0;
    CHECK(sscanf(blk, "SigBlk: %llx", &mask) == 1);
    CHECK_EQ(mask & (1ull << (SIGPIPE - 1)), 0ull); /* SIGPIPE not blocked in the child */
    CHECK(WIFSIGNALED(yes_status) && WTERMSIG(yes_status) == SIGPIPE);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    printf("ok\n");
    return 0;
}
