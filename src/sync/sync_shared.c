/* SPDX-License-Identifier: MIT */
/*
 * The semaphore and the wait group shared between loops (THREAD-SAFE), on
 * the cross-thread waiting of fiber/shared_wait.h.  Each is a spinlock, a number and a
 * queue of waiters: every change is a few instructions under the lock, and
 * a permit or the zero count is handed to its waiters there, so that a
 * waiter woken from another thread never has to try again.
 *
 * Why no shared mutex: tdl_mutex hands ownership to a fiber, reports a dead
 * owner to the next one and cooperates with tdl_cond, and all of that rests
 * on one thread running the owner and its waiters.  Across loops, a
 * semaphore of one permit (tdl_sem_init_shared(s, 1, 1)) gives mutual
 * exclusion; what it guards should then be used by fibers that do not park
 * while they hold it, or the other loops' fibers wait on a parked one.
 */
#include <stdlib.h>

#include "sync/sync_internal.h"
#include "fiber/shared_wait.h"

typedef struct tdl__sync_shared {
  int lock;
  uint32_t max;       /* semaphore */
  uint64_t value;     /* permits, or the wait group's count (atomic) */
  tdl__list waiters;  /* tdl__shared_wait */
  /* Calls that parked and may still touch this state: each from its park
   * to its last touch, which is its uncount (then destroy may free at
   * once), or until a waker that knows it will touch nothing more uncounts
   * it (use, unuse, below).  Destroy refuses while there is one.  Atomic:
   * counted in under the lock, out by a waker under it or by the waiter
   * after it. */
  uint32_t inside;
} tdl__sync_shared;

static tdl__sync_shared *make(uint64_t value, uint32_t max)
{
  tdl__sync_shared *x = TDL__FAULT_ALLOC(calloc(1, sizeof *x));
  if (x) {
    x->value = value;
    x->max = max;
  }
  return x;
}

/* w counts among the calls inside x (under the lock) until its fiber's
 * last touch of x (unuse), or until a waker that knows it will touch
 * nothing more uncounts it (the wait group's add). */
static void use(tdl__sync_shared *x, tdl__shared_wait *w)
{
  __atomic_add_fetch(&x->inside, 1, __ATOMIC_RELAXED);
  w->using = 1;
}
static void unuse(tdl__sync_shared *x, tdl__shared_wait *w)
{
  if (w->using) {
    w->using = 0;
    __atomic_sub_fetch(&x->inside, 1, __ATOMIC_RELEASE);
  }
}

/* Park as w until granted, the deadline or a cancel.  Called with the lock
 * held and w prepared; returns 0 (granted) or the park's error.  Granted, w
 * may still count x as in use: the caller unuses it after its last touch. */
static int wait_granted(tdl__sync_shared *x, tdl__shared_wait *w, const char *what, tdl_time_t deadline)
{
  use(x, w);
  tdl__list_push(&x->waiters, &w->link);
  tdl__spin_unlock(&x->lock);
  int r = tdl__park(w->f, what, -1, deadline);
  if (tdl__shared_wait_settle(w) < 0) {
    /* A waker may have dropped the record (its claim was closed) and left
     * the queue empty: only the count keeps destroy from freeing x. */
    tdl__spin_lock(&x->lock);
    if (tdl__list_linked(&w->link))
      tdl__list_remove(&w->link);
    tdl__spin_unlock(&x->lock);
    tdl__shared_wait_done(w);
    unuse(x, w);
    return r < 0 ? r : -ECANCELED;
  }
  tdl__shared_wait_done(w);
  return 0;
}

/* ---- semaphore ---- */

int tdl_sem_init_shared(tdl_sem *s, uint32_t value, uint32_t max)
{
  if (max == 0)
    max = TDL_SEM_VALUE_MAX;
  if (value > max)
    return -EINVAL;
  tdl__sync_shared *x = make(value, max);
  if (!x)
    return -ENOMEM;
  *s = (tdl_sem)TDL_SEM_INIT(0, max);
  s->shared = x;
  return 0;
}

int tdl__sem_shared_acquire(tdl_sem *s, tdl_time_t deadline)
{
  tdl__sync_shared *x = s->shared;
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  tdl__spin_lock(&x->lock);
  if (x->value > 0) {
    __atomic_store_n(&x->value, x->value - 1, __ATOMIC_RELAXED);
    tdl__spin_unlock(&x->lock);
    return 0;
  }
  if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now) {
    tdl__spin_unlock(&x->lock);
    return -ETIMEDOUT;
  }
  TDL__SHARED_WAIT_ALIGN tdl__shared_wait w = {.clause = 0};
  if ((e = tdl__shared_wait_prepare(&w, f)) < 0) {
    tdl__spin_unlock(&x->lock);
    return e;
  }
  if ((e = wait_granted(x, &w, "sem", deadline)) < 0)
    return e;
  /* A permit is not a notification: granted, the waiter may still have to
   * touch x (cancelled, it passes the permit on), so it stays counted until
   * then and its releaser does not uncount it. */
  if (f->cancelled) { /* granted, then cancelled: the permit goes on */
    tdl__sem_shared_release(s);
    e = -ECANCELED;
  }
  unuse(x, &w); /* the last touch of x */
  return e;
}

