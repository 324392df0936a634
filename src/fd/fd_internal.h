/* SPDX-License-Identifier: MIT */
/*
 * Fiber I/O's internals (src/fd/): the per-fd waits that select and the
 * layers above build on (io.c), the ring path on uring loops (ring.c), and
 * the background requests that receive, accept and send for an fd while no
 * fiber asks (background.c; receiving ahead in ahead.c, accepting ahead in
 * acceptahead.c, sending behind in behind.c).
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
  uint8_t code;  /* IORING_OP_READ, _WRITE, _READV, _WRITEV, _RECV, _SEND, _ACCEPT, _CONNECT, _POLL_ADD,
                    _OPENAT, _STATX */
  int fd;        /* OPENAT, STATX: the directory (AT_FDCWD) */
  void *addr;    /* the buffer, the iovec array, the sockaddr, or the struct statx (STATX) */
  size_t len;    /* its length, the iovec count, the sockaddr's length (connect), the mode (OPENAT),
                    or the mask (STATX) */
  const char *path;   /* OPENAT, STATX */
  socklen_t *addrlen; /* accept */
  int flags;     /* recv/send flags; POLL_ADD: the TDL_READ/TDL_WRITE bits to wait for; OPENAT: open's;
                    STATX: the AT_* flags */
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

/* ---- background requests (background.c; uring loops) ---- */

/*
 * What the kernel does for an fd while no fiber asks: a multishot receive
 * (receiving ahead, ahead.c) or accept (accepting ahead, acceptahead.c)
 * that stays armed, or a send of what a tdl_send copied (sending behind,
 * behind.c).  The fd's fiber-I/O state holds the record, which starts with
 * a tdl__bg: the request, the one fiber parked on it, whether it is on, and
 * what the three share of their life (turned off, freed when idle, woken
 * by completions, closed with the fd, freeing itself at the last completion
 * after that).  A kind (tdl__bg_kind) supplies the rest.
 */
typedef struct tdl__bg tdl__bg;

/* A fiber parked for a completion of a background request, on its stack;
 * the record points to it meanwhile. */
typedef struct tdl__bgwait {
  tdl__fiber *f;
  bool closed; /* the fd was closed: the record may be gone */
} tdl__bgwait;

/* What a kind of background request does in the shared life cycle. */
typedef struct tdl__bg_kind {
  /* A multishot request (receiving and accepting ahead): armed by a call
   * that finds nothing kept, stopped when turned off or closed.  Otherwise
   * (sending behind) one send at a time, which goes on when turned off or
   * closed until what is held has gone. */
  bool multishot;
  /* Multishot: arm the request on bg->fd (0), or not (< 0). */
  int (*arm)(tdl__bg *bg);
  /* Something is kept: data, fds or an error for the next call to take, or
   * (sending behind) data still to go. */
  bool (*pending)(const tdl__bg *bg);
  /* The fd is being closed: give back what is kept, and say whether the
   * request must still be seen through (the record then lives on, orphaned,
   * until tdl__bg_changed says it is over). */
  bool (*orphan)(tdl__bg *bg);
  /* Give back what the record holds besides its memory (NULL: nothing). */
  void (*release)(tdl__bg *bg);
} tdl__bg_kind;

struct tdl__bg {
  union {
    tdl__msop ms; /* multishot */
    tdl__op op;   /* one send at a time */
  } req;
  const tdl__bg_kind *kind;
  tdl_loop *loop;
  tdl__bgwait *waiter; /* the fiber parked on it, or NULL */
  int fd;              /* sending behind: a duplicate of the program's once orphaned (-1: none) */
  bool on;             /* asked for (tdl_fd_readahead, tdl_fd_writebehind) */
  bool armed;          /* the request is in flight: its last completion has not come */
  bool stopping;       /* a cancel was asked for */
  bool orphan;         /* the fd was closed: the record frees itself when its request is over */
};

/* A zeroed record of `size` bytes (a struct whose first member is its
 * tdl__bg), on, for fd; NULL without memory. */
void *tdl__bg_new(size_t size, const tdl__bg_kind *kind, tdl_loop *loop, int fd);
/* Turn it on or off.  Off stops a multishot request (what is kept is still
 * taken first); a send behind goes on until what is held has gone. */
void tdl__bg_set(tdl__bg *bg, bool on);
/* Ask the kernel to end the request in flight, once; its last completion
 * still comes. */
void tdl__bg_stop(tdl__bg *bg);
/* A fiber is parked on it: one reader (or writer) per fd at a time. */
static inline bool tdl__bg_busy(const tdl__bg *bg) { return bg->waiter != NULL; }
/* Receiving or accepting ahead: data, an fd, an end or an error is kept,
 * and a read or accept returns at once. */
bool tdl__bg_pending(const tdl__bg *bg);
/* Free *slot and clear it if the record is idle: off, keeping nothing, its
 * request over, and no fiber on it (a woken one still to run counts). */
void tdl__bg_free_idle(tdl__bg **slot);
/* The fd is being closed (or its scheduler torn down): wake the fiber
 * parked on it with -EBADF and give back what is kept; the record frees
 * itself when its request is over (at once when none is in flight). */
void tdl__bg_close(tdl__bg *bg);
/* Park f on bg until a completion (tdl__bg_changed), the deadline, a
 * cancel, or the fd's close: then *closed is set, -EBADF returned, and bg
 * may be gone.  It counts in ops_inflight meanwhile: the loop must ask the
 * ring. */
