/* SPDX-License-Identifier: MIT */
/* Deferred callbacks: run once, on the loop's next iteration. */
#include <string.h>

#include "loop/loop_internal.h"

void tdl_defer_init(tdl_defer *d, tdl_defer_cb cb, void *data)
{
  memset(d, 0, sizeof *d);
  d->cb = cb;
  d->data = data;
}

int tdl_defer_queue(tdl_loop *loop, tdl_defer *d)
{
  TDL__CHECK_THREAD(loop);
  if (!tdl__list_linked(&d->link))
    tdl__list_push(&loop->defers, &d->link);
  return 0;
}

int tdl_defer_cancel(tdl_loop *loop, tdl_defer *d)
{
  TDL__CHECK_THREAD(loop);
  if (tdl__list_linked(&d->link))
    tdl__list_remove(&d->link);
  return 0;
}

void tdl__defer_run(tdl_loop *loop)
{
  /* Only what was queued before this iteration: the queue moves to a list of
   * its own, and callbacks queued meanwhile wait for the next iteration.  A
   * callback may cancel one still on that list: removal needs no head. */
  tdl__list now = {NULL, NULL};
  tdl__list_splice(&now, &loop->defers);
  tdl__list *n;
  while ((n = tdl__list_pop(&now)) != NULL) {
    tdl_defer *d = TDL__CONTAINER_OF(n, tdl_defer, link);
    d->cb(loop, d);
  }
}
