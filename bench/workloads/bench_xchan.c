/* SPDX-License-Identifier: MIT */
/*
 * xchan: a fiber on loop A sends 1..T over a shared channel of capacity 1024
 * to a fiber on loop B (another thread), which sums them and checks the sum.
 * Keys: ns_per_msg, msgs_per_s, wakeups_per_msg (eventfd writes over T),
 * posts_per_msg (cross-loop wakes of a fiber over T).
 *
 * xping: two fibers on two loops pass one value back and forth over two
 * unbuffered shared channels, T round trips.  Key: ns_per_round_trip.
 *
 * Both: --spin NS lets each loop spin that long before it sleeps (0: never).
 *
 * xping --floor 1: no treadle at all: two threads pinned to two CPUs pass a
 * counter back and forth through two cache lines, spinning.  The least any
 * round trip between two threads costs on the machine at hand: the floor under
 * the fiber figures.  --floor 2: the same two threads, each asleep in read(2)
 * on an eventfd until the other writes it: the floor under loops that sleep.
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static struct {
  tdl_chan *ch, *back;
  long hops;
  long sum;
  int ok;
} X;

static void *xchan_main(void *arg)
{
  (void)arg;
  if (tdl_group_index() == 0) {
    for (long i = 1; i <= X.hops; i++)
      if (tdl_chan_send(X.ch, &i, TDL_FOREVER) < 0)
        return NULL;
    tdl_chan_close(X.ch);
  } else {
    long v, sum = 0;
    while (tdl_chan_recv(X.ch, &v, TDL_FOREVER) == 0)
      sum += v;
    X.sum = sum;
    tdl_group_stop(tdl_group_self());
  }
  return NULL;
}

static void *xping_main(void *arg)
{
  (void)arg;
  long v;
  if (tdl_group_index() == 0) {
    for (long i = 0; i < X.hops; i++) {
      if (tdl_chan_send(X.ch, &i, TDL_FOREVER) < 0 || tdl_chan_recv(X.back, &v, TDL_FOREVER) < 0 || v != i)
        return NULL;
    }
    X.ok = 1;
    tdl_group_stop(tdl_group_self());
  } else {
    while (tdl_chan_recv(X.ch, &v, TDL_FOREVER) == 0)
      if (tdl_chan_send(X.back, &v, TDL_FOREVER) < 0)
        break;
  }
  return NULL;
}

/* Start the two loops pinned to two CPUs (or not, on one CPU), run, stop. */
static int run_pair(tdl_fiber_fn main, tdl_time_t spin, bench_span *s, uint64_t *wakes, uint64_t *posts)
{
  tdl_loop_options lo = {.spin = spin};
  tdl_group_options o = {.loops = 2, .pin = true, .main = main, .loop = &lo};
  tdl_group *g;
  bench_begin(s);
  int rc = tdl_group_new(&g, &o);
  if (rc == -EINVAL) { /* one CPU: unpinned */
    o.pin = false;
    rc = tdl_group_new(&g, &o);
  }
  if (rc < 0)
    bench_die("tdl_group_new: %s", tdl_strerror(rc));
  tdl_port *ports[2] = {tdl_port_ref(tdl_group_port(g, 0)), tdl_port_ref(tdl_group_port(g, 1))};
  rc = tdl_group_wait(g, TDL_FOREVER);
  bench_end(s);
  *wakes = *posts = 0;
  for (int i = 0; i < 2; i++) {
    tdl_port_stats st;
    tdl_port_stats_get(ports[i], &st);
    *wakes += st.wakes;
    *posts += st.posts;
    tdl_port_release(ports[i]);
  }
  tdl_group_free(g);
  return rc;
}

int bench_xchan_main(int argc, char **argv)
{
  X.hops = bench_opt_long(argc, argv, "hops", 10000000);
  tdl_time_t spin = bench_opt_long(argc, argv, "spin", 0);
  if (X.hops < 1)
    bench_die("xchan: need --hops >= 1");
  int rc = tdl_chan_new_shared(&X.ch, sizeof(long), 1024);
  if (rc < 0)
    bench_die("tdl_chan_new_shared: %s", tdl_strerror(rc));
  bench_span s;
  uint64_t wakes, posts;
  rc = run_pair(xchan_main, spin, &s, &wakes, &posts);
  long want = X.hops * (X.hops + 1) / 2;
  if (rc < 0 || X.sum != want) {
    fprintf(stderr, "xchan: FAILED: sum %ld, want %ld (wait %d)\n", X.sum, want, rc);
    return 1;
  }
  /* The posts include the group's own stop messages (one per loop). */
  bench_result("treadle", "xchan", &s,
               "hops=%ld spin_ns=%ld ns_per_msg=%.2f msgs_per_s=%.0f cpu_ns_per_msg=%.2f wakeups_per_msg=%.5f "
               "posts_per_msg=%.5f",
               X.hops, (long)spin, s.wall_s * 1e9 / (double)X.hops, (double)X.hops / s.wall_s,
               (s.user_s + s.sys_s) * 1e9 / (double)X.hops, (double)wakes / (double)X.hops,
               (double)posts / (double)X.hops);
  tdl_chan_free(X.ch);
  return 0;
}

/* ---- xping --floor 1 ---- */

