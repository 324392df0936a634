/* SPDX-License-Identifier: MIT */
/* libtreadle-hook: blocking calls in fibers park the fiber and keep the
 * user's semantics.  Linked with libtreadle-hook, so every read(), write(),
 * fcntl(), ... below is the hook's. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "hook_helpers.h"
#include <treadle/hook.h>

static void test_active_and_outside_untouched(void **state)
{
  (void)state;
  assert_int_equal(tdl_hook_active(), 1);
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_false(fcntl(p[0], F_GETFL) & O_NONBLOCK);
  assert_int_equal(write(p[1], "ab", 2), 2);
  char b[4];
  assert_int_equal(read(p[0], b, sizeof b), 2);
  assert_false(raw_getfl(p[0]) & O_NONBLOCK); /* nothing changed underneath */
  /* A non-blocking fd outside a fiber says EAGAIN as ever. */
  assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
  assert_int_equal(read(p[0], b, sizeof b), -1);
  assert_int_equal(errno, EAGAIN);
  tdl_hook_stats_get(&after);
  assert_int_equal(after.parked, before.parked);
  assert_int_equal(close(p[0]), 0);
  assert_int_equal(close(p[1]), 0);
}

/* ---- a read on a blocking pipe parks only its fiber ---- */

typedef struct pipe_ctx {
  int p[2];
  int other_ran; /* the writer ran while the reader was parked */
  int flags_seen;
  int raw_flags_seen;
} pipe_ctx;

static void *pipe_writer(void *arg)
{
  pipe_ctx *c = arg;
  c->other_ran = 1;
  c->flags_seen = fcntl(c->p[0], F_GETFL);
  c->raw_flags_seen = raw_getfl(c->p[0]);
  usleep(10000); /* a hooked sleep: the reader stays parked meanwhile */
  return (void *)(intptr_t)write(c->p[1], "x", 1);
}

static void *pipe_main(void *arg)
{
  pipe_ctx *c = arg;
  tdl_fiber_t w;
  assert_int_equal(tdl_fiber_spawn(&w, tdl_fiber_loop(), pipe_writer, c, NULL), 0);
  char b = 0;
  ssize_t n = read(c->p[0], &b, 1); /* parks: the writer has not run yet */
  assert_int_equal(n, 1);
  assert_int_equal(b, 'x');
  assert_true(c->other_ran);
  void *wr;
  assert_int_equal(tdl_fiber_join(w, &wr, TDL_FOREVER), 0);
  assert_int_equal((intptr_t)wr, 1);
  return NULL;
}

static void test_blocking_pipe_parks_fiber(void **state)
{
  (void)state;
  pipe_ctx c = {0};
  assert_int_equal(pipe(c.p), 0);
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  run_main(pipe_main, &c);
  tdl_hook_stats_get(&after);
  assert_true(after.parked > before.parked);
  /* The user sees a blocking fd; the kernel has a non-blocking one. */
  assert_false(c.flags_seen & O_NONBLOCK);
  assert_true(c.raw_flags_seen & O_NONBLOCK);
  assert_false(fcntl(c.p[0], F_GETFL) & O_NONBLOCK);
  assert_int_equal(close(c.p[0]), 0);
  assert_int_equal(close(c.p[1]), 0);
}

/* ---- outside a fiber, a fd made non-blocking underneath still blocks ---- */

static void *late_writer(void *arg)
{
  int fd = *(int *)arg;
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  return (void *)(intptr_t)write(fd, "y", 1);
}

static void test_outside_fiber_keeps_blocking(void **state)
{
  (void)state;
  pipe_ctx c = {0};
  assert_int_equal(pipe(c.p), 0);
  run_main(pipe_main, &c); /* now O_NONBLOCK underneath */
  assert_true(raw_getfl(c.p[0]) & O_NONBLOCK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, late_writer, &c.p[1]), 0);
  char b = 0;
  assert_int_equal(read(c.p[0], &b, 1), 1); /* waits, as a blocking read */
  assert_int_equal(b, 'y');
  pthread_join(t, NULL);
  assert_int_equal(close(c.p[0]), 0);
  assert_int_equal(close(c.p[1]), 0);
}

