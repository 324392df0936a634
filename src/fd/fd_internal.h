/*
 * Fiber I/O's internals (src/fd/): the per-fd waits that select and the
 * layers above build on, the ring path on uring loops, and the background
 * requests that receive, accept and send for an fd while no fiber asks
 * (receiving ahead, accepting ahead, sending behind).
 *
 * Fiber I/O sits on the scheduler (fiber/fiber_internal.h): it parks a fiber
 * with tdl__park and wakes it with tdl__wake, and keeps its per-fd table in
 * the scheduler's `io` slot, hung on it as a client (tdl__sched_client).
 */
#ifndef TDL_FD_INTERNAL_H
#define TDL_FD_INTERNAL_H

#include <sys/socket.h>
#include <sys/uio.h>

#include "fiber/fiber_internal.h"

/* A fiber waiting on an fd (io.c), on its stack.  A plain wait wakes
 * with the ready events; a clause of a select wakes with its clause number
 * and finds the events in `events` (-EBADF: the fd was closed meanwhile). */
typedef struct tdl__fdwait {
  tdl__fiber *f;
  int fd;
  int clause;        /* -1: a plain wait */
  tdl__claim *claim; /* a select's (with clause), else NULL */
  int events;        /* out: ready events, or -EBADF */
} tdl__fdwait;

/* Hang rec on fd's state for events (TDL_READ and/or TDL_WRITE) and start
 * its watcher, without parking.  rec->clause is the caller's.  Returns 0,
 * -EBUSY (another fiber waits for that direction), -EBADF, -ENOMEM, or a
 * tdl_io_start error.  Every successful begin needs an end (after the park),
 * which does nothing if the wait already ended. */
int tdl__fd_wait_begin(tdl__fiber *f, int fd, unsigned events, tdl__fdwait *rec);
/* Before a wait on fd after a foreign EAGAIN (tdl_fd_wait, a select's FD
 * clause): the events the loop knows to be ready (> 0), or 0 after dropping
 * what it cached as stale, or an error (-EBADF, -ENOMEM).  No system call
 * but on an fd's first use. */
int tdl__fd_ready_now(tdl__fiber *f, int fd, unsigned events);
void tdl__fd_wait_end(tdl__fdwait *rec);

/* Fiber I/O for net.h's accept and connect (which add the policies).
 * accept: the new fd is non-blocking and close-on-exec.  connect: a
 * non-blocking connect, then a wait for writability and SO_ERROR; after
 * -ETIMEDOUT or -ECANCELED the socket is left mid-handshake. */
int tdl__fd_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, tdl_time_t deadline);
int tdl__fd_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, tdl_time_t deadline);

/* ---- fiber I/O as ring operations (ring.c; loops whose back end is uring) ---- */

/* What one operation is: an IORING_OP_* code and its arguments. */
typedef struct tdl__uop {
  uint8_t code;  /* IORING_OP_READ, _WRITE, _READV, _WRITEV, _RECV, _SEND, _ACCEPT, _CONNECT, _POLL_ADD */
  int fd;
  void *addr;    /* the buffer, the iovec array, or the sockaddr */
  size_t len;    /* its length, the iovec count, or the sockaddr's length (connect) */
  socklen_t *addrlen; /* accept */
  int flags;     /* recv/send flags; POLL_ADD: the TDL_READ/TDL_WRITE bits to wait for */
  bool at;       /* READ, WRITE, READV, WRITEV: at `off`, not the file position */
  uint64_t off;
} tdl__uop;

/* Submit u on f's loop's ring and park until it completes; the fd's list
 * `on_fd` holds the operation meanwhile, so that closing the fd can end it
 * (tdl__fd_ring_closed).  A deadline or cancel asks the kernel to end it and
 * still waits for its completion (the buffer may be on the fiber's stack):
 * if it completed first, its result is returned, so no data is lost.
 * Returns the kernel's result (>= 0), -ETIMEDOUT, -ECANCELED, -EBUSY
 * (another fiber's operation moves data the same way), -EBADF (the fd
 * was closed meanwhile), -EAGAIN (the file is non-blocking and this kernel
 * honours that: wait for readiness and submit again), or another negative
 * errno.  *closed says whether tdl_close took the fd meanwhile (then its
 * fiber-I/O state, which holds on_fd, is gone).  Every successful call
 * spends the fiber's I/O budget. */
ssize_t tdl__fd_ring_io(tdl__fiber *f, tdl__list *on_fd, const tdl__uop *u, const char *what, tdl_time_t deadline,
                     bool *closed);
