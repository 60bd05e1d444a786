/* test_budget.c - the retry budget (src/overload/budget.c).
 *
 * Synthetic time only. The window is 10 s in 10 sub-windows of 1 s, so a
 * count made at t leaves the window at the first whole second >= t + 9 s
 * after t's second, i.e. when `now` reaches (floor(t) + 10) s.
 *
 * The numbers asserted:
 *  - ratio 0.2, floor 0: 100 first attempts allow exactly 20 retries; the
 *    21st is denied and counted; retries never earn budget;
 *  - ratio 0.29: 100 first attempts allow exactly 29 (0.29 x 100 is
 *    28.999... in binary: the rounding tolerance);
 *  - floor alone: 10/s over 10 s allows exactly 100; 0.5/s allows 5;
 *  - the defaults (0.2, 10/s, 10 s): 100 firsts allow 120;
 *  - expiry: firsts at 0.999 s still count at 9.999 s, are gone at 10.0 s;
 *    spent retries free their budget 10 s later in the same way;
 *  - a gap longer than the window (1 h, and exactly 10 sub-windows) clears
 *    every count; a clock that steps back counts in the newest sub-window;
 *  - the throttle (10 tokens, 0.1 back per success), with a budget that
 *    never binds: failures 1-4 leave 9..6 tokens and retries go, the 5th
 *    leaves 5 and they stop; one success (5.1) lets one more go, the next
 *    failure (4.1) stops them; from 0, 51 successes are needed (5.1 > 5:
 *    50 x 0.1 is exactly the half, still throttled); tokens never pass 10
 *    nor go under 0; a failure share of 1 in 12 (under 1/11) keeps retries
 *    going for good, 1 in 10 stops them; pending failures count; 0 tokens
 *    = no throttle; ax_budget_left reads 0 while throttled.
 */
#include "check.h"
#include "overload/overload.h"

#define MS 1000000ull
#define S 1000000000ull

static struct ax_budget_cfg cfg(double ratio, double min_per_s)
{
    return (struct ax_budget_cfg){.ratio = ratio, .min_per_s = min_per_s, .window_ns = 10 * S};
}

static void firsts(struct ax_budget *b, uint64_t now, int n)
{
    for (int i = 0; i < n; i++)
        ax_budget_first(b, now);
}

/* Allowed retries at `now` until the first denial: how many went. */
static int drain(struct ax_budget *b, uint64_t now)
{
    int n = 0;
    while (ax_budget_try_retry(b, now)) {
        n++;
        CHECK(n <= 100000);
    }
    return n;
}

static void test_ratio(void)
{
    struct ax_budget b;
    struct ax_budget_cfg c = cfg(0.2, 0);
    ax_budget_init(&b, &c, 0);
    CHECK(ax_budget_left(&b, 0) == 0);
    CHECK(!ax_budget_try_retry(&b, 0)); /* nothing earned yet, no floor */
    CHECK_EQ(b.denied, 1);
    firsts(&b, 100 * MS, 100);
    CHECK(ax_budget_left(&b, 100 * MS) == 20);
    for (int i = 0; i < 20; i++) {
        CHECK(ax_budget_try_retry(&b, 200 * MS));
        CHECK(ax_budget_left(&b, 200 * MS) == 19 - i);
    }
    CHECK(!ax_budget_try_retry(&b, 200 * MS)); /* the 21st */
    CHECK_EQ(b.allowed, 20);
    CHECK_EQ(b.denied, 2);
    /* Four more firsts earn 0.8 of a retry: still none; the fifth earns one. */
    firsts(&b, 300 * MS, 4);
    CHECK(!ax_budget_try_retry(&b, 300 * MS));
    CHECK(ax_budget_left(&b, 300 * MS) == 0);
    firsts(&b, 300 * MS, 1);
    CHECK(ax_budget_left(&b, 300 * MS) == 1);
    CHECK(ax_budget_try_retry(&b, 300 * MS));
    CHECK(!ax_budget_try_retry(&b, 300 * MS));
    CHECK_EQ(b.allowed, 21);
    CHECK_EQ(b.denied, 4);

    /* A ratio whose product rounds below the integer in binary. */
    struct ax_budget b2;
    struct ax_budget_cfg c2 = cfg(0.29, 0);
    ax_budget_init(&b2, &c2, 0);
    firsts(&b2, 0, 100);
    CHECK_EQ(drain(&b2, 0), 29);
    CHECK_EQ(b2.denied, 1);
}

