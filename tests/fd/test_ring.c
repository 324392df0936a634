/* SPDX-License-Identifier: MIT */
/*
 * Fiber I/O on the uring back end (src/fd/ring.c, src/loop/backend/uring.c):
 * operations in flight when their fd is closed, their fiber cancelled, their
 * deadline passed or their loop freed; a full submission queue; a completion
 * queue that overflows; tens of thousands of operations in flight at once;
 * and the choice of back end where io_uring is refused (a seccomp filter).
 * Every test makes its own uring loop and is skipped where the kernel (or
 * the build) has no io_uring.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deny_uring.h"
#include "loop/loop_internal.h" /* tdl__ring_debug_drop */
#include "helpers.h"

/* ---- an fd closed by another fiber while a read on it is in flight ---- */

typedef struct closing {
  int p[2];
  ssize_t got;
  char buf[16]; /* the reader's buffer: here, not on its stack, so a late write would show */
  int done;
} closing;

static void *read_into(void *arg)
{
  closing *c = arg;
  c->got = tdl_read(c->p[0], c->buf, sizeof c->buf, TDL_FOREVER);
  c->done = 1;
  return NULL;
}

static void *close_it(void *arg)
{
  closing *c = arg;
  tdl_fiber_yield(); /* the reader's read is queued */
  tdl_fiber_yield();
  assert_int_equal(tdl_close(c->p[0]), 0);
  return NULL;
}

static void close_during_read(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  closing c = {.got = 1};
  t_pipe(c.p);
  int fds = t_count_fds();
  t_spawn(loop, read_into, &c);
  t_spawn(loop, close_it, &c);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_true(c.done);
  assert_int_equal(c.got, -EBADF);
  /* The read is over in the kernel too: the write end sees no reader, and
   * the read end's file is gone (the operation held it open until then). */
  assert_int_equal(write(c.p[1], "x", 1), -1);
  assert_int_equal(errno, EPIPE);
  assert_int_equal(t_count_fds(), fds - 1);
  assert_int_equal(tdl_loop_free(loop), 0);
  close(c.p[1]);
}

/* ---- a fiber cancelled, or timed out, mid-operation ---- */

typedef struct midop {
  int p[2];
  ssize_t got;
  tdl_time_t deadline;
  int done;
} midop;

static void *read_on_stack(void *arg)
{
  midop *m = arg;
  char buf[64]; /* the kernel writes here only while the call is in flight */
  m->got = tdl_read(m->p[0], buf, sizeof buf, m->deadline);
  m->done = 1;
  return NULL;
}

static void cancelled_mid_read(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  midop m = {.deadline = TDL_FOREVER};
  t_pipe(m.p);
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, loop, read_on_stack, &m, NULL), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1); /* the read is in flight */
  assert_int_equal(tdl_loop_free(loop), -EBUSY); /* refused while it is */
  assert_int_equal(tdl_fiber_cancel(loop, h), 0);
  while (!m.done)
    assert_true(tdl_loop_run(loop, TDL_LOOP_ONCE) >= 0);
  assert_int_equal(m.got, -ECANCELED);
  /* The kernel no longer reads: the byte is there for the next reader. */
  assert_int_equal(write(m.p[1], "y", 1), 1);
  char c;
  assert_int_equal(read(m.p[0], &c, 1), 1);
  assert_int_equal(c, 'y');
  assert_int_equal(tdl_fiber_detach(loop, h), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(loop), 0);
  tdl_close(m.p[0]);
  tdl_close(m.p[1]);
}

static void deadline_mid_read(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  midop m = {.deadline = tdl_after(20 * TDL_MSEC)};
  t_pipe(m.p);
  t_spawn(loop, read_on_stack, &m);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(m.got, -ETIMEDOUT);
  assert_int_equal(write(m.p[1], "z", 1), 1);
  char c;
  assert_int_equal(read(m.p[0], &c, 1), 1); /* not taken by the timed-out read */
  assert_int_equal(tdl_loop_free(loop), 0);
  tdl_close(m.p[0]);
  tdl_close(m.p[1]);
}

/* A deadline already past still lets a read that need not wait succeed. */
static void *past_deadline_reader(void *arg)
{
  midop *m = arg;
  char buf[4];
  assert_int_equal(write(m->p[1], "ab", 2), 2);
  m->got = tdl_read(m->p[0], buf, sizeof buf, 1);
  assert_int_equal(m->got, 2);
  m->got = tdl_read(m->p[0], buf, sizeof buf, 1); /* nothing there, and no time */
  m->done = 1;
  return NULL;
}

