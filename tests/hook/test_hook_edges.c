/* SPDX-License-Identifier: MIT */
/* libtreadle-hook at the edges of its calls (include/treadle/hook.h): bad
 * fds, SO_RCVTIMEO/SO_SNDTIMEO running out in and outside fibers, two fibers
 * on one fd, a signal outside a fiber, connect that waits, and poll and
 * select on what the loop cannot watch or on many fds (the host-name calls:
 * test_hook_names.c).  Where the kernel or libc has an answer of its own,
 * the hook's is compared with it (outside a fiber, or past the hook with a
 * raw system call).  Linked with libtreadle-hook, so every call below is the
 * hook's.  No time is asserted but lower bounds that the calls promise. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "hook_helpers.h"
#include <treadle/hook.h>

static tdl_hook_stats stats(void)
{
  tdl_hook_stats s;
  tdl_hook_stats_get(&s);
  return s;
}

/* Writes one byte to *fd when it runs: after the spawner parked. */
static void *poke(void *arg)
{
  assert_int_equal(write(*(int *)arg, "!", 1), 1);
  return NULL;
}

/* A TCP listener on 127.0.0.1 with `backlog`, its address in *a. */
static int tcp_listener(struct sockaddr_in *a, int backlog)
{
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(l >= 0);
  *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof *a;
  assert_int_equal(bind(l, (struct sockaddr *)a, sizeof *a), 0);
  assert_int_equal(listen(l, backlog), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)a, &al), 0);
  return l;
}

/* ---- bad fds: EBADF from every call, as libc says ---- */

enum { NCALLS = 22 };
typedef struct outcomes {
  long r[NCALLS];
  int err[NCALLS];
} outcomes;

