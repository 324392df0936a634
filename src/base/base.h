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
  __asm__("prefetchw %0" : : "m"(*(const char *)p));
#else
  __builtin_prefetch(p, 1);
#endif
}

/* The struct of `type` whose `member` is at p. */
#define TDL__CONTAINER_OF(p, type, member) ((type *)(void *)((char *)(p) - offsetof(type, member)))

#endif /* TDL_BASE_H */
