/* SPDX-License-Identifier: MIT */
/* libtreadle-hook: a library that keeps its fd non-blocking reads until the
 * stream is empty, then polls (libpq, MariaDB Connector/C).  Its reads pass
 * through the hook, which notes when one found the stream empty so that the
 * poll after it parks at once instead of asking the kernel first
 * (src/hook/poll.c, poll_drained).  What that shortcut must keep: a poll
 * never says readable when nothing came, never parks when something is
 * there, and never misses what comes.  Each test runs on a pipe, a Unix
 * stream socket pair and a TCP connection, made non-blocking by the user. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"
#include "hook_helpers.h"
#include <treadle/hook.h>

enum { PIPE, UNIX_PAIR, TCP, KINDS };

typedef struct stream {
  int kind;
  int rd, wr;     /* rd: the library's end, non-blocking by the user */
  int poll_r;     /* the last poll's answer */
  short revents;  /* and its revents */
  int poll_errno;
} stream;

static void open_stream(stream *s, int kind)
{
  *s = (stream){.kind = kind};
  int fds[2];
  if (kind == PIPE) {
    assert_int_equal(pipe(fds), 0);
    s->rd = fds[0];
    s->wr = fds[1];
  } else if (kind == UNIX_PAIR) {
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    s->rd = fds[0];
    s->wr = fds[1];
  } else {
    t_tcp_pair(&s->rd, &s->wr);
  }
  assert_int_equal(fcntl(s->rd, F_SETFL, fcntl(s->rd, F_GETFL) | O_NONBLOCK), 0);
}

static void close_stream(stream *s)
{
  if (s->rd >= 0)
    close(s->rd);
  if (s->wr >= 0)
    close(s->wr);
}

/* Poll s->rd for reading, from a fiber of its own. */
static void *poller(void *arg)
{
  stream *s = arg;
  struct pollfd p = {.fd = s->rd, .events = POLLIN | POLLERR};
  s->poll_r = poll(&p, 1, -1);
  s->poll_errno = errno;
  s->revents = p.revents;
  return NULL;
}

/* Poll s->rd for reading beside a pipe where nothing comes. */
static void *two_poller(void *arg)
{
  stream *s = arg;
  int quiet[2];
  assert_int_equal(pipe(quiet), 0);
  struct pollfd p[2] = {{.fd = quiet[0], .events = POLLIN}, {.fd = s->rd, .events = POLLIN}};
  s->poll_r = poll(p, 2, -1);
  s->revents = p[1].revents;
  close(quiet[0]);
  close(quiet[1]);
  return NULL;
}

/* Park a poller on s->rd, then write `msg` from this fiber: the poll ends
 * with it, through the loop (the readiness it reports is taken). */
static void poll_parked_until(stream *s, const char *msg, size_t n)
{
  tdl_fiber_t f;
  uint64_t before = parked();
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), poller, s, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0); /* it looks, finds nothing, parks */
  assert_true(parked() > before);
  assert_int_equal(write(s->wr, msg, n), (ssize_t)n);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  assert_int_equal(s->poll_r, 1);
  assert_true(s->revents & POLLIN);
}

/* ---- nothing there: the poll waits, and says readable only for new data ---- */

static void *stale_main(void *arg)
{
  int kind = (int)(intptr_t)arg;
  stream s;
  open_stream(&s, kind);
  char b[64];
  poll_parked_until(&s, "a", 1);
  /* More comes, and the loop sees it (it polls while this fiber sleeps)
   * before the library reads it all: a short read, the stream empty. */
  assert_int_equal(write(s.wr, "b", 1), 1);
  assert_int_equal(tdl_sleep(tdl_after(2 * TDL_MSEC)), 0);
  assert_int_equal(read(s.rd, b, sizeof b), 2);
  assert_memory_equal(b, "ab", 2);
  /* The loop's report of "b" is used up: a poll now must wait, and say
   * nothing is there when its timeout passes. */
  struct pollfd p = {.fd = s.rd, .events = POLLIN | POLLERR};
  assert_int_equal(poll(&p, 1, 50), 0);
  assert_int_equal(p.revents, 0);
  assert_int_equal(read(s.rd, b, sizeof b), -1);
  assert_int_equal(errno, EAGAIN);
  /* After that EAGAIN, the same: a wait, then nothing. */
  assert_int_equal(poll(&p, 1, 20), 0);
  close_stream(&s);
  return NULL;
}

static void test_no_readiness_after_the_stream_was_emptied(void **state)
{
  (void)state;
  for (int k = 0; k < KINDS; k++)
    assert_int_equal(tdl_fiber_main(stale_main, (void *)(intptr_t)k, NULL), 0);
}

/* ---- data there: the poll answers without parking ---- */

