/* SPDX-License-Identifier: MIT */
/*
 * close, dup, dup2, dup3, fcntl, ioctl, setsockopt, and the calls that make
 * fds: they keep the user's view of each fd (state.c) true to the file.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>

#include "hook/hook_internal.h"

TDL__HOOK int close(int fd)
{
  TDL__HOOK_READY();
  tdl__hfd *h = tdl__hfd_peek(fd);
  bool fiber = tdl__hook_in_fiber();
  if (h && h->in_fio && (!tdl__hook_forked || fiber)) {
    /* Wakes a fiber still waiting on it (EBADF) and clears the loop's
     * record, so that the next file with this number starts afresh.
     * Outside a fiber that reaches this thread's loops only: the number
     * stays marked for the loop of another thread that used it. */
    memset(h, 0, sizeof *h);
    h->stale = !fiber;
    int e = tdl_close(fd);
    if (e < 0) {
      errno = -e;
      return -1;
    }
    return 0;
  }
  if (h) {
    bool stale = h->in_fio || h->stale;
    memset(h, 0, sizeof *h);
    h->stale = stale;
  }
  return tdl__hook_real.close(fd);
}

/* The new number newfd shares old's file (and so its O_NONBLOCK). */
static int duped(int old, int newfd)
{
  if (newfd < 0)
    return newfd;
  /* Know old's kind and the user's O_NONBLOCK now, while they are still
   * the file's: a later hooked call through either number sets O_NONBLOCK
   * on the one file under both. */
  tdl__hfd *o = tdl__hfd_at(old);
  if (o && o->kind == TDL__HFD_UNKNOWN)
    tdl__hfd_classify(old, o);
  tdl__hfd *h = o ? tdl__hfd_at(newfd) : tdl__hfd_peek(newfd);
  if (h) {
    if (o && o != h) {
      o->dupped = 1;
      *h = *o;
      h->in_fio = 0;
    } else if (!o) {
      memset(h, 0, sizeof *h); // GCOVR_EXCL_LINE: old >= 2^20 (past fs.nr_open's default) or no memory for its chunk
    }
  }
  return newfd;
}

/* dup2/dup3 close newfd first: drop treadle's state for it as close does. */
static void before_dup_onto(int old, int newfd)
{
  tdl__hfd *h = tdl__hfd_peek(newfd);
  if (old != newfd && h && h->in_fio && (!tdl__hook_forked || tdl__hook_in_fiber())) {
    h->in_fio = 0;
    (void)tdl_close(newfd); /* the number is free until dup2 takes it again */
  } else if (old != newfd && h && h->in_fio) {
    h->stale = 1; /* a child after fork: its loops are the parent's copies */
  }
}

/* The user makes fd blocking or not (F_SETFL, ioctl's FIONBIO): fd's state,
 * its kind known (in a fiber made if need be; NULL: the call passes). */
static tdl__hfd *nb_setting(int fd)
{
  tdl__hfd *h = tdl__hook_in_fiber() ? tdl__hfd_at(fd) : tdl__hfd_peek(fd);
  if (h && h->kind == TDL__HFD_UNKNOWN)
    tdl__hfd_classify(fd, h);
  return h;
}

/* Whether the file is to be non-blocking underneath while the user asks for
 * it blocking: a socket or pipe, in a fiber (where the hook waits for it),
 * or outside one when it already was, for the user's earlier blocking. */
static bool nb_ours(int fd, const tdl__hfd *h, bool user_nb)
{
  return !user_nb && h->kind == TDL__HFD_WAITABLE &&
         (tdl__hook_in_fiber() || (!h->user_nb && tdl__hfd_nonblocking_underneath(fd, h)));
}

/* The call that set it returned r: on success, remember the user's choice
 * and ours.  Returns r. */
static int nb_set(tdl__hfd *h, bool user_nb, bool ours, int r)
{
  if (r == 0 && h->kind != TDL__HFD_UNKNOWN) {
    h->user_nb = user_nb;
    if (ours && !h->our_nb)
      TDL__HOOK_COUNT(nonblocking);
    h->our_nb = ours;
  }
  return r;
}

