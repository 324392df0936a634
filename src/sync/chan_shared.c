/* SPDX-License-Identifier: MIT */
/*
 * Shared channels: a channel whose ends may be on different loops.
 *
 * Buffered (capacity > 0).  The values live in a bounded lock-free ring
 * (Vyukov's MPMC queue: each cell carries a sequence number that says whose
 * turn it is), so a send or a receive that need not wait touches only its
 * own index, the cell and, to see whether anybody waits, one counter: no
 * lock, no system call.  A fiber that must wait registers a record under the
 * channel's spinlock and parks; the other side, after it moved a value,
 * wakes one waiter of the opposite direction, which tries again.  Waiting is
 * an eventcount: the waiter counts itself in (a sequentially consistent
 * increment) before it looks at the ring once more, and the other side
 * looks at the count after a full fence, so that one of them always sees
 * the other.  That fence, on every send and receive, waits for the cell
 * just written to come over from the other core (a quarter of the time of
 * a message, measured): where the kernel offers membarrier(2), the fence
 * is made asymmetric instead.  The side that moves a value has only a
 * compiler barrier, and the rare side that counts itself in as a waiter
 * asks the kernel for a barrier on every running thread of the process
 * (MEMBARRIER_CMD_PRIVATE_EXPEDITED): each of them has then either
 * published its value before reading the count, or reads the count after
 * the increment.  Wakes are notifications, not hand-offs: a woken fiber may
 * find the value taken by one that did not wait, and waits again.
 *
 * Unbuffered (capacity 0).  A rendezvous needs a hand-off: everything goes
 * through the spinlock, and the side that finds a waiter of the other
 * direction moves the value straight between the two fibers' buffers.
 *
 * Waking across threads is shared_wait.h's: records, claims, deliveries.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sync/chan_internal.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)

typedef struct tdl__chan_shared {
  _Alignas(64) uint64_t tail; /* senders' position (atomic) */
  _Alignas(64) uint64_t head; /* receivers' position (atomic) */
  _Alignas(64) int lock;      /* a spinlock over the queues */
  uint32_t nrecv, nsend;      /* records queued, buffered only (atomic: read without
                                 the lock; an unbuffered channel reads its queues
                                 under the lock and keeps no count) */
  /* Calls that have waited, or may wait, and may still touch the channel:
   * hung records until their fibers let go of them, and buffered calls
   * from their first wait to their return (a wake makes them try again);
   * plus one while any reference is held.  tdl_chan_free refuses while
   * there is more than that one; whoever takes it to zero (the last
   * release, or the last call to leave after it) frees.  Atomic. */
  uint32_t users;
  uint32_t refs;              /* references (tdl_chan_retain); atomic */
  tdl_chan *ch;               /* the handle, freed with the state */
  int closed;                 /* atomic */
  tdl__list recvq, sendq;     /* tdl__shared_wait, under the lock */
  size_t cap, elem, cell;     /* cell: 8 bytes of sequence, then the value */
  size_t cells_n;             /* cap, but at least 2 (the ring's rule) */
  size_t mask;                /* cells_n - 1 when a power of two, else 0 */
  unsigned char *cells;
} tdl__chan_shared;

static inline void lock(tdl__chan_shared *x) { tdl__spin_lock(&x->lock); }

/* The count of op's queued records, or NULL: only a buffered channel keeps
 * one. */
static inline uint32_t *queued_count(tdl_chan *ch, int op)
{
  if (!ch->cap)
    return NULL;
  return op == TDL_SELECT_RECV ? &ch->shared->nrecv : &ch->shared->nsend;
}
static inline void unlock(tdl__chan_shared *x) { tdl__spin_unlock(&x->lock); }

static void destroy(tdl__chan_shared *x)
{
  free(x->ch);
  free(x->cells);
  free(x);
}

/* One user less; the last one out, once no reference is left, frees: this
 * is its last touch of the channel. */
static inline void users_drop(tdl__chan_shared *x)
{
  if (ADD(&x->users, -1) == 0)
    destroy(x);
}

/* w, hung on x, counts among its users until its fiber lets go of it; the
 * uncount is that fiber's last touch of x. */
static inline void use(tdl__chan_shared *x, tdl__shared_wait *w)
{
  ADD(&x->users, 1);
  w->using = 1;
}
static inline void unuse(tdl__chan_shared *x, tdl__shared_wait *w)
{
  if (w->using) {
    w->using = 0;
    users_drop(x);
  }
}

