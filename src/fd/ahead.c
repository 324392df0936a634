/* SPDX-License-Identifier: MIT */
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
 *   the scheduler down does the same for every fd still open.  (That life
 *   cycle is fd/background.c's, shared with accepting ahead and sending
 *   behind; this file keeps the buffers and their queue.)
 */
#include <liburing.h>
#include <string.h>
#include <sys/socket.h>

#include "fd/fd_internal.h"

#include "base/memcheck.h" /* memcheck does not see what the kernel writes through the ring */

/* Buffers one fd may hold before receiving ahead pauses (HOLD * 2 KiB). */
enum { HOLD = 8, NO_BUF = 0xffff };

typedef struct tdl__ahead {
  tdl__bg bg;          /* first: the record is freed as a tdl__bg */
  tdl__ahead_links *links; /* the scheduler's per-buffer queue links */
  int end;             /* after the queued data: END_OF_STREAM, a negative errno, or 0 */
  uint16_t head, tail; /* queued buffer ids, oldest first (NO_BUF: none) */
  uint16_t off;        /* bytes of the head buffer already read */
  uint16_t count;      /* buffers queued */
  bool nobufs;         /* the last request ended for want of buffers */
} tdl__ahead;

enum { END_OF_STREAM = 1 };

static void give_back_all(tdl__ahead *a)
{
  for (uint16_t b = a->head; b != NO_BUF; b = a->links->next[b])
    tdl__ring_buf_put(a->bg.loop, b);
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
  tdl__ahead *a = TDL__CONTAINER_OF(op, tdl__ahead, bg.req.ms);
  bool more = (flags & IORING_CQE_F_MORE) != 0;
  if (res > 0 && (flags & IORING_CQE_F_BUFFER)) {
    unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
    VALGRIND_MAKE_MEM_DEFINED(tdl__ring_buf(a->bg.loop, bid), (size_t)res);
    if (a->bg.orphan) {
      tdl__ring_buf_put(a->bg.loop, bid);
    } else {
      queue_buf(a, bid, res);
      if (a->count >= HOLD && more)
        tdl__bg_stop(&a->bg);
    }
  } else if (res == 0) {
    a->end = END_OF_STREAM;
  } else if (res == -ENOBUFS) {
    a->nobufs = true;
  } else if (res == -EINVAL) {
    a->bg.on = false; /* a kernel before 6.0 has no multishot receive: read as usual */
  } else if (res < 0 && res != -ECANCELED) {
    a->end = res;
  }
  tdl__bg_completed(&a->bg, more);
}

static int ahead_arm(tdl__bg *bg)
{
  tdl__ahead *a = (tdl__ahead *)bg;
  return a->nobufs ? -ENOBUFS : tdl__ring_recv_ahead(bg->loop, &bg->req.ms, bg->fd);
}

static bool ahead_pending(const tdl__bg *bg)
{
  const tdl__ahead *a = (const tdl__ahead *)bg;
  return a->count > 0 || a->end != 0;
}

/* The buffers go back now; the cancel is run by the kernel at once
 * (tdl__ring_cancel_ahead), which lets the socket go; the last completion is
 * reaped later, or when the scheduler is torn down, and frees the record. */
static bool ahead_orphan(tdl__bg *bg)
{
  give_back_all((tdl__ahead *)bg);
  if (!bg->armed)
    return false;
  tdl__bg_stop(bg);
  return true;
}

static const tdl__bg_kind ahead_kind = {
    .multishot = true, .arm = ahead_arm, .pending = ahead_pending, .orphan = ahead_orphan};

int tdl__ahead_new(tdl_loop *loop, tdl__ahead_links *links, int fd, tdl__bg **out)
{
  tdl__ahead *a = tdl__bg_new(sizeof *a, &ahead_kind, loop, fd);
  if (!a)
    return -ENOMEM;
  a->bg.req.ms.cqe = ahead_cqe;
  a->links = links;
  a->head = a->tail = NO_BUF;
  *out = &a->bg;
  return 0;
}

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
    memcpy((char *)iov[i].iov_base + at, tdl__ring_buf(a->bg.loop, b) + off, n);
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
        tdl__ring_buf_put(a->bg.loop, b);
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

ssize_t tdl__ahead_read(tdl__fiber *f, tdl__bg *bg, const struct iovec *iov, int iovcnt, int flags, bool empty,
                        tdl_time_t deadline, bool *closed)
{
  tdl__ahead *a = (tdl__ahead *)bg;
  *closed = false;
  if (tdl__bg_busy(bg))
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
    if (!bg->armed) {
      /* (MSG_WAITALL gathers here, where an ordinary read of a
       * non-blocking socket would come back short.) */
      if (!empty && !got && bg->on && !a->nobufs && !(flags & MSG_WAITALL))
        return TDL__BG_LATER;
      if (!tdl__bg_arm(bg)) {
        a->nobufs = false;
        return got ? (ssize_t)got : TDL__BG_PASS; /* an ordinary read this time */
      }
    }
    if (flags & MSG_DONTWAIT)
      return got ? (ssize_t)got : -EAGAIN;
    int e = tdl__bg_park(f, bg, "recv", deadline, closed);
    if (*closed)
      return got ? (ssize_t)got : -EBADF;
    if (e < 0)
      return got ? (ssize_t)got : e;
  }
}
