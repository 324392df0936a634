/* SPDX-License-Identifier: MIT */
/*
 * Fibers a group places, and loops that steal the ones not yet started.
 *
 * A group fiber is a descriptor (fn, arg, options, its result and its
 * joiner) until a loop starts it; only then does it get a struct and a
 * stack, from that loop's cache, which takes them back when it ends.  So
 * what moves between threads is the descriptor alone, never a stack, and
 * a fiber that has run never moves (treadle.h, THREADS).
 *
 * Where descriptors wait, on each loop (tdl__spawner, members.h):
 *   - the ring: Go's run queue.  The owner pushes at tail (a store, no
 *     lock); the owner and thieves take at head with a compare-and-swap.  A
 *     thief copies half of what it sees into its own ring and then claims
 *     them with one CAS on the victim's head; if the owner or another thief
 *     moved head meanwhile, it tries again with what is there now.  A full
 *     ring moves half of itself to the group's shared queue (a list under a
 *     mutex, rarely touched);
 *   - the inbox: a lock-free stack other threads push onto (placement on
 *     another loop, spawns from outside the group), taken whole by the owner;
 *   - the stay list: the owner's own, for TDL_GROUP_SPAWN_STAY.
 *
 * Each loop runs `pump` before its poll: it moves its inbox, then starts
 * one descriptor (its stay list, its ring, the shared queue, else one stolen
 * from another loop), so that what stays queued is there for thieves.  When
 * it finds none and no fiber is runnable, it is idle: it says so, and looks
 * once more.  A spawner that pushed onto its own ring then reads the count
 * of idle loops; both sides use sequentially consistent operations, so either
 * the idle loop sees the push or the spawner sees the loop idle and wakes it
 * (only one at a time: `waking`, Go's spinning thread; a loop that found work
 * by stealing wakes the next).  A spawn costs no wake-up while no loop sleeps.
 *
 * Stopping: at its stop, a loop refuses further sends to its inbox (waiting
 * for senders in progress, as a port does) and ends what it holds with
 * -ESHUTDOWN; a loop that pumps while the group stops does the same, and at
 * its loop's end again, so that what a thief took just before is ended too.
 * The last loop to end empties the shared queue.  A descriptor is held by
 * one queue at a time (the CAS, the exchange, the mutex say which), so it
 * is started or ended exactly once.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "fiber/shared_wait.h"
#include "group/members.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define XCHG(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define RELAXED_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define RELAXED_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

enum { QUEUED = 0, RUNNING, DONE };

/* Every 61st start looks at the shared queue first (Go's figure), so that
 * overflowed fibers are not left behind a ring that keeps being refilled. */
enum { SHARED_TURN = 61 };

/* The member this thread runs (set from its setup to its end), or NULL. */
static _Thread_local tdl__member *t_member;

/* The member of g this thread runs, or NULL. */
static tdl__member *member_of(tdl_group *g) { return t_member && t_member->g == g ? t_member : NULL; }

struct tdl_group_fiber {
  tdl_group_fiber *next;  /* in an inbox, a stay list or the shared queue */
  tdl_group *g;
  tdl_fiber_fn fn;
  void *arg;
  size_t stack_size;
  int lock;               /* guards what follows */
  int refs;               /* atomic: its loop's (until it ends), the handle's, a cancel's in flight */
  uint8_t state;
  uint8_t stay;
  uint8_t cancelled;
  uint8_t joining;
  int error;              /* why it ended without running */
  void *result;
  unsigned where;         /* the loop that started it */
  tdl_fiber_t fiber;      /* and its handle there */
  tdl__list waiters;      /* the joiner's record */
  tdl__cleanup ended;     /* linked into its fiber: ends the descriptor */
  tdl_post cancel;        /* to its loop, by tdl_group_fiber_cancel */
  char name[24];
};

static void put(tdl_group_fiber *d)
{
  if (ADD(&d->refs, -1) == 0)
    free(d);
}

/* d has ended (ran and returned, or never started: err).  Wake its joiner
 * and drop the loop's reference. */
