/* SPDX-License-Identifier: MIT */
/*
 * The buffered reader: a growable buffer (netbuf.c) filled by fiber reads.
 *
 * b.busy is set while a read into the buffer is parked.  Another fiber may
 * then look at the buffer or consume from it, but nothing may move the block
 * the parked read will write into: fills fail with -EBUSY and consume only
 * advances (netbuf.c).
 */
#include <string.h>

#include "fiber/fiber_internal.h"
#include "net/net_internal.h"

int tdl_reader_init(tdl_reader *r, int fd, void *mem, size_t size, size_t max)
{
  if (!r)
    return -EINVAL;
  r->eof = false;
  return tdl__netbuf_init(&r->b, fd, mem, size, max);
}

int tdl_reader_destroy(tdl_reader *r) { return tdl__netbuf_destroy(&r->b); }

void tdl_reader_consume(tdl_reader *r, size_t n) { tdl__netbuf_drop(&r->b, n); }

/* Whether a read may start: 1, 0 at EOF, or -EBUSY, -EBADF. */
static int may_read(const tdl_reader *r)
{
  int e = tdl__netbuf_usable(&r->b);
  return e < 0 ? e : !r->eof;
}

/* One read() (or the fd's transport's read) into dst, marking the reader busy while it is parked. */
static ssize_t read_into(tdl_reader *r, void *dst, size_t len, tdl_time_t deadline)
{
  void *ctx;
  const tdl_net_transport *t = tdl__net_transport(r->b.fd, &ctx);
  r->b.busy = true;
  ssize_t n = t ? t->read(ctx, dst, len, deadline) : tdl_read(r->b.fd, dst, len, deadline);
  r->b.busy = false;
  if (n == 0)
    r->eof = true;
  return n;
}

/* One read into at least `want` bytes of room; the caller has checked
 * tdl__may_block.  Returns what tdl_reader_fill returns. */
static ssize_t fill(tdl_reader *r, size_t want, tdl_time_t deadline)
{
  int e = may_read(r);
  if (e <= 0)
    return e;
  tdl__netbuf *b = &r->b;
  if ((e = tdl__netbuf_room(b, want)) < 0)
    return e;
  ssize_t n = read_into(r, b->p + b->end, b->cap - b->end, deadline);
  if (n > 0)
    b->end += (size_t)n;
  return n;
}

ssize_t tdl_reader_fill(tdl_reader *r, tdl_time_t deadline)
{
  int e = tdl__may_block(NULL);
  return e < 0 ? e : fill(r, 1, deadline);
}

/* What need and until return when the stream has ended before the message
 * was whole: 0 when nothing is buffered (the peer closed between two
 * messages, an ordinary end), -EPIPE when part of one is (it was cut). */
static ssize_t at_end(const tdl_reader *r) { return tdl_reader_len(r) ? -EPIPE : 0; }

ssize_t tdl_reader_need(tdl_reader *r, size_t n, tdl_time_t deadline)
{
  int e = tdl__may_block(NULL);
  if (e < 0)
    return e;
  if (r->b.fd < 0)
    return -EBADF;
  if (n > r->b.max)
    return -EMSGSIZE; /* it could never be buffered: read nothing for it */
  for (;;) {
    size_t len = tdl__netbuf_len(&r->b);
    if (len >= n)
      return (ssize_t)len;
    ssize_t k = fill(r, n - len, deadline); /* room for all of it: one growth */
    if (k <= 0)
      return k < 0 ? k : at_end(r);
  }
}

ssize_t tdl_reader_until(tdl_reader *r, const void *delim, size_t delim_len, tdl_time_t deadline)
{
  if (!delim || delim_len == 0)
    return -EINVAL;
  int e = tdl__may_block(NULL);
  if (e < 0)
    return e;
  /* A match cannot start before scanned - (delim_len - 1); offsets from the
   * data's start survive the moves of a fill. */
  size_t scanned = 0;
  for (;;) {
    const unsigned char *data = (const unsigned char *)tdl_reader_data(r);
    size_t len = tdl_reader_len(r);
    size_t from = scanned >= delim_len - 1 ? scanned - (delim_len - 1) : 0;
    const unsigned char *hit = len > from ? memmem(data + from, len - from, delim, delim_len) : NULL;
    if (hit)
      return (ssize_t)((size_t)(hit - data) + delim_len);
    scanned = len;
    ssize_t n = fill(r, 1, deadline);
    if (n <= 0)
      return n < 0 ? n : at_end(r);
  }
}

ssize_t tdl_reader_read(tdl_reader *r, void *dst, size_t len, tdl_time_t deadline)
{
  int e = tdl__may_block(NULL);
  if (e < 0)
    return e;
  if (len == 0)
    return 0;
  if (!dst)
    return -EINVAL;
  if (tdl_reader_len(r) == 0) {
    if ((e = may_read(r)) <= 0)
      return e;
    if (len >= r->b.cap) /* big read: straight into dst, no copy */
      return read_into(r, dst, len, deadline);
    ssize_t n = fill(r, 1, deadline);
    if (n <= 0)
      return n;
  }
  size_t have = tdl_reader_len(r);
  size_t k = len < have ? len : have;
  memcpy(dst, tdl_reader_data(r), k);
  tdl_reader_consume(r, k);
  return (ssize_t)k;
}

static ssize_t reader_step(void *r, void *buf, size_t len, tdl_time_t deadline)
{
  return tdl_reader_read(r, buf, len, deadline);
}

int tdl_reader_read_exactly(tdl_reader *r, void *dst, size_t n, size_t *got, tdl_time_t deadline)
{
  return tdl__net_exactly(reader_step, r, dst, n, got, deadline);
}
