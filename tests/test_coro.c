/* test_coro.c - the coroutine switch (src/coro/coro.h).
 *
 * Exact orders of ping-pong and round-robin runs, callee-saved registers
 * (checked from assembly), FP control state, SSE math and 16-byte stack
 * alignment on coroutine stacks, deep recursion, clean unwinding at the
 * stack top, and stack reuse after a final switch. The whole suite runs once
 * on the main thread, then on two threads at once (each with its own
 * coroutines) so TSan builds see real concurrency. */
#define _GNU_SOURCE
#include "check.h"
#include "coro/coro.h"

#include <execinfo.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* Sanitizers and -O0 need roomy frames. */
#define STACK_SIZE (256 * 1024)

static void *stack_alloc(size_t size)
{
    void *p = NULL;
    CHECK(posix_memalign(&p, 64, size) == 0);
    memset(p, 0, size);
    return p;
}

/* ---- 1. ping-pong main <-> coroutine, exact order ------------------------ */

struct pingpong {
    struct ax_coro main, co;
    int log[64];
    int n;
};

static void pingpong_fn(void *arg)
{
    struct pingpong *pp = arg;
    for (int i = 0; i < 10; i++) {
        pp->log[pp->n++] = 100 + i; /* coroutine's turn */
        ax_coro_switch(&pp->co, &pp->main);
    }
    pp->log[pp->n++] = 999;
    ax_coro_switch_final(&pp->co, &pp->main);
}

static void test_pingpong(void)
{
    struct pingpong pp = {.n = 0};
    void *stack = stack_alloc(STACK_SIZE);
    ax_coro_init_main(&pp.main);
    ax_coro_init(&pp.co, stack, STACK_SIZE, pingpong_fn, &pp);
    CHECK_EQ(pp.n, 0); /* init runs nothing */
    for (int i = 0; i < 10; i++) {
        pp.log[pp.n++] = i;
        ax_coro_switch(&pp.main, &pp.co);
    }
    pp.log[pp.n++] = 50;
    ax_coro_switch(&pp.main, &pp.co); /* last turn: coroutine finishes */
    pp.log[pp.n++] = 51;
    CHECK_EQ(pp.n, 23);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(pp.log[2 * i], i);
        CHECK_EQ(pp.log[2 * i + 1], 100 + i);
    }
    CHECK_EQ(pp.log[20], 50);
    CHECK_EQ(pp.log[21], 999);
    CHECK_EQ(pp.log[22], 51);
    ax_coro_destroy(&pp.co);
    ax_coro_destroy(&pp.main);
    free(stack);
}

/* ---- 2. two coroutines switching to each other directly ------------------ */

struct duo {
    struct ax_coro main, a, b;
    long seq[2 * 1000 + 2];
    int n;
};

static void duo_a(void *arg)
{
    struct duo *d = arg;
    for (long i = 0; i < 1000; i++) {
        d->seq[d->n++] = 2 * i;
        ax_coro_switch(&d->a, &d->b);
    }
    d->seq[d->n++] = -1;
    ax_coro_switch_final(&d->a, &d->b); /* final switch to a non-main coroutine */
}

static void duo_b(void *arg)
{
    struct duo *d = arg;
    for (long i = 0; i < 1000; i++) {
        d->seq[d->n++] = 2 * i + 1;
        /* Every other turn the peer switch (left by ret): a coroutine
         * parked by either kind resumes through the other. */
        if (i % 2)
            ax_coro_switch_peer(&d->b, &d->a);
        else
            ax_coro_switch(&d->b, &d->a);
    }
    d->seq[d->n++] = -2;
    ax_coro_switch_final(&d->b, &d->main);
}

static void test_duo(void)
{
    struct duo *d = calloc(1, sizeof *d);
    void *sa = stack_alloc(STACK_SIZE), *sb = stack_alloc(STACK_SIZE);
    ax_coro_init_main(&d->main);
    ax_coro_init(&d->a, sa, STACK_SIZE, duo_a, d);
    ax_coro_init(&d->b, sb, STACK_SIZE, duo_b, d);
    ax_coro_switch(&d->main, &d->a);
    CHECK_EQ(d->n, 2002);
    for (long i = 0; i < 2000; i++)
        CHECK_EQ(d->seq[i], i);
    CHECK_EQ(d->seq[2000], -1);
    CHECK_EQ(d->seq[2001], -2);
    ax_coro_destroy(&d->a);
    ax_coro_destroy(&d->b);
    free(sa);
    free(sb);
    free(d);
}

