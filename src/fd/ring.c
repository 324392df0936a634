/* SPDX-License-Identifier: MIT */
/*
 * Fiber I/O as io_uring operations, on loops whose back end is uring.
 *
 * The call becomes a submission entry and the fiber parks; the loop submits
 * every entry queued by its fibers in one io_uring_enter and wakes each fiber
 * from its completion.  The record of the operation is on the fiber's stack,
 * so the fiber must not return before the kernel is done with it and with
 * the caller's buffer: a deadline or cancel only asks for the operation to
 * end (an async cancel) and waits for the completion, which then carries
 * either -ECANCELED or the operation's real result.  A read that completed
 * just as its deadline passed is returned, not lost.
 *
 * An operation holds its file open, so close() alone would never end it:
 * each fd's operations are listed on its fiber-I/O state, and tdl_close
 * cancels them by fd (tdl__fd_ring_closed) before it closes; their fibers
 * get -EBADF, as fibers waiting for readiness do.
 */
#include <liburing.h>
#include <poll.h>
#include <sys/socket.h>

#include "fd/fd_internal.h"

#include "base/memcheck.h" /* memcheck does not see what the kernel writes through the ring */

typedef struct ring_wait {
  tdl__op op;
  tdl__list link;   /* on the fd's list while in flight */
  tdl__fiber *f;
  int res;
  unsigned dir;     /* TDL_READ or TDL_WRITE */
  bool done;        /* the completion came */
  bool closed;      /* tdl_close took it off the fd's list */
  bool cancelled;   /* a cancel was asked for */
} ring_wait;

static void ring_done(tdl__op *op, int res)
{
  ring_wait *w = TDL__CONTAINER_OF(op, ring_wait, op);
  w->res = res;
  w->done = true;
  tdl__wake(w->f, 0);
}

/* A deadline or cancel ended the park: ask the kernel now, from the timer's
 * or the canceller's context, rather than when the fiber next runs. */
static void abort_ring_wait(tdl__fiber *f)
{
  ring_wait *w = f->abort_ctx;
  if (!w->done && !w->cancelled) {
    w->cancelled = true;
    tdl__ring_cancel(f->sched->loop, &w->op);
  }
}

