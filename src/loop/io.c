/* SPDX-License-Identifier: MIT */
/*
 * fd watchers and the readiness cache.
 *
 * The back end reports readiness into the fd record (tdl__fd_report, inline
 * in loop_internal.h) and queues the fd if a watcher is started on it; after
 * the back end returns, the loop runs the queue, calling each watcher whose
 * fd is ready for what it wants.  The queue holds fd numbers, not watchers,
 * so stopping (and freeing) a watcher needs no unlinking: the run finds the
 * record's watcher gone.
 *
 * Read, error and hang-up readiness are arrivals, consumed when reported to
 * a watcher (a watcher that wants only writes leaves a read cached); write
 * readiness is a state that lasts until the owner reports EAGAIN
 * (tdl_io_blocked).  Because of that split, the kernel registration can stay
 * edge-triggered and unchanged for the life of the fd: starting and stopping
 * a watcher only moves bits in the record.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys.h"
#include "base/table.h"
#include "loop/loop_internal.h"

/* The events w would be told about now. */
static inline unsigned reportable(const tdl_io *w, const tdl__fd *r)
{
  return r->ready & (w->events | TDL_ERR | TDL_HUP);
}

/* Queue fd (the record says it is not queued yet). */
static inline void queue_fd(tdl_loop *loop, tdl__fd *r, int fd)
{
  r->flags |= TDL__FD_QUEUED;
  loop->queue[loop->queue_n++] = fd;
}

/* Take fd back out of the queue if it went in last, as it does when a
 * watcher is started on a ready fd and then stopped or blocked by the same
 * callback; so the loop, with nothing to report, may sleep.  An entry deeper
 * in the queue stays, and its run finds nothing to report. */
static void unqueue_last(tdl_loop *loop, tdl__fd *r, int fd)
{
  if ((r->flags & TDL__FD_QUEUED) && loop->queue_n && loop->queue[loop->queue_n - 1] == fd) {
    loop->queue_n--;
    r->flags &= (uint8_t)~TDL__FD_QUEUED;
  }
}

/* Whether w (this initialisation of it) made fd's current registration. */
static inline bool owns(const tdl_loop *loop, int fd, const tdl_io *w)
{
  const tdl__fd_cold *c = &loop->fdc[fd];
  return c->owner == w && c->owner_gen == w->gen;
}

/* What the kernel must tell us for a watcher that wants `events`: reads
 * always (they are arrivals); writes only once the cached state says the
 * fd is not writable. */
static inline unsigned kernel_want(unsigned events, const tdl__fd *r)
{
  unsigned k = events & TDL_READ;
  if ((events & TDL_WRITE) && !(r->ready & TDL_WRITE))
    k |= TDL_WRITE;
  return k;
}

/* Whether the back end needs no word for the interest k on r: it has it,
 * or (TDL__FD_LAZY) reports it already; then r->kernel is k. */
static inline bool kernel_has(tdl__fd *r, unsigned k)
{
  bool registered = (r->flags & TDL__FD_REGISTERED) != 0;
  if (k == r->kernel && (registered || k == 0))
    return true;
  if (registered && (r->bmode & TDL__FD_LAZY) && !(k & ~r->bmode & (TDL_READ | TDL_WRITE))) {
    r->kernel = (uint8_t)k; /* the back end reports this already */
    return true;
  }
  return false;
}

/* Hand the back end the interest r's watcher needs now, if that changed.
 * Inline: every start and stop comes here, and on epoll nearly all of
 * them end in kernel_has, with no call. */
static inline __attribute__((always_inline)) int update_kernel(tdl_loop *loop, int fd, tdl__fd *r)
{
  unsigned k = r->w ? kernel_want(r->w->events, r) : 0;
  if (kernel_has(r, k))
    return 0;
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
  /* The queues first: each holds every fd at most once, so nfds entries. */
  int *q = TDL__FAULT_ALLOC(realloc(loop->queue, (size_t)n * sizeof *q));
  if (!q)
    return -ENOMEM;
  loop->queue = q;
  int *b = TDL__FAULT_ALLOC(realloc(loop->batch, (size_t)n * sizeof *b));
  if (!b)
    return -ENOMEM;
  loop->batch = b;
  /* The records zeroed, but not touched (base/table.h). */
  tdl__fd_cold *fdc = tdl__table_grow(loop->fdc, (size_t)loop->nfds * sizeof *fdc, (size_t)n * sizeof *fdc);
  if (!fdc)
    return -ENOMEM;
  loop->fdc = fdc;
  tdl__fd *fds = tdl__table_grow(loop->fds, (size_t)loop->nfds * sizeof *fds, (size_t)n * sizeof *fds);
  if (!fds)
    return -ENOMEM;
  loop->fds = fds;
  loop->nfds = n;
  return 0;
}

/* Whether fd's record holds anything: a watcher, a registration, a place in
 * the queue or in the poll back end's array.  A record without any is the
 * zeroed record of a fresh table, but for generations that no event can
 * carry any more (the registration is gone from the kernel). */