/* ---- 3. many coroutines, round robin ------------------------------------- */

#define MANY 500
#define STEPS 20

struct many {
    struct ax_coro main;
    struct ax_coro co[MANY];
    int *order; /* order[k] = id of the coroutine that ran step k */
    int n;
    int cur;
};

static void many_fn(void *arg)
{
    struct many *m = arg;
    int id = m->cur;
    for (int s = 0; s < STEPS; s++) {
        m->order[m->n++] = id;
        ax_coro_switch(&m->co[id], &m->main);
    }
    m->order[m->n++] = 1000 + id;
    ax_coro_switch_final(&m->co[id], &m->main);
}

static void test_many(void)
{
    struct many *m = calloc(1, sizeof *m);
    m->order = calloc(MANY * (STEPS + 1), sizeof *m->order);
    size_t ssz = 64 * 1024;
    char *stacks = stack_alloc(MANY * ssz);
    ax_coro_init_main(&m->main);
    for (int i = 0; i < MANY; i++)
        ax_coro_init(&m->co[i], stacks + (size_t)i * ssz, ssz, many_fn, m);
    for (int round = 0; round <= STEPS; round++)
        for (int i = 0; i < MANY; i++) {
            m->cur = i;
            ax_coro_switch(&m->main, &m->co[i]);
        }
    CHECK_EQ(m->n, MANY * (STEPS + 1));
    for (int round = 0; round <= STEPS; round++)
        for (int i = 0; i < MANY; i++)
            CHECK_EQ(m->order[round * MANY + i], round < STEPS ? i : 1000 + i);
    for (int i = 0; i < MANY; i++)
        ax_coro_destroy(&m->co[i]);
    free(stacks);
    free(m->order);
    free(m);
}

/* ---- 4. callee-saved registers, checked from assembly -------------------- */

typedef void switch_fn(struct ax_coro *from, struct ax_coro *to);
/* regs_switch(from, to, seed, out, fp, sw): loads every callee-saved
 * register with seed-derived values (the frame pointer with fp, a valid
 * zeroed frame record so sanitizer unwinders stay sane), calls sw(from, to)
 * (ax_coro_switch or ax_coro_switch_peer), and when resumed stores what
 * those registers hold into out[]. Both sides use different seeds: a
 * register the switch fails to restore shows the other side's value. */
void regs_switch(struct ax_coro *from, struct ax_coro *to, uint64_t seed, uint64_t *out, void *fp,
                 switch_fn *sw);

#if defined(__x86_64__)
#define NREGS 6 /* rbx rbp r12 r13 r14 r15 */
__asm__(".text\n"
        ".globl regs_switch\n"
        ".type regs_switch, @function\n"
        "regs_switch:\n"
        "  pushq %rbp\n pushq %rbx\n pushq %r12\n pushq %r13\n pushq %r14\n pushq %r15\n"
        "  pushq %rcx\n" /* out; rsp is now 16-byte aligned for the call */
        "  movq %rdx, %rbx\n"
        "  movq %r8, %rbp\n"
        "  leaq 2(%rdx), %r12\n leaq 3(%rdx), %r13\n leaq 4(%rdx), %r14\n leaq 5(%rdx), %r15\n"
        "  call *%r9\n"
        "  popq %rcx\n"
        "  movq %rbx, 0(%rcx)\n movq %rbp, 8(%rcx)\n movq %r12, 16(%rcx)\n"
        "  movq %r13, 24(%rcx)\n movq %r14, 32(%rcx)\n movq %r15, 40(%rcx)\n"
        "  popq %r15\n popq %r14\n popq %r13\n popq %r12\n popq %rbx\n popq %rbp\n"
        "  ret\n"
        ".size regs_switch, .-regs_switch\n");

