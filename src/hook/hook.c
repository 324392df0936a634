/*
 * libtreadle-hook: libc's blocking calls, parking the fiber instead of the
 * thread (include/treadle/hook.h says what the user sees).
 *
 * Each interposed function asks first whether it runs in a fiber; outside
 * one it is libc's function (resolved once with dlsym(RTLD_NEXT)), except
 * on an fd this library made non-blocking underneath, where EAGAIN turns
 * into a poll(2) and a retry, as the blocking fd would have done.
 *
 * poll, select and friends park on every watchable fd at once through
 * tdl_select's FD clauses; host-name calls run libc's function on the
 * pool's name lane.
 *
 * Per fd (a table by fd number, in chunks made on first use and never
 * freed, so a look-up takes no lock): what kind of file it is (a socket or
 * pipe can be waited for; a character or anonymous file can be polled while
 * non-blocking; anything else passes through), the user's
 * O_NONBLOCK, whether we set O_NONBLOCK underneath, whether treadle's
 * fiber I/O knows it (then close goes through tdl_close), and the
 * SO_RCVTIMEO/SO_SNDTIMEO the user set.  The table is the user's view of
 * the fd; treadle's own view is fiber I/O's, and treadle's own calls never
 * come here (src/base/sys.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/select.h>
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
#define IOCTL_REQ unsigned long
#else
#define SA_ARG struct sockaddr *
#define CSA_ARG const struct sockaddr *
#define IOCTL_REQ int
#endif

#include "base/base.h"
#include "treadle/hook.h"

#define HOOK __attribute__((visibility("default")))

#ifndef NETDB_INTERNAL
#define NETDB_INTERNAL (-1) /* glibc's; musl has no name for it */
#endif

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
  int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
  int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
  int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
  int (*ioctl)(int, IOCTL_REQ, ...);
  int (*getaddrinfo)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
  int (*getnameinfo)(const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t, int);
  int (*gethostbyname2_r)(const char *, int, struct hostent *, char *, size_t, struct hostent **, int *);
  int (*gethostbyname_r)(const char *, struct hostent *, char *, size_t, struct hostent **, int *);
  struct hostent *(*gethostbyname)(const char *);
  struct hostent *(*gethostbyname2)(const char *, int);
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
  RESOLVE(ppoll);
  RESOLVE(select);
  RESOLVE(pselect);
  RESOLVE(ioctl);
  RESOLVE(getaddrinfo);
  RESOLVE(getnameinfo);
  RESOLVE(gethostbyname2_r);
  RESOLVE(gethostbyname_r);
  RESOLVE(gethostbyname);
  RESOLVE(gethostbyname2);
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

/* ---- fork ----
 * The child of a fork has the thread that forked, inside the fiber or
 * callback that forked if it was in one, on a loop that is the parent's
 * (treadle.h: that fiber makes no blocking call, and no loop inherited may
 * be touched: they share the parent's epoll instance).  So there the hook
 * is out of the way: calls of that fiber are libc's (the EAGAIN of an fd
 * made non-blocking underneath still turns into a poll(2)), and close() of
 * an fd fiber I/O knew is close(2), not tdl_close (whose EPOLL_CTL_DEL
 * would take the parent's registration away).  Fibers of loops the child
 * makes afterwards are hooked as usual. */
static bool forked;           /* this process is a child of a fork */
static tdl_loop *forked_loop; /* the loop the fork came from, or NULL */

static void at_fork_child(void)
{
  forked = true; /* one thread now: no other can look */
  forked_loop = tdl_fiber_self() ? tdl_fiber_loop() : NULL;
}

/* Whether the caller is a fiber the hook may park. */
static inline bool in_fiber(void)
{
  return tdl_fiber_self() != 0 && (TDL__LIKELY(!forked) || tdl_fiber_loop() != forked_loop);
}

static __attribute__((constructor)) void hook_init(void)
{
  resolve();
  (void)pthread_atfork(NULL, NULL, at_fork_child);
}

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

int tdl_hook_active(void)
{
  READY();
  return real.read && real.close && real.fcntl ? 1 : -ENOSYS;
}

void tdl_hook_stats_get(tdl_hook_stats *out)
{
  if (!out)
    return;
  out->parked = atomic_load_explicit(&st_parked, memory_order_relaxed);
  out->slept = atomic_load_explicit(&st_slept, memory_order_relaxed);
  out->fds_made_nonblocking = atomic_load_explicit(&st_nonblocking, memory_order_relaxed);
}

/* ---- per-fd state ---- */

