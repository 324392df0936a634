/* SPDX-License-Identifier: MIT */
/*
 * Fiber I/O: system calls that park the fiber, not the thread.
 *
 * Every call tries the system call first.  Only on EAGAIN does the fiber wait:
 * it tells the loop the cached readiness is stale (tdl_io_blocked), hangs a
 * record of itself on the fd's state as reader or writer, starts the fd's
 * watcher for that direction, and parks.  The watcher's callback wakes it;
 * the fiber then retries.  The per-fd state (one watcher, one reader record,
 * one writer record) is created on first use and dropped by tdl_close().
 *
 * One read less per message: a read that returns less than was asked for
 * has emptied a stream (a pipe or stream socket), so the next read parks
 * first instead of calling read() to hear EAGAIN: data that comes after the
 * short read is an arrival the loop reports, as a level or as a new edge.
 * Parking first also when the loop reports reads as a level for the fd
 * (TDL__FD_LEVEL) and has none cached.  (A datagram socket's short read
 * says nothing; recvfrom is left out, and so is MSG_PEEK, which empties
 * nothing.)  Once the loop has reported the peer's end or an error, no read
 * parks first: an end that came before a short read is not an arrival
 * after it, and on edges it was told once, perhaps to a fiber waiting to
 * write.
 *
 * Each call is a tdl__fdop (its system call and arguments, and what it
 * does where it would wait) handed to tdl__fd_io, which does the rest.
 * tdl__fd_io is inlined into each call, where the descriptor is a constant:
 * a read that finds data costs its one system call and a few checks of the
 * fd's state, as a read written out by hand would.
 *
 * On a uring loop a call that would wait goes to the ring as a request
 * instead (fd/ring.c), and an fd may have a background request
 * (fd/background.c): its reads then take what a multishot receive already
 * put in the loop's buffers (tdl_fd_readahead, fd/ahead.c), its accepts what
 * a multishot accept took (fd/acceptahead.c), and its sends are copied and
 * sent by the loop (tdl_fd_writebehind, fd/behind.c).
 */
#include <assert.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sys.h"
#include "base/table.h"
#include "fd/fd_internal.h"

#ifdef TDL_HAVE_URING
#include <liburing.h>
#endif

typedef struct tdl__ffd {
  tdl_io w;
  tdl__fdwait *reader, *writer;
  tdl__list ring_ops; /* operations in flight on the loop's ring (fd/ring.c) */
  /* The last read was short: the stream was empty then, and whatever came
   * since is an arrival that the loop reports (a level, or an edge after the
   * read), so the next read waits for it first (on uring: goes to the ring
   * at once) instead of hearing EAGAIN. */
  bool empty;
  /* The loop reported an end (the peer's hang-up) or an error (TDL_HUP,
   * TDL_ERR): they last, and on edges are told once, perhaps to a writer
   * alone, so from then on no read parks first (each makes its call, and
   * hears the end) and a wait to read ends at once. */
  uint8_t ended;
  uint8_t stream; /* STREAM_*: whether a short read says the fd is empty */
  /* TDL_READ / TDL_WRITE readiness that a wait has ended with (woken, or
   * at once from what the loop cached) and that no call in that direction
   * has acted on since.  On an edge-triggered registration the loop keeps
   * such readiness cached and is not told of it again: a second wait with
   * nothing read or written between may not take it as news (after a
   * foreign EAGAIN not passed on with tdl_fd_blocked it would end at once
   * for ever) nor ignore it (the data is still there: it would park for
   * ever).  Such a wait asks the kernel once (poll, no timeout). */
  uint8_t told;
#ifdef TDL_HAVE_URING
  /* Background requests (fd_internal.h), or NULL. */
  tdl__bg *ahead;  /* receiving ahead (tdl_fd_readahead) */
  tdl__bg *acc;    /* accepting ahead (tdl_fd_readahead on a listener) */
  tdl__bg *behind; /* sending behind (tdl_fd_writebehind) */
#endif
} tdl__ffd;

/* Whether a fiber already moves data on d in one of `events`' directions
 * (TDL_READ, TDL_WRITE), whichever way it waits: for readiness, for a ring
 * operation, or for data received ahead.  One reader and one writer per fd
 * at a time (fiber.h, -EBUSY). */
static inline bool taken(const tdl__ffd *d, unsigned events)
{
  if (((events & TDL_READ) && d->reader) || ((events & TDL_WRITE) && d->writer))
    return true;
#ifdef TDL_HAVE_URING
  if (TDL__LIKELY(tdl__list_empty(&d->ring_ops) && !d->ahead && !d->acc && !d->behind))
    return false; /* the common case, on every loop: nothing of the ring's */
  if (tdl__fd_ring_busy(&d->ring_ops, events) || ((events & TDL_READ) && d->ahead && tdl__bg_busy(d->ahead)) ||
      ((events & TDL_READ) && d->acc && tdl__bg_busy(d->acc)) ||
      ((events & TDL_WRITE) && d->behind && tdl__bg_busy(d->behind)))
    return true;
#endif
  return false;
}

/* A scheduler's fiber I/O state (its `io`): per-fd state by fd number. */
typedef struct fio {
  tdl__sched_client hook; /* frees it with the scheduler */
  tdl__ffd **ffds;
  uint32_t nffds;
  tdl__ahead_links *links; /* made with the first fd that receives ahead */
#ifdef TDL_HAVE_URING
  tdl__behind_spares spares; /* buffers of sends behind that no fd holds */
#endif
} fio;

/* tdl__ffd.stream: asked of the kernel at the first short read (or, for an
 * accepted fd, taken from its listener).  A datagram or seqpacket socket's
 * short read is one message, with others perhaps behind it. */
enum {
  STREAM_UNKNOWN,
  STREAM_NO,
  STREAM_YES,    /* a pipe */
  STREAM_SOCKET, /* a stream socket (listening, or not known to be connected) */
  STREAM_CONN,   /* a stream socket that is no listener (accepted from a stream one, or checked) */
};

static uint8_t stream_kind(int fd)
{
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0)
    return type == SOCK_STREAM ? STREAM_SOCKET : STREAM_NO;
  struct stat st;
  return errno == ENOTSOCK && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) ? STREAM_YES : STREAM_NO;
}

/* Whether a read of len that returned r has emptied d's stream (see top). */
static inline bool emptied(tdl__ffd *d, int fd, ssize_t r, size_t len)
{
  if (!len || r <= 0 || (size_t)r >= len || d->ended)
    return false;
  if (TDL__UNLIKELY(d->stream == STREAM_UNKNOWN))
    d->stream = stream_kind(fd);
  return d->stream >= STREAM_YES;
}

