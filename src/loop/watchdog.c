/* SPDX-License-Identifier: MIT */
/*
 * The loop watchdog: one thread for the process that reports watched loops
 * which have been away from their poll for longer than their threshold.
 *
 * What crosses threads.  The loop's thread publishes, in the tdl__heartbeat
 * at the head of its loop's record (loop_internal.h), when it left its poll
 * and, through the scheduler, which fiber runs; it only stores there.  The
 * watchdog thread only loads the heartbeat, and reads nothing else of the
 * loop: not the loop (it may be freed), not a fiber (its control block is on
 * its stack, which may be reused or unmapped once it ends).  The rest of a
 * record (options, what was reported) is under the watchdog's lock.
 *
 * Lifetime.  A record is linked in the watchdog's list from start to stop.
 * The watchdog thread checks records under the lock and calls a callback
 * without it, with the record marked `in_report`; stop (and tdl_loop_free,
 * and a start that replaces options) wait under the lock until no report is
 * in progress, then unlink.  So the thread never looks at a freed record,
 * a callback never runs after its stop returned, and a record stays linked
 * (its list neighbours valid) while its callback runs.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/sys.h"
#include "base/thread.h"
#include "loop/loop_internal.h"

enum {
  CHECKS_PER_THRESHOLD = 4,       /* look every quarter of the smallest threshold */
  SEQ_TRIES = 8,                  /* attempts at a consistent copy of the running fiber */
};
#define MIN_PERIOD TDL_MSEC       /* a tiny threshold must not make the thread spin */

typedef struct tdl__watch {
  /* The loop thread's stores, alone on their cache line (see tdl__heartbeat). */
  _Alignas(64) tdl__heartbeat hb;
  /* The watchdog's: under W.lock. */
  _Alignas(64) tdl__list link; /* in W.watched */
  tdl_loop *loop;              /* reported, never dereferenced by the watchdog thread */
  tdl_time_t threshold;
  tdl_watchdog_cb cb;
  void *data;
  tdl_time_t reported;         /* away_since of the stall last reported */
  bool in_report;              /* its callback runs, without the lock */
  char name[TDL__WATCH_NAME];
} tdl__watch;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t tick;    /* the watchdog thread sleeps here between looks */
  pthread_cond_t idle;    /* a report ended: stop and start wait on it */
  tdl__list watched;      /* tdl__watch */
  bool thread_running;
  bool ready;             /* conditions made, fork handlers installed */
} W = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Set on the watchdog thread: its callbacks must not wait for themselves. */
static _Thread_local bool on_watchdog_thread;

/* ---- reading a heartbeat (watchdog thread, under the lock) ---- */

/* A consistent copy of what runs on the loop: false when the loop kept
 * switching fibers meanwhile (it is not stuck in one; look again later). */
static bool read_running(const tdl__heartbeat *hb, uint64_t *id, char name[TDL__WATCH_NAME])
{
  for (int i = 0; i < SEQ_TRIES; i++) {
    uint32_t before = __atomic_load_n(&hb->seq, __ATOMIC_ACQUIRE);
    if (before & 1)
      continue;
    uint64_t words[TDL__WATCH_NAME / 8];
    *id = __atomic_load_n(&hb->fiber_id, __ATOMIC_ACQUIRE);
    for (int w = 0; w < TDL__WATCH_NAME / 8; w++)
      words[w] = __atomic_load_n(&hb->fiber_name[w], __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&hb->seq, __ATOMIC_ACQUIRE) == before) {
      memcpy(name, words, TDL__WATCH_NAME);
      name[TDL__WATCH_NAME - 1] = '\0';
      return true;
    }
  }
  return false;
}

/* Whether w's loop is stalled and not yet reported for this stall; if so,
 * fills r (its strings point into w and fiber) and marks the stall reported. */
static bool stall_to_report(tdl__watch *w, tdl_time_t now, tdl_watchdog_report *r, char fiber[TDL__WATCH_NAME])
{
  tdl_time_t since = __atomic_load_n(&w->hb.away_since, __ATOMIC_RELAXED);
  if (since == 0 || since == w->reported || now - since < w->threshold)
    return false;
  uint64_t id;
  if (!read_running(&w->hb, &id, fiber))
    return false;
  if (__atomic_load_n(&w->hb.away_since, __ATOMIC_ACQUIRE) != since)
    return false; /* it came back while we looked */
  w->reported = since;
  *r = (tdl_watchdog_report){
      .loop = w->loop,
      .loop_name = w->name,
      .fiber = id ? fiber : NULL,
      .fiber_id = id,
      .since = since,
      .away = now - since,
      .threshold = w->threshold,
  };
  return true;
}

/* ---- the default report: one line, one write(2), no stdio, no allocation ---- */

