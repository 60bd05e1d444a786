/* test_limit.c - the adaptive concurrency limit (src/overload/limit.c).
 *
 * Synthetic time and synthetic latency series only: a "window" below is ten
 * samples stamped 100 ms after the previous window closed, which is exactly
 * one window at the defaults (100 ms, 10 samples), so N windows = N x 100 ms.
 * Unless a test says otherwise the attempts in flight equal the limit (the
 * class is saturated) and the bounds are [1, 500].
 *
 * The numbers asserted (defaults: smoothing 0.2, tolerance 1.5, long 600):
 *  - from 50 at a steady 100 ms: 500 after exactly 154 windows, then stays;
 *  - one window at 2x the baseline: 500 -> 480 (the formula, by hand);
 *  - a 10x step (100 ms -> 1 s) from 500: below 250 at window 8 (0.8 s),
 *    not before; at most 10 after 100 windows (10 s);
 *  - the step back to 100 ms: 5 -> 6, then slow start 12, 24, 48, 95, 191,
 *    250 (the mark: half the 500 it fell from), then >= 450 (within 10 % of
 *    max) after exactly 11 windows = 1.1 s (23 without slow start);
 *  - no doubling with a drop, app-limited, over tolerance, or on a clean
 *    window that is not the second in a row; a fall after a doubling moves
 *    the mark to half the limit it fell from;
 *  - after a drop at a 10 s timeout with 10 more in flight: the first
 *    doubling 0.2 s after it once those 10 are back; none before the
 *    timeout while one is still out, or with fewer than 10 beside it;
 *  - the baseline decays x0.95 per window while it is over 2 x the latency;
 *  - app-limited (in flight < limit/2): not one step up in 300 windows;
 *  - 2 of 10 samples dropped at the baseline latency: 500 -> 480 -> ... ->
 *    332 after 10 windows; 1 of 10 from 50: 49 (never grows);
 *  - the first 10 windows' means are averaged plainly into the baseline
 *    (a fast first window does not lower the limit of a steady upstream);
 *  - a random walk of 20 000 windows never leaves [min, max].
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
        .min = min,
        .max = max,
        .initial = initial,
        .smoothing = AX_LIMIT_DEFAULT_SMOOTHING,
        .tolerance = AX_LIMIT_DEFAULT_TOLERANCE,
        .window_ns = AX_LIMIT_DEFAULT_WINDOW_NS,
        .window_samples = AX_LIMIT_DEFAULT_WINDOW_SAMPLES,
        .long_window = AX_LIMIT_DEFAULT_LONG_WINDOW,
    };
}

/* One window: 10 samples of `rtt`, the first `drops` of them dropped, with
 * `inflight` in flight (0: the current limit). Checks it closed exactly one
 * window and that the limit stayed in bounds. */
static unsigned window(struct ax_limit *l, uint64_t rtt, unsigned inflight, unsigned drops)
{
    uint64_t before = l->updates;
    now_ns += 100 * MS;
    unsigned in = inflight ? inflight : ax_limit_get(l);
    for (unsigned i = 0; i < 10; i++)
        ax_limit_sample(l, now_ns, rtt, in, i < drops);
    CHECK_EQ(l->updates, before + 1);
    unsigned v = ax_limit_get(l);
    CHECK(v >= l->cfg.min && v <= l->cfg.max);
    return v;
}

