/* limit.c - adaptive concurrency limit: how many attempts of a class may be
 * in flight, following the latency the class measures (DESIGN.md §11).
 *
 * Anchors: Netflix concurrency-limits' Gradient2 (a short latency window
 * against a long exponential baseline, gradient clamped to [0.5, 1], a
 * queue allowance, smoothing, no growth while app-limited) and Envoy's
 * adaptive concurrency filter (100 ms updates, sqrt(limit) headroom, a
 * gradient allowed up to 2 so a recovered upstream is used again quickly).
 *
 * The algorithm
 * -------------
 * Every finished attempt is a sample (latency, in flight when it ended,
 * dropped). Samples go into the open window; the window closes on the
 * sample that finds both window_ns elapsed since it opened and at least
 * window_samples in it (so a quiet class does not move its limit on one
 * sample). On close, with L the limit and short the window's mean latency:
 *
 *   long     = the plain mean of the first AX_LIMIT_WARMUP_WINDOWS (10)
 *              windows' means (the warm-up, below), then their exponential
 *              average, weight 2 / (long_window + 1); if then
 *              long > 2 x short, long *= 0.95: the upstream got much faster
 *              than the baseline remembers (it recovered), so the baseline
 *              comes down in tens of windows instead of hundreds;
 *   gradient = clamp(tolerance x long / short, 0.5, 1): 1 while the latency
 *              is within tolerance of its baseline, down to 0.5 (never more
 *              than half per window: one slow window is not a collapse);
 *   estimate = L x gradient + sqrt(L)              (the queue headroom)
 *              + L x (min(long / short, 2) - 1)    when short < long;
 *   L        = L x (1 - smoothing) + estimate x smoothing, in [min, max].
 *
 * The warm-up (Gradient2's, over 10 windows as there). The first window
 * closes on the attempts that ended first: the fast ones, while the slow
 * ones begun with them are still out. Its mean is below the steady one,
 * by how much depends on how slowly the process got going: a CI run under
 * qemu on a loaded machine (test_adaptive_limit, tasks sleeping a uniform
 * 20-80 ms) closed it on 18 samples at 26.6 ms, every later window at
 * 47-55. Taken whole, as it was, that window was the baseline for the
 * average's minute: 1.5 x 26.6 = 40 ms under every healthy window, a
 * gradient of 0.74-0.88 each, and the limit fell 64 -> 54 in 1.5 s of a
 * healthy upstream. Averaged with the nine after it, the baseline is 47.7
 * ms by window 10 and no gradient is under 1 (test_limit.c: test_warmup).
 * Only a window without drops and at most AX_LIMIT_WARMUP_MAX_RATIO (3)
 * x the baseline is averaged so: a review of the first version, which
 * averaged every one, found a 10x step begun at window 2-4 taken into the
 * baseline (455 ms against 50) and never acted on, and three windows of
 * timeouts at window 3-5 the same; the old code fell below half in 10
 * windows. Those weigh 2/601 now, as after the warm-up, and fall as
 * before (test_warmup). The qemu start above was 1.9-2.1x its first
 * window. The price: a slowdown of 1.5-3x that begins in the first
 * second is taken as the baseline; a start biased by more than 3x (a tail
 * longer than the warm-up: attempts of seconds among ones of
 * milliseconds) still starts it low, and the exponential average brings
 * it up over its horizon.
 *
 * Headroom sqrt(L): the queue Gradient2's authors and Envoy allow at the
 * upstream, small against L when L is large, so at a steady baseline the
 * limit creeps up by smoothing x sqrt(L) per window until the latency
 * answers (or max). It alone climbs far too slowly after a collapse: after
 * 10 s of a 10x step (L down to 5), back to 450 of 500 takes 192 windows,
 * 19 s at 100 ms. So a window whose latency is *below* its baseline - the
 * upstream serves faster than we remember: no queue there at all - also
 * earns L x (long/short - 1), at most L (Envoy's gradient cap of 2). With
 * smoothing 0.2 that is at most x1.2 per window: the same climb takes 23
 * windows, 2.3 s (test_limit.c). At a steady latency short ~ long, so this
 * term is noise-sized and the set-point (short = tolerance x long) is
 * Gradient2's; it is only reached faster.
 *
 * Slow start after a fall (TCP's slow start up to ssthresh). A window that
 * lowers the limit from outside a slow start sets a mark at half the limit
 * it fell from; while the limit is below the mark, the second clean window
 * in a row and each one after it - no drop, gradient 1, not app-limited:
 * the upstream answers at its baseline and the class has work waiting -
 * doubles the limit, up to the mark, once every attempt begun before the
 * last dropped sample is back. A degraded upstream's stalled attempts come
 * back as drops only a timeout after they began, so windows without a drop
 * occur in the middle of a timeout storm (with a third of the attempts
 * stalling, one window in ~30 of 10 samples); only when none of the
 * attempts that were in flight beside the last drop is still out (each
 * stalled one would come back as a drop, and start the count again) is the
 * storm over. They are counted: the drop notes the attempts in flight
 * (drop_pending), and each later sample whose attempt began before the drop
 * counts one back. Which began before it is the caller's to say: class.c
 * stamps each attempt with the class's drop count when it takes its slot
 * (flight.h: slots, samples in and drops in one word, so a drop counts
 * exactly the attempts whose samples are still to come),
 * not with a worker's cached clock, which can be older than a drop sampled
 * on another worker (one false count ended the wait with a stalled attempt
 * still out: test_class_limit_stale_start); ax_limit_sample, for callers
 * with fresh clocks, takes now - rtt. In any case the wait ends once every
 * attempt begun before the drop is past its timeout (quiet_until: the
 * caller passes the timeout, class.c the class's; not the drop's own latency, which a deadline may have cut short:
 * review), for attempts that end without a sample (a cancel while it ran:
 * it may have been stalled). One that never ran (a hand-back, an end
 * between dispatch and start) never reached the upstream and counts back
 * without a sample (ax_limit_back). The bound
 * only grows, so a later short drop never ends an earlier long one's
 * wait. A drop with fewer than window_samples attempts beside it
 * leaves too few to count: then only the timeout ends the wait. At a
 * storm's trough the few in flight are often all healthy, and each drop
 * would look quiet as soon as they are back (review: test_storm_trough; at
 * a limit of 1 every drop would); window_samples is the fewest samples the
 * limiter judges a window by. TCP NewReno's recovery point is the same idea: recovery ends
 * when all that was outstanding at the loss is acknowledged. Two clean
 * windows in a row for the same reason when the fall was the latency's (no
 * drops): one fast window is noise. A doubling into a storm would end in a
 * fall that lowers the mark. A mark not reached after long_window windows
 * without a clean one (a minute at the defaults: the baseline's own
 * horizon) is dropped: the lower limit is the new regime, and the next
 * fall sets a fresh mark. A fall right after a doubling (it overshot) moves
 * the mark to half the limit it fell from, so the next slow start stops
 * below the overshoot; the mark is cleared once the limit is back at it,
 * and the growth above is Gradient2's again. Why: a long degradation takes
 * the limit to its floor (drops cap the gradient, and a window with a drop
 * never grows), and the x1.2 climb above then takes seconds while work
 * waits in the buckets. In ax-demo's overload (issue 12, T4) the classes'
 * limits fell to 6-25 and their backlog drained at that climb's pace: wait
 * p99 back under 100 ms 8.4-11.2 s after the upstream's recovery (9 runs,
 * median 9.8); with slow start after a whole timeout without a drop
 * 7.0-8.4 s (6 runs, median 8.05); with the attempts counted back (and at
 * least 10 beside the drop) 5.95-8.05 s (8 runs, median 7.0, against
 * 8.05-8.75, median 8.4, alternating with the timed wait), requests per task
 * while degraded 0.84-0.97 (median 0.91) against 0.82-0.95 (0.90). What is left is the class whose timeout is 3 s:
 * its attempts that stalled in the degradation come back as drops until
 * 3 s after it, and a window with a drop never grows. (Without any wait it
 * was 6.1 s, but a timeout storm's drop-free windows doubled the limit into
 * the storm: test_storm_clean_window.)
 *
 * Why T4's 2 s is out of this limiter's reach (ax-demo experiments, not
 * kept; one run each unless said). T4 is met when the wait p99 of the
 * tasks started in the last 1.75 s is under 100 ms, so the queue must be
 * drained within ~0.25 s of the upstream's recovery. Two things stand in
 * the way. (1) The upstream is not back when its fault ends: requests ax
 * abandoned at their timeouts are still being served (ax-upstream, like
 * most servers, does not notice the client leave): 407-424 in flight at
 * the phase's end against a capacity of 300, its answers back within
 * 1.5 x steady only 7.0 s later, ax's wait p99 0.4 s after that (7.4 s).
 * The limits fall from 500 toward what is in use over the first ~8 s of
 * the fault, so its first seconds go through unthrottled. Falling from the
 * attempts in flight instead of from an unused limit (TCP's ssthresh =
 * FlightSize / 2, RFC 5681) cures (1): 99 in flight at the phase's end,
 * answers back at once, 0.37 requests per task; but the limits then sink
 * to 1-9 through the 20 s of stalls (a window with drops never grows), T4
 * stays 6.7 / 8.1 s (two runs) and goodput falls to 81-82 /s from 97.5.
 * (2) The class with the 3 s timeout holds up to 3 s of waits (its
 * queue-time budget is its timeout), and no limiter can be sure that its
 * upstream recovered before its slowest healthy answer (p99 2 s) after
 * the recovery: until then the attempts begun after it answer like the
 * fault's healthy two thirds, only fewer are missing. Even an oracle that
 * knows the instant: every class's limit set back to 500 as the fault ends
 * (a hook in a scratch build) drained the queues within 0.4 s and measured
 * T4 2.1 and 3.2 s (two runs): the drained backlog's waits of up to 3 s
 * stay in the 1.75 s p99 window, sampled every 0.35 s, and the drain's
 * last starts waited 0.2 s. A 100 ms queue budget (not the default) keeps
 * long waits out of the queue: T4 4.6 s, the p99 at 102-106 ms against the
 * 100 ms bound through the whole fault, goodput 99.5 /s. Only shedding the
 * queue (CoDel's short target under a standing queue) keeps the waits under
 * the bound, and then the wait p99 no longer measures a recovery.
 *
 * Known trade-off (Gradient2's too): the x0.95 decay stops once the
 * baseline is within 2x the latency, and the average takes its time from
 * there, so for tens of seconds after a recovery the limit tolerates up to
 * tolerance x 2 = 3x the new latency before it falls.
 *
 * App-limited: if fewer than L/2 attempts were ever in flight in the
 * window, the latency says nothing about L, so the estimate may lower L but
 * never raise it (Gradient2 leaves it unchanged; a drop is still a drop).
 * The baseline is updated either way.
 *
 * Dropped samples (timed out): their latency is the timeout, a lower bound
 * of the real one, and it counts at that value in the window's mean (so a
 * timeout always weighs at least what it cost). That alone may hide them:
 * timeouts at the same latency as the baseline's tail move no mean. So a
 * window with dropped samples also never grows L (no headroom, no growth
 * term) and its gradient is at most 1 - dropped/samples (at least 0.5): a
 * window where 20 % timed out shrinks L by at least 20 % x smoothing =
 * 4 %. Proportional rather than Netflix AIMD's fixed 0.9 back-off so a rare
 * stall (one in hundreds) costs almost nothing while a timeout storm brings
 * the limit down at up to 10 % per window.
 *
 * Defaults (AX_LIMIT_DEFAULT_* in overload.h) and why:
 *   window 100 ms and >= 10 samples: Envoy's update interval; ten samples
 *     so one outlier is a tenth of the mean (Gradient2's windowSize 10).
 *     At 100 ms the limit falls from 500 below 250 in under 1 s of a 10x
 *     latency step (test_limit.c has the exact numbers).
 *   long_window 600 windows: ~60 s of baseline at full rate, Envoy's 60 s
 *     min-RTT recalculation; long enough that a degradation of tens of
 *     seconds is not mistaken for the new normal, short enough that a
 *     lasting change is (after ~10 s the gradient leaves its 0.5 floor
 *     under a 10x step, Gradient2's answer to a new regime).
 *   smoothing 0.2, tolerance 1.5: Gradient2's.
 *
 * Cost: O(1) per sample, a sqrt on a window close; no allocation, no lock,
 * no clock (the caller passes `now` and serialises calls).
 */
