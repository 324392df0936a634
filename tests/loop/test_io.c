/* SPDX-License-Identifier: MIT */
/* fd watchers: readiness reporting, misuse, and callbacks that pull the rug. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"

typedef struct counter {
  int calls;
  unsigned last;
  unsigned all;
} counter;

static void count_cb(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  (void)loop;
  counter *c = w->data;
  c->calls++;
  c->last = ev;
  c->all |= ev;
}

static void drain(int fd)
{
  char buf[4096];
  while (read(fd, buf, sizeof buf) > 0)
    ;
}

static void read_reports_each_arrival_once(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(c.calls, 0);

  assert_int_equal(write(p[1], "x", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 1);
  assert_true(c.last & TDL_READ);
  drain(p[0]);
  /* Drained and nothing new: not reported again. */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(c.calls, 1);

  assert_int_equal(write(p[1], "y", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 2);

  assert_int_equal(tdl_io_stop(loop, &w), 0);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void arrival_while_stopped_is_remembered(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_io_stop(loop, &w), 0);
  assert_int_equal(write(p[1], "x", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 0); /* nothing started */
  assert_int_equal(c.calls, 0);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 1);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

/* A read that arrives while the watcher wants only writes is kept for the
 * start that wants reads: reporting the write does not consume it (on an
 * edge-triggered registration the kernel tells of it once). */
static void arrival_while_watching_writes_is_remembered(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, sv[0], count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  char buf[4096] = {0};
  while (write(sv[0], buf, sizeof buf) > 0)
    ;
  assert_int_equal(errno, EAGAIN);
  tdl_io_blocked(loop, &w, TDL_WRITE);
  assert_int_equal(tdl_io_start(loop, &w, TDL_WRITE), 0);
  assert_int_equal(write(sv[1], "x", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(c.calls, 0); /* wants writes, and there is no room */
  drain(sv[1]);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 1);
  assert_true(c.last & TDL_WRITE);
  assert_false(c.last & TDL_READ);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(c.calls, 2);
  assert_true(c.last & TDL_READ);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(sv[0]);
  close(sv[1]);
}

static void write_is_a_state_until_blocked(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, p[1], count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_WRITE), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_true(c.calls >= 2); /* called again while it stays writable */
  assert_true(c.last & TDL_WRITE);

  /* Fill the pipe, say so, and the watcher must wait for room. */
  char buf[4096];
  memset(buf, 'z', sizeof buf);
  while (write(p[1], buf, sizeof buf) > 0)
    ;
  assert_int_equal(errno, EAGAIN);
  tdl_io_blocked(loop, &w, TDL_WRITE);
  c.calls = 0;
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(c.calls, 0);

  drain(p[0]);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 1);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void bad_fds_are_refused(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, -1, count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), -EBADF);
  assert_false(tdl_io_active(&w));

  int p[2];
  t_pipe(p);
  close(p[0]);
  close(p[1]); /* p[0] is now a number with no file behind it */
  tdl_io_init(&w, p[0], count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), -EBADF);
  assert_false(tdl_io_active(&w));
  assert_false(tdl_loop_alive(loop));
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 0);
  assert_int_equal(c.calls, 0);
  t_loop_free(loop); /* nothing registered: frees fine */
}

static void bad_events_are_refused(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, NULL);
  assert_int_equal(tdl_io_start(loop, &w, 0), -EINVAL);
  assert_int_equal(tdl_io_start(loop, &w, TDL_HUP), -EINVAL);
  assert_int_equal(tdl_io_start(loop, &w, 0x100), -EINVAL);
  assert_false(tdl_io_active(&w));
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void regular_files(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  char path[] = "/tmp/treadle-test-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  tdl_io w;
  tdl_io_init(&w, fd, count_cb, NULL);
  int e = tdl_io_start(loop, &w, TDL_READ);
  if (strcmp(tdl_loop_backend(loop), "poll") != 0) {
    assert_int_equal(e, -EPERM); /* epoll (uring's watchers too) cannot watch regular files */
    assert_false(tdl_io_active(&w));
  } else {
    assert_int_equal(e, 0); /* poll reports them always ready */
    tdl_io_stop(loop, &w);
  }
  t_loop_free(loop);
  close(fd);
}

