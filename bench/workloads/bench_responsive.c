/* SPDX-License-Identifier: MIT */
/*
 * responsive: does a loop stay on time while its fibers make blocking calls?
 * F fibers loop making a blocking call of M ms (nanosleep), for S seconds,
 * while a repeating 1 ms timer (tdl_timer with repeat) on the same loop
 * records how late each of its firings is: the time read from
 * CLOCK_MONOTONIC in the callback (not the loop's cached time, which is
 * what lags) minus the deadline it fired for.
 *
 *   treadle-bench responsive [--fibers F] [--call-ms M] [--seconds S] [--mode pool|direct]
 *
 * pool: each call goes through the blocking-work pool (tdl_blocking) and
 * parks only its fiber.  direct: each call is made in the fiber, on the
 * loop's thread; the fiber then gives the loop a turn (a 1 ns sleep),
 * without which a fiber that never parks would hold the loop for good.
 * Fibers woken together still run back to back, so there the timer waits
 * for up to F calls: what the pool saves.
 *
 * Keys: lateness_p50_us, lateness_p99_us, lateness_p999_us, lateness_max_us
 * (nearest rank over every firing), ticks (firings; a loop held for longer
 * than a period skips the periods it missed, as loop.h says), calls_done.
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICK TDL_MSEC

static bool stopping;
static long calls_done;
static tdl_time_t call_ns;
static bool via_pool;

static tdl_time_t tick_due; /* the deadline the tick timer is armed for */
static int64_t *lateness;   /* ns, one per firing */
static size_t ticks, ticks_cap;

static tdl_time_t clock_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

/* The blocking call: sleeps call_ns on whatever thread runs it. */
static void *blocking_call(void *arg)
{
  (void)arg;
  struct timespec left = {(time_t)(call_ns / TDL_SEC), (long)(call_ns % TDL_SEC)};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  return NULL;
}

static void *caller(void *arg)
{
  long rounds = (long)(intptr_t)arg; /* > 0: that many calls (the warm round); 0: until stopping */
  for (long i = 0; rounds == 0 ? !stopping : i < rounds; i++) {
    if (via_pool) {
      int rc = tdl_pool_call(TDL_LANE_USER, blocking_call, NULL, NULL, NULL, TDL_FOREVER);
      if (rc != 0)
        bench_die("responsive: tdl_blocking: %s", tdl_strerror(rc));
    } else {
      blocking_call(NULL);
      /* Parks until the loop's next turn: 1 ns, not 0, since a deadline
       * already past returns at once without parking (fiber.h). */
      tdl_sleep(tdl_after(1));
    }
    calls_done++;
  }
  return NULL;
}

static void on_tick(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  int64_t late = clock_ns() - tick_due;
  if (late < 0)
    bench_die("responsive: the timer fired %lld ns before its deadline", (long long)-late);
  if (ticks == ticks_cap) {
    ticks_cap = ticks_cap ? 2 * ticks_cap : 4096;
    lateness = realloc(lateness, ticks_cap * sizeof *lateness);
    if (!lateness)
      bench_die("responsive: out of memory");
  }
  lateness[ticks++] = late;
  /* The deadline the loop has re-armed the timer for, by loop.h's rule (the
   * code in src/loop/timer.c): one period after this one, skipping the
   * periods that the loop's cached now has already passed. */
  tdl_time_t next = tick_due + TICK, now = tdl_now();
  if (next <= now)
    next += ((now - next) / TICK + 1) * TICK;
  tick_due = next;
}

static tdl_timer tick, stop;

static void on_stop(tdl_loop *loop, tdl_timer *t)
{
  (void)t;
  stopping = true;
  tdl_timer_stop(loop, &tick);
}

static void spawn_callers(tdl_loop *loop, long fibers, long rounds)
{
  for (long i = 0; i < fibers; i++) {
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, caller, (void *)(intptr_t)rounds, &(tdl_fiber_options){.detached = true}) < 0)
      bench_die("responsive: spawn");
  }
}

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least p of the firings at or
 * below it, in microseconds. */
static double pct_us(double p)
{
  size_t rank = (size_t)(p * (double)ticks + 0.999999);
  if (rank < 1)
    rank = 1;
  return (double)lateness[rank - 1] / 1e3;
}

int bench_responsive_main(int argc, char **argv)
{
  long fibers = bench_opt_long(argc, argv, "fibers", 64);
  long call_ms = bench_opt_long(argc, argv, "call-ms", 10);
  long seconds = bench_opt_long(argc, argv, "seconds", 3);
  const char *mode = bench_opt_str(argc, argv, "mode", "pool");
  via_pool = strcmp(mode, "pool") == 0;
  if (fibers < 1 || call_ms < 0 || seconds < 1 || (!via_pool && strcmp(mode, "direct") != 0)) {
    fprintf(stderr, "responsive: need --fibers >= 1, --call-ms >= 0, --seconds >= 1, --mode pool|direct\n");
    return 2;
  }
  call_ns = call_ms * TDL_MSEC;
  tdl_loop *loop;
  if (tdl_loop_new(&loop, NULL) < 0)
    bench_die("responsive: no loop");
  if (via_pool) { /* warm: the pool's threads exist before the clock starts */
    spawn_callers(loop, fibers, 1);
    tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  }
  calls_done = 0;

  tdl_timer_init(&tick, on_tick, NULL);
  tdl_timer_init(&stop, on_stop, NULL);
  bench_span sp;
  bench_begin(&sp);
  tdl_loop_update_time(loop);
  tdl_time_t t0 = tdl_now();
  tick_due = t0 + TICK;
  if (tdl_timer_start_at(loop, &tick, tick_due, TICK) < 0 ||
      tdl_timer_start_at(loop, &stop, t0 + seconds * TDL_SEC, 0) < 0)
    bench_die("responsive: timer");
  spawn_callers(loop, fibers, 0);
  int rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  bench_end(&sp);
  if (rc < 0)
    bench_die("responsive: tdl_loop_run: %s", tdl_strerror(rc));
  if (ticks == 0 || calls_done < fibers)
    bench_die("responsive: %zu ticks, %ld calls done", ticks, calls_done);
  if (tdl_loop_free(loop) < 0)
    bench_die("responsive: tdl_loop_free");

  qsort(lateness, ticks, sizeof *lateness, cmp_i64);
  char impl[32];
  snprintf(impl, sizeof impl, "treadle-%s", mode);
  bench_result(impl, "responsive", &sp,
               "fibers=%ld call_ms=%ld seconds=%ld mode=%s lateness_p50_us=%.1f lateness_p99_us=%.1f "
               "lateness_p999_us=%.1f lateness_max_us=%.1f ticks=%zu calls_done=%ld",
               fibers, call_ms, seconds, mode, pct_us(0.50), pct_us(0.99), pct_us(0.999), pct_us(1.0), ticks,
               calls_done);
  free(lateness);
  return 0;
}