#include "overload/overload.h"

#include <limits.h>
#include <math.h>

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void ax_limit_init(struct ax_limit *l, const struct ax_limit_cfg *cfg, uint64_t now)
{
    *l = (struct ax_limit){.cfg = *cfg, .window_start = now};
    if (l->cfg.min < 1) l->cfg.min = 1;
    if (l->cfg.max < l->cfg.min) l->cfg.max = l->cfg.min;
    if (l->cfg.window_samples < 1) l->cfg.window_samples = 1;
    if (l->cfg.long_window < 1) l->cfg.long_window = 1;
    if (!(l->cfg.smoothing > 0 && l->cfg.smoothing <= 1))
        l->cfg.smoothing = AX_LIMIT_DEFAULT_SMOOTHING;
    if (!(l->cfg.tolerance >= 1)) l->cfg.tolerance = 1;
    l->limit = clampd(cfg->initial, l->cfg.min, l->cfg.max);
    l->last_gradient = 1;
}

/* Close the open window: move the baseline, then the limit. */
static void limit_update(struct ax_limit *l, uint64_t now)
{
    double shortr = l->short_sum / l->short_n;
    if (shortr < 1) shortr = 1; /* a 0 ns sample must not divide by zero */

    if (!l->has_long) {
        l->long_rtt = shortr;
        l->has_long = true;
    } else {
        /* The warm-up: window k (k <= AX_LIMIT_WARMUP_WINDOWS, k counted
         * from 1) weighs 1/k, the plain mean of the first k; the
         * exponential weight after, or sooner if it is the larger (a short
         * long_window). Not a window with drops (its mean is the timeouts'
         * then) nor one more than AX_LIMIT_WARMUP_MAX_RATIO x the baseline:
         * those are a slowdown, and weigh as after the warm-up. */
        double a = 2.0 / ((double)l->cfg.long_window + 1);
        uint64_t k = l->updates + 1;
        if (k <= AX_LIMIT_WARMUP_WINDOWS && 1.0 / (double)k > a && !l->short_dropped &&
            shortr <= AX_LIMIT_WARMUP_MAX_RATIO * l->long_rtt)
            a = 1.0 / (double)k;
        l->long_rtt += a * (shortr - l->long_rtt);
    }
    if (l->long_rtt > 2 * shortr) l->long_rtt *= 0.95;

    double lim = l->limit, ratio = l->long_rtt / shortr;
    double g = clampd(l->cfg.tolerance * ratio, AX_LIMIT_MIN_GRADIENT, 1.0);
    double est;
    if (l->short_dropped) {
        double cap = 1.0 - (double)l->short_dropped / l->short_n;
        g = clampd(cap < g ? cap : g, AX_LIMIT_MIN_GRADIENT, 1.0);
        est = lim * g;
    } else {
        est = lim * g + sqrt(lim);
        if (ratio > 1)
            est += lim * ((ratio < AX_LIMIT_MAX_GROWTH ? ratio : AX_LIMIT_MAX_GROWTH) - 1);
    }
    bool app_limited = (double)l->max_inflight < lim / 2;
    if (app_limited && est > lim)
        est = lim; /* app-limited: no evidence about a higher limit */

    double s = l->cfg.smoothing;
    double next = lim * (1 - s) + est * s;
    /* Slow start (see the top of the file): the mark is set by a fall from
     * outside a slow start, lowered by a fall right after a doubling, and
     * cleared once the limit is back at it. */
    bool clean = !l->short_dropped && g >= 1 && !app_limited, slow = false;
    l->clean_run = clean ? l->clean_run + 1 : 0;
    l->unclean_run = clean ? 0 : l->unclean_run + 1;
    if (l->mark > 0 && l->unclean_run >= l->cfg.long_window)
        l->mark = 0; /* no clean window for a baseline's worth: a new regime */
    /* Only once every attempt begun before the last drop is back is a clean
     * window the upstream's word: counted (drop_pending), and in any case
     * one timeout after the drop (an attempt that ends without a sample,
     * a cancel, never counts down). */
    bool quiet = !l->last_drop_ns || !l->drop_pending || now >= l->quiet_until;
    if (next < lim) {
        if (l->mark <= 0 || l->slow) l->mark = lim / 2;
    } else {
        if (l->clean_run >= 2 && quiet && lim < l->mark) {
            double up = 2 * lim < l->mark ? 2 * lim : l->mark;
            if (up > next) {
                next = up, slow = true;
                if (clampd(up, l->cfg.min, l->cfg.max) > lim)
                    l->doublings++; /* counted only when the limit moves */
            }
        }
        if (next >= l->mark) l->mark = 0; /* back at it (or none) */
    }
    l->slow = slow;
    l->limit = clampd(next, l->cfg.min, l->cfg.max);
    l->last_short = shortr;
    l->last_gradient = g;
    l->updates++;
}