/* Whether an operation moving data in one of `events`' directions
 * (TDL_READ, TDL_WRITE) is in flight on the fd whose list is on_fd: one
 * reader and one writer fiber per fd at a time, whether they wait for
 * readiness or for an operation. */
bool tdl__fd_ring_busy(const tdl__list *on_fd, unsigned events);
/* The fd whose operations are on `on_fd` is being closed: end them, with
 * -EBADF for their fibers, before the close. */
void tdl__fd_ring_closed(tdl_loop *loop, int fd, tdl__list *on_fd);

/* ---- receiving ahead (ahead.c; uring loops, tdl_fd_readahead) ---- */

/* A fiber parked for a completion of a background request (receiving or
 * accepting ahead), on its stack; its record points to it meanwhile. */
typedef struct tdl__bgwait {
  tdl__fiber *f;
  bool closed; /* the fd was closed: the record may be gone */
} tdl__bgwait;
/* Park f in *slot (the record's pointer) until a completion wakes it, the
 * deadline, a cancel, or the fd's close (tdl__bgwait_close: then *closed is
 * set, -EBADF returned, and the record holding *slot may be gone).  It
 * counts in ops_inflight meanwhile: the loop must ask the ring. */
int tdl__bgwait_park(tdl__fiber *f, tdl__bgwait **slot, tdl_loop *loop, const char *what, int fd,
                     tdl_time_t deadline, bool *closed);
/* The fd is being closed: wake the fiber parked in *slot, if any, with
 * -EBADF. */
void tdl__bgwait_close(tdl__bgwait **slot);

typedef struct tdl__ahead tdl__ahead;
/* Per scheduler: the queue links of the loop's provided buffers (a buffer
 * is queued on one fd at a time). */
typedef struct tdl__ahead_links {
  uint16_t next[TDL__BUFS];
  uint16_t len[TDL__BUFS];
} tdl__ahead_links;
/* tdl__ahead_read's "not from here": make this read as usual.  _LATER: as
 * usual, and should it find nothing, come back with `empty` to wait here. */
#define TDL__AHEAD_PASS ((ssize_t)INT32_MIN)
#define TDL__AHEAD_LATER ((ssize_t)INT32_MIN + 1)

/* A record for fd, on (arming waits for its first read).  -ENOMEM. */
int tdl__ahead_new(tdl_loop *loop, tdl__ahead_links *links, int fd, tdl__ahead **out);
/* Turn it on or off; off cancels the request, and what is queued is still
 * read first. */
void tdl__ahead_set(tdl__ahead *a, bool on);
/* Off, with nothing queued or in flight: the caller may free it. */
bool tdl__ahead_idle(const tdl__ahead *a);
void tdl__ahead_free(tdl__ahead *a);
/* Data or an end is queued: a read returns at once. */
bool tdl__ahead_ready(const tdl__ahead *a);
/* A fiber is parked reading it. */
bool tdl__ahead_busy(const tdl__ahead *a);
/* The fd is being closed (or its scheduler torn down): wake the reader
 * with -EBADF, give the buffers back, cancel the request; the record frees
 * itself at the request's last completion (at once when none is armed). */
void tdl__ahead_close(tdl__ahead *a);
/* Read into iov out of what is queued, arming the request and parking when
 * nothing is.  flags: MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT.  `empty`: a read
 * has found the stream empty; until one has, the request is not armed and
 * the answer is TDL__AHEAD_LATER (read as usual first), because data that
 * is there already (a new connection's request) costs one recv, while
 * arming costs a request and, when the fd is closed, a cancel.  Returns
 * bytes, 0 at end of stream, a negative errno (the stream's error once, or
 * -ETIMEDOUT, -ECANCELED, -EAGAIN, -EBADF when closed meanwhile: then
 * *closed is set and the caller's fd state is gone), TDL__AHEAD_PASS or
 * TDL__AHEAD_LATER. */
ssize_t tdl__ahead_read(tdl__fiber *f, tdl__ahead *a, const struct iovec *iov, int iovcnt, int flags,
                        bool empty, tdl_time_t deadline, bool *closed);
/* tdl_fd_wait for reading: TDL_READ once data or an end is queued (arming
 * the request and parking until then), a negative errno as for a read, or
 * TDL__AHEAD_PASS (as an int) when the data would be in the socket (off,
 * out of buffers): then poll it. */
int tdl__ahead_wait(tdl__fiber *f, tdl__ahead *a, tdl_time_t deadline, bool *closed);

/* ---- accepting ahead (acceptahead.c; uring loops, tdl_fd_readahead
 * on a listener) ---- */

typedef struct tdl__acc tdl__acc;
/* A record for the listener fd, on (arming waits for an accept that finds
 * nothing waiting).  -ENOMEM. */
