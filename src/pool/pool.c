/* SPDX-License-Identifier: MIT */
/*
 * The pool's threads and lanes.
 *
 * One lock guards everything here: the lanes' FIFO queues and the counts.
 * Work is short to hand over (a link under the lock), so one lock costs
 * less than the machinery of several; threads that wait sleep on one
 * condition variable.
 *
 * How many threads: as few as keep the work moving, and never more than
 * the work waiting or running (pool.h states the rule for users).  A thread
 * is started only for queued work that no thread is already on its way to:
 * "on its way" counts idle threads (woken or not: a woken one stays idle
 * until it runs), threads started that have not looked for work yet
 * (`starting`), the spinning one, and those between finishing a call and
 * taking the next (`finishing`).  Counting only the idle threads not yet
 * woken is not enough: while the threads started at one tick have not run
 * yet (on busy CPUs, that can take several ticks), their work still looks
 * uncovered, and each tick would start more for it (33 blocked calls got 53
 * threads that way).
 * Submitting wakes an idle thread, or starts one while fewer than SPARE
 * exist (the CPUs, at least 4).  Beyond that, threads are started by a
 * monitor thread, and only for work that waits: every TICK while work is
 * queued it looks at the oldest work of each lane, and when that has waited
 * a TICK or more (every thread is busy with something slow) it starts more,
 * doubling the count each tick up to the cap.  So trivial calls are run
 * back to back by a few threads that never sleep, as on libuv's fixed pool,
 * while calls that block get a thread each within a few ticks, as on an
 * unbounded one.  A thread that finds no work it may take waits up to
 * idle_exit, then exits.
 *
 * Every thread is joinable, and joined: one that exits (idle, or at a
 * shutdown) puts its record on the `dead` list, which the monitor joins as
 * it goes (so an idle exit gives its stack back at once), and
 * tdl_pool_shutdown joins what is left, and the monitor itself.
 *
 * Before it sleeps, one thread at a time spins for SPIN (20 us) watching
 * for work: calls that come back to back then cost no futex wake and no
 * context switch (the lock is glibc's adaptive one, spinning briefly too).
 *
 * A thread takes work from the lanes in turn, skipping a lane that holds
 * its cap of threads already, so a lane at its cap waits for one of its own
 * to finish while the others go on.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/thread.h"
#include "loop/loop_internal.h"
#include "pool/pool_internal.h"

/* The default cap, argued in pool.h. */
enum { DEFAULT_MAX = 64, MIN_SPARE = 4 };
#define DEFAULT_IDLE_EXIT (5 * TDL_SEC)
#define TICK (500 * TDL_USEC)
#define SPIN (20 * TDL_USEC)

#define RUNNING(l) __atomic_load_n(&(l)->running, __ATOMIC_RELAXED)

/* A worker's record: on the live list while its thread runs (so that a
 * forked child, where the thread does not exist, can free it: a record only
 * the thread pointed to would be lost there), then on the dead list once it
 * has exited, to be joined. */
typedef struct worker {
  pthread_t t;
  tdl__list live;
  struct worker *next;
} worker;

typedef struct lane {
  tdl__work *head, **tail;
  unsigned queued, max;
  unsigned running; /* atomic: a thread lowers it without the lock, before the work goes home */
} lane;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work; /* signalled when work is queued (or a lane frees up) */
  pthread_cond_t tick; /* wakes the monitor when work is queued, a thread exits, or at shutdown */
  pthread_cond_t gone; /* signalled when a thread exits or a shutdown's joins end */
  lane lanes[TDL_LANES];
  unsigned next_lane;  /* where the next take starts looking */
  unsigned threads, idle, wakes_pending, max, spare;
  unsigned starting;   /* threads started that have not looked for work yet */
  unsigned finishing;  /* atomic: threads between a call's end and their next take */
  unsigned spinning;   /* a thread looking for work without sleeping (0 or 1) */
  unsigned queued;     /* work queued in all lanes (read unlocked by the spinner) */
  bool monitor_running, monitor_sleeping, monitor_stop;
  pthread_t monitor_thread;
  tdl__list live;      /* records of the threads that run */
  worker *dead;        /* exited threads, not joined yet */
  bool closed;         /* tdl_pool_shutdown was called: no work is taken in */
  bool joining;        /* a shutdown is joining threads, outside the lock */
  tdl_time_t idle_exit;
  uint64_t done, started;
  bool ready;          /* defaults applied, fork handlers installed */
} P = {
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    /* glibc: spin a little before sleeping; the sections are a few links
     * long, and a futex sleep per contended handover was most of the cost. */
    .lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
#else
    .lock = PTHREAD_MUTEX_INITIALIZER,
#endif
};

