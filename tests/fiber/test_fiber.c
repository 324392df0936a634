/* SPDX-License-Identifier: MIT */
/* Fibers: spawn, join, detach, cancel, order, fiber I/O with deadlines,
 * misuse, 100,000 at once, overflow diagnosis. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "loop_fixture.h"

#ifdef TDL_FAULTS
#include "base/fault.h"
#endif

/* ---- spawn, join, order ---- */

static void *ret_arg(void *arg) { return arg; }

static int order_log[64], order_n;
static void *log_twice(void *arg)
{
  order_log[order_n++] = (int)(intptr_t)arg;
  tdl_fiber_yield();
  order_log[order_n++] = (int)(intptr_t)arg + 100;
  return NULL;
}

static void *joiner(void *arg)
{
  tdl_fiber_t *h = arg;
  void *res = NULL;
  assert_int_equal(tdl_fiber_join(h[0], &res, TDL_FOREVER), 0);
  assert_ptr_equal(res, (void *)0x1234);
  /* The handle is stale now. */
  assert_int_equal(tdl_fiber_join(h[0], &res, TDL_FOREVER), -ESRCH);
  return (void *)1;
}

static void spawn_and_join(void **state)
{
  (void)state;
  tdl_fiber_t h[2];
  assert_int_equal(tdl_fiber_spawn(&h[0], L, ret_arg, (void *)0x1234, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&h[1], L, joiner, h, NULL), 0);
  assert_true(h[0] != 0 && h[0] != h[1]);
  assert_int_equal(tdl_fiber_detach(L, h[1]), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* tdl_now() in a fiber is the loop's cached time (loop.h): it stands still
 * while the fiber runs without parking, and tdl_loop_update_time moves it. */
static tdl_time_t clock_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

static void *now_is_cached(void *arg)
{
  (void)arg;
  tdl_time_t t0 = tdl_now();
  tdl_time_t real;
  while ((real = clock_ns()) <= t0) {
  }
  assert_true(tdl_now() == t0); /* the clock moved on; the cache did not */
  tdl_loop_update_time(tdl_fiber_loop());
  assert_true(tdl_now() >= real);
  return NULL;
}

static void now_in_a_fiber(void **state)
{
  (void)state;
  assert_int_equal(tdl_fiber_spawn(NULL, L, now_is_cached, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static int detached_ran;

static void *mark_detached(void *arg)
{
  (void)arg;
  detached_ran++;
  return NULL;
}

/* Spawned detached in one call: it runs, releases itself, and its handle
 * cannot be joined or detached again. */
static void spawn_detached(void **state)
{
  (void)state;
  detached_ran = 0;
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, mark_detached, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, L, mark_detached, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_fiber_detach(L, h), -EINVAL); /* already detached */
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(detached_ran, 2);
  assert_int_equal(tdl_fiber_detach(L, h), -ESRCH); /* released */
  tdl_fiber_stats st;
  tdl_fiber_stats_get(L, &st);
  assert_int_equal(st.live, 0);
}

static void fifo_and_yield(void **state)
{
  (void)state;
  order_n = 0;
  for (int i = 1; i <= 3; i++) {
    tdl_fiber_t h;
    assert_int_equal(tdl_fiber_spawn(&h, L, log_twice, (void *)(intptr_t)i, NULL), 0);
    assert_int_equal(tdl_fiber_detach(L, h), 0);
  }
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  int want[] = {1, 2, 3, 101, 102, 103};
  assert_int_equal(order_n, 6);
  for (int i = 0; i < 6; i++)
    assert_int_equal(order_log[i], want[i]);
}

static void *sleeper(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_sleep(tdl_after(5 * TDL_MSEC));
}

static void *join_misuse(void *arg)
{
  (void)arg;
  tdl_fiber_t me = tdl_fiber_self();
  assert_int_equal(tdl_fiber_join(me, NULL, TDL_FOREVER), -EDEADLK);
  assert_int_equal(tdl_fiber_join(0, NULL, TDL_FOREVER), -ESRCH);
  assert_int_equal(tdl_fiber_join(0xdead00000007ull, NULL, TDL_FOREVER), -ESRCH);

  tdl_fiber_t d;
  assert_int_equal(tdl_fiber_spawn(&d, tdl_fiber_loop(), sleeper, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_detach(tdl_fiber_loop(), d), 0);
  assert_int_equal(tdl_fiber_detach(tdl_fiber_loop(), d), -EINVAL);
  assert_int_equal(tdl_fiber_join(d, NULL, TDL_FOREVER), -EINVAL);

  /* A join that times out leaves the fiber joinable. */
  tdl_fiber_t s;
  assert_int_equal(tdl_fiber_spawn(&s, tdl_fiber_loop(), sleeper, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_join(s, NULL, tdl_after(TDL_MSEC)), -ETIMEDOUT);
  void *r = (void *)1;
  assert_int_equal(tdl_fiber_join(s, &r, TDL_FOREVER), 0);
  assert_null(r); /* tdl_sleep returned 0 */
  return NULL;
}

static void join_errors(void **state)
{
  (void)state;
  assert_int_equal(tdl_fiber_join(1, NULL, TDL_FOREVER), -EPERM); /* not in a fiber */
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, join_misuse, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_fiber_detach(L, h), -ESRCH); /* finished and released */
}

static void *second_joiner(void *arg)
{
  tdl_fiber_t *h = arg;
  return (void *)(intptr_t)tdl_fiber_join(*h, NULL, TDL_FOREVER);
}

static void *collect(void *arg)
{
  tdl_fiber_t *js = arg;
  void *r0, *r1;
  assert_int_equal(tdl_fiber_join(js[0], &r0, TDL_FOREVER), 0);
  assert_int_equal(tdl_fiber_join(js[1], &r1, TDL_FOREVER), 0);
  int a = (int)(intptr_t)r0, b = (int)(intptr_t)r1;
  /* One joined the target; the other was refused (-EBUSY) or, if it came
   * after the target was released, found the handle stale (-ESRCH). */
  assert_true((a == 0 && (b == -EBUSY || b == -ESRCH)) || (b == 0 && (a == -EBUSY || a == -ESRCH)));
  return NULL;
}

static void only_one_joiner(void **state)
{
  (void)state;
  static tdl_fiber_t target, js[2];
  assert_int_equal(tdl_fiber_spawn(&target, L, sleeper, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&js[0], L, second_joiner, &target, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&js[1], L, second_joiner, &target, NULL), 0);
  tdl_fiber_t c;
  assert_int_equal(tdl_fiber_spawn(&c, L, collect, js, NULL), 0);
  assert_int_equal(tdl_fiber_detach(L, c), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void bad_spawn_arguments(void **state)
{
  (void)state;
  tdl_fiber_t h = 99;
  assert_int_equal(tdl_fiber_spawn(&h, L, NULL, NULL, NULL), -EINVAL);
  assert_int_equal(h, 0);
  tdl_fiber_options o = {.stack_size = 1};
  assert_int_equal(tdl_fiber_spawn(&h, L, ret_arg, NULL, &o), -EINVAL);
  o.stack_size = TDL_STACK_MIN - 1;
  assert_int_equal(tdl_fiber_spawn(&h, L, ret_arg, NULL, &o), -EINVAL);
  o.stack_size = (size_t)-1;
  assert_int_equal(tdl_fiber_spawn(&h, L, ret_arg, NULL, &o), -EINVAL);
  o.stack_size = TDL_STACK_MAX + 1;
  assert_int_equal(tdl_fiber_spawn(&h, L, ret_arg, NULL, &o), -EINVAL);
  o.stack_size = 0; /* the default */
  o.name = "a name much longer than the twenty-three bytes kept";
  assert_int_equal(tdl_fiber_spawn(&h, L, ret_arg, NULL, &o), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_fiber_yield(), -EPERM);
  assert_int_equal(tdl_fiber_self(), 0);
  tdl_fiber_exit(NULL); /* outside a fiber: does nothing */
}

/* ---- cancel ---- */

static void *cancel_target(void *arg)
{
  int *rc = arg;
  rc[0] = tdl_sleep(TDL_FOREVER);
  rc[1] = tdl_sleep(tdl_after(TDL_MSEC)); /* sticky */
  rc[2] = tdl_fiber_cancelled();
  return NULL;
}

static void *canceller(void *arg)
{
  tdl_fiber_t *h = arg;
  tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), *h), 0);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), *h), 0); /* twice: harmless */
  assert_int_equal(tdl_fiber_join(*h, NULL, TDL_FOREVER), 0);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), *h), -ESRCH); /* finished */
  return NULL;
}