static void regs_expect(uint64_t seed, void *fp, uint64_t *exp)
{
    exp[0] = seed;
    exp[1] = (uint64_t)(uintptr_t)fp;
    for (int i = 2; i < 6; i++)
        exp[i] = seed + (uint64_t)i;
}
#elif defined(__aarch64__)
#define NREGS 19 /* x19..x28, x29, d8..d15 */
__asm__(".text\n"
        ".globl regs_switch\n"
        ".type regs_switch, %function\n"
        "regs_switch:\n"
        "  stp x29, x30, [sp, #-176]!\n"
        "  stp x19, x20, [sp, #16]\n stp x21, x22, [sp, #32]\n stp x23, x24, [sp, #48]\n"
        "  stp x25, x26, [sp, #64]\n stp x27, x28, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n stp d14, d15, [sp, #144]\n"
        "  str x3, [sp, #160]\n"
        "  mov x19, x2\n add x20, x2, #1\n add x21, x2, #2\n add x22, x2, #3\n"
        "  add x23, x2, #4\n add x24, x2, #5\n add x25, x2, #6\n add x26, x2, #7\n"
        "  add x27, x2, #8\n add x28, x2, #9\n"
        "  add x9, x2, #10\n fmov d8, x9\n add x9, x2, #11\n fmov d9, x9\n"
        "  add x9, x2, #12\n fmov d10, x9\n add x9, x2, #13\n fmov d11, x9\n"
        "  add x9, x2, #14\n fmov d12, x9\n add x9, x2, #15\n fmov d13, x9\n"
        "  add x9, x2, #16\n fmov d14, x9\n add x9, x2, #17\n fmov d15, x9\n"
        "  mov x29, x4\n"
        "  blr x5\n"
        "  ldr x3, [sp, #160]\n"
        "  stp x19, x20, [x3, #0]\n stp x21, x22, [x3, #16]\n stp x23, x24, [x3, #32]\n"
        "  stp x25, x26, [x3, #48]\n stp x27, x28, [x3, #64]\n str x29, [x3, #80]\n"
        "  fmov x9, d8\n str x9, [x3, #88]\n fmov x9, d9\n str x9, [x3, #96]\n"
        "  fmov x9, d10\n str x9, [x3, #104]\n fmov x9, d11\n str x9, [x3, #112]\n"
        "  fmov x9, d12\n str x9, [x3, #120]\n fmov x9, d13\n str x9, [x3, #128]\n"
        "  fmov x9, d14\n str x9, [x3, #136]\n fmov x9, d15\n str x9, [x3, #144]\n"
        "  ldp x19, x20, [sp, #16]\n ldp x21, x22, [sp, #32]\n ldp x23, x24, [sp, #48]\n"
        "  ldp x25, x26, [sp, #64]\n ldp x27, x28, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n ldp d14, d15, [sp, #144]\n"
        "  ldp x29, x30, [sp], #176\n"
        "  ret\n"
        ".size regs_switch, .-regs_switch\n");

static void regs_expect(uint64_t seed, void *fp, uint64_t *exp)
{
    for (int i = 0; i < 10; i++)
        exp[i] = seed + (uint64_t)i;
    exp[10] = (uint64_t)(uintptr_t)fp;
    for (int i = 0; i < 8; i++)
        exp[11 + i] = seed + 10 + (uint64_t)i;
}
#endif

#if defined(NREGS)
struct regs {
    struct ax_coro main, co;
    uint64_t out[NREGS];
    int rounds;
};

/* Zeroed frame records ({prev fp, return address}): end of fp chains. */
static _Thread_local uint64_t fake_frame_main[2], fake_frame_co[2];

static void regs_fn(void *arg)
{
    struct regs *r = arg;
    uint64_t out[NREGS], exp[NREGS];
    for (int i = 0; i < 100; i++) {
        uint64_t seed = 0xC0C0000000000000ull + ((uint64_t)i << 8);
        regs_switch(&r->co, &r->main, seed, out, fake_frame_co,
                    i % 3 ? ax_coro_switch : ax_coro_switch_peer);
        regs_expect(seed, fake_frame_co, exp);
        for (int k = 0; k < NREGS; k++)
            CHECK_EQ(out[k], exp[k]);
        r->rounds++;
    }
    ax_coro_switch_final(&r->co, &r->main);
}

