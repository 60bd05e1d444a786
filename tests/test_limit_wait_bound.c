/* test_limit_wait_bound.c - the slow start's wait after a drop, and the
 * mark under a lowered cap (limit.c), driven with synthetic samples as
 * test_limit.c does. From an adversarial review of the counted wait; each
 * case failed before the fix (the wait's bound was the drop's own latency,
 * and ax_limit_set_max did not exist: the cap's change left the mark).
 *
 *  A. A drop whose latency is shorter than the class timeout (an attempt cut
 *     by the task's deadline_ns, a per-spec timeout_ms, or the class timeout
 *     lowered by ax_class_set_timeout) ends the wait drop_rtt_ns after it,
 *     whatever the count: 20 attempts beside it, none back, and the slow
 *     start doubles 0.2 s later (README: "once every attempt that was in
 *     flight beside the last timed-out one is back (a timeout after it at
 *     the latest ...)").
 *  A2. A later short drop also cuts an earlier long drop's timed wait.
 *  B. A sample whose `now` is earlier than last_drop_ns (a caller's clock
 *     behind the drop's) makes now - last_drop_ns wrap: quiet at once.
 *  C. class_cap_changed (and ax_set_max_concurrency for config.adaptive_limit)
 *     lowers cfg.max under a mark: the mark stays above max forever and
 *     every clean window counts a "doubling" that does not move the limit.
 */
#include "check.h"
#include "overload/overload.h"

#include <limits.h>
#include <math.h>

#define MS 1000000ull

static uint64_t now_ns;
static struct ax_limit_cfg cfg(unsigned min, unsigned max, unsigned initial)
{
    return (struct ax_limit_cfg){
        .min = min, .max = max, .initial = initial,
        .smoothing = AX_LIMIT_DEFAULT_SMOOTHING, .tolerance = AX_LIMIT_DEFAULT_TOLERANCE,
        .window_ns = AX_LIMIT_DEFAULT_WINDOW_NS, .window_samples = AX_LIMIT_DEFAULT_WINDOW_SAMPLES,
        .long_window = AX_LIMIT_DEFAULT_LONG_WINDOW,
    };
}

/* One window of 10 samples at `rtt`, all began after any earlier drop
 * (rtt 100 ms < the 100 ms since the last close), saturated. */
static unsigned window(struct ax_limit *l, uint64_t rtt)
{
    now_ns += 100 * MS;
    unsigned in = ax_limit_get(l);
    for (unsigned i = 0; i < 10; i++)
        ax_limit_sample(l, now_ns, rtt, in, false);
    return ax_limit_get(l);
}

/* test_limit.c's collapse: 500 at a 100 ms baseline, then 10x for 10 s:
 * limit 5, mark 250. */
static void collapse(struct ax_limit *l)
{
    struct ax_limit_cfg c = cfg(1, 500, 500);
    now_ns = 0;
    ax_limit_init(l, &c, now_ns);
    for (int i = 0; i < 50; i++)
        window(l, 100 * MS);
    for (int i = 0; i < 100; i++)
        window(l, 1000 * MS);
    CHECK_EQ(ax_limit_get(l), 5);
    CHECK(fabs(l->mark - 250) < 1e-9);
}

/* Windows at the baseline for `span` ns after now; returns ns from `from`
 * to the first doubling (0: none). */
static uint64_t first_doubling(struct ax_limit *l, uint64_t from, uint64_t span)
{
    uint64_t end = now_ns + span, d0 = l->doublings;
    while (now_ns < end) {
        window(l, 100 * MS);
        if (l->doublings != d0)
            return now_ns - from;
    }
    return 0;
}

