/* SPDX-License-Identifier: MIT */
/*
 * Whole-buffer transfers on top of fiber I/O.
 *
 * Each loop keeps the caller's count exact: whatever happens, the bytes that
 * went (or came) are reported through the out parameter.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "base/sys.h"
#include "fiber/fiber_internal.h"
#include "net/net_internal.h"

/* ---- sending ---- */

/* The one "exactly n bytes" loop (net_internal.h). */
int tdl__net_exactly(tdl__step_fn step, void *ctx, void *buf, size_t n, size_t *done, tdl_time_t deadline)
{
  char *p = buf;
  size_t have = 0;
  int e = 0;
  if (done)
    *done = 0;
  if (!buf && n)
    return -EINVAL;
  if (n == 0)
    return tdl__may_block(NULL);
  while (have < n) {
    ssize_t k = step(ctx, p + have, n - have, deadline);
    if (k <= 0) {
      e = k < 0 ? (int)k : -EPIPE;
      break;
    }
    have += (size_t)k;
  }
  if (done)
    *done = have;
  return e;
}

static ssize_t send_step(void *fd, void *buf, size_t len, tdl_time_t deadline)
{
  /* send() of len > 0 never returns 0 on a stream: exactly's -EPIPE is
   * never reached from here. */
  return tdl_send(*(int *)fd, buf, len, 0, deadline);
}

int tdl_net_send_all(int fd, const void *buf, size_t len, size_t *sent, tdl_time_t deadline)
{
  return tdl__net_exactly(send_step, &fd, (void *)buf, len, sent, deadline);
}

#define WINDOW 64 /* iovecs per sendmsg() */

int tdl_net_send_allv(int fd, const struct iovec *iov, int iovcnt, size_t *sent, tdl_time_t deadline)
{
  if (sent)
    *sent = 0;
  if (iovcnt < 0 || (!iov && iovcnt > 0))
    return -EINVAL;
  size_t total = 0;
  for (int i = 0; i < iovcnt; i++) {
    if (iov[i].iov_len > SIZE_MAX - total || (!iov[i].iov_base && iov[i].iov_len))
      return -EINVAL;
    total += iov[i].iov_len;
  }
  int e = tdl__may_block(NULL);
  if (e < 0)
    return e;
  if ((e = tdl_fd_flush(fd, deadline)) < 0) /* what was sent behind goes first */
    return e;
  size_t done = 0, off = 0; /* off: bytes of iov[i] already sent */
  int i = 0;
  for (;;) {
    while (i < iovcnt && off == iov[i].iov_len) {
      i++;
      off = 0;
    }
    if (i == iovcnt)
      break;
    if (tdl_fiber_cancelled()) {
      e = -ECANCELED;
      break;
    }
    struct iovec win[WINDOW];
    int n = 1;
    win[0].iov_base = (char *)iov[i].iov_base + off;
    win[0].iov_len = iov[i].iov_len - off;
    for (int j = i + 1; j < iovcnt && n < WINDOW; j++)
      if (iov[j].iov_len)
        win[n++] = iov[j];
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = win;
    m.msg_iovlen = (size_t)n;
    ssize_t r = tdl__sys_sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        e = -errno;
        break;
      }
      /* Full: wait through the fiber layer, which tells the loop that the
       * fd's writability is stale and parks.  It sends from the first buffer
       * once there is room; the next round gathers again. */
      r = tdl_send(fd, win[0].iov_base, win[0].iov_len, 0, deadline);
      if (r < 0) {
        e = (int)r;
        break;
      }
    }
    done += (size_t)r;
    size_t adv = (size_t)r;
    while (adv > 0) {
      size_t left = iov[i].iov_len - off;
      if (adv < left) {
        off += adv;
        adv = 0;
      } else {
        adv -= left;
        i++;
        off = 0;
      }
    }
    if (sent)
      *sent = done;
  }
  if (sent)
    *sent = done;
  return e;
}

/* ---- receiving ---- */

static ssize_t read_step(void *fd, void *buf, size_t len, tdl_time_t deadline)
{
  return tdl_read(*(int *)fd, buf, len, deadline);
}

int tdl_net_recv_exactly(int fd, void *buf, size_t n, size_t *got, tdl_time_t deadline)
{
  return tdl__net_exactly(read_step, &fd, buf, n, got, deadline);
}

ssize_t tdl_net_recv_until(int fd, void *buf, size_t cap, const void *delim, size_t delim_len, size_t *got,
                       tdl_time_t deadline)
{
  unsigned char *b = buf;
  size_t have = 0;
  ssize_t e;
  if (got)
    *got = 0;
  if (!delim || delim_len == 0 || (!buf && cap))
    return -EINVAL;
  if ((e = tdl__may_block(NULL)) < 0)
    return e;
  while (have < cap) {
    /* Look without taking... */
    ssize_t n = tdl_recv(fd, b + have, cap - have, MSG_PEEK, deadline);
    if (n <= 0) {
      e = n < 0 ? n : have ? -EPIPE : 0; /* the end: inside a message, or between two */
      goto out;
    }
    size_t from = have >= delim_len - 1 ? have - (delim_len - 1) : 0;
    size_t end = have + (size_t)n;
    const unsigned char *hit = memmem(b + from, end - from, delim, delim_len);
    size_t take = hit ? (size_t)(hit - b) + delim_len - have : (size_t)n;
    /* ...then take exactly what belongs to the message. */
    ssize_t r = tdl_recv(fd, b + have, take, 0, deadline);
    if (r <= 0) {
      e = r < 0 ? r : -EPIPE;
      goto out;
    }
    have += (size_t)r;
    if (hit && (size_t)r == take) {
      e = (ssize_t)have;
      goto out;
    }
  }
  e = -EMSGSIZE;
out:
  if (got)
    *got = have;
  return e;
}