/* A window closes only after window_ns AND window_samples. */
static void test_window_rule(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(1, 500, 100);
    now_ns = 5000 * MS;
    ax_limit_init(&l, &c, now_ns);
    CHECK_EQ(ax_limit_get(&l), 100);
    for (int i = 0; i < 50; i++) /* many samples, too early */
        ax_limit_sample(&l, now_ns + 99 * MS, 100 * MS, 100, false);
    CHECK_EQ(l.updates, 0);
    struct ax_limit l2;
    ax_limit_init(&l2, &c, now_ns);
    for (int i = 0; i < 9; i++) { /* late enough, too few */
        ax_limit_sample(&l2, now_ns + 500 * MS, 100 * MS, 100, false);
        CHECK_EQ(l2.updates, 0);
    }
    ax_limit_sample(&l2, now_ns + 500 * MS, 100 * MS, 100, false); /* the 10th */
    CHECK_EQ(l2.updates, 1);
    CHECK_EQ(l2.short_n, 0); /* a new window opened */
    CHECK_EQ(l2.window_start, now_ns + 500 * MS);
    CHECK(l2.long_rtt == 100.0 * MS); /* the first window seeds the baseline */
    /* At the baseline with 100 in flight: 100 x 0.8 + (100 + 10) x 0.2 = 102. */
    CHECK_EQ(ax_limit_get(&l2), 102);
    /* Closing needs window_ns since the last close: 99 ms later, no. */
    for (int i = 0; i < 20; i++)
        ax_limit_sample(&l2, now_ns + 599 * MS, 100 * MS, 100, false);
    CHECK_EQ(l2.updates, 1);
    ax_limit_sample(&l2, now_ns + 600 * MS, 100 * MS, 100, false);
    CHECK_EQ(l2.updates, 2);
}

/* Steady latency at full in-flight: climbs to max and stays there. */
static void test_steady_climb(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(1, 500, 50);
    now_ns = 0;
    ax_limit_init(&l, &c, now_ns);
    unsigned prev = 50, at_max = 0;
    for (unsigned w = 1; w <= 400; w++) {
        unsigned v = window(&l, 100 * MS, 0, 0);
        CHECK(v >= prev); /* never a step down at a steady latency */
        prev = v;
        if (v == 500 && !at_max) at_max = w;
    }
    /* sqrt headroom x smoothing per window: 50 -> 500 is slow by design
     * (limit.c: no evidence of a faster upstream, only of no queue). */
    CHECK_EQ(at_max, 154);
    CHECK_EQ(prev, 500);
}

/* The gradient formula by hand: one window at 2x the baseline. */
static void test_gradient_formula(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(1, 500, 500);
    now_ns = 0;
    ax_limit_init(&l, &c, now_ns);
    for (int i = 0; i < 20; i++)
        window(&l, 100 * MS, 0, 0);
    CHECK_EQ(ax_limit_get(&l), 500);
    CHECK(fabs(l.long_rtt - 100.0 * MS) < 1);
    window(&l, 200 * MS, 0, 0);
    /* long = 100 + (200 - 100) x 2/601 = 100.333 ms; gradient = 1.5 x
     * 100.333 / 200 = 0.7525; estimate = 500 x 0.7525 + sqrt(500) = 398.6;
     * limit = 500 x 0.8 + 398.6 x 0.2 = 479.7 -> 480. */
    CHECK(fabs(l.long_rtt - (100.0 + 100.0 * 2 / 601) * MS) < 1);
    CHECK(fabs(l.last_gradient - 1.5 * (100.0 + 100.0 * 2 / 601) / 200) < 1e-9);
    CHECK_EQ(ax_limit_get(&l), 480);
    /* Within tolerance (1.4x): gradient 1, the limit does not fall. */
    struct ax_limit l2;
    ax_limit_init(&l2, &c, now_ns);
    for (int i = 0; i < 20; i++)
        window(&l2, 100 * MS, 0, 0);
    window(&l2, 140 * MS, 0, 0);
    CHECK(l2.last_gradient == 1.0);
    CHECK_EQ(ax_limit_get(&l2), 500);
}