/* After tdl_fiber_cancel the fd its target waited on is the canceller's at
 * once: no -EBUSY until the target runs again. */
static int CP[2];

static void *read_forever(void *arg)
{
  (void)arg;
  char c;
  return (void *)(intptr_t)tdl_read(CP[0], &c, 1, TDL_FOREVER);
}

static void *take_over_the_fd(void *arg)
{
  tdl_fiber_t *victim = arg;
  char c;
  tdl_fiber_yield(); /* the victim parks in its read */
  assert_int_equal(tdl_read(CP[0], &c, 1, tdl_after(TDL_MSEC)), -EBUSY); /* the victim reads it */
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), *victim), 0);
  assert_int_equal(write(CP[1], "z", 1), 1);
  assert_int_equal(tdl_read(CP[0], &c, 1, tdl_after(T_HANG)), 1); /* not -EBUSY */
  assert_int_equal(c, 'z');
  void *r = NULL;
  assert_int_equal(tdl_fiber_join(*victim, &r, TDL_FOREVER), 0);
  assert_int_equal((intptr_t)r, -ECANCELED);
  return NULL;
}

static void cancel_frees_the_fd_at_once(void **state)
{
  (void)state;
  t_pipe(CP);
  tdl_fiber_t victim;
  assert_int_equal(tdl_fiber_spawn(&victim, L, read_forever, NULL, NULL), 0);
  go(take_over_the_fd, &victim);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(CP[0]);
  tdl_close(CP[1]);
}

/* A cancelled fiber can still collect the fibers it cancels: join waits for
 * a cancelled fiber, and refuses (-ECANCELED) one that is not. */
static void *stubborn(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_sleep(TDL_FOREVER);
}

static void *parent(void *arg)
{
  (void)arg;
  tdl_loop *loop = tdl_fiber_loop();
  tdl_fiber_t kid[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(tdl_fiber_spawn(&kid[i], loop, stubborn, NULL, NULL), 0);
  assert_int_equal(tdl_sleep(TDL_FOREVER), -ECANCELED); /* main cancels us */
  assert_int_equal(tdl_fiber_join(kid[0], NULL, TDL_FOREVER), -ECANCELED); /* it would never end */
  for (int i = 0; i < 2; i++)
    assert_int_equal(tdl_fiber_cancel(loop, kid[i]), 0);
  for (int i = 0; i < 2; i++) {
    void *r = NULL;
    assert_int_equal(tdl_fiber_join(kid[i], &r, tdl_after(T_HANG)), 0);
    assert_int_equal((intptr_t)r, -ECANCELED);
  }
  return (void *)1;
}

static void cancelled_fiber_joins_cancelled_children(void **state)
{
  (void)state;
  tdl_fiber_t p;
  assert_int_equal(tdl_fiber_spawn(&p, L, parent, NULL, NULL), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_NOWAIT), 1);
  assert_int_equal(tdl_fiber_cancel(L, p), 0);
  assert_int_equal(tdl_fiber_detach(L, p), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_fiber_stats st;
  tdl_fiber_stats_get(L, &st);
  assert_int_equal(st.live, 0); /* nothing leaked */
}

static void cancel_wakes_a_parked_fiber(void **state)
{
  (void)state;
  static int rc[3];
  static tdl_fiber_t t;
  assert_int_equal(tdl_fiber_spawn(&t, L, cancel_target, rc, NULL), 0);
  tdl_fiber_t c;
  assert_int_equal(tdl_fiber_spawn(&c, L, canceller, &t, NULL), 0);
  assert_int_equal(tdl_fiber_detach(L, c), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc[0], -ECANCELED);
  assert_int_equal(rc[1], -ECANCELED);
  assert_int_equal(rc[2], 1);
}

static void *spin_then_block(void *arg)
{
  int *rc = arg;
  tdl_fiber_yield(); /* cancelled while runnable */
  rc[0] = tdl_sleep(tdl_after(TDL_MSEC));
  return NULL;
}

static void cancel_a_runnable_fiber(void **state)
{
  (void)state;
  int rc[1] = {0};
  tdl_fiber_t t;
  assert_int_equal(tdl_fiber_spawn(&t, L, spin_then_block, rc, NULL), 0);
  assert_int_equal(tdl_fiber_cancel(L, t), 0); /* from outside any fiber */
  assert_int_equal(tdl_fiber_detach(L, t), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc[0], -ECANCELED);
}

/* ---- park / unpark ---- */

static tdl_fiber_t parker_h;
static void *parker(void *arg)
{
  int *rc = arg;
  rc[0] = tdl_fiber_park(TDL_FOREVER);                                  /* woken */
  rc[1] = tdl_fiber_park(TDL_FOREVER);                                  /* permit given before */
  rc[2] = tdl_fiber_park(tdl_after(TDL_MSEC));       /* nobody: times out */
  rc[3] = tdl_sleep(tdl_after(2 * TDL_MSEC));                                  /* unpark must not end a sleep */
  return NULL;
}

static void *unparker(void *arg)
{
  (void)arg;
  tdl_loop *loop = tdl_fiber_loop();
  tdl_fiber_yield();                                      /* parker is parked */
  assert_int_equal(tdl_fiber_unpark(loop, parker_h), 0); /* wakes it */
  assert_int_equal(tdl_fiber_unpark(loop, parker_h), 0); /* runnable: a permit */
  assert_int_equal(tdl_fiber_unpark(loop, parker_h), 0); /* collapses into it */
  tdl_sleep(tdl_after(1500 * TDL_USEC));                         /* parker: timed park, then sleep */
  assert_int_equal(tdl_fiber_unpark(loop, parker_h), 0); /* must not end the sleep */
  return NULL;
}

static void park_and_unpark(void **state)
{
  (void)state;
  static int rc[4] = {9, 9, 9, 9};
  assert_int_equal(tdl_fiber_park(TDL_FOREVER), -EPERM);
  assert_int_equal(tdl_fiber_spawn(&parker_h, L, parker, rc, NULL), 0);
  tdl_fiber_t u;
  assert_int_equal(tdl_fiber_spawn(&u, L, unparker, NULL, NULL), 0);
  tdl_fiber_detach(L, u);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc[0], 0);
  assert_int_equal(rc[1], 0);
  assert_int_equal(rc[2], -ETIMEDOUT);
  assert_int_equal(rc[3], 0);
  assert_int_equal(tdl_fiber_detach(L, parker_h), 0);
  assert_int_equal(tdl_fiber_unpark(L, parker_h), -ESRCH);
}

