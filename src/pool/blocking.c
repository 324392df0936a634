/*
 * tdl_pool_call: the fiber's side of the pool.
 *
 * The work item is allocated (it may outlive the fiber's wait), handed to
 * the pool, and comes back as a post to the caller's loop.  It belongs to
 * one side at a time: the pool until its thread is done with it, then the
 * caller's loop, which wakes the caller, or frees it (and drops its
 * argument) when the caller left at its deadline or on a cancel.  The one
 * field both threads read is `abandoned`, set by the leaving caller, so that
 * a thread that has not started the work skips it.
 */
#include <stdlib.h>

#include "pool/pool_internal.h"

static void dispose(tdl__work *w)
{
  if (w->drop)
    w->drop(w->arg);
  free(w);
}

/* Back on the caller's loop (NULL: that loop was freed, and the caller,
 * which would have kept it alive, with it). */
static void arrived(tdl_loop *loop, tdl_post *p)
{
  tdl__work *w = p->data;
  tdl_port_release(w->home);
  w->home = NULL;
  if (!loop || !w->f) {
    dispose(w);
    return;
  }
  w->arrived = 1;
  tdl__wake(w->f, 0);
}

static void send_home(tdl__work *w)
{
  if (tdl_port_post(w->home, &w->back) < 0) { /* the caller's loop has gone */
    tdl_port_release(w->home);
    dispose(w);
  }
}

/* A call that fails before the work was handed over still gives arg to
 * drop: then every failing call drops arg exactly once, now or later, and
 * the caller never has to tell "refused" from "abandoned". */
static int refuse(int e, void (*drop)(void *arg), void *arg)
{
  if (drop)
    drop(arg);
  return e;
}

int tdl_pool_call(tdl_lane lane, void *(*fn)(void *arg), void *arg, void (*drop)(void *arg), void **result,
                      tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block_until(&f, deadline);
  if (e == -EPERM)
    return refuse(e, drop, arg);
  if (!fn || (unsigned)lane >= TDL_LANES)
    return refuse(-EINVAL, drop, arg);
  if (e < 0)
    return refuse(e, drop, arg); /* fn never runs */
  tdl__work *w = TDL__FAULT_ALLOC(calloc(1, sizeof *w));
  if (!w)
    return refuse(-ENOMEM, drop, arg);
  w->fn = fn;
  w->arg = arg;
  w->drop = drop;
  w->lane = (unsigned)lane;
  w->done = send_home;
  w->f = f;
  tdl_post_init(&w->back, arrived, w);
  e = tdl_loop_port(&w->home, f->sched->loop);
  if (e == 0 && (e = tdl__pool_submit(w)) < 0)
    tdl_port_release(w->home);
  if (e < 0) {
    free(w);
    return refuse(e, drop, arg);
  }
  e = tdl__park(f, "blocking", -1, deadline);
  if (!w->arrived) {
    /* The deadline or a cancel came first: leave.  The pool skips the work
     * if it has not started; either way it comes home and is freed there. */
    __atomic_store_n(&w->abandoned, 1, __ATOMIC_RELEASE);
    w->f = NULL;
    return e < 0 ? e : -ECANCELED;
  }
  if (result)
    *result = w->result;
  free(w);
  return 0;
}

/* ---- tdl__blocking_run: the work lives on the caller's stack ---- */

/* Back on the caller's loop.  The caller waits for this whatever happens
 * (see below), so its loop cannot have been freed. */
static void arrived_here(tdl_loop *loop, tdl_post *p)
{
  (void)loop;
  tdl__work *w = p->data;
  tdl_port_release(w->home);
  w->home = NULL;
  w->arrived = 1;
  tdl__wake(w->f, 0);
}

static void send_home_here(tdl__work *w) { tdl_port_post(w->home, &w->back); }

int tdl__blocking_run(tdl_lane lane, void *(*fn)(void *arg), void *arg, void **result, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block_until(&f, deadline);
  if (e < 0)
    return e;
  tdl__work w = {.fn = fn, .arg = arg, .lane = (unsigned)lane, .done = send_home_here, .f = f};
  tdl_post_init(&w.back, arrived_here, &w);
  e = tdl_loop_port(&w.home, f->sched->loop);
  if (e == 0 && (e = tdl__pool_submit(&w)) < 0)
    tdl_port_release(w.home);
  if (e < 0)
    return e;
  e = tdl__park(f, "blocking", -1, deadline);
  if (!w.arrived) {
    if (tdl__pool_withdraw(&w)) { /* not started: it never will */
      tdl_port_release(w.home);
      return e < 0 ? e : -ECANCELED;
    }
    /* A thread has it, and it may write into the caller's memory: wait. */
    while (!w.arrived)
      tdl__park_uncancellable(f, "blocking (started)");
  }
  if (result)
    *result = w.result;
  return 0;
}
