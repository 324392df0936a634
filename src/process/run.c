/* SPDX-License-Identifier: MIT */
/*
 * tdl_process_run: spawn, feed stdin, drain stdout and stderr together, and
 * enforce the deadline, with the loop's own machinery: I/O watchers on the
 * pipes and the pidfd, a timer for the deadline and the kill grace, and,
 * without a pidfd, a timer that looks at waitpid with a back-off.
 *
 * One implementation, two places to run it: in a fiber the watchers go on
 * the fiber's loop and only the fiber parks (the callbacks unpark it when the
 * run is over), so the loop's other fibers and callbacks run meanwhile;
 * outside a fiber they go on a private loop that the call runs itself.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys.h"
#include "process/process_internal.h"

#define DEFAULT_GRACE TDL_SEC
#define SCRATCH_SIZE (64 * 1024)
#define MIN_GROW (16 * 1024)
/* System calls per stream per wakeup: a child that writes (or reads) without
 * pause must not starve the other streams, the deadline, the exit check or
 * the loop's other fibers. */
#define IO_PER_WAKE 16
/* Reads of what is left in a pipe once the child has exited: bounded, since a
 * grandchild may go on writing into it. */
#define READS_AFTER_EXIT 256

typedef struct capture {
  tdl_io w;
  int fd;
  char *buf;
  size_t len, cap; /* buf holds cap + 1 bytes */
  bool on;         /* this stream is captured */
  bool truncated;
} capture;

enum phase { RUNNING, TERM_SENT, KILL_SENT };

typedef struct run {
  tdl_process p;
  tdl_loop *loop;
  tdl_fiber_t fiber; /* the caller, parked until done; 0 on a private loop */
  capture out, err;
  tdl_io in_w, exit_w; /* stdin; the pidfd */
  tdl_timer clock;     /* the deadline, then the end of the kill grace */
  tdl_timer poll;      /* no pidfd: the next look at waitpid */
  tdl__backoff backoff;
  const char *input;
  size_t input_len, in_written;
  size_t limit;
  char *scratch;
  tdl_time_t deadline, grace;
  enum phase phase;
  bool group; /* signal the child's process group too */
  bool kill_on_limit, timed_out, limit_killed, done;
  int error; /* once done: 0 (the child was reaped) or why not */
} run;

/* ---- ending ---------------------------------------------------------------- */

static void stop_all(run *x)
{
  tdl_io_stop(x->loop, &x->in_w);
  tdl_io_stop(x->loop, &x->out.w);
  tdl_io_stop(x->loop, &x->err.w);
  tdl_io_stop(x->loop, &x->exit_w);
  tdl_timer_stop(x->loop, &x->clock);
  tdl_timer_stop(x->loop, &x->poll);
}

/* The run is over: nothing is watched any more, which also lets a private
 * loop's run return. */
static void finish(run *x, int error)
{
  x->done = true;
  x->error = error;
  stop_all(x);
  if (x->fiber)
    tdl_fiber_unpark(x->loop, x->fiber);
}

static void signal_child(run *x, int sig)
{
  if (x->p.tdl__state != TDL__PROC_RUNNING)
    return;
  tdl_process_kill(&x->p, sig);
  /* The group's id is the unreaped child's pid: it cannot have been reused. */
  if (x->group)
    kill(-x->p.pid, sig);
}

/* ---- stdout and stderr ----------------------------------------------------- */

static int grow(capture *c, size_t limit)
{
  size_t want = c->len + (c->len < MIN_GROW ? MIN_GROW : c->len);
  if (want < c->len || want > limit)
    want = limit;
  if (want == SIZE_MAX)
    want--;
  char *b = TDL__FAULT_ALLOC(realloc(c->buf, want + 1));
  if (!b)
    return -ENOMEM;
  c->buf = b;
  c->cap = want;
  return 0;
}

/* Where the next read goes: the buffer, grown as needed, until it holds
 * `limit` bytes; then scratch space whose contents are dropped. */
static int room_for(run *x, capture *c, char **dst, size_t *room)
{
  /* The buffers are in c->buf and x->scratch (freed with x): GCC's
   * stale-pointer leak (base.h), here and below. */
  TDL__ANALYZER_IGNORE("-Wanalyzer-malloc-leak")
  if (c->len < x->limit) {
    if (c->len == c->cap && grow(c, x->limit) < 0)
      return -ENOMEM;
    *dst = c->buf + c->len;
    *room = c->cap - c->len;
    return 0;
  }
  if (!x->scratch && !(x->scratch = TDL__FAULT_ALLOC(malloc(SCRATCH_SIZE))))
    return -ENOMEM;
  TDL__ANALYZER_END
  *dst = x->scratch;
  *room = SCRATCH_SIZE;
  return 0;
}

