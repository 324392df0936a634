/* SPDX-License-Identifier: MIT */
/*
 * poll, ppoll, select and pselect in a fiber: one look with poll(2), then
 * one park on every fd the loop can watch at once (a tdl_select of FD
 * clauses, the first ready one waking the fiber), the rest looked at again
 * at growing intervals; after each wake poll(2) with no timeout gives the
 * answer, so that it is the kernel's.  One exception, poll_drained: one fd
 * polled for reading after a read of the caller's found it empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>

#include "hook/hook_internal.h"

enum { POLL_RD = POLLIN | POLLRDNORM | POLLRDHUP, POLL_WR = POLLOUT | POLLWRNORM };

/* What a fiber can park on for p: TDL_READ and/or TDL_WRITE, with the fd
 * hung on fiber I/O (so close() goes through tdl_close).  *look is set when
 * p must rather be looked at again from time to time: an fd the loop cannot
 * watch without changing it, or events its watcher does not report
 * (POLLPRI, POLLRDBAND, POLLWRBAND, or none: only POLLHUP and POLLERR).
 * POLLERR, POLLHUP and POLLNVAL in events mean nothing (poll(2) reports
 * them unasked, and so does the watcher, to either direction): libpq asks
 * for POLLIN|POLLERR, which must park once, not nap every few ms. */
static unsigned park_dirs(const struct pollfd *p, bool *look)
{
  if (p->fd < 0)
    return 0;
  short asked = (short)(p->events & ~(POLLERR | POLLHUP | POLLNVAL));
  if (!(asked & (POLL_RD | POLL_WR)) || (asked & ~(POLL_RD | POLL_WR)))
    *look = true;
  unsigned dirs = ((p->events & POLL_RD) ? TDL_READ : 0) | ((p->events & POLL_WR) ? TDL_WRITE : 0);
  if (!dirs)
    return 0;
  tdl__hfd *h = tdl__hfd_at(p->fd);
  if (h && h->kind == TDL__HFD_UNKNOWN)
    tdl__hfd_classify(p->fd, h);
  if (!h || !((h->kind == TDL__HFD_WAITABLE && (h->user_nb || tdl__hfd_hooked(p->fd))) ||
              (h->kind == TDL__HFD_POLLABLE && h->user_nb))) {
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
 * timeout, whose answer is the caller's.  -1 with errno (ECANCELED: at
 * once on a cancelled fiber, without a look), or poll's answer. */
/* A cancel cut this poll: so it did the exchanges its fds were in. */
static void cut_all(const struct pollfd *fds, nfds_t n)
{
  for (nfds_t i = 0; i < n; i++) {
    tdl__hfd *h = fds[i].fd >= 0 ? tdl__hfd_peek(fds[i].fd) : NULL;
    if (h && h->kind == TDL__HFD_WAITABLE)
      tdl__hfd_cut(fds[i].fd, h);
  }
}

/* Whether an fd of the set was cut by a cancel (tdl__hfd.cut). */
static bool any_cut(const struct pollfd *fds, nfds_t n)
{
  for (nfds_t i = 0; i < n; i++) {
    const tdl__hfd *h = fds[i].fd >= 0 ? tdl__hfd_peek(fds[i].fd) : NULL;
    if (h && h->cut)
      return true;
  }
  return false;
}

/* poll(2)'s answer r, with POLLERR for the fds cut by a cancel: their
 * calls fail, and the library hears of it at once instead of waiting. */
static int with_cut(struct pollfd *fds, nfds_t n, int r)
{
  for (nfds_t i = 0; r >= 0 && i < n; i++) {
    const tdl__hfd *h = fds[i].fd >= 0 ? tdl__hfd_peek(fds[i].fd) : NULL;
    if (h && h->cut) {
      r += fds[i].revents == 0;
      fds[i].revents |= POLLERR;
    }
  }
  return r;
}

/* One fd polled for reading only (POLLIN, POLLRDNORM; POLLERR, POLLHUP
 * and POLLNVAL are always reported) that a read of the caller's has just
 * found empty (tdl__hfd.drained): park at once, without the look, and
 * answer from the loop's report, without a look after it either (but on
 * uring, below).  Sound
 * because the read told fiber I/O (tdl_fd_blocked), so any readiness the
 * loop reports is of data that came after it; libpq's wait for a reply is
 * then the one system call libev's would be (the poll shared by every fd
 * the loop watches).  1 with revents set; 0 when the general path must
 * answer (a deadline, an error or hang-up, whose revents are the kernel's
 * to say; another fiber reading the fd); -1 with errno ECANCELED. */
static int poll_drained(struct pollfd *p, tdl_time_t dl)
{
  tdl__hfd *h = p->fd >= 0 ? tdl__hfd_peek(p->fd) : NULL;
  if (!h || !h->drained || h->cut)
    return 0;
  h->drained = 0;
  short asked = (short)(p->events & ~(POLLERR | POLLHUP | POLLNVAL));
  if (!asked || (asked & ~(POLLIN | POLLRDNORM)))
    return 0;
  TDL__HOOK_COUNT(parked);
  int e = tdl_fd_wait(p->fd, TDL_READ, dl);
  if (e == -ECANCELED) {
    cut_all(p, 1);
    errno = ECANCELED;
    return -1;
  }
  if (e != TDL_READ)
    return 0;
  /* A uring loop's report is a completion the kernel posted when data came
   * and the loop took later: a read of the caller's in between may have
   * taken that data, so ask the kernel (0: the general path parks again).
   * epoll and poll look at the fd when they report. */
  if (tdl_loop_backend(tdl_fiber_loop())[0] == 'u')
    return tdl__hook_real.poll(p, 1, 0);
  p->revents = asked;
  return 1;
}

static int poll_in_fiber(struct pollfd *fds, nfds_t n, tdl_time_t dl)
{
  /* First the one fd a read found empty: its wait refuses a cancelled
   * fiber as the check below would (cut, ECANCELED), and it is not cut. */
  if (n == 1) {
    int d = poll_drained(fds, dl);
    if (d != 0)
      return d;
  }
  if (tdl__hook_refused()) {
    cut_all(fds, n);
    return -1; /* a look with no timeout is not a wait: it does not come here */
  }
  if (any_cut(fds, n))
    return with_cut(fds, n, tdl__hook_real.poll(fds, n, 0));
  /* The parks below may take the loop's readiness of any of these fds: a
   * read's earlier finding that one was empty says nothing after them. */
  for (nfds_t i = 0; i < n; i++) {
    tdl__hfd *h = fds[i].fd >= 0 ? tdl__hfd_peek(fds[i].fd) : NULL;
    if (h)
      h->drained = 0;
  }
  int r = tdl__hook_real.poll(fds, n, 0);
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
      TDL__HOOK_COUNT(parked);
      e = tdl_select(ops, k, until);
    } else {
      TDL__HOOK_COUNT(slept);
      e = tdl_sleep(until);
    }
    /* -EBUSY (another fiber waits on one of them), -ENOMEM, an fd the loop
     * refused: look at intervals this once.  -EBADF (one was closed): the
     * poll below says POLLNVAL. */
    nap = e < 0 && e != -ETIMEDOUT && e != -EBADF && e != -ECANCELED;
    if (e == -ECANCELED) {
      cut_all(fds, n);
      errno = ECANCELED;
      r = -1;
      break;
    }
    if ((r = tdl__hook_real.poll(fds, n, 0)) != 0)
      break;
    if (dl != TDL_FOREVER && tdl_now() >= dl)
      break;
  }
  if (ops != local)
    free(ops);
  /* A read after a poll that said readable must make its call: the loop's
   * readiness that let the poll go may have been used up by it (a select
   * clause takes what the loop cached), and no new arrival would end a
   * read that parked first. */
  for (nfds_t i = 0; r > 0 && i < n; i++) {
    tdl__hfd *h = fds[i].revents & (POLLIN | POLLHUP | POLLERR) ? tdl__hfd_peek(fds[i].fd) : NULL;
    if (h)
      h->empty = 0;
  }
  return r;
}

