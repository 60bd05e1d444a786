/* test_timer_ticks.c - how late a worker's timer can fire: the tick
 * conversions of internal.h (ns_to_tick_ceil, ns_to_tick, tick_to_ns) with
 * the wheel (src/wheel.c), in synthetic time.
 *
 * A worker arms ax_sleep(ms) at ns_to_tick_ceil(call + ms), sleeps until
 * tick_to_ns(ax_wheel_next()) and then advances its wheel to ns_to_tick(now)
 * (worker.c, run.c). Replayed here with a hand-driven clock, that path must
 * never fire a sleep before call + ms, and must fire it less than one tick
 * after, whatever the phase of the call within a tick and however the
 * worker's wake-ups fall. Issue 10 ("timer lateness p99 <= 2 ms") needs the
 * tick to be far below a millisecond: with the old 1 ms ticks a sleep was
 * up to 1 ms late from rounding alone (this test then fails on its 100 us
 * bound). */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"
#include "wheel.h"

#define MS 1000000ull

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rnd(void) /* splitmix64, fixed seed */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The tick itself: a power of two, and fine enough for the bound. */
static void test_tick_size(void)
{
    CHECK_EQ(AX_TICK_NS & (AX_TICK_NS - 1), 0);
    CHECK_LE(AX_TICK_NS, 100000); /* <= 100 us: the old 1 ms fails here */
    CHECK_EQ(ns_to_tick(tick_to_ns(12345)), 12345);
    CHECK_EQ(ns_to_tick_ceil(tick_to_ns(12345)), 12345);
    CHECK_EQ(ns_to_tick_ceil(tick_to_ns(12345) + 1), 12346);
    CHECK_EQ(ns_to_tick(tick_to_ns(12345) - 1), 12344);
    /* "never" does not wrap to tick 0 (test_deadline's old bug) */
    CHECK(ns_to_tick_ceil(UINT64_MAX) == (UINT64_MAX >> AX_TICK_SHIFT) + 1);
    CHECK_EQ(tick_to_ns(UINT64_MAX), UINT64_MAX);
    CHECK_EQ(tick_to_ns(ns_to_tick_ceil(UINT64_MAX)), UINT64_MAX);
}

/* One sleep of `ms` called at `call_ns`, the worker waking exactly when its
 * wheel says (the best case for lateness, the worst for firing early), or
 * `jitter_ns` later at most (a late epoll wake-up, a busy iteration).
 * Returns the synthetic time at which the node came out. */
static uint64_t replay_sleep(uint64_t call_ns, uint64_t ms, uint64_t jitter_ns, unsigned *wakes)
{
    struct ax_wheel w;
    struct ax_wheel_node n = {0};
    uint64_t now = call_ns;

    ax_wheel_init(&w, ns_to_tick(now));
    ax_wheel_add(&w, &n, ns_to_tick_ceil(call_ns + ms * MS));
    *wakes = 0;
    for (;;) {
        uint64_t next = ax_wheel_next(&w);
        CHECK(next != UINT64_MAX);
        uint64_t at = tick_to_ns(next); /* worker_sleep's timeout */
        if (at > now) now = at;
        if (jitter_ns) now += rnd() % jitter_ns;
        (*wakes)++;
        struct ax_wheel_node *out = NULL;
        size_t fired = ax_wheel_advance(&w, ns_to_tick(now), &out); /* run_expire_timers */
        if (fired) {
            CHECK_EQ(fired, 1);
            CHECK(out == &n);
            CHECK_EQ(ax_wheel_count(&w), 0);
            return now;
        }
        /* Not yet: a wake-up for a cascade, or a late one that still
         * falls within the deadline's own tick. Either way before the tick
         * the sleep is due at (the wheel never lets us sleep past it). */
        CHECK(now < tick_to_ns(ns_to_tick_ceil(call_ns + ms * MS)));
        CHECK_LE(*wakes, AX_WHEEL_LEVELS);
    }
}

static void test_sleep_bounds(void)
{
    static const uint64_t sleeps[] = {1, 2, 3, 5, 10, 50, 64, 100, 1000, 60000};
    uint64_t worst = 0;
    for (size_t k = 0; k < sizeof sleeps / sizeof sleeps[0]; k++) {
        for (int i = 0; i < 2000; i++) {
            /* Any phase within a tick and within every level's block; the
             * first calls start exactly on and just off a tick. */
            uint64_t call = i == 0   ? tick_to_ns(1u << 20)
                            : i == 1 ? tick_to_ns(1u << 20) + 1
                                     : (rnd() % (1ull << 44)) + MS;
            unsigned wakes;
            uint64_t fired = replay_sleep(call, sleeps[k], 0, &wakes);
            uint64_t due = call + sleeps[k] * MS;
            CHECK(fired >= due);             /* never early */
            CHECK(fired - due < AX_TICK_NS); /* late by less than a tick */
            if (fired - due > worst) worst = fired - due;
        }
    }
    CHECK_LE(worst, 100000); /* the bound issue 10 needs, in ns */
    fprintf(stderr, "worst rounding lateness %llu ns (tick %llu ns)\n", (unsigned long long)worst,
            (unsigned long long)AX_TICK_NS);
}

/* A worker that wakes late (by up to 3 ticks) still never fires early, and
 * fires at its first look at or after the deadline's tick. */
static void test_late_wakeups(void)
{
    for (int i = 0; i < 20000; i++) {
        uint64_t call = (rnd() % (1ull << 44)) + MS, ms = 1 + rnd() % 200;
        unsigned wakes;
        uint64_t fired = replay_sleep(call, ms, 3 * AX_TICK_NS, &wakes);
        uint64_t due = call + ms * MS;
        CHECK(fired >= due);
        CHECK(fired - due < 4 * AX_TICK_NS);
    }
}

/* Many sleeps armed in one wheel at scattered moments while it runs (a
 * worker starting 10 k sleepers while the first ones come due): each comes
 * out at the worker's first look at or after its deadline's tick, none
 * before. */
static void test_many_sleepers(void)
{
    enum { N = 10000 };
    static struct ax_wheel w;
    static struct ax_wheel_node nodes[N];
    static uint64_t due[N];
    uint64_t now = tick_to_ns(1u << 24) + 12345;
    size_t armed = 0, seen = 0;

    ax_wheel_init(&w, ns_to_tick(now));
    while (seen < N) {
        uint64_t step = 1 + rnd() % 30000; /* iterations 15 us apart on average */
        /* this iteration's new sleepers, called at moments within it */
        for (int k = (int)(rnd() % 4); k > 0 && armed < N; k--, armed++) {
            due[armed] = now + rnd() % step + 50 * MS;
            ax_wheel_add(&w, &nodes[armed], ns_to_tick_ceil(due[armed]));
        }
        now += step;
        struct ax_wheel_node *out = NULL;
        ax_wheel_advance(&w, ns_to_tick(now), &out);
        for (; out; out = out->next, seen++) {
            size_t i = (size_t)(out - nodes);
            CHECK(now >= due[i]);
            CHECK(now - due[i] < AX_TICK_NS + step);
        }
    }
    CHECK_EQ(ax_wheel_count(&w), 0);
}

int main(void)
{
    test_tick_size();
    test_sleep_bounds();
    test_late_wakeups();
    test_many_sleepers();
    return 0;
}
