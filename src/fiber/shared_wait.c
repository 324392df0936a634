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
  /* A waiter that spins in place sees this, and returns: the record may be
   * gone as soon as the exchange lands, so it is the last touch.  A waiter on
   * this thread cannot be spinning (this thread is running the waker). */
  int spinning = TDL__SHARED_SPINNING;
  if (__atomic_load_n(&w->in_place, __ATOMIC_RELAXED) == spinning &&
      __atomic_compare_exchange_n(&w->in_place, &spinning, TDL__SHARED_WOKEN, false, __ATOMIC_SEQ_CST,
                                  __ATOMIC_RELAXED))
    return;
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

bool tdl__shared_wait_spin(tdl__shared_wait *w, tdl_time_t deadline)
{
  tdl_loop *loop = w->loop;
  if (loop->spin <= 0)
    return false;
  /* Only with nothing else to run or to look at: a fiber ready, an fd's
   * callback due, a post or a wakeup come (0), or a timer due. */
  tdl_time_t span = tdl_loop_timeout(loop);
  if (span == 0)
    return false;
  if (span < 0 || span > loop->spin)
    span = loop->spin;
  tdl_time_t now = tdl__clock_now();
  if (deadline != TDL_FOREVER && deadline - now < span)
    span = deadline - now;
  if (span <= 0)
    return false;
  tdl_time_t until = now + span;
  /* A spin is the loop waiting, as in its poll, not a stall (loop.h's
   * watchdog). */
  tdl__heartbeat_home(loop);
  bool woken = true;
  /* Seen by a waker after it took the claim, or not at all: then it posts
   * (and the post ends the spin below). */
  __atomic_store_n(&w->in_place, TDL__SHARED_SPINNING, __ATOMIC_SEQ_CST);
  do {
    for (int i = 0; i < 64; i++) {
      if (__atomic_load_n(&w->in_place, __ATOMIC_ACQUIRE) == TDL__SHARED_WOKEN)
        goto out;
      if (tdl__remote_has_work(loop))
        goto stop; /* a post (maybe this wait's own wake) or a wakeup */
      tdl__cpu_relax();
    }
  } while (tdl__clock_now() < until);
stop:;
  int spinning = TDL__SHARED_SPINNING;
  woken = !__atomic_compare_exchange_n(&w->in_place, &spinning, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE);
out:
  /* (No write to the record when woken: its line goes back to the waker's
   * core only if this fiber's next wait is there.) */
  if (TDL__UNLIKELY(loop->watch != NULL))
    tdl__heartbeat_away_at(loop, tdl__clock_now());
  return woken;
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
