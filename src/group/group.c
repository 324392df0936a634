/* SPDX-License-Identifier: MIT */
/*
 * Groups of loops: N threads, a loop on each, started together and stopped
 * in order.
 *
 * Each thread makes its loop, takes its port, and starts a tdl_wakeup that
 * nobody sends: a started wakeup keeps tdl_loop_run going while the group
 * runs.  The stop comes as a post to the port (posts, unlike wakeups, are
 * safe to send to a loop that may be ending).  The starting thread waits
 * until every loop exists; if one could not be made, the others are
 * stopped and joined before tdl_group_new fails.
 *
 * Stopping runs on each loop's own thread (the post's callback): the user's
 * on_stop, then a cancel of every fiber, then the wakeup stops, so the loop
 * ends once its fibers have unwound.  The thread frees its loop
 * (which closes its port: later posts get -ESHUTDOWN) and says it ended.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/thread.h"
#include "group/members.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define XCHG(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)

typedef tdl__member member;

static _Thread_local tdl_group *t_group;
static _Thread_local int t_index = -1;

tdl_group *tdl_group_self(void) { return t_group; }
int tdl_group_index(void) { return t_group ? t_index : -1; }

unsigned tdl_group_size(const tdl_group *g) { return g->n; }

tdl_port *tdl_group_port(tdl_group *g, unsigned i) { return i < g->n ? g->m[i].port : NULL; }

tdl_loop *tdl_group_loop(tdl_group *g, unsigned i) { return i < g->n ? LOAD(&g->m[i].loop) : NULL; }

/* ---- on each loop ---- */

static int cancel_one(const tdl_fiber_info *in, void *loop)
{
  tdl_fiber_cancel(loop, in->handle); /* a finished one says -ESRCH: fine */
  return 0;
}

static void on_stop(tdl_loop *loop, tdl_post *p)
{
  member *m = p->data;
  if (!loop)
    return; /* the loop ended first */
  tdl_group *g = m->g;
  if (g->opts.on_stop)
    g->opts.on_stop(loop, g->opts.arg);
  tdl__spawner_stop(m, loop); /* group fibers not started never start */
  tdl_fiber_foreach(loop, cancel_one, loop);
  for (int k = 0; k < 2; k++)
    tdl_signal_stop(loop, &m->sig[k]);
  tdl_wakeup_stop(loop, &m->alive); /* the loop ends when its fibers have */
}

static void on_signal(tdl_loop *loop, tdl_signal *s, int signum)
{
  (void)loop;
  (void)signum;
  tdl_group_stop(s->data);
}

static void pin(int cpu)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* a hint: failing costs only locality */
}

/* Undo setup (the loop never ran). */
static void teardown_setup(member *m, tdl_loop *loop)
{
  tdl__spawner_stop(m, loop);
  tdl__spawner_end(m, loop);
  for (int k = 0; k < 2; k++)
    tdl_signal_stop(loop, &m->sig[k]);
  tdl_wakeup_stop(loop, &m->alive);
  tdl_loop_free(loop); /* closes its port: posts get -ESHUTDOWN */
}

/* Make the loop and what the group needs on it. */
static int setup(member *m, tdl_loop **out)
{
  tdl_group *g = m->g;
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, g->opts.loop ? &g->loop_opts : NULL);
  if (e < 0)
    return e;
  tdl_wakeup_init(&m->alive, NULL, NULL);
  tdl_post_init(&m->stop, on_stop, m);
  for (int k = 0; k < 2; k++)
    tdl_signal_init(&m->sig[k], on_signal, g);
  if ((e = tdl_loop_port(&m->port, loop)) == 0 && (e = tdl_wakeup_start(loop, &m->alive)) == 0 &&
      (e = tdl__spawner_setup(m, loop)) == 0 && m->index == 0 && g->opts.stop_on_signals &&
      (e = tdl_signal_start(loop, &m->sig[0], SIGINT)) == 0)
    e = tdl_signal_start(loop, &m->sig[1], SIGTERM);
  if (e < 0) {
    teardown_setup(m, loop);
    return e;
  }
  *out = loop;
  return 0;
}