static void test_callee_saved(void)
{
    struct regs r = {.rounds = 0};
    void *stack = stack_alloc(STACK_SIZE);
    uint64_t exp[NREGS];
    ax_coro_init_main(&r.main);
    ax_coro_init(&r.co, stack, STACK_SIZE, regs_fn, &r);
    for (int i = 0; i <= 100; i++) {
        uint64_t seed = 0x3A3A000000000000ull + ((uint64_t)i << 8);
        /* Both kinds of switch on each side, in every combination. */
        regs_switch(&r.main, &r.co, seed, r.out, fake_frame_main,
                    i % 2 ? ax_coro_switch : ax_coro_switch_peer);
        regs_expect(seed, fake_frame_main, exp);
        for (int k = 0; k < NREGS; k++)
            CHECK_EQ(r.out[k], exp[k]);
        CHECK_EQ(r.rounds, i); /* the coroutine checked its own side too */
    }
    ax_coro_destroy(&r.co);
    free(stack);
}
#else
static void test_callee_saved(void)
{
    printf("test_coro: no register test for this architecture\n");
}
#endif

/* ---- 5. FP control state and SSE on coroutine stacks ---------------------- */

#if defined(__x86_64__)
static unsigned get_mxcsr(void)
{
    unsigned v;
    __asm__ volatile("stmxcsr %0" : "=m"(v));
    return v;
}
static void set_mxcsr(unsigned v)
{
    __asm__ volatile("ldmxcsr %0" : : "m"(v));
}
static unsigned short get_fpucw(void)
{
    unsigned short v;
    __asm__ volatile("fnstcw %0" : "=m"(v));
    return v;
}
static void set_fpucw(unsigned short v)
{
    __asm__ volatile("fldcw %0" : : "m"(v));
}
#define MXCSR_RC_MASK 0x6000u
#define MXCSR_RC_UP 0x4000u
#define MXCSR_RC_ZERO 0x6000u
#define FPUCW_RC_MASK 0x0C00u
#define FPUCW_RC_DOWN 0x0400u

struct fpstate {
    struct ax_coro main, co;
    unsigned creator_mxcsr;
    double third_co;
    int ok;
};

static double div3(double x)
{
    volatile double a = x, b = 3.0;
    return a / b;
}

static void fp_fn(void *arg)
{
    struct fpstate *f = arg;
    /* A new coroutine starts with its creator's FP control state. */
    CHECK_EQ(get_mxcsr() & MXCSR_RC_MASK, f->creator_mxcsr & MXCSR_RC_MASK);
    set_mxcsr((get_mxcsr() & ~MXCSR_RC_MASK) | MXCSR_RC_ZERO);
    set_fpucw((unsigned short)((get_fpucw() & ~FPUCW_RC_MASK) | FPUCW_RC_DOWN));
    for (int i = 0; i < 50; i++) {
        f->third_co = div3(1.0);
        if (i % 3) /* both kinds of switch save and restore the FP controls */
            ax_coro_switch(&f->co, &f->main);
        else
            ax_coro_switch_peer(&f->co, &f->main);
        CHECK_EQ(get_mxcsr() & MXCSR_RC_MASK, MXCSR_RC_ZERO);
        CHECK_EQ(get_fpucw() & FPUCW_RC_MASK, FPUCW_RC_DOWN);
    }
    f->ok = 1;
    ax_coro_switch_final(&f->co, &f->main);
}