static void past_deadline(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  midop m = {0};
  t_pipe(m.p);
  t_spawn(loop, past_deadline_reader, &m);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(m.got, -ETIMEDOUT);
  assert_int_equal(tdl_loop_free(loop), 0);
  tdl_close(m.p[0]);
  tdl_close(m.p[1]);
}

/* ---- many operations at once: a full submission queue, an overflowing
 * completion queue ---- */

typedef struct crowd {
  int n;
  int (*p)[2];
  int parked, done, bad;
} crowd;

typedef struct member {
  crowd *c;
  int i;
} member;

static void *crowd_reader(void *arg)
{
  member *m = arg;
  crowd *c = m->c;
  char b = 0;
  c->parked++;
  ssize_t r = tdl_read(c->p[m->i][0], &b, 1, tdl_after(60 * TDL_SEC));
  if (r != 1 || b != (char)('a' + m->i % 26))
    c->bad++;
  c->done++;
  return NULL;
}

static void *crowd_writer(void *arg)
{
  crowd *c = arg;
  while (c->parked < c->n)
    tdl_fiber_yield();
  tdl_fiber_yield(); /* the last reads are queued for the ring */
  tdl_fiber_yield();
  /* Plain writes, no yield between them: every read completes in the same
   * iteration, far more completions than the queue holds. */
  for (int i = 0; i < c->n; i++) {
    char b = (char)('a' + i % 26);
    assert_int_equal(write(c->p[i][1], &b, 1), 1);
  }
  return NULL;
}

static void crowd_run(int n)
{
  T_RING_LOOP(loop);
  crowd c = {.n = n, .p = calloc((size_t)n, sizeof *c.p)};
  member *m = calloc((size_t)n, sizeof *m);
  assert_non_null(c.p);
  assert_non_null(m);
  for (int i = 0; i < n; i++) {
    t_pipe(c.p[i]);
    m[i] = (member){&c, i};
    t_spawn(loop, crowd_reader, &m[i]);
  }
  t_spawn(loop, crowd_writer, &c);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(c.done, n);
  assert_int_equal(c.bad, 0);
  assert_int_equal(tdl_loop_free(loop), 0);
  for (int i = 0; i < n; i++) {
    tdl_close(c.p[i][0]);
    tdl_close(c.p[i][1]);
  }
  free(c.p);
  free(m);
}

/* 3,000 reads queued in one iteration (the submission queue holds 256, so
 * it is flushed a dozen times) and completing in one (the completion queue
 * holds 2,048: the rest overflow and must be flushed in, none lost). */
static void full_queues(void **state)
{
  (void)state;
  crowd_run(RUNNING_ON_VALGRIND ? 600 : 3000);
}

/* ---- 100,000 fibers, with every fd this process may have busy in an
 * operation (one reader per fd: the hard limit caps operations in flight
 * near 20,000 here) ---- */

typedef struct many {
  int npairs;
  int (*sv)[2];
  int reads_parked, sleepers, finished, bad;
  int nsleep;
  tdl_fiber_t *sleeper;
} many;

typedef struct many_member {
  many *m;
  int fd;
} many_member;

static void *many_reader(void *arg)
{
  many_member *mm = arg;
  char b;
  mm->m->reads_parked++;
  if (tdl_read(mm->fd, &b, 1, TDL_FOREVER) != 0) /* until the peer shuts down */
    mm->m->bad++;
  mm->m->finished++;
  return NULL;
}

static void *many_sleeper(void *arg)
{
  many *m = arg;
  m->sleepers++;
  tdl_sleep(tdl_after(60 * TDL_SEC)); /* cancelled */
  m->finished++;
  return NULL;
}

static void *many_driver(void *arg)
{
  many *m = arg;
  while (m->reads_parked < 2 * m->npairs)
    tdl_fiber_yield();
  tdl_fiber_yield();
  /* Every read is in flight now: end them by shutting the sockets down. */
  for (int i = 0; i < m->npairs; i++) {
    shutdown(m->sv[i][0], SHUT_WR);
    shutdown(m->sv[i][1], SHUT_WR);
  }
  while (m->finished < 2 * m->npairs)
    tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(m->sleepers, m->nsleep);
  for (int i = 0; i < m->nsleep; i++)
    assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), m->sleeper[i]), 0);
  return NULL;
}

