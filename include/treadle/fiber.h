/* SPDX-License-Identifier: MIT */
/*
 * Fibers: lightweight threads that block cheaply.  Include <treadle.h>.
 *
 * A fiber is a function running on its own small stack, scheduled by its
 * loop's thread.  When it calls a blocking treadle function (tdl_read,
 * tdl_sleep, tdl_chan_recv, ...) and the call cannot complete at once, the
 * fiber parks and the loop runs other fibers and callbacks until the fd is
 * ready, the deadline passes, or something wakes it.  A switch between fibers
 * saves and restores a few registers; no system call is made.
 *
 * Scheduling: runnable fibers run in FIFO order; a fiber that yields goes to
 * the back.  A fiber runs until it blocks or yields: there is no preemption.
 * To keep one busy fiber from starving the rest, a fiber that makes 64
 * treadle I/O calls in a row without blocking (whether they succeed or fail)
 * yields once (a call made with MSG_DONTWAIT never switches: fd.h; the
 * yield then comes with the fiber's next call that may).
 *
 * Blocking calls and deadlines: every blocking call takes an absolute
 * deadline (TDL_FOREVER = none; tdl_after(delay) makes one from a delay).  A
 * call whose deadline passes returns -ETIMEDOUT and leaves the fd or object
 * usable; a deadline already past still lets a call that need not wait
 * succeed.  A call on a cancelled fiber returns -ECANCELED.  A blocking call
 * made outside a fiber (from main before the loop runs, or from a callback)
 * returns -EPERM at once; it never blocks the thread.  (The exceptions are
 * process.h's tdl_process_wait and tdl_process_run, which outside a fiber
 * block the calling thread, as documented there.)
 *
 * Time: in a fiber, tdl_now() is its loop's cached time (loop.h), read once
 * per turn of the loop, between the runs of its fibers: it does not move
 * while a fiber runs, so timing work that never parks takes
 * tdl_loop_update_time(tdl_fiber_loop()) before each tdl_now().
 *
 * Handles: a tdl_fiber_t names a fiber until it has been joined, or has
 * finished after being detached; then the handle is stale and every call
 * given it returns -ESRCH (handles are never reused for another fiber).
 *
 * Threads: a fiber runs on its loop's thread from its first instruction to
 * its end.  One spawned into a group (tdl_group_spawn, group.h) is placed
 * by the group and may start on any of its loops: it may assume nothing
 * about its thread until it starts, and from then on that it stays.
 *
 * Cancellation is sticky: after tdl_fiber_cancel(), the fiber's current and
 * every later blocking call returns -ECANCELED, so that it unwinds; calls
 * that do not block (tdl_close, tdl_fiber_yield) still work.  What the fiber
 * was waiting in is let go at once: an fd it waited on can be read or
 * written by the canceller right away (no -EBUSY until the fiber runs).  A
 * cancelled fiber may still join fibers that are cancelled too, so that it
 * can collect what it started (see tdl_fiber_join).
 */
#ifndef TREADLE_FIBER_H
#define TREADLE_FIBER_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t tdl_fiber_t;

/* Private: something the running fiber holds that must be given back if it
 * finishes holding it (a mutex, a once-function it runs, its fiber-local
 * values).  Linked into the fiber; when the fiber finishes, run(c) is called
 * for each one still linked, the most recently linked first. */
typedef struct tdl__cleanup {
  tdl__list link;
  void (*run)(struct tdl__cleanup *c);
} tdl__cleanup;
typedef void *(*tdl_fiber_fn)(void *arg);

/* Stack sizes are rounded up to whole pages.  The fiber's control block and
 * a cache colour take up to 1.5 KiB of the top. */
#define TDL_STACK_DEFAULT ((size_t)64 * 1024)
#define TDL_STACK_MIN ((size_t)16 * 1024)
#define TDL_STACK_MAX ((size_t)1 << 30)

