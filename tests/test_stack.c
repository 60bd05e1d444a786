/* test_stack.c - the per-thread stack pool (src/coro/stack.h).
 *
 * Config rounding, LIFO reuse of warm stacks, the cached cap (memory really
 * released, checked with mincore), slab freeing, guard pages that really
 * fault (in a forked child, found by ax_stack_owner_of from its SIGSEGV
 * handler), owner lookup, RSS of a parked coroutine, and 100,000 live 64 KiB
 * stacks each running a parked coroutine under the default vm.max_map_count.
 */
#define _GNU_SOURCE
#include "check.h"
#include "coro/coro.h"
#include "coro/stack.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

static size_t page;

/* Resident pages of [lo, lo + len). */
static size_t resident(const void *lo, size_t len)
{
    size_t n = len / page, r = 0;
    unsigned char *vec = malloc(n);
    CHECK(vec);
    CHECK(mincore((void *)lo, len, vec) == 0);
    for (size_t i = 0; i < n; i++)
        r += vec[i] & 1;
    free(vec);
    return r;
}

/* Mappings (lines of /proc/self/maps) that hold stacks of pool p. */
static size_t count_pool_maps(const struct ax_stack_pool *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f);
    size_t n = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
        if (ax_stack_owner_of(p, (void *)lo, NULL) || ax_stack_owner_of(p, (void *)(hi - 1), NULL))
            n++;
    }
    fclose(f);
    return n;
}

static void pool_new(struct ax_stack_pool *p, size_t stack, size_t per_slab, size_t cache,
                     enum ax_stack_guard_mode mode)
{
    struct ax_stack_config c;
    ax_stack_config_default(&c);
    c.stack_size = stack;
    c.stacks_per_slab = per_slab;
    c.cache_max = cache;
    c.guard_mode = mode;
    CHECK_EQ(ax_stack_pool_init(p, &c), 0);
}

/* ---- config -------------------------------------------------------------- */

static void test_config(void)
{
    struct ax_stack_pool p;
    struct ax_stack_config c;
    ax_stack_config_default(&c);
    CHECK_EQ(c.stack_size, 64 * 1024);
    CHECK_EQ(c.cache_max, 64);

    c.stack_size = 1000; /* below the 16 KiB minimum */
    CHECK_EQ(ax_stack_pool_init(&p, &c), 0);
    CHECK_EQ(p.cfg.stack_size, 16 * 1024);
    CHECK_EQ(p.cfg.guard_size, page);
    ax_stack_pool_destroy(&p);

    c.stack_size = 70000; /* rounded up to whole pages */
    c.guard_size = page + 1;
    CHECK_EQ(ax_stack_pool_init(&p, &c), 0);
    CHECK_EQ(p.cfg.stack_size, (70000 + page - 1) / page * page);
    CHECK_EQ(p.cfg.guard_size, 2 * page);
    struct ax_stack *s;
    CHECK_EQ(ax_stack_acquire(&p, &s), 0);
    CHECK_EQ(s->size, p.cfg.stack_size);
    CHECK_EQ((uintptr_t)s->lo % page, 0);
    ax_stack_release(&p, s);
    ax_stack_pool_destroy(&p);

    c.stack_size = SIZE_MAX / 2;
    CHECK_EQ(ax_stack_pool_init(&p, &c), -EINVAL);
    ax_stack_config_default(&c);
    c.guard_mode = (enum ax_stack_guard_mode)42;
    CHECK_EQ(ax_stack_pool_init(&p, &c), -EINVAL);
}

/* ---- LIFO reuse, cap, slab lifecycle ------------------------------------- */