/* ---- fiber I/O ---- */

static int P[2];
static tdl_fiber_t writer_h;

static void *reader(void *arg)
{
  (void)arg;
  char c;
  tdl_loop *loop = tdl_fiber_loop();
  /* Nothing there yet: parks, then gets the byte the writer sends. */
  assert_int_equal(tdl_read(P[0], &c, 1, TDL_FOREVER), 1);
  assert_int_equal(c, 'a');
  /* A deadline that passes (the writer waits for our go): -ETIMEDOUT, and
   * the fd still works after. */
  assert_int_equal(tdl_read(P[0], &c, 1, tdl_after(2 * TDL_MSEC)), -ETIMEDOUT);
  assert_int_equal(tdl_fiber_unpark(loop, writer_h), 0);
  assert_int_equal(tdl_read(P[0], &c, 1, TDL_FOREVER), 1);
  assert_int_equal(c, 'b');
  /* A deadline already past fails without parking. */
  assert_int_equal(tdl_read(P[0], &c, 1, 0), -ETIMEDOUT);
  return NULL;
}

static void *writer(void *arg)
{
  (void)arg;
  tdl_sleep(tdl_after(TDL_MSEC));
  assert_int_equal(tdl_write(P[1], "a", 1, TDL_FOREVER), 1);
  assert_int_equal(tdl_fiber_park(TDL_FOREVER), 0);
  assert_int_equal(tdl_write(P[1], "b", 1, TDL_FOREVER), 1);
  return NULL;
}

static void read_and_write_park_the_fiber(void **state)
{
  (void)state;
  t_pipe(P);
  tdl_fiber_t r;
  assert_int_equal(tdl_fiber_spawn(&r, L, reader, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&writer_h, L, writer, NULL, NULL), 0);
  tdl_fiber_detach(L, r);
  tdl_fiber_detach(L, writer_h);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(P[0]);
  tdl_close(P[1]);
}

/* MSG_DONTWAIT asks for what is there now: -EAGAIN instead of parking,
 * whatever the fd's state (fresh, or known empty after a short read). */
static void *dontwait_calls(void *arg)
{
  int *sv = arg;
  char buf[8];
  assert_int_equal(tdl_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT, TDL_FOREVER), -EAGAIN);
  assert_int_equal(tdl_send(sv[1], "ab", 2, MSG_DONTWAIT, TDL_FOREVER), 2);
  assert_int_equal(tdl_recv(sv[0], buf, sizeof buf, 0, TDL_FOREVER), 2); /* short: known empty */
  assert_int_equal(tdl_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT, TDL_FOREVER), -EAGAIN);
  struct sockaddr_storage from;
  socklen_t fl = sizeof from;
  assert_int_equal(tdl_recvfrom(sv[0], buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &fl, TDL_FOREVER),
                   -EAGAIN);
  /* A full socket: the send says so instead of waiting for room. */
  static char big[1 << 16];
  ssize_t n;
  int sends = 0;
  while ((n = tdl_send(sv[1], big, sizeof big, MSG_DONTWAIT, TDL_FOREVER)) > 0 && sends < 10000)
    sends++;
  assert_int_equal(n, -EAGAIN);
  assert_int_equal(tdl_sendto(sv[1], big, 1, MSG_DONTWAIT, NULL, 0, TDL_FOREVER), -EAGAIN);
  /* Without the flag the call still parks, and reading makes room. */
  assert_true(tdl_recv(sv[0], big, sizeof big, 0, TDL_FOREVER) > 0);
  return NULL;
}

static void dontwait_never_parks(void **state)
{
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  t_spawn(L, dontwait_calls, sv);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(sv[0]);
  tdl_close(sv[1]);
}

static void *fill_and_block(void *arg)
{
  (void)arg;
  static char big[1 << 16];
  ssize_t total = 0, n;
  /* A blocking pipe is made non-blocking: this must not hang the thread. */
  while ((n = tdl_write(P[1], big, sizeof big, tdl_after(5 * TDL_MSEC))) > 0)
    total += n;
  assert_int_equal(n, -ETIMEDOUT);
  assert_true(total > 0);
  assert_true(fcntl(P[1], F_GETFL) & O_NONBLOCK);
  return NULL;
}

static void blocking_fds_are_made_nonblocking(void **state)
{
  (void)state;
  assert_int_equal(pipe(P), 0); /* blocking */
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, fill_and_block, NULL, NULL), 0);
  tdl_fiber_detach(L, h);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(P[0]);
  tdl_close(P[1]);
}

static void *bad_fd_user(void *arg)
{
  (void)arg;
  char c;
  assert_int_equal(tdl_read(-1, &c, 1, TDL_FOREVER), -EBADF);
  int p[2];
  t_pipe(p);
  close(p[0]);
  close(p[1]);
  assert_int_equal(tdl_read(p[0], &c, 1, TDL_FOREVER), -EBADF);
  assert_int_equal(tdl_write(p[1], &c, 1, TDL_FOREVER), -EBADF);
  assert_int_equal(tdl_fd_wait(p[0], TDL_READ, TDL_FOREVER), -EBADF);
  assert_int_equal(tdl_fd_wait(0, 0, TDL_FOREVER), -EINVAL);
  return NULL;
}

static void bad_fds_in_fibers(void **state)
{
  (void)state;
  char c;
  assert_int_equal(tdl_read(0, &c, 1, TDL_FOREVER), -EPERM); /* not in a fiber */
  assert_int_equal(tdl_sleep(tdl_after(1)), -EPERM);
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, bad_fd_user, NULL, NULL), 0);
  tdl_fiber_detach(L, h);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

static void *wait_then_report(void *arg)
{
  int *rc = arg;
  char c;
  *rc = (int)tdl_read(P[0], &c, 1, TDL_FOREVER);
  return NULL;
}

static void *closer(void *arg)
{
  int *rc = arg;
  tdl_fiber_yield();
  char c;
  /* A second reader on the same fd is refused. */
  rc[1] = (int)tdl_read(P[0], &c, 1, TDL_FOREVER);
  assert_int_equal(tdl_close(P[0]), 0);
  return NULL;
}

static void close_wakes_waiters(void **state)
{
  (void)state;
  t_pipe(P);
  static int rc[2];
  tdl_fiber_t a, b;
  assert_int_equal(tdl_fiber_spawn(&a, L, wait_then_report, &rc[0], NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&b, L, closer, rc, NULL), 0);
  tdl_fiber_detach(L, a);
  tdl_fiber_detach(L, b);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(rc[0], -EBADF);
  assert_int_equal(rc[1], -EBUSY);
  tdl_close(P[1]);
}

/* Your own read found the fd empty: tdl_fd_blocked makes the next wait
 * wait, even where the loop has readiness cached from before that read. */
