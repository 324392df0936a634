/* SPDX-License-Identifier: MIT */
/* The wait group: a count of outstanding tasks; waiters wake at zero. */
#include "sync/sync_internal.h"

void tdl_waitgroup_init(tdl_waitgroup *wg) { *wg = (tdl_waitgroup)TDL_WAITGROUP_INIT; }

int tdl_waitgroup_add(tdl_waitgroup *wg, int64_t delta)
{
  if (wg->shared)
    return tdl__waitgroup_shared_add(wg, delta);
  int64_t n;
  if (__builtin_add_overflow(wg->count, delta, &n))
    return delta > 0 ? -EOVERFLOW : -EINVAL;
  if (n < 0)
    return -EINVAL;
  wg->count = n;
  if (n == 0) {
    tdl__waiter *w;
    while ((w = tdl__waitq_take(&wg->waiters)) != NULL)
      tdl__waiter_grant(w);
  }
  return 0;
}

int tdl_waitgroup_done(tdl_waitgroup *wg) { return tdl_waitgroup_add(wg, -1); }

int tdl_waitgroup_wait(tdl_waitgroup *wg, tdl_time_t deadline)
{
  if (wg->shared)
    return tdl__waitgroup_shared_wait(wg, deadline);
  tdl__fiber *f;
  int r = tdl__may_block(&f);
  if (r < 0)
    return r;
  if (wg->count == 0)
    return 0;
  tdl__waiter w = {.f = f};
  r = tdl__waitq_park(&wg->waiters, &w, "waitgroup", deadline);
  if (!w.granted) {
    tdl__waitq_leave(&w);
    return r;
  }
  return f->cancelled ? -ECANCELED : 0;
}

int64_t tdl_waitgroup_count(const tdl_waitgroup *wg) { return wg->shared ? tdl__waitgroup_shared_count(wg) : wg->count; }

int tdl_waitgroup_destroy(tdl_waitgroup *wg)
{
  if (wg->shared)
    return tdl__waitgroup_shared_destroy(wg);
  if (!tdl__list_empty(&wg->waiters))
    return -EBUSY;
  *wg = (tdl_waitgroup)TDL_WAITGROUP_INIT;
  return 0;
}