static void *rest_main(void *arg)
{
  int kind = (int)(intptr_t)arg;
  stream s;
  open_stream(&s, kind);
  char b[64];
  poll_parked_until(&s, "0123456789abcdefghij", 20);
  /* A read that fills its buffer leaves the rest: the stream is not known
   * to be empty, and the poll must find the rest at once, no park. */
  assert_int_equal(read(s.rd, b, 8), 8);
  struct pollfd p = {.fd = s.rd, .events = POLLIN | POLLERR};
  uint64_t before = parked();
  assert_int_equal(poll(&p, 1, -1), 1);
  assert_true(p.revents & POLLIN);
  assert_int_equal(parked(), before);
  assert_int_equal(read(s.rd, b, sizeof b), 12);
  assert_memory_equal(b, "89abcdefghij", 12);
  /* Emptied (EAGAIN), then a poll of two fds takes the loop's report of
   * new data and says readable; the library reads nothing yet.  A poll of
   * the one fd then must find the data at once: the emptying is old news. */
  assert_int_equal(read(s.rd, b, sizeof b), -1);
  assert_int_equal(errno, EAGAIN);
  s.poll_r = 0;
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), two_poller, &s, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(write(s.wr, "e", 1), 1);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  assert_int_equal(s.poll_r, 1);
  assert_true(s.revents & POLLIN);
  before = parked();
  assert_int_equal(poll(&p, 1, -1), 1);
  assert_true(p.revents & POLLIN);
  assert_int_equal(parked(), before);
  assert_int_equal(read(s.rd, b, sizeof b), 1);
  close_stream(&s);
  return NULL;
}

static void test_a_full_read_leaves_the_rest_readable(void **state)
{
  (void)state;
  for (int k = 0; k < KINDS; k++)
    assert_int_equal(tdl_fiber_main(rest_main, (void *)(intptr_t)k, NULL), 0);
}

/* ---- what comes after the stream was emptied is never missed ---- */

static void *arrival_main(void *arg)
{
  int kind = (int)(intptr_t)arg;
  stream s;
  open_stream(&s, kind);
  char b[64];
  poll_parked_until(&s, "a", 1);
  assert_int_equal(read(s.rd, b, sizeof b), 1);
  /* Data comes before the poll, with no poll of the loop in between: the
   * poll parks (the stream was emptied) and must wake for it. */
  assert_int_equal(write(s.wr, "c", 1), 1);
  struct pollfd p = {.fd = s.rd, .events = POLLIN | POLLRDNORM};
  assert_int_equal(poll(&p, 1, (int)(T_HANG / TDL_MSEC)), 1);
  assert_int_equal(p.revents, POLLIN | POLLRDNORM);
  assert_int_equal(read(s.rd, b, sizeof b), 1);
  /* And data that comes while it is parked (another fiber's write). */
  poll_parked_until(&s, "d", 1);
  assert_int_equal(read(s.rd, b, sizeof b), 1);
  assert_int_equal(b[0], 'd');
  /* The writer hangs up while the poll is parked: the kernel's answer
   * (readable, the end of the stream), and the read says so. */
  assert_int_equal(read(s.rd, b, sizeof b), -1);
  assert_int_equal(errno, EAGAIN);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), poller, &s, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0);
  close(s.wr);
  s.wr = -1;
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  assert_int_equal(s.poll_r, 1);
  assert_true(s.revents & (POLLIN | POLLHUP));
  assert_int_equal(read(s.rd, b, sizeof b), 0);
  close_stream(&s);
  return NULL;
}

static void test_what_comes_after_is_never_missed(void **state)
{
  (void)state;
  for (int k = 0; k < KINDS; k++)
    assert_int_equal(tdl_fiber_main(arrival_main, (void *)(intptr_t)k, NULL), 0);
}

/* ---- a cancel in that park cuts the connection as any other ---- */

static void *cancel_main(void *arg)
{
  (void)arg;
  stream s;
  open_stream(&s, TCP);
  char b[64];
  poll_parked_until(&s, "a", 1);
  assert_int_equal(read(s.rd, b, sizeof b), 1);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), poller, &s, NULL), 0);
  assert_int_equal(tdl_fiber_yield(), 0);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  assert_int_equal(s.poll_r, -1);
  assert_int_equal(s.poll_errno, ECANCELED);
  assert_int_equal(write(s.wr, "late", 4), 4);
  assert_int_equal(recv(s.rd, b, sizeof b, 0), -1);
  assert_int_equal(errno, ECONNABORTED);
  close_stream(&s);
  return NULL;
}

static void test_cancel_in_the_park_cuts(void **state)
{
  (void)state;
  assert_int_equal(tdl_fiber_main(cancel_main, NULL, NULL), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_no_readiness_after_the_stream_was_emptied),
    cmocka_unit_test(test_a_full_read_leaves_the_rest_readable),
    cmocka_unit_test(test_what_comes_after_is_never_missed),
    cmocka_unit_test(test_cancel_in_the_park_cuts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
