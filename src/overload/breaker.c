/* breaker.c - circuit breaker of a class: fail fast while its upstream is
 * failing, probe it now and then, close when the probes succeed
 * (DESIGN.md §11).
 *
 * Anchor: resilience4j's CircuitBreaker - its three states, its 50 %
 * failure-rate threshold over a window with a minimum number of calls, its
 * time-based sliding window kept in buckets, and its permitted calls in
 * half-open.
 *
 * States and transitions (every call first applies the time-driven one)
 * ------------------------------------------------------------------------
 *   CLOSED    every call is allowed; outcomes go into a time-based window
 *             of AX_BREAKER_SLOTS slots of window_ns / AX_BREAKER_SLOTS
 *             (the current partial slot and the 9 before it; slots time
 *             moved past are zeroed, a gap of a whole window zeroes all).
 *             An outcome after which calls >= min_calls and
 *             fails / calls >= failure_rate opens it.
 *   OPEN      allow() refuses and counts `rejected`; outcomes are ignored
 *             (those calls began before it opened). open_ns after it
 *             opened, it is HALF_OPEN.
 *   HALF_OPEN allow() hands out up to half_open_calls permits per half-open
 *             spell (a refusal here is not counted: the caller may wait for
 *             the verdict); release() gives one back to the spell that
 *             issued it, and to no later one (a permit still out when other
 *             outcomes gave its spell's verdict belongs to no spell now). Every outcome recorded
 *             now is a probe's outcome, whether or not its call took a
 *             permit: a call that began while closed and ends now is as good
 *             evidence of the upstream's health. Once half_open_calls
 *             outcomes are in: fails / outcomes < failure_rate -> CLOSED
 *             with an empty window (old failures must not reopen it at
 *             once), else OPEN again (opened_at = now, `opened` + 1).
 *             Outcomes of permits that arrive after the verdict count in
 *             the new state like any other.
 *
 * Defaults (AX_BREAKER_DEFAULT_* in overload.h): 50 %, 20 calls, 10 s
 * window, 5 s open, 5 probes: resilience4j's rate and probe count (its 100
 * minimum calls and 60 s open are sized for long-lived services; a task
 * class should notice a dead upstream within its window and retry it within
 * seconds). With 5 probes and 50 %, 2 failures still close it, 3 reopen it.
 *
 * Cost: O(SLOTS) per call at most; no allocation, no lock, no clock.
 */
#include "overload/overload.h"

#include <string.h>

static void window_clear(struct ax_breaker *b)
{
    memset(b->calls, 0, sizeof b->calls);
    memset(b->fails, 0, sizeof b->fails);
}

void ax_breaker_init(struct ax_breaker *b, const struct ax_breaker_cfg *cfg, uint64_t now)
{
    memset(b, 0, sizeof *b);
    b->cfg = *cfg;
    if (b->cfg.half_open_calls < 1) b->cfg.half_open_calls = 1;
    b->slot_ns = cfg->window_ns / AX_BREAKER_SLOTS;
    if (b->slot_ns == 0) b->slot_ns = 1;
    b->epoch = now / b->slot_ns;
    b->state = AX_BRK_CLOSED;
}

/* Zero the window's slots time has moved past (a `now` earlier than the
 * newest slot counts in the newest slot). */
static void window_advance(struct ax_breaker *b, uint64_t now)
{
    uint64_t e = now / b->slot_ns;
    if (e <= b->epoch) return;
    if (e - b->epoch >= AX_BREAKER_SLOTS) {
        window_clear(b);
    } else {
        for (uint64_t i = b->epoch + 1; i <= e; i++) {
            b->calls[i % AX_BREAKER_SLOTS] = 0;
            b->fails[i % AX_BREAKER_SLOTS] = 0;
        }
    }
    b->epoch = e;
}

static void window_sum(const struct ax_breaker *b, uint64_t *calls, uint64_t *fails)
{
    *calls = *fails = 0;
    for (int i = 0; i < AX_BREAKER_SLOTS; i++) {
        *calls += b->calls[i];
        *fails += b->fails[i];
    }
}

static void to_open(struct ax_breaker *b, uint64_t now)
{
    b->state = AX_BRK_OPEN;
    b->opened_at = now;
    b->opened++;
}

/* Apply the time: slide the window; OPEN for open_ns -> HALF_OPEN. */
static void breaker_tick(struct ax_breaker *b, uint64_t now)
{
    window_advance(b, now);
    if (b->state == AX_BRK_OPEN && now >= b->opened_at && now - b->opened_at >= b->cfg.open_ns) {
        b->state = AX_BRK_HALF_OPEN;
        b->probes_out = b->probes_done = b->probes_failed = 0;
        b->spell++;
    }
}

int ax_breaker_poll(struct ax_breaker *b, uint64_t now)
{
    breaker_tick(b, now);
    return b->state;
}

bool ax_breaker_allow(struct ax_breaker *b, uint64_t now)
{
    breaker_tick(b, now);
    switch (b->state) {
    case AX_BRK_CLOSED:
        return true;
    case AX_BRK_OPEN:
        b->rejected++;
        return false;
    default: /* AX_BRK_HALF_OPEN */
        if (b->probes_out >= b->cfg.half_open_calls) return false;
        b->probes_out++;
        return true;
    }
}

void ax_breaker_record(struct ax_breaker *b, uint64_t now, bool failed)
{
    breaker_tick(b, now);
    if (b->state == AX_BRK_CLOSED) {
        uint32_t *c = &b->calls[b->epoch % AX_BREAKER_SLOTS];
        uint32_t *f = &b->fails[b->epoch % AX_BREAKER_SLOTS];
        if (*c == UINT32_MAX) return; /* 4 G calls in one slot: the rate is known well enough */
        (*c)++;
        *f += failed;
        uint64_t calls, fails;
        window_sum(b, &calls, &fails);
        if (calls >= b->cfg.min_calls && calls > 0 &&
            (double)fails >= b->cfg.failure_rate * (double)calls)
            to_open(b, now);
    } else if (b->state == AX_BRK_HALF_OPEN) {
        b->probes_done++;
        b->probes_failed += failed;
        if (b->probes_done < b->cfg.half_open_calls) return;
        if ((double)b->probes_failed < b->cfg.failure_rate * (double)b->probes_done) {
            b->state = AX_BRK_CLOSED;
            window_clear(b);
        } else {
            to_open(b, now);
        }
    }
    /* AX_BRK_OPEN: ignored, the call began before it opened. */
}

void ax_breaker_release(struct ax_breaker *b, uint64_t now, uint8_t tag)
{
    breaker_tick(b, now);
    if (b->state == AX_BRK_HALF_OPEN && tag == ax_breaker_permit_tag(b) && b->probes_out > 0)
        b->probes_out--;
}

double ax_breaker_failure_rate(struct ax_breaker *b, uint64_t now, unsigned *calls)
{
    breaker_tick(b, now);
    uint64_t c, f;
    window_sum(b, &c, &f);
    if (calls) *calls = c > UINT32_MAX ? UINT32_MAX : (unsigned)c;
    return c ? (double)f / (double)c : 0;
}