/* Every hooked call on fd, into o (in order). */
static void bad_fd_calls(int fd, outcomes *o)
{
  char b[4] = {0};
  struct iovec iov = {b, sizeof b};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int on = 1, i = 0;
  struct timeval tv = {1, 0};
#define CALL(e)          \
  do {                   \
    errno = 0;           \
    o->r[i] = (long)(e); \
    o->err[i++] = errno; \
  } while (0)
  CALL(read(fd, b, sizeof b));
  CALL(write(fd, b, sizeof b));
  CALL(readv(fd, &iov, 1));
  CALL(writev(fd, &iov, 1));
  CALL(recv(fd, b, sizeof b, 0));
  CALL(recv(fd, b, sizeof b, MSG_WAITALL));
  CALL(recv(fd, b, sizeof b, MSG_DONTWAIT));
  CALL(send(fd, b, sizeof b, 0));
  CALL(recvfrom(fd, b, sizeof b, 0, NULL, NULL));
  CALL(sendto(fd, b, sizeof b, 0, NULL, 0));
  CALL(recvmsg(fd, &m, 0));
  CALL(sendmsg(fd, &m, 0));
  CALL(accept(fd, NULL, NULL));
  CALL(accept4(fd, NULL, NULL, SOCK_CLOEXEC));
  CALL(connect(fd, (struct sockaddr *)&a, sizeof a));
  CALL(fcntl(fd, F_GETFL));
  CALL(fcntl(fd, F_SETFL, O_NONBLOCK));
  CALL(ioctl(fd, FIONBIO, &on));
  CALL(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
  CALL(dup(fd));
  CALL(dup2(fd, fd));
  CALL(close(fd));
#undef CALL
  assert_int_equal(i, NCALLS);
}

static void check_ebadf(const outcomes *o)
{
  for (int i = 0; i < NCALLS; i++) {
    if (o->r[i] != -1 || o->err[i] != EBADF)
      print_message("call %d: %ld, errno %d\n", i, o->r[i], o->err[i]);
    assert_int_equal(o->r[i], -1);
    assert_int_equal(o->err[i], EBADF);
  }
}

/* A number no file has: one just closed (nothing else opens fds here). */
static int dead_fd(void)
{
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(close(p[1]), 0);
  assert_int_equal(close(p[0]), 0);
  return p[0];
}

static void *bad_fd_main(void *arg)
{
  outcomes *o = arg;
  bad_fd_calls(-1, &o[0]);
  bad_fd_calls(dead_fd(), &o[1]);
  return NULL;
}

static void test_bad_fds(void **state)
{
  (void)state;
  outcomes in[2], out[2];
  run_main(bad_fd_main, in);
  bad_fd_calls(-1, &out[0]);
  bad_fd_calls(dead_fd(), &out[1]);
  for (int k = 0; k < 2; k++) {
    check_ebadf(&in[k]);
    check_ebadf(&out[k]);
  }
}

/* ---- close of a number someone else already closed ---- */

static void *closed_under_main(void *arg)
{
  (void)arg;
  int p[2];
  assert_int_equal(pipe(p), 0);
  tdl_fiber_t w = spawn(poke, &p[1]);
  char c;
  assert_int_equal(read(p[0], &c, 1), 1); /* parks: fiber I/O knows p[0] */
  join(w);
  /* Closed past the hook (a raw system call): close() says what close(2)
   * would, EBADF, and treadle forgets the number all the same. */
  assert_int_equal(raw_close(p[0]), 0);
  assert_int_equal(close(p[0]), -1);
  assert_int_equal(errno, EBADF);
  int q[2];
  assert_int_equal(pipe(q), 0);
  assert_int_equal(q[0], p[0]); /* the number again, a new file */
  w = spawn(poke, &q[1]);
  tdl_hook_stats before = stats();
  assert_int_equal(read(q[0], &c, 1), 1); /* parks on the new file */
  assert_true(stats().parked > before.parked);
  join(w);
  close_pair(q);
  assert_int_equal(close(p[1]), 0);
  return NULL;
}

static void test_close_of_a_closed_number(void **state)
{
  (void)state;
  run_main(closed_under_main, NULL);
}

/* ---- two fibers reading one blocking fd: one at a time ---- */

typedef struct reader {
  int fd;
  ssize_t r;
  int err;
  char got;
} reader;

static void *read_one(void *arg)
{
  reader *r = arg;
  r->r = read(r->fd, &r->got, 1);
  r->err = errno;
  return NULL;
}

static void *two_readers_main(void *arg)
{
  (void)arg;
  /* Both wait; two bytes come at once: each gets one (the second looks
   * again every millisecond while the first holds the fd's wait). */
  int p[2];
  assert_int_equal(pipe(p), 0);
  reader a = {.fd = p[0]}, b = {.fd = p[0]};
  tdl_fiber_t fa = spawn(read_one, &a), fb = spawn(read_one, &b);
  assert_int_equal(tdl_fiber_yield(), 0); /* both are waiting */
  assert_int_equal(write(p[1], "xy", 2), 2);
  join(fa);
  join(fb);
  assert_int_equal(a.r, 1);
  assert_int_equal(b.r, 1);
  assert_true((a.got == 'x' && b.got == 'y') || (a.got == 'y' && b.got == 'x'));
  close_pair(p);

  /* The second reader's SO_RCVTIMEO runs out while the first still holds
   * the wait: EAGAIN, as a blocking socket's timeout; the first then gets
   * its byte. */
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  a = (reader){.fd = sv[0]};
  b = (reader){.fd = sv[0]};
  fa = spawn(read_one, &a);
  assert_int_equal(tdl_fiber_yield(), 0); /* a waits, with no timeout */
  set_timeo(sv[0], SO_RCVTIMEO, 20);
  fb = spawn(read_one, &b);
  join(fb);
  assert_int_equal(b.r, -1);
  assert_int_equal(b.err, EAGAIN);
  assert_int_equal(write(sv[1], "z", 1), 1);
  join(fa);
  assert_int_equal(a.r, 1);
  assert_int_equal(a.got, 'z');
  close_pair(sv);
  return NULL;
}

static void test_two_fibers_one_fd(void **state)
{
  (void)state;
  run_main(two_readers_main, NULL);
}

/* ---- outside a fiber: timeouts and signals as on a blocking fd ---- */

static void *hook_it(void *arg)
{
  int *sv = arg;
  tdl_fiber_t w = spawn(poke, &sv[1]);
  char c;
  assert_int_equal(read(sv[0], &c, 1), 1); /* O_NONBLOCK underneath from here */
  join(w);
  return NULL;
}

static void on_signal(int sig) { (void)sig; }

typedef struct blocked {
  int fd;
  volatile int done;
  ssize_t r;
  int err;
} blocked;

static void *blocked_read(void *arg)
{
  blocked *b = arg;
  char c;
  b->r = read(b->fd, &c, 1);
  b->err = errno;
  b->done = 1;
  return NULL;
}

/* A plain thread reads fd, which no one writes; a signal whose handler
 * does not ask SA_RESTART interrupts it: the read's result and errno. */
static blocked interrupted_read(int fd)
{
  blocked b = {.fd = fd};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, blocked_read, &b), 0);
  tdl_time_t end = t_clock() + T_HANG;
  struct timespec ms = {0, 1000 * 1000};
  /* Again and again: one that comes before the read waits only ends the
   * handler; the next finds it waiting. */
  while (!b.done && t_clock() < end) {
    assert_int_equal(pthread_kill(t, SIGUSR1), 0);
    nanosleep(&ms, NULL);
  }
  assert_int_equal(pthread_join(t, NULL), 0);
  return b;
}

