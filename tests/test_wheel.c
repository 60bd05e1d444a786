/* test_wheel.c - exact behaviour of the hierarchical timing wheel (src/wheel.c).
 *
 * Every test drives the wheel's clock by hand, so nothing depends on real
 * time. A brute-force reference (an array of armed nodes, sorted on demand)
 * says what each advance must return: which nodes, in which order. */
#include "check.h"
#include "wheel.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

struct tnode {
    struct ax_wheel_node wn; /* first: the wheel node doubles as the tnode */
    uint64_t due;            /* expiry the wheel must fire it at (clamped to now) */
    uint64_t seq;            /* add order, for FIFO among equal expiries */
    size_t ref;              /* position in the reference array while armed */
    int fired;
    bool cancelled;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) /* splitmix64: fixed seed, same run every time */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A delta spread over every level: uniform bit length 0..maxbits, then uniform. */
static uint64_t rnd_delta(unsigned maxbits)
{
    unsigned bits = (unsigned)(rnd() % (maxbits + 1));
    return bits == 0 ? 0 : rnd() & (bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1);
}

/* ---- reference model ---------------------------------------------------- */

struct ref {
    struct tnode **v;
    size_t n, cap;
    uint64_t seq;
};

static void ref_add(struct ref *r, struct ax_wheel *w, struct tnode *t, uint64_t expiry)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->v = realloc(r->v, r->cap * sizeof *r->v);
        CHECK(r->v != NULL);
    }
    t->due = expiry < w->now ? w->now : expiry;
    t->seq = r->seq++;
    t->ref = r->n;
    r->v[r->n++] = t;
    ax_wheel_add(w, &t->wn, expiry);
    CHECK(ax_wheel_node_armed(&t->wn));
    CHECK_EQ(t->wn.expiry, t->due);
}

static void ref_forget(struct ref *r, struct tnode *t)
{
    struct tnode *last = r->v[--r->n];
    r->v[t->ref] = last;
    last->ref = t->ref;
}

static void ref_del(struct ref *r, struct ax_wheel *w, struct tnode *t)
{
    ax_wheel_del(w, &t->wn);
    CHECK(!ax_wheel_node_armed(&t->wn));
    ref_forget(r, t);
}

