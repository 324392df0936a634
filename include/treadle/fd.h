/* SPDX-License-Identifier: MIT */
/*
 * Fiber I/O: the system calls on fds that have readiness (sockets, pipes,
 * terminals, eventfds...), parking the fiber instead of the thread.  Include
 * <treadle.h>, not this file.  Regular files are fs.h's (the kernel never
 * says EAGAIN for them); accepting, connecting and whole-buffer transfers
 * are net.h's, built on these.
 *
 * fiber.h's rules hold: every call that can wait takes an absolute deadline
 * and returns -ETIMEDOUT when it passes, -ECANCELED on a cancelled fiber,
 * and -EPERM at once outside a fiber; tdl_close works anywhere.
 *
 * One reader and one writer fiber per fd at a time: a second fiber reading
 * (or writing, or waiting in that direction) while one is parked gets
 * -EBUSY.
 */
#ifndef TREADLE_FD_H
#define TREADLE_FD_H

#ifndef TREADLE_H
#error "include <treadle.h>"
#endif

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- transfers ---- */

/*
 * I/O that parks the fiber instead of the thread.  Each tries the system call
 * first and parks only on EAGAIN, so data that is already there costs no
 * round trip through the loop.  The fd is made non-blocking on first use.
 * Results are the system call's (bytes) or a negative errno;
 * in addition: -ETIMEDOUT, -ECANCELED, -EPERM (outside a fiber), -EBUSY (see
 * tdl_fd_wait).  A partial transfer is returned as such (no retry loop); a
 * timed-out call has transferred nothing.  MSG_DONTWAIT in the flags of
 * tdl_recv, tdl_send, tdl_recvfrom or tdl_sendto means what it means to the
 * kernel: -EAGAIN instead of parking.  Such a call never switches fibers,
 * not even for the yield of fiber.h's fairness rule (that yield waits for
 * the fiber's next call that may switch), so it may be made from inside a
 * library that must not be re-entered meanwhile (a TLS library's BIO).
 *
 * On a loop whose back end is uring (loop.h), a call that would park is
 * handed to the kernel as an io_uring operation instead, and completes with
 * the data: no second system call.  The kernel may then finish it just as its
 * deadline passes or its fiber is cancelled: the call then returns what it
 * transferred rather than -ETIMEDOUT or -ECANCELED, so nothing is lost.
 * tdl_recvfrom and tdl_sendto wait for readiness on every back end.
 *
 * An fd used with these calls must be closed with tdl_close (below).
 */
TDL_API ssize_t tdl_read(int fd, void *buf, size_t len, tdl_time_t deadline);
TDL_API ssize_t tdl_write(int fd, const void *buf, size_t len, tdl_time_t deadline);
TDL_API ssize_t tdl_readv(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline);
TDL_API ssize_t tdl_writev(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline);
TDL_API ssize_t tdl_recv(int fd, void *buf, size_t len, int flags, tdl_time_t deadline);
TDL_API ssize_t tdl_send(int fd, const void *buf, size_t len, int flags, tdl_time_t deadline);
TDL_API ssize_t tdl_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
                             socklen_t *addrlen, tdl_time_t deadline);
TDL_API ssize_t tdl_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr,
                           socklen_t addrlen, tdl_time_t deadline);

/*
 * Close fd: wake the fibers waiting on it (they get -EBADF), forget what
 * the loops of the calling thread know about it (in a fiber, its loop's;
 * outside a fiber, every loop of the thread), then close(2) it.  For any
 * fd: sockets, pipes, files.  An fd used with the calls of this header
 * must be closed with it: a plain close() leaves the loop's state behind
 * for a later fd with the same number, and on a uring loop an operation in
 * flight keeps the file open until it ends.
 * Returns 0, or close(2)'s error (-EBADF, -EIO...).  Linux releases the fd
 * even when close(2) fails, so the call is never to be retried, and -EINTR
 * is reported as 0.
 * Close never blocks, with one exception that is the kernel's: a socket
 * whose SO_LINGER is on with a non-zero time makes close(2) wait, even on a
 * non-blocking socket, until its unsent data is acknowledged or that time
 * passes, and the whole loop waits with it.  Linger with a time of 0 (a
 * reset) does not wait; for a bounded graceful close, use
 * tdl_net_shutdown(fd, SHUT_WR) and read until the end under a deadline,
 * then tdl_close.
 */