/* KIND_POLLABLE: a character device or an anonymous file (terminal,
 * eventfd, timerfd, ...): the loop can watch it, but the hook does not wait
 * for its reads and writes, and poll parks on it only while the user keeps
 * it non-blocking (O_NONBLOCK set under a terminal would show in every
 * process sharing it).  KIND_OTHER: regular files, directories, block
 * devices (always ready). */
enum { KIND_UNKNOWN, KIND_OTHER, KIND_POLLABLE, KIND_WAITABLE };

typedef struct hfd {
  uint8_t kind;      /* KIND_*: a socket or pipe is KIND_WAITABLE */
  uint8_t user_nb;   /* the user's O_NONBLOCK */
  uint8_t our_nb;    /* we set O_NONBLOCK underneath (hidden from F_GETFL) */
  uint8_t in_fio;    /* treadle's fiber I/O has state for it: close with tdl_close */
  uint8_t stream;    /* a pipe or stream socket: a short read empties it */
  uint8_t empty;     /* in a fiber, the last read was short: the next parks first */
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
  if (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)) {
    h->kind = KIND_WAITABLE;
    int type = 0;
    socklen_t tl = sizeof type;
    h->stream = S_ISFIFO(st.st_mode) ||
                (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM);
  }
  else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode))
    h->kind = KIND_OTHER;
  else
    h->kind = KIND_POLLABLE;
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

/* Outside a fiber: fd's state when it is a socket or pipe the user wants
 * blocking, which we may have made non-blocking underneath, through this
 * number or another sharing its file (a dup): then EAGAIN must become a
 * wait (wait_ready tells that from a blocking fd's own timeout); else NULL. */
static inline hfd *blocking_under(int fd)
{
  hfd *h = hfd_peek(fd);
  return h && h->kind == KIND_WAITABLE && !h->user_nb ? h : NULL;
}

/* The user wants fd blocking, yet the file is non-blocking: that is ours,
 * set through this number or another that shares the file. */
