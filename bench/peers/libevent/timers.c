/* SPDX-License-Identifier: MIT */
/* timers (docs/BENCHMARKS.md) on libevent 2: timer events (a min-heap),
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

/* What the kick-off callback does: the adds (and cancels) run inside the
 * loop, where libevent reads its cached time; outside it every evtimer_add
 * would read the clock, a cost the other libraries do not pay. */
static struct {
  struct event *t;
  struct timeval *tv;
  uint32_t *order;
  long n;
  bench_span all, add, cancel;
} job;

static void add_all(void)
{
  for (long i = 0; i < job.n; i++)
    evtimer_add(&job.t[i], &job.tv[i]);
}

static void add_cancel_cb(evutil_socket_t fd, short what, void *arg)
{
  (void)fd;
  (void)what;
  (void)arg;
  bench_begin(&job.all);
  bench_begin(&job.add);
  add_all();
  bench_end(&job.add);
  bench_begin(&job.cancel);
  for (long i = 0; i < job.n; i++)
    evtimer_del(&job.t[job.order[i]]);
  bench_end(&job.cancel);
  bench_end(&job.all);
}

static void fire_cb(evutil_socket_t fd, short what, void *arg)
{
  (void)fd;
  (void)what;
  (void)arg;
  bench_begin(&job.all);
  add_all();
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
  job.n = n;
  job.t = malloc((size_t)n * sizeof *job.t);
  job.tv = malloc((size_t)n * sizeof *job.tv);
  if (!base || !job.t || !job.tv)
    bench_die("out of memory");
  for (long i = 0; i < n; i++)
    evtimer_assign(&job.t[i], base, timer_cb, NULL);

  int64_t *delay;
  if (fire)
    delay = peer_draw_fire(n);
  else
    peer_draw_add_cancel(n, &delay, &job.order);
  for (long i = 0; i < n; i++)
    job.tv[i] = tv_of(delay[i]);

  static const struct timeval now = {0, 0};
  if (event_base_once(base, -1, EV_TIMEOUT, fire ? fire_cb : add_cancel_cb, NULL, &now) != 0)
    bench_die("event_base_once failed");
  event_base_dispatch(base);

  if (fire) {
    bench_end(&job.all);
    return peer_fire_report("libevent", &job.all, n, fired);
  }
  long still = 0;
  for (long i = 0; i < n; i++)
    still += evtimer_pending(&job.t[i], NULL) != 0;
  if (still || fired) {
    fprintf(stderr, "libevent: FAILED: %ld timers still pending, %ld fired after cancelling all\n", still, fired);
    return 1;
  }
  peer_add_cancel_report("libevent", &job.all, &job.add, &job.cancel, n);
  return 0;
}