static void ffd_update(tdl__sched *s, tdl__ffd *d)
{
  unsigned want = (d->reader ? TDL_READ : 0) | (d->writer ? TDL_WRITE : 0);
  if (want)
    tdl_io_start(s->loop, &d->w, want);
  else
    tdl_io_stop(s->loop, &d->w);
}

/* End rec's wait: ready with ev (> 0), or -EBADF when the fd was closed. */
static void fdwait_end(tdl__fdwait *rec, int ev)
{
  rec->events = ev;
  if (rec->claim && !tdl__claim_take(rec->claim, rec->clause))
    return; /* another clause of the select won */
  tdl__wake_idle(rec->f, rec->clause < 0 ? ev : rec->clause); /* a plain wait may be compacted */
}

static void ffd_ready(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  tdl__ffd *d = (tdl__ffd *)w; /* w is the first member */
  tdl__fdwait *r = d->reader, *wr = d->writer;
  unsigned readable = r ? ev & (TDL_READ | TDL_ERR | TDL_HUP) : 0;
  if (ev & (TDL_ERR | TDL_HUP)) {
    d->ended |= (uint8_t)(ev & (TDL_ERR | TDL_HUP));
    d->empty = false;
  }
  if (readable) {
    d->reader = NULL;
    d->told |= (uint8_t)(ev & TDL_READ);
    fdwait_end(r, (int)ev);
  }
  if (wr && (ev & (TDL_WRITE | TDL_ERR | TDL_HUP))) {
    d->writer = NULL;
    d->told |= (uint8_t)(ev & TDL_WRITE);
    if (wr != r) /* one record for both directions wakes once */
      fdwait_end(wr, (int)ev);
  }
  /* The loop took the arrival as consumed by telling us; for fiber I/O data
   * stays there until a read says otherwise (a short read or EAGAIN), so
   * keep it cached: the reader's next call reads instead of parking.  So
   * does an end of file or an error: on an edge-triggered registration it
   * is not reported again, and a read after a short one parks first. */
  unsigned want = (d->reader ? TDL_READ : 0) | (d->writer ? TDL_WRITE : 0);
  if (!want) {
    tdl__io_stop_keeping(loop, w, readable); /* the usual end: one waiter, woken */
    return;
  }
  tdl_io_start(loop, w, want);
  if (readable)
    tdl_io_feed(loop, w, readable);
}

#ifdef TDL_HAVE_URING
/* d's fd is being closed, or its scheduler torn down: so are its
 * background requests. */
static void ffd_close_bg(tdl__ffd *d)
{
  if (d->ahead)
    tdl__bg_close(d->ahead);
  if (d->acc)
    tdl__bg_close(d->acc);
  if (d->behind)
    tdl__bg_close(d->behind);
}
#endif

static void fio_trim(tdl__sched *s, tdl__sched_client *h);

static void fio_destroy(tdl__sched *s, tdl__sched_client *h)
{
  fio *io = TDL__CONTAINER_OF(h, fio, hook);
  for (uint32_t i = 0; i < io->nffds; i++) {
    if (io->ffds[i]) {
#ifdef TDL_HAVE_URING
      ffd_close_bg(io->ffds[i]);
#endif
      tdl_io_stop(s->loop, &io->ffds[i]->w);
      free(io->ffds[i]);
    }
  }
#ifdef TDL_HAVE_URING
  /* The records of requests still in flight free themselves at their last
   * completions, which must come before the ring goes (tdl__bg_close). */
  if (tdl__loop_ring(s->loop))
    (void)tdl__ring_settle_ahead(s->loop);
  tdl__behind_spares_free(&io->spares);
#endif
  free(io->links);
  free(io->ffds);
  free(io);
  s->io = NULL;
}

/* Room for fd in s's table, which is made on first use. */
static __attribute__((noinline)) int fio_reserve(tdl__sched *s, int fd)
{
  fio *io = s->io;
  if (!io) {
    if (!(io = TDL__FAULT_ALLOC(calloc(1, sizeof *io))))
      return -ENOMEM;
    io->hook.destroy = fio_destroy;
    io->hook.trim = fio_trim;
    tdl__sched_client_add(s, &io->hook);
    s->io = io;
  }
  if ((uint32_t)fd < io->nffds)
    return 0;
  uint32_t n = io->nffds ? io->nffds : 64;
  while (n <= (uint32_t)fd)
    n *= 2;
  tdl__ffd **a = tdl__table_grow(io->ffds, (size_t)io->nffds * sizeof *a, (size_t)n * sizeof *a);
  if (!a)
    return -ENOMEM;
  io->ffds = a;
  io->nffds = n;
  return 0;
}

/* fd's state, or NULL. */
static inline tdl__ffd *ffd_find(tdl__sched *s, int fd)
{
  fio *io = s->io;
  return io && (uint32_t)fd < io->nffds ? io->ffds[fd] : NULL;
}

/* The fd's state, made on first use; the fd is made non-blocking then,
 * unless the caller knows it already is (an fd accept4 just made).  Out of
 * line: every fiber I/O call looks its fd up (ffd_get), few make one. */