static int by_due_seq(const void *a, const void *b)
{
    const struct tnode *x = *(struct tnode *const *)a, *y = *(struct tnode *const *)b;
    if (x->due != y->due) return x->due < y->due ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

/* ax_wheel_next must be >= now (or the due tick == now), never later than the
 * true earliest expiry, and UINT64_MAX exactly when empty. */
static void ref_check_next(struct ref *r, struct ax_wheel *w)
{
    uint64_t min = UINT64_MAX, next = ax_wheel_next(w);
    for (size_t i = 0; i < r->n; i++)
        min = r->v[i]->due < min ? r->v[i]->due : min;
    CHECK_EQ(ax_wheel_count(w), r->n);
    if (r->n == 0) {
        CHECK(next == UINT64_MAX);
    } else {
        CHECK(next <= min);
        CHECK(next >= w->now);
    }
}

/* Advance to t and check the result is exactly the reference's due set, in
 * (expiry, add order) order. Returns the number fired. */
static size_t ref_advance(struct ref *r, struct ax_wheel *w, uint64_t t, struct tnode ***scratch,
                          size_t *scap)
{
    struct ax_wheel_node *out = NULL;
    size_t k = 0, got;
    uint64_t target = t < w->now ? w->now : t;

    for (size_t i = 0; i < r->n; i++) {
        if (r->v[i]->due <= target) {
            if (k == *scap) {
                *scap = *scap ? 2 * *scap : 1024;
                *scratch = realloc(*scratch, *scap * sizeof **scratch);
                CHECK(*scratch != NULL);
            }
            (*scratch)[k++] = r->v[i];
        }
    }
    if (k > 1) qsort(*scratch, k, sizeof **scratch, by_due_seq);

    got = ax_wheel_advance(w, t, &out);
    CHECK_EQ(got, k);
    CHECK_EQ(w->now, target);
    for (size_t i = 0; i < k; i++) {
        struct tnode *e = (*scratch)[i];
        CHECK(out == &e->wn);
        CHECK(!ax_wheel_node_armed(out));
        out = out->next;
        e->fired++;
        ref_forget(r, e);
    }
    CHECK(out == NULL);
    /* nothing left at or before the new now */
    CHECK(ax_wheel_next(w) > target || r->n == 0);
    ref_check_next(r, w);
    return k;
}

/* ---- tests ---------------------------------------------------------------- */

/* Many random timers at every scale, interleaved with cancels, late adds,
 * duplicate expiries (FIFO), re-adds of fired nodes, and advances by random
 * steps, to ax_wheel_next() and to just before it. */
static void test_random_ordering(uint64_t start)
{
    enum { N = 20000, ROUNDS = 6000 };
    struct tnode *t = calloc(N, sizeof *t);
    struct ref r = {0};
    struct tnode **scratch = NULL;
    size_t scap = 0, fired = 0;
    struct ax_wheel w;
    uint64_t last_expiry = start;

    CHECK(t != NULL);
    ax_wheel_init(&w, start);
    ref_check_next(&r, &w);
    for (int round = 0; round < ROUNDS; round++) {
        int adds = (int)(rnd() % 8);
        for (int a = 0; a < adds; a++) {
            struct tnode *x = &t[rnd() % N];
            uint64_t e;
            if (ax_wheel_node_armed(&x->wn)) continue;
            switch (rnd() % 8) {
            case 0: /* same expiry as an earlier add: FIFO */
                e = last_expiry;
                break;
            case 1: /* in the past or exactly now */
                e = w.now - (w.now < 100 ? w.now : rnd() % 100);
                break;
            case 2: /* beyond the top level */
                e = w.now + ((uint64_t)1 << 36) + rnd_delta(40);
                break;
            default:
                e = w.now + rnd_delta(37);
                break;
            }
            last_expiry = e;
            ref_add(&r, &w, x, e);
        }
        int dels = (int)(rnd() % 4);
        for (int d = 0; d < dels && r.n; d++)
            ref_del(&r, &w, r.v[rnd() % r.n]);
        ref_check_next(&r, &w);

        uint64_t next = ax_wheel_next(&w), to;
        switch (rnd() % 6) {
        case 0:
            to = next;
            break;
        case 1:
            to = next == UINT64_MAX ? w.now : (next > w.now ? next - 1 : next);
            break;
        case 2:
            to = w.now; /* a zero step still delivers what is due now */
            break;
        case 3:
            to = w.now - (w.now ? 1 : 0); /* backwards: treated as now */
            break;
        default:
            to = w.now + rnd_delta(rnd() % 4 ? 14 : 36);
            break;
        }
        fired += ref_advance(&r, &w, to, &scratch, &scap);
    }
    /* drain everything, far ones included */
    while (r.n)
        fired += ref_advance(&r, &w, ax_wheel_next(&w), &scratch, &scap);
    CHECK_EQ(ax_wheel_count(&w), 0);
    CHECK(fired > ROUNDS / 2);
    free(scratch);
    free(r.v);
    free(t);
}

/* Drive one timer the way a worker does (sleep until next, advance) and
 * check it fires exactly at its expiry, after at most one wake-up per level
 * (plus one per 2^36-tick window it starts beyond). */
static void fire_exactly(uint64_t start, uint64_t off)
{
    struct ax_wheel w;
    struct ax_wheel_node n = {0}, *out;
    uint64_t e = start + off;
    unsigned wakeups = 0, bound = AX_WHEEL_LEVELS + 2 + (unsigned)(off >> AX_WHEEL_RANGE_BITS);

    ax_wheel_init(&w, start);
    ax_wheel_add(&w, &n, e);
    CHECK_EQ(n.expiry, e);
    CHECK_EQ(ax_wheel_count(&w), 1);
    for (;;) {
        uint64_t t = ax_wheel_next(&w);
        CHECK(t <= e);
        CHECK(t >= w.now);
        out = NULL;
        size_t k = ax_wheel_advance(&w, t, &out);
        wakeups++;
        CHECK_LE(wakeups, bound);
        if (k) {
            CHECK_EQ(k, 1);
            CHECK(out == &n);
            CHECK(t == e);
            break;
        }
        CHECK(out == NULL);
        CHECK(ax_wheel_node_armed(&n));
    }
    CHECK(!ax_wheel_node_armed(&n));
    CHECK_EQ(ax_wheel_count(&w), 0);
    CHECK(ax_wheel_next(&w) == UINT64_MAX);

    /* The same timer by direct jumps: nothing at e-1, exactly it at e. */
    ax_wheel_init(&w, start);
    ax_wheel_add(&w, &n, e);
    out = NULL;
    if (e > start) {
        uint64_t before = w.visits;
        CHECK_EQ(ax_wheel_advance(&w, e - 1, &out), 0);
        CHECK(out == NULL);
        CHECK_LE(w.visits - before, AX_WHEEL_LEVELS + 1);
        CHECK(ax_wheel_node_armed(&n));
        CHECK(ax_wheel_next(&w) <= e);
    }
    CHECK_EQ(ax_wheel_advance(&w, e, &out), 1);
    CHECK(out == &n && n.next == NULL);
    CHECK(!ax_wheel_node_armed(&n));

    /* And by one jump far past it. */
    ax_wheel_init(&w, start);
    ax_wheel_add(&w, &n, e);
    out = NULL;
    CHECK_EQ(ax_wheel_advance(&w, e + (UINT64_MAX - e) / 2, &out), 1);
    CHECK(out == &n);
}

static void test_level_boundaries(void)
{
    static const uint64_t day = 86400000ull; /* ms */
    uint64_t offs[128];
    size_t no = 0;
    const uint64_t starts[] = {0,
                               1,
                               63,
                               64,
                               4095,
                               123456789,
                               ((uint64_t)1 << 36) - 3,
                               ((uint64_t)1 << 36) + 5,
                               ((uint64_t)1 << 52) + 777,
                               0x123456789abcull};

    for (unsigned k = 1; k <= 7; k++) { /* 64, 4096, ... 64^7 each -1, 0, +1 */
        uint64_t b = (uint64_t)1 << (6 * k);
        offs[no++] = b - 1;
        offs[no++] = b;
        offs[no++] = b + 1;
    }
    const uint64_t more[] = {0,
                             1,
                             2,
                             62,
                             1000,
                             30000,
                             day,
                             7 * day,
                             30 * day,
                             365 * day,
                             3 * 365 * day,
                             100 * 365 * day,
                             (uint64_t)1 << 44};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        offs[no++] = more[i];

    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++)
        for (size_t i = 0; i < no; i++)
            fire_exactly(starts[s], offs[i]);

    /* The last representable tick still works. */
    fire_exactly(UINT64_MAX - 5000, 5000);
}

