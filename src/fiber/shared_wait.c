/* SPDX-License-Identifier: MIT */
/* Waiting across threads: see shared_wait.h. */
#include "fiber/shared_wait.h"

static void arrive(tdl_loop *loop, tdl_post *p)
{
  (void)loop; /* the waiter's loop lives while it waits */
  tdl__shared_wait *w = p->data;
  w->delivered = 1;
  tdl__wake(w->f, w->clause);
}

void tdl__shared_wait_deliver(tdl__shared_wait *w)
{
  if (w->loop == tdl__tl_loop) {
    w->delivered = 1;
    tdl__wake(w->f, w->clause);
  } else {
    tdl_post_init(&w->post, arrive, w);
    (void)tdl_port_post(w->loop->port, &w->post); /* the waiter keeps its loop: not refused */
  }
}

void tdl__shared_wait_deliver_all(tdl__list *l)
{
  tdl__list *n;
  while ((n = tdl__list_pop(l)) != NULL)
    tdl__shared_wait_deliver(TDL__CONTAINER_OF(n, tdl__shared_wait, link));
}

tdl__shared_wait *tdl__shared_wait_take(tdl__list *q, uint32_t *count, int status)
{
  tdl__list *n;
  while ((n = tdl__list_pop(q)) != NULL) {
    if (count)
      __atomic_add_fetch(count, -1, __ATOMIC_SEQ_CST);
    tdl__shared_wait *w = TDL__CONTAINER_OF(n, tdl__shared_wait, link);
    if (tdl__claim_take(w->claim, w->clause)) {
      w->status = status;
      return w;
    }
  }
  return NULL;
}

void tdl__shared_wait_take_all(tdl__list *q, uint32_t *count, int status, tdl__list *out)
{
  tdl__shared_wait *w;
  while ((w = tdl__shared_wait_take(q, count, status)) != NULL)
    tdl__list_push(out, &w->link);
}

int tdl__shared_wait_prepare(tdl__shared_wait *w, tdl__fiber *f)
{
  w->f = f;
  w->loop = f->sched->loop;
  w->delivered = 0;
  if (!w->claim)
    w->claim = &w->own;
  int e = tdl__remote_expect(w->loop); /* makes the port if need be */
  w->expecting = e == 0;
  return e;
}

void tdl__shared_wait_done(tdl__shared_wait *w)
{
  if (w->expecting)
    tdl__remote_unexpect(w->loop);
  w->expecting = 0;
}

void tdl__shared_wait_await(tdl__shared_wait *w)
{
  while (!w->delivered)
    (void)tdl__park_uncancellable(w->f, "wake");
}

int tdl__shared_wait_settle(tdl__shared_wait *w)
{
  if (tdl__claim_close(w->claim) < 0)
    return -1;
  tdl__shared_wait_await(w);
  return 0;
}
