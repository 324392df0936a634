/*
 * Whole-buffer transfers and the buffered reader, on top of fiber I/O.
 *
 * Each loop keeps the caller's count exact: whatever happens, the bytes that
 * went (or came) are reported through the out parameter.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "base/base.h"

/* Blocking calls' preconditions: in a fiber (-EPERM), not cancelled. */
static int fiber_ok(void)
{
  if (!tdl_fiber_self())
    return -EPERM;
  if (tdl_fiber_cancelled())
    return -ECANCELED;
  return 0;
}

/* ---- sending ---- */

/* One transfer of up to len bytes at buf: > 0 bytes moved, 0 at the end of
 * the stream, or a negative error. */
typedef ssize_t (*step_fn)(void *ctx, void *buf, size_t len, tdl_time_t deadline);

/* The one "exactly n bytes" loop: step until n bytes have moved; *done (may
 * be NULL) always gets the count.  An end of stream before n is -EPIPE. */
static int exactly(step_fn step, void *ctx, void *buf, size_t n, size_t *done, tdl_time_t deadline)
{
  char *p = buf;
  size_t have = 0;
  int e = 0;
  if (done)
    *done = 0;
  if (!buf && n)
    return -EINVAL;
  if (n == 0)
    return fiber_ok();
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
  return exactly(send_step, &fd, (void *)buf, len, sent, deadline);
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
  int e = fiber_ok();
  if (e < 0)
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
    ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
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
  return exactly(read_step, &fd, buf, n, got, deadline);
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
  if ((e = fiber_ok()) < 0)
    return e;
  while (have < cap) {
    /* Look without taking... */
    ssize_t n = tdl_recv(fd, b + have, cap - have, MSG_PEEK, deadline);
    if (n <= 0) {
      e = n < 0 ? n : -EPIPE;
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

/* ---- the buffered reader ---- */

void tdl_reader_init(tdl_reader *r, int fd, void *buf, size_t cap)
{
  r->fd = fd;
  r->eof = 0;
  r->buf = buf;
  r->cap = buf ? cap : 0;
  r->start = r->end = 0;
}

void tdl_reader_consume(tdl_reader *r, size_t n)
{
  if (n >= r->end - r->start)
    r->start = r->end = 0;
  else
    r->start += n;
}

/* One read into the free room; the caller has checked fiber_ok. */
static ssize_t fill(tdl_reader *r, tdl_time_t deadline)
{
  if (r->eof)
    return 0;
  size_t len = r->end - r->start;
  /* Move the buffered bytes to the front when less than half the buffer is
   * left after them (the copy is at most what is buffered). */
  if (r->start > 0 && r->cap - r->end < r->cap / 2) {
    memmove(r->buf, r->buf + r->start, len);
    r->start = 0;
    r->end = len;
  }
  if (r->end == r->cap)
    return -ENOBUFS;
  ssize_t n = tdl_read(r->fd, r->buf + r->end, r->cap - r->end, deadline);
  if (n > 0)
    r->end += (size_t)n;
  else if (n == 0)
    r->eof = 1;
  return n;
}

ssize_t tdl_reader_fill(tdl_reader *r, tdl_time_t deadline)
{
  int e = fiber_ok();
  return e < 0 ? e : fill(r, deadline);
}

ssize_t tdl_reader_until(tdl_reader *r, const void *delim, size_t delim_len, tdl_time_t deadline)
{
  if (!delim || delim_len == 0)
    return -EINVAL;
  int e = fiber_ok();
  if (e < 0)
    return e;
  size_t scanned = 0; /* a match cannot start before scanned - (delim_len - 1) */
  for (;;) {
    const unsigned char *data = r->buf + r->start;
    size_t len = r->end - r->start;
    size_t from = scanned >= delim_len - 1 ? scanned - (delim_len - 1) : 0;
    const unsigned char *hit = len > from ? memmem(data + from, len - from, delim, delim_len) : NULL;
    if (hit)
      return (ssize_t)((size_t)(hit - data) + delim_len);
    scanned = len;
    ssize_t n = fill(r, deadline);
    if (n == -ENOBUFS)
      return -EMSGSIZE;
    if (n < 0)
      return n;
    if (n == 0)
      return -EPIPE;
  }
}

ssize_t tdl_reader_read(tdl_reader *r, void *dst, size_t len, tdl_time_t deadline)
{
  int e = fiber_ok();
  if (e < 0)
    return e;
  if (len == 0)
    return 0;
  if (!dst)
    return -EINVAL;
  if (r->end == r->start) {
    if (r->eof)
      return 0;
    if (len >= r->cap) { /* big read: skip the copy */
      ssize_t n = tdl_read(r->fd, dst, len, deadline);
      if (n == 0)
        r->eof = 1;
      return n;
    }
    ssize_t n = fill(r, deadline);
    if (n <= 0)
      return n;
  }
  size_t have = r->end - r->start;
  size_t k = len < have ? len : have;
  memcpy(dst, r->buf + r->start, k);
  tdl_reader_consume(r, k);
  return (ssize_t)k;
}

static ssize_t reader_step(void *r, void *buf, size_t len, tdl_time_t deadline)
{
  return tdl_reader_read(r, buf, len, deadline);
}

int tdl_reader_read_exactly(tdl_reader *r, void *dst, size_t n, size_t *got, tdl_time_t deadline)
{
  return exactly(reader_step, r, dst, n, got, deadline);
}