static void end(tdl_group_fiber *d, void *result, int err)
{
  tdl__spin_lock(&d->lock);
  d->result = result;
  d->error = err;
  d->state = DONE;
  tdl__shared_wait *w = tdl__shared_wait_take(&d->waiters, NULL, TDL__SHARED_MOVED);
  tdl__spin_unlock(&d->lock);
  if (w)
    tdl__shared_wait_deliver(w);
  put(d);
}

static void stay_push(tdl__spawner *sp, tdl_group_fiber *d);

/* ---- the ring ---- */

static bool ring_empty(tdl__spawner *sp) { return LOAD(&sp->head) == LOAD(&sp->tail); }

/* The owner: take one, or NULL. */
static tdl_group_fiber *ring_pop(tdl__spawner *sp)
{
  uint32_t h = __atomic_load_n(&sp->head, __ATOMIC_ACQUIRE);
  for (;;) {
    if (h == RELAXED_LOAD(&sp->tail))
      return NULL;
    tdl_group_fiber *d = RELAXED_LOAD(&sp->ring[h % TDL__RING]);
    if (__atomic_compare_exchange_n(&sp->head, &h, h + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return d;
  }
}

static void shared_push(tdl_group *g, tdl_group_fiber *first, tdl_group_fiber *last, uint32_t n)
{
  last->next = NULL;
  pthread_mutex_lock(&g->shared_lock);
  if (g->shared_last)
    g->shared_last->next = first;
  else
    g->shared = first;
  g->shared_last = last;
  STORE(&g->shared_n, g->shared_n + n);
  pthread_mutex_unlock(&g->shared_lock);
}

/* The owner: the ring is full; move half of it and d to the shared queue.
 * false when thieves took some meanwhile (there is room now). */
static bool ring_overflow(tdl_group *g, tdl__spawner *sp, uint32_t h, tdl_group_fiber *d)
{
  enum { HALF = TDL__RING / 2 };
  tdl_group_fiber *batch[HALF + 1];
  for (uint32_t i = 0; i < HALF; i++)
    batch[i] = RELAXED_LOAD(&sp->ring[(h + i) % TDL__RING]);
  if (!__atomic_compare_exchange_n(&sp->head, &h, h + HALF, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return false;
  batch[HALF] = d;
  for (uint32_t i = 0; i < HALF; i++)
    batch[i]->next = batch[i + 1];
  ADD(&sp->load, -(int64_t)(HALF + 1));
  shared_push(g, batch[0], d, HALF + 1);
  return true;
}

/* The owner: queue d.  The store of tail is sequentially consistent: the
 * spawner reads the idle count next (see the top). */
static void ring_push(tdl_group *g, tdl__spawner *sp, tdl_group_fiber *d)
{
  for (;;) {
    uint32_t h = __atomic_load_n(&sp->head, __ATOMIC_ACQUIRE), t = RELAXED_LOAD(&sp->tail);
    if (t - h < TDL__RING) {
      RELAXED_STORE(&sp->ring[t % TDL__RING], d);
      STORE(&sp->tail, t + 1);
      return;
    }
    if (!LOAD(&g->stealing)) {
      stay_push(sp, d); /* the shared queue is for every loop: this one keeps its own */
      return;
    }
    if (ring_overflow(g, sp, h, d))
      return;
  }
}

/* The thief (whose ring is empty): take half of victim's ring into its
 * own.  Returns how many. */
static uint32_t ring_steal(tdl__spawner *victim, tdl__spawner *thief)
{
  uint32_t t0 = RELAXED_LOAD(&thief->tail);
  for (;;) {
    uint32_t h = __atomic_load_n(&victim->head, __ATOMIC_ACQUIRE);
    uint32_t t = __atomic_load_n(&victim->tail, __ATOMIC_ACQUIRE);
    uint32_t n = t - h;
    n -= n / 2;
    if (n == 0)
      return 0;
    if (n > TDL__RING / 2)
      continue; /* head and tail read at different moments: look again */
    for (uint32_t i = 0; i < n; i++)
      RELAXED_STORE(&thief->ring[(t0 + i) % TDL__RING], RELAXED_LOAD(&victim->ring[(h + i) % TDL__RING]));
    if (__atomic_compare_exchange_n(&victim->head, &h, h + n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      __atomic_store_n(&thief->tail, t0 + n, __ATOMIC_RELEASE);
      return n;
    }
  }
}

/* ---- the other queues ---- */

/* The owner: a batch from the shared queue, the first returned and the rest
 * into its ring (which has room for them). */
static tdl_group_fiber *shared_take(tdl_group *g, tdl__member *m)
{
  if (!LOAD(&g->shared_n))
    return NULL;
  tdl__spawner *sp = &m->sp;
  pthread_mutex_lock(&g->shared_lock);
  uint32_t n = g->shared_n / g->n + 1, room = TDL__RING - (RELAXED_LOAD(&sp->tail) - LOAD(&sp->head));
  if (n > g->shared_n)
    n = g->shared_n;
  if (n > room / 2)
    n = room / 2 ? room / 2 : 1;
  tdl_group_fiber *first = g->shared, *d = first;
  for (uint32_t i = 0; i < n; i++) {
    g->shared = d->next;
    if (i > 0)
      ring_push(g, sp, d); /* never overflows: n is at most half the room */
    d = g->shared;
  }
  if (!g->shared)
    g->shared_last = NULL;
  STORE(&g->shared_n, g->shared_n - n);
  pthread_mutex_unlock(&g->shared_lock);
  ADD(&sp->load, (int64_t)n); /* the shared queue's count in no loop's load */
  return first;
}

static void stay_push(tdl__spawner *sp, tdl_group_fiber *d)
{
  d->next = NULL;
  if (sp->stay_last)
    sp->stay_last->next = d;
  else
    sp->stay = d;
  sp->stay_last = d;
}

static tdl_group_fiber *stay_pop(tdl__spawner *sp)
{
  tdl_group_fiber *d = sp->stay;
  if (d && !(sp->stay = d->next))
    sp->stay_last = NULL;
  return d;
}

/* Another thread: push d onto m's inbox and wake m.  -ESHUTDOWN when m
 * stops (d not queued). */
static int inbox_push(tdl__member *m, tdl_group_fiber *d)
{
  tdl__spawner *sp = &m->sp;
  ADD(&sp->posting, 1);
  if (LOAD(&sp->closed)) {
    ADD(&sp->posting, -1);
    return -ESHUTDOWN;
  }
  tdl_group_fiber *head = LOAD(&sp->inbox);
  do
    d->next = head;
  while (!__atomic_compare_exchange_n(&sp->inbox, &head, d, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  tdl_wakeup_send(&sp->kick); /* no system call unless it sleeps */
  ADD(&sp->posting, -1); /* the last touch of m's loop */
  return 0;
}

/* Wake m (to steal), unless it stops. */
static void kick(tdl__member *m)
{
  tdl__spawner *sp = &m->sp;
  ADD(&sp->posting, 1);
  if (!LOAD(&sp->closed))
    tdl_wakeup_send(&sp->kick);
  ADD(&sp->posting, -1);
}

/* The owner: move the inbox, oldest first, to the stay list or the ring. */
static void inbox_take(tdl__member *m)
{
  tdl__spawner *sp = &m->sp;
  if (!RELAXED_LOAD(&sp->inbox))
    return;
  tdl_group_fiber *d = XCHG(&sp->inbox, NULL), *fifo = NULL;
  while (d) {
    tdl_group_fiber *next = d->next;
    d->next = fifo;
    fifo = d;
    d = next;
  }
  while (fifo) {
    tdl_group_fiber *next = fifo->next;
    if (fifo->stay)
      stay_push(sp, fifo);
    else
      ring_push(m->g, sp, fifo);
    fifo = next;
  }
}

/* ---- waking an idle loop ---- */

/* Some loop other than `self` sleeps while there is work to steal: wake
 * one, unless one is being woken already. */
static void wake_idle(tdl_group *g, tdl__member *self)
{
  if (!LOAD(&g->nidle) || !LOAD(&g->stealing) || XCHG(&g->waking, 1))
    return;
  unsigned start = self ? self->index + 1 : 0;
  for (unsigned k = 0; k < g->n; k++) {
    tdl__member *m = &g->m[(start + k) % g->n];
    if (m != self && LOAD(&m->sp.idle)) {
      STORE(&m->sp.woken, 1);
      kick(m);
      return;
    }
  }
  STORE(&g->waking, 0);
}

/* Whether any queue holds a descriptor this member could take. */
static bool work_visible(tdl__member *m)
{
  tdl_group *g = m->g;
  if (LOAD(&m->sp.inbox) || LOAD(&g->shared_n) || !ring_empty(&m->sp))
    return true;
  if (!LOAD(&g->stealing))
    return false;
  for (unsigned k = 0; k < g->n; k++)
    if (!ring_empty(&g->m[k].sp))
      return true;
  return false;
}

/* ---- starting ---- */

static void ended_cleanup(tdl__cleanup *c)
{
  tdl_group_fiber *d = TDL__CONTAINER_OF(c, tdl_group_fiber, ended);
  ADD(&d->g->m[d->where].sp.load, -1);
  end(d, tdl__self()->result, 0);
}

static void *trampoline(void *arg)
{
  tdl_group_fiber *d = arg;
  d->ended.run = ended_cleanup; /* linked first, so it runs last: after the fiber's own cleanups */
  tdl__cleanup_add(tdl__self(), &d->ended);
  return d->fn(d->arg);
}

/* Take the next descriptor for m: its own first, then the shared queue,
 * then (when m has nothing else to run) another loop's. */
static tdl_group_fiber *next(tdl__member *m, bool may_steal)
{
  tdl_group *g = m->g;
  tdl__spawner *sp = &m->sp;
  tdl_group_fiber *d;
  if (++sp->ticks % SHARED_TURN == 0 && (d = shared_take(g, m)) != NULL)
    return d;
  if ((d = stay_pop(sp)) || (d = ring_pop(sp)) || (d = shared_take(g, m)))
    return d;
  if (!may_steal || g->n < 2 || !LOAD(&g->stealing))
    return NULL;
  sp->rand ^= sp->rand << 13;
  sp->rand ^= sp->rand >> 7;
  sp->rand ^= sp->rand << 17;
  unsigned start = (unsigned)(sp->rand % g->n);
  for (unsigned k = 0; k < g->n; k++) {
    tdl__member *v = &g->m[(start + k) % g->n];
    if (v == m)
      continue;
    uint32_t n = ring_steal(&v->sp, sp);
    if (n) {
      ADD(&v->sp.load, -(int64_t)n);
      ADD(&sp->load, (int64_t)n);
      if (n > 1)
        wake_idle(g, m); /* more to share: Go's spinning thread wakes the next */
      return ring_pop(sp);
    }
  }
  return NULL;
}

static void start(tdl__member *m, tdl_loop *loop, tdl_group_fiber *d)
{
  int e = -ESHUTDOWN;
  tdl_fiber_t h = 0;
  if (!LOAD(&m->g->stopping))
    e = tdl_fiber_spawn(&h, loop, trampoline, d,
                        &(tdl_fiber_options){.name = d->name[0] ? d->name : NULL, .stack_size = d->stack_size,
                                             .detached = true});
  if (e < 0) {
    ADD(&m->sp.load, -1);
    end(d, NULL, e);
    return;
  }
  tdl__spin_lock(&d->lock);
  d->where = m->index;
  d->fiber = h;
  d->state = RUNNING;
  bool cancelled = d->cancelled;
  tdl__spin_unlock(&d->lock);
  if (cancelled)
    tdl_fiber_cancel(loop, h);
}

/* End everything m holds without running it (the group stops). */
static void end_held(tdl__member *m)
{
  tdl__spawner *sp = &m->sp;
  inbox_take(m);
  tdl_group_fiber *d;
  while ((d = stay_pop(sp)) || (d = ring_pop(sp))) {
    ADD(&sp->load, -1);
    end(d, NULL, -ESHUTDOWN);
  }
}

/* Before the poll: start one group fiber, or go idle. */
static void pump(tdl_loop *loop, tdl_observer *o)
{
  tdl__member *m = o->data;
  tdl_group *g = m->g;
  if (!RELAXED_LOAD(&g->used))
    return; /* a group that never spawns pays one load per iteration */
  if (LOAD(&g->stopping)) {
    end_held(m);
    return;
  }
  inbox_take(m);
  tdl__sched *s = loop->sched;
  bool runnable = s && !tdl__queue_empty(&s->runq);
  tdl_group_fiber *d = next(m, !runnable);
  if (!d && !runnable) {
    /* Idle: say so, then look once more (see the top). */
    if (!XCHG(&m->sp.idle, 1))
      ADD(&g->nidle, 1);
    if (!work_visible(m) || !(d = next(m, true)))
      return; /* still idle: a later push wakes it */
    if (XCHG(&m->sp.idle, 0))
      ADD(&g->nidle, -1);
  }
  if (d)
    start(m, loop, d);
}

/* After the poll: not idle any more. */
static void unidle(tdl_loop *loop, tdl_observer *o)
{
  (void)loop;
  tdl__member *m = o->data;
  if (RELAXED_LOAD(&m->sp.idle) && XCHG(&m->sp.idle, 0))
    ADD(&m->g->nidle, -1);
  if (RELAXED_LOAD(&m->sp.woken) && XCHG(&m->sp.woken, 0))
    STORE(&m->g->waking, 0);
}

static void kicked(tdl_loop *loop, tdl_wakeup *wk)
{
  (void)loop;
  (void)wk; /* the wake itself was the point: the pump runs next */
}

/* ---- the member's life ---- */

int tdl__spawner_setup(tdl__member *m, tdl_loop *loop)
{
  tdl__spawner *sp = &m->sp;
  sp->rand = 0x9e3779b97f4a7c15ull * (m->index + 1);
  tdl_observer_init(&sp->before, pump, m);
  tdl_observer_init(&sp->after, unidle, m);
  tdl_wakeup_init(&sp->kick, kicked, m);
  int e = tdl_wakeup_start(loop, &sp->kick);
  if (e < 0)
    return e;
  tdl_observer_start(loop, &sp->before, TDL_OBSERVER_BEFORE_POLL);
  tdl_observer_start(loop, &sp->after, TDL_OBSERVER_AFTER_POLL);
  sp->counted = true;
  ADD(&m->g->running, 1);
  t_member = m;
  return 0;
}

/* Refuse further sends: after this, no other thread touches the inbox or
 * the wakeup. */
static void close_inbox(tdl__member *m, tdl_loop *loop)
{
  tdl__spawner *sp = &m->sp;
  STORE(&sp->closed, 1);
  while (LOAD(&sp->posting))
    sched_yield(); /* a sender is a few instructions from done */
  tdl_wakeup_stop(loop, &sp->kick);
}

void tdl__spawner_stop(tdl__member *m, tdl_loop *loop)
{
  close_inbox(m, loop);
  end_held(m);
}

void tdl__spawner_end(tdl__member *m, tdl_loop *loop)
{
  tdl__spawner *sp = &m->sp;
  close_inbox(m, loop);
  t_member = NULL;
  tdl_observer_stop(loop, &sp->before);
  tdl_observer_stop(loop, &sp->after);
  end_held(m); /* what a thief took in after the stop */
  if (LOAD(&sp->idle))
    ADD(&m->g->nidle, -1);
  STORE(&sp->idle, 0);
  if (!sp->counted)
    return;
  sp->counted = false;
  tdl_group *g = m->g;
  if (ADD(&g->running, -1) != 0)
    return;
  /* The last loop: no ring can overflow any more. */
  pthread_mutex_lock(&g->shared_lock);
  tdl_group_fiber *d = g->shared;
  g->shared = g->shared_last = NULL;
  STORE(&g->shared_n, 0);
  pthread_mutex_unlock(&g->shared_lock);
  while (d) {
    tdl_group_fiber *n = d->next;
    end(d, NULL, -ESHUTDOWN);
    d = n;
  }
}

int tdl__spawn_group_init(tdl_group *g)
{
  g->stealing = 1;
  int e = pthread_mutex_init(&g->shared_lock, NULL);
  return -e;
}

void tdl__spawn_group_destroy(tdl_group *g) { pthread_mutex_destroy(&g->shared_lock); }

/* ---- placement ---- */

static tdl__member *place(tdl_group *g, tdl__member *self)
{
  int how = LOAD(&g->placement);
  if (how == TDL_GROUP_CALLER && self)
    return self;
  unsigned turn = __atomic_fetch_add(&g->turn, 1, __ATOMIC_RELAXED);
  if (how != TDL_GROUP_LEAST_LOADED)
    return &g->m[turn % g->n];
  /* The caller's loop against the next three in turn; ties stay. */
  tdl__member *best = self ? self : &g->m[turn % g->n];
  int64_t least = RELAXED_LOAD(&best->sp.load);
  unsigned look = g->n - 1 < 3 ? g->n - 1 : 3;
  for (unsigned k = 0; k < look && least > 0; k++) {
    tdl__member *c = &g->m[(best->index + 1 + (turn + k) % (g->n - 1)) % g->n];
    int64_t l = RELAXED_LOAD(&c->sp.load);
    if (l < least) {
      least = l;
      best = c;
    }
  }
  return best;
}

/* ---- the public calls ---- */

int tdl_group_spawn(tdl_group_fiber **out, tdl_group *g, tdl_fiber_fn fn, void *arg, const tdl_fiber_options *opts,
                    unsigned flags)
{
  if (out)
    *out = NULL;
  if (!g || !fn || (flags & ~TDL_GROUP_SPAWN_STAY))
    return -EINVAL;
  size_t size = opts && opts->stack_size ? opts->stack_size : TDL_STACK_DEFAULT;
  if (size < TDL_STACK_MIN || size > TDL_STACK_MAX)
    return -EINVAL;
  if (LOAD(&g->stopping))
    return -ESHUTDOWN;
  tdl_group_fiber *d = TDL__FAULT_ALLOC(malloc(sizeof *d));
  if (!d)
    return -ENOMEM;
  memset(d, 0, sizeof *d);
  bool detached = !out || (opts && opts->detached);
  d->g = g;
  d->fn = fn;
  d->arg = arg;
  d->stack_size = size;
  d->refs = detached ? 1 : 2;
  d->stay = (flags & TDL_GROUP_SPAWN_STAY) != 0;
  if (opts && opts->name)
    strncpy(d->name, opts->name, sizeof d->name - 1);
  if (TDL__UNLIKELY(!RELAXED_LOAD(&g->used)) && !XCHG(&g->used, 1))
    for (unsigned k = 0; k < g->n; k++)
      kick(&g->m[k]); /* each loop pumps from now on: sleeping ones too */
  tdl__member *self = member_of(g), *to = place(g, self);
  ADD(&to->sp.load, 1);
  if (to == self) {
    if (d->stay) {
      stay_push(&self->sp, d);
    } else {
      ring_push(g, &self->sp, d);
      wake_idle(g, self);
    }
  } else if (inbox_push(to, d) < 0) {
    ADD(&to->sp.load, -1);
    free(d);
    return -ESHUTDOWN;
  }
  if (!detached)
    *out = d;
  return 0;
}

int tdl_group_fiber_join(tdl_group_fiber *d, void **result, tdl_time_t deadline)
{
  tdl__fiber *f;
  int e = tdl__may_block(&f);
  if (e == -EPERM)
    return e;
  if (!d)
    return -EINVAL;
  tdl__spin_lock(&d->lock);
  if (d->state == RUNNING && d->fiber == tdl__fiber_handle(f) && member_of(d->g) &&
      member_of(d->g)->index == d->where) {
    tdl__spin_unlock(&d->lock);
    return -EDEADLK;
  }
  if (d->joining) {
    tdl__spin_unlock(&d->lock);
    return -EBUSY;
  }
  if (d->state != DONE) {
    /* A cancelled caller may still wait for one that is cancelled too. */
    if (e == -ECANCELED && !d->cancelled) {
      tdl__spin_unlock(&d->lock);
      return -ECANCELED;
    }
    if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now) {
      tdl__spin_unlock(&d->lock);
      return -ETIMEDOUT;
    }
    TDL__SHARED_WAIT_ALIGN tdl__shared_wait w = {.clause = 0};
    if ((e = tdl__shared_wait_prepare(&w, f)) < 0) {
      tdl__spin_unlock(&d->lock);
      return e;
    }
    d->joining = 1;
    tdl__list_push(&d->waiters, &w.link);
    tdl__spin_unlock(&d->lock);
    int r = f->cancelled ? tdl__park_nocancel(f, "join", deadline) : tdl__park(f, "join", -1, deadline);
    bool woken = tdl__shared_wait_settle(&w) == 0;
    tdl__spin_lock(&d->lock);
    if (!woken && tdl__list_linked(&w.link))
      tdl__list_remove(&w.link);
    d->joining = 0;
    bool done = d->state == DONE;
    tdl__spin_unlock(&d->lock);
    tdl__shared_wait_done(&w);
    if (!done)
      return r < 0 ? r : -ECANCELED;
  } else {
    tdl__spin_unlock(&d->lock);
  }
  e = d->error;
  if (result && e == 0)
    *result = d->result;
  put(d);
  return e;
}

/* On gf's loop (NULL: it ended first). */
static void cancel_there(tdl_loop *loop, tdl_post *p)
{
  tdl_group_fiber *d = p->data;
  if (loop) {
    tdl__spin_lock(&d->lock);
    bool running = d->state == RUNNING; /* it ends on this thread: still so below */
    tdl__spin_unlock(&d->lock);
    if (running)
      tdl_fiber_cancel(loop, d->fiber);
  }
  put(d);
}

int tdl_group_fiber_cancel(tdl_group_fiber *d)
{
  if (!d)
    return -EINVAL;
  tdl__spin_lock(&d->lock);
  if (d->state == DONE) {
    tdl__spin_unlock(&d->lock);
    return -ESRCH;
  }
  bool again = d->cancelled;
  d->cancelled = 1;
  if (d->state == RUNNING && !again) {
    tdl__member *here = member_of(d->g);
    if (here && here->index == d->where) {
      tdl_fiber_cancel(LOAD(&here->loop), d->fiber);
    } else {
      /* Under the lock: it cannot end, nor its loop, before the post is
       * queued (a queued post is handed back if the loop ends). */
      ADD(&d->refs, 1);
      tdl_post_init(&d->cancel, cancel_there, d);
      if (tdl_port_post(d->g->m[d->where].port, &d->cancel) < 0)
        ADD(&d->refs, -1); /* the handle's reference is still held */
    }
  }
  tdl__spin_unlock(&d->lock);
  return 0;
}

int tdl_group_fiber_detach(tdl_group_fiber *d)
{
  if (!d)
    return -EINVAL;
  put(d);
  return 0;
}

int tdl_group_set_placement(tdl_group *g, tdl_group_placement placement)
{
  if (!g || placement < TDL_GROUP_LEAST_LOADED || placement > TDL_GROUP_CALLER)
    return -EINVAL;
  STORE(&g->placement, (int)placement);
  return 0;
}

int tdl_group_set_stealing(tdl_group *g, bool on)
{
  if (!g)
    return -EINVAL;
  STORE(&g->stealing, on ? 1 : 0);
  return 0;
}
