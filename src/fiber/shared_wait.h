/* SPDX-License-Identifier: MIT */
/*
 * Waiting across threads (shared_wait.c): what shared channels, semaphores and
 * wait groups have in common.  A fiber that must wait puts a record on its
 * own stack into the object's queue (under the object's spinlock) and
 * parks; whoever ends its wait, from any thread, takes the record's claim
 * (its own, or its select's), unlinks it, sets its status and delivers the
 * wake: directly when it runs on the waiter's loop, else by posting the
 * record's post to that loop.  A waiter whose deadline or cancel came first
 * closes the claim itself and unhangs; if it finds the claim taken it waits
 * for the delivery (uncancellably: it is on its way), because the post in
 * flight lives in its record.  While it waits, its loop counts it, so that
 * parked fibers there are not taken for a deadlock.
 */
#ifndef TDL_SYNC_XWAIT_H
#define TDL_SYNC_XWAIT_H

#include <stddef.h>

#include "fiber/waitq.h"

/* What a waker tells a waiting record (its status). */
enum {
  TDL__SHARED_RETRY = 1, /* something may be there now: try again */
  TDL__SHARED_MOVED = 0, /* done for it: a value moved, a permit was granted */
  /* or -EPIPE (closed) */
};

/* The first 64 bytes are everything a wake touches when the waiter spins
 * in place (tdl__shared_wait_spin): when the record sits on a line of its
 * own (TDL__SHARED_WAIT_ALIGN), such a wake moves that one line to the
 * waker and back.  A wake posted to the waiter's loop also writes the post,
 * on the second line. */
typedef struct tdl__shared_wait {
  tdl__list link;
  tdl__claim own;
  int status;         /* set by the waker */
  int clause;         /* a select's clause; 0 for a plain wait */
  int delivered;      /* the wake has arrived (the waiter's thread only) */
  int in_place;       /* atomic: TDL__SHARED_SPINNING, TDL__SHARED_WOKEN, or 0 */
  int using;          /* counted among its object's users (the object's own count) */
  tdl__claim *claim;  /* the record's own, or its select's */
  void *val;          /* channels, unbuffered: the fiber's value buffer, or inl */
  unsigned char inl[8]; /* a value of up to 8 bytes, moved on this line */
  tdl__fiber *f;
  tdl_post post;
  tdl_loop *loop;
  int expecting;      /* counted in its loop (tdl__remote_expect) */
} tdl__shared_wait;

/* in_place: the waiter watches its record, running (not parked), and the
 * waker that takes its claim wakes it by setting TDL__SHARED_WOKEN there
 * instead of posting to its loop. */
enum { TDL__SHARED_SPINNING = 1, TDL__SHARED_WOKEN = 2 };

/* For a record on a fiber's stack (a declaration's alignment; the type has
 * none of its own, so that records inside other structures need none). */
#define TDL__SHARED_WAIT_ALIGN _Alignas(64)
_Static_assert(sizeof(void *) != 8 || offsetof(tdl__shared_wait, f) == 64, "what a waker writes fills one line");

/* A spinlock: the sections it guards are a few dozen instructions. */
static inline void tdl__spin_lock(int *l)
{
  for (;;) {
    if (!__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
      return;
    while (__atomic_load_n(l, __ATOMIC_RELAXED))
      tdl__cpu_relax();
  }
}

static inline void tdl__spin_unlock(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* Set w up for the running fiber f (claim: w's own unless the caller set a
 * select's); counts it in its loop.  0, or the errors of making the loop's
 * port. */
int tdl__shared_wait_prepare(tdl__shared_wait *w, tdl__fiber *f);
/* The wait is over for good (after the last touch of the object). */
void tdl__shared_wait_done(tdl__shared_wait *w);

/* Under the object's lock: take the oldest record of q whose claim can be
 * taken (dropping the others: their own wait ended them), with status;
 * *count (may be NULL) counts the records of q. */
tdl__shared_wait *tdl__shared_wait_take(tdl__list *q, uint32_t *count, int status);
/* Every record of q into out, each with status. */
void tdl__shared_wait_take_all(tdl__list *q, uint32_t *count, int status, tdl__list *out);

/* Hand w its wake (outside the lock), or each record of a list. */
void tdl__shared_wait_deliver(tdl__shared_wait *w);
void tdl__shared_wait_deliver_all(tdl__list *l);

/* After the park: close the claim.  Returns -1 when nobody took it (the
 * caller unhangs and reports the park's error), else waits for the
 * delivery and returns 0: w->status says what came. */
int tdl__shared_wait_settle(tdl__shared_wait *w);

/* Before parking, hung and with its claim open: when the waiter's loop spins
 * (tdl_loop_options.spin) and has nothing else to run, watch the record for
 * up to the spin (bounded by the loop's next timer and the deadline) and
 * return true when a waker woke it in place: its claim is taken and its
 * status set, and there is nothing to settle or await (the record is over
 * but for reading it).  False: park as usual; a wake that came meanwhile
 * was posted to the loop. */
bool tdl__shared_wait_spin(tdl__shared_wait *w, tdl_time_t deadline);

/* For a record whose claim was taken: wait until its wake has arrived. */
void tdl__shared_wait_await(tdl__shared_wait *w);

#endif /* TDL_SYNC_XWAIT_H */