/* ---- the ring ---- */

static inline uint64_t *seq_at(tdl__chan_shared *x, uint64_t pos)
{
  size_t i = x->mask ? (size_t)(pos & x->mask) : (size_t)(pos % x->cells_n);
  return (uint64_t *)(void *)(x->cells + i * x->cell);
}

static bool ring_put(tdl__chan_shared *x, const void *val)
{
  uint64_t pos = __atomic_load_n(&x->tail, __ATOMIC_RELAXED);
  for (;;) {
    uint64_t *seq = seq_at(x, pos);
    int64_t dif = (int64_t)(__atomic_load_n(seq, __ATOMIC_ACQUIRE) - pos);
    if (dif == 0) {
      /* A ring of one cell cannot tell full from empty: capacity 1 has two
       * cells and counts. */
      if (x->cells_n != x->cap && pos - __atomic_load_n(&x->head, __ATOMIC_ACQUIRE) >= x->cap)
        return false;
      if (__atomic_compare_exchange_n(&x->tail, &pos, pos + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        tdl__copy_val(seq + 1, val, x->elem);
        __atomic_store_n(seq, pos + 1, __ATOMIC_RELEASE);
        return true;
      }
    } else if (dif < 0) {
      return false; /* full */
    } else {
      pos = __atomic_load_n(&x->tail, __ATOMIC_RELAXED);
    }
  }
}

static bool ring_get(tdl__chan_shared *x, void *val)
{
  uint64_t pos = __atomic_load_n(&x->head, __ATOMIC_RELAXED);
  for (;;) {
    uint64_t *seq = seq_at(x, pos);
    int64_t dif = (int64_t)(__atomic_load_n(seq, __ATOMIC_ACQUIRE) - (pos + 1));
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&x->head, &pos, pos + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        tdl__copy_val(val, seq + 1, x->elem);
        __atomic_store_n(seq, pos + x->cells_n, __ATOMIC_RELEASE);
        return true;
      }
    } else if (dif < 0) {
      return false; /* empty */
    } else {
      pos = __atomic_load_n(&x->head, __ATOMIC_RELAXED);
    }
  }
}

/* ---- the fences (see the top) ---- */

/* membarrier(2)'s commands, a stable part of the kernel's ABI, spelled out:
 * musl's headers have no <linux/membarrier.h>. */
enum {
  MB_CMD_QUERY = 0,
  MB_CMD_PRIVATE_EXPEDITED = 1 << 3,
  MB_CMD_REGISTER_PRIVATE_EXPEDITED = 1 << 4,
};

static int asym; /* membarrier is registered: set once, before the first channel exists */
static pthread_once_t asym_once = PTHREAD_ONCE_INIT;

