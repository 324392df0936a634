/* SPDX-License-Identifier: MIT */
/*
 * Accepting ahead (fiber.h: tdl_fd_readahead on a listening socket;
 * src/fd/acceptahead.c): connections come out of tdl_net_accept
 * in arrival order with their peers' addresses; the kernel takes them off
 * the backlog only once an accept has found it empty; a listener nobody
 * accepts from holds a bounded number; tdl_close of the listener wakes the
 * acceptor and closes what was queued (their peers see it); a loop freed
 * while the accept is armed; turning it off; misuse.  Every test makes its
 * own uring loop and is skipped where io_uring is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"

enum { CLIENTS = 40, MANY = 120, BURST = 8 };

typedef struct net {
  tdl_loop *loop;
  int lfd;   /* -1 once a test closed it */
  struct sockaddr_in at;
  int p[2]; /* a pipe read through the ring meanwhile: keeps the loop polling its ring */
  int cl[MANY];
  int n;     /* clients connected */
  int got[MANY];
  int ngot;
  int rc, done;
} net;

static void listen_on(net *t, int backlog)
{
  t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(t->lfd >= 0);
  t->at = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof t->at;
  assert_int_equal(bind(t->lfd, (struct sockaddr *)&t->at, sizeof t->at), 0);
  assert_int_equal(listen(t->lfd, backlog), 0);
  assert_int_equal(getsockname(t->lfd, (struct sockaddr *)&t->at, &al), 0);
}

/* Connect n more clients (the kernel completes the handshake at once). */
static void connect_clients(net *t, int n)
{
  for (int i = 0; i < n; i++) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(c >= 0);
    assert_int_equal(connect(c, (struct sockaddr *)&t->at, sizeof t->at), 0);
    t->cl[t->n++] = c;
  }
}

static int local_port(int fd)
{
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  return ntohs(a.sin_port);
}

static void *ring_keeper(void *arg)
{
  net *t = arg;
  char c;
  assert_int_equal(tdl_read(t->p[0], &c, 1, TDL_FOREVER), 1);
  return NULL;
}

/* A fresh listener (of `backlog`) on a uring loop that runs `first` and,
 * if given, `second` (with the ring kept polled when `keeper`) until they
 * return.  The test checks t, then net_done(t). */
static net *net_run(int backlog, bool keeper, tdl_fiber_fn first, tdl_fiber_fn second)
{
  net *t = calloc(1, sizeof *t);
  assert_non_null(t);
  t->loop = t_ring_loop();
  if (!t->loop) {
    free(t);
    skip();
  }
  listen_on(t, backlog);
  t_pipe(t->p);
  if (keeper)
    t_spawn(t->loop, ring_keeper, t);
  t_spawn(t->loop, first, t);
  if (second)
    t_spawn(t->loop, second, t);
  assert_int_equal(tdl_loop_run(t->loop, TDL_LOOP_DEFAULT), 0);
  return t;
}

/* Close what the test left open, free the loop (nothing may be left on
 * it) and t. */
static void net_done(net *t)
{
  for (int i = 0; i < t->ngot; i++)
    tdl_close(t->got[i]);
  for (int i = 0; i < t->n; i++)
    close(t->cl[i]);
  tdl_close(t->p[0]);
  tdl_close(t->p[1]);
  if (t->lfd >= 0)
    tdl_close(t->lfd);
  assert_int_equal(tdl_loop_free(t->loop), 0);
  free(t);
}

/* ---- in order, with addresses; off the backlog only once it was empty ---- */

static void *acceptor(void *arg)
{
  net *t = arg;
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0); /* twice: still one */
  /* Connections already waiting: ordinary accepts, and nothing armed, so
   * what comes next stays in the kernel's backlog. */
  connect_clients(t, 2);
  for (int i = 0; i < 2; i++)
    assert_true((t->got[t->ngot++] = tdl_net_accept(t->lfd, NULL, TDL_FOREVER)) >= 0);
  connect_clients(t, 1);
  assert_int_equal(tdl_sleep(tdl_after(5 * TDL_MSEC)), 0);
  int raw = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  assert_true(raw >= 0);
  t->got[t->ngot++] = raw;
  /* An accept that finds nothing arms it (and times out, losing nothing)... */
  assert_int_equal(tdl_net_accept(t->lfd, NULL, tdl_after(5 * TDL_MSEC)), -ETIMEDOUT);
  /* ...and from then on the kernel accepts ahead: the backlog stays empty. */
  int first = t->n;
  connect_clients(t, CLIENTS);
  assert_int_equal(tdl_sleep(tdl_after(10 * TDL_MSEC)), 0);
  assert_int_equal(accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), -1);
  assert_int_equal(errno, EAGAIN);
  for (int i = first; i < t->n; i++) {
    tdl_addr peer;
    int fd = tdl_net_accept(t->lfd, &peer, TDL_FOREVER);
    assert_true(fd >= 0);
    t->got[t->ngot++] = fd;
    assert_true(peer.len > 0);
    assert_int_equal(tdl_addr_port(&peer), local_port(t->cl[i])); /* in arrival order */
    assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    /* A working connection: a byte each way. */
    char b;
    assert_int_equal(tdl_send(fd, "x", 1, 0, TDL_FOREVER), 1);
    assert_int_equal(recv(t->cl[i], &b, 1, 0), 1);
    assert_int_equal(send(t->cl[i], "y", 1, 0), 1);
    assert_int_equal(tdl_recv(fd, &b, 1, 0, TDL_FOREVER), 1);
    assert_int_equal(b, 'y');
  }
  assert_int_equal(write(t->p[1], "x", 1), 1);
  t->done = 1;
  return NULL;
}