static void apply(const tdl_pool_options *o)
{
  P.max = o && o->max_threads ? o->max_threads : DEFAULT_MAX;
  P.idle_exit = o && o->idle_exit > 0 ? o->idle_exit : DEFAULT_IDLE_EXIT;
  for (unsigned i = 0; i < TDL_LANES; i++) {
    unsigned m = o ? o->lane_max[i] : 0;
    if (m == 0)
      m = i == TDL_LANE_NAME ? (P.max / 2 ? P.max / 2 : 1) : P.max;
    P.lanes[i].max = m;
  }
}

/* fork(): the child must not inherit the lock held, and has none of the
 * parent's threads: it starts with an empty pool.  (Queued work belongs to
 * fibers of the parent's loops; in the child it is forgotten.) */
static void before_fork(void) { pthread_mutex_lock(&P.lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&P.lock); }
static void init_conds(void)
{
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* waits are spans, not dates */
  pthread_cond_init(&P.work, &ca);
  pthread_cond_init(&P.tick, &ca);
  pthread_cond_init(&P.gone, &ca);
  pthread_condattr_destroy(&ca);
}

static void after_fork_child(void)
{
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_mutex_init(&P.lock, &ma);
  pthread_mutexattr_destroy(&ma);
  init_conds();
  /* The parent's threads do not exist here: nothing to join, and their
   * records are only memory.  (Hidden from clang's analyser, which does not
   * see that the popped node's prev is P.live, so that the pop moved
   * P.live.next on, and calls the next pop a use after free.) */
#ifndef __clang_analyzer__
  for (tdl__list *n; (n = tdl__list_pop(&P.live)) != NULL;)
    free(TDL__CONTAINER_OF(n, worker, live));
#endif
  while (P.dead) {
    worker *d = P.dead;
    P.dead = d->next;
    free(d);
  }
  for (unsigned i = 0; i < TDL_LANES; i++) {
    P.lanes[i].head = NULL;
    P.lanes[i].tail = &P.lanes[i].head;
    P.lanes[i].queued = 0;
    __atomic_store_n(&P.lanes[i].running, 0, __ATOMIC_RELAXED);
  }
  P.threads = P.idle = P.wakes_pending = P.spinning = P.queued = P.starting = 0;
  __atomic_store_n(&P.finishing, 0, __ATOMIC_RELAXED);
  P.monitor_running = P.monitor_sleeping = P.monitor_stop = P.joining = false;
}

/* Under the lock. */
static void ready(void)
{
  if (P.ready)
    return;
  init_conds();
  cpu_set_t set;
  unsigned cpus = tdl__cpus(&set); /* the CPUs this process may use, not the machine's */
  P.spare = cpus > MIN_SPARE ? cpus : MIN_SPARE;
  for (unsigned i = 0; i < TDL_LANES; i++)
    P.lanes[i].tail = &P.lanes[i].head;
  if (P.max == 0)
    apply(NULL);
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  P.ready = true;
}

int tdl_pool_configure(const tdl_pool_options *o)
{
  if (!o)
    return -EINVAL;
  unsigned max = o->max_threads ? o->max_threads : DEFAULT_MAX;
  for (unsigned i = 0; i < TDL_LANES; i++)
    if (o->lane_max[i] > max)
      return -EINVAL;
  pthread_mutex_lock(&P.lock);
  ready();
  apply(o);
  P.closed = false;
  pthread_cond_broadcast(&P.work); /* a raised lane cap may let waiting work start */
  pthread_mutex_unlock(&P.lock);
  return 0;
}