static void test_floor(void)
{
    struct ax_budget b;
    struct ax_budget_cfg c = cfg(0, 10);
    ax_budget_init(&b, &c, 0);
    CHECK(ax_budget_left(&b, 0) == 100);
    CHECK_EQ(drain(&b, 0), 100); /* 10/s x 10 s */
    CHECK_EQ(b.allowed, 100);
    CHECK_EQ(b.denied, 1);
    firsts(&b, 0, 1000); /* ratio 0: firsts earn nothing */
    CHECK(!ax_budget_try_retry(&b, 0));

    struct ax_budget h;
    struct ax_budget_cfg ch = cfg(0, 0.5);
    ax_budget_init(&h, &ch, 0);
    CHECK_EQ(drain(&h, 0), 5);

    /* The defaults: floor and ratio add up. */
    struct ax_budget d;
    struct ax_budget_cfg cd = {.ratio = AX_BUDGET_DEFAULT_RATIO,
                               .min_per_s = AX_BUDGET_DEFAULT_MIN_PER_S,
                               .window_ns = AX_BUDGET_DEFAULT_WINDOW_NS};
    ax_budget_init(&d, &cd, 0);
    firsts(&d, 0, 100);
    CHECK_EQ(drain(&d, 0), 120);
}

static void test_slide(void)
{
    struct ax_budget b;
    struct ax_budget_cfg c = cfg(0.2, 0);
    uint64_t t0 = 1000 * S; /* not at 0: the epoch arithmetic is absolute */
    ax_budget_init(&b, &c, t0);
    firsts(&b, t0 + 999 * MS, 50);                   /* sub-window 0 */
    firsts(&b, t0 + 5500 * MS, 50);                  /* sub-window 5 */
    CHECK(ax_budget_left(&b, t0 + 9999 * MS) == 20); /* both still in */
    CHECK(ax_budget_left(&b, t0 + 10 * S) == 10);    /* sub-window 0 left */
    CHECK(ax_budget_left(&b, t0 + 14999 * MS) == 10);
    CHECK(ax_budget_left(&b, t0 + 15 * S) == 0); /* sub-window 5 left */

    /* Spent retries free their budget when they leave. */
    struct ax_budget r;
    ax_budget_init(&r, &c, t0);
    firsts(&r, t0, 100);                 /* sub-window 0: 20 retries */
    CHECK_EQ(drain(&r, t0 + 2 * S), 20); /* spent in sub-window 2 */
    firsts(&r, t0 + 3 * S, 100);         /* sub-window 3: 20 more */
    CHECK_EQ(drain(&r, t0 + 4 * S), 20); /* spent in sub-window 4 */
    /* At 10 s: sub-window 0's firsts leave (budget 20), 40 retries still in. */
    CHECK(ax_budget_left(&r, t0 + 10 * S) == 0);
    CHECK(!ax_budget_try_retry(&r, t0 + 10 * S));
    /* At 12 s sub-window 2's retries leave too: 20 - 20 = 0. */
    CHECK(ax_budget_left(&r, t0 + 12 * S) == 0);
    firsts(&r, t0 + 12 * S, 10); /* +2 */
    CHECK(ax_budget_left(&r, t0 + 12 * S) == 2);
    /* At 13 s sub-window 3's firsts leave: 2 - 20 < 0. */
    CHECK(ax_budget_left(&r, t0 + 13 * S) == 0);
    /* At 14 s sub-window 4's retries leave: 2 left. */
    CHECK(ax_budget_left(&r, t0 + 14 * S) == 2);
    CHECK_EQ(drain(&r, t0 + 14 * S), 2);
}