static void test_outside_a_fiber_as_blocking(void **state)
{
  (void)state;
  tdl_hook_stats before = stats();
  /* A socket the hook knows (a dup made it look) but never made
   * non-blocking: the kernel's own SO_RCVTIMEO runs out, EAGAIN. */
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int d = dup(sv[0]);
  assert_true(d >= 0);
  assert_int_equal(close(d), 0);
  set_timeo(sv[0], SO_RCVTIMEO, 20);
  char c;
  assert_int_equal(recv(sv[0], &c, 1, 0), -1);
  assert_int_equal(errno, EAGAIN);
  assert_false(raw_getfl(sv[0]) & O_NONBLOCK);

  /* Made non-blocking underneath by a fiber: the hook waits in poll(2) for
   * what the user's timeouts allow, then EAGAIN, as the blocking socket. */
  set_timeo(sv[0], SO_RCVTIMEO, 0);
  run_main(hook_it, sv);
  assert_true(raw_getfl(sv[0]) & O_NONBLOCK);
  set_timeo(sv[0], SO_RCVTIMEO, 20);
  tdl_time_t t0 = t_clock();
  assert_int_equal(recv(sv[0], &c, 1, 0), -1);
  assert_int_equal(errno, EAGAIN);
  assert_true(t_clock() - t0 >= 20 * TDL_MSEC);
  /* A write into a full buffer: the same with SO_SNDTIMEO. */
  char big[4096] = {0};
  while (send(sv[0], big, sizeof big, MSG_DONTWAIT) > 0) {
  }
  set_timeo(sv[0], SO_SNDTIMEO, 20);
  assert_int_equal(write(sv[0], big, 1), -1);
  assert_int_equal(errno, EAGAIN);
  assert_false(fcntl(sv[0], F_GETFL) & O_NONBLOCK); /* still blocking for the user */

  /* A signal interrupts a read waiting on it as it would the blocking
   * read: -1, EINTR (the handler asks no restart), as on a socket the hook
   * never touched. */
  struct sigaction sa = {.sa_handler = on_signal}, old;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
  set_timeo(sv[0], SO_RCVTIMEO, 0);
  blocked hooked = interrupted_read(sv[0]);
  int plain[2];
  assert_int_equal(syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, plain), 0);
  blocked kernel = interrupted_read(plain[0]);
  assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
  assert_int_equal(kernel.r, -1);
  assert_int_equal(kernel.err, EINTR);
  assert_int_equal(hooked.r, kernel.r);
  assert_int_equal(hooked.err, kernel.err);
  /* None of it parked a fiber but the one read in hook_it. */
  assert_int_equal(stats().parked - before.parked, 1);
  close_pair(plain);
  close_pair(sv);
}

/* ---- the user's O_NONBLOCK, set outside a fiber ---- */

