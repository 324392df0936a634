/* SPDX-License-Identifier: MIT */
/* The loop watchdog: a fiber or a callback that keeps its loop from its poll
 * is reported (once per stall, with its name), time at the poll or outside
 * tdl_loop_run is not, stop and free wait for a report in progress, the
 * default report is one line, and misuse fails cleanly.  Timings are only
 * "a stall well past the threshold" (300 ms against 50 ms) and "no stall". */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define THRESHOLD (50 * TDL_MSEC)
#define STALL_US 300000 /* six thresholds: reported, whatever the check period */

/* ---- what the callback saw (written on the watchdog thread) ---- */

typedef struct seen {
  pthread_mutex_t lock;
  int reports;
  tdl_loop *loop;
  bool in_fiber;
  char fiber[32];
  uint64_t fiber_id;
  tdl_time_t since, away, threshold;
  char loop_name[32];
  tdl_loop *other; /* calls made from the callback, on this loop: */
  int start_rc, stop_rc;
} seen;

static void seen_init(seen *s)
{
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->lock, NULL);
}

static int seen_reports(seen *s)
{
  pthread_mutex_lock(&s->lock);
  int n = s->reports;
  pthread_mutex_unlock(&s->lock);
  return n;
}

static void capture(const tdl_watchdog_report *r, void *data)
{
  seen *s = data;
  pthread_mutex_lock(&s->lock);
  s->reports++;
  s->loop = r->loop;
  s->in_fiber = r->fiber != NULL;
  snprintf(s->fiber, sizeof s->fiber, "%s", r->fiber ? r->fiber : "");
  s->fiber_id = r->fiber_id;
  s->since = r->since;
  s->away = r->away;
  s->threshold = r->threshold;
  snprintf(s->loop_name, sizeof s->loop_name, "%s", r->loop_name);
  if (s->other) {
    s->start_rc = tdl_watchdog_start(s->other, NULL);
    s->stop_rc = tdl_watchdog_stop(s->other);
  }
  pthread_mutex_unlock(&s->lock);
}

static int watch(tdl_loop *loop, seen *s, tdl_time_t threshold)
{
  return tdl_watchdog_start(loop, &(tdl_watchdog_options){.threshold = threshold, .cb = capture, .data = s});
}

/* ---- fibers and callbacks that block their loop's thread ---- */

/* The accidental blocking call: STALL_US, then on until s has one more
 * report (bounded: T_HANG), so that a machine that stops this process for a
 * while cannot make the stall end before the watchdog has looked.  s NULL:
 * STALL_US only (no report expected). */
static void block(seen *s)
{
  int before = s ? seen_reports(s) : 0;
  usleep(STALL_US);
  for (tdl_time_t end = t_clock() + T_HANG; s && seen_reports(s) == before && t_clock() < end;)
    usleep(10000);
}

static int find_self(const tdl_fiber_info *in, void *ctx)
{
  if (in->handle != tdl_fiber_self())
    return 0;
  *(uint64_t *)ctx = in->id;
  return 1;
}

typedef struct blocker {
  seen *s;      /* where its stalls are reported (NULL: nowhere) */
  uint64_t id;  /* out: the fiber's id */
  int stalls;   /* how many times to block, going back to the poll in between */
  seen *watch_from_inside; /* start the watchdog from the fiber itself */
} blocker;

static void *block_fiber(void *arg)
{
  blocker *b = arg;
  tdl_fiber_foreach(tdl_fiber_loop(), find_self, &b->id);
  if (b->watch_from_inside)
    assert_int_equal(watch(tdl_fiber_loop(), b->watch_from_inside, THRESHOLD), 0);
  for (int i = 0; i < b->stalls; i++) {
    if (i > 0)
      assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0); /* back to the poll */
    block(b->s);
  }
  return NULL;
}

static void spawn_named(tdl_loop *loop, const char *name, blocker *b)
{
  tdl_fiber_options o = {.name = name, .detached = true};
  assert_int_equal(tdl_fiber_spawn(NULL, loop, block_fiber, b, &o), 0);
}

static void block_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  block(t->data);
}

/* ---- tests ---- */

/* The report names the loop and the fiber, says how long, and comes once for
 * a stall however long it lasts.  Another watched loop of the thread, not
 * running meanwhile, is not reported. */
static void blocking_fiber_is_reported_once(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *loop = t_loop_new(), *idle = t_loop_new();
  assert_int_equal(watch(loop, &s, THRESHOLD), 0);
  assert_int_equal(watch(idle, &s, THRESHOLD), 0);
  blocker b = {.s = &s, .stalls = 1};
  spawn_named(loop, "sleeper", &b);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(tdl_watchdog_stop(idle), 0);
  assert_int_equal(s.reports, 1);
  assert_ptr_equal(s.loop, loop);
  assert_true(s.in_fiber);
  assert_string_equal(s.fiber, "sleeper");
  assert_true(b.id != 0);
  assert_int_equal(s.fiber_id, b.id);
  assert_true(s.away >= THRESHOLD);
  assert_int_equal(s.threshold, THRESHOLD);
  assert_true(s.since > 0);
  assert_string_equal(s.loop_name, "");
  t_loop_free(loop);
  t_loop_free(idle);
}