/* A 10x latency step and back: falls fast, not at once; climbs back. */
static void test_step_and_recovery(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(1, 500, 500);
    now_ns = 0;
    ax_limit_init(&l, &c, now_ns);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(window(&l, 100 * MS, 0, 0), 500);

    unsigned below = 0, prev = 500;
    for (unsigned w = 1; w <= 100; w++) {
        unsigned v = window(&l, 1000 * MS, 0, 0);
        CHECK(v <= prev);
        prev = v;
        if (v < 250 && !below) below = w;
        if (w <= 90) CHECK(l.last_gradient == 0.5); /* the floor: never more than half */
    }
    CHECK_EQ(below, 8); /* 0.8 s at the default window */
    CHECK_LE(prev, 10);
    CHECK(l.last_gradient > 0.5); /* after 10 s the baseline starts to follow */

    CHECK(fabs(l.mark - 250) < 1e-9); /* half the 500 it first fell from */

    /* Back to 100 ms: the baseline (~355 ms) is over 2x, so it decays x0.95
     * after its average step; slow start doubles up to the mark, then the
     * growth term doubles the estimate. */
    double long_before = l.long_rtt;
    window(&l, 100 * MS, 0, 0);
    double expect = (long_before + (100.0 * MS - long_before) * 2 / 601) * 0.95;
    CHECK(fabs(l.long_rtt - expect) < 1);
    unsigned back = 0;
    for (unsigned w = 2; w <= 100; w++) {
        unsigned v = window(&l, 100 * MS, 0, 0);
        if (v >= 450 && !back) back = w;
    }
    CHECK_EQ(back, 11); /* 1.1 s at the default 100 ms window (23 without slow start) */
    CHECK(l.mark == 0);
    CHECK_EQ(ax_limit_get(&l), 500);
    /* The decay stops once the baseline is within 2x. */
    CHECK(l.long_rtt <= 2.0 * 100 * MS);
}

/* Slow start after a fall: clean windows double the limit up to the mark
 * (half the limit the fall began from); a drop, an app-limited window or a
 * latency over tolerance does not double; a fall right after a doubling
 * lowers the mark to half the limit it fell from. */
/* Bounds [1, 500] at 500, then 50 windows at a 100 ms baseline. */
static void at_baseline(struct ax_limit *l)
{
    struct ax_limit_cfg c = cfg(1, 500, 500);
    now_ns = 0;
    ax_limit_init(l, &c, now_ns);
    for (int i = 0; i < 50; i++)
        window(l, 100 * MS, 0, 0);
}

static void collapse(struct ax_limit *l)
{
    at_baseline(l);
    for (int i = 0; i < 100; i++)
        window(l, 1000 * MS, 0, 0);
    CHECK_EQ(ax_limit_get(l), 5);
    CHECK(fabs(l->mark - 250) < 1e-9);
}

static void test_slow_start(void)
{
    struct ax_limit l;
    collapse(&l);
    /* The first clean window grows as Gradient2 (x1.2 + sqrt); from the
     * second in a row on, each doubles, up to the mark. */
    CHECK_EQ(window(&l, 100 * MS, 0, 0), 6);
    CHECK(!l.slow && l.clean_run == 1);
    static const unsigned doubling[] = {12, 24, 48, 95, 191, 250};
    for (unsigned i = 0; i < 6; i++) {
        CHECK_EQ(window(&l, 100 * MS, 0, 0), doubling[i]);
        CHECK(l.slow);
    }
    CHECK(l.mark == 0); /* back at the mark: Gradient2's growth from here */
    CHECK_EQ(window(&l, 100 * MS, 0, 0), 303);
    CHECK(!l.slow);

    /* One drop in the window: no doubling (and no growth at all); a clean
     * window between drops is not two in a row. */
    collapse(&l);
    unsigned v = window(&l, 100 * MS, 0, 1);
    CHECK(v <= 5 && !l.slow);
    for (int i = 0; i < 10; i++) {
        window(&l, 100 * MS, 0, 0);
        CHECK(!l.slow);
        window(&l, 100 * MS, 0, 1);
        CHECK(!l.slow);
    }
    CHECK(fabs(l.mark - 250) < 1e-9); /* still to be reached */
    /* App-limited (2 in flight against 5): no doubling either. */
    collapse(&l);
    for (int i = 0; i < 3; i++) {
        v = window(&l, 100 * MS, 2, 0);
        CHECK(v <= 5 && !l.slow);
    }
    /* Latency still 2x the (decayed) baseline: gradient < 1, no doubling. */
    collapse(&l);
    v = window(&l, 800 * MS, 0, 0);
    CHECK(l.last_gradient < 1 && !l.slow && v <= 5);

    /* Overshoot: a fall right after a doubling moves the mark to half the
     * limit it fell from, so the next slow start stops below it. */
    collapse(&l);
    for (unsigned i = 0; i < 6; i++)
        window(&l, 100 * MS, 0, 0);
    CHECK_EQ(ax_limit_get(&l), 191);
    CHECK(l.slow);
    window(&l, 100 * MS, 0, 5); /* half dropped: falls */
    CHECK(!l.slow);
    CHECK(fabs(l.mark - l.limit / 0.9 / 2) < 1e-6); /* 191 x (0.8 + 0.2 x 0.5) = 171.9 */
    double mark = l.mark;
    for (int i = 0; i < 20; i++) /* further falls keep that mark */
        window(&l, 100 * MS, 0, 5);
    CHECK(l.mark == mark);
    while (ax_limit_get(&l) < (unsigned)mark) {
        window(&l, 100 * MS, 0, 0);
        CHECK(l.limit <= mark || l.mark == 0);
    }
    CHECK(l.mark == 0);

    /* A small fall at steady state sets a mark below the limit: cleared by
     * the next window that does not fall, nothing doubles. */
    struct ax_limit s;
    struct ax_limit_cfg c = cfg(1, 500, 500);
    ax_limit_init(&s, &c, now_ns);
    for (int i = 0; i < 20; i++)
        window(&s, 100 * MS, 0, 0);
    CHECK_EQ(window(&s, 200 * MS, 0, 0), 480);
    CHECK(fabs(s.mark - 250) < 1e-9);
    window(&s, 100 * MS, 0, 0);
    CHECK(s.mark == 0 && !s.slow);
}