static void test_user_nonblocking_outside_a_fiber(void **state)
{
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  run_main(hook_it, sv); /* O_NONBLOCK underneath */
  /* Blocking again, for the user: the flag stays underneath (the hook
   * still waits for the fd), hidden from F_GETFL. */
  assert_int_equal(fcntl(sv[0], F_SETFL, O_RDWR), 0);
  assert_true(raw_getfl(sv[0]) & O_NONBLOCK);
  assert_false(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
  /* Non-blocking, for the user: shown, and EAGAIN is the user's. */
  int on = 1, off = 0;
  assert_int_equal(ioctl(sv[0], FIONBIO, &on), 0);
  assert_true(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
  char c;
  assert_int_equal(read(sv[0], &c, 1), -1);
  assert_int_equal(errno, EAGAIN);
  /* Blocking again outside a fiber after the user's own non-blocking
   * spell: the file is made blocking for real, as libc would (no fiber
   * waits for it here). */
  assert_int_equal(ioctl(sv[0], FIONBIO, &off), 0);
  assert_false(raw_getfl(sv[0]) & O_NONBLOCK);
  assert_false(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
  close_pair(sv);
}

/* ---- connect that waits: SO_SNDTIMEO, a cancel, a cut connection ---- */

typedef struct dial {
  struct sockaddr_in at;
  int fd;
  int r, err;
} dial;

static void *dial_fiber(void *arg)
{
  dial *d = arg;
  d->r = connect(d->fd, (struct sockaddr *)&d->at, sizeof d->at);
  d->err = errno;
  return NULL;
}

/* Connects to a listener whose queue is full: the kernel drops the SYNs, so
 * the connect waits.  Sockets whose connect went through first (the queue
 * takes one or two) are kept in keep[], -1 ended. */
static int dial_until_waiting(const struct sockaddr_in *at, int keep[], int nkeep)
{
  for (int i = 0; i < nkeep - 1; i++) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    set_timeo(s, SO_SNDTIMEO, 30);
    if (connect(s, (struct sockaddr *)at, sizeof *at) == 0) {
      keep[i] = s;
      keep[i + 1] = -1;
      continue;
    }
    /* What a blocking connect says at SO_SNDTIMEO. */
    assert_int_equal(errno, EINPROGRESS);
    return s;
  }
  fail_msg("every connect went through: the listener's queue never filled");
  return -1;
}

static void *connect_main(void *arg)
{
  (void)arg;
  struct sockaddr_in at;
  int l = tcp_listener(&at, 0);
  int keep[16] = {-1};
  int s = dial_until_waiting(&at, keep, 16);
  assert_int_equal(close(s), 0);

  /* A connect that waits with no timeout: a cancel ends it, ECANCELED. */
  dial d = {.at = at, .fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  assert_true(d.fd >= 0);
  tdl_fiber_t f = spawn(dial_fiber, &d);
  assert_int_equal(tdl_fiber_yield(), 0); /* it waits */
  cancel(f);
  join(f);
  assert_int_equal(d.r, -1);
  assert_int_equal(d.err, ECANCELED);
  assert_int_equal(close(d.fd), 0);
  for (int i = 0; keep[i] >= 0; i++)
    assert_int_equal(close(keep[i]), 0);
  assert_int_equal(close(l), 0);
  return NULL;
}

static void test_connect_waits(void **state)
{
  (void)state;
  run_main(connect_main, NULL);
}

static void *cut_reader(void *arg)
{
  reader *r = arg;
  r->r = read(r->fd, &r->got, 1); /* waits for a reply: cancelled */
  r->err = errno;
  return NULL;
}

static void *connect_cut_main(void *arg)
{
  (void)arg;
  struct sockaddr_in at;
  int l = tcp_listener(&at, 4);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_int_equal(connect(c, (struct sockaddr *)&at, sizeof at), 0);
  int a = accept(l, NULL, NULL);
  assert_true(a >= 0);
  reader r = {.fd = c};
  tdl_fiber_t f = spawn(cut_reader, &r);
  assert_int_equal(tdl_fiber_yield(), 0);
  cancel(f);
  join(f);
  assert_int_equal(r.err, ECANCELED);
  /* The connection is cut: a connect on it too fails, ECONNABORTED. */
  assert_int_equal(connect(c, (struct sockaddr *)&at, sizeof at), -1);
  assert_int_equal(errno, ECONNABORTED);
  assert_int_equal(close(a), 0);
  assert_int_equal(close(c), 0);
  assert_int_equal(close(l), 0);
  return NULL;
}

static void test_connect_on_a_cut_connection(void **state)
{
  (void)state;
  run_main(connect_cut_main, NULL);
}

/* ---- poll on what the loop does not watch, and on many fds ---- */

static void *closer(void *arg)
{
  assert_int_equal(close(*(int *)arg), 0);
  return NULL;
}

static void *poll_edges_main(void *arg)
{
  (void)arg;
  int p[2];
  assert_int_equal(pipe(p), 0);
  /* POLLPRI alone: looked at from time to time (naps), never parked on;
   * nothing comes, the timeout ends it. */
  struct pollfd fd = {.fd = p[0], .events = POLLPRI};
  tdl_hook_stats before = stats();
  assert_int_equal(poll(&fd, 1, 20), 0);
  assert_int_equal(fd.revents, 0);
  assert_true(stats().slept > before.slept);
  assert_int_equal(stats().parked, before.parked);

  /* No events asked: poll(2) still reports a hang-up, and so does the hook
   * when another fiber closes the write end meanwhile. */
  fd = (struct pollfd){.fd = p[0], .events = 0};
  tdl_fiber_t w = spawn(closer, &p[1]);
  assert_int_equal(poll(&fd, 1, -1), 1);
  join(w);
  assert_int_equal(fd.revents, POLLHUP);
  struct pollfd k = {.fd = p[0], .events = 0};
  assert_int_equal((int)syscall(SYS_ppoll, &k, 1, &(struct timespec){0, 0}, NULL, 0), 1);
  assert_int_equal(k.revents, fd.revents); /* the kernel's own answer */
  assert_int_equal(close(p[0]), 0);

  /* More fds than the hook keeps on its stack: one park on all of them. */
  enum { N = 20 };
  int q[N][2];
  struct pollfd many[N];
  for (int i = 0; i < N; i++) {
    assert_int_equal(pipe(q[i]), 0);
    many[i] = (struct pollfd){.fd = q[i][0], .events = POLLIN};
  }
  before = stats();
  w = spawn(poke, &q[N - 1][1]);
  assert_int_equal(poll(many, N, -1), 1);
  join(w);
  assert_int_equal(stats().parked - before.parked, 1);
  assert_int_equal(stats().slept, before.slept);
  for (int i = 0; i < N; i++)
    assert_int_equal(many[i].revents, i == N - 1 ? POLLIN : 0);
  for (int i = 0; i < N; i++)
    close_pair(q[i]);
  return NULL;
}

static void test_poll_edges(void **state)
{
  (void)state;
  run_main(poll_edges_main, NULL);
}

/* ppoll with no time to wait, or with a signal mask, is libc's. */
static void *ppoll_main(void *arg)
{
  (void)arg;
  int p[2];
  assert_int_equal(pipe(p), 0);
  struct pollfd fd = {.fd = p[0], .events = POLLIN};
  struct timespec zero = {0, 0}, second = {1, 0};
  assert_int_equal(ppoll(&fd, 1, &zero, NULL), 0);
  assert_int_equal(write(p[1], "x", 1), 1);
  sigset_t none;
  sigemptyset(&none);
  tdl_hook_stats before = stats();
  assert_int_equal(ppoll(&fd, 1, &second, &none), 1); /* ready: the thread does not wait */
  assert_int_equal(fd.revents, POLLIN);
  assert_int_equal(ppoll(&fd, 1, &zero, NULL), 1);
  assert_int_equal(stats().parked, before.parked);
  assert_int_equal(stats().slept, before.slept);
  close_pair(p);
  return NULL;
}

static void test_ppoll_passes(void **state)
{
  (void)state;
  run_main(ppoll_main, NULL);
  /* Outside a fiber, libc's. */
  int p[2];
  assert_int_equal(pipe(p), 0);
  struct pollfd fd = {.fd = p[0], .events = POLLIN};
  struct timespec ms = {0, 1000 * 1000};
  assert_int_equal(ppoll(&fd, 1, &ms, NULL), 0);
  close_pair(p);
}

/* ---- select: what it does not count, exceptions, many fds ---- */

typedef struct oob {
  int fd;
  ssize_t r;
} oob;

static void *send_oob(void *arg)
{
  oob *o = arg;
  o->r = send(o->fd, "!", 1, MSG_OOB);
  return NULL;
}

static void *select_edges_main(void *arg)
{
  (void)arg;
  /* The read end of a pipe with no writer, watched for writing: poll(2)
   * says POLLHUP, which select does not count (never writable).  With a
   * readable pipe beside it, select waits for that one. */
  int hup[2], p[2];
  assert_int_equal(pipe(hup), 0);
  assert_int_equal(close(hup[1]), 0);
  assert_int_equal(pipe(p), 0);
  int n = (hup[0] > p[0] ? hup[0] : p[0]) + 1;
  fd_set rd, wr, krd, kwr;
  FD_ZERO(&rd);
  FD_ZERO(&wr);
  FD_SET(p[0], &rd);
  FD_SET(hup[0], &wr);
  krd = rd;
  kwr = wr;
  struct timeval ktv = {0, 0};
  assert_int_equal(raw_select(n, &krd, &kwr, NULL, &ktv), 0); /* the kernel: nothing */
  struct timeval tv = {0, 20 * 1000};
  assert_int_equal(select(n, &rd, &wr, NULL, &tv), 0);
  assert_false(FD_ISSET(p[0], &rd));
  assert_false(FD_ISSET(hup[0], &wr));
  FD_SET(p[0], &rd);
  FD_SET(hup[0], &wr);
  tdl_fiber_t w = spawn(poke, &p[1]);
  assert_int_equal(select(n, &rd, &wr, NULL, NULL), 1);
  join(w);
  assert_true(FD_ISSET(p[0], &rd));
  assert_false(FD_ISSET(hup[0], &wr));
  assert_int_equal(close(hup[0]), 0);
  close_pair(p);

  /* Urgent data is an exception, as the kernel's select says: looked at
   * from time to time (POLLPRI is not the loop's to watch), found once
   * another fiber has sent it. */
  struct sockaddr_in at;
  int l = tcp_listener(&at, 4);
  oob o = {.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  assert_int_equal(connect(o.fd, (struct sockaddr *)&at, sizeof at), 0);
  int s = accept(l, NULL, NULL);
  assert_true(s >= 0);
  fd_set ex, kex;
  FD_ZERO(&ex);
  FD_SET(s, &ex);
  struct timeval bound = {T_HANG / TDL_SEC, 0};
  tdl_hook_stats before = stats();
  w = spawn(send_oob, &o);
  assert_int_equal(select(s + 1, NULL, NULL, &ex, &bound), 1);
  join(w);
  assert_int_equal(o.r, 1);
  assert_true(FD_ISSET(s, &ex));
  assert_true(stats().slept > before.slept); /* it looked, it did not park */
  FD_ZERO(&kex);
  FD_SET(s, &kex);
  ktv = (struct timeval){0, 0};
  assert_int_equal(raw_select(s + 1, NULL, NULL, &kex, &ktv), 1); /* the kernel's answer */
  assert_true(FD_ISSET(s, &kex));
  assert_int_equal(close(s), 0);
  assert_int_equal(close(o.fd), 0);
  assert_int_equal(close(l), 0);

  /* More fds than the hook keeps on its stack. */
  enum { N = 70 };
  int q[N][2];
  FD_ZERO(&rd);
  n = 0;
  for (int i = 0; i < N; i++) {
    assert_int_equal(pipe(q[i]), 0);
    FD_SET(q[i][0], &rd);
    n = q[i][0] + 1 > n ? q[i][0] + 1 : n;
  }
  w = spawn(poke, &q[N / 2][1]);
  assert_int_equal(select(n, &rd, NULL, NULL, NULL), 1);
  join(w);
  for (int i = 0; i < N; i++)
    assert_true(!FD_ISSET(q[i][0], &rd) == (i != N / 2));
  for (int i = 0; i < N; i++)
    close_pair(q[i]);
  return NULL;
}

static void test_select_edges(void **state)
{
  (void)state;
  run_main(select_edges_main, NULL);
}

/* A set larger than FD_SETSIZE when no file can be opened (the fd limit
 * reached): the hook cannot read the fd table's size (/proc), and takes the
 * bits below the fd limit, where the fds of this test are. */
#define WIDE (FD_SETSIZE + 256)
#define WIDE_WORDS (WIDE / (8 * sizeof(unsigned long)))

static void *wide_main(void *arg)
{
  (void)arg;
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(write(p[1], "x", 1), 1);
  /* The lowest free number: every one below is open, so with the limit
   * there no file can be opened. */
  int free_fd = (int)syscall(SYS_fcntl, p[0], F_DUPFD, 0);
  assert_true(free_fd >= 0);
  assert_int_equal(raw_close(free_fd), 0);
  struct rlimit old, rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  rl = old;
  rl.rlim_cur = (rlim_t)free_fd;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
  unsigned long rd[WIDE_WORDS] = {0};
  rd[p[0] / (8 * sizeof *rd)] |= 1UL << (p[0] % (8 * sizeof *rd));
  struct timeval zero = {0, 0};
  int r = select(WIDE, (fd_set *)rd, NULL, NULL, &zero);
  int e = errno;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  errno = e;
  assert_int_equal(r, 1);
  assert_true((rd[p[0] / (8 * sizeof *rd)] >> (p[0] % (8 * sizeof *rd))) & 1);
  close_pair(p);
  return NULL;
}

static void test_select_wide_set_at_the_fd_limit(void **state)
{
  (void)state;
  run_main(wide_main, NULL);
}

/* ---- dup2 in a forked child onto an fd the parent's loop watches ---- */

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

static void *fork_dup2_main(void *arg)
{
  forked *fk = arg;
  assert_int_equal(pipe(fk->q), 0);
  tdl_fiber_t r = spawn(q_reader, fk);
  assert_int_equal(tdl_fiber_yield(), 0); /* r waits on q[0], which the loop watches */
  int other[2];
  assert_int_equal(pipe(other), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* The child, in the fiber that forked: dup2 onto the watched number is
     * dup2(2), and must leave the parent's registration alone.  Then exec,
     * as a child does (and so valgrind, where it runs, has no exit of the
     * forked copy of this process to check). */
    if (dup2(other[0], fk->q[0]) != fk->q[0] || raw_getfl(fk->q[0]) < 0)
      _exit(2);
    execl("/bin/sh", "sh", "-c", "exit 0", (char *)NULL);
    _exit(127);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* The reader still wakes. */
  assert_int_equal(write(fk->q[1], "k", 1), 1);
  join(r);
  assert_int_equal(fk->got, 'k');
  close_pair(other);
  close_pair(fk->q);
  return NULL;
}

static void test_fork_child_dup2(void **state)
{
  (void)state;
  forked fk = {0};
  run_main(fork_dup2_main, &fk);
}

/* ---- the statistics ---- */

static void test_stats_null(void **state)
{
  (void)state;
  tdl_hook_stats a = stats();
  tdl_hook_stats_get(NULL); /* nothing to fill: nothing done */
  tdl_hook_stats b = stats();
  assert_memory_equal(&a, &b, sizeof a);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_fds),
      cmocka_unit_test(test_close_of_a_closed_number),
      cmocka_unit_test(test_two_fibers_one_fd),
      cmocka_unit_test(test_outside_a_fiber_as_blocking),
      cmocka_unit_test(test_user_nonblocking_outside_a_fiber),
      cmocka_unit_test(test_connect_waits),
      cmocka_unit_test(test_connect_on_a_cut_connection),
      cmocka_unit_test(test_poll_edges),
      cmocka_unit_test(test_ppoll_passes),
      cmocka_unit_test(test_select_edges),
      cmocka_unit_test(test_select_wide_set_at_the_fd_limit),
      cmocka_unit_test(test_fork_child_dup2),
      cmocka_unit_test(test_stats_null),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