static void one_watcher_per_fd(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  tdl_io a, b;
  tdl_io_init(&a, p[0], count_cb, NULL);
  tdl_io_init(&b, p[0], count_cb, NULL);
  assert_int_equal(tdl_io_start(loop, &a, TDL_READ), 0);
  assert_int_equal(tdl_io_start(loop, &b, TDL_READ), -EEXIST);
  assert_false(tdl_io_active(&b));
  /* Once a is stopped, b may take the fd over, and then gets its events. */
  tdl_io_stop(loop, &a);
  counter c = {0};
  b.data = &c;
  assert_int_equal(tdl_io_start(loop, &b, TDL_READ), 0);
  assert_int_equal(write(p[1], "x", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 1);
  tdl_io_stop(loop, &b);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void start_and_stop_are_idempotent(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, &c);
  assert_int_equal(tdl_io_stop(loop, &w), 0); /* never started */
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_true(tdl_loop_alive(loop));
  assert_int_equal(tdl_io_stop(loop, &w), 0);
  assert_int_equal(tdl_io_stop(loop, &w), 0);
  assert_false(tdl_loop_alive(loop));
  /* Changing events of a started watcher. */
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ | TDL_WRITE), 0);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

/* ---- callbacks that stop, restart or free watchers ---- */

typedef struct pair {
  tdl_io *self, *other;
  int self_calls, other_calls;
  int free_other, free_self, restart_self;
} pair;

static void other_cb(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  (void)loop;
  (void)ev;
  pair *p = w->data;
  p->other_calls++;
}

static void self_cb(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  (void)ev;
  pair *p = w->data;
  p->self_calls++;
  if (p->other) {
    tdl_io_stop(loop, p->other);
    if (p->free_other) {
      free(p->other);
      p->other = NULL;
    }
  }
  if (p->restart_self) {
    tdl_io_stop(loop, w);
    assert_int_equal(tdl_io_start(loop, w, TDL_READ), 0);
  } else {
    tdl_io_stop(loop, w);
  }
  if (p->free_self)
    free(w);
}

static void stopping_a_pending_watcher_cancels_its_event(int free_other)
{
  tdl_loop *loop = t_loop_new();
  int a[2], b[2];
  t_pipe(a);
  t_pipe(b);
  pair pr = {0};
  tdl_io *wa = malloc(sizeof *wa), *wb = malloc(sizeof *wb);
  tdl_io_init(wa, a[0], self_cb, &pr);
  tdl_io_init(wb, b[0], other_cb, &pr);
  pr.self = wa;
  pr.free_other = free_other;
  /* Both become ready in the same iteration; whichever runs first stops (and
   * maybe frees) the other, which must then not run. */
  pr.other = wb;
  assert_int_equal(tdl_io_start(loop, wa, TDL_READ), 0);
  assert_int_equal(tdl_io_start(loop, wb, TDL_READ), 0);
  assert_int_equal(write(a[1], "x", 1), 1);
  assert_int_equal(write(b[1], "x", 1), 1);
  tdl_loop_run(loop, TDL_LOOP_ONCE);
  assert_true(pr.self_calls + pr.other_calls >= 1);
  if (pr.self_calls == 1)
    assert_int_equal(pr.other_calls, 0);
  tdl_io_stop(loop, wa);
  if (pr.other)
    tdl_io_stop(loop, pr.other);
  t_loop_free(loop);
  free(wa);
  if (pr.other)
    free(pr.other);
  close(a[0]);
  close(a[1]);
  close(b[0]);
  close(b[1]);
}

static void stop_other_pending(void **state)
{
  (void)state;
  stopping_a_pending_watcher_cancels_its_event(0);
}

static void stop_and_free_other_pending(void **state)
{
  (void)state;
  stopping_a_pending_watcher_cancels_its_event(1);
}