static bool nonblocking_underneath(int fd, const hfd *h)
{
  if (h->our_nb)
    return true;
  int fl = real.fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

#define DL_UNSET ((tdl_time_t)-2)

/* In a fiber, a call on fd has just found it empty (EAGAIN, or a short
 * read) or full: the readiness the loop saw is used up (tdl_fd_blocked). */
static inline void used_up(int fd, hfd *h, unsigned dir)
{
  h->in_fio = 1; /* fiber I/O has state for fd from here: close with tdl_close */
  (void)tdl_fd_blocked(fd, dir);
}

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
    errno = e == -ETIMEDOUT ? EAGAIN : -e;
    return -1;
  }
  if (!nonblocking_underneath(fd, h)) {
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
  int n = real.poll(&p, 1, ms);
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
  READY();                                                                    \
  bool fiber_ = in_fiber();                                                   \
  hfd *h_ = fiber_ ? hooked(fd) : blocking_under(fd);                         \
  if (!h_)                                                                    \
    return call;                                                              \
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

HOOK ssize_t read(int fd, void *buf, size_t n) { HOOK_READ(fd, real.read(fd, buf, n), true, n) }
/* A blocking write or send returns when all of it went (or a timeout, an
 * error or a signal cut it short: then with the count so far, as Linux
 * does); the non-blocking one underneath stops at a full buffer, so carry
 * on.  `call` sends from buf + done_. */
#define HOOK_OUT(fd, n, call)                                                 \
  READY();                                                                    \
  bool fiber_ = in_fiber();                                                   \
  hfd *h_ = fiber_ ? hooked(fd) : blocking_under(fd);                         \
  size_t done_ = 0;                                                           \
  if (!h_)                                                                    \
    return call;                                                              \
  tdl_time_t dl_ = DL_UNSET;                                                  \
  for (;;) {                                                                  \
    ssize_t r_ = call;                                                        \
    if (r_ >= 0) {                                                            \
      done_ += (size_t)r_;                                                    \
      /* A file really blocking stopped short (a signal): say so. */       \
      if (done_ >= (n) || r_ == 0 || (!fiber_ && !nonblocking_underneath(fd, h_))) \
        return (ssize_t)done_;                                                \
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {                     \
      return done_ ? (ssize_t)done_ : -1;                                     \
    }                                                                         \
    if (fiber_) /* short, or EAGAIN: the buffer is full */                    \
      used_up((fd), h_, TDL_WRITE);                                           \
    if (wait_ready((fd), h_, TDL_WRITE, &dl_, fiber_) < 0)                    \
      return done_ ? (ssize_t)done_ : -1;                                     \
  }

HOOK ssize_t write(int fd, const void *buf, size_t n)
{
  HOOK_OUT(fd, n, real.write(fd, (const char *)buf + done_, n - done_))
}
/* What a readv that succeeded asked for in all (the kernel has read iov);
 * 0 when it overflows, so that no short read is taken as emptying. */
static size_t iov_len(const struct iovec *iov, int n)
{
  size_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (iov[i].iov_len > SIZE_MAX - sum)
      return 0;
    sum += iov[i].iov_len;
  }
  return sum;
}
HOOK ssize_t readv(int fd, const struct iovec *iov, int n)
{
  HOOK_READ(fd, real.readv(fd, iov, n), true, iov_len(iov, n))
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
  READY();
  bool fiber = in_fiber();
  hfd *h = fiber ? hooked(fd) : blocking_under(fd);
  return h && h->stream && (fiber || nonblocking_underneath(fd, h));
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

HOOK ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  DONTWAIT_PASSES(real.recv(fd, buf, n, flags))
  if (TDL__UNLIKELY(waitall_ours(fd, flags, n)))
    return recv_rest(fd, buf, n, 0, flags);
  HOOK_READ(fd, real.recv(fd, buf, n, flags), !(flags & (MSG_PEEK | MSG_OOB)), n)
}
HOOK ssize_t send(int fd, const void *buf, size_t n, int flags)
{
  DONTWAIT_PASSES(real.send(fd, buf, n, flags))
  HOOK_OUT(fd, n, real.send(fd, (const char *)buf + done_, n - done_, flags))
}
HOOK ssize_t recvfrom(int fd, void *buf, size_t n, int flags, SA_ARG a, socklen_t *al)
{
  DONTWAIT_PASSES(real.recvfrom(fd, buf, n, flags, a, al))
  if (TDL__UNLIKELY(waitall_ours(fd, flags, n))) {
    ssize_t r = recvfrom(fd, buf, n, flags & ~MSG_WAITALL, a, al); /* the sender's address */
    return r <= 0 ? r : recv_rest(fd, buf, n, (size_t)r, flags);
  }
  HOOK_IO(ssize_t, fd, real.recvfrom(fd, buf, n, flags, a, al), TDL_READ)
}
HOOK ssize_t sendto(int fd, const void *buf, size_t n, int flags, CSA_ARG a, socklen_t al)
{
  DONTWAIT_PASSES(real.sendto(fd, buf, n, flags, a, al))
  HOOK_OUT(fd, n, real.sendto(fd, (const char *)buf + done_, n - done_, flags, a, al))
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
  bool fiber = in_fiber();
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

/* ---- poll, ppoll, select, pselect ---- */

enum { POLL_RD = POLLIN | POLLRDNORM | POLLRDHUP, POLL_WR = POLLOUT | POLLWRNORM };

/* What a fiber can park on for p: TDL_READ and/or TDL_WRITE, with the fd
 * hung on fiber I/O (so close() goes through tdl_close).  *look is set when
 * p must rather be looked at again from time to time: an fd the loop cannot
 * watch without changing it, or events its watcher does not report
 * (POLLPRI, POLLRDBAND, POLLWRBAND, or none: only POLLHUP and POLLERR). */
static unsigned park_dirs(const struct pollfd *p, bool *look)
{
  if (p->fd < 0)
    return 0;
  if (!(p->events & (POLL_RD | POLL_WR)) || (p->events & ~(POLL_RD | POLL_WR)))
    *look = true;
  unsigned dirs = ((p->events & POLL_RD) ? TDL_READ : 0) | ((p->events & POLL_WR) ? TDL_WRITE : 0);
  if (!dirs)
    return 0;
  hfd *h = hfd_at(p->fd);
  if (h && h->kind == KIND_UNKNOWN)
    classify(p->fd, h);
  if (!h || !((h->kind == KIND_WAITABLE && (h->user_nb || hooked(p->fd))) ||
              (h->kind == KIND_POLLABLE && h->user_nb))) {
    *look = true;
    return 0;
  }
  h->in_fio = 1;
  return dirs;
}

/* In a fiber, poll(fds, n) until something is ready or dl passes: a first
 * look, then one park on every fd the loop can watch at once (a select of
 * FD clauses: the first ready one wakes the fiber) and a look at the rest at
 * growing intervals (50 us to 5 ms), each wake followed by a poll(2) with no
 * timeout, whose answer is the caller's.  -1 with errno (ECANCELED), or
 * poll's answer. */
static int poll_in_fiber(struct pollfd *fds, nfds_t n, tdl_time_t dl)
{
  int r = real.poll(fds, n, 0);
  if (r != 0 || (dl != TDL_FOREVER && tdl_now() >= dl))
    return r;
  enum { LOCAL = 16 };
  tdl_select_op local[LOCAL], *ops = n <= LOCAL ? local : malloc(n * sizeof *ops);
  tdl_time_t step = 50 * TDL_USEC;
  bool nap = false; /* the last park could not start: only look */
  for (;;) {
    bool look = nap || !ops;
    size_t k = 0;
    for (nfds_t i = 0; ops && i < n; i++) {
      unsigned d = park_dirs(&fds[i], &look);
      if (!d)
        continue;
      size_t j = 0; /* one clause per fd (a select refuses two) */
      while (j < k && ops[j].fd != fds[i].fd)
        j++;
      if (j == k)
        ops[k++] = (tdl_select_op){.kind = TDL_SELECT_FD, .fd = fds[i].fd, .events = d};
      else
        ops[j].events |= d;
    }
    tdl_time_t until = dl;
    if (look) {
      tdl_time_t t = tdl_after(step);
      if (until == TDL_FOREVER || t < until)
        until = t;
      if (step < 5 * TDL_MSEC)
        step *= 2;
    }
    int e;
    if (k && !nap) {
      COUNT(st_parked);
      e = tdl_select(ops, k, until);
    } else {
      COUNT(st_slept);
      e = tdl_sleep(until);
    }
    /* -EBUSY (another fiber waits on one of them), -ENOMEM, an fd the loop
     * refused: look at intervals this once.  -EBADF (one was closed): the
     * poll below says POLLNVAL. */
    nap = e < 0 && e != -ETIMEDOUT && e != -EBADF && e != -ECANCELED;
    if (e == -ECANCELED) {
      errno = ECANCELED;
      r = -1;
      break;
    }
    if ((r = real.poll(fds, n, 0)) != 0)
      break;
    if (dl != TDL_FOREVER && tdl_now() >= dl)
      break;
  }
  if (ops != local)
    free(ops);
  return r;
}

static tdl_time_t ts_ns(const struct timespec *ts)
{
  return ts->tv_sec > INT64_MAX / TDL_SEC - 1 ? TDL_TIME_MAX : (tdl_time_t)ts->tv_sec * TDL_SEC + ts->tv_nsec;
}

HOOK int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  READY();
  if (timeout == 0 || !in_fiber())
    return real.poll(fds, n, timeout);
  return poll_in_fiber(fds, n, timeout < 0 ? TDL_FOREVER : tdl_after((tdl_time_t)timeout * TDL_MSEC));
}

/* A signal mask asks for the thread's mask to change for the wait: that is
 * the thread's, shared by every fiber on it, so such calls go to libc. */
HOOK int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
  READY();
  if (mask || (ts && ts->tv_sec == 0 && ts->tv_nsec == 0) || !in_fiber())
    return real.ppoll(fds, n, ts, mask);
  if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L)) {
    errno = EINVAL;
    return -1;
  }
  return poll_in_fiber(fds, n, ts ? tdl_after(ts_ns(ts)) : TDL_FOREVER);
}

