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
 * has emptied a stream, and when the loop would report new data as a level
 * (TDL__FD_LEVEL) the next read parks first instead of calling read() to
 * hear EAGAIN.  (A datagram socket's short read says nothing; recvfrom is
 * left out, and so is MSG_PEEK, which empties nothing.)
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/sys.h"
#include "fiber/fiber_internal.h"

typedef struct tdl__ffd {
  tdl_io w;
  tdl__fdwait *reader, *writer;
} tdl__ffd;

/* A scheduler's fiber I/O state (its `io`): per-fd state by fd number. */
typedef struct fio {
  tdl__sched_hook hook; /* frees it with the scheduler */
  tdl__ffd **ffds;
  uint32_t nffds;
} fio;

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
  tdl__wake(rec->f, rec->clause < 0 ? ev : rec->clause);
}

static void ffd_ready(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  tdl__ffd *d = (tdl__ffd *)w; /* w is the first member */
  tdl__sched *s = loop->sched;
  tdl__fdwait *r = d->reader, *wr = d->writer;
  bool readable = r && (ev & TDL_READ);
  if (r && (ev & (TDL_READ | TDL_ERR | TDL_HUP))) {
    d->reader = NULL;
    fdwait_end(r, (int)ev);
  }
  if (wr && (ev & (TDL_WRITE | TDL_ERR | TDL_HUP))) {
    d->writer = NULL;
    if (wr != r) /* one record for both directions wakes once */
      fdwait_end(wr, (int)ev);
  }
  ffd_update(s, d);
  /* The loop took the arrival as consumed by telling us; for fiber I/O data
   * stays there until a read says otherwise (a short read or EAGAIN), so
   * keep it cached: the reader's next call reads instead of parking. */
  if (readable)
    tdl_io_feed(loop, w, TDL_READ);
}

static void fio_destroy(tdl__sched *s, tdl__sched_hook *h)
{
  fio *io = TDL__CONTAINER_OF(h, fio, hook);
  for (uint32_t i = 0; i < io->nffds; i++) {
    if (io->ffds[i]) {
      tdl_io_stop(s->loop, &io->ffds[i]->w);
      free(io->ffds[i]);
    }
  }
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
    tdl__sched_hook_add(s, &io->hook);
    s->io = io;
  }
  if ((uint32_t)fd < io->nffds)
    return 0;
  uint32_t n = io->nffds ? io->nffds : 64;
  while (n <= (uint32_t)fd)
    n *= 2;
  tdl__ffd **a = TDL__FAULT_ALLOC(realloc(io->ffds, (size_t)n * sizeof *a));
  if (!a)
    return -ENOMEM;
  memset(a + io->nffds, 0, (size_t)(n - io->nffds) * sizeof *a);
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
 * unless the caller knows it already is (an fd accept4 just made). */
static int ffd_make(tdl__sched *s, int fd, tdl__ffd **out, bool nonblocking)
{
  if (fd < 0)
    return -EBADF;
  tdl__ffd *d = ffd_find(s, fd);
  if (TDL__LIKELY(d != NULL)) {
    *out = d;
    return 0;
  }
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
}

static int ffd_get(tdl__sched *s, int fd, tdl__ffd **out) { return ffd_make(s, fd, out, false); }

int tdl__fd_wait_begin(tdl__fiber *f, int fd, unsigned events, tdl__fdwait *rec)
{
  tdl__sched *s = f->sched;
  tdl__ffd *d = NULL;
  int e = ffd_get(s, fd, &d);
  if (e < 0)
    return e;
  if (((events & TDL_READ) && d->reader) || ((events & TDL_WRITE) && d->writer))
    return -EBUSY;
  rec->f = f;
  rec->fd = fd;
  rec->events = 0;
  if (events & TDL_READ)
    d->reader = rec;
  if (events & TDL_WRITE)
    d->writer = rec;
  unsigned want = (d->reader ? TDL_READ : 0) | (d->writer ? TDL_WRITE : 0);
  e = tdl_io_start(s->loop, &d->w, want);
  if (e < 0)
    tdl__fd_wait_end(rec);
  return e;
}

void tdl__fd_wait_end(tdl__fdwait *rec)
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

/* A cancel or a deadline ended the wait: unhang at once, so that whoever
 * cancelled may use the fd before this fiber runs again. */
static void abort_fd_wait(tdl__fiber *f) { tdl__fd_wait_end(f->abort_ctx); }