void ax_limit_nudge(struct ax_limit *l)
{
    /* From the value in use (the double may sit below min or between
     * integers): one more attempt in flight. */
    double next = (double)ax_limit_get(l) + 1;
    l->limit = next <= l->cfg.max ? next : l->cfg.max;
}

void ax_limit_restart(struct ax_limit *l, unsigned value)
{
    l->limit = clampd(value, l->cfg.min, l->cfg.max);
    l->mark = 0;
    l->clean_run = l->unclean_run = 0;
}

void ax_limit_set_max(struct ax_limit *l, unsigned max)
{
    l->cfg.max = max > l->cfg.min ? max : l->cfg.min;
    if (l->limit > l->cfg.max)
        l->limit = l->cfg.max;
    if (l->mark > l->cfg.max)
        l->mark = l->cfg.max; /* a slow start aims no higher than it may go */
}

void ax_limit_sample(struct ax_limit *l, uint64_t now, uint64_t rtt_ns, unsigned inflight,
                     bool dropped)
{
    bool before = rtt_ns < now && now - rtt_ns < l->last_drop_ns;
    ax_limit_sample_timeout(l, now, rtt_ns, inflight, dropped, rtt_ns, before);
}

void ax_limit_back(struct ax_limit *l, bool before_drop)
{
    if (l->drop_pending && l->drop_pending != UINT_MAX && before_drop)
        l->drop_pending--; /* one of them is back */
}

