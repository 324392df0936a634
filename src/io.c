/*
 * fd watchers and the readiness cache.
 *
 * The back end reports readiness into the fd record (tdl__fd_event); a
 * started watcher whose fd is ready for what it wants goes on the pending
 * list; after the back end returns, the loop runs the pending list.  Read,
 * error and hang-up readiness are arrivals, consumed when reported; write
 * readiness is a state that lasts until the owner reports EAGAIN
 * (tdl_io_blocked).  Because of that split, the kernel registration can stay
 * edge-triggered and unchanged for the life of the fd: starting and stopping a
 * watcher only moves bits and list links.
 */
#include <stdlib.h>
#include <string.h>

#include "loop_internal.h"

static inline void list_unlink(tdl_io *w)
{
  w->pprev->pnext = w->pnext;
  w->pnext->pprev = w->pprev;
  w->pnext = w->pprev = NULL;
  w->state &= ~TDL__IO_PENDING;
}

static inline void list_push(tdl_io *head, tdl_io *w)
{
  w->pprev = head->pprev;
  w->pnext = head;
  head->pprev->pnext = w;
  head->pprev = w;
  w->state |= TDL__IO_PENDING;
}

/* The events w would be told about now. */
static inline unsigned reportable(const tdl_io *w, const tdl__fd *r)
{
  return r->ready & (w->events | TDL_ERR | TDL_HUP);
}

/* What the kernel must tell us for w: reads always (they are arrivals);
 * writes only once the cached state says the fd is not writable. */
static inline unsigned kernel_want(const tdl_io *w, const tdl__fd *r)
{
  if (!w)
    return 0;
  unsigned k = w->events & TDL_READ;
  if ((w->events & TDL_WRITE) && !(r->ready & TDL_WRITE))
    k |= TDL_WRITE;
  return k;
}

static int update_kernel(tdl_loop *loop, int fd, tdl__fd *r)
{
  unsigned k = kernel_want(r->w, r);
  if (k == r->kernel && (r->registered || k == 0))
    return 0;
  if (r->registered && (r->bmode & TDL__FD_LAZY) && !(k & ~r->bmode & (TDL_READ | TDL_WRITE))) {
    r->kernel = (uint8_t)k; /* the back end reports this already */
    return 0;
  }
  int e = loop->be->interest(loop, fd, r, k);
  if (e == 0)
    r->kernel = (uint8_t)k;
  return e;
}

int tdl__fd_reserve(tdl_loop *loop, int fd)
{
  if ((uint32_t)fd < loop->nfds)
    return 0;
  uint32_t n = loop->nfds ? loop->nfds : 64;
  while (n <= (uint32_t)fd) {
    if (n > (uint32_t)INT32_MAX / 2)
      return -ENOMEM;
    n *= 2;
  }
  tdl__fd *fds = realloc(loop->fds, (size_t)n * sizeof *fds);
  if (!fds)
    return -ENOMEM;
  memset(fds + loop->nfds, 0, (size_t)(n - loop->nfds) * sizeof *fds);
  for (uint32_t i = loop->nfds; i < n; i++)
    fds[i].bidx = -1;
  loop->fds = fds;
  loop->nfds = n;
  return 0;
}

void tdl__fd_event(tdl_loop *loop, int fd, uint32_t reg_gen, unsigned bits)
{
  if (TDL__UNLIKELY((uint32_t)fd >= loop->nfds))
    return;
  tdl__fd *r = &loop->fds[fd];
  if (TDL__UNLIKELY(r->reg_gen != reg_gen))
    return; /* from a registration that has since been replaced */
  r->ready |= (uint8_t)bits;
  tdl_io *w = r->w;
  if (w && !(w->state & TDL__IO_PENDING) && reportable(w, r))
    list_push(&loop->pending, w);
}

void tdl__fd_refresh(tdl_loop *loop, int fd)
{
  if ((uint32_t)fd < loop->nfds && loop->fds[fd].registered)
    update_kernel(loop, fd, &loop->fds[fd]);
}

void tdl__fd_forget(tdl_loop *loop, int fd)
{
  if ((uint32_t)fd >= loop->nfds)
    return;
  tdl__fd *r = &loop->fds[fd];
  if (r->registered)
    loop->be->forget(loop, fd, r);
  r->registered = 0;
  r->ready = 0;
  r->kernel = 0;
  r->owner = NULL;
}

bool tdl__io_has_pending(const tdl_loop *loop) { return loop->pending.pnext != &loop->pending; }

