/* SPDX-License-Identifier: MIT */
/*
 * The condition variable.  A signal moves its oldest waiter onto the mutex's
 * queue (or hands it the mutex when free) instead of waking it, so that a
 * broadcast wakes the waiters one at a time, each owning the mutex.
 */
#include <limits.h>

#include "sync/sync_internal.h"

void tdl_cond_init(tdl_cond *c) { *c = (tdl_cond)TDL_COND_INIT; }

/* Park until w is granted, whatever happens meanwhile: no deadline, and a
 * cancel is held off until the next park.  Only condition waiters taking back
 * their mutex wait like this. */
static void park_until_granted(tdl__fiber *f, tdl__waiter *w, const char *what)
{
  while (!w->granted)
    (void)tdl__park_uncancellable(f, what);
}

/* Move the oldest live waiter of c towards its mutex: hand it the mutex if
 * free, else queue it (sticky: it will be served) behind the mutex's other
 * waiters.  Returns 1, or 0 when nobody waits. */
static int wake_one(tdl_cond *c)
{
  tdl__waiter *w = tdl__waitq_take(&c->waiters);
  tdl_mutex *m = c->mutex;
  if (tdl__list_empty(&c->waiters))
    c->mutex = NULL;
  if (!w)
    return 0;
  w->signalled = 1;
  w->sticky = 1;
  if (!m->owner) {
    tdl__mutex_take(m, w->f);
    tdl__waiter_grant(w);
  } else {
    tdl__waitq_push(&m->waiters, w);
  }
  return 1;
}

int tdl_cond_wait(tdl_cond *c, tdl_mutex *m, tdl_time_t deadline)
{
  tdl__fiber *f;
  int r = tdl__may_block(&f);
  if (r == -EPERM || m->owner != f)
    return -EPERM;
  if (!tdl__list_empty(&c->waiters) && c->mutex != m)
    return -EINVAL;
  if (r < 0)
    return r;
  if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now)
    return -ETIMEDOUT;

  tdl__waiter w = {.f = f};
  tdl__waitq_push(&c->waiters, &w);
  c->mutex = m;
  c->inside++;
  m->cond_users++;
  tdl__mutex_release(m);
  r = tdl__park(f, "cond", -1, deadline);

  if (!w.signalled) {
    /* Timed out or cancelled while still on c: nothing was consumed.  Leave
     * c, then take m back, waiting as long as it takes. */
    if (tdl__list_linked(&w.link)) {
      tdl__list_remove(&w.link);
      if (tdl__list_empty(&c->waiters))
        c->mutex = NULL;
    }
    if (!m->owner) {
      tdl__mutex_take(m, f);
      w.granted = 1;
    } else {
      w.sticky = 1;
      tdl__waitq_push(&m->waiters, &w);
    }
  }
  park_until_granted(f, &w, "cond mutex");
  c->inside--;
  m->cond_users--;

  int e = tdl__mutex_acquired(m);
  if (!w.signalled)
    return e < 0 ? e : r;
  if (e == 0 && f->cancelled)
    e = -ECANCELED;
  if (e < 0) /* do not consume the signal */
    wake_one(c);
  return e;
}

int tdl_cond_signal(tdl_cond *c) { return wake_one(c); }

int tdl_cond_broadcast(tdl_cond *c)
{
  int n = 0;
  while (wake_one(c))
    if (n < INT_MAX)
      n++;
  return n;
}

int tdl_cond_destroy(tdl_cond *c)
{
  if (!tdl__list_empty(&c->waiters) || c->inside)
    return -EBUSY;
  *c = (tdl_cond)TDL_COND_INIT;
  return 0;
}
