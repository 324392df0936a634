/* SPDX-License-Identifier: MIT */
/*
 * Context switch: the register-only hop between fibers (internal).
 *
 * A context is one saved stack pointer.  Everything else a suspended context
 * needs (callee-saved registers, return address, FP control state) sits on
 * its own stack, just below that pointer, so a context costs 8 bytes plus
 * about a hundred bytes of its stack while suspended.
 *
 * What a switch preserves is exactly what the psABI makes callee-saved:
 *   x86-64:  rbx, rbp, r12-r15, rsp, the MXCSR control bits and the x87
 *            control word (rounding mode, exception masks, precision).
 *   AArch64: x19-x28, x29 (fp), x30 (lr), sp, d8-d15 and FPCR.
 * Status flags (MXCSR exception flags, x87 status word, FPSR) are not
 * per-context: like errno, treat them as clobbered by any switch.  A switch
 * never makes a system call; in particular the signal mask is per thread,
 * not per fiber (glibc's swapcontext pays a system call for it on every
 * switch).
 *
 * Cost: a few loads and stores of registers (docs/PERFORMANCE.md, ring and
 * chan, has what a hop between fibers costs).
 *
 * Use from the scheduler: call tdl__switch() / tdl__switch_exit() for every
 * switch and tdl__switch_entered() first thing in every fiber entry
 * function.  They compile to the bare assembly call unless TDL_ASAN is
 * defined, in which case they also tell AddressSanitizer which stack is
 * about to run (otherwise it reports false stack-buffer errors and
 * mis-handles noreturn calls on fiber stacks).
 *
 * Threads: a context may only be resumed on the thread that suspended it
 * (thread-local storage addresses may be cached in callee-saved registers).
 */
#ifndef TDL_SWITCH_H
#define TDL_SWITCH_H

#include <stddef.h>

#ifdef TDL_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef TDL_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/*
 * A suspended execution context.  The thread's own context (the one running
 * the loop before any fiber exists) needs no preparation: a zero-initialized
 * tdl__ctx is valid as the `from` of a switch, which fills it in.
 */
typedef struct tdl__ctx {
  void *sp; /* saved stack pointer; meaningless while the context runs */
#ifdef TDL_ASAN
  /* ASan bookkeeping, only in sanitizer builds. */
  void *asan_fake;           /* ASan's fake-stack handle while suspended */
  const void *asan_lo;       /* bounds of the stack this context runs on;  */
  size_t asan_size;          /* 0 = not yet known (the thread's own stack) */
  struct tdl__ctx *asan_from; /* who switched here last (learns bounds)    */
#endif
#ifdef TDL_TSAN
  void *tsan_fiber;          /* ThreadSanitizer's fiber; the thread's own is
                                learnt on the first switch away from it */
#endif
} tdl__ctx;

/*
 * Assembly primitives (src/switch_<arch>.S).  Prefer the wrappers below.
 *
 * tdl__ctx_prepare: write an initial frame at the top of the stack
 *   [stack_lo, stack_lo + size) and return the stack pointer that makes the
 *   first switch into it call entry(arg) with a psABI-aligned stack, where
 *   arg is the value passed by that switch.  The frame's FP control state is
 *   copied from the calling thread's current state.  Uses at most
 *   TDL__CTX_PREPARE_BYTES at the top of the stack.  entry must never return (it has no caller to
 *   return to: the frame above it ends backtraces and traps).
 *
 * tdl__ctx_switch: save the current context into *from, resume *to and hand
 *   it arg (as tdl__ctx_switch's return value there, or as entry's argument
 *   on its first run).  Returns whatever arg the context that later switches
 *   back to *from passes.  from == to is not allowed.
 */
#define TDL__CTX_PREPARE_BYTES 208

/*
 * Where a suspended context keeps its frame pointer and the return address
 * into the code that switched away, in words above its saved sp (the
 * layouts at the top of src/fiber/arch/switch_<arch>.S; gdb/treadle.py's
 * unwinder reads the same words).  A call chain of a parked fiber starts
 * there (base/frames.h).
 */
#if defined(__x86_64__)
#define TDL__CTX_FP_WORD 6 /* rbp */
#define TDL__CTX_PC_WORD 7 /* the return address */
#elif defined(__aarch64__)
#define TDL__CTX_FP_WORD 10 /* x29 */
#define TDL__CTX_PC_WORD 11 /* x30 */
#else
#error "no context switch for this architecture"
#endif
void *tdl__ctx_prepare(void *stack_lo, size_t size, void (*entry)(void *arg));
void *tdl__ctx_switch(tdl__ctx *from, tdl__ctx *to, void *arg);

