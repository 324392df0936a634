/*
 * libtreadle-hook: libc's blocking calls, parking the fiber instead of the
 * thread (include/treadle/hook.h says what the user sees).
 *
 * Each interposed function asks first whether it runs in a fiber; outside
 * one it is libc's function (resolved once with dlsym(RTLD_NEXT)), except
 * on an fd this library made non-blocking underneath, where EAGAIN turns
 * into a poll(2) and a retry, as the blocking fd would have done.
 *
 * Per fd (a table by fd number, in chunks made on first use and never
 * freed, so a look-up takes no lock): what kind of file it is (a socket or
 * pipe can be waited for; anything else passes through), the user's
 * O_NONBLOCK, whether we set O_NONBLOCK underneath, whether treadle's
 * fiber I/O knows it (then close goes through tdl_close), and the
 * SO_RCVTIMEO/SO_SNDTIMEO the user set.  The table is the user's view of
 * the fd; treadle's own view is fiber I/O's, and treadle's own calls never
 * come here (src/base/sys.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The address arguments as libc declares them: glibc (with _GNU_SOURCE)
 * uses transparent unions (types, or macros without it), which an
 * interposed definition must match; musl plain pointers. */
#ifdef __GLIBC__
#define SA_ARG __SOCKADDR_ARG
#define CSA_ARG __CONST_SOCKADDR_ARG
#else
#define SA_ARG struct sockaddr *
#define CSA_ARG const struct sockaddr *
#endif

#include "base/base.h"
#include "treadle/hook.h"

#define HOOK __attribute__((visibility("default")))

/* ---- libc's functions ---- */

