/* SPDX-License-Identifier: MIT */
/*
 * The timers workload of docs/BENCHMARKS.md on treadle's loop API.
 * The random draws (deadlines and the cancel order) are made before the
 * clock starts, so that only the library's work is timed; every peer under
 * bench/peers/ does the same.
 */
#include <treadle.h>

#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long fired;

static void timer_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  fired++;
}

/* n delays uniform over [lo, hi] ns. */
static tdl_time_t *draw_delays(long n, tdl_time_t lo, tdl_time_t hi, uint64_t *seed)
{
  tdl_time_t *d = malloc((size_t)n * sizeof *d);
  if (!d)
    bench_die("out of memory");
  uint64_t span = (uint64_t)(hi - lo) + 1;
  for (long i = 0; i < n; i++)
    d[i] = lo + (tdl_time_t)(bench_rand(seed) % span);
  return d;
}

static int run_add_cancel(tdl_loop *loop, tdl_timer *t, long n)
{
  uint64_t seed = 1;
  tdl_time_t *delay = draw_delays(n, 1 * TDL_SEC, 10 * TDL_SEC, &seed);
  uint32_t *order = malloc((size_t)n * sizeof *order);
  if (!order)
    bench_die("out of memory");
  for (long i = 0; i < n; i++)
    order[i] = (uint32_t)i;
  for (long i = n - 1; i > 0; i--) {
    long j = (long)(bench_rand(&seed) % (uint64_t)(i + 1));
    uint32_t x = order[i];
    order[i] = order[j];
    order[j] = x;
  }

  bench_span all, add, cancel;
  tdl_loop_update_time(loop);
  bench_begin(&all);
  bench_begin(&add);
  for (long i = 0; i < n; i++) {
    int rc = tdl_timer_start(loop, &t[i], delay[i], 0);
    if (rc < 0)
      bench_die("tdl_timer_start: %s", tdl_strerror(rc));
  }
  bench_end(&add);
  bench_begin(&cancel);
  for (long i = 0; i < n; i++)
    tdl_timer_stop(loop, &t[order[i]]);
  bench_end(&cancel);
  bench_end(&all);

  long still = 0;
  for (long i = 0; i < n; i++)
    still += tdl_timer_active(&t[i]);
  if (still || fired || tdl_loop_alive(loop)) {
    fprintf(stderr, "timers: FAILED: %ld timers still active, %ld fired, loop %s alive after cancelling all\n",
            still, fired, tdl_loop_alive(loop) ? "still" : "not");
    return 1;
  }
  /* CPU time, not wall: adding and cancelling are pure computation, and
   * CPU time is what stays steady on a shared machine. */
  bench_result("treadle", "timers", &all, "timers=%ld mode=add_cancel ns_per_add=%.1f ns_per_cancel=%.1f", n,
               (add.user_s + add.sys_s) * 1e9 / (double)n, (cancel.user_s + cancel.sys_s) * 1e9 / (double)n);
  free(delay);
  free(order);
  return 0;
}

static int run_fire(tdl_loop *loop, tdl_timer *t, long n)
{
  uint64_t seed = 2;
  tdl_time_t *delay = draw_delays(n, 0, 200 * TDL_MSEC, &seed);

  bench_span s;
  bench_begin(&s);
  tdl_loop_update_time(loop);
  for (long i = 0; i < n; i++) {
    int rc = tdl_timer_start(loop, &t[i], delay[i], 0);
    if (rc < 0)
      bench_die("tdl_timer_start: %s", tdl_strerror(rc));
  }
  int rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  bench_end(&s);

  if (rc != 0 || fired != n) {
    fprintf(stderr, "timers: FAILED: %ld of %ld timers fired (tdl_loop_run returned %d)\n", fired, n, rc);
    return 1;
  }
  bench_result("treadle", "timers", &s, "timers=%ld mode=fire ns_per_timer=%.1f cpu_ns_per_timer=%.1f", n,
               s.wall_s * 1e9 / (double)n, (s.user_s + s.sys_s) * 1e9 / (double)n);
  free(delay);
  return 0;
}

int bench_timers_main(int argc, char **argv)
{
  long n = bench_opt_long(argc, argv, "timers", 1000000);
  const char *mode = bench_opt_str(argc, argv, "mode", "add_cancel");
  bool fire = strcmp(mode, "fire") == 0;
  if (n < 1 || n > UINT32_MAX || (!fire && strcmp(mode, "add_cancel") != 0)) {
    fprintf(stderr, "timers: need --timers >= 1 and --mode add_cancel|fire\n");
    return 2;
  }

  tdl_loop *loop;
  int rc = tdl_loop_new(&loop, NULL);
  if (rc < 0)
    bench_die("tdl_loop_new: %s", tdl_strerror(rc));
  /* Initialising the timers touches their memory: page faults are setup. */
  tdl_timer *t = malloc((size_t)n * sizeof *t);
  if (!t)
    bench_die("out of memory");
  for (long i = 0; i < n; i++)
    tdl_timer_init(&t[i], timer_cb, NULL);

  rc = fire ? run_fire(loop, t, n) : run_add_cancel(loop, t, n);
  if (rc == 0 && (rc = tdl_loop_free(loop)) < 0) {
    fprintf(stderr, "timers: tdl_loop_free: %s\n", tdl_strerror(rc));
    rc = 0;
  }
  free(t);
  return rc;
}
