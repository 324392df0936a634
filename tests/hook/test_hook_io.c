/* SPDX-License-Identifier: MIT */
/* libtreadle-hook: every intercepted I/O call, each way it can go
 * (include/treadle/hook.h).  On a blocking socket in a fiber each receive
 * parks until data comes and each send until there is room; each gives
 * EAGAIN when the user's SO_RCVTIMEO or SO_SNDTIMEO runs out; each fails
 * with ECONNABORTED on a connection a cancel cut, also with MSG_DONTWAIT
 * and from outside a fiber; outside a fiber each waits as the blocking
 * call would.  Linked with libtreadle-hook, so every call below is the
 * hook's.  That a call parked shows in the hook's `parked` count. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "hook_helpers.h"
#include <treadle/hook.h>

/* ---- the calls, by number ---- */

enum { READ, READV, RECV, RECVFROM, RECVMSG, NRECV };
enum { WRITE, WRITEV, SEND, SENDTO, SENDMSG, NSEND };
static const char *const recv_name[NRECV] = {"read", "readv", "recv", "recvfrom", "recvmsg"};
static const char *const send_name[NSEND] = {"write", "writev", "send", "sendto", "sendmsg"};

/* Receive up to n bytes into b with call `which` (flags where it takes
 * them); errno as the call left it. */
static ssize_t recv_by(int which, int fd, char *b, size_t n, int flags)
{
  struct iovec iov = {b, n};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  switch (which) {
  case READ:
    return read(fd, b, n);
  case READV:
    return readv(fd, &iov, 1);
  case RECV:
    return recv(fd, b, n, flags);
  case RECVFROM:
    return recvfrom(fd, b, n, flags, NULL, NULL);
  case RECVMSG:
    return recvmsg(fd, &m, flags);
  default:
    fail();
  }
  return -2;
}

static ssize_t send_by(int which, int fd, const char *b, size_t n, int flags)
{
  struct iovec iov = {(void *)b, n};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  switch (which) {
  case WRITE:
    return write(fd, b, n);
  case WRITEV:
    return writev(fd, &iov, 1);
  case SEND:
    return send(fd, b, n, flags);
  case SENDTO:
    return sendto(fd, b, n, flags, NULL, 0);
  case SENDMSG:
    return sendmsg(fd, &m, flags);
  default:
    fail();
  }
  return -2;
}

/* Fills fd's send buffer (and the peer's receive buffer): the bytes it
 * took. */
static size_t fill(int fd)
{
  static char junk[65536];
  size_t total = 0;
  ssize_t n;
  while ((n = send(fd, junk, sizeof junk, MSG_DONTWAIT)) > 0)
    total += (size_t)n;
  assert_int_equal(n, -1);
  assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
  return total;
}

/* Reads exactly n bytes of fd (parking as need be). */
static void drain(int fd, size_t n)
{
  static char sink[65536];
  while (n > 0) {
    ssize_t r = read(fd, sink, n < sizeof sink ? n : sizeof sink);
    assert_true(r > 0);
    n -= (size_t)r;
  }
}

/* ---- in a fiber, on a blocking socket: park, then the data ---- */

typedef struct peer {
  int fd;
  size_t n; /* drainer: bytes to read */
} peer;

static void *poke(void *arg)
{
  peer *p = arg;
  assert_int_equal(write(p->fd, "!", 1), 1);
  return NULL;
}

static void *drainer(void *arg)
{
  peer *p = arg;
  drain(p->fd, p->n);
  return NULL;
}