static void prep(struct io_uring_sqe *sqe, const tdl__uop *u)
{
  /* One read or write moves at most INT_MAX bytes (Linux stops short of it
   * anyway); the ring's length field is 32 bits. */
  unsigned len = u->len > INT32_MAX ? INT32_MAX : (unsigned)u->len;
  uint64_t off = u->at ? u->off : (uint64_t)-1; /* -1: the file position, as read(2) */
  switch (u->code) {
  case IORING_OP_READ:
    io_uring_prep_read(sqe, u->fd, u->addr, len, off);
    break;
  case IORING_OP_WRITE:
    io_uring_prep_write(sqe, u->fd, u->addr, len, off);
    break;
  case IORING_OP_READV:
    io_uring_prep_readv(sqe, u->fd, u->addr, len, off);
    break;
  case IORING_OP_WRITEV:
    io_uring_prep_writev(sqe, u->fd, u->addr, len, off);
    break;
  case IORING_OP_RECV:
    io_uring_prep_recv(sqe, u->fd, u->addr, len, u->flags);
    break;
  case IORING_OP_SEND:
    io_uring_prep_send(sqe, u->fd, u->addr, len, u->flags);
    break;
  case IORING_OP_ACCEPT:
    io_uring_prep_accept(sqe, u->fd, u->addr, u->addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    break;
  case IORING_OP_CONNECT:
    io_uring_prep_connect(sqe, u->fd, u->addr, (socklen_t)u->len);
    break;
  case IORING_OP_POLL_ADD:
    io_uring_prep_poll_add(sqe, u->fd, ((u->flags & TDL_READ) ? POLLIN : 0) | ((u->flags & TDL_WRITE) ? POLLOUT : 0));
    break;
  case IORING_OP_OPENAT:
    io_uring_prep_openat(sqe, u->fd, u->path, u->flags, (mode_t)u->len);
    break;
  case IORING_OP_STATX:
    io_uring_prep_statx(sqe, u->fd, u->path, u->flags, (unsigned)u->len, u->addr);
    break;
  default:
    io_uring_prep_nop(sqe);
    break;
  }
}

/* Which way an operation moves data: one reader and one writer per fd at a
 * time, as for fibers waiting for readiness (fiber.h, -EBUSY). */
static unsigned direction(const tdl__uop *u)
{
  switch (u->code) {
  case IORING_OP_POLL_ADD:
    return (unsigned)u->flags;
  case IORING_OP_READ:
  case IORING_OP_READV:
  case IORING_OP_RECV:
  case IORING_OP_ACCEPT:
    return TDL_READ;
  default:
    return TDL_WRITE;
  }
}

bool tdl__fd_ring_busy(const tdl__list *on_fd, unsigned events)
{
  /* An operation whose cancel was asked for no longer counts: its fd is
   * free for the canceller at once (fiber.h), as on epoll. */
  TDL__LIST_FOREACH(n, on_fd) {
    const ring_wait *o = TDL__CONTAINER_OF(n, ring_wait, link);
    if ((o->dir & events) && !o->cancelled)
      return true;
  }
  return false;
}

/* What a completed operation wrote into the caller's memory. */
static void kernel_wrote(const tdl__uop *u, int res)
{
  if (res <= 0 && u->code != IORING_OP_ACCEPT && u->code != IORING_OP_STATX)
    return;
  switch (u->code) {
  case IORING_OP_STATX:
    if (res == 0)
      VALGRIND_MAKE_MEM_DEFINED(u->addr, 256); /* the kernel's struct statx, whatever the libc knows of it */
    break;
  case IORING_OP_READ:
  case IORING_OP_RECV:
    VALGRIND_MAKE_MEM_DEFINED(u->addr, (size_t)res);
    break;
  case IORING_OP_READV: {
    const struct iovec *iov = u->addr;
    size_t left = (size_t)res;
    for (size_t i = 0; i < u->len && left; i++) {
      size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;
      VALGRIND_MAKE_MEM_DEFINED(iov[i].iov_base, n);
      left -= n;
    }
    break;
  }
  case IORING_OP_ACCEPT:
    if (res >= 0 && u->addrlen) {
      VALGRIND_MAKE_MEM_DEFINED(u->addrlen, sizeof *u->addrlen);
      if (u->addr)
        VALGRIND_MAKE_MEM_DEFINED(u->addr, *u->addrlen);
    }
    break;
  default:
    break;
  }
}

ssize_t tdl__fd_ring_io(tdl__fiber *f, tdl__list *on_fd, const tdl__uop *u, const char *what, tdl_time_t deadline,
                     bool *closed)
{
  *closed = false;
  tdl_loop *loop = f->sched->loop;
  ring_wait w = {.op.done = ring_done, .f = f, .dir = direction(u)};
  if (tdl__fd_ring_busy(on_fd, w.dir))
    return -EBUSY;
  for (;;) {
    int e;
    struct io_uring_sqe *sqe = tdl__ring_sqe(loop, &w.op, &e);
    if (!sqe)
      return e;
    prep(sqe, u);
    tdl__list_push(on_fd, &w.link);
    f->abort_wait = abort_ring_wait;
    /* Read only through abort_wait, which is NULL again before w goes. */
    /* cppcheck-suppress autoVariables */
    f->abort_ctx = &w;
    TDL__COUNT(loop, io_parks, 1);
    e = tdl__park(f, what, u->fd, deadline);
    f->abort_wait = NULL;
    if (!w.done) {
      /* A deadline or cancel (asked already by abort_ring_wait), or a park
       * that did not happen (already cancelled, deadline already past, no
       * memory for the deadline's timer: that error is the caller's): the
       * kernel has the operation until it completes. */
      if (e == 0)
        e = -ECANCELED;
      /* For the call below only. */
      /* cppcheck-suppress autoVariables */
      f->abort_ctx = &w;
      abort_ring_wait(f);
      while (!w.done)
        tdl__park_uncancellable(f, what);
    }
    if (tdl__list_linked(&w.link))
      tdl__list_remove(&w.link);
    *closed = w.closed;
    if (w.res == -ECANCELED && !w.cancelled && !w.closed) {
      /* Nobody asked for it: the kernel dropped the operation before it
       * began.  io-wq does that to the work it cannot find a worker thread
       * for, when creating one keeps failing (Linux's io_should_retry_thread
       * gives up after three tries; a signal pending at each is enough:
       * test_signals_storm's file writes met it).  Nothing was done, so it
       * is submitted again, within the same deadline. */
      w.done = false;
      continue;
    }
    if (w.res == -ECANCELED)
      return w.closed ? -EBADF : e < 0 ? e : -ECANCELED;
    /* A signal interrupted it: again, as SA_RESTART would.  Not when this
     * fiber asked for the cancel (its deadline passed) or was cancelled:
     * io-wq cancels an operation blocked in a worker by signalling the
     * worker, which ends it with -EINTR, and resubmitting it past its
     * deadline would only be cancelled again, for ever; the caller gets the
     * deadline's or the cancel's error. */
    if (w.res == -EINTR) {
      if (!f->cancelled && !w.cancelled) {
        w.done = false;
        continue;
      }
      return e < 0 ? e : -ECANCELED;
    }
    kernel_wrote(u, w.res);
    if (w.res >= 0)
      tdl__io_budget_spend(f);
    return w.res;
  }
}

void tdl__fd_ring_closed(tdl_loop *loop, int fd, tdl__list *on_fd)
{
  /* Unlink them all: the list's owner is about to be freed, and a closed
   * wait no longer touches it. */
  bool any = false;
  for (tdl__list *n; (n = tdl__list_pop(on_fd)) != NULL; any = true)
    TDL__CONTAINER_OF(n, ring_wait, link)->closed = true;
  if (any)
    tdl__ring_cancel_fd(loop, fd);
}
