/*
 * Mutex, condition variable, semaphore, wait group and once for the fibers of
 * one loop, on the scheduler's park/wake primitive.
 *
 * Wait records.  A fiber that must wait puts a record on its own stack into
 * the object's queue (a circular doubly-linked list; the object points at the
 * oldest record) and parks.  Whoever releases the object takes the oldest
 * live record off the queue, marks it granted (the fiber now owns the mutex,
 * the permit, the signal, the right to run the once-function) and wakes its
 * fiber.  A fiber always learns what happened from its record, never from
 * park's result alone.
 *
 * Liveness.  A fiber woken by its deadline or by cancellation stays queued
 * until it runs again and unlinks itself; until then, releasers skip its
 * record (it is "dead": its fiber is no longer parked), so a timed-out or
 * cancelled waiter never takes anything.  Only records marked `sticky` are
 * served even when their fiber has been woken: those of condition waiters
 * taking their mutex back, which must not fail.  (Today liveness is read from
 * the fiber's scheduler state; a cross-thread version would keep it in the
 * record, set by whoever wakes the fiber first.)
 *
 * Cancellation after a grant.  If a fiber is granted something and cancelled
 * before it runs again, it gives what it got to the next waiter and reports
 * -ECANCELED; a deadline that fires after a grant is ignored.
 *
 * Finishing while holding.  Every mutex a fiber owns and every once-function
 * it runs is linked into a list whose head is one of the fiber's local storage
 * slots; that slot's destructor, run as the fiber finishes, releases them.
 */
#include <limits.h>
#include <stddef.h>

#include "fiber/fiber_internal.h"

typedef struct tdl__swait {
  struct tdl__swait *next, *prev;
  tdl__fiber *f;
  uint8_t linked;    /* in a queue */
  uint8_t granted;   /* the waker handed it what it waits for */
  uint8_t sticky;    /* serve it even when its fiber has been woken */
  uint8_t signalled; /* cond: a signal moved it to the mutex's queue */
  uint8_t run;       /* once: it must run the function */
} tdl__swait;

enum { HELD_MUTEX = 1, HELD_ONCE = 2 };
enum { MUTEX_OWNER_DEAD = 1u };
enum { ONCE_NEVER = 0, ONCE_RUNNING = 1, ONCE_DONE = 2 };

#define CONTAINER(p, type, member) ((type *)(void *)((char *)(p) - offsetof(type, member)))

/* ---- wait queues ---- */

static void q_push(tdl__swait **q, tdl__swait *w)
{
  tdl__swait *h = *q;
  if (!h) {
    w->next = w->prev = w;
    *q = w;
  } else {
    w->next = h;
    w->prev = h->prev;
    h->prev->next = w;
    h->prev = w;
  }
  w->linked = 1;
}

static void q_del(tdl__swait **q, tdl__swait *w)
{
  if (w->next == w) {
    *q = NULL;
  } else {
    w->prev->next = w->next;
    w->next->prev = w->prev;
    if (*q == w)
      *q = w->next;
  }
  w->next = w->prev = NULL;
  w->linked = 0;
}

static inline bool live(const tdl__swait *w)
{
  return w->sticky || w->f->state == TDL__FIBER_PARKED;
}

/* Take the oldest live record off q (dropping dead ones on the way), or NULL. */
static tdl__swait *q_take(tdl__swait **q)
{
  while (*q) {
    tdl__swait *w = *q;
    q_del(q, w);
    if (live(w))
      return w;
  }
  return NULL;
}

static void grant(tdl__swait *w)
{
  w->granted = 1;
  tdl__wake(w->f, 0);
}

/* Leave q after a park that was not granted (unless a releaser already
 * dropped the record). */
static void q_leave(tdl__swait **q, tdl__swait *w)
{
  if (w->linked)
    q_del(q, w);
}

/* Park until w is granted, whatever happens meanwhile: no deadline, and a
 * cancel is held off until the next park.  Only condition waiters taking back
 * their mutex wait like this. */
static void park_until_granted(tdl__fiber *f, tdl__swait *w, const char *what)
{
  while (!w->granted)
    (void)tdl__park_uncancellable(f, what);
}

