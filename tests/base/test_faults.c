/* SPDX-License-Identifier: MIT */
/* Fault injection (src/base/fault.h, built with -DTDL_FAULTS=ON): each
 * scenario runs with its Nth resource-taking call failing, for N = 1, 2, ...
 * until a run no longer reaches an Nth call.  At every N the scenario must
 * end with 0 (the library absorbed the failure, and the results are exact)
 * or with one of the negative errno values it lists; no fd may be left
 * open, and the scenario's loop must still run a fiber and a timer before it
 * is freed.  Memory: `make test-asan` runs this with detect_leaks=1, `make
 * test` under valgrind.  Each walk prints how many injection points it went
 * through. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#include "base/fault.h"

/* A unity build, as in tests/examples/test_httpd.c: the server's code is
 * compiled into this test. */
#include "http_parser.c"
#include "server.c"

/* How long a client waits for its server: only a hang waits T_HANG.  When
 * every call fails from some point on, a server may be left unable to take
 * a connection for good (it backs off and retries, as it should), so its
 * client gives up after 2 s and -ETIMEDOUT is an expected end. */
static tdl_time_t io_wait = T_HANG;
#define IO_DEADLINE io_wait

typedef int (*scenario_fn)(void);

/* The first error a scenario saw, preferring the injected kind over its
 * consequences (a peer's reset, a cancelled wait). */
static int first_err;

static bool injected_kind(int e) { return e == -ENOMEM || e == -EMFILE || e == -EAGAIN; }

/* Any thread may note (a group's loops do). */
static pthread_mutex_t note_lock = PTHREAD_MUTEX_INITIALIZER;

static void note(int e)
{
  if (e >= 0)
    return;
  pthread_mutex_lock(&note_lock);
  if (first_err == 0 || (injected_kind(e) && !injected_kind(first_err)))
    first_err = e;
  pthread_mutex_unlock(&note_lock);
}

static bool listed(int e, const int *ok)
{
  for (; *ok; ok++)
    if (e == *ok)
      return true;
  return false;
}

/* ---- the loop is still usable: a fiber and a timer run on it ---- */

static void on_tick(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  *(int *)t->data += 1;
}

static void *tiny_fiber(void *arg)
{
  *(int *)arg += 1;
  return NULL;
}

/* Runs a fiber and a timer on loop, then frees it (asserting it could).
 * The scenario ends here: no more failures. */
static void still_usable_then_free(tdl_loop *loop)
{
  tdl__fault_arm(0, false);
  int ran = 0, ticked = 0;
  tdl_timer t;
  tdl_timer_init(&t, on_tick, &ticked);
  assert_int_equal(tdl_timer_start(loop, &t, 0, 0), 0);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, loop, tiny_fiber, &ran, NULL), 0);
  assert_int_equal(tdl_fiber_detach(loop, f), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(ran, 1);
  assert_int_equal(ticked, 1);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- the walk ---- */

/* One walk: the Nth call fails (sticky: and every one after it). */
static long walk_mode(const char *name, scenario_fn fn, const int *ok, bool sticky)
{
  int fds = t_count_fds();
  bool verbose = getenv("TDL_FAULTS_VERBOSE") != NULL;
  const char *mode = sticky ? "from call %ld on" : "call %ld";
  long n = getenv("TDL_FAULTS_FROM") ? atol(getenv("TDL_FAULTS_FROM")) : 1; /* to look at one case */
  for (;; n++) {
    if (verbose) {
      fprintf(stderr, "%s: ", name);
      fprintf(stderr, mode, n);
      fprintf(stderr, " fails\n");
    }
    first_err = 0;
    io_wait = sticky ? 2 * TDL_SEC : T_HANG;
    tdl__fault_arm(n, sticky);
    int r = fn();
    bool fired = tdl__fault_fired();
    tdl__fault_arm(0, false);
    if (verbose)
      fprintf(stderr, "%s: returned %d\n", name, r);
    if (!fired) {
      if (r != 0)
        fail_msg("%s: untouched run returned %d (%s)", name, r, strerror(-r));
      break;
    }
    /* accept may have lost its reserve fd while fds were "short"; the next
     * accept or listen takes it back, as this does */
    assert_int_equal(tdl_net_accept_reserve(true), 0);
    if (r != 0 && !listed(r, ok) && !(sticky && r == -ETIMEDOUT))
      fail_msg("%s: %s %ld failed (%s): returned %d (%s)", name, sticky ? "every call from" : "call", n,
               tdl__fault_site(), r, strerror(-r));
    int now = t_count_fds();
    if (now != fds)
      fail_msg("%s: %s %ld failed (%s): %d fds open, %d before", name, sticky ? "every call from" : "call", n,
               tdl__fault_site(), now, fds);
  }
  return n - 1;
}

static void walk(const char *name, scenario_fn fn, const int *ok)
{
  long one = walk_mode(name, fn, ok, false);
  long all = walk_mode(name, fn, ok, true);
  print_message("[ faults   ] %s: %ld injection points walked (then %ld with every later call failing too)\n",
                name, one, all);
  assert_true(one > 0);
  assert_true(all > 0); /* not always equal: how many timers fall due together, for one, varies */
}

/* ==== 1. a loop with timers and watchers ==== */

#define NTIMERS 600 /* past the heap's first mapping and two growths */
#define NPIPES 100  /* ready at once: more events than one wait takes at first */

typedef struct lctx {
  int fired, io, sig, wake, deferred;
  int p[NPIPES][2];
  tdl_io w[NPIPES];
  tdl_signal s;
  tdl_wakeup wk;
  tdl_defer d;
  tdl_timer t[NTIMERS];
} lctx;

static void l_timer(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  ((lctx *)t->data)->fired++;
}

static void l_io(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)events;
  lctx *c = w->data;
  char b;
  if (read(w->fd, &b, 1) == 1)
    c->io++;
  tdl_io_stop(loop, w);
}