static __attribute__((noinline)) int ffd_make(tdl__sched *s, int fd, tdl__ffd **out, bool nonblocking)
{
  if (fd < 0)
    return -EBADF;
  tdl__ffd *d = ffd_find(s, fd);
  if (TDL__LIKELY(d != NULL)) {
    *out = d;
    return 0;
  }
  /* The table is in s->io, its array in io->ffds, d in that array: GCC's
   * stale-pointer leak (base.h), at any of the returns below. */
  TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak")
  int e = fio_reserve(s, fd);
  if (e < 0)
    return e;
  if (!nonblocking) {
    int fl = tdl__sys_fcntl(fd, F_GETFL, 0);
    if (fl < 0)
      return -errno;
    if (!(fl & O_NONBLOCK) && tdl__sys_fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
      return -errno;
  }
  d = TDL__FAULT_ALLOC(calloc(1, sizeof *d));
  if (!d)
    return -ENOMEM;
  tdl_io_init(&d->w, fd, ffd_ready, NULL);
  ((fio *)s->io)->ffds[fd] = d;
  *out = d;
  return 0;
  TDL__ANALYZER_END
}

static inline int ffd_get(tdl__sched *s, int fd, tdl__ffd **out)
{
  tdl__ffd *d = ffd_find(s, fd); /* (NULL for fd < 0 too: ffd_make says -EBADF) */
  if (TDL__LIKELY(d != NULL)) {
    *out = d;
    return 0;
  }
  return ffd_make(s, fd, out, false);
}

/* tdl__fd_wait_begin on d, fd's state. */
static inline int wait_begin(tdl__fiber *f, tdl__ffd *d, int fd, unsigned events, tdl__fdwait *rec)
{
  if (taken(d, events))
    return -EBUSY;
  rec->f = f;
  rec->fd = fd;
  rec->events = 0;
  if (events & TDL_READ)
    d->reader = rec;
  if (events & TDL_WRITE)
    d->writer = rec;
  unsigned want = (d->reader ? TDL_READ : 0) | (d->writer ? TDL_WRITE : 0);
  int e = tdl_io_start(f->sched->loop, &d->w, want);
  if (e < 0)
    tdl__fd_wait_end(rec);
  return e;
}

int tdl__fd_wait_begin(tdl__fiber *f, int fd, unsigned events, tdl__fdwait *rec)
{
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  return wait_begin(f, d, fd, events, rec);
}

/* tdl__fd_wait_end, inline where a plain wait ends. */
static inline void wait_end(tdl__fdwait *rec)
{
  tdl__sched *s = rec->f->sched;
  tdl__ffd *d = ffd_find(s, rec->fd); /* tdl_close may have dropped it, and rec */
  if (!d || (d->reader != rec && d->writer != rec))
    return;
  if (d->reader == rec)
    d->reader = NULL;
  if (d->writer == rec)
    d->writer = NULL;
  ffd_update(s, d);
}

void tdl__fd_wait_end(tdl__fdwait *rec) { wait_end(rec); }

/* A cancel or a deadline ended the wait: unhang at once, so that whoever
 * cancelled may use the fd before this fiber runs again. */
static void abort_fd_wait(tdl__fiber *f) { tdl__fd_wait_end(f->abort_ctx); }

_Static_assert(sizeof(tdl__fdwait) <= sizeof(((tdl__fiber *)0)->wait_space), "a plain wait's record fits the control block");

/* Wait for events on fd.  The record is the control block's, not on the
 * stack: the loop reads and writes it while the fiber is parked, and so it
 * stays readable while the fiber is compacted (fiber/compact.c); so the park
 * may be compacted.  (Nothing writes into the fiber's buffers before it runs
 * again: it reads once woken.) */
static int wait_ffd(tdl__fiber *f, tdl__ffd *d, int fd, unsigned events, const char *what, tdl_time_t deadline)
{
  tdl__fdwait *rec = (tdl__fdwait *)(void *)f->wait_space;
  *rec = (tdl__fdwait){.clause = -1};
  int e = wait_begin(f, d, fd, events, rec);
  if (e < 0)
    return e;
  f->abort_wait = abort_fd_wait;
  f->abort_ctx = rec;
  TDL__COUNT(f->sched->loop, io_parks, 1);
  /* The fd's state that tdl__fd_wait_begin made is in s->io: GCC's
   * stale-pointer leak (base.h). */
  TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak")
  e = tdl__park_compactable(f, what, fd, deadline);
  TDL__ANALYZER_END
  f->abort_wait = NULL;
  wait_end(rec);
  return e;
}

/* The same, looking fd's state up. */
static int wait_fd(tdl__fiber *f, int fd, unsigned events, const char *what, tdl_time_t deadline)
{
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  return wait_ffd(f, d, fd, events, what, deadline);
}

/* The caller just saw EAGAIN: what the loop cached about those directions is
 * stale.  Wait for them. */
static int wait_after_eagain(tdl__fiber *f, int fd, unsigned events, const char *what, tdl_time_t deadline)
{
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  tdl_io_blocked(f->sched->loop, &d->w, events);
  return wait_fd(f, fd, events, what, deadline);
}

/* The caller heard EAGAIN in `events`' directions (or the kernel said so):
 * what the loop cached there is stale, and what a wait was told too. */
static inline void ffd_blocked(tdl_loop *loop, tdl__ffd *d, unsigned events)
{
  tdl_io_blocked(loop, &d->w, events);
  d->told &= (uint8_t)~events;
}

/* tdl__fd_ready_now on d, fd's state. */
static int ready_now(tdl__fiber *f, tdl__ffd *d, unsigned events)
{
  /* The caller saw EAGAIN from a call treadle did not make (sendmsg,
   * SSL_write, ...), or wants to hear of the next arrival.  Where the loop
   * misses no readiness that is there when a wait starts, what it cached is
   * stale: forget it, so that the wait waits; no system call either way.  On
   * an edge-triggered registration readiness already reported is not
   * reported again, so a cached one is taken as true (at worst the caller
   * hears EAGAIN once more and comes back, and then it has been consumed). */
  tdl_loop *loop = f->sched->loop;
  if ((events & TDL_READ) && d->ended)
    return TDL_READ | d->ended; /* a read hears the end or the error at once */
  unsigned ev = tdl__io_wait_ready(loop, &d->w, events);
  unsigned again = ev & events & d->told;
  if (TDL__UNLIKELY(again)) {
    /* Told once already, and nothing done since (see `told`): the kernel
     * says whether it is still so. */
    struct pollfd p = {.fd = d->w.fd, .events = (short)(((again & TDL_READ) ? POLLIN : 0) |
                                                         ((again & TDL_WRITE) ? POLLOUT : 0))};
    const struct timespec now = {0, 0};
    int k = tdl__sys_ppoll(&p, 1, &now);
    unsigned gone = again;
    if (k > 0)
      gone &= ~(((p.revents & (POLLIN | POLLERR | POLLHUP)) ? TDL_READ : 0u) |
                ((p.revents & (POLLOUT | POLLERR | POLLHUP)) ? TDL_WRITE : 0u));
    if (gone) {
      ffd_blocked(loop, d, gone);
      ev &= ~gone;
      if (!(ev & events))
        ev = 0; /* no direction left: a cached TDL_ERR/TDL_HUP alone ends no wait (a read's end: `ended`, above) */
    }
  }
  d->told |= (uint8_t)(ev & events & (TDL_READ | TDL_WRITE));
  /* What was cached is the caller's now: a read that parked first would
   * wait for an arrival that was already reported. */
  if (ev & (TDL_READ | TDL_ERR | TDL_HUP))
    d->empty = false;
  return (int)ev;
}

int tdl__fd_ready_now(tdl__fiber *f, int fd, unsigned events)
{
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  return ready_now(f, d, events);
}

#ifdef TDL_HAVE_URING
static int ring_wait_fd(tdl__fiber *f, int fd, unsigned events, tdl_time_t deadline);
#endif

int tdl_fd_blocked(int fd, unsigned events)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (events == 0 || (events & ~(TDL_READ | TDL_WRITE)))
    return -EINVAL;
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  ffd_blocked(f->sched->loop, d, events);
  return 0;
}