static void test_fp_control(void)
{
    struct fpstate f = {.ok = 0};
    void *stack = stack_alloc(STACK_SIZE);
    unsigned mx0 = get_mxcsr();
    unsigned short cw0 = get_fpucw();
    set_mxcsr((mx0 & ~MXCSR_RC_MASK) | MXCSR_RC_UP);
    f.creator_mxcsr = get_mxcsr();
    ax_coro_init_main(&f.main);
    ax_coro_init(&f.co, stack, STACK_SIZE, fp_fn, &f);
    for (int i = 0; i <= 50; i++) {
        if (i % 2)
            ax_coro_switch(&f.main, &f.co);
        else
            ax_coro_switch_peer(&f.main, &f.co);
        CHECK_EQ(get_mxcsr() & MXCSR_RC_MASK, MXCSR_RC_UP);
        CHECK_EQ(get_fpucw() & FPUCW_RC_MASK, cw0 & FPUCW_RC_MASK);
        if (i < 50 && !RUNNING_ON_VALGRIND) { /* valgrind rounds SSE to nearest */
            double up = div3(1.0);            /* rounded up here, toward zero there */
            CHECK(up > f.third_co);
        }
    }
    CHECK(f.ok);
    set_mxcsr(mx0);
    set_fpucw(cw0);
    ax_coro_destroy(&f.co);
    free(stack);
}
#else
static void test_fp_control(void)
{
    /* aarch64: FPCR is not callee-saved by AAPCS64 and not switched. */
}
#endif

struct sse {
    struct ax_coro main, co[2];
    double sums[2];
    char text[2][64];
    int misaligned;
};