static void l_sig(tdl_loop *loop, tdl_signal *s, int signum)
{
  (void)signum;
  ((lctx *)s->data)->sig++;
  tdl_signal_stop(loop, s);
}

static void l_wake(tdl_loop *loop, tdl_wakeup *wk)
{
  ((lctx *)wk->data)->wake++;
  tdl_wakeup_stop(loop, wk);
}

static void l_defer(tdl_loop *loop, tdl_defer *d)
{
  (void)loop;
  ((lctx *)d->data)->deferred++;
}

static int sc_loop(void)
{
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0)
    return e;
  lctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  for (int i = 0; i < NPIPES; i++) {
    assert_int_equal(pipe2(c->p[i], O_NONBLOCK | O_CLOEXEC), 0);
    tdl_io_init(&c->w[i], c->p[i][0], l_io, c);
  }
  /* half of them due together (their order is restored from a scratch
   * table), the rest spread out */
  tdl_time_t together = tdl_after(200 * TDL_USEC);
  int started = 0;
  for (; started < NTIMERS && e == 0; started++) {
    tdl_timer_init(&c->t[started], l_timer, c);
    if (started < NTIMERS / 2)
      e = tdl_timer_start_at(loop, &c->t[started], together, 0);
    else
      e = tdl_timer_start(loop, &c->t[started], (tdl_time_t)(started % 7) * 100 * TDL_USEC, 0);
  }
  if (e < 0)
    started--;
  int watched = 0;
  tdl_signal_init(&c->s, l_sig, c);
  tdl_wakeup_init(&c->wk, l_wake, c);
  tdl_defer_init(&c->d, l_defer, c);
  for (; watched < NPIPES && e == 0; watched++)
    if ((e = tdl_io_start(loop, &c->w[watched], TDL_READ)) < 0)
      break;
  if (e == 0)
    e = tdl_signal_start(loop, &c->s, SIGUSR2);
  if (e == 0)
    e = tdl_wakeup_start(loop, &c->wk);
  if (e == 0)
    e = tdl_defer_queue(loop, &c->d);
  if (e == 0) {
    for (int i = 0; i < NPIPES; i++)
      assert_int_equal(write(c->p[i][1], "x", 1), 1);
    assert_int_equal(raise(SIGUSR2), 0);
    assert_int_equal(tdl_wakeup_send(&c->wk), 0);
    e = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
    if (e == 0) {
      assert_int_equal(c->fired, NTIMERS);
      assert_int_equal(c->io, NPIPES);
      assert_int_equal(c->sig + c->wake + c->deferred, 3);
    }
  } else {
    for (int i = 0; i < started; i++)
      tdl_timer_stop(loop, &c->t[i]);
    for (int i = 0; i < watched; i++)
      tdl_io_stop(loop, &c->w[i]);
    tdl_signal_stop(loop, &c->s);
    tdl_wakeup_stop(loop, &c->wk);
  }
  still_usable_then_free(loop);
  for (int i = 0; i < NPIPES; i++) {
    close(c->p[i][0]);
    close(c->p[i][1]);
  }
  free(c);
  return e;
}

static void test_loop_faults(void **state)
{
  (void)state;
  walk("loop, timers and watchers", sc_loop, (const int[]){-ENOMEM, -EMFILE, 0});
}

/* ==== 2. fibers with channels and sync ==== */

#define NPAIRS 150 /* 300 workers: past the first slot table */
#define NOFF 20    /* select clauses: past those kept on the stack */

typedef struct fctx {
  tdl_chan *ch, *buf;
  tdl_mutex mu;
  tdl_cond cv;
  tdl_sem sem;
  tdl_waitgroup wg;
  long sum;
  int done;
  tdl_fiber_t w[2 * NPAIRS];
} fctx;

typedef struct warg {
  fctx *c;
  long v;
} warg;

/* A worker that failed closes the channels: its partner must not wait for
 * it forever. */
static void worker_end(fctx *c, int e)
{
  if (e < 0 && e != -EPIPE) {
    note(e);
    tdl_chan_close(c->ch);
    tdl_chan_close(c->buf);
  }
  tdl_waitgroup_done(&c->wg);
}