/* A stall after the loop polled again is a new stall. */
static void each_stall_is_reported(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(watch(loop, &s, THRESHOLD), 0);
  blocker b = {.s = &s, .stalls = 2};
  spawn_named(loop, "twice", &b);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(s.reports, 2);
  assert_string_equal(s.fiber, "twice");
  t_loop_free(loop);
}

/* Started by the fiber that then blocks: the report still names it (the
 * scheduler tells the watchdog what runs at start, not only at switches). */
static void started_from_the_blocking_fiber(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *loop = t_loop_new();
  blocker b = {.s = &s, .stalls = 1, .watch_from_inside = &s};
  spawn_named(loop, "self-watcher", &b);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(s.reports, 1);
  assert_string_equal(s.fiber, "self-watcher");
  t_loop_free(loop);
}

static void *quick_fiber(void *arg)
{
  (void)arg;
  return NULL;
}

/* A plain callback (a timer's): no fiber, also on a loop whose fibers ran
 * just before. */
static void blocking_callback_is_reported(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(watch(loop, &s, THRESHOLD), 0);
  tdl_fiber_options o = {.name = "quick", .detached = true};
  assert_int_equal(tdl_fiber_spawn(NULL, loop, quick_fiber, NULL, &o), 0);
  tdl_timer t;
  tdl_timer_init(&t, block_cb, &s);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(s.reports, 1);
  assert_false(s.in_fiber);
  assert_int_equal(s.fiber_id, 0);
  assert_true(s.away >= THRESHOLD);
  t_loop_free(loop);
}

static void *unnamed_fiber_alone(void *arg)
{
  block(arg);
  return NULL;
}

static void unnamed_fiber_is_reported_by_id(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(watch(loop, &s, THRESHOLD), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, loop, unnamed_fiber_alone, &s, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(s.reports, 1);
  assert_true(s.in_fiber);
  assert_string_equal(s.fiber, "");
  assert_true(s.fiber_id != 0);
  t_loop_free(loop);
}

static void tick_cb(tdl_loop *loop, tdl_timer *t)
{
  int *left = t->data;
  if (--*left == 0)
    tdl_timer_stop(loop, t);
}

static void noop_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
}

/* Sleeping in the poll, short callbacks and time outside tdl_loop_run are
 * not stalls.  The default threshold (100 ms) is the one reported. */
static void only_time_away_from_the_poll_counts(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(watch(loop, &s, 0), 0);
  int ticks = 40;
  tdl_timer tick, nap;
  tdl_timer_init(&tick, tick_cb, &ticks);
  assert_int_equal(tdl_timer_start(loop, &tick, 0, 5 * TDL_MSEC), 0); /* 200 ms of short callbacks */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  tdl_timer_init(&nap, noop_cb, NULL);
  assert_int_equal(tdl_timer_start(loop, &nap, 3 * TDL_WATCHDOG_THRESHOLD, 0), 0); /* asleep in the poll */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  usleep(STALL_US); /* not running: the caller's time */
  assert_int_equal(seen_reports(&s), 0);

  tdl_timer_init(&nap, block_cb, &s);
  assert_int_equal(tdl_timer_start(loop, &nap, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(s.reports, 1);
  assert_int_equal(s.threshold, TDL_WATCHDOG_THRESHOLD);
  t_loop_free(loop);
}

static void stop_stops_reports(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_watchdog_stop(loop), 0); /* never started: nothing to do */
  assert_int_equal(watch(loop, &s, THRESHOLD), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0); /* twice: nothing to do */
  blocker b = {.stalls = 1};
  spawn_named(loop, "unwatched", &b);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(s.reports, 0);
  t_loop_free(loop);
}

/* ---- a report in progress while the loop's thread stops or frees ---- */

typedef struct slow {
  int entered, left; /* atomic */
} slow;

static void slow_report(const tdl_watchdog_report *r, void *data)
{
  (void)r;
  slow *sl = data;
  __atomic_store_n(&sl->entered, 1, __ATOMIC_SEQ_CST);
  usleep(100000);
  __atomic_store_n(&sl->left, 1, __ATOMIC_SEQ_CST);
}

/* Block the loop's thread until the slow report has begun. */
static void wait_entered(slow *sl)
{
  for (tdl_time_t end = t_clock() + T_HANG; !__atomic_load_n(&sl->entered, __ATOMIC_SEQ_CST) && t_clock() < end;)
    usleep(1000);
  assert_true(__atomic_load_n(&sl->entered, __ATOMIC_SEQ_CST));
}

static void *stop_during_report(void *arg)
{
  slow *sl = arg;
  wait_entered(sl);
  assert_int_equal(tdl_watchdog_stop(tdl_fiber_loop()), 0);
  assert_true(__atomic_load_n(&sl->left, __ATOMIC_SEQ_CST)); /* it waited */
  return NULL;
}

static void stop_waits_for_a_report_in_progress(void **state)
{
  (void)state;
  slow sl = {0, 0};
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_watchdog_start(loop, &(tdl_watchdog_options){.threshold = THRESHOLD, .cb = slow_report, .data = &sl}), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, loop, stop_during_report, &sl, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  t_loop_free(loop);
}

static void block_until_reported(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  wait_entered(t->data);
}

static void free_waits_for_a_report_in_progress(void **state)
{
  (void)state;
  slow sl = {0, 0};
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_watchdog_start(loop, &(tdl_watchdog_options){.threshold = THRESHOLD, .cb = slow_report, .data = &sl}), 0);
  tdl_timer t;
  tdl_timer_init(&t, block_until_reported, &sl);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(loop), 0); /* watched, and a report in progress */
  assert_true(__atomic_load_n(&sl.left, __ATOMIC_SEQ_CST));
}