static void *fd_blocked_user(void *arg)
{
  (void)arg;
  char b[8];
  /* Writability first, then readability: the registration turns
   * edge-triggered, where cached readiness is taken as true. */
  assert_true(tdl_fd_wait(P[0], TDL_WRITE, tdl_after(T_HANG)) & TDL_WRITE);
  assert_int_equal(write(P[1], "a", 1), 1);
  assert_true(tdl_fd_wait(P[0], TDL_READ, tdl_after(T_HANG)) & TDL_READ);
  /* Read behind treadle's back, until EAGAIN. */
  assert_int_equal(read(P[0], b, sizeof b), 1);
  assert_int_equal(read(P[0], b, sizeof b), -1);
  assert_int_equal(errno, EAGAIN);
  assert_int_equal(tdl_fd_blocked(P[0], TDL_READ), 0);
  assert_int_equal(tdl_fd_wait(P[0], TDL_READ, tdl_after(2 * TDL_MSEC)), -ETIMEDOUT);
  /* New data ends the next wait. */
  assert_int_equal(write(P[1], "b", 1), 1);
  assert_true(tdl_fd_wait(P[0], TDL_READ, tdl_after(T_HANG)) & TDL_READ);
  assert_int_equal(read(P[0], b, sizeof b), 1);
  /* Misuse. */
  assert_int_equal(tdl_fd_blocked(P[0], 0), -EINVAL);
  assert_int_equal(tdl_fd_blocked(P[0], TDL_READ | TDL_HUP), -EINVAL);
  assert_int_equal(tdl_fd_blocked(-1, TDL_READ), -EBADF);
  return NULL;
}

static void fd_blocked_forgets_cached_readiness(void **state)
{
  (void)state;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, P), 0);
  assert_int_equal(tdl_fd_blocked(P[0], TDL_READ), -EPERM); /* not in a fiber */
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, fd_blocked_user, NULL, NULL), 0);
  tdl_fiber_detach(L, h);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(P[0]);
  tdl_close(P[1]);
}

static void *wait_after_foreign_eagain(void *arg)
{
  (void)arg;
  char buf[4096];
  memset(buf, 'x', sizeof buf);
  /* Register the write end with the loop first (so writability is cached),
   * then fill the pipe behind treadle's back. */
  assert_int_equal(tdl_write(P[1], "x", 1, TDL_FOREVER), 1);
  while (write(P[1], buf, sizeof buf) > 0)
    ;
  assert_int_equal(errno, EAGAIN);
  /* Full: the wait must really wait, not report the stale "writable". */
  assert_int_equal(tdl_fd_wait(P[1], TDL_WRITE, tdl_after(2 * TDL_MSEC)), -ETIMEDOUT);
  while (read(P[0], buf, sizeof buf) > 0)
    ;
  int ev = tdl_fd_wait(P[1], TDL_WRITE, tdl_after(T_HANG));
  assert_true(ev > 0 && (ev & TDL_WRITE));
  /* Readable data that is already there is reported at once. */
  assert_int_equal(write(P[1], "y", 1), 1);
  ev = tdl_fd_wait(P[0], TDL_READ, tdl_after(T_HANG));
  assert_true(ev > 0 && (ev & TDL_READ));
  return NULL;
}

static void wait_fd_after_a_foreign_eagain(void **state)
{
  (void)state;
  t_pipe(P);
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, wait_after_foreign_eagain, NULL, NULL), 0);
  tdl_fiber_detach(L, h);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(P[0]);
  tdl_close(P[1]);
}

static int others_ran;
static void *failing_retry_loop(void *arg)
{
  int dirfd = (int)(intptr_t)arg;
  char c;
  long tries = 0;
  /* Every call fails at once (EISDIR); the budget must still make it yield. */
  while (!others_ran && tries < 10000000) {
    assert_int_equal(tdl_read(dirfd, &c, 1, TDL_FOREVER), -EISDIR);
    tries++;
  }
  assert_true(others_ran);
  return NULL;
}

static void *mark_ran(void *arg)
{
  (void)arg;
  others_ran = 1;
  return NULL;
}

static void failing_calls_still_yield(void **state)
{
  (void)state;
  others_ran = 0;
  int dirfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(dirfd >= 0);
  tdl_fiber_t a, b;
  assert_int_equal(tdl_fiber_spawn(&a, L, failing_retry_loop, (void *)(intptr_t)dirfd, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&b, L, mark_ran, NULL, NULL), 0);
  tdl_fiber_detach(L, a);
  tdl_fiber_detach(L, b);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(dirfd);
}

/* ---- the loop's view ---- */

static void *park_until_cancelled(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_sleep(TDL_FOREVER);
}

static void deadlock_is_reported_and_loop_kept(void **state)
{
  (void)state;
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, park_until_cancelled, NULL, NULL), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), -EDEADLK);
  assert_int_equal(tdl_loop_free(L), -EBUSY); /* the fiber still owns its stack */
  assert_int_equal(tdl_fiber_cancel(L, h), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  /* Finished but not joined: still not releasable by the loop alone. */
  assert_int_equal(tdl_fiber_detach(L, h), 0);
}

/* A timed park's timer outlives the park (sched.c, lazy_set): what a later
 * park, the loop's liveness and its deadlock check see must not change. */
#define AN_HOUR (3600 * TDL_SEC)

/* Parks until first (relative) and is woken at once by its peer; then parks
 * until second: that park must end with -ETIMEDOUT at or after its own
 * deadline, whether the first park's timer would fire later (an hour: the
 * second must not wait for it) or earlier (it must not end the second). */
typedef struct two_parks {
  tdl_time_t first, second;
} two_parks;
static tdl_fiber_t lazy_peer;
static int lazy_second_rc;
static bool lazy_second_late;
static void *park_twice(void *arg)
{
  const two_parks *t = arg;
  assert_int_equal(tdl_fiber_park(tdl_after(t->first)), 0);
  tdl_time_t d = tdl_after(t->second);
  lazy_second_rc = tdl_fiber_park(d);
  lazy_second_late = tdl_now() >= d;
  return NULL;
}
static void *unpark_peer(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_fiber_unpark(L, lazy_peer), 0);
  return NULL;
}