static void *f_producer(void *arg)
{
  warg *a = arg;
  int e = tdl_sem_acquire(&a->c->sem, TDL_FOREVER);
  if (e == 0) {
    e = tdl_chan_send(a->c->ch, &a->v, TDL_FOREVER);
    tdl_sem_release(&a->c->sem);
  }
  if (e == 0)
    e = tdl_chan_send(a->c->buf, &a->v, TDL_FOREVER);
  worker_end(a->c, e);
  return NULL;
}

static void *f_consumer(void *arg)
{
  warg *a = arg;
  fctx *c = a->c;
  long v;
  tdl_select_op ops[NOFF + 1];
  memset(ops, 0, sizeof ops);
  for (int i = 0; i < NOFF; i++)
    ops[i] = (tdl_select_op){.kind = TDL_SELECT_RECV, .ch = NULL}; /* switched off */
  ops[NOFF] = (tdl_select_op){.kind = TDL_SELECT_RECV, .ch = c->ch, .val = &v};
  int e = tdl_select(ops, NOFF + 1, TDL_FOREVER);
  if (e == NOFF)
    e = ops[NOFF].result;
  if (e == 0 && (e = tdl_mutex_lock(&c->mu, TDL_FOREVER)) == 0) {
    c->sum += v;
    c->done++;
    tdl_cond_signal(&c->cv);
    tdl_mutex_unlock(&c->mu);
  }
  worker_end(c, e);
  return NULL;
}

static void *f_root(void *arg)
{
  fctx *c = arg;
  warg args[2 * NPAIRS];
  int e = tdl_chan_new(&c->ch, sizeof(long), 0);
  if (e == 0 && (e = tdl_chan_new(&c->buf, sizeof(long), NPAIRS)) < 0) {
    tdl_chan_free(c->ch);
    c->ch = NULL;
  }
  if (e < 0) {
    note(e);
    return NULL;
  }
  tdl_mutex_init(&c->mu);
  tdl_cond_init(&c->cv);
  tdl_sem_init(&c->sem, 8, 8);
  tdl_waitgroup_init(&c->wg);
  int n = 0;
  for (; n < 2 * NPAIRS; n++) {
    args[n] = (warg){c, n};
    tdl_waitgroup_add(&c->wg, 1);
    if ((e = tdl_fiber_spawn(&c->w[n], tdl_fiber_loop(), n % 2 ? f_consumer : f_producer, &args[n], NULL)) < 0) {
      tdl_waitgroup_add(&c->wg, -1);
      break;
    }
  }
  if (e < 0) { /* the fibers already started must not wait for the rest */
    note(e);
    tdl_chan_close(c->ch);
    tdl_chan_close(c->buf);
  }
  int we = tdl_waitgroup_wait(&c->wg, TDL_FOREVER);
  assert_int_equal(we, 0);
  for (int i = 0; i < n; i++)
    assert_int_equal(tdl_fiber_join(c->w[i], NULL, TDL_FOREVER), 0);
  if (first_err == 0) {
    /* everything went through: every value arrived twice, exactly */
    long want = 0, got = 0, v;
    for (int i = 0; i < 2 * NPAIRS; i += 2)
      want += i;
    assert_int_equal(c->sum, want);
    assert_int_equal(c->done, NPAIRS);
    while (tdl_chan_try_recv(c->buf, &v) == 0)
      got += v;
    assert_int_equal(got, want);
  }
  /* a shared channel: aligned allocations of its own */
  tdl_chan *x;
  if ((e = tdl_chan_new_shared(&x, sizeof(long), 4)) == 0) {
    long v = 42, w = 0;
    assert_int_equal(tdl_chan_try_send(x, &v), 0);
    assert_int_equal(tdl_chan_try_recv(x, &w), 0);
    assert_int_equal(w, 42);
    assert_int_equal(tdl_chan_free(x), 0);
  }
  note(e);
  tdl_chan_free(c->ch);
  tdl_chan_free(c->buf);
  return NULL;
}

static int sc_fibers(void)
{
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0)
    return e;
  fctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  tdl_fiber_t root;
  if ((e = tdl_fiber_spawn(&root, loop, f_root, c, NULL)) == 0) {
    assert_int_equal(tdl_fiber_detach(loop, root), 0);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    e = first_err;
  }
  still_usable_then_free(loop);
  free(c);
  return e;
}

static void test_fiber_faults(void **state)
{
  (void)state;
  walk("fibers, channels and sync", sc_fibers, (const int[]){-ENOMEM, -EMFILE, 0});
}

/* ==== 3. spawn with capture ==== */

static const char *const run_argv[] = {"/bin/sh", "-c", "cat; echo oops >&2; exit 3", NULL};

static int run_once(void)
{
  tdl_process_run_result res;
  int e = tdl_process_run(&res, run_argv, NULL, "hello", 5, 1 << 20, tdl_after(IO_DEADLINE));
  if (e == 0) {
    assert_true(tdl_process_exited(res.status));
    assert_int_equal(tdl_process_exit_code(res.status), 3);
    assert_int_equal(res.out_len, 5);
    assert_memory_equal(res.out, "hello", 5);
    assert_string_equal(res.err, "oops\n");
    assert_int_equal(res.in_written, 5);
  } else {
    assert_null(res.out);
    assert_null(res.err);
  }
  tdl_process_run_result_destroy(&res);
  return e;
}