/* fd_set as the kernel reads it: nfds bits in unsigned longs (so sets
 * larger than FD_SETSIZE work, as with libc; FD_ISSET would abort under
 * _FORTIFY_SOURCE). */
#define LBITS (8 * sizeof(unsigned long))
static bool bit_get(const fd_set *s, int fd)
{
  return s && (((const unsigned long *)(const void *)s)[fd / LBITS] >> (fd % LBITS)) & 1;
}
static void bit_set(fd_set *s, int fd) { ((unsigned long *)(void *)s)[fd / LBITS] |= 1UL << (fd % LBITS); }
static void bits_clear(fd_set *s, int nfds)
{
  if (s)
    memset(s, 0, ((size_t)nfds + LBITS - 1) / LBITS * sizeof(unsigned long));
}

/* The kernel reads no further than its fd table (FDSize in
 * /proc/self/status), and neither may we: bits past it are not the
 * caller's to have set.  Only asked for nfds > FD_SETSIZE. */
static int fd_table_size(int nfds)
{
  char buf[4096];
  int fd = (int)open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t len = real.read(fd, buf, sizeof buf - 1);
    real.close(fd);
    if (len > 0) {
      buf[len] = '\0';
      const char *p = strstr(buf, "\nFDSize:");
      if (p) {
        long v = strtol(p + 8, NULL, 10);
        if (v > 0)
          return v < nfds ? (int)v : nfds;
      }
    }
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)nfds)
    return (int)rl.rlim_cur;
  return nfds;
}

/* select and pselect in a fiber, through poll_in_fiber: the sets become
 * pollfds (read: POLLIN, write: POLLOUT, except: POLLPRI) and the answer
 * goes back as the kernel gives it (read counts POLLIN, POLLHUP and
 * POLLERR; write POLLOUT and POLLERR; except POLLPRI; POLLNVAL: EBADF and
 * the sets untouched). */