/* Wait for events on fd. */
static int wait_fd(tdl__fiber *f, int fd, unsigned events, const char *what, tdl_time_t deadline)
{
  tdl__fdwait rec = {.clause = -1};
  int e = tdl__fd_wait_begin(f, fd, events, &rec);
  if (e < 0)
    return e;
  f->abort_wait = abort_fd_wait;
  f->abort_ctx = &rec;
  e = tdl__park(f, what, fd, deadline);
  f->abort_wait = NULL;
  tdl__fd_wait_end(&rec);
  return e;
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

int tdl__fd_ready_now(tdl__fiber *f, int fd, unsigned events)
{
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  /* The caller saw EAGAIN from a call treadle did not make (sendmsg,
   * SSL_write, ...), or wants to hear of the next arrival.  Where the loop
   * misses no readiness that is there when a wait starts, what it cached is
   * stale: forget it, so that the wait waits; no system call either way.  On
   * an edge-triggered registration readiness already reported is not
   * reported again, so a cached one is taken as true (at worst the caller
   * hears EAGAIN once more and comes back, and then it has been consumed). */
  tdl_loop *loop = f->sched->loop;
  if (tdl__io_misses_nothing(loop, &d->w)) {
    tdl_io_blocked(loop, &d->w, events);
    return 0;
  }
  unsigned ev = tdl__io_cached(loop, &d->w, events);
  if (ev)
    tdl_io_blocked(loop, &d->w, ev & events);
  return (int)ev;
}

int tdl_wait_fd(int fd, unsigned events, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (f->cancelled)
    return -ECANCELED;
  if (events == 0 || (events & ~(TDL_READ | TDL_WRITE)))
    return -EINVAL;
  int e = tdl__fd_ready_now(f, fd, events);
  if (e != 0) {
    tdl__io_budget_spend(f);
    return e;
  }
  return wait_fd(f, fd, events, (events & TDL_READ) ? "wait read" : "wait write", deadline);
}

/* A read of len > 0 that returned less: the stream is empty for now. */
static inline bool emptied(ssize_t r, size_t len) { return len && r > 0 && (size_t)r < len; }

/* The shape of every call below: try; on EAGAIN wait and retry.  `len` is
 * what a read asked for (0: not a read that empties a stream, see the top). */
#define FIBER_IO(call, dir, name, len)                                \
  tdl__fiber *f = tdl__self();                                        \
  if (!f)                                                             \
    return -EPERM;                                                    \
  if (f->cancelled)                                                   \
    return -ECANCELED;                                                \
  tdl__ffd *d_ = NULL;                                                \
  int e_ = ffd_get(f->sched, fd, &d_);                                \
  if (e_ < 0)                                                         \
    return e_;                                                        \
  tdl_loop *loop_ = f->sched->loop;                                   \
  if ((len) && tdl__io_read_empty(loop_, &d_->w) &&                   \
      (e_ = wait_fd(f, fd, TDL_READ, (name), deadline)) < 0)          \
    return e_;                                                        \
  for (;;) {                                                          \
    ssize_t r_ = (call);                                              \
    if (r_ >= 0) {                                                    \
      if (emptied(r_, (len)))                                         \
        tdl_io_blocked(loop_, &d_->w, TDL_READ);                      \
      tdl__io_budget_spend(f);                                        \
      return r_;                                                      \
    }                                                                 \
    if (errno == EINTR)                                               \
      continue;                                                       \
    if (errno != EAGAIN && errno != EWOULDBLOCK) {                    \
      e_ = -errno;                                                    \
      tdl__io_budget_spend(f); /* a failing retry loop must yield too */ \
      return e_;                                                      \
    }                                                                 \
    tdl_io_blocked(loop_, &d_->w, (dir));                             \
    e_ = wait_fd(f, fd, (dir), (name), deadline);                     \
    if (e_ < 0)                                                       \
      return e_;                                                      \
  }

ssize_t tdl_read(int fd, void *buf, size_t len, tdl_time_t deadline)
{
  FIBER_IO(tdl__sys_read(fd, buf, len), TDL_READ, "read", len)
}

ssize_t tdl_write(int fd, const void *buf, size_t len, tdl_time_t deadline)
{
  FIBER_IO(tdl__sys_write(fd, buf, len), TDL_WRITE, "write", 0)
}

ssize_t tdl_readv(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline)
{
  FIBER_IO(tdl__sys_readv(fd, iov, iovcnt), TDL_READ, "readv", 0)
}

ssize_t tdl_writev(int fd, const struct iovec *iov, int iovcnt, tdl_time_t deadline)
{
  FIBER_IO(tdl__sys_writev(fd, iov, iovcnt), TDL_WRITE, "writev", 0)
}

ssize_t tdl_recv(int fd, void *buf, size_t len, int flags, tdl_time_t deadline)
{
  FIBER_IO(tdl__sys_recvfrom(fd, buf, len, flags, NULL, NULL), TDL_READ, "recv", (flags & MSG_PEEK) ? 0 : len)
}

ssize_t tdl_send(int fd, const void *buf, size_t len, int flags, tdl_time_t deadline)
{
  /* MSG_NOSIGNAL: a vanished peer is an EPIPE for the caller, not a SIGPIPE
   * for the process. */
  FIBER_IO(tdl__sys_sendto(fd, buf, len, flags | MSG_NOSIGNAL, NULL, 0), TDL_WRITE, "send", 0)
}

ssize_t tdl_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr, socklen_t *addrlen,
                     tdl_time_t deadline)
{
  FIBER_IO(tdl__sys_recvfrom(fd, buf, len, flags, addr, addrlen), TDL_READ, "recv", 0)
}