static void asym_init(void)
{
#if !defined(TDL_TSAN) && defined(SYS_membarrier)
  /* ThreadSanitizer models no membarrier: its build keeps the fences. */
  long cmds = syscall(SYS_membarrier, MB_CMD_QUERY, 0, 0);
  if (cmds > 0 && (cmds & MB_CMD_PRIVATE_EXPEDITED) &&
      syscall(SYS_membarrier, MB_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
    asym = 1;
#endif
}

/* The waiter's side, after it counted itself in and before it looks again. */
static void heavy_fence(void)
{
#ifdef SYS_membarrier
  /* Registered, it does not fail (there is no error for this command but
   * EINVAL and EPERM, which registration ruled out). */
  if (__atomic_load_n(&asym, __ATOMIC_RELAXED))
    (void)syscall(SYS_membarrier, MB_CMD_PRIVATE_EXPEDITED, 0, 0);
#endif
}

/* ---- waking ---- */

/* A value or room came: wake one waiter of q, if any waits. */
static void notify_one(tdl__chan_shared *x, tdl__list *q, uint32_t *count)
{
  /* The ring's change, then the count (see the top).  ThreadSanitizer
   * models no fences: its build reads the count with a read-modify-write,
   * which orders the same way and which it understands. */
#ifdef TDL_TSAN
  if (!__atomic_fetch_add(count, 0, __ATOMIC_SEQ_CST))
    return;
#else
  if (__atomic_load_n(&asym, __ATOMIC_RELAXED))
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the waiter's membarrier is the other half */
  else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (!__atomic_load_n(count, __ATOMIC_RELAXED))
    return;
#endif
  lock(x);
  tdl__shared_wait *w = tdl__shared_wait_take(q, count, TDL__SHARED_RETRY);
  unlock(x);
  if (w)
    tdl__shared_wait_deliver(w);
}

/* ---- waiting ---- */

static bool hand_off(tdl__chan_shared *x, int op, void *val);

/* Unbuffered, a select's clause: a partner already waiting completes it
 * now (the lock keeps partners from both hanging and missing each other).
 * Returns 1 when it did (w's claim taken, status set), 0 otherwise; the lock
 * is held on return. */
static int hang_rendezvous(tdl__chan_shared *x, int op, tdl__shared_wait *w)
{
  if (LOAD(&x->closed)) {
    if (!tdl__claim_take(w->claim, w->clause))
      return 0;
    w->status = -EPIPE;
    w->delivered = 1;
    return 1;
  }
  tdl__list *q = op == TDL_SELECT_SEND ? &x->recvq : &x->sendq;
  if (tdl__list_empty(q) || !tdl__claim_take(w->claim, w->clause))
    return 0;
  if (hand_off(x, op, w->val)) { /* it unlocked */
    lock(x);
    w->status = TDL__SHARED_MOVED;
    w->delivered = 1;
    return 1;
  }
  /* Every record there had gone: we hold our own claim, so finish as an
   * unbuffered retry: the select tries again. */
  w->status = TDL__SHARED_RETRY;
  w->delivered = 1;
  return 1;
}

int tdl__chan_shared_hang(tdl_chan *ch, int op, tdl__shared_wait *w, tdl__fiber *f)
{
  tdl__chan_shared *x = ch->shared;
  int e = tdl__shared_wait_prepare(w, f);
  if (e < 0)
    return e;
  lock(x);
  if (!ch->cap && hang_rendezvous(x, op, w)) {
    unlock(x);
    tdl__shared_wait_done(w);
    return 1;
  }
  use(x, w);
  tdl__list_push(op == TDL_SELECT_RECV ? &x->recvq : &x->sendq, &w->link);
  uint32_t *count = queued_count(ch, op);
  if (count)
    ADD(count, 1);
  unlock(x);
  if (ch->cap)
    heavy_fence(); /* every caller looks at the ring again now */
  return 0;
}

void tdl__chan_shared_unhang(tdl_chan *ch, int op, tdl__shared_wait *w)
{
  tdl__chan_shared *x = ch->shared;
  lock(x);
  if (tdl__list_linked(&w->link)) {
    tdl__list_remove(&w->link);
    uint32_t *count = queued_count(ch, op);
    if (count)
      ADD(count, -1);
  }
  unlock(x);
  tdl__shared_wait_done(w);
  unuse(x, w);
}

/* Wait on ch for op: park until woken, the deadline, or a cancel.  Returns
 * the waker's status (TDL__SHARED_RETRY, TDL__SHARED_MOVED, -EPIPE), or the
 * park's error when nothing woke it.  The record is hung already.
 *
 * Once woken, the channel is ours only while the record still counts among
 * its users: a hand-off uncounts it (unuse_for), and then the last release,
 * or the owner's free, may free the channel and its handle before this
 * fiber runs again.  So x is read before the wait, while the record counts,
 * and after the wake nothing of ch or x is touched unless w->using says the
 * count is still ours. */
static int wait_for(tdl_chan *ch, int op, tdl__shared_wait *w, const char *what, tdl_time_t deadline)
{
  tdl__chan_shared *x = ch->shared;
  /* Woken in place, its claim is taken and its status set: nothing to
   * settle. */
  if (!tdl__shared_wait_spin(w, deadline)) {
    int r = tdl__park(w->f, what, -1, deadline);
    if (tdl__shared_wait_settle(w) < 0) {
      /* Nobody took the claim: still counted (hung, or dropped by a waker
       * that found the claim closed), so the channel is still there. */
      tdl__chan_shared_unhang(ch, op, w);
      return r < 0 ? r : -ECANCELED;
    }
  }
  tdl__shared_wait_done(w);
  unuse(x, w); /* touches x only while counted: then it is this fiber's last touch */
  return w->status;
}

/* ---- buffered ---- */

static int buffered_send_waiting(tdl_chan *ch, tdl__fiber *f, const void *val, tdl_time_t deadline)
{
  tdl__chan_shared *x = ch->shared;
  for (;;) {
    if (LOAD(&x->closed))
      return -EPIPE;
    if (ring_put(x, val)) {
      notify_one(x, &x->recvq, &x->nrecv);
      return 0;
    }
    if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now)
      return -ETIMEDOUT;
    TDL__SHARED_WAIT_ALIGN tdl__shared_wait w = {.clause = 0};
    w.claim = &w.own;
    int e = tdl__chan_shared_hang(ch, TDL_SELECT_SEND, &w, f);
    if (e < 0)
      return e;
    /* Counted in: look once more (a receiver may have made room between
     * our try and the count); else park. */
    if (!LOAD(&x->closed) && ring_put(x, val)) {
      if (tdl__claim_close(w.claim) >= 0)
        tdl__shared_wait_await(&w); /* a wake was on its way: absorb it */
      tdl__chan_shared_unhang(ch, TDL_SELECT_SEND, &w);
      notify_one(x, &x->recvq, &x->nrecv);
      return 0;
    }
    e = wait_for(ch, TDL_SELECT_SEND, &w, "chan send", deadline);
    if (e < 0 && e != -EPIPE)
      return e;
  }
}

static int buffered_recv_waiting(tdl_chan *ch, tdl__fiber *f, void *val, tdl_time_t deadline)
{
  tdl__chan_shared *x = ch->shared;
  for (;;) {
    if (ring_get(x, val)) {
      notify_one(x, &x->sendq, &x->nsend);
      return 0;
    }
    if (LOAD(&x->closed))
      return ring_get(x, val) ? 0 : -EPIPE; /* sent before the close: still received */
    if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now)
      return -ETIMEDOUT;
    TDL__SHARED_WAIT_ALIGN tdl__shared_wait w = {.clause = 0};
    w.claim = &w.own;
    int e = tdl__chan_shared_hang(ch, TDL_SELECT_RECV, &w, f);
    if (e < 0)
      return e;
    bool got = ring_get(x, val);
    if (got || LOAD(&x->closed)) {
      if (!got)
        got = ring_get(x, val); /* sent before the close: still received */
      if (tdl__claim_close(w.claim) >= 0)
        tdl__shared_wait_await(&w); /* a wake was on its way: absorb it */
      tdl__chan_shared_unhang(ch, TDL_SELECT_RECV, &w);
      if (!got)
        return -EPIPE;
      notify_one(x, &x->sendq, &x->nsend);
      return 0;
    }
    e = wait_for(ch, TDL_SELECT_RECV, &w, "chan recv", deadline);
    if (e < 0 && e != -EPIPE)
      return e;
  }
}