/* ---- what a fiber holds ---- */

static void held_add(tdl__fiber *f, tdl__sheld *h, unsigned kind)
{
  h->kind = kind;
  void **head = &f->held;
  h->next = *head;
  if (h->next)
    ((tdl__sheld *)h->next)->pprev = &h->next;
  h->pprev = head;
  *head = h;
}

static void held_del(tdl__sheld *h)
{
  if (!h->pprev)
    return;
  *h->pprev = h->next;
  if (h->next)
    ((tdl__sheld *)h->next)->pprev = h->pprev;
  h->next = NULL;
  h->pprev = NULL;
}

static void mutex_pass(tdl_mutex *m);
static void once_pass(tdl_once *o);

/* Called by the scheduler when a fiber finishes: release what it still
 * holds. */
void tdl__sync_release_held(tdl__fiber *f)
{
  tdl__sheld *h = f->held;
  f->held = NULL;
  while (h) {
    tdl__sheld *next = h->next;
    h->next = NULL;
    h->pprev = NULL;
    if (h->kind == HELD_MUTEX) {
      tdl_mutex *m = CONTAINER(h, tdl_mutex, held);
      m->flags |= MUTEX_OWNER_DEAD;
      mutex_pass(m);
    } else {
      once_pass(CONTAINER(h, tdl_once, held));
    }
    h = next;
  }
}

/* ---- mutex ---- */

int tdl_mutex_init(tdl_mutex *m)
{
  *m = (tdl_mutex)TDL_MUTEX_INIT;
  return 0;
}

/* The caller has just come to own m: report a dead previous owner, once. */
static int mutex_acquired(tdl_mutex *m)
{
  if (TDL__UNLIKELY(m->flags & MUTEX_OWNER_DEAD)) {
    m->flags &= ~MUTEX_OWNER_DEAD;
    return -EOWNERDEAD;
  }
  return 0;
}

static inline void mutex_take(tdl_mutex *m, tdl__fiber *f)
{
  m->owner = f;
  held_add(f, &m->held, HELD_MUTEX);
}

/* Hand m (already out of its owner's list) to its oldest live waiter, or
 * unlock it. */
static void mutex_pass(tdl_mutex *m)
{
  tdl__swait *w = q_take(&m->waiters);
  if (w) {
    mutex_take(m, w->f);
    grant(w);
  } else {
    m->owner = NULL;
  }
}

static void mutex_release(tdl_mutex *m)
{
  held_del(&m->held);
  mutex_pass(m);
}

int tdl_mutex_lock(tdl_mutex *m, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (f->cancelled)
    return -ECANCELED;
  if (!m->owner) {
    mutex_take(m, f);
    return mutex_acquired(m);
  }
  if (m->owner == f)
    return -EDEADLK;
  tdl__swait w = {.f = f};
  q_push(&m->waiters, &w);
  int r = tdl__park(f, "mutex", -1, deadline);
  if (!w.granted) {
    q_leave(&m->waiters, &w);
    return r;
  }
  if (f->cancelled) {
    mutex_release(m);
    return -ECANCELED;
  }
  return mutex_acquired(m);
}

int tdl_mutex_trylock(tdl_mutex *m)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (m->owner == f)
    return -EDEADLK;
  if (m->owner)
    return -EBUSY;
  mutex_take(m, f);
  return mutex_acquired(m);
}

int tdl_mutex_unlock(tdl_mutex *m)
{
  tdl__fiber *f = tdl__self();
  if (!f || m->owner != f)
    return -EPERM;
  mutex_release(m);
  return 0;
}

bool tdl_mutex_owned(const tdl_mutex *m)
{
  tdl__fiber *f = tdl__self();
  return f && m->owner == f;
}

int tdl_mutex_destroy(tdl_mutex *m)
{
  if (m->owner || m->waiters || m->cond_users)
    return -EBUSY;
  *m = (tdl_mutex)TDL_MUTEX_INIT;
  return 0;
}

/* ---- condition variable ---- */

int tdl_cond_init(tdl_cond *c)
{
  *c = (tdl_cond)TDL_COND_INIT;
  return 0;
}