static void end_stream(run *x, capture *c)
{
  tdl_io_stop(x->loop, &c->w);
  tdl__proc_close(&c->fd);
}

/* Read what the pipe has, up to `reads` reads.  Returns 1 when it may hold
 * more, 0 when it is empty or ended (its fd is then closed), or -ENOMEM. */
static int drain(run *x, capture *c, int reads)
{
  while (c->fd >= 0) {
    if (reads-- == 0)
      return 1;
    char *dst;
    size_t room;
    if (room_for(x, c, &dst, &room) < 0)
      return -ENOMEM;
    ssize_t n = tdl__sys_read(c->fd, dst, room);
    if (n > 0) {
      if (dst == x->scratch)
        c->truncated = true;
      else
        c->len += (size_t)n;
    } else if (n < 0 && errno == EAGAIN) {
      return 0;
    } else if (n == 0 || errno != EINTR) {
      end_stream(x, c); /* EOF; any other error ends the stream too */
    }
  }
  return 0;
}

static void check_limit(run *x)
{
  if (!x->kill_on_limit || x->limit_killed || !(x->out.truncated || x->err.truncated))
    return;
  x->limit_killed = true;
  signal_child(x, SIGKILL);
  x->phase = KILL_SENT;
  tdl_timer_stop(x->loop, &x->clock);
}

static void on_output(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)events;
  run *x = w->data;
  int r = drain(x, w == &x->out.w ? &x->out : &x->err, IO_PER_WAKE);
  if (r < 0) {
    finish(x, r);
    return;
  }
  if (r > 0)
    tdl_io_feed(loop, w, TDL_READ); /* the rest on the next iteration */
  check_limit(x);
}

/* ---- stdin ------------------------------------------------------------------- */

/* write(), keeping from the caller the SIGPIPE that writing to a pipe nobody
 * reads raises: SIGPIPE is blocked for this one call, and one it raised is
 * taken back unless the caller already had one pending.  Per call rather
 * than for the whole run: the loop's other fibers share the thread's mask. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t len)
{
  sigset_t just_pipe, old, pending;
  sigemptyset(&just_pipe);
  sigaddset(&just_pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &just_pipe, &old);
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE);
  ssize_t n = tdl__sys_write(fd, buf, len);
  int e = errno;
  if (n < 0 && e == EPIPE && !was_pending) {
    struct timespec zero = {0, 0};
    sigtimedwait(&just_pipe, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = e;
  return n;
}

/* One write of the input.  Returns 1 to go on, 0 when the pipe is full, -1
 * when stdin is done with: all written, or the child stopped reading. */
static int feed_once(run *x)
{
  if (x->in_written == x->input_len)
    return -1;
  ssize_t n = write_nosigpipe(x->p.stdin_fd, x->input + x->in_written, x->input_len - x->in_written);
  if (n >= 0) {
    x->in_written += (size_t)n;
    return 1;
  }
  if (errno == EINTR)
    return 1;
  return errno == EAGAIN ? 0 : -1; /* EPIPE: the child closed its stdin or exited */
}

static void on_stdin(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)events;
  run *x = w->data;
  int r = 1;
  for (int i = 0; i < IO_PER_WAKE && r > 0; i++)
    r = feed_once(x);
  if (r == 0) {
    tdl_io_blocked(loop, w, TDL_WRITE);
  } else if (r < 0) {
    tdl_io_stop(loop, w);
    tdl__proc_close(&x->p.stdin_fd);
  }
  /* r > 0: a started write watcher runs again on the next iteration. */
}

/* ---- the exit and the deadline ------------------------------------------- */

/* Whether the run is over: the child reaped (what it wrote before it exited
 * is in the pipes now, and is read), or lost. */
static bool check_exit(run *x)
{
  int r = tdl__process_reap(&x->p, 0);
  if (r == 0)
    return false;
  if (r > 0 && (r = drain(x, &x->out, READS_AFTER_EXIT)) >= 0)
    r = drain(x, &x->err, READS_AFTER_EXIT);
  finish(x, r < 0 ? r : 0);
  return true;
}

