/* SPDX-License-Identifier: MIT */
/*
 * Context switch for AArch64 (AAPCS64).  Interface: switch.h.
 *
 * A suspended context's stack, from its saved sp upwards (176 bytes, a
 * multiple of 16 as sp must always be):
 *
 *   sp+0    x19, x20        sp+96   d8, d9
 *   sp+16   x21, x22        sp+112  d10, d11
 *   sp+32   x23, x24        sp+128  d12, d13
 *   sp+48   x25, x26        sp+144  d14, d15
 *   sp+64   x27, x28        sp+160  FPCR, unused
 *   sp+80   x29, x30 (lr)
 *
 * tdl__ctx_prepare fakes exactly this frame with lr = the trampoline and the
 * entry function parked in x19, so a fresh context needs no special case in
 * the switch itself.
 */

        .text

/* void *tdl__ctx_switch(tdl__ctx *from = x0, tdl__ctx *to = x1, void *arg = x2) */
        .globl  tdl__ctx_switch
        .hidden tdl__ctx_switch
        .type   tdl__ctx_switch, %function
        .p2align 4
tdl__ctx_switch:
        .cfi_startproc
        sub     sp, sp, #176
        .cfi_def_cfa_offset 176
        stp     x19, x20, [sp, #0]
        stp     x21, x22, [sp, #16]
        stp     x23, x24, [sp, #32]
        stp     x25, x26, [sp, #48]
        stp     x27, x28, [sp, #64]
        stp     x29, x30, [sp, #80]
        .cfi_offset x29, -96
        .cfi_offset x30, -88
        stp     d8, d9, [sp, #96]
        stp     d10, d11, [sp, #112]
        stp     d12, d13, [sp, #128]
        stp     d14, d15, [sp, #144]
        /* FPCR (rounding mode, flush-to-zero, trap enables) is callee-saved
         * per AAPCS64 and must stay per fiber. */
        mrs     x9, fpcr
        str     x9, [sp, #160]

        mov     x10, sp
        str     x10, [x0]
        ldr     x10, [x1]
        mov     sp, x10
        /* From here on the frame belongs to `to`; it has the same shape, so
         * the CFI above still describes it. */

        ldr     x10, [sp, #160]
        /* Writing FPCR can stall the pipeline on some cores; nearly every
         * switch keeps the same value, so only write when it changes. */
        cmp     x9, x10
        b.eq    1f
        msr     fpcr, x10
1:
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
        add     sp, sp, #176
        .cfi_def_cfa_offset 0
        .cfi_restore x29
        .cfi_restore x30
        mov     x0, x2
        ret
        .cfi_endproc
        .size   tdl__ctx_switch, .-tdl__ctx_switch

/* void *tdl__ctx_prepare(void *lo = x0, size_t size = x1, void (*entry)(void *) = x2) */
        .globl  tdl__ctx_prepare
        .hidden tdl__ctx_prepare
        .type   tdl__ctx_prepare, %function
        .p2align 4
tdl__ctx_prepare:
        .cfi_startproc
        add     x0, x0, x1
        and     x0, x0, #~15            /* top of stack, 16-byte aligned */
        /* 16 zero bytes at the very top: a null frame record for naive
         * frame-pointer walkers that step past the trampoline. */
        stp     xzr, xzr, [x0, #-16]
        sub     x0, x0, #(176 + 16)
        stp     x2, xzr, [x0, #0]       /* x19 = entry, x20 */
        stp     xzr, xzr, [x0, #16]
        stp     xzr, xzr, [x0, #32]
        stp     xzr, xzr, [x0, #48]
        stp     xzr, xzr, [x0, #64]
        adr     x3, tdl__ctx_trampoline_start
        stp     xzr, x3, [x0, #80]      /* x29 = 0 ends fp chains, lr = trampoline */
        stp     xzr, xzr, [x0, #96]
        stp     xzr, xzr, [x0, #112]
        stp     xzr, xzr, [x0, #128]
        stp     xzr, xzr, [x0, #144]
        /* A new fiber starts with its creator's FP control state, as a new
         * thread does. */
        mrs     x3, fpcr
        stp     x3, xzr, [x0, #160]
        ret
        .cfi_endproc
        .size   tdl__ctx_prepare, .-tdl__ctx_prepare

/* First code a new context runs: x0 = arg of the switch, x19 = entry,
 * sp = top - 16 (16-byte aligned).  The switch returns to
 * tdl__ctx_trampoline_start, one instruction in: an unwinder looks a return
 * address up at address - 1 (or - 4), which must fall inside the trampoline
 * for a fiber that has not run yet to unwind as the trampoline's. */
        .type   tdl__ctx_trampoline, %function
        .p2align 4
tdl__ctx_trampoline:
        .cfi_startproc
        /* No caller: an undefined return address is how DWARF says "outermost
         * frame", so gdb and _Unwind_Backtrace stop cleanly here. */
        .cfi_undefined x30
        nop
tdl__ctx_trampoline_start:
        blr     x19
        /* entry returned, which it must never do: trap right here. */
        brk     #0x3e8
        .cfi_endproc
        .size   tdl__ctx_trampoline, .-tdl__ctx_trampoline

        .section .note.GNU-stack,"",%progbits