void ax_limit_sample_timeout(struct ax_limit *l, uint64_t now, uint64_t rtt_ns, unsigned inflight,
                             bool dropped, uint64_t timeout_ns, bool before_drop)
{
    l->short_sum += (double)rtt_ns;
    l->short_n++;
    l->short_dropped += dropped;
    if (dropped) {
        l->last_drop_ns = now > 1 ? now : 1;
        l->drop_rtt_ns = rtt_ns;
        /* The wait's bound only grows: a later drop cut short (a deadline)
         * does not end an earlier one's; a clock behind it cannot wrap. */
        uint64_t w = timeout_ns;
        uint64_t until = UINT64_MAX - l->last_drop_ns < w ? UINT64_MAX : l->last_drop_ns + w;
        if (until > l->quiet_until)
            l->quiet_until = until;
        /* Every attempt in flight now began before this drop: the slow
         * start waits for them (inflight counts this one too). Fewer than a
         * window's samples beside it are too few to say a storm is over (at
         * a storm's trough they are often all healthy: review of the count)
         * and the timeout alone decides. */
        l->drop_pending = inflight > l->cfg.window_samples ? inflight - 1 : UINT_MAX;
    } else {
        ax_limit_back(l, before_drop);
    }
    if (inflight > l->max_inflight) l->max_inflight = inflight;
    /* now < window_start: a caller's clock went back; wait for it. */
    if (now < l->window_start || now - l->window_start < l->cfg.window_ns ||
        l->short_n < l->cfg.window_samples)
        return;
    limit_update(l, now);
    l->short_sum = 0;
    l->short_n = l->short_dropped = l->max_inflight = 0;
    l->window_start = now;
}

unsigned ax_limit_get(const struct ax_limit *l)
{
    double r = floor(l->limit + 0.5);
    return r < l->cfg.min ? l->cfg.min : r > l->cfg.max ? l->cfg.max : (unsigned)r;
}