int tdl_fd_wait(int fd, unsigned events, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  if (events == 0 || (events & ~(TDL_READ | TDL_WRITE)))
    return -EINVAL;
#ifdef TDL_HAVE_URING
  if (tdl__loop_ring(f->sched->loop))
    return ring_wait_fd(f, fd, events, deadline);
#endif
  tdl__ffd *d = NULL;
  if ((e = ffd_get(f->sched, fd, &d)) < 0)
    return e;
  if ((e = ready_now(f, d, events)) != 0) {
    tdl__io_budget_spend(f);
    return e;
  }
  return wait_ffd(f, d, fd, events, (events & TDL_READ) ? "wait read" : "wait write", deadline);
}

/* Whether a read should wait for the loop's report before it reads (see
 * the top): the stream was emptied and nothing has come since, or the loop
 * reports reads as a level and has none cached.  A deadline already past
 * asks for what is there now: then the call is made. */
static inline bool park_first(const tdl_loop *loop, tdl__ffd *d, tdl_time_t deadline)
{
  if ((deadline != TDL_FOREVER && deadline <= loop->now) || d->ended)
    return false;
  if (d->empty)
    return !tdl__io_cached(loop, &d->w, TDL_READ);
  return tdl__io_read_empty(loop, &d->w);
}

#ifdef TDL_HAVE_URING
/* On a uring loop a call that would block becomes a ring operation: the
 * kernel arms its own wait and completes the call when it can, so the fiber
 * is woken with the result instead of being told to try again (no second
 * system call, no epoll).  A call that need not wait is still made directly:
 * one system call, no round trip through the loop.  `len` is what a read
 * asked of a stream (tdl__fdop.asked).  Where the kernel answers EAGAIN anyway (a
 * non-blocking file, on kernels that honour O_NONBLOCK there) the fiber
 * waits for readiness and submits again. */
static ssize_t ring_io(tdl__fiber *f, tdl__ffd *d, const tdl__uop *u, unsigned dir, size_t len, const char *what,
                       tdl_time_t deadline)
{
  if (((dir & TDL_READ) && d->reader) || ((dir & TDL_WRITE) && d->writer))
    return -EBUSY;
  for (;;) {
    bool closed = false;
    ssize_t r = tdl__fd_ring_io(f, &d->ring_ops, u, what, deadline, &closed);
    if (closed)
      return r; /* tdl_close freed d meanwhile */
    if (len)
      d->empty = emptied(d, u->fd, r, len);
    if (r != -EAGAIN)
      return r;
    tdl_io_blocked(f->sched->loop, &d->w, dir);
    int e = wait_fd(f, u->fd, dir, what, deadline);
    if (e < 0)
      return e;
  }
}
/* tdl_fd_wait on a uring loop: a one-shot poll on the ring, not the loop's
 * epoll set.  An fd that fibers read with ring operations is then never
 * registered with epoll, whose events for it nobody would want (each would
 * wake the ring and cost an epoll_wait).  The poll answers at once when the
 * fd is ready already. */
static int ring_wait_fd(tdl__fiber *f, int fd, unsigned events, tdl_time_t deadline)
{
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  if (taken(d, events))
    return -EBUSY;
  if ((events & TDL_READ) && ((d->ahead && tdl__bg_pending(d->ahead)) || (d->acc && tdl__bg_pending(d->acc)))) {
    tdl__io_budget_spend(f);
    return TDL_READ; /* received ahead: the next read returns at once */
  }
  if (events == TDL_READ && (d->ahead || d->acc)) {
    /* What comes is taken by the request armed ahead, not left for a poll
     * of the socket to see: wait for it where it is queued. */
    bool closed;
    int r = tdl__bg_wait(f, d->ahead ? d->ahead : d->acc, deadline, &closed);
    if (closed || r != (int)TDL__BG_PASS)
      return r;
  }
  tdl__uop u = {.code = IORING_OP_POLL_ADD, .fd = fd, .flags = (int)events};
  ssize_t r = ring_io(f, d, &u, events, 0, (events & TDL_READ) ? "wait read" : "wait write", deadline);
  if (r < 0)
    return (int)r;
  if (!(events & TDL_READ) && !(r & (POLLOUT | POLLERR | POLLHUP))) {
    /* The peer's shutdown (POLLRDHUP, which a ring's poll always reports)
     * tells a writer nothing, and a poll asked again would end at once
     * again: wait for room as an epoll loop does, on the loop's watcher,
     * which hears of that shutdown once. */
    return wait_fd(f, fd, TDL_WRITE, "wait write", deadline);
  }
  unsigned ev = ((r & POLLIN) ? TDL_READ : 0) | ((r & POLLOUT) ? TDL_WRITE : 0);
  if (r & POLLERR)
    ev |= TDL_ERR | TDL_READ | TDL_WRITE; /* the next read/write returns the error */
  if (r & (POLLHUP | POLLRDHUP))
    ev |= TDL_HUP | TDL_READ; /* a read returns EOF */
  return (int)ev;
}

/* A read of an fd that receives ahead (fd/ahead.c): out of what the
 * kernel received already, or parked until it receives more.  Flags it
 * cannot honour from a queue (MSG_TRUNC, ...) are refused; MSG_OOB and
 * MSG_ERRQUEUE read queues of their own, so they are made as usual.  A
 * stream socket names no sender: recvfrom's *addrlen becomes 0. */
static ssize_t ahead_read(tdl__fiber *f, tdl__ffd *d, const struct iovec *iov, int iovcnt, int flags, bool empty,
                          tdl_time_t deadline, socklen_t *addrlen)
{
  if (flags & (MSG_OOB | MSG_ERRQUEUE))
    return TDL__BG_PASS;
  if (flags & ~(MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT | MSG_NOSIGNAL | MSG_CMSG_CLOEXEC))
    return -EOPNOTSUPP;
  if (taken(d, TDL_READ))
    return -EBUSY;
  bool closed;
  ssize_t r = tdl__ahead_read(f, d->ahead, iov, iovcnt, flags, empty, deadline, &closed);
  if (closed)
    return r; /* tdl_close freed d meanwhile */
  tdl__bg_free_idle(&d->ahead); /* turned off, and all read */
  if (r == TDL__BG_PASS || r == TDL__BG_LATER)
    return r;
  if (addrlen)
    *addrlen = 0;
  if (r >= 0)
    tdl__io_budget_spend_as(f, flags & MSG_DONTWAIT);
  return r;
}

