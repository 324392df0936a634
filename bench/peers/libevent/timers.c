/* timers (shared/BENCHMARKS.md) on libevent 2: timer events (a min-heap),
 * kept in one array with evtimer_assign like the other implementations'
 * caller-owned timers. */
#include <event2/event.h>
#include <event2/event_struct.h>

#include "../peer.h"

static long fired;

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
  (void)fd;
  (void)what;
  (void)arg;
  fired++;
}

static struct timeval tv_of(int64_t ns)
{
  struct timeval tv = {.tv_sec = (time_t)(ns / PEER_NS_PER_S), .tv_usec = (suseconds_t)(ns % PEER_NS_PER_S / 1000)};
  return tv;
}

int bench_timers_main(int argc, char **argv)
{
  long n;
  bool fire;
  int rc = peer_timers_parse(argc, argv, &n, &fire);
  if (rc)
    return rc;
  struct event_config *cfg = event_config_new();
  if (!cfg)
    bench_die("event_config_new failed");
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  struct event_base *base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  struct event *t = malloc((size_t)n * sizeof *t);
  struct timeval *tv = malloc((size_t)n * sizeof *tv);
  if (!base || !t || !tv)
    bench_die("out of memory");
  for (long i = 0; i < n; i++)
    evtimer_assign(&t[i], base, timer_cb, NULL);

  if (fire) {
    int64_t *delay = peer_draw_fire(n);
    for (long i = 0; i < n; i++)
      tv[i] = tv_of(delay[i]);
    bench_span s;
    bench_begin(&s);
    event_base_update_cache_time(base);
    for (long i = 0; i < n; i++)
      evtimer_add(&t[i], &tv[i]);
    event_base_dispatch(base);
    bench_end(&s);
    return peer_fire_report("libevent", &s, n, fired);
  }

  int64_t *delay;
  uint32_t *order;
  peer_draw_add_cancel(n, &delay, &order);
  for (long i = 0; i < n; i++)
    tv[i] = tv_of(delay[i]);
  bench_span all, addsp, cancel;
  event_base_update_cache_time(base);
  bench_begin(&all);
  bench_begin(&addsp);
  for (long i = 0; i < n; i++)
    evtimer_add(&t[i], &tv[i]);
  bench_end(&addsp);
  bench_begin(&cancel);
  for (long i = 0; i < n; i++)
    evtimer_del(&t[order[i]]);
  bench_end(&cancel);
  bench_end(&all);

  long still = 0;
  for (long i = 0; i < n; i++)
    still += evtimer_pending(&t[i], NULL) != 0;
  if (still || fired) {
    fprintf(stderr, "libevent: FAILED: %ld timers still pending, %ld fired after cancelling all\n", still, fired);
    return 1;
  }
  peer_add_cancel_report("libevent", &all, &addsp, &cancel, n);
  return 0;
}
