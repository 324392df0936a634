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

/* Park as w until granted, the deadline or a cancel.  Called with the lock
 * held and w prepared; returns 0 (granted) or the park's error. */
static int wait_granted(tdl__sync_shared *x, tdl__shared_wait *w, const char *what, tdl_time_t deadline)
{
  tdl__list_push(&x->waiters, &w->link);
  tdl__spin_unlock(&x->lock);
  int r = tdl__park(w->f, what, -1, deadline);
  if (tdl__shared_wait_settle(w) < 0) {
    tdl__spin_lock(&x->lock);
    if (tdl__list_linked(&w->link))
      tdl__list_remove(&w->link);
    tdl__spin_unlock(&x->lock);
    tdl__shared_wait_done(w);
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
  if (f->cancelled) { /* granted, then cancelled: the permit goes on */
    tdl__sem_shared_release(s);
    return -ECANCELED;
  }
  return 0;
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

int tdl__sem_shared_destroy(tdl_sem *s)
{
  tdl__sync_shared *x = s->shared;
  tdl__spin_lock(&x->lock);
  bool busy = !tdl__list_empty(&x->waiters);
  tdl__spin_unlock(&x->lock);
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
    if (n == 0)
      tdl__shared_wait_take_all(&x->waiters, NULL, TDL__SHARED_MOVED, &woken);
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
  return f->cancelled ? -ECANCELED : 0;
}

int64_t tdl__waitgroup_shared_count(const tdl_waitgroup *wg) { return (int64_t)__atomic_load_n(&wg->shared->value, __ATOMIC_RELAXED); }

int tdl__waitgroup_shared_destroy(tdl_waitgroup *wg)
{
  tdl__sync_shared *x = wg->shared;
  tdl__spin_lock(&x->lock);
  bool busy = !tdl__list_empty(&x->waiters);
  tdl__spin_unlock(&x->lock);
  if (busy)
    return -EBUSY;
  free(x);
  *wg = (tdl_waitgroup)TDL_WAITGROUP_INIT;
  return 0;
}
