/* SPDX-License-Identifier: MIT */
/*
 * read, write, readv, writev, recv, send, recvfrom, sendto, recvmsg,
 * sendmsg, accept, accept4 and connect: on a socket or pipe the user left
 * blocking, try the call and wait on EAGAIN (in a fiber, parked on fiber
 * I/O; outside one, on an fd made non-blocking underneath, in poll(2)).
 * A cancelled fiber's call fails with ECANCELED before it is tried.
 */
#include <errno.h>
#include <stdint.h>

#include "hook/hook_internal.h"

#define DL_UNSET ((tdl_time_t)-2)

/* In a fiber, a call on fd has just found it empty (EAGAIN, or a short
 * read) or full: the readiness the loop saw is used up (tdl_fd_blocked). */
static inline void used_up(int fd, tdl__hfd *h, unsigned dir)
{
  h->in_fio = 1; /* fiber I/O has state for fd from here: close with tdl_close */
  (void)tdl_fd_blocked(fd, dir);
}

/* In a fiber, a read of the user's passed through on fd (non-blocking by
 * the user) and returned r of len asked: on a stream the
 * hook's poll has parked on before, note whether it found the stream empty
 * (EAGAIN, or less than asked: see HOOK_CALL), telling fiber I/O that the
 * readiness the loop saw is used up, so that the library's poll that
 * follows can park at once (poll.c's poll_drained) instead of first asking
 * the kernel: libpq reads until it has a whole reply, then polls.  errno is
 * kept. */
static void read_passed(int fd, ssize_t r, size_t len)
{
  tdl__hfd *h = tdl__hfd_peek(fd);
  if (!h || !h->in_fio || h->kind != TDL__HFD_WAITABLE || !h->stream)
    return;
  if (r >= 0) {
    /* (tdl_fd_blocked makes no system call on an fd fiber I/O knows, and
     * so leaves errno alone) */
    if ((h->drained = r > 0 && (size_t)r < len))
      (void)tdl_fd_blocked(fd, TDL_READ);
    return;
  }
  int e = errno;
  if ((h->drained = e == EAGAIN || e == EWOULDBLOCK)) {
    (void)tdl_fd_blocked(fd, TDL_READ);
    errno = e;
  }
}

/* The call on fd heard EAGAIN: wait until it is ready for dir, under the
 * user's SO_*TIMEO (first call fixes *dl).  0: try again; -1 with errno. */
static int wait_ready(int fd, tdl__hfd *h, unsigned dir, tdl_time_t *dl, bool fiber)
{
  if (*dl == DL_UNSET) {
    tdl_time_t t = dir == TDL_READ ? h->rcvtimeo : h->sndtimeo;
    *dl = t > 0 ? tdl__hook_after(t) : TDL_FOREVER;
  }
  if (fiber) {
    h->in_fio = 1;
    TDL__HOOK_COUNT(parked);
    int e = tdl_fd_wait(fd, dir, *dl);
    if (e > 0)
      return 0;
    if (e == -EBUSY) {
      /* Another fiber waits in this direction: look again shortly. */
      if (*dl != TDL_FOREVER && tdl_now() >= *dl) {
        errno = EAGAIN;
        return -1;
      }
      e = tdl_sleep(tdl_after(TDL_MSEC));
      if (e == 0)
        return 0;
    }
    if (e == -ECANCELED)
      tdl__hfd_cut(fd, h); /* the exchange is cut: see tdl__hfd.cut */
    errno = e == -ETIMEDOUT ? EAGAIN : -e;
    return -1;
  }
  if (!tdl__hfd_nonblocking_underneath(fd, h)) {
    errno = EAGAIN; /* a blocking fd's own: its SO_*TIMEO ran out */
    return -1;
  }
  int ms = -1;
  if (*dl != TDL_FOREVER) {
    tdl_time_t left = *dl - tdl_now();
    if (left <= 0) {
      errno = EAGAIN;
      return -1;
    }
    ms = (int)((left + TDL_MSEC - 1) / TDL_MSEC);
  }
  struct pollfd p = {.fd = fd, .events = dir == TDL_READ ? POLLIN : POLLOUT};
  int n = tdl__hook_real.poll(&p, 1, ms);
  if (n < 0)
    return -1; /* EINTR: as the blocking call would */
  if (n == 0) {
    errno = EAGAIN;
    return -1;
  }
  return 0;
}