static void a_hundred_thousand_fibers(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  long room = (long)rl.rlim_cur - t_count_fds() - 64;
  int fibers = RUNNING_ON_VALGRIND ? 5000 : 100000;
  int npairs = (int)(room / 2 > fibers / 4 ? fibers / 4 : room / 2);
  if (RUNNING_ON_VALGRIND && npairs > 500)
    npairs = 500;
  many m = {.npairs = npairs, .sv = calloc((size_t)npairs, sizeof *m.sv)};
  many_member *mm = calloc((size_t)npairs * 2, sizeof *mm);
  assert_non_null(m.sv);
  assert_non_null(mm);
  for (int i = 0; i < npairs; i++) {
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, m.sv[i]), 0);
    for (int k = 0; k < 2; k++) {
      mm[2 * i + k] = (many_member){&m, m.sv[i][k]};
      t_spawn(loop, many_reader, &mm[2 * i + k]);
    }
  }
  m.nsleep = fibers - 2 * npairs - 1;
  m.sleeper = calloc((size_t)m.nsleep, sizeof *m.sleeper);
  assert_non_null(m.sleeper);
  for (int i = 0; i < m.nsleep; i++) {
    assert_int_equal(tdl_fiber_spawn(&m.sleeper[i], loop, many_sleeper, &m, NULL), 0);
    assert_int_equal(tdl_fiber_detach(loop, m.sleeper[i]), 0);
  }
  t_spawn(loop, many_driver, &m);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(m.bad, 0);
  assert_int_equal(m.finished, 2 * npairs + m.nsleep);
  assert_int_equal(tdl_loop_free(loop), 0);
  for (int i = 0; i < npairs; i++) {
    tdl_close(m.sv[i][0]);
    tdl_close(m.sv[i][1]);
  }
  free(m.sleeper);
  free(mm);
  free(m.sv);
}

/* ---- tdl_op: reads and writes the kernel completes, for callbacks ---- */

typedef struct opctx {
  int p[2];
  char in[8];
  int calls;
  ssize_t last;
  int resubmit; /* reads to submit again from the callback */
} opctx;

static void on_read(tdl_loop *loop, tdl_op *op, ssize_t r)
{
  opctx *c = op->data;
  c->calls++;
  c->last = r;
  assert_false(tdl_op_active(op)); /* its callback is running: it may go again */
  if (c->resubmit > 0 && r > 0) {
    c->resubmit--;
    assert_int_equal(tdl_op_read(loop, op, c->p[0], c->in, sizeof c->in, on_read), 0);
  }
}

static void on_write(tdl_loop *loop, tdl_op *op, ssize_t r)
{
  (void)loop;
  opctx *c = op->data;
  c->calls++;
  c->last = r;
}

