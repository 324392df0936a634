/*
 * The blocking-work pool, inside (see include/treadle/pool.h).
 *
 * pool.c owns the threads and the lanes' queues; blocking.c is the fiber
 * side: it makes a tdl__work, hands it to tdl__pool_submit, parks, and is
 * woken when the work comes back to its loop.  A work item belongs to the
 * pool from submission until its thread has run (or skipped) it, then
 * travels home as a post to the caller's port; the caller's loop frees it.
 */
#ifndef TDL_POOL_INTERNAL_H
#define TDL_POOL_INTERNAL_H

#include "fiber/fiber_internal.h"

typedef struct tdl__work tdl__work;
struct tdl__work {
  tdl__work *next;           /* in its lane's queue (under the pool's lock) */
  void *(*fn)(void *arg);
  void *arg;
  void (*drop)(void *arg);   /* after an abandoned call: frees arg */
  void *result;
  void (*done)(tdl__work *w); /* on the pool thread once fn ran or was skipped:
                                 sends w home (blocking.c) */
  unsigned lane;
  tdl_time_t queued_at;      /* when submitted (the monitor reads it, under the pool's lock) */
  int abandoned;             /* atomic: the caller has gone; skip fn if not started */
  int ran;                   /* fn was called (the pool thread writes it before posting) */
  tdl_post back;             /* posted to home when done */
  tdl_port *home;            /* the caller's loop (a reference) */
  tdl__fiber *f;             /* the caller, NULL once gone (its thread only) */
  int arrived;               /* back home (the caller's thread only) */
};

/* Queue w in its lane; a thread runs w->fn (unless abandoned) and then
 * calls w->done(w) on that thread.  Returns 0, or -EAGAIN when no thread
 * exists and none could be started (w is not queued). */
int tdl__pool_submit(tdl__work *w);

/* Take w back if no thread has taken it yet: true when it was still
 * queued (it will not run, and done will not be called). */
bool tdl__pool_withdraw(tdl__work *w);

/*
 * From a fiber: run fn(arg) on a pool thread in `lane` and park until it has
 * run; its return value goes to *result.  Unlike tdl_pool_call, nothing
 * is allocated and the call cannot be abandoned once a thread has taken it:
 * a deadline or a cancel that comes first withdraws it if it has not started
 * (-ETIMEDOUT, -ECANCELED; fn never runs), and otherwise waits for it.  For
 * work that writes into the caller's memory (file reads).  Errors as
 * tdl_pool_call's.
 */
int tdl__blocking_run(tdl_lane lane, void *(*fn)(void *arg), void *arg, void **result, tdl_time_t deadline);

#endif /* TDL_POOL_INTERNAL_H */
