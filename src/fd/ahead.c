/*
 * Receiving ahead (fiber.h: tdl_fd_readahead), on loops whose back end is
 * uring.
 *
 * A connection's fiber that reads with one receive request per read pays,
 * per read, for the request and for the kernel arming and disarming its wait
 * on the socket.  Receiving ahead keeps one multishot receive armed instead:
 * whenever data comes the kernel receives it into one of the loop's provided
 * buffers and posts a completion, and the request stays armed.  Those
 * buffers queue here, per fd, in arrival order; a read copies out of them
 * and gives each back to the kernel once it is empty.  A read that finds
 * nothing queued parks until the next completion.
 *
 * What that asks of the program, and what is done about it:
 * - Every read of the fd must come here (tdl_read, tdl_recv, tdl_readv,
 *   tdl_recvfrom): a read(2) of the socket would overtake what is queued.
 *   That is why it is asked for per fd, by code that owns the connection.
 * - A timed-out or cancelled read loses nothing: what comes stays queued
 *   for the next read, and no request has to be cancelled.
 * - The kernel would go on receiving for a reader that does not read, and
 *   TCP's flow control would never tell the peer to slow down: after HOLD
 *   buffers are queued the request is cancelled, and armed again only when
 *   a read has emptied the queue.
 * - The request is armed only when a read finds the stream empty (a
 *   short read, or EAGAIN): until then reads are ordinary receives.  A
 *   connection that brings its request with it and closes after the
 *   answer (HTTP's "Connection: close") then costs no request and no
 *   cancel at all.
 * - The loop's buffers can all be taken (the kernel then ends the request
 *   with -ENOBUFS): that fd's next read with nothing queued is an ordinary
 *   receive into the caller's buffer, and the one after arms again.
 * - The request holds the socket open: tdl_close cancels it, and the record
 *   lives on, orphaned, until the kernel's last completion for it.  Tearing
 *   the scheduler down does the same for every fd still open.
 */
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fd/fd_internal.h"

#include "base/memcheck.h" /* memcheck does not see what the kernel writes through the ring */

/* Buffers one fd may hold before receiving ahead pauses (HOLD * 2 KiB). */
enum { HOLD = 8, NO_BUF = 0xffff };

struct tdl__ahead {
  tdl__msop op;
  tdl_loop *loop;
  tdl__ahead_links *links; /* the scheduler's per-buffer queue links */
  tdl__bgwait *waiter; /* a reader parked for data */
  int fd;
  int end;           /* after the queued data: END_OF_STREAM, a negative errno, or 0 */
  uint16_t head, tail; /* queued buffer ids, oldest first (NO_BUF: none) */
  uint16_t off;      /* bytes of the head buffer already read */
  uint16_t count;    /* buffers queued */
  bool on;           /* asked for (tdl_fd_readahead) */
  bool armed;        /* the request is in flight: its last completion has not come */
  bool stopping;     /* a cancel was asked for (too many buffers held, or turned off) */
  bool nobufs;       /* the last request ended for want of buffers */
  bool orphan;       /* the fd was closed: free at the last completion */
};

enum { END_OF_STREAM = 1 };

static void give_back_all(tdl__ahead *a)
{
  for (uint16_t b = a->head; b != NO_BUF; b = a->links->next[b])
    tdl__ring_buf_put(a->loop, b);
  a->head = a->tail = NO_BUF;
  a->count = 0;
  a->off = 0;
}

static void queue_buf(tdl__ahead *a, unsigned bid, int len)
{
  a->links->next[bid] = NO_BUF;
  a->links->len[bid] = (uint16_t)len;
  if (a->tail == NO_BUF)
    a->head = (uint16_t)bid;
  else
    a->links->next[a->tail] = (uint16_t)bid;
  a->tail = (uint16_t)bid;
  a->count++;
}

