/* coro.c - portable half of the coroutine switch: building a new
 * coroutine's first frame, the sanitizer/valgrind hooks around a switch, and
 * the ucontext fallback. The register save/restore itself lives in
 * switch_<arch>.S (see coro.h for what each saves).
 *
 * First frame (asm backends). ax_coro_init writes, at the top of the new
 * stack, exactly what ax_coro__jump pops when it resumes a parked coroutine,
 * so the first switch-in is an ordinary switch that "returns" into
 * ax_coro__trampoline with:
 *   x86_64 : rbx = the coroutine, r12 = coro_start, rbp = 0, and rsp 16-byte
 *            aligned so the trampoline's call gives coro_start the stack the
 *            SysV ABI promises at a function entry (rsp + 8 aligned);
 *            MXCSR and x87 control word copied from the creating thread.
 *   aarch64: x19 = the coroutine, x20 = coro_start, x29 = 0, sp aligned.
 * The trampoline marks the return-address column undefined in its CFI and
 * clears the frame pointer, so backtrace(), gdb and perf stop there instead
 * of walking into whatever lies above the stack top.
 *
 * Sanitizer protocol (ASan): before a switch, start_switch_fiber(&save, ...)
 * is told the bounds of the target stack; after it, the resumed side calls
 * finish_switch_fiber(save, ...) which also reports the stack we came from.
 * Main coroutines have no known bounds until then: the first coroutine they
 * switch to learns them through to->prev. */
#define _GNU_SOURCE /* ucontext on strict -std=c11 */
#include "coro.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AX_CORO_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define AX_CORO_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(AX_CORO_ASAN)
#define AX_CORO_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(AX_CORO_TSAN)
#define AX_CORO_TSAN 1
#endif
#if defined(AX_CORO_ASAN) || defined(AX_CORO_TSAN)
#define AX_CORO_SAN 1
#endif

#if defined(AX_CORO_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(AX_CORO_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define AX_CORO_VALGRIND 1
#endif
#endif

#if !AX_CORO_UCONTEXT
/* switch_<arch>.S */
__attribute__((visibility("hidden"))) void ax_coro__jump(struct ax_coro *from, struct ax_coro *to);
#if defined(__x86_64__)
__attribute__((visibility("hidden"))) void ax_coro__jump_ret(struct ax_coro *from,
                                                             struct ax_coro *to);
#else
#define ax_coro__jump_ret ax_coro__jump /* aarch64's switch leaves by ret already */
#endif
__attribute__((visibility("hidden"))) void ax_coro__trampoline(void);
#endif

#if !AX_CORO_UCONTEXT
_Static_assert(offsetof(struct ax_coro, sp) == 0, "the asm expects ax_coro.sp first");
#endif

/* ---- tool hooks (empty in plain builds) ---------------------------------- */

/* The hooks are forced inline: TSan's __tsan_switch_to_fiber changes the
 * shadow call stack in use, so no instrumented function may return between
 * it and the switch itself (an out-of-line helper would pop its exit from
 * the target fiber's shadow stack, corrupting it at -O0). */
#define AX_CORO_INLINE static inline __attribute__((always_inline))

#if defined(AX_CORO_SAN)
AX_CORO_INLINE void before_switch(struct ax_coro *from, struct ax_coro *to, void **fake_save)
{
    to->prev = from;
#if defined(AX_CORO_ASAN)
    if (to->flags & AX_CORO__MAIN)
        __sanitizer_start_switch_fiber(fake_save, to->main_lo, to->main_size);
    else
        __sanitizer_start_switch_fiber(fake_save, to->stack_lo, to->stack_size);
#else
    (void)fake_save;
#endif
#if defined(AX_CORO_TSAN)
    __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
}

/* Runs on self's stack right after it was switched to. */
AX_CORO_INLINE void after_switch(struct ax_coro *self)
{
    struct ax_coro *prev = self->prev;
#if defined(AX_CORO_ASAN)
    const void *lo = NULL;
    size_t size = 0;
    __sanitizer_finish_switch_fiber(self->asan_fake, &lo, &size);
    self->asan_fake = NULL;
    if (prev && (prev->flags & AX_CORO__MAIN) && !prev->main_lo) {
        prev->main_lo = lo;
        prev->main_size = size;
    }
#endif
#if defined(AX_CORO_TSAN)
    /* A fiber cannot destroy itself; the dying one is destroyed here. */
    if (prev && (prev->flags & AX_CORO__DYING) && prev->tsan_fiber) {
        __tsan_destroy_fiber(prev->tsan_fiber);
        prev->tsan_fiber = NULL;
    }
#endif
    (void)prev;
}
#endif