static bool fd_in_use(const tdl_loop *loop, uint32_t fd)
{
  const tdl__fd *r = &loop->fds[fd];
  return r->w || (r->flags & (TDL__FD_REGISTERED | TDL__FD_QUEUED)) || loop->fdc[fd].bslot != 0;
}

void tdl__fd_tables_trim(tdl_loop *loop)
{
  uint32_t hi = loop->nfds;
  while (hi > 0 && !fd_in_use(loop, hi - 1))
    hi--;
  uint32_t n = 64;
  while (n < hi)
    n *= 2;
  if (n > loop->nfds / 4)
    return; /* in use up high, or not worth a copy */
  /* Shrinking cannot fail to keep the old block; what realloc gives back is
   * the point (large tables are mappings of their own: mremap). */
  int *q = TDL__FAULT_ALLOC(realloc(loop->queue, (size_t)n * sizeof *q));
  int *b = TDL__FAULT_ALLOC(realloc(loop->batch, (size_t)n * sizeof *b));
  tdl__fd_cold *fdc = TDL__FAULT_ALLOC(realloc(loop->fdc, (size_t)n * sizeof *fdc));
  tdl__fd *fds = TDL__FAULT_ALLOC(realloc(loop->fds, (size_t)n * sizeof *fds));
  loop->queue = q ? q : loop->queue;
  loop->batch = b ? b : loop->batch;
  loop->fdc = fdc ? fdc : loop->fdc;
  loop->fds = fds ? fds : loop->fds;
  loop->nfds = n;
}

void tdl__fd_refresh(tdl_loop *loop, int fd)
{
  if ((uint32_t)fd < loop->nfds && (loop->fds[fd].flags & TDL__FD_REGISTERED))
    update_kernel(loop, fd, &loop->fds[fd]);
}

void tdl__fd_forget(tdl_loop *loop, int fd)
{
  if ((uint32_t)fd >= loop->nfds)
    return;
  tdl__fd *r = &loop->fds[fd];
  if (r->flags & TDL__FD_REGISTERED)
    loop->be->forget(loop, fd, r);
  r->flags &= ~TDL__FD_REGISTERED; /* TDL__FD_QUEUED stays true to the queue */
  r->ready = 0;
  r->kernel = 0;
  loop->fdc[fd].owner = NULL;
}