/* Under the lock: the oldest work of the next lane that may take a thread. */
static tdl__work *take(void)
{
  for (unsigned k = 0; k < TDL_LANES; k++) {
    unsigned i = (P.next_lane + k) % TDL_LANES;
    lane *l = &P.lanes[i];
    if (!l->head || RUNNING(l) >= l->max)
      continue;
    tdl__work *w = l->head;
    if (!(l->head = w->next))
      l->tail = &l->head;
    l->queued--;
    __atomic_store_n(&P.queued, P.queued - 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&l->running, 1, __ATOMIC_RELAXED);
    P.next_lane = (i + 1) % TDL_LANES;
    return w;
  }
  return NULL;
}

static struct timespec at(tdl_time_t t) { return (struct timespec){.tv_sec = t / TDL_SEC, .tv_nsec = t % TDL_SEC}; }

/* Whether this thread is one of the pool's (tdl_pool_shutdown refuses to
 * wait for itself). */
static _Thread_local bool on_pool_thread;

/* Under the lock: the exited thread me goes on the dead list, and the
 * monitor is told to join it. */
static void bury(worker *me)
{
  tdl__list_remove(&me->live);
  me->next = P.dead;
  P.dead = me;
  P.threads--;
  pthread_cond_broadcast(&P.gone);
  if (P.monitor_sleeping)
    pthread_cond_signal(&P.tick);
}

/* Without the lock: join every thread of the list d, which have exited. */
static void join_all(worker *d)
{
  while (d) {
    worker *next = d->next;
    pthread_join(d->t, NULL);
    free(d);
    d = next;
  }
}

static void *worker_main(void *arg)
{
  worker *me = arg;
  on_pool_thread = true;
  unsigned finished = TDL_LANES; /* the lane of the work just sent home, if any:
                                    one lock per work item covers it and the next take */
  pthread_mutex_lock(&P.lock);
  P.starting--;
  for (;;) {
    tdl__work *w = take();
    if (finished < TDL_LANES) {
      __atomic_sub_fetch(&P.finishing, 1, __ATOMIC_RELAXED);
      /* The lane of the work just finished may have been at its cap, its
       * queued work waiting for a thread of its own: if this one went to
       * another lane, wake one. */
      lane *l = &P.lanes[finished];
      if (l->head && RUNNING(l) < l->max && P.idle > P.wakes_pending) {
        P.wakes_pending++;
        pthread_cond_signal(&P.work);
      }
      finished = TDL_LANES;
    }
    if (!w && !P.spinning && !P.closed) {
      /* Before sleeping, one thread at a time looks for work for SPIN: with
       * calls coming back to back, the next one is usually that close, and
       * a sleep costs a futex wake and two context switches. */
      P.spinning = 1;
      pthread_mutex_unlock(&P.lock);
      tdl_time_t until = tdl__clock_now() + SPIN;
      do {
        for (int i = 0; i < 64 && !__atomic_load_n(&P.queued, __ATOMIC_RELAXED); i++)
          tdl__cpu_relax();
      } while (!__atomic_load_n(&P.queued, __ATOMIC_RELAXED) && tdl__clock_now() < until);
      pthread_mutex_lock(&P.lock);
      P.spinning = 0;
      w = take();
    }
    if (!w) {
      if (P.closed)
        break; /* shut down: its queues were emptied, and stay empty */
      struct timespec until = at(tdl__clock_now() + P.idle_exit);
      P.idle++;
      int e = pthread_cond_timedwait(&P.work, &P.lock, &until);
      P.idle--;
      if (P.wakes_pending)
        P.wakes_pending--;
      if (e == ETIMEDOUT && !(w = take()))
        break; /* idle for idle_exit: go */
      if (!w)
        continue;
    }
    pthread_mutex_unlock(&P.lock);
    if (!tdl__call_abandoned(&w->call))
      w->result = w->fn(w->call.arg);
    finished = w->lane;
    /* Counted before w goes home, so that a caller who has its result sees
     * it in the stats too; and finishing before running drops, so that
     * the monitor never sees this thread as neither busy nor coming. */
    __atomic_add_fetch(&P.finishing, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&P.lanes[w->lane].running, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&P.done, 1, __ATOMIC_RELAXED);
    tdl__call_return(&w->call); /* w is not ours any more */
    pthread_mutex_lock(&P.lock);
  }
  bury(me);
  pthread_mutex_unlock(&P.lock);
  return NULL;
}