/* A timeout storm (review): 3 in 10 attempts stall and come back dropped at
 * the 1 s timeout, the rest at the 100 ms baseline. A window that happens to
 * hold only fast samples (the stalled ones of that window are not due yet)
 * must not double the limit, nor cost the mark; once the storm is over,
 * slow start begins one timeout after the last drop. */
static unsigned mixed(struct ax_limit *l, uint64_t fast_rtt, unsigned fast, uint64_t timeout,
                      unsigned drops)
{
    uint64_t before = l->updates;
    now_ns += 100 * MS;
    unsigned in = ax_limit_get(l);
    for (unsigned i = 0; i < fast; i++)
        ax_limit_sample(l, now_ns, fast_rtt, in, false);
    for (unsigned i = 0; i < drops; i++)
        ax_limit_sample(l, now_ns, timeout, in, true);
    CHECK_EQ(l->updates, before + 1);
    return ax_limit_get(l);
}

static void test_storm_clean_window(void)
{
    struct ax_limit l;
    at_baseline(&l);
    for (int i = 0; i < 40; i++)
        mixed(&l, 100 * MS, 7, 1000 * MS, 3);
    unsigned before = ax_limit_get(&l);
    CHECK(fabs(l.mark - 250) < 1e-9);
    for (int i = 0; i < 3; i++) { /* drop-free windows, 0.1-0.3 s after a drop */
        unsigned v = mixed(&l, 100 * MS, 10, 0, 0);
        CHECK(!l.slow);
        CHECK(v <= before + before / 4 + 1);
    }
    for (int i = 0; i < 10; i++)
        mixed(&l, 100 * MS, 7, 1000 * MS, 3);
    CHECK(fabs(l.mark - 250) < 1e-9); /* kept for the end of the storm */
    /* Over: windows 1-9 after the last drop grow as Gradient2; from 1 s
     * after it (window 10) each doubles up to the mark. */
    unsigned w = 0, first_slow = 0;
    while (ax_limit_get(&l) < 250 && w < 100) {
        window(&l, 100 * MS, 0, 0);
        w++;
        if (l.slow && !first_slow) first_slow = w;
    }
    CHECK_EQ(first_slow, 10);
    CHECK_LE(w, 16);
    CHECK(l.mark == 0);
}