/* ---- SO_RCVTIMEO is the deadline; the wait lets other fibers run ---- */

typedef struct timeo_ctx {
  int sv[2];
  int ticks;
  int done;
} timeo_ctx;

static void *ticker(void *arg)
{
  timeo_ctx *c = arg;
  while (!c->done) {
    c->ticks++;
    usleep(5000);
  }
  return NULL;
}

static void *timeo_main(void *arg)
{
  timeo_ctx *c = arg;
  tdl_fiber_t t;
  assert_int_equal(tdl_fiber_spawn(&t, tdl_fiber_loop(), ticker, c, NULL), 0);
  char b[8];
  /* The ticker runs while recv waits: three ticks.  A loaded machine may
   * not run it every 5 ms: the wait doubles until they fit (a recv that
   * blocked the thread would let it tick none, however long the wait). */
  for (long ms = 60;; ms *= 2) {
    struct timeval tv = {ms / 1000, ms % 1000 * 1000};
    assert_int_equal(setsockopt(c->sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    c->ticks = 0;
    tdl_time_t t0 = tdl_now();
    ssize_t n = recv(c->sv[0], b, sizeof b, 0);
    int e = errno;
    tdl_time_t took = tdl_now() - t0;
    assert_int_equal(n, -1);
    assert_int_equal(e, EAGAIN);
    assert_true(took >= (ms - 5) * TDL_MSEC);
    if (c->ticks >= 3)
      break;
    assert_true(ms < T_HANG / TDL_MSEC / 2); /* the ticker ran while recv waited */
  }
  /* Data there: no wait. */
  assert_int_equal(send(c->sv[1], "hi", 2, 0), 2);
  assert_int_equal(read(c->sv[0], b, sizeof b), 2);
  c->done = 1;
  assert_int_equal(tdl_fiber_join(t, NULL, TDL_FOREVER), 0);
  return NULL;
}

static void test_rcvtimeo_deadline(void **state)
{
  (void)state;
  timeo_ctx c = {0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  run_main(timeo_main, &c);
  assert_int_equal(close(c.sv[0]), 0);
  assert_int_equal(close(c.sv[1]), 0);
}

/* ---- connect on a blocking socket reports the outcome ---- */

static void *connect_main(void *arg)
{
  int port = *(int *)arg;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(s >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(s, (struct sockaddr *)&a, sizeof a), -1);
  assert_int_equal(errno, ECONNREFUSED);
  assert_int_equal(close(s), 0);

  /* And a connect that succeeds, to a blocking listener accepted in a fiber. */
  int l = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(l >= 0);
  a.sin_port = 0;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  assert_int_equal(listen(l, 8), 0);
  s = socket(AF_INET, SOCK_STREAM, 0);
  assert_int_equal(connect(s, (struct sockaddr *)&a, sizeof a), 0);
  int c = accept(l, NULL, NULL);
  assert_true(c >= 0);
  assert_false(fcntl(c, F_GETFL) & O_NONBLOCK);
  assert_int_equal(write(s, "z", 1), 1);
  char b = 0;
  assert_int_equal(read(c, &b, 1), 1);
  assert_int_equal(b, 'z');
  assert_int_equal(close(c), 0);
  assert_int_equal(close(s), 0);
  assert_int_equal(close(l), 0);
  return NULL;
}

static void test_connect(void **state)
{
  (void)state;
  int held[2];
  int port = t_refusing_port(held); /* bound, nobody listening */
  run_main(connect_main, &port);
  t_port_release(held);
}

/* ---- close of a hooked fd, then the number again ---- */

typedef struct reuse_ctx {
  int p[2];
} reuse_ctx;

static void *reuse_writer(void *arg)
{
  reuse_ctx *c = arg;
  usleep(2000);
  return (void *)(intptr_t)write(c->p[1], "r", 1);
}

static void *reuse_main(void *arg)
{
  (void)arg;
  int first = -1;
  for (int round = 0; round < 3; round++) {
    reuse_ctx c;
    assert_int_equal(pipe(c.p), 0);
    if (round == 0)
      first = c.p[0];
    assert_int_equal(c.p[0], first); /* the same number every round */
    tdl_fiber_t w;
    assert_int_equal(tdl_fiber_spawn(&w, tdl_fiber_loop(), reuse_writer, &c, NULL), 0);
    char b = 0;
    assert_int_equal(read(c.p[0], &b, 1), 1); /* parks: fiber I/O state made */
    assert_int_equal(b, 'r');
    assert_int_equal(tdl_fiber_join(w, NULL, TDL_FOREVER), 0);
    assert_false(fcntl(c.p[0], F_GETFL) & O_NONBLOCK);
    assert_int_equal(close(c.p[0]), 0); /* drops treadle's state */
    assert_int_equal(close(c.p[1]), 0);
  }
  /* A non-blocking fd on the reused number passes through. */
  int p[2];
  assert_int_equal(pipe2(p, O_NONBLOCK), 0);
  assert_int_equal(p[0], first);
  char b;
  assert_int_equal(read(p[0], &b, 1), -1);
  assert_int_equal(errno, EAGAIN);
  close(p[0]);
  close(p[1]);
  return NULL;
}

static void test_close_then_reuse(void **state)
{
  (void)state;
  run_main(reuse_main, NULL);
}

/* ---- closed by a thread that is not a fiber, then reused ---- */

static void *closer_thread(void *arg)
{
  /* Outside a fiber: the hook's close reaches this thread's loops only,
   * and the loop that knew the fd is the other thread's. */
  return (void *)(intptr_t)close((int)(intptr_t)arg);
}

static void *foreign_close_main(void *arg)
{
  (void)arg;
  reuse_ctx c;
  assert_int_equal(pipe(c.p), 0);
  int number = c.p[0];
  tdl_fiber_t w;
  assert_int_equal(tdl_fiber_spawn(&w, tdl_fiber_loop(), reuse_writer, &c, NULL), 0);
  char b = 0;
  assert_int_equal(read(c.p[0], &b, 1), 1); /* parks: the loop registers the fd */
  assert_int_equal(tdl_fiber_join(w, NULL, TDL_FOREVER), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, closer_thread, (void *)(intptr_t)c.p[0]), 0);
  void *r;
  assert_int_equal(pthread_join(t, &r), 0);
  assert_int_equal((intptr_t)r, 0);
  close(c.p[1]);
  /* The number comes back as a new socket: the loop must take it for a
   * new file (register it afresh), or the read below would not hear of
   * the byte that comes before its SO_RCVTIMEO. */
  reuse_ctx n;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, n.p), 0);
  assert_int_equal(n.p[0], number);
  struct timeval tv = {.tv_sec = 10};
  assert_int_equal(setsockopt(n.p[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  assert_int_equal(tdl_fiber_spawn(&w, tdl_fiber_loop(), reuse_writer, &n, NULL), 0);
  assert_int_equal(read(n.p[0], &b, 1), 1); /* parks on the loop */
  assert_int_equal(tdl_fiber_join(w, NULL, TDL_FOREVER), 0);
  close(n.p[0]);
  close(n.p[1]);
  return NULL;
}

static void test_foreign_close_then_reuse(void **state)
{
  (void)state;
  run_main(foreign_close_main, NULL);
}

/* ---- poll's events may name POLLERR and POLLHUP: one park, no naps ---- */

static void *poll_err_main(void *arg)
{
  (void)arg;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  /* As libpq asks: poll(2) reports POLLERR and POLLHUP unasked, so naming
   * them changes nothing, and an idle socket parks the fiber once. */
  struct pollfd p = {.fd = sv[0], .events = POLLIN | POLLERR | POLLHUP};
  assert_int_equal(poll(&p, 1, 100), 0);
  tdl_hook_stats_get(&after);
  assert_int_equal(after.slept - before.slept, 0);
  assert_int_equal(after.parked - before.parked, 1);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

static void test_poll_err_hup_parks_once(void **state)
{
  (void)state;
  run_main(poll_err_main, NULL);
}

/* ---- a cancel cuts the exchange: later calls on the connection fail ---- */

static int cut_sv[2];
static int cut_r, cut_e;

static void *cut_reader(void *arg)
{
  (void)arg;
  char b[16];
  cut_r = (int)read(cut_sv[0], b, sizeof b); /* waits for a reply: cancelled */
  cut_e = errno;
  return NULL;
}

static void *cut_pipe_reader(void *arg)
{
  char b;
  cut_r = (int)read(((int *)arg)[0], &b, 1);
  /* Refused now, with the cancel's error (not the pipe's to a socket call). */
  if (cut_r == -1 && errno == ECANCELED && write(((int *)arg)[1], "w", 1) == -1)
    cut_e = errno;
  return NULL;
}

/* A TCP listener on 127.0.0.1 (blocking), its address in *a. */
static int tcp_listener(struct sockaddr_in *a)
{
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t al = sizeof *a;
  *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_true(l >= 0);
  assert_int_equal(bind(l, (struct sockaddr *)a, sizeof *a), 0);
  assert_int_equal(listen(l, 4), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)a, &al), 0);
  return l;
}

static void *cut_main(void *arg)
{
  (void)arg;
  struct sockaddr_in la;
  int l = tcp_listener(&la);
  cut_sv[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_int_equal(connect(cut_sv[0], (struct sockaddr *)&la, sizeof la), 0);
  cut_sv[1] = accept(l, NULL, NULL);
  assert_true(cut_sv[1] >= 0);
  int number = cut_sv[0];
  tdl_fiber_t r;
  assert_int_equal(tdl_fiber_spawn(&r, tdl_fiber_loop(), cut_reader, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0); /* it waits in its read */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), r), 0);
  assert_int_equal(tdl_fiber_join(r, NULL, TDL_FOREVER), 0);
  assert_int_equal(cut_r, -1);
  assert_int_equal(cut_e, ECANCELED);
  /* The reply the cancelled call waited for comes late.  Another fiber's
   * request on that connection must not read it as its own: every call
   * on it fails as on a broken connection, and a poll says so at once. */
  assert_int_equal(write(cut_sv[1], "stale", 5), 5);
  char b[16];
  assert_int_equal(write(cut_sv[0], "next", 4), -1);
  assert_int_equal(errno, ECONNABORTED);
  assert_int_equal(read(cut_sv[0], b, sizeof b), -1);
  assert_int_equal(errno, ECONNABORTED);
  struct pollfd p = {.fd = cut_sv[0], .events = POLLIN};
  assert_int_equal(poll(&p, 1, (int)(T_HANG / TDL_MSEC)), 1);
  assert_true(p.revents & POLLERR);
  /* Closing clears it: a new connection with the number works. */
  close(cut_sv[0]);
  close(cut_sv[1]);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_int_equal(c, number);
  assert_int_equal(connect(c, (struct sockaddr *)&la, sizeof la), 0);
  int a = accept(l, NULL, NULL);
  assert_true(a >= 0);
  assert_int_equal(write(a, "ok", 2), 2);
  assert_int_equal(read(c, b, sizeof b), 2);
  close(a);
  close(c);
  close(l);
  /* A pipe has no exchange to cut (a cancelled fiber's write to stdout
   * must leave stdout to the others). */
  int pp[2];
  assert_int_equal(pipe(pp), 0);
  cut_e = 0;
  assert_int_equal(tdl_fiber_spawn(&r, tdl_fiber_loop(), cut_pipe_reader, pp, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), r), 0);
  assert_int_equal(tdl_fiber_join(r, NULL, TDL_FOREVER), 0);
  assert_int_equal(cut_e, ECANCELED);
  assert_int_equal(write(pp[1], "x", 1), 1);
  assert_int_equal(read(pp[0], b, sizeof b), 1);
  close(pp[0]);
  close(pp[1]);
  return NULL;
}
static void test_cancel_cuts_the_connection(void **state)
{
  (void)state;
  run_main(cut_main, NULL);
}