void tdl__io_run_pending(tdl_loop *loop)
{
  /* Run a snapshot: fds queued while it runs (a started write watcher, a
   * feed) wait for the next iteration, so a watcher that stays writable
   * cannot starve the back end. */
  uint32_t n = loop->queue_n;
  if (n == 0)
    return;
  int *batch = loop->queue;
  loop->queue = loop->batch;
  loop->batch = batch;
  loop->queue_n = 0;

  for (uint32_t i = 0; i < n; i++) {
    /* Reread the tables each time: a callback may grow them. */
    int fd = loop->batch[i];
    tdl__fd *r = &loop->fds[fd];
    r->flags &= (uint8_t)~TDL__FD_QUEUED;
    tdl_io *w = r->w;
    if (!w)
      continue; /* stopped since it was queued */
    unsigned ev = reportable(w, r);
    if (!ev)
      continue;
    /* An arrival is consumed by being reported, and only then: a read
     * that came while the watcher waited only to write stays cached for
     * the start that wants it (on edges, the kernel tells of it once). */
    r->ready &= (uint8_t)~(ev & (TDL_READ | TDL_ERR | TDL_HUP));
    w->cb(loop, w, ev);
    /* w may be stopped or freed now; only the record says whether it lives. */
    r = &loop->fds[fd];
    if ((r->ready & TDL_WRITE) && r->w == w && !(r->flags & TDL__FD_QUEUED) && (w->events & TDL_WRITE))
      queue_fd(loop, r, fd); /* still writable and still wanted */
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

/* w, not active, is now: count it. */
static inline void started(tdl_loop *loop, tdl_io *w)
{
  w->state |= TDL__IO_ACTIVE;
  loop->io_started++;
  if (!(w->state & TDL__IO_INTERNAL))
    loop->active++;
}

static __attribute__((noinline)) int start(tdl_loop *loop, tdl_io *w, int fd, unsigned events);

int tdl_io_start(tdl_loop *loop, tdl_io *w, unsigned events)
{
  TDL__CHECK_THREAD(loop);
  if (events == 0 || (events & ~(TDL_READ | TDL_WRITE)))
    return -EINVAL;
  int fd = w->fd;
  if (fd < 0)
    return -EBADF;
  if (TDL__LIKELY((uint32_t)fd < loop->nfds)) {
    /* The common start: w stopped and started again on the fd it owns,
     * wanting what the back end has (fiber I/O's every wait). */
    tdl__fd *r = &loop->fds[fd];
    if (!r->w && !(w->state & TDL__IO_ACTIVE) && owns(loop, fd, w)) {
      if (kernel_has(r, kernel_want(events, r))) {
        r->w = w;
        w->events = events;
        started(loop, w);
        if (!(r->flags & TDL__FD_QUEUED) && reportable(w, r))
          queue_fd(loop, r, fd);
        return 0;
      }
    }
  }
  return start(loop, w, fd, events);
}

/* tdl_io_start, every case. */
static int start(tdl_loop *loop, tdl_io *w, int fd, unsigned events)
{
  int e = tdl__fd_reserve(loop, fd);
  if (e < 0)
    return e;
  tdl__fd *r = &loop->fds[fd];
  if (r->w && r->w != w)
    return -EEXIST;

  unsigned old_events = w->events;
  bool was_active = (w->state & TDL__IO_ACTIVE) != 0;
  if (!owns(loop, fd, w)) {
    /* A new owner: the old registration and whatever the cache learnt from it
     * may belong to a file that has since been closed and the number reused. */
    tdl__fd_forget(loop, fd);
    loop->fdc[fd].owner = w;
    loop->fdc[fd].owner_gen = w->gen;
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
  if (!was_active)
    started(loop, w);
  if (!(r->flags & TDL__FD_QUEUED) && reportable(w, r))
    queue_fd(loop, r, fd);
  return 0;
}

/* tdl_io_stop of w, which is active. */
static inline void stop(tdl_loop *loop, tdl_io *w)
{
  w->state &= ~TDL__IO_ACTIVE;
  loop->io_started--;
  if (!(w->state & TDL__IO_INTERNAL))
    loop->active--;
  tdl__fd *r = &loop->fds[w->fd];
  if (r->w == w) {
    r->w = NULL;
    unqueue_last(loop, r, w->fd);
    update_kernel(loop, w->fd, r); /* epoll: nothing; poll: drop the fd */
  }
}

int tdl_io_stop(tdl_loop *loop, tdl_io *w)
{
  TDL__CHECK_THREAD(loop);
  if (w->state & TDL__IO_ACTIVE)
    stop(loop, w);
  return 0;
}

void tdl__io_stop_keeping(tdl_loop *loop, tdl_io *w, unsigned keep)
{
  /* Reported to just now: w is started and owns the fd's record, so
   * tdl_io_feed's checks would all pass, and it queues nothing once w is
   * stopped. */
  stop(loop, w);
  loop->fds[w->fd].ready |= (uint8_t)(keep & (TDL_READ | TDL_WRITE | TDL_ERR | TDL_HUP));
}

/* w's fd record, if w made the fd's current registration; else NULL. */
static tdl__fd *owned_record(tdl_loop *loop, const tdl_io *w)
{
  if (w->fd < 0 || (uint32_t)w->fd >= loop->nfds || !owns(loop, w->fd, w))
    return NULL;
  return &loop->fds[w->fd];
}

/* tdl_io_blocked on r, w's record. */
static inline void blocked(tdl_loop *loop, tdl_io *w, tdl__fd *r, unsigned events)
{
  r->ready &= (uint8_t)~(events & (TDL_READ | TDL_WRITE));
  if (r->w == w) {
    if (!reportable(w, r))
      unqueue_last(loop, r, w->fd);
    update_kernel(loop, w->fd, r);
  }
}

void tdl_io_blocked(tdl_loop *loop, tdl_io *w, unsigned events)
{
  TDL__CHECK_THREAD_VOID(loop);
  tdl__fd *r = owned_record(loop, w);
  if (r)
    blocked(loop, w, r, events);
}

void tdl_io_feed(tdl_loop *loop, tdl_io *w, unsigned events)
{
  TDL__CHECK_THREAD_VOID(loop);
  tdl__fd *r = owned_record(loop, w);
  if (!r)
    return;
  r->ready |= (uint8_t)(events & (TDL_READ | TDL_WRITE | TDL_ERR | TDL_HUP));
  if (r->w == w && !(r->flags & TDL__FD_QUEUED) && reportable(w, r))
    queue_fd(loop, r, w->fd);
}

int tdl__io_open_internal(tdl_loop *loop, tdl_io *w, int fd, tdl_io_cb cb)
{
  tdl_io_init(w, fd, cb, NULL);
  w->state |= TDL__IO_INTERNAL;
  int e = tdl_io_start(loop, w, TDL_READ);
  if (e < 0)
    tdl__sys_close(fd);
  return e;
}

void tdl__io_close_internal(tdl_loop *loop, tdl_io *w)
{
  tdl_io_stop(loop, w);
  tdl__fd_forget(loop, w->fd);
  tdl__sys_close(w->fd);
}

unsigned tdl__io_wait_ready(tdl_loop *loop, tdl_io *w, unsigned events)
{
  tdl__fd *r = owned_record(loop, w);
  if (!r)
    return 0; /* its first start registers the fd afresh: that misses nothing */
  if (!(r->flags & TDL__FD_REGISTERED) || (r->bmode & TDL__FD_LEVEL)) {
    blocked(loop, w, r, events); /* stale */
    return 0;
  }
  unsigned ev = r->ready & (events | TDL_ERR | TDL_HUP);
  if (!(events & TDL_READ))
    ev &= ~(unsigned)TDL_HUP;
  return ev;
}