/* A send of an fd that sends behind (fd/behind.c): copied behind what
 * is held, or TDL__BG_PASS to be made as usual. */
static ssize_t behind_send(tdl__fiber *f, tdl__ffd *d, const void *buf, size_t len, int flags,
                           tdl_time_t deadline)
{
  if (taken(d, TDL_WRITE))
    return -EBUSY;
  bool closed;
  ssize_t r = tdl__behind_send(f, d->behind, buf, len, flags, deadline, &closed);
  if (!closed) /* (else tdl_close freed d meanwhile) */
    tdl__bg_free_idle(&d->behind); /* turned off, and all gone */
  return r;
}

static int behind_flush(tdl__fiber *f, tdl__ffd *d, tdl_time_t deadline)
{
  if (taken(d, TDL_WRITE))
    return -EBUSY;
  bool closed;
  int e = tdl__behind_flush(f, d->behind, deadline, &closed);
  if (!closed)
    tdl__bg_free_idle(&d->behind);
  return e;
}
#endif

/* accept4 makes the new fd non-blocking: record that now, so that its first
 * fiber I/O does not ask the kernel again (one fcntl per connection); and
 * its kind is its listener's (one getsockopt per listener). */
static void accepted(tdl__sched *s, int lfd, int nfd)
{
  tdl__ffd *ld = ffd_find(s, lfd), *nd;
  if (ffd_make(s, nfd, &nd, true) < 0 || !ld)
    return; /* on failure the first use makes it */
  if (ld->stream == STREAM_UNKNOWN)
    ld->stream = stream_kind(lfd);
  nd->stream = ld->stream == STREAM_SOCKET ? STREAM_CONN : ld->stream;
}