static void in_order_with_addresses(void **state)
{
  (void)state;
  net *t = net_run(256, true, acceptor, NULL);
  assert_true(t->done);
  assert_int_equal(t->ngot, 3 + CLIENTS);
  net_done(t);
}

/* ---- nobody accepting: a bounded number held, the rest in the backlog ---- */

static void *idle_acceptor(void *arg)
{
  net *t = arg;
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  assert_int_equal(tdl_net_accept(t->lfd, NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT); /* armed */
  /* Connections come in bursts of BURST.  The kernel accepts a burst
   * whole; once HOLD (32) are queued the accept is cancelled, and the
   * rest stay in the kernel's backlog, where accept4 finds them. */
  for (int i = 0; i < MANY / BURST; i++) {
    connect_clients(t, BURST);
    assert_int_equal(tdl_sleep(tdl_after(2 * TDL_MSEC)), 0);
  }
  int raw = 0, fd;
  while ((fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
    t->got[t->ngot++] = fd;
    raw++;
  }
  assert_true(raw >= MANY - 32 - 2 * BURST);
  /* What was accepted ahead is still there, none lost. */
  while (t->ngot < MANY && (fd = tdl_net_accept(t->lfd, NULL, tdl_after(50 * TDL_MSEC))) >= 0)
    t->got[t->ngot++] = fd;
  assert_int_equal(t->ngot, MANY);
  assert_int_equal(write(t->p[1], "x", 1), 1);
  t->done = 1;
  return NULL;
}

static void a_listener_nobody_accepts_from(void **state)
{
  (void)state;
  net *t = net_run(512, true, idle_acceptor, NULL);
  assert_true(t->done);
  net_done(t);
}

/* ---- tdl_close of the listener: queued connections closed, acceptor woken ---- */

/* Whether the peer of client c has gone: EOF or a reset, within a second. */
static bool peer_gone(int c)
{
  struct pollfd pfd = {.fd = c, .events = POLLIN};
  if (poll(&pfd, 1, 1000) != 1)
    return false;
  char b;
  ssize_t n = recv(c, &b, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void *closing_acceptor(void *arg)
{
  net *t = arg;
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  assert_int_equal(tdl_net_accept(t->lfd, NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT); /* armed */
  connect_clients(t, 5);
  assert_int_equal(tdl_sleep(tdl_after(5 * TDL_MSEC)), 0);
  assert_int_equal(accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), -1); /* all taken ahead */
  for (int i = 0; i < 2; i++)
    assert_true((t->got[t->ngot++] = tdl_net_accept(t->lfd, NULL, TDL_FOREVER)) >= 0);
  /* Three stay queued: closing the listener closes them, and the listener
   * itself really goes (the armed accept held it open). */
  int fds = t_count_fds();
  assert_int_equal(tdl_close(t->lfd), 0);
  t->lfd = -1;
  assert_int_equal(t_count_fds(), fds - 4);
  for (int i = 2; i < 5; i++)
    assert_true(peer_gone(t->cl[i]));
  int late = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_int_equal(connect(late, (struct sockaddr *)&t->at, sizeof t->at), -1);
  assert_int_equal(errno, ECONNREFUSED);
  close(late);
  assert_int_equal(write(t->p[1], "x", 1), 1);
  t->done = 1;
  return NULL;
}

static void close_with_connections_queued(void **state)
{
  (void)state;
  net *t = net_run(64, true, closing_acceptor, NULL);
  assert_true(t->done);
  net_done(t);
}

static void *parked_acceptor(void *arg)
{
  net *t = arg;
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  t->rc = 1;
  t->rc = tdl_net_accept(t->lfd, NULL, TDL_FOREVER); /* finds nothing: armed, parked */
  t->done = 1;
  return NULL;
}

static void *listener_closer(void *arg)
{
  net *t = arg;
  tdl_fiber_yield(); /* the acceptor is parked */
  tdl_fiber_yield();
  assert_int_equal(t->rc, 1);
  assert_int_equal(tdl_close(t->lfd), 0);
  t->lfd = -1;
  return NULL;
}

static void close_wakes_the_acceptor(void **state)
{
  (void)state;
  net *t = net_run(64, false, parked_acceptor, listener_closer);
  assert_true(t->done);
  assert_int_equal(t->rc, -EBADF);
  net_done(t);
}

/* ---- tdl_fd_wait on a listener that accepts ahead ---- */

static void *waiting_acceptor(void *arg)
{
  net *t = arg;
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  assert_int_equal(tdl_net_accept(t->lfd, NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT); /* armed */
  t->rc = 1;
  /* Readable once a connection is queued here (a poll of the listener
   * would not see it: the armed accept takes it off the backlog). */
  assert_int_equal(tdl_fd_wait(t->lfd, TDL_READ, tdl_after(10 * TDL_SEC)), TDL_READ);
  assert_true((t->got[t->ngot++] = tdl_net_accept(t->lfd, NULL, TDL_MSEC)) >= 0);
  /* And a wait that times out. */
  assert_int_equal(tdl_fd_wait(t->lfd, TDL_READ, tdl_after(2 * TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(write(t->p[1], "x", 1), 1);
  t->done = 1;
  return NULL;
}

static void *late_client(void *arg)
{
  net *t = arg;
  while (t->rc != 1)
    tdl_fiber_yield();
  assert_int_equal(tdl_sleep(tdl_after(2 * TDL_MSEC)), 0); /* the acceptor waits meanwhile */
  connect_clients(t, 1);
  return NULL;
}

static void wait_fd_sees_what_is_accepted_ahead(void **state)
{
  (void)state;
  net *t = net_run(64, true, waiting_acceptor, late_client);
  assert_true(t->done);
  net_done(t);
}

/* ---- a loop freed while the accept is armed; turning it off; misuse ---- */

static void *arm_and_leave(void *arg)
{
  net *t = arg;
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  assert_int_equal(tdl_net_accept(t->lfd, NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  return NULL; /* the accept stays armed; the listener is not closed */
}

static void loop_freed_while_armed(void **state)
{
  (void)state;
  for (int round = 0; round < 3; round++) { /* the ring is reused by the next loop */
    T_RING_LOOP(loop);
    net *t = calloc(1, sizeof *t);
    listen_on(t, 64);
    t_spawn(loop, arm_and_leave, t);
    assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
    assert_int_equal(tdl_loop_free(loop), 0);
    /* The accept is over: a connection now stays in the backlog. */
    connect_clients(t, 1);
    int fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(fd >= 0);
    close(fd);
    close(t->cl[0]);
    close(t->lfd);
    free(t);
  }
}

static void *off_fiber(void *arg)
{
  net *t = arg;
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  assert_int_equal(tdl_net_accept(t->lfd, NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT); /* armed */
  connect_clients(t, 3);
  assert_int_equal(tdl_sleep(tdl_after(5 * TDL_MSEC)), 0);
  /* Off: what was accepted ahead is still taken first, then accept4. */
  assert_int_equal(tdl_fd_readahead(t->lfd, false), 0);
  connect_clients(t, 2);
  for (int i = 0; i < 5; i++) {
    tdl_addr peer;
    int fd = tdl_net_accept(t->lfd, &peer, TDL_FOREVER);
    assert_true(fd >= 0);
    t->got[t->ngot++] = fd;
    assert_int_equal(tdl_addr_port(&peer), local_port(t->cl[i]));
  }
  assert_int_equal(tdl_fd_readahead(t->lfd, false), 0); /* off again: nothing to do */
  assert_int_equal(write(t->p[1], "x", 1), 1);
  t->done = 1;
  return NULL;
}

static void turning_it_off(void **state)
{
  (void)state;
  net *t = net_run(64, true, off_fiber, NULL);
  assert_true(t->done);
  net_done(t);
}

static void *two_acceptors(void *arg)
{
  net *t = arg;
  tdl_fiber_yield(); /* parked_acceptor is parked in its accept */
  assert_int_equal(tdl_net_accept(t->lfd, NULL, TDL_FOREVER), -EBUSY);
  assert_int_equal(tdl_fd_readahead(t->lfd, true), 0);
  connect_clients(t, 1); /* wakes the first */
  return NULL;
}

static void one_acceptor_at_a_time(void **state)
{
  (void)state;
  net *t = net_run(64, false, parked_acceptor, two_acceptors);
  assert_true(t->done);
  assert_true(t->rc >= 0);
  t->got[t->ngot++] = t->rc;
  net_done(t);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(in_order_with_addresses),
      cmocka_unit_test(a_listener_nobody_accepts_from),
      cmocka_unit_test(close_with_connections_queued),
      cmocka_unit_test(close_wakes_the_acceptor),
      cmocka_unit_test(wait_fd_sees_what_is_accepted_ahead),
      cmocka_unit_test(loop_freed_while_armed),
      cmocka_unit_test(turning_it_off),
      cmocka_unit_test(one_acceptor_at_a_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