/* Review of 8ab9812: the count covers only the attempts in flight beside
 * the drop. At a trough of a timeout storm - few in flight (the limit near
 * its floor), all of them healthy - it reaches 0 one window after the drop,
 * while attempts begun after it stall and come back as drops a timeout
 * later. Here the storm never stops: at 5 in flight a drop at the 1 s
 * timeout every 0.5 s (1 attempt in ~50 stalls; the 4 beside each drop come
 * back healthy in the next window). Drops every 0.5 s at a 1 s timeout:
 * no 1 s without one, and the timed quiet never doubled; the counted one
 * doubles 0.2 s after every drop, into the storm. */
static void test_storm_trough(void)
{
    struct ax_limit l;
    collapse(&l); /* 5, mark 250 */
    uint64_t doublings = l.doublings;
    for (int cycle = 0; cycle < 20; cycle++) { /* 10 s */
        now_ns += 100 * MS;
        unsigned in = ax_limit_get(&l);
        for (int i = 0; i < 9; i++)
            ax_limit_sample(&l, now_ns, 100 * MS, in, false);
        ax_limit_sample(&l, now_ns, 1000 * MS, in, true);
        /* Those beside it come back (began before it: 150 ms ago), then
         * drop-free windows until the next stall's drop. */
        unsigned back = in - 1;
        for (int w = 0; w < 4; w++) {
            now_ns += 100 * MS;
            unsigned n = ax_limit_get(&l);
            for (unsigned i = 0; i < 10; i++) {
                bool before = back > 0;
                back -= before;
                ax_limit_sample(&l, now_ns, before ? 150 * MS : 100 * MS, n, false);
            }
        }
    }
    fprintf(stderr, "storm trough: %llu doublings in 10 s of drops every 0.5 s (1 s timeout), "
                    "limit %u\n", (unsigned long long)(l.doublings - doublings), ax_limit_get(&l));
    CHECK_EQ(l.doublings, doublings);
}

/* The quiet after the last drop is counted, not only timed: a drop with 11
 * in flight (itself and 10 more, all begun before it) at a 10 s timeout; once
 * those 10 are back, the second clean window in a row doubles, 0.2 s after
 * the drop instead of 10 s. One of them still out holds the slow start until
 * the timeout has passed, as before; so does a drop with fewer than a
 * window's samples (10) beside it: too few to say a storm is over. */
static void drop_10s_with(struct ax_limit *l, unsigned inflight)
{
    at_baseline(l);
    while (ax_limit_get(l) > 20) /* a fall from 500: mark 250 */
        window(l, 1000 * MS, 0, 0);
    now_ns += 100 * MS;
    for (int i = 0; i < 9; i++)
        ax_limit_sample(l, now_ns, 100 * MS, inflight, false);
    ax_limit_sample(l, now_ns, 10000 * MS, inflight, true);
    CHECK_LE(ax_limit_get(l), 20); /* a window with a drop never grows */
}

static void drop_10s(struct ax_limit *l)
{
    drop_10s_with(l, 11);
    CHECK_EQ(l->drop_pending, 10);
}

/* One clean window at the baseline in which `back` of the samples began
 * before the previous window closed (150 ms ago), the rest after. */
static unsigned back_window(struct ax_limit *l, unsigned back)
{
    now_ns += 100 * MS;
    unsigned in = ax_limit_get(l); /* saturated: never app-limited */
    for (unsigned i = 0; i < 10; i++)
        ax_limit_sample(l, now_ns, i < back ? 150 * MS : 100 * MS, in, false);
    return ax_limit_get(l);
}

