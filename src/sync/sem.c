/* SPDX-License-Identifier: MIT */
/* The counting semaphore: permits go to the oldest waiter first. */
#include "sync/sync_internal.h"

int tdl_sem_init(tdl_sem *s, uint32_t value, uint32_t max)
{
  if (max == 0)
    max = TDL_SEM_VALUE_MAX;
  if (value > max)
    return -EINVAL;
  *s = (tdl_sem)TDL_SEM_INIT(value, max);
  return 0;
}

/* One permit back: to the oldest live waiter, else to the count. */
static int give(tdl_sem *s)
{
  tdl__waiter *w = tdl__waitq_take(&s->waiters);
  if (w) {
    tdl__waiter_grant(w);
    return 0;
  }
  uint32_t max = s->max ? s->max : TDL_SEM_VALUE_MAX;
  if (s->value >= max)
    return -EOVERFLOW;
  s->value++;
  return 0;
}

int tdl_sem_acquire(tdl_sem *s, tdl_time_t deadline)
{
  if (s->shared)
    return tdl__sem_shared_acquire(s, deadline);
  tdl__fiber *f;
  int r = tdl__may_block(&f);
  if (r < 0)
    return r;
  if (s->value > 0) { /* then nobody waits: permits go to waiters first */
    s->value--;
    return 0;
  }
  tdl__waiter w = {.f = f};
  s->inside++;
  r = tdl__waitq_park(&s->waiters, &w, "sem", deadline);
  s->inside--;
  if (!w.granted) {
    tdl__waitq_leave(&w);
    return r;
  }
  if (f->cancelled) {
    (void)give(s); /* cannot overflow: this permit was taken from s */
    return -ECANCELED;
  }
  return 0;
}

int tdl_sem_try_acquire(tdl_sem *s)
{
  if (s->shared)
    return tdl__sem_shared_try_acquire(s);
  if (s->value == 0)
    return -EAGAIN;
  s->value--;
  return 0;
}

int tdl_sem_release(tdl_sem *s) { return s->shared ? tdl__sem_shared_release(s) : give(s); }

uint32_t tdl_sem_value(const tdl_sem *s) { return s->shared ? tdl__sem_shared_value(s) : s->value; }

int tdl_sem_destroy(tdl_sem *s)
{
  if (s->shared)
    return tdl__sem_shared_destroy(s);
  if (!tdl__list_empty(&s->waiters) || s->inside)
    return -EBUSY;
  uint32_t max = s->max;
  *s = (tdl_sem)TDL_SEM_INIT(0, max);
  return 0;
}
