/* SPDX-License-Identifier: MIT */
/*
 * fiber-spawn: start and join N fibers, B at a time.  One fiber spawns B
 * joinable fibers, then joins each in turn, until N have run; fiber i
 * returns i + 1, and the sum of what the joins collect is checked against
 * N (N + 1) / 2.  --stack S gives each that stack size (0: treadle's
 * default).  Keys: fibers_per_s (wall), cpu_ns_per_fiber.
 */
#include <treadle.h>

#include "bench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct spawner {
  long n, batch;
  size_t stack;
  tdl_fiber_t *f;
  uint64_t sum;
  int rc;
  bench_span span;
} spawner;

static void *spawned(void *arg) { return (void *)((uintptr_t)arg + 1); }

static void *spawn_all(void *arg)
{
  spawner *sp = arg;
  tdl_fiber_options o = {.stack_size = sp->stack};
  bench_begin(&sp->span);
  for (long done = 0; done < sp->n;) {
    long k = sp->n - done < sp->batch ? sp->n - done : sp->batch;
    for (long i = 0; i < k; i++)
      if ((sp->rc = tdl_fiber_spawn(&sp->f[i], tdl_fiber_loop(), spawned, (void *)(uintptr_t)(done + i), &o)) < 0)
        bench_die("fiber-spawn: tdl_fiber_spawn (%ld of %ld): %s", done + i, sp->n, tdl_strerror(sp->rc));
    for (long i = 0; i < k; i++) {
      void *r = NULL;
      if ((sp->rc = tdl_fiber_join(sp->f[i], &r, TDL_FOREVER)) < 0)
        bench_die("fiber-spawn: tdl_fiber_join: %s", tdl_strerror(sp->rc));
      sp->sum += (uintptr_t)r;
    }
    done += k;
  }
  bench_end(&sp->span);
  return NULL;
}

int bench_fiber_spawn_main(int argc, char **argv)
{
  spawner sp = {
      .n = bench_opt_long(argc, argv, "fibers", 1000000),
      .batch = bench_opt_long(argc, argv, "batch", 1000),
      .stack = (size_t)bench_opt_long(argc, argv, "stack", 0),
  };
  if (sp.n < 1 || sp.batch < 1) {
    fprintf(stderr, "fiber-spawn: need --fibers >= 1 and --batch >= 1\n");
    return 2;
  }
  tdl_loop *loop;
  int rc = tdl_loop_new(&loop, NULL);
  if (rc < 0)
    bench_die("fiber-spawn: tdl_loop_new: %s", tdl_strerror(rc));
  if (!(sp.f = calloc((size_t)sp.batch, sizeof *sp.f)))
    bench_die("out of memory");
  tdl_fiber_t main_fiber;
  if ((rc = tdl_fiber_spawn(&main_fiber, loop, spawn_all, &sp, NULL)) < 0)
    bench_die("fiber-spawn: tdl_fiber_spawn: %s", tdl_strerror(rc));
  tdl_fiber_detach(loop, main_fiber);
  if ((rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT)) < 0)
    bench_die("fiber-spawn: tdl_loop_run: %s", tdl_strerror(rc));
  uint64_t want = (uint64_t)sp.n * (uint64_t)(sp.n + 1) / 2;
  if (sp.sum != want) {
    fprintf(stderr, "fiber-spawn: FAILED: the joins collected %llu, expected %llu\n", (unsigned long long)sp.sum,
            (unsigned long long)want);
    return 1;
  }
  const bench_span *s = &sp.span;
  bench_result("treadle", "fiber-spawn", s, "fibers=%ld batch=%ld stack=%zu fibers_per_s=%.0f cpu_ns_per_fiber=%.1f",
               sp.n, sp.batch, sp.stack, (double)sp.n / s->wall_s, (s->user_s + s->sys_s) * 1e9 / (double)sp.n);
  free(sp.f);
  tdl_loop_free(loop);
  return 0;
}
