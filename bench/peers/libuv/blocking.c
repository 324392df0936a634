/* SPDX-License-Identifier: MIT */
/* blocking (docs/BENCHMARKS.md) on libuv: uv_queue_work on libuv's pool,
 * F requests in flight (each one's after-work callback queues the next), N
 * calls in all.  UV_THREADPOOL_SIZE is libuv's (default 4) unless set. */
#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include "../peer.h"

static long calls_left, calls_done;
static uv_loop_t loop;

static void trivial(uv_work_t *w) { w->data = (void *)((intptr_t)w->data + 1); }

static void after(uv_work_t *w, int status);

static void queue_next(uv_work_t *w)
{
  if (calls_left <= 0)
    return;
  calls_left--;
  w->data = (void *)calls_left;
  int rc = uv_queue_work(&loop, w, trivial, after);
  if (rc < 0)
    bench_die("uv_queue_work: %s", uv_strerror(rc));
}

static void after(uv_work_t *w, int status)
{
  if (status < 0)
    bench_die("work: %s", uv_strerror(status));
  calls_done++;
  queue_next(w);
}

static void run(long calls, long fibers, uv_work_t *reqs)
{
  calls_left = calls;
  calls_done = 0;
  for (long i = 0; i < fibers; i++)
    queue_next(&reqs[i]);
  uv_run(&loop, UV_RUN_DEFAULT);
}

int bench_blocking_main(int argc, char **argv)
{
  long calls = bench_opt_long(argc, argv, "calls", 200000);
  long fibers = bench_opt_long(argc, argv, "fibers", 64);
  if (calls < 1 || fibers < 1)
    bench_die("blocking: --calls and --fibers must be positive");
  int rc = uv_loop_init(&loop);
  if (rc < 0)
    bench_die("uv_loop_init: %s", uv_strerror(rc));
  uv_work_t *reqs = calloc((size_t)fibers, sizeof *reqs);
  if (!reqs)
    bench_die("out of memory");
  run(fibers, fibers, reqs); /* warm: the pool's threads exist */
  bench_span sp;
  bench_begin(&sp);
  run(calls, fibers, reqs);
  bench_end(&sp);
  if (calls_done != calls)
    bench_die("blocking: %ld of %ld calls done", calls_done, calls);
  bench_result("libuv", "blocking", &sp, "calls=%ld fibers=%ld us_per_call=%.3f cpu_us_per_call=%.3f", calls, fibers,
               sp.wall_s * 1e6 / (double)calls, (sp.user_s + sp.sys_s) * 1e6 / (double)calls);
  return 0;
}