/* A library that keeps its connection non-blocking and waits in poll, with
 * a wakeup socketpair beside it (libpq, libcurl, MariaDB Connector/C):
 * cancelled in that poll, the connection is cut, for the calls that pass
 * through to the kernel too (a read there would take the cancelled
 * request's reply for the next one's); the socketpair, a pipe by another
 * name, is not (cut, it would be POLLERR to every later poll: curl spun). */
typedef struct nb_cut {
  int conn, peer; /* a TCP connection, conn non-blocking by the user */
  int early;      /* conn dup'd before the cancel */
  int wake[2];    /* a socketpair */
  int r, e;
} nb_cut;

static void *nb_cut_poller(void *arg)
{
  nb_cut *k = arg;
  struct pollfd p[2] = {{.fd = k->conn, .events = POLLIN}, {.fd = k->wake[0], .events = POLLIN}};
  k->r = poll(p, 2, -1); /* waits for the reply: cancelled */
  k->e = errno;
  return NULL;
}

static void *nb_cut_main(void *arg)
{
  nb_cut *k = arg;
  t_tcp_pair(&k->conn, &k->peer);
  assert_int_equal(fcntl(k->conn, F_SETFL, fcntl(k->conn, F_GETFL) | O_NONBLOCK), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, k->wake), 0);
  /* A number dup'd before the cut is the same connection: cut too. */
  k->early = dup(k->conn);
  assert_true(k->early >= 0);
  assert_int_equal(send(k->conn, "request", 7, 0), 7);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), nb_cut_poller, k, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0); /* it waits in its poll */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  assert_int_equal(k->r, -1);
  assert_int_equal(k->e, ECANCELED);
  char b[16];
  assert_int_equal(read(k->peer, b, sizeof b), 7);
  assert_int_equal(write(k->peer, "stale", 5), 5); /* the late reply */
  struct pollfd p[2] = {{.fd = k->conn, .events = POLLIN}, {.fd = k->wake[0], .events = POLLIN}};
  assert_int_equal(poll(p, 2, (int)(T_HANG / TDL_MSEC)), 1);
  assert_true(p[0].revents & POLLERR);
  assert_int_equal(p[1].revents, 0);
  assert_int_equal(send(k->conn, "next", 4, 0), -1);
  assert_int_equal(errno, ECONNABORTED);
  assert_int_equal(recv(k->conn, b, sizeof b, 0), -1);
  assert_int_equal(errno, ECONNABORTED);
  assert_int_equal(recv(k->conn, b, sizeof b, MSG_DONTWAIT | MSG_PEEK), -1);
  assert_int_equal(errno, ECONNABORTED);
  assert_int_equal(read(k->conn, b, sizeof b), -1);
  assert_int_equal(errno, ECONNABORTED);
  assert_int_equal(recv(k->early, b, sizeof b, 0), -1);
  assert_int_equal(errno, ECONNABORTED);
  int late = dup(k->conn); /* and one dup'd after it */
  assert_true(late >= 0);
  assert_int_equal(read(late, b, sizeof b), -1);
  assert_int_equal(errno, ECONNABORTED);
  /* Closing a number clears its cut only: the others stay cut. */
  close(late);
  assert_int_equal(send(k->early, "next", 4, 0), -1);
  assert_int_equal(errno, ECONNABORTED);
  /* The socketpair works on. */
  assert_int_equal(write(k->wake[1], "w", 1), 1);
  assert_int_equal(poll(p + 1, 1, (int)(T_HANG / TDL_MSEC)), 1);
  assert_int_equal(p[1].revents, POLLIN);
  assert_int_equal(read(k->wake[0], b, sizeof b), 1);
  return NULL;
}