static void callback_frees_itself(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  pair pr = {.free_self = 1};
  tdl_io *w = malloc(sizeof *w);
  tdl_io_init(w, p[0], self_cb, &pr);
  assert_int_equal(tdl_io_start(loop, w, TDL_READ | TDL_WRITE), 0);
  assert_int_equal(write(p[1], "x", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(pr.self_calls, 1);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void callback_restarts_itself(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  pair pr = {.restart_self = 1};
  tdl_io w;
  tdl_io_init(&w, p[0], self_cb, &pr);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(write(p[1], "x", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(pr.self_calls, 1);
  drain(p[0]);
  /* The arrival was consumed before the callback: a restart does not replay it. */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(pr.self_calls, 1);
  assert_true(tdl_io_active(&w));
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void feed_asks_to_be_called_again(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  tdl_io_feed(loop, &w, TDL_READ);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(c.calls, 1);
  assert_true(c.last & TDL_READ);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void hangup_and_error_are_reported(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter r = {0}, wr = {0};
  tdl_io rw, ww;
  tdl_io_init(&rw, p[0], count_cb, &r);
  assert_int_equal(tdl_io_start(loop, &rw, TDL_READ), 0);
  close(p[1]); /* writer gone: the reader sees EOF, with HUP */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(r.calls, 1);
  assert_true(r.last & TDL_READ);
  assert_true(r.last & TDL_HUP);
  tdl_io_stop(loop, &rw);
  close(p[0]);

  t_pipe(p);
  tdl_io_init(&ww, p[1], count_cb, &wr);
  close(p[0]); /* reader gone: the writer sees an error (EPIPE) */
  assert_int_equal(tdl_io_start(loop, &ww, TDL_WRITE), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_true(wr.calls >= 1);
  assert_true(wr.all & TDL_ERR);
  tdl_io_stop(loop, &ww);
  close(p[1]);
  t_loop_free(loop);
}

static void closing_a_watched_fd(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, &c);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  int num = p[0];
  close(p[0]); /* closed while started: documented, must not crash */
  for (int i = 0; i < 3; i++)
    assert_true(tdl_loop_run(loop, TDL_LOOP_NOWAIT) >= 0);
  /* epoll: never called; poll: called (once) with TDL_ERR. */
  assert_true(c.calls <= 1);
  if (c.calls)
    assert_true(c.last & TDL_ERR);
  assert_int_equal(tdl_io_stop(loop, &w), 0);

  /* The number is reused by a new pipe: a re-initialised watcher works. */
  int q[2];
  t_pipe(q);
  int rfd = q[0] == num ? q[0] : -1;
  if (rfd < 0) { /* make sure the reused number is the read end */
    assert_int_equal(dup3(q[0], num, O_CLOEXEC), num);
    close(q[0]);
    rfd = num;
  }
  counter c2 = {0};
  tdl_io_init(&w, rfd, count_cb, &c2);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(write(q[1], "x", 1), 1);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c2.calls, 1);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(rfd);
  close(q[1]);
}

static void count_and_drain_cb(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  count_cb(loop, w, ev);
  drain(w->fd);
}

static void many_pipes(void **state)
{
  (void)state;
  enum { N = 500 };
  tdl_loop *loop = t_loop_new();
  static int p[N][2];
  static tdl_io w[N];
  static counter c[N];
  memset(c, 0, sizeof c);
  for (int i = 0; i < N; i++) {
    t_pipe(p[i]);
    tdl_io_init(&w[i], p[i][0], count_and_drain_cb, &c[i]);
    assert_int_equal(tdl_io_start(loop, &w[i], TDL_READ), 0);
  }
  for (int i = 0; i < N; i += 2)
    assert_int_equal(write(p[i][1], "x", 1), 1);
  int seen = 0;
  for (int k = 0; k < 50 && seen < N / 2; k++) {
    tdl_loop_run(loop, TDL_LOOP_ONCE);
    seen = 0;
    for (int i = 0; i < N; i++)
      seen += c[i].calls;
  }
  for (int i = 0; i < N; i++)
    assert_int_equal(c[i].calls, i % 2 == 0 ? 1 : 0);
  for (int i = 0; i < N; i++) {
    tdl_io_stop(loop, &w[i]);
    close(p[i][0]);
    close(p[i][1]);
  }
  t_loop_free(loop);
}

/* A callback that opens and watches more fds than the tables hold, while
 * later fds of the same batch are still waiting to run (the tables and the
 * queues move under the running batch): every ready watcher, old and new,
 * runs exactly once. */
enum { GROW_OLD = 8, GROW_NEW = 300 };
static struct {
  int old[GROW_OLD][2], fresh[GROW_NEW][2];
  tdl_io wold[GROW_OLD], wnew[GROW_NEW];
  counter cold[GROW_OLD], cnew[GROW_NEW];
  int grown;
} G;

static void grow_cb(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  count_and_drain_cb(loop, w, ev);
  if (G.grown++)
    return;
  for (int i = 0; i < GROW_NEW; i++) {
    t_pipe(G.fresh[i]);
    assert_int_equal(write(G.fresh[i][1], "x", 1), 1);
    tdl_io_init(&G.wnew[i], G.fresh[i][0], count_and_drain_cb, &G.cnew[i]);
    assert_int_equal(tdl_io_start(loop, &G.wnew[i], TDL_READ), 0);
  }
}

static void tables_grow_under_a_running_batch(void **state)
{
  (void)state;
  memset(&G, 0, sizeof G);
  tdl_loop *loop = t_loop_new();
  for (int i = 0; i < GROW_OLD; i++) {
    t_pipe(G.old[i]);
    tdl_io_init(&G.wold[i], G.old[i][0], grow_cb, &G.cold[i]);
    assert_int_equal(tdl_io_start(loop, &G.wold[i], TDL_READ), 0);
    assert_int_equal(write(G.old[i][1], "x", 1), 1);
  }
  for (int k = 0; k < 20; k++)
    tdl_loop_run(loop, TDL_LOOP_NOWAIT);
  assert_int_equal(G.grown, GROW_OLD);
  for (int i = 0; i < GROW_OLD; i++)
    assert_int_equal(G.cold[i].calls, 1);
  for (int i = 0; i < GROW_NEW; i++)
    assert_int_equal(G.cnew[i].calls, 1);
  for (int i = 0; i < GROW_OLD; i++) {
    tdl_io_stop(loop, &G.wold[i]);
    close(G.old[i][0]);
    close(G.old[i][1]);
  }
  for (int i = 0; i < GROW_NEW; i++) {
    tdl_io_stop(loop, &G.wnew[i]);
    close(G.fresh[i][0]);
    close(G.fresh[i][1]);
  }
  t_loop_free(loop);
}

/* Stop and start another watcher, whose fd is ready, many times over from
 * one callback: it still runs once per iteration at most, and nothing
 * overflows. */
typedef struct churn {
  tdl_io *other;
  int calls;
} churn;

static void churn_cb(tdl_loop *loop, tdl_io *w, unsigned ev)
{
  (void)ev;
  churn *c = w->data;
  c->calls++;
  drain(w->fd);
  for (int i = 0; i < 1000; i++) {
    assert_int_equal(tdl_io_stop(loop, c->other), 0);
    assert_int_equal(tdl_io_start(loop, c->other, TDL_WRITE), 0);
  }
}

static void stop_start_churn_from_a_callback(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int a[2], b[2];
  t_pipe(a);
  t_pipe(b);
  counter cb_other = {0};
  tdl_io wb;
  tdl_io_init(&wb, b[1], count_cb, &cb_other); /* a write end: writable */
  churn c = {.other = &wb};
  tdl_io wa;
  tdl_io_init(&wa, a[0], churn_cb, &c);
  assert_int_equal(tdl_io_start(loop, &wa, TDL_READ), 0);
  assert_int_equal(tdl_io_start(loop, &wb, TDL_WRITE), 0);
  assert_int_equal(write(a[1], "x", 1), 1);
  for (int k = 0; k < 3; k++)
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(c.calls, 1);
  /* A started write watcher runs on every iteration: once in each of three. */
  assert_int_equal(cb_other.calls, 3);
  tdl_io_stop(loop, &wa);
  tdl_io_stop(loop, &wb);
  t_loop_free(loop);
  close(a[0]);
  close(a[1]);
  close(b[0]);
  close(b[1]);
}

static void noop_timer_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
}

/* A write watcher started on a writable fd has something to report; stopped
 * again, or told the fd is blocked, it has nothing, and the loop may sleep. */
static void nothing_pending_after_start_then_stop_or_blocked(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  counter c = {0};
  tdl_io w;
  tdl_io_init(&w, p[1], count_cb, &c);
  tdl_timer keepalive;
  tdl_timer_init(&keepalive, noop_timer_cb, NULL);
  assert_int_equal(tdl_timer_start(loop, &keepalive, 60 * TDL_SEC, 0), 0);

  /* Once the kernel has said so, writability is cached. */
  assert_int_equal(tdl_io_start(loop, &w, TDL_WRITE), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 1);
  assert_int_equal(tdl_io_stop(loop, &w), 0);

  assert_int_equal(tdl_io_start(loop, &w, TDL_WRITE), 0);
  assert_int_equal(tdl_loop_timeout(loop), 0);
  assert_int_equal(tdl_io_stop(loop, &w), 0);
  assert_true(tdl_loop_timeout(loop) > 0);

  assert_int_equal(tdl_io_start(loop, &w, TDL_WRITE), 0);
  assert_int_equal(tdl_loop_timeout(loop), 0);
  tdl_io_blocked(loop, &w, TDL_WRITE);
  assert_true(tdl_loop_timeout(loop) > 0);
  /* The kernel still says writable: it is reported again. */
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 2);
  assert_true(c.last & TDL_WRITE);

  tdl_io_stop(loop, &w);
  tdl_timer_stop(loop, &keepalive);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

static void free_with_active_watcher_is_refused(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, NULL);
  assert_int_equal(tdl_io_start(loop, &w, TDL_READ), 0);
  assert_int_equal(tdl_loop_free(loop), -EBUSY);
  /* Nothing was freed: the loop still works. */
  assert_int_equal(write(p[1], "x", 1), 1);
  counter c = {0};
  w.data = &c;
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_ONCE), 1);
  assert_int_equal(c.calls, 1);
  tdl_io_stop(loop, &w);
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}

#ifdef TDL_DEBUG_CHECKS
typedef struct foreign {
  tdl_loop *loop;
  tdl_io *w;
  int rc;
} foreign;

static void *foreign_start(void *arg)
{
  foreign *f = arg;
  f->rc = tdl_io_start(f->loop, f->w, TDL_READ);
  return NULL;
}

static void foreign_thread_is_detected(void **state)
{
  (void)state;
  tdl_loop *loop = t_loop_new();
  int p[2];
  t_pipe(p);
  tdl_io w;
  tdl_io_init(&w, p[0], count_cb, NULL);
  foreign f = {loop, &w, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, foreign_start, &f), 0);
  pthread_join(th, NULL);
  assert_int_equal(f.rc, -EPERM);
  assert_false(tdl_io_active(&w));
  t_loop_free(loop);
  close(p[0]);
  close(p[1]);
}
#endif

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(read_reports_each_arrival_once),
      cmocka_unit_test(arrival_while_stopped_is_remembered),
      cmocka_unit_test(arrival_while_watching_writes_is_remembered),
      cmocka_unit_test(write_is_a_state_until_blocked),
      cmocka_unit_test(bad_fds_are_refused),
      cmocka_unit_test(bad_events_are_refused),
      cmocka_unit_test(regular_files),
      cmocka_unit_test(one_watcher_per_fd),
      cmocka_unit_test(start_and_stop_are_idempotent),
      cmocka_unit_test(stop_other_pending),
      cmocka_unit_test(stop_and_free_other_pending),
      cmocka_unit_test(callback_frees_itself),
      cmocka_unit_test(callback_restarts_itself),
      cmocka_unit_test(feed_asks_to_be_called_again),
      cmocka_unit_test(hangup_and_error_are_reported),
      cmocka_unit_test(closing_a_watched_fd),
      cmocka_unit_test(many_pipes),
      cmocka_unit_test(tables_grow_under_a_running_batch),
      cmocka_unit_test(stop_start_churn_from_a_callback),
      cmocka_unit_test(nothing_pending_after_start_then_stop_or_blocked),
      cmocka_unit_test(free_with_active_watcher_is_refused),
#ifdef TDL_DEBUG_CHECKS
      cmocka_unit_test(foreign_thread_is_detected),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