void tdl__chan_shared_use(tdl_chan *ch, bool on)
{
  if (on)
    ADD(&ch->shared->users, 1);
  else
    users_drop(ch->shared);
}

/* A buffered call that cannot complete at once counts among the channel's
 * users until it returns: a wake sends it back to the ring. */
static int buffered_send(tdl_chan *ch, tdl__fiber *f, const void *val, tdl_time_t deadline)
{
  tdl__chan_shared *x = ch->shared;
  if (LOAD(&x->closed))
    return -EPIPE;
  if (ring_put(x, val)) {
    notify_one(x, &x->recvq, &x->nrecv);
    return 0;
  }
  tdl__chan_shared_use(ch, true);
  int r = buffered_send_waiting(ch, f, val, deadline);
  tdl__chan_shared_use(ch, false);
  return r;
}

static int buffered_recv(tdl_chan *ch, tdl__fiber *f, void *val, tdl_time_t deadline)
{
  tdl__chan_shared *x = ch->shared;
  if (ring_get(x, val)) {
    notify_one(x, &x->sendq, &x->nsend);
    return 0;
  }
  tdl__chan_shared_use(ch, true);
  int r = buffered_recv_waiting(ch, f, val, deadline);
  tdl__chan_shared_use(ch, false);
  return r;
}

/* ---- unbuffered: hand-off under the lock ---- */

/* Under the lock, for a record whose claim the caller took: the record's
 * fiber need not come back to uncount itself (its wait is over, and a
 * MOVED wait does not touch the channel again: wait_for and rendezvous
 * read what they need before the wait), so the caller uncounts it
 * here, where the channel's line is already its own, and the woken fiber
 * runs on without pulling that line across.  Never the last user: the
 * caller's own call holds a reference (and with it the references' one);
 * should it be, the record keeps its count and its fiber drops it. */