typedef struct tdl_fiber_options {
  const char *name;  /* for diagnostics; copied (up to 23 bytes). NULL: none */
  size_t stack_size; /* 0: TDL_STACK_DEFAULT */
  bool detached;     /* start detached (as tdl_fiber_detach at once): it
                        releases itself when it finishes; never join it */
} tdl_fiber_options;

/*
 * Start fn(arg) as a new fiber of loop; it first runs on the loop's next
 * iteration (or at the caller's next blocking call or yield, when the caller
 * is a fiber of the same loop).  *out (may be NULL) receives its handle;
 * most servers start each connection's fiber with .detached = true and pass
 * NULL.
 * Errors: -EINVAL (stack size below TDL_STACK_MIN or above TDL_STACK_MAX, or
 * fn NULL); -ENOMEM (no memory for the stack; nothing is left behind).
 * Cost: no system call with a stack from the loop's cache (see
 * tdl_fiber_stats); a new stack costs an mmap, an mprotect for its guard and
 * a page fault.
 *
 * Stacks: each has a PROT_NONE guard page below it, so an overflow stops the
 * process with a message naming the fiber instead of corrupting memory.  The
 * kernel allows only so many separate mappings (vm.max_map_count): past a
 * quarter of that limit (16,382 fibers with Linux's default), new stacks are mapped
 * without a guard, so that 100,000 and more fibers still fit; an overflow
 * of such a stack goes undetected.  tdl_fiber_stats_get() reports how many.
 */
TDL_API int tdl_fiber_spawn(tdl_fiber_t *out, tdl_loop *loop, tdl_fiber_fn fn, void *arg,
                            const tdl_fiber_options *opts);

/* The running fiber's handle, or 0 outside a fiber. */
TDL_API tdl_fiber_t tdl_fiber_self(void);
/* The loop of the running fiber, or NULL outside a fiber. */
TDL_API tdl_loop *tdl_fiber_loop(void);

/* Let every other runnable fiber run once, then continue.  Returns 0, or
 * -EPERM outside a fiber. */
TDL_API int tdl_fiber_yield(void);

/* End the running fiber with `result` (as if fn returned it).  Outside a
 * fiber it does nothing and returns. */
TDL_API void tdl_fiber_exit(void *result);

/* Wait until fiber f finishes; store its result in *result (may be NULL) and
 * release it (its handle becomes stale).  On a cancelled fiber, join still
 * waits (until the deadline) for an f that is itself cancelled, since f is
 * unwinding; cancel your fibers, then join them, and nothing is left behind.
 * Joining an f that is not cancelled from a cancelled fiber fails with
 * -ECANCELED (it might never end): cancel or detach it.
 * Errors: -EPERM outside a fiber; -ESRCH (stale handle: already joined, or
 * detached and finished); -EINVAL (f is detached, or of another loop);
 * -EDEADLK (f is the caller); -EBUSY (another fiber is joining f);
 * -ETIMEDOUT (f keeps running and stays joinable); -ECANCELED. */
TDL_API int tdl_fiber_join(tdl_fiber_t f, void **result, tdl_time_t deadline);
/* (Join is only for fibers: it parks.  f must be of the caller's loop.) */

/* Let f release itself when it finishes; its handle must not be joined.
 * Callable from anywhere on the loop's thread.
 * Errors: -ESRCH (stale, or not a fiber of loop), -EINVAL (already detached). */
TDL_API int tdl_fiber_detach(tdl_loop *loop, tdl_fiber_t f);

/* Cancel f (see "Cancellation" above).  Cancelling twice is harmless.
 * Callable from anywhere on the loop's thread.
 * Errors: -ESRCH when f has already finished, is stale, or not of loop. */
TDL_API int tdl_fiber_cancel(tdl_loop *loop, tdl_fiber_t f);