static void *run_fiber(void *arg)
{
  (void)arg;
  note(run_once());
  return NULL;
}

/* tdl_process_spawn with a PATH search, an environment change, /dev/null
 * and a pipe; read in a fiber, waited for; then a child under a watcher. */
static void on_exit_watched(tdl_loop *loop, tdl_process *p, int status)
{
  (void)loop;
  *(int *)p->data = status == 0 ? 1 : -1;
  tdl_process_destroy(p);
}

static void *spawn_fiber(void *arg)
{
  (void)arg;
  tdl_process p;
  tdl_process_options o = {
    .argv = (const char *const[]){"sh", "-c", "echo $FAULTS_VAR", NULL},
    .env_set = (const char *const[]){"FAULTS_VAR=yes", NULL},
    .stdio = {{.mode = TDL_STDIO_NULL}, {.mode = TDL_STDIO_PIPE}, {.mode = TDL_STDIO_INHERIT}},
  };
  int e = tdl_process_spawn(&p, &o);
  if (e < 0) {
    note(e);
    return NULL;
  }
  char out[16];
  size_t len = 0;
  ssize_t n;
  while ((n = tdl_read(p.stdout_fd, out + len, sizeof out - len, tdl_after(IO_DEADLINE))) > 0)
    len += (size_t)n;
  int status;
  if (n < 0) {
    note((int)n);
  } else if ((e = tdl_process_wait(&p, &status, tdl_after(IO_DEADLINE))) < 0) {
    note(e);
  } else {
    assert_int_equal(status, 0);
    assert_int_equal(len, 4);
    assert_memory_equal(out, "yes\n", 4);
  }
  tdl_process_destroy(&p);

  static tdl_process w;
  static int done;
  done = 0;
  if ((e = tdl_process_spawn(&w, &(tdl_process_options){.argv = (const char *const[]){"/bin/true", NULL}})) < 0) {
    note(e);
    return NULL;
  }
  w.data = &done;
  if ((e = tdl_process_watch(tdl_fiber_loop(), &w, on_exit_watched)) < 0) {
    note(e);
    tdl_process_destroy(&w);
    return NULL;
  }
  while (!done)
    if ((e = tdl_sleep(tdl_after(TDL_MSEC))) < 0) { /* no timer: the watcher still calls back */
      note(e);
      tdl_fiber_yield();
    }
  assert_int_equal(done, 1);
  return NULL;
}

/* Once in a fiber (the fiber's loop watches the child), once outside one
 * (a private loop of the call's own); then spawn, pipes and a watcher. */
static int sc_spawn(void)
{
  int e = run_once();
  if (e < 0)
    return e;
  tdl_loop *loop;
  if ((e = tdl_loop_new(&loop, NULL)) < 0)
    return e;
  tdl_fiber_t f;
  if ((e = tdl_fiber_spawn(&f, loop, run_fiber, NULL, NULL)) == 0) {
    assert_int_equal(tdl_fiber_detach(loop, f), 0);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    e = first_err;
  }
  if (e == 0 && (e = tdl_fiber_spawn(&f, loop, spawn_fiber, NULL, NULL)) == 0) {
    assert_int_equal(tdl_fiber_detach(loop, f), 0);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    e = first_err;
  }
  still_usable_then_free(loop);
  return e;
}

static void test_spawn_faults(void **state)
{
  (void)state;
  walk("spawn with capture", sc_spawn, (const int[]){-ENOMEM, -EMFILE, -EAGAIN, 0});
}

/* ==== 4. listen, accept, connect over loopback ==== */

#define NLINES 200 /* ~20 KB each way: the reader's and writer's buffers grow */

typedef struct nctx {
  tdl_addr addr;
  int lfd;
  tdl_fiber_t server;
} nctx;

static void line_of(char *b, size_t cap, int i) { snprintf(b, cap, "line %d %.*s\n", i, 80, "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghij"); }

/* Echoes lines until EOF. */
static void *n_server(void *arg)
{
  nctx *c = arg;
  int fd = tdl_net_accept(c->lfd, NULL, tdl_after(IO_DEADLINE));
  if (fd < 0) {
    if (fd != -ECANCELED) { /* give up listening: the client's connection is reset */
      note(fd);
      tdl_close(c->lfd);
      c->lfd = -1;
    }
    return NULL;
  }
  tdl_reader r;
  tdl_writer w;
  int e = tdl_reader_init(&r, fd, NULL, 256, 1 << 16);
  if (e == 0 && (e = tdl_writer_init(&w, fd, NULL, 256, 1 << 16)) < 0)
    tdl_reader_destroy(&r);
  if (e == 0) {
    ssize_t n;
    while ((n = tdl_reader_until(&r, "\n", 1, tdl_after(IO_DEADLINE))) > 0) {
      if ((e = tdl_writer_put(&w, tdl_reader_data(&r), (size_t)n)) < 0)
        break;
      tdl_reader_consume(&r, (size_t)n);
      if (tdl_reader_len(&r) == 0 && (e = tdl_writer_flush(&w, tdl_after(IO_DEADLINE))) < 0)
        break;
    }
    if (n < 0 && e == 0)
      e = (int)n;
    tdl_reader_destroy(&r);
    tdl_writer_destroy(&w);
  }
  if (e != -ECANCELED && e != -ECONNRESET && e != -EPIPE)
    note(e);
  tdl_close(fd);
  return NULL;
}