static int select_in_fiber(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, tdl_time_t dl)
{
  if (nfds > FD_SETSIZE)
    nfds = fd_table_size(nfds);
  nfds_t n = 0;
  for (int fd = 0; fd < nfds; fd++)
    n += bit_get(rd, fd) || bit_get(wr, fd) || bit_get(ex, fd);
  enum { LOCAL = 64 };
  struct pollfd local[LOCAL], *p = n <= LOCAL ? local : malloc(n * sizeof *p);
  if (!p) {
    errno = ENOMEM;
    return -1;
  }
  n = 0;
  for (int fd = 0; fd < nfds; fd++) {
    short ev = (short)((bit_get(rd, fd) ? POLLIN : 0) | (bit_get(wr, fd) ? POLLOUT : 0) | (bit_get(ex, fd) ? POLLPRI : 0));
    if (ev)
      p[n++] = (struct pollfd){.fd = fd, .events = ev};
  }
  int r;
  for (;;) {
    r = dl == 0 ? real.poll(p, n, 0) : poll_in_fiber(p, n, dl);
    if (r <= 0)
      break;
    int count = 0;
    for (nfds_t i = 0; i < n && r >= 0; i++) {
      short re = p[i].revents;
      if (re & POLLNVAL) {
        errno = EBADF;
        r = -1;
      }
      count += ((p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) +
               ((p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR))) + ((p[i].events & POLLPRI) && (re & POLLPRI));
    }
    if (r < 0 || count > 0) {
      r = r < 0 ? r : count;
      break;
    }
    /* Only what select does not count (POLLHUP on an fd watched for
     * writing): that fd can tell the caller nothing more. */
    for (nfds_t i = 0; i < n; i++)
      if (p[i].revents)
        p[i].fd = -1;
  }
  if (r >= 0) {
    bits_clear(rd, nfds);
    bits_clear(wr, nfds);
    bits_clear(ex, nfds);
    for (nfds_t i = 0; r > 0 && i < n; i++) {
      short re = p[i].revents, ev = p[i].events;
      if (p[i].fd < 0)
        continue;
      if ((ev & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR)))
        bit_set(rd, p[i].fd);
      if ((ev & POLLOUT) && (re & (POLLOUT | POLLERR)))
        bit_set(wr, p[i].fd);
      if ((ev & POLLPRI) && (re & POLLPRI))
        bit_set(ex, p[i].fd);
    }
  }
  if (p != local)
    free(p);
  return r;
}

HOOK int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
  READY();
  if (!in_fiber() || nfds < 0 || (tv && (tv->tv_sec < 0 || tv->tv_usec < 0)))
    return real.select(nfds, rd, wr, ex, tv); /* and EINVAL for the last two */
  tdl_time_t dl = TDL_FOREVER;
  if (tv) {
    tdl_time_t d = tv->tv_sec > INT64_MAX / TDL_SEC - 1 ? TDL_TIME_MAX
                                                         : (tdl_time_t)tv->tv_sec * TDL_SEC + (tdl_time_t)tv->tv_usec * TDL_USEC;
    dl = d == 0 ? 0 : tdl_after(d);
  }
  int r = select_in_fiber(nfds, rd, wr, ex, dl);
  if (tv && dl != 0) { /* Linux leaves the time not slept in *tv */
    tdl_time_t left = dl - tdl_now();
    if (left < 0 || r == 0)
      left = 0;
    tv->tv_sec = (time_t)(left / TDL_SEC);
    tv->tv_usec = (suseconds_t)(left % TDL_SEC / TDL_USEC);
  }
  return r;
}

HOOK int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts, const sigset_t *mask)
{
  READY();
  if (mask || !in_fiber() || nfds < 0 ||
      (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L)))
    return real.pselect(nfds, rd, wr, ex, ts, mask);
  tdl_time_t dl = TDL_FOREVER;
  if (ts)
    dl = ts->tv_sec == 0 && ts->tv_nsec == 0 ? 0 : tdl_after(ts_ns(ts));
  return select_in_fiber(nfds, rd, wr, ex, dl);
}

/* ---- close, fcntl, setsockopt, and the calls that make fds ---- */

