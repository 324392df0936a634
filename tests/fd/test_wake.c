/* SPDX-License-Identifier: MIT */
/*
 * A fiber parked on I/O wakes when the I/O is ready: readiness that comes
 * while the fiber waits for something else is kept for the call that wants
 * it.  Each test stages one order of events that a shortcut of fiber I/O
 * (a read that parks without a system call after a short one, readiness the
 * loop cached) could get wrong, on a Unix stream socket and over TCP.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#define WAIT (5 * TDL_SEC)

/* s: the end the fibers use; p: the peer, driven by plain calls. */
static int s, p;
static int stage;

static void pair_unix(void)
{
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  s = sv[0];
  p = sv[1];
}

static void pair_tcp(void)
{
  t_tcp_pair(&s, &p);
  assert_int_equal(fcntl(p, F_SETFL, O_NONBLOCK), 0);
}

static void close_pair(void)
{
  tdl_close(s);
  close(p);
}

/* Fill s's way out with plain writes until the kernel takes no more. */
static void fill(int fd)
{
  static char junk[65536];
  while (write(fd, junk, sizeof junk) > 0)
    ;
  assert_int_equal(errno, EAGAIN);
}

/* Fill fd's way out so that no room comes back until the peer reads.  On
 * TCP, room does come back after write() said EAGAIN: what was written
 * keeps moving into the peer's receive buffer as acks and window updates
 * arrive (in ksoftirqd, late, on a busy machine).  So fill again until a
 * bounded wait sees no room come: then the peer's buffer is full too. */
static void fill_for_good(int fd)
{
  struct pollfd pf = {.fd = fd, .events = POLLOUT};
  do
    fill(fd);
  while (poll(&pf, 1, 500) > 0);
}

/* Make s's registration report edges: s non-blocking, its way out filled,
 * and a write that waits until the peer drains (stage 1); stage 2 then. */
static void edges_from_here(void)
{
  assert_int_equal(fcntl(s, F_SETFL, O_NONBLOCK), 0);
  fill(s);
  stage = 1;
  assert_int_equal(tdl_write(s, "x", 1, tdl_after(WAIT)), 1);
  stage = 2;
}

/* Read everything the peer has, with plain reads. */
static size_t drain(int fd)
{
  static char buf[65536];
  size_t total = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    total += (size_t)n;
  assert_true(n < 0 && errno == EAGAIN);
  return total;
}

/* Wait (as a fiber) until the other fiber has reached stage `at`; the other
 * fiber sets it right before it parks, so when this one runs again it is
 * parked. */
static void await_stage(int at)
{
  while (stage < at)
    tdl_fiber_yield();
}

/* Run a fiber of the test against its peer on L, then check that the
 * fiber got to its end (stage 3), and close the pair. */
static void play(tdl_fiber_fn fiber, tdl_fiber_fn peer)
{
  stage = 0;
  go(fiber, NULL);
  go(peer, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(stage, 3);
  close_pair();
}

/* The test `name` on a Unix stream socket pair (name_unix) and over TCP
 * (name_tcp): fiber against peer. */
#define ON_BOTH(name, fiber, peer)          \
  static void name##_unix(void **state)     \
  {                                         \
    (void)state;                            \
    pair_unix();                            \
    play(fiber, peer);                      \
  }                                         \
  static void name##_tcp(void **state)      \
  {                                         \
    (void)state;                            \
    pair_tcp();                             \
    play(fiber, peer);                      \
  }

/* ---- a read edge that comes while the fiber waits to write ---- */

static void *reader_writer(void *arg)
{
  (void)arg;
  char buf[4096];
  /* A read that parks: the fd is registered for reads. */
  stage = 1;
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 10);
  /* That read was short: the stream is empty, as far as fiber I/O knows. */
  fill(s);
  stage = 2;
  assert_int_equal(tdl_write(s, "x", 1, tdl_after(WAIT)), 1);
  /* While the write waited, 100 bytes came: the next read must see them,
   * though it read short last time, and though no new byte comes. */
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 100);
  stage = 3;
  return NULL;
}