static int accept_known(tdl__sched *s, int fd, struct sockaddr *addr, socklen_t *addrlen)
{
  int nfd = TDL__FAULT_SYS(EMFILE, tdl__sys_accept4(fd, addr, addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (nfd >= 0)
    accepted(s, fd, nfd);
  return nfd;
}

#ifdef TDL_HAVE_URING
static int ring_accept(tdl__fiber *f, tdl__ffd *d, int fd, struct sockaddr *addr, socklen_t *addrlen,
                       tdl_time_t deadline)
{
  tdl__uop u = {.code = IORING_OP_ACCEPT, .fd = fd, .addr = addr, .addrlen = addrlen};
  int nfd = (int)ring_io(f, d, &u, TDL_READ, 0, "accept", deadline);
  if (nfd >= 0)
    accepted(f->sched, fd, nfd);
  return nfd;
}
#endif

#ifdef TDL_HAVE_URING
/* An accept on a listener that accepts ahead (fd/acceptahead.c): the
 * next fd the kernel accepted already, or parked until it accepts one.  A
 * multishot accept gives no address: getpeername() does (a peer that has
 * reset meanwhile leaves *addrlen 0, and the fd is still returned). */
static int acc_accept(tdl__fiber *f, tdl__ffd *d, int fd, struct sockaddr *addr, socklen_t *addrlen, bool empty,
                      tdl_time_t deadline)
{
  if (taken(d, TDL_READ))
    return -EBUSY;
  bool closed;
  int r = tdl__acc_accept(f, d->acc, empty, deadline, &closed);
  if (closed)
    return r; /* tdl_close freed d meanwhile */
  tdl__bg_free_idle(&d->acc); /* turned off, and all taken */
  if (r < 0)
    return r;
  accepted(f->sched, fd, r);
  if (addr && addrlen && getpeername(r, addr, addrlen) < 0)
    *addrlen = 0;
  tdl__io_budget_spend(f);
  return r;
}
#endif

/* One call of fiber I/O, as tdl__fd_io makes it: the system call and its
 * arguments, and what the call does where it would wait. */
typedef struct tdl__fdop {
  uint8_t call;     /* FD_*: the system call */
  uint8_t dir;      /* TDL_READ or TDL_WRITE: the readiness it waits for */
  uint8_t bg;       /* FD_BG_*: what it asks first of the fd's background request */
  bool ring;        /* on a uring loop, where it would wait it goes to the ring as a request */
  int fd;
  int flags;        /* recv/send flags as the caller gave them (MSG_DONTWAIT: -EAGAIN, not a wait) */
  const char *name; /* for tdl_fiber_dump */
  size_t asked;     /* what a read asks of a stream, whose short read empties it (see the top); 0: nothing */
  void *buf;        /* read, write, recv, send, recvfrom, sendto */
  size_t len;
  const struct iovec *iov; /* readv, writev */
  int iovcnt;
  struct sockaddr *addr; /* recvfrom, accept: the peer's address (out); sendto: the destination */
  socklen_t *addrlen;    /* recvfrom, accept (in and out) */
  socklen_t tolen;       /* sendto */
} tdl__fdop;

/* tdl__fd_io and its helpers are inlined into each call of fiber I/O, where
 * op is a constant and what does not apply to the call folds away.  A
 * coverage build (TDL_COVERAGE) makes them once instead: inlined into nine
 * calls at -O0, where nothing folds, gcov would count each branch of the
 * source nine times, eight of them for calls that can never take it. */
#ifdef TDL_COVERAGE
#define FD_FOLDED static __attribute__((noinline))
#else
#define FD_FOLDED static inline __attribute__((always_inline))
#endif

enum { FD_READ, FD_WRITE, FD_READV, FD_WRITEV, FD_RECVFROM, FD_SENDTO, FD_ACCEPT };

/* tdl__fdop.bg: on an fd with a background request (fd_internal.h), a
 * read takes what was received ahead, an accept what was accepted ahead, a
 * send goes behind what is held, and any other write waits until that has
 * gone. */
enum { FD_BG_NONE, FD_BG_AHEAD, FD_BG_ACCEPT, FD_BG_BEHIND, FD_BG_FLUSH };

/* The system call, once.  Inlined into tdl__fd_io, whose op is a constant
 * in each caller: the switch folds to the one call. */
FD_FOLDED ssize_t fd_try(tdl__sched *s, const tdl__fdop *op)
{
  switch (op->call) {
  case FD_READ:
    return tdl__sys_read(op->fd, op->buf, op->len);
  case FD_WRITE:
    return tdl__sys_write(op->fd, op->buf, op->len);
  case FD_READV:
    return tdl__sys_readv(op->fd, op->iov, op->iovcnt);
  case FD_WRITEV:
    return tdl__sys_writev(op->fd, op->iov, op->iovcnt);
  case FD_RECVFROM:
    return tdl__sys_recvfrom(op->fd, op->buf, op->len, op->flags, op->addr, op->addrlen);
  case FD_SENDTO:
    /* MSG_NOSIGNAL: a vanished peer is an EPIPE for the caller, not a
     * SIGPIPE for the process. */
    return tdl__sys_sendto(op->fd, op->buf, op->len, op->flags | MSG_NOSIGNAL, op->addr, op->tolen);
  default:
    return accept_known(s, op->fd, op->addr, op->addrlen);
  }
}

#ifdef TDL_HAVE_URING
/* A call that would wait, on a uring loop: its ring request instead.
 * (Inlined, as the other helpers of tdl__fd_io: op must not leave the
 * caller's registers for memory.) */
FD_FOLDED ssize_t fd_ring(tdl__fiber *f, tdl__ffd *d, const tdl__fdop *op, tdl_time_t deadline)
{
  static const uint8_t code[] = {
      [FD_READ] = IORING_OP_READ,     [FD_WRITE] = IORING_OP_WRITE,    [FD_READV] = IORING_OP_READV,
      [FD_WRITEV] = IORING_OP_WRITEV, [FD_RECVFROM] = IORING_OP_RECV, [FD_SENDTO] = IORING_OP_SEND,
  };
  if (op->call == FD_ACCEPT)
    return ring_accept(f, d, op->fd, op->addr, op->addrlen, deadline);
  bool vec = op->call == FD_READV || op->call == FD_WRITEV;
  tdl__uop u = {.code = code[op->call],
                .fd = op->fd,
                .addr = vec ? (void *)op->iov : op->buf,
                .len = vec ? (size_t)op->iovcnt : op->len,
                .flags = op->call == FD_SENDTO ? op->flags | MSG_NOSIGNAL : op->flags};
  return ring_io(f, d, &u, op->dir, op->asked, op->name, deadline);
}

/* What the fd's background request makes of the call: its result, or
 * TDL__BG_PASS (make the call as usual), or TDL__BG_LATER (as usual,
 * and should that find nothing, come back with `empty`). */
FD_FOLDED ssize_t fd_background(tdl__fiber *f, tdl__ffd *d, const tdl__fdop *op, bool empty,
                                  tdl_time_t deadline)
{
  switch (op->bg) {
  case FD_BG_AHEAD: {
    if (!d->ahead)
      return TDL__BG_PASS;
    if (op->call == FD_READV)
      return ahead_read(f, d, op->iov, op->iovcnt, op->flags, empty, deadline, op->addrlen);
    const struct iovec one = {op->buf, op->len};
    return ahead_read(f, d, &one, 1, op->flags, empty, deadline, op->addrlen);
  }
  case FD_BG_ACCEPT:
    return d->acc ? acc_accept(f, d, op->fd, op->addr, op->addrlen, empty, deadline) : TDL__BG_PASS;
  case FD_BG_BEHIND:
    return d->behind ? behind_send(f, d, op->buf, op->len, op->flags, deadline) : TDL__BG_PASS;
  case FD_BG_FLUSH: {
    int e = d->behind ? behind_flush(f, d, deadline) : 0;
    return e < 0 ? e : TDL__BG_PASS;
  }
  default:
    return TDL__BG_PASS;
  }
}
#endif

/* Every call of fiber I/O: try; on EAGAIN wait and retry, unless the
 * caller's MSG_DONTWAIT says -EAGAIN.  On a uring loop a call that would
 * wait becomes a ring request instead (op->ring; the others wait for
 * readiness there too).  On an fd with a background request, a read or
 * accept takes first what was received or accepted ahead (before a call has
 * found the stream empty it is made as usual, and comes back there should
 * it find nothing), and a write goes behind what is held or waits until
 * that has gone.  Inlined into each call: op is a constant there, and what
 * does not apply to the call folds away. */
FD_FOLDED ssize_t tdl__fd_io(const tdl__fdop *op, tdl_time_t deadline)
{
  if (op->iovcnt < 0)
    return -EINVAL; /* readv, writev: before anything else */
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  tdl__ffd *d = NULL;
  if (TDL__UNLIKELY((e = ffd_get(f->sched, op->fd, &d)) < 0))
    return e;
  tdl_loop *loop = f->sched->loop;
  const bool nowait = (op->flags & MSG_DONTWAIT) != 0;
#ifdef TDL_HAVE_URING
  /* Only a read or an accept is told to come back (TDL__BG_LATER): for
   * the others `later` stays false, and what it guards folds away. */
  const bool may_come_back = op->bg == FD_BG_AHEAD || op->bg == FD_BG_ACCEPT;
  bool later = false;
  ssize_t rb = fd_background(f, d, op, d->empty, deadline);
  if (TDL__UNLIKELY(rb != TDL__BG_PASS)) {
    if (rb != TDL__BG_LATER || !may_come_back)
      return rb;
    later = true;
  }
  /* A read known to find the stream empty goes to the ring at once. */
  if (!nowait && op->asked && d->empty && op->ring && tdl__loop_ring(loop))
    return fd_ring(f, d, op, deadline);
#endif
  if (op->asked && !nowait && park_first(loop, d, deadline) &&
      (e = wait_ffd(f, d, op->fd, TDL_READ, op->name, deadline)) < 0)
    return e;
  /* The first try stands outside the loop: what the loop needs (after
   * EAGAIN) is then set up after it, not on the way to a try that
   * succeeds. */
  d->told &= (uint8_t)~op->dir; /* a call acts on what a wait said */
  ssize_t r = fd_try(f->sched, op);
  while (TDL__UNLIKELY(r < 0)) {
    if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        e = -errno;
        tdl__io_budget_spend_as(f, nowait); /* a failing retry loop must yield too */
        return e;
      }
#ifdef TDL_HAVE_URING
      if (later) { /* found empty: now receiving (or accepting) ahead pays */
        later = false;
        rb = fd_background(f, d, op, true, deadline);
        if (rb != TDL__BG_PASS) {
          if (rb != TDL__BG_LATER || !may_come_back)
            return rb;
          later = true;
        }
      }
#endif
      if (nowait) {
        tdl_io_blocked(loop, &d->w, op->dir);
        tdl__io_budget_spend_nowait(f);
        return -EAGAIN;
      }
#ifdef TDL_HAVE_URING
      if (op->ring && tdl__loop_ring(loop))
        return fd_ring(f, d, op, deadline);
#endif
      tdl_io_blocked(loop, &d->w, op->dir);
      if ((e = wait_ffd(f, d, op->fd, op->dir, op->name, deadline)) < 0)
        return e;
    }
    d->told &= (uint8_t)~op->dir;
    r = fd_try(f->sched, op);
  }
  if (op->asked && (d->empty = emptied(d, op->fd, r, op->asked)))
    tdl_io_blocked(loop, &d->w, TDL_READ);
  tdl__io_budget_spend_as(f, nowait);
  return r;
}

