/* SPDX-License-Identifier: MIT */
/*
 * Sending behind (fiber.h: tdl_fd_writebehind), on loops whose back end is
 * uring.
 *
 * A connection's fiber that answers each request with a send(2) pays one
 * system call per answer, and on a uring loop that is the last one left per
 * request: the receive came through a multishot request (receiving ahead),
 * the wait through the loop's one io_uring_enter.  Sending behind copies a
 * small send into a buffer held for the fd and queues a send request for it,
 * which goes to the kernel with the loop's next io_uring_enter, together
 * with every other fd's; the fiber goes on at once.
 *
 * What that asks, and what is done about it:
 * - Order.  One send request per fd is in flight at a time; what is sent
 *   meanwhile queues behind it in the same buffer, and goes in one request
 *   once the first completes.  A send that does not fit (or is too large to
 *   copy, or has flags this cannot keep) waits until everything held has
 *   gone, then is made as usual.  The other write calls wait for that too.
 * - A short send (the socket's buffer was nearly full) sends the rest in a
 *   new request; so does a request the kernel dropped unrun (-ECANCELED
 *   that nobody asked for, see uring.c).  New requests are made from a
 *   deferred callback at the top of the next iteration, not from the
 *   completion, which runs inside the loop's reaping of the ring.
 * - Errors come later: a failed request drops what is held and leaves its
 *   error for the fd's next send, write or flush.
 * - Deadlines carry over: what is held is given up when the latest deadline
 *   of the sends that put it there passes (the request is cancelled and the
 *   error is -ETIMEDOUT).  One timer per record, kept armed lazily, as a
 *   fiber's park deadline is (sched.c): while nothing is held it counts as
 *   one of the loop's internal timers, and it is moved only when a deadline
 *   comes earlier than the one it is set for.
 * - A socket closed with data held still sends it: tdl_close duplicates the
 *   fd for the record (the fd number is the program's again at once) and
 *   submits what is queued before the close, so the kernel holds the file;
 *   the record closes the duplicate once the data has gone.  A send request
 *   in flight keeps the loop alive, as any ring operation does, until it
 *   completes or its deadline passes.  (The record's life with its fd, and
 *   the fiber parked on it, are fd/background.c's.)
 * - Memory: the buffer is taken when data is first held and given back
 *   when it has all gone, so an idle connection holds none.  Given back to
 *   the scheduler's spares, not to malloc: a loop answering a thousand
 *   connections per iteration takes and gives a thousand per iteration, and
 *   malloc, freeing 8 KiB blocks, trims its heap and faults the pages in
 *   again (measured: a tenth of the echo server's time).  What a whole trim
 *   period did not take goes back to malloc.
 */
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/sys.h"
#include "fd/fd_internal.h"

enum {
  CAP = TDL__BEHIND_BYTES,
  FLAGS_KEPT = MSG_NOSIGNAL | MSG_MORE | MSG_DONTWAIT,
};

/* The record's tdl__bg: req.op is the send request; armed while it is in
 * flight, stopping once its deadline passed and a cancel was asked for; fd
 * is a duplicate of the socket once orphaned, which frees the record once
 * nothing is held. */
typedef struct tdl__behind {
  tdl__bg bg;              /* first: the record is freed as a tdl__bg */
  tdl__behind_spares *spares;
  tdl_timer timer;         /* the deadline of what is held (lazy, see the top) */
  tdl_defer next;          /* the next request, made at the top of the loop */
  char *buf;               /* CAP bytes while data is held, else NULL */
  uint32_t sent;           /* buf[0, sent): gone */
  uint32_t flight;         /* buf[sent, flight): in the request in flight */
  uint32_t used;           /* buf[flight, used): queued behind it */
  int err;                 /* a request's failure: the next call's answer */
  int more;                /* MSG_MORE of the newest piece */
  tdl_time_t deadline;     /* the latest deadline of what is held */
  bool timer_lazy;         /* the timer serves nothing held (an internal timer) */
} tdl__behind;

static tdl_time_t later(tdl_time_t a, tdl_time_t b)
{
  return a == TDL_FOREVER || b == TDL_FOREVER ? TDL_FOREVER : a > b ? a : b;
}

static bool holding(const tdl__behind *b) { return b->used > b->sent || b->bg.armed || tdl_defer_active(&b->next); }

/* ---- buffers ---- */

static char *buf_take(tdl__behind_spares *sp)
{
  char *p = sp->head;
  if (p) {
    memcpy(&sp->head, p, sizeof sp->head);
    if (--sp->count < sp->low)
      sp->low = sp->count;
    return p;
  }
  sp->low = 0;
  return TDL__FAULT_ALLOC(malloc(CAP));
}

static void buf_give(tdl__behind_spares *sp, char *p)
{
  if (!sp) {
    free(p);
    return;
  }
  memcpy(p, &sp->head, sizeof sp->head);
  sp->head = p;
  sp->count++;
}

