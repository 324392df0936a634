/* SPDX-License-Identifier: MIT */
/* Accepting on several loops: tdl_acceptor_* (group.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "treadle.h"

#include "helpers.h"

enum { LOOPS = 2 };

/* The handler answers with its loop's index, then waits for the client to
 * hang up: a connection stays open (counted) as long as the client holds it. */
static void answer_index(int fd, void *arg)
{
  (void)arg;
  char idx = (char)('0' + tdl_group_index());
  if (tdl_net_send_all(fd, &idx, 1, NULL, tdl_after(T_HANG)) == 0) {
    char b;
    while (tdl_recv(fd, &b, 1, 0, TDL_FOREVER) > 0) {
    }
  }
  tdl_close(fd);
}

static int serve_results[LOOPS]; /* written by the loops, read by the test: atomically */
#define SET_RESULT(i, v) __atomic_store_n(&serve_results[i], (v), __ATOMIC_SEQ_CST)
#define RESULT(i) __atomic_load_n(&serve_results[i], __ATOMIC_SEQ_CST)

static void *serve_main(void *arg)
{
  int i = tdl_group_index();
  SET_RESULT(i, tdl_acceptor_serve(arg, (unsigned)i));
  return NULL;
}

/* A blocking client connection to 127.0.0.1:port. */
/* The TCP port a's listeners are bound to. */
static int port_of(const tdl_acceptor *a)
{
  tdl_addr at;
  assert_int_equal(tdl_acceptor_local_addr(a, &at), 0);
  return tdl_addr_port(&at);
}

static int dial(int port)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  return fd;
}

static int open_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  while (d && readdir(d))
    n++;
  if (d)
    closedir(d);
  return n;
}

static tdl_acceptor *make(tdl_acceptor_mode mode, unsigned loops)
{
  tdl_acceptor *a;
  assert_int_equal(tdl_acceptor_new(&a, &(tdl_acceptor_options){.listen = "127.0.0.1:0", .loops = loops,
                                                                 .mode = mode, .handler = answer_index}),
                   0);
  assert_true(port_of(a) > 0);
  return a;
}

static tdl_group *start(tdl_acceptor *a)
{
  memset(serve_results, 0x7f, sizeof serve_results);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = LOOPS, .main = serve_main, .arg = a}), 0);
  /* Every slot serving before the first client: until one is, the others
   * take its share, and the exact counts below would depend on how soon
   * each loop's thread started (a loaded machine: 56 / 44 seen once). */
  for (unsigned i = 0; i < LOOPS; i++) {
    tdl_acceptor_stats st;
    for (tdl_time_t end = t_clock() + T_HANG;;) {
      assert_int_equal(tdl_acceptor_stats_get(a, i, &st), 0);
      if (st.serving || t_clock() >= end)
        break;
      usleep(1000);
    }
  }
  return g;
}

static void wait_open(tdl_acceptor *a, unsigned i, uint64_t want)
{
  tdl_acceptor_stats st;
  for (tdl_time_t end = t_clock() + T_HANG; t_clock() < end;) {
    assert_int_equal(tdl_acceptor_stats_get(a, i, &st), 0);
    if (st.open == want)
      return;
    usleep(1000);
  }
  fail_msg("slot %u: %llu open, expected %llu", i, (unsigned long long)st.open, (unsigned long long)want);
}

enum { CONNS = 100 };

/* Connect CONNS clients, all held open; count which loop answered each. */
static void connect_all(tdl_acceptor *a, int *fds, int counts[LOOPS])
{
  memset(counts, 0, LOOPS * sizeof counts[0]);
  for (int i = 0; i < CONNS; i++) {
    fds[i] = dial(port_of(a));
    assert_true(fds[i] >= 0);
    char idx;
    assert_int_equal(read(fds[i], &idx, 1), 1);
    assert_true(idx >= '0' && idx < '0' + LOOPS);
    counts[idx - '0']++;
  }
}

