/* SPDX-License-Identifier: MIT */
/*
 * The buffered writer: appends go to a growable buffer (netbuf.c) without
 * any system call; a flush hands the unsent bytes to the kernel.  They are
 * contiguous, so a flush the kernel takes whole is one send(); a partial one
 * continues from where it stopped, and what did not go stays buffered.
 *
 * b.busy is set while a flush is parked: the parked send() will retry from
 * the pointer it was given, so appends, which could move the block, fail
 * with -EBUSY until it returns.
 */
#include <string.h>

#include "fiber/fiber_internal.h"
#include "net/net_internal.h"

int tdl_writer_init(tdl_writer *w, int fd, void *mem, size_t size, size_t max)
{
  if (!w)
    return -EINVAL;
  w->not_socket = false;
  return tdl__netbuf_init(&w->b, fd, mem, size, max);
}

int tdl_writer_destroy(tdl_writer *w) { return tdl__netbuf_destroy(&w->b); }

int tdl_writer_reserve(tdl_writer *w, size_t n, void **room)
{
  if (!room)
    return -EINVAL;
  *room = NULL;
  int e = tdl__netbuf_usable(&w->b);
  if (e == 0)
    e = tdl__netbuf_room(&w->b, n);
  if (e < 0)
    return e == -EMSGSIZE ? -ENOBUFS : e;
  *room = w->b.p + w->b.end;
  return 0;
}

int tdl_writer_commit(tdl_writer *w, size_t n)
{
  if (n > w->b.cap - w->b.end)
    return -EINVAL;
  w->b.end += n;
  return 0;
}

int tdl_writer_put(tdl_writer *w, const void *p, size_t n)
{
  void *room;
  if (!p && n)
    return -EINVAL;
  int e = tdl_writer_reserve(w, n, &room);
  if (e == 0 && n) {
    memcpy(room, p, n);
    w->b.end += n;
  }
  return e;
}

int tdl_writer_puts(tdl_writer *w, const char *s) { return s ? tdl_writer_put(w, s, strlen(s)) : -EINVAL; }

/* The decimal digits of v, ending at end; returns where they start. */
static char *digits(char *end, uint64_t v)
{
  do {
    *--end = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return end;
}

int tdl_writer_put_u64(tdl_writer *w, uint64_t v)
{
  char buf[20];
  char *s = digits(buf + sizeof buf, v);
  return tdl_writer_put(w, s, (size_t)(buf + sizeof buf - s));
}

int tdl_writer_put_i64(tdl_writer *w, int64_t v)
{
  char buf[21];
  /* The magnitude in unsigned arithmetic: -INT64_MIN does not fit int64_t. */
  uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  char *s = digits(buf + sizeof buf, mag);
  if (v < 0)
    *--s = '-';
  return tdl_writer_put(w, s, (size_t)(buf + sizeof buf - s));
}

/* One send of up to len bytes: the fd's transport's write where one is
 * set, else send() with MSG_NOSIGNAL on a socket, write() on anything else
 * (found out once, from send's ENOTSOCK). */
static ssize_t send_some(tdl_writer *w, const void *p, size_t len, tdl_time_t deadline)
{
  void *ctx;
  const tdl_net_transport *t = tdl__net_transport(w->b.fd, &ctx);
  if (t)
    return t->write(ctx, p, len, deadline);
  if (!w->not_socket) {
    ssize_t n = tdl_send(w->b.fd, p, len, 0, deadline);
    if (n != -ENOTSOCK)
      return n;
    w->not_socket = true;
  }
  return tdl_write(w->b.fd, p, len, deadline);
}

int tdl_writer_flush(tdl_writer *w, tdl_time_t deadline)
{
  int e = tdl__may_block(NULL);
  if (e < 0 || (e = tdl__netbuf_usable(&w->b)) < 0)
    return e;
  while (tdl__netbuf_len(&w->b) > 0) {
    w->b.busy = true;
    ssize_t n = send_some(w, w->b.p + w->b.start, tdl__netbuf_len(&w->b), deadline);
    w->b.busy = false;
    if (n < 0)
      return (int)n; /* what did not go stays buffered, for the next flush */
    tdl__netbuf_drop(&w->b, (size_t)n);
  }
  return 0;
}