static struct {
  ssize_t (*read)(int, void *, size_t);
  ssize_t (*write)(int, const void *, size_t);
  ssize_t (*readv)(int, const struct iovec *, int);
  ssize_t (*writev)(int, const struct iovec *, int);
  ssize_t (*recv)(int, void *, size_t, int);
  ssize_t (*send)(int, const void *, size_t, int);
  ssize_t (*recvfrom)(int, void *, size_t, int, SA_ARG, socklen_t *);
  ssize_t (*sendto)(int, const void *, size_t, int, CSA_ARG, socklen_t);
  ssize_t (*recvmsg)(int, struct msghdr *, int);
  ssize_t (*sendmsg)(int, const struct msghdr *, int);
  int (*accept)(int, SA_ARG, socklen_t *);
  int (*accept4)(int, SA_ARG, socklen_t *, int);
  int (*connect)(int, CSA_ARG, socklen_t);
  int (*poll)(struct pollfd *, nfds_t, int);
  int (*close)(int);
  int (*fcntl)(int, int, ...);
  int (*fcntl64)(int, int, ...);
  int (*setsockopt)(int, int, int, const void *, socklen_t);
  int (*socket)(int, int, int);
  int (*socketpair)(int, int, int, int[2]);
  int (*pipe)(int[2]);
  int (*pipe2)(int[2], int);
  int (*dup)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  unsigned (*sleep)(unsigned);
  int (*usleep)(useconds_t);
  int (*nanosleep)(const struct timespec *, struct timespec *);
  int (*clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
} real;
static atomic_bool resolved;

/* (memcpy: ISO C has no cast from dlsym's void * to a function pointer.) */
#define RESOLVE(name)                        \
  do {                                       \
    void *p_ = dlsym(RTLD_NEXT, #name);      \
    memcpy(&real.name, &p_, sizeof p_);      \
  } while (0)

/* Idempotent: two threads that race here store the same values. */
static __attribute__((noinline)) void resolve(void)
{
  RESOLVE(read);
  RESOLVE(write);
  RESOLVE(readv);
  RESOLVE(writev);
  RESOLVE(recv);
  RESOLVE(send);
  RESOLVE(recvfrom);
  RESOLVE(sendto);
  RESOLVE(recvmsg);
  RESOLVE(sendmsg);
  RESOLVE(accept);
  RESOLVE(accept4);
  RESOLVE(connect);
  RESOLVE(poll);
  RESOLVE(close);
  RESOLVE(fcntl);
  RESOLVE(fcntl64);
  RESOLVE(setsockopt);
  RESOLVE(socket);
  RESOLVE(socketpair);
  RESOLVE(pipe);
  RESOLVE(pipe2);
  RESOLVE(dup);
  RESOLVE(dup2);
  RESOLVE(dup3);
  RESOLVE(sleep);
  RESOLVE(usleep);
  RESOLVE(nanosleep);
  RESOLVE(clock_nanosleep);
  if (!real.fcntl64)
    real.fcntl64 = real.fcntl;
  atomic_store_explicit(&resolved, true, memory_order_release);
}

static __attribute__((constructor)) void hook_init(void) { resolve(); }

/* Every entry point starts here: something may call read() before our
 * constructor has run (another library's constructor). */
#define READY()                                                          \
  do {                                                                   \
    if (TDL__UNLIKELY(!atomic_load_explicit(&resolved, memory_order_acquire))) \
      resolve();                                                         \
  } while (0)

/* ---- statistics ---- */

static _Atomic uint64_t st_parked, st_slept, st_nonblocking;
#define COUNT(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)

int tdl_libc_hook_active(void)
{
  READY();
  return real.read && real.close && real.fcntl ? 1 : -ENOSYS;
}

void tdl_libc_hook_stats_get(tdl_libc_hook_stats *out)
{
  if (!out)
    return;
  out->parked = atomic_load_explicit(&st_parked, memory_order_relaxed);
  out->slept = atomic_load_explicit(&st_slept, memory_order_relaxed);
  out->fds_made_nonblocking = atomic_load_explicit(&st_nonblocking, memory_order_relaxed);
}

/* ---- per-fd state ---- */

enum { KIND_UNKNOWN, KIND_OTHER, KIND_WAITABLE };

typedef struct hfd {
  uint8_t kind;      /* KIND_*: a socket or pipe is KIND_WAITABLE */
  uint8_t user_nb;   /* the user's O_NONBLOCK */
  uint8_t our_nb;    /* we set O_NONBLOCK underneath (hidden from F_GETFL) */
  uint8_t in_fio;    /* treadle's fiber I/O has state for it: close with tdl_close */
  tdl_time_t rcvtimeo, sndtimeo; /* as durations; 0: none */
} hfd;

#define CHUNK_BITS 10
#define CHUNK ((size_t)1 << CHUNK_BITS)
#define NCHUNKS ((size_t)1 << 10) /* fds up to 2^20 */
static _Atomic(hfd *) chunks[NCHUNKS];

/* fd's state if its chunk exists, else NULL. */
static inline hfd *hfd_peek(int fd)
{
  if ((unsigned)fd >= CHUNK * NCHUNKS)
    return NULL;
  hfd *c = atomic_load_explicit(&chunks[(unsigned)fd >> CHUNK_BITS], memory_order_acquire);
  return c ? &c[(unsigned)fd & (CHUNK - 1)] : NULL;
}

/* fd's state, its chunk made on first use; NULL out of range or memory. */
static hfd *hfd_at(int fd)
{
  hfd *h = hfd_peek(fd);
  if (h || (unsigned)fd >= CHUNK * NCHUNKS)
    return h;
  hfd *c = calloc(CHUNK, sizeof *c), *none = NULL;
  if (!c)
    return NULL;
  if (!atomic_compare_exchange_strong(&chunks[(unsigned)fd >> CHUNK_BITS], &none, c)) {
    free(c); /* another thread was quicker */
    c = none;
  }
  return &c[(unsigned)fd & (CHUNK - 1)];
}

/* A new file has this number: forget the old one's state. */
static void hfd_reset(int fd)
{
  hfd *h = hfd_peek(fd);
  if (h)
    memset(h, 0, sizeof *h);
}

/* Look at fd the first time: its kind and the user's O_NONBLOCK. */
static void classify(int fd, hfd *h)
{
  struct stat st;
  if (fstat(fd, &st) < 0)
    return; /* stays unknown; the call itself reports EBADF */
  int fl = real.fcntl(fd, F_GETFL);
  if (fl < 0)
    return;
  h->user_nb = (fl & O_NONBLOCK) != 0;
  h->our_nb = 0;
  h->kind = (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)) ? KIND_WAITABLE : KIND_OTHER;
}

/* In a fiber: fd's state when calls on it are ours to wait for (a socket or
 * pipe the user left blocking), made non-blocking underneath; NULL when the
 * call passes through. */
static hfd *hooked(int fd)
{
  hfd *h = hfd_at(fd);
  if (!h)
    return NULL;
  if (h->kind == KIND_UNKNOWN)
    classify(fd, h);
  if (h->kind != KIND_WAITABLE || h->user_nb)
    return NULL;
  if (!h->our_nb) {
    int fl = real.fcntl(fd, F_GETFL);
    if (fl < 0)
      return NULL;
    if (!(fl & O_NONBLOCK)) {
      if (real.fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return NULL;
      COUNT(st_nonblocking);
    }
    h->our_nb = 1;
  }
  return h;
}

/* Outside a fiber: fd's state when we made it non-blocking behind a user
 * who wants it blocking (so EAGAIN must become a wait); else NULL. */
static inline hfd *blocking_under(int fd)
{
  hfd *h = hfd_peek(fd);
  return h && h->our_nb && !h->user_nb ? h : NULL;
}

#define DL_UNSET ((tdl_time_t)-2)

/* The call on fd heard EAGAIN: wait until it is ready for dir, under the
 * user's SO_*TIMEO (first call fixes *dl).  0: try again; -1 with errno. */
static int wait_ready(int fd, hfd *h, unsigned dir, tdl_time_t *dl, bool fiber)
{
  if (*dl == DL_UNSET) {
    tdl_time_t t = dir == TDL_READ ? h->rcvtimeo : h->sndtimeo;
    *dl = t > 0 ? tdl_after(t) : TDL_FOREVER;
  }
  if (fiber) {
    h->in_fio = 1;
    COUNT(st_parked);
    int e = tdl_wait_fd(fd, dir, *dl);
    if (e > 0)
      return 0;
    if (e == -EBUSY) {
      /* Another fiber waits in this direction: look again shortly. */
      if (*dl != TDL_FOREVER && tdl_now() >= *dl) {
        errno = EAGAIN;
        return -1;
      }
      e = tdl_sleep_for(TDL_MSEC);
      if (e == 0)
        return 0;
    }
    errno = e == -ETIMEDOUT ? EAGAIN : -e;
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
  int n = real.poll(&p, 1, ms);
  if (n < 0)
    return -1; /* EINTR: as the blocking call would */
  if (n == 0) {
    errno = EAGAIN;
    return -1;
  }
  return 0;
}

/* The shape of every I/O call: pass through, or try and wait on EAGAIN. */
#define HOOK_IO(type, fd, call, dir)                                          \
  READY();                                                                    \
  bool fiber_ = tdl_fiber_self() != 0;                                        \
  hfd *h_ = fiber_ ? hooked(fd) : blocking_under(fd);                         \
  if (!h_)                                                                    \
    return call;                                                              \
  tdl_time_t dl_ = DL_UNSET;                                                  \
  for (;;) {                                                                  \
    type r_ = call;                                                           \
    if (r_ >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))                 \
      return r_;                                                              \
    if (wait_ready((fd), h_, (dir), &dl_, fiber_) < 0)                        \
      return -1;                                                              \
  }

HOOK ssize_t read(int fd, void *buf, size_t n) { HOOK_IO(ssize_t, fd, real.read(fd, buf, n), TDL_READ) }
HOOK ssize_t write(int fd, const void *buf, size_t n) { HOOK_IO(ssize_t, fd, real.write(fd, buf, n), TDL_WRITE) }
HOOK ssize_t readv(int fd, const struct iovec *iov, int n)
{
  HOOK_IO(ssize_t, fd, real.readv(fd, iov, n), TDL_READ)
}
HOOK ssize_t writev(int fd, const struct iovec *iov, int n)
{
  HOOK_IO(ssize_t, fd, real.writev(fd, iov, n), TDL_WRITE)
}

/* MSG_DONTWAIT asks for this call not to wait: it passes through. */
#define DONTWAIT_PASSES(call)  \
  if (flags & MSG_DONTWAIT) { \
    READY();                  \
    return call;              \
  }

HOOK ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  DONTWAIT_PASSES(real.recv(fd, buf, n, flags))
  HOOK_IO(ssize_t, fd, real.recv(fd, buf, n, flags), TDL_READ)
}
HOOK ssize_t send(int fd, const void *buf, size_t n, int flags)
{
  DONTWAIT_PASSES(real.send(fd, buf, n, flags))
  HOOK_IO(ssize_t, fd, real.send(fd, buf, n, flags), TDL_WRITE)
}
HOOK ssize_t recvfrom(int fd, void *buf, size_t n, int flags, SA_ARG a, socklen_t *al)
{
  DONTWAIT_PASSES(real.recvfrom(fd, buf, n, flags, a, al))
  HOOK_IO(ssize_t, fd, real.recvfrom(fd, buf, n, flags, a, al), TDL_READ)
}
HOOK ssize_t sendto(int fd, const void *buf, size_t n, int flags, CSA_ARG a, socklen_t al)
{
  DONTWAIT_PASSES(real.sendto(fd, buf, n, flags, a, al))
  HOOK_IO(ssize_t, fd, real.sendto(fd, buf, n, flags, a, al), TDL_WRITE)
}
HOOK ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
  DONTWAIT_PASSES(real.recvmsg(fd, m, flags))
  HOOK_IO(ssize_t, fd, real.recvmsg(fd, m, flags), TDL_READ)
}
HOOK ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
  DONTWAIT_PASSES(real.sendmsg(fd, m, flags))
  HOOK_IO(ssize_t, fd, real.sendmsg(fd, m, flags), TDL_WRITE)
}

