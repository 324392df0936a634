/* SPDX-License-Identifier: MIT */
/*
 * pipes (docs/BENCHMARKS.md) on libevent 2: a persistent EV_READ event per
 * read end, a one-shot EV_WRITE event per write end (libevent removes it
 * when it fires: that is its "stop after the write"), and one timer event per
 * pipe for the delayed read.  Events live in the pipe struct (event_assign),
 * as the other implementations keep their watchers, rather than being
 * allocated one by one with event_new.
 */
#include <event2/event.h>
#include <event2/event_struct.h>

#include "../peer.h"

typedef struct epipe {
  struct event rev, wev, delay;
  int rfd, wfd;
} epipe;

static struct {
  struct event_base *base;
  peer_pipes_opts o;
  struct timeval delay;
  long started, received, spurious;
} g;

static void add(struct event *ev, const struct timeval *tv)
{
  if (event_add(ev, tv) != 0)
    bench_die("event_add failed");
}

/* The pipe has no message in flight. */
static void pipe_free(epipe *p)
{
  if (g.started >= g.o.messages)
    return;
  if (g.o.watch) {
    add(&p->wev, NULL);
    return;
  }
  ssize_t n = write(p->wfd, "x", 1);
  if (n == 1)
    g.started++;
  else if (n < 0 && errno == EAGAIN)
    add(&p->wev, NULL);
  else
    bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
  epipe *p = arg;
  (void)what;
  if (g.started >= g.o.messages)
    return;
  ssize_t n = write(fd, "x", 1);
  if (n == 1)
    g.started++;
  else if (n < 0 && errno == EAGAIN)
    add(&p->wev, NULL);
  else
    bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
}

static void do_read(epipe *p)
{
  char b;
  ssize_t n = read(p->rfd, &b, 1);
  if (n == 1) {
    if (++g.received == g.o.messages)
      event_base_loopbreak(g.base);
    else
      pipe_free(p);
  } else if (n < 0 && errno == EAGAIN) {
    g.spurious++;
  } else {
    bench_die("read: %s", n < 0 ? strerror(errno) : "unexpected EOF");
  }
}

static void delay_cb(evutil_socket_t fd, short what, void *arg)
{
  epipe *p = arg;
  (void)fd;
  (void)what;
  do_read(p);
  add(&p->rev, NULL);
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
  epipe *p = arg;
  (void)fd;
  (void)what;
  if (g.delay.tv_sec || g.delay.tv_usec) {
    /* Level-triggered: the event would fire on every iteration until the
     * byte is read, so it is removed while the read is delayed. */
    event_del(&p->rev);
    add(&p->delay, &g.delay);
    return;
  }
  do_read(p);
}

int bench_pipes_main(int argc, char **argv)
{
  int rc = peer_pipes_parse(argc, argv, &g.o);
  if (rc)
    return rc;
  struct event_config *cfg = event_config_new();
  if (!cfg)
    bench_die("event_config_new failed");
  /* libevent's default clock is CLOCK_MONOTONIC_COARSE, which ticks every
   * 4 ms here and would stretch the 1 ms delays: ask for the precise one. */
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  if (g.o.backend && strcmp(g.o.backend, "poll") == 0) {
    event_config_avoid_method(cfg, "epoll");
    event_config_avoid_method(cfg, "select");
  } else if (g.o.backend && strcmp(g.o.backend, "epoll") != 0) {
    fprintf(stderr, "pipes: back end '%s' is not available (epoll, poll)\n", g.o.backend);
    return 2;
  }
  g.base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  if (!g.base)
    bench_die("event_base_new_with_config failed");
  g.delay.tv_sec = g.o.delay_us / 1000000;
  g.delay.tv_usec = g.o.delay_us % 1000000;

  epipe *pp = calloc((size_t)g.o.pipes, sizeof *pp);
  if (!pp)
    bench_die("out of memory");
  for (int i = 0; i < g.o.pipes; i++) {
    epipe *p = &pp[i];
    int fds[2];
    peer_pipe(fds);
    p->rfd = fds[0];
    p->wfd = fds[1];
    if (event_assign(&p->rev, g.base, p->rfd, EV_READ | EV_PERSIST, read_cb, p) != 0 ||
        event_assign(&p->wev, g.base, p->wfd, EV_WRITE, write_cb, p) != 0 ||
        evtimer_assign(&p->delay, g.base, delay_cb, p) != 0)
      bench_die("event_assign failed");
    add(&p->rev, NULL);
  }
  event_base_loop(g.base, EVLOOP_NONBLOCK);

  bench_span s;
  bench_begin(&s);
  event_base_update_cache_time(g.base);
  for (int i = 0; i < g.o.pipes; i++)
    pipe_free(&pp[i]);
  event_base_loop(g.base, 0);
  bench_end(&s);

  if (g.spurious)
    fprintf(stderr, "libevent: %ld read callbacks found the pipe empty\n", g.spurious);
  return peer_pipes_report("libevent", &s, &g.o, g.received, g.started);
}
