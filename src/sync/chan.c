/* SPDX-License-Identifier: MIT */
/*
 * Channels and select, on the wait queue of waitq.h.
 *
 * A fiber that must wait puts a record (on its own stack) in the channel's
 * receive or send queue and parks.  Whoever completes the operation copies
 * the value straight between the two fibers' buffers and wakes the fiber.
 * Select (select.c) parks one record per clause; the first completion wins.
 */
#include <stdlib.h>
#include <string.h>

#include "sync/chan_internal.h"

/* End w's wait (it was taken off its queue): the operation happened
 * (result 0) or cannot (-EPIPE). */
static void complete(tdl__waiter *w, int result)
{
  if (w->sel) { /* its claim was taken with it */
    w->sel->ops[w->index].result = result;
    tdl__wake(w->f, w->index);
  } else {
    tdl__wake(w->f, result);
  }
}

/* ---- making and destroying ---- */

static int check_size(size_t elem_size, size_t capacity)
{
  if (elem_size == 0)
    return -EINVAL;
  if (capacity > TDL_CHAN_MAX_BYTES / elem_size)
    return -EINVAL;
  return 0;
}

int tdl_chan_init(tdl_chan *ch, size_t elem_size, size_t capacity, void *buf, size_t buf_len)
{
  int e = check_size(elem_size, capacity);
  if (e < 0)
    return e;
  if (capacity && (!buf || buf_len < elem_size * capacity))
    return -EINVAL;
  memset(ch, 0, sizeof *ch);
  ch->elem_size = elem_size;
  ch->cap = capacity;
  ch->buf = buf;
  return 0;
}

int tdl_chan_new(tdl_chan **out, size_t elem_size, size_t capacity)
{
  *out = NULL;
  int e = check_size(elem_size, capacity);
  if (e < 0)
    return e;
  /* One allocation: the struct, then the ring. */
  tdl_chan *ch = TDL__FAULT_ALLOC(malloc(sizeof *ch + elem_size * capacity));
  if (!ch)
    return -ENOMEM;
  tdl_chan_init(ch, elem_size, capacity, capacity ? (unsigned char *)(ch + 1) : NULL,
                    elem_size * capacity);
  ch->owned = 1;
  *out = ch;
  return 0;
}

int tdl_chan_new_shared(tdl_chan **out, size_t elem_size, size_t capacity)
{
  *out = NULL;
  int e = check_size(elem_size, capacity);
  if (e < 0)
    return e;
  tdl_chan *ch = TDL__FAULT_ALLOC(calloc(1, sizeof *ch));
  if (!ch)
    return -ENOMEM;
  if ((e = tdl__chan_shared_new(ch, elem_size, capacity)) < 0) {
    free(ch);
    return e;
  }
  ch->elem_size = elem_size;
  ch->cap = capacity;
  ch->owned = 1;
  *out = ch;
  return 0;
}

size_t tdl_chan_len(const tdl_chan *ch) { return ch->shared ? tdl__chan_shared_len(ch) : ch->len; }

/* A fiber's record stays queued until that fiber has run again, also after
 * its deadline or a cancel ended its wait: until then it will touch the
 * queue, so the channel is in use. */
static bool in_use(const tdl_chan *ch) { return !tdl__list_empty(&ch->recvq) || !tdl__list_empty(&ch->sendq); }

int tdl_chan_destroy(tdl_chan *ch)
{
  if (!ch || ch->owned)
    return -EINVAL;
  if (in_use(ch))
    return -EBUSY;
  ch->closed = 1;
  ch->len = 0;
  return 0;
}

int tdl_chan_free(tdl_chan *ch)
{
  if (!ch)
    return 0;
  if (!ch->owned)
    return -EINVAL;
  int e = ch->shared ? tdl__chan_shared_free(ch) : in_use(ch) ? -EBUSY : 0;
  if (e == 0)
    free(ch);
  return e;
}

int tdl_chan_retain(tdl_chan *ch)
{
  if (!ch || !ch->shared)
    return -EINVAL;
  return tdl__chan_shared_retain(ch);
}

