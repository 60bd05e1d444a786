/* test_r13_handback_cancelled.c - hand_back undoes the quota-round count of
 * a to-start job that was cancelled on the list and will never be picked
 * again (branch flake, 3d99015).
 *
 * Defect: src/watchdog.c hand_back restores s->rr / s->rr_taken to
 * w->batch_rr[batch_next] / batch_taken[batch_next] -- the round before the
 * first job still on the held worker's to-start list was picked -- whenever
 * no batch was dispatched since ("each would count twice against its
 * priority's turn, once now and once when picked again"). It does so
 * before it looks at the jobs: one that ax_cancel ended while it sat on the
 * list (js_unstart fails, it goes to `gone`) is never picked again, yet its
 * pick is undone too. It counts zero times, and its priority gets one start
 * more than its quota in that turn: the start order then depends on
 * whether the watchdog intervened, which is what 3d99015 meant to remove.
 *
 * One worker, cap 16, quotas H 2 / N 1 / L 1, paused; H1 H2 H3 H4 N1 N2 L1
 * L2 queued; resume: one batch of 8 takes them in the round's order
 * H1 H2 N1 L1 H3 H4 N2 L2. H1 runs first and cancels H2 (STARTING, on the
 * to-start list). Case A: H1 returns at once: starts H1 N1 L1 H3 H4 N2 L2
 * ("HNLHHNL": H2 spent its place in the turn). Case B: H1 then spins 300 ms
 * without yielding: the watchdog hands back H2 (gone), N1 .. L2 and
 * restores the round to (H, taken 1), so H3 starts in H1's turn: "HHNLHNL"
 * instead of "HNLHHNL". Deterministic (fails every run; the spin is 30x
 * HOLD_MS). Case A passes today. (On main without flake case B fails
 * too, "HHHNLNL": the hand-back there undoes no pick at all.)
 *
 * Fix: restore the round only to the state before the first job that is
 * handed back (unstarted), i.e. count the jobs found ended (`gone`) as
 * picked: e.g. walk take[] and, for each leading job whose js_unstart
 * fails, advance rr0/taken0 to batch_rr/batch_taken of the next index
 * (batch_next + i + 1) -- or, simpler, re-apply one round step per gone
 * job after the restore. */
#include "util.h"

#include <string.h>

static char order[64];
static atomic_int norder;
static ax_sched *S;
static uint64_t h2_id;
static atomic_int spin_ms;

static void note(ax_task *t)
{
    static const char name[] = {[AX_PRIO_HIGH] = 'H', [AX_PRIO_NORMAL] = 'N', [AX_PRIO_LOW] = 'L'};
    int i = atomic_fetch_add(&norder, 1);
    if (i < (int)sizeof order - 1)
        order[i] = name[ax_task_priority(t)];
}

static int record(ax_task *t, void *arg)
{
    (void)arg;
    note(t);
    return 0;
}

static atomic_int handed_before; /* the watchdog handed the batch back before H1 ran */

static int first(ax_task *t, void *arg)
{
    (void)arg;
    note(t);
    /* Usually H2 sits on this worker's to-start list now. But if starting
     * H1 kept the worker from switching for HOLD_MS (ASan's first stack, a
     * busy machine), the watchdog has handed the batch back already and H2
     * is queued: a queued job ax_cancel ends takes no place in the round,
     * so H3 takes H's second place (HHNLHNL), with or without the defect.
     * The HIGH bucket tells which: empty while they are on the list. */
    atomic_store(&handed_before, test_stats(S).queued[AX_PRIO_HIGH] > 0);
    CHECK_EQ(ax_cancel(S, h2_id), 0);
    uint64_t until = ax_now_ns() + (uint64_t)atomic_load(&spin_ms) * 1000000u;
    while (ax_now_ns() < until)
        __asm__ __volatile__("" ::: "memory");
    return 0;
}

static void submit(ax_priority p, ax_fn fn, uint64_t *id)
{
    ax_spec sp = {.fn = fn, .priority = p, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(S, &sp, id), 0);
}

static void one_case(int spin, const char *want)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.max_concurrency = 16;
    c.quota_high = 2;
    c.quota_normal = 1;
    c.low_guaranteed = 1;
    S = test_sched_cfg(&c);
    memset(order, 0, sizeof order);
    atomic_store(&norder, 0);
    atomic_store(&spin_ms, spin);
    CHECK_EQ(ax_pause(S), 0);
    submit(AX_PRIO_HIGH, first, NULL);
    submit(AX_PRIO_HIGH, record, &h2_id);
    submit(AX_PRIO_HIGH, record, NULL);
    submit(AX_PRIO_HIGH, record, NULL);
    submit(AX_PRIO_NORMAL, record, NULL);
    submit(AX_PRIO_NORMAL, record, NULL);
    submit(AX_PRIO_LOW, record, NULL);
    submit(AX_PRIO_LOW, record, NULL);
    CHECK_EQ(ax_resume(S), 0);
    CHECK(WAIT_UNTIL(test_stats(S).succeeded == 7 && test_stats(S).cancelled == 1, 30000));
    if (atomic_load(&handed_before)) {
        printf("spin %d ms: the watchdog handed the batch back before H1 ran: H2 was "
               "cancelled queued\n", spin);
        want = "HHNLHNL";
    }
    printf("spin %d ms: start order %s (want %s)\n", spin, order, want);
    fflush(stdout);
    CHECK_STR(order, want);
    ax_free(S);
}

int main(void)
{
    one_case(0, "HNLHHNL");   /* no hold: H2 spent its place in H's turn */
    one_case(300, "HNLHHNL"); /* held, handed back: fails, "HHNLHNL" */
    return 0;
}
