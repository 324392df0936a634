/* SPDX-License-Identifier: MIT */
/* timers (docs/BENCHMARKS.md) on libev: ev_timer, libev's 4-ary heap. */
#include <ev.h>

#include "../peer.h"

static long fired;

static void timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
  (void)loop;
  (void)t;
  (void)revents;
  fired++;
}

int bench_timers_main(int argc, char **argv)
{
  long n;
  bool fire;
  int rc = peer_timers_parse(argc, argv, &n, &fire);
  if (rc)
    return rc;
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  if (!loop)
    bench_die("ev_loop_new failed");
  ev_timer *t = malloc((size_t)n * sizeof *t);
  if (!t)
    bench_die("out of memory");

  if (fire) {
    int64_t *delay = peer_draw_fire(n);
    /* libev takes the delay at init; setting it is setup, starting is work. */
    for (long i = 0; i < n; i++)
      ev_timer_init(&t[i], timer_cb, (double)delay[i] * 1e-9, 0.);
    bench_span s;
    bench_begin(&s);
    ev_now_update(loop);
    for (long i = 0; i < n; i++)
      ev_timer_start(loop, &t[i]);
    ev_run(loop, 0);
    bench_end(&s);
    return peer_fire_report("libev", &s, n, fired);
  }

  int64_t *delay;
  uint32_t *order;
  peer_draw_add_cancel(n, &delay, &order);
  for (long i = 0; i < n; i++)
    ev_timer_init(&t[i], timer_cb, (double)delay[i] * 1e-9, 0.);
  bench_span all, add, cancel;
  ev_now_update(loop);
  bench_begin(&all);
  bench_begin(&add);
  for (long i = 0; i < n; i++)
    ev_timer_start(loop, &t[i]);
  bench_end(&add);
  bench_begin(&cancel);
  for (long i = 0; i < n; i++)
    ev_timer_stop(loop, &t[order[i]]);
  bench_end(&cancel);
  bench_end(&all);

  long still = 0;
  for (long i = 0; i < n; i++)
    still += ev_is_active(&t[i]) != 0;
  if (still || fired) {
    fprintf(stderr, "libev: FAILED: %ld timers still active, %ld fired after cancelling all\n", still, fired);
    return 1;
  }
  peer_add_cancel_report("libev", &all, &add, &cancel, n);
  return 0;
}