static int n_client_talk(nctx *c)
{
  int fd = tdl_net_connect(&c->addr, tdl_after(IO_DEADLINE));
  if (fd < 0)
    return fd;
  tdl_writer w;
  tdl_reader r;
  int e = tdl_writer_init(&w, fd, NULL, 128, 1 << 16);
  if (e == 0 && (e = tdl_reader_init(&r, fd, NULL, 128, 1 << 16)) < 0)
    tdl_writer_destroy(&w);
  if (e < 0) {
    tdl_close(fd);
    return e;
  }
  char line[128];
  for (int i = 0; i < NLINES && e == 0; i++) {
    line_of(line, sizeof line, i);
    e = tdl_writer_puts(&w, line);
  }
  if (e == 0)
    e = tdl_writer_flush(&w, tdl_after(IO_DEADLINE));
  if (e == 0)
    e = shutdown(fd, SHUT_WR) < 0 ? -errno : 0;
  for (int i = 0; i < NLINES && e == 0; i++) {
    ssize_t n = tdl_reader_until(&r, "\n", 1, tdl_after(IO_DEADLINE));
    if (n <= 0) {
      e = n == 0 ? -ECONNRESET : (int)n; /* the server went away */
      break;
    }
    line_of(line, sizeof line, i);
    assert_int_equal((size_t)n, strlen(line));
    assert_memory_equal(tdl_reader_data(&r), line, (size_t)n);
    tdl_reader_consume(&r, (size_t)n);
  }
  if (e == 0)
    assert_int_equal(tdl_reader_until(&r, "\n", 1, tdl_after(IO_DEADLINE)), 0); /* EOF after the last */
  tdl_reader_destroy(&r);
  tdl_writer_destroy(&w);
  tdl_close(fd);
  return e;
}

static void *n_root(void *arg)
{
  nctx *c = arg;
  int e = tdl_fiber_spawn(&c->server, tdl_fiber_loop(), n_server, c, NULL);
  if (e < 0) {
    note(e);
    return NULL;
  }
  note(n_client_talk(c));
  /* a server still in accept (the client never got through) stops now */
  tdl_fiber_cancel(tdl_fiber_loop(), c->server);
  assert_int_equal(tdl_fiber_join(c->server, NULL, TDL_FOREVER), 0);
  return NULL;
}

static int sc_net(void)
{
  nctx c = {.lfd = -1};
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0)
    return e;
  if ((c.lfd = tdl_net_listen_str("127.0.0.1:0", 16, 0)) < 0) {
    e = c.lfd;
  } else {
    assert_int_equal(tdl_net_local_addr(c.lfd, &c.addr), 0);
    tdl_fiber_t f;
    if ((e = tdl_fiber_spawn(&f, loop, n_root, &c, NULL)) == 0) {
      assert_int_equal(tdl_fiber_detach(loop, f), 0);
      assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
      e = first_err;
    }
    if (c.lfd >= 0)
      tdl_close(c.lfd);
  }
  still_usable_then_free(loop);
  return e;
}

static void test_net_faults(void **state)
{
  (void)state;
  /* -ECONNRESET, -EPIPE, -ENOTCONN (from shutdown): the server's side
   * failed and closed, or accept shed the connection when it could not take
   * an fd (net.h's EMFILE policy). */
  walk("net listen/accept/connect", sc_net, (const int[]){-ENOMEM, -EMFILE, -ECONNRESET, -EPIPE, -ENOTCONN, 0});
}

/* ==== 5. examples/httpd serving one request ==== */

typedef struct hctx {
  httpd_server s;
  tdl_fiber_t server, client;
  int run_result;
  bool got;
} hctx;

static void *h_server(void *arg)
{
  hctx *c = arg;
  c->run_result = httpd_run(&c->s);
  note(c->run_result);
  tdl_fiber_cancel(tdl_fiber_loop(), c->client); /* it has nobody to talk to */
  return NULL;
}