/* A new fd from accept: a new file, whatever the number held before. */
static int accepted(int fd)
{
  if (fd >= 0)
    hfd_reset(fd);
  return fd;
}
static int accept4_(int fd, SA_ARG a, socklen_t *al, int flags)
{
  HOOK_IO(int, fd, accepted(real.accept4(fd, a, al, flags)), TDL_READ)
}
HOOK int accept4(int fd, SA_ARG a, socklen_t *al, int flags) { return accept4_(fd, a, al, flags); }
HOOK int accept(int fd, SA_ARG a, socklen_t *al) { return accept4_(fd, a, al, 0); }

/* Blocking connect: start it, wait until the socket is writable (under
 * SO_SNDTIMEO, like Linux), report SO_ERROR. */
HOOK int connect(int fd, CSA_ARG a, socklen_t al)
{
  READY();
  bool fiber = tdl_fiber_self() != 0;
  hfd *h = fiber ? hooked(fd) : blocking_under(fd);
  if (!h)
    return real.connect(fd, a, al);
  int r = real.connect(fd, a, al);
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
    if (real.poll(&p, 1, 0) == 1)
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

/* ---- poll ---- */

static unsigned poll_dirs(short events)
{
  return ((events & (POLLIN | POLLPRI | POLLRDHUP)) ? TDL_READ : 0) | ((events & POLLOUT) ? TDL_WRITE : 0);
}

HOOK int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  READY();
  if (timeout == 0 || !tdl_fiber_self())
    return real.poll(fds, n, timeout);
  int r = real.poll(fds, n, 0);
  if (r != 0)
    return r;
  tdl_time_t dl = timeout < 0 ? TDL_FOREVER : tdl_after((tdl_time_t)timeout * TDL_MSEC);
  /* One socket or pipe: park on it. */
  if (n == 1 && fds[0].fd >= 0 && poll_dirs(fds[0].events)) {
    hfd *h = hfd_at(fds[0].fd);
    if (h && h->kind == KIND_UNKNOWN)
      classify(fds[0].fd, h);
    if (h && h->kind == KIND_WAITABLE && (h->user_nb || hooked(fds[0].fd))) {
      for (;;) {
        h->in_fio = 1;
        COUNT(st_parked);
        int e = tdl_wait_fd(fds[0].fd, poll_dirs(fds[0].events), dl);
        if (e == -ETIMEDOUT)
          return 0;
        if (e == -EBUSY)
          break; /* another fiber waits on it: nap below */
        if (e < 0) {
          errno = e == -ECANCELED ? ECANCELED : -e;
          return -1;
        }
        if ((r = real.poll(fds, n, 0)) != 0)
          return r;
      }
    }
  }
  /* Anything else: look again at growing intervals while the fiber sleeps. */
  tdl_time_t step = 50 * TDL_USEC;
  for (;;) {
    tdl_time_t now = tdl_now();
    if (dl != TDL_FOREVER && now >= dl)
      return 0;
    tdl_time_t until = now + step;
    if (dl != TDL_FOREVER && until > dl)
      until = dl;
    COUNT(st_slept);
    int e = tdl_sleep(until);
    if (e < 0) {
      errno = e == -ECANCELED ? ECANCELED : -e;
      return -1;
    }
    if ((r = real.poll(fds, n, 0)) != 0)
      return r;
    if (step < 5 * TDL_MSEC)
      step *= 2;
  }
}

