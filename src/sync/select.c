/* SPDX-License-Identifier: MIT */
/*
 * Select: wait for the first of channel operations, fd readiness and an
 * unpark, with one deadline.
 *
 * Each kind of clause waits the way its own call does, and the first to end
 * the park wins:
 *  - a channel clause puts a record in the channel's queue (waitq.h); all
 *    the select's records share one tdl__select, so that a channel hands a
 *    value over only while no other clause has won;
 *  - an FD clause hangs a record on the fd's fiber-I/O state
 *    (tdl__fd_wait_begin) and wakes the fiber with its clause number; it
 *    transfers nothing, so a late wake after another clause won is harmless;
 *  - a PARK clause tells tdl_fiber_unpark which result ends the park.
 */
#include <poll.h>
#include <stdlib.h>

#include "base/sys.h"
#include "fd/fd_internal.h"
#include "sync/chan_internal.h"

enum { ON_STACK = 16 };

/* One clause's wait record, whichever its kind. */
typedef union clause {
  tdl__waiter chan;
  tdl__shared_wait shared; /* a shared channel's */
  tdl__fdwait fd;
} clause;

/* wait_all's "try everything again" (a shared channel's notification). */
enum { RETRY = -1000 };

static bool shared(const tdl_select_op *op)
{
  return (op->kind == TDL_SELECT_RECV || op->kind == TDL_SELECT_SEND) && op->ch && op->ch->shared;
}

/* Count the select among the users of its shared channels (on), from its
 * first wait to its return, or stop counting it (off). */
static void shared_enter(const tdl_select_op *ops, size_t n, bool on)
{
  for (size_t i = 0; i < n; i++)
    if (shared(&ops[i]))
      tdl__chan_shared_use(ops[i].ch, on);
}

static uint32_t pick(uint32_t n)
{
  static _Thread_local uint32_t x = 0x9e3779b9u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return (uint32_t)(((uint64_t)x * n) >> 32);
}

static bool is_on(const tdl_select_op *op)
{
  switch (op->kind) {
  case TDL_SELECT_RECV:
  case TDL_SELECT_SEND: return op->ch != NULL;
  case TDL_SELECT_FD: return op->fd >= 0;
  default: return true;
  }
}

/* Two clauses that would wait on the same queue. */
static bool clash(const tdl_select_op *a, const tdl_select_op *b)
{
  if (!is_on(a) || !is_on(b) || a->kind != b->kind)
    return false;
  if (a->kind == TDL_SELECT_FD)
    return a->fd == b->fd && (a->events & b->events);
  if (a->kind == TDL_SELECT_PARK)
    return true;
  return a->ch == b->ch;
}

/* -EINVAL for malformed ops; else the number of clauses that are on. */
static int check(const tdl_select_op *ops, size_t n)
{
  if ((!ops && n > 0) || n > INT32_MAX)
    return -EINVAL;
  int on = 0;
  for (size_t i = 0; i < n; i++) {
    int k = ops[i].kind;
    if (k < TDL_SELECT_RECV || k > TDL_SELECT_PARK)
      return -EINVAL;
    if (k == TDL_SELECT_FD && (ops[i].events == 0 || (ops[i].events & ~(TDL_READ | TDL_WRITE))))
      return -EINVAL;
    for (size_t j = 0; j < i; j++)
      if (clash(&ops[i], &ops[j]))
        return -EINVAL;
    on += is_on(&ops[i]);
  }
  return on;
}

/* Whether op can complete now; if so it did, and its result is set.  f is
 * NULL outside a fiber. */
