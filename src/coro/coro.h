/* coro.h - stackful coroutine context switch (internal to ax).
 *
 * Owns: the machine-level switch between a worker's own stack ("main") and
 * coroutine stacks. It does not own stacks (see stack.h), scheduling or task
 * state; a coroutine is just a saved stack pointer plus the bookkeeping that
 * sanitizers and valgrind need to follow a switch.
 *
 * Backends, chosen at build time:
 *   - x86_64 / aarch64: hand-written assembly (switch_x86_64.S,
 *     switch_aarch64.S). A switch pushes the callee-saved registers onto the
 *     running stack, stores sp into from->sp, loads to->sp and pops. Saved:
 *       x86_64 SysV : rbx rbp r12-r15 rsp, MXCSR and the x87 control word
 *       aarch64     : x19-x30 sp d8-d15 (FPCR is not switched)
 *   - everything else, or when built with -DAX_CORO_UCONTEXT: POSIX
 *     ucontext (getcontext/makecontext/swapcontext). Portable but ~40x
 *     slower: glibc's swapcontext makes a sigprocmask syscall each time.
 *   The choice changes the layout of struct ax_coro, so every translation
 *   unit that includes this header must see the same AX_CORO_UCONTEXT.
 *
 * Invariants:
 *   - A coroutine's fn never returns; it finishes with ax_coro_switch_final.
 *     (If it does return, the process aborts with a message.)
 *   - One thread runs a coroutine at a time. The switch keeps no
 *     thread-local state, so a parked coroutine may be resumed by another
 *     thread (work stealing); the sanitizer hooks follow it, though that
 *     case is not covered by the tests here.
 *   - Stack memory handed to ax_coro_init must be free of ASan stack poison;
 *     ax_coro_switch_final and ax_coro_destroy leave it so, so a pooled stack
 *     can be reused for the next coroutine.
 *
 * Hot: ax_coro_switch (one call, ~20 instructions, no memory allocation, no
 * syscall in the asm backends). Everything else is cold.
 *
 * Sanitizers / tools, all compiled to nothing unless detected:
 *   ASan : __sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber
 *          around every switch (fake stacks of detect_stack_use_after_return
 *          follow the coroutine; the dying switch frees them).
 *   TSan : one TSan fiber per coroutine, __tsan_switch_to_fiber before every
 *          switch, destroyed after the final switch or by ax_coro_destroy.
 *   valgrind (when <valgrind/valgrind.h> exists): VALGRIND_STACK_REGISTER
 *          so stack switches are not taken for wild stack-pointer moves.
 */
#ifndef AX_CORO_CORO_H
#define AX_CORO_CORO_H

#include <stddef.h>

#if !defined(AX_CORO_UCONTEXT)
#if defined(__x86_64__) || defined(__aarch64__)
#define AX_CORO_UCONTEXT 0
#else
#define AX_CORO_UCONTEXT 1
#endif
#endif

#if AX_CORO_UCONTEXT
#include <ucontext.h>
#endif

struct ax_coro {
#if AX_CORO_UCONTEXT
    ucontext_t uc;
#else
    void *sp; /* saved stack pointer; MUST stay the first member (asm) */
#endif
    void *stack_lo;    /* lowest usable byte; NULL for a main coroutine */
    size_t stack_size; /* usable bytes above stack_lo */
    void (*fn)(void *);
    void *arg;
    /* Tool state. Always present so the layout does not depend on which
     * sanitizer a translation unit was built with. */
    struct ax_coro *prev; /* who switched to us last (sanitizer builds) */
    void *asan_fake;      /* ASan fake-stack save slot */
    const void *main_lo;  /* main coroutine's stack bounds, learnt by ASan */
    size_t main_size;
    void *tsan_fiber; /* TSan fiber; NULL if none */
    unsigned vg_id;   /* valgrind stack id; 0 if none */
    unsigned flags;   /* AX_CORO__* below */
};

#define AX_CORO__MAIN 1u  /* represents a thread's own stack */
#define AX_CORO__DYING 2u /* switched away for the last time */

/* Represent the calling thread's own stack (a worker's scheduler loop). The
 * first switch away from it fills in the saved context. */
void ax_coro_init_main(struct ax_coro *c);

/* Prepare c to run fn(arg) on [stack_lo, stack_lo + stack_size) at its first
 * switch-in. stack_lo need not be aligned (the top is rounded down to 16
 * bytes); stack_size must leave room for fn's frames (>= 16 KiB advised, more
 * under ASan). fn must never return. */
void ax_coro_init(struct ax_coro *c, void *stack_lo, size_t stack_size, void (*fn)(void *),
                  void *arg);

/* HOT. Save the running context into from and resume to. Returns when some
 * coroutine switches back to from. from must be the running coroutine. */
void ax_coro_switch(struct ax_coro *from, struct ax_coro *to);

/* HOT. ax_coro_switch for a switch between two coroutines that switch at
 * the same call site (a hand-off from task to task). Any pair may use it;
 * only the branch predictors see the difference (switch_x86_64.S). */
void ax_coro_switch_peer(struct ax_coro *from, struct ax_coro *to);

/* The last switch out of a finished coroutine: like ax_coro_switch but from
 * is never resumed; lets ASan free its fake stack and TSan its fiber. The
 * stack may be reused once to runs (call ax_coro_destroy before reuse). */
void ax_coro_switch_final(struct ax_coro *from_dying, struct ax_coro *to);

/* Release tool resources (TSan fiber, valgrind stack id, ASan poison on the
 * stack) of a coroutine that never ran, is parked for good, or has made its
 * final switch. Idempotent; never call it on the running coroutine. Also
 * valid on a main coroutine (does nothing). */
void ax_coro_destroy(struct ax_coro *c);

/* The floating-point control state a new coroutine starts with (x86_64:
 * the MXCSR control bits and the x87 control word, as ax_coro_init copies
 * them from the creating thread; 0 elsewhere). A coroutine reused for
 * another task calls ax_coro_fpenv_reset with the value its thread had, so
 * a rounding mode or exception mask set by one task does not leak into the
 * next. Cheap when unchanged (two reads and a compare). */
unsigned long long ax_coro_fpenv_get(void);
void ax_coro_fpenv_reset(unsigned long long env);
/* Which backend was compiled in: "asm-x86_64", "asm-aarch64" or "ucontext". */
const char *ax_coro_backend(void);

#endif