static double dot(const double *a, const double *b, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void sse_fn(void *arg)
{
    struct sse *s = (struct sse *)((uintptr_t)arg & ~(uintptr_t)1);
    int id = (int)((uintptr_t)arg & 1);
    /* This frame's address is 16-byte aligned iff our entry was ABI-correct. */
    if ((uintptr_t)__builtin_frame_address(0) & 15) s->misaligned = 1;
    _Alignas(16) double a[64], b[64];
    for (int i = 0; i < 64; i++) {
        a[i] = (i + 1) * (id + 1); /* exact products and sums: any */
        b[i] = 0.5;                /* summation order gives the same */
    }
#if defined(__x86_64__)
    __m128d acc = _mm_setzero_pd();
    for (int i = 0; i < 64; i += 2) {
        acc = _mm_add_pd(acc, _mm_mul_pd(_mm_load_pd(&a[i]), _mm_load_pd(&b[i])));
        if (i % 16 == 0) /* keep SSE values live across switches */
            ax_coro_switch(&s->co[id], &s->main);
    }
    _Alignas(16) double lanes[2];
    _mm_store_pd(lanes, acc);
    double v = lanes[0] + lanes[1];
#else
    double v = 0;
    for (int i = 0; i < 64; i += 16) {
        v += dot(a + i, b + i, 16);
        ax_coro_switch(&s->co[id], &s->main);
    }
#endif
    CHECK(v == dot(a, b, 64));
    s->sums[id] = v;
    snprintf(s->text[id], sizeof s->text[id], "%.3f %g", v, v / 7.0); /* varargs + doubles */
    ax_coro_switch_final(&s->co[id], &s->main);
}

static void test_sse(void)
{
    struct sse *s = calloc(1, sizeof *s);
    CHECK(((uintptr_t)s & 1) == 0);
    void *st[2] = {stack_alloc(STACK_SIZE), stack_alloc(STACK_SIZE)};
    ax_coro_init_main(&s->main);
    /* Odd-sized, unaligned stack for co[1]: init must align the top itself. */
    ax_coro_init(&s->co[0], st[0], STACK_SIZE, sse_fn, s);
    ax_coro_init(&s->co[1], (char *)st[1] + 3, STACK_SIZE - 11, sse_fn, (char *)s + 1);
    for (int r = 0; r < 5; r++)
        for (int id = 0; id < 2; id++)
            ax_coro_switch(&s->main, &s->co[id]);
    CHECK_EQ(s->misaligned, 0);
    CHECK(s->sums[0] == 1040.0);
    CHECK(s->sums[1] == 2080.0);
    CHECK_STR(s->text[0], "1040.000 148.571");
    CHECK_STR(s->text[1], "2080.000 297.143");
    for (int id = 0; id < 2; id++) {
        ax_coro_destroy(&s->co[id]);
        free(st[id]);
    }
    free(s);
}

/* ---- 6. deep recursion and unwinding on a coroutine stack ---------------- */

struct deep {
    struct ax_coro main, co;
    uintptr_t lowest;
    long result;
    int frames;
};

static long recurse(struct deep *d, int depth)
{
    volatile char pad[256];
    pad[0] = (char)depth;
    pad[255] = (char)(depth >> 8);
    /* The frame address, not pad's: ASan's use-after-return mode moves
     * locals to heap "fake stacks", but frames stay on the real stack. */
    uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
    if (frame < d->lowest) d->lowest = frame;
    if (depth == 0) return 0;
    if (depth % 1000 == 0) /* switch away from deep inside */
        ax_coro_switch(&d->co, &d->main);
    return depth + recurse(d, depth - 1) + (pad[0] - (char)depth) + (pad[255] - (char)(depth >> 8));
}

static void deep_fn(void *arg)
{
    struct deep *d = arg;
    void *frames[64];
    d->frames = backtrace(frames, 64); /* must stop at the trampoline */
    d->lowest = UINTPTR_MAX;
    d->result = recurse(d, 5000);
    ax_coro_switch_final(&d->co, &d->main);
}

static void test_deep(void)
{
    size_t size = 8u << 20;
    char *stack = stack_alloc(size);
    struct deep d = {.result = -1};
    ax_coro_init_main(&d.main);
    ax_coro_init(&d.co, stack, size, deep_fn, &d);
    int switches = 0;
    while (d.result < 0) {
        ax_coro_switch(&d.main, &d.co);
        switches++;
    }
    CHECK_EQ(switches, 6); /* 5 parks at depth 5000..1000, then done */
    CHECK_EQ(d.result, 5000L * 5001 / 2);
    uintptr_t used = (uintptr_t)(stack + size) - d.lowest;
    CHECK(used > 5000u * 16); /* it really ran on the coroutine stack... */
    CHECK(used < size);       /* ...and stayed inside it */
    CHECK(d.frames >= 2);
    CHECK_LE(d.frames, 8); /* deep_fn, coro_start, trampoline + tool frames */
    ax_coro_destroy(&d.co);
    free(stack);
}

/* ---- 7. one stack, many lifetimes (as the stack pool will use it) -------- */

struct reuse {
    struct ax_coro main, co;
    long total;
};

static void reuse_fn(void *arg)
{
    struct reuse *r = arg;
    char buf[512];
    memset(buf, (int)(r->total & 0x7f), sizeof buf);
    r->total += buf[511] + 1;
    ax_coro_switch(&r->co, &r->main);
    r->total += 1;
    ax_coro_switch_final(&r->co, &r->main);
}

/* Under TSan each ax_coro_init is a new TSan fiber, which faults in fresh
 * pages (~3 ms each on a VM with dear page faults): 3 000 lifetimes in each
 * of the 7 passes made this test 156 s of CI's TSan stage. */
#if defined(TEST_TSAN)
#define REUSE_LIVES 300
#else
#define REUSE_LIVES 3000
#endif

static void test_reuse(void)
{
    void *stack = stack_alloc(STACK_SIZE);
    struct reuse r = {.total = 0};
    ax_coro_init_main(&r.main);
    long expect = 0;
    for (int i = 0; i < REUSE_LIVES; i++) {
        expect += (expect & 0x7f) + 1 + 1;
        ax_coro_init(&r.co, stack, STACK_SIZE, reuse_fn, &r);
        ax_coro_switch(&r.main, &r.co);
        ax_coro_switch(&r.main, &r.co);
        ax_coro_destroy(&r.co);
        CHECK_EQ(r.total, expect);
    }
    free(stack);
}

/* ---- driver --------------------------------------------------------------- */

static void run_all(void)
{
    test_pingpong();
    test_duo();
    test_many();
    test_callee_saved();
    test_fp_control();
    test_sse();
    test_deep();
    test_reuse();
}

static void *thread_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        run_all();
    return NULL;
}

int main(void)
{
    run_all();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, thread_main, NULL) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    printf("test_coro: ok (backend %s)\n", ax_coro_backend());
    return 0;
}