HOOK int close(int fd)
{
  READY();
  hfd *h = hfd_peek(fd);
  if (h && h->in_fio && (!forked || in_fiber())) {
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
  /* Know old's kind and the user's O_NONBLOCK now, while they are still
   * the file's: a later hooked call through either number sets O_NONBLOCK
   * on the one file under both. */
  hfd *o = hfd_at(old);
  if (o && o->kind == KIND_UNKNOWN)
    classify(old, o);
  hfd *h = o ? hfd_at(newfd) : hfd_peek(newfd);
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
  if (old != newfd && h && h->in_fio && (!forked || in_fiber())) {
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
    if (fl >= 0 && h && h->kind == KIND_WAITABLE && !h->user_nb)
      fl &= ~O_NONBLOCK; /* ours (or another number's of this file) */
    return fl;
  }
  case F_SETFL: {
    int fl = (int)(intptr_t)arg;
    hfd *h = in_fiber() ? hfd_at(fd) : hfd_peek(fd);
    if (!h)
      return fn(fd, cmd, fl);
    if (h->kind == KIND_UNKNOWN)
      classify(fd, h);
    bool user_nb = (fl & O_NONBLOCK) != 0;
    bool ours = !user_nb && h->kind == KIND_WAITABLE &&
                (in_fiber() || (!h->user_nb && nonblocking_underneath(fd, h)));
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

/* ioctl(FIONBIO) is F_SETFL's O_NONBLOCK by another name: record the
 * user's choice, keep ours underneath.  Every other request passes. */
HOOK int ioctl(int fd, IOCTL_REQ req, ...)
{
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  READY();
  if (req != (IOCTL_REQ)FIONBIO || !arg)
    return real.ioctl(fd, req, arg);
  hfd *h = in_fiber() ? hfd_at(fd) : hfd_peek(fd);
  if (!h)
    return real.ioctl(fd, req, arg);
  if (h->kind == KIND_UNKNOWN)
    classify(fd, h);
  bool user_nb = *(const int *)arg != 0;
  bool ours = !user_nb && h->kind == KIND_WAITABLE &&
              (in_fiber() || (!h->user_nb && nonblocking_underneath(fd, h)));
  int on = user_nb || ours;
  int r = real.ioctl(fd, req, &on);
  if (r == 0 && h->kind != KIND_UNKNOWN) {
    h->user_nb = user_nb;
    if (ours && !h->our_nb)
      COUNT(st_nonblocking);
    h->our_nb = ours;
  }
  return r;
}

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
  if (!in_fiber())
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
  if (!in_fiber() || (clock != CLOCK_MONOTONIC && clock != CLOCK_REALTIME))
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
  if (!in_fiber())
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
  if (!in_fiber())
    return real.sleep(s);
  tdl_time_t left = nap(tdl_after((tdl_time_t)s * TDL_SEC));
  return (unsigned)((left + TDL_SEC - 1) / TDL_SEC);
}

/* ---- host names ---- */

/* A lookup goes to the pool's name lane (tdl_pool_call) and parks only
 * the fiber.  The pool thread calls libc's function (real.*, never the hook
 * again) on a record of its own on the heap, never the caller's buffers: a
 * cancelled fiber leaves while the lookup runs on, and the pool frees the
 * record afterwards through `drop`.  The fiber copies the answer out once it
 * has it back.  A pool that cannot take the call fails the lookup as a
 * system error (EAI_SYSTEM, NETDB_INTERNAL) with errno ECANCELED, ENOMEM,
 * EAGAIN (no thread could start). */

static char *dup_or_null(const char *s, bool *bad)
{
  char *d = s ? strdup(s) : NULL;
  if (s && !d)
    *bad = true;
  return d;
}

typedef struct gai_call {
  char *node, *service;
  struct addrinfo hints, *hintp, *res;
  int ret, err;
} gai_call;

static void *gai_run(void *arg)
{
  gai_call *c = arg;
  c->ret = real.getaddrinfo(c->node, c->service, c->hintp, &c->res);
  c->err = errno;
  return NULL;
}

static void gai_drop(void *arg)
{
  gai_call *c = arg;
  if (c->ret == 0 && c->res)
    freeaddrinfo(c->res);
  free(c->node);
  free(c->service);
  free(c);
}

static bool all_digits(const char *s)
{
  if (!*s)
    return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9')
      return false;
  return true;
}

/* No name to look up: an address literal (or none) and a port number (or
 * none).  libc answers these without a name server or a file. */
static bool gai_is_literal(const char *node, const char *service, const struct addrinfo *hints)
{
  int flags = hints ? hints->ai_flags : 0;
  unsigned char a[16];
  bool host = !node || (flags & AI_NUMERICHOST) || inet_pton(AF_INET, node, a) == 1 || inet_pton(AF_INET6, node, a) == 1;
  return host && (!service || (flags & AI_NUMERICSERV) || all_digits(service));
}

HOOK int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
  READY();
  if (!in_fiber() || !res || gai_is_literal(node, service, hints))
    return real.getaddrinfo(node, service, hints, res);
  bool bad = false;
  gai_call *c = calloc(1, sizeof *c);
  if (!c)
    return EAI_MEMORY;
  c->node = dup_or_null(node, &bad);
  c->service = dup_or_null(service, &bad);
  if (hints) {
    /* The fields a caller may set; the rest must be zero (POSIX). */
    c->hints.ai_flags = hints->ai_flags;
    c->hints.ai_family = hints->ai_family;
    c->hints.ai_socktype = hints->ai_socktype;
    c->hints.ai_protocol = hints->ai_protocol;
    c->hintp = &c->hints;
  }
  if (bad) {
    gai_drop(c);
    return EAI_MEMORY;
  }
  int e = tdl_pool_call(TDL_LANE_NAME, gai_run, c, gai_drop, NULL, TDL_FOREVER);
  if (e < 0) { /* c is the pool's now */
    if (e == -ENOMEM)
      return EAI_MEMORY;
    errno = -e;
    return EAI_SYSTEM;
  }
  int ret = c->ret;
  if (ret == 0)
    *res = c->res;
  else if (ret == EAI_SYSTEM)
    errno = c->err;
  c->res = NULL;
  gai_drop(c);
  return ret;
}

typedef struct gni_call {
  struct sockaddr_storage sa;
  socklen_t salen, hostlen, servlen;
  int flags, ret, err;
  char *host, *serv; /* in buf, or NULL */
  char buf[];
} gni_call;

static void *gni_run(void *arg)
{
  gni_call *c = arg;
  c->ret = real.getnameinfo((struct sockaddr *)&c->sa, c->salen, c->host, c->hostlen, c->serv, c->servlen, c->flags);
  c->err = errno;
  return NULL;
}

HOOK int getnameinfo(const struct sockaddr *sa, socklen_t salen, char *host, socklen_t hostlen, char *serv,
                     socklen_t servlen, int flags)
{
  READY();
  bool host_numeric = !host || !hostlen || (flags & NI_NUMERICHOST);
  bool serv_numeric = !serv || !servlen || (flags & NI_NUMERICSERV);
  if (!in_fiber() || !sa || salen > sizeof(struct sockaddr_storage) || (host_numeric && serv_numeric))
    return real.getnameinfo(sa, salen, host, hostlen, serv, servlen, flags);
  size_t hl = host ? hostlen : 0, sl = serv ? servlen : 0;
  gni_call *c = calloc(1, sizeof *c + hl + sl);
  if (!c)
    return EAI_MEMORY;
  memcpy(&c->sa, sa, salen);
  c->salen = salen;
  c->flags = flags;
  c->host = host ? c->buf : NULL;
  c->hostlen = (socklen_t)hl;
  c->serv = serv ? c->buf + hl : NULL;
  c->servlen = (socklen_t)sl;
  int e = tdl_pool_call(TDL_LANE_NAME, gni_run, c, free, NULL, TDL_FOREVER);
  if (e < 0) {
    if (e == -ENOMEM)
      return EAI_MEMORY;
    errno = -e;
    return EAI_SYSTEM;
  }
  int ret = c->ret;
  if (ret == 0) {
    if (host)
      memcpy(host, c->host, hl);
    if (serv)
      memcpy(serv, c->serv, sl);
  } else if (ret == EAI_SYSTEM) {
    errno = c->err;
  }
  free(c);
  return ret;
}

/* gethostbyname2_r on the pool, into a buffer of its own. */
typedef struct ghb_call {
  char *name;
  int af, ret, herr;
  struct hostent he, *result;
  size_t buflen;
  char buf[];
} ghb_call;

static void *ghb_run(void *arg)
{
  ghb_call *c = arg;
  c->ret = real.gethostbyname2_r(c->name, c->af, &c->he, c->buf, c->buflen, &c->result, &c->herr);
  return NULL;
}

static void ghb_free(void *arg)
{
  ghb_call *c = arg;
  if (c) {
    free(c->name);
    free(c);
  }
}

/* Look name up on the pool with a buffer of buflen.  0 with *out (its
 * answer in (*out)->ret, ->result, ->herr), or -errno from the pool. */
static int ghb_call_pool(const char *name, int af, size_t buflen, ghb_call **out)
{
  ghb_call *c = calloc(1, sizeof *c + buflen);
  if (!c)
    return -ENOMEM;
  c->af = af;
  c->buflen = buflen;
  if (!(c->name = strdup(name))) {
    free(c);
    return -ENOMEM;
  }
  int e = tdl_pool_call(TDL_LANE_NAME, ghb_run, c, ghb_free, NULL, TDL_FOREVER);
  if (e == 0)
    *out = c;
  return e;
}

/* p moved from [from, from + len) to the same place in `to`. */
static void *moved(void *p, const char *from, size_t len, char *to)
{
  const char *q = p;
  return q >= from && q < from + len ? to + (q - from) : p;
}

static void moved_list(char **list, const char *from, size_t len, char *to)
{
  for (; list && *list; list++)
    *list = moved(*list, from, len, to);
}

/* The hostent in c, copied into he and buf (whose pointers it then uses). */
static void ghb_copy_out(const ghb_call *c, struct hostent *he, char *buf)
{
  memcpy(buf, c->buf, c->buflen);
  *he = c->he;
  he->h_name = moved(he->h_name, c->buf, c->buflen, buf);
  he->h_aliases = moved(he->h_aliases, c->buf, c->buflen, buf);
  he->h_addr_list = moved(he->h_addr_list, c->buf, c->buflen, buf);
  if ((const char *)he->h_aliases >= buf && (const char *)he->h_aliases < buf + c->buflen)
    moved_list(he->h_aliases, c->buf, c->buflen, buf);
  if ((const char *)he->h_addr_list >= buf && (const char *)he->h_addr_list < buf + c->buflen)
    moved_list(he->h_addr_list, c->buf, c->buflen, buf);
}

static int ghb_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen, struct hostent **result,
                 int *h_errnop)
{
  ghb_call *c = NULL;
  int e = name && ret && buf && result && h_errnop ? ghb_call_pool(name, af, buflen, &c) : -EINVAL;
  if (e < 0) {
    if (result)
      *result = NULL;
    if (h_errnop)
      *h_errnop = NETDB_INTERNAL;
    return -e;
  }
  int r = c->ret;
  *h_errnop = c->herr;
  *result = NULL;
  if (r == 0 && c->result) {
    ghb_copy_out(c, ret, buf);
    *result = ret;
  }
  ghb_free(c);
  return r;
}

