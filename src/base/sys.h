/* SPDX-License-Identifier: MIT */
/*
 * Raw entry points: the system calls treadle makes for itself, past any
 * interposed libc function of the same name.
 *
 * libtreadle-hook (src/hook/) interposes read, write, connect, poll, close,
 * fcntl, ... so that blocking libraries park their fiber instead of the
 * thread.  treadle's own calls must not take that path: fiber I/O would park
 * twice, the loop's eventfd read would be "made blocking", and treadle's own
 * F_SETFL O_NONBLOCK would be taken for the user's choice.  So every call of
 * one of those names in src/ goes through these, which enter the kernel with
 * syscall(2): the same cost as the libc wrapper (one call, errno set on
 * failure, -1 returned), without the PLT slot an interposer takes.
 *
 * Under ThreadSanitizer they stay libc calls: TSan models fds through its
 * interceptors of close, read and write, and the hook is not used there.
 */
#ifndef TDL_BASE_SYS_H
#define TDL_BASE_SYS_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#if defined(TDL_TSAN)

static inline ssize_t tdl__sys_read(int fd, void *b, size_t n) { return read(fd, b, n); }
static inline ssize_t tdl__sys_write(int fd, const void *b, size_t n) { return write(fd, b, n); }
static inline ssize_t tdl__sys_readv(int fd, const struct iovec *v, int n) { return readv(fd, v, n); }
static inline ssize_t tdl__sys_writev(int fd, const struct iovec *v, int n) { return writev(fd, v, n); }
static inline ssize_t tdl__sys_recvfrom(int fd, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *al)
{
  return recvfrom(fd, b, n, fl, a, al);
}
static inline ssize_t tdl__sys_sendto(int fd, const void *b, size_t n, int fl, const struct sockaddr *a, socklen_t al)
{
  return sendto(fd, b, n, fl, a, al);
}
static inline ssize_t tdl__sys_sendmsg(int fd, const struct msghdr *m, int fl) { return sendmsg(fd, m, fl); }
static inline int tdl__sys_accept4(int fd, struct sockaddr *a, socklen_t *al, int fl) { return accept4(fd, a, al, fl); }
static inline int tdl__sys_connect(int fd, const struct sockaddr *a, socklen_t al) { return connect(fd, a, al); }
static inline int tdl__sys_close(int fd) { return close(fd); }
static inline int tdl__sys_fcntl(int fd, int cmd, long arg) { return fcntl(fd, cmd, arg); }
static inline int tdl__sys_ppoll(struct pollfd *p, nfds_t n, const struct timespec *ts)
{
  return ppoll(p, n, ts, NULL);
}
static inline int tdl__sys_clock_nanosleep(clockid_t c, int fl, const struct timespec *t)
{
  return clock_nanosleep(c, fl, t, NULL);
}

#else

static inline ssize_t tdl__sys_read(int fd, void *b, size_t n) { return syscall(SYS_read, fd, b, n); }
static inline ssize_t tdl__sys_write(int fd, const void *b, size_t n) { return syscall(SYS_write, fd, b, n); }
static inline ssize_t tdl__sys_readv(int fd, const struct iovec *v, int n) { return syscall(SYS_readv, fd, v, n); }
static inline ssize_t tdl__sys_writev(int fd, const struct iovec *v, int n) { return syscall(SYS_writev, fd, v, n); }
/* recv and send are recvfrom and sendto without an address (there is no
 * SYS_recv on x86_64 or aarch64; libc does the same). */
static inline ssize_t tdl__sys_recvfrom(int fd, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *al)
{
  return syscall(SYS_recvfrom, fd, b, n, fl, a, al);
}
static inline ssize_t tdl__sys_sendto(int fd, const void *b, size_t n, int fl, const struct sockaddr *a, socklen_t al)
{
  return syscall(SYS_sendto, fd, b, n, fl, a, al);
}
static inline ssize_t tdl__sys_sendmsg(int fd, const struct msghdr *m, int fl) { return syscall(SYS_sendmsg, fd, m, fl); }
static inline int tdl__sys_accept4(int fd, struct sockaddr *a, socklen_t *al, int fl)
{
  return (int)syscall(SYS_accept4, fd, a, al, fl);
}
static inline int tdl__sys_connect(int fd, const struct sockaddr *a, socklen_t al)
{
  return (int)syscall(SYS_connect, fd, a, al);
}
static inline int tdl__sys_close(int fd) { return (int)syscall(SYS_close, fd); }
/* Only the int-argument commands (F_GETFL, F_SETFL, F_GETFD, F_SETFD). */
static inline int tdl__sys_fcntl(int fd, int cmd, long arg) { return (int)syscall(SYS_fcntl, fd, cmd, arg); }
/* No signal mask (aarch64 has no SYS_poll: ppoll is the one everywhere). */
static inline int tdl__sys_ppoll(struct pollfd *p, nfds_t n, const struct timespec *ts)
{
  struct timespec t, *tp = NULL; /* the kernel writes the time left back */
  if (ts) {
    t = *ts;
    tp = &t;
  }
  return (int)syscall(SYS_ppoll, p, n, tp, NULL, (size_t)(_NSIG / 8));
}
/* As clock_nanosleep(3): 0 or an error number, errno untouched. */
static inline int tdl__sys_clock_nanosleep(clockid_t c, int fl, const struct timespec *t)
{
  int saved = errno;
  int r = syscall(SYS_clock_nanosleep, c, fl, t, NULL) < 0 ? errno : 0;
  errno = saved;
  return r;
}

#endif

#endif /* TDL_BASE_SYS_H */
