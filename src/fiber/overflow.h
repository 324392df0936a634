/* SPDX-License-Identifier: MIT */
/*
 * Stack-overflow diagnosis for fibers (internal).
 *
 * A fiber that runs off the bottom of its stack touches the guard below it
 * (stack.h) and the kernel raises SIGSEGV.  On its own that is an
 * anonymous crash; with this module the process still dies of that SIGSEGV
 * (same signal, same core dump), but first writes one line to stderr:
 *
 *   treadle: fiber 7 "worker" overflowed its 65536-byte stack (fault at 0x7f...)
 *
 * How: a process-wide SIGSEGV/SIGBUS handler, installed once, running on a
 * per-thread alternate signal stack (an overflowed stack has no room left
 * for a signal frame).  The handler compares the fault address with the
 * guard of the fiber running on the faulting thread, tdl__running_stack,
 * which the scheduler keeps current on every switch.  Any other fault goes
 * to the handler that was installed before ours (or the default action):
 * treadle only claims faults it can explain.
 *
 * Overflows of unguarded stacks (stack.h, "Guards") are not detected.
 */
#ifndef TDL_OVERFLOW_H
#define TDL_OVERFLOW_H

#include <stddef.h>
#include <stdint.h>

#include "fiber/stack.h"

/* What the handler knows about a fiber.  It must stay valid and unchanged
 * while it is published in tdl__running_stack (the fiber's control block is
 * the natural home).  guard_lo == guard_hi means "no guard". */
typedef struct tdl__stack_info {
  const char *guard_lo, *guard_hi; /* the guard: [guard_lo, guard_hi) */
  uint64_t id;                      /* printed as "fiber <id>" */
  const char *name;                 /* printed quoted; NULL: no name */
  size_t size;                      /* usable bytes, printed */
} tdl__stack_info;

/* The fiber running on this thread, or NULL while the thread runs on its own
 * stack.  The scheduler stores it before each switch into a fiber (and NULL
 * before switching back to the loop).  initial-exec TLS: reading it from a
 * signal handler never allocates. */
extern _Thread_local const tdl__stack_info *tdl__running_stack
    __attribute__((tls_model("initial-exec")));

/* Fill *info for a fiber on stack *s.  name is not copied. */
static inline void tdl__stack_info_init(tdl__stack_info *info, const tdl__stack *s,
                                        uint64_t id, const char *name) {
  info->guard_lo = (const char *)s->lo - s->guard;
  info->guard_hi = (const char *)s->lo;
  info->id = id;
  info->name = name;
  info->size = s->size;
}

/* Make this thread ready to diagnose overflows: install the process-wide
 * handler if not yet done, and give the thread an alternate signal stack
 * unless it already has one (which is then used as is).  Calls nest: each
 * successful call needs one tdl__overflow_thread_cleanup() on the same
 * thread.  Returns 0, -ENOMEM (no memory for the signal stack), or the
 * negative errno of a failed sigaction/sigaltstack. */
int tdl__overflow_thread_init(void);

/* Undo one tdl__overflow_thread_init() on this thread; the last one removes
 * and unmaps the signal stack it installed.  The process-wide handler stays
 * (other threads may rely on it; it costs nothing while no fault happens). */
void tdl__overflow_thread_cleanup(void);

#endif /* TDL_OVERFLOW_H */