ssize_t tdl_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr, socklen_t addrlen,
                   tdl_time_t deadline)
{
  FIBER_IO(tdl__sys_sendto(fd, buf, len, flags | MSG_NOSIGNAL, addr, addrlen), TDL_WRITE, "send", 0)
}

/* accept4 makes the new fd non-blocking: record that now, so that its first
 * fiber I/O does not ask the kernel again (one fcntl per connection). */
static int accept_known(tdl__sched *s, int fd, struct sockaddr *addr, socklen_t *addrlen)
{
  int nfd = TDL__FAULT_SYS(EMFILE, tdl__sys_accept4(fd, addr, addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (nfd >= 0) {
    tdl__ffd *d;
    (void)ffd_make(s, nfd, &d, true); /* on failure the first use makes it */
  }
  return nfd;
}

int tdl__fiber_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, tdl_time_t deadline)
{
  FIBER_IO(accept_known(f->sched, fd, addr, addrlen), TDL_READ, "accept", 0)
}

int tdl__fiber_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (f->cancelled)
    return -ECANCELED;
  tdl__ffd *d = NULL;
  int e = ffd_get(f->sched, fd, &d);
  if (e < 0)
    return e;
  while (tdl__sys_connect(fd, addr, addrlen) < 0) {
    if (errno == EINTR)
      continue;
    if (errno != EINPROGRESS)
      return -errno;
    e = wait_after_eagain(f, fd, TDL_WRITE, "connect", deadline);
    if (e < 0)
      return e;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
      return -errno;
    return soerr ? -soerr : 0;
  }
  return 0;
}

/* Forget what s knows about fd, waking its waiters with -EBADF. */
static void forget_fd(tdl__sched *s, int fd)
{
  tdl__ffd *d = ffd_find(s, fd);
  if (d) {
    ((fio *)s->io)->ffds[fd] = NULL;
    if (d->reader)
      fdwait_end(d->reader, -EBADF);
    if (d->writer && d->writer != d->reader)
      fdwait_end(d->writer, -EBADF);
    tdl_io_stop(s->loop, &d->w);
    free(d);
  }
  tdl__fd_forget(s->loop, fd);
}

int tdl_close(int fd)
{
  if (fd < 0)
    return -EBADF;
  tdl__fiber *self = tdl__self();
  if (self) {
    forget_fd(self->sched, fd);
  } else {
    /* Outside a fiber: the fd may be known to any loop of this thread. */
    TDL__LIST_FOREACH(n, &tdl__thread_scheds)
      forget_fd(TDL__CONTAINER_OF(n, tdl__sched, on_thread), fd);
  }
  return tdl__sys_close(fd) < 0 ? -errno : 0;
}

/* ---- sleeping ---- */

int tdl_sleep(tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  int e = tdl__park(f, "sleep", -1, deadline == TDL_FOREVER ? TDL_FOREVER : deadline);
  return e == -ETIMEDOUT ? 0 : e;
}

int tdl_sleep_for(tdl_time_t delay)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  return tdl_sleep(tdl_after(delay));
}
