/* SPDX-License-Identifier: MIT */
/*
 * tdl_pool_call: the fiber's side of the pool.
 *
 * The work item is a call that travels (fiber/call.h), allocated since it
 * may outlive the fiber's wait: handed to the pool, it comes back as a post
 * to the caller's loop, which wakes the caller, or frees it (and drops its
 * argument) when the caller left at its deadline or on a cancel.
 */
#include <stdlib.h>

#include "pool/pool_internal.h"

_Static_assert(offsetof(tdl__work, call) == 0, "work is freed through its call");

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
  w->lane = (unsigned)lane;
  e = tdl__call_init(&w->call, f, arg, drop);
  if (e == 0 && (e = tdl__pool_submit(w)) < 0)
    tdl__call_unsent(&w->call);
  if (e < 0) {
    free(w);
    return refuse(e, drop, arg);
  }
  /* Left at the deadline or on a cancel: the pool skips the work if it has
   * not started; either way it comes home and is freed there. */
  if ((e = tdl__call_wait(&w->call, "blocking", deadline)) < 0)
    return e;
  if (w->err < 0) { /* skipped by a shutdown: fn never ran, and arg goes to drop */
    e = w->err;
    free(w);
    return refuse(e, drop, arg);
  }
  if (result)
    *result = w->result;
  free(w);
  return 0;
}

/* ---- tdl__blocking_run: the work lives on the caller's stack ---- */

/* The caller never leaves this call: whatever happens, it waits for the
 * call to come home.  So its loop stays, the call always finds it there, and
 * the call, which lives on the caller's stack, is never freed. */
int tdl__blocking_run(tdl_lane lane, void *(*fn)(void *arg), void *arg, void **result, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block_until(&f, deadline);
  if (e < 0)
    return e;
  tdl__work w = {.fn = fn, .lane = (unsigned)lane};
  e = tdl__call_init(&w.call, f, arg, NULL);
  if (e == 0 && (e = tdl__pool_submit(&w)) < 0)
    tdl__call_unsent(&w.call);
  if (e < 0)
    return e;
  e = tdl__park(f, "blocking", -1, deadline);
  if (!w.call.arrived) {
    if (tdl__pool_withdraw(&w)) { /* not started: it never will */
      tdl__call_unsent(&w.call);
      return e < 0 ? e : -ECANCELED;
    }
    /* A thread has it, and it may write into the caller's memory, or a
     * shutdown took it and is sending it home: wait. */
    while (!w.call.arrived)
      tdl__park_uncancellable(f, "blocking (started)");
  }
  if (w.err < 0)
    return w.err; /* skipped by a shutdown */
  if (result)
    *result = w.result;
  return 0;
}
