/*
 * treadle: fibers over a scalable I/O and timer manager, for C.
 *
 * CONVENTIONS (they hold for every function in every treadle header)
 *
 * Errors.  A function that can fail returns an int: 0 (or a non-negative
 *   count) on success, a negative errno value on failure (-EBADF, -ENOMEM,
 *   -ETIMEDOUT, ...).  errno is never read back by the caller and treadle never
 *   relies on it surviving a call: it is thread-local state that fibers sharing
 *   one thread would clobber.  tdl_strerror() names an error.  No treadle
 *   function prints, aborts or exits because of what a caller passed in.  A
 *   callback is never called when the call that registered it failed.
 *
 * Time.  tdl_time_t is a point on CLOCK_MONOTONIC in nanoseconds, the one
 *   clock of treadle.  Deadlines are absolute points on it; TDL_FOREVER (-1)
 *   means no deadline.  Every blocking call takes a deadline.  tdl_now() reads
 *   it and tdl_after(delay) turns a delay into a deadline, anywhere; inside a
 *   loop (a callback or a fiber) both use the loop's cached time, so arming a
 *   timeout costs no system call.
 *
 * Threads.  A loop, and every watcher, timer and fiber on it, belongs to the
 *   thread that created it (tdl_loop_new), which is the one to run it.  The only calls that may be made from another
 *   thread are marked THREAD-SAFE.  Builds with TDL_DEBUG_CHECKS detect a loop
 *   used from a foreign thread and fail the call with -EPERM.
 *
 * Memory.  Watchers, timers and other handles are structs that the caller owns
 *   and treadle links intrusively: nothing is allocated per timer or per
 *   watcher.  A handle must stay valid (not moved or freed) while it is started.
 *
 * Teardown.  One verb per kind of object: tdl_X_free() for what treadle
 *   allocated (tdl_loop_new, tdl_chan_new), which frees it; tdl_X_destroy()
 *   for what lives in the caller's memory (a tdl_mutex, a channel of
 *   tdl_chan_init_mem, a tdl_process, ...), which gives back what it holds
 *   and leaves the memory to the caller; tdl_X_stop() for a started handle.
 *   A free or destroy that cannot be done now (the object is in use) fails
 *   with -EBUSY and changes nothing.
 *
 * fork().  To start a program, use tdl_process_spawn (spawn.h): it copies
 *   nothing and may be called from any fiber, callback or thread.  A process
 *   with loops, fibers, pool threads and groups may still fork(); the child
 *   has only the thread that called it, and there:
 *   - exec (execve and friends) and async-signal-safe calls are allowed
 *     wherever fork() returned: in a fiber, in a callback, outside a loop;
 *   - everything inherited (loops with their fibers, watchers, timers,
 *     signals and ports; groups; watchdogs) is the parent's: it must not be
 *     run, used, stopped or freed, for it shares its epoll instance,
 *     eventfds and signalfds with the parent's loops.  So the child ends
 *     with exec or _exit and never goes back into the inherited loop (never
 *     returns from the fiber or callback that forked); the fiber that forked
 *     makes no blocking call (it would park on the inherited loop); and
 *     tdl_close() outside a fiber, which reaches every loop of the thread,
 *     is not given an inherited fd (close(2) is fine);
 *   - that thread may make new loops and run them, also from inside the
 *     fiber or callback that forked (tdl_fiber_main is the simplest).  In
 *     them fibers, timers, I/O watchers, fiber I/O and sockets (on new fds
 *     or inherited ones: a new loop watches them in its own back end, and
 *     its fibers' tdl_close touches no other loop), spawning, waiting and
 *     running programs, and the pool and files (pool.h: the pool starts
 *     again empty) work as in any process; not the watchdog, if loops were
 *     watched at the fork (it would watch them too, and report them
 *     stalled).  The pool starts threads, which the child of a
 *     multi-threaded parent may do with glibc and musl.
 *
 * Names.  Public names start with tdl_ (TDL_ for macros); nothing else is
 *   exported.
 */
#ifndef TREADLE_H
#define TREADLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TDL_BUILDING) && defined(__GNUC__)
#define TDL_API __attribute__((visibility("default")))
#else
#define TDL_API
#endif

#define TDL_VERSION_MAJOR 0
#define TDL_VERSION_MINOR 2
#define TDL_VERSION_PATCH 0

/* A point on the loop's monotonic clock, in nanoseconds. */
typedef int64_t tdl_time_t;

/* "No deadline": a wait with this deadline only ends when its event happens. */
#define TDL_FOREVER ((tdl_time_t)-1)
/* The largest representable deadline; later ones are clamped to it. */
#define TDL_TIME_MAX ((tdl_time_t)INT64_MAX)

/* Private: the link of treadle's intrusive lists (src/base/list.h), public
 * only so that caller-owned structs can embed it.  Zeroed = not in a list. */
typedef struct tdl__list {
  struct tdl__list *next, *prev;
} tdl__list;

#define TDL_USEC ((tdl_time_t)1000)
#define TDL_MSEC ((tdl_time_t)1000000)
#define TDL_SEC ((tdl_time_t)1000000000)

/* A static description of a negative treadle error code (or of a positive
 * errno).  Never NULL.  Cost: a table look-up. */
TDL_API const char *tdl_strerror(int err);

#ifdef __cplusplus
}
#endif

#include "treadle/loop.h"
#include "treadle/fiber.h"
#include "treadle/chan.h"
#include "treadle/process.h"
#include "treadle/sync.h"
#include "treadle/net.h"
#include "treadle/group.h"
#include "treadle/pool.h"
#include "treadle/fs.h"
#include "treadle/dns.h"

#endif /* TREADLE_H */