void tdl__behind_spares_trim(tdl__behind_spares *sp)
{
  for (; sp->low > 0 && sp->head; sp->low--, sp->count--) {
    char *p = sp->head;
    memcpy(&sp->head, p, sizeof sp->head);
    free(p);
  }
  sp->low = sp->count;
}

void tdl__behind_spares_free(tdl__behind_spares *sp)
{
  sp->low = sp->count;
  tdl__behind_spares_trim(sp);
}

/* ---- the deadline's timer ---- */

static void lazy_set(tdl__behind *b, bool lazy)
{
  if (b->timer_lazy == lazy)
    return;
  b->timer_lazy = lazy;
  if (lazy)
    b->bg.loop->timers_internal++;
  else
    b->bg.loop->timers_internal--;
}

/* What is held must go by b->deadline. */
static void deadline_arm(tdl__behind *b)
{
  if (b->deadline == TDL_FOREVER)
    return; /* a lazy timer, if any, stays lazy: nothing to enforce */
  if (tdl_timer_active(&b->timer)) {
    lazy_set(b, false);
    if (b->timer.at <= b->deadline)
      return; /* it fires first and is armed again for the rest */
  }
  if (tdl_timer_start_at(b->bg.loop, &b->timer, b->deadline, 0) < 0)
    return; /* no memory for the timer: the data goes without a deadline */
}

/* The end of a change to what is held: wake a fiber parked for room or a
 * flush, or free an orphan that holds nothing any more. */
static void changed(tdl__behind *b) { tdl__bg_changed(&b->bg, !holding(b)); }

static void finished(tdl__behind *b);

/* Give up what is held (no request is in flight), leaving err for the
 * next call. */
static void drop(tdl__behind *b, int err)
{
  b->err = err;
  if (tdl_defer_active(&b->next))
    tdl_defer_cancel(b->bg.loop, &b->next);
  finished(b);
}

static void deadline_cb(tdl_loop *loop, tdl_timer *t)
{
  tdl__behind *b = t->data;
  if (b->timer_lazy) {
    lazy_set(b, false);
    return;
  }
  if (!holding(b))
    return;
  if (b->deadline == TDL_FOREVER || loop->now < b->deadline) {
    deadline_arm(b); /* a later send moved the deadline */
    return;
  }
  if (b->bg.armed) {
    tdl__bg_stop(&b->bg);
    return; /* the completion drops the rest */
  }
  drop(b, -ETIMEDOUT);
  changed(b);
}

/* ---- requests ---- */

/* A request for what is held (with nothing in flight); when the ring has
 * no room even after submitting, what is held is given up. */
static void submit(tdl__behind *b)
{
  int err = -EBUSY;
  struct io_uring_sqe *sqe = tdl__ring_sqe(b->bg.loop, &b->bg.req.op, &err);
  if (!sqe) {
    drop(b, err);
    return;
  }
  io_uring_prep_send(sqe, b->bg.fd, b->buf + b->sent, b->used - b->sent, MSG_NOSIGNAL | b->more);
  b->flight = b->used;
  b->bg.armed = true;
  b->bg.stopping = false;
}

/* Nothing is held any more: the buffer goes back, the timer lapses. */
static void finished(tdl__behind *b)
{
  b->sent = b->flight = b->used = 0;
  if (b->buf) {
    buf_give(b->spares, b->buf);
    b->buf = NULL;
  }
  if (tdl_timer_active(&b->timer))
    lazy_set(b, true);
}

/* The next request, at the top of the loop: the rest of a short send, or
 * what queued behind the last one, moved to the buffer's start first. */
static void next_cb(tdl_loop *loop, tdl_defer *d)
{
  (void)loop;
  tdl__behind *b = d->data;
  if (b->bg.armed)
    return; /* (never: while `next` is queued, only it submits) */
  if (b->sent > 0) {
    memmove(b->buf, b->buf + b->sent, b->used - b->sent);
    b->used -= b->sent;
    b->sent = b->flight = 0;
  }
  if (b->used > 0)
    submit(b);
  else
    finished(b);
  changed(b); /* room, or the end */
}

static void sent_cb(tdl__op *op, int res)
{
  tdl__behind *b = TDL__CONTAINER_OF(op, tdl__behind, bg.req.op);
  b->bg.armed = false;
  if (res == -ECANCELED && !b->bg.stopping) {
    tdl_defer_queue(b->bg.loop, &b->next); /* dropped unrun by the kernel: again */
    return;
  }
  if (res <= 0) {
    /* 0 for a send of more than nothing: the stream is gone. */
    drop(b, res == -ECANCELED ? -ETIMEDOUT : res == 0 ? -EPIPE : res);
    changed(b);
    return;
  }
  b->sent += (uint32_t)res;
  if (b->sent < b->used) {
    tdl_defer_queue(b->bg.loop, &b->next);
    return;
  }
  finished(b);
  changed(b);
}