static void second_park_times_out_on_its_own_deadline(tdl_time_t first, tdl_time_t second)
{
  two_parks t = {first, second};
  lazy_second_rc = 0;
  lazy_second_late = false;
  assert_int_equal(tdl_fiber_spawn(&lazy_peer, L, park_twice, &t, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_fiber_spawn(NULL, L, unpark_peer, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(lazy_second_rc, -ETIMEDOUT);
  assert_true(lazy_second_late);
}

static void later_deadline_after_an_earlier_park(void **state)
{
  (void)state;
  second_park_times_out_on_its_own_deadline(AN_HOUR, 20 * TDL_MSEC);
}

static void earlier_timer_does_not_end_a_later_park(void **state)
{
  (void)state;
  second_park_times_out_on_its_own_deadline(5 * TDL_MSEC, 60 * TDL_MSEC);
}

/* A timed park woken early, then a park with no deadline and nothing left to
 * wake it: a deadlock at once, not an hour later; and a fiber that finishes
 * after a timed park leaves no timer to keep the loop (or its free) waiting. */
static void *park_far_then_forever(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_fiber_park(tdl_after(AN_HOUR)), 0);
  return (void *)(intptr_t)tdl_fiber_park(TDL_FOREVER);
}

static void *park_far_then_finish(void *arg)
{
  (void)arg;
  assert_int_equal(tdl_fiber_park(tdl_after(AN_HOUR)), 0);
  return NULL;
}

static void park_timer_keeps_nothing_alive(void **state)
{
  (void)state;
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&lazy_peer, L, park_far_then_forever, NULL, NULL), 0);
  h = lazy_peer;
  assert_int_equal(tdl_fiber_spawn(NULL, L, unpark_peer, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), -EDEADLK);
  assert_int_equal(tdl_fiber_cancel(L, h), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_fiber_detach(L, h), 0);

  assert_int_equal(tdl_fiber_spawn(&lazy_peer, L, park_far_then_finish, NULL, &(tdl_fiber_options){.detached = true}),
                   0);
  assert_int_equal(tdl_fiber_spawn(NULL, L, unpark_peer, NULL, &(tdl_fiber_options){.detached = true}), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_false(tdl_loop_alive(L));
}

static void a_hundred_thousand_fibers(void **state)
{
  (void)state;
  /* The full count natively; valgrind checks the same code on fewer. */
  const int N = RUNNING_ON_VALGRIND ? 5000 : 100000;
  tdl_fiber_options o = {.stack_size = TDL_STACK_MIN};
  for (int i = 0; i < N; i++) {
    tdl_fiber_t h;
    assert_int_equal(tdl_fiber_spawn(&h, L, sleeper, NULL, &o), 0);
    assert_int_equal(tdl_fiber_detach(L, h), 0);
  }
  tdl_fiber_stats st;
  tdl_fiber_stats_get(L, &st);
  assert_int_equal(st.live, N);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_fiber_stats_get(L, &st);
  assert_int_equal(st.live, 0);
}

static int fls_dtor_calls;
static void fls_dtor(void *v)
{
  assert_ptr_equal(v, (void *)0x77);
  fls_dtor_calls++;
}

static tdl_fls_key_t K;
static void *fls_user(void *arg)
{
  assert_null(tdl_fls_get(K));
  assert_int_equal(tdl_fls_set(K, arg), 0);
  tdl_fiber_yield();
  assert_ptr_equal(tdl_fls_get(K), arg); /* not another fiber's value */
  assert_int_equal(tdl_fls_set(TDL_FLS_KEYS + 5, arg), -EINVAL);
  return NULL;
}

static void fiber_local_storage(void **state)
{
  (void)state;
  assert_int_equal(tdl_fls_key_new(&K, fls_dtor), 0);
  assert_int_equal(tdl_fls_set(K, (void *)1), -EPERM);
  assert_null(tdl_fls_get(K));
  fls_dtor_calls = 0;
  tdl_fiber_t a, b;
  assert_int_equal(tdl_fiber_spawn(&a, L, fls_user, (void *)0x77, NULL), 0);
  assert_int_equal(tdl_fiber_spawn(&b, L, fls_user, (void *)0x77, NULL), 0);
  tdl_fiber_detach(L, a);
  tdl_fiber_detach(L, b);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(fls_dtor_calls, 2);
}

/* A fiber's first value takes an allocation: without memory the set fails
 * with -ENOMEM and changes nothing; NULL needs none; the next set works. */
static void *fls_no_memory(void *arg)
{
  (void)arg;
#ifdef TDL_FAULTS
  tdl__fault_arm(1, false);
  int e = tdl_fls_set(K, (void *)0x77);
  bool fired = tdl__fault_fired();
  tdl__fault_arm(0, false);
  assert_true(fired);
  assert_int_equal(e, -ENOMEM);
  assert_null(tdl_fls_get(K));
  tdl__fault_arm(1, true);
  assert_int_equal(tdl_fls_set(K, NULL), 0);
  tdl__fault_arm(0, false);
#endif
  assert_int_equal(tdl_fls_set(K, (void *)0x77), 0);
  assert_ptr_equal(tdl_fls_get(K), (void *)0x77);
  return NULL;
}

static void fiber_local_storage_no_memory(void **state)
{
  (void)state;
  if (tdl_fls_key_new(&K, fls_dtor) < 0)
    assert_true(K < TDL_FLS_KEYS); /* all taken by earlier tests: reuse the last */
  fls_dtor_calls = 0;
  tdl_fiber_t a;
  assert_int_equal(tdl_fiber_spawn(&a, L, fls_no_memory, NULL, NULL), 0);
  tdl_fiber_detach(L, a);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(fls_dtor_calls, 1);
}

static int count_info(const tdl_fiber_info *in, void *ctx)
{
  int *n = ctx;
  if (strcmp(in->name, "dumped") == 0) {
    assert_string_equal(in->state, "parked");
    assert_string_equal(in->waits_on, "sleep");
    assert_true(in->deadline != TDL_FOREVER);
    assert_true(in->stack_used > 0 && in->stack_used <= in->stack_size);
    (*n)++;
  }
  return 0;
}

static void *dumper(void *arg)
{
  (void)arg;
  int n = 0;
  tdl_fiber_foreach(tdl_fiber_loop(), count_info, &n);
  assert_int_equal(n, 1);
  int p[2];
  t_pipe(p);
  assert_true(tdl_fiber_dump(tdl_fiber_loop(), p[1]) >= 2);
  char buf[1024] = {0};
  assert_true(read(p[0], buf, sizeof buf - 1) > 0);
  assert_non_null(strstr(buf, "\"dumped\" parked on sleep until"));
  assert_non_null(strstr(buf, "running"));
  close(p[0]);
  close(p[1]);
  return NULL;
}

/* Each parked fiber reports the call it waits in, not just "read". */
static int SP[2], PP[2];

static void *in_recv(void *arg)
{
  (void)arg;
  char c;
  return (void *)(intptr_t)tdl_recv(SP[0], &c, 1, 0, TDL_FOREVER);
}

static void *in_readv(void *arg)
{
  (void)arg;
  char c;
  struct iovec iov = {&c, 1};
  return (void *)(intptr_t)tdl_readv(PP[0], &iov, 1, TDL_FOREVER);
}

static void *in_wait_fd(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)tdl_fd_wait(SP[1], TDL_READ, TDL_FOREVER);
}

static int check_wait_name(const tdl_fiber_info *in, void *ctx)
{
  int *n = ctx;
  const char *want = strcmp(in->name, "r") == 0    ? "recv"
                     : strcmp(in->name, "v") == 0  ? "readv"
                     : strcmp(in->name, "w") == 0  ? "wait read"
                                                   : NULL;
  if (want) {
    assert_string_equal(in->waits_on, want);
    (*n)++;
  }
  return 0;
}

static void dump_names_the_call(void **state)
{
  (void)state;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, SP), 0);
  t_pipe(PP);
  tdl_fiber_t f[3];
  assert_int_equal(tdl_fiber_spawn(&f[0], L, in_recv, NULL, &(tdl_fiber_options){.name = "r"}), 0);
  assert_int_equal(tdl_fiber_spawn(&f[1], L, in_readv, NULL, &(tdl_fiber_options){.name = "v"}), 0);
  assert_int_equal(tdl_fiber_spawn(&f[2], L, in_wait_fd, NULL, &(tdl_fiber_options){.name = "w"}), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_NOWAIT), 1);
  int n = 0;
  tdl_fiber_foreach(L, check_wait_name, &n);
  assert_int_equal(n, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(tdl_fiber_cancel(L, f[i]), 0);
    assert_int_equal(tdl_fiber_detach(L, f[i]), 0);
  }
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(SP[0]);
  tdl_close(SP[1]);
  tdl_close(PP[0]);
  tdl_close(PP[1]);
}

/* ---- one read per message ---- */

enum { ROUNDS = 200 };
static int RR[2];

static void *answer(void *arg)
{
  (void)arg;
  char buf[64];
  for (int i = 0; i < ROUNDS; i++) {
    assert_int_equal(tdl_read(RR[1], buf, sizeof buf, tdl_after(T_HANG)), 5);
    assert_int_equal(tdl_write(RR[1], "pong", 4, TDL_FOREVER), 4);
  }
  return NULL;
}

