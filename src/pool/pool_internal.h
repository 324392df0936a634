/* SPDX-License-Identifier: MIT */
/*
 * The blocking-work pool, inside (see include/treadle/pool.h).
 *
 * pool.c owns the threads and the lanes' queues; blocking.c is the fiber
 * side: it makes a tdl__work, hands it to tdl__pool_submit, parks, and is
 * woken when the work comes back to its loop.  A work item is a call that
 * travels (fiber/call.h): it belongs to the pool from submission until its
 * thread has run (or skipped) it, then travels home as a post to the
 * caller's port.
 */
#ifndef TDL_POOL_INTERNAL_H
#define TDL_POOL_INTERNAL_H

#include "fiber/call.h"

typedef struct tdl__work tdl__work;
struct tdl__work {
  tdl__call call;            /* first: work its caller left is freed through it; call.arg is fn's */
  tdl__work *next;           /* in its lane's queue (under the pool's lock) */
  void *(*fn)(void *arg);
  void *result;
  int err;                   /* 0, or -ESHUTDOWN: skipped by tdl_pool_shutdown (fn never ran) */
  unsigned lane;
  tdl_time_t queued_at;      /* when submitted (the monitor reads it, under the pool's lock) */
};

/* Queue w in its lane; a thread runs w->fn (unless abandoned) and then
 * sends w home (tdl__call_return), or a shutdown skips it and sends it home
 * with w->err set.  Returns 0, or -EAGAIN when no thread exists and none
 * could be started, -ESHUTDOWN when the pool is shut down (w is not
 * queued). */
int tdl__pool_submit(tdl__work *w);

/* Take w back if no thread has taken it yet: true when it was still
 * queued (it will not run, nor be sent home). */
bool tdl__pool_withdraw(tdl__work *w);

/*
 * From a fiber: run fn(arg) on a pool thread in `lane` and park until it has
 * run; its return value goes to *result.  Unlike tdl_pool_call, nothing
 * is allocated and the call cannot be abandoned once a thread has taken it:
 * a deadline or a cancel that comes first withdraws it if it has not started
 * (-ETIMEDOUT, -ECANCELED; fn never runs), and otherwise waits for it.  For
 * work that writes into the caller's memory (file reads).  Errors as
 * tdl_pool_call's (-ESHUTDOWN included).
 */
int tdl__blocking_run(tdl_lane lane, void *(*fn)(void *arg), void *arg, void **result, tdl_time_t deadline);

#endif /* TDL_POOL_INTERNAL_H */
