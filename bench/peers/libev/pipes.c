/* SPDX-License-Identifier: MIT */
/*
 * pipes (docs/BENCHMARKS.md) on libev, written the way libev is meant to be
 * used: ev_io watchers, which libev reports level-triggered, and one ev_timer
 * per pipe for the delayed read.
 */
#include <ev.h>

#include "../peer.h"

typedef struct lpipe {
  ev_io rw, ww;
  ev_timer delay;
  int rfd, wfd;
} lpipe;

static struct {
  struct ev_loop *loop;
  peer_pipes_opts o;
  double delay_s;
  long started, received, spurious;
} g;

/* The pipe has no message in flight. */
static void pipe_free(lpipe *p)
{
  if (g.started >= g.o.messages)
    return;
  if (g.o.watch) {
    ev_io_start(g.loop, &p->ww);
    return;
  }
  ssize_t n = write(p->wfd, "x", 1);
  if (n == 1)
    g.started++;
  else if (n < 0 && errno == EAGAIN)
    ev_io_start(g.loop, &p->ww);
  else
    bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
}

static void write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
  lpipe *p = w->data;
  (void)revents;
  if (g.started >= g.o.messages) {
    ev_io_stop(loop, w);
    return;
  }
  ssize_t n = write(p->wfd, "x", 1);
  if (n == 1) {
    g.started++;
    ev_io_stop(loop, w);
  } else if (!(n < 0 && errno == EAGAIN)) {
    bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
  }
}

static void do_read(lpipe *p)
{
  char b;
  ssize_t n = read(p->rfd, &b, 1);
  if (n == 1) {
    if (++g.received == g.o.messages)
      ev_break(g.loop, EVBREAK_ALL);
    else
      pipe_free(p);
  } else if (n < 0 && errno == EAGAIN) {
    g.spurious++;
  } else {
    bench_die("read: %s", n < 0 ? strerror(errno) : "unexpected EOF");
  }
}

static void delay_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
  lpipe *p = t->data;
  (void)revents;
  do_read(p);
  ev_io_start(loop, &p->rw);
}

static void read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
  lpipe *p = w->data;
  (void)revents;
  if (g.delay_s > 0) {
    /* Level-triggered: the watcher would fire on every iteration until the
     * byte is read, so it must be stopped while the read is delayed. */
    ev_io_stop(loop, w);
    ev_timer_set(&p->delay, g.delay_s, 0.);
    ev_timer_start(loop, &p->delay);
    return;
  }
  do_read(p);
}

int bench_pipes_main(int argc, char **argv)
{
  int rc = peer_pipes_parse(argc, argv, &g.o);
  if (rc)
    return rc;
  unsigned flags = EVFLAG_AUTO;
  if (g.o.backend && strcmp(g.o.backend, "epoll") == 0) {
    flags = EVBACKEND_EPOLL;
  } else if (g.o.backend && strcmp(g.o.backend, "poll") == 0) {
    flags = EVBACKEND_POLL;
  } else if (g.o.backend) {
    fprintf(stderr, "pipes: back end '%s' is not available (epoll, poll)\n", g.o.backend);
    return 2;
  }
  g.loop = ev_loop_new(flags);
  if (!g.loop)
    bench_die("ev_loop_new failed");
  g.delay_s = (double)g.o.delay_us * 1e-6;

  lpipe *pp = calloc((size_t)g.o.pipes, sizeof *pp);
  if (!pp)
    bench_die("out of memory");
  for (int i = 0; i < g.o.pipes; i++) {
    lpipe *p = &pp[i];
    int fds[2];
    peer_pipe(fds);
    p->rfd = fds[0];
    p->wfd = fds[1];
    ev_io_init(&p->rw, read_cb, p->rfd, EV_READ);
    ev_io_init(&p->ww, write_cb, p->wfd, EV_WRITE);
    ev_timer_init(&p->delay, delay_cb, g.delay_s, 0.);
    p->rw.data = p->ww.data = p->delay.data = p;
    ev_io_start(g.loop, &p->rw);
  }
  /* libev registers fds with the kernel lazily, on the next iteration: do
   * that before the clock starts. */
  ev_run(g.loop, EVRUN_NOWAIT);

  bench_span s;
  bench_begin(&s);
  ev_now_update(g.loop);
  for (int i = 0; i < g.o.pipes; i++)
    pipe_free(&pp[i]);
  ev_run(g.loop, 0);
  bench_end(&s);

  if (g.spurious)
    fprintf(stderr, "libev: %ld read callbacks found the pipe empty\n", g.spurious);
  return peer_pipes_report("libev", &s, &g.o, g.received, g.started);
}
