/* SPDX-License-Identifier: MIT */
/*
 * idle: F fibers, each blocked for good on a channel receive.
 * bytes_per_fiber = (VmRSS with all F blocked - VmRSS before spawning) * 1024 / F.
 * When every fiber is parked and nothing can wake them, tdl_loop_run() returns
 * -EDEADLK: that is the moment to measure.  Closing the channel then lets
 * them all finish.
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <stdio.h>

static long blocked;

static void *idler(void *arg)
{
  tdl_chan *ch = arg;
  int v;
  blocked++;
  tdl_chan_recv(ch, &v, TDL_FOREVER); /* -EPIPE once the channel closes */
  blocked--;
  return NULL;
}

int bench_idle_main(int argc, char **argv)
{
  long n = bench_opt_long(argc, argv, "fibers", 100000);
  long stack = bench_opt_long(argc, argv, "stack", 0);
  if (n < 1 || stack < 0) {
    fprintf(stderr, "idle: need --fibers >= 1\n");
    return 2;
  }
  tdl_loop *loop;
  tdl_chan *ch;
  int rc = tdl_loop_new(&loop, NULL);
  if (rc < 0 || (rc = tdl_chan_new(&ch, sizeof(int), 0)) < 0)
    bench_die("setup: %s", tdl_strerror(rc));

  long before = bench_rss_kb();
  bench_span s;
  bench_begin(&s);
  tdl_fiber_options o = {.stack_size = (size_t)stack};
  for (long i = 0; i < n; i++) {
    tdl_fiber_t h;
    if ((rc = tdl_fiber_spawn(&h, loop, idler, ch, &o)) < 0)
      bench_die("tdl_fiber_spawn (%ld of %ld): %s", i, n, tdl_strerror(rc));
    tdl_fiber_detach(loop, h);
  }
  rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT); /* returns when all are parked for good */
  bench_end(&s);
  long after = bench_rss_kb();
  if (rc != -EDEADLK || blocked != n) {
    fprintf(stderr, "idle: FAILED: %ld of %ld blocked (tdl_loop_run %d)\n", blocked, n, rc);
    return 1;
  }
  tdl_fiber_stats st;
  tdl_fiber_stats_get(loop, &st);
  bench_result("treadle", "idle", &s, "fibers=%ld bytes_per_fiber=%.0f unguarded=%zu", n,
               (double)(after - before) * 1024.0 / (double)n, st.unguarded);

  tdl_chan_close(ch);
  if ((rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT)) != 0 || blocked != 0)
    bench_die("idle: fibers did not finish (%d, %ld left)", rc, blocked);
  tdl_chan_free(ch);
  tdl_loop_free(loop);
  return 0;
}
