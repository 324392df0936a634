/* SPDX-License-Identifier: MIT */
/*
 * The pipes workload of docs/BENCHMARKS.md on treadle's loop API, written as
 * a user of include/treadle/loop.h would write it.  Styles here: callback and
 * watch.  The fiber style lives in its own file (see bench_pipes_fiber below).
 *
 * treadle watchers are edge-triggered with a readiness cache: TDL_READ is
 * reported once per arrival, TDL_WRITE is a state that holds until
 * tdl_io_blocked().  Since a pipe never carries more than one byte, reading
 * that byte leaves it empty, so no read needs to go on until EAGAIN.
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The fiber style, defined in a file of its own.  Weak, so that this file
 * links (and refuses --style fiber) before that file exists.  Contract: it is
 * called with validated options, RLIMIT_NOFILE raised and $TDL_BACKEND set
 * from --backend; it does its own setup, timing, count check and RESULT line
 * (impl=treadle-fiber) and returns the exit status.
 */
int bench_pipes_fiber(int pipes, long messages, long delay_us, tdl_backend backend);
#pragma weak bench_pipes_fiber
int bench_pipes_ops(int pipes, long messages, long delay_us);

typedef struct pipes_run pipes_run;

typedef struct pipe_st {
  tdl_io rw;       /* read end */
  tdl_io ww;       /* write end; started only while a write is wanted */
  tdl_timer delay; /* the delayed read, D > 0 only */
  int rfd, wfd;
  pipes_run *run;
} pipe_st;

struct pipes_run {
  tdl_loop *loop;
  void (*done)(pipes_run *r); /* all its messages arrived */
  bool watch; /* watch style, else callback */
  tdl_time_t delay;
  long messages, started, received;
  long spurious; /* read callbacks that found nothing: worth reporting */
  pipe_st *p;
  int npipes;
};

static void write_cb(tdl_loop *loop, tdl_io *w, unsigned events);

/* The pipe has no message in flight. */
static void pipe_free(pipes_run *r, pipe_st *p)
{
  if (r->started >= r->messages)
    return;
  if (r->watch) {
    int rc = tdl_io_start(r->loop, &p->ww, TDL_WRITE);
    if (rc < 0)
      bench_die("tdl_io_start(write): %s", tdl_strerror(rc));
    return;
  }
  ssize_t n = write(p->wfd, "x", 1);
  if (n == 1) {
    r->started++;
    return;
  }
  if (n < 0 && errno == EAGAIN) {
    /* Cannot happen with one byte per pipe, but a callback-style user must
     * handle it: wait for the kernel to report room. */
    int rc = tdl_io_start(r->loop, &p->ww, TDL_WRITE);
    if (rc < 0)
      bench_die("tdl_io_start(write): %s", tdl_strerror(rc));
    tdl_io_blocked(r->loop, &p->ww, TDL_WRITE);
    return;
  }
  bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
}

static void write_cb(tdl_loop *loop, tdl_io *w, unsigned events)
{
  pipe_st *p = w->data;
  pipes_run *r = p->run;
  (void)events;
  if (r->started >= r->messages) {
    tdl_io_stop(loop, w);
    return;
  }
  ssize_t n = write(p->wfd, "x", 1);
  if (n == 1) {
    r->started++;
    tdl_io_stop(loop, w);
  } else if (n < 0 && errno == EAGAIN) {
    tdl_io_blocked(loop, w, TDL_WRITE);
  } else {
    bench_die("write: %s", n < 0 ? strerror(errno) : "short write");
  }
}

/* Returns false when there was nothing to read. */
static bool do_read(pipes_run *r, pipe_st *p)
{
  char b;
  ssize_t n = read(p->rfd, &b, 1);
  if (n == 1) {
    if (++r->received == r->messages)
      r->done(r);
    else
      pipe_free(r, p);
    return true;
  }
  if (n < 0 && errno == EAGAIN) {
    r->spurious++;
    return false;
  }
  bench_die("read: %s", n < 0 ? strerror(errno) : "unexpected EOF");
}

static void delay_cb(tdl_loop *loop, tdl_timer *t)
{
  pipe_st *p = t->data;
  do_read(p->run, p);
  int rc = tdl_io_start(loop, &p->rw, TDL_READ);
  if (rc < 0)
    bench_die("tdl_io_start(read): %s", tdl_strerror(rc));
}

static void read_cb(tdl_loop *loop, tdl_io *w, unsigned events)
{
  pipe_st *p = w->data;
  pipes_run *r = p->run;
  (void)events;
  if (r->delay > 0) {
    /* The reader's own pattern: stop listening while the read is delayed,
     * as a user of a level-triggered library must; treadle's stop and start
     * are a few stores. */
    tdl_io_stop(loop, w);
    int rc = tdl_timer_start(loop, &p->delay, r->delay, 0);
    if (rc < 0)
      bench_die("tdl_timer_start: %s", tdl_strerror(rc));
    return;
  }
  do_read(r, p);
}

