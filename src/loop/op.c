/* SPDX-License-Identifier: MIT */
/*
 * Operations (loop.h: tdl_op): reads and writes that the kernel completes,
 * for callback code on uring loops.
 *
 * An op is submitted through the back end's ring like fiber I/O's
 * operations; its completion only links it on the loop's list of completed
 * ops (done() runs inside the back end's wait, where user code must not), and
 * the loop calls the callbacks after its wait, oldest first, as it runs
 * watchers.  Built without liburing, every submission is -ENOTSUP.
 */
#include <stdlib.h>

#include "loop/loop_internal.h"

#ifdef TDL_HAVE_URING
#include <liburing.h>
#endif
#include "base/memcheck.h" /* memcheck does not see what the kernel writes through the ring */

enum { OP_IDLE = 0, OP_INFLIGHT, OP_DONE };

void tdl_op_init(tdl_op *op, void *data) { *op = (tdl_op){.data = data}; }

bool tdl_op_active(const tdl_op *op) { return op->state_ != OP_IDLE; }

#ifdef TDL_HAVE_URING
static bool resubmit(tdl_loop *loop, tdl_op *op);
#else
static bool resubmit(tdl_loop *loop, tdl_op *op) { (void)loop, (void)op; return false; }
#endif

void tdl__ops_run(tdl_loop *loop)
{
  /* Only what completed before this call: a callback that submits again
   * completes in a later iteration. */
  tdl__list batch = {0};
  tdl__list_splice(&batch, &loop->ops_done);
  tdl__list *n;
  while ((n = tdl__list_pop(&batch)) != NULL) {
    tdl_op *op = TDL__CONTAINER_OF(n, tdl_op, link_);
    op->state_ = OP_IDLE;
    if (op->result_ == -ECANCELED && !op->asked_ && resubmit(loop, op))
      continue;
    op->cb(loop, op, op->result_);
  }
}

#ifdef TDL_HAVE_URING
static void op_done(tdl__op *base, int res)
{
  tdl_op *op = TDL__CONTAINER_OF(base, tdl_op, base_);
  op->result_ = res;
  op->state_ = OP_DONE;
  if (op->code_ == IORING_OP_READ && res > 0)
    VALGRIND_MAKE_MEM_DEFINED(op->buf_, (size_t)res);
  tdl__list_push(&op->loop_->ops_done, &op->link_);
}

static int submit(tdl_loop *loop, tdl_op *op, uint8_t code, int fd, void *buf, size_t len, tdl_op_cb cb)
{
  if (!op || !cb)
    return -EINVAL;
  TDL__CHECK_THREAD(loop);
  if (!tdl__loop_ring(loop))
    return -ENOTSUP;
  if (op->state_ != OP_IDLE)
    return -EBUSY;
  int e;
  op->base_.done = op_done;
  struct io_uring_sqe *sqe = tdl__ring_sqe(loop, &op->base_, &e);
  if (!sqe)
    return e;
  unsigned n = len > INT32_MAX ? INT32_MAX : (unsigned)len;
  if (code == IORING_OP_READ)
    io_uring_prep_read(sqe, fd, buf, n, (uint64_t)-1);
  else
    io_uring_prep_write(sqe, fd, buf, n, (uint64_t)-1);
  op->loop_ = loop;
  op->buf_ = buf;
  op->fd_ = fd;
  op->len_ = n;
  op->code_ = code;
  op->asked_ = 0;
  op->cb = cb;
  op->state_ = OP_INFLIGHT;
  return 0;
}

/* An -ECANCELED nobody asked for: the kernel dropped the operation before it
 * began (io-wq could not start a worker thread for it: Linux's
 * io_should_retry_thread gives up after three failed tries, and a signal
 * pending at each is enough).  Nothing was done: submit it again.  false:
 * even that failed, and the callback gets the -ECANCELED. */
static bool resubmit(tdl_loop *loop, tdl_op *op)
{
  return submit(loop, op, op->code_, op->fd_, op->buf_, op->len_, op->cb) == 0;
}

int tdl_op_read(tdl_loop *loop, tdl_op *op, int fd, void *buf, size_t len, tdl_op_cb cb)
{
  return submit(loop, op, IORING_OP_READ, fd, buf, len, cb);
}

int tdl_op_write(tdl_loop *loop, tdl_op *op, int fd, const void *buf, size_t len, tdl_op_cb cb)
{
  return submit(loop, op, IORING_OP_WRITE, fd, (void *)(uintptr_t)buf, len, cb);
}

int tdl_op_cancel(tdl_loop *loop, tdl_op *op)
{
  TDL__CHECK_THREAD(loop);
  if (op && op->state_ == OP_DONE)
    op->asked_ = 1; /* too late, but an -ECANCELED it brings is no longer unasked */
  if (!op || op->state_ != OP_INFLIGHT || !tdl__loop_ring(loop))
    return -ENOENT;
  op->asked_ = 1;
  tdl__ring_cancel(loop, &op->base_);
  return 0;
}
#else
int tdl_op_read(tdl_loop *loop, tdl_op *op, int fd, void *buf, size_t len, tdl_op_cb cb)
{
  (void)loop, (void)fd, (void)buf, (void)len;
  return !op || !cb ? -EINVAL : -ENOTSUP;
}

int tdl_op_write(tdl_loop *loop, tdl_op *op, int fd, const void *buf, size_t len, tdl_op_cb cb)
{
  (void)loop, (void)fd, (void)buf, (void)len;
  return !op || !cb ? -EINVAL : -ENOTSUP;
}

int tdl_op_cancel(tdl_loop *loop, tdl_op *op)
{
  (void)loop, (void)op;
  return -ENOENT;
}
#endif