static void *peer_of_reader_writer(void *arg)
{
  (void)arg;
  char hundred[100] = {0};
  await_stage(1);
  assert_int_equal(write(p, "0123456789", 10), 10);
  await_stage(2);
  assert_int_equal(write(p, hundred, sizeof hundred), (ssize_t)sizeof hundred);
  /* Let the loop poll while the data is there and the writer still
   * waits: it hears of the read first, alone.  (On a Unix socket nothing
   * makes room meanwhile; over TCP a delayed acknowledgement may, and the
   * order is then only likely.) */
  assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  /* Now the writer may go on: make room for it. */
  assert_true(drain(p) > 0);
  return NULL;
}

ON_BOTH(read_edge_while_writing, reader_writer, peer_of_reader_writer)

/* ---- a hang-up that comes while the fiber waits to write ---- */

static void *writer_then_reader(void *arg)
{
  (void)arg;
  char buf[4096];
  stage = 1;
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 10);
  fill(s);
  stage = 2;
  assert_int_equal(tdl_write(s, "x", 1, tdl_after(WAIT)), 1);
  /* The peer wrote 100 bytes and shut its side: both are for the reader,
   * the data first and then the end. */
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 100);
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 0);
  stage = 3;
  return NULL;
}

static void *peer_that_hangs_up(void *arg)
{
  (void)arg;
  char hundred[100] = {0};
  await_stage(1);
  assert_int_equal(write(p, "0123456789", 10), 10);
  await_stage(2);
  assert_int_equal(write(p, hundred, sizeof hundred), (ssize_t)sizeof hundred);
  assert_int_equal(shutdown(p, SHUT_WR), 0);
  assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  assert_true(drain(p) > 0);
  return NULL;
}

ON_BOTH(hangup_while_writing, writer_then_reader, peer_that_hangs_up)

/* ---- a wait that took what the loop cached: the next read reads ---- */

static void *short_read_then_wait(void *arg)
{
  (void)arg;
  char buf[4096];
  stage = 1;
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 10); /* parks, then short */
  stage = 2;
  /* The peer writes 20 bytes and the loop hears of them while this fiber
   * sleeps: they are cached.  tdl_fd_wait takes that readiness... */
  assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  assert_true(tdl_fd_wait(s, TDL_READ, tdl_after(WAIT)) & TDL_READ);
  /* ...so the read after it must make its call, not wait for an arrival
   * that was reported already. */
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 20);
  stage = 3;
  return NULL;
}

static void *peer_of_short_read_then_wait(void *arg)
{
  (void)arg;
  char twenty[20] = {0};
  await_stage(1);
  assert_int_equal(write(p, "0123456789", 10), 10);
  await_stage(2);
  assert_int_equal(write(p, twenty, sizeof twenty), (ssize_t)sizeof twenty);
  return NULL;
}

static void wait_then_read_after_a_short_read(void **state)
{
  (void)state;
  pair_unix();
  play(short_read_then_wait, peer_of_short_read_then_wait);
}

/* ---- a hang-up told to a writer alone: a wait to read ends at once ---- */

static void *writer_sees_hangup_then_waits_to_read(void *arg)
{
  (void)arg;
  char buf[4096];
  stage = 1;
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 10);
  fill(s);
  stage = 2;
  assert_int_equal(tdl_write(s, "x", 1, tdl_after(WAIT)), 1);
  /* The peer wrote and shut its side while this fiber waited to write.  A
   * library reads with its own call, short, and says so (as libtreadle-hook
   * does): the end came before that read, so a wait to read must end at
   * once, though no new arrival will come. */
  assert_int_equal(read(s, buf, sizeof buf), 10);
  assert_int_equal(tdl_fd_blocked(s, TDL_READ), 0);
  int ev = tdl_fd_wait(s, TDL_READ, tdl_after(WAIT));
  assert_true(ev > 0 && (ev & TDL_READ));
  assert_int_equal(read(s, buf, sizeof buf), 0);
  stage = 3;
  return NULL;
}