static int fcntl_(int (*fn)(int, int, ...), int fd, int cmd, void *arg)
{
  TDL__HOOK_READY();
  switch (cmd) {
  case F_GETFL: {
    int fl = fn(fd, cmd);
    tdl__hfd *h = tdl__hfd_peek(fd);
    if (fl >= 0 && h && h->kind == TDL__HFD_WAITABLE && !h->user_nb)
      fl &= ~O_NONBLOCK; /* ours (or another number's of this file) */
    return fl;
  }
  case F_SETFL: {
    int fl = (int)(intptr_t)arg;
    tdl__hfd *h = nb_setting(fd);
    if (!h)
      return fn(fd, cmd, fl);
    bool user_nb = (fl & O_NONBLOCK) != 0, ours = nb_ours(fd, h, user_nb);
    return nb_set(h, user_nb, ours, fn(fd, cmd, ours ? (fl | O_NONBLOCK) : fl));
  }
  case F_DUPFD:
  case F_DUPFD_CLOEXEC:
    return duped(fd, fn(fd, cmd, (int)(intptr_t)arg));
  default:
    return fn(fd, cmd, arg);
  }
}

/* Defines fcntl, or fcntl64, over libc's function of that name. */
#define FCNTL(name)                                   \
  TDL__HOOK int name(int fd, int cmd, ...)            \
  {                                                   \
    va_list ap;                                       \
    va_start(ap, cmd);                                \
    void *arg = va_arg(ap, void *);                   \
    va_end(ap);                                       \
    TDL__HOOK_READY();                                \
    return fcntl_(tdl__hook_real.name, fd, cmd, arg); \
  }

FCNTL(fcntl)
#ifdef __GLIBC__
/* glibc 2.28 and later: what fcntl() compiles to with 64-bit offsets on
 * 32-bit targets, and an exported name everywhere.  musl has one fcntl. */
FCNTL(fcntl64)
#endif

/* ioctl(FIONBIO) is F_SETFL's O_NONBLOCK by another name: record the
 * user's choice, keep ours underneath.  Every other request passes. */
TDL__HOOK int ioctl(int fd, TDL__IOCTL_REQ req, ...)
{
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  TDL__HOOK_READY();
  if (req != (TDL__IOCTL_REQ)FIONBIO || !arg)
    return tdl__hook_real.ioctl(fd, req, arg);
  tdl__hfd *h = nb_setting(fd);
  if (!h)
    return tdl__hook_real.ioctl(fd, req, arg);
  bool user_nb = *(const int *)arg != 0, ours = nb_ours(fd, h, user_nb);
  int on = user_nb || ours;
  return nb_set(h, user_nb, ours, tdl__hook_real.ioctl(fd, req, &on));
}

static tdl_time_t tv_ns(const struct timeval *tv)
{
  if (tv->tv_sec < 0 || (tv->tv_sec == 0 && tv->tv_usec <= 0))
    return 0;
  return (tdl_time_t)tv->tv_sec * TDL_SEC + (tdl_time_t)tv->tv_usec * TDL_USEC;
}

TDL__HOOK int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
  TDL__HOOK_READY();
  int r = tdl__hook_real.setsockopt(fd, level, name, val, len);
  if (r == 0 && level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO) &&
      len >= (socklen_t)sizeof(struct timeval)) {
    tdl__hfd *h = tdl__hfd_at(fd);
    if (h)
      *(name == SO_RCVTIMEO ? &h->rcvtimeo : &h->sndtimeo) = tv_ns(val);
  }
  return r;
}

TDL__HOOK int socket(int domain, int type, int proto)
{
  TDL__HOOK_READY();
  return tdl__hfd_made(tdl__hook_real.socket(domain, type, proto));
}

/* A call that makes two fds returned r: on success, both numbers are new
 * files'.  Returns r. */
static int made_two(int r, const int fds[2])
{
  if (r == 0) {
    (void)tdl__hfd_made(fds[0]);
    (void)tdl__hfd_made(fds[1]);
  }
  return r;
}

TDL__HOOK int socketpair(int domain, int type, int proto, int sv[2])
{
  TDL__HOOK_READY();
  return made_two(tdl__hook_real.socketpair(domain, type, proto, sv), sv);
}

TDL__HOOK int pipe(int p[2])
{
  TDL__HOOK_READY();
  return made_two(tdl__hook_real.pipe(p), p);
}

TDL__HOOK int pipe2(int p[2], int flags)
{
  TDL__HOOK_READY();
  return made_two(tdl__hook_real.pipe2(p, flags), p);
}

TDL__HOOK int dup(int fd)
{
  TDL__HOOK_READY();
  return duped(fd, tdl__hook_real.dup(fd));
}

TDL__HOOK int dup2(int fd, int newfd)
{
  TDL__HOOK_READY();
  before_dup_onto(fd, newfd);
  return duped(fd, tdl__hook_real.dup2(fd, newfd));
}

TDL__HOOK int dup3(int fd, int newfd, int flags)
{
  TDL__HOOK_READY();
  before_dup_onto(fd, newfd);
  return duped(fd, tdl__hook_real.dup3(fd, newfd, flags));
}