static void on_pidfd(tdl_loop *loop, tdl_io *w, unsigned events)
{
  (void)loop;
  (void)events;
  check_exit(w->data);
}

static void on_poll(tdl_loop *loop, tdl_timer *t)
{
  run *x = t->data;
  if (check_exit(x))
    return;
  int r = tdl_timer_start(loop, t, tdl__backoff_step(&x->backoff), 0);
  if (r < 0)
    finish(x, r);
}

/* The deadline: SIGTERM, and SIGKILL when the grace ends (at once for a
 * negative grace). */
static void on_clock(tdl_loop *loop, tdl_timer *t)
{
  run *x = t->data;
  if (x->phase == RUNNING) {
    x->timed_out = true;
    if (x->grace > 0) {
      signal_child(x, SIGTERM);
      x->phase = TERM_SENT;
      int r = tdl_timer_start(loop, t, x->grace, 0);
      if (r < 0)
        finish(x, r);
      return;
    }
  }
  signal_child(x, SIGKILL);
  x->phase = KILL_SENT;
}

/* ---- the run --------------------------------------------------------------- */

static int setup_stdio(tdl_process_options *so, const void *input)
{
  tdl_stdio *s = so->stdio;
  if (input) {
    if (s[0].mode != TDL_STDIO_DEFAULT)
      return -EINVAL;
    s[0].mode = TDL_STDIO_PIPE;
  } else if (s[0].mode == TDL_STDIO_PIPE) {
    return -EINVAL;
  } else if (s[0].mode == TDL_STDIO_DEFAULT) {
    s[0].mode = TDL_STDIO_NULL;
  }
  for (int i = 1; i < 3; i++) {
    if (s[i].mode == TDL_STDIO_DEFAULT)
      s[i].mode = TDL_STDIO_PIPE;
  }
  return 0;
}

static int setup(run *x, const char *const *argv, const tdl_process_run_options *opts, const void *input,
                 size_t input_len, tdl_process_options *so)
{
  memset(x, 0, sizeof *x);
  x->p.pidfd = x->p.stdin_fd = x->p.stdout_fd = x->p.stderr_fd = -1;
  x->out.fd = x->err.fd = -1;
  x->input = input;
  x->input_len = input ? input_len : 0;
  x->grace = opts && opts->kill_grace ? opts->kill_grace : DEFAULT_GRACE;
  x->kill_on_limit = opts && (opts->flags & TDL_PROCESS_RUN_KILL_ON_LIMIT);
  x->backoff = tdl__proc_backoff();
  tdl_timer_init(&x->clock, on_clock, x);
  tdl_timer_init(&x->poll, on_poll, x);
  *so = opts ? opts->spawn : (tdl_process_options){0};
  so->argv = argv;
  if (opts && (opts->flags & ~TDL_PROCESS_RUN_KILL_ON_LIMIT))
    return -EINVAL;
  int r = setup_stdio(so, input);
  x->out.on = so->stdio[1].mode == TDL_STDIO_PIPE;
  x->err.on = so->stdio[2].mode == TDL_STDIO_PIPE;
  x->group = (so->flags & TDL_PROCESS_SETSID) || ((so->flags & TDL_PROCESS_SETPGID) && so->pgid == 0);
  return r;
}

/* The caller's loop in a fiber, else one of our own. */
static int use_loop(run *x)
{
  x->fiber = tdl_fiber_self();
  if (x->fiber) {
    x->loop = tdl_fiber_loop();
    return 0;
  }
  return tdl_loop_new(&x->loop, NULL);
}

/* Take the spawned child's pipe ends and point a watcher at each fd. */
static void adopt(run *x)
{
  x->out.fd = x->p.stdout_fd;
  x->err.fd = x->p.stderr_fd;
  x->p.stdout_fd = x->p.stderr_fd = -1; /* ours to close now */
  if (x->input_len == 0)
    tdl__proc_close(&x->p.stdin_fd); /* EOF at once */
  tdl_io_init(&x->in_w, x->p.stdin_fd, on_stdin, x);
  tdl_io_init(&x->out.w, x->out.fd, on_output, x);
  tdl_io_init(&x->err.w, x->err.fd, on_output, x);
  tdl_io_init(&x->exit_w, x->p.pidfd, on_pidfd, x);
}