ssize_t tdl_read(int fd, void *buf, size_t len, tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_READ, .dir = TDL_READ, .name = "read", .fd = fd, .buf = buf, .len = len,
                        .asked = len, .ring = true, .bg = FD_BG_AHEAD};
  return tdl__fd_io(&op, deadline);
}

ssize_t tdl_write(int fd, const void *buf, size_t len, tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_WRITE, .dir = TDL_WRITE, .name = "write", .fd = fd, .buf = (void *)buf,
                        .len = len, .ring = true, .bg = FD_BG_FLUSH};
  return tdl__fd_io(&op, deadline);
}

ssize_t tdl_readv(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_READV, .dir = TDL_READ, .name = "readv", .fd = fd, .iov = iov,
                        .iovcnt = iovcnt, .ring = true, .bg = FD_BG_AHEAD};
  return tdl__fd_io(&op, deadline);
}

ssize_t tdl_writev(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_WRITEV, .dir = TDL_WRITE, .name = "writev", .fd = fd, .iov = iov,
                        .iovcnt = iovcnt, .ring = true, .bg = FD_BG_FLUSH};
  return tdl__fd_io(&op, deadline);
}

ssize_t tdl_recv(int fd, void *buf, size_t len, int flags, tdl_time_t deadline)
{
  /* MSG_PEEK empties nothing. */
  const tdl__fdop op = {.call = FD_RECVFROM, .dir = TDL_READ, .name = "recv", .fd = fd, .buf = buf, .len = len,
                        .flags = flags, .asked = (flags & MSG_PEEK) ? 0 : len, .ring = true, .bg = FD_BG_AHEAD};
  return tdl__fd_io(&op, deadline);
}

ssize_t tdl_send(int fd, const void *buf, size_t len, int flags, tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_SENDTO, .dir = TDL_WRITE, .name = "send", .fd = fd, .buf = (void *)buf,
                        .len = len, .flags = flags, .ring = true, .bg = FD_BG_BEHIND};
  return tdl__fd_io(&op, deadline);
}

/* recvfrom and sendto: no `asked` (a datagram's short read says nothing of
 * what is behind it), and no ring request (the ring's RECV and SEND carry
 * no address). */
ssize_t tdl_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr, socklen_t *addrlen,
                     tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_RECVFROM, .dir = TDL_READ, .name = "recv", .fd = fd, .buf = buf, .len = len,
                        .flags = flags, .addr = addr, .addrlen = addrlen, .bg = FD_BG_AHEAD};
  return tdl__fd_io(&op, deadline);
}

ssize_t tdl_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr, socklen_t addrlen,
                   tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_SENDTO, .dir = TDL_WRITE, .name = "send", .fd = fd, .buf = (void *)buf,
                        .len = len, .flags = flags, .addr = (struct sockaddr *)addr, .tolen = addrlen,
                        .bg = FD_BG_FLUSH};
  return tdl__fd_io(&op, deadline);
}

int tdl__fd_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, tdl_time_t deadline)
{
  const tdl__fdop op = {.call = FD_ACCEPT, .dir = TDL_READ, .name = "accept", .fd = fd, .addr = addr,
                        .addrlen = addrlen, .ring = true, .bg = FD_BG_ACCEPT};
  return (int)tdl__fd_io(&op, deadline);
}

/* A non-blocking connect is under way: wait for its end, and its result. */
static int connect_result(tdl__fiber *f, int fd, tdl_time_t deadline)
{
  int e = wait_after_eagain(f, fd, TDL_WRITE, "connect", deadline);
  if (e < 0)
    return e;
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
    return -errno;
  return soerr ? -soerr : 0;
}

int tdl__fd_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  tdl__ffd *d = NULL;
  if ((e = ffd_get(f->sched, fd, &d)) < 0)
    return e;
#ifdef TDL_HAVE_URING
  if (tdl__loop_ring(f->sched->loop)) {
    tdl__uop u = {.code = IORING_OP_CONNECT, .fd = fd, .addr = (void *)addr, .len = addrlen};
    bool closed;
    e = (int)tdl__fd_ring_io(f, &d->ring_ops, &u, "connect", deadline, &closed);
    /* A kernel that honours O_NONBLOCK here leaves the handshake going.
     * (-EAGAIN is a Unix listener's full backlog, as on epoll.) */
    return e == -EINPROGRESS && !closed ? connect_result(f, fd, deadline) : e;
  }
#endif
  while (tdl__sys_connect(fd, addr, addrlen) < 0) {
    if (errno == EINTR)
      continue;
    if (errno != EINPROGRESS)
      return -errno;
    return connect_result(f, fd, deadline);
  }
  return 0;
}

/* Forget what s knows about fd, waking its waiters with -EBADF. */
/* Drop s's state for fd before its close (open: sending behind keeps the
 * file for what it holds), or after it was closed elsewhere (then the
 * number may name a stranger: what is held is dropped). */
static void forget_fd(tdl__sched *s, int fd, bool open)
{
  (void)open; /* (only sending behind, on uring loops, holds the file) */
  tdl__ffd *d = ffd_find(s, fd);
  if (d) {
    ((fio *)s->io)->ffds[fd] = NULL;
#ifdef TDL_HAVE_URING
    if (!open && d->behind)
      d->behind->fd = -1; /* nothing to duplicate: held data is dropped */
    ffd_close_bg(d); /* before the cancel by fd below: sending behind keeps the file */
    if (tdl__loop_ring(s->loop))
      tdl__fd_ring_closed(s->loop, fd, &d->ring_ops);
#endif
    if (d->reader)
      fdwait_end(d->reader, -EBADF);
    if (d->writer && d->writer != d->reader)
      fdwait_end(d->writer, -EBADF);
    tdl_io_stop(s->loop, &d->w);
    free(d);
  }
  tdl__fd_forget(s->loop, fd);
}