/* The shape of every I/O call: pass through, or try and wait on EAGAIN.
 * `reads`: the call is a read that may empty a stream, of `len` bytes
 * (evaluated only after the call succeeded).  In a fiber, such a read that
 * returns less has emptied the pipe or stream socket, so the next read
 * waits for the loop to report data before it reads, instead of first
 * hearing EAGAIN: one system call less per reply in a request-reply
 * protocol.  The wait ends at once when data is there (tdl_fd_wait misses
 * no arrival), and at worst a read hears EAGAIN and waits as usual. */
#define HOOK_CALL(type, fd, call, dir, reads, len)                            \
  TDL__HOOK_READY();                                                          \
  bool fiber_ = tdl__hook_in_fiber();                                         \
  tdl__hfd *h_ = fiber_ ? tdl__hfd_hooked(fd) : tdl__hfd_blocking_under(fd);  \
  if (!h_) {                                                                  \
    if (tdl__hfd_passes_cut(fd))                                              \
      return -1;                                                              \
    type p_ = call;                                                           \
    if (fiber_ && (reads))                                                    \
      read_passed((fd), (ssize_t)p_, p_ > 0 ? (size_t)(len) : 0);             \
    return p_;                                                                \
  }                                                                           \
  if (fiber_ && tdl__hook_refused()) {                                        \
    tdl__hfd_cut((fd), h_);                                                   \
    return -1;                                                                \
  }                                                                           \
  if (tdl__hfd_is_cut(h_))                                                    \
    return -1;                                                                \
  h_->drained = 0; /* its wait below may take the loop's readiness */        \
  tdl_time_t dl_ = DL_UNSET;                                                  \
  const bool reads_ = fiber_ && (reads);                                      \
  if (reads_ && h_->empty && wait_ready((fd), h_, (dir), &dl_, true) < 0)     \
    return -1;                                                                \
  for (;;) {                                                                  \
    type r_ = call;                                                           \
    if (r_ >= 0) {                                                            \
      if (reads_ && (h_->empty = h_->stream && r_ > 0 &&                      \
                                 (size_t)r_ < (size_t)(len)))                 \
        used_up((fd), h_, TDL_READ);                                          \
      return r_;                                                              \
    }                                                                         \
    if (errno != EAGAIN && errno != EWOULDBLOCK)                              \
      return r_;                                                              \
    if (fiber_)                                                               \
      used_up((fd), h_, (dir));                                               \
    if (wait_ready((fd), h_, (dir), &dl_, fiber_) < 0)                        \
      return -1;                                                              \
  }
#define HOOK_IO(type, fd, call, dir) HOOK_CALL(type, fd, call, dir, false, 1)
#define HOOK_READ(fd, call, reads, len) HOOK_CALL(ssize_t, fd, call, TDL_READ, reads, len)

TDL__HOOK ssize_t read(int fd, void *buf, size_t n) { HOOK_READ(fd, tdl__hook_real.read(fd, buf, n), true, n) }
/* A blocking write or send returns when all of it went (or a timeout, an
 * error or a signal cut it short: then with the count so far, as Linux
 * does); the non-blocking one underneath stops at a full buffer, so carry
 * on.  `call` sends from buf + done_. */
