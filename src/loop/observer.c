/* SPDX-License-Identifier: MIT */
/* Hooks: callbacks run on every iteration, before and after the poll. */
#include <string.h>

#include "loop/loop_internal.h"

void tdl_observer_init(tdl_observer *h, tdl_observer_cb cb, void *data)
{
  memset(h, 0, sizeof *h);
  h->cb = cb;
  h->data = data;
}

int tdl_observer_start(tdl_loop *loop, tdl_observer *h, tdl_observer_kind kind)
{
  TDL__CHECK_THREAD(loop);
  if (kind != TDL_OBSERVER_BEFORE_POLL && kind != TDL_OBSERVER_AFTER_POLL)
    return -EINVAL;
  if (tdl__list_linked(&h->link))
    tdl__list_remove(&h->link);
  h->kind = kind;
  tdl__list_push(&loop->hooks[kind], &h->link);
  return 0;
}

int tdl_observer_stop(tdl_loop *loop, tdl_observer *h)
{
  TDL__CHECK_THREAD(loop);
  if (tdl__list_linked(&h->link))
    tdl__list_remove(&h->link);
  return 0;
}

static void call_hook(tdl__list *n, void *loop)
{
  tdl_observer *h = TDL__CONTAINER_OF(n, tdl_observer, link);
  h->cb(loop, h);
}

void tdl__observers_run(tdl_loop *loop, int kind)
{
  /* A hook may stop itself or any other. */
  tdl__list_walk(&loop->hooks[kind], call_hook, loop);
}
