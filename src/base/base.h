/* SPDX-License-Identifier: MIT */
/*
 * The bottom layer's common header: the public conventions (treadle.h) and
 * the few compiler helpers every layer uses.  Nothing here knows about loops,
 * fibers or anything above them.
 */
#ifndef TDL_BASE_H
#define TDL_BASE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "treadle.h"
#include "base/fault.h" /* TDL__FAULT_*: the hooks at every resource-taking call */

#define TDL__LIKELY(x) __builtin_expect(!!(x), 1)
#define TDL__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Around the statement where GCC's -fanalyzer (scripts/analyse.sh) reports
 * what cannot happen, beside a comment that says why it cannot:
 *   TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak") <statement> TDL__ANALYZER_END
 * Empty for clang, which does not know those warnings and would warn of an
 * unknown one.
 *
 * GCC 12's analyser's usual mistake, "a stale-pointer leak" where it is
 * silenced: after a call to a function it cannot see, it no longer counts a
 * struct reached through a pointer that was read before the call (s =
 * loop->be_state, then epoll_wait) as reachable, so a block stored in that
 * struct (s->events = realloc(...)) looks leaked.  It is reported where the
 * analyser loses the last pointer it believes in, often in a caller. */
#if defined(__GNUC__) && !defined(__clang__)
#define TDL__PRAGMA(x) _Pragma(#x)
#define TDL__ANALYZER_IGNORE(w) _Pragma("GCC diagnostic push") TDL__PRAGMA(GCC diagnostic ignored w)
#define TDL__ANALYZER_END _Pragma("GCC diagnostic pop")
#else
#define TDL__ANALYZER_IGNORE(w)
#define TDL__ANALYZER_END
#endif

/* In a spin-wait: let the other hardware thread (or the hypervisor) run. */
static inline void tdl__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Start fetching the cache line of p to write it, owned: a line that another
 * core wrote and that this core will read, then write, comes over once
 * instead of twice (shared for the read, then owned for the write).  x86's
 * PREFETCHW, which compilers emit only when told the CPU has it; every
 * x86-64 decodes it (CPUs without it run it as a no-op). */
static inline void tdl__prefetch_write(const void *p)
{
#if defined(__x86_64__)
  /* The "m" operand names the line, and GCC's analyser takes it for a read
   * of it: the line is often a stack slot not written yet (a wait record
   * about to be filled in), but a prefetch reads no value. */
  TDL__ANALYZER_IGNORE("-Wanalyzer-use-of-uninitialized-value")
  __asm__("prefetchw %0" : : "m"(*(const char *)p));
  TDL__ANALYZER_END
#else
  __builtin_prefetch(p, 1);
#endif
}

/* The struct of `type` whose `member` is at p. */
#define TDL__CONTAINER_OF(p, type, member) ((type *)(void *)((char *)(p) - offsetof(type, member)))

#endif /* TDL_BASE_H */
