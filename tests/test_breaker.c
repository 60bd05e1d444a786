/* test_breaker.c - the circuit breaker (src/overload/breaker.c).
 *
 * Synthetic time only, at the class defaults: 50 %, 20 calls, a 10 s window
 * in 10 slots of 1 s, 5 s open, 5 probes.
 *
 * The numbers asserted:
 *  - closed -> open on the 20th call when 10 of 20 failed (50 % is enough),
 *    not on 9 of 20; open refuses and counts; open until exactly +5 s, then
 *    half-open; 5 permits, the 6th refused and not counted; 5 good probes
 *    close it with an empty window;
 *  - 3 failed probes of 5 open it again (opened = 2, open for another 5 s);
 *    2 failed of 5 close it; with 4 probes, 2 failed (exactly 50 %) reopen;
 *  - 19 failures of 19 calls stay closed (min_calls);
 *  - failures older than the window (slot edge: 0.5 s -> 10.0 s) are
 *    forgotten; at 9.9 s they still count; sliding one slot a second over
 *    slots of 2 good + 1 failed, slots of 2 failed open it in the 4th such
 *    second (13 of 25), not the 3rd (13 of 27);
 *  - release() gives a permit back (only half-open);
 *  - `rejected` moves only while open; outcomes while open are ignored;
 *    outcomes of calls that took no permit count as probes.
 */
#include "check.h"
#include "overload/overload.h"

#define MS 1000000ull
#define S 1000000000ull

static struct ax_breaker_cfg cfg(void)
{
    return (struct ax_breaker_cfg){
        .failure_rate = AX_BREAKER_DEFAULT_FAILURE_RATE,
        .min_calls = AX_BREAKER_DEFAULT_MIN_CALLS,
        .window_ns = AX_BREAKER_DEFAULT_WINDOW_NS,
        .open_ns = AX_BREAKER_DEFAULT_OPEN_NS,
        .half_open_calls = AX_BREAKER_DEFAULT_HALF_OPEN_CALLS,
    };
}

static void record_n(struct ax_breaker *b, uint64_t now, int n, bool failed)
{
    for (int i = 0; i < n; i++)
        ax_breaker_record(b, now, failed);
}

/* Open b at `now` with 10 good and 10 failed calls; checks it opened on the
 * last one. */
static void open_it(struct ax_breaker *b, uint64_t now)
{
    uint64_t opened = b->opened;
    record_n(b, now, 10, false);
    record_n(b, now, 9, true);
    CHECK_EQ(ax_breaker_poll(b, now), AX_BRK_CLOSED); /* 9 of 19 */
    ax_breaker_record(b, now, true);
    CHECK_EQ(ax_breaker_poll(b, now), AX_BRK_OPEN); /* 10 of 20 */
    CHECK_EQ(b->opened, opened + 1);
}

static void test_sequence(void)
{
    struct ax_breaker b;
    struct ax_breaker_cfg c = cfg();
    uint64_t t = 100 * S;
    ax_breaker_init(&b, &c, t);
    CHECK_EQ(ax_breaker_poll(&b, t), AX_BRK_CLOSED);
    for (int i = 0; i < 100; i++)
        CHECK(ax_breaker_allow(&b, t));
    CHECK_EQ(b.rejected, 0);

    open_it(&b, t + 1 * S);
    unsigned calls;
    CHECK(ax_breaker_failure_rate(&b, t + 1 * S, &calls) == 0.5);
    CHECK_EQ(calls, 20);
    /* Open: refused and counted, until exactly open_ns has passed. */
    CHECK(!ax_breaker_allow(&b, t + 1 * S));
    CHECK(!ax_breaker_allow(&b, t + 5999 * MS));
    CHECK_EQ(b.rejected, 2);
    CHECK_EQ(ax_breaker_poll(&b, t + 5999 * MS), AX_BRK_OPEN);
    /* Half-open at +5 s: five permits, then refusals that are not counted. */
    uint64_t h = t + 6 * S;
    CHECK_EQ(ax_breaker_poll(&b, h), AX_BRK_HALF_OPEN);
    for (int i = 0; i < 5; i++)
        CHECK(ax_breaker_allow(&b, h));
    CHECK(!ax_breaker_allow(&b, h));
    CHECK(!ax_breaker_allow(&b, h));
    CHECK_EQ(b.rejected, 2);
    /* Four good probes: still half-open; the fifth closes it. */
    record_n(&b, h + 100 * MS, 4, false);
    CHECK_EQ(ax_breaker_poll(&b, h + 100 * MS), AX_BRK_HALF_OPEN);
    ax_breaker_record(&b, h + 100 * MS, false);
    CHECK_EQ(ax_breaker_poll(&b, h + 100 * MS), AX_BRK_CLOSED);
    CHECK_EQ(b.opened, 1);
    /* A fresh window: the 10 failures that opened it (5 s ago) are gone. */
    CHECK(ax_breaker_failure_rate(&b, h + 100 * MS, &calls) == 0);
    CHECK_EQ(calls, 0);
    CHECK(ax_breaker_allow(&b, h + 100 * MS));
    /* It takes 20 calls again to open it. */
    record_n(&b, h + 200 * MS, 19, true);
    CHECK_EQ(ax_breaker_poll(&b, h + 200 * MS), AX_BRK_CLOSED);
    ax_breaker_record(&b, h + 200 * MS, true);
    CHECK_EQ(ax_breaker_poll(&b, h + 200 * MS), AX_BRK_OPEN);
    CHECK_EQ(b.opened, 2);
}