int tdl_chan_release(tdl_chan *ch)
{
  if (!ch || !ch->shared)
    return -EINVAL;
  tdl__chan_shared_release(ch);
  return 0;
}

int tdl_chan_close(tdl_chan *ch)
{
  if (ch->shared)
    return tdl__chan_shared_close(ch);
  if (ch->closed)
    return -EPIPE;
  ch->closed = 1;
  tdl__waiter *w;
  while ((w = tdl__waitq_take(&ch->recvq)))
    complete(w, -EPIPE);
  while ((w = tdl__waitq_take(&ch->sendq)))
    complete(w, -EPIPE);
  return 0;
}

/* ---- the operations without waiting ---- */

static inline unsigned char *slot(tdl_chan *ch, size_t i)
{
  size_t k = ch->head + i;
  if (k >= ch->cap)
    k -= ch->cap;
  return ch->buf + k * ch->elem_size;
}

static inline int try_send(tdl_chan *ch, const void *val)
{
  if (ch->closed)
    return -EPIPE;
  tdl__waiter *r = tdl__waitq_take(&ch->recvq); /* only while the buffer is empty */
  if (r) {
    tdl__copy_val(r->val, val, ch->elem_size);
    complete(r, 0);
    return 0;
  }
  if (ch->len < ch->cap) {
    tdl__copy_val(slot(ch, ch->len), val, ch->elem_size);
    ch->len++;
    return 0;
  }
  return -EAGAIN;
}

static inline int try_recv(tdl_chan *ch, void *val)
{
  if (ch->len) {
    tdl__copy_val(val, slot(ch, 0), ch->elem_size);
    ch->head = ch->head + 1 == ch->cap ? 0 : ch->head + 1;
    ch->len--;
    /* A sender waiting for room takes the freed place, in FIFO order. */
    tdl__waiter *s = tdl__waitq_take(&ch->sendq);
    if (s) {
      tdl__copy_val(slot(ch, ch->len), s->val, ch->elem_size);
      ch->len++;
      complete(s, 0);
    }
    return 0;
  }
  tdl__waiter *s = tdl__waitq_take(&ch->sendq); /* unbuffered: straight from the sender */
  if (s) {
    tdl__copy_val(val, s->val, ch->elem_size);
    complete(s, 0);
    return 0;
  }
  return ch->closed ? -EPIPE : -EAGAIN;
}


int tdl_chan_try_send(tdl_chan *ch, const void *val)
{
  return TDL__UNLIKELY(ch->shared != NULL) ? tdl__chan_shared_try_send(ch, val) : try_send(ch, val);
}

int tdl_chan_try_recv(tdl_chan *ch, void *val)
{
  return TDL__UNLIKELY(ch->shared != NULL) ? tdl__chan_shared_try_recv(ch, val) : try_recv(ch, val);
}

/* ---- blocking send and receive ---- */

static int wait_on(tdl__list *q, tdl__fiber *f, void *val, const char *what, tdl_time_t deadline)
{
  tdl__waiter w = {.f = f, .val = val};
  int r = tdl__waitq_park(q, &w, what, deadline);
  tdl__waitq_leave(&w); /* still queued: timed out or cancelled, nothing was transferred */
  return r;
}

int tdl_chan_send(tdl_chan *ch, const void *val, tdl_time_t deadline)
{
  if (TDL__UNLIKELY(ch->shared != NULL))
    return tdl__chan_shared_send(ch, val, deadline);
  tdl__fiber *f;
  int r = tdl__may_block(&f);
  if (r < 0)
    return r;
  r = try_send(ch, val);
  if (r != -EAGAIN)
    return r;
  return wait_on(&ch->sendq, f, (void *)val, "chan send", deadline);
}

int tdl_chan_recv(tdl_chan *ch, void *val, tdl_time_t deadline)
{
  if (TDL__UNLIKELY(ch->shared != NULL))
    return tdl__chan_shared_recv(ch, val, deadline);
  tdl__fiber *f;
  int r = tdl__may_block(&f);
  if (r < 0)
    return r;
  r = try_recv(ch, val);
  if (r != -EAGAIN)
    return r;
  return wait_on(&ch->recvq, f, val, "chan recv", deadline);
}