/* A completion of a's request (from inside the loop's wait: record, wake). */
static void ahead_cqe(tdl__msop *op, int res, unsigned flags)
{
  tdl__ahead *a = TDL__CONTAINER_OF(op, tdl__ahead, op);
  bool more = (flags & IORING_CQE_F_MORE) != 0;
  if (res > 0 && (flags & IORING_CQE_F_BUFFER)) {
    unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
    VALGRIND_MAKE_MEM_DEFINED(tdl__ring_buf(a->loop, bid), (size_t)res);
    if (a->orphan) {
      tdl__ring_buf_put(a->loop, bid);
    } else {
      queue_buf(a, bid, res);
      if (a->count >= HOLD && more && !a->stopping) {
        a->stopping = true;
        tdl__ring_cancel_ahead(a->loop, op);
      }
    }
  } else if (res == 0) {
    a->end = END_OF_STREAM;
  } else if (res == -ENOBUFS) {
    a->nobufs = true;
  } else if (res == -EINVAL) {
    a->on = false; /* a kernel before 6.0 has no multishot receive: read as usual */
  } else if (res < 0 && res != -ECANCELED) {
    a->end = res;
  }
  if (!more) {
    a->armed = a->stopping = false;
    if (a->orphan) {
      free(a);
      return;
    }
  }
  if (a->waiter)
    tdl__wake(a->waiter->f, 0);
}

int tdl__ahead_new(tdl_loop *loop, tdl__ahead_links *links, int fd, tdl__ahead **out)
{
  tdl__ahead *a = TDL__FAULT_ALLOC(calloc(1, sizeof *a));
  if (!a)
    return -ENOMEM;
  a->op.cqe = ahead_cqe;
  a->loop = loop;
  a->links = links;
  a->fd = fd;
  a->head = a->tail = NO_BUF;
  a->on = true;
  *out = a;
  return 0;
}

void tdl__ahead_set(tdl__ahead *a, bool on)
{
  a->on = on;
  if (!on && a->armed && !a->stopping) {
    a->stopping = true;
    tdl__ring_cancel_ahead(a->loop, &a->op);
  }
}

bool tdl__ahead_idle(const tdl__ahead *a)
{
  return !a->on && !a->armed && a->count == 0 && a->end == 0 && !a->waiter; /* (a woken reader still to run) */
}

void tdl__ahead_free(tdl__ahead *a) { free(a); }

void tdl__ahead_close(tdl__ahead *a)
{
  tdl__bgwait_close(&a->waiter);
  give_back_all(a);
  if (!a->armed) {
    free(a);
    return;
  }
  /* The cancel is run by the kernel at once (tdl__ring_cancel_ahead), which
   * lets the socket go; the last completion is reaped later, or when the
   * scheduler is torn down, and frees the record. */
  a->orphan = true;
  if (!a->stopping) {
    a->stopping = true;
    tdl__ring_cancel_ahead(a->loop, &a->op);
  }
}

bool tdl__ahead_ready(const tdl__ahead *a) { return a->count > 0 || a->end != 0; }

bool tdl__ahead_busy(const tdl__ahead *a) { return a->waiter != NULL; }

/* Copy up to the iovecs' room (after `skip` bytes of it) out of a's queue;
 * unless peeking, what is copied is consumed and emptied buffers go back. */
static size_t take(tdl__ahead *a, const struct iovec *iov, int iovcnt, size_t skip, bool peek)
{
  size_t done = 0;
  uint16_t b = a->head, off = a->off;
  int i = 0;
  size_t at = 0; /* offset in iov[i] */
  while (i < iovcnt && skip >= iov[i].iov_len) {
    skip -= iov[i].iov_len;
    i++;
  }
  at = skip;
  while (b != NO_BUF && i < iovcnt) {
    size_t avail = (size_t)a->links->len[b] - off;
    size_t room = iov[i].iov_len - at;
    size_t n = avail < room ? avail : room;
    memcpy((char *)iov[i].iov_base + at, tdl__ring_buf(a->loop, b) + off, n);
    done += n;
    at += n;
    off = (uint16_t)(off + n);
    if (at == iov[i].iov_len) {
      i++;
      at = 0;
    }
    if (off == a->links->len[b]) {
      uint16_t next = a->links->next[b];
      if (!peek) {
        tdl__ring_buf_put(a->loop, b);
        a->count--;
        a->head = next;
        if (next == NO_BUF)
          a->tail = NO_BUF;
      }
      b = next;
      off = 0;
    }
  }
  if (!peek)
    a->off = off;
  return done;
}