/*
 * Park and unpark: the scheduler's own wake-up, for building your own
 * primitives.  Each fiber holds at most one wake-up permit.
 * tdl_fiber_park() consumes the permit and returns 0 at once if there is one;
 * otherwise it parks until tdl_fiber_unpark(), the deadline (-ETIMEDOUT) or a
 * cancel (-ECANCELED).  -EPERM outside a fiber.
 * tdl_fiber_unpark() wakes f if it is parked in tdl_fiber_park(), else gives
 * it the permit (a wake-up before the park is not lost; several collapse into
 * one).  Callable from anywhere on the loop's thread.  Errors: -ESRCH (stale,
 * finished, or not of loop).  Cost: a queue push; the hand-off is one
 * register switch.
 */
TDL_API int tdl_fiber_park(tdl_time_t deadline);
TDL_API int tdl_fiber_unpark(tdl_loop *loop, tdl_fiber_t f);

/* Whether the running fiber has been cancelled. */
TDL_API bool tdl_fiber_cancelled(void);

/* Give main() to treadle: make a loop, run fn(arg) as its first fiber and the
 * loop until nothing is left, store fn's result in *result (may be NULL, and
 * is set only when 0 is returned), free the loop.  Fibers that finished
 * without being joined or detached are released at the end.
 * Returns 0, a tdl_loop_new() or tdl_fiber_spawn() error, or -EDEADLK when
 * fibers were left parked with nothing that could ever wake them: those are
 * then cancelled (their blocking calls return -ECANCELED) and run until they
 * end, and the loop is freed.  Only a fiber that goes on waiting after it is
 * cancelled keeps the loop and its stacks: that one leak is the price of not
 * freeing a stack a fiber still runs on. */
TDL_API int tdl_fiber_main(tdl_fiber_fn fn, void *arg, void **result);

/* ---- sleeping ---- */

/* Park until the deadline.  Returns 0, -ECANCELED, or -EPERM. */
TDL_API int tdl_sleep(tdl_time_t deadline);

/* ---- fiber-local storage ---- */

typedef unsigned tdl_fls_key_t;
#define TDL_FLS_KEYS 16

/* Make a key (process-wide; at most TDL_FLS_KEYS).  dtor, if not NULL, is
 * called with a fiber's non-NULL value when that fiber finishes.  A key is
 * an index, not memory: it lasts as long as the process, and there is no
 * free.  Errors: -EAGAIN when all keys are taken. */
TDL_API int tdl_fls_key_new(tdl_fls_key_t *key, void (*dtor)(void *));
/* A fiber's first value takes a small allocation (its values live off its
 * control block until then).  Errors: -EPERM outside a fiber; -EINVAL for a
 * key never created; -ENOMEM for the first value without memory (setting
 * NULL then cannot fail). */
TDL_API int tdl_fls_set(tdl_fls_key_t key, void *value);
/* NULL outside a fiber or when unset. */
TDL_API void *tdl_fls_get(tdl_fls_key_t key);

/* ---- looking inside ---- */

typedef struct tdl_fiber_info {
  tdl_fiber_t handle;
  uint64_t id;           /* small number for people, in spawn order */
  const char *name;      /* "" when unnamed */
  const char *state;     /* "running", "runnable", "parked", "finished" */
  const char *waits_on;  /* what a parked fiber waits for ("read", "sleep", "chan"...) or "" */
  int fd;                /* the fd it waits on, or -1 */
  tdl_time_t deadline;   /* its deadline, or TDL_FOREVER */
  size_t stack_size;     /* usable bytes */
  size_t stack_used;     /* high-water mark: bytes of the stack ever touched (page granular);
                            a stack reused from the loop's cache counts what its earlier
                            fibers touched too, until the cache's trim returns it */
  bool guarded;          /* its stack has a guard page */
} tdl_fiber_info;

/* Call fn for every fiber of loop that has not been released; stop early when
 * fn returns non-zero.  Returns the number of fibers visited. */