#define HOOK_OUT(fd, n, call)                                                 \
  TDL__HOOK_READY();                                                          \
  bool fiber_ = tdl__hook_in_fiber();                                         \
  tdl__hfd *h_ = fiber_ ? tdl__hfd_hooked(fd) : tdl__hfd_blocking_under(fd);  \
  size_t done_ = 0;                                                           \
  if (!h_)                                                                    \
    return tdl__hfd_passes_cut(fd) ? -1 : call;                               \
  if (fiber_ && tdl__hook_refused()) {                                        \
    tdl__hfd_cut((fd), h_);                                                   \
    return -1;                                                                \
  }                                                                           \
  if (tdl__hfd_is_cut(h_))                                                    \
    return -1;                                                                \
  tdl_time_t dl_ = DL_UNSET;                                                  \
  for (;;) {                                                                  \
    ssize_t r_ = call;                                                        \
    if (r_ >= 0) {                                                            \
      done_ += (size_t)r_;                                                    \
      /* A file really blocking stopped short (a signal): say so. */          \
      if (done_ >= (n) || r_ == 0 ||                                          \
          (!fiber_ && !tdl__hfd_nonblocking_underneath(fd, h_)))              \
        return (ssize_t)done_;                                                \
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {                     \
      return done_ ? (ssize_t)done_ : -1;                                     \
    }                                                                         \
    if (fiber_) /* short, or EAGAIN: the buffer is full */                    \
      used_up((fd), h_, TDL_WRITE);                                           \
    if (wait_ready((fd), h_, TDL_WRITE, &dl_, fiber_) < 0)                    \
      return done_ ? (ssize_t)done_ : -1;                                     \
  }

TDL__HOOK ssize_t write(int fd, const void *buf, size_t n)
{
  HOOK_OUT(fd, n, tdl__hook_real.write(fd, (const char *)buf + done_, n - done_))
}
/* What a readv that succeeded asked for in all (the kernel has read iov);
 * 0 when it overflows, so that no short read is taken as emptying. */
static size_t iov_len(const struct iovec *iov, int n)
{
  size_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (iov[i].iov_len > SIZE_MAX - sum)
      return 0; // GCOVR_EXCL_LINE: asked after a readv succeeded: the kernel refuses (EINVAL, EFAULT) lengths no address space holds
    sum += iov[i].iov_len;
  }
  return sum;
}
TDL__HOOK ssize_t readv(int fd, const struct iovec *iov, int n)
{
  HOOK_READ(fd, tdl__hook_real.readv(fd, iov, n), true, iov_len(iov, n))
}
TDL__HOOK ssize_t writev(int fd, const struct iovec *iov, int n)
{
  HOOK_IO(ssize_t, fd, tdl__hook_real.writev(fd, iov, n), TDL_WRITE)
}

/* MSG_DONTWAIT asks for this call not to wait: it passes through. */
#define DONTWAIT_PASSES(call)                                                 \
  if (flags & MSG_DONTWAIT) {                                                 \
    TDL__HOOK_READY();                                                        \
    return tdl__hfd_passes_cut(fd) ? -1 : call;                               \
  }

/* MSG_WAITALL: the kernel waits for all n bytes only on a blocking file.
 * On a stream socket the user wants blocking but that is non-blocking
 * underneath, gather them here, one hooked receive after another (each
 * waits under SO_RCVTIMEO); an end of stream, an error or a timeout after
 * some bytes returns the count so far, as Linux does.  Whether the call is
 * such a one: */
static bool waitall_ours(int fd, int flags, size_t n)
{
  if (!(flags & MSG_WAITALL) || (flags & (MSG_PEEK | MSG_OOB)) || n == 0)
    return false;
  TDL__HOOK_READY();
  bool fiber = tdl__hook_in_fiber();
  tdl__hfd *h = fiber ? tdl__hfd_hooked(fd) : tdl__hfd_blocking_under(fd);
  return h && h->stream && (fiber || tdl__hfd_nonblocking_underneath(fd, h));
}

