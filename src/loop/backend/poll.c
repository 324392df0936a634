/* SPDX-License-Identifier: MIT */
/*
 * The poll back end: portable, level-triggered, O(watched fds) per wait.
 * It keeps a dense pollfd array of the fds the loop currently wants to hear
 * about; loop->fdc[fd].bslot is an fd's slot in it, plus one (0: none, as
 * in a zeroed record).  It asks for POLLOUT only while the loop does not
 * already believe the fd writable, so a write watcher costs nothing while it
 * is writable and poll never returns at once for it.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include "base/sys.h"
#include "loop/loop_internal.h"

typedef struct poll_state {
  struct pollfd *pfds;
  uint32_t n, cap;
} poll_state;

static int pl_open(tdl_loop *loop)
{
  poll_state *s = TDL__FAULT_ALLOC(calloc(1, sizeof *s));
  if (!s)
    return -ENOMEM;
  loop->be_state = s;
  return 0;
}

static void pl_close(tdl_loop *loop)
{
  poll_state *s = loop->be_state;
  free(s->pfds);
  free(s);
  loop->be_state = NULL;
}

static void drop_slot(tdl_loop *loop, int fd)
{
  poll_state *s = loop->be_state;
  uint32_t i = loop->fdc[fd].bslot;
  if (i-- == 0)
    return;
  s->pfds[i] = s->pfds[--s->n];
  if (i < s->n)
    loop->fdc[s->pfds[i].fd].bslot = i + 1;
  loop->fdc[fd].bslot = 0;
}

static int pl_interest(tdl_loop *loop, int fd, tdl__fd *rec, unsigned want)
{
  poll_state *s = loop->be_state;
  uint32_t *slot = &loop->fdc[fd].bslot;
  if (!(rec->flags & TDL__FD_REGISTERED)) {
    if (want == 0)
      return 0;
    /* poll() reports a bad fd only as POLLNVAL at wait time; check now so
     * that tdl_io_start fails the way it does with epoll. */
    if (tdl__sys_fcntl(fd, F_GETFD, 0) < 0)
      return -errno;
    rec->flags |= TDL__FD_REGISTERED;
    rec->bmode = TDL__FD_LEVEL; /* poll reports levels */
    rec->reg_gen++;
    *slot = 0;
  }
  if (want == 0) {
    drop_slot(loop, fd);
    return 0;
  }
  if (*slot == 0) {
    if (s->n == s->cap) {
      uint32_t cap = s->cap ? s->cap * 2 : 64;
      struct pollfd *p = TDL__FAULT_ALLOC(realloc(s->pfds, sizeof *p * cap));
      if (!p)
        return -ENOMEM;
      s->pfds = p;
      s->cap = cap;
    }
    s->pfds[s->n].fd = fd;
    *slot = ++s->n;
  }
  struct pollfd *p = &s->pfds[*slot - 1];
  p->events = (short)(((want & TDL_READ) ? POLLIN : 0) | ((want & TDL_WRITE) ? POLLOUT : 0));
  p->revents = 0;
  return 0;
}

static void pl_forget(tdl_loop *loop, int fd, tdl__fd *rec)
{
  drop_slot(loop, fd);
  rec->reg_gen++;
}

static int pl_wait(tdl_loop *loop, tdl_time_t timeout_ns)
{
  poll_state *s = loop->be_state;
  struct timespec ts, *tsp = NULL;
  if (timeout_ns >= 0) {
    ts.tv_sec = timeout_ns / TDL_SEC;
    ts.tv_nsec = timeout_ns % TDL_SEC;
    tsp = &ts;
  }
  int n = tdl__sys_ppoll(s->pfds, s->n, tsp);
  if (n < 0)
    return errno == EINTR ? 0 : -errno;
  if (n == 0)
    return 0;
  for (uint32_t i = 0; i < s->n; i++) {
    short re = s->pfds[i].revents;
    if (!re)
      continue;
    unsigned b = 0;
    if (re & POLLIN)
      b |= TDL_READ;
    if (re & POLLOUT)
      b |= TDL_WRITE;
    if (re & (POLLERR | POLLNVAL))
      b |= TDL_ERR | TDL_READ | TDL_WRITE;
    if (re & POLLHUP)
      b |= TDL_HUP | TDL_READ;
    int fd = s->pfds[i].fd;
    tdl__fd_report(&loop->fds[fd], fd, b, loop->queue, &loop->queue_n);
  }
  /* Now that reporting is over, the array may change: stop asking for
   * writability that is now known, and drop closed fds (POLLNVAL would
   * otherwise be reported on every wait).  Backwards, because dropping a slot
   * moves the last one into it. */
  for (uint32_t i = s->n; i-- > 0;) {
    short re = s->pfds[i].revents;
    s->pfds[i].revents = 0;
    int fd = s->pfds[i].fd;
    if (re & POLLNVAL) {
      drop_slot(loop, fd);
      loop->fds[fd].flags &= (uint8_t)~TDL__FD_REGISTERED;
      loop->fds[fd].kernel = 0;
    } else if (re & POLLOUT) {
      tdl__fd_refresh(loop, fd);
    }
  }
  return 0;
}

static int pl_fd(const tdl_loop *loop)
{
  (void)loop;
  return -ENOTSUP;
}

const tdl__backend tdl__backend_poll = {
    .name = "poll",
    .open = pl_open,
    .close = pl_close,
    .interest = pl_interest,
    .forget = pl_forget,
    .wait = pl_wait,
    .pollable_fd = pl_fd,
};