TDL_API int tdl_fiber_foreach(tdl_loop *loop, int (*fn)(const tdl_fiber_info *info, void *ctx), void *ctx);
/* Write one line per fiber to fd (e.g. 2), async-unsafe but allocation-free. */
TDL_API int tdl_fiber_dump(tdl_loop *loop, int fd);

/*
 * A dump on a signal: from then on, each time signo arrives, every loop's
 * fibers are written to fd, in the words of tdl_fiber_dump, each fiber that
 * is not running followed by its call chain, and the program goes on (Go's
 * SIGQUIT, without the exit):
 *
 *   treadle dump (signal 3): 2 loops
 *   loop 0x5581b2d4e2a0 (epoll): 2 fibers
 *       fiber 1 "main" parked on join stack 8192/65536 guarded
 *           #0 0x7f3a4c21a9e1 ?? (/usr/lib/libtreadle.so.2+0x1b9e1)
 *           #1 0x7f3a4c21b2c7 tdl_fiber_join+0x87 (/usr/lib/libtreadle.so.2+0x1c2c7)
 *           #2 0x5581b2c3d1f0 serve+0x40 (/usr/bin/server+0x21f0)
 *       fiber 2 "conn" parked on read fd 7 stack 4096/65536 guarded
 *           ...
 *   loop 0x5581b2d51f00 "net-2": did not answer within 1000.0 ms: away from its poll for 2310.4 ms, in fiber 4 "crunch"
 *   treadle dump: end
 *
 * A frame is named when its module exports the function (a program's own
 * functions need -rdynamic, CMake's ENABLE_EXPORTS, to be seen); always
 * with its module and the offset in it, which `addr2line -f -e module
 * offset` turns into a function and a line (static functions too).
 *
 * How.  The handler only writes a byte to a pipe.  A thread of treadle's
 * (started here, every signal blocked) then asks each loop, through its
 * port, to write its own block from its own thread, between two iterations:
 * there no fiber runs, and each one's saved context gives its chain.  Blocks
 * are written whole, one after another.  A loop that does not answer within
 * a second (stuck in a fiber or a callback, or not in tdl_loop_run) gets one
 * line saying so, with what its watchdog knows when it is watched
 * (tdl_watchdog_start); the dump never waits longer.  Signals that arrive
 * during a dump make one more dump, after it.
 *
 * Which loops.  Every loop with fibers that has a port: a group's loops, a
 * loop that used a port or a wakeup, and every loop whose first fiber is
 * spawned while the dump is armed (so arm it first thing in main); the
 * header counts the others.
 *
 * Call chains are walked from frame pointers, inside each fiber's own stack
 * (never outside it, at most 32 frames).  A library built without them
 * (TDL_FRAME_POINTERS=OFF, the Release default) writes the fibers without
 * chains, and says once in the header that chains need them; code of the
 * program built without frame pointers cuts a chain short.
 *
 * signo 0 turns it off (fd is then ignored) and gives the signal back its
 * earlier action; arming again replaces signal and fd.  The signal's earlier
 * action is replaced while armed: the program's own handler of it does not
 * run.  A loop that watches the same signal (tdl_signal_start) blocks it
 * in its thread: block it in every thread, and nothing dumps.  After fork()
 * the child has it off (the signal is ignored there) until it arms it anew.
 * fd must stay open while armed; writes that fail are dropped, and a write
 * that blocks (a full pipe) holds up the loop writing its block.
 *
 * THREAD-SAFE; not async-signal-safe.
 * Errors: -EINVAL (signo not a signal, or one that cannot be used: SIGKILL,
 * SIGSTOP, the faults SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS and
 * SIGABRT, SIGPIPE, SIGCHLD, a signal the C library keeps for itself, or
 * the watchdog's (loop.h)); -EBADF (fd not open for writing); -EAGAIN (the
 * thread could not be started); -EMFILE/-ENFILE (the pipe).  On an error
 * nothing changed.
 * Cost: the first call starts a thread and makes a pipe; a dump allocates
 * one request per loop (on treadle's thread) and costs each loop one post.
 */
