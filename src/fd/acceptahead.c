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
 *   comes.  Tearing the scheduler down does the same.
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

struct tdl__acc {
  tdl__msop op;
  tdl_loop *loop;
  tdl__bgwait *waiter; /* an acceptor parked for a connection */
  int fd;
  int err;       /* an error to tell the next accept once the queue is empty, or 0 */
  int *q;        /* queued fds, a ring of cap */
  uint32_t head, count, cap;
  bool on;       /* asked for (tdl_fd_readahead) */
  bool armed;    /* the request is in flight: its last completion has not come */
  bool stopping; /* a cancel was asked for (HOLD reached, or turned off) */
  bool orphan;   /* the listener was closed: close what comes, free at the last completion */
};

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

static void close_all(tdl__acc *a)
{
  while (a->count > 0)
    tdl__sys_close(pop(a));
}

static void acc_free(tdl__acc *a)
{
  free(a->q);
  free(a);
}

/* A completion of a's request (from inside the loop's wait: record, wake). */
static void acc_cqe(tdl__msop *op, int res, unsigned flags)
{
  tdl__acc *a = TDL__CONTAINER_OF(op, tdl__acc, op);
  bool more = (flags & IORING_CQE_F_MORE) != 0;
  if (res >= 0) {
    if (a->orphan || !push(a, res)) {
      tdl__sys_close(res); /* (no memory: the peer sees the connection closed) */
    } else if (a->count >= HOLD && more && !a->stopping) {
      a->stopping = true;
      tdl__ring_cancel_ahead(a->loop, op);
    }
  } else if (res == -EINVAL) {
    a->on = false; /* a kernel before 5.19 has no multishot accept: accept as usual */
  } else if (res != -ECANCELED) {
    a->err = res;
  }
  if (!more) {
    a->armed = a->stopping = false;
    if (a->orphan) {
      acc_free(a);
      return;
    }
  }
  if (a->waiter)
    tdl__wake(a->waiter->f, 0);
}

int tdl__acc_new(tdl_loop *loop, int fd, tdl__acc **out)
{
  tdl__acc *a = TDL__FAULT_ALLOC(calloc(1, sizeof *a));
  if (!a)
    return -ENOMEM;
  a->op.cqe = acc_cqe;
  a->loop = loop;
  a->fd = fd;
  a->on = true;
  *out = a;
  return 0;
}

void tdl__acc_set(tdl__acc *a, bool on)
{
  a->on = on;
  if (!on && a->armed && !a->stopping) {
    a->stopping = true;
    tdl__ring_cancel_ahead(a->loop, &a->op);
  }
}

bool tdl__acc_idle(const tdl__acc *a)
{
  return !a->on && !a->armed && a->count == 0 && a->err == 0 && !a->waiter; /* (a woken acceptor still to run) */
}

void tdl__acc_free(tdl__acc *a) { acc_free(a); }

bool tdl__acc_ready(const tdl__acc *a) { return a->count > 0 || a->err != 0; }

bool tdl__acc_busy(const tdl__acc *a) { return a->waiter != NULL; }

void tdl__acc_close(tdl__acc *a)
{
  tdl__bgwait_close(&a->waiter);
  close_all(a);
  if (!a->armed) {
    acc_free(a);
    return;
  }
  a->orphan = true;
  if (!a->stopping) {
    a->stopping = true;
    tdl__ring_cancel_ahead(a->loop, &a->op);
  }
}

/* Park f until a completion of a's request (see tdl__bgwait_park). */
static int park_acceptor(tdl__fiber *f, tdl__acc *a, const char *what, tdl_time_t deadline, bool *closed)
{
  return tdl__bgwait_park(f, &a->waiter, a->loop, what, a->fd, deadline, closed);
}

int tdl__acc_accept(tdl__fiber *f, tdl__acc *a, bool empty, tdl_time_t deadline, bool *closed)
{
  *closed = false;
  if (a->waiter)
    return -EBUSY; /* one acceptor per listener at a time, as for every read */
  for (;;) {
    if (a->count > 0)
      return pop(a);
    if (a->err) {
      int e = a->err;
      a->err = 0;
      return e;
    }
    if (!a->armed) {
      if (!a->on)
        return (int)TDL__AHEAD_PASS;
      if (!empty)
        return (int)TDL__AHEAD_LATER; /* accept4 first: connections may be waiting */
      if (tdl__ring_accept_ahead(a->loop, &a->op, a->fd) < 0)
        return (int)TDL__AHEAD_PASS;
      a->armed = true;
    }
    int e = park_acceptor(f, a, "accept", deadline, closed);
    if (e < 0)
      return e;
  }
}

int tdl__acc_wait(tdl__fiber *f, tdl__acc *a, tdl_time_t deadline, bool *closed)
{
  *closed = false;
  if (a->waiter)
    return -EBUSY;
  for (;;) {
    if (a->count > 0 || a->err)
      return TDL_READ;
    if (!a->armed) {
      if (!a->on || tdl__ring_accept_ahead(a->loop, &a->op, a->fd) < 0)
        return (int)TDL__AHEAD_PASS; /* off: poll the listener */
      a->armed = true;
    }
    int e = park_acceptor(f, a, "wait read", deadline, closed);
    if (e < 0)
      return e;
  }
}