/* ---- close, fcntl, setsockopt, and the calls that make fds ---- */

HOOK int close(int fd)
{
  READY();
  hfd *h = hfd_peek(fd);
  if (h && h->in_fio) {
    /* Wakes a fiber still waiting on it (EBADF) and clears the loop's
     * record, so that the next file with this number starts afresh. */
    memset(h, 0, sizeof *h);
    int e = tdl_close(fd);
    if (e < 0) {
      errno = -e;
      return -1;
    }
    return 0;
  }
  if (h)
    memset(h, 0, sizeof *h);
  return real.close(fd);
}

/* The new number newfd shares old's file (and so its O_NONBLOCK). */
static int duped(int old, int newfd)
{
  if (newfd < 0)
    return newfd;
  hfd *o = hfd_peek(old), *h = o ? hfd_at(newfd) : hfd_peek(newfd);
  if (h) {
    if (o && o != h) {
      *h = *o;
      h->in_fio = 0;
    } else if (!o) {
      memset(h, 0, sizeof *h);
    }
  }
  return newfd;
}

/* dup2/dup3 close newfd first: drop treadle's state for it as close does. */
static void before_dup_onto(int old, int newfd)
{
  hfd *h = hfd_peek(newfd);
  if (old != newfd && h && h->in_fio) {
    h->in_fio = 0;
    (void)tdl_close(newfd); /* the number is free until dup2 takes it again */
  }
}