static void test_probes_fail(void)
{
    struct ax_breaker b;
    struct ax_breaker_cfg c = cfg();
    ax_breaker_init(&b, &c, 0);
    open_it(&b, 0);
    /* Three failed probes of five: open again, for another 5 s from now. */
    uint64_t h = 5 * S;
    for (int i = 0; i < 5; i++)
        CHECK(ax_breaker_allow(&b, h));
    record_n(&b, h + 1 * S, 2, false);
    record_n(&b, h + 1 * S, 2, true);
    CHECK_EQ(ax_breaker_poll(&b, h + 1 * S), AX_BRK_HALF_OPEN);
    ax_breaker_record(&b, h + 1 * S, true);
    CHECK_EQ(ax_breaker_poll(&b, h + 1 * S), AX_BRK_OPEN);
    CHECK_EQ(b.opened, 2);
    CHECK_EQ(b.opened_at, h + 1 * S);
    CHECK(!ax_breaker_allow(&b, h + 5999 * MS));
    CHECK_EQ(b.rejected, 1);
    /* Half-open again with five fresh permits; two failed of five close it. */
    uint64_t h2 = h + 6 * S;
    CHECK_EQ(ax_breaker_poll(&b, h2), AX_BRK_HALF_OPEN);
    for (int i = 0; i < 5; i++)
        CHECK(ax_breaker_allow(&b, h2));
    CHECK(!ax_breaker_allow(&b, h2));
    record_n(&b, h2, 2, true);
    record_n(&b, h2, 3, false);
    CHECK_EQ(ax_breaker_poll(&b, h2), AX_BRK_CLOSED);
    CHECK_EQ(b.opened, 2);
}

static void test_min_calls_and_rate(void)
{
    struct ax_breaker b;
    struct ax_breaker_cfg c = cfg();
    ax_breaker_init(&b, &c, 0);
    record_n(&b, 0, 19, true);
    unsigned calls;
    CHECK(ax_breaker_failure_rate(&b, 0, &calls) == 1.0);
    CHECK_EQ(calls, 19);
    CHECK_EQ(ax_breaker_poll(&b, 0), AX_BRK_CLOSED); /* 19 < min_calls */
    CHECK_EQ(b.opened, 0);
    /* Below the rate with plenty of calls: 9 of 20, then 45 of 100. */
    struct ax_breaker r;
    ax_breaker_init(&r, &c, 0);
    record_n(&r, 0, 11, false);
    record_n(&r, 0, 9, true);
    CHECK_EQ(ax_breaker_poll(&r, 0), AX_BRK_CLOSED);
    record_n(&r, 0, 44, false);
    record_n(&r, 0, 36, true);
    CHECK(ax_breaker_failure_rate(&r, 0, &calls) == 0.45);
    CHECK_EQ(calls, 100);
    CHECK_EQ(ax_breaker_poll(&r, 0), AX_BRK_CLOSED);
    ax_breaker_record(&r, 0, true); /* 46 of 101 */
    CHECK_EQ(ax_breaker_poll(&r, 0), AX_BRK_CLOSED);
}