static int start_reading(tdl_loop *loop, tdl_io *w)
{
  if (w->fd < 0)
    return 0;
  int r = tdl_io_start(loop, w, TDL_READ);
  if (r == 0)
    tdl_io_feed(loop, w, TDL_READ); /* what arrived before the watcher did */
  return r;
}

static int watch(run *x)
{
  int r = 0;
  if (x->p.stdin_fd >= 0)
    r = tdl_io_start(x->loop, &x->in_w, TDL_WRITE);
  if (r == 0)
    r = start_reading(x->loop, &x->out.w);
  if (r == 0)
    r = start_reading(x->loop, &x->err.w);
  if (r == 0 && x->p.pidfd >= 0)
    r = start_reading(x->loop, &x->exit_w);
  else if (r == 0)
    r = tdl_timer_start(x->loop, &x->poll, tdl__backoff_step(&x->backoff), 0);
  if (r == 0 && x->deadline != TDL_FOREVER)
    r = tdl_timer_start_at(x->loop, &x->clock, x->deadline, 0);
  return r;
}

/* Until the callbacks say the run is over: the fiber parks, or the thread
 * runs the private loop.  Returns x->error, or why the wait ended early
 * (-ECANCELED for a cancelled fiber). */
static int wait_done(run *x)
{
  while (!x->done) {
    int r = x->fiber ? tdl_fiber_park(TDL_FOREVER) : tdl_loop_run(x->loop, TDL_LOOP_ONCE);
    if (r < 0)
      return r;
  }
  return x->error;
}

static int finish_capture(capture *c, char **out, size_t *out_len, bool *truncated)
{
  if (!c->on)
    return 0;
  if (!c->buf && !(c->buf = TDL__FAULT_ALLOC(malloc(1))))
    return -ENOMEM;
  c->buf[c->len] = '\0';
  *out = c->buf;
  *out_len = c->len;
  *truncated = c->truncated;
  c->buf = NULL;
  return 0;
}

static int report(run *x, tdl_process_run_result *result)
{
  result->status = x->p.tdl__status;
  result->timed_out = x->timed_out;
  result->limit_killed = x->limit_killed;
  result->in_written = x->in_written;
  int r = finish_capture(&x->out, &result->out, &result->out_len, &result->out_truncated);
  if (r == 0)
    r = finish_capture(&x->err, &result->err, &result->err_len, &result->err_truncated);
  if (r == 0 && x->timed_out)
    r = -ETIMEDOUT;
  return r;
}

/* Everything back, whenever the run ended: no watcher, fd, child or loop is
 * left.  A child still running (an error, a cancel) is killed with SIGKILL,
 * its group too, and reaped. */
static void release(run *x)
{
  if (x->loop)
    stop_all(x);
  if (x->p.tdl__state == TDL__PROC_RUNNING && tdl__process_reap(&x->p, 0) == 0)
    signal_child(x, SIGKILL);
  tdl_process_destroy(&x->p); /* reaps; closes the pidfd and stdin */
  tdl__proc_close(&x->out.fd);
  tdl__proc_close(&x->err.fd);
  free(x->out.buf);
  free(x->err.buf);
  free(x->scratch);
  if (x->loop && !x->fiber)
    tdl_loop_free(x->loop);
}

TDL_API int tdl_process_run(tdl_process_run_result *result, const char *const *argv, const tdl_process_run_options *opts,
                            const void *input, size_t input_len, size_t limit, tdl_time_t deadline)
{
  if (!result)
    return -EINVAL;
  memset(result, 0, sizeof *result);
  if (!argv)
    return -EINVAL;
  run x;
  tdl_process_options so;
  int r = setup(&x, argv, opts, input, input_len, &so);
  if (r < 0)
    return r;
  if (tdl_fiber_cancelled())
    return -ECANCELED;
  x.limit = limit;
  x.deadline = deadline;
  if ((r = use_loop(&x)) == 0 && (r = tdl_process_spawn(&x.p, &so)) == 0) {
    adopt(&x);
    if ((r = watch(&x)) == 0 && (r = wait_done(&x)) == 0)
      r = report(&x, result);
  }
  if (r < 0 && r != -ETIMEDOUT)
    tdl_process_run_result_destroy(result);
  release(&x);
  return r;
}

TDL_API void tdl_process_run_result_destroy(tdl_process_run_result *result)
{
  if (!result)
    return;
  free(result->out);
  free(result->err);
  memset(result, 0, sizeof *result);
}