static bool try_one(tdl__fiber *f, tdl_select_op *op)
{
  int r = -EAGAIN;
  switch (op->kind) {
  case TDL_SELECT_RECV: r = tdl_chan_try_recv(op->ch, op->val); break;
  case TDL_SELECT_SEND: r = tdl_chan_try_send(op->ch, op->val); break;
  case TDL_SELECT_PARK:
    if (f && f->permit) {
      f->permit = 0;
      r = 0;
    }
    break;
  case TDL_SELECT_FD: {
    /* Only tdl_try_select comes here: a select proper waits (see below). */
    struct pollfd p = {.fd = op->fd,
                       .events = (short)(((op->events & TDL_READ) ? POLLIN : 0) | ((op->events & TDL_WRITE) ? POLLOUT : 0))};
    if (tdl__sys_ppoll(&p, 1, &(struct timespec){0, 0}) == 1) {
      r = ((p.revents & POLLIN) ? TDL_READ : 0) | ((p.revents & POLLOUT) ? TDL_WRITE : 0) |
          ((p.revents & POLLERR) ? TDL_ERR : 0) | ((p.revents & POLLHUP) ? TDL_HUP : 0);
      if (p.revents & POLLNVAL)
        r = -EBADF;
    }
    break;
  }
  }
  if (r == -EAGAIN)
    return false;
  op->result = r;
  return true;
}

/* Complete one clause that can go now, from a random starting point; its
 * index, or -EAGAIN.  with_fds: FD clauses too (tdl_try_select). */
static int try_any(tdl__fiber *f, tdl_select_op *ops, size_t n, bool with_fds)
{
  size_t start = n ? pick((uint32_t)n) : 0;
  for (size_t k = 0; k < n; k++) {
    size_t i = start + k < n ? start + k : start + k - n;
    if (is_on(&ops[i]) && (with_fds || ops[i].kind != TDL_SELECT_FD) && try_one(f, &ops[i]))
      return (int)i;
  }
  return -EAGAIN;
}

int tdl_try_select(tdl_select_op *ops, size_t n)
{
  int e = check(ops, n);
  return e < 0 ? e : try_any(tdl__self(), ops, n, true);
}

/* An FD clause the loop knows to be ready (its index, result set), an
 * error, or -EAGAIN.  As in tdl_fd_wait, readiness cached but stale is
 * dropped on the way, so that those clauses wait. */
static int fds_ready(tdl__fiber *f, tdl_select_op *ops, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    if (ops[i].kind != TDL_SELECT_FD || ops[i].fd < 0)
      continue;
    int ev = tdl__fd_ready_now(f, ops[i].fd, ops[i].events);
    if (ev < 0)
      return ev;
    if (ev > 0) {
      ops[i].result = ev;
      return (int)i;
    }
  }
  return -EAGAIN;
}

/* Hang clause i's record: 0, 1 when it completed at once (a shared
 * unbuffered channel's partner was there), or an error (then nothing of it
 * is hung). */
static int hang(tdl__fiber *f, tdl_select_op *op, int i, clause *c, tdl__select *sel)
{
  if (shared(op)) {
    c->shared = (tdl__shared_wait){.clause = i, .claim = &sel->claim, .val = op->val};
    return tdl__chan_shared_hang(op->ch, op->kind, &c->shared, f);
  }
  switch (op->kind) {
  case TDL_SELECT_RECV:
  case TDL_SELECT_SEND:
    c->chan = (tdl__waiter){.f = f, .val = op->val, .sel = sel, .index = i};
    tdl__waitq_push(op->kind == TDL_SELECT_RECV ? &op->ch->recvq : &op->ch->sendq, &c->chan);
    return 0;
  case TDL_SELECT_FD:
    c->fd = (tdl__fdwait){.clause = i, .claim = &sel->claim};
    return tdl__fd_wait_begin(f, op->fd, op->events, &c->fd);
  default:
    f->unpark_result = i;
    f->unpark_claim = &sel->claim;
    return 0;
  }
}

static void unhang(tdl__fiber *f, const tdl_select_op *op, clause *c)
{
  if (shared(op)) {
    tdl__chan_shared_unhang(op->ch, op->kind, &c->shared);
    return;
  }
  switch (op->kind) {
  case TDL_SELECT_RECV:
  case TDL_SELECT_SEND: tdl__waitq_leave(&c->chan); break;
  case TDL_SELECT_FD: tdl__fd_wait_end(&c->fd); break;
  default:
    f->unpark_result = -1;
    f->unpark_claim = NULL;
    break;
  }
}

typedef struct parked {
  tdl_select_op *ops;
  clause *c;
  size_t n;
} parked;

