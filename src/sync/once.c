/* SPDX-License-Identifier: MIT */
/*
 * Once: run an initialization function exactly once, successfully.  While
 * it runs, the runner's fiber holds it (one of the fiber's cleanups): a
 * runner that finishes inside fn counts as a failed run.
 */
#include "fiber/waitq.h"

enum { ONCE_NEVER = 0, ONCE_RUNNING = 1, ONCE_DONE = 2 };

void tdl_once_init(tdl_once *o) { *o = (tdl_once)TDL_ONCE_INIT; }

/* The run failed (or its fiber finished inside fn): make the oldest live
 * waiter the next runner, or let the next caller try. */
static void pass(tdl_once *o)
{
  tdl__waiter *w = tdl__waitq_take(&o->waiters);
  if (w) {
    o->runner = w->f;
    w->run = 1;
    tdl__waiter_grant(w);
  } else {
    o->runner = NULL;
    o->state = ONCE_NEVER;
  }
}

static void runner_died(tdl__cleanup *c) { pass(TDL__CONTAINER_OF(c, tdl_once, held)); }

int tdl_once_call(tdl_once *o, int (*fn)(void *arg), void *arg, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e == -EPERM)
    return e;
  if (!fn)
    return -EINVAL;
  if (e < 0)
    return e;
  if (TDL__LIKELY(o->state == ONCE_DONE))
    return 0;
  if (o->state == ONCE_RUNNING) {
    if (o->runner == f)
      return -EDEADLK;
    tdl__waiter w = {.f = f};
    int r = tdl__waitq_park(&o->waiters, &w, "once", deadline);
    if (!w.granted) {
      tdl__waitq_leave(&w);
      return r;
    }
    if (f->cancelled) {
      if (w.run)
        pass(o);
      return -ECANCELED;
    }
    if (!w.run)
      return 0;
    /* The previous run failed and this fiber is the next runner. */
  } else {
    o->state = ONCE_RUNNING;
    o->runner = f;
  }

  o->held.run = runner_died;
  tdl__cleanup_add(f, &o->held);
  e = fn(arg);
  tdl__cleanup_del(&o->held);
  if (e < 0) {
    pass(o);
    return e;
  }
  o->state = ONCE_DONE;
  o->runner = NULL;
  tdl__waiter *w;
  while ((w = tdl__waitq_take(&o->waiters)) != NULL)
    tdl__waiter_grant(w);
  return 0;
}

bool tdl_once_done(const tdl_once *o) { return o->state == ONCE_DONE; }

int tdl_once_destroy(tdl_once *o)
{
  if (o->state == ONCE_RUNNING || !tdl__list_empty(&o->waiters))
    return -EBUSY;
  *o = (tdl_once)TDL_ONCE_INIT;
  return 0;
}
