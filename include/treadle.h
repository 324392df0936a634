/* SPDX-License-Identifier: MIT */
/*
 * treadle: fibers over a scalable I/O and timer manager, for C.
 *
 * This header states the rules that every treadle header follows, and
 * includes them all: loop.h (the event loop), fiber.h (fibers), fd.h (fiber
 * I/O), sync.h (channels, select, locks), net.h (sockets), process.h
 * (programs), group.h (several loops), pool.h (blocking work), fs.h (files),
 * dns.h (host names) and metrics.h (snapshots of loops and the process).  hook.h (libtreadle-hook) is included by none:
 * a program needs nothing from it to be hooked.
 *
 * NAMES
 *   Public names start with tdl_ (TDL_ for macros); internal ones with tdl__,
 *   and nothing else is exported.  A function is tdl_<noun>_<verb>: the noun
 *   is the object it acts on, named as its type (tdl_loop_run, tdl_chan_send,
 *   tdl_mutex_lock).  Each header owns its nouns, and include/treadle/X.h is
 *   built by src/X/ alone; the two calls that a higher layer adds to a lower
 *   one's noun are declared in the higher one's header (tdl_port_call and
 *   tdl_port_spawn, in group.h).  Without a noun: the fiber forms of the
 *   POSIX calls they are named after (tdl_read, tdl_write, tdl_readv,
 *   tdl_writev, tdl_recv, tdl_send, tdl_recvfrom, tdl_sendto, tdl_close,
 *   tdl_sleep), and tdl_now, tdl_after, tdl_select, tdl_try_select,
 *   tdl_strerror, tdl_version and the events TDL_READ, TDL_WRITE, TDL_ERR,
 *   TDL_HUP.
 *   Struct and enum types are the bare noun (tdl_loop, tdl_timer); integers
 *   that are values or handles end in _t (tdl_time_t, tdl_fiber_t,
 *   tdl_fls_key_t).  A function type ends in _cb when a loop calls it
 *   because something happened (tdl_timer_cb), in _fn when treadle runs it as
 *   work for you (tdl_fiber_fn, tdl_acceptor_fn).  The form of a call that
 *   never waits, where the plain one would, is try_<verb> (tdl_chan_try_recv,
 *   tdl_mutex_try_lock, tdl_sem_try_acquire, tdl_try_select).
 *   "Hook" means libtreadle-hook and nothing else; the callbacks a loop runs
 *   around its poll are observers (loop.h).
 *
 * ACROSS LOOPS
 *   Three words, each for one thing:
 *   - port: a loop's mailbox for other threads (loop.h).  tdl_port_post runs
 *     a callback there; from a fiber, tdl_port_call runs a function there
 *     and waits for its result, and tdl_port_spawn starts a fiber there
 *     (group.h);
 *   - shared: an object that fibers of several loops use at once, made by a
 *     _shared constructor (tdl_chan_new_shared, tdl_sem_init_shared,
 *     tdl_waitgroup_init_shared), or a broadcast (tdl_bcast_new), which is
 *     always shared; every call on it is THREAD-SAFE;
 *   - group: N loops run on N threads, started and stopped together
 *     (group.h).
 *
 * PARAMETERS
 *   A call that makes something (a handle that the caller must later free,
 *   destroy, release, join or reap) takes where it goes first:
 *   tdl_loop_new(&loop, opts), tdl_fiber_spawn(&f, loop, fn, arg, opts),
 *   tdl_process_run(&result, argv, ...).  Every other call takes first the
 *   object it acts on (a call on a loop's handle: the loop, then the handle,
 *   as in tdl_timer_start(loop, t, ...)), then its inputs and buffers (in the
 *   order of the system call it stands for, where there is one), then where
 *   its results go, and the deadline last.  Options come as a struct by
 *   pointer: NULL, or a zero-filled field, means the default.  Flags are an
 *   unsigned set of TDL_<NOUN>_* bits.
 *   Two arguments passed in each other's place do not compile, where their
 *   types can tell them apart: in C11 and later with GCC or clang, each
 *   function with such parameters is also a macro of its own name that
 *   checks its arguments' types before the call (C compilers only warn
 *   about most swaps, and say nothing about a void * in a function
 *   pointer's place).  A pointer is refused where a number goes, a number
 *   other than 0 where a pointer goes, a pointer to something else where a
 *   typed pointer goes (a void * and NULL pass), and a data pointer where
 *   options or a function go, the call's own function type where its data
 *   goes.  Two numbers (a size and a deadline: tdl_time_t is an int64_t),
 *   two strings, or a void * that was swapped with a typed pointer still
 *   compile: tests/api/swaps.txt lists every pair of neighbouring
 *   parameters either way.  The functions themselves are unchanged:
 *   &tdl_fiber_spawn and (tdl_fiber_spawn)(...) bypass the macro, and
 *   TDL_NO_ARG_CHECKS, defined before the include, leaves the macros out
 *   (C++ refuses those swaps by itself and gets none).  A compound literal
 *   with commas (&(tdl_fiber_options){.name = "w", .detached = true})
 *   leaves only the arguments before it checked.
 *
 * MAKING AND TEARING DOWN
 *   tdl_X_new(&x, ...) allocates, and tdl_X_free(x) frees (NULL: nothing to
 *   do).  tdl_X_init(x, ...) sets up an object in the caller's memory (where
 *   there is a TDL_X_INIT, a zero-filled or TDL_X_INIT object is ready too),
 *   and tdl_X_destroy(x) gives back what it holds and leaves the memory to
 *   the caller.  An _init that cannot fail returns void.  A started handle
 *   (a watcher, a timer...) is stopped with tdl_X_stop; a fiber is joined or
 *   detached; a port reference is released.
 *   A free or destroy that cannot be done now, because the object is in use
 *   (a fiber waits on it, holds it, or was woken by it and has not left it
 *   yet), fails with -EBUSY and changes nothing: end the use first (close
 *   the channel, stop the watcher, join the fiber), then free.
 *
 * ERRORS
 *   A function that can fail returns an int: 0 (or a non-negative count or
 *   fd) on success, a negative errno value on failure (-EBADF, -ENOMEM,
 *   -ETIMEDOUT, ...); one that cannot fail returns void or its value.  errno
 *   is never read back by the caller, and treadle never relies on it
 *   surviving a call: it is thread-local state that fibers sharing one
 *   thread would clobber.  tdl_strerror() names an error.  No treadle
 *   function prints, aborts or exits because of what a caller passed in.  A
 *   callback is never called when the call that registered it failed.
 *
 * TIME
 *   tdl_time_t is a point on CLOCK_MONOTONIC in nanoseconds, the one clock of
 *   treadle.  Every call that can wait takes an absolute deadline on it as
 *   its last parameter (TDL_FOREVER: none) and returns -ETIMEDOUT when it
 *   passes; a deadline already past still lets a call that need not wait
 *   succeed.  No call that waits takes a delay.  tdl_now() is the one reader
 *   of the clock: inside a loop (in a callback or a fiber) it is the loop's
 *   cached time, which costs no system call and is what the loop's timers
 *   count from; elsewhere, the clock itself.  tdl_after(delay) makes a
 *   deadline from it.
 *
 * THREADS
 *   A loop, and every watcher, timer and fiber on it, belongs to the thread
 *   that created it (tdl_loop_new), which is the one to run it.  The only
 *   calls that may be made from another thread are marked THREAD-SAFE.
 *   Builds with TDL_DEBUG_CHECKS detect a loop used from a foreign thread and
 *   fail the call with -EPERM.  A fiber never changes thread once it has
 *   started; one spawned into a group (tdl_group_spawn, group.h) may start on
 *   any of the group's loops, and from its start stays there.
 *
 * MEMORY
 *   Watchers, timers and other handles are structs that the caller owns and
 *   treadle links intrusively: nothing is allocated per timer or per watcher.
 *   A handle must stay valid (not moved or freed) while it is started.
 *   Fields of public structs are private unless their header says otherwise:
 *   the structs are public so that they can live in the caller's memory.
 *
 * COMPATIBILITY
 *   The version is TDL_VERSION_MAJOR.MINOR.PATCH (below).  Within one MAJOR,
 *   the ABI of libtreadle.so only grows: no function, type layout (private
 *   fields included), constant or documented behaviour changes or goes, so
 *   that a program built against an older MINOR runs with a newer library.
 *   A change that breaks that makes a new MAJOR, and a new SONAME
 *   (libtreadle.so.MAJOR).  CHANGELOG.md says what each version changed.
 *
 * FORK
 *   To start a program, use tdl_process_spawn (process.h): it copies nothing
 *   and may be called from any fiber, callback or thread.  A process with
 *   loops, fibers, pool threads and groups may still fork(); the child has
 *   only the thread that called it, and there:
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

/* The version of these headers (CHANGELOG.md says what each one changed).
 * MAJOR changes when the ABI breaks, and with it the library's SONAME
 * (libtreadle.so.MAJOR); MINOR when names are added; PATCH for fixes.
 * TDL_VERSION_HEX orders versions: 0xMMmmpp. */
#define TDL_VERSION_MAJOR 2
#define TDL_VERSION_MINOR 0
#define TDL_VERSION_PATCH 0
#define TDL_VERSION_HEX ((TDL_VERSION_MAJOR << 16) | (TDL_VERSION_MINOR << 8) | TDL_VERSION_PATCH)

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

/* The version of the library the program runs with (which may be newer
 * than the headers it was built with, within one MAJOR), as
 * TDL_VERSION_HEX, and as "MAJOR.MINOR.PATCH". */
TDL_API unsigned tdl_version(void);
TDL_API const char *tdl_version_string(void);

#ifdef __cplusplus
}
#endif

#include "treadle/loop.h"
#include "treadle/fiber.h"
#include "treadle/fd.h"
#include "treadle/process.h"
#include "treadle/sync.h"
#include "treadle/net.h"
#include "treadle/group.h"
#include "treadle/pool.h"
#include "treadle/fs.h"
#include "treadle/dns.h"
#include "treadle/metrics.h"
/* Last: the argument checks (PARAMETERS), macros over the functions above
 * and tls.h's. */
#include "treadle/private/checks.h"

#endif /* TREADLE_H */