static char *put_str(char *p, char *end, const char *s)
{
  while (*s && p < end)
    *p++ = *s++;
  return p;
}

static char *put_uint(char *p, char *end, uint64_t v, unsigned base)
{
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  while (n && p < end)
    *p++ = tmp[--n];
  return p;
}

/* ns as milliseconds with one decimal: "312.4 ms". */
static char *put_ms(char *p, char *end, tdl_time_t ns)
{
  p = put_uint(p, end, (uint64_t)(ns / TDL_MSEC), 10);
  p = put_str(p, end, ".");
  p = put_uint(p, end, (uint64_t)(ns % TDL_MSEC / (100 * TDL_USEC)), 10);
  return put_str(p, end, " ms");
}

static void report_to_stderr(const tdl_watchdog_report *r, void *data)
{
  (void)data;
  char line[192], *p = line, *end = line + sizeof line - 1;
  p = put_str(p, end, "treadle watchdog: loop 0x");
  p = put_uint(p, end, (uint64_t)(uintptr_t)r->loop, 16);
  if (r->loop_name[0]) {
    p = put_str(p, end, " \"");
    p = put_str(p, end, r->loop_name);
    p = put_str(p, end, "\"");
  }
  p = put_str(p, end, " away from its poll for ");
  p = put_ms(p, end, r->away);
  if (r->fiber) {
    p = put_str(p, end, ", in fiber ");
    p = put_uint(p, end, r->fiber_id, 10);
    if (r->fiber[0]) {
      p = put_str(p, end, " \"");
      p = put_str(p, end, r->fiber);
      p = put_str(p, end, "\"");
    }
  } else {
    p = put_str(p, end, ", in a callback (no fiber)");
  }
  *p++ = '\n'; /* end keeps a byte for it */
  /* One write, so that the line is not split by other output; a failure has
   * nowhere to be reported. */
  ssize_t ignored = tdl__sys_write(STDERR_FILENO, line, (size_t)(p - line));
  (void)ignored;
}

/* ---- the watchdog thread ---- */

/* Under the lock: call w's callback without the lock, w marked meanwhile so
 * that nobody unlinks or changes it. */
static void report(tdl__watch *w, const tdl_watchdog_report *r)
{
  w->in_report = true;
  tdl_watchdog_cb cb = w->cb ? w->cb : report_to_stderr;
  void *data = w->data;
  pthread_mutex_unlock(&W.lock);
  cb(r, data);
  pthread_mutex_lock(&W.lock);
  w->in_report = false;
  pthread_cond_broadcast(&W.idle);
}

/* Under the lock. */
static void check_all(void)
{
  tdl_time_t now = tdl__clock_now();
  for (tdl__list *n = tdl__list_first(&W.watched); n; n = tdl__list_next(&W.watched, n)) {
    tdl__watch *w = TDL__CONTAINER_OF(n, tdl__watch, link);
    tdl_watchdog_report r;
    char fiber[TDL__WATCH_NAME];
    if (stall_to_report(w, now, &r, fiber)) {
      report(w, &r); /* w stays linked meanwhile, so n->next is still valid */
      now = tdl__clock_now();
    }
  }
}

/* Under the lock: how long to sleep between looks. */
static tdl_time_t period(void)
{
  tdl_time_t smallest = TDL_TIME_MAX;
  TDL__LIST_FOREACH(n, &W.watched) {
    tdl__watch *w = TDL__CONTAINER_OF(n, tdl__watch, link);
    if (w->threshold < smallest)
      smallest = w->threshold;
  }
  tdl_time_t p = smallest / CHECKS_PER_THRESHOLD;
  return p < MIN_PERIOD ? MIN_PERIOD : p;
}

/* Under the lock: sleep until `until` (CLOCK_MONOTONIC) or a signal on tick. */
static void sleep_until(tdl_time_t until)
{
  struct timespec ts = {.tv_sec = until / TDL_SEC, .tv_nsec = until % TDL_SEC};
  pthread_cond_timedwait(&W.tick, &W.lock, &ts);
}

static void *watchdog_main(void *arg)
{
  (void)arg;
  on_watchdog_thread = true;
  pthread_mutex_lock(&W.lock);
  while (!tdl__list_empty(&W.watched)) {
    check_all();
    if (tdl__list_empty(&W.watched))
      break;
    sleep_until(tdl__time_add(tdl__clock_now(), period()));
  }
  /* No loop is watched: exit, and let the next start make a new thread. */
  W.thread_running = false;
  pthread_mutex_unlock(&W.lock);
  return NULL;
}

/* Under the lock: start the thread.  0 or -EAGAIN. */
static int start_thread(void)
{
  int e = tdl__thread_start(watchdog_main, NULL);
  if (e == 0)
    W.thread_running = true;
  return e;
}

