/* fork() beside a scheduler (new user's trial): in the child none of the
 * parent's threads exist, so
 *   - every entry point that would use them refuses the parent's scheduler
 *     with AX_ESTATE saying so, and ax_free leaks it with a line on stderr
 *     (ax_submit took work nothing would run, then ax_free crashed);
 *   - a dump on signal registered in the child dumps the child's own
 *     scheduler to the child's file; the parent's registration and pipe
 *     are not the child's (the child's signal dumped the parent's
 *     scheduler into the parent's file, and the child's file stayed
 *     empty).
 * Skipped (77) under qemu-user, which cannot fork a process with threads.
 * The child's own scheduler is left out under TSan, which cannot start
 * threads in such a child, and under ASan, whose allocator lock a parent
 * thread may hold at the fork: the child's threads then wait on it for
 * ever (seen in CI: every thread of the child in SizeClassAllocator64::
 * GetFromAllocator's lock). */
#include "util.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

static int parked(ax_task *t, void *arg)
{
    (void)arg;
    ax_sleep(t, 60000);
    return 0;
}

static long file_len(FILE *f)
{
    fflush(f);
    return ftell(f) >= 0 ? (fseek(f, 0, SEEK_END), ftell(f)) : -1;
}

static bool file_has(FILE *f, const char *what)
{
    fflush(f);
    rewind(f);
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    fseek(f, 0, SEEK_END);
    return found;
}

static void expect_refused(int rc, const char *who)
{
    CHECK_EQ(rc, AX_ESTATE);
    CHECK(strstr(ax_error_detail(), who) != NULL);
    CHECK(strstr(ax_error_detail(), "created before fork()") != NULL);
}

static void child(ax_sched *parent_s, uint64_t parent_id)
{
    /* The parent's scheduler: refused, never used. */
    ax_spec sp = {.fn = parked, .timeout_ms = 60000};
    expect_refused(ax_submit(parent_s, &sp, NULL), "ax_submit");
    ax_spec two[2] = {sp, sp};
    int rcs[2] = {9, 9};
    uint64_t ids[2] = {9, 9};
    expect_refused(ax_submit_batch(parent_s, two, 2, rcs, ids), "ax_submit_batch");
    /* each spec's result written, as n calls of ax_submit (new-user trial) */
    CHECK_EQ(rcs[0], AX_ESTATE);
    CHECK_EQ(rcs[1], AX_ESTATE);
    CHECK_EQ(ids[0], 0);
    CHECK_EQ(ids[1], 0);
    expect_refused(ax_cancel(parent_s, parent_id), "ax_cancel");
    ax_stats st;
    expect_refused(ax_stats_get(parent_s, &st), "ax_stats_get");
    expect_refused(ax_pause(parent_s), "ax_pause");
    expect_refused(ax_dump(parent_s, stderr, 0), "ax_dump");
    /* Every other call on it too (review: ax_events_flush and
     * ax_events_callback waited for ever for the parent's event thread;
     * ax_metrics_serve started a server over it). */
    expect_refused(ax_events_flush(parent_s), "ax_events_flush");
    expect_refused(ax_events_callback(parent_s, NULL, NULL), "ax_events_callback");
    expect_refused(ax_events_lossless(parent_s, true), "ax_events_lossless");
    ax_metrics m;
    expect_refused(ax_metrics_get(parent_s, &m), "ax_metrics_get");
    expect_refused(ax_metrics_serve(parent_s, "127.0.0.1:0", NULL), "ax_metrics_serve");
    expect_refused(ax_set_max_concurrency(parent_s, 5), "ax_set_max_concurrency");
    expect_refused(ax_set_retry_enabled(parent_s, AX_PRIO_LOW, false), "ax_set_retry_enabled");
    unsigned cid;
    expect_refused(ax_class_find(parent_s, "x", &cid), "ax_class_find");
    expect_refused(ax_shutdown(parent_s, 100), "ax_shutdown");
    ax_free(parent_s); /* leaked, said on stderr */
    if (UNDER_TSAN || UNDER_ASAN)
        return;

    /* Its own scheduler, dumped on the same signal into its own file. */
    ax_sched *s = test_sched(1, 10);
    sp.trace_id = "CHILD-TASK";
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    FILE *cf = tmpfile();
    CHECK(cf != NULL);
    CHECK_EQ(ax_dump_on_signal(s, SIGUSR1, cf), 0);
    CHECK(WAIT_UNTIL(ax_stats_get(s, &st) == 0 && st.running == 1, 10000));
    raise(SIGUSR1);
    CHECK(WAIT_UNTIL(file_has(cf, "CHILD-TASK"), 20000));
    CHECK_EQ(ax_dump_on_signal(s, 0, NULL), 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    fclose(cf);
}

int main(void)
{
    if (getenv("AX_TEST_QEMU")) {
        fprintf(stderr, "under qemu-user: skipped (fork with threads)\n");
        return 77;
    }
    ax_sched *s = test_sched(1, 10);
    uint64_t id;
    ax_spec sp = {.fn = parked, .timeout_ms = 60000, .trace_id = "PARENT-TASK"};
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    FILE *pf = tmpfile();
    CHECK(pf != NULL);
    CHECK_EQ(ax_dump_on_signal(s, SIGUSR1, pf), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        child(s, id);
        fflush(NULL);
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        fprintf(stderr, "child: status %#x\n", status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* Nothing of the child's reached the parent's file (it was dumped
     * there, the parent's own scheduler, before). */
    CHECK_EQ(file_len(pf), 0);
    /* And the parent's registration still works in the parent. */
    raise(SIGUSR1);
    CHECK(WAIT_UNTIL(file_has(pf, "PARENT-TASK"), 20000));
    CHECK(!file_has(pf, "CHILD-TASK"));
    CHECK_EQ(ax_cancel(s, id), 0);
    CHECK_EQ(ax_dump_on_signal(s, 0, NULL), 0);
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    ax_free(s);
    fclose(pf);
    return 0;
}
