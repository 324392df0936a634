/* SPDX-License-Identifier: MIT */
/* tdl_select over channels, fds and unparks; tdl_try_select. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"
#include "loop_fixture.h"

static int S[2]; /* a connection: S[0] the server's end, S[1] the client's */

static void open_pair(void)
{
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, S), 0);
}

static void close_pair(void)
{
  tdl_close(S[0]);
  tdl_close(S[1]);
}

/* ---- the WAITKEY case: the client speaks, hangs up, or a key is written ---- */

static tdl_fiber_t waiter;
static int steps;

static void *waitkey(void *arg)
{
  (void)arg;
  tdl_select_op ops[] = {
      {.kind = TDL_SELECT_FD, .fd = S[0], .events = TDL_READ},
      {.kind = TDL_SELECT_PARK},
  };
  /* 1: another fiber writes the key and unparks us. */
  assert_int_equal(tdl_select(ops, 2, tdl_after(T_HANG)), 1);
  assert_int_equal(ops[1].result, 0);
  steps++;
  /* 2: the client sends something. */
  assert_int_equal(tdl_select(ops, 2, tdl_after(T_HANG)), 0);
  assert_true(ops[0].result & TDL_READ);
  char buf[8];
  assert_int_equal(tdl_read(S[0], buf, sizeof buf, TDL_FOREVER), 2);
  steps++;
  /* 3: the client hangs up. */
  assert_int_equal(tdl_select(ops, 2, tdl_after(T_HANG)), 0);
  assert_true(ops[0].result & (TDL_READ | TDL_HUP));
  assert_int_equal(tdl_read(S[0], buf, sizeof buf, TDL_FOREVER), 0);
  steps++;
  return NULL;
}

static void *key_writer_and_client(void *arg)
{
  (void)arg;
  tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(tdl_fiber_unpark(tdl_fiber_loop(), waiter), 0);
  tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(steps, 1);
  assert_int_equal(write(S[1], "hi", 2), 2);
  tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(steps, 2);
  close(S[1]);
  S[1] = -1;
  return NULL;
}

