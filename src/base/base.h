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

/* The struct of `type` whose `member` is at p. */
#define TDL__CONTAINER_OF(p, type, member) ((type *)(void *)((char *)(p) - offsetof(type, member)))

#endif /* TDL_BASE_H */