/* Under the lock: one more worker.  false if it could not be made. */
static bool start_thread(void)
{
  worker *me = calloc(1, sizeof *me);
  if (!me)
    return false;
  tdl__list_push(&P.live, &me->live); /* before the thread can bury it */
  if (tdl__thread_start_joinable(&me->t, worker_main, me) < 0) {
    tdl__list_remove(&me->live);
    free(me);
    return false;
  }
  P.threads++;
  P.starting++;
  P.started++;
  return true;
}

/* Under the lock: the threads that will take queued work without being
 * started or woken. */
static unsigned coming(void)
{
  return P.idle + P.starting + P.spinning + __atomic_load_n(&P.finishing, __ATOMIC_RELAXED);
}

/* Under the lock: how many more workers the waiting work asks for. */
static unsigned starved(tdl_time_t now)
{
  unsigned want = 0;
  for (unsigned i = 0; i < TDL_LANES; i++) {
    lane *l = &P.lanes[i];
    unsigned running = RUNNING(l);
    if (l->head && running < l->max && now - l->head->queued_at >= TICK) {
      unsigned room = l->max - running;
      want += l->queued < room ? l->queued : room;
    }
  }
  unsigned on_the_way = coming();
  want = want > on_the_way ? want - on_the_way : 0;
  unsigned grow = P.threads ? P.threads : 1; /* at most double per tick */
  if (want > grow)
    want = grow;
  if (want > P.max - (P.threads < P.max ? P.threads : P.max))
    want = P.max > P.threads ? P.max - P.threads : 0;
  return want;
}

static void *monitor(void *arg)
{
  (void)arg;
  pthread_mutex_lock(&P.lock);
  while (!P.monitor_stop) {
    if (P.dead) { /* threads that exited: give their stacks back */
      worker *d = P.dead;
      P.dead = NULL;
      pthread_mutex_unlock(&P.lock);
      join_all(d);
      pthread_mutex_lock(&P.lock);
      continue;
    }
    bool queued = false;
    for (unsigned i = 0; i < TDL_LANES; i++)
      queued |= P.lanes[i].head != NULL;
    if (!queued) {
      P.monitor_sleeping = true;
      pthread_cond_wait(&P.tick, &P.lock);
      P.monitor_sleeping = false;
      continue;
    }
    struct timespec until = at(tdl__clock_now() + TICK);
    pthread_cond_timedwait(&P.tick, &P.lock, &until);
    for (unsigned n = starved(tdl__clock_now()); n > 0 && start_thread(); n--) {
    }
  }
  pthread_mutex_unlock(&P.lock);
  return NULL;
}

/* Under the lock: take w out of its lane's queue if it is still there.
 * Linear in the lane's length; only deadlines and cancels call it. */
static bool unqueue(tdl__work *w)
{
  lane *l = &P.lanes[w->lane];
  tdl__work **pp = &l->head;
  while (*pp && *pp != w)
    pp = &(*pp)->next;
  if (!*pp)
    return false;
  if (!(*pp = w->next))
    l->tail = pp;
  l->queued--;
  __atomic_store_n(&P.queued, P.queued - 1, __ATOMIC_RELAXED);
  return true;
}

bool tdl__pool_withdraw(tdl__work *w)
{
  pthread_mutex_lock(&P.lock);
  bool taken = unqueue(w);
  pthread_mutex_unlock(&P.lock);
  return taken;
}

int tdl__pool_submit(tdl__work *w)
{
  w->queued_at = tdl__clock_now();
  w->err = 0;
  pthread_mutex_lock(&P.lock);
  ready();
  if (P.closed) {
    pthread_mutex_unlock(&P.lock);
    return -ESHUTDOWN;
  }
  lane *l = &P.lanes[w->lane];
  w->next = NULL;
  *l->tail = w;
  l->tail = &w->next;
  l->queued++;
  __atomic_store_n(&P.queued, P.queued + 1, __ATOMIC_RELAXED);
  if (RUNNING(l) + l->queued <= l->max) { /* a thread of this lane may take it now */
    unsigned on_the_way = P.starting + P.wakes_pending + P.spinning + __atomic_load_n(&P.finishing, __ATOMIC_RELAXED);
    if (P.queued <= on_the_way) {
      /* a thread already coming takes it */
    } else if (P.idle > P.wakes_pending) {
      P.wakes_pending++;
      pthread_cond_signal(&P.work);
    } else if (P.threads < P.spare && P.threads < P.max) {
      start_thread();
    }
  }
  if (P.threads == 0 && !start_thread()) {
    unqueue(w); /* nothing can ever run it: take it back */
    pthread_mutex_unlock(&P.lock);
    return -EAGAIN;
  }
  if (!P.monitor_running)
    P.monitor_running = tdl__thread_start_joinable(&P.monitor_thread, monitor, NULL) == 0;
  else if (P.monitor_sleeping)
    pthread_cond_signal(&P.tick);
  pthread_mutex_unlock(&P.lock);
  return 0;
}