HOOK int gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t buflen,
                          struct hostent **result, int *h_errnop)
{
  READY();
  if (!in_fiber())
    return real.gethostbyname2_r(name, af, ret, buf, buflen, result, h_errnop);
  return ghb_r(name, af, ret, buf, buflen, result, h_errnop);
}

HOOK int gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t buflen, struct hostent **result,
                         int *h_errnop)
{
  READY();
  if (!in_fiber())
    return real.gethostbyname_r(name, ret, buf, buflen, result, h_errnop);
  return ghb_r(name, AF_INET, ret, buf, buflen, result, h_errnop);
}

/* gethostbyname's answer lives in libc's one static buffer, valid until the
 * next call.  Fibers of one thread interleave at every lookup (each parks),
 * so one buffer would be overwritten between a fiber's call and its use of
 * the answer by another fiber's: each fiber has its own (fiber-local
 * storage, freed when the fiber ends), valid until that fiber's next
 * gethostbyname or gethostbyname2.  No key left: libc's, blocking. */
static tdl_fls_key_t ghb_key;
static int ghb_key_ok;
static pthread_once_t ghb_once = PTHREAD_ONCE_INIT;
static void ghb_key_make(void) { ghb_key_ok = tdl_fls_key_new(&ghb_key, ghb_free) == 0; }

