/* SPDX-License-Identifier: MIT */
/*
 * pipes (docs/BENCHMARKS.md) on libuv.
 *
 * The pipes are watched with uv_poll_t on their raw fds, not wrapped in
 * uv_pipe_t: uv_pipe_t/uv_read_start would add libuv's own buffer allocation
 * and stream machinery (and its writes go through a request queue), so it
 * would measure a different, heavier workload than the readiness loop that
 * treadle, libev and libevent run.  uv_poll_t is libuv's readiness watcher.
 */
#include <uv.h>

#include "../peer.h"

typedef struct upipe {
  uv_poll_t rp, wp;
  uv_timer_t delay;
  int rfd, wfd;
} upipe;

static struct {
  uv_loop_t loop;
  peer_pipes_opts o;
  uint64_t delay_ms;
  long started, received, spurious;
} g;

static void write_cb(uv_poll_t *h, int status, int events);
static void read_cb(uv_poll_t *h, int status, int events);

static void check(int rc, const char *what)
{
  if (rc < 0)
    bench_die("%s: %s", what, uv_strerror(rc));
}

/* The pipe has no message in flight. */
static void pipe_free(upipe *p)
{
  if (g.started >= g.o.messages)
    return;
  if (g.o.watch) {
    check(uv_poll_start(&p->wp, UV_WRITABLE, write_cb), "uv_poll_start");
    return;
  }
  ssize_t n = write(p->wfd, "x", 1);
  if (n == 1)
    g.started++;
  else if (n < 0 && errno == EAGAIN)
    check(uv_poll_start(&p->wp, UV_WRITABLE, write_cb), "uv_poll_start");
  else
    bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
}

static void write_cb(uv_poll_t *h, int status, int events)
{
  upipe *p = h->data;
  (void)events;
  check(status, "poll (write end)");
  if (g.started >= g.o.messages) {
    uv_poll_stop(h);
    return;
  }
  ssize_t n = write(p->wfd, "x", 1);
  if (n == 1) {
    g.started++;
    uv_poll_stop(h);
  } else if (!(n < 0 && errno == EAGAIN)) {
    bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
  }
}

static void do_read(upipe *p)
{
  char b;
  ssize_t n = read(p->rfd, &b, 1);
  if (n == 1) {
    if (++g.received == g.o.messages)
      uv_stop(&g.loop);
    else
      pipe_free(p);
  } else if (n < 0 && errno == EAGAIN) {
    g.spurious++;
  } else {
    bench_die("read: %s", n < 0 ? strerror(errno) : "unexpected EOF");
  }
}

static void delay_cb(uv_timer_t *t)
{
  upipe *p = t->data;
  do_read(p);
  check(uv_poll_start(&p->rp, UV_READABLE, read_cb), "uv_poll_start");
}

static void read_cb(uv_poll_t *h, int status, int events)
{
  upipe *p = h->data;
  (void)events;
  check(status, "poll (read end)");
  if (g.delay_ms > 0) {
    /* uv_poll is level-triggered: stop it while the read is delayed. */
    uv_poll_stop(h);
    check(uv_timer_start(&p->delay, delay_cb, g.delay_ms, 0), "uv_timer_start");
    return;
  }
  do_read(p);
}

int bench_pipes_main(int argc, char **argv)
{
  int rc = peer_pipes_parse(argc, argv, &g.o);
  if (rc)
    return rc;
  if (g.o.backend && strcmp(g.o.backend, "epoll") != 0) {
    fprintf(stderr, "pipes: libuv has only its default back end (epoll)\n");
    return 2;
  }
  check(uv_loop_init(&g.loop), "uv_loop_init");
  /* libuv's timers count whole milliseconds: a delay is rounded up, so
   * D = 1000 us is exactly its 1 ms. */
  g.delay_ms = (uint64_t)(g.o.delay_us + 999) / 1000;

  upipe *pp = calloc((size_t)g.o.pipes, sizeof *pp);
  if (!pp)
    bench_die("out of memory");
  for (int i = 0; i < g.o.pipes; i++) {
    upipe *p = &pp[i];
    int fds[2];
    peer_pipe(fds);
    p->rfd = fds[0];
    p->wfd = fds[1];
    check(uv_poll_init(&g.loop, &p->rp, p->rfd), "uv_poll_init");
    check(uv_poll_init(&g.loop, &p->wp, p->wfd), "uv_poll_init");
    check(uv_timer_init(&g.loop, &p->delay), "uv_timer_init");
    p->rp.data = p->wp.data = p->delay.data = p;
    check(uv_poll_start(&p->rp, UV_READABLE, read_cb), "uv_poll_start");
  }
  /* libuv registers fds with the kernel on the next iteration: do that
   * before the clock starts. */
  uv_run(&g.loop, UV_RUN_NOWAIT);

  bench_span s;
  bench_begin(&s);
  uv_update_time(&g.loop);
  for (int i = 0; i < g.o.pipes; i++)
    pipe_free(&pp[i]);
  uv_run(&g.loop, UV_RUN_DEFAULT);
  bench_end(&s);

  if (g.spurious)
    fprintf(stderr, "libuv: %ld read callbacks found the pipe empty\n", g.spurious);
  return peer_pipes_report("libuv", &s, &g.o, g.received, g.started);
}