static void test_reuse(void)
{
    struct ax_stack_pool p;
    struct ax_stack_stats st;
    pool_new(&p, 16 * 1024, 8, 4, AX_STACK_GUARD_AUTO);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.slabs, 0); /* nothing mapped before the first acquire */
    CHECK_EQ(st.bytes_mapped, 0);

    struct ax_stack *a, *b, *c, *x;
    CHECK_EQ(ax_stack_acquire(&p, &a), 0);
    CHECK_EQ(ax_stack_acquire(&p, &b), 0);
    CHECK_EQ(ax_stack_acquire(&p, &c), 0);
    CHECK(a != b && b != c && a != c);
    CHECK_EQ(a->state, AX_STACK_IN_USE);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.in_use, 3);
    CHECK_EQ(st.cached, 0);
    CHECK_EQ(st.cold, 5);
    CHECK_EQ(st.slabs, 1);
    CHECK_EQ(st.bytes_mapped, 8 * (16 * 1024 + page));

    /* Warm stacks keep their content: no madvise on the way through. */
    memset(b->lo, 0xB1, b->size);
    memset(c->lo, 0xC1, c->size);
    b->user = &b;
    ax_stack_release(&p, b);
    CHECK(b->user == NULL);
    CHECK_EQ(b->state, AX_STACK_WARM);
    ax_stack_release(&p, c);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.in_use, 1);
    CHECK_EQ(st.cached, 2);
    CHECK_EQ(ax_stack_acquire(&p, &x), 0);
    CHECK(x == c); /* LIFO: last released first */
    CHECK_EQ(((unsigned char *)x->lo)[0], 0xC1);
    CHECK_EQ(ax_stack_acquire(&p, &x), 0);
    CHECK(x == b);
    CHECK_EQ(((unsigned char *)x->lo)[b->size - 1], 0xB1);
    ax_stack_release(&p, b);
    ax_stack_release(&p, c);
    ax_stack_release(&p, a);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.in_use, 0);
    CHECK_EQ(st.cached, 3);
    ax_stack_pool_destroy(&p);
}

static void test_cap(void)
{
    struct ax_stack_pool p;
    struct ax_stack_stats st;
    struct ax_stack *s[32];
    pool_new(&p, 32 * 1024, 8, 4, AX_STACK_GUARD_AUTO);
    for (int i = 0; i < 32; i++) {
        CHECK_EQ(ax_stack_acquire(&p, &s[i]), 0);
        memset(s[i]->lo, 0x5A, s[i]->size); /* all pages resident */
        CHECK_EQ(resident(s[i]->lo, s[i]->size), s[i]->size / page);
    }
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.slabs, 4);
    CHECK_EQ(st.cold, 0);

    /* The first 4 released stay warm and resident; the rest are released
     * to the kernel; whole slabs going cold are unmapped but one spare. */
    for (int i = 0; i < 32; i++)
        ax_stack_release(&p, s[i]);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.in_use, 0);
    CHECK_EQ(st.cached, 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(resident(s[i]->lo, s[i]->size), s[i]->size / page);
    /* s[0..7] share slab 0 (4 warm, 4 cold); slabs 1..3 emptied: 1 kept. */
    CHECK_EQ(st.slabs, 2);
    CHECK_EQ(st.cold, 4 + 8);
    for (int i = 4; i < 8; i++) {
        CHECK_EQ(s[i]->state, AX_STACK_COLD);
        CHECK_EQ(resident(s[i]->lo, s[i]->size), 0);
    }

    /* Cold stacks come back zeroed (MADV_DONTNEED), warm ones first. */
    struct ax_stack *x;
    CHECK_EQ(ax_stack_acquire(&p, &x), 0);
    CHECK(x == s[3]);
    CHECK_EQ(((unsigned char *)x->lo)[0], 0x5A);
    ax_stack_release(&p, x);

    ax_stack_pool_trim(&p, 1);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.cached, 1);
    CHECK_EQ(st.slabs, 1); /* slab 0 holds the warm one; the spare went */
    CHECK_EQ(st.cold, 7);
    CHECK_EQ(ax_stack_acquire(&p, &x), 0); /* the warm one */
    CHECK_EQ(((unsigned char *)x->lo)[0], 0x5A);
    struct ax_stack *y;
    CHECK_EQ(ax_stack_acquire(&p, &y), 0); /* a cold one */
    CHECK_EQ(((unsigned char *)y->lo)[0], 0);
    CHECK_EQ(((unsigned char *)y->lo)[y->size - 1], 0);
    ax_stack_release(&p, x);
    ax_stack_release(&p, y);
    ax_stack_pool_trim(&p, 0);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.slabs, 0);
    CHECK_EQ(st.bytes_mapped, 0);
    CHECK_EQ(st.cold, 0);
    CHECK_EQ(st.cached, 0);
    /* And the pool still works after being emptied. */
    CHECK_EQ(ax_stack_acquire(&p, &x), 0);
    ax_stack_release(&p, x);
    ax_stack_pool_destroy(&p);
}