static void waitkey_without_a_helper_fiber(void **state)
{
  (void)state;
  open_pair();
  steps = 0;
  assert_int_equal(tdl_fiber_spawn(&waiter, L, waitkey, NULL, &(tdl_fiber_options){.detached = true}), 0);
  go(key_writer_and_client, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(steps, 3);
  tdl_close(S[0]);
}

/* ---- a permit given before the select is taken at once ---- */

static void *permit_first(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_fiber_unpark(tdl_fiber_loop(), tdl_fiber_self()), 0);
  tdl_select_op op = {.kind = TDL_SELECT_PARK};
  assert_int_equal(tdl_select(&op, 1, TDL_FOREVER), 0);
  /* Consumed: the next one waits (and times out). */
  assert_int_equal(tdl_select(&op, 1, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  /* A permit left over when another clause won is kept. */
  assert_int_equal(tdl_fiber_unpark(tdl_fiber_loop(), tdl_fiber_self()), 0);
  assert_int_equal(tdl_fiber_park(TDL_FOREVER), 0);
  return NULL;
}

static void park_clause_takes_a_permit(void **state)
{
  (void)state;
  go(permit_first, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* ---- a channel clause wins; the fd is let go ---- */

static tdl_chan *C;

static void *chan_or_fd(void *arg)
{
  (void)arg;
  int v = 0;
  tdl_select_op ops[] = {
      {.kind = TDL_SELECT_FD, .fd = S[0], .events = TDL_READ},
      {.kind = TDL_SELECT_RECV, .ch = C, .val = &v},
  };
  assert_int_equal(tdl_select(ops, 2, tdl_after(T_HANG)), 1);
  assert_int_equal(ops[1].result, 0);
  assert_int_equal(v, 42);
  /* The fd clause left nothing behind: a plain read of it waits normally. */
  char c;
  assert_int_equal(tdl_read(S[0], &c, 1, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  return NULL;
}

static void *sender(void *arg)
{
  (void)arg;
  int v = 42;
  assert_int_equal(tdl_chan_send(C, &v, TDL_FOREVER), 0);
  return NULL;
}

static void channel_clause_wins(void **state)
{
  (void)state;
  open_pair();
  assert_int_equal(tdl_chan_new(&C, sizeof(int), 0), 0);
  go(chan_or_fd, NULL);
  go(sender, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_chan_free(C);
  close_pair();
}

/* ---- an fd closed while a select waits on it ---- */

static void *select_on_fd(void *arg)
{
  int *r = arg;
  tdl_select_op op = {.kind = TDL_SELECT_FD, .fd = S[0], .events = TDL_READ};
  r[0] = tdl_select(&op, 1, tdl_after(T_HANG));
  r[1] = op.result;
  return NULL;
}

static void *closer(void *arg)
{
  (void)arg;
  tdl_fiber_yield();
  assert_int_equal(tdl_close(S[0]), 0);
  S[0] = -1;
  return NULL;
}

static void fd_closed_while_selecting(void **state)
{
  (void)state;
  open_pair();
  int r[2] = {1, 1};
  go(select_on_fd, r);
  go(closer, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(r[0], 0);     /* the clause */
  assert_int_equal(r[1], -EBADF); /* its fd is gone */
  tdl_close(S[1]);
}

/* ---- cancelled or timed out: the fds are free at once ---- */

static tdl_fiber_t victim;

static void *victim_selects(void *arg)
{
  int *r = arg;
  tdl_select_op ops[] = {
      {.kind = TDL_SELECT_FD, .fd = S[0], .events = TDL_READ},
      {.kind = TDL_SELECT_PARK},
  };
  *r = tdl_select(ops, 2, TDL_FOREVER);
  return NULL;
}

static void *canceller(void *arg)
{
  (void)arg;
  tdl_fiber_yield();
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), victim), 0);
  /* An unpark now finds the select over (it becomes a permit)... */
  assert_int_equal(tdl_fiber_unpark(tdl_fiber_loop(), victim), 0);
  char c;
  /* ...and the fd free: not -EBUSY, the victim let go when cancelled. */
  assert_int_equal(tdl_read(S[0], &c, 1, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  return NULL;
}

static void cancelled_select_lets_go(void **state)
{
  (void)state;
  open_pair();
  int r = 1;
  assert_int_equal(tdl_fiber_spawn(&victim, L, victim_selects, &r, &(tdl_fiber_options){.detached = true}), 0);
  go(canceller, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(r, -ECANCELED);
  close_pair();
}

static void *times_out(void *arg)
{
  (void)arg;
  tdl_select_op op = {.kind = TDL_SELECT_FD, .fd = S[0], .events = TDL_READ};
  assert_int_equal(tdl_select(&op, 1, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(write(S[1], "x", 1), 1);
  char c;
  assert_int_equal(tdl_read(S[0], &c, 1, tdl_after(T_HANG)), 1);
  /* No clause, but a deadline: a sleep. */
  assert_int_equal(tdl_select(NULL, 0, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  return NULL;
}

static void deadline_ends_select(void **state)
{
  (void)state;
  open_pair();
  go(times_out, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  close_pair();
}

/* ---- misuse ---- */

static void *busy_reader(void *arg)
{
  (void)arg;
  char c;
  tdl_read(S[0], &c, 1, TDL_FOREVER); /* until cancelled */
  return NULL;
}

static void *misuse(void *arg)
{
  tdl_fiber_t *reader = arg;
  tdl_select_op none[] = {{.kind = TDL_SELECT_FD, .fd = -1, .events = TDL_READ},
                          {.kind = TDL_SELECT_RECV, .ch = NULL}};
  /* Every clause off and no deadline: nothing could end it. */
  assert_int_equal(tdl_select(none, 2, TDL_FOREVER), -EINVAL);
  tdl_select_op noev = {.kind = TDL_SELECT_FD, .fd = S[0], .events = 0};
  assert_int_equal(tdl_select(&noev, 1, TDL_FOREVER), -EINVAL);
  tdl_select_op badev = {.kind = TDL_SELECT_FD, .fd = S[0], .events = 0x40};
  assert_int_equal(tdl_select(&badev, 1, TDL_FOREVER), -EINVAL);
  tdl_select_op twopark[] = {{.kind = TDL_SELECT_PARK}, {.kind = TDL_SELECT_PARK}};
  assert_int_equal(tdl_select(twopark, 2, TDL_FOREVER), -EINVAL);
  tdl_select_op twofd[] = {{.kind = TDL_SELECT_FD, .fd = S[1], .events = TDL_READ},
                           {.kind = TDL_SELECT_FD, .fd = S[1], .events = TDL_READ | TDL_WRITE}};
  assert_int_equal(tdl_select(twofd, 2, TDL_FOREVER), -EINVAL);
  tdl_select_op unknown = {.kind = 77};
  assert_int_equal(tdl_select(&unknown, 1, TDL_FOREVER), -EINVAL);
  /* Another fiber reads S[0]: an FD clause for reading it is refused and
   * leaves nothing hung, and the select's other clauses are taken down. */
  tdl_select_op taken[] = {{.kind = TDL_SELECT_PARK},
                           {.kind = TDL_SELECT_FD, .fd = S[0], .events = TDL_READ}};
  assert_int_equal(tdl_select(taken, 2, tdl_after(TDL_SEC)), -EBUSY);
  assert_int_equal(tdl_fiber_unpark(tdl_fiber_loop(), tdl_fiber_self()), 0); /* a permit, not a wake */
  assert_int_equal(tdl_fiber_park(TDL_FOREVER), 0);
  /* A closed fd number. */
  int p[2];
  t_pipe(p);
  close(p[0]);
  close(p[1]);
  tdl_select_op gone = {.kind = TDL_SELECT_FD, .fd = p[0], .events = TDL_READ};
  int r = tdl_select(&gone, 1, tdl_after(TDL_MSEC));
  assert_true(r == -EBADF);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), *reader), 0);
  return NULL;
}

static void select_misuse(void **state)
{
  (void)state;
  open_pair();
  tdl_fiber_t reader;
  assert_int_equal(tdl_fiber_spawn(&reader, L, busy_reader, NULL, &(tdl_fiber_options){.detached = true}), 0);
  go(misuse, &reader);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  /* Outside a fiber: select refuses, try_select works (an FD clause asks the
   * kernel). */
  tdl_select_op op = {.kind = TDL_SELECT_FD, .fd = S[1], .events = TDL_WRITE};
  assert_int_equal(tdl_select(&op, 1, TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_try_select(&op, 1), 0);
  assert_true(op.result & TDL_WRITE);
  tdl_select_op rd = {.kind = TDL_SELECT_FD, .fd = S[1], .events = TDL_READ};
  assert_int_equal(tdl_try_select(&rd, 1), -EAGAIN);
  tdl_select_op park = {.kind = TDL_SELECT_PARK};
  assert_int_equal(tdl_try_select(&park, 1), -EAGAIN); /* no fiber, no permit */
  close_pair();
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(waitkey_without_a_helper_fiber, setup, teardown),
      cmocka_unit_test_setup_teardown(park_clause_takes_a_permit, setup, teardown),
      cmocka_unit_test_setup_teardown(channel_clause_wins, setup, teardown),
      cmocka_unit_test_setup_teardown(fd_closed_while_selecting, setup, teardown),
      cmocka_unit_test_setup_teardown(cancelled_select_lets_go, setup, teardown),
      cmocka_unit_test_setup_teardown(deadline_ends_select, setup, teardown),
      cmocka_unit_test_setup_teardown(select_misuse, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