TDL_API int tdl_close(int fd);
/*
 * Forget what the loops of the calling thread know about fd (as tdl_close
 * does: in a fiber, its loop's; outside a fiber, every loop of the thread),
 * without closing it: for a number that was closed behind treadle's back
 * (by another thread, close_range(2), fclose(3)...) and may have come back
 * as a new file.  Fibers still waiting on it wake with -EBADF; data its
 * loop held for it (received ahead, or not yet sent behind) is dropped.
 * Until it is called, this thread's loops take a new file with that number
 * for the old one, and a wait on it can miss its readiness.  libtreadle-hook
 * calls it for a hooked fd closed outside a fiber, at the next fiber call
 * that makes or uses that number.  Returns 0, or -EBADF (fd < 0).  No
 * system call.
 */
TDL_API int tdl_fd_forget(int fd);

/* ---- waiting for readiness, for I/O made outside these calls ---- */

/* Park until fd is ready for `events` (TDL_READ and/or TDL_WRITE); returns
 * the ready events (> 0, including TDL_ERR/TDL_HUP when they happened).
 * It makes no system call of its own: readiness that the loop has seen for
 * `events` and that no call has used up since ends the wait (at once, or at
 * the loop's next poll); otherwise it parks until the kernel reports some.
 * A wait uses nothing up: waits one after another with nothing read or
 * written between all end (the second asks the kernel once, with poll(2),
 * whether what the first was told still holds).  For fds that your own calls read and
 * write (sendmsg, a TLS library, ...): after such a call returns EAGAIN,
 * call tdl_fd_blocked() and then this.  Errors:
 * -ETIMEDOUT, -ECANCELED, -EPERM, -EBADF, -EINVAL (no events), or -EBUSY
 * when another fiber already waits for the same direction on this fd (one
 * reader and one writer fiber per fd at a time). */
TDL_API int tdl_fd_wait(int fd, unsigned events, tdl_time_t deadline);
/* Your own call on fd, made outside treadle's I/O calls, has just found it
 * empty (a read returned EAGAIN, or less than asked of a pipe or stream
 * socket) or full (a write returned EAGAIN), for `events` (TDL_READ and/or
 * TDL_WRITE): the readiness the loop saw before is used up, so the next
 * tdl_fd_wait parks until the kernel reports new readiness instead of
 * returning at once.  Call it before the fiber parks or yields (readiness
 * seen after your call is new, and must not be forgotten).  No system call.
 * Returns 0, -EPERM outside a fiber, -EINVAL (no events, or others), -EBADF
 * (fd < 0) or -ENOMEM. */
TDL_API int tdl_fd_blocked(int fd, unsigned events);

/* ---- receiving ahead and sending behind (io_uring loops) ---- */

/*
 * Receive ahead on a connected stream socket (uring loops only): the kernel
 * keeps one multishot receive armed on fd and receives into the loop's
 * buffers (2 KiB each, 2,048 per loop, mapped when first asked for and
 * touched as used) whenever data comes; fd's reads (tdl_read, tdl_recv,
 * tdl_readv, tdl_recvfrom) then copy out of those, and park only when
 * nothing is there.  No request per read: for many connections of small
 * requests and replies it saves the kernel work of a receive request each
 * time (docs/PERFORMANCE.md); for bulk transfers it only adds a copy.
 * A read that times out or is cancelled loses nothing (what came stays for
 * the next read).  At most 16 KiB is held per fd: then receiving ahead
 * pauses, so TCP's flow control still reaches the peer, and resumes once a
 * read has taken it all.  When the loop's buffers run out, a read is made
 * directly into the caller's buffer instead; on a kernel without multishot
 * receives (before Linux 6.0) every read is.
 * While it is on:
 * - read fd only with treadle's calls: a read(2), or a library reading the
 *   socket itself, would miss or reorder what was received ahead;
 * - close fd with tdl_close (a plain close() leaves the socket open, its
 *   peer unaware, until the peer closes its end);
 * - tdl_recv honours MSG_PEEK, MSG_WAITALL and MSG_DONTWAIT; MSG_OOB and
 *   MSG_ERRQUEUE are made as usual; other flags get -EOPNOTSUPP.  (A
 *   MSG_WAITALL read gathers until it is full, but comes back short, as
 *   partial transfers do above, where receiving ahead paused for want of
 *   buffers.)  One reader at a time: another fiber's read or tdl_fd_wait
 *   for reading gets -EBUSY meanwhile.  tdl_fd_wait(fd, TDL_READ) waits
 *   for what is received (or accepted) ahead; a wait for TDL_READ |
 *   TDL_WRITE at once polls the socket, which does not see what the armed
 *   request has already taken: wait for one direction at a time.
 * The request is armed only when a read finds the stream empty (a short
 * read, or EAGAIN); until then reads are ordinary receives, so a
 * connection that brings its request and closes after the answer costs no
 * more than without.
 * On a listening socket it accepts ahead: one multishot accept takes each
 * connection as it comes (non-blocking, close-on-exec), and tdl_net_accept
 * returns them in arrival order without a system call (the peer's address
 * then comes from getpeername(); a peer that has already reset leaves its
 * length 0).  It is armed when an accept finds no connection waiting, and
 * paused once 32 accepted connections wait to be taken (a burst the kernel
 * had already queued is taken whole: the listen backlog bounds it), so
 * that the backlog, not the fd table, holds the rest.  The kernel's errors
 * (EMFILE...) reach the next accept, after the connections before them.
 * The same rules hold: accept only with treadle's calls, close the
 * listener with tdl_close (which closes the connections still queued: their
 * peers see them closed, as for a backlog that goes with its listener), one
 * acceptor at a time (-EBUSY).
 * Turning it off stops receiving (or accepting) ahead; what was received is
 * still read first.  Returns 0, -EPERM (outside a fiber), -EBADF,
 * -ENOTSOCK, -EPROTOTYPE (not a stream socket), -ENOTSUP (the loop's back
 * end is not uring), -EBUSY (a fiber is reading or accepting on fd right
 * now), -ENOMEM, or what the kernel said when asked to register the
 * buffers.  On a kernel without multishot accepts (before Linux 5.19)
 * accepts are ordinary ones.
 */