/* ---- fork() ---- */

/* The child must not inherit the lock held, and has no watchdog thread: a
 * report in progress in the parent is not one in the child. */
static void before_fork(void) { pthread_mutex_lock(&W.lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&W.lock); }

static void init_conds(void)
{
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines on the one clock */
  pthread_cond_init(&W.tick, &ca);
  pthread_cond_init(&W.idle, &ca);
  pthread_condattr_destroy(&ca);
}

static void after_fork_child(void)
{
  pthread_mutex_init(&W.lock, NULL);
  init_conds();
  W.thread_running = false;
  TDL__LIST_FOREACH(n, &W.watched)
    TDL__CONTAINER_OF(n, tdl__watch, link)->in_report = false;
}

/* Under the lock. */
static void ready(void)
{
  if (W.ready)
    return;
  init_conds();
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  W.ready = true;
}

/* ---- the loop's side (its thread) ---- */

/* Under the lock: the watchdog thread runs.  0 or -EAGAIN. */
static int ensure_thread(void)
{
  ready();
  return W.thread_running ? 0 : start_thread();
}

/* Under the lock: until w's callback (if running) has returned. */
static void wait_no_report(tdl__watch *w)
{
  while (w->in_report)
    pthread_cond_wait(&W.idle, &W.lock);
}

/* Under the lock. */
static void set_options(tdl__watch *w, const tdl_watchdog_options *opts)
{
  w->threshold = opts && opts->threshold ? opts->threshold : TDL_WATCHDOG_THRESHOLD;
  w->cb = opts ? opts->cb : NULL;
  w->data = opts ? opts->data : NULL;
  memset(w->name, 0, sizeof w->name);
  if (opts && opts->name)
    strncpy(w->name, opts->name, sizeof w->name - 1);
}

static int check_caller(tdl_loop *loop)
{
  if (!loop)
    return -EINVAL;
  if (on_watchdog_thread)
    return -EDEADLK; /* stop would wait for the callback that calls it */
  TDL__CHECK_THREAD(loop);
  return 0;
}

/* A first watchdog for loop.  The heartbeat is filled in before the record is
 * linked, so the watchdog thread never sees it half made. */
static int watch_new(tdl_loop *loop, const tdl_watchdog_options *opts)
{
  tdl__watch *w = TDL__FAULT_ALLOC(aligned_alloc(64, sizeof *w)); /* sizeof is a multiple of 64 */
  if (!w)
    return -ENOMEM;
  memset(w, 0, sizeof *w);
  w->loop = loop;
  set_options(w, opts);
  /* Started from inside the loop: this iteration began at loop->now. */
  w->hb.away_since = loop->running ? loop->now : 0;
  loop->watch = &w->hb;
  if (loop->sched_watched)
    loop->sched_watched(loop); /* the fiber running now, if any */
  pthread_mutex_lock(&W.lock);
  int e = ensure_thread();
  if (e == 0) {
    tdl__list_push(&W.watched, &w->link);
    pthread_cond_signal(&W.tick); /* its threshold may be the smallest now */
  }
  pthread_mutex_unlock(&W.lock);
  if (e < 0) {
    loop->watch = NULL;
    free(w);
  }
  return e;
}

int tdl_watchdog_start(tdl_loop *loop, const tdl_watchdog_options *opts)
{
  int e = check_caller(loop);
  if (e < 0)
    return e;
  if (opts && opts->threshold < 0)
    return -EINVAL;
  if (!loop->watch)
    return watch_new(loop, opts);
  tdl__watch *w = TDL__CONTAINER_OF(loop->watch, tdl__watch, hb);
  pthread_mutex_lock(&W.lock);
  e = ensure_thread(); /* none in a child after fork() */
  if (e == 0) {
    wait_no_report(w);
    set_options(w, opts);
    pthread_cond_signal(&W.tick);
  }
  pthread_mutex_unlock(&W.lock);
  return e;
}

void tdl__watchdog_close(tdl_loop *loop)
{
  if (!loop->watch)
    return;
  tdl__watch *w = TDL__CONTAINER_OF(loop->watch, tdl__watch, hb);
  loop->watch = NULL; /* the loop's thread stores into it no more */
  pthread_mutex_lock(&W.lock);
  wait_no_report(w);
  tdl__list_remove(&w->link);
  if (tdl__list_empty(&W.watched))
    pthread_cond_signal(&W.tick); /* the thread exits now rather than at its next look */
  pthread_mutex_unlock(&W.lock);
  free(w);
}

int tdl_watchdog_stop(tdl_loop *loop)
{
  int e = check_caller(loop);
  if (e < 0)
    return e;
  tdl__watchdog_close(loop);
  return 0;
}