/* Churn at a slab boundary with no cache: the spare slab absorbs it. */
static void test_churn(void)
{
    struct ax_stack_pool p;
    struct ax_stack_stats st;
    struct ax_stack *s[5];
    pool_new(&p, 16 * 1024, 4, 0, AX_STACK_GUARD_AUTO);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(ax_stack_acquire(&p, &s[i]), 0);
    for (int round = 0; round < 100; round++) {
        CHECK_EQ(ax_stack_acquire(&p, &s[4]), 0);
        ax_stack_release(&p, s[4]);
    }
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.slabs, 2);
    CHECK_EQ(st.cached, 0);
    CHECK_EQ(st.cold, 4);
    ax_stack_pool_destroy(&p);
}

/* ---- owner lookup -------------------------------------------------------- */

static void test_owner(void)
{
    struct ax_stack_pool p;
    struct ax_stack *s[20];
    int g = -1;
    pool_new(&p, 16 * 1024, 8, 64, AX_STACK_GUARD_AUTO);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(ax_stack_acquire(&p, &s[i]), 0);
    for (int i = 0; i < 20; i++) {
        char *lo = s[i]->lo, *top = ax_stack_top(s[i]);
        CHECK(ax_stack_owner_of(&p, lo, &g) == s[i]);
        CHECK_EQ(g, 0);
        CHECK(ax_stack_owner_of(&p, top - 1, &g) == s[i]);
        CHECK_EQ(g, 0);
        CHECK(ax_stack_owner_of(&p, lo + 5000, NULL) == s[i]);
        CHECK(ax_stack_owner_of(&p, lo - 1, &g) == s[i]); /* guard is below */
        CHECK_EQ(g, 1);
        CHECK(ax_stack_owner_of(&p, lo - page, &g) == s[i]);
        CHECK_EQ(g, 1);
    }
    int local;
    CHECK(ax_stack_owner_of(&p, &local, &g) == NULL);
    CHECK_EQ(g, 0);
    CHECK(ax_stack_owner_of(&p, &p, NULL) == NULL);
    CHECK(ax_stack_owner_of(&p, NULL, NULL) == NULL);
    for (int i = 0; i < 20; i++)
        ax_stack_release(&p, s[i]);
    ax_stack_pool_destroy(&p);
}

/* ---- guard pages really fault -------------------------------------------- */

static struct ax_stack_pool *g_pool;
static struct ax_stack *g_expect;
static int g_pipe;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int in_guard = 0;
    struct ax_stack *s = ax_stack_owner_of(g_pool, si->si_addr, &in_guard);
    char verdict = s == g_expect && in_guard ? 'G' : s ? 'S' : 'N';
    if (write(g_pipe, &verdict, 1) != 1) _exit(3);
    signal(sig, SIG_DFL); /* returning re-runs the access: die by SIGSEGV */
}

struct overflow {
    struct ax_coro main, co;
};

static volatile long g_depth_limit = 1L << 40; /* never reached */

static long overflow_recurse(long n)
{
    volatile char pad[128];
    pad[0] = (char)n;
    if (n >= g_depth_limit) return 0;
    return overflow_recurse(n + 1) + pad[0];
}

static void overflow_fn(void *arg)
{
    (void)arg;
    overflow_recurse(0);
}

enum fault_how { FAULT_WRITE_BELOW, FAULT_OVERFLOW };

/* Fork a child that faults on stack s; the parent checks the child died of
 * SIGSEGV and that its handler found the fault in s's guard. */
static void expect_guard_fault(struct ax_stack_pool *p, struct ax_stack *s, enum fault_how how)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        g_pool = p;
        g_expect = s;
        g_pipe = fds[1];
        static char altstack[64 * 1024];
        stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
        sigaltstack(&ss, NULL);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &sa, NULL);
        if (how == FAULT_WRITE_BELOW) {
            volatile char *below = (char *)s->lo - 1;
            *below = 1;
        } else {
            struct overflow o;
            ax_coro_init_main(&o.main);
            ax_coro_init(&o.co, s->lo, s->size, overflow_fn, NULL);
            ax_coro_switch(&o.main, &o.co);
        }
        _exit(2); /* the guard did not fault */
    }
    close(fds[1]);
    char verdict = 0;
    ssize_t got = read(fds[0], &verdict, 1);
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFSIGNALED(status))
        fprintf(stderr, "child exit status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ(WTERMSIG(status), SIGSEGV);
    CHECK_EQ(got, 1);
    CHECK_EQ(verdict, 'G');
}