static void stop_and_free(tdl_group *g, tdl_acceptor *a)
{
  tdl_acceptor_stop(a);
  tdl_acceptor_stop(a); /* twice is harmless */
  for (unsigned i = 0; i < LOOPS; i++) { /* every serve returns (before the group's cancel) */
    tdl_acceptor_stats st;
    do {
      usleep(1000);
      assert_int_equal(tdl_acceptor_stats_get(a, i, &st), 0);
    } while (st.serving);
  }
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(tdl_acceptor_free(a), 0);
}

static void distribute_balances_open_connections(void **state)
{
  (void)state;
  int fds_before = open_fds();
  tdl_acceptor *a = make(TDL_ACCEPTOR_DISTRIBUTE, LOOPS);
  tdl_group *g = start(a);
  int fds[CONNS], counts[LOOPS];
  connect_all(a, fds, counts);
  /* Fewest open first, ties in turn: exactly half each. */
  assert_int_equal(counts[0], CONNS / 2);
  assert_int_equal(counts[1], CONNS / 2);
  wait_open(a, 0, CONNS / 2);
  wait_open(a, 1, CONNS / 2);
  tdl_acceptor_stats st;
  assert_int_equal(tdl_acceptor_stats_get(a, 1, &st), 0);
  assert_int_equal(st.accepted, CONNS / 2);
  assert_true(st.serving);
  for (int i = 0; i < CONNS; i++)
    close(fds[i]);
  wait_open(a, 0, 0);
  wait_open(a, 1, 0);
  stop_and_free(g, a);
  assert_int_equal(RESULT(0), 0);
  assert_int_equal(RESULT(1), 0);
  assert_int_equal(open_fds(), fds_before);
}

/* After a loop's connections close, the least-loaded choice sends the
 * next ones there. */
static void distribute_fills_the_emptier_loop(void **state)
{
  (void)state;
  tdl_acceptor *a = make(TDL_ACCEPTOR_DISTRIBUTE, LOOPS);
  tdl_group *g = start(a);
  int fds[CONNS], which[CONNS];
  for (int i = 0; i < CONNS; i++) {
    fds[i] = dial(port_of(a));
    assert_true(fds[i] >= 0);
    char idx;
    assert_int_equal(read(fds[i], &idx, 1), 1);
    which[i] = idx - '0';
  }
  int dropped = 0;
  for (int i = 0; i < CONNS; i++)
    if (which[i] == 1) {
      close(fds[i]);
      fds[i] = -1;
      dropped++;
    }
  wait_open(a, 1, 0);
  for (int k = 0; k < dropped; k++) {
    int fd = dial(port_of(a));
    assert_true(fd >= 0);
    char idx;
    assert_int_equal(read(fd, &idx, 1), 1);
    assert_int_equal(idx, '1');
    for (int i = 0; i < CONNS; i++)
      if (fds[i] < 0) {
        fds[i] = fd;
        break;
      }
  }
  for (int i = 0; i < CONNS; i++)
    close(fds[i]);
  stop_and_free(g, a);
}

static void reuseport_spreads_over_every_loop(void **state)
{
  (void)state;
  int fds_before = open_fds();
  tdl_acceptor *a = make(TDL_ACCEPTOR_REUSEPORT, LOOPS);
  tdl_group *g = start(a);
  int fds[CONNS], counts[LOOPS];
  connect_all(a, fds, counts);
  /* The kernel's hash decides; with 100 source ports each loop gets some
   * (the chance that one gets none is 2^-99). */
  assert_true(counts[0] > 0 && counts[1] > 0);
  tdl_acceptor_stats s0, s1;
  wait_open(a, 0, (uint64_t)counts[0]);
  wait_open(a, 1, (uint64_t)counts[1]);
  assert_int_equal(tdl_acceptor_stats_get(a, 0, &s0), 0);
  assert_int_equal(tdl_acceptor_stats_get(a, 1, &s1), 0);
  assert_int_equal(s0.accepted + s1.accepted, CONNS);
  for (int i = 0; i < CONNS; i++)
    close(fds[i]);
  stop_and_free(g, a);
  assert_int_equal(RESULT(0), 0);
  assert_int_equal(RESULT(1), 0);
  assert_int_equal(open_fds(), fds_before);
}