/* The rest of a MSG_WAITALL receive that has `got` bytes of n. */
static ssize_t recv_rest(int fd, char *buf, size_t n, size_t got, int flags)
{
  flags &= ~MSG_WAITALL;
  while (got < n) {
    ssize_t r = recv(fd, buf + got, n - got, flags);
    if (r <= 0)
      return got ? (ssize_t)got : r;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

TDL__HOOK ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  DONTWAIT_PASSES(tdl__hook_real.recv(fd, buf, n, flags))
  if (TDL__UNLIKELY(waitall_ours(fd, flags, n)))
    return recv_rest(fd, buf, n, 0, flags);
  HOOK_READ(fd, tdl__hook_real.recv(fd, buf, n, flags), !(flags & (MSG_PEEK | MSG_OOB)), n)
}
TDL__HOOK ssize_t send(int fd, const void *buf, size_t n, int flags)
{
  DONTWAIT_PASSES(tdl__hook_real.send(fd, buf, n, flags))
  HOOK_OUT(fd, n, tdl__hook_real.send(fd, (const char *)buf + done_, n - done_, flags))
}
TDL__HOOK ssize_t recvfrom(int fd, void *buf, size_t n, int flags, TDL__SA_ARG a, socklen_t *al)
{
  DONTWAIT_PASSES(tdl__hook_real.recvfrom(fd, buf, n, flags, a, al))
  if (TDL__UNLIKELY(waitall_ours(fd, flags, n))) {
    ssize_t r = recvfrom(fd, buf, n, flags & ~MSG_WAITALL, a, al); /* the sender's address */
    return r <= 0 ? r : recv_rest(fd, buf, n, (size_t)r, flags);
  }
  HOOK_IO(ssize_t, fd, tdl__hook_real.recvfrom(fd, buf, n, flags, a, al), TDL_READ)
}
TDL__HOOK ssize_t sendto(int fd, const void *buf, size_t n, int flags, TDL__CSA_ARG a, socklen_t al)
{
  DONTWAIT_PASSES(tdl__hook_real.sendto(fd, buf, n, flags, a, al))
  HOOK_OUT(fd, n, tdl__hook_real.sendto(fd, (const char *)buf + done_, n - done_, flags, a, al))
}
TDL__HOOK ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
  DONTWAIT_PASSES(tdl__hook_real.recvmsg(fd, m, flags))
  HOOK_IO(ssize_t, fd, tdl__hook_real.recvmsg(fd, m, flags), TDL_READ)
}
TDL__HOOK ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
  DONTWAIT_PASSES(tdl__hook_real.sendmsg(fd, m, flags))
  HOOK_IO(ssize_t, fd, tdl__hook_real.sendmsg(fd, m, flags), TDL_WRITE)
}

static int accept4_(int fd, TDL__SA_ARG a, socklen_t *al, int flags)
{
  HOOK_IO(int, fd, tdl__hfd_made(tdl__hook_real.accept4(fd, a, al, flags)), TDL_READ)
}
TDL__HOOK int accept4(int fd, TDL__SA_ARG a, socklen_t *al, int flags) { return accept4_(fd, a, al, flags); }
TDL__HOOK int accept(int fd, TDL__SA_ARG a, socklen_t *al) { return accept4_(fd, a, al, 0); }

/* Blocking connect: start it, wait until the socket is writable (under
 * SO_SNDTIMEO, like Linux), report SO_ERROR. */
TDL__HOOK int connect(int fd, TDL__CSA_ARG a, socklen_t al)
{
  TDL__HOOK_READY();
  bool fiber = tdl__hook_in_fiber();
  tdl__hfd *h = fiber ? tdl__hfd_hooked(fd) : tdl__hfd_blocking_under(fd);
  if (!h)
    return tdl__hfd_passes_cut(fd) ? -1 : tdl__hook_real.connect(fd, a, al);
  if (fiber && tdl__hook_refused()) {
    tdl__hfd_cut(fd, h);
    return -1;
  }
  if (tdl__hfd_is_cut(h))
    return -1;
  int r = tdl__hook_real.connect(fd, a, al);
  if (r == 0 || errno != EINPROGRESS)
    return r;
  tdl_time_t dl = DL_UNSET;
  for (;;) {
    if (wait_ready(fd, h, TDL_WRITE, &dl, fiber) < 0) {
      if (errno == EAGAIN)
        errno = EINPROGRESS; /* what a blocking connect says at SO_SNDTIMEO */
      return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (tdl__hook_real.poll(&p, 1, 0) == 1)
      break; /* done, one way or the other */
  }
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
    return -1;
  if (soerr) {
    errno = soerr;
    return -1;
  }
  return 0;
}