/* ---- the default report ---- */

/* The read end of the pipe that stands for stderr. */
static int report_pipe = -1;

/* Block: STALL_US, then on until the report is in the pipe (bounded: T_HANG). */
static void block_until_written(void)
{
  usleep(STALL_US);
  struct pollfd p = {.fd = report_pipe, .events = POLLIN};
  poll(&p, 1, (int)(T_HANG / TDL_MSEC));
}

static void *named_stall(void *arg)
{
  (void)arg;
  block_until_written();
  return NULL;
}

static void block_until_written_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  block_until_written();
}

/* Everything written to stderr while fn(loop) runs. */
static size_t capture_stderr(char *buf, size_t cap, void (*fn)(tdl_loop *), tdl_loop *loop)
{
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  report_pipe = p[0];
  int saved = dup(STDERR_FILENO);
  assert_true(saved >= 0);
  assert_int_equal(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
  close(p[1]);
  fn(loop);
  dup2(saved, STDERR_FILENO); /* also drops the pipe's last write end */
  close(saved);
  size_t n = 0;
  ssize_t r;
  while (n < cap - 1 && (r = read(p[0], buf + n, cap - 1 - n)) > 0)
    n += (size_t)r;
  buf[n] = '\0';
  close(p[0]);
  return n;
}

static void stall_in_fiber(tdl_loop *loop)
{
  tdl_fiber_options o = {.name = "printer", .detached = true};
  assert_int_equal(tdl_fiber_spawn(NULL, loop, named_stall, NULL, &o), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0); /* the report is written */
}

static void stall_in_callback(tdl_loop *loop)
{
  tdl_timer t;
  tdl_timer_init(&t, block_until_written_cb, NULL);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
}

/* The report's line, then only the lines of its call chain (indented;
 * tdl_watchdog_report_chain, which test_watchdog_chain checks). */
static bool one_line_and_chain(const char *s)
{
  const char *nl = strchr(s, '\n');
  if (strncmp(s, "treadle watchdog: ", 18) != 0 || !nl)
    return false;
  for (s = nl + 1; *s; s = nl + 1) {
    if (strncmp(s, "        ", 8) != 0 || !(nl = strchr(s, '\n')))
      return false;
  }
  return true;
}

static void default_report_is_a_line_and_its_chain(void **state)
{
  (void)state;
  char out[8192], expect[64];
  tdl_loop *loop = t_loop_new();
  tdl_watchdog_options o = {.threshold = THRESHOLD, .name = "net-1"};
  assert_int_equal(tdl_watchdog_start(loop, &o), 0);
  size_t n = capture_stderr(out, sizeof out, stall_in_fiber, loop);
  assert_true(n > 0);
  assert_true(one_line_and_chain(out));
  assert_int_equal(out[n - 1], '\n');
  snprintf(expect, sizeof expect, "treadle watchdog: loop %p \"net-1\" away from its poll for ", (void *)loop);
  assert_non_null(strstr(out, expect));
  assert_non_null(strstr(out, " ms, in fiber "));
  assert_non_null(strstr(out, " \"printer\"\n"));

  o.name = NULL;
  assert_int_equal(tdl_watchdog_start(loop, &o), 0);
  n = capture_stderr(out, sizeof out, stall_in_callback, loop);
  assert_true(one_line_and_chain(out));
  snprintf(expect, sizeof expect, "treadle watchdog: loop %p away from its poll for ", (void *)loop);
  assert_non_null(strstr(out, expect));
  assert_non_null(strstr(out, " ms, in a callback (no fiber)\n"));
  t_loop_free(loop);
}

/* ---- several loops on several threads ---- */

typedef struct other_loop {
  seen *s;
  tdl_loop *loop; /* out */
} other_loop;

static void *run_blocking_loop(void *arg)
{
  other_loop *ol = arg;
  ol->loop = t_loop_new();
  assert_int_equal(watch(ol->loop, ol->s, THRESHOLD), 0);
  blocker b = {.s = ol->s, .stalls = 1};
  spawn_named(ol->loop, "elsewhere", &b);
  assert_int_equal(tdl_loop_run(ol->loop, TDL_LOOP_DEFAULT), 0);
  t_loop_free(ol->loop); /* stops its watchdog */
  return NULL;
}

/* One thread blocks its loop; this one polls its own all along: only the
 * other is reported. */
static void only_the_stalled_loop_is_reported(void **state)
{
  (void)state;
  seen s;
  seen_init(&s);
  tdl_loop *mine = t_loop_new();
  assert_int_equal(watch(mine, &s, THRESHOLD), 0);
  other_loop ol = {&s, NULL};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_blocking_loop, &ol), 0);
  int ticks = 100;
  tdl_timer tick;
  tdl_timer_init(&tick, tick_cb, &ticks);
  assert_int_equal(tdl_timer_start(mine, &tick, 0, 5 * TDL_MSEC), 0); /* ~500 ms of polling */
  assert_int_equal(tdl_loop_run(mine, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(tdl_watchdog_stop(mine), 0);
  assert_int_equal(s.reports, 1);
  assert_ptr_equal(s.loop, ol.loop);
  assert_string_equal(s.fiber, "elsewhere");
  t_loop_free(mine);
}

/* ---- misuse ---- */

static void *start_elsewhere(void *arg)
{
  return (void *)(intptr_t)tdl_watchdog_start(arg, NULL);
}

static void misuse(void **state)
{
  (void)state;
  seen a, b;
  seen_init(&a);
  seen_init(&b);
  tdl_loop *loop = t_loop_new();
  assert_int_equal(tdl_watchdog_start(NULL, NULL), -EINVAL);
  assert_int_equal(tdl_watchdog_stop(NULL), -EINVAL);
  assert_int_equal(watch(loop, &a, -1), -EINVAL);
  assert_int_equal(watch(loop, &a, -TDL_SEC), -EINVAL);

  /* Starting twice replaces the options: only the second callback hears. */
  assert_int_equal(watch(loop, &a, THRESHOLD), 0);
  assert_int_equal(watch(loop, &b, THRESHOLD), 0);
  assert_int_equal(watch(loop, &b, -1), -EINVAL); /* and a failed start keeps them */
  pthread_mutex_lock(&b.lock);
  b.other = loop; /* the callback tries to start and stop it */
  pthread_mutex_unlock(&b.lock);
  blocker bl = {.s = &b, .stalls = 1};
  spawn_named(loop, "replaced", &bl);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_watchdog_stop(loop), 0);
  assert_int_equal(a.reports, 0);
  assert_int_equal(b.reports, 1);
  assert_int_equal(b.threshold, THRESHOLD);
  assert_int_equal(b.start_rc, -EDEADLK); /* from the watchdog thread */
  assert_int_equal(b.stop_rc, -EDEADLK);

#ifdef TDL_DEBUG_CHECKS
  pthread_t t;
  void *rc;
  assert_int_equal(pthread_create(&t, NULL, start_elsewhere, loop), 0);
  assert_int_equal(pthread_join(t, &rc), 0);
  assert_int_equal((int)(intptr_t)rc, -EPERM);
#else
  (void)start_elsewhere;
#endif

  assert_int_equal(tdl_watchdog_start(loop, NULL), 0); /* every default */
  assert_int_equal(tdl_watchdog_stop(loop), 0);

  /* Freeing a watched loop stops its watchdog (ASan and valgrind check that
   * nothing is left). */
  assert_int_equal(watch(loop, &a, THRESHOLD), 0);
  t_loop_free(loop);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(blocking_fiber_is_reported_once),
      cmocka_unit_test(each_stall_is_reported),
      cmocka_unit_test(started_from_the_blocking_fiber),
      cmocka_unit_test(blocking_callback_is_reported),
      cmocka_unit_test(unnamed_fiber_is_reported_by_id),
      cmocka_unit_test(only_time_away_from_the_poll_counts),
      cmocka_unit_test(stop_stops_reports),
      cmocka_unit_test(stop_waits_for_a_report_in_progress),
      cmocka_unit_test(free_waits_for_a_report_in_progress),
      cmocka_unit_test(default_report_is_a_line_and_its_chain),
      cmocka_unit_test(only_the_stalled_loop_is_reported),
      cmocka_unit_test(misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