static void unhang_all(tdl__fiber *f, parked *p)
{
  for (size_t i = 0; i < p->n; i++)
    if (is_on(&p->ops[i]))
      unhang(f, &p->ops[i], &p->c[i]);
}

/* A cancel or a deadline: let go of the fds at once (see fiber.h). */
static void abort_select(tdl__fiber *f) { unhang_all(f, f->abort_ctx); }

/* A shared buffered clause that could go now: between its try and its
 * record nobody could see us waiting, so look once more after hanging. */
static bool shared_ready(const tdl_select_op *ops, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (shared(&ops[i]) && ops[i].ch->cap && tdl__chan_shared_ready(ops[i].ch, ops[i].kind))
      return true;
  return false;
}

/* The winner r is a shared channel's clause: its wake may be on its way
 * from another thread (it lives in our record); then say what it means. */
static int shared_outcome(tdl_select_op *ops, clause *c, int r)
{
  tdl__shared_wait_await(&c[r].shared);
  int st = c[r].shared.status;
  if (st == TDL__SHARED_RETRY)
    return RETRY;
  ops[r].result = st; /* 0 (the value moved) or -EPIPE */
  return r;
}

/* Hang every clause, park, take everything down again.  Returns the
 * winning clause's index, park's error, or RETRY. */
static int wait_all(tdl__fiber *f, tdl_select_op *ops, size_t n, clause *c, tdl_time_t deadline)
{
  tdl__select sel = {.ops = ops};
  parked p = {ops, c, 0};
  int r = 0; /* hang's: 0 hung, 1 completed at once, < 0 an error */
  for (; p.n < n && r == 0; p.n++) {
    if (is_on(&ops[p.n]))
      r = hang(f, &ops[p.n], (int)p.n, &c[p.n], &sel);
  }
  if (r < 0)
    p.n--; /* the failed clause hung nothing */
  bool look = r == 0 && shared_ready(ops, n);
  if (r == 0 && !look) {
    f->abort_wait = abort_select;
    /* Read only through abort_wait, which is NULL again before p goes. */
    /* cppcheck-suppress autoVariables */
    f->abort_ctx = &p;
    r = tdl__park(f, "select", -1, deadline);
    f->abort_wait = NULL;
  }
  /* Whoever took the claim won: also when the deadline, a cancel or a
   * failed hang came first (the clause completed meanwhile: it must be
   * reported, and a wake on its way from another thread lives in our
   * record). */
  int won = tdl__claim_close(&sel.claim);
  if (won >= 0)
    r = won;
  else if (look)
    r = RETRY;
  unhang_all(f, &p);
  if (won >= 0 && shared(&ops[won]))
    return shared_outcome(ops, c, won);
  if (won >= 0 && ops[won].kind == TDL_SELECT_FD)
    ops[won].result = c[won].fd.events;
  else if (won >= 0 && ops[won].kind == TDL_SELECT_PARK)
    ops[won].result = 0;
  return r;
}

int tdl_select(tdl_select_op *ops, size_t n, tdl_time_t deadline)
{
  int on = check(ops, n);
  if (on < 0)
    return on;
  if (on == 0 && deadline == TDL_FOREVER)
    return -EINVAL; /* nothing could ever end this wait */
  tdl__fiber *f;
  int r = tdl__may_block(&f);
  if (r < 0)
    return r;
  clause local[ON_STACK], *c = local;
  bool entered = false;
  do {
    if ((r = try_any(f, ops, n, false)) != -EAGAIN)
      break;
    if ((r = fds_ready(f, ops, n)) != -EAGAIN)
      break;
    if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now) {
      r = -ETIMEDOUT;
      break;
    }
    if (c == local && n > ON_STACK && !(c = TDL__FAULT_ALLOC(malloc(n * sizeof *c)))) {
      c = local;
      r = -ENOMEM;
      break;
    }
    if (!entered) /* a wake from a shared channel may send us back to it */
      shared_enter(ops, n, entered = true);
    r = wait_all(f, ops, n, c, deadline);
  } while (r == RETRY);
  if (entered)
    shared_enter(ops, n, false);
  if (c != local)
    free(c); /* cppcheck-suppress autovarInvalidDeallocation ; it misses the test above */
  return r;
}