int tdl__bg_park(tdl__fiber *f, tdl__bg *bg, const char *what, tdl_time_t deadline, bool *closed);
/* A completion changed what bg keeps or holds: an orphan whose request is
 * `over` frees itself; otherwise the fiber parked on it wakes. */
void tdl__bg_changed(tdl__bg *bg, bool over);
/* Multishot: a completion has been recorded; `more` (IORING_CQE_F_MORE)
 * false is the request's last, which disarms it.  Then tdl__bg_changed. */
void tdl__bg_completed(tdl__bg *bg, bool more);
/* Multishot: arm the request; false when it is off or cannot be (the call
 * is then made as usual). */
bool tdl__bg_arm(tdl__bg *bg);
/* Multishot: tdl_fd_wait for reading.  TDL_READ once something is kept
 * (arming the request and parking until then), a negative errno (-EBUSY,
 * or the park's, *closed as for tdl__bg_park), or TDL__BG_PASS (as an
 * int) when the request cannot be armed: then poll the fd. */
int tdl__bg_wait(tdl__fiber *f, tdl__bg *bg, tdl_time_t deadline, bool *closed);

/* A background request's answer to a call that is not its to make: make
 * the call as usual.  _LATER (receiving and accepting ahead): as usual, and
 * should it find nothing, come back with `empty` to wait here. */
#define TDL__BG_PASS ((ssize_t)INT32_MIN)
#define TDL__BG_LATER ((ssize_t)INT32_MIN + 1)

/* ---- receiving ahead (ahead.c; tdl_fd_readahead on a connected socket) ---- */

/* Per scheduler: the queue links of the loop's provided buffers (a buffer
 * is queued on one fd at a time). */
typedef struct tdl__ahead_links {
  uint16_t next[TDL__BUFS];
  uint16_t len[TDL__BUFS];
} tdl__ahead_links;

/* A record for fd, on (arming waits for its first read).  -ENOMEM. */
int tdl__ahead_new(tdl_loop *loop, tdl__ahead_links *links, int fd, tdl__bg **out);
/* Read into iov out of what is queued, arming the request and parking when
 * nothing is.  flags: MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT.  `empty`: a read
 * has found the stream empty; until one has, the request is not armed and
 * the answer is TDL__BG_LATER (read as usual first), because data that
 * is there already (a new connection's request) costs one recv, while
 * arming costs a request and, when the fd is closed, a cancel.  Returns
 * bytes, 0 at end of stream, a negative errno (the stream's error once, or
 * -ETIMEDOUT, -ECANCELED, -EAGAIN, -EBADF when closed meanwhile: then
 * *closed is set and the caller's fd state is gone), TDL__BG_PASS or
 * TDL__BG_LATER. */
ssize_t tdl__ahead_read(tdl__fiber *f, tdl__bg *bg, const struct iovec *iov, int iovcnt, int flags, bool empty,
                        tdl_time_t deadline, bool *closed);

/* ---- accepting ahead (acceptahead.c; tdl_fd_readahead on a listener) ---- */

/* A record for the listener fd, on (arming waits for an accept that finds
 * nothing waiting).  -ENOMEM. */
int tdl__acc_new(tdl_loop *loop, int fd, tdl__bg **out);
/* The next queued fd, arming the request and parking when none is (`empty`:
 * an accept4 found nothing waiting; before one has, the answer is
 * TDL__BG_LATER).  Returns the fd, a negative errno (the kernel's error
 * once, or -ETIMEDOUT, -ECANCELED, -EBADF when closed meanwhile: then
 * *closed is set and the caller's fd state is gone), TDL__BG_PASS or
 * TDL__BG_LATER (as ints). */
int tdl__acc_accept(tdl__fiber *f, tdl__bg *bg, bool empty, tdl_time_t deadline, bool *closed);

/* ---- sending behind (behind.c; tdl_fd_writebehind) ---- */

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

/* A record for the socket fd, on.  -ENOMEM.  Closed with the fd, it still
 * sends what it holds (on a duplicate of the fd, made then), and frees
 * itself, closing the duplicate, once that has gone or its deadline
 * passed. */
int tdl__behind_new(tdl_loop *loop, tdl__behind_spares *spares, int fd, tdl__bg **out);
/* tdl_send's part: copy buf behind what is held and return len; or wait
 * for room (deadline) when it does not fit; or TDL__BG_PASS: make the
 * send as usual (nothing is held, and it is too large, or off, or its flags
 * are not MSG_NOSIGNAL/MSG_MORE/MSG_DONTWAIT: then what was held has gone
 * first).  A negative errno: the error a send behind met (once), -EAGAIN
 * (MSG_DONTWAIT and no room), -ETIMEDOUT, -ECANCELED, -EBADF when closed
 * meanwhile (*closed is set: the caller's fd state is gone). */
ssize_t tdl__behind_send(tdl__fiber *f, tdl__bg *bg, const void *buf, size_t len, int flags, tdl_time_t deadline,
                         bool *closed);
/* Wait until nothing is held: 0, the error a send behind met (once), or the
 * park's error (*closed as above). */
int tdl__behind_flush(tdl__fiber *f, tdl__bg *bg, tdl_time_t deadline, bool *closed);
/* Give back the spare buffers that were not taken since the last trim
 * (the scheduler's trim), or all of them (its teardown). */
void tdl__behind_spares_trim(tdl__behind_spares *sp);
void tdl__behind_spares_free(tdl__behind_spares *sp);

#endif /* TDL_FD_INTERNAL_H */
