/* SPDX-License-Identifier: MIT */
/*
 * The one wait queue under channels, locks, semaphores, wait groups and once.
 *
 * A fiber that must wait puts a record on its own stack into the object's
 * queue (a tdl__list, oldest first) and parks.  Whoever releases the object
 * takes the oldest live record off the queue, hands it what it waits for
 * (a mutex, a permit, a value, a signal) and wakes its fiber.  A fiber
 * always learns what happened from its record, never from park's result
 * alone.
 *
 * Liveness.  A record is live while its fiber is still parked in that wait;
 * a select's record, while its select's claim is open, and taking it takes
 * the claim (tdl__claim: the one arbiter among all the select's clauses).  A
 * fiber woken by its deadline or by cancellation stays queued until it runs
 * again and leaves; meanwhile, takers skip its record, so a timed-out or
 * cancelled waiter never takes anything and a cancelled sender's value is
 * never delivered.  Records marked sticky are served even after their fiber
 * was woken: condition waiters taking their mutex back, which must not fail.
 * (Liveness is read from the fiber's scheduler state, so a queue belongs to
 * one loop's thread.)
 */
#ifndef TDL_SYNC_WAITQ_H
#define TDL_SYNC_WAITQ_H

#include <string.h>

#include "fiber/fiber_internal.h"

/* Values are mostly small scalars or pointers: copy those inline rather than
 * through a call into libc's memcpy. */
static inline void tdl__copy_val(void *dst, const void *src, size_t n)
{
  switch (n) {
  case 1: memcpy(dst, src, 1); break;
  case 2: memcpy(dst, src, 2); break;
  case 4: memcpy(dst, src, 4); break;
  case 8: memcpy(dst, src, 8); break;
  case 16: memcpy(dst, src, 16); break;
  default: memcpy(dst, src, n); break;
  }
}

/* The records of one select share this: the first clause to take the claim
 * wins (channels here, fds and unparks in the fiber layer, other threads
 * for shared channels). */
typedef struct tdl__select {
  tdl_select_op *ops;
  tdl__claim claim;
} tdl__select;

typedef struct tdl__waiter {
  tdl__list link;
  tdl__fiber *f;
  tdl__select *sel;  /* a select's clause, or NULL */
  void *val;         /* channels: source of a send, target of a receive */
  int index;         /* a select's clause number */
  uint8_t granted;   /* it was handed what it waits for */
  uint8_t sticky;    /* serve it even when its fiber has been woken */
  uint8_t signalled; /* cond: a signal moved it to the mutex's queue */
  uint8_t run;       /* once: it must run the function */
} tdl__waiter;

static inline bool tdl__waiter_live(const tdl__waiter *w)
{
  return w->sticky || w->f->state == TDL__FIBER_PARKED;
}

static inline void tdl__waitq_push(tdl__list *q, tdl__waiter *w) { tdl__list_push(q, &w->link); }

/* Leave the queue after a wait that was not served (unless a taker already
 * dropped the record). */
static inline void tdl__waitq_leave(tdl__waiter *w)
{
  if (tdl__list_linked(&w->link))
    tdl__list_remove(&w->link);
}

/* Take the oldest live record off q, dropping dead ones on the way; NULL
 * when none is left. */
static inline tdl__waiter *tdl__waitq_take(tdl__list *q)
{
  tdl__list *n;
  while ((n = tdl__list_pop(q)) != NULL) {
    tdl__waiter *w = TDL__CONTAINER_OF(n, tdl__waiter, link);
    if (w->sel ? tdl__claim_take(&w->sel->claim, w->index) : tdl__waiter_live(w))
      return w;
  }
  return NULL;
}

/* Hand w what it waits for and wake its fiber. */
static inline void tdl__waiter_grant(tdl__waiter *w)
{
  w->granted = 1;
  tdl__wake(w->f, 0);
}

/* Queue a record for f on q and park; returns park's result.  The record
 * says whether it was served (granted); if not, the caller leaves. */
static inline int tdl__waitq_park(tdl__list *q, tdl__waiter *w, const char *what, tdl_time_t deadline)
{
  tdl__waitq_push(q, w);
  return tdl__park(w->f, what, -1, deadline);
}

#endif /* TDL_SYNC_WAITQ_H */