/* Forget fd in the calling fiber's loop, or outside a fiber in every loop
 * of the thread (any of them may know it). */
static void forget_here(int fd, bool open)
{
  tdl__fiber *self = tdl__self();
  if (self) {
    forget_fd(self->sched, fd, open);
  } else {
    TDL__LIST_FOREACH(n, &tdl__thread_scheds)
      forget_fd(TDL__CONTAINER_OF(n, tdl__sched, on_thread), fd, open);
  }
}

int tdl_fd_forget(int fd)
{
  if (fd < 0)
    return -EBADF;
  forget_here(fd, false);
  return 0;
}

int tdl_close(int fd)
{
  if (fd < 0)
    return -EBADF;
  forget_here(fd, true);
  /* Linux releases the fd even when close fails (EINTR, or EIO from a
   * deferred write error): report the error once, never ask for a retry that
   * could close a stranger's fd. */
  return tdl__sys_close(fd) < 0 && errno != EINTR ? -errno : 0;
}

#ifdef TDL_HAVE_URING
/* Whether fd is a stream socket, and a listening one (an fd accepted here
 * from a stream listener is known to be one that is not): 0, or -EBADF,
 * -ENOTSOCK, -EPROTOTYPE. */
static int stream_socket(const tdl__ffd *d, int fd, bool *listening)
{
  *listening = false;
  if (d && d->stream == STREAM_CONN)
    return 0;
  int type = 0, acc = 0;
  socklen_t tl = sizeof type, al = sizeof acc;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0)
    return -errno;
  if (type != SOCK_STREAM)
    return -EPROTOTYPE;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0)
    return -errno;
  *listening = acc != 0;
  return 0;
}
#endif

#ifdef TDL_HAVE_URING
/* tdl_fd_readahead's new record for fd (d: its state, or NULL): receiving
 * ahead on a connected socket, accepting ahead on a listener. */
static int ahead_make(tdl__sched *s, tdl__ffd *d, int fd)
{
  bool listening;
  int e;
  if ((e = stream_socket(d, fd, &listening)) < 0 || (e = ffd_get(s, fd, &d)) < 0)
    return e;
  assert(d); /* ffd_get's failures are -errno, never 0 (errno > 0 after a failed call) */
  /* d is in s->io's table (ffd_get): GCC's stale-pointer leak (base.h). */
  TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak")
  if (taken(d, TDL_READ))
    return -EBUSY; /* a read or accept is under way: what it waits for would come out of order */
  TDL__ANALYZER_END
  d->stream = listening ? STREAM_SOCKET : STREAM_CONN;
  if (listening)
    return tdl__acc_new(s->loop, fd, &d->acc);
  fio *io = s->io;
  if (!io->links && !(io->links = TDL__FAULT_ALLOC(malloc(sizeof *io->links))))
    return -ENOMEM;
  if ((e = tdl__ring_bufs_ready(s->loop)) < 0)
    return e;
  return tdl__ahead_new(s->loop, io->links, fd, &d->ahead);
}

/* tdl_fd_writebehind's new record for fd (d: its state, or NULL). */
static int behind_make(tdl__sched *s, tdl__ffd *d, int fd)
{
  bool listening;
  int e = stream_socket(d, fd, &listening);
  if (e < 0)
    return e;
  if (listening)
    return -EINVAL;
  if ((e = ffd_get(s, fd, &d)) < 0)
    return e;
  assert(d); /* as in ahead_make */
  d->stream = STREAM_CONN;
  return tdl__behind_new(s->loop, &((fio *)s->io)->spares, fd, &d->behind);
}
#endif

/* tdl_fd_readahead and tdl_fd_writebehind (`behind`): turn the fd's
 * record on or off where it has one (freeing it once idle), else make one.
 * An fd receives or accepts ahead, not both. */
static int bg_switch(int fd, bool on, bool behind)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (fd < 0)
    return -EBADF;
#ifndef TDL_HAVE_URING
  (void)on, (void)behind;
  return -ENOTSUP; /* no loop is uring */
#else
  tdl__sched *s = f->sched;
  if (!tdl__loop_ring(s->loop))
    return -ENOTSUP;
  tdl__ffd *d = ffd_find(s, fd);
  tdl__bg **slot = !d ? NULL : behind ? &d->behind : d->acc ? &d->acc : &d->ahead;
  if (slot && *slot) {
    tdl__bg_set(*slot, on);
    tdl__bg_free_idle(slot);
    return 0;
  }
  if (!on)
    return 0;
  return behind ? behind_make(s, d, fd) : ahead_make(s, d, fd);
#endif
}

int tdl_fd_readahead(int fd, bool on) { return bg_switch(fd, on, false); }

int tdl_fd_writebehind(int fd, bool on) { return bg_switch(fd, on, true); }

int tdl_fd_flush(int fd, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (fd < 0)
    return -EBADF;
#ifdef TDL_HAVE_URING
  tdl__ffd *d = ffd_find(f->sched, fd);
  if (d && d->behind)
    return behind_flush(f, d, deadline);
#else
  (void)deadline;
#endif
  return 0;
}

/* ---- giving a peak's table back ---- */

/* The scheduler's trim (its hook): shrink the per-fd table when the fds in
 * use need a quarter of it or less.  Cost: a scan down from the top to the
 * highest fd known, a realloc when it shrinks. */
static void fio_trim(tdl__sched *s, tdl__sched_client *h)
{
  fio *io = TDL__CONTAINER_OF(h, fio, hook);
  (void)s;
#ifdef TDL_HAVE_URING
  tdl__behind_spares_trim(&io->spares); /* a peak's buffers of sends behind */
#endif
  uint32_t hi = io->nffds;
  while (hi > 0 && !io->ffds[hi - 1])
    hi--;
  uint32_t n = 64;
  while (n < hi)
    n *= 2;
  if (n > io->nffds / 4)
    return;
  tdl__ffd **a = TDL__FAULT_ALLOC(realloc(io->ffds, (size_t)n * sizeof *a));
  if (a)
    io->ffds = a;
  io->nffds = n; /* (a failed shrink keeps the larger block) */
}