static void *peer_that_shuts_only(void *arg)
{
  (void)arg;
  await_stage(1);
  assert_int_equal(write(p, "0123456789", 10), 10);
  await_stage(2);
  assert_int_equal(write(p, "0123456789", 10), 10);
  assert_int_equal(shutdown(p, SHUT_WR), 0);
  assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  assert_true(drain(p) > 0);
  return NULL;
}

static void wait_to_read_after_a_hangup_while_writing(void **state)
{
  (void)state;
  pair_unix();
  play(writer_sees_hangup_then_waits_to_read, peer_that_shuts_only);
}

/* ---- a hang-up cached: a wait to write still waits for room ---- */

static void *wait_to_write_after_a_hangup(void *arg)
{
  (void)arg;
  char buf[64];
  /* A write that waits (the registration then reports edges), and a read
   * that waits: the end is reported to it, and stays cached after it. */
  fill(s);
  stage = 1;
  assert_int_equal(tdl_write(s, "x", 1, tdl_after(WAIT)), 1);
  stage = 2;
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 0);
  fill(s);
  assert_int_equal(tdl_fd_blocked(s, TDL_WRITE), 0);
  /* No room, and the peer's shutdown is no reason to write: a wait may
   * wake once for the hang-up, but then waits (here until its deadline);
   * it does not end at once, again and again, with the hang-up. */
  int first = tdl_fd_wait(s, TDL_WRITE, tdl_after(5 * TDL_MSEC));
  assert_true(first == -ETIMEDOUT || (first > 0 && (first & TDL_HUP)));
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_fd_wait(s, TDL_WRITE, tdl_after(5 * TDL_MSEC)), -ETIMEDOUT);
  stage = 3;
  return NULL;
}

static void *peer_that_drains_then_shuts(void *arg)
{
  (void)arg;
  await_stage(1);
  assert_true(drain(p) > 0);
  await_stage(2);
  assert_int_equal(shutdown(p, SHUT_WR), 0);
  return NULL;
}

static void wait_to_write_after_a_hangup_waits(void **state)
{
  (void)state;
  pair_unix();
  play(wait_to_write_after_a_hangup, peer_that_drains_then_shuts);
}

/* ---- an arrival told to a wait stays for the next wait ---- */

/* A wait's result: ready to read (a negative errno never is). */
static bool readable(int ev) { return ev > 0 && (ev & TDL_READ); }

static void *waits_twice_then_reads(void *arg)
{
  (void)arg;
  char buf[64];
  /* A write that waits, then a wait to read: the registration reports
   * edges from then on, and the kernel tells of an arrival once. */
  edges_from_here();
  assert_true(readable(tdl_fd_wait(s, TDL_READ, tdl_after(WAIT))));
  /* Nothing was read: the bytes are still there, and every further wait
   * must end at once, not wait for an edge that will not come. */
  for (int i = 0; i < 3; i++)
    assert_true(readable(tdl_fd_wait(s, TDL_READ, tdl_after(WAIT))));
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 10);
  stage = 3;
  return NULL;
}

static void *peer_that_drains_then_writes(void *arg)
{
  (void)arg;
  await_stage(1);
  assert_true(drain(p) > 0);
  await_stage(2);
  assert_int_equal(write(p, "0123456789", 10), 10);
  return NULL;
}

ON_BOTH(arrival_kept_for_the_next_wait, waits_twice_then_reads, peer_that_drains_then_writes)

/* ---- the same after a short read, the arrival cached while busy ---- */

static void *short_read_then_waits_twice(void *arg)
{
  (void)arg;
  char buf[64];
  edges_from_here();
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 10); /* parks, then short */
  stage = 20;
  /* The peer writes 20 bytes while this fiber sleeps: the loop hears of
   * them with no waiter and keeps them.  The first wait ends on that; so
   * must the next ones, nothing having been read (an echo server that
   * waits for a request, then again before it takes a buffer). */
  assert_int_equal(tdl_sleep(tdl_after(TDL_MSEC)), 0);
  for (int i = 0; i < 3; i++)
    assert_true(readable(tdl_fd_wait(s, TDL_READ, tdl_after(WAIT))));
  assert_int_equal(tdl_read(s, buf, sizeof buf, tdl_after(WAIT)), 20);
  stage = 3;
  return NULL;
}