static void unuse_for(tdl__chan_shared *x, tdl__shared_wait *w)
{
  if (!w->using)
    return;
  uint32_t n = LOAD(&x->users);
  while (n > 1)
    if (__atomic_compare_exchange_n(&x->users, &n, n - 1, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      w->using = 0;
      return;
    }
}

/* Move a value to or from a waiter of the other direction, if one waits. */
static bool hand_off(tdl__chan_shared *x, int op, void *val)
{
  tdl__shared_wait *peer = tdl__shared_wait_take(op == TDL_SELECT_SEND ? &x->recvq : &x->sendq, NULL,
                                                 TDL__SHARED_MOVED);
  if (!peer)
    return false;
  if (op == TDL_SELECT_SEND)
    tdl__copy_val(peer->val, val, x->elem);
  else
    tdl__copy_val(val, peer->val, x->elem);
  unuse_for(x, peer);
  unlock(x);
  tdl__shared_wait_deliver(peer);
  return true;
}

static int rendezvous(tdl_chan *ch, tdl__fiber *f, int op, void *val, tdl_time_t deadline)
{
  tdl__chan_shared *x = ch->shared;
  /* The record is set up only when the lock shows no partner, so a waiter's
   * one fallible step, making its loop's port (on first use), comes first.
   * The record's stack slot was most likely last written by the waker of
   * this fiber's previous wait: its line is fetched, owned, before the lock,
   * so that the partner spinning on the lock does not wait for it. */
  int e = tdl__remote_open(f->sched->loop);
  if (e < 0)
    return e;
  TDL__SHARED_WAIT_ALIGN tdl__shared_wait w;
  tdl__prefetch_write(&w);
  lock(x);
  if (LOAD(&x->closed)) {
    unlock(x);
    return -EPIPE;
  }
  if (hand_off(x, op, val))
    return 0;
  if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now) {
    unlock(x);
    return -ETIMEDOUT;
  }
  w = (tdl__shared_wait){.clause = 0, .val = val};
  w.claim = &w.own;
  /* A small value moves in the record's line, which the partner fetches
   * anyway, rather than in a line of the caller's of its own.  Its size is
   * kept here: once the value has moved the channel may be gone (see
   * wait_for). */
  size_t elem = x->elem;
  bool inl = elem <= sizeof w.inl;
  if (inl) {
    if (op == TDL_SELECT_SEND)
      tdl__copy_val(w.inl, val, elem);
    w.val = w.inl;
  }
  (void)tdl__shared_wait_prepare(&w, f); /* cannot fail now: the port is there */
  use(x, &w);
  tdl__list_push(op == TDL_SELECT_SEND ? &x->sendq : &x->recvq, &w.link);
  unlock(x);
  e = wait_for(ch, op, &w, op == TDL_SELECT_SEND ? "chan send" : "chan recv", deadline);
  if (e == TDL__SHARED_MOVED && inl && op == TDL_SELECT_RECV)
    tdl__copy_val(val, w.inl, elem);
  return e;
}

/* ---- the operations ---- */

int tdl__chan_shared_send(tdl_chan *ch, const void *val, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  if (ch->cap)
    return buffered_send(ch, f, val, deadline);
  return rendezvous(ch, f, TDL_SELECT_SEND, (void *)val, deadline);
}

int tdl__chan_shared_recv(tdl_chan *ch, void *val, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e < 0)
    return e;
  if (ch->cap)
    return buffered_recv(ch, f, val, deadline);
  e = rendezvous(ch, f, TDL_SELECT_RECV, val, deadline);
  return e;
}

int tdl__chan_shared_try_send(tdl_chan *ch, const void *val)
{
  tdl__chan_shared *x = ch->shared;
  if (LOAD(&x->closed))
    return -EPIPE;
  if (ch->cap) {
    if (!ring_put(x, val))
      return -EAGAIN;
    notify_one(x, &x->recvq, &x->nrecv);
    return 0;
  }
  lock(x);
  if (hand_off(x, TDL_SELECT_SEND, (void *)val))
    return 0;
  unlock(x);
  return -EAGAIN;
}

int tdl__chan_shared_try_recv(tdl_chan *ch, void *val)
{
  tdl__chan_shared *x = ch->shared;
  if (ch->cap) {
    if (ring_get(x, val)) {
      notify_one(x, &x->sendq, &x->nsend);
      return 0;
    }
    return LOAD(&x->closed) ? (ring_get(x, val) ? 0 : -EPIPE) : -EAGAIN;
  }
  lock(x);
  if (hand_off(x, TDL_SELECT_RECV, val))
    return 0;
  int closed = LOAD(&x->closed);
  unlock(x);
  return closed ? -EPIPE : -EAGAIN;
}