static void *ask(void *arg)
{
  (void)arg;
  char buf[64];
  long before = t_reads_made();
  for (int i = 0; i < ROUNDS; i++) {
    assert_int_equal(tdl_write(RR[0], "ping!", 5, TDL_FOREVER), 5);
    assert_int_equal(tdl_read(RR[0], buf, sizeof buf, tdl_after(T_HANG)), 4);
  }
  long used = t_reads_made() - before;
  /* Each side reads once per message: after a short read the next read
   * parks first instead of hearing EAGAIN (which would make it 4 per round
   * trip).  A few spare for the first rounds, before the fds are known.
   * On uring the reads are the ring's: no read system call at all. */
  if (strcmp(tdl_loop_backend(tdl_fiber_loop()), "uring") == 0) {
    assert_true(used <= 8);
    return NULL;
  }
  assert_true(used >= 2 * ROUNDS);
  assert_true(used <= 2 * ROUNDS + 8);
  return NULL;
}

static void short_read_parks_without_a_read(void **state)
{
  (void)state;
  /* No /proc/self/io (a kernel without task I/O accounting); or valgrind,
   * whose scheduler lock is a pipe it reads around every system call. */
  if (t_reads_made() < 0 || RUNNING_ON_VALGRIND)
    T_SKIP("%s", RUNNING_ON_VALGRIND ? "valgrind reads a pipe around every system call"
                                     : "no /proc/self/io (no task I/O accounting) to count reads");
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, RR), 0);
  go(answer, NULL);
  go(ask, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_close(RR[0]);
  tdl_close(RR[1]);
}

/* More readers ready at once than the scheduler runs between two polls
 * (its dispatch batch, 512): the poll that comes while the rest are still
 * queued reports their fds again, which turns them edge-triggered, and that
 * must not cost them their read-free parking (it once did: from then on
 * every message cost a read that heard EAGAIN). */
enum { CROWD = 700, CROWD_ROUNDS = 12 };
static int crowd_srv[CROWD], crowd_cli[CROWD];
static int crowd_answered;
static tdl_fiber_t crowd_driver;

static void *crowd_echo(void *arg)
{
  int fd = crowd_srv[(intptr_t)arg];
  char b[64];
  for (;;) {
    ssize_t n = tdl_read(fd, b, sizeof b, tdl_after(T_HANG));
    if (n == 0)
      return NULL;
    assert_int_equal(n, 1);
    assert_int_equal(tdl_write(fd, b, 1, TDL_FOREVER), 1);
    if (++crowd_answered == CROWD)
      tdl_fiber_unpark(tdl_fiber_loop(), crowd_driver);
  }
}

static void *crowd_drive(void *arg)
{
  (void)arg;
  long before = t_reads_made();
  for (int r = 0; r < CROWD_ROUNDS; r++) {
    crowd_answered = 0;
    /* Plain calls: no yield between them, so every echo is ready at once. */
    for (int i = 0; i < CROWD; i++)
      assert_int_equal(write(crowd_cli[i], "x", 1), 1);
    while (crowd_answered < CROWD)
      assert_int_equal(tdl_fiber_park(tdl_after(T_HANG)), 0);
    char b;
    for (int i = 0; i < CROWD; i++)
      assert_int_equal(read(crowd_cli[i], &b, 1), 1);
  }
  long echo_reads = t_reads_made() - before - (long)CROWD * CROWD_ROUNDS;
  /* One read per message, plus the first of each fd (EAGAIN: not yet
   * registered), plus a few spare.  On uring: none, the ring reads. */
  if (strcmp(tdl_loop_backend(tdl_fiber_loop()), "uring") == 0)
    assert_true(echo_reads <= 16);
  else
    assert_true(echo_reads >= (long)CROWD * CROWD_ROUNDS);
  assert_true(echo_reads <= (long)CROWD * (CROWD_ROUNDS + 1) + 16);
  for (int i = 0; i < CROWD; i++)
    close(crowd_cli[i]);
  return NULL;
}

static void crowd_ready_at_once_reads_once_each(void **state)
{
  (void)state;
  if (t_reads_made() < 0 || RUNNING_ON_VALGRIND)
    T_SKIP("%s", RUNNING_ON_VALGRIND ? "valgrind reads a pipe around every system call"
                                     : "no /proc/self/io (no task I/O accounting) to count reads");
  for (int i = 0; i < CROWD; i++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    crowd_srv[i] = sv[0];
    crowd_cli[i] = sv[1];
  }
  for (intptr_t i = 0; i < CROWD; i++)
    go(crowd_echo, (void *)i);
  crowd_driver = go(crowd_drive, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  for (int i = 0; i < CROWD; i++)
    tdl_close(crowd_srv[i]);
}

static void dump_lists_fibers(void **state)
{
  (void)state;
  tdl_fiber_t a, b;
  assert_int_equal(tdl_fiber_spawn(&a, L, sleeper, NULL, &(tdl_fiber_options){.name = "dumped"}), 0);
  assert_int_equal(tdl_fiber_spawn(&b, L, dumper, NULL, NULL), 0);
  tdl_fiber_detach(L, a);
  tdl_fiber_detach(L, b);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
}

/* ---- looking inside: every state ---- */

typedef struct seen {
  int n;
  const char *state[4];
  const char *waits_on[4];
  int fd[4];
  int stop_after; /* return non-zero after this many */
} seen;

static int see(const tdl_fiber_info *in, void *ctx)
{
  seen *v = ctx;
  if (v->n < 4) {
    v->state[v->n] = in->state;
    v->waits_on[v->n] = in->waits_on;
    v->fd[v->n] = in->fd;
  }
  v->n++;
  return v->stop_after && v->n >= v->stop_after;
}

static void *read_pipe_fiber(void *arg)
{
  char c;
  return (void *)(intptr_t)tdl_read(*(int *)arg, &c, 1, TDL_FOREVER);
}

/* A loop without fibers has none to visit, and zero counts; then a fiber
 * parked on a read (its fd named), a finished one nobody joined, and one
 * spawned that has not run, each in its state; a visit that returns
 * non-zero stops there, and so does a dump whose fd cannot be written. */
static void foreach_every_state(void **state)
{
  (void)state;
  seen v = {0};
  assert_int_equal(tdl_fiber_foreach(L, see, &v), 0);
  tdl_fiber_stats st;
  tdl_fiber_stats_get(L, &st);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.stacks_cached, 0);
  int p[2];
  t_pipe(p);
  tdl_fiber_t reader, done, fresh;
  assert_int_equal(tdl_fiber_spawn(&reader, L, read_pipe_fiber, &p[0], NULL), 0);
  assert_true(tdl_loop_run(L, TDL_LOOP_NOWAIT) >= 0);
  assert_int_equal(tdl_fiber_spawn(&done, L, ret_arg, NULL, NULL), 0);
  assert_true(tdl_loop_run(L, TDL_LOOP_NOWAIT) >= 0);
  assert_int_equal(tdl_fiber_spawn(&fresh, L, ret_arg, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_foreach(L, see, &v), 3);
  bool parked = false, finished = false, runnable = false;
  for (int i = 0; i < 3; i++) {
    if (strcmp(v.state[i], "parked") == 0) {
      parked = true;
      assert_string_equal(v.waits_on[i], "read");
      assert_int_equal(v.fd[i], p[0]);
    } else if (strcmp(v.state[i], "finished") == 0) {
      finished = true;
    } else if (strcmp(v.state[i], "runnable") == 0) {
      runnable = true;
      assert_string_equal(v.waits_on[i], "");
    }
  }
  assert_true(parked && finished && runnable);
  seen first = {.stop_after = 1};
  assert_int_equal(tdl_fiber_foreach(L, see, &first), 1);
  /* The dump says the same in words. */
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(tdl_fiber_dump(L, fileno(f)), 3);
  char text[1024] = {0};
  rewind(f);
  assert_true(fread(text, 1, sizeof text - 1, f) > 0);
  fclose(f);
  char want[32];
  snprintf(want, sizeof want, "parked on read fd %d ", p[0]);
  assert_non_null(strstr(text, want));
  assert_non_null(strstr(text, "\" finished stack "));
  assert_non_null(strstr(text, "\" runnable stack "));
  int ro = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(ro >= 0);
  assert_int_equal(tdl_fiber_dump(L, ro), 1); /* the first line failed: no more */
  close(ro);
  tdl_fiber_stats_get(L, &st);
  assert_int_equal(st.live, 3);
  assert_int_equal(tdl_fiber_cancel(L, reader), 0);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  tdl_fiber_t all[] = {reader, done, fresh};
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_fiber_detach(L, all[i]), 0);
  tdl_close(p[0]);
  tdl_close(p[1]);
}

