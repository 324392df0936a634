/* SPDX-License-Identifier: MIT */
/*
 * Context switch for x86-64 (System V psABI).  Interface: switch.h.
 *
 * A suspended context's stack, from its saved sp upwards:
 *
 *   sp+0   MXCSR (4 bytes), x87 control word (2 bytes), 2 unused
 *   sp+8   r15
 *   sp+16  r14
 *   sp+24  r13
 *   sp+32  r12
 *   sp+40  rbx
 *   sp+48  rbp
 *   sp+56  return address
 *
 * tdl__ctx_prepare fakes exactly this frame, with the return address
 * pointing at the trampoline and the entry function parked in r12, so a
 * fresh context needs no special case in the switch itself.
 */

        .text

/* void *tdl__ctx_switch(tdl__ctx *from = rdi, tdl__ctx *to = rsi, void *arg = rdx) */
        .globl  tdl__ctx_switch
        .hidden tdl__ctx_switch
        .type   tdl__ctx_switch, @function
        .p2align 4
tdl__ctx_switch:
        .cfi_startproc
        pushq   %rbp
        .cfi_adjust_cfa_offset 8
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        pushq   %r12
        .cfi_adjust_cfa_offset 8
        pushq   %r13
        .cfi_adjust_cfa_offset 8
        pushq   %r14
        .cfi_adjust_cfa_offset 8
        pushq   %r15
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        /* The rounding mode and exception masks are callee-saved per the
         * psABI, and a fiber that changes them must not change them for
         * every other fiber on the thread.  They are a fifth of a switch's
         * cost; saving them only when changed does not help, for the reads
         * (stmxcsr/fnstcw) cost as much as the writes. */
        stmxcsr (%rsp)
        fnstcw  4(%rsp)

        movq    %rsp, (%rdi)
        movq    (%rsi), %rsp
        /* From here on the frame belongs to `to`; it has the same shape, so
         * the CFI above still describes it. */

        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %r15
        .cfi_adjust_cfa_offset -8
        popq    %r14
        .cfi_adjust_cfa_offset -8
        popq    %r13
        .cfi_adjust_cfa_offset -8
        popq    %r12
        .cfi_adjust_cfa_offset -8
        popq    %rbx
        .cfi_adjust_cfa_offset -8
        popq    %rbp
        .cfi_adjust_cfa_offset -8
        movq    %rdx, %rax
        /* A plain ret mispredicts (the return-stack predictor expects the
         * caller in the other context) but keeps the predictor balanced for
         * the returns that follow in the resumed context.  pop + jmp *%rcx
         * wins a bare ping-pong (7 vs 15 ns) and loses badly as soon as
         * either side returns through a few frames (29 vs 17 ns). */
        ret
        .cfi_endproc
        .size   tdl__ctx_switch, .-tdl__ctx_switch

/* void *tdl__ctx_prepare(void *lo = rdi, size_t size = rsi, void (*entry)(void *) = rdx) */
        .globl  tdl__ctx_prepare
        .hidden tdl__ctx_prepare
        .type   tdl__ctx_prepare, @function
        .p2align 4
tdl__ctx_prepare:
        .cfi_startproc
        leaq    (%rdi,%rsi), %rax
        andq    $-16, %rax              /* top of stack, 16-byte aligned */
        /* The switch's final `ret` pops the trampoline address and leaves
         * rsp = top - 16, 16-byte aligned, which is what the trampoline's
         * `call` needs to give entry the psABI's rsp % 16 == 8.  The two
         * words above are a zero "return address" and padding, so naive
         * stack walkers also stop here. */
        movq    $0, -8(%rax)
        movq    $0, -16(%rax)
        leaq    tdl__ctx_trampoline_start(%rip), %rcx
        movq    %rcx, -24(%rax)         /* return address */
        movq    $0, -32(%rax)           /* rbp = 0 ends frame-pointer chains */
        movq    $0, -40(%rax)           /* rbx */
        movq    %rdx, -48(%rax)         /* r12 = entry */
        movq    $0, -56(%rax)           /* r13 */
        movq    $0, -64(%rax)           /* r14 */
        movq    $0, -72(%rax)           /* r15 */
        movq    $0, -80(%rax)
        /* A new fiber starts with its creator's FP control state, as a new
         * thread does. */
        stmxcsr -80(%rax)
        fnstcw  -76(%rax)
        subq    $80, %rax
        ret
        .cfi_endproc
        .size   tdl__ctx_prepare, .-tdl__ctx_prepare

/* First code a new context runs: rax = arg of the switch, r12 = entry.
 * The switch "returns" to tdl__ctx_trampoline_start, one byte in: an
 * unwinder looks a return address up at address - 1, which must fall inside
 * the trampoline for a fiber that has not run yet to unwind as the
 * trampoline's. */
        .type   tdl__ctx_trampoline, @function
        .p2align 4
tdl__ctx_trampoline:
        .cfi_startproc
        /* No caller: an undefined return address is how DWARF says "outermost
         * frame", so gdb and _Unwind_Backtrace stop cleanly here. */
        .cfi_undefined rip
        nop
tdl__ctx_trampoline_start:
        movq    %rax, %rdi
        call    *%r12
        /* entry returned, which it must never do: trap right here, where a
         * debugger shows the culprit, instead of running off the stack. */
        ud2
        .cfi_endproc
        .size   tdl__ctx_trampoline, .-tdl__ctx_trampoline

        .section .note.GNU-stack,"",@progbits
