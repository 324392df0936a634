/*
 * libtreadle-hook: unmodified blocking C code inside fibers.
 *
 * A separate library, libtreadle-hook.so, that defines read, write, connect,
 * poll, close, ... ahead of libc (link it before libc, which the linker does
 * for any library named on the command line, or LD_PRELOAD it, together
 * with libtreadle.so: never with a static libtreadle, which would be a
 * second treadle).  Inside a fiber, a call that would block the thread
 * parks the fiber instead, through treadle's fiber I/O; everything else is
 * passed to libc unchanged.  This header is not included by <treadle.h>: a
 * program needs nothing from it to be hooked.  It documents the behaviour
 * and declares the few control calls.
 *
 * WHAT IS INTERCEPTED, inside a fiber (tdl_fiber_self() != 0):
 *   read, write, readv, writev, recv, recvfrom, recvmsg, send, sendto,
 *   sendmsg, accept, accept4, connect   on a socket or pipe that the user
 *     left blocking: the call is tried; on EAGAIN the fiber parks until the
 *     fd is ready (tdl_wait_fd) and tries again.
 *   poll   tries at once; one socket or pipe parks on it; anything else
 *     (several fds, terminals, eventfds) is polled again at growing
 *     intervals (50 us to 5 ms) while the fiber sleeps.  The timeout is kept.
 *   sleep, usleep, nanosleep, clock_nanosleep (CLOCK_MONOTONIC and
 *     CLOCK_REALTIME)   tdl_sleep.  A cancelled fiber's sleep ends early
 *     with EINTR (nanosleep) or the time left (sleep).
 * Outside a fiber every call goes to libc as it came, with one exception
 * that keeps the user's semantics: on an fd the hook made non-blocking
 * underneath (below), a call that hears EAGAIN waits in poll(2) for the fd
 * and tries again, as the blocking fd would have.
 *
 * THE USER'S SEMANTICS ARE KEPT:
 *   Blocking fds.  The first hooked call on a blocking socket or pipe sets
 *     O_NONBLOCK on it underneath; fcntl(F_GETFL) hides that flag, and
 *     F_SETFL records the user's choice while keeping the flag set.  An fd
 *     the user made non-blocking (O_NONBLOCK, SOCK_NONBLOCK, or MSG_DONTWAIT
 *     on the call) passes straight through: EAGAIN is the user's to handle.
 *   Timeouts.  SO_RCVTIMEO and SO_SNDTIMEO set with setsockopt become the
 *     deadline of each call that waits (receiving, sending; connect uses
 *     SO_SNDTIMEO as Linux does); a call that runs out fails with EAGAIN
 *     (connect: EINPROGRESS), as on a blocking socket.  There is no timeout
 *     the user did not ask for.
 *   Connect on a blocking socket waits for the outcome and reports it
 *     (ECONNREFUSED, ...), as blocking connect does.
 *   close() of an fd the hook parked on drops treadle's state for it
 *     (tdl_close), so code that closes its own fds is safe; dup, dup2, dup3
 *     and F_DUPFD copy or reset the per-fd state of the new number; socket,
 *     socketpair, accept, accept4, pipe and pipe2 reset it.
 *   Errors.  A wait that is cancelled (tdl_fiber_cancel) fails with
 *     ECANCELED; an fd closed under a waiting fiber with EBADF.
 *
 * WHAT IS NOT:
 *   Regular files, directories and block devices pass through untouched
 *     (the kernel never says EAGAIN for them: use tdl_fs_* to keep a slow
 *     disk off the loop).  Terminals and other character devices too, except
 *     in poll.
 *   stdio (fread, fprintf, ...) and other libc internals call the kernel
 *     without going through these names, so they block the thread.
 *   Host names (getaddrinfo), select and pselect, ppoll: not yet.
 *   treadle itself never goes through the hooks (src/base/sys.h).
 *
 * LIMITS:
 *   A hooked fd is one file description: two fibers reading (or writing)
 *     the same blocking fd at once are served one at a time, the second
 *     looking again every millisecond (fiber I/O has one reader and one
 *     writer per fd).
 *   The per-fd state is process-wide and not locked: one fd used by fibers
 *     of two threads at once is not supported.  An fd closed by a path the
 *     hook does not see (tdl_close of a hooked fd from another thread,
 *     close_range, fclose) leaves its state until the number is reused by one
 *     of the calls above.
 *   fds above 2^20 pass through.
 *
 * Cost: outside a fiber, one thread-local read and, on fds the hook knows, a
 * table look-up.  Inside, the first call on an fd costs fstat and two
 * fcntl; later ones add a look-up to the system call.
 */
#ifndef TREADLE_HOOK_H
#define TREADLE_HOOK_H

#include <treadle.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the hooks are in place: 1 when libtreadle-hook is loaded and its
 * libc functions resolved, else -ENOSYS.  (Calling it is also how a
 * program linked with -Wl,--as-needed keeps the library.) */
TDL_API int tdl_libc_hook_active(void);

typedef struct tdl_libc_hook_stats {
  uint64_t parked;     /* waits that parked a fiber on an fd */
  uint64_t slept;      /* sleeps and poll naps turned into tdl_sleep */
  uint64_t fds_made_nonblocking; /* fds set O_NONBLOCK underneath */
} tdl_libc_hook_stats;
/* Process-wide counts since start (relaxed: approximate under threads). */
TDL_API void tdl_libc_hook_stats_get(tdl_libc_hook_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_HOOK_H */
