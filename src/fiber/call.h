/* SPDX-License-Identifier: MIT */
/*
 * A call that travels (call.c): how a fiber has work done on another thread
 * and waits for its result.  tdl_port_call and tdl_port_spawn (group/) send
 * it to another loop, tdl_pool_call and tdl__blocking_run (pool/) to a pool
 * thread.
 *
 * The caller sends the call there and parks; the other side does the work,
 * or skips it, and sends the call home as a post to the caller's loop, whose
 * callback wakes the caller.  The call belongs to one side at a time, so it
 * needs no lock and no count.  The one field both threads read is
 * `abandoned`: a caller whose deadline or cancel comes first leaves and sets
 * it, so that the other side skips work it has not started; the call then
 * finds nobody at home, and whoever holds it last frees it, giving its
 * argument to `drop`.  A call that its caller may leave (tdl__call_wait) is
 * therefore the first member of a record from malloc(), which is freed
 * through it.
 */
#ifndef TDL_FIBER_CALL_H
#define TDL_FIBER_CALL_H

#include "fiber/fiber_internal.h"

typedef struct tdl__call {
  tdl_post back;           /* posted home once the work is done or skipped */
  tdl_port *home;          /* the caller's loop (a reference, until the call is back) */
  tdl__fiber *f;           /* the caller; NULL once it has left (its thread only) */
  void *arg;               /* the work's argument */
  void (*drop)(void *arg); /* frees arg when the caller has left; NULL: nothing to free */
  int abandoned;           /* atomic: the caller has left */
  int arrived;             /* back home (the caller's thread only) */
} tdl__call;

/* The caller, before it sends c: c will come home to f's loop.  0, or
 * tdl_loop_port's error (c then holds nothing). */
int tdl__call_init(tdl__call *c, tdl__fiber *f, void *arg, void (*drop)(void *arg));

/* The caller: c did not go, or was taken back before the other side had it.
 * Gives back what tdl__call_init took (not arg: that is the caller's). */
static inline void tdl__call_unsent(tdl__call *c) { tdl_port_release(c->home); }

/* The other side, before it starts the work: whether the caller has left
 * (then the work is not wanted). */
static inline bool tdl__call_abandoned(tdl__call *c) { return __atomic_load_n(&c->abandoned, __ATOMIC_ACQUIRE); }

/* The other side, once the work is done or skipped: send c home.  c is not
 * the sender's any more. */
void tdl__call_return(tdl__call *c);

/* The caller, once c went: park until c is back, and return 0 (c is the
 * caller's again, to read and free).  When the deadline or a cancel comes
 * first, leave: returns -ETIMEDOUT or -ECANCELED, and c is no longer the
 * caller's (it is freed once it is back, with arg dropped).  `what` names
 * the wait for tdl_fiber_dump (a static string). */
int tdl__call_wait(tdl__call *c, const char *what, tdl_time_t deadline);

#endif /* TDL_FIBER_CALL_H */