static void *h_client(void *arg)
{
  hctx *c = arg;
  char text[32], buf[1024];
  snprintf(text, sizeof text, "127.0.0.1:%d", c->s.port);
  int fd = tdl_dns_dial(text, tdl_after(IO_DEADLINE));
  if (fd < 0) {
    note(fd);
    return NULL;
  }
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  int e = tdl_net_send_all(fd, req, sizeof req - 1, NULL, tdl_after(IO_DEADLINE));
  size_t len = 0;
  while (e == 0 && len < sizeof buf - 1) {
    ssize_t n = tdl_recv(fd, buf + len, sizeof buf - 1 - len, 0, tdl_after(IO_DEADLINE));
    if (n <= 0) {
      e = (int)n;
      break;
    }
    len += (size_t)n;
  }
  buf[len] = '\0';
  if (e == 0 && len == 0) { /* closed unanswered: accept shed it, or the server failed */
    e = -ECONNRESET;
  } else if (e == 0) { /* the server closed after a whole response */
    if (strncmp(buf, "HTTP/1.1 200 ", 13) == 0 && strstr(buf, "\r\n\r\nHello, World!"))
      c->got = true;
    else if (strncmp(buf, "HTTP/1.1 5", 10) == 0) /* it said it could not */
      e = -ENOMEM;
    else
      fail_msg("httpd answered: %s", buf);
  }
  if (e == 0 && !c->got)
    e = -ECONNRESET;
  if (e != -ECANCELED)
    note(e == 0 && !c->got ? -ECONNRESET : e);
  tdl_close(fd);
  return NULL;
}

static void *h_root(void *arg)
{
  hctx *c = arg;
  tdl_loop *loop = tdl_fiber_loop();
  int e = tdl_fiber_spawn(&c->server, loop, h_server, c, NULL);
  if (e < 0) {
    note(e);
    return NULL;
  }
  if ((e = tdl_fiber_spawn(&c->client, loop, h_client, c, NULL)) < 0)
    note(e);
  else
    assert_int_equal(tdl_fiber_join(c->client, NULL, TDL_FOREVER), 0);
  httpd_shutdown(&c->s);
  if (c->s.loop == NULL) /* httpd_run has not run yet: it must see the shutdown */
    c->s.stopping = true;
  assert_int_equal(tdl_fiber_join(c->server, NULL, TDL_FOREVER), 0);
  return NULL;
}

static int sc_httpd(void)
{
  hctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0) {
    free(c);
    return e;
  }
  httpd_config cfg = httpd_defaults();
  cfg.listen = "127.0.0.1:0";
  cfg.handle_signals = false;
  if ((e = httpd_init(&c->s, &cfg)) == 0) {
    tdl_fiber_t f;
    if ((e = tdl_fiber_spawn(&f, loop, h_root, c, NULL)) == 0) {
      assert_int_equal(tdl_fiber_detach(loop, f), 0);
      assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
      e = first_err;
      assert_int_equal(c->s.nconns, 0);
      if (e == 0)
        assert_true(c->got);
    }
    httpd_destroy(&c->s);
  }
  still_usable_then_free(loop);
  free(c);
  return e;
}

static void test_httpd_faults(void **state)
{
  (void)state;
  walk("httpd serving a request", sc_httpd, (const int[]){-ENOMEM, -EMFILE, -ECONNRESET, -EPIPE, 0});
}

/* ==== 6. a group of two loops, calls and a channel across them, the pool,
 * the watchdog ==== */

typedef struct gctx {
  tdl_chan *x; /* shared: the group's loop 1 sends, the main loop receives */
  tdl_group *g;
} gctx;

static void *g_member(void *arg)
{
  gctx *c = arg;
  if (tdl_group_index() != 1)
    return NULL;
  for (long v = 1; v <= 3; v++)
    if (tdl_chan_send(c->x, &v, TDL_FOREVER) < 0)
      break; /* closed: the main side gave up */
  return NULL;
}

static void *g_double(tdl_loop *loop, void *arg)
{
  (void)loop;
  return (void *)((uintptr_t)arg * 2);
}

static void *g_sum(void *arg)
{
  long n = (long)(uintptr_t)arg, s = 0;
  for (long i = 1; i <= n; i++)
    s += i;
  return (void *)(uintptr_t)s;
}

static void *g_spawned(void *arg)
{
  *(int *)arg = 1;
  return NULL;
}

static void *g_root(void *arg)
{
  gctx *c = arg;
  long sum = 0, v;
  int e;
  for (int i = 0; i < 3;) {
    e = tdl_chan_recv(c->x, &v, tdl_after(50 * TDL_MSEC));
    if (e == -ETIMEDOUT) {
      /* Is loop 1 still there?  When a loop cannot start its main fiber,
       * the group stops, and a call to it fails with -ESHUTDOWN. */
      void *r;
      if ((e = tdl_port_call(tdl_group_port(c->g, 1), g_double, (void *)1, &r, tdl_after(IO_DEADLINE))) < 0)
        break;
      continue;
    }
    if (e < 0)
      break;
    sum += v;
    i++;
  }
  if (e == 0)
    assert_int_equal(sum, 6);
  note(e);
  tdl_chan_close(c->x); /* a member still sending stops */
  void *r;
  if ((e = tdl_port_call(tdl_group_port(c->g, 0), g_double, (void *)21, &r, tdl_after(IO_DEADLINE))) == 0)
    assert_int_equal((uintptr_t)r, 42);
  note(e);
  static int spawned;
  spawned = 0;
  e = tdl_port_spawn(tdl_group_port(c->g, 1), g_spawned, &spawned, NULL, tdl_after(IO_DEADLINE));
  note(e);
  if ((e = tdl_pool_call(TDL_LANE_USER, g_sum, (void *)100, NULL, &r, tdl_after(IO_DEADLINE))) == 0)
    assert_int_equal((uintptr_t)r, 5050);
  note(e);
  return NULL;
}