/* ---- shutdown ---- */

/* Under the lock: whether every thread is gone and joined. */
static bool all_joined(void) { return P.threads == 0 && !P.monitor_running && !P.dead && !P.joining; }

int tdl_pool_shutdown(tdl_time_t deadline)
{
  if (on_pool_thread)
    return -EDEADLK;
  if (tdl__tl_loop)
    return -EPERM;
  pthread_mutex_lock(&P.lock);
  ready();
  /* Close, and take out what no thread has started: it is sent home below,
   * skipped, with -ESHUTDOWN (outside the lock: going home is a post to the
   * caller's port, or a free and a drop when the caller has left). */
  P.closed = true;
  tdl__work *skipped = NULL;
  for (unsigned i = 0; i < TDL_LANES; i++) {
    lane *l = &P.lanes[i];
    while (l->head) {
      tdl__work *w = l->head;
      l->head = w->next;
      w->next = skipped;
      skipped = w;
    }
    l->tail = &l->head;
    l->queued = 0;
  }
  __atomic_store_n(&P.queued, 0, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&P.work); /* idle threads: exit */
  pthread_mutex_unlock(&P.lock);
  while (skipped) {
    tdl__work *w = skipped;
    skipped = w->next;
    w->err = -ESHUTDOWN;
    __atomic_add_fetch(&P.done, 1, __ATOMIC_RELAXED);
    tdl__call_return(&w->call);
  }

  pthread_mutex_lock(&P.lock);
  struct timespec until = at(deadline);
  int e = 0;
  for (;;) {
    /* One caller at a time joins: the monitor once every worker has gone
     * (until then it joins the workers that exit), and the exited workers
     * it left. */
    if (!P.joining && (P.dead || P.monitor_running) && (P.threads == 0 || !P.monitor_running)) {
      P.joining = true;
      bool monitor = P.monitor_running;
      if (monitor) {
        P.monitor_stop = true;
        pthread_cond_signal(&P.tick);
      }
      pthread_mutex_unlock(&P.lock);
      if (monitor)
        pthread_join(P.monitor_thread, NULL);
      pthread_mutex_lock(&P.lock);
      if (monitor)
        P.monitor_running = P.monitor_stop = false;
      worker *d = P.dead;
      P.dead = NULL;
      pthread_mutex_unlock(&P.lock);
      join_all(d);
      pthread_mutex_lock(&P.lock);
      P.joining = false;
      pthread_cond_broadcast(&P.gone);
      continue;
    }
    if (all_joined() || e == ETIMEDOUT)
      break;
    if (deadline == TDL_FOREVER)
      pthread_cond_wait(&P.gone, &P.lock);
    else
      e = pthread_cond_timedwait(&P.gone, &P.lock, &until);
  }
  bool done = all_joined();
  pthread_mutex_unlock(&P.lock);
  return done ? 0 : -ETIMEDOUT;
}

void tdl_pool_stats_get(tdl_pool_stats *out)
{
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&P.lock);
  out->threads = P.threads;
  out->idle = P.idle;
  out->max_threads = P.max ? P.max : DEFAULT_MAX;
  for (unsigned i = 0; i < TDL_LANES; i++) {
    out->queued[i] = P.lanes[i].queued;
    out->running[i] = RUNNING(&P.lanes[i]);
  }
  out->done = __atomic_load_n(&P.done, __ATOMIC_RELAXED);
  out->started_threads = P.started;
  pthread_mutex_unlock(&P.lock);
}