static struct {
  _Alignas(64) long ping;
  _Alignas(64) long pong;
} F;

static long ncpus;

/* Two threads on one CPU must yield to each other, or each spin lasts its
 * whole time slice. */
static inline void sched_yield_if_alone(void)
{
  if (ncpus < 2)
    sched_yield();
}

static void pin_to(int cpu)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* one CPU: unpinned */
}

static void *floor_answer(void *arg)
{
  (void)arg;
  pin_to(1);
  for (long i = 1; i <= X.hops; i++) {
    while (__atomic_load_n(&F.ping, __ATOMIC_ACQUIRE) != i)
      sched_yield_if_alone();
    __atomic_store_n(&F.pong, i, __ATOMIC_RELEASE);
  }
  return NULL;
}

static int floor_main(void)
{
  pthread_t t;
  pin_to(0);
  bench_span s;
  bench_begin(&s);
  if (pthread_create(&t, NULL, floor_answer, NULL) != 0)
    bench_die("pthread_create failed");
  for (long i = 1; i <= X.hops; i++) {
    __atomic_store_n(&F.ping, i, __ATOMIC_RELEASE);
    while (__atomic_load_n(&F.pong, __ATOMIC_ACQUIRE) != i)
      sched_yield_if_alone();
  }
  pthread_join(t, NULL);
  bench_end(&s);
  bench_result("floor", "xping", &s, "hops=%ld ns_per_round_trip=%.1f cpu_ns_per_round_trip=%.1f", X.hops,
               s.wall_s * 1e9 / (double)X.hops, (s.user_s + s.sys_s) * 1e9 / (double)X.hops);
  return 0;
}

/* ---- xping --floor 2 ---- */

/* No treadle either, but each thread sleeps until woken: it blocks in
 * read(2) on its own eventfd, and wakes the other by writing to the other's.
 * A round trip is two wake-ups of a sleeping thread: the floor under a
 * loop's round trip when neither loop spins. */
static int efd[2];

static void wait_and_clear(int fd)
{
  uint64_t v;
  while (read(fd, &v, sizeof v) != sizeof v)
    if (errno != EINTR)
      bench_die("read(eventfd): %s", strerror(errno));
}

static void wake(int fd)
{
  uint64_t one = 1;
  while (write(fd, &one, sizeof one) != sizeof one)
    if (errno != EINTR)
      bench_die("write(eventfd): %s", strerror(errno));
}

static void *floor_sleep_answer(void *arg)
{
  (void)arg;
  pin_to(1);
  for (long i = 1; i <= X.hops; i++) {
    wait_and_clear(efd[1]);
    wake(efd[0]);
  }
  return NULL;
}

static int floor_sleep_main(void)
{
  if ((efd[0] = eventfd(0, EFD_CLOEXEC)) < 0 || (efd[1] = eventfd(0, EFD_CLOEXEC)) < 0)
    bench_die("eventfd: %s", strerror(errno));
  pthread_t t;
  pin_to(0);
  bench_span s;
  bench_begin(&s);
  if (pthread_create(&t, NULL, floor_sleep_answer, NULL) != 0)
    bench_die("pthread_create failed");
  for (long i = 1; i <= X.hops; i++) {
    wake(efd[1]);
    wait_and_clear(efd[0]);
  }
  pthread_join(t, NULL);
  bench_end(&s);
  bench_result("floor-sleep", "xping", &s, "hops=%ld ns_per_round_trip=%.1f cpu_ns_per_round_trip=%.1f", X.hops,
               s.wall_s * 1e9 / (double)X.hops, (s.user_s + s.sys_s) * 1e9 / (double)X.hops);
  close(efd[0]);
  close(efd[1]);
  return 0;
}

int bench_xping_main(int argc, char **argv)
{
  X.hops = bench_opt_long(argc, argv, "hops", 1000000);
  tdl_time_t spin = bench_opt_long(argc, argv, "spin", 0);
  if (X.hops < 1)
    bench_die("xping: need --hops >= 1");
  long floor = bench_opt_long(argc, argv, "floor", 0);
  if (floor) {
    ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    return floor == 2 ? floor_sleep_main() : floor_main();
  }
  int rc;
  if ((rc = tdl_chan_new_shared(&X.ch, sizeof(long), 0)) < 0 || (rc = tdl_chan_new_shared(&X.back, sizeof(long), 0)) < 0)
    bench_die("tdl_chan_new_shared: %s", tdl_strerror(rc));
  bench_span s;
  uint64_t wakes, posts;
  rc = run_pair(xping_main, spin, &s, &wakes, &posts);
  if (rc < 0 || !X.ok) {
    fprintf(stderr, "xping: FAILED (wait %d)\n", rc);
    return 1;
  }
  bench_result("treadle", "xping", &s,
               "hops=%ld spin_ns=%ld ns_per_round_trip=%.1f cpu_ns_per_round_trip=%.1f wakeups_per_round_trip=%.3f "
               "posts_per_round_trip=%.3f",
               X.hops, (long)spin, s.wall_s * 1e9 / (double)X.hops, (s.user_s + s.sys_s) * 1e9 / (double)X.hops,
               (double)wakes / (double)X.hops, (double)posts / (double)X.hops);
  tdl_chan_free(X.ch);
  tdl_chan_free(X.back);
  return 0;
}