static void test_quiet_counted(void)
{
    struct ax_limit l;
    drop_10s(&l);
    uint64_t doublings = l.doublings;
    unsigned v = back_window(&l, 10); /* all 10 back; first clean window: Gradient2 */
    CHECK_EQ(l.drop_pending, 0);
    CHECK(!l.slow);
    double lim = l.limit;
    back_window(&l, 0); /* second in a row: doubles */
    CHECK(l.slow);
    CHECK(fabs(l.limit - 2 * lim) < 1e-9);
    CHECK_EQ(l.doublings, doublings + 1);
    CHECK(v >= 10);

    /* Later samples that began after the drop do not count down: with one
     * still out nothing doubles before the timeout (the climb is
     * Gradient2's, x1.2 per window, which reaches the mark on its own here). */
    drop_10s(&l);
    uint64_t dropped_at = now_ns;
    doublings = l.doublings;
    back_window(&l, 9);
    CHECK_EQ(l.drop_pending, 1);
    while (now_ns - dropped_at < 10000 * MS - 100 * MS) {
        back_window(&l, 0);
        CHECK(!l.slow);
    }
    CHECK_EQ(l.doublings, doublings);
    CHECK_EQ(l.drop_pending, 1);

    /* 9 beside the drop: fewer than a window's samples, nothing counted. */
    drop_10s_with(&l, 10);
    CHECK_EQ(l.drop_pending, UINT_MAX);
    back_window(&l, 10);
    back_window(&l, 0);
    CHECK(!l.slow);
    CHECK_EQ(l.drop_pending, UINT_MAX);

    /* A drop with nothing else in flight (a storm at the floor, limit 1):
     * nothing to count, the timeout decides; every later sample began
     * after it. */
    collapse(&l);
    now_ns += 100 * MS;
    for (int i = 0; i < 9; i++)
        ax_limit_sample(&l, now_ns, 100 * MS, 1, false);
    ax_limit_sample(&l, now_ns, 10000 * MS, 1, true);
    CHECK_EQ(l.drop_pending, UINT_MAX);
    dropped_at = now_ns;
    doublings = l.doublings;
    while (now_ns - dropped_at < 10000 * MS - 100 * MS) {
        back_window(&l, 10); /* even samples that began before it do not count */
        CHECK(!l.slow);
        CHECK_EQ(l.drop_pending, UINT_MAX);
    }
    CHECK_EQ(l.doublings, doublings);

    /* A drop among them starts a fresh count. */
    drop_10s(&l);
    back_window(&l, 2);
    CHECK_EQ(l.drop_pending, 8);
    now_ns += 100 * MS;
    ax_limit_sample(&l, now_ns, 10000 * MS, 17, true);
    CHECK_EQ(l.drop_pending, 16);
}

/* A mark not reached for a baseline's worth of windows without a clean one
 * is dropped (review): after a fall from 500 (mark 250) the limit holds near
 * 100 for a minute at ~1.67x its baseline latency; a later spike then sets a
 * fresh mark (half the limit it fell from), and the recovery does not double
 * past the level held for that minute. */
static void test_stale_mark(void)
{
    struct ax_limit l;
    at_baseline(&l);
    while (ax_limit_get(&l) > 100)
        window(&l, 1000 * MS, 0, 0);
    CHECK(fabs(l.mark - 250) < 1e-9);
    for (int i = 0; i < 600; i++) { /* 60 s settled near 100 */
        double g = 1 - 1 / sqrt(l.limit);
        window(&l, (uint64_t)(l.long_rtt * 1.5 / g) + 1, 0, 0);
    }
    CHECK(l.mark == 0);
    unsigned settled = ax_limit_get(&l);
    for (int i = 0; i < 5; i++) /* a spike: 10x for 0.5 s */
        window(&l, (uint64_t)(l.long_rtt * 10), 0, 0);
    CHECK(l.mark > 0 && l.mark <= settled / 2.0 + 1);
    unsigned peak = 0;
    for (int i = 0; i < 10; i++) {
        unsigned v = window(&l, (uint64_t)l.long_rtt, 0, 0);
        if (v > peak) peak = v;
    }
    CHECK_LE(peak, settled + settled / 2);
}

/* App-limited: the latency is at the baseline but few attempts are in flight:
 * the limit must not grow; it may still fall. */
static void test_app_limited(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(1, 500, 100);
    now_ns = 0;
    ax_limit_init(&l, &c, now_ns);
    for (int i = 0; i < 300; i++)
        CHECK_EQ(window(&l, 100 * MS, 49, 0), 100); /* 49 < 100/2 */
    window(&l, 100 * MS, 50, 0);                    /* 50: not app-limited */
    CHECK_EQ(ax_limit_get(&l), 102);
    /* A latency rise while app-limited still brings it down. */
    unsigned v = ax_limit_get(&l);
    window(&l, 1000 * MS, 10, 0);
    CHECK(ax_limit_get(&l) < v);
}