/* tdl_acceptor_stop from another thread: serve returns 0 on every loop,
 * the listeners are closed (new connections are refused), connections
 * already open are still served. */
static tdl_acceptor *stop_target;
static int served_after_stop[LOOPS];

static void *serve_then_flag(void *arg)
{
  (void)arg;
  int me = tdl_group_index();
  SET_RESULT(me, tdl_acceptor_serve(stop_target, (unsigned)me));
  __atomic_store_n(&served_after_stop[me], 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void stop_from_another_thread(void **state)
{
  (void)state;
  for (int mode = TDL_ACCEPTOR_REUSEPORT; mode <= TDL_ACCEPTOR_DISTRIBUTE; mode++) {
    stop_target = make((tdl_acceptor_mode)mode, LOOPS);
    memset(served_after_stop, 0, sizeof served_after_stop);
    tdl_group *g;
    assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = LOOPS, .main = serve_then_flag}), 0);
    int port = port_of(stop_target);
    int held = dial(port);
    assert_true(held >= 0);
    char idx;
    assert_int_equal(read(held, &idx, 1), 1);
    assert_int_equal(tdl_acceptor_free(stop_target), -EBUSY); /* serving */
    tdl_acceptor_stop(stop_target);
    for (int i = 0; i < LOOPS; i++)
      while (!__atomic_load_n(&served_after_stop[i], __ATOMIC_SEQ_CST))
        usleep(1000);
    assert_int_equal(RESULT(0), 0);
    assert_int_equal(RESULT(1), 0);
    assert_int_equal(dial(port), -ECONNREFUSED);
    /* The held connection's handler still runs. */
    tdl_acceptor_stats st;
    assert_int_equal(tdl_acceptor_stats_get(stop_target, (unsigned)(idx - '0'), &st), 0);
    assert_int_equal(st.open, 1);
    assert_false(st.serving);
    assert_int_equal(tdl_acceptor_free(stop_target), -EBUSY); /* a handler runs */
    close(held);
    wait_open(stop_target, (unsigned)(idx - '0'), 0);
    tdl_group_stop(g);
    assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
    assert_int_equal(tdl_group_free(g), 0);
    assert_int_equal(tdl_acceptor_free(stop_target), 0);
  }
}

/* tdl_group_stop while connections are open and queued: handlers are
 * cancelled, the acceptor frees, no fd is left behind. */
static void group_stop_with_connections_open(void **state)
{
  (void)state;
  int fds_before = open_fds();
  tdl_acceptor *a = make(TDL_ACCEPTOR_DISTRIBUTE, LOOPS);
  tdl_group *g = start(a);
  int fds[CONNS], counts[LOOPS];
  connect_all(a, fds, counts);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(RESULT(0), -ECANCELED);
  /* Slot 1 is cancelled too, unless slot 0's end closed its inbox first. */
  assert_true(RESULT(1) == -ECANCELED || RESULT(1) == 0);
  assert_int_equal(tdl_acceptor_free(a), 0);
  for (int i = 0; i < CONNS; i++)
    close(fds[i]);
  assert_int_equal(open_fds(), fds_before);
}

/* Distribute with only slot 0 serving: every connection is slot 0's. */
static void *serve_slot0_only(void *arg)
{
  if (tdl_group_index() == 0)
    SET_RESULT(0, tdl_acceptor_serve(arg, 0));
  else
    tdl_sleep(TDL_FOREVER);
  return NULL;
}

