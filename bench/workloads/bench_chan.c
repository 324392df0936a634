/* SPDX-License-Identifier: MIT */
/*
 * chan: two fibers pass a value back and forth over one unbuffered channel T
 * times.  A hop is one send and its receive.  Key: ns_per_hop.
 */
#include <treadle.h>

#include "bench.h"

#include <stdio.h>

typedef struct pingpong {
  tdl_chan *ch;
  long hops;
  long seen;
} pingpong;

static void *ping(void *arg)
{
  pingpong *pp = arg;
  /* Sends the odd hops' values and receives the even ones. */
  for (long v = 0; v < pp->hops; v += 2) {
    long got;
    if (tdl_chan_send(pp->ch, &v, TDL_FOREVER) < 0)
      return NULL;
    if (v + 1 < pp->hops) {
      if (tdl_chan_recv(pp->ch, &got, TDL_FOREVER) < 0 || got != v + 1)
        return NULL;
      pp->seen++;
    }
  }
  return NULL;
}

static void *pong(void *arg)
{
  pingpong *pp = arg;
  for (long v = 1; v <= pp->hops; v += 2) {
    long got;
    if (tdl_chan_recv(pp->ch, &got, TDL_FOREVER) < 0 || got != v - 1)
      return NULL;
    pp->seen++;
    if (v < pp->hops && tdl_chan_send(pp->ch, &v, TDL_FOREVER) < 0)
      return NULL;
  }
  return NULL;
}

int bench_chan_main(int argc, char **argv)
{
  pingpong pp = {.hops = bench_opt_long(argc, argv, "hops", 10000000)};
  if (pp.hops < 1) {
    fprintf(stderr, "chan: need --hops >= 1\n");
    return 2;
  }
  tdl_loop *loop;
  int rc = tdl_loop_new(&loop, NULL);
  if (rc < 0 || (rc = tdl_chan_new(&pp.ch, sizeof(long), 0)) < 0)
    bench_die("setup: %s", tdl_strerror(rc));
  tdl_fiber_t a, b;
  if ((rc = tdl_fiber_spawn(&a, loop, pong, &pp, NULL)) < 0 || (rc = tdl_fiber_spawn(&b, loop, ping, &pp, NULL)) < 0)
    bench_die("tdl_fiber_spawn: %s", tdl_strerror(rc));
  tdl_fiber_detach(loop, a);
  tdl_fiber_detach(loop, b);

  bench_span s;
  bench_begin(&s);
  rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  bench_end(&s);
  if (rc < 0 || pp.seen != pp.hops) {
    fprintf(stderr, "chan: FAILED: %ld hops of %ld (tdl_loop_run %d)\n", pp.seen, pp.hops, rc);
    return 1;
  }
  bench_result("treadle", "chan", &s, "hops=%ld ns_per_hop=%.2f cpu_ns_per_hop=%.2f", pp.hops,
               s.wall_s * 1e9 / (double)pp.hops, (s.user_s + s.sys_s) * 1e9 / (double)pp.hops);
  tdl_chan_free(pp.ch);
  tdl_loop_free(loop);
  return 0;
}