TDL_API int tdl_fd_readahead(int fd, bool on);
/*
 * Send behind on a connected stream socket (uring loops only): a tdl_send
 * of up to 8 KiB copies the data into a buffer of the loop's and returns
 * its length at once; the loop hands it to the kernel as a send request
 * with its next io_uring_enter, together with everything else it submits
 * and waits for.  No system call per send: for many connections of small
 * requests and replies (HTTP, RPC) that is the last system call per
 * request gone; for bulk transfers it only adds a copy.  What was sent
 * behind always goes out before what is sent after it:
 * - tdl_send, tdl_net_send_all and tdl_writer_flush queue behind it (a
 *   send of more than 8 KiB, or one that finds the buffer full, waits until
 *   the buffer has gone, within its own deadline, then is made as usual);
 *   tdl_write, tdl_writev, tdl_sendto, tdl_net_send_allv and a tdl_send
 *   with flags other than MSG_NOSIGNAL, MSG_MORE and MSG_DONTWAIT first
 *   wait until it has gone; a MSG_DONTWAIT send that does not fit gets
 *   -EAGAIN.  Any other write of fd (a library's own send(2)) must call
 *   tdl_fd_flush first.
 * - Errors come later: a send behind that fails (the peer reset: -EPIPE,
 *   -ECONNRESET; or its deadline passed: -ETIMEDOUT) drops what is held,
 *   and the next send, write or tdl_fd_flush on fd returns that error,
 *   once.
 * - Deadlines carry over: data held is given up (and its error kept) when
 *   the latest deadline of the sends that put it there passes.
 * - tdl_close does not wait and drops nothing: what is held still goes,
 *   and the socket is closed (its peer sees the end) once it has gone or
 *   its deadline passed; the fd number is free at once.
 * - The buffer (8 KiB, kept by the loop for reuse) is held only while data
 *   waits: an idle connection costs none.
 * Turning it off makes later sends ordinary ones once what is held has
 * gone.  Returns 0, -EPERM (outside a fiber), -EBADF, -ENOTSOCK,
 * -EPROTOTYPE (not a stream socket), -EINVAL (a listener), -ENOTSUP (the loop's
 * back end is not uring), -ENOMEM.
 */
TDL_API int tdl_fd_writebehind(int fd, bool on);
/* Wait until everything sent behind on fd (tdl_fd_writebehind) has been
 * handed to the kernel.  Returns 0, the error a send behind met (once),
 * -ETIMEDOUT, -ECANCELED, -EBADF (closed meanwhile), -EBUSY (another
 * fiber is writing fd and waits), -EPERM (outside a fiber).  On an fd that
 * does not send behind: 0 at once. */
TDL_API int tdl_fd_flush(int fd, tdl_time_t deadline);

#ifdef __cplusplus
}
#endif

#endif /* TREADLE_FD_H */
