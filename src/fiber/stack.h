/* SPDX-License-Identifier: MIT */
/*
 * Fiber stacks (internal): mmap'd, guarded while the kernel's mapping budget
 * lasts, and recycled through a small per-loop cache.
 *
 * Layout of one stack (addresses grow upwards):
 *
 *   lo - guard         lo                                    lo + size
 *   | PROT_NONE guard  | usable stack, grows down from the top |
 *
 * Sizes.  Requested sizes are rounded up to whole pages.  The default is
 *   TDL__STACK_DEFAULT (64 KiB); requests below TDL__STACK_MIN (16 KiB: room
 *   for the fiber's control block, a few libc calls and a signal frame) or
 *   above TDL__STACK_MAX (1 GiB) fail with -EINVAL.  Memory is mapped with
 *   MAP_NORESERVE, so an idle fiber costs only the pages it has touched
 *   (normally one) plus page tables, not its full size.
 *
 * Guards.  Each guard is TDL__STACK_GUARD bytes (rounded up to a page; more
 *   than one page so that a function with a large frame cannot step over it)
 *   and costs the kernel one extra mapping (VMA).  A process may hold only
 *   vm.max_map_count VMAs (65530 by default), so guarded stacks stop at
 *   about 32,750.  Strategy: every process may keep max_map_count / 4 guarded
 *   stacks mapped at once (2 VMAs each, so guards use at most half of the
 *   limit and the rest of the process keeps the other half); stacks beyond
 *   that budget, or whose guard the kernel refuses, are mapped WITHOUT a guard
 *   (guard == 0).  Unguarded stacks of equal protection merge with their
 *   neighbours into a few large VMAs, so 100,000 fibers fit.  An overflow of
 *   an unguarded stack is not detected: it silently corrupts the memory
 *   below.  tdl__stack_pool_stats() counts them.
 *
 * Cache.  tdl__stack_put() keeps up to max_cached stacks for reuse (a cache
 *   hit costs a few ns; a fresh mapping ~2 us, ~11 us with guard, first touch
 *   and unmap).  The cache lists live inside the cached stacks' own top
 *   pages: no allocation per stack, and nothing proportional to the number of
 *   stacks outside the stacks themselves.  Guarded stacks are handed out
 *   first; within a size, the most recently put back (hottest) first.
 *
 * Trimming (the L4Linux lesson: reuse what is hot, return what is not).  A
 *   put makes no system call while the cache has room: the stack keeps the
 *   pages its fiber touched, and its next owner finds them resident (no page
 *   faults, often still in the CPU's caches).  What is cached but not needed
 *   is returned later, off the spawn and exit paths: tdl__stack_pool_trim(),
 *   called about once a period (TDL__STACK_TRIM_PERIOD, the scheduler's
 *   timer), unmaps half of the stacks that stayed in the cache through the
 *   whole period just ended (the coldest ones: the least recently put back),
 *   rounded up.  So the cache follows recent demand: a server whose load
 *   swings within a period keeps what the swings take; after a peak, the
 *   excess halves every period and is gone after about log2(max_cached)
 *   periods (11 for 1024), and an idle loop holds no stacks at all.  The
 *   only work a get adds is the low-water mark (one compare).
 *   tdl__stack_used() therefore measures every owner since the stack was
 *   mapped, not only the current one.
 *
 * Valgrind.  Every mapped stack is registered with VALGRIND_STACK_REGISTER
 *   (and deregistered when unmapped) so memcheck understands switches.
 *
 * Threads.  A pool belongs to one thread (its loop's).  The guard budget is
 *   process-wide and shared safely between pools.
 */
#ifndef TDL_STACK_H
#define TDL_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "base/list.h"

#define TDL__STACK_DEFAULT ((size_t)64 * 1024)
#define TDL__STACK_MIN ((size_t)16 * 1024)
#define TDL__STACK_MAX ((size_t)1 << 30)
#define TDL__STACK_GUARD ((size_t)16 * 1024)

/* Size classes the cache can hold at once (sizes are exact, page-rounded). */
#define TDL__STACK_BUCKETS 4

/* How often the owner of a pool should call tdl__stack_pool_trim(). */
#define TDL__STACK_TRIM_PERIOD ((int64_t)1000000000)

/* One stack.  The struct is a plain value: it may be copied, and may live in
 * the stack it describes (put copies it before reusing the memory). */
typedef struct tdl__stack {
  void *lo;         /* lowest usable byte */
  size_t size;      /* usable bytes [lo, lo + size), page multiple */
  size_t guard;     /* PROT_NONE bytes directly below lo; 0 = unguarded */
  unsigned vg_id;   /* Valgrind's id for the registered stack */
} tdl__stack;