/* Three nodes in one slot: cancel head, middle or tail; the others still
 * fire, in order. Level 0 (equal expiries, FIFO) and level 2 (one slot,
 * different expiries). */
static void test_cancel_in_slot(void)
{
    const uint64_t exp0[3] = {10, 10, 10};
    const uint64_t exp2[3] = {5002, 5000, 5001}; /* all in level 2, slot 1 */
    const uint64_t *sets[2] = {exp0, exp2};

    for (int set = 0; set < 2; set++) {
        for (int victim = 0; victim < 3; victim++) {
            struct ax_wheel w;
            struct ax_wheel_node n[3] = {{0}}, *out = NULL;
            ax_wheel_init(&w, 0);
            for (int i = 0; i < 3; i++)
                ax_wheel_add(&w, &n[i], sets[set][i]);
            ax_wheel_del(&w, &n[victim]);
            CHECK(!ax_wheel_node_armed(&n[victim]));
            CHECK_EQ(ax_wheel_count(&w), 2);
            ax_wheel_del(&w, &n[victim]); /* second del: no-op */
            CHECK_EQ(ax_wheel_count(&w), 2);
            CHECK_EQ(ax_wheel_advance(&w, 6000, &out), 2);
            /* expected: the two survivors sorted by (expiry, add order) */
            int a = -1, b = -1;
            for (int i = 0; i < 3; i++) {
                if (i == victim) continue;
                if (a < 0)
                    a = i;
                else
                    b = i;
            }
            if (sets[set][b] < sets[set][a]) {
                int tmp = a;
                a = b;
                b = tmp;
            }
            CHECK(out == &n[a]);
            CHECK(out->next == &n[b]);
            CHECK(out->next->next == NULL);
            CHECK(ax_wheel_next(&w) == UINT64_MAX);
        }
        /* cancel all three in every order: the slot bit must clear */
        for (int perm = 0; perm < 6; perm++) {
            static const int p[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                        {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
            struct ax_wheel w;
            struct ax_wheel_node n[3] = {{0}}, *out = NULL;
            ax_wheel_init(&w, 0);
            for (int i = 0; i < 3; i++)
                ax_wheel_add(&w, &n[i], sets[set][i]);
            for (int i = 0; i < 3; i++) {
                CHECK(ax_wheel_next(&w) != UINT64_MAX);
                ax_wheel_del(&w, &n[p[perm][i]]);
            }
            CHECK_EQ(ax_wheel_count(&w), 0);
            CHECK(ax_wheel_next(&w) == UINT64_MAX);
            CHECK_EQ(ax_wheel_advance(&w, 100000, &out), 0);
            CHECK(out == NULL);
        }
    }

    /* del of a node that was never armed, or has fired: no-op */
    struct ax_wheel w;
    struct ax_wheel_node z = {0}, a = {0}, *out = NULL;
    ax_wheel_init(&w, 0);
    ax_wheel_del(&w, &z);
    CHECK_EQ(ax_wheel_count(&w), 0);
    ax_wheel_add(&w, &a, 3);
    CHECK_EQ(ax_wheel_advance(&w, 3, &out), 1);
    ax_wheel_del(&w, &a);
    CHECK_EQ(ax_wheel_count(&w), 0);
}

/* Cancel a node after it has been cascaded to a lower level. */
static void test_cancel_after_cascade(void)
{
    struct ax_wheel w;
    struct ax_wheel_node a = {0}, b = {0}, c = {0}, *out = NULL;

    ax_wheel_init(&w, 0);
    ax_wheel_add(&w, &a, 5000); /* level 2, slot 1: cascades at 4096 */
    ax_wheel_add(&w, &b, 5001);
    ax_wheel_add(&w, &c, 300000); /* level 3: cascades at 262144 */
    CHECK_EQ(ax_wheel_next(&w), 4096);
    uint64_t v = w.visits;
    CHECK_EQ(ax_wheel_advance(&w, 4100, &out), 0);
    CHECK_EQ(w.visits - v, 1);         /* the cascade happened */
    CHECK_EQ(ax_wheel_next(&w), 4992); /* now in level 1, slot 78 & 63 */
    ax_wheel_del(&w, &a);
    CHECK_EQ(ax_wheel_next(&w), 4992); /* b still there */
    ax_wheel_del(&w, &b);
    CHECK_EQ(ax_wheel_next(&w), 262144); /* only c, still in level 3 */
    CHECK_EQ(ax_wheel_advance(&w, 299999, &out), 0);
    CHECK(ax_wheel_next(&w) <= 300000);
    ax_wheel_del(&w, &c); /* cancelled after two cascades */
    CHECK(ax_wheel_next(&w) == UINT64_MAX);
    CHECK_EQ(ax_wheel_advance(&w, 1000000, &out), 0);
    CHECK(out == NULL);
    CHECK_EQ(ax_wheel_count(&w), 0);

    /* Cancel from the overflow slot and after the overflow was re-filed. */
    struct ax_wheel_node f = {0};
    uint64_t far = (uint64_t)1 << 40;
    ax_wheel_init(&w, 0);
    ax_wheel_add(&w, &f, far);
    CHECK_EQ(ax_wheel_next(&w), (uint64_t)1 << 36);
    ax_wheel_del(&w, &f);
    CHECK(ax_wheel_next(&w) == UINT64_MAX);
    ax_wheel_add(&w, &f, far);
    CHECK_EQ(ax_wheel_advance(&w, far - 10, &out), 0);
    CHECK(ax_wheel_next(&w) <= far);
    ax_wheel_del(&w, &f);
    CHECK(ax_wheel_next(&w) == UINT64_MAX);
    CHECK_EQ(ax_wheel_count(&w), 0);
}

/* A fired node can be armed again, in the same or another wheel. */
static void test_readd_after_fire(void)
{
    struct ax_wheel w;
    struct ax_wheel_node n = {0}, *out = NULL;

    ax_wheel_init(&w, 100);
    for (int i = 0; i < 100; i++) {
        uint64_t e = w.now + 1 + (uint64_t)i * 997;
        ax_wheel_add(&w, &n, e);
        out = NULL;
        CHECK_EQ(ax_wheel_advance(&w, e - 1, &out), 0);
        CHECK_EQ(ax_wheel_advance(&w, e, &out), 1);
        CHECK(out == &n);
        CHECK(!ax_wheel_node_armed(&n));
    }
    /* re-add from inside the expiry loop, at the current now: fires next advance */
    ax_wheel_add(&w, &n, w.now);
    out = NULL;
    CHECK_EQ(ax_wheel_advance(&w, w.now, &out), 1);
    CHECK(out == &n);
}

/* expiry <= now: due at the next advance, even one that does not move time,
 * FIFO among themselves, ahead of anything with a later expiry. */
static void test_expiry_not_after_now(void)
{
    struct ax_wheel w;
    struct ax_wheel_node n[5] = {{0}}, *out = NULL;

    ax_wheel_init(&w, 1000);
    ax_wheel_add(&w, &n[0], 1001); /* genuinely later */
    ax_wheel_add(&w, &n[1], 5);
    ax_wheel_add(&w, &n[2], 1000);
    ax_wheel_add(&w, &n[3], 0);
    ax_wheel_add(&w, &n[4], 999);
    CHECK_EQ(n[1].expiry, 1000); /* clamped */
    CHECK_EQ(n[3].expiry, 1000);
    CHECK_EQ(ax_wheel_next(&w), 1000);
    CHECK_EQ(ax_wheel_advance(&w, 1000, &out), 4);
    CHECK(out == &n[1]);
    CHECK(out->next == &n[2]);
    CHECK(out->next->next == &n[3]);
    CHECK(out->next->next->next == &n[4]);
    CHECK(out->next->next->next->next == NULL);
    CHECK_EQ(ax_wheel_next(&w), 1001);

    /* a backwards advance delivers what is due, keeps the clock */
    ax_wheel_add(&w, &n[1], 1);
    out = NULL;
    CHECK_EQ(ax_wheel_advance(&w, 10, &out), 1);
    CHECK(out == &n[1]);
    CHECK_EQ(w.now, 1000);

    /* the output list is appended to, not overwritten */
    struct ax_wheel_node head = {0};
    out = &head;
    CHECK_EQ(ax_wheel_advance(&w, 2000, &out), 1);
    CHECK(out == &head && head.next == &n[0] && n[0].next == NULL);
}

/* Huge jumps over few timers visit few slots, and still fire in order. */
static void test_huge_jumps(void)
{
    static const uint64_t offs[] = {1,
                                    3600000ull,                /* 1 h */
                                    86400000ull,               /* 1 day */
                                    365ull * 86400000ull,      /* 1 year */
                                    10ull * 365 * 86400000ull, /* 10 years */
                                    (uint64_t)1 << 50,
                                    (uint64_t)1 << 62};
    enum { K = sizeof offs / sizeof offs[0] };
    struct ax_wheel w;
    struct ax_wheel_node n[K] = {{0}}, *out = NULL;

    ax_wheel_init(&w, 42);
    for (int i = K - 1; i >= 0; i--)
        ax_wheel_add(&w, &n[i], 42 + offs[i]);
    uint64_t v = w.visits;
    CHECK_EQ(ax_wheel_advance(&w, UINT64_MAX - 1, &out), K);
    /* each node: at most one visit per level plus its overflow re-files */
    CHECK_LE(w.visits - v, K * (AX_WHEEL_LEVELS + 2));
    for (int i = 0; i < K; i++, out = out->next)
        CHECK(out == &n[i]);
    CHECK(out == NULL);

    /* an hour of empty time: no slot visited at all */
    v = w.visits;
    CHECK_EQ(ax_wheel_advance(&w, UINT64_MAX, &out), 0);
    CHECK_EQ(w.visits, v);
    ax_wheel_init(&w, 0);
    CHECK_EQ(ax_wheel_advance(&w, 3600000, &out), 0);
    CHECK_EQ(w.visits, 0);

    /* a jump of hours with one timer per hour: bounded visits */
    struct ax_wheel_node h[24] = {{0}};
    for (int i = 0; i < 24; i++)
        ax_wheel_add(&w, &h[i], 3600000ull * (uint64_t)(i + 2));
    v = w.visits;
    out = NULL;
    CHECK_EQ(ax_wheel_advance(&w, 3600000ull * 30, &out), 24);
    CHECK_LE(w.visits - v, 24 * AX_WHEEL_LEVELS);
    for (int i = 0; i < 24; i++, out = out->next)
        CHECK(out == &h[i]);
}

/* One million timers: insert, cancel a third, expire the rest; exact counts. */
static void test_million(void)
{
    enum { N = 1000000 };
    struct tnode *t = calloc(N, sizeof *t);
    struct ax_wheel w;
    size_t fired = 0, expect = 0;
    uint64_t last = 0;

    CHECK(t != NULL);
    ax_wheel_init(&w, 7);
    for (size_t i = 0; i < N; i++) {
        t[i].due = 7 + rnd() % (4ull * 3600 * 1000); /* within 4 h */
        ax_wheel_add(&w, &t[i].wn, t[i].due);
    }
    CHECK_EQ(ax_wheel_count(&w), N);
    for (size_t i = 0; i < N; i += 3) {
        ax_wheel_del(&w, &t[i].wn);
        t[i].cancelled = true;
    }
    for (size_t i = 0; i < N; i++)
        expect += !t[i].cancelled;
    CHECK_EQ(expect, N - (N + 2) / 3);
    CHECK_EQ(ax_wheel_count(&w), expect);

    while (ax_wheel_count(&w)) {
        struct ax_wheel_node *out = NULL;
        uint64_t to = w.now + 1 + rnd() % 20000;
        size_t k = ax_wheel_advance(&w, to, &out), seen = 0;
        for (; out; out = out->next, seen++) {
            struct tnode *x = (struct tnode *)out;
            CHECK(!x->cancelled);
            CHECK(x->fired == 0);
            CHECK(x->due <= to);
            CHECK(x->due >= last);
            CHECK(!ax_wheel_node_armed(out));
            last = x->due;
            x->fired = 1;
        }
        CHECK_EQ(seen, k);
        fired += k;
        CHECK_EQ(ax_wheel_count(&w), expect - fired);
    }
    CHECK_EQ(fired, expect);
    for (size_t i = 0; i < N; i++)
        CHECK_EQ(t[i].fired, !t[i].cancelled);
    CHECK(ax_wheel_next(&w) == UINT64_MAX);
    free(t);
}

int main(void)
{
    test_expiry_not_after_now();
    test_readd_after_fire();
    test_cancel_in_slot();
    test_cancel_after_cascade();
    test_level_boundaries();
    test_huge_jumps();
    test_random_ordering(0);
    test_random_ordering(((uint64_t)1 << 36) - 20000); /* crosses the top window */
    test_random_ordering(rnd() >> 8);
    test_million();
    printf("test_wheel: ok\n");
    return 0;
}