TDL__HOOK int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber())
    return tdl__hook_real.poll(fds, n, timeout);
  if (timeout == 0)
    return with_cut(fds, n, tdl__hook_real.poll(fds, n, 0));
  return poll_in_fiber(fds, n, timeout < 0 ? TDL_FOREVER : tdl__hook_after((tdl_time_t)timeout * TDL_MSEC));
}

/* A signal mask asks for the thread's mask to change for the wait: that is
 * the thread's, shared by every fiber on it, so such calls go to libc. */
TDL__HOOK int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
  TDL__HOOK_READY();
  if (mask || (ts && ts->tv_sec == 0 && ts->tv_nsec == 0) || !tdl__hook_in_fiber())
    return tdl__hook_real.ppoll(fds, n, ts, mask);
  if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L)) {
    errno = EINVAL;
    return -1;
  }
  return poll_in_fiber(fds, n, ts ? tdl__hook_after(tdl__hook_ts_ns(ts)) : TDL_FOREVER);
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
    ssize_t len = tdl__hook_real.read(fd, buf, sizeof buf - 1);
    tdl__hook_real.close(fd);
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
    /* GCOVR_EXCL_START: malloc fails only without memory (no fault-injection site here) */
    errno = ENOMEM;
    return -1;
    /* GCOVR_EXCL_STOP */
  }
  n = 0;
  for (int fd = 0; fd < nfds; fd++) {
    short ev = (short)((bit_get(rd, fd) ? POLLIN : 0) | (bit_get(wr, fd) ? POLLOUT : 0) |
                       (bit_get(ex, fd) ? POLLPRI : 0));
    if (ev)
      p[n++] = (struct pollfd){.fd = fd, .events = ev};
  }
  int r;
  for (;;) {
    r = dl == 0 ? tdl__hook_real.poll(p, n, 0) : poll_in_fiber(p, n, dl);
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

TDL__HOOK int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
  TDL__HOOK_READY();
  if (!tdl__hook_in_fiber() || nfds < 0 || (tv && (tv->tv_sec < 0 || tv->tv_usec < 0)))
    return tdl__hook_real.select(nfds, rd, wr, ex, tv); /* and EINVAL for the last two */
  tdl_time_t dl = TDL_FOREVER;
  if (tv) {
    tdl_time_t d = tv->tv_sec > INT64_MAX / TDL_SEC - 1
                       ? TDL_TIME_MAX
                       : (tdl_time_t)tv->tv_sec * TDL_SEC + (tdl_time_t)tv->tv_usec * TDL_USEC;
    dl = d == 0 ? 0 : tdl__hook_after(d);
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

TDL__HOOK int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts, const sigset_t *mask)
{
  TDL__HOOK_READY();
  if (mask || !tdl__hook_in_fiber() || nfds < 0 ||
      (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L)))
    return tdl__hook_real.pselect(nfds, rd, wr, ex, ts, mask);
  tdl_time_t dl = TDL_FOREVER;
  if (ts)
    dl = ts->tv_sec == 0 && ts->tv_nsec == 0 ? 0 : tdl__hook_after(tdl__hook_ts_ns(ts));
  return select_in_fiber(nfds, rd, wr, ex, dl);
}
