/* SPDX-License-Identifier: MIT */
/*
 * skew: work born in one place.  One fiber, on loop 0 of a group of L
 * loops, spawns N fibers into the group (tdl_group_spawn, the default
 * placement and stealing) and joins them; each runs I rounds of xorshift64
 * from seed i | 1 and adds its x to a shared atomic sum, which is printed
 * so that the work cannot be left out.  With stealing, the other loops take
 * the fibers loop 0 has not started.  Key: tasks_per_s (wall time).
 *
 *   treadle-bench skew --tasks N --iters I --loops L
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static struct {
  long tasks, iters;
  uint64_t sum; /* atomic */
  tdl_group_fiber **handles;
  int failed;
} S;

static void *task(void *arg)
{
  uint64_t x = (uint64_t)(uintptr_t)arg | 1;
  for (long r = 0; r < S.iters; r++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  __atomic_add_fetch(&S.sum, x, __ATOMIC_RELAXED);
  return NULL;
}

static void *spawner(void *arg)
{
  (void)arg;
  if (tdl_group_index() != 0)
    return NULL;
  tdl_group *g = tdl_group_self();
  for (long i = 0; i < S.tasks; i++) {
    int rc = tdl_group_spawn(&S.handles[i], g, task, (void *)(uintptr_t)i, NULL, 0);
    if (rc < 0) {
      fprintf(stderr, "skew: tdl_group_spawn: %s\n", tdl_strerror(rc));
      S.failed = 1;
      break;
    }
  }
  for (long i = 0; i < S.tasks && S.handles[i]; i++)
    if (tdl_group_fiber_join(S.handles[i], NULL, TDL_FOREVER) < 0)
      S.failed = 1;
  tdl_group_stop(g);
  return NULL;
}

/* What the tasks add up to, computed here without treadle. */
static uint64_t expected(void)
{
  uint64_t sum = 0;
  for (long i = 0; i < S.tasks; i++) {
    uint64_t x = (uint64_t)i | 1;
    for (long r = 0; r < S.iters; r++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    sum += x;
  }
  return sum;
}

int bench_skew_main(int argc, char **argv)
{
  S.tasks = bench_opt_long(argc, argv, "tasks", 20000);
  S.iters = bench_opt_long(argc, argv, "iters", 100000);
  long loops = bench_opt_long(argc, argv, "loops", 2);
  S.handles = calloc((size_t)S.tasks, sizeof *S.handles);
  if (!S.handles)
    bench_die("skew: out of memory");
  bench_span s;
  bench_begin(&s);
  tdl_group *g;
  int rc = tdl_group_new(&g, &(tdl_group_options){.loops = (unsigned)loops, .main = spawner});
  if (rc < 0)
    bench_die("tdl_group_new: %s", tdl_strerror(rc));
  rc = tdl_group_wait(g, TDL_FOREVER);
  bench_end(&s);
  tdl_group_free(g);
  free(S.handles);
  uint64_t want = expected();
  if (rc < 0 || S.failed || S.sum != want) {
    fprintf(stderr, "skew: FAILED: sum %llu, want %llu (wait %d)\n", (unsigned long long)S.sum,
            (unsigned long long)want, rc);
    return 1;
  }
  bench_result("treadle", "skew", &s, "tasks=%ld iters=%ld loops=%ld sum=%llu tasks_per_s=%.0f cpu_us_per_task=%.2f",
               S.tasks, S.iters, loops, (unsigned long long)S.sum, (double)S.tasks / s.wall_s,
               (s.user_s + s.sys_s) * 1e6 / (double)S.tasks);
  return 0;
}