static void case_a(void)
{
    struct ax_limit l;
    collapse(&l);
    /* A storm at a 10 s class timeout: 21 in flight; one of them, whose task
     * deadline_ns was near, ends TIMED_OUT after 50 ms (a drop). The other
     * 20 are stalled and will come back as drops up to 10 s later. */
    now_ns += 100 * MS;
    for (int i = 0; i < 9; i++)
        ax_limit_sample(&l, now_ns, 100 * MS, 21, false);
    ax_limit_sample_timeout(&l, now_ns, 50 * MS, 21, true, 10000 * MS, false); /* class timeout 10 s */
    uint64_t drop = now_ns;
    fprintf(stderr, "A: drop with 20 beside: drop_pending %u, drop_rtt %llu ms\n", l.drop_pending,
            (unsigned long long)(l.drop_rtt_ns / MS));
    CHECK_EQ(l.drop_pending, 20);
    /* None of the 20 comes back in the next 2 s (every sample began after
     * the drop). */
    uint64_t t = first_doubling(&l, drop, 2000 * MS);
    fprintf(stderr, "A: first doubling %llu ms after the drop, drop_pending still %u\n",
            (unsigned long long)(t / MS), l.drop_pending);
    CHECK_SOFT(t == 0, "doubled %llu ms after a drop with %u of its 20 beside still out",
         (unsigned long long)(t / MS), l.drop_pending);
}

static void case_a2(void)
{
    struct ax_limit l;
    collapse(&l);
    /* A drop at the 10 s timeout with 5 in flight (too few to count: the
     * timeout decides, 10 s), then 100 ms later a deadline-cut drop (60 ms). */
    now_ns += 100 * MS;
    for (int i = 0; i < 9; i++)
        ax_limit_sample(&l, now_ns, 100 * MS, 5, false);
    ax_limit_sample(&l, now_ns, 10000 * MS, 5, true);
    uint64_t drop1 = now_ns;
    now_ns += 100 * MS;
    for (int i = 0; i < 9; i++)
        ax_limit_sample(&l, now_ns, 100 * MS, 5, false);
    ax_limit_sample(&l, now_ns, 60 * MS, 5, true);
    uint64_t t = first_doubling(&l, drop1, 5000 * MS);
    fprintf(stderr, "A2: 10 s-timeout drop, then a 60 ms drop: first doubling %llu ms after "
                    "the 10 s one\n", (unsigned long long)(t / MS));
    CHECK_SOFT(t == 0 || t >= 10000 * MS, "the 60 ms drop cut the 10 s drop's wait to %llu ms",
         (unsigned long long)(t / MS));
}

static void case_b(void)
{
    struct ax_limit l;
    collapse(&l);
    uint64_t base = now_ns;
    /* The drop's sample comes first in a fresh window, stamped by a caller
     * whose clock reads 1 s later than the others' (the finisher's
     * now_ns() against a worker's cached clock, say); it does not close
     * the window (1 sample). */
    ax_limit_sample(&l, base + 1000 * MS, 10000 * MS, 5, true);
    CHECK_EQ(l.drop_pending, UINT_MAX); /* 10 s: only the timeout decides */
    /* The others, 100..400 ms behind it: the window holding the drop closes,
     * then two clean windows. */
    now_ns = base + 50 * MS;
    uint64_t d0 = l.doublings;
    for (int w = 0; w < 3; w++)
        window(&l, 10 * MS);
    fprintf(stderr, "B: samples stamped %llu ms before a 10 s drop: doublings +%llu\n",
            (unsigned long long)((base + 1000 * MS - now_ns) / MS),
            (unsigned long long)(l.doublings - d0));
    CHECK_SOFT(l.doublings == d0, "now < last_drop_ns wrapped: doubled before the drop's timeout");
}

static void case_c(void)
{
    struct ax_limit l;
    collapse(&l); /* limit 5, mark 250 */
    /* class_cap_changed(s, 40), verbatim (class.c:652-655). */
    ax_limit_set_max(&l, 40);
    uint64_t d0 = l.doublings;
    for (int i = 0; i < 50; i++) /* 5 s at the baseline, saturated */
        window(&l, 100 * MS);
    fprintf(stderr, "C: cap 40: limit %u, mark %.0f, doublings +%llu in 50 windows\n",
            ax_limit_get(&l), l.mark, (unsigned long long)(l.doublings - d0));
    CHECK_SOFT(l.mark <= l.cfg.max, "mark %.0f above max %u", l.mark, l.cfg.max);
    CHECK_SOFT(l.doublings - d0 <= 3, "%llu doublings counted, limit pinned at %u",
         (unsigned long long)(l.doublings - d0), ax_limit_get(&l));
}

int main(void)
{
    case_a();
    case_a2();
    case_b();
    case_c();
    return check_soft_result("test_limit_wait_bound");
}