/* The loop has ended: free it, giving back fibers nobody can join any more. */
static int teardown(tdl_loop *loop)
{
  tdl__sched_release_finished(loop->sched);
  return tdl_loop_free(loop);
}

static void say(tdl_group *g, unsigned *counter, int error)
{
  pthread_mutex_lock(&g->lock);
  (*counter)++;
  if (error < 0 && !g->start_error && counter == &g->ready)
    g->start_error = error;
  pthread_cond_broadcast(&g->changed);
  pthread_mutex_unlock(&g->lock);
}

/* Wait until the starter says whether every loop exists (1) or not (-1). */
static int wait_for_go(tdl_group *g)
{
  pthread_mutex_lock(&g->lock);
  while (!g->go)
    pthread_cond_wait(&g->changed, &g->lock);
  int go = g->go;
  pthread_mutex_unlock(&g->lock);
  return go;
}

/* Run the loop until the group stops; its main first.  Returns how it
 * ended. */
static int run(member *m, tdl_loop *loop)
{
  tdl_group *g = m->g;
  int e = 0;
  if (g->opts.main) {
    e = tdl_fiber_spawn(NULL, loop, g->opts.main, g->opts.arg, &(tdl_fiber_options){.name = "group main", .detached = true});
    if (e < 0)
      tdl_group_stop(g); /* the others started theirs: this stop ends us too */
  }
  int r = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  tdl__spawner_end(m, loop);
  STORE(&m->loop, NULL);
  int f = teardown(loop); /* -EBUSY: something the user started outlived the stop */
  return e < 0 ? e : r < 0 ? r : f;
}

static void *run_member(void *arg)
{
  member *m = arg;
  tdl_group *g = m->g;
  t_group = g;
  t_index = (int)m->index;
  if (m->cpu >= 0)
    pin(m->cpu);
  tdl_loop *loop = NULL;
  int e = setup(m, &loop);
  if (e == 0)
    STORE(&m->loop, loop);
  say(g, &g->ready, e);
  /* The mains start only once every loop exists: they may post to any. */
  int go = wait_for_go(g);
  if (e == 0 && go < 0) {
    STORE(&m->loop, NULL);
    teardown_setup(m, loop);
  }
  m->result = e < 0 || go < 0 ? e : run(m, loop);
  say(g, &g->ended, 0);
  return NULL;
}

/* ---- the group ---- */

/* The i-th CPU of the affinity mask, or -1. */
static int nth_cpu(const cpu_set_t *set, unsigned i)
{
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, set) && i-- == 0)
      return c;
  return -1;
}

static tdl_group *make(const tdl_group_options *o, unsigned *err)
{
  cpu_set_t set;
  unsigned cpus = tdl__cpus(&set);
  unsigned n = o->loops ? o->loops : cpus;
  if (n > TDL_GROUP_MAX || (o->pin && n > cpus)) {
    *err = EINVAL;
    return NULL;
  }
  /* Aligned: each loop's spawn queue has cache lines of its own. */
  size_t size = (sizeof(tdl_group) + n * sizeof(member) + 63) & ~(size_t)63;
  tdl_group *g = TDL__FAULT_ALLOC(aligned_alloc(64, size));
  if (!g) {
    *err = ENOMEM;
    return NULL;
  }
  memset(g, 0, size);
  g->opts = *o;
  if (o->loop)
    g->loop_opts = *o->loop;
  g->n = n;
  for (unsigned i = 0; i < n; i++) {
    g->m[i].g = g;
    g->m[i].index = i;
    g->m[i].cpu = o->pin ? nth_cpu(&set, i) : -1;
  }
  return g;
}