/* Timed-out samples: at the baseline latency (the mean says nothing), the
 * dropped share still caps the gradient and forbids growth. */
static void test_drops(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(1, 500, 500);
    now_ns = 0;
    ax_limit_init(&l, &c, now_ns);
    for (int i = 0; i < 20; i++)
        window(&l, 100 * MS, 0, 0);
    CHECK_EQ(ax_limit_get(&l), 500);
    window(&l, 100 * MS, 0, 2); /* gradient <= 0.8: 500 x (1 - 0.2 x 0.2) */
    CHECK(fabs(l.last_gradient - 0.8) < 1e-12);
    CHECK_EQ(ax_limit_get(&l), 480);
    for (int i = 1; i < 10; i++)
        window(&l, 100 * MS, 0, 2);
    CHECK_EQ(ax_limit_get(&l), 332); /* 500 x 0.96^10 = 332.4 */
    /* The same windows without drops stay at max (control). */
    struct ax_limit l2;
    ax_limit_init(&l2, &c, now_ns);
    for (int i = 0; i < 30; i++)
        window(&l2, 100 * MS, 0, 0);
    CHECK_EQ(ax_limit_get(&l2), 500);

    /* One drop in ten below max: no headroom, 50 x (1 - 0.2 x 0.1) = 49. */
    struct ax_limit l3;
    struct ax_limit_cfg c3 = cfg(1, 500, 50);
    ax_limit_init(&l3, &c3, now_ns);
    window(&l3, 100 * MS, 0, 1);
    CHECK_EQ(ax_limit_get(&l3), 49);
    /* All dropped: the floor still holds, at most half per window before
     * smoothing: 49 x 0.9 = 44.1 -> 44. */
    window(&l3, 100 * MS, 0, 10);
    CHECK(l3.last_gradient == 0.5);
    CHECK_EQ(ax_limit_get(&l3), 44);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) /* xorshift64*: fixed seed, same run every time */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

/* The baseline's warm-up: the first window closes on the attempts that
 * ended first, the fast ones, while the slow ones begun with them are
 * still out (survivorship), so its mean is below the steady one. A CI run
 * under qemu on a loaded machine: the first window 18 samples at 26.6 ms,
 * every later one 47-55 ms (tasks sleeping a uniform 20-80 ms); with that
 * window as the baseline for a minute the limit fell 64 -> 54 in 1.5 s of
 * a healthy upstream. The first AX_LIMIT_WARMUP_WINDOWS windows are
 * averaged plainly (Gradient2's warm-up), the exponential average taking
 * over after. */