static void distribute_skips_slots_not_serving(void **state)
{
  (void)state;
  tdl_acceptor *a = make(TDL_ACCEPTOR_DISTRIBUTE, LOOPS);
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = LOOPS, .main = serve_slot0_only, .arg = a}),
                   0);
  for (int i = 0; i < 10; i++) {
    int fd = dial(port_of(a));
    char idx;
    assert_int_equal(read(fd, &idx, 1), 1);
    assert_int_equal(idx, '0');
    close(fd);
  }
  tdl_acceptor_stats st;
  assert_int_equal(tdl_acceptor_stats_get(a, 1, &st), 0);
  assert_int_equal(st.accepted, 0);
  assert_false(st.serving);
  stop_and_free(g, a);
}

/* ---- loops = 0 ---- */

static void *serve_own_slot(void *arg)
{
  return (void *)(intptr_t)tdl_acceptor_serve(arg, (unsigned)tdl_group_index());
}

/* loops = 0 is one slot per CPU of the affinity mask, as a group's loops =
 * 0; tdl_acceptor_size says how many, and a group of that size serves them. */
static void loops_zero_is_one_per_cpu(void **state)
{
  (void)state;
  cpu_set_t all, one;
  assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
  tdl_acceptor_options o = {.listen = "127.0.0.1:0", .mode = TDL_ACCEPTOR_REUSEPORT, .handler = answer_index};
  tdl_acceptor *a;
  assert_int_equal(tdl_acceptor_new(&a, &o), 0);
  assert_int_equal(tdl_acceptor_size(a), CPU_COUNT(&all));
  tdl_group *g;
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 0}), 0);
  assert_int_equal(tdl_group_size(g), tdl_acceptor_size(a));
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(tdl_acceptor_free(a), 0);

  /* A mask of one CPU: one slot, and it serves. */
  int cpu = 0;
  while (!CPU_ISSET(cpu, &all))
    cpu++;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  o.mode = TDL_ACCEPTOR_DISTRIBUTE;
  int e = tdl_acceptor_new(&a, &o);
  assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
  assert_int_equal(e, 0);
  assert_int_equal(tdl_acceptor_size(a), 1);
  tdl_acceptor_stats st;
  assert_int_equal(tdl_acceptor_stats_get(a, 1, &st), -EINVAL);
  assert_int_equal(
      tdl_group_new(&g, &(tdl_group_options){.loops = tdl_acceptor_size(a), .main = serve_own_slot, .arg = a}), 0);
  int fd = dial(port_of(a));
  assert_true(fd >= 0);
  char idx;
  assert_int_equal(read(fd, &idx, 1), 1);
  assert_int_equal(idx, '0');
  close(fd);
  tdl_acceptor_stop(a);
  do {
    usleep(1000);
    assert_int_equal(tdl_acceptor_stats_get(a, 0, &st), 0);
  } while (st.serving);
  assert_int_equal(st.accepted, 1);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(tdl_acceptor_free(a), 0);
  assert_int_equal(tdl_acceptor_size(NULL), 0);
}

/* ---- misuse ---- */

static void *serve_twice(void *arg)
{
  tdl_acceptor *a = arg;
  if (tdl_group_index() == 0) {
    assert_int_equal(tdl_acceptor_serve(a, 5), -EINVAL);
    assert_int_equal(tdl_acceptor_serve(NULL, 0), -EINVAL);
    SET_RESULT(0, tdl_acceptor_serve(a, 0));
    assert_int_equal(tdl_acceptor_serve(a, 0), -ESHUTDOWN); /* served once */
  } else {
    /* Slot 0 serves (or will): wait until it does, then try it too. */
    tdl_acceptor_stats st;
    do {
      tdl_sleep(tdl_after(TDL_MSEC));
      tdl_acceptor_stats_get(a, 0, &st);
    } while (!st.serving);
    assert_int_equal(tdl_acceptor_serve(a, 0), -EBUSY);
    tdl_acceptor_stop(a);
  }
  return NULL;
}