/* Make the run's pipes and start their read watchers on r->loop. */
static void setup_run(pipes_run *r)
{
  int rc;
  r->p = calloc((size_t)r->npipes, sizeof *r->p);
  if (!r->p)
    bench_die("out of memory");
  for (int i = 0; i < r->npipes; i++) {
    pipe_st *p = &r->p[i];
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
      bench_die("pipe2 (pipe %d of %d): %s", i, r->npipes, strerror(errno));
    p->rfd = fds[0];
    p->wfd = fds[1];
    p->run = r;
    tdl_io_init(&p->rw, p->rfd, read_cb, p);
    tdl_io_init(&p->ww, p->wfd, write_cb, p);
    tdl_timer_init(&p->delay, delay_cb, p);
    /* The first start registers the fd with the kernel: setup, not work. */
    if ((rc = tdl_io_start(r->loop, &p->rw, TDL_READ)) < 0)
      bench_die("tdl_io_start(read): %s", tdl_strerror(rc));
  }
}

/* Put the first message in every pipe. */
static void kick_run(pipes_run *r)
{
  tdl_loop_update_time(r->loop);
  for (int i = 0; i < r->npipes; i++)
    pipe_free(r, &r->p[i]);
}

static void teardown_run(pipes_run *r)
{
  for (int i = 0; i < r->npipes; i++) {
    tdl_io_stop(r->loop, &r->p[i].rw);
    tdl_io_stop(r->loop, &r->p[i].ww);
    tdl_timer_stop(r->loop, &r->p[i].delay);
    close(r->p[i].rfd);
    close(r->p[i].wfd);
  }
  free(r->p);
  r->p = NULL;
}

static void stop_loop(pipes_run *r) { tdl_loop_stop(r->loop); }

static int run_callbacks(const char *style, bool watch, int npipes, long messages, long delay_us,
                         tdl_backend backend)
{
  tdl_loop_options opts = {.backend = backend};
  pipes_run r = {.watch = watch, .delay = delay_us * TDL_USEC, .messages = messages, .npipes = npipes,
                 .done = stop_loop};
  int rc = tdl_loop_new(&r.loop, &opts);
  if (rc < 0)
    bench_die("tdl_loop_new: %s", tdl_strerror(rc));
  setup_run(&r);
  if ((rc = tdl_loop_run(r.loop, TDL_LOOP_NOWAIT)) < 0)
    bench_die("tdl_loop_run: %s", tdl_strerror(rc));
  r.spurious = 0;

  bench_span s;
  bench_begin(&s);
  kick_run(&r);
  rc = tdl_loop_run(r.loop, TDL_LOOP_DEFAULT);
  bench_end(&s);

  if (rc < 0)
    bench_die("tdl_loop_run: %s", tdl_strerror(rc));
  if (r.spurious)
    fprintf(stderr, "treadle-%s: %ld read callbacks found the pipe empty\n", style, r.spurious);
  if (r.received != messages || r.started != messages) {
    fprintf(stderr, "treadle-%s: FAILED: %ld messages received, %ld started, %ld expected (tdl_loop_run returned %d)\n",
            style, r.received, r.started, messages, rc);
    return 1;
  }
  char impl[64];
  snprintf(impl, sizeof impl, "treadle-%s%s", style, backend == TDL_BACKEND_URING ? "-uring" : "");
  bench_result(impl, "pipes", &s, "pipes=%d messages=%ld delay_us=%ld msgs_per_s=%.0f cpu_us_per_msg=%.4f", npipes,
               messages, delay_us, (double)messages / s.wall_s, (s.user_s + s.sys_s) * 1e6 / (double)messages);
  teardown_run(&r);
  if ((rc = tdl_loop_free(r.loop)) < 0)
    fprintf(stderr, "treadle-%s: tdl_loop_free: %s\n", style, tdl_strerror(rc));
  return 0;
}

/* ---- --loops N: the pipes split over N loops on N threads ---- */

static struct {
  pipes_run *runs;
  int loops;
  int finished; /* atomic */
  pthread_barrier_t ready;
} G;

static void run_done(pipes_run *r)
{
  (void)r;
  if (__atomic_add_fetch(&G.finished, 1, __ATOMIC_SEQ_CST) == G.loops)
    tdl_group_stop(tdl_group_self());
}

/* Each loop's first fiber: its share of the pipes, then the start line. */
static void *loop_main(void *arg)
{
  (void)arg;
  pipes_run *r = &G.runs[tdl_group_index()];
  r->loop = tdl_fiber_loop();
  setup_run(r);
  pthread_barrier_wait(&G.ready); /* blocks this loop's thread: only at setup */
  kick_run(r);
  return NULL;
}

static void on_group_stop(tdl_loop *loop, void *arg)
{
  (void)loop;
  (void)arg;
  teardown_run(&G.runs[tdl_group_index()]);
}

