/* budget.c - retry budget: a class's retries stay under a share of its first
 * attempts over a sliding window, plus a floor per second (DESIGN.md §11).
 *
 * Anchors: Finagle's RetryBudget (20 % of requests over 10 s plus 10
 * retries/s, so a quiet client can still retry) and gRPC's retry throttling
 * (retries stop when the recent failure share is high). A retry storm - every
 * attempt failing, every failure retried - is then at most 1.2 upstream
 * requests per task instead of 1 + max_retry, and about 1 once the throttle
 * has seen it.
 *
 * The window
 * ----------
 * AX_BUDGET_SLOTS sub-windows of slot_ns = window_ns / AX_BUDGET_SLOTS,
 * indexed by epoch = now / slot_ns modulo the slot count. The window is the
 * current (partial) sub-window and the AX_BUDGET_SLOTS - 1 before it, so it
 * spans between (1 - 1/SLOTS) and 1 x window_ns of the past: a count leaves
 * the window between 9 and 10 s after it was made at the defaults. Moving
 * to a later epoch zeroes every sub-window skipped over; a jump of a whole
 * window or more zeroes them all (an idle class starts afresh). Time never
 * moves back: a `now` before the newest epoch counts in the newest one.
 *
 * The rule
 * --------
 * A retry may go while retries + 1 <= ratio x firsts + min_per_s x
 * window_ns / 1e9 over the window (a 1e-9 tolerance absorbs the rounding
 * of ratio x firsts, so 0.2 x 100 allows exactly 20). An allowed retry is
 * counted in the window (it spends budget); a denied one is not (it never
 * reached the upstream) but counts in `denied`. Retries are not first
 * attempts: they never earn budget. A retry decided before a back-off is
 * reserved (it takes room at once, so the retries of a storm decided
 * within one back-off cannot all see the same room) and enters the window
 * when its attempt starts; one dropped before that gives its room back,
 * for the same reason a denied one is not counted.
 *
 * The throttle
 * ------------
 * The floor alone lets a quiet class retry far more than its share: at 25
 * first attempts/s, 10 retries/s is 40 % more load on an upstream that is
 * already failing (the seed's incident scaled down tenfold is exactly that
 * class). gRPC's rule is scale-free: a token count starts at max_tokens,
 * each failed attempt takes 1, each success gives back token_ratio, and no
 * retry goes while the count is at or below max_tokens / 2. Retries
 * therefore stop once more than token_ratio / (1 + token_ratio) of the
 * recent attempts fail (9 % at 0.1) and resume as successes come back; a
 * short burst of max_tokens / 2 failures in a row is retried. Both rules
 * must allow a retry.
 *
 * Defaults (AX_BUDGET_DEFAULT_* and AX_THROTTLE_DEFAULT_* in overload.h):
 * ratio 0.2, 10/s, 10 s: Finagle's; 10 tokens, 0.1 per success: the values
 * of gRPC's documentation. Cost: O(1) per call (O(SLOTS) for the sums); no
 * allocation, no lock, no clock.
 */
#include "overload/overload.h"

#include <math.h>
#include <string.h>

void ax_budget_init(struct ax_budget *b, const struct ax_budget_cfg *cfg, uint64_t now)
{
    memset(b, 0, sizeof *b);
    b->cfg = *cfg;
    b->slot_ns = cfg->window_ns / AX_BUDGET_SLOTS;
    if (b->slot_ns == 0) b->slot_ns = 1;
    b->epoch = now / b->slot_ns;
    b->tokens = cfg->max_tokens;
}

/* Bring the window to `now`: zero the sub-windows time has moved past. */
static void budget_advance(struct ax_budget *b, uint64_t now)
{
    uint64_t e = now / b->slot_ns;
    if (e <= b->epoch) return;
    if (e - b->epoch >= AX_BUDGET_SLOTS) {
        memset(b->firsts, 0, sizeof b->firsts);
        memset(b->retries, 0, sizeof b->retries);
    } else {
        for (uint64_t i = b->epoch + 1; i <= e; i++) {
            b->firsts[i % AX_BUDGET_SLOTS] = 0;
            b->retries[i % AX_BUDGET_SLOTS] = 0;
        }
    }
    b->epoch = e;
}

/* Retries the window allows in all (fractional), minus those it spent. */
static double budget_room(const struct ax_budget *b)
{
    uint64_t firsts = 0, retries = 0;
    for (int i = 0; i < AX_BUDGET_SLOTS; i++) {
        firsts += b->firsts[i];
        retries += b->retries[i];
    }
    double cap =
        b->cfg.ratio * (double)firsts + b->cfg.min_per_s * ((double)b->cfg.window_ns / 1e9);
    return cap - (double)retries - (double)b->reserved;
}

void ax_budget_first(struct ax_budget *b, uint64_t now)
{
    budget_advance(b, now);
    uint32_t *c = &b->firsts[b->epoch % AX_BUDGET_SLOTS];
    if (*c < UINT32_MAX) (*c)++;
}

bool ax_budget_try_retry(struct ax_budget *b, uint64_t now)
{
    budget_advance(b, now);
    if (budget_room(b) + 1e-9 < 1 || ax_budget_throttled(b, 0)) {
        b->denied++;
        return false;
    }
    uint32_t *c = &b->retries[b->epoch % AX_BUDGET_SLOTS];
    if (*c < UINT32_MAX) (*c)++;
    b->allowed++;
    return true;
}

void ax_budget_reserve(struct ax_budget *b)
{
    b->reserved++;
    b->allowed++;
}

void ax_budget_commit(struct ax_budget *b, uint64_t now)
{
    if (b->reserved)
        b->reserved--;
    budget_advance(b, now);
    uint32_t *c = &b->retries[b->epoch % AX_BUDGET_SLOTS];
    if (*c < UINT32_MAX) (*c)++;
}

void ax_budget_unreserve(struct ax_budget *b)
{
    if (b->reserved)
        b->reserved--;
}

void ax_budget_deny(struct ax_budget *b)
{
    b->denied++;
}

double ax_budget_left(struct ax_budget *b, uint64_t now)
{
    budget_advance(b, now);
    if (ax_budget_throttled(b, 0))
        return 0;
    double r = floor(budget_room(b) + 1e-9); /* whole retries: >= 1 iff one may go */
    return r > 0 ? r : 0;
}

void ax_budget_outcome(struct ax_budget *b, bool failed)
{
    if (b->cfg.max_tokens <= 0)
        return;
    b->tokens += failed ? -1.0 : b->cfg.token_ratio;
    if (b->tokens < 0)
        b->tokens = 0;
    if (b->tokens > b->cfg.max_tokens)
        b->tokens = b->cfg.max_tokens;
}

bool ax_budget_throttled(const struct ax_budget *b, unsigned pending)
{
    /* The 1e-9 absorbs the rounding of repeated token_ratio additions
     * (ten times 0.1 is not exactly 1). */
    return b->cfg.max_tokens > 0 &&
           b->tokens - (double)pending <= b->cfg.max_tokens / 2 + 1e-9;
}