static int fcntl_(int (*fn)(int, int, ...), int fd, int cmd, void *arg)
{
  READY();
  switch (cmd) {
  case F_GETFL: {
    int fl = fn(fd, cmd);
    hfd *h = hfd_peek(fd);
    if (fl >= 0 && h && h->our_nb && !h->user_nb)
      fl &= ~O_NONBLOCK;
    return fl;
  }
  case F_SETFL: {
    int fl = (int)(intptr_t)arg;
    hfd *h = tdl_fiber_self() ? hfd_at(fd) : hfd_peek(fd);
    if (!h)
      return fn(fd, cmd, fl);
    if (h->kind == KIND_UNKNOWN)
      classify(fd, h);
    bool user_nb = (fl & O_NONBLOCK) != 0;
    bool ours = !user_nb && h->kind == KIND_WAITABLE && (h->our_nb || tdl_fiber_self());
    int r = fn(fd, cmd, ours ? (fl | O_NONBLOCK) : fl);
    if (r == 0 && h->kind != KIND_UNKNOWN) {
      h->user_nb = user_nb;
      if (ours && !h->our_nb)
        COUNT(st_nonblocking);
      h->our_nb = ours;
    }
    return r;
  }
  case F_DUPFD:
  case F_DUPFD_CLOEXEC:
    return duped(fd, fn(fd, cmd, (int)(intptr_t)arg));
  default:
    return fn(fd, cmd, arg);
  }
}

HOOK int fcntl(int fd, int cmd, ...)
{
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  READY();
  return fcntl_(real.fcntl, fd, cmd, arg);
}

#ifdef __GLIBC__
/* glibc 2.28 and later: what fcntl() compiles to with 64-bit offsets on
 * 32-bit targets, and an exported name everywhere.  musl has one fcntl. */
HOOK int fcntl64(int fd, int cmd, ...)
{
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  READY();
  return fcntl_(real.fcntl64, fd, cmd, arg);
}
#endif

static tdl_time_t tv_ns(const struct timeval *tv)
{
  if (tv->tv_sec < 0 || (tv->tv_sec == 0 && tv->tv_usec <= 0))
    return 0;
  return (tdl_time_t)tv->tv_sec * TDL_SEC + (tdl_time_t)tv->tv_usec * TDL_USEC;
}

HOOK int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
  READY();
  int r = real.setsockopt(fd, level, name, val, len);
  if (r == 0 && level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO) &&
      len >= (socklen_t)sizeof(struct timeval)) {
    hfd *h = hfd_at(fd);
    if (h)
      *(name == SO_RCVTIMEO ? &h->rcvtimeo : &h->sndtimeo) = tv_ns(val);
  }
  return r;
}