static void test_guard(enum ax_stack_guard_mode mode)
{
    struct ax_stack_pool p;
    struct ax_stack_stats st;
    struct ax_stack *s[3];
    pool_new(&p, 64 * 1024, 4, 0, mode);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.guard_mode, mode);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(ax_stack_acquire(&p, &s[i]), 0);
    expect_guard_fault(&p, s[1], FAULT_WRITE_BELOW);
    expect_guard_fault(&p, s[2], FAULT_OVERFLOW);
    /* A stack that went cold (MADV_DONTNEED) and came back keeps its guard. */
    ax_stack_release(&p, s[1]);
    CHECK_EQ(s[1]->state, AX_STACK_COLD);
    struct ax_stack *again;
    CHECK_EQ(ax_stack_acquire(&p, &again), 0);
    CHECK(again == s[1]);
    expect_guard_fault(&p, again, FAULT_WRITE_BELOW);
    /* The parent's stacks are untouched by the children's faults. */
    memset(s[0]->lo, 1, s[0]->size);
    for (int i = 0; i < 3; i++)
        ax_stack_release(&p, s[i]);
    ax_stack_pool_destroy(&p);
}

/* ---- parked coroutines: RSS and the 100,000 stacks ------------------------ */

struct parked {
    struct ax_coro co;
    struct ax_coro *main;
    long id, seen;
};

static void parked_fn(void *arg)
{
    struct parked *k = arg;
    k->seen = k->id; /* touches only the top of the stack */
    ax_coro_switch(&k->co, k->main);
    k->seen = -k->id;
    ax_coro_switch_final(&k->co, k->main);
}

static void test_parked_rss(void)
{
    struct ax_stack_pool p;
    struct ax_stack *s;
    struct ax_coro main;
    struct parked k = {.main = &main, .id = 7};
    pool_new(&p, 256 * 1024, 0, 64, AX_STACK_GUARD_AUTO);
    CHECK_EQ(ax_stack_acquire(&p, &s), 0);
    CHECK_EQ(resident(s->lo, s->size), 0); /* fresh: nothing committed */
    ax_coro_init_main(&main);
    ax_coro_init(&k.co, s->lo, s->size, parked_fn, &k);
    ax_coro_switch(&main, &k.co);
    CHECK_EQ(k.seen, 7);
    size_t r = resident(s->lo, s->size);
    CHECK(r >= 1);
    CHECK_LE(r, 2); /* a parked coroutine costs about one page */
    ax_coro_switch(&main, &k.co);
    CHECK_EQ(k.seen, -7);
    ax_coro_destroy(&k.co);
    ax_stack_release(&p, s);
    ax_stack_pool_destroy(&p);
}

/* count live stacks; the first n_coro run a coroutine that parks, the rest
 * get their top word written (a stand-in with the same one-page footprint). */