/* Clear ASan stack poison left on [lo, lo + size) by frames that never
 * returned, so the next coroutine on this memory starts clean. */
static void unpoison(const void *lo, size_t size)
{
#if defined(AX_CORO_ASAN)
    if (lo && size) __asan_unpoison_memory_region(lo, size);
#else
    (void)lo;
    (void)size;
#endif
}

static void coro_start(struct ax_coro *self)
{
#if defined(AX_CORO_SAN)
    after_switch(self);
#endif
    self->fn(self->arg);
    fprintf(stderr,
            "ax_coro: coroutine function %p returned; it must end with "
            "ax_coro_switch_final\n",
            (void *)(uintptr_t)self->fn);
    abort();
}

static void common_init(struct ax_coro *c, void *stack_lo, size_t stack_size, void (*fn)(void *),
                        void *arg)
{
    memset(c, 0, sizeof *c);
    c->stack_lo = stack_lo;
    c->stack_size = stack_size;
    c->fn = fn;
    c->arg = arg;
#if defined(AX_CORO_TSAN)
    c->tsan_fiber = __tsan_create_fiber(0);
#endif
#if defined(AX_CORO_VALGRIND)
    c->vg_id = VALGRIND_STACK_REGISTER(stack_lo, (char *)stack_lo + stack_size);
#endif
}

void ax_coro_init_main(struct ax_coro *c)
{
    memset(c, 0, sizeof *c);
    c->flags = AX_CORO__MAIN;
#if defined(AX_CORO_TSAN)
    c->tsan_fiber = __tsan_get_current_fiber();
#endif
}

void ax_coro_destroy(struct ax_coro *c)
{
    if (c->flags & AX_CORO__MAIN) return;
#if defined(AX_CORO_TSAN)
    if (c->tsan_fiber) {
        __tsan_destroy_fiber(c->tsan_fiber);
        c->tsan_fiber = NULL;
    }
#endif
#if defined(AX_CORO_VALGRIND)
    if (c->vg_id) {
        VALGRIND_STACK_DEREGISTER(c->vg_id);
        c->vg_id = 0;
    }
#endif
    unpoison(c->stack_lo, c->stack_size);
}

/* ---- floating-point control state -------------------------------------- */

#if defined(__x86_64__)
#define MXCSR_CONTROL 0xffc0u /* DAZ, exception masks, rounding, FZ: not the sticky flags */
unsigned long long ax_coro_fpenv_get(void)
{
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    return (unsigned long long)(mxcsr & MXCSR_CONTROL) | (unsigned long long)fpucw << 32;
}

void ax_coro_fpenv_reset(unsigned long long env)
{
    uint32_t mxcsr;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    uint16_t fpucw;
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    if ((mxcsr & MXCSR_CONTROL) == (uint32_t)(env & 0xffffffffu) && fpucw == (uint16_t)(env >> 32))
        return;
    mxcsr = (mxcsr & ~MXCSR_CONTROL) | (uint32_t)(env & 0xffffffffu);
    fpucw = (uint16_t)(env >> 32);
    __asm__ volatile("ldmxcsr %0" : : "m"(mxcsr));
    __asm__ volatile("fldcw %0" : : "m"(fpucw));
}
#else
/* aarch64 and the ucontext backend do not switch FPCR per coroutine: a task's
 * mode is its thread's, as before coroutines were reused. */
unsigned long long ax_coro_fpenv_get(void)
{
    return 0;
}

void ax_coro_fpenv_reset(unsigned long long env)
{
    (void)env;
}
#endif

/* ---- asm backends -------------------------------------------------------- */
#if !AX_CORO_UCONTEXT