static int sc_group(void)
{
  gctx c = {0};
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0)
    return e;
  if ((e = tdl_watchdog_start(loop, NULL)) < 0)
    note(e);
  if ((e = tdl_chan_new_shared(&c.x, sizeof(long), 1)) < 0)
    note(e);
  else if ((e = tdl_group_new(&c.g, &(tdl_group_options){.loops = 2, .main = g_member, .arg = &c})) < 0)
    note(e);
  if (e == 0) {
    tdl_fiber_t f;
    if ((e = tdl_fiber_spawn(&f, loop, g_root, &c, NULL)) < 0) {
      note(e);
    } else {
      assert_int_equal(tdl_fiber_detach(loop, f), 0);
      assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    }
    tdl_group_stop(c.g);
    note(tdl_group_wait(c.g, TDL_FOREVER)); /* a loop's error: its main could not start */
    assert_int_equal(tdl_group_free(c.g), 0);
  }
  if (c.x)
    assert_int_equal(tdl_chan_free(c.x), 0);
  still_usable_then_free(loop);
  return first_err;
}

static void test_group_faults(void **state)
{
  (void)state;
  /* pool threads that idle for 1 ms exit, so that the walk meets their
   * creation again */
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.idle_exit = TDL_MSEC}), 0);
  walk("group, pool and watchdog", sc_group, (const int[]){-ENOMEM, -EMFILE, -EAGAIN, -ESHUTDOWN, 0});
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){0}), 0);
}

/* ==== 7. an acceptor handing connections out to a group's two loops ==== */

#define NCONNS 4

typedef struct actx {
  tdl_acceptor *a;
  tdl_group *g;
  _Atomic bool slot0_done;
} actx;

static void a_handler(int fd, void *arg)
{
  (void)arg;
  char b;
  ssize_t n = tdl_recv(fd, &b, 1, 0, tdl_after(IO_DEADLINE));
  if (n == 1)
    n = tdl_send(fd, &b, 1, 0, tdl_after(IO_DEADLINE));
  if (n < 0 && n != -ECONNRESET && n != -EPIPE && n != -ECANCELED)
    note((int)n);
  tdl_close(fd);
}

static void *a_member(void *arg)
{
  actx *c = arg;
  int i = tdl_group_index();
  int e = tdl_acceptor_serve(c->a, (unsigned)i);
  if (e != -ECANCELED && e != -ESHUTDOWN)
    note(e);
  if (i == 0)
    atomic_store(&c->slot0_done, true);
  return NULL;
}

/* One byte there and back; -ECONNRESET when the connection is closed
 * unanswered (a handler could not start) or nobody accepts any more. */
static int a_talk(actx *c, const tdl_addr *addr, char byte)
{
  int fd = tdl_net_connect(addr, tdl_after(IO_DEADLINE));
  if (fd < 0)
    return fd;
  ssize_t n = tdl_send(fd, &byte, 1, 0, tdl_after(IO_DEADLINE));
  char b = 0;
  while (n >= 0) {
    n = tdl_recv(fd, &b, 1, 0, tdl_after(50 * TDL_MSEC));
    if (n != -ETIMEDOUT)
      break;
    /* Nobody accepts when slot 0's serve failed, or when its loop is gone
     * (a loop that cannot start its main fiber stops the group). */
    void *r;
    if (atomic_load(&c->slot0_done) ||
        tdl_port_call(tdl_group_port(c->g, 0), g_double, (void *)1, &r, tdl_after(IO_DEADLINE)) < 0) {
      n = -ECONNRESET;
      break;
    }
    n = 0;
  }
  tdl_close(fd);
  if (n == 0)
    return -ECONNRESET;
  if (n < 0)
    return (int)n;
  assert_int_equal(b, byte);
  return 0;
}

typedef struct aclient {
  actx *c;
  tdl_addr addr;
} aclient;

static void *a_client(void *arg)
{
  aclient *ac = arg;
  for (int i = 0; i < NCONNS; i++) {
    int e = a_talk(ac->c, &ac->addr, (char)('a' + i));
    if (e < 0) {
      note(e);
      break;
    }
  }
  return NULL;
}