/* ---- a fiber parked for a background request (also fd/acceptahead.c) ---- */

/* A deadline or cancel ended the park: no completion may wake it now. */
static void abort_bgwait(tdl__fiber *f) { *(tdl__bgwait **)f->abort_ctx = NULL; }

int tdl__bgwait_park(tdl__fiber *f, tdl__bgwait **slot, tdl_loop *loop, const char *what, int fd,
                     tdl_time_t deadline, bool *closed)
{
  tdl__bgwait w = {.f = f};
  *slot = &w;
  f->abort_wait = abort_bgwait;
  f->abort_ctx = slot;
  loop->ops_inflight++; /* a completion will wake a fiber: the loop must ask the ring */
  int e = tdl__park(f, what, fd, deadline);
  loop->ops_inflight--;
  f->abort_wait = NULL;
  if (w.closed) {
    *closed = true;
    return -EBADF;
  }
  *slot = NULL;
  return e;
}

void tdl__bgwait_close(tdl__bgwait **slot)
{
  if (*slot) {
    (*slot)->closed = true;
    tdl__wake((*slot)->f, -EBADF);
    *slot = NULL;
  }
}

/* Park f until a completion of a's request (see tdl__bgwait_park). */
static int park_reader(tdl__fiber *f, tdl__ahead *a, const char *what, tdl_time_t deadline, bool *closed)
{
  return tdl__bgwait_park(f, &a->waiter, a->loop, what, a->fd, deadline, closed);
}

ssize_t tdl__ahead_read(tdl__fiber *f, tdl__ahead *a, const struct iovec *iov, int iovcnt, int flags,
                        bool empty, tdl_time_t deadline, bool *closed)
{
  *closed = false;
  if (a->waiter)
    return -EBUSY; /* one reader per fd at a time, as for every read */
  size_t want = 0;
  for (int i = 0; i < iovcnt; i++)
    want += iov[i].iov_len;
  size_t got = 0;
  for (;;) {
    if (a->count > 0) {
      got += take(a, iov, iovcnt, got, (flags & MSG_PEEK) != 0);
      if (got == want || !(flags & MSG_WAITALL) || (flags & MSG_PEEK))
        return (ssize_t)got;
      continue; /* the queue is empty now: wait for the rest */
    }
    if (want == 0)
      return 0;
    if (a->end) {
      if (got)
        return (ssize_t)got;
      int end = a->end;
      if (end < 0)
        a->end = 0; /* an error is told once; the end of the stream stays */
      return end < 0 ? end : 0;
    }
    if (!a->armed) {
      /* (MSG_WAITALL gathers here, where an ordinary read of a
       * non-blocking socket would come back short.) */
      if (!empty && !got && a->on && !a->nobufs && !(flags & MSG_WAITALL))
        return TDL__AHEAD_LATER;
      if (!a->on || a->nobufs || tdl__ring_recv_ahead(a->loop, &a->op, a->fd) < 0) {
        a->nobufs = false;
        return got ? (ssize_t)got : TDL__AHEAD_PASS; /* an ordinary read this time */
      }
      a->armed = true;
    }
    if (flags & MSG_DONTWAIT)
      return got ? (ssize_t)got : -EAGAIN;
    int e = park_reader(f, a, "recv", deadline, closed);
    if (*closed)
      return got ? (ssize_t)got : -EBADF;
    if (e < 0)
      return got ? (ssize_t)got : e;
  }
}

int tdl__ahead_wait(tdl__fiber *f, tdl__ahead *a, tdl_time_t deadline, bool *closed)
{
  *closed = false;
  if (a->waiter)
    return -EBUSY;
  for (;;) {
    if (a->count > 0 || a->end)
      return TDL_READ;
    if (!a->armed) {
      /* Off, or out of buffers (the data waits in the socket): poll it. */
      if (!a->on || a->nobufs || tdl__ring_recv_ahead(a->loop, &a->op, a->fd) < 0)
        return (int)TDL__AHEAD_PASS;
      a->armed = true;
    }
    int e = park_reader(f, a, "wait read", deadline, closed);
    if (*closed)
      return -EBADF;
    if (e < 0)
      return e;
  }
}