static void bad_input(void **state)
{
  (void)state;
  tdl_acceptor *a = (tdl_acceptor *)1;
  tdl_acceptor_options o = {.listen = "127.0.0.1:0", .loops = 2, .mode = TDL_ACCEPTOR_REUSEPORT,
                            .handler = answer_index};
  assert_int_equal(tdl_acceptor_new(NULL, &o), -EINVAL);
  assert_int_equal(tdl_acceptor_new(&a, NULL), -EINVAL);
  assert_null(a);
  tdl_acceptor_options bad = o;
  bad.loops = TDL_GROUP_MAX + 1;
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EINVAL);
  bad = o;
  bad.mode = (tdl_acceptor_mode)0;
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EINVAL);
  bad = o;
  bad.handler = NULL;
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EINVAL);
  bad = o;
  bad.listen = NULL;
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EINVAL);
  bad.listen = "127.0.0.1:99999";
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EINVAL);
  bad.listen = "nonsense";
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EINVAL);

  /* A port some other socket holds without SO_REUSEPORT: in use, in both
   * modes, and nothing is left open. */
  int fds_before = open_fds();
  int holder = tdl_net_listen_str("127.0.0.1:0", 0, 0);
  assert_true(holder >= 0);
  tdl_addr at;
  assert_int_equal(tdl_net_local_addr(holder, &at), 0);
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", tdl_addr_port(&at));
  bad = o;
  bad.listen = where;
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EADDRINUSE);
  bad.mode = TDL_ACCEPTOR_DISTRIBUTE;
  assert_int_equal(tdl_acceptor_new(&a, &bad), -EADDRINUSE);
  close(holder);
  assert_int_equal(open_fds(), fds_before);

  assert_int_equal(tdl_acceptor_local_addr(NULL, &at), -EINVAL);
  tdl_acceptor_stats st;
  assert_int_equal(tdl_acceptor_stats_get(NULL, 0, &st), -EINVAL);
  assert_int_equal(tdl_acceptor_free(NULL), 0);
  tdl_acceptor_stop(NULL);

  /* Outside a fiber; index out of range; serving twice. */
  assert_int_equal(tdl_acceptor_new(&a, &o), 0);
  assert_int_equal(tdl_acceptor_serve(a, 0), -EPERM);
  assert_int_equal(tdl_acceptor_stats_get(a, 2, &st), -EINVAL);
  tdl_group *g;
  memset(serve_results, 0x7f, sizeof serve_results);
  assert_int_equal(tdl_group_new(&g, &(tdl_group_options){.loops = 2, .main = serve_twice, .arg = a}), 0);
  tdl_acceptor_stats s0;
  do {
    usleep(1000);
    tdl_acceptor_stats_get(a, 0, &s0);
  } while (RESULT(0) == 0x7f7f7f7f);
  tdl_group_stop(g);
  assert_int_equal(tdl_group_wait(g, TDL_FOREVER), 0);
  assert_int_equal(tdl_group_free(g), 0);
  assert_int_equal(RESULT(0), 0);
  assert_int_equal(tdl_acceptor_free(a), 0);
}

int main(void)
{
  /* The process's accept reserve (net.h) is an fd for good: open it first,
   * so that the fd counts before and after a test compare. */
  assert_int_equal(tdl_net_accept_reserve(true), 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(distribute_balances_open_connections),
      cmocka_unit_test(distribute_fills_the_emptier_loop),
      cmocka_unit_test(reuseport_spreads_over_every_loop),
      cmocka_unit_test(stop_from_another_thread),
      cmocka_unit_test(group_stop_with_connections_open),
      cmocka_unit_test(distribute_skips_slots_not_serving),
      cmocka_unit_test(loops_zero_is_one_per_cpu),
      cmocka_unit_test(bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