static void ops_read_and_write(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  opctx c = {.resubmit = 1};
  t_pipe(c.p);
  tdl_op rd, wr;
  tdl_op_init(&rd, &c);
  tdl_op_init(&wr, &c);
  /* A read queued before the data: the kernel waits for it. */
  assert_int_equal(tdl_op_read(loop, &rd, c.p[0], c.in, sizeof c.in, on_read), 0);
  assert_true(tdl_op_active(&rd));
  assert_int_equal(tdl_op_read(loop, &rd, c.p[0], c.in, sizeof c.in, on_read), -EBUSY);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_NOWAIT), 1); /* in flight: the loop stays alive */
  assert_int_equal(c.calls, 0);
  assert_int_equal(tdl_loop_free(loop), -EBUSY);
  assert_int_equal(tdl_op_write(loop, &wr, c.p[1], "hello", 5, on_write), 0);
  while (c.calls < 2)
    assert_true(tdl_loop_run(loop, TDL_LOOP_ONCE) >= 0);
  assert_memory_equal(c.in, "hello", 5);
  /* The read was submitted again from its callback; end it with a cancel. */
  assert_true(tdl_op_active(&rd));
  assert_int_equal(tdl_op_cancel(loop, &rd), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(c.calls, 3);
  assert_int_equal(c.last, -ECANCELED);
  assert_int_equal(tdl_op_cancel(loop, &rd), -ENOENT); /* not in flight */
  /* Errors come as results: a bad fd. */
  assert_int_equal(tdl_op_read(loop, &rd, 12345, c.in, 1, on_read), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(c.last, -EBADF);
  /* Misuse is refused, and nothing is submitted. */
  assert_int_equal(tdl_op_read(loop, &rd, c.p[0], c.in, 1, NULL), -EINVAL);
  assert_int_equal(tdl_op_write(loop, NULL, c.p[1], "x", 1, on_write), -EINVAL);
  assert_int_equal(tdl_loop_free(loop), 0);
  close(c.p[0]);
  close(c.p[1]);
}

static void ops_need_uring(void **state)
{
  (void)state;
  tdl_loop_options o = {.backend = TDL_BACKEND_EPOLL};
  tdl_loop *loop;
  assert_int_equal(tdl_loop_new(&loop, &o), 0);
  tdl_op op;
  tdl_op_init(&op, NULL);
  char b;
  assert_int_equal(tdl_op_read(loop, &op, 0, &b, 1, on_read), -ENOTSUP);
  assert_false(tdl_op_active(&op));
  assert_int_equal(tdl_op_cancel(loop, &op), -ENOENT);
  assert_int_equal(tdl_loop_free(loop), 0);
}

/* ---- the ring outlives its loop ---- */

/* Freeing a uring loop leaves the thread's next blocking call alone: a
 * ring torn down makes the kernel interrupt it with EINTR, so the thread
 * keeps the ring for its next uring loop. */
static void free_then_block(void **state)
{
  (void)state;
  for (int round = 0; round < 3; round++) {
    T_RING_LOOP(loop);
    assert_int_equal(tdl_loop_free(loop), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct timeval tv = {0, 20000};
    assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    char b;
    errno = 0;
    assert_int_equal(read(sv[0], &b, 1), -1);
    assert_int_equal(errno, EAGAIN);
    close(sv[0]);
    close(sv[1]);
  }
}

/* A child forked while its parent's thread keeps a spare ring makes its
 * own: the inherited one is the parent's memory. */
static void *pipe_echo(void *arg)
{
  int *p = arg;
  char b = 0;
  if (tdl_write(p[1], "k", 1, tdl_after(TDL_SEC)) != 1 || tdl_read(p[0], &b, 1, tdl_after(TDL_SEC)) != 1 || b != 'k')
    _exit(81);
  return NULL;
}

static void fork_with_a_spare_ring(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  assert_int_equal(tdl_loop_free(loop), 0); /* the thread keeps the ring */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    tdl_loop_options o = {.backend = TDL_BACKEND_URING};
    tdl_loop *child;
    int p[2];
    if (tdl_loop_new(&child, &o) != 0 || pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
      _exit(80);
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, child, pipe_echo, p, NULL) != 0 || tdl_fiber_detach(child, h) != 0 ||
        tdl_loop_run(child, TDL_LOOP_DEFAULT) != 0 || tdl_loop_free(child) != 0)
      _exit(82);
    _exit(0);
  }
  /* The parent's next uring loop takes its spare and works. */
  tdl_loop_options o = {.backend = TDL_BACKEND_URING};
  assert_int_equal(tdl_loop_new(&loop, &o), 0);
  int p[2];
  t_pipe(p);
  t_spawn(loop, pipe_echo, p);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(loop), 0);
  tdl_close(p[0]);
  tdl_close(p[1]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- where io_uring is refused ---- */

static void *echo_once(void *arg)
{
  int *p = arg;
  char b;
  if (tdl_write(p[1], "q", 1, tdl_after(TDL_SEC)) != 1 || tdl_read(p[0], &b, 1, tdl_after(TDL_SEC)) != 1)
    _exit(91);
  return NULL;
}

static void refused_by_seccomp(void **state)
{
  (void)state;
  tdl_loop *probe = t_ring_loop();
  if (!probe) {
    skip();
    return;
  }
  assert_int_equal(tdl_loop_free(probe), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (t_deny_io_uring() < 0)
      _exit(90);
    tdl_loop *loop = NULL;
    tdl_loop_options uring = {.backend = TDL_BACKEND_URING}, autob = {.backend = TDL_BACKEND_AUTO};
    if (tdl_loop_new(&loop, &uring) != -EPERM || loop)
      _exit(92); /* asked for uring: the kernel's refusal, clearly */
    if (tdl_loop_new(&loop, &autob) != 0 || strcmp(tdl_loop_backend(loop), "epoll") != 0)
      _exit(93); /* auto: epoll, quietly */
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
      _exit(94);
    tdl_fiber_t h;
    if (tdl_fiber_spawn(&h, loop, echo_once, p, NULL) != 0 || tdl_fiber_detach(loop, h) != 0)
      _exit(95);
    if (tdl_loop_run(loop, TDL_LOOP_DEFAULT) != 0 || tdl_loop_free(loop) != 0)
      _exit(96);
    _exit(0);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- an operation the kernel drops before it begins ---- */

#ifdef TDL_FAULTS
/* io-wq completes work it cannot start a worker thread for with -ECANCELED
 * (a signal pending at each try of creating one is enough); nobody asked
 * for that cancel, and nothing was done, so treadle submits the operation
 * again.  tdl__ring_debug_drop makes the kernel drop operations the same
 * way (a failing request linked before each). */
typedef struct dropped {
  int fd;
  ssize_t wrote, read;
  char buf[16];
} dropped;

static void *write_read_file(void *arg)
{
  dropped *d = arg;
  d->wrote = tdl_fs_pwrite(d->fd, "hello", 5, 0, tdl_after(10 * TDL_SEC));
  d->read = tdl_fs_pread(d->fd, d->buf, sizeof d->buf, 0, tdl_after(10 * TDL_SEC));
  return NULL;
}

static void dropped_file_io_is_retried(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  char path[] = "/tmp/tdl-dropped-XXXXXX";
  dropped d = {.fd = mkstemp(path)};
  assert_true(d.fd >= 0);
  unlink(path);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_URING), 0); /* every read and write a ring operation */
  tdl__ring_debug_drop(loop, 3);                         /* the write, its retry, and the read */
  t_spawn(loop, write_read_file, &d);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_fs_set_engine(TDL_FS_AUTO), 0);
  assert_int_equal(d.wrote, 5);
  assert_int_equal(d.read, 5);
  assert_memory_equal(d.buf, "hello", 5);
  assert_int_equal(tdl_loop_free(loop), 0);
  close(d.fd);
}