int tdl__acc_new(tdl_loop *loop, int fd, tdl__acc **out);
/* Turn it on or off; off cancels the request, and what is queued is still
 * taken first. */
void tdl__acc_set(tdl__acc *a, bool on);
/* Off, with nothing queued or in flight: the caller may free it. */
bool tdl__acc_idle(const tdl__acc *a);
void tdl__acc_free(tdl__acc *a);
/* A connection or an error is queued: an accept returns at once. */
bool tdl__acc_ready(const tdl__acc *a);
/* A fiber is parked accepting. */
bool tdl__acc_busy(const tdl__acc *a);
/* The listener is being closed (or its scheduler torn down): wake the
 * acceptor with -EBADF, close the queued fds, cancel the request; the
 * record frees itself at the last completion (at once when none is armed). */
void tdl__acc_close(tdl__acc *a);
/* The next queued fd, arming the request and parking when none is (`empty`:
 * an accept4 found nothing waiting; before one has, the answer is
 * TDL__AHEAD_LATER).  Returns the fd, a negative errno (the kernel's error
 * once, or -ETIMEDOUT, -ECANCELED, -EBADF when closed meanwhile: then
 * *closed is set and the caller's fd state is gone), TDL__AHEAD_PASS or
 * TDL__AHEAD_LATER (as ints). */
int tdl__acc_accept(tdl__fiber *f, tdl__acc *a, bool empty, tdl_time_t deadline, bool *closed);
/* tdl_fd_wait for reading on the listener: TDL_READ once a connection or
 * an error is queued, a negative errno, or TDL__AHEAD_PASS when off. */
int tdl__acc_wait(tdl__fiber *f, tdl__acc *a, tdl_time_t deadline, bool *closed);

/* ---- sending behind (behind.c; uring loops, tdl_fd_writebehind) ---- */

typedef struct tdl__behind tdl__behind;
/* Per scheduler: buffers of sends behind that no fd holds, kept for the
 * next (as many as a peak left; the scheduler's trim gives back those a
 * whole period did not need). */
typedef struct tdl__behind_spares {
  void *head;     /* a buffer's first bytes link it to the next */
  unsigned count;
  unsigned low;   /* the fewest kept since the last trim */
} tdl__behind_spares;
/* The room one fd holds: sends up to this size go behind. */
enum { TDL__BEHIND_BYTES = 8192 };

/* A record for the socket fd, on.  -ENOMEM. */
int tdl__behind_new(tdl_loop *loop, tdl__behind_spares *spares, int fd, tdl__behind **out);
/* Turn it on or off (off: later sends are ordinary once what is held went). */
void tdl__behind_set(tdl__behind *b, bool on);
/* Off, holding nothing, nothing in flight, no error to report: the caller
 * may free it. */
bool tdl__behind_idle(const tdl__behind *b);
void tdl__behind_free(tdl__behind *b);
/* A fiber is parked on it (for room, or a flush). */
bool tdl__behind_busy(const tdl__behind *b);
/* The fd is being closed: wake a parked fiber with -EBADF; what is held
 * still goes (on a duplicate of the fd, made here), and the record frees
 * itself, closing the duplicate, once it has gone or its deadline passed.
 * For a scheduler torn down as well. */
void tdl__behind_close(tdl__behind *b);
/* tdl_send's part: copy buf behind what is held and return len; or wait
 * for room (deadline) when it does not fit; or TDL__AHEAD_PASS: make the
 * send as usual (nothing is held, and it is too large, or off, or its flags
 * are not MSG_NOSIGNAL/MSG_MORE/MSG_DONTWAIT: then what was held has gone
 * first).  A negative errno: the error a send behind met (once), -EAGAIN
 * (MSG_DONTWAIT and no room), -ETIMEDOUT, -ECANCELED, -EBADF when closed
 * meanwhile (*closed is set: the caller's fd state is gone). */
ssize_t tdl__behind_send(tdl__fiber *f, tdl__behind *b, const void *buf, size_t len, int flags,
                         tdl_time_t deadline, bool *closed);
/* Wait until nothing is held: 0, the error a send behind met (once), or the
 * park's error (*closed as above). */
int tdl__behind_flush(tdl__fiber *f, tdl__behind *b, tdl_time_t deadline, bool *closed);
/* Give back the spare buffers that were not taken since the last trim
 * (the scheduler's trim), or all of them (its teardown). */
void tdl__behind_spares_trim(tdl__behind_spares *sp);
void tdl__behind_spares_free(tdl__behind_spares *sp);

#endif /* TDL_FD_INTERNAL_H */