HOOK int socket(int domain, int type, int proto)
{
  READY();
  return accepted(real.socket(domain, type, proto));
}

HOOK int socketpair(int domain, int type, int proto, int sv[2])
{
  READY();
  int r = real.socketpair(domain, type, proto, sv);
  if (r == 0) {
    hfd_reset(sv[0]);
    hfd_reset(sv[1]);
  }
  return r;
}

HOOK int pipe(int p[2])
{
  READY();
  int r = real.pipe(p);
  if (r == 0) {
    hfd_reset(p[0]);
    hfd_reset(p[1]);
  }
  return r;
}

HOOK int pipe2(int p[2], int flags)
{
  READY();
  int r = real.pipe2(p, flags);
  if (r == 0) {
    hfd_reset(p[0]);
    hfd_reset(p[1]);
  }
  return r;
}

HOOK int dup(int fd)
{
  READY();
  return duped(fd, real.dup(fd));
}

HOOK int dup2(int fd, int newfd)
{
  READY();
  before_dup_onto(fd, newfd);
  return duped(fd, real.dup2(fd, newfd));
}

HOOK int dup3(int fd, int newfd, int flags)
{
  READY();
  before_dup_onto(fd, newfd);
  return duped(fd, real.dup3(fd, newfd, flags));
}

/* ---- sleeping ---- */

/* Park until `until`; the nanoseconds left when a cancel cut it short. */
static tdl_time_t nap(tdl_time_t until)
{
  COUNT(st_slept);
  if (tdl_sleep(until) == 0)
    return 0;
  tdl_time_t left = until - tdl_now();
  return left > 0 ? left : 1;
}

HOOK int nanosleep(const struct timespec *req, struct timespec *rem)
{
  READY();
  if (!tdl_fiber_self())
    return real.nanosleep(req, rem);
  if (!req || req->tv_nsec < 0 || req->tv_nsec >= 1000000000L || req->tv_sec < 0) {
    errno = EINVAL;
    return -1;
  }
  tdl_time_t d = req->tv_sec > INT64_MAX / TDL_SEC - 1 ? TDL_TIME_MAX : req->tv_sec * TDL_SEC + req->tv_nsec;
  tdl_time_t left = nap(tdl_after(d));
  if (!left)
    return 0;
  if (rem) {
    rem->tv_sec = (time_t)(left / TDL_SEC);
    rem->tv_nsec = (long)(left % TDL_SEC);
  }
  errno = EINTR;
  return -1;
}

HOOK int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req, struct timespec *rem)
{
  READY();
  if (!tdl_fiber_self() || (clock != CLOCK_MONOTONIC && clock != CLOCK_REALTIME))
    return real.clock_nanosleep(clock, flags, req, rem);
  if (!req || req->tv_nsec < 0 || req->tv_nsec >= 1000000000L || req->tv_sec < 0)
    return EINVAL;
  tdl_time_t t = req->tv_sec > INT64_MAX / TDL_SEC - 1 ? TDL_TIME_MAX : req->tv_sec * TDL_SEC + req->tv_nsec;
  tdl_time_t until;
  if (!(flags & TIMER_ABSTIME)) {
    until = tdl_after(t);
  } else if (clock == CLOCK_MONOTONIC) {
    until = t; /* treadle's clock */
  } else {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    until = tdl_after(t - ((tdl_time_t)now.tv_sec * TDL_SEC + now.tv_nsec));
  }
  tdl_time_t left = nap(until);
  if (!left)
    return 0;
  if (rem && !(flags & TIMER_ABSTIME)) {
    rem->tv_sec = (time_t)(left / TDL_SEC);
    rem->tv_nsec = (long)(left % TDL_SEC);
  }
  return EINTR;
}

HOOK int usleep(useconds_t us)
{
  READY();
  if (!tdl_fiber_self())
    return real.usleep(us);
  if (nap(tdl_after((tdl_time_t)us * TDL_USEC))) {
    errno = EINTR;
    return -1;
  }
  return 0;
}

HOOK unsigned sleep(unsigned s)
{
  READY();
  if (!tdl_fiber_self())
    return real.sleep(s);
  tdl_time_t left = nap(tdl_after((tdl_time_t)s * TDL_SEC));
  return (unsigned)((left + TDL_SEC - 1) / TDL_SEC);
}