void ax_coro_init(struct ax_coro *c, void *stack_lo, size_t stack_size, void (*fn)(void *),
                  void *arg)
{
    common_init(c, stack_lo, stack_size, fn, arg);
    uintptr_t top = ((uintptr_t)stack_lo + stack_size) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL; /* 16 bytes of headroom above the trampoline's frame */
    *--sp = NULL;
#if defined(__x86_64__)
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    *--sp = (void *)(uintptr_t)ax_coro__trampoline; /* "return" address */
    *--sp = NULL;                                   /* rbp */
    *--sp = c;                                      /* rbx */
    *--sp = (void *)(uintptr_t)coro_start;          /* r12 */
    *--sp = NULL;                                   /* r13 */
    *--sp = NULL;                                   /* r14 */
    *--sp = NULL;                                   /* r15 */
    *--sp = (void *)(uintptr_t)(mxcsr | (uint64_t)fpucw << 32);
    /* ret pops the trampoline address leaving rsp = top - 16: aligned. */
#elif defined(__aarch64__)
    sp -= 20; /* x19..x30 (12 slots) then d8..d15 (8 slots): 160 bytes */
    memset(sp, 0, 20 * sizeof *sp);
    sp[0] = c;                                       /* x19 */
    sp[1] = (void *)(uintptr_t)coro_start;           /* x20 */
    sp[10] = NULL;                                   /* x29 */
    sp[11] = (void *)(uintptr_t)ax_coro__trampoline; /* x30 */
#else
#error "no asm switch for this architecture: build with -DAX_CORO_UCONTEXT"
#endif
    c->sp = sp;
}

#if !defined(AX_CORO_SAN)
/* Plain build: compiles to a tail jump into the asm. */
void ax_coro_switch(struct ax_coro *from, struct ax_coro *to)
{
    ax_coro__jump(from, to);
}
void ax_coro_switch_peer(struct ax_coro *from, struct ax_coro *to)
{
    ax_coro__jump_ret(from, to);
}
#else
void ax_coro_switch(struct ax_coro *from, struct ax_coro *to)
{
    before_switch(from, to, &from->asan_fake);
    ax_coro__jump(from, to);
    after_switch(from);
}
void ax_coro_switch_peer(struct ax_coro *from, struct ax_coro *to)
{
    before_switch(from, to, &from->asan_fake);
    ax_coro__jump_ret(from, to);
    after_switch(from);
}
#endif

AX_CORO_INLINE void do_final_jump(struct ax_coro *from, struct ax_coro *to)
{
    ax_coro__jump(from, to);
}

const char *ax_coro_backend(void)
{
#if defined(__x86_64__)
    return "asm-x86_64";
#else
    return "asm-aarch64";
#endif
}

/* ---- ucontext fallback --------------------------------------------------- */
#else

/* makecontext passes int arguments only: the pointer goes in two halves. */
static void uc_entry(unsigned hi, unsigned lo)
{
    coro_start((struct ax_coro *)(uintptr_t)(((uint64_t)hi << 32) | lo));
}

void ax_coro_init(struct ax_coro *c, void *stack_lo, size_t stack_size, void (*fn)(void *),
                  void *arg)
{
    common_init(c, stack_lo, stack_size, fn, arg);
    if (getcontext(&c->uc) != 0) {
        perror("ax_coro: getcontext");
        abort();
    }
    c->uc.uc_stack.ss_sp = stack_lo;
    c->uc.uc_stack.ss_size = stack_size;
    c->uc.uc_link = NULL;
    uint64_t p = (uint64_t)(uintptr_t)c;
    makecontext(&c->uc, (void (*)(void))uc_entry, 2, (unsigned)(p >> 32), (unsigned)p);
}

void ax_coro_switch(struct ax_coro *from, struct ax_coro *to)
{
#if defined(AX_CORO_SAN)
    before_switch(from, to, &from->asan_fake);
#endif
    swapcontext(&from->uc, &to->uc);
#if defined(AX_CORO_SAN)
    after_switch(from);
#endif
}

void ax_coro_switch_peer(struct ax_coro *from, struct ax_coro *to)
{
    ax_coro_switch(from, to);
}

AX_CORO_INLINE void do_final_jump(struct ax_coro *from, struct ax_coro *to)
{
    (void)from;
    setcontext(&to->uc);
}

const char *ax_coro_backend(void)
{
    return "ucontext";
}
#endif

void ax_coro_switch_final(struct ax_coro *from_dying, struct ax_coro *to)
{
    from_dying->flags |= AX_CORO__DYING;
#if defined(AX_CORO_ASAN)
    /* Frames from here up never return: drop their poison now (from a page
     * below this frame to the stack top; deeper frames cleaned up after
     * themselves when they returned). */
    uintptr_t lo = (uintptr_t)from_dying->stack_lo;
    uintptr_t top = lo + from_dying->stack_size;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    uintptr_t from = here > lo + 4096 ? here - 4096 : lo;
    if (here >= lo && here < top) unpoison((const void *)from, top - from);
#endif
#if defined(AX_CORO_SAN)
    before_switch(from_dying, to, NULL); /* NULL: ASan frees our fake stack */
#endif
    do_final_jump(from_dying, to);
    fprintf(stderr, "ax_coro: a finished coroutine was resumed\n");
    abort();
}
