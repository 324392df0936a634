/* SPDX-License-Identifier: MIT */
/* libtreadle-hook: the errno a blocking call would give, and misuse (dup,
 * dup2 onto a hooked fd, fork+exec from a fiber, fds the hook never saw
 * made, calls from a thread that is not a fiber).  Every error case is run
 * twice, in a fiber and as plain blocking libc outside one, and the two
 * must agree. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "hook_helpers.h"
#include <treadle/hook.h>

/* Run fn(arg) in a fiber, then as plain code outside any. */
typedef struct outcome {
  ssize_t r;
  int err;
} outcome;

typedef void (*scenario)(outcome *o);

static void *scenario_fiber(void *arg)
{
  void **a = arg;
  ((scenario)(uintptr_t)a[0])(a[1]);
  return NULL;
}

static void *scenario_thread(void *arg)
{
  void **a = arg;
  ((scenario)(uintptr_t)a[0])(a[1]);
  return NULL;
}

/* The plain run is on a thread of its own that never ran a loop: a thread
 * that ran one on io_uring may carry the ring's pending work, which makes
 * its next interruptible wait say EINTR (a socket call under SO_RCVTIMEO
 * is not restarted), and that is not what is compared here. */
static void both_ways(scenario fn, outcome *in_fiber, outcome *outside)
{
  void *a[2] = {(void *)(uintptr_t)fn, in_fiber};
  run_main(scenario_fiber, a);
  void *b[2] = {(void *)(uintptr_t)fn, outside};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, scenario_thread, b), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
}

