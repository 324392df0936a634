/* SPDX-License-Identifier: MIT */
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
 *     fd is ready (tdl_fd_wait) and tries again.  After a read, readv or
 *     recv that returned less than it asked of a pipe or stream socket, the
 *     next one parks first (no read that would hear EAGAIN): it returns as
 *     soon as data is there, as a blocking read does.  recv and recvfrom
 *     with MSG_WAITALL on a stream socket wait for all of it (each wait
 *     under SO_RCVTIMEO), or return the count so far at the end of the
 *     stream, an error or a timeout; recvmsg with MSG_WAITALL returns what
 *     one receive got (not gathered).  write, send and sendto
 *     return once all of the buffer went, as on a blocking fd (a timeout or
 *     an error after some of it: the count so far); writev and sendmsg
 *     return after the first write that moved anything.
 *   poll, ppoll   look at once (poll(2) with no timeout); if nothing is
 *     ready, the fiber parks on every fd the loop can watch at once (a
 *     tdl_select of FD clauses: the first ready one wakes it) and looks
 *     again, and so on until something is ready or the timeout passes.
 *     fds the loop cannot watch as they are (a terminal, eventfd or other
 *     character or anonymous file that the user keeps blocking: O_NONBLOCK
 *     set under a terminal would show in every process sharing it), events
 *     its watcher does not report (POLLPRI, POLLRDBAND, POLLWRBAND, or none),
 *     and an fd another fiber already waits on in that direction are looked
 *     at again at growing intervals (50 us to 5 ms) meanwhile.  Regular
 *     files are always ready, as poll(2) says; a closed fd is POLLNVAL at
 *     once.  The answer is poll(2)'s own, but for one case: a poll of one
 *     stream for reading only, right after a read of the caller's found it
 *     empty (EAGAIN, or less than asked; a non-blocking fd, as libpq and
 *     MariaDB Connector/C keep theirs) parks without the first look and
 *     answers POLLIN from the loop's report of data that came since, which
 *     is what poll(2) would say (an error or hang-up is still poll(2)'s
 *     answer; on io_uring, whose reports can be older than the caller's
 *     read, poll(2) is asked after the wake): a reply then costs the
 *     library no system call of its own to wait for.
 *   select, pselect   the same, through poll: read counts POLLIN, POLLHUP
 *     and POLLERR, write POLLOUT and POLLERR, except POLLPRI, as Linux
 *     does; select leaves the time not slept in *timeout.  Errors are
 *     libc's: nfds < 0 or a bad timeout EINVAL, a bit for a closed fd EBADF
 *     (the sets untouched).  Sets beyond FD_SETSIZE work as with libc (the
 *     kernel takes nfds bits of whatever the caller allocated, up to its fd
 *     table's size, which the hook reads from /proc/self/status then);
 *     FD_SET itself aborts there under _FORTIFY_SOURCE, which is libc's.
 *     ppoll and pselect with a signal mask go to libc (blocking the
 *     thread): the mask is the thread's, shared by all its fibers.
 *   sleep, usleep, nanosleep, clock_nanosleep (CLOCK_MONOTONIC and
 *     CLOCK_REALTIME)   tdl_sleep.  A cancelled fiber's sleep ends early
 *     with EINTR (nanosleep) or the time left (sleep).
 *   getaddrinfo, getnameinfo, gethostbyname, gethostbyname2,
 *   gethostbyname_r, gethostbyname2_r   on the pool's name lane (pool.h):
 *     the fiber parks while a pool thread calls libc's function (never the
 *     hook again), on memory of its own, and the answer is copied to the
 *     caller's buffers (the _r calls: pointers moved into `buf`).  Literal
 *     addresses and port numbers (nothing to look up) are answered on the
 *     spot by libc.  getaddrinfo's list is libc's: freeaddrinfo as ever.
 *     gethostbyname and gethostbyname2 return a buffer of the calling
 *     fiber's own, valid until that fiber's next call of either or its end
 *     (libc has one per process: fibers of one thread interleave at every
 *     lookup, so one buffer would be overwritten by another fiber's answer
 *     between a call and the use of its result); h_errno, and errno for
 *     the gethostbyname family, are left as libc leaves them (the pool
 *     thread's call starts with the caller's errno).  A lookup the pool
 *     cannot take fails as a system error:
 *     EAI_SYSTEM / NETDB_INTERNAL (the _r calls: that errno returned) with
 *     errno ECANCELED (the fiber was cancelled: the lookup finishes in the
 *     background), ENOMEM (EAI_MEMORY), or EAGAIN (no thread could start).
 *     glibc's resolver calls its own internal socket functions, which no
 *     interposer sees: that is why lookups go to a thread.
 *   ioctl(FIONBIO)   as fcntl(F_SETFL) with or without O_NONBLOCK (below).
 * Outside a fiber every call goes to libc as it came, with one exception
 * that keeps the user's semantics: on a socket or pipe the user wants
 * blocking and that the hook made non-blocking underneath (below), a call
 * that hears EAGAIN waits in poll(2) for the fd and tries again, as the
 * blocking fd would have (an EAGAIN from a file that is really blocking,
 * its own SO_RCVTIMEO, goes to the caller).  So a thread that is not a
 * fiber may share a hooked fd (see LIMITS).
 *
 * THE USER'S SEMANTICS ARE KEPT:
 *   Blocking fds.  The first hooked call on a blocking socket or pipe sets
 *     O_NONBLOCK on it underneath; fcntl(F_GETFL) hides that flag, and
 *     F_SETFL and ioctl(FIONBIO) record the user's choice while keeping the
 *     flag set.  O_NONBLOCK belongs to the file, not the number: through
 *     any number dup, dup2, dup3 or F_DUPFD made of it, the flag stays
 *     hidden and EAGAIN is waited for.  An fd the user made non-blocking
 *     (O_NONBLOCK, SOCK_NONBLOCK, FIONBIO, or MSG_DONTWAIT on the call)
 *     passes straight through: EAGAIN is the user's to handle.
 *   Timeouts.  SO_RCVTIMEO and SO_SNDTIMEO set with setsockopt become the
 *     deadline of each call that waits (receiving, sending; connect uses
 *     SO_SNDTIMEO as Linux does); a call that runs out fails with EAGAIN
 *     (connect: EINPROGRESS), as on a blocking socket.  There is no timeout
 *     the user did not ask for.
 *   Errors are the kernel's, as a blocking call gets them: ECONNREFUSED
 *     from connect, ECONNRESET or end of file (0) from a peer that went
 *     away, EPIPE, ...  (tests/hook/test_hook_misuse.c compares each with
 *     plain libc outside a fiber).
 *   Connect on a blocking socket waits for the outcome and reports it
 *     (ECONNREFUSED, ...), as blocking connect does.
 *   close() of an fd the hook parked on drops treadle's state for it
 *     (tdl_close), so code that closes its own fds is safe; a fiber still
 *     waiting on it wakes with EBADF (a blocking thread would wait on); the
 *     same for dup2 and dup3 onto such an fd.  dup, dup2, dup3 and F_DUPFD
 *     copy or reset the per-fd state of the new number; socket, socketpair,
 *     accept, accept4, pipe and pipe2 reset it.  An fd the hook never saw
 *     made (inherited, opened before it was loaded, made by a raw system
 *     call) is looked at (fstat, F_GETFL) on its first hooked call.
 *   Errors.  A wait that is cancelled (tdl_fiber_cancel) fails with
 *     ECANCELED; an fd closed under a waiting fiber with EBADF.
 *   Cancellation is sticky, as fiber.h promises: once a fiber is
 *     cancelled, each of its intercepted calls that could wait fails with
 *     ECANCELED before it does anything, even one that would not have had
 *     to wait (data already there, a send that fits), so that nothing more
 *     reaches the peer: read, write, the recv and send families, accept,
 *     connect, and poll, ppoll, select and pselect with a timeout other
 *     than zero (even with an fd ready).  Sleeps end at once with EINTR, as
 *     on a signal; a host-name lookup fails with errno ECANCELED (above).
 *     What cannot wait still works: close, dup, fcntl, ioctl, setsockopt,
 *     the calls that make fds, poll and select with a zero timeout, a call
 *     with MSG_DONTWAIT, and any call on an fd the user made non-blocking
 *     (code that sets O_NONBLOCK waits in poll or select, which is refused)
 *     or that the hook does not wait for (files, terminals), unless the
 *     cancel cut that connection (below).
 *   fork.  In the child, the fiber that forked is not hooked (treadle.h:
 *     it makes no blocking call, and the loop it ran on is the parent's),
 *     and close() there is close(2): tdl_close would take the parent's
 *     epoll registration away.  Fibers of loops the child makes are hooked.
 *     An fd the hook made non-blocking underneath is still non-blocking in
 *     a program the child execs (O_NONBLOCK is the file's): give a child
 *     fds the parent's fibers did not block on, or clear the flag first.
 *
 * CANCELLING A FIBER INSIDE A LIBRARY:
 *   A cancel cuts the connection: a hooked call on a connected stream
 *     socket that a cancel ends or refuses (the calls above, a poll, a
 *     connect) may leave the library in the middle of an exchange, a request
 *     sent and its reply still to come.  So from then on every call on that
 *     socket, from any fiber or thread, fails with ECONNABORTED, also one
 *     that would pass through (an fd the user made non-blocking, as libpq,
 *     libcurl and MariaDB Connector/C do, or MSG_DONTWAIT), and a poll or
 *     select in a fiber reports it POLLERR at once, until it is closed
 *     (every number dup'd of it, before the cut or after, is cut too; closing a
 *     number clears its cut).  A later request on the connection
 *     can then never read an earlier one's reply: the library reports a
 *     broken connection, and the program makes a new one.  The cancelled
 *     fiber's own calls still fail with ECANCELED.  Pipes, socketpairs (a
 *     library's wakeup channel, which its poll waits on beside the
 *     connection: curl_multi_poll's) and listeners are not cut (a cancelled
 *     fiber's write to stdout leaves stdout to the others).  A timeout of the
 *     user's (SO_RCVTIMEO, SO_SNDTIMEO) cuts nothing: the library handles
 *     its own.
 *   The library sees the ECANCELED of its system call and reports a
 *   failure of its own:
 *   - libcurl (easy API) keeps its sockets non-blocking and waits in poll:
 *     curl_easy_perform returns CURLE_BAD_FUNCTION_ARGUMENT (43, "A libcurl
 *     function was given a bad argument"), its answer to a poll that fails,
 *     and closes the connection: the handle's next transfer makes a new one.
 *   - hiredis (synchronous API): the command returns NULL, with c->err
 *     REDIS_ERR_IO and c->errstr strerror(ECANCELED); it did not reach the
 *     server.  Free the context (a command on it fails: ECONNABORTED).
 *   - libpq (PQexec, ...) keeps its socket non-blocking and waits in poll:
 *     the call returns an error, "select() failed: Operation canceled",
 *     and PQstatus still says CONNECTION_OK; the next query fails ("could
 *     not receive data from server: Software caused connection abort"),
 *     and PQstatus then says CONNECTION_BAD.  PQfinish it.
 *   - MariaDB Connector/C (mysql_query, ...): the call fails with
 *     CR_SERVER_LOST (2013, "Lost connection to server during query") and
 *     the library closes the connection: later calls CR_SERVER_GONE_ERROR.
 *   None names the cause, so give each call the library's own timeout,
 *   taken from the fiber's deadline, and keep tdl_fiber_cancel for what
 *   must end whatever the library is doing (a shutdown):
 *     long ms = (long)((deadline - tdl_now()) / TDL_MSEC); // not TDL_FOREVER
 *     curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L); // 0 would be none
 *       (CURLE_OPERATION_TIMEDOUT, 28, when it passes)
 *     redisConnectWithTimeout(host, port, tv); redisSetTimeout(c, tv);
 *       (tv from the same difference; SO_RCVTIMEO and SO_SNDTIMEO, which
 *       the hook keeps: REDIS_ERR_IO with c->errstr strerror(EAGAIN) when
 *       one passes)
 *     PQexec(c, "SET statement_timeout = <ms>"), then the query (SQLSTATE
 *       57014 when it passes; the connection stays usable; so does one that
 *       PQcancel ended, from another fiber);
 *     MariaDB: "SET STATEMENT max_statement_time = <s> FOR <query>"
 *       (ER_STATEMENT_TIMEOUT, 1969; KILL QUERY from another connection:
 *       ER_QUERY_INTERRUPTED, 1317).
 *   tests/hook/test_hook_curl.c, test_hook_hiredis.c, test_hook_pg.c and
 *   test_hook_mariadb.c check all of these, against servers they start.
 *
 * WHAT IS NOT:
 *   Regular files, directories and block devices pass through untouched
 *     (the kernel never says EAGAIN for them: use tdl_fs_* to keep a slow
 *     disk off the loop).  Terminals and other character devices too, except
 *     in poll and select.
 *   stdio (fread, fprintf, ...) and other libc internals call the kernel
 *     without going through these names, so they block the thread.
 *   treadle itself never goes through the hooks (src/base/sys.h).
 *
 * STATIC LINKING IS NOT SUPPORTED (neither as a static archive nor with
 *   -Wl,--wrap): the hook finds libc's functions with dlsym(RTLD_NEXT),
 *   which needs the dynamic linker, and it must share one treadle with the
 *   program (libtreadle.so); a static libtreadle would be a second one,
 *   with its own loops and fibers the hook could not see.  --wrap would
 *   also reach only the objects on the link line, not a shared library
 *   such as libhiredis.so.  Link dynamically (this library and
 *   libtreadle.so), or call treadle's own I/O (fiber.h, net.h) directly.
 *
 * LIMITS:
 *   A hooked fd is one file description: two fibers reading (or writing)
 *     the same blocking fd at once are served one at a time, the second
 *     looking again every millisecond (fiber I/O has one reader and one
 *     writer per fd).
 *   The per-fd state is process-wide and not locked: one fd used by fibers
 *     of two threads at once is not supported, and a thread that is not a
 *     fiber may use a hooked fd once a fiber's first call on it is over
 *     (not racing with it, nor with fcntl, ioctl or setsockopt on it).
 *   Under ThreadSanitizer treadle's own I/O calls libc's names (so that it
 *     models fds), which the hook would take for the user's: the hook is
 *     not for TSan builds of treadle.  A hooked fd that a fiber waited
 *     on and a thread that is not a fiber then closes: the loop that knew it
 *     is another thread's, so the hook marks the number, and its next use in
 *     a fiber (a call that makes a file, or an I/O call) makes that fiber's
 *     loop forget the old file first (tdl_fd_forget, fd.h).  An fd closed by
 *     a path the hook does not see (close_range, fclose, a raw system call)
 *     leaves its state until the number is reused by one of the calls above;
 *     call tdl_fd_forget in the fiber that uses the new file.
 *   fds above 2^20 pass through.
 *
 * Cost: outside a fiber, one thread-local read and, on fds the hook knows, a
 * table look-up.  Inside, the first call on an fd costs fstat and two
 * fcntl; later ones add a look-up and a look at the fiber's cancel flag
 * to the system call.  A poll that waits
 * costs a look-up per fd and one park.
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
TDL_API int tdl_hook_active(void);

typedef struct tdl_hook_stats {
  uint64_t parked;     /* waits that parked a fiber on an fd */
  uint64_t slept;      /* sleeps and poll naps turned into tdl_sleep */
  uint64_t fds_made_nonblocking; /* fds set O_NONBLOCK underneath */
} tdl_hook_stats;
/* Process-wide counts since start (relaxed: approximate under threads); the
 * same counts as tdl_metrics_process's hook_* fields (metrics.h). */
TDL_API void tdl_hook_stats_get(tdl_hook_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_HOOK_H */
