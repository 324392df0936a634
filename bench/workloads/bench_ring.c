/* SPDX-License-Identifier: MIT */
/*
 * ring: 503 fibers in a ring pass a token T times.
 *   --via wake  each fiber parks (tdl_fiber_park) and is woken directly by its
 *               predecessor (tdl_fiber_unpark): the scheduler's own cost.
 *   --via chan  an unbuffered channel between neighbours (Benchmarks Game form).
 * Key: ns_per_hop = wall / T (and cpu_ns_per_hop).
 */
#include <treadle.h>

#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ring {
  int n;
  long hops;
  long token;       /* hops left (wake form) */
  long passed;
  tdl_loop *loop;
  tdl_fiber_t *h;
  tdl_chan **ch;
  int done;
} ring;

typedef struct member {
  ring *r;
  int i;
} member;

static void *wake_member(void *arg)
{
  member *m = arg;
  ring *r = m->r;
  tdl_fiber_t next = r->h[(m->i + 1) % r->n];
  for (;;) {
    if (tdl_fiber_park(TDL_FOREVER) < 0)
      return NULL;
    if (r->done)
      break;
    if (r->token == 0) {
      r->done = 1; /* wake everyone so they can finish */
      for (int k = 0; k < r->n; k++)
        if (k != m->i)
          tdl_fiber_unpark(r->loop, r->h[k]);
      break;
    }
    r->token--;
    r->passed++;
    tdl_fiber_unpark(r->loop, next);
  }
  return NULL;
}

static void *chan_member(void *arg)
{
  member *m = arg;
  ring *r = m->r;
  tdl_chan *in = r->ch[m->i], *out = r->ch[(m->i + 1) % r->n];
  long token;
  while (tdl_chan_recv(in, &token, TDL_FOREVER) == 0) {
    if (token == 0) {
      for (int k = 0; k < r->n; k++)
        tdl_chan_close(r->ch[k]);
      break;
    }
    token--;
    r->passed++;
    if (tdl_chan_send(out, &token, TDL_FOREVER) < 0)
      break;
  }
  return NULL;
}

int bench_ring_main(int argc, char **argv)
{
  ring r = {0};
  r.n = (int)bench_opt_long(argc, argv, "threads", 503);
  r.hops = bench_opt_long(argc, argv, "hops", 10000000);
  const char *via = bench_opt_str(argc, argv, "via", "wake");
  bool chan = strcmp(via, "chan") == 0;
  if (r.n < 2 || r.hops < 1 || (!chan && strcmp(via, "wake") != 0)) {
    fprintf(stderr, "ring: need --threads >= 2, --hops >= 1, --via wake|chan\n");
    return 2;
  }
  int rc = tdl_loop_new(&r.loop, NULL);
  if (rc < 0)
    bench_die("tdl_loop_new: %s", tdl_strerror(rc));
  r.h = calloc((size_t)r.n, sizeof *r.h);
  r.ch = calloc((size_t)r.n, sizeof *r.ch);
  member *m = calloc((size_t)r.n, sizeof *m);
  if (!r.h || !r.ch || !m)
    bench_die("out of memory");
  for (int i = 0; i < r.n; i++) {
    m[i] = (member){&r, i};
    if (chan && (rc = tdl_chan_new(&r.ch[i], sizeof(long), 0)) < 0)
      bench_die("tdl_chan_new: %s", tdl_strerror(rc));
    if ((rc = tdl_fiber_spawn(&r.h[i], r.loop, chan ? chan_member : wake_member, &m[i], NULL)) < 0)
      bench_die("tdl_fiber_spawn: %s", tdl_strerror(rc));
  }
  /* Let every member reach its first wait before timing. */
  tdl_loop_run(r.loop, TDL_LOOP_NOWAIT);

  bench_span s;
  bench_begin(&s);
  if (chan) {
    long t = r.hops;
    tdl_chan_try_send(r.ch[0], &t); /* member 0 is parked in recv: hand it the token */
  } else {
    r.token = r.hops;
    tdl_fiber_unpark(r.loop, r.h[0]);
  }
  rc = tdl_loop_run(r.loop, TDL_LOOP_DEFAULT);
  bench_end(&s);

  if (rc < 0 || r.passed != r.hops) {
    fprintf(stderr, "ring: FAILED: %ld hops of %ld (tdl_loop_run %d)\n", r.passed, r.hops, rc);
    return 1;
  }
  char impl[32];
  snprintf(impl, sizeof impl, "treadle-%s", chan ? "chan" : "wake");
  bench_result(impl, "ring", &s, "threads=%d hops=%ld via=%s ns_per_hop=%.2f cpu_ns_per_hop=%.2f", r.n, r.hops,
               via, s.wall_s * 1e9 / (double)r.hops, (s.user_s + s.sys_s) * 1e9 / (double)r.hops);
  for (int i = 0; i < r.n; i++) {
    tdl_fiber_detach(r.loop, r.h[i]); /* finished: releases it */
    if (chan)
      tdl_chan_free(r.ch[i]);
  }
  tdl_loop_free(r.loop);
  free(r.h);
  free(r.ch);
  free(m);
  return 0;
}