/* Keys are process-wide and never freed: past TDL_FLS_KEYS, -EAGAIN.  (Last
 * of the tests: it takes every key left.) */
static void fls_keys_run_out(void **state)
{
  (void)state;
  tdl_fls_key_t k;
  int e, made = 0;
  while ((e = tdl_fls_key_new(&k, NULL)) == 0)
    assert_true(++made <= TDL_FLS_KEYS);
  assert_int_equal(e, -EAGAIN);
  assert_int_equal(tdl_fls_key_new(&k, NULL), -EAGAIN);
}

static void free_with_fibers_is_refused(void **state)
{
  (void)state;
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, L, ret_arg, NULL, NULL), 0);
  assert_int_equal(tdl_loop_free(L), -EBUSY);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(tdl_loop_free(L), -EBUSY); /* finished, not joined */
  assert_int_equal(tdl_fiber_detach(L, h), 0);
}

static void *main_fn(void *arg) { return (void *)((intptr_t)arg * 2); }

static void fiber_main(void **state)
{
  (void)state;
  void *r = NULL;
  assert_int_equal(tdl_fiber_main(main_fn, (void *)21, &r), 0);
  assert_int_equal((intptr_t)r, 42);
}

static int unwound; /* fibers that saw their park end with -ECANCELED */

static void *park_and_count(void *arg)
{
  (void)arg;
  if (tdl_fiber_park(TDL_FOREVER) == -ECANCELED)
    unwound++;
  return NULL;
}

/* main spawns a fiber it never joins or detaches, and one that parks for
 * good, then parks for good itself: -EDEADLK, and the loop with every stack
 * is freed (valgrind and ASan see no leak). */
static void *deadlocking_main(void *arg)
{
  (void)arg;
  tdl_loop *loop = tdl_fiber_loop();
  assert_int_equal(tdl_fiber_spawn(NULL, loop, main_fn, NULL, NULL), 0);
  tdl_fiber_t h;
  assert_int_equal(tdl_fiber_spawn(&h, loop, park_and_count, NULL, NULL), 0);
  assert_int_equal(tdl_fiber_detach(loop, h), 0);
  if (tdl_fiber_park(TDL_FOREVER) == -ECANCELED)
    unwound++;
  return (void *)1;
}

static void fiber_main_deadlock_frees_everything(void **state)
{
  (void)state;
  unwound = 0;
  void *r = NULL;
  assert_int_equal(tdl_fiber_main(deadlocking_main, NULL, &r), -EDEADLK);
  assert_null(r); /* only set on success */
  assert_int_equal(unwound, 2);
}

static void *unjoined_main(void *arg)
{
  (void)arg;
  for (int i = 0; i < 3; i++)
    assert_int_equal(tdl_fiber_spawn(NULL, tdl_fiber_loop(), main_fn, NULL, NULL), 0);
  return (void *)7;
}

/* Finished fibers nobody joined are released at the end. */
static void fiber_main_releases_unjoined(void **state)
{
  (void)state;
  void *r = NULL;
  assert_int_equal(tdl_fiber_main(unjoined_main, NULL, &r), 0);
  assert_int_equal((intptr_t)r, 7);
}

/* ---- running out of memory ---- */

#if !defined(TDL_ASAN)
static void *noop(void *arg) { return arg; }
#endif

#ifdef TDL_FAULTS
/* Every allocation and mapping a spawn makes, failing from the Nth on (the
 * scheduler, its table of slots, which grows past 256 fibers, the stack and
 * its fallback without a guard, a compactable fiber's control block): the
 * spawn that meets it fails with -ENOMEM, the loop keeps what was spawned
 * before, runs it and frees; past the last one every spawn works. */
static void *spawned(void *arg) { return arg; }

static void spawn_under_faults(void **state)
{
  (void)state;
  for (int compact = 0; compact < 2; compact++) {
    long n = 1;
    for (;; n++) {
      tdl_loop *loop = t_loop_new();
      if (compact)
        assert_int_equal(tdl_fiber_compact_idle(loop, TDL_MSEC), 0);
      tdl__fault_arm(n, true);
      int e = 0, made = 0;
      for (int i = 0; i < 300 && e == 0; i++)
        if ((e = tdl_fiber_spawn(NULL, loop, spawned, NULL, &(tdl_fiber_options){.detached = true})) == 0)
          made++;
      bool fired = tdl__fault_fired();
      tdl__fault_arm(0, false);
      if (fired)
        assert_int_equal(e, -ENOMEM);
      else
        assert_int_equal(made, 300);
      tdl_fiber_stats st;
      tdl_fiber_stats_get(loop, &st);
      assert_int_equal(st.live, made);
      assert_int_equal(tdl_loop_run(loop, TDL_LOOP_DEFAULT), 0);
      t_loop_free(loop);
      if (!fired)
        break;
    }
    assert_true(n > 3);
  }
}

/* tdl_fiber_main the same: its loop, its spawn, its run failing from the
 * Nth on: an error, and nothing left open. */
static void fiber_main_under_faults(void **state)
{
  (void)state;
  int fds = t_count_fds();
  long n = 1;
  for (;; n++) {
    void *r = NULL;
    tdl__fault_arm(n, true);
    int e = tdl_fiber_main(main_fn, (void *)21, &r);
    bool fired = tdl__fault_fired();
    tdl__fault_arm(0, false);
    assert_int_equal(t_count_fds(), fds);
    /* A fault some step gets over is no error (then the result came). */
    if (!fired || e == 0) {
      assert_int_equal(e, 0);
      assert_int_equal((intptr_t)r, 42);
    } else {
      assert_true(e < 0);
    }
    if (!fired)
      break;
  }
  assert_true(n > 2);
}
#endif