static struct sockaddr_in loopback(int port)
{
  return (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

static int listener(int *port)
{
  int l = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(l >= 0);
  struct sockaddr_in a = loopback(0);
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  assert_int_equal(listen(l, 8), 0);
  *port = ntohs(a.sin_port);
  return l;
}

/* ---- connection refused ---- */

static void refused(outcome *o)
{
  int held[2];
  int port = t_refusing_port(held); /* bound, nobody listening */
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = loopback(port);
  o->r = connect(s, (struct sockaddr *)&a, sizeof a);
  o->err = errno;
  close(s);
  t_port_release(held);
}

static void test_errno_refused(void **state)
{
  (void)state;
  outcome f, p;
  both_ways(refused, &f, &p);
  assert_int_equal(p.r, -1);
  assert_int_equal(p.err, ECONNREFUSED);
  assert_int_equal(f.r, p.r);
  assert_int_equal(f.err, p.err);
}

/* ---- a read timeout through SO_RCVTIMEO, and a send timeout ---- */

static void rcvtimeo(outcome *o)
{
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  struct timeval tv = {0, 30 * 1000};
  assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  char b[4];
  o->r = read(sv[0], b, sizeof b);
  o->err = errno;
  close(sv[0]);
  close(sv[1]);
}

static void test_errno_rcvtimeo(void **state)
{
  (void)state;
  outcome f, p;
  both_ways(rcvtimeo, &f, &p);
  assert_int_equal(p.r, -1);
  assert_true(p.err == EAGAIN || p.err == EWOULDBLOCK);
  assert_int_equal(f.r, p.r);
  assert_int_equal(f.err, p.err);
}

/* A blocking send into a full socket under SO_SNDTIMEO: what fits, then
 * the count so far (not a short write at the first full buffer). */
static void sndtimeo(outcome *o)
{
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int small = 4096;
  assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  struct timeval tv = {0, 30 * 1000};
  assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
  static char big[1 << 20];
  ssize_t total = 0, r;
  while ((r = send(sv[0], big, sizeof big, 0)) > 0)
    total += r;
  o->r = r;
  o->err = errno;
  assert_true(total > 0);
  close(sv[0]);
  close(sv[1]);
}

static void test_errno_sndtimeo(void **state)
{
  (void)state;
  outcome f, p;
  both_ways(sndtimeo, &f, &p);
  assert_int_equal(p.r, -1);
  assert_int_equal(f.r, p.r);
  assert_int_equal(f.err, p.err);
}

/* A blocking write returns when all of it went, however many times the
 * pipe filled up meanwhile (not at the first full buffer). */
typedef struct drain {
  int fd;
  size_t got;
} drain;

static void *drainer(void *arg)
{
  drain *d = arg;
  char buf[4096];
  ssize_t n;
  while ((n = read(d->fd, buf, sizeof buf)) > 0)
    d->got += (size_t)n;
  return NULL;
}

static void *full_write_main(void *arg)
{
  (void)arg;
  int p[2], sv[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  static char big[1 << 20];
  drain d = {.fd = p[0]}, e = {.fd = sv[1]};
  tdl_fiber_t r = spawn(drainer, &d), s = spawn(drainer, &e);
  assert_int_equal(write(p[1], big, sizeof big), (ssize_t)sizeof big);
  assert_int_equal(send(sv[0], big, sizeof big, 0), (ssize_t)sizeof big);
  close(p[1]);
  shutdown(sv[0], SHUT_WR);
  join(r);
  join(s);
  assert_int_equal(d.got, sizeof big);
  assert_int_equal(e.got, sizeof big);
  close(p[0]);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

static void test_full_write(void **state)
{
  (void)state;
  run_main(full_write_main, NULL);
}

/* ---- a server killed mid-reply: EOF, or ECONNRESET when it left our
 * request unread (the kernel then resets) ---- */

static bool g_unread; /* send a request the server never reads */

static void killed_mid_reply(outcome *o)
{
  int port;
  int l = listener(&port);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int c = (int)syscall(SYS_accept4, l, NULL, NULL, 0);
    static const char half[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf";
    if (c < 0 || syscall(SYS_write, c, half, sizeof half - 1) != (long)(sizeof half - 1))
      _exit(1);
    for (;;)
      pause(); /* until killed */
  }
  close(l);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = loopback(port);
  assert_int_equal(connect(s, (struct sockaddr *)&a, sizeof a), 0);
  if (g_unread)
    assert_int_equal(send(s, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
  char b[256];
  size_t got = 0;
  while (got < 44) { /* the head and "half" */
    ssize_t n = read(s, b + got, sizeof b - got);
    assert_true(n > 0);
    got += (size_t)n;
  }
  assert_int_equal(kill(pid, SIGKILL), 0);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  o->r = read(s, b, sizeof b);
  o->err = o->r < 0 ? errno : 0;
  close(s);
}

static void test_errno_killed_mid_reply(void **state)
{
  (void)state;
  outcome f, p;
  g_unread = false;
  both_ways(killed_mid_reply, &f, &p);
  assert_int_equal(p.r, 0); /* FIN: end of file */
  assert_int_equal(f.r, p.r);
  g_unread = true;
  both_ways(killed_mid_reply, &f, &p);
  assert_int_equal(p.r, -1);
  assert_int_equal(p.err, ECONNRESET);
  assert_int_equal(f.r, p.r);
  assert_int_equal(f.err, p.err);
}

/* ---- dup, dup2, dup3 ---- */

static void *put(void *arg)
{
  int fd = *(int *)arg;
  assert_int_equal(write(fd, "d", 1), 1);
  return NULL;
}

typedef struct onto {
  int fd;
  ssize_t r;
  int err;
} onto;

static void *reader(void *arg)
{
  onto *o = arg;
  char c;
  o->r = read(o->fd, &c, 1);
  o->err = errno;
  return NULL;
}

static void *dup_main(void *arg)
{
  (void)arg;
  int a[2], b[2];
  assert_int_equal(pipe(a), 0);
  assert_int_equal(pipe(b), 0);
  char c;
  tdl_fiber_t w = spawn(put, &a[1]);
  assert_int_equal(read(a[0], &c, 1), 1); /* parks: a[0] is hooked */
  join(w);

  /* dup: the same file, blocking for the user, parks on its own number. */
  int d = dup(a[0]);
  assert_true(d >= 0);
  assert_false(fcntl(d, F_GETFL) & O_NONBLOCK);
  assert_true(raw_getfl(d) & O_NONBLOCK);
  w = spawn(put, &a[1]);
  assert_int_equal(read(d, &c, 1), 1);
  join(w);
  /* Closing the original leaves the copy working. */
  int keep = a[0];
  assert_int_equal(close(a[0]), 0);
  w = spawn(put, &a[1]);
  assert_int_equal(read(d, &c, 1), 1);
  join(w);
  a[0] = dup2(d, keep); /* and back onto the free number */
  assert_int_equal(a[0], keep);
  assert_int_equal(dup2(a[0], a[0]), a[0]); /* onto itself: nothing changes */
  assert_false(fcntl(a[0], F_GETFL) & O_NONBLOCK);
  assert_int_equal(close(d), 0);

  /* dup2 onto a hooked fd a fiber waits on: that fiber hears EBADF (its fd
   * was closed under it), and the number is now b's read end. */
  onto o = {.fd = a[0]};
  tdl_fiber_t r = spawn(reader, &o);
  tdl_fiber_yield(); /* r parks on a[0] */
  assert_int_equal(dup2(b[0], a[0]), a[0]);
  join(r);
  assert_int_equal(o.r, -1);
  assert_int_equal(o.err, EBADF);
  w = spawn(put, &b[1]);
  assert_int_equal(read(a[0], &c, 1), 1); /* b's data through the old number */
  join(w);
  assert_int_equal(c, 'd');

  /* dup3 onto it again, close-on-exec; a non-blocking source stays so. */
  int nb[2];
  assert_int_equal(pipe2(nb, O_NONBLOCK), 0);
  assert_int_equal(dup3(nb[0], a[0], O_CLOEXEC), a[0]);
  assert_true(fcntl(a[0], F_GETFD) & FD_CLOEXEC);
  assert_true(fcntl(a[0], F_GETFL) & O_NONBLOCK);
  assert_int_equal(read(a[0], &c, 1), -1); /* the user's EAGAIN */
  assert_int_equal(errno, EAGAIN);
  assert_int_equal(dup3(a[0], a[0], 0), -1); /* as libc: EINVAL */
  assert_int_equal(errno, EINVAL);
  /* F_DUPFD too. */
  int f = fcntl(b[0], F_DUPFD_CLOEXEC, 100);
  assert_true(f >= 100);
  assert_false(fcntl(f, F_GETFL) & O_NONBLOCK);
  w = spawn(put, &b[1]);
  assert_int_equal(read(f, &c, 1), 1);
  join(w);
  close(f);
  close(nb[0]);
  close(nb[1]);
  close(a[0]);
  close(a[1]);
  close(b[0]);
  close(b[1]);
  return NULL;
}

static void test_dup(void **state)
{
  (void)state;
  run_main(dup_main, NULL);
}

/* ---- fork and exec from a fiber ---- */

typedef struct forked {
  int q[2];
  char got;
} forked;

static void *q_reader(void *arg)
{
  forked *fk = arg;
  assert_int_equal(read(fk->q[0], &fk->got, 1), 1);
  return NULL;
}

static void *fork_main(void *arg)
{
  forked *fk = arg;
  assert_int_equal(pipe(fk->q), 0);
  tdl_fiber_t r = spawn(q_reader, fk);
  tdl_fiber_yield(); /* r is parked on q[0], which the loop watches */
  int out[2];
  assert_int_equal(pipe(out), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* The child, inside the fiber that forked: close the fd the parent's
     * loop watches (close(2) only: the parent keeps its registration),
     * point stdout at the pipe, exec. */
    if (close(fk->q[0]) != 0 || dup2(out[1], 1) != 1)
      _exit(2);
    close(out[0]);
    execl("/bin/sh", "sh", "-c", "echo hello", (char *)NULL);
    _exit(127);
  }
  close(out[1]);
  char buf[16];
  size_t got = 0;
  ssize_t n;
  while ((n = read(out[0], buf + got, sizeof buf - got)) > 0) /* parks */
    got += (size_t)n;
  assert_int_equal(n, 0);
  assert_int_equal(got, 6);
  assert_memory_equal(buf, "hello\n", 6);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* The reader still wakes: its registration survived the child's close. */
  assert_int_equal(write(fk->q[1], "k", 1), 1);
  join(r);
  assert_int_equal(fk->got, 'k');
  close(out[0]);
  close(fk->q[0]);
  close(fk->q[1]);
  return NULL;
}

static void test_fork_exec_from_fiber(void **state)
{
  (void)state;
  forked fk = {0};
  run_main(fork_main, &fk);
}

/* ---- an fd the hook never saw made ---- */

static void *unseen_main(void *arg)
{
  int *sv = arg;
  assert_false(raw_getfl(sv[0]) & O_NONBLOCK);
  tdl_fiber_t w = spawn(put, &sv[1]);
  char c;
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  assert_int_equal(read(sv[0], &c, 1), 1); /* parks, like any other */
  tdl_hook_stats_get(&after);
  join(w);
  assert_true(after.parked > before.parked);
  assert_false(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
  assert_true(raw_getfl(sv[0]) & O_NONBLOCK);
  return NULL;
}

static void test_fd_from_before_the_hook(void **state)
{
  (void)state;
  /* Made by the kernel directly: as an fd inherited through exec, or opened
   * before the hook was loaded. */
  int sv[2];
  assert_int_equal(syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, sv), 0);
  run_main(unseen_main, sv);
  /* Outside a fiber afterwards: still blocking for the user. */
  char c;
  assert_int_equal(write(sv[1], "x", 1), 1);
  assert_int_equal(read(sv[0], &c, 1), 1);
  assert_int_equal(close(sv[0]), 0);
  assert_int_equal(close(sv[1]), 0);
}

/* ---- a hooked fd used from a thread that is not a fiber ---- */

typedef struct cross {
  int p[2];
  int ready[2]; /* the thread says it is about to read */
  char got[3];
} cross;

static void *cross_thread(void *arg)
{
  cross *x = arg;
  /* Blocking reads, as for the user, though O_NONBLOCK is set underneath:
   * each EAGAIN becomes a poll(2), never reaches this caller. */
  assert_int_equal(write(x->ready[1], "r", 1), 1);
  for (size_t got = 0; got < sizeof x->got;) {
    ssize_t n = read(x->p[0], x->got + got, sizeof x->got - got);
    assert_true(n > 0);
    got += (size_t)n;
  }
  return NULL;
}

static void *cross_main(void *arg)
{
  cross *x = arg;
  tdl_fiber_t w = spawn(put, &x->p[1]);
  char c;
  assert_int_equal(read(x->p[0], &c, 1), 1); /* hooked now */
  join(w);
  assert_true(raw_getfl(x->p[0]) & O_NONBLOCK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, cross_thread, x), 0);
  assert_int_equal(read(x->ready[0], &c, 1), 1); /* parks until the thread runs */
  for (int i = 0; i < 3; i++) {
    tdl_sleep(tdl_after(2 * TDL_MSEC)); /* the thread's read is (likely) waiting */
    assert_int_equal(write(x->p[1], &"abc"[i], 1), 1);
  }
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_memory_equal(x->got, "abc", 3);
  return NULL;
}

static void test_call_from_plain_thread(void **state)
{
  (void)state;
  cross x = {0};
  assert_int_equal(pipe(x.p), 0);
  assert_int_equal(pipe(x.ready), 0);
  run_main(cross_main, &x);
  close(x.p[0]);
  close(x.p[1]);
  close(x.ready[0]);
  close(x.ready[1]);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errno_refused),
      cmocka_unit_test(test_errno_rcvtimeo),
      cmocka_unit_test(test_errno_sndtimeo),
      cmocka_unit_test(test_full_write),
      cmocka_unit_test(test_errno_killed_mid_reply),
      cmocka_unit_test(test_dup),
      cmocka_unit_test(test_fork_exec_from_fiber),
      cmocka_unit_test(test_fd_from_before_the_hook),
      cmocka_unit_test(test_call_from_plain_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
