/* test_task_current.c - ax_task_current(): the task running on the calling
 * thread inside a task (also after a yield and a sleep, which may resume
 * it on the same worker after others ran), NULL outside one: on the
 * submitting thread and in on_done. */
#include "util.h"

static atomic_int ok_in_task, null_in_done = -1, runs;

static int fn(ax_task *t, void *arg)
{
    ax_sched *s = arg;
    int ok = ax_task_current() == t && ax_task_sched(ax_task_current()) == s;
    CHECK_EQ(ax_yield(t), 0);
    ok = ok && ax_task_current() == t;
    CHECK_EQ(ax_sleep(t, 2), 0);
    ok = ok && ax_task_current() == t;
    if (ok)
        atomic_fetch_add(&ok_in_task, 1);
    return 0;
}

static void done(const ax_result *r, void *arg)
{
    (void)r, (void)arg;
    if (ax_task_current() == NULL)
        atomic_store(&null_in_done, 1);
    atomic_fetch_add(&runs, 1);
}

int main(void)
{
    CHECK(ax_task_current() == NULL);
    ax_sched *s = test_sched(2, 8);
    for (int i = 0; i < 20; i++) {
        ax_spec sp = {.fn = fn, .arg = s, .timeout_ms = 5000, .on_done = done};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&runs) == 20, 10000));
    CHECK_EQ(atomic_load(&ok_in_task), 20);
    CHECK_EQ(atomic_load(&null_in_done), 1);
    CHECK(ax_task_current() == NULL);
    ax_free(s);
    return 0;
}