static void test_cancel_cuts_a_nonblocking_connection(void **state)
{
  (void)state;
  nb_cut k = {0};
  run_main(nb_cut_main, &k);
  /* Outside a fiber too, the connection stays cut until it is closed. */
  char b[16];
  assert_int_equal(recv(k.conn, b, sizeof b, 0), -1);
  assert_int_equal(errno, ECONNABORTED);
  close(k.conn);
  close(k.early);
  close(k.peer);
  close(k.wake[0]);
  close(k.wake[1]);
}

/* ---- a short read: the next read waits for the loop first ---- */

typedef struct short_ctx {
  int s[2];     /* a stream socketpair: s[0] the reader's, blocking */
  int d[2];     /* a datagram socketpair, blocking */
  long reads;   /* read system calls of the reader's second read */
} short_ctx;

static void *short_writer(void *arg)
{
  short_ctx *c = arg;
  usleep(5000); /* the reader is parked in its second read by now */
  assert_int_equal(write(c->s[1], "c", 1), 1);
  return NULL;
}

static void *short_main(void *arg)
{
  short_ctx *c = arg;
  struct timeval tv = {T_HANG / TDL_SEC, 0}; /* a hang fails the test instead of hanging it */
  assert_int_equal(setsockopt(c->s[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  assert_int_equal(setsockopt(c->d[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  char b[64];

  /* Short: the stream is empty; the next read parks first and is woken by
   * the data that comes while it waits: one read system call for it. */
  assert_int_equal(write(c->s[1], "ab", 2), 2);
  assert_int_equal(read(c->s[0], b, sizeof b), 2);
  tdl_fiber_t w;
  assert_int_equal(tdl_fiber_spawn(&w, tdl_fiber_loop(), short_writer, c, NULL), 0);
  long r0 = t_reads_made();
  long before = t_reads_made(); /* minus what a t_reads_made() itself reads */
  assert_int_equal(read(c->s[0], b, sizeof b), 1);
  c->reads = t_reads_made() - before - (before - r0);
  assert_int_equal(b[0], 'c');
  assert_int_equal(tdl_fiber_join(w, NULL, TDL_FOREVER), 0);

  /* Data that comes while the reader does something else between two
   * reads (here a hooked sleep, during which the loop polls) is not lost. */
  assert_int_equal(write(c->s[1], "de", 2), 2);
  assert_int_equal(recv(c->s[0], b, sizeof b, 0), 2);
  assert_int_equal(write(c->s[1], "f", 1), 1);
  usleep(2000);
  assert_int_equal(recv(c->s[0], b, sizeof b, 0), 1);
  assert_int_equal(b[0], 'f');
  /* The same with nothing in between, and with readv. */
  assert_int_equal(write(c->s[1], "g", 1), 1);
  struct iovec iov = {b, sizeof b};
  assert_int_equal(readv(c->s[0], &iov, 1), 1);
  assert_int_equal(b[0], 'g');

  /* MSG_WAITALL waits for all of it, as on a blocking socket... */
  assert_int_equal(tdl_fiber_spawn(&w, tdl_fiber_loop(), short_writer, c, NULL), 0);
  assert_int_equal(write(c->s[1], "ab", 2), 2);
  assert_int_equal(recv(c->s[0], b, 3, MSG_WAITALL), 3); /* "ab", then the writer's "c" */
  assert_memory_equal(b, "abc", 3);
  assert_int_equal(tdl_fiber_join(w, NULL, TDL_FOREVER), 0);
  /* ...and returns what came when the stream ends first. */
  int e2[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, e2), 0);
  assert_int_equal(write(e2[1], "xy", 2), 2);
  assert_int_equal(shutdown(e2[1], SHUT_WR), 0);
  assert_int_equal(recvfrom(e2[0], b, 8, MSG_WAITALL, NULL, NULL), 2);
  assert_int_equal(recv(e2[0], b, 8, MSG_WAITALL), 0);
  assert_int_equal(close(e2[0]), 0);
  assert_int_equal(close(e2[1]), 0);

  /* An end of file after a short read: the next read returns 0 at once. */
  assert_int_equal(write(c->s[1], "hi", 2), 2);
  assert_int_equal(shutdown(c->s[1], SHUT_WR), 0);
  assert_int_equal(read(c->s[0], b, sizeof b), 2);
  assert_int_equal(read(c->s[0], b, sizeof b), 0);

  /* A datagram's short read says nothing of the next one, queued behind. */
  assert_int_equal(write(c->d[1], "one", 3), 3);
  assert_int_equal(write(c->d[1], "two", 3), 3);
  assert_int_equal(read(c->d[0], b, sizeof b), 3);
  assert_int_equal(read(c->d[0], b, sizeof b), 3);
  assert_memory_equal(b, "two", 3);
  return NULL;
}

static void test_short_read_then_wait(void **state)
{
  (void)state;
  short_ctx c = {0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.s), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, c.d), 0);
  run_main(short_main, &c);
  /* No EAGAIN first (valgrind's own reads, and kernels without task I/O
   * accounting, cannot tell). */
  if (t_reads_made() >= 0 && !RUNNING_ON_VALGRIND)
    assert_int_equal(c.reads, 1);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(close(c.s[i]), 0);
    assert_int_equal(close(c.d[i]), 0);
  }
}

/* ---- after a cancel, nothing that could wait goes through ---- */

typedef struct cancel_ctx {
  int s[2];   /* a blocking stream pair: the fiber's end, the peer's */
  int nb[2];  /* a pair whose first end the user made non-blocking */
  int lfd;    /* a blocking listener with a connection waiting */
  struct sockaddr_in at;
} cancel_ctx;

static void expect_cancelled(ssize_t r)
{
  assert_int_equal(r, -1);
  assert_int_equal(errno, ECANCELED);
}

static void *cancelled_fiber(void *arg)
{
  cancel_ctx *c = arg;
  char b[8];
  /* Parked when the cancel comes. */
  expect_cancelled(read(c->s[0], b, sizeof b));
  /* Now the peer's byte is there, and a write would fit: still refused. */
  struct iovec iov = {b, sizeof b};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  expect_cancelled(read(c->s[0], b, sizeof b));
  expect_cancelled(recv(c->s[0], b, sizeof b, 0));
  expect_cancelled(recv(c->s[0], b, 1, MSG_WAITALL));
  expect_cancelled(recvfrom(c->s[0], b, sizeof b, 0, NULL, NULL));
  expect_cancelled(readv(c->s[0], &iov, 1));
  expect_cancelled(recvmsg(c->s[0], &m, 0));
  expect_cancelled(write(c->s[0], "w", 1));
  expect_cancelled(send(c->s[0], "w", 1, 0));
  expect_cancelled(sendto(c->s[0], "w", 1, 0, NULL, 0));
  expect_cancelled(writev(c->s[0], &iov, 1));
  expect_cancelled(sendmsg(c->s[0], &m, 0));
  expect_cancelled(accept(c->lfd, NULL, NULL));
  expect_cancelled(accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC));
  int s = socket(AF_INET, SOCK_STREAM, 0); /* not a wait: made as ever */
  assert_true(s >= 0);
  expect_cancelled(connect(s, (struct sockaddr *)&c->at, sizeof c->at));
  assert_int_equal(close(s), 0);
  /* A wait for readiness is refused though the fd is ready; a look is not. */
  struct pollfd p = {.fd = c->s[0], .events = POLLIN};
  expect_cancelled(poll(&p, 1, 1000));
  expect_cancelled(ppoll(&p, 1, NULL, NULL));
  assert_int_equal(poll(&p, 1, 0), 1);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(c->s[0], &rd);
  struct timeval tv = {1, 0};
  expect_cancelled(select(c->s[0] + 1, &rd, NULL, NULL, &tv));
  assert_true(FD_ISSET(c->s[0], &rd)); /* an error leaves the set as it was */
  tv = (struct timeval){0, 0};
  assert_int_equal(select(c->s[0] + 1, &rd, NULL, NULL, &tv), 1);
  assert_int_equal(usleep(1000), -1); /* a sleep ends at once, as on a signal */
  assert_int_equal(errno, EINTR);
  /* What never waits passes: MSG_DONTWAIT, an fd the user made
   * non-blocking, close. */
  assert_int_equal(send(c->s[0], "d", 1, MSG_DONTWAIT), 1);
  assert_int_equal(write(c->nb[0], "n", 1), 1);
  assert_int_equal(close(c->nb[0]), 0);
  return NULL;
}

static void *cancel_main(void *arg)
{
  cancel_ctx *c = arg;
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), cancelled_fiber, c, NULL), 0);
  tdl_fiber_yield(); /* f parks in its read */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  assert_int_equal(write(c->s[1], "x", 1), 1);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  return NULL;
}