static void test_window_expiry(void)
{
    struct ax_breaker b, k;
    struct ax_breaker_cfg c = cfg();
    ax_breaker_init(&b, &c, 0);
    ax_breaker_init(&k, &c, 0);
    record_n(&b, 500 * MS, 15, true); /* slot 0 */
    record_n(&k, 500 * MS, 15, true);
    /* Control: at 9.9 s they still count: 20 calls, all failed. */
    record_n(&k, 9900 * MS, 5, true);
    CHECK_EQ(ax_breaker_poll(&k, 9900 * MS), AX_BRK_OPEN);
    /* At 10.0 s slot 0 has left the window: 5 calls only. */
    unsigned calls;
    CHECK(ax_breaker_failure_rate(&b, 10 * S, &calls) == 0);
    CHECK_EQ(calls, 0);
    record_n(&b, 10 * S, 5, true);
    CHECK_EQ(ax_breaker_poll(&b, 10 * S), AX_BRK_CLOSED);
    CHECK(ax_breaker_failure_rate(&b, 10 * S, &calls) == 1.0);
    CHECK_EQ(calls, 5);
    /* One slot at a time: 5 failures in each of slots 10..13 make 20 at 13 s. */
    record_n(&b, 11 * S, 5, true);
    record_n(&b, 12 * S, 5, true);
    CHECK_EQ(ax_breaker_poll(&b, 12 * S), AX_BRK_CLOSED);
    record_n(&b, 13 * S, 5, true);
    CHECK_EQ(ax_breaker_poll(&b, 13 * S), AX_BRK_OPEN);
    /* A long silence clears everything (and open has long run out). */
    CHECK(ax_breaker_failure_rate(&b, 13 * S + 3600 * S, &calls) == 0);
    CHECK_EQ(calls, 0);
    CHECK_EQ(ax_breaker_poll(&b, 13 * S + 3600 * S), AX_BRK_HALF_OPEN);
}

/* The window slides one slot at a time, reusing each slot's counters: 2 good
 * and 1 failed call in each second 0..9, then 2 failures in each second
 * 10..: at second 10 + k the window holds 29 - k calls of which 11 + k
 * failed; it opens on the first failure of k = 3 (13 of 25), not before
 * (13 of 27 at k = 2). */
static void test_window_slides(void)
{
    struct ax_breaker b;
    struct ax_breaker_cfg c = cfg();
    ax_breaker_init(&b, &c, 0);
    for (int s = 0; s < 10; s++) {
        record_n(&b, (uint64_t)s * S + 300 * MS, 2, false);
        record_n(&b, (uint64_t)s * S + 300 * MS, 1, true);
    }
    unsigned calls;
    CHECK(ax_breaker_failure_rate(&b, 9 * S + 999 * MS, &calls) == 10.0 / 30);
    CHECK_EQ(calls, 30);
    for (int k = 0; k < 3; k++) {
        uint64_t t = (uint64_t)(10 + k) * S + 300 * MS;
        record_n(&b, t, 2, true);
        double rate = ax_breaker_failure_rate(&b, t, &calls);
        CHECK_EQ(calls, 29 - k);
        CHECK(rate == (11.0 + k) / (29 - k));
        CHECK_EQ(ax_breaker_poll(&b, t), AX_BRK_CLOSED);
    }
    /* k = 3: the first failure makes 13 of 25 and opens it; the second is
     * ignored (open). */
    ax_breaker_record(&b, 13 * S + 300 * MS, true);
    CHECK_EQ(ax_breaker_poll(&b, 13 * S + 300 * MS), AX_BRK_OPEN);
    CHECK(ax_breaker_failure_rate(&b, 13 * S + 300 * MS, &calls) == 13.0 / 25);
    CHECK_EQ(calls, 25);
    ax_breaker_record(&b, 13 * S + 300 * MS, true);
    CHECK(ax_breaker_failure_rate(&b, 13 * S + 300 * MS, &calls) == 13.0 / 25);
    CHECK_EQ(calls, 25);
}

/* The probes' verdict at exactly failure_rate reopens it ("below" closes). */
static void test_probe_threshold(void)
{
    struct ax_breaker b;
    struct ax_breaker_cfg c = cfg();
    c.half_open_calls = 4;
    ax_breaker_init(&b, &c, 0);
    open_it(&b, 0);
    CHECK_EQ(ax_breaker_poll(&b, 5 * S), AX_BRK_HALF_OPEN);
    record_n(&b, 5 * S, 2, false);
    record_n(&b, 5 * S, 2, true); /* 2 of 4 = 50 % */
    CHECK_EQ(ax_breaker_poll(&b, 5 * S), AX_BRK_OPEN);
    CHECK_EQ(ax_breaker_poll(&b, 10 * S), AX_BRK_HALF_OPEN);
    record_n(&b, 10 * S, 1, true);
    record_n(&b, 10 * S, 3, false); /* 1 of 4 */
    CHECK_EQ(ax_breaker_poll(&b, 10 * S), AX_BRK_CLOSED);
    CHECK_EQ(b.opened, 2);
}

