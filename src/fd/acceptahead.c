/* SPDX-License-Identifier: MIT */
/*
 * Accepting ahead (fiber.h: tdl_fd_readahead on a listening socket), on
 * loops whose back end is uring: the listener's counterpart of receiving
 * ahead (fd/ahead.c).
 *
 * An accept that finds no connection waiting costs, on uring, a failed
 * accept4 and then an accept request, which the kernel arms and disarms
 * around each connection.  Accepting ahead keeps one multishot accept armed
 * instead: every connection that comes is accepted by the kernel at once
 * (non-blocking, close-on-exec) and its fd posted in a completion; the fds
 * queue here in arrival order and tdl_net_accept takes them, with no system
 * call.  When connections come and go (a request each) that is measured
 * below an accept4 per connection (docs/PERFORMANCE.md).
 *
 * What that asks of the program, and what is done about it:
 * - The request is armed only when an accept finds nothing waiting: until
 *   then accepts are ordinary accept4 calls, as for receiving ahead.
 * - Accepted fds count against the process's fd limit before anyone asked
 *   for them: after HOLD of them are queued the request is cancelled (the
 *   kernel's backlog holds the rest), and armed again when an accept finds
 *   the queue empty.  Completions already on their way when it is cancelled
 *   are still queued: none is dropped.
 * - An error the kernel ends the request with (EMFILE, ENFILE, ENOBUFS...)
 *   is told once, to the next accept, after what was queued before it,
 *   which is what tdl_net_accept's back-off and shedding act on.
 * - A peer address is asked for with getpeername(): a multishot accept has
 *   none to give.
 * - The request holds the listener open: tdl_close cancels it, closes the
 *   fds still queued (their peers see the connection closed, as they would
 *   had the listener gone with them in its backlog), and the record lives
 *   on, orphaned, until the last completion, closing any fd that still
 *   comes.  Tearing the scheduler down does the same.  (That life cycle is
 *   fd/background.c's; this file keeps the queue of fds.)
 */
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/sys.h"
#include "fd/fd_internal.h"

/* Fds one listener may hold before accepting ahead pauses. */
enum { HOLD = 32, QUEUE_MIN = 64 };

typedef struct tdl__acc {
  tdl__bg bg; /* first: the record is freed as a tdl__bg */
  int err;    /* an error to tell the next accept once the queue is empty, or 0 */
  int *q;     /* queued fds, a ring of cap */
  uint32_t head, count, cap;
} tdl__acc;

/* Queue fd; the ring grows when completions on their way after a cancel
 * overfill it.  false: no memory (the caller closes fd). */
static bool push(tdl__acc *a, int fd)
{
  if (a->count == a->cap) {
    uint32_t cap = a->cap ? a->cap * 2 : QUEUE_MIN;
    int *q = TDL__FAULT_ALLOC(malloc(sizeof *q * cap));
    if (!q)
      return false;
    for (uint32_t i = 0; i < a->count; i++)
      q[i] = a->q[(a->head + i) % a->cap];
    free(a->q);
    a->q = q;
    a->head = 0;
    a->cap = cap;
  }
  a->q[(a->head + a->count) % a->cap] = fd;
  a->count++;
  return true;
}

static int pop(tdl__acc *a)
{
  int fd = a->q[a->head];
  a->head = (a->head + 1) % a->cap;
  a->count--;
  return fd;
}

/* A completion of a's request (from inside the loop's wait: record, wake). */
static void acc_cqe(tdl__msop *op, int res, unsigned flags)
{
  tdl__acc *a = TDL__CONTAINER_OF(op, tdl__acc, bg.req.ms);
  bool more = (flags & IORING_CQE_F_MORE) != 0;
  if (res >= 0) {
    if (a->bg.orphan || !push(a, res))
      tdl__sys_close(res); /* (no memory: the peer sees the connection closed) */
    else if (a->count >= HOLD && more)
      tdl__bg_stop(&a->bg);
  } else if (res == -EINVAL) {
    a->bg.on = false; /* a kernel before 5.19 has no multishot accept: accept as usual */
  } else if (res != -ECANCELED) {
    a->err = res;
  }
  tdl__bg_completed(&a->bg, more);
}

static int acc_arm(tdl__bg *bg) { return tdl__ring_accept_ahead(bg->loop, &bg->req.ms, bg->fd); }

static bool acc_pending(const tdl__bg *bg)
{
  const tdl__acc *a = (const tdl__acc *)bg;
  return a->count > 0 || a->err != 0;
}

/* The queued connections are closed now (their peers see them closed); a
 * connection the kernel accepts before the cancel ends the request is
 * closed as it comes (acc_cqe). */
static bool acc_orphan(tdl__bg *bg)
{
  tdl__acc *a = (tdl__acc *)bg;
  while (a->count > 0)
    tdl__sys_close(pop(a));
  if (!bg->armed)
    return false;
  tdl__bg_stop(bg);
  return true;
}

static void acc_release(tdl__bg *bg) { free(((tdl__acc *)bg)->q); }

static const tdl__bg_kind acc_kind = {
    .multishot = true, .arm = acc_arm, .pending = acc_pending, .orphan = acc_orphan, .release = acc_release};

int tdl__acc_new(tdl_loop *loop, int fd, tdl__bg **out)
{
  tdl__acc *a = tdl__bg_new(sizeof *a, &acc_kind, loop, fd);
  if (!a)
    return -ENOMEM;
  a->bg.req.ms.cqe = acc_cqe;
  *out = &a->bg;
  return 0;
}

int tdl__acc_accept(tdl__fiber *f, tdl__bg *bg, bool empty, tdl_time_t deadline, bool *closed)
{
  tdl__acc *a = (tdl__acc *)bg;
  *closed = false;
  if (tdl__bg_busy(bg))
    return -EBUSY; /* one acceptor per listener at a time, as for every read */
  for (;;) {
    if (a->count > 0)
      return pop(a);
    if (a->err) {
      int e = a->err;
      a->err = 0;
      return e;
    }
    if (!bg->armed) {
      if (!bg->on)
        return (int)TDL__BG_PASS;
      if (!empty)
        return (int)TDL__BG_LATER; /* accept4 first: connections may be waiting */
      if (!tdl__bg_arm(bg))
        return (int)TDL__BG_PASS;
    }
    int e = tdl__bg_park(f, bg, "accept", deadline, closed);
    if (e < 0)
      return e;
  }
}