static struct hostent *ghb_static(const char *name, int af)
{
  ghb_call *c = NULL;
  int e = -EINVAL;
  if (name) {
    /* Grow the buffer until the answer fits (ERANGE), as libc does. */
    for (size_t len = 1024; len <= 1 << 20; len *= 2) {
      if ((e = ghb_call_pool(name, af, len, &c)) < 0 || c->ret != ERANGE)
        break;
      ghb_free(c);
      c = NULL;
    }
  }
  if (e < 0 || !c) {
    h_errno = NETDB_INTERNAL;
    errno = e < 0 ? -e : ERANGE;
    return NULL;
  }
  h_errno = c->herr;
  if (c->ret != 0 || !c->result) {
    if (c->ret != 0)
      errno = c->ret;
    ghb_free(c);
    return NULL;
  }
  ghb_free(tdl_fls_get(ghb_key)); /* the fiber's last answer */
  (void)tdl_fls_set(ghb_key, c);  /* in a fiber, with a key: cannot fail */
  return &c->he;
}

HOOK struct hostent *gethostbyname2(const char *name, int af)
{
  READY();
  if (!in_fiber() || pthread_once(&ghb_once, ghb_key_make) != 0 || !ghb_key_ok)
    return real.gethostbyname2(name, af);
  return ghb_static(name, af);
}

HOOK struct hostent *gethostbyname(const char *name)
{
  READY();
  if (!in_fiber() || pthread_once(&ghb_once, ghb_key_make) != 0 || !ghb_key_ok)
    return real.gethostbyname(name);
  return ghb_static(name, AF_INET);
}