static void test_warmup(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(2, 64, 64);
    now_ns = 0;
    ax_limit_init(&l, &c, now_ns);
    CHECK_EQ(window(&l, 26 * MS, 64, 0), 64); /* seeds: 26 ms */
    CHECK(fabs(l.long_rtt - 26.0 * MS) < 1);
    const uint64_t steady[] = {50, 52, 51, 53, 55, 48, 48, 52, 48};
    double sum = 26;
    for (unsigned i = 0; i < sizeof steady / sizeof *steady; i++) {
        CHECK_EQ(window(&l, steady[i] * MS, 64, 0), 64);
        CHECK(l.last_gradient == 1.0);
        sum += (double)steady[i];
        CHECK(fabs(l.long_rtt - sum / (i + 2) * MS) < 1); /* the plain mean */
    }
    CHECK_EQ(AX_LIMIT_WARMUP_WINDOWS, 10u);
    /* After the warm-up, the exponential average: one more 50 ms window
     * moves it by (50 - mean) x 2/601. */
    double mean = sum / 10;
    CHECK_EQ(window(&l, 50 * MS, 64, 0), 64);
    CHECK(fabs(l.long_rtt - (mean + (50 - mean) * 2 / 601) * MS) < 1);
    for (int i = 0; i < 100; i++)
        CHECK_EQ(window(&l, (45 + rnd() % 11) * MS, 64, 0), 64);
    /* A real step still brings it down at the floor's pace: 10x, the
     * gradient 0.5 every window, below half after exactly 10 (64 x 0.9 +
     * 0.2 x sqrt(64) = 59.2, ... 33.0, 30.9). */
    unsigned below = 0;
    for (unsigned w = 1; w <= 10 && !below; w++) {
        if (window(&l, 500 * MS, 64, 0) < 32) below = w;
        CHECK(l.last_gradient == 0.5);
    }
    CHECK_EQ(below, 10);

    /* A slowdown inside the warm-up is not averaged in (review: a 10x step
     * at window 2 became the baseline, 455 ms, and the limit stayed 64 for
     * good; the old code fell below half in 10 windows). Windows more than
     * 3x the baseline, or with drops, weigh 2/601 as after the warm-up. */
    for (unsigned step_at = 2; step_at <= 5; step_at++) {
        ax_limit_init(&l, &c, now_ns);
        for (unsigned w = 1; w < step_at; w++)
            window(&l, 50 * MS, 64, 0);
        below = 0;
        for (unsigned w = 1; w <= 20 && !below; w++)
            if (window(&l, 500 * MS, 64, 0) < 32) below = w;
        CHECK(below >= 1 && below <= 11);
        CHECK(l.long_rtt < 100.0 * MS);
    }
    /* Timeouts at window 3-5 (all dropped at 1 s), then 4x: falls, the
     * baseline stays near 50 ms (review: it reached 525 ms and the limit
     * stayed 64). */
    ax_limit_init(&l, &c, now_ns);
    window(&l, 50 * MS, 64, 0);
    window(&l, 50 * MS, 64, 0);
    for (int i = 0; i < 3; i++)
        window(&l, 1000 * MS, 64, 10);
    CHECK(l.long_rtt < 100.0 * MS);
    for (int i = 0; i < 10; i++)
        window(&l, 200 * MS, 64, 0);
    CHECK(ax_limit_get(&l) < 32);
    /* Up to 3x is the start's bias, averaged: 20 ms, then 55 ms (2.75x). */
    ax_limit_init(&l, &c, now_ns);
    window(&l, 20 * MS, 64, 0);
    window(&l, 55 * MS, 64, 0);
    CHECK(fabs(l.long_rtt - 37.5 * MS) < 1);
}

/* Random latencies (1 ns .. 30 s, jumps and 0), in-flight and drops, with
 * tight bounds: never outside [min, max], the rounding included. */
static void test_bounds(void)
{
    struct ax_limit l;
    struct ax_limit_cfg c = cfg(10, 20, 15);
    now_ns = 0;
    ax_limit_init(&l, &c, now_ns);
    unsigned seen_min = 0, seen_max = 0;
    for (int w = 0; w < 20000; w++) {
        uint64_t rtt = rnd() % 8 == 0   ? rnd() % (30000 * MS)
                       : rnd() % 8 == 0 ? 0
                                        : 1 + rnd() % (200 * MS);
        unsigned v =
            window(&l, rtt, (unsigned)(rnd() % 40), (unsigned)(rnd() % 4 == 0 ? rnd() % 11 : 0));
        seen_min += v == 10;
        seen_max += v == 20;
    }
    CHECK(seen_min > 0 && seen_max > 0); /* the walk did reach both bounds */
    /* min == max: a fixed limit. */
    struct ax_limit f;
    struct ax_limit_cfg cf = cfg(7, 7, 7);
    ax_limit_init(&f, &cf, now_ns);
    for (int w = 0; w < 100; w++)
        CHECK_EQ(window(&f, 1 + rnd() % (2000 * MS), 0, (unsigned)(rnd() % 3)), 7);
}

int main(void)
{
    test_window_rule();
    test_steady_climb();
    test_gradient_formula();
    test_step_and_recovery();
    test_slow_start();
    test_storm_clean_window();
    test_quiet_counted();
    test_storm_trough();
    test_stale_mark();
    test_app_limited();
    test_drops();
    test_warmup();
    test_bounds();
    printf("test_limit: ok\n");
    return 0;
}