/* Closing ends every wait: unbuffered waiters with -EPIPE, buffered ones
 * try again and find it closed. */
static void end_waits(tdl_chan *ch)
{
  tdl__chan_shared *x = ch->shared;
  int status = ch->cap ? TDL__SHARED_RETRY : -EPIPE;
  tdl__list woken = {NULL, NULL};
  lock(x);
  tdl__shared_wait_take_all(&x->recvq, queued_count(ch, TDL_SELECT_RECV), status, &woken);
  tdl__shared_wait_take_all(&x->sendq, queued_count(ch, TDL_SELECT_SEND), status, &woken);
  unlock(x);
  tdl__shared_wait_deliver_all(&woken);
}

int tdl__chan_shared_close(tdl_chan *ch)
{
  tdl__chan_shared *x = ch->shared;
  if (__atomic_exchange_n(&x->closed, 1, __ATOMIC_SEQ_CST))
    return -EPIPE;
  end_waits(ch);
  return 0;
}

size_t tdl__chan_shared_len(const tdl_chan *ch)
{
  tdl__chan_shared *x = ch->shared;
  if (!ch->cap)
    return 0;
  uint64_t t = __atomic_load_n(&x->tail, __ATOMIC_ACQUIRE), h = __atomic_load_n(&x->head, __ATOMIC_ACQUIRE);
  return t > h ? (size_t)(t - h) : 0; /* a moment's view, as any length of a shared queue */
}

int tdl__chan_shared_new(tdl_chan *ch, size_t elem_size, size_t capacity)
{
  size_t cell = 8 + ((elem_size + 7) & ~(size_t)7);
  if (capacity && cell > TDL_CHAN_MAX_BYTES / capacity)
    return -EINVAL;
  (void)pthread_once(&asym_once, asym_init);
  tdl__chan_shared *x = TDL__FAULT_ALLOC(aligned_alloc(64, (sizeof *x + 63) & ~(size_t)63));
  if (!x)
    return -ENOMEM;
  memset(x, 0, sizeof *x);
  x->users = 1; /* the references' one */
  x->refs = 1;  /* the maker's */
  x->ch = ch;
  x->cap = capacity;
  x->elem = elem_size;
  x->cell = cell;
  x->cells_n = capacity == 1 ? 2 : capacity;
  x->mask = x->cells_n && !(x->cells_n & (x->cells_n - 1)) ? x->cells_n - 1 : 0;
  if (capacity) {
    x->cells = TDL__FAULT_ALLOC(aligned_alloc(64, (x->cells_n * cell + 63) & ~(size_t)63));
    if (!x->cells) {
      free(x);
      return -ENOMEM;
    }
    for (size_t i = 0; i < x->cells_n; i++)
      *(uint64_t *)(void *)(x->cells + i * cell) = i;
  }
  ch->shared = x;
  return 0;
}

int tdl__chan_shared_free(tdl_chan *ch)
{
  tdl__chan_shared *x = ch->shared;
  if (LOAD(&x->users) != 1 || LOAD(&x->refs) != 1)
    return -EBUSY;
  free(x->cells);
  free(x);
  ch->shared = NULL;
  return 0;
}

int tdl__chan_shared_retain(tdl_chan *ch)
{
  tdl__chan_shared *x = ch->shared;
  uint32_t n = LOAD(&x->refs);
  do {
    if (n == UINT32_MAX)
      return -EOVERFLOW;
  } while (!__atomic_compare_exchange_n(&x->refs, &n, n + 1, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return 0;
}

void tdl__chan_shared_release(tdl_chan *ch)
{
  tdl__chan_shared *x = ch->shared;
  if (ADD(&x->refs, -1) > 0)
    return;
  /* Nobody may start a call now; those inside wake, find it closed and
   * leave, the last of them freeing it (users_drop). */
  (void)tdl__chan_shared_close(ch);
  users_drop(x);
}

bool tdl__chan_shared_ready(tdl_chan *ch, int op)
{
  tdl__chan_shared *x = ch->shared;
  if (!ch->cap || LOAD(&x->closed))
    return LOAD(&x->closed) != 0;
  if (op == TDL_SELECT_RECV) {
    uint64_t pos = LOAD(&x->head);
    return __atomic_load_n(seq_at(x, pos), __ATOMIC_ACQUIRE) == pos + 1;
  }
  return LOAD(&x->tail) - LOAD(&x->head) < x->cap;
}