static int sc_acceptor(void)
{
  actx c = {0};
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0)
    return e;
  e = tdl_acceptor_new(&c.a, &(tdl_acceptor_options){.listen = "127.0.0.1:0", .loops = 2,
                                                      .mode = TDL_ACCEPTOR_DISTRIBUTE, .handler = a_handler,
                                                      .stack_size = TDL_STACK_MIN});
  if (e < 0)
    note(e);
  else if ((e = tdl_group_new(&c.g, &(tdl_group_options){.loops = 2, .main = a_member, .arg = &c})) < 0)
    note(e);
  if (e == 0) {
    aclient ac = {.c = &c};
    tdl_addr at;
    assert_int_equal(tdl_acceptor_local_addr(c.a, &at), 0);
    char text[32];
    snprintf(text, sizeof text, "127.0.0.1:%d", tdl_addr_port(&at));
    assert_int_equal(tdl_addr_parse(&ac.addr, text), 0);
    tdl_fiber_t f;
    if ((e = tdl_fiber_spawn(&f, loop, a_client, &ac, NULL)) < 0) {
      note(e);
    } else {
      assert_int_equal(tdl_fiber_detach(loop, f), 0);
      assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    }
  }
  if (c.a)
    tdl_acceptor_stop(c.a);
  if (c.g) {
    tdl_group_stop(c.g);
    note(tdl_group_wait(c.g, TDL_FOREVER));
    assert_int_equal(tdl_group_free(c.g), 0);
  }
  if (c.a)
    assert_int_equal(tdl_acceptor_free(c.a), 0);
  still_usable_then_free(loop);
  return first_err;
}

static void test_acceptor_faults(void **state)
{
  (void)state;
  /* Under valgrind on the uring back end a group's loop was seen spinning in
   * ur_wait while a call posted to it waited (valgrind does not model
   * io_uring); skipped there until that is understood. */
  const char *be = getenv("TDL_BACKEND");
  if (RUNNING_ON_VALGRIND && be && strcmp(be, "uring") == 0)
    T_SKIP("under valgrind on uring a group's loop was seen spinning (valgrind does not model io_uring)");
  walk("acceptor over a group", sc_acceptor, (const int[]){-ENOMEM, -EMFILE, -EAGAIN, -ECONNRESET, -EPIPE, 0});
}

/* ==== 8. files through the pool's file lane ==== */

static char fs_dir[64];

static void *f_files(void *arg)
{
  (void)arg;
  char path[96], path2[96];
  snprintf(path, sizeof path, "%s/a", fs_dir);
  snprintf(path2, sizeof path2, "%s/b", fs_dir);
  static char out[64 * 1024], in[sizeof out];
  for (size_t i = 0; i < sizeof out; i++)
    out[i] = (char)(i * 7 + 1);
  int fd = tdl_fs_open(path, O_CREAT | O_RDWR | O_TRUNC, 0600, tdl_after(IO_DEADLINE));
  if (fd < 0) {
    note(fd);
    return NULL;
  }
  ssize_t n = tdl_fs_pwrite(fd, out, sizeof out, 0, tdl_after(IO_DEADLINE));
  int e = n < 0 ? (int)n : 0;
  if (e == 0) {
    assert_int_equal(n, sizeof out);
    e = tdl_fs_fsync(fd, tdl_after(IO_DEADLINE));
  }
  if (e == 0) {
    n = tdl_fs_pread(fd, in, sizeof in, 0, tdl_after(IO_DEADLINE));
    if (n < 0)
      e = (int)n;
    else
      assert_memory_equal(in, out, sizeof in);
  }
  note(e);
  bool written = e == 0;
  assert_int_equal(tdl_close(fd), 0);
  struct stat st;
  if ((e = tdl_fs_rename(path, path2, tdl_after(IO_DEADLINE))) == 0 &&
      (e = tdl_fs_stat(path2, &st, tdl_after(IO_DEADLINE))) == 0 && written)
    assert_int_equal(st.st_size, sizeof out);
  note(e);
  unlink(path);
  unlink(path2);
  return NULL;
}

static int sc_files(void)
{
  tdl_loop *loop;
  int e = tdl_loop_new(&loop, NULL);
  if (e < 0)
    return e;
  tdl_fiber_t f;
  if ((e = tdl_fiber_spawn(&f, loop, f_files, NULL, NULL)) == 0) {
    assert_int_equal(tdl_fiber_detach(loop, f), 0);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    e = first_err;
  }
  still_usable_then_free(loop);
  return e;
}

static void test_files_faults(void **state)
{
  (void)state;
  snprintf(fs_dir, sizeof fs_dir, "/tmp/treadle-faults-XXXXXX");
  assert_non_null(mkdtemp(fs_dir));
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){.idle_exit = TDL_MSEC}), 0);
  walk("files on the pool", sc_files, (const int[]){-ENOMEM, -EMFILE, -EAGAIN, 0});
  assert_int_equal(tdl_pool_configure(&(tdl_pool_options){0}), 0);
  assert_int_equal(rmdir(fs_dir), 0);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  /* tdl_net_accept's reserve fd is the process's for good: open it before
   * counting fds. */
  assert_int_equal(tdl_net_accept_reserve(true), 0);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_loop_faults),
    cmocka_unit_test(test_fiber_faults),
    cmocka_unit_test(test_spawn_faults),
    cmocka_unit_test(test_net_faults),
    cmocka_unit_test(test_httpd_faults),
    cmocka_unit_test(test_group_faults),
    cmocka_unit_test(test_acceptor_faults),
    cmocka_unit_test(test_files_faults),
  };
  if (getenv("TDL_FAULTS_ONLY")) /* e.g. "test_net_faults" */
    cmocka_set_test_filter(getenv("TDL_FAULTS_ONLY"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