static ssize_t op_result;
static int op_calls;
static void op_cb(tdl_loop *loop, tdl_op *op, ssize_t result)
{
  (void)loop, (void)op;
  op_result = result;
  op_calls++;
}

static void dropped_op_is_retried(void **state)
{
  (void)state;
  T_RING_LOOP(loop);
  int p[2];
  t_pipe(p);
  tdl_op op;
  tdl_op_init(&op, NULL);
  op_calls = 0;
  tdl__ring_debug_drop(loop, 2);
  assert_int_equal(tdl_op_write(loop, &op, p[1], "xyz", 3, op_cb), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(op_calls, 1); /* once, with the real result */
  assert_int_equal(op_result, 3);
  char b[8];
  assert_int_equal(read(p[0], b, sizeof b), 3); /* written once: the dropped tries never ran */
  assert_memory_equal(b, "xyz", 3);
  /* A cancel that was asked for still ends it with -ECANCELED. */
  op_calls = 0;
  assert_int_equal(tdl_op_read(loop, &op, p[0], b, sizeof b, op_cb), 0);
  assert_int_equal(tdl_op_cancel(loop, &op), 0);
  assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(op_calls, 1);
  assert_int_equal(op_result, -ECANCELED);
  assert_int_equal(tdl_loop_free(loop), 0);
  close(p[0]);
  close(p[1]);
}
#else
/* tdl__ring_debug_drop is built with fault injection only (TDL_FAULTS). */
static void dropped_file_io_is_retried(void **state)
{
  (void)state;
  skip();
}

static void dropped_op_is_retried(void **state)
{
  (void)state;
  skip();
}
#endif

/* $TDL_BACKEND names uring and auto too; anything else is refused. */
static void backend_names(void **state)
{
  (void)state;
  const char *old = getenv("TDL_BACKEND");
  char *saved = old ? strdup(old) : NULL;
  tdl_loop *loop = NULL;
  setenv("TDL_BACKEND", "auto", 1);
  assert_int_equal(tdl_loop_new(&loop, NULL), 0);
  assert_true(strcmp(tdl_loop_backend(loop), "uring") == 0 || strcmp(tdl_loop_backend(loop), "epoll") == 0);
  assert_int_equal(tdl_loop_free(loop), 0);
  setenv("TDL_BACKEND", "io_uring", 1);
  assert_int_equal(tdl_loop_new(&loop, NULL), -EINVAL);
  assert_null(loop);
  tdl_loop_options bad = {.backend = (tdl_backend)99};
  assert_int_equal(tdl_loop_new(&loop, &bad), -EINVAL);
  if (saved) {
    setenv("TDL_BACKEND", saved, 1);
    free(saved);
  } else {
    unsetenv("TDL_BACKEND");
  }
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(close_during_read),
      cmocka_unit_test(dropped_file_io_is_retried),
      cmocka_unit_test(dropped_op_is_retried),
      cmocka_unit_test(cancelled_mid_read),
      cmocka_unit_test(deadline_mid_read),
      cmocka_unit_test(past_deadline),
      cmocka_unit_test(full_queues),
      cmocka_unit_test(a_hundred_thousand_fibers),
      cmocka_unit_test(ops_read_and_write),
      cmocka_unit_test(ops_need_uring),
      cmocka_unit_test(free_then_block),
      cmocka_unit_test(fork_with_a_spare_ring),
      cmocka_unit_test(refused_by_seccomp),
      cmocka_unit_test(backend_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
