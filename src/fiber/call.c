/* SPDX-License-Identifier: MIT */
/* A call that travels (call.h). */
#include <stdlib.h>

#include "fiber/call.h"

/* The caller has left: whoever holds the call last frees it. */
static void dispose(tdl__call *c)
{
  if (c->drop)
    c->drop(c->arg);
  free(c);
}

/* Back on the caller's loop (NULL: that loop was freed, so the caller,
 * which would have kept it, has left). */
static void arrived(tdl_loop *loop, tdl_post *p)
{
  tdl__call *c = p->data;
  tdl_port_release(c->home);
  c->home = NULL;
  if (!loop || !c->f) {
    dispose(c);
    return;
  }
  c->arrived = 1;
  tdl__wake(c->f, 0);
}

int tdl__call_init(tdl__call *c, tdl__fiber *f, void *arg, void (*drop)(void *arg))
{
  int e = tdl_loop_port(&c->home, f->sched->loop);
  if (e < 0)
    return e;
  c->f = f;
  c->arg = arg;
  c->drop = drop;
  c->abandoned = 0;
  c->arrived = 0;
  tdl_post_init(&c->back, arrived, c);
  return 0;
}

void tdl__call_return(tdl__call *c)
{
  if (tdl_port_post(c->home, &c->back) < 0) { /* the caller's loop has gone, and the caller with it */
    tdl_port_release(c->home);
    dispose(c);
  }
}

int tdl__call_wait(tdl__call *c, const char *what, tdl_time_t deadline)
{
  int e = tdl__park(c->f, what, -1, deadline);
  if (c->arrived)
    return 0;
  /* The deadline or a cancel came first: leave.  The other side skips the
   * work if it has not started it; either way the call comes home (or finds
   * home gone) and is freed there. */
  __atomic_store_n(&c->abandoned, 1, __ATOMIC_RELEASE);
  c->f = NULL;
  return e < 0 ? e : -ECANCELED;
}