struct tdl__stack_node; /* a cached stack's free-list entry, in its top page */

/* Cached stacks of one size, most recently put back first (tdl__list: the
 * coldest are at the back, where a trim takes them from). */
typedef struct tdl__stack_bucket {
  size_t size;        /* 0 = unused bucket */
  tdl__list guarded;  /* cached stacks of this size, with a guard */
  tdl__list unguarded;
  size_t n;           /* stacks in both lists */
  size_t low;         /* fewest in both lists since the last trim */
} tdl__stack_bucket;

/* A per-loop stack cache.  Embed it; fields are private to stack.c. */
typedef struct tdl__stack_pool {
  size_t page;
  size_t max_cached;
  size_t cached, cached_bytes;
  size_t in_use, in_use_unguarded;
  size_t trimmed;
  tdl__stack_bucket bucket[TDL__STACK_BUCKETS];
  struct tdl__stack_node *stranded; /* could not be unmapped; see put */
} tdl__stack_pool;

typedef struct tdl__stack_stats {
  size_t in_use;           /* stacks got from this pool and not yet put back */
  size_t in_use_unguarded; /* of those, stacks without a guard */
  size_t cached;           /* stacks held in this pool's cache */
  size_t trimmed;          /* stacks the trims have unmapped, ever */
  size_t cached_bytes;     /* their usable bytes (address space, mostly not resident) */
  size_t guarded_mapped;   /* process-wide: guarded stacks mapped now */
  size_t guard_budget;     /* process-wide: most guarded stacks mapped at once */
} tdl__stack_stats;

/* Initialize an empty pool that caches up to max_cached stacks (0: none).
 * Cannot fail; returns 0. */
int tdl__stack_pool_init(tdl__stack_pool *p, size_t max_cached);

/* Unmap every cached stack.  Stacks still in use are not tracked by the pool:
 * put them back first (or they stay mapped). */
void tdl__stack_pool_destroy(tdl__stack_pool *p);

/* Get a stack of at least size bytes (page-rounded), from the cache when one
 * of that exact size is there, else freshly mapped.
 * Returns 0, -EINVAL (size < TDL__STACK_MIN or > TDL__STACK_MAX), or -ENOMEM
 * (the kernel refused the mapping; nothing is left behind).
 * Cost: a few ns from the cache; else one mmap (+ one mprotect if guarded). */
int tdl__stack_get(tdl__stack_pool *p, size_t size, tdl__stack *out);

/* The caller is about to write [from, top of s) before any code runs on s
 * (a fiber's control block and first frame).  Tells memcheck that this is
 * fresh memory: on a reused stack it marked the previous owner's popped
 * frames no-access.  Free outside valgrind. */
void tdl__stack_claim(const tdl__stack *s, void *from);

/* Give a stack back: into the cache, as it is (see "Trimming"), or
 * unmapped when the cache is full or has no bucket for its size.  *s may
 * live inside the stack.  Must not be the running stack.
 * Cost: a few stores into the cache; else one munmap. */
void tdl__stack_put(tdl__stack_pool *p, const tdl__stack *s);

/* One trim (see "Trimming"): unmap half (rounded up) of the stacks that no
 * get has taken since the previous trim, coldest first, and start the next
 * period.  Returns the number of stacks still cached: 0 means there is
 * nothing to trim until the next put.  Cost: one munmap per stack returned
 * (a few us each); nothing else (the coldest come off the back of a list). */
size_t tdl__stack_pool_trim(tdl__stack_pool *p);

/* High-water mark: bytes from the lowest resident page of the stack to its
 * top, page granular (0 if nothing was touched).  Pages the kernel swapped
 * out are not counted.  Cost: one mincore() per 1 MiB of stack. */
size_t tdl__stack_used(const tdl__stack *s);

/* Stash [from, top) of s (the frames of a parked fiber, from its saved
 * stack pointer up) in a heap copy sized to fit, into *copy, and give every
 * page of s back to the kernel (MADV_DONTNEED: they read as zeros until
 * written); the guard is left as it is.  Memcheck is told that nothing
 * lives below top now.  Returns 0, or -ENOMEM (nothing changed).
 * Cost: a malloc, a copy of top - from bytes, one madvise. */
int tdl__stack_stash(const tdl__stack *s, char *from, char *top, void **copy);

/* Put a stash back where it was, at the same addresses, and free the copy.
 * Cost: a page fault per page written, the copy, a free. */
void tdl__stack_unstash(char *from, char *top, void *copy);

/* Counters for this pool and the process-wide guard budget. */
void tdl__stack_pool_stats(const tdl__stack_pool *p, tdl__stack_stats *out);

#endif /* TDL_STACK_H */