static int init_sync(tdl_group *g)
{
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0)
    return -ENOMEM;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of deadlines */
  int e = pthread_cond_init(&g->changed, &ca);
  pthread_condattr_destroy(&ca);
  if (e != 0)
    return -e;
  pthread_mutex_init(&g->lock, NULL);
  return 0;
}

/* Block the stop signals here, so that the threads made next inherit the
 * mask and only loop 0's signalfd sees them. */
static void block_stop_signals(tdl_group *g)
{
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &s, &g->old_mask);
  g->mask_changed = true;
}

static void restore_mask(tdl_group *g)
{
  if (g->mask_changed)
    pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL);
  g->mask_changed = false;
}

static void join_all(tdl_group *g)
{
  if (g->joined)
    return;
  for (unsigned i = 0; i < g->started; i++)
    pthread_join(g->m[i].thread, NULL);
  g->joined = true;
}

static void destroy(tdl_group *g)
{
  join_all(g);
  for (unsigned i = 0; i < g->n; i++)
    tdl_port_release(g->m[i].port);
  restore_mask(g);
  tdl__spawn_group_destroy(g);
  pthread_cond_destroy(&g->changed);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

int tdl_group_new(tdl_group **out, const tdl_group_options *opts)
{
  if (!out)
    return -EINVAL;
  *out = NULL;
  if (!opts)
    return -EINVAL;
  unsigned err = 0;
  tdl_group *g = make(opts, &err);
  if (!g)
    return -(int)err;
  int e = init_sync(g);
  if (e == 0 && (e = tdl__spawn_group_init(g)) < 0) {
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->lock);
  }
  if (e < 0) {
    free(g);
    return e;
  }
  if (opts->stop_on_signals)
    block_stop_signals(g);
  for (; g->started < g->n; g->started++) {
    if ((e = TDL__FAULT_ERR(EAGAIN, pthread_create(&g->m[g->started].thread, NULL, run_member, &g->m[g->started]))) != 0)
      break;
  }
  pthread_mutex_lock(&g->lock);
  while (g->ready < g->started)
    pthread_cond_wait(&g->changed, &g->lock);
  int start_error = g->start_error;
  g->go = (e != 0 || start_error < 0) ? -1 : 1;
  pthread_cond_broadcast(&g->changed);
  pthread_mutex_unlock(&g->lock);
  if (g->go < 0) {
    destroy(g); /* every thread gives up and ends */
    return e != 0 ? -e : start_error;
  }
  *out = g;
  return 0;
}

void tdl_group_stop(tdl_group *g)
{
  if (XCHG(&g->stopping, 1))
    return;
  for (unsigned i = 0; i < g->n; i++)
    if (g->m[i].port)
      tdl_port_post(g->m[i].port, &g->m[i].stop); /* -ESHUTDOWN: it ended already */
}

int tdl_group_wait(tdl_group *g, tdl_time_t deadline)
{
  if (tdl__tl_loop)
    return -EPERM; /* it would block a loop's thread */
  pthread_mutex_lock(&g->lock);
  int e = 0;
  while (g->ended < g->started && e == 0) {
    if (deadline == TDL_FOREVER) {
      pthread_cond_wait(&g->changed, &g->lock);
    } else {
      struct timespec ts = {(time_t)(deadline / TDL_SEC), (long)(deadline % TDL_SEC)};
      e = pthread_cond_timedwait(&g->changed, &g->lock, &ts);
    }
  }
  bool done = g->ended == g->started;
  pthread_mutex_unlock(&g->lock);
  if (!done)
    return -ETIMEDOUT;
  join_all(g);
  for (unsigned i = 0; i < g->n; i++)
    if (g->m[i].result < 0)
      return g->m[i].result;
  return 0;
}

int tdl_group_free(tdl_group *g)
{
  if (!g)
    return 0;
  pthread_mutex_lock(&g->lock);
  bool done = g->ended == g->started;
  pthread_mutex_unlock(&g->lock);
  if (!done)
    return -EBUSY;
  destroy(g);
  return 0;
}
