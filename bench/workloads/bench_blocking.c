/* SPDX-License-Identifier: MIT */
/*
 * blocking: F fibers each call a trivial function through the blocking-work
 * pool, N calls in all (tdl_blocking).  Keys: us_per_call (wall time over
 * N), cpu_us_per_call (user+sys of the whole process over N), threads (pool
 * threads started).
 *
 *   treadle-bench blocking [--calls N] [--fibers F]
 */
#include <treadle.h>

#include "bench.h"

#include <stdint.h>
#include <stdio.h>

static long calls_left, calls_done;

static void *trivial(void *arg) { return (void *)((intptr_t)arg + 1); }

static void *caller(void *arg)
{
  (void)arg;
  while (calls_left > 0) {
    long i = --calls_left;
    void *r = NULL;
    if (tdl_pool_call(TDL_LANE_USER, trivial, (void *)i, NULL, &r, TDL_FOREVER) != 0 || (intptr_t)r != i + 1)
      bench_die("blocking: a call failed");
    calls_done++;
  }
  return NULL;
}

int bench_blocking_main(int argc, char **argv)
{
  long calls = bench_opt_long(argc, argv, "calls", 200000);
  long fibers = bench_opt_long(argc, argv, "fibers", 64);
  if (calls < 1 || fibers < 1)
    bench_die("blocking: --calls and --fibers must be positive");
  tdl_loop *loop;
  if (tdl_loop_new(&loop, NULL) < 0)
    bench_die("blocking: no loop");
  /* Warm: the pool's threads exist before the clock starts, as libuv's
   * and tokio's do after their first calls. */
  calls_left = fibers;
  for (long i = 0; i < fibers; i++) {
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, caller, NULL, &(tdl_fiber_options){.detached = true}) < 0)
      bench_die("blocking: spawn");
  }
  tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  calls_left = calls;
  calls_done = 0;
  bench_span sp;
  bench_begin(&sp);
  for (long i = 0; i < fibers; i++) {
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, caller, NULL, &(tdl_fiber_options){.detached = true}) < 0)
      bench_die("blocking: spawn");
  }
  tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  bench_end(&sp);
  if (calls_done != calls)
    bench_die("blocking: %ld of %ld calls done", calls_done, calls);
  tdl_pool_stats st;
  tdl_pool_stats_get(&st);
  tdl_loop_free(loop);
  bench_result("treadle", "blocking", &sp, "calls=%ld fibers=%ld us_per_call=%.3f cpu_us_per_call=%.3f threads=%llu",
               calls, fibers, sp.wall_s * 1e6 / (double)calls, (sp.user_s + sp.sys_s) * 1e6 / (double)calls,
               (unsigned long long)st.started_threads);
  return 0;
}
