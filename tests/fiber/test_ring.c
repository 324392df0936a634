/*
 * Fiber I/O on the uring back end (src/fiber/fiber_ring.c, src/loop/backend/uring.c):
 * operations in flight when their fd is closed, their fiber cancelled, their
 * deadline passed or their loop freed; a full submission queue; a completion
 * queue that overflows; tens of thousands of operations in flight at once;
 * and the choice of back end where io_uring is refused (a seccomp filter).
 * Every test makes its own uring loop and is skipped where the kernel (or
 * the build) has no io_uring.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif

/* A uring loop, or NULL (the test is skipped) where io_uring is refused. */
static tdl_loop *ring_loop(void)
{
  tdl_loop_options o = {.backend = TDL_BACKEND_URING};
  tdl_loop *loop = NULL;
  int e = tdl_loop_new(&loop, &o);
  if (e == -ENOSYS || e == -EPERM || e == -ENOMEM)
    return NULL;
  assert_int_equal(e, 0);
  assert_string_equal(tdl_loop_backend(loop), "uring");
  return loop;
}

#define RING_LOOP(loop)                                                  \
  tdl_loop *loop = ring_loop();                                          \
  if (!loop) {                                                           \
    skip();                                                              \
    return;                                                              \
  }

static void spawn(tdl_loop *loop, tdl_fiber_fn fn, void *arg)
{
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(loop, &h, fn, arg, NULL), 0);
  assert_int_equal(tdl_fiber_detach(loop, h), 0);
}

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
  RING_LOOP(loop);
  closing c = {.got = 1};
  t_pipe(c.p);
  int fds = t_count_fds();
  spawn(loop, read_into, &c);
  spawn(loop, close_it, &c);
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
  RING_LOOP(loop);
  midop m = {.deadline = TDL_FOREVER};
  t_pipe(m.p);
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(loop, &h, read_on_stack, &m, NULL), 0);
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
  RING_LOOP(loop);
  midop m = {.deadline = tdl_after(20 * TDL_MSEC)};
  t_pipe(m.p);
  spawn(loop, read_on_stack, &m);
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
  RING_LOOP(loop);
  midop m = {0};
  t_pipe(m.p);
  spawn(loop, past_deadline_reader, &m);
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
  RING_LOOP(loop);
  crowd c = {.n = n, .p = calloc((size_t)n, sizeof *c.p)};
  member *m = calloc((size_t)n, sizeof *m);
  assert_non_null(c.p);
  assert_non_null(m);
  for (int i = 0; i < n; i++) {
    t_pipe(c.p[i]);
    m[i] = (member){&c, i};
    spawn(loop, crowd_reader, &m[i]);
  }
  spawn(loop, crowd_writer, &c);
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
    tdl_sleep_for(TDL_MSEC);
  assert_int_equal(m->sleepers, m->nsleep);
  for (int i = 0; i < m->nsleep; i++)
    assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), m->sleeper[i]), 0);
  return NULL;
}

static void a_hundred_thousand_fibers(void **state)
{
  (void)state;
  RING_LOOP(loop);
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
      spawn(loop, many_reader, &mm[2 * i + k]);
    }
  }
  m.nsleep = fibers - 2 * npairs - 1;
  m.sleeper = calloc((size_t)m.nsleep, sizeof *m.sleeper);
  assert_non_null(m.sleeper);
  for (int i = 0; i < m.nsleep; i++) {
    assert_int_equal(tdl_fiber_spawn(loop, &m.sleeper[i], many_sleeper, &m, NULL), 0);
    assert_int_equal(tdl_fiber_detach(loop, m.sleeper[i]), 0);
  }
  spawn(loop, many_driver, &m);
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

/* ---- where io_uring is refused ---- */

/* In a child: deny io_uring_setup with EPERM, as container runtimes do. */
static void deny_io_uring(void)
{
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    _exit(90);
}

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
  tdl_loop *probe = ring_loop();
  if (!probe) {
    skip();
    return;
  }
  assert_int_equal(tdl_loop_free(probe), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    deny_io_uring();
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
    if (tdl_fiber_spawn(loop, &h, echo_once, p, NULL) != 0 || tdl_fiber_detach(loop, h) != 0)
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
      cmocka_unit_test(cancelled_mid_read),
      cmocka_unit_test(deadline_mid_read),
      cmocka_unit_test(past_deadline),
      cmocka_unit_test(full_queues),
      cmocka_unit_test(a_hundred_thousand_fibers),
      cmocka_unit_test(refused_by_seccomp),
      cmocka_unit_test(backend_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
