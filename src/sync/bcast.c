/* SPDX-License-Identifier: MIT */
/*
 * Broadcast: one ring of the last `capacity` values and a cursor per
 * subscriber (THREAD-SAFE; include/treadle/sync.h says what it promises).
 *
 * The ring is positions, not a queue: value number p lives in cell
 * p % capacity until value p + capacity overwrites it, so a sender never
 * waits for anybody, and a subscriber whose cursor fell below
 * tail - capacity knows exactly how many it lost.  Every change and every
 * copy is made under one spinlock: a send is a copy and a few stores, and
 * a copy out by a subscriber of another loop cannot meet a half-written
 * cell (the alternative, a sequence lock with copies that may tear and are
 * retried, would be invisible to ThreadSanitizer and buy little for
 * values the size of a line).
 *
 * Only subscribers that parked are woken, each through
 * fiber/shared_wait.h: a send takes the list of parked records under the
 * lock and delivers the wakes after it (a post to each other loop).  A
 * woken subscriber takes the lock again and reads from its own cursor, so
 * a wake is a notification and nothing is handed over.
 */
#include <stdlib.h>
#include <string.h>

#include "fiber/shared_wait.h"

struct tdl_bcast {
  int lock;
  int closed;             /* under the lock */
  size_t elem, cap;
  uint64_t tail;          /* the next value's position (under the lock) */
  uint32_t subs;          /* subscriptions that exist (under the lock) */
  tdl__list parked;       /* tdl__shared_wait of parked subscribers */
  unsigned char *cells;   /* cap values of elem bytes */
};

struct tdl_bcast_sub {
  tdl_bcast *b;
  uint64_t next;          /* the next position it reads (under b's lock) */
  int inside;             /* a fiber is inside recv on it (atomic) */
};

static inline void lock(tdl_bcast *b) { tdl__spin_lock(&b->lock); }
static inline void unlock(tdl_bcast *b) { tdl__spin_unlock(&b->lock); }

int tdl_bcast_new(tdl_bcast **out, size_t elem_size, size_t capacity)
{
  if (!out)
    return -EINVAL;
  *out = NULL;
  if (!elem_size || !capacity || elem_size > TDL_CHAN_MAX_BYTES / capacity)
    return -EINVAL;
  tdl_bcast *b = TDL__FAULT_ALLOC(calloc(1, sizeof *b));
  if (!b)
    return -ENOMEM;
  b->cells = TDL__FAULT_ALLOC(malloc(elem_size * capacity));
  if (!b->cells) {
    free(b);
    return -ENOMEM;
  }
  b->elem = elem_size;
  b->cap = capacity;
  *out = b;
  return 0;
}

int tdl_bcast_free(tdl_bcast *b)
{
  if (!b)
    return 0;
  lock(b);
  bool busy = b->subs > 0;
  unlock(b);
  if (busy)
    return -EBUSY;
  free(b->cells);
  free(b);
  return 0;
}

int tdl_bcast_send(tdl_bcast *b, const void *val)
{
  if (!b || !val)
    return -EINVAL;
  tdl__list woken = {NULL, NULL};
  lock(b);
  if (b->closed) {
    unlock(b);
    return -EPIPE;
  }
  memcpy(b->cells + (size_t)(b->tail % b->cap) * b->elem, val, b->elem);
  b->tail++;
  tdl__shared_wait_take_all(&b->parked, NULL, TDL__SHARED_RETRY, &woken);
  uint32_t subs = b->subs;
  unlock(b);
  tdl__shared_wait_deliver_all(&woken);
  return subs > INT32_MAX ? INT32_MAX : (int)subs;
}

int tdl_bcast_close(tdl_bcast *b)
{
  if (!b)
    return -EINVAL;
  tdl__list woken = {NULL, NULL};
  lock(b);
  int e = b->closed ? -EPIPE : 0;
  b->closed = 1;
  tdl__shared_wait_take_all(&b->parked, NULL, TDL__SHARED_RETRY, &woken);
  unlock(b);
  tdl__shared_wait_deliver_all(&woken);
  return e;
}

