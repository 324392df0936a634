/* SPDX-License-Identifier: MIT */
/* timers (docs/BENCHMARKS.md) on libuv: uv_timer_t, libuv's binary heap.
 * libuv's timeouts are whole milliseconds, so each drawn delay is rounded to
 * the nearest one. */
#include <uv.h>

#include "../peer.h"

static long fired;

static void timer_cb(uv_timer_t *t)
{
  (void)t;
  fired++;
}

int bench_timers_main(int argc, char **argv)
{
  long n;
  bool fire;
  int rc = peer_timers_parse(argc, argv, &n, &fire);
  if (rc)
    return rc;
  static uv_loop_t loop;
  if ((rc = uv_loop_init(&loop)) < 0)
    bench_die("uv_loop_init: %s", uv_strerror(rc));
  uv_timer_t *t = malloc((size_t)n * sizeof *t);
  uint64_t *ms = malloc((size_t)n * sizeof *ms);
  if (!t || !ms)
    bench_die("out of memory");
  for (long i = 0; i < n; i++)
    uv_timer_init(&loop, &t[i]);

  if (fire) {
    int64_t *delay = peer_draw_fire(n);
    for (long i = 0; i < n; i++)
      ms[i] = (uint64_t)((delay[i] + 500000) / 1000000);
    bench_span s;
    bench_begin(&s);
    uv_update_time(&loop);
    for (long i = 0; i < n; i++)
      uv_timer_start(&t[i], timer_cb, ms[i], 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    bench_end(&s);
    return peer_fire_report("libuv", &s, n, fired);
  }

  int64_t *delay;
  uint32_t *order;
  peer_draw_add_cancel(n, &delay, &order);
  for (long i = 0; i < n; i++)
    ms[i] = (uint64_t)((delay[i] + 500000) / 1000000);
  bench_span all, add, cancel;
  uv_update_time(&loop);
  bench_begin(&all);
  bench_begin(&add);
  for (long i = 0; i < n; i++)
    uv_timer_start(&t[i], timer_cb, ms[i], 0);
  bench_end(&add);
  bench_begin(&cancel);
  for (long i = 0; i < n; i++)
    uv_timer_stop(&t[order[i]]);
  bench_end(&cancel);
  bench_end(&all);

  long still = 0;
  for (long i = 0; i < n; i++)
    still += uv_is_active((uv_handle_t *)&t[i]) != 0;
  if (still || fired) {
    fprintf(stderr, "libuv: FAILED: %ld timers still active, %ld fired after cancelling all\n", still, fired);
    return 1;
  }
  peer_add_cancel_report("libuv", &all, &add, &cancel, n);
  return 0;
}
