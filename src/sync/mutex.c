/* SPDX-License-Identifier: MIT */
/*
 * The mutex: owned by one fiber, handed to the oldest waiter on unlock, and
 * released with -EOWNERDEAD for the next owner if its fiber finishes holding
 * it (the mutex is one of the fiber's cleanups while held).
 */
#include "sync/sync_internal.h"

enum { MUTEX_OWNER_DEAD = 1u };

void tdl_mutex_init(tdl_mutex *m) { *m = (tdl_mutex)TDL_MUTEX_INIT; }

int tdl__mutex_acquired(tdl_mutex *m)
{
  if (TDL__UNLIKELY(m->flags & MUTEX_OWNER_DEAD)) {
    m->flags &= ~MUTEX_OWNER_DEAD;
    return -EOWNERDEAD;
  }
  return 0;
}

static void pass(tdl_mutex *m);

/* Its owner finished holding it. */
static void owner_died(tdl__cleanup *c)
{
  tdl_mutex *m = TDL__CONTAINER_OF(c, tdl_mutex, held);
  m->flags |= MUTEX_OWNER_DEAD;
  pass(m);
}

void tdl__mutex_take(tdl_mutex *m, tdl__fiber *f)
{
  m->owner = f;
  m->held.run = owner_died;
  tdl__cleanup_add(f, &m->held);
}

/* Hand m (already out of its owner's cleanups) to its oldest live waiter, or
 * unlock it. */
static void pass(tdl_mutex *m)
{
  tdl__waiter *w = tdl__waitq_take(&m->waiters);
  if (w) {
    tdl__mutex_take(m, w->f);
    tdl__waiter_grant(w);
  } else {
    m->owner = NULL;
  }
}

void tdl__mutex_release(tdl_mutex *m)
{
  tdl__cleanup_del(&m->held);
  pass(m);
}

int tdl_mutex_lock(tdl_mutex *m, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  if (!m->owner) {
    tdl__mutex_take(m, f);
    return tdl__mutex_acquired(m);
  }
  if (m->owner == f)
    return -EDEADLK;
  tdl__waiter w = {.f = f};
  int r = tdl__waitq_park(&m->waiters, &w, "mutex", deadline);
  if (!w.granted) {
    tdl__waitq_leave(&w);
    return r;
  }
  if (f->cancelled) {
    tdl__mutex_release(m);
    return -ECANCELED;
  }
  return tdl__mutex_acquired(m);
}

int tdl_mutex_try_lock(tdl_mutex *m)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (m->owner == f)
    return -EDEADLK;
  if (m->owner)
    return -EBUSY;
  tdl__mutex_take(m, f);
  return tdl__mutex_acquired(m);
}

int tdl_mutex_unlock(tdl_mutex *m)
{
  tdl__fiber *f = tdl__self();
  if (!f || m->owner != f)
    return -EPERM;
  tdl__mutex_release(m);
  return 0;
}

bool tdl_mutex_owned(const tdl_mutex *m)
{
  tdl__fiber *f = tdl__self();
  return f && m->owner == f;
}

int tdl_mutex_destroy(tdl_mutex *m)
{
  if (m->owner || !tdl__list_empty(&m->waiters) || m->cond_users)
    return -EBUSY;
  *m = (tdl_mutex)TDL_MUTEX_INIT;
  return 0;
}
