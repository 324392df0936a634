/* SPDX-License-Identifier: MIT */
/*
 * The growable buffer of tdl_reader and tdl_writer.
 *
 * A buffer has a home block (the caller's memory or one malloc'd block of
 * the initial size) that it keeps for its whole life, and at most one grown
 * block from malloc.  It grows only when the live bytes plus what is wanted
 * do not fit even after moving them to the front, and doubles each time, so
 * a message of m bytes costs O(log(m / initial)) allocations.  As soon as the
 * live bytes fit home again the grown block is freed: a connection that once
 * carried a large message holds only its home block while idle.
 */
#include <stdlib.h>
#include <string.h>

#include "net/net_internal.h"

/* What an unusable buffer points at, so that its data pointer is never
 * NULL + 0 (undefined arithmetic). */
static unsigned char nothing[1];

static void set_empty(tdl__netbuf *b)
{
  memset(b, 0, sizeof *b);
  b->p = b->home = nothing;
  b->fd = -1;
}

int tdl__netbuf_init(tdl__netbuf *b, int fd, void *mem, size_t size, size_t max)
{
  set_empty(b);
  if (fd < 0)
    return -EBADF;
  if (size == 0 || max < size)
    return -EINVAL;
  unsigned char *home = mem;
  if (!home && !(home = TDL__FAULT_ALLOC(malloc(size))))
    return -ENOMEM;
  b->p = b->home = home;
  b->cap = b->home_cap = size;
  b->max = max;
  b->home_owned = mem == NULL;
  b->fd = fd;
  return 0;
}

int tdl__netbuf_destroy(tdl__netbuf *b)
{
  if (b->busy)
    return -EBUSY;
  if (b->p != b->home)
    free(b->p);
  if (b->home_owned)
    free(b->home);
  set_empty(b);
  return 0;
}

static void compact(tdl__netbuf *b)
{
  size_t len = b->end - b->start;
  memmove(b->p, b->p + b->start, len);
  b->start = 0;
  b->end = len;
}

/* Grow to hold `need` bytes (the live ones are at the front). */
static int grow(tdl__netbuf *b, size_t need)
{
  if (need > b->max)
    return -EMSGSIZE;
  size_t cap = b->cap;
  while (cap < need)
    cap = cap > b->max / 2 ? b->max : cap * 2;
  unsigned char *q;
  if (b->p == b->home) {
    /* Home stays as it is, for when the data fits it again. */
    if ((q = TDL__FAULT_ALLOC(malloc(cap))))
      memcpy(q, b->p, b->end);
  } else {
    /* realloc of a large block remaps pages instead of copying them. */
    q = TDL__FAULT_ALLOC(realloc(b->p, cap));
  }
  if (!q)
    return -ENOMEM; /* b->p is untouched: nothing is lost */
  b->p = q;
  b->cap = cap;
  return 0;
}

int tdl__netbuf_room(tdl__netbuf *b, size_t n)
{
  size_t room = b->cap - b->end;
  /* Move the live bytes to the front when the room left after them is too
   * small, or less than half the block (so that reads stay large); the copy
   * is at most what is live. */
  if (b->start > 0 && (room < n || room < b->cap / 2))
    compact(b);
  if (b->cap - b->end >= n)
    return 0;
  if (n > b->max - b->end)
    return -EMSGSIZE;
  return grow(b, b->end + n);
}

/* Back to the home block: the live bytes fit it. */
static void go_home(tdl__netbuf *b)
{
  size_t len = b->end - b->start;
  memcpy(b->home, b->p + b->start, len);
  free(b->p);
  b->p = b->home;
  b->cap = b->home_cap;
  b->start = 0;
  b->end = len;
}

void tdl__netbuf_drop(tdl__netbuf *b, size_t n)
{
  size_t len = b->end - b->start;
  b->start += n < len ? n : len;
  if (b->busy)
    return;
  if (b->start == b->end)
    b->start = b->end = 0;
  if (b->p != b->home && b->end - b->start <= b->home_cap)
    go_home(b);
}
