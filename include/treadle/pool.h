/* SPDX-License-Identifier: MIT */
/*
 * Blocking work off the loop: a process-wide pool of threads.  Include
 * <treadle.h>.
 *
 * A fiber that calls something that blocks (a file read that misses the
 * page cache, a name lookup, a library that does its own I/O) stalls every
 * fiber of its loop.  tdl_pool_call runs such a call on a pool thread and
 * parks only the calling fiber; the result comes back through the fiber's
 * loop (a post to its port: a wake-up only if that loop sleeps).
 *
 *   static void *slow(void *arg) { return (void *)(intptr_t)compress(arg); }
 *   void *r;
 *   int e = tdl_pool_call(TDL_LANE_USER, slow, buf, NULL, &r, tdl_after(5 * TDL_SEC));
 *
 * The pool is elastic, by this rule: a thread is started only for work that
 * is queued and that no thread is already on its way to take (an idle
 * thread, woken or not, or one just started or just finished): at once
 * while fewer threads exist than the CPUs (at least 4); beyond that, once
 * the oldest queued work has waited 500 us (every thread is busy with
 * something slow), at most doubling the count every 500 us; never above
 * max_threads.  So N calls in flight at once never start more than N
 * threads, and calls that finish quickly are run back to back by a few.  A
 * thread idle for idle_exit (default 5 s) exits.
 *
 * The default cap is 64 threads, and 32 for host names.  Go starts a
 * thread per blocked system call without bound, tokio's blocking pool
 * allows 512, libuv 4.  4 is too few for work that blocks (libuv's own
 * users see DNS lookups hold up file reads); hundreds buy nothing here:
 * work that computes gains nothing past the CPU count, and work that waits
 * on a disk or a DNS server gains only while the device answers more
 * requests in parallel, which for a disk or a resolver is tens, not
 * hundreds, while each thread costs a kernel task and a 256 KiB stack.
 * tdl_pool_configure raises it for a program that knows better.
 *
 * Work goes in lanes, each with a cap on the threads it
 * may hold at once, so that one kind cannot starve another: TDL_LANE_USER
 * (your work), TDL_LANE_FILE (fs.h's file calls), TDL_LANE_NAME (host
 * names; at most half the threads by default: a slow DNS server must not
 * hold up file reads).  Within a lane, work starts in the order it came.
 *
 * A deadline that passes or a cancel returns -ETIMEDOUT / -ECANCELED to the
 * fiber at once.  Work not yet started is then skipped; work already running
 * cannot be stopped (it is a plain call on another thread): it finishes in
 * the background and its result is dropped.  Until then fn owns its
 * argument: do not pass pointers into the fiber's stack to work that may be
 * abandoned.  The `drop` function of tdl_pool_call, if given, frees the
 * argument: it is called exactly once for every call that does not return
 * 0 — at once when the call failed before handing the work over, after fn
 * has run (or been skipped) when the fiber left early (then on the caller's
 * loop, or on the pool thread if that loop is gone).  On 0 the argument is
 * the caller's again.
 *
 * fork(): the child starts with an empty pool (the parent's threads do not
 * exist there); work queued in the parent is not run in the child.  The
 * child may use the pool again; the pool's lock is taken around fork() so
 * that the child never inherits it held.
 *
 * At process exit, work still running is simply abandoned with its threads,
 * unless tdl_pool_shutdown has ended them (below): then a program that used
 * the pool ends with no thread of it left, which valgrind wants.
 */
#ifndef TREADLE_POOL_H
#define TREADLE_POOL_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tdl_lane {
  TDL_LANE_USER = 0, /* the program's own work */
  TDL_LANE_FILE = 1, /* file calls (fs.h) */
  TDL_LANE_NAME = 2, /* host names */
} tdl_lane;
#define TDL_LANES 3

typedef struct tdl_pool_options {
  unsigned max_threads;        /* 0: 64 (see above) */
  tdl_time_t idle_exit;        /* a thread idle this long exits; 0: 5 s */
  unsigned lane_max[TDL_LANES]; /* threads a lane may hold at once; 0: max_threads
                                   (TDL_LANE_NAME: max_threads / 2, at least 1) */
} tdl_pool_options;

/* Set the pool's limits.  THREAD-SAFE; takes effect for work submitted
 * afterwards (lowering the cap does not stop threads that run).  It also
 * opens a pool that tdl_pool_shutdown closed.  Errors: -EINVAL (NULL, a
 * lane's cap above max_threads). */
TDL_API int tdl_pool_configure(const tdl_pool_options *opts);

/*
 * From a fiber: run fn(arg) on a pool thread in `lane` and park until it
 * returns; its return value goes to *result (may be NULL).
 * Returns 0; -ETIMEDOUT or -ECANCELED (the fiber went on: see above);
 * -EPERM (outside a fiber); -EINVAL (fn NULL, an unknown lane); -ENOMEM;
 * -EAGAIN (no thread exists and none could be started); -ESHUTDOWN (the
 * pool is shut down, or was shut down before a thread took the work: fn
 * did not run).  A deadline already
 * past returns -ETIMEDOUT without running fn.  On every error drop (NULL:
 * none) gets arg exactly once, now or once fn has run or been skipped.
 * Cost: one allocation; a lock and, when a thread sleeps, a futex wake; the
 * way back is a post to the fiber's loop.
 */
TDL_API int tdl_pool_call(tdl_lane lane, void *(*fn)(void *arg), void *arg, void (*drop)(void *arg),
                          void **result, tdl_time_t deadline);

/*
 * End the pool: wait for its work and join every thread it started, so
 * that none is left when the program exits (call it at the end of main).
 * At once: the pool is closed, and every call made afterwards fails with
 * -ESHUTDOWN (tdl_pool_call, and the fs.h and dns.h calls that need a pool
 * thread, libtreadle-hook's name lookups included); work queued and not
 * started is skipped (fn never runs), its caller woken with -ESHUTDOWN and
 * its argument given to drop.  Work that runs is waited for until the
 * deadline, and every thread joined once it has exited.
 * Returns 0 when no pool thread is left; -ETIMEDOUT when work still runs at
 * the deadline: the pool stays closed, its threads exit as their work ends,
 * and another call waits for them again (the idle ones are joined
 * already).  Calling it again after 0 does nothing and returns 0.
 * -EPERM: called in a loop (a fiber's or a callback's thread, inside
 * tdl_loop_run), which it would stop while it waits, and whose calls it
 * may be waiting for; -EDEADLK: called from pool work, which would wait
 * for itself.
 * tdl_pool_configure opens the pool again (its threads start as work
 * comes, as at first use); the child of a fork() inherits the pool closed
 * or open as it was in the parent.
 * THREAD-SAFE: concurrent calls each wait for the end (one of them joins).
 * Cost: a lock; the joins.
 */
TDL_API int tdl_pool_shutdown(tdl_time_t deadline);

typedef struct tdl_pool_stats {
  unsigned threads;            /* started and not exited */
  unsigned idle;               /* of those, waiting for work */
  unsigned max_threads;
  unsigned queued[TDL_LANES];  /* waiting for a thread */
  unsigned running[TDL_LANES];
  uint64_t done;               /* calls finished (or skipped), ever */
  uint64_t started_threads;    /* threads started, ever */
} tdl_pool_stats;

/* The pool's counts at one moment; the same counts as tdl_metrics_process's
 * pool_* fields (metrics.h).  THREAD-SAFE. */
TDL_API void tdl_pool_stats_get(tdl_pool_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_POOL_H */