int tdl_bcast_subscribe(tdl_bcast_sub **out, tdl_bcast *b)
{
  if (!out)
    return -EINVAL;
  *out = NULL;
  if (!b)
    return -EINVAL;
  tdl_bcast_sub *s = TDL__FAULT_ALLOC(malloc(sizeof *s));
  if (!s)
    return -ENOMEM;
  s->b = b;
  s->inside = 0;
  lock(b);
  int e = b->closed ? -EPIPE : b->subs == UINT32_MAX ? -EAGAIN : 0;
  if (e == 0) {
    s->next = b->tail;
    b->subs++;
  }
  unlock(b);
  if (e < 0) {
    free(s);
    return e;
  }
  *out = s;
  return 0;
}

int tdl_bcast_unsubscribe(tdl_bcast_sub *s)
{
  if (!s)
    return 0;
  if (__atomic_load_n(&s->inside, __ATOMIC_ACQUIRE))
    return -EBUSY;
  tdl_bcast *b = s->b;
  lock(b);
  b->subs--;
  unlock(b);
  free(s);
  return 0;
}

/* Under the lock: what s may take now.  0 (a value into val), the number
 * of values it lost (> 0: its cursor moves to the oldest kept), -EPIPE
 * (closed and read to the end), -EAGAIN (nothing yet). */
static int take(tdl_bcast_sub *s, void *val)
{
  tdl_bcast *b = s->b;
  uint64_t oldest = b->tail > b->cap ? b->tail - b->cap : 0;
  if (s->next < oldest) {
    uint64_t lost = oldest - s->next;
    s->next = oldest;
    return lost > INT32_MAX ? INT32_MAX : (int)lost;
  }
  if (s->next < b->tail) {
    memcpy(val, b->cells + (size_t)(s->next % b->cap) * b->elem, b->elem);
    s->next++;
    return 0;
  }
  return b->closed ? -EPIPE : -EAGAIN;
}

/* One fiber at a time per subscription: the cursor and the -EBUSY of
 * unsubscribe depend on it. */
static int enter(tdl_bcast_sub *s) { return __atomic_exchange_n(&s->inside, 1, __ATOMIC_ACQUIRE) ? -EBUSY : 0; }
static void leave(tdl_bcast_sub *s) { __atomic_store_n(&s->inside, 0, __ATOMIC_RELEASE); }

int tdl_bcast_try_recv(tdl_bcast_sub *s, void *val)
{
  if (!s || !val)
    return -EINVAL;
  int e = enter(s);
  if (e < 0)
    return e;
  lock(s->b);
  e = take(s, val);
  unlock(s->b);
  leave(s);
  return e;
}

static int recv_waiting(tdl_bcast_sub *s, tdl__fiber *f, void *val, tdl_time_t deadline)
{
  tdl_bcast *b = s->b;
  for (;;) {
    lock(b);
    int e = take(s, val);
    if (e != -EAGAIN) {
      unlock(b);
      return e;
    }
    unlock(b);
    if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now)
      return -ETIMEDOUT;
    TDL__SHARED_WAIT_ALIGN tdl__shared_wait w = {.clause = 0};
    if ((e = tdl__shared_wait_prepare(&w, f)) < 0)
      return e;
    lock(b);
    /* A send between the look above and here would find no record: look
     * again with the record about to be hung, under the same lock. */
    if ((e = take(s, val)) != -EAGAIN) {
      unlock(b);
      tdl__shared_wait_done(&w);
      return e;
    }
    tdl__list_push(&b->parked, &w.link);
    unlock(b);
    int r = tdl__park(f, "bcast recv", -1, deadline);
    if (tdl__shared_wait_settle(&w) < 0) {
      lock(b);
      if (tdl__list_linked(&w.link))
        tdl__list_remove(&w.link);
      unlock(b);
      tdl__shared_wait_done(&w);
      return r < 0 ? r : -ECANCELED;
    }
    tdl__shared_wait_done(&w);
    if (f->cancelled)
      return -ECANCELED; /* a wake is a notification: nothing to pass on */
  }
}

int tdl_bcast_recv(tdl_bcast_sub *s, void *val, tdl_time_t deadline)
{
  if (!s || !val)
    return -EINVAL;
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  if ((e = enter(s)) < 0)
    return e;
  e = recv_waiting(s, f, val, deadline);
  leave(s);
  return e;
}