/* Move the oldest live waiter of c towards its mutex: hand it the mutex if
 * free, else queue it (sticky: it will be served) behind the mutex's other
 * waiters.  Returns 1, or 0 when nobody waits. */
static int cond_wake_one(tdl_cond *c)
{
  tdl__swait *w = q_take(&c->waiters);
  tdl_mutex *m = c->mutex;
  if (!c->waiters)
    c->mutex = NULL;
  if (!w)
    return 0;
  w->signalled = 1;
  w->sticky = 1;
  if (!m->owner) {
    mutex_take(m, w->f);
    grant(w);
  } else {
    q_push(&m->waiters, w);
  }
  return 1;
}

int tdl_cond_wait(tdl_cond *c, tdl_mutex *m, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f || m->owner != f)
    return -EPERM;
  if (c->waiters && c->mutex != m)
    return -EINVAL;
  if (f->cancelled)
    return -ECANCELED;
  if (deadline != TDL_FOREVER && deadline <= f->sched->loop->now)
    return -ETIMEDOUT;

  tdl__swait w = {.f = f};
  q_push(&c->waiters, &w);
  c->mutex = m;
  c->inside++;
  m->cond_users++;
  mutex_release(m);
  int r = tdl__park(f, "cond", -1, deadline);

  if (!w.signalled) {
    /* Timed out or cancelled while still on c: nothing was consumed.  Leave
     * c, then take m back, waiting as long as it takes. */
    if (w.linked) {
      q_del(&c->waiters, &w);
      if (!c->waiters)
        c->mutex = NULL;
    }
    if (!m->owner) {
      mutex_take(m, f);
      w.granted = 1;
    } else {
      w.sticky = 1;
      q_push(&m->waiters, &w);
    }
  }
  park_until_granted(f, &w, "cond mutex");
  c->inside--;
  m->cond_users--;

  int e = mutex_acquired(m);
  if (!w.signalled)
    return e < 0 ? e : r;
  if (e == 0 && f->cancelled)
    e = -ECANCELED;
  if (e < 0) /* do not consume the signal */
    cond_wake_one(c);
  return e;
}

int tdl_cond_signal(tdl_cond *c) { return cond_wake_one(c); }

int tdl_cond_broadcast(tdl_cond *c)
{
  int n = 0;
  while (cond_wake_one(c))
    if (n < INT_MAX)
      n++;
  return n;
}

int tdl_cond_destroy(tdl_cond *c)
{
  if (c->waiters || c->inside)
    return -EBUSY;
  *c = (tdl_cond)TDL_COND_INIT;
  return 0;
}

/* ---- semaphore ---- */

int tdl_sem_init(tdl_sem *s, uint32_t value, uint32_t max)
{
  if (max == 0)
    max = TDL_SEM_VALUE_MAX;
  if (value > max)
    return -EINVAL;
  *s = (tdl_sem)TDL_SEM_INIT(value, max);
  return 0;
}

/* One permit back: to the oldest live waiter, else to the count. */
static int sem_give(tdl_sem *s)
{
  tdl__swait *w = q_take(&s->waiters);
  if (w) {
    grant(w);
    return 0;
  }
  uint32_t max = s->max ? s->max : TDL_SEM_VALUE_MAX;
  if (s->value >= max)
    return -EOVERFLOW;
  s->value++;
  return 0;
}

int tdl_sem_acquire(tdl_sem *s, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (f->cancelled)
    return -ECANCELED;
  if (s->value > 0) { /* then nobody waits: permits go to waiters first */
    s->value--;
    return 0;
  }
  tdl__swait w = {.f = f};
  q_push(&s->waiters, &w);
  s->inside++;
  int r = tdl__park(f, "sem", -1, deadline);
  s->inside--;
  if (!w.granted) {
    q_leave(&s->waiters, &w);
    return r;
  }
  if (f->cancelled) {
    (void)sem_give(s); /* cannot overflow: this permit was taken from s */
    return -ECANCELED;
  }
  return 0;
}

int tdl_sem_try_acquire(tdl_sem *s)
{
  if (s->value == 0)
    return -EAGAIN;
  s->value--;
  return 0;
}

int tdl_sem_release(tdl_sem *s) { return sem_give(s); }

