/* test_join_bound_at_deadline.c - when a bounded wait returns after the
 * task's deadline, its message says the deadline passed, not its own bound
 * (join.c, task.c wait_result).
 *
 * Timers fire by wheel tick (65.5 us), a deadline's at the first tick at or
 * after it. A join bound due a little before the parent's deadline, found
 * due by a worker that was busy until just past the deadline, but before
 * the deadline's own tick, woke the parent with the attempt not yet ended:
 * the text said "its bound of 50 ms passed" although the deadline had
 * passed (a new user's trial: 0.002 ms after it; 11 ms under TSan), and a
 * caller that joins again on that text finds its attempt gone. Made likely
 * here, each round on one worker: P (timeout 100 ms) joins a child that
 * sleeps 1 s with a 50 ms bound that falls 0.3 ms before P's deadline D;
 * H sleeps until D - 1 ms, then spins to just past D, inside D's tick, and
 * returns. Checked every round, exactly: the text is the deadline's when
 * the join returned at or after D, its bound's before D (a busy machine can
 * make either happen: its rounds are checked all the same). The old code: "its bound" after D in most rounds. */
#include "util.h"

#define ROUNDS 8
#define TICK_NS 65536u

static atomic_ullong p_deadline, p_child;
static atomic_int p_rc, after_deadline, msg_ok, msg_bad, h_done, p_returned;
static char p_msg[512];

static int child(ax_task *t, void *arg)
{
    (void)arg;
    ax_sleep(t, 1000);
    return 0;
}

static int task_p(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t d = ax_task_deadline_ns(t);
    ax_spec c = {.fn = child, .timeout_ms = 5000};
    uint64_t id = 0;
    CHECK_EQ(ax_spawn(t, &c, &id), AX_OK);
    atomic_store(&p_child, id);
    atomic_store(&p_deadline, d);
    /* The bound's end: D - 0.3 ms, a few ticks before D's. Asleep most
     * of the way (a worker held 10 ms is the watchdog's). */
    uint64_t now = ax_now_ns();
    if (now + 52000000u < d)
        ax_sleep(t, (d - 52000000u - now) / 1000000u);
    while (ax_now_ns() < d - 50300000u)
        ;
    int rc = ax_join(t, id, 50, NULL);
    now = ax_now_ns();
    snprintf(p_msg, sizeof p_msg, "%s", ax_error_detail());
    atomic_store(&p_rc, rc);
    bool late = now >= d;
    atomic_store(&after_deadline, late);
    /* Late: the join's own text, or the blocking entry's if the attempt
     * had ended before it (a machine that kept P off its CPU). */
    const char *want = late ? "deadline passed" : "ax_join: its bound of 50 ms passed before task ";
    if (strstr(p_msg, want))
        atomic_fetch_add(&msg_ok, 1);
    else {
        fprintf(stderr, "joined %.3f ms %s the deadline: %s\n",
                late ? (double)(now - d) / 1e6 : (double)(d - now) / 1e6,
                late ? "after" : "before", p_msg);
        atomic_fetch_add(&msg_bad, 1);
    }
    /* Its on_done may run before this (at the deadline, the attempt
     * ended): the round waits for this instead. */
    atomic_fetch_add(&p_returned, 1);
    return 0;
}

static int task_h(ax_task *t, void *arg)
{
    (void)arg;
    while (atomic_load(&p_deadline) == 0)
        ax_sleep(t, 1);
    uint64_t d = atomic_load(&p_deadline);
    uint64_t now = ax_now_ns();
    if (now + 1000000u < d)
        ax_sleep(t, (d - 1000000u - now) / 1000000u);
    /* Past D, before the tick D's timer waits for (if D is on a tick,
     * at once: the deadline is then due with the bound). */
    uint64_t tick_end = (d / TICK_NS + 1) * TICK_NS;
    uint64_t until = d + (tick_end - d) / 2;
    while (ax_now_ns() < until)
        ;
    return 0;
}

static void done_h(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&h_done, 1);
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    ax_sched *s = test_sched_cfg(&c);
    int late_rounds = 0;
    for (int r = 0; r < ROUNDS; r++) {
        atomic_store(&p_deadline, 0);
        ax_spec h = {.fn = task_h, .timeout_ms = 5000, .on_done = done_h};
        ax_spec p = {.fn = task_p, .timeout_ms = 100};
        CHECK_EQ(ax_submit(s, &p, NULL), AX_OK);
        CHECK_EQ(ax_submit(s, &h, NULL), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&h_done) == r + 1 && atomic_load(&p_returned) == r + 1,
                         30000 * TEST_SLOW));
        CHECK_EQ(atomic_load(&p_rc), AX_ETIMEDOUT);
        late_rounds += atomic_load(&after_deadline);
    }
    fprintf(stderr, "%d of %d joins returned at or after the deadline; texts right: %d\n",
            late_rounds, ROUNDS, atomic_load(&msg_ok));
    CHECK_EQ(atomic_load(&msg_bad), 0);
    CHECK_EQ(atomic_load(&msg_ok), ROUNDS);
    CHECK_EQ(ax_shutdown(s, 10000), AX_OK);
    ax_free(s);
    return 0;
}