static void test_many_live(size_t count, size_t n_coro)
{
    struct ax_stack_pool p;
    struct ax_stack_stats st;
    pool_new(&p, 64 * 1024, 0, 64, AX_STACK_GUARD_AUTO);
    struct ax_stack **s = calloc(count, sizeof *s);
    struct parked *k = calloc(count, sizeof *k);
    CHECK(s && k);
    struct ax_coro main;
    ax_coro_init_main(&main);
    for (size_t i = 0; i < count; i++) {
        int rc = ax_stack_acquire(&p, &s[i]);
        if (rc != 0) fprintf(stderr, "acquire #%zu failed: %s\n", i, strerror(-rc));
        CHECK_EQ(rc, 0);
        k[i].main = &main;
        k[i].id = (long)i + 1;
        if (i >= n_coro) {
            ((long *)ax_stack_top(s[i]))[-1] = k[i].id;
            continue;
        }
        ax_coro_init(&k[i].co, s[i]->lo, s[i]->size, parked_fn, &k[i]);
        ax_coro_switch(&main, &k[i].co); /* runs, then parks */
        CHECK_EQ(k[i].seen, (long)i + 1);
    }
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.in_use, count);
    size_t per_slab = p.cfg.stacks_per_slab;
    CHECK_EQ(st.slabs, (count + per_slab - 1) / per_slab);
    CHECK_EQ(st.bytes_mapped, st.slabs * p.slab_bytes);
    size_t maps = count_pool_maps(&p);
    printf("test_stack: %zu live 64 KiB stacks (%zu parked coroutines): %zu slabs, %zu MiB mapped, "
           "%zu VMAs, "
           "guard mode %s\n",
           count, n_coro, st.slabs, st.bytes_mapped >> 20, maps,
           st.guard_mode == AX_STACK_GUARD_MADVISE ? "madvise" : "mprotect");
    if (st.guard_mode == AX_STACK_GUARD_MADVISE)
        CHECK_LE(maps, st.slabs); /* guards split nothing (slabs may merge) */
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        size_t r = resident(s[i]->lo, s[i]->size);
        CHECK_LE(r, 2);
        total += r;
    }
    CHECK_LE(total, 2 * count);
    for (size_t i = 0; i < count; i++) {
        if (i < n_coro) {
            ax_coro_switch(&main, &k[i].co); /* finishes */
            CHECK_EQ(k[i].seen, -(long)i - 1);
            ax_coro_destroy(&k[i].co);
        } else {
            CHECK_EQ(((long *)ax_stack_top(s[i]))[-1], k[i].id);
        }
        ax_stack_release(&p, s[i]);
    }
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.in_use, 0);
    CHECK_EQ(st.cached, 64);
    CHECK_EQ(st.slabs, 2); /* the slab holding the warm ones + one spare */
    ax_stack_pool_trim(&p, 0);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.slabs, 0);
    ax_stack_pool_destroy(&p);
    free(s);
    free(k);
}

/* The fallback works too (within its mapping budget). */
static void test_mprotect_mode(void)
{
    struct ax_stack_pool p;
    struct ax_stack *s[300];
    pool_new(&p, 16 * 1024, 100, 0, AX_STACK_GUARD_MPROTECT);
    for (int i = 0; i < 300; i++) {
        CHECK_EQ(ax_stack_acquire(&p, &s[i]), 0);
        memset(s[i]->lo, i, s[i]->size);
    }
    CHECK_EQ(count_pool_maps(&p), 2 * 300); /* each guard splits its slab */
    for (int i = 0; i < 300; i++)
        ax_stack_release(&p, s[i]);
    ax_stack_pool_destroy(&p);
}

/* A stack's guard goes in when it is first handed out (with the guard of
 * the slot above it), not for the whole slab when the slab is mapped (a new
 * slab's guards in a row stalled the worker that needed one stack:
 * stack.c guards_for). mprotect guards show in /proc/self/maps: each one
 * splits the slab's mapping. */
static void test_guard_lazy(void)
{
    struct ax_stack_pool p;
    struct ax_stack_stats st;
    struct ax_stack *s[4];
    pool_new(&p, 16 * 1024, 100, 0, AX_STACK_GUARD_MPROTECT);
    CHECK_EQ(ax_stack_acquire(&p, &s[0]), 0);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.guards, 2); /* s[0]'s and the one above it; not 100 */
    CHECK_EQ(count_pool_maps(&p), 4); /* guard, s[0], guard, the rest */
    CHECK(s[0]->guarded);
    CHECK_EQ(ax_stack_acquire(&p, &s[1]), 0);
    CHECK(s[1]->guarded);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.guards, 3);
    CHECK_EQ(count_pool_maps(&p), 6);
    /* Back cold and out again: no guard put in twice. */
    ax_stack_release(&p, s[1]);
    CHECK_EQ(s[1]->state, AX_STACK_COLD);
    CHECK_EQ(ax_stack_acquire(&p, &s[2]), 0);
    CHECK(s[2] == s[1]);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.guards, 3);
    CHECK_EQ(count_pool_maps(&p), 6);
    ax_stack_release(&p, s[0]);
    ax_stack_release(&p, s[2]);
    ax_stack_pool_destroy(&p);
}

/* A guard that cannot be put in: the acquire fails with -ENOMEM, takes no
 * stack and leaves *out alone; once it can, the same stack is handed out
 * with its guard. Made to fail by unmapping the guard's pages (mprotect
 * and MADV_GUARD_INSTALL both refuse an unmapped range). */