int tdl__sem_shared_try_acquire(tdl_sem *s)
{
  tdl__sync_shared *x = s->shared;
  tdl__spin_lock(&x->lock);
  int e = x->value > 0 ? 0 : -EAGAIN;
  if (e == 0)
    __atomic_store_n(&x->value, x->value - 1, __ATOMIC_RELAXED);
  tdl__spin_unlock(&x->lock);
  return e;
}

int tdl__sem_shared_release(tdl_sem *s)
{
  tdl__sync_shared *x = s->shared;
  tdl__spin_lock(&x->lock);
  tdl__shared_wait *w = tdl__shared_wait_take(&x->waiters, NULL, TDL__SHARED_MOVED);
  int e = 0;
  if (!w) {
    if (x->value >= x->max)
      e = -EOVERFLOW;
    else
      __atomic_store_n(&x->value, x->value + 1, __ATOMIC_RELAXED);
  }
  tdl__spin_unlock(&x->lock);
  if (w)
    tdl__shared_wait_deliver(w);
  return e;
}

uint32_t tdl__sem_shared_value(const tdl_sem *s) { return (uint32_t)__atomic_load_n(&s->shared->value, __ATOMIC_RELAXED); }

/* Whether a call is inside x: waiting, or woken and still to touch x. */
static bool in_use(tdl__sync_shared *x) { return __atomic_load_n(&x->inside, __ATOMIC_ACQUIRE) > 0; }

int tdl__sem_shared_destroy(tdl_sem *s)
{
  tdl__sync_shared *x = s->shared;
  bool busy = in_use(x);
  if (busy)
    return -EBUSY;
  uint32_t max = x->max;
  free(x);
  *s = (tdl_sem)TDL_SEM_INIT(0, max);
  return 0;
}

/* ---- wait group ---- */

int tdl_waitgroup_init_shared(tdl_waitgroup *wg)
{
  tdl__sync_shared *x = make(0, 0);
  if (!x)
    return -ENOMEM;
  *wg = (tdl_waitgroup)TDL_WAITGROUP_INIT;
  wg->shared = x;
  return 0;
}

int tdl__waitgroup_shared_add(tdl_waitgroup *wg, int64_t delta)
{
  tdl__sync_shared *x = wg->shared;
  tdl__list woken = {NULL, NULL};
  int e = 0;
  tdl__spin_lock(&x->lock);
  int64_t n;
  if (__builtin_add_overflow((int64_t)x->value, delta, &n))
    e = delta > 0 ? -EOVERFLOW : -EINVAL;
  else if (n < 0)
    e = -EINVAL;
  else {
    __atomic_store_n(&x->value, (uint64_t)n, __ATOMIC_RELAXED);
    tdl__shared_wait *w;
    /* A waiter woken at zero returns without touching x again: uncounted
     * here, where x's line is ours already, so that it need not pull it
     * back, and a destroy may go as soon as the wakes are out. */
    while (n == 0 && (w = tdl__shared_wait_take(&x->waiters, NULL, TDL__SHARED_MOVED)) != NULL) {
      unuse(x, w);
      tdl__list_push(&woken, &w->link);
    }
  }
  tdl__spin_unlock(&x->lock);
  tdl__shared_wait_deliver_all(&woken);
  return e;
}

int tdl__waitgroup_shared_wait(tdl_waitgroup *wg, tdl_time_t deadline)
{
  tdl__sync_shared *x = wg->shared;
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  tdl__spin_lock(&x->lock);
  if (x->value == 0) {
    tdl__spin_unlock(&x->lock);
    return 0;
  }
  TDL__SHARED_WAIT_ALIGN tdl__shared_wait w = {.clause = 0};
  if ((e = tdl__shared_wait_prepare(&w, f)) < 0) {
    tdl__spin_unlock(&x->lock);
    return e;
  }
  if ((e = wait_granted(x, &w, "waitgroup", deadline)) < 0)
    return e;
  return f->cancelled ? -ECANCELED : 0; /* uncounted by the waker: x may be gone */
}

int64_t tdl__waitgroup_shared_count(const tdl_waitgroup *wg) { return (int64_t)__atomic_load_n(&wg->shared->value, __ATOMIC_RELAXED); }

int tdl__waitgroup_shared_destroy(tdl_waitgroup *wg)
{
  tdl__sync_shared *x = wg->shared;
  bool busy = in_use(x);
  if (busy)
    return -EBUSY;
  free(x);
  *wg = (tdl_waitgroup)TDL_WAITGROUP_INIT;
  return 0;
}