static void *park_main(void *arg)
{
  (void)arg;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  for (int k = 0; k < NRECV; k++) {
    print_message("      %s\n", recv_name[k]);
    peer p = {.fd = sv[1]};
    uint64_t before = parked();
    tdl_fiber_t w = spawn(poke, &p);
    char b[8] = {0};
    assert_int_equal(recv_by(k, sv[0], b, sizeof b, 0), 1); /* parks: poke has not run */
    join(w);
    assert_int_equal(b[0], '!');
    assert_true(parked() > before);
  }
  for (int k = 0; k < NSEND; k++) {
    print_message("      %s\n", send_name[k]);
    /* A full buffer: the send waits for the peer to read what filled it,
     * then sends all of its 100 bytes. */
    peer p = {.fd = sv[1], .n = fill(sv[0])};
    uint64_t before = parked();
    tdl_fiber_t w = spawn(drainer, &p);
    char b[100];
    memset(b, 'a' + k, sizeof b);
    assert_int_equal(send_by(k, sv[0], b, sizeof b, 0), (ssize_t)sizeof b);
    join(w);
    assert_true(parked() > before);
    char got[100];
    assert_int_equal(recv(sv[1], got, sizeof got, MSG_WAITALL), (ssize_t)sizeof got);
    assert_memory_equal(got, b, sizeof b);
  }
  /* The user still sees a blocking socket. */
  assert_false(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
  close_pair(sv);
  return NULL;
}

static void test_calls_park(void **state)
{
  (void)state;
  run_main(park_main, NULL);
}

/* ---- SO_RCVTIMEO and SO_SNDTIMEO: EAGAIN, as the blocking socket ---- */

typedef struct timeo_answers {
  ssize_t recv_r[NRECV], send_r[NSEND], accept_r;
  int recv_e[NRECV], send_e[NSEND], accept_e;
} timeo_answers;

static void timeouts(timeo_answers *a)
{
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  set_timeo(sv[0], SO_RCVTIMEO, 10);
  set_timeo(sv[0], SO_SNDTIMEO, 10);
  char b[100] = {0};
  for (int k = 0; k < NRECV; k++) {
    a->recv_r[k] = recv_by(k, sv[0], b, sizeof b, 0);
    a->recv_e[k] = errno;
  }
  fill(sv[0]);
  for (int k = 0; k < NSEND; k++) {
    a->send_r[k] = send_by(k, sv[0], b, sizeof b, 0);
    a->send_e[k] = errno;
  }
  close_pair(sv);
  /* accept too waits under SO_RCVTIMEO. */
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(l, (struct sockaddr *)&at, sizeof at), 0);
  assert_int_equal(listen(l, 4), 0);
  set_timeo(l, SO_RCVTIMEO, 10);
  a->accept_r = accept(l, NULL, NULL);
  a->accept_e = errno;
  assert_int_equal(close(l), 0);
}

static void *timeouts_main(void *arg)
{
  timeouts(arg);
  return NULL;
}

static void check_timeouts(const timeo_answers *a)
{
  for (int k = 0; k < NRECV; k++) {
    assert_int_equal(a->recv_r[k], -1);
    assert_int_equal(a->recv_e[k], EAGAIN);
  }
  for (int k = 0; k < NSEND; k++) {
    assert_int_equal(a->send_r[k], -1);
    assert_int_equal(a->send_e[k], EAGAIN);
  }
  assert_int_equal(a->accept_r, -1);
  assert_int_equal(a->accept_e, EAGAIN);
}

static void test_timeouts(void **state)
{
  (void)state;
  timeo_answers in, out;
  run_main(timeouts_main, &in);
  timeouts(&out); /* the kernel's blocking calls */
  check_timeouts(&out);
  check_timeouts(&in);
}

/* ---- a connection a cancel cut: every call fails ---- */

typedef struct cut_ctx {
  int c, a; /* the connection's two ends */
  int r, err;
} cut_ctx;

static void *cut_reader(void *arg)
{
  cut_ctx *x = arg;
  char b;
  x->r = (int)read(x->c, &b, 1); /* waits for a reply: cancelled */
  x->err = errno;
  return NULL;
}

/* Every call on fd, with and without MSG_DONTWAIT: -1, ECONNABORTED. */
static void check_cut(int fd)
{
  char b[4] = "abc";
  for (int dontwait = 0; dontwait < 2; dontwait++) {
    int flags = dontwait ? MSG_DONTWAIT : 0;
    for (int k = 0; k < NRECV; k++) {
      if (flags && k < RECV)
        continue; /* read and readv take no flags */
      errno = 0;
      assert_int_equal(recv_by(k, fd, b, sizeof b, flags), -1);
      assert_int_equal(errno, ECONNABORTED);
    }
    for (int k = 0; k < NSEND; k++) {
      if (flags && k < SEND)
        continue;
      errno = 0;
      assert_int_equal(send_by(k, fd, b, sizeof b, flags), -1);
      assert_int_equal(errno, ECONNABORTED);
    }
  }
  errno = 0;
  assert_int_equal(recv(fd, b, sizeof b, MSG_WAITALL), -1);
  assert_int_equal(errno, ECONNABORTED);
}

static void *cut_main(void *arg)
{
  cut_ctx *x = arg;
  tdl_fiber_t r = spawn(cut_reader, x);
  assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), r), 0);
  join(r);
  assert_int_equal(x->r, -1);
  assert_int_equal(x->err, ECANCELED);
  /* The reply comes late; no call may hand it to the next request. */
  assert_int_equal(write(x->a, "late", 4), 4);
  check_cut(x->c);
  return NULL;
}

static void test_cut_connection(void **state)
{
  (void)state;
  cut_ctx x;
  t_tcp_pair(&x.c, &x.a);
  run_main(cut_main, &x);
  check_cut(x.c); /* from outside a fiber too */
  /* A dup of the number is the same connection, cut too; close clears. */
  int d = dup(x.c);
  assert_true(d >= 0);
  check_cut(d);
  assert_int_equal(close(d), 0);
  assert_int_equal(close(x.c), 0);
  assert_int_equal(close(x.a), 0);
}

