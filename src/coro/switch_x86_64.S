/* switch_x86_64.S - coroutine switch for x86_64 System V (Linux, BSDs).
 *
 * void ax_coro__jump(struct ax_coro *from, struct ax_coro *to)
 *   Pushes the callee-saved state onto the running stack, stores rsp into
 *   from->sp (offset 0), loads to->sp and pops the same layout from there.
 *   Saved frame, lowest address first (what ax_coro_init forges for a new
 *   coroutine):
 *     +0  MXCSR (4 bytes), x87 control word (2 bytes), 2 bytes unused
 *     +8  r15, r14, r13, r12, rbx, rbp
 *     +56 return address
 *   Caller-saved registers need no saving: the C caller already assumes the
 *   call clobbers them. MXCSR control bits and the x87 control word are
 *   callee-saved per the ABI, hence the stmxcsr/fnstcw pair.
 *   It leaves by pop + indirect jmp, not ret: the return-stack predictor
 *   always guesses the *from* side's call site, so a ret mispredicts on
 *   every switch between two different sites, while the indirect-branch
 *   predictor learns the pattern. Measured here (AMD EPYC VM): A<->B
 *   ping-pong from two sites 12.6 -> 5.6 ns, scheduler loop <-> 4 tasks
 *   yielding through two call levels 12.5 -> 10.8 ns. (Not compatible with
 *   CET shadow stacks; neither is any stack switch that does not tell the
 *   kernel. This object has no IBT/SHSTK property note, so the linker marks
 *   the program as not CET-enabled.)
 *
 * void ax_coro__jump_ret(struct ax_coro *from, struct ax_coro *to)
 *   The same switch, left by ret: for a switch between coroutines that
 *   usually park at the same call site (ax_yield's direct hand-off, task
 *   to task). There the return-stack predictor's guess, the from side's
 *   call site, is right, and its stack stays balanced: pop + jmp leaves
 *   the from side's return address on it, so the resumed side's next ret
 *   (out of ax_yield) mispredicted on every hand-off. Measured (bench
 *   ax_switch, two tasks yielding, alternating pairs): 22.7 -> 11.3 ns a
 *   hand-off. Resuming a coroutine parked at another site (or through the
 *   C wrapper's call in a sanitizer build) mispredicts once, like the jmp.
 *
 * void ax_coro__trampoline(void)
 *   First "return" target of a new coroutine: rbx = coroutine, r12 =
 *   coro_start. rsp is 16-byte aligned here, so the call below enters
 *   coro_start exactly as the ABI requires. The CFI marks the return address
 *   undefined: unwinders (libgcc's backtrace(), gdb) stop at this frame.
 *
 * Assembled only for x86_64 asm builds; with -DAX_CORO_UCONTEXT it is empty,
 * so the build may list it unconditionally on x86_64.
 */
#if defined(__x86_64__) && !(defined(AX_CORO_UCONTEXT) && AX_CORO_UCONTEXT)

    .text

/* The two switches below differ in their last instruction only. */
.macro SWITCH_STACKS
    .cfi_startproc
    pushq   %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbp, 0
    pushq   %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbx, 0
    pushq   %r12
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r12, 0
    pushq   %r13
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r13, 0
    pushq   %r14
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r14, 0
    pushq   %r15
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset r15, 0
    subq    $8, %rsp
    .cfi_adjust_cfa_offset 8
    stmxcsr (%rsp)
    fnstcw  4(%rsp)

    movq    %rsp, (%rdi)        /* from->sp = rsp */
    movq    (%rsi), %rsp        /* rsp = to->sp: now on the other stack, */
                                /* whose frame has the same layout, so the */
                                /* CFI above stays true through the pops */
    ldmxcsr (%rsp)
    fldcw   4(%rsp)
    addq    $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq    %r15
    .cfi_adjust_cfa_offset -8
    .cfi_restore r15
    popq    %r14
    .cfi_adjust_cfa_offset -8
    .cfi_restore r14
    popq    %r13
    .cfi_adjust_cfa_offset -8
    .cfi_restore r13
    popq    %r12
    .cfi_adjust_cfa_offset -8
    .cfi_restore r12
    popq    %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore rbx
    popq    %rbp
    .cfi_adjust_cfa_offset -8
    .cfi_restore rbp
.endm

    .globl  ax_coro__jump
    .hidden ax_coro__jump
    .type   ax_coro__jump, @function
    .p2align 4
ax_coro__jump:
    SWITCH_STACKS
    popq    %r8                 /* return address of the resumed side */
    .cfi_adjust_cfa_offset -8
    .cfi_register rip, r8
    jmp     *%r8
    .cfi_endproc
    .size   ax_coro__jump, .-ax_coro__jump

    .globl  ax_coro__jump_ret
    .hidden ax_coro__jump_ret
    .type   ax_coro__jump_ret, @function
    .p2align 4
ax_coro__jump_ret:
    SWITCH_STACKS
    ret                         /* predicted: the resumed side's call site */
    .cfi_endproc                /* is the running side's (the peer switch) */
    .size   ax_coro__jump_ret, .-ax_coro__jump_ret

    .globl  ax_coro__trampoline
    .hidden ax_coro__trampoline
    .type   ax_coro__trampoline, @function
    .p2align 4
ax_coro__trampoline:
    .cfi_startproc
    .cfi_undefined rip          /* outermost frame: unwinding ends here */
    xorl    %ebp, %ebp          /* and frame-pointer walks end here too */
    movq    %rbx, %rdi
    callq   *%r12               /* coro_start(coroutine): never returns */
    ud2
    .cfi_endproc
    .size   ax_coro__trampoline, .-ax_coro__trampoline

#endif

#if defined(__linux__) && defined(__ELF__)
    .section .note.GNU-stack,"",%progbits
#endif