static void spawn_reports_enomem(void **state)
{
  (void)state;
#if defined(TDL_ASAN)
  T_SKIP("ASan reserves terabytes of shadow: an address-space limit breaks it");
#else
  if (RUNNING_ON_VALGRIND || getenv("TDL_QEMU_USER"))
    T_SKIP("valgrind and qemu-user keep RLIMIT_AS to themselves");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    tdl_loop *loop;
    if (tdl_loop_new(&loop, NULL) < 0)
      _exit(10);
    struct rlimit rl = {64u << 20, 64u << 20};
    /* Room for what is mapped now plus 64 MiB: 1 MiB stacks run out soon. */
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f || fscanf(f, "%lu", &pages) != 1)
      _exit(11);
    fclose(f);
    rl.rlim_cur = rl.rlim_max = pages * (unsigned long)sysconf(_SC_PAGESIZE) + (64u << 20);
    if (setrlimit(RLIMIT_AS, &rl) < 0)
      _exit(12);
    tdl_fiber_options o = {.stack_size = 1 << 20};
    int n = 0, e;
    tdl_fiber_t h;
    while ((e = tdl_fiber_spawn(&h, loop, noop, NULL, &o)) == 0) {
      tdl_fiber_detach(loop, h);
      if (++n > 10000)
        _exit(13);
    }
    if (e != -ENOMEM)
      _exit(14);
    /* Nothing was lost: the ones that fit run and the loop frees. */
    if (tdl_loop_run(loop, TDL_LOOP_DEFAULT) != 0 || tdl_loop_free(loop) != 0)
      _exit(15);
    _exit(n > 0 ? 0 : 16);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
#endif
}

/* ---- stack overflow diagnosis ---- */

static int deep(int n)
{
  volatile char pad[512];
  pad[0] = (char)n;
  return n == 0 ? pad[0] : deep(n - 1) + pad[0];
}

static void *overflow(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)deep(1 << 20);
}

static void overflow_names_the_fiber(void **state)
{
  (void)state;
  if (RUNNING_ON_VALGRIND)
    T_SKIP("valgrind reports the overflow itself");
  if (getenv("TDL_QEMU_USER"))
    T_SKIP("/proc/self/exe is qemu under qemu-user: test_overflow covers qemu");
  {
  int err[2];
  assert_int_equal(pipe(err), 0);
  /* A fresh process: cmocka installs its own SIGSEGV handler for each test,
   * which would hide ours. */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(err[1], 2);
    execl("/proc/self/exe", "test_fiber", "overflow-child", (char *)NULL);
    _exit(20);
  }
  close(err[1]);
  char buf[512] = {0};
  ssize_t got = 0, n;
  while ((n = read(err[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0)
    got += n;
  close(err[0]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGSEGV);
  assert_non_null(strstr(buf, "fiber 1 \"deep-diver\" overflowed its 65536-byte stack"));
  }
}

static int overflow_child(void)
{
  tdl_loop *loop;
  if (tdl_loop_new(&loop, NULL) < 0)
    return 10;
  tdl_fiber_t h;
  tdl_fiber_spawn(&h, loop, overflow, NULL, &(tdl_fiber_options){.name = "deep-diver"});
  tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  return 0; /* not reached */
}

/* A run queue of fibers that each work between switches does not keep the
 * loop from its timers: a batch of turns ends after half a millisecond, so
 * a 1 ms timer fires after a few dozen turns of 50 us, not after the whole
 * batch of 512 (before that bound, all 400 turns ran first). */
enum { WORKERS = 400 };
static int turns_when_fired, turns_taken;

static void busy_for(tdl_time_t span)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  tdl_time_t until = (tdl_time_t)t.tv_sec * TDL_SEC + t.tv_nsec + span;
  do
    clock_gettime(CLOCK_MONOTONIC, &t);
  while ((tdl_time_t)t.tv_sec * TDL_SEC + t.tv_nsec < until);
}

static void *worker_turn(void *arg)
{
  (void)arg;
  busy_for(50 * TDL_USEC);
  turns_taken++;
  return NULL;
}

static void timer_fired(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  (void)t;
  turns_when_fired = turns_taken;
}

static void busy_fibers_leave_room_for_timers(void **state)
{
  (void)state;
  turns_when_fired = -1;
  turns_taken = 0;
  tdl_timer t;
  tdl_timer_init(&t, timer_fired, NULL);
  assert_int_equal(tdl_timer_start(L, &t, TDL_MSEC, 0), 0);
  for (int i = 0; i < WORKERS; i++)
    go(worker_turn, NULL);
  assert_int_equal(tdl_loop_run(L, TDL_LOOP_DEFAULT), 0);
  assert_int_equal(turns_taken, WORKERS);
  assert_true(turns_when_fired >= 0);
  assert_true(turns_when_fired < WORKERS / 2);
}

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "overflow-child") == 0)
    return overflow_child();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(spawn_and_join, setup, teardown),
      cmocka_unit_test_setup_teardown(now_in_a_fiber, setup, teardown),
      cmocka_unit_test_setup_teardown(later_deadline_after_an_earlier_park, setup, teardown),
      cmocka_unit_test_setup_teardown(earlier_timer_does_not_end_a_later_park, setup, teardown),
      cmocka_unit_test_setup_teardown(park_timer_keeps_nothing_alive, setup, teardown),
      cmocka_unit_test_setup_teardown(spawn_detached, setup, teardown),
      cmocka_unit_test_setup_teardown(fifo_and_yield, setup, teardown),
      cmocka_unit_test_setup_teardown(busy_fibers_leave_room_for_timers, setup, teardown),
      cmocka_unit_test_setup_teardown(join_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(only_one_joiner, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_spawn_arguments, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_wakes_a_parked_fiber, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_frees_the_fd_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(cancelled_fiber_joins_cancelled_children, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_a_runnable_fiber, setup, teardown),
      cmocka_unit_test_setup_teardown(park_and_unpark, setup, teardown),
      cmocka_unit_test_setup_teardown(read_and_write_park_the_fiber, setup, teardown),
      cmocka_unit_test_setup_teardown(dontwait_never_parks, setup, teardown),
      cmocka_unit_test_setup_teardown(blocking_fds_are_made_nonblocking, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_fds_in_fibers, setup, teardown),
      cmocka_unit_test_setup_teardown(close_wakes_waiters, setup, teardown),
      cmocka_unit_test_setup_teardown(wait_fd_after_a_foreign_eagain, setup, teardown),
      cmocka_unit_test_setup_teardown(fd_blocked_forgets_cached_readiness, setup, teardown),
      cmocka_unit_test_setup_teardown(failing_calls_still_yield, setup, teardown),
      cmocka_unit_test_setup_teardown(deadlock_is_reported_and_loop_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(a_hundred_thousand_fibers, setup, teardown),
      cmocka_unit_test_setup_teardown(fiber_local_storage, setup, teardown),
      cmocka_unit_test_setup_teardown(fiber_local_storage_no_memory, setup, teardown),
      cmocka_unit_test_setup_teardown(dump_lists_fibers, setup, teardown),
      cmocka_unit_test_setup_teardown(dump_names_the_call, setup, teardown),
      cmocka_unit_test_setup_teardown(short_read_parks_without_a_read, setup, teardown),
      cmocka_unit_test_setup_teardown(crowd_ready_at_once_reads_once_each, setup, teardown),
      cmocka_unit_test_setup_teardown(free_with_fibers_is_refused, setup, teardown),
      cmocka_unit_test(fiber_main),
      cmocka_unit_test(fiber_main_deadlock_frees_everything),
      cmocka_unit_test(fiber_main_releases_unjoined),
      cmocka_unit_test(spawn_reports_enomem),
#ifdef TDL_FAULTS
      cmocka_unit_test(spawn_under_faults),
      cmocka_unit_test(fiber_main_under_faults),
#endif
      cmocka_unit_test(overflow_names_the_fiber),
      cmocka_unit_test_setup_teardown(foreach_every_state, setup, teardown),
      cmocka_unit_test(fls_keys_run_out), /* last: it takes every key left */
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