/* ---- accept and accept4 park until a client comes ---- */

typedef struct client {
  struct sockaddr_in at;
  int fd;
} client;

static void *dialer(void *arg)
{
  client *c = arg;
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_int_equal(connect(c->fd, (struct sockaddr *)&c->at, sizeof c->at), 0);
  return NULL;
}

static void *accept_main(void *arg)
{
  (void)arg;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  client c = {.at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}};
  socklen_t al = sizeof c.at;
  assert_int_equal(bind(l, (struct sockaddr *)&c.at, sizeof c.at), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&c.at, &al), 0);
  assert_int_equal(listen(l, 4), 0);
  for (int k = 0; k < 2; k++) {
    uint64_t before = parked();
    tdl_fiber_t w = spawn(dialer, &c);
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    int a = k == 0 ? accept(l, (struct sockaddr *)&from, &fl)
                   : accept4(l, (struct sockaddr *)&from, &fl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    assert_true(a >= 0);
    join(w);
    assert_true(parked() > before);
    assert_int_equal(from.sin_family, AF_INET);
    /* accept4's SOCK_NONBLOCK is the user's: the fd says so, and its
     * EAGAIN is the user's to handle. */
    assert_int_equal((fcntl(a, F_GETFL) & O_NONBLOCK) != 0, k == 1);
    char b;
    if (k == 1) {
      assert_int_equal(read(a, &b, 1), -1);
      assert_int_equal(errno, EAGAIN);
    }
    assert_int_equal(close(a), 0);
    assert_int_equal(close(c.fd), 0);
  }
  assert_int_equal(close(l), 0);
  return NULL;
}

static void test_accept_parks(void **state)
{
  (void)state;
  run_main(accept_main, NULL);
}

/* ---- MSG_WAITALL with recvfrom: all of it, or what came before the end ---- */

static void *waitall_main(void *arg)
{
  (void)arg;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  peer p = {.fd = sv[1]};
  assert_int_equal(write(sv[1], "ab", 2), 2);
  tdl_fiber_t w = spawn(poke, &p);
  char b[8] = {0};
  assert_int_equal(recvfrom(sv[0], b, 3, MSG_WAITALL, NULL, NULL), 3); /* waits for the third */
  join(w);
  assert_memory_equal(b, "ab!", 3);
  /* Two bytes, then the end of the stream: those two. */
  assert_int_equal(write(sv[1], "cd", 2), 2);
  assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
  assert_int_equal(recvfrom(sv[0], b, sizeof b, MSG_WAITALL, NULL, NULL), 2);
  assert_memory_equal(b, "cd", 2);
  /* At the end already: 0. */
  assert_int_equal(recvfrom(sv[0], b, sizeof b, MSG_WAITALL, NULL, NULL), 0);
  close_pair(sv);
  return NULL;
}

static void test_recvfrom_waitall(void **state)
{
  (void)state;
  run_main(waitall_main, NULL);
}

/* ---- outside a fiber, on a socket made non-blocking underneath ---- */

static void *hook_it(void *arg)
{
  int *sv = arg;
  peer p = {.fd = sv[1]};
  tdl_fiber_t w = spawn(poke, &p);
  char c;
  assert_int_equal(read(sv[0], &c, 1), 1); /* O_NONBLOCK underneath from here */
  join(w);
  return NULL;
}

static void *late_poke(void *arg)
{
  struct timespec ms = {0, 2 * 1000 * 1000};
  nanosleep(&ms, NULL); /* the reader is (likely) waiting by then: not needed for correctness */
  assert_int_equal(write(*(int *)arg, "!", 1), 1);
  return NULL;
}

static void test_outside_a_fiber_waits(void **state)
{
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  run_main(hook_it, sv);
  assert_true(syscall(SYS_fcntl, sv[0], F_GETFL, 0) & O_NONBLOCK);
  /* Each receive waits for the thread's byte, as on the blocking socket
   * the user has: no EAGAIN reaches the caller. */
  for (int k = 0; k < NRECV; k++) {
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_poke, &sv[1]), 0);
    char b[4] = {0};
    assert_int_equal(recv_by(k, sv[0], b, sizeof b, 0), 1);
    assert_int_equal(b[0], '!');
    assert_int_equal(pthread_join(t, NULL), 0);
  }
  close_pair(sv);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_calls_park),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_cut_connection),
      cmocka_unit_test(test_accept_parks),
      cmocka_unit_test(test_recvfrom_waitall),
      cmocka_unit_test(test_outside_a_fiber_waits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