void tdl__io_run_pending(tdl_loop *loop)
{
  if (!tdl__io_has_pending(loop))
    return;
  /* Run a snapshot: watchers that become pending while it runs (a started
   * write watcher, a feed) wait for the next iteration, so a watcher that
   * stays writable cannot starve the back end. */
  tdl_io batch;
  batch.pnext = loop->pending.pnext;
  batch.pprev = loop->pending.pprev;
  batch.pnext->pprev = &batch;
  batch.pprev->pnext = &batch;
  loop->pending.pnext = loop->pending.pprev = &loop->pending;

  while (batch.pnext != &batch) {
    tdl_io *w = batch.pnext;
    list_unlink(w);
    int fd = w->fd;
    tdl__fd *r = &loop->fds[fd];
    unsigned ev = reportable(w, r);
    if (!ev)
      continue;
    r->ready &= (uint8_t)~(TDL_READ | TDL_ERR | TDL_HUP);
    w->cb(loop, w, ev);
    /* w may be stopped or freed now; only the record says whether it lives.
     * The fd table may have moved, too. */
    r = &loop->fds[fd];
    if (r->w == w && !(w->state & TDL__IO_PENDING) && (r->ready & w->events & TDL_WRITE))
      list_push(&loop->pending, w); /* still writable and still wanted */
  }
}

void tdl_io_init(tdl_io *w, int fd, tdl_io_cb cb, void *data)
{
  /* A fresh generation tells a re-initialised watcher (or a new one at the
   * same address) from the one that registered the fd before. */
  static _Thread_local uint32_t gen;
  memset(w, 0, sizeof *w);
  w->fd = fd;
  w->cb = cb;
  w->data = data;
  w->gen = ++gen;
}

int tdl_io_start(tdl_loop *loop, tdl_io *w, unsigned events)
{
  TDL__CHECK_THREAD(loop);
  if (events == 0 || (events & ~(TDL_READ | TDL_WRITE)))
    return -EINVAL;
  int fd = w->fd;
  if (fd < 0)
    return -EBADF;
  int e = tdl__fd_reserve(loop, fd);
  if (e < 0)
    return e;
  tdl__fd *r = &loop->fds[fd];
  if (r->w && r->w != w)
    return -EEXIST;

  unsigned old_events = w->events;
  bool was_active = (w->state & TDL__IO_ACTIVE) != 0;
  if (r->owner != w || r->owner_gen != w->gen) {
    /* A new owner: the old registration and whatever the cache learnt from it
     * may belong to a file that has since been closed and the number reused. */
    tdl__fd_forget(loop, fd);
    r->owner = w;
    r->owner_gen = w->gen;
  }
  r->w = w;
  w->events = events;
  e = update_kernel(loop, fd, r);
  if (e < 0) {
    w->events = old_events;
    if (!was_active)
      r->w = NULL;
    return e;
  }
  if (!was_active) {
    w->state |= TDL__IO_ACTIVE;
    loop->io_started++;
    if (!(w->state & TDL__IO_INTERNAL))
      loop->active++;
  }
  if (!(w->state & TDL__IO_PENDING) && reportable(w, r))
    list_push(&loop->pending, w);
  return 0;
}

int tdl_io_stop(tdl_loop *loop, tdl_io *w)
{
  TDL__CHECK_THREAD(loop);
  if (!(w->state & TDL__IO_ACTIVE))
    return 0;
  if (w->state & TDL__IO_PENDING)
    list_unlink(w);
  w->state &= ~TDL__IO_ACTIVE;
  loop->io_started--;
  if (!(w->state & TDL__IO_INTERNAL))
    loop->active--;
  tdl__fd *r = &loop->fds[w->fd];
  if (r->w == w) {
    r->w = NULL;
    update_kernel(loop, w->fd, r); /* epoll: nothing; poll: drop the fd */
  }
  return 0;
}

void tdl_io_blocked(tdl_loop *loop, tdl_io *w, unsigned events)
{
  TDL__CHECK_THREAD_VOID(loop);
  if (w->fd < 0 || (uint32_t)w->fd >= loop->nfds)
    return;
  tdl__fd *r = &loop->fds[w->fd];
  if (r->owner != w || r->owner_gen != w->gen)
    return;
  r->ready &= (uint8_t)~(events & (TDL_READ | TDL_WRITE));
  if (!reportable(w, r) && (w->state & TDL__IO_PENDING))
    list_unlink(w);
  if (r->w == w)
    update_kernel(loop, w->fd, r);
}

void tdl_io_feed(tdl_loop *loop, tdl_io *w, unsigned events)
{
  TDL__CHECK_THREAD_VOID(loop);
  if (w->fd < 0 || (uint32_t)w->fd >= loop->nfds)
    return;
  tdl__fd *r = &loop->fds[w->fd];
  if (r->owner != w || r->owner_gen != w->gen)
    return;
  r->ready |= (uint8_t)(events & (TDL_READ | TDL_WRITE | TDL_ERR | TDL_HUP));
  if (r->w == w && !(w->state & TDL__IO_PENDING) && reportable(w, r))
    list_push(&loop->pending, w);
}