uint32_t tdl_sem_value(const tdl_sem *s) { return s->value; }

int tdl_sem_destroy(tdl_sem *s)
{
  if (s->waiters || s->inside)
    return -EBUSY;
  uint32_t max = s->max;
  *s = (tdl_sem)TDL_SEM_INIT(0, max);
  return 0;
}

/* ---- wait group ---- */

int tdl_waitgroup_init(tdl_waitgroup *wg)
{
  *wg = (tdl_waitgroup)TDL_WAITGROUP_INIT;
  return 0;
}

int tdl_waitgroup_add(tdl_waitgroup *wg, int64_t delta)
{
  int64_t n;
  if (__builtin_add_overflow(wg->count, delta, &n))
    return delta > 0 ? -EOVERFLOW : -EINVAL;
  if (n < 0)
    return -EINVAL;
  wg->count = n;
  if (n == 0) {
    tdl__swait *w;
    while ((w = q_take(&wg->waiters)) != NULL)
      grant(w);
  }
  return 0;
}

int tdl_waitgroup_done(tdl_waitgroup *wg) { return tdl_waitgroup_add(wg, -1); }

int tdl_waitgroup_wait(tdl_waitgroup *wg, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (f->cancelled)
    return -ECANCELED;
  if (wg->count == 0)
    return 0;
  tdl__swait w = {.f = f};
  q_push(&wg->waiters, &w);
  int r = tdl__park(f, "waitgroup", -1, deadline);
  if (!w.granted) {
    q_leave(&wg->waiters, &w);
    return r;
  }
  return f->cancelled ? -ECANCELED : 0;
}

int64_t tdl_waitgroup_count(const tdl_waitgroup *wg) { return wg->count; }

int tdl_waitgroup_destroy(tdl_waitgroup *wg)
{
  if (wg->waiters)
    return -EBUSY;
  *wg = (tdl_waitgroup)TDL_WAITGROUP_INIT;
  return 0;
}

/* ---- once ---- */

int tdl_once_init(tdl_once *o)
{
  *o = (tdl_once)TDL_ONCE_INIT;
  return 0;
}

/* The run failed (or its fiber finished inside fn): make the oldest live
 * waiter the next runner, or let the next caller try. */
static void once_pass(tdl_once *o)
{
  tdl__swait *w = q_take(&o->waiters);
  if (w) {
    o->runner = w->f;
    w->run = 1;
    grant(w);
  } else {
    o->runner = NULL;
    o->state = ONCE_NEVER;
  }
}

int tdl_once_call(tdl_once *o, int (*fn)(void *arg), void *arg, tdl_time_t deadline)
{
  tdl__fiber *f = tdl__self();
  if (!f)
    return -EPERM;
  if (!fn)
    return -EINVAL;
  if (f->cancelled)
    return -ECANCELED;
  if (TDL__LIKELY(o->state == ONCE_DONE))
    return 0;
  if (o->state == ONCE_RUNNING) {
    if (o->runner == f)
      return -EDEADLK;
    tdl__swait w = {.f = f};
    q_push(&o->waiters, &w);
    int r = tdl__park(f, "once", -1, deadline);
    if (!w.granted) {
      q_leave(&o->waiters, &w);
      return r;
    }
    if (f->cancelled) {
      if (w.run)
        once_pass(o);
      return -ECANCELED;
    }
    if (!w.run)
      return 0;
    /* The previous run failed and this fiber is the next runner. */
  } else {
    o->state = ONCE_RUNNING;
    o->runner = f;
  }

  held_add(f, &o->held, HELD_ONCE);
  int e = fn(arg);
  held_del(&o->held);
  if (e < 0) {
    once_pass(o);
    return e;
  }
  o->state = ONCE_DONE;
  o->runner = NULL;
  tdl__swait *w;
  while ((w = q_take(&o->waiters)) != NULL)
    grant(w);
  return 0;
}

bool tdl_once_done(const tdl_once *o) { return o->state == ONCE_DONE; }

int tdl_once_destroy(tdl_once *o)
{
  if (o->state == ONCE_RUNNING || o->waiters)
    return -EBUSY;
  *o = (tdl_once)TDL_ONCE_INIT;
  return 0;
}