static int run_loops(int loops, int npipes, long messages, long delay_us, tdl_backend backend)
{
  if (loops < 1 || loops > npipes)
    bench_die("pipes: need 1 <= --loops <= --pipes");
  G.loops = loops;
  G.runs = calloc((size_t)loops, sizeof *G.runs);
  if (!G.runs)
    bench_die("out of memory");
  long total = 0;
  for (int i = 0; i < loops; i++) {
    pipes_run *r = &G.runs[i];
    r->delay = delay_us * TDL_USEC;
    r->npipes = npipes / loops + (i < npipes % loops);
    r->messages = messages / loops + (i < messages % loops);
    r->done = run_done;
    total += r->messages;
  }
  pthread_barrier_init(&G.ready, NULL, (unsigned)loops + 1);
  tdl_loop_options lo = {.backend = backend};
  tdl_group_options o = {.loops = (unsigned)loops, .pin = true, .main = loop_main, .loop = &lo,
                         .on_stop = on_group_stop};
  tdl_group *g;
  int rc = tdl_group_new(&g, &o);
  if (rc == -EINVAL) { /* more loops than CPUs: unpinned */
    o.pin = false;
    rc = tdl_group_new(&g, &o);
  }
  if (rc < 0)
    bench_die("tdl_group_new: %s", tdl_strerror(rc));
  bench_span s;
  pthread_barrier_wait(&G.ready);
  bench_begin(&s);
  rc = tdl_group_wait(g, TDL_FOREVER);
  bench_end(&s);
  long received = 0, started = 0;
  for (int i = 0; i < loops; i++) {
    received += G.runs[i].received;
    started += G.runs[i].started;
  }
  if (rc < 0 || received != total || started != total) {
    fprintf(stderr, "treadle-callback: FAILED: %ld received, %ld started, %ld expected (wait %d)\n", received,
            started, total, rc);
    return 1;
  }
  bench_result("treadle-callback", "pipes", &s,
               "pipes=%d messages=%ld delay_us=%ld loops=%d msgs_per_s=%.0f cpu_us_per_msg=%.4f", npipes, messages,
               delay_us, loops, (double)messages / s.wall_s, (s.user_s + s.sys_s) * 1e6 / (double)messages);
  tdl_group_free(g);
  pthread_barrier_destroy(&G.ready);
  free(G.runs);
  return 0;
}

int bench_pipes_main(int argc, char **argv)
{
  long pipes = bench_opt_long(argc, argv, "pipes", 1000);
  long messages = bench_opt_long(argc, argv, "messages", 1000000);
  long delay_us = bench_opt_long(argc, argv, "delay-us", 0);
  /* The fiber style is treadle's own; until it is built the default is the
   * callback style. */
  const char *style = bench_opt_str(argc, argv, "style", bench_pipes_fiber ? "fiber" : "callback");
  const char *be = bench_opt_str(argc, argv, "backend", NULL);
  long loops = bench_opt_long(argc, argv, "loops", 0);

  if (pipes < 1 || pipes > 1000000 || messages < 1 || delay_us < 0) {
    fprintf(stderr, "pipes: need --pipes >= 1, --messages >= 1, --delay-us >= 0\n");
    return 2;
  }
  tdl_backend backend = TDL_BACKEND_DEFAULT;
  if (be) {
    if (strcmp(be, "epoll") == 0) {
      backend = TDL_BACKEND_EPOLL;
    } else if (strcmp(be, "poll") == 0) {
      backend = TDL_BACKEND_POLL;
    } else if (strcmp(be, "uring") == 0) {
      backend = TDL_BACKEND_URING;
    } else {
      fprintf(stderr, "pipes: back end '%s' is not available (epoll, poll, uring)\n", be);
      return 2;
    }
  }
  bench_raise_nofile();

  if (loops > 0) {
    if (strcmp(style, "callback") != 0 && bench_opt_str(argc, argv, "style", NULL))
      bench_die("pipes: --loops runs the callback style");
    return run_loops((int)loops, (int)pipes, messages, delay_us, backend);
  }
  if (strcmp(style, "callback") == 0)
    return run_callbacks(style, false, (int)pipes, messages, delay_us, backend);
  if (strcmp(style, "watch") == 0)
    return run_callbacks(style, true, (int)pipes, messages, delay_us, backend);
  if (strcmp(style, "fiber") == 0) {
    if (!bench_pipes_fiber) {
      fprintf(stderr, "pipes: --style fiber is not built yet\n");
      return 2;
    }
    /* The fiber code creates its loop with the default back end, which
     * follows $TDL_BACKEND. */
    if (be && setenv("TDL_BACKEND", be, 1) != 0)
      bench_die("setenv: %s", strerror(errno));
    return bench_pipes_fiber((int)pipes, messages, delay_us, backend);
  }
  if (strcmp(style, "ops") == 0) /* completions: a uring loop whatever --backend says */
    return bench_pipes_ops((int)pipes, messages, delay_us);
  fprintf(stderr, "pipes: unknown style '%s' (fiber, callback, watch, ops)\n", style);
  return 2;
}