static void test_gap(void)
{
    struct ax_budget b;
    struct ax_budget_cfg c = cfg(0.2, 1);
    ax_budget_init(&b, &c, 0);
    /* One count in every sub-window, retries spent as they come. */
    for (int s = 0; s < 10; s++) {
        firsts(&b, (uint64_t)s * S, 10);
        CHECK(ax_budget_try_retry(&b, (uint64_t)s * S));
    }
    CHECK(ax_budget_left(&b, 9 * S) == 10 + 20 - 10);
    /* Exactly 10 sub-windows later: every count gone, the floor remains. */
    CHECK(ax_budget_left(&b, 19 * S) == 10);
    /* Counts again, then an hour of silence. */
    firsts(&b, 19 * S, 100);
    CHECK_EQ(drain(&b, 19 * S), 30);
    CHECK(ax_budget_left(&b, 19 * S + 3600 * S) == 10);
    /* A clock that steps back counts in the newest sub-window. */
    uint64_t t = 19 * S + 3600 * S;
    firsts(&b, t - 5 * S, 50);
    CHECK(ax_budget_left(&b, t) == 20);
    CHECK(ax_budget_left(&b, t + 9 * S) == 20);
    CHECK(ax_budget_left(&b, t + 10 * S) == 10);
}

static void test_throttle(void)
{
    struct ax_budget b;
    struct ax_budget_cfg c = cfg(10, 1000); /* the window's rule never binds */
    c.max_tokens = 10;
    c.token_ratio = 0.1;
    ax_budget_init(&b, &c, 0);
    CHECK(b.tokens == 10);
    CHECK(!ax_budget_throttled(&b, 0));
    CHECK(!ax_budget_throttled(&b, 4)); /* 6 left with 4 pending */
    CHECK(ax_budget_throttled(&b, 5));  /* 5: the half */
    for (int i = 1; i <= 4; i++) {
        ax_budget_outcome(&b, true);
        CHECK(ax_budget_try_retry(&b, 0));
    }
    CHECK(b.tokens == 6);
    ax_budget_outcome(&b, true);
    CHECK(!ax_budget_try_retry(&b, 0));
    CHECK(ax_budget_left(&b, 0) == 0);
    ax_budget_outcome(&b, false); /* 5.1 */
    CHECK(ax_budget_try_retry(&b, 0));
    CHECK(ax_budget_left(&b, 0) > 0);
    ax_budget_outcome(&b, true); /* 4.1 */
    CHECK(!ax_budget_try_retry(&b, 0));
    /* Never below 0. */
    for (int i = 0; i < 20; i++)
        ax_budget_outcome(&b, true);
    CHECK(b.tokens == 0);
    /* 50 successes: exactly the half (within rounding), still throttled;
     * the 51st lets retries go. */
    for (int i = 0; i < 50; i++)
        ax_budget_outcome(&b, false);
    CHECK(ax_budget_throttled(&b, 0));
    ax_budget_outcome(&b, false);
    CHECK(!ax_budget_throttled(&b, 0));
    /* Never above max_tokens. */
    for (int i = 0; i < 1000; i++)
        ax_budget_outcome(&b, false);
    CHECK(b.tokens == 10);

    /* Steady shares: 1 failure in 12 attempts nets +0.1 per 12 and never
     * throttles; 1 in 10 nets -0.1 per 10 and throttles within 60 rounds. */
    int throttled_at = -1;
    for (int round = 0; round < 1000; round++) {
        for (int k = 0; k < 11; k++)
            ax_budget_outcome(&b, false);
        ax_budget_outcome(&b, true);
        CHECK(!ax_budget_throttled(&b, 0));
    }
    for (int round = 0; round < 1000 && throttled_at < 0; round++) {
        for (int k = 0; k < 9; k++)
            ax_budget_outcome(&b, false);
        ax_budget_outcome(&b, true);
        if (ax_budget_throttled(&b, 0))
            throttled_at = round;
    }
    CHECK(throttled_at >= 0 && throttled_at <= 60);

    /* No throttle: tokens play no part. */
    c.max_tokens = 0;
    ax_budget_init(&b, &c, 0);
    for (int i = 0; i < 100; i++)
        ax_budget_outcome(&b, true);
    CHECK(!ax_budget_throttled(&b, 100));
    CHECK(ax_budget_try_retry(&b, 0));
}

int main(void)
{
    test_throttle();
    test_ratio();
    test_floor();
    test_slide();
    test_gap();
    printf("test_budget: ok\n");
    return 0;
}
