/* SPDX-License-Identifier: MIT */
/*
 * Background requests (fd_internal.h), on loops whose back end is uring:
 * the life cycle that receiving ahead (fd/ahead.c), accepting ahead
 * (fd/acceptahead.c) and sending behind (fd/behind.c) share.
 *
 * A background request is the kernel's work for an fd while no fiber waits
 * for it, so its record cannot live on a fiber's stack as a ring operation's
 * does: the fd's fiber-I/O state owns it, one fiber at a time parks on it,
 * and a completion wakes that fiber.  The request holds the fd's file open,
 * so tdl_close cannot wait for it to end: the record gives back what it
 * kept, and lives on, orphaned, until the kernel's last completion for it
 * (receiving and accepting ahead cancel the request; sending behind lets
 * what is held go first).  Tearing the scheduler down closes every record
 * the same way, then waits for those last completions
 * (tdl__ring_settle_ahead).
 */
#include <stdlib.h>

#include "fd/fd_internal.h"

void *tdl__bg_new(size_t size, const tdl__bg_kind *kind, tdl_loop *loop, int fd)
{
  tdl__bg *bg = TDL__FAULT_ALLOC(calloc(1, size));
  if (!bg)
    return NULL;
  bg->kind = kind;
  bg->loop = loop;
  bg->fd = fd;
  bg->on = true;
  return bg;
}

static void bg_free(tdl__bg *bg)
{
  if (bg->kind->release)
    bg->kind->release(bg);
  free(bg);
}

void tdl__bg_stop(tdl__bg *bg)
{
  if (!bg->armed || bg->stopping)
    return;
  bg->stopping = true;
  if (bg->kind->multishot)
    tdl__ring_cancel_ahead(bg->loop, &bg->req.ms);
  else
    tdl__ring_cancel(bg->loop, &bg->req.op);
}

void tdl__bg_set(tdl__bg *bg, bool on)
{
  bg->on = on;
  if (!on && bg->kind->multishot)
    tdl__bg_stop(bg);
}

bool tdl__bg_pending(const tdl__bg *bg) { return bg->kind->pending(bg); }

void tdl__bg_free_idle(tdl__bg **slot)
{
  tdl__bg *bg = *slot;
  /* (A fiber woken from it, but still to run, counts: it comes back to it.) */
  if (bg->on || bg->armed || bg->waiter || bg->kind->pending(bg))
    return;
  bg_free(bg);
  *slot = NULL;
}

/* ---- the fiber parked on it ---- */

/* A deadline or cancel ended the park: no completion may wake it now. */
static void abort_park(tdl__fiber *f) { *(tdl__bgwait **)f->abort_ctx = NULL; }

int tdl__bg_park(tdl__fiber *f, tdl__bg *bg, const char *what, tdl_time_t deadline, bool *closed)
{
  tdl__bgwait w = {.f = f};
  tdl_loop *loop = bg->loop;
  /* Never left behind: every way out of the park clears it (below,
   * abort_park or tdl__bg_close). */
  /* cppcheck-suppress autoVariables */
  bg->waiter = &w;
  f->abort_wait = abort_park;
  f->abort_ctx = &bg->waiter;
  loop->ops_inflight++; /* a completion will wake a fiber: the loop must ask the ring */
  TDL__COUNT(loop, io_parks, 1);
  int e = tdl__park(f, what, bg->fd, deadline);
  loop->ops_inflight--;
  f->abort_wait = NULL;
  if (w.closed) {
    *closed = true; /* and bg may be gone */
    return -EBADF;
  }
  bg->waiter = NULL;
  return e;
}

void tdl__bg_changed(tdl__bg *bg, bool over)
{
  if (bg->orphan) {
    if (over)
      bg_free(bg);
    return;
  }
  if (bg->waiter)
    tdl__wake(bg->waiter->f, 0);
}

void tdl__bg_close(tdl__bg *bg)
{
  if (bg->waiter) {
    bg->waiter->closed = true;
    tdl__wake(bg->waiter->f, -EBADF);
    bg->waiter = NULL;
  }
  if (bg->kind->orphan(bg))
    bg->orphan = true;
  else
    bg_free(bg);
}

/* ---- multishot requests (receiving and accepting ahead) ---- */

void tdl__bg_completed(tdl__bg *bg, bool more)
{
  if (!more)
    bg->armed = bg->stopping = false;
  tdl__bg_changed(bg, !more);
}

bool tdl__bg_arm(tdl__bg *bg)
{
  if (!bg->on || bg->kind->arm(bg) < 0)
    return false;
  bg->armed = true;
  return true;
}

int tdl__bg_wait(tdl__fiber *f, tdl__bg *bg, tdl_time_t deadline, bool *closed)
{
  *closed = false;
  if (bg->waiter)
    return -EBUSY;
  for (;;) {
    if (bg->kind->pending(bg))
      return TDL_READ;
    if (!bg->armed && !tdl__bg_arm(bg))
      return (int)TDL__BG_PASS; /* off (or out of buffers: the data waits in the socket): poll the fd */
    int e = tdl__bg_park(f, bg, "wait read", deadline, closed);
    if (e < 0)
      return e;
  }
}