static void *peer_of_short_read_then_waits_twice(void *arg)
{
  (void)arg;
  char twenty[20] = {0};
  await_stage(1);
  assert_true(drain(p) > 0);
  await_stage(2);
  assert_int_equal(write(p, "0123456789", 10), 10);
  await_stage(20);
  assert_int_equal(write(p, twenty, sizeof twenty), (ssize_t)sizeof twenty);
  return NULL;
}

ON_BOTH(waits_after_a_short_read_end, short_read_then_waits_twice, peer_of_short_read_then_waits_twice)

/* ---- a wait after a foreign read that emptied the fd, not passed on ---- */

static void *foreign_read_then_wait(void *arg)
{
  (void)arg;
  edges_from_here();
  assert_true(readable(tdl_fd_wait(s, TDL_READ, tdl_after(WAIT))));
  /* A library's own read empties the fd, and nobody calls tdl_fd_blocked
   * (fd.h asks for it): what the wait said is not so any more, and the
   * next wait must wait, not end at once for ever on what it said. */
  assert_int_equal(drain(s), 10);
  assert_int_equal(tdl_fd_wait(s, TDL_READ, tdl_after(50 * TDL_MSEC)), -ETIMEDOUT);
  stage = 3;
  return NULL;
}

ON_BOTH(foreign_read_then_wait_waits, foreign_read_then_wait, peer_that_drains_then_writes)

/* ---- waits to write, with and without room ---- */

static void *waits_to_write(void *arg)
{
  (void)arg;
  edges_from_here();
  /* An arrival: the kernel's report of it says writable too, which the
   * loop keeps. */
  assert_true(readable(tdl_fd_wait(s, TDL_READ, tdl_after(WAIT))));
  /* Room (the peer drained): every wait ends, however many in a row. */
  for (int i = 0; i < 3; i++) {
    int ev = tdl_fd_wait(s, TDL_WRITE, tdl_after(WAIT));
    assert_true(ev > 0 && (ev & TDL_WRITE));
  }
  /* The program's own writes fill the way out, and nobody calls
   * tdl_fd_blocked: the next wait must wait (nobody drains). */
  fill_for_good(s);
  assert_int_equal(tdl_fd_wait(s, TDL_WRITE, tdl_after(50 * TDL_MSEC)), -ETIMEDOUT);
  stage = 3;
  return NULL;
}

ON_BOTH(waits_to_write, waits_to_write, peer_that_drains_then_writes)

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(read_edge_while_writing_unix, setup, teardown),
      cmocka_unit_test_setup_teardown(read_edge_while_writing_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(hangup_while_writing_unix, setup, teardown),
      cmocka_unit_test_setup_teardown(hangup_while_writing_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(wait_then_read_after_a_short_read, setup, teardown),
      cmocka_unit_test_setup_teardown(wait_to_read_after_a_hangup_while_writing, setup, teardown),
      cmocka_unit_test_setup_teardown(wait_to_write_after_a_hangup_waits, setup, teardown),
      cmocka_unit_test_setup_teardown(arrival_kept_for_the_next_wait_unix, setup, teardown),
      cmocka_unit_test_setup_teardown(arrival_kept_for_the_next_wait_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(waits_after_a_short_read_end_unix, setup, teardown),
      cmocka_unit_test_setup_teardown(waits_after_a_short_read_end_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(foreign_read_then_wait_waits_unix, setup, teardown),
      cmocka_unit_test_setup_teardown(foreign_read_then_wait_waits_tcp, setup, teardown),
      cmocka_unit_test_setup_teardown(waits_to_write_unix, setup, teardown),
      cmocka_unit_test_setup_teardown(waits_to_write_tcp, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