TDL_API int tdl_fiber_dump_on_signal(int signo, int fd);

typedef struct tdl_fiber_stats {
  size_t live;             /* fibers not yet released */
  size_t unguarded;        /* of their stacks, how many have no guard page */
  size_t stacks_cached;    /* stacks kept for reuse: those of recently ended fibers, as they
                              were (no system call on exit); once a second the loop unmaps
                              half of those that stayed unused through the whole second, so
                              the cache follows recent demand and an idle loop keeps none */
} tdl_fiber_stats;
/* loop's fiber and stack counts, at this moment; the same counts as
 * tdl_metrics_loop's fibers and stacks (metrics.h).  Cost: O(1). */
TDL_API void tdl_fiber_stats_get(tdl_loop *loop, tdl_fiber_stats *out);

/* ---- compacting idle fibers ---- */

/*
 * Make loop compact its idle fibers: a fiber parked for longer than
 * threshold has the used top of its stack copied to a heap block sized to
 * fit, and its stack's pages given back to the kernel; when it wakes, the
 * copy is put back at the same addresses before it runs, so pointers into
 * its stack (a buffer passed to tdl_read) stay valid.  An idle fiber parked
 * in tdl_read then costs its control block and that copy instead of a 4 KiB
 * page (docs/PERFORMANCE.md, idle, has the figures).  threshold 0 turns
 * compacting off (the default): fibers already compacted are restored as
 * they wake.  Callable from anywhere on the loop's thread.
 *
 * Which fibers: only those spawned on loop while the option is on (their
 * control block is then on the heap, not on their stack), and only while
 * parked in
 *   - tdl_sleep and tdl_fiber_park;
 *   - fiber I/O that waits for readiness (tdl_read, tdl_write, tdl_recv,
 *     tdl_send, tdl_fd_wait and the other calls of fd.h and net.h that wait
 *     for an fd, on an epoll or poll loop; on a uring loop, only where an
 *     operation fell back to a readiness wait).
 * Never while parked in a ring operation of a uring loop (the kernel may
 * write into a buffer on the stack meanwhile), in a channel, lock, select,
 * condition, join, or a call on another thread (tdl_port_call, the pool,
 * fs.h): others write into records or values on the fiber's stack there.
 * A fiber is compacted between one and two thresholds after it parked.
 *
 * While compacted, the fiber's stack memory reads as zeros and writes to it
 * are lost: a fiber must not have lent a buffer on its own stack to another
 * thread, a callback or another fiber that uses it while the fiber waits in
 * one of the calls above (treadle's own calls never do).  Its frames are not
 * on its stack then: a debugger shows no backtrace of it (the gdb script
 * lists it as "compacted").
 *
 * Cost: without the option, none that can be measured (a flag test where
 * tdl_fiber_unpark, a deadline, a cancel or fd readiness wakes a fiber).
 * With it: the loop wakes once a threshold and walks its fibers; a
 * compaction costs a malloc, a copy of the frames and an madvise; the
 * wake-up of a compacted fiber a page fault, a copy and a free (bench/run.py
 * idle: wake_ns, compacted against not).  Fibers spawned while it is on have
 * their control block on the heap (one allocation more per spawn); those
 * that wait where they are not compacted (a channel receive) then cost more
 * than without the option: the block, and the stack's page as before.
 * Errors: -EINVAL for a threshold below 1 ms (TDL_MSEC) other than 0;
 * -ENOMEM; a tdl_timer_start error.
 */
TDL_API int tdl_fiber_compact_idle(tdl_loop *loop, tdl_time_t threshold);

/* Whether f is compacted now: the bytes of its stack held in its heap copy
 * (> 0), or 0 when its stack is in place.  Callable from anywhere on the
 * loop's thread.  Errors: -ESRCH (stale, or not a fiber of loop). */
TDL_API int tdl_fiber_compacted(tdl_loop *loop, tdl_fiber_t f);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_FIBER_H */
