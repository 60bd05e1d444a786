/* switch_aarch64.S - coroutine switch for AArch64 (AAPCS64, Linux/ELF).
 *
 * void ax_coro__jump(struct ax_coro *from, struct ax_coro *to)
 *   Saves the callee-saved state in a 160-byte frame on the running stack,
 *   stores sp into from->sp (offset 0), loads to->sp, restores the same
 *   frame from there and returns through the restored x30. Frame layout,
 *   lowest address first (what ax_coro_init forges for a new coroutine):
 *     +0   x19 x20 x21 x22 x23 x24 x25 x26 x27 x28 x29(fp) x30(lr)
 *     +96  d8 d9 d10 d11 d12 d13 d14 d15   (low 64 bits of v8-v15: all the
 *          ABI asks a callee to preserve)
 *   FPCR/FPSR are not switched (the ABI does not make them callee-saved).
 *
 * void ax_coro__trampoline(void)
 *   First return target of a new coroutine: x19 = coroutine, x20 =
 *   coro_start, fp = 0. The CFI marks the return address (x30) undefined so
 *   unwinders stop here.
 *
 * Assembled only for aarch64 asm builds; empty with -DAX_CORO_UCONTEXT.
 */
#if defined(__aarch64__) && !(defined(AX_CORO_UCONTEXT) && AX_CORO_UCONTEXT)

    .text
    .globl  ax_coro__jump
    .hidden ax_coro__jump
    .type   ax_coro__jump, %function
    .p2align 4
ax_coro__jump:
    .cfi_startproc
    sub     sp, sp, #160
    .cfi_adjust_cfa_offset 160
    stp     x19, x20, [sp, #0]
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    stp     x25, x26, [sp, #48]
    stp     x27, x28, [sp, #64]
    stp     x29, x30, [sp, #80]
    .cfi_rel_offset x29, 80
    .cfi_rel_offset x30, 88
    stp     d8, d9, [sp, #96]
    stp     d10, d11, [sp, #112]
    stp     d12, d13, [sp, #128]
    stp     d14, d15, [sp, #144]

    mov     x9, sp
    str     x9, [x0]            /* from->sp = sp */
    ldr     x9, [x1]
    mov     sp, x9              /* sp = to->sp: same frame layout there */

    ldp     x19, x20, [sp, #0]
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     x29, x30, [sp, #80]
    ldp     d8, d9, [sp, #96]
    ldp     d10, d11, [sp, #112]
    ldp     d12, d13, [sp, #128]
    ldp     d14, d15, [sp, #144]
    add     sp, sp, #160
    .cfi_adjust_cfa_offset -160
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size   ax_coro__jump, .-ax_coro__jump

    .globl  ax_coro__trampoline
    .hidden ax_coro__trampoline
    .type   ax_coro__trampoline, %function
    .p2align 4
ax_coro__trampoline:
    .cfi_startproc
    .cfi_undefined x30          /* outermost frame: unwinding ends here */
    mov     x29, #0
    mov     x30, #0
    mov     x0, x19
    blr     x20                 /* coro_start(coroutine): never returns */
    brk     #0
    .cfi_endproc
    .size   ax_coro__trampoline, .-ax_coro__trampoline

#endif

#if defined(__linux__) && defined(__ELF__)
    .section .note.GNU-stack,"",%progbits
#endif