static void test_release_and_stray(void)
{
    struct ax_breaker b;
    struct ax_breaker_cfg c = cfg();
    ax_breaker_init(&b, &c, 0);
    ax_breaker_release(&b, 0, ax_breaker_permit_tag(&b)); /* closed: nothing to give back */
    CHECK_EQ(b.probes_out, 0);
    open_it(&b, 0);
    ax_breaker_release(&b, 1 * S, ax_breaker_permit_tag(&b)); /* open: nothing either */
    CHECK_EQ(b.probes_out, 0);
    /* Outcomes while open are ignored: they do not become probes later. */
    record_n(&b, 1 * S, 50, false);
    CHECK_EQ(ax_breaker_poll(&b, 1 * S), AX_BRK_OPEN);
    uint64_t h = 5 * S;
    CHECK_EQ(ax_breaker_poll(&b, h), AX_BRK_HALF_OPEN);
    CHECK_EQ(b.probes_done, 0);
    for (int i = 0; i < 5; i++)
        CHECK(ax_breaker_allow(&b, h));
    CHECK(!ax_breaker_allow(&b, h));
    uint8_t tag = ax_breaker_permit_tag(&b);
    ax_breaker_release(&b, h, tag); /* one probe cancelled: its permit is back */
    CHECK(ax_breaker_allow(&b, h));
    CHECK(!ax_breaker_allow(&b, h));
    ax_breaker_release(&b, h, tag);
    ax_breaker_release(&b, h, tag);
    CHECK(ax_breaker_allow(&b, h));
    CHECK(ax_breaker_allow(&b, h));
    CHECK(!ax_breaker_allow(&b, h));
    CHECK_EQ(b.rejected, 0); /* half-open refusals are not rejections */
    /* Outcomes of calls that took no permit are probes too: with all five
     * permits still out, five such outcomes decide. */
    record_n(&b, h, 5, false);
    CHECK_EQ(ax_breaker_poll(&b, h), AX_BRK_CLOSED);
    /* The permits' own outcomes arriving later count in the closed window. */
    record_n(&b, h, 5, true);
    unsigned calls;
    CHECK(ax_breaker_failure_rate(&b, h, &calls) == 1.0);
    CHECK_EQ(calls, 5);
    CHECK_EQ(ax_breaker_poll(&b, h), AX_BRK_CLOSED);
}

/* A permit still out when other outcomes gave its spell's verdict is given
 * back in a later spell: it must not free that spell's permit (review of
 * 16d186c: with one permit, two probes were out at once). */
static void test_release_old_spell(void)
{
    struct ax_breaker b;
    struct ax_breaker_cfg c = cfg();
    c.half_open_calls = 1;
    ax_breaker_init(&b, &c, 0);
    open_it(&b, 0);
    uint64_t h = 5 * S;
    CHECK_EQ(ax_breaker_poll(&b, h), AX_BRK_HALF_OPEN);
    CHECK(ax_breaker_allow(&b, h)); /* P1, spell 1 */
    uint8_t p1 = ax_breaker_permit_tag(&b);
    ax_breaker_record(&b, h, true); /* another call's outcome: spell 1's verdict */
    CHECK_EQ(ax_breaker_poll(&b, h), AX_BRK_OPEN);
    uint64_t h2 = h + 5 * S;
    CHECK_EQ(ax_breaker_poll(&b, h2), AX_BRK_HALF_OPEN);
    CHECK(ax_breaker_allow(&b, h2)); /* Q, spell 2 */
    uint8_t q = ax_breaker_permit_tag(&b);
    CHECK(q != p1);
    CHECK(!ax_breaker_allow(&b, h2));
    ax_breaker_release(&b, h2, p1); /* P1 cancelled: not spell 2's permit */
    CHECK_EQ(b.probes_out, 1);
    CHECK(!ax_breaker_allow(&b, h2)); /* R still waits for Q's verdict */
    ax_breaker_release(&b, h2, q); /* Q cancelled: its permit is back */
    CHECK_EQ(b.probes_out, 0);
    CHECK(ax_breaker_allow(&b, h2));
    /* The tags cycle through 1..255, never 0 ("no permit" to a caller). */
    for (int i = 0; i < 600; i++) {
        b.spell++;
        CHECK(ax_breaker_permit_tag(&b) != 0);
    }
}

int main(void)
{
    test_sequence();
    test_probes_fail();
    test_min_calls_and_rate();
    test_window_expiry();
    test_window_slides();
    test_probe_threshold();
    test_release_and_stray();
    test_release_old_spell();
    printf("test_breaker: ok\n");
    return 0;
}