static void test_guard_fails(enum ax_stack_guard_mode mode)
{
    struct ax_stack_pool p;
    struct ax_stack_stats st, st2;
    struct ax_stack *s0, *s1, *out;
    size_t stack = 16 * 1024;
    pool_new(&p, stack, 4, 0, mode);
    size_t slot = p.slot_size, guard = p.cfg.guard_size;
    CHECK_EQ(ax_stack_acquire(&p, &s0), 0); /* slots 0 and 1 guarded */
    char *g2 = (char *)s0->lo - guard + 2 * slot; /* slot 2's guard */
    CHECK(munmap(g2, guard) == 0);
    /* s1's own guard is in; the one above it (slot 2's) fails, quietly. */
    CHECK_EQ(ax_stack_acquire(&p, &s1), 0);
    ax_stack_pool_stats(&p, &st);
    CHECK_EQ(st.guards, 2);
    CHECK_EQ(st.in_use, 2);
    out = (struct ax_stack *)&out;
    CHECK_EQ(ax_stack_acquire(&p, &out), -ENOMEM);
    CHECK(out == (struct ax_stack *)&out);
    ax_stack_pool_stats(&p, &st2);
    CHECK_EQ(st2.in_use, 2);
    CHECK_EQ(st2.cold, st.cold);
    CHECK_EQ(st2.guards, 2);
    CHECK(mmap(g2, guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
               0) == g2);
    CHECK_EQ(ax_stack_acquire(&p, &out), 0);
    CHECK((char *)out->lo == g2 + guard);
    CHECK(out->guarded);
    ax_stack_pool_stats(&p, &st2);
    CHECK_EQ(st2.guards, 4); /* slot 2's, and slot 3's above it */
    ax_stack_release(&p, out);
    ax_stack_release(&p, s1);
    ax_stack_release(&p, s0);
    ax_stack_pool_destroy(&p);
}

/* ---- two threads, each with its own pool and coroutines ------------------- */

/* Under TSan every parked coroutine is a TSan fiber, whose creation faults
 * in fresh pages (~3 ms each on a VM with dear page faults: 7 000 of them
 * made this test 127 s of CI's TSan stage): fewer there, the stacks as many. */
#if defined(TEST_TSAN)
#define MANY_LIVE_CORO_THREAD 300
#else
#define MANY_LIVE_CORO_THREAD 2000
#endif

static void *thread_main(void *arg)
{
    (void)arg;
    test_reuse();
    test_cap();
    test_owner();
    test_parked_rss();
    test_many_live(2000, MANY_LIVE_CORO_THREAD);
    return NULL;
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    printf("test_stack: MADV_GUARD_INSTALL %s\n",
           ax_stack_guard_madvise_supported() ? "supported" : "not supported: mprotect guards");
    /* Forking tests first, while the process has one thread. */
    test_guard(AX_STACK_GUARD_MPROTECT);
    if (ax_stack_guard_madvise_supported()) test_guard(AX_STACK_GUARD_MADVISE);
    test_config();
    test_reuse();
    test_cap();
    test_churn();
    test_owner();
    test_parked_rss();
    test_mprotect_mode();
    test_guard_lazy();
    test_guard_fails(AX_STACK_GUARD_MPROTECT);
    if (ax_stack_guard_madvise_supported()) test_guard_fails(AX_STACK_GUARD_MADVISE);
    /* 100,000 live stacks fit only with MADV_GUARD_INSTALL under the default
     * vm.max_map_count (65530): mprotect guards cost 2 mappings a stack. */
    size_t live = ax_stack_guard_madvise_supported() ? 100000 : 20000;
    /* All of them run a parked coroutine, except under tools that cannot
     * afford it: valgrind walks its list of registered stacks on every stack
     * switch (quadratic: 100k coroutines take minutes); TSan caps live
     * fibers and pays ~3 ms for each (MANY_LIVE_CORO_THREAD). */
#if defined(TEST_TSAN)
    test_many_live(live, 1000);
#else
    test_many_live(live, RUNNING_ON_VALGRIND ? 5000 : live);
#endif

    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, thread_main, NULL) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    printf("test_stack: ok\n");
    return 0;
}