/* ---- the record ---- */

static bool behind_pending(const tdl__bg *bg)
{
  const tdl__behind *b = (const tdl__behind *)bg;
  return holding(b) || b->err;
}

/* The request in flight holds the file; what is queued behind it needs an
 * fd of its own, the program's being closed now: a duplicate, which the
 * record closes once the data has gone.  Without one (out of fds) only the
 * request in flight goes. */
static bool behind_orphan(tdl__bg *bg)
{
  tdl__behind *b = (tdl__behind *)bg;
  if (!holding(b))
    return false;
  int dup = tdl__sys_fcntl(bg->fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {
    b->used = b->flight;
    if (tdl_defer_active(&b->next))
      tdl_defer_cancel(bg->loop, &b->next);
    if (!bg->armed) {
      finished(b);
      return false;
    }
  }
  /* A request not yet submitted names the fd by number: hand it to the
   * kernel before the number is closed. */
  if (bg->armed)
    tdl__ring_submit(bg->loop);
  bg->fd = dup;
  b->spares = NULL; /* its buffer is freed, not kept: the scheduler may go first */
  return true;
}

static void behind_release(tdl__bg *bg)
{
  tdl__behind *b = (tdl__behind *)bg;
  if (bg->orphan && bg->fd >= 0)
    (void)tdl__sys_close(bg->fd);
  if (tdl_timer_active(&b->timer)) {
    tdl_timer_stop(bg->loop, &b->timer);
    lazy_set(b, false);
  }
  if (b->buf)
    buf_give(b->spares, b->buf);
}

static const tdl__bg_kind behind_kind = {
    .pending = behind_pending, .orphan = behind_orphan, .release = behind_release};

int tdl__behind_new(tdl_loop *loop, tdl__behind_spares *spares, int fd, tdl__bg **out)
{
  tdl__behind *b = tdl__bg_new(sizeof *b, &behind_kind, loop, fd);
  if (!b)
    return -ENOMEM;
  b->bg.req.op.done = sent_cb;
  b->spares = spares;
  b->deadline = TDL_FOREVER;
  tdl_timer_init(&b->timer, deadline_cb, b);
  tdl_defer_init(&b->next, next_cb, b);
  *out = &b->bg;
  return 0;
}

/* Park until a completion changes what is held (see tdl__bg_park). */
static int park(tdl__fiber *f, tdl__behind *b, tdl_time_t deadline, bool *closed)
{
  return tdl__bg_park(f, &b->bg, "send behind", deadline, closed);
}

static int take_err(tdl__behind *b)
{
  int e = b->err;
  b->err = 0;
  return e;
}

int tdl__behind_flush(tdl__fiber *f, tdl__bg *bg, tdl_time_t deadline, bool *closed)
{
  tdl__behind *b = (tdl__behind *)bg;
  *closed = false;
  while (holding(b)) {
    if (tdl__bg_busy(bg))
      return -EBUSY;
    int e = park(f, b, deadline, closed);
    if (e < 0)
      return e;
  }
  return take_err(b);
}

ssize_t tdl__behind_send(tdl__fiber *f, tdl__bg *bg, const void *buf, size_t len, int flags, tdl_time_t deadline,
                         bool *closed)
{
  tdl__behind *b = (tdl__behind *)bg;
  *closed = false;
  if (b->err)
    return take_err(b);
  if ((flags & ~FLAGS_KEPT) || !bg->on || len == 0 || len > CAP) {
    if ((flags & MSG_DONTWAIT) && holding(b))
      return -EAGAIN;
    int e = tdl__behind_flush(f, bg, deadline, closed);
    return e < 0 ? e : TDL__BG_PASS;
  }
  for (;;) {
    /* Room after what is held (a queued `next` moves the unsent part to
     * the start before it submits; the request in flight reads only its
     * own part). */
    if (len <= CAP - b->used) {
      if (!b->buf && !(b->buf = buf_take(b->spares)))
        return holding(b) ? -ENOMEM : TDL__BG_PASS;
      bool was_holding = holding(b);
      memcpy(b->buf + b->used, buf, len);
      b->used += (uint32_t)len;
      b->more = flags & MSG_MORE;
      b->deadline = was_holding ? later(b->deadline, deadline) : deadline;
      deadline_arm(b);
      if (!bg->armed && !tdl_defer_active(&b->next))
        submit(b);
      tdl__io_budget_spend_as(f, flags & MSG_DONTWAIT);
      return b->err ? take_err(b) : (ssize_t)len;
    }
    if (flags & MSG_DONTWAIT)
      return -EAGAIN;
    if (tdl__bg_busy(bg))
      return -EBUSY;
    int e = park(f, b, deadline, closed);
    if (e < 0)
      return e;
    if (b->err)
      return take_err(b);
  }
}