static void test_cancelled_fiber_refused(void **state)
{
  (void)state;
  cancel_ctx c = {0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.s), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.nb), 0);
  assert_int_equal(fcntl(c.nb[0], F_SETFL, O_NONBLOCK), 0);
  c.lfd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(c.lfd >= 0);
  c.at = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof c.at;
  assert_int_equal(bind(c.lfd, (struct sockaddr *)&c.at, sizeof c.at), 0);
  assert_int_equal(getsockname(c.lfd, (struct sockaddr *)&c.at, &al), 0);
  assert_int_equal(listen(c.lfd, 8), 0);
  int waiting = socket(AF_INET, SOCK_STREAM, 0);
  assert_int_equal(connect(waiting, (struct sockaddr *)&c.at, sizeof c.at), 0);
  run_main(cancel_main, &c);
  /* Nothing but the MSG_DONTWAIT byte reached the peer; the byte the
   * refused reads left is still there; no connection was taken or made. */
  char b[8];
  assert_int_equal(recv(c.s[1], b, sizeof b, MSG_DONTWAIT), 1);
  assert_int_equal(b[0], 'd');
  assert_int_equal(recv(c.s[0], b, sizeof b, MSG_DONTWAIT), 1);
  assert_int_equal(b[0], 'x');
  assert_int_equal(recv(c.nb[1], b, sizeof b, MSG_DONTWAIT), 1);
  assert_int_equal(b[0], 'n');
  assert_int_equal(fcntl(c.lfd, F_SETFL, O_NONBLOCK), 0);
  int a = accept(c.lfd, NULL, NULL);
  assert_true(a >= 0);
  assert_int_equal(accept(c.lfd, NULL, NULL), -1);
  assert_int_equal(errno, EAGAIN);
  int fds[] = {c.s[0], c.s[1], c.nb[1], c.lfd, waiting, a};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    assert_int_equal(close(fds[i]), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_active_and_outside_untouched),
      cmocka_unit_test(test_blocking_pipe_parks_fiber),
      cmocka_unit_test(test_outside_fiber_keeps_blocking),
      cmocka_unit_test(test_rcvtimeo_deadline),
      cmocka_unit_test(test_connect),
      cmocka_unit_test(test_close_then_reuse),
      cmocka_unit_test(test_foreign_close_then_reuse),
      cmocka_unit_test(test_poll_err_hup_parks_once),
      cmocka_unit_test(test_cancel_cuts_the_connection),
      cmocka_unit_test(test_cancel_cuts_a_nonblocking_connection),
      cmocka_unit_test(test_short_read_then_wait),
      cmocka_unit_test(test_cancelled_fiber_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