/*
 * Prepare ctx so that the first switch into it runs entry(arg) on the stack
 * [stack_lo, stack_lo + size).  size must be at least 256 bytes (a real fiber
 * stack is far larger; see stack.h).  Cost: a handful of stores.
 */
static inline void tdl__ctx_init(tdl__ctx *ctx, void *stack_lo, size_t size,
                                 void (*entry)(void *arg)) {
  ctx->sp = tdl__ctx_prepare(stack_lo, size, entry);
#ifdef TDL_ASAN
  ctx->asan_fake = NULL;
  ctx->asan_lo = stack_lo;
  ctx->asan_size = size;
  ctx->asan_from = NULL;
#endif
#ifdef TDL_TSAN
  ctx->tsan_fiber = __tsan_create_fiber(0);
#endif
}

/* A context made by tdl__ctx_init will not run again (its stack is being
 * given back).  Empty but for ThreadSanitizer. */
static inline void tdl__ctx_destroy(tdl__ctx *ctx) {
#ifdef TDL_TSAN
  __tsan_destroy_fiber(ctx->tsan_fiber);
#else
  (void)ctx;
#endif
}

/* Tell ThreadSanitizer which context runs next (empty without it). */
static inline void tdl__tsan_switch(tdl__ctx *from, tdl__ctx *to) {
#ifdef TDL_TSAN
  if (from && !from->tsan_fiber)
    from->tsan_fiber = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(to->tsan_fiber, 0);
#else
  (void)from;
  (void)to;
#endif
}

/*
 * The two halves of an annotated switch, exposed so that code which must
 * call tdl__ctx_switch itself (tests, a hand-written trampoline) can still
 * keep ASan informed.  Empty without TDL_ASAN.
 *
 * tdl__asan_leave: about to leave `from` for `to`; from == NULL means the
 *   current context is finished and will never be resumed (ASan then frees
 *   its fake stack).
 * tdl__asan_arrive: first thing after control arrives in `self` (after a
 *   switch returns, or at the top of an entry function).
 */
static inline void tdl__asan_leave(tdl__ctx *from, tdl__ctx *to) {
#ifdef TDL_ASAN
  to->asan_from = from;
  __sanitizer_start_switch_fiber(from ? &from->asan_fake : NULL, to->asan_lo,
                                 to->asan_size);
#else
  (void)from;
  (void)to;
#endif
}

static inline void tdl__asan_arrive(tdl__ctx *self) {
#ifdef TDL_ASAN
  const void *lo;
  size_t size;
  __sanitizer_finish_switch_fiber(self->asan_fake, &lo, &size);
  /* The thread's own context never went through tdl__ctx_init, so its stack
   * bounds are unknown until ASan reports them here, on the first switch
   * away from it; without them the switch back could not be announced. */
  tdl__ctx *prev = self->asan_from;
  if (prev && prev->asan_size == 0) {
    prev->asan_lo = lo;
    prev->asan_size = size;
  }
#else
  (void)self;
#endif
}

/* Switch from the running context (saved into *from) to *to, passing arg;
 * returns the arg of the switch that eventually resumes *from. */
static inline void *tdl__switch(tdl__ctx *from, tdl__ctx *to, void *arg) {
  tdl__asan_leave(from, to);
  tdl__tsan_switch(from, to);
  arg = tdl__ctx_switch(from, to, arg);
  tdl__asan_arrive(from);
  return arg;
}

/* Last switch of a finished context, which is never resumed: its stack may
 * be reused or unmapped as soon as *to runs.  *from must still be writable
 * memory (the switch stores into it; it may be on the dying stack). */
_Noreturn static inline void tdl__switch_exit(tdl__ctx *from, tdl__ctx *to,
                                              void *arg) {
  tdl__asan_leave(NULL, to);
  tdl__tsan_switch(from, to);
  tdl__ctx_switch(from, to, arg);
  __builtin_unreachable();
}

/* First statement of every entry function passed to tdl__ctx_init. */
static inline void tdl__switch_entered(tdl__ctx *self) {
  tdl__asan_arrive(self);
}

#endif /* TDL_SWITCH_H */
