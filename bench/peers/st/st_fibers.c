/* SPDX-License-Identifier: MIT */
/*
 * bench-st's thread workloads (docs/BENCHMARKS.md): ring, chan, fiber-spawn,
 * idle.  Each checks its own result and prints one RESULT line.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <st.h>

#include "bench.h"
#include "st_peer.h"

/* ---- ring: a token around N threads ------------------------------------- */
/*
 * Each thread waits on a condition variable of its own until its flag is
 * set; its predecessor sets the flag and signals it (State Threads has no
 * park/unpark of a given thread: a condition variable per thread is its
 * way to wake one).  The token is the count of hops left, in a variable only
 * its holder touches: the holder of count v stops the run if v is 0 and
 * otherwise passes v - 1 on, which is one hop.  So T hops are made and the
 * run ends at thread T mod N, which is checked, as is the count of passes.
 */
typedef struct member {
  st_cond_t cond;
  int woken;
  int id;
} member;

static member *ring;
static int ring_n;
static long ring_token, ring_passed;
static int ring_finisher = -1, ring_done;
static st_cond_t ring_fin;

static void wake(member *m)
{
  m->woken = 1;
  st_cond_signal(m->cond);
}

static void *ring_member(void *arg)
{
  member *m = arg;
  member *next = &ring[(m->id + 1) % ring_n];
  for (;;) {
    while (!m->woken)
      st_cond_wait(m->cond);
    m->woken = 0;
    if (ring_done)
      return NULL;
    if (ring_token == 0) {
      ring_finisher = m->id;
      ring_done = 1;
      for (int k = 0; k < ring_n; k++)
        if (k != m->id)
          wake(&ring[k]);
      st_cond_signal(ring_fin);
      return NULL;
    }
    ring_token--;
    ring_passed++;
    wake(next);
  }
}

int st_ring_main(int argc, char **argv)
{
  ring_n = (int)bench_opt_long(argc, argv, "threads", 503);
  long hops = bench_opt_long(argc, argv, "hops", 10000000);
  const char *via = bench_opt_str(argc, argv, "via", "wake");
  if (strcmp(via, "wake") != 0) {
    fprintf(stderr, "ring: State Threads has no channel: --via wake only\n");
    return 2;
  }
  st_peer_init();
  ring = calloc((size_t)ring_n, sizeof *ring);
  st_thread_t *t = calloc((size_t)ring_n, sizeof *t);
  if (!ring || !t || !(ring_fin = st_cond_new()))
    bench_die("out of memory");
  for (int i = 0; i < ring_n; i++) {
    ring[i] = (member){.cond = st_cond_new(), .id = i};
    if (!ring[i].cond || !(t[i] = st_thread_create(ring_member, &ring[i], 1, 0)))
      bench_die("st_thread_create: %s", strerror(errno));
  }
  st_usleep(0); /* every member runs to its first wait */

  bench_span s;
  bench_begin(&s);
  ring_token = hops;
  wake(&ring[0]); /* hands the token over: not a hop */
  while (!ring_done)
    st_cond_wait(ring_fin);
  bench_end(&s);
  for (int i = 0; i < ring_n; i++)
    st_thread_join(t[i], NULL);

  if (ring_passed != hops || ring_finisher != (int)(hops % ring_n)) {
    fprintf(stderr, "ring: FAILED: %ld hops of %ld, stopped at thread %d (expected %ld)\n", ring_passed, hops,
            ring_finisher, hops % ring_n);
    return 1;
  }
  bench_result("st", "ring", &s, "threads=%d hops=%ld via=wake ns_per_hop=%.2f cpu_ns_per_hop=%.2f eventsys=%s",
               ring_n, hops, s.wall_s * 1e9 / (double)hops, (s.user_s + s.sys_s) * 1e9 / (double)hops,
               st_peer_eventsys);
  return 0;
}

/* ---- chan: ping-pong through a one-value slot ---------------------------- */
/*
 * State Threads has no channel; what ST programs pass values with is a
 * slot and a condition variable: put waits while the slot is full, fills
 * it and signals; take waits while it is empty, empties it and signals.
 * One slot per direction.  A hop is one put and its take; every value is
 * checked, and so is the count.
 */
typedef struct slot {
  st_cond_t cond;
  long v;
  int full;
} slot;

static slot ab, ba;
static long chan_hops, chan_seen;
static const char *chan_failed;

static void put(slot *s, long v)
{
  while (s->full)
    st_cond_wait(s->cond);
  s->v = v;
  s->full = 1;
  st_cond_signal(s->cond);
}

static long take(slot *s)
{
  while (!s->full)
    st_cond_wait(s->cond);
  s->full = 0;
  st_cond_signal(s->cond);
  return s->v;
}

static void *ping(void *arg)
{
  (void)arg;
  for (long v = 0; v < chan_hops; v += 2) {
    put(&ab, v);
    if (v + 1 < chan_hops) {
      if (take(&ba) != v + 1) {
        chan_failed = "ping got a wrong value";
        return NULL;
      }
      chan_seen++;
    }
  }
  return NULL;
}

static void *pong(void *arg)
{
  (void)arg;
  for (long v = 1; v <= chan_hops; v += 2) {
    if (take(&ab) != v - 1) {
      chan_failed = "pong got a wrong value";
      return NULL;
    }
    chan_seen++;
    if (v < chan_hops)
      put(&ba, v);
  }
  return NULL;
}

int st_chan_main(int argc, char **argv)
{
  chan_hops = bench_opt_long(argc, argv, "hops", 10000000);
  st_peer_init();
  ab.cond = st_cond_new();
  ba.cond = st_cond_new();
  if (!ab.cond || !ba.cond)
    bench_die("st_cond_new");
  bench_span s;
  bench_begin(&s);
  st_thread_t a = st_thread_create(pong, NULL, 1, 0), b = st_thread_create(ping, NULL, 1, 0);
  if (!a || !b)
    bench_die("st_thread_create: %s", strerror(errno));
  st_thread_join(a, NULL);
  st_thread_join(b, NULL);
  bench_end(&s);
  if (chan_failed || chan_seen != chan_hops) {
    fprintf(stderr, "chan: FAILED: %s; %ld hops of %ld\n", chan_failed ? chan_failed : "-", chan_seen, chan_hops);
    return 1;
  }
  bench_result("st", "chan", &s, "hops=%ld ns_per_hop=%.2f cpu_ns_per_hop=%.2f", chan_hops,
               s.wall_s * 1e9 / (double)chan_hops, (s.user_s + s.sys_s) * 1e9 / (double)chan_hops);
  return 0;
}

/* ---- fiber-spawn: create and join N threads, B at a time ------------------ */
/*
 * The primordial thread creates B joinable threads, then joins each in
 * turn, until N have run.  Thread i returns i + 1; the sum of what the
 * joins collect is checked against N (N + 1) / 2.
 */
static void *spawned(void *arg) { return (void *)((uintptr_t)arg + 1); }

int st_fiber_spawn_main(int argc, char **argv)
{
  long n = bench_opt_long(argc, argv, "fibers", 1000000);
  long batch = bench_opt_long(argc, argv, "batch", 1000);
  long stack = bench_opt_long(argc, argv, "stack", 0);
  st_peer_init();
  st_thread_t *t = calloc((size_t)batch, sizeof *t);
  if (!t)
    bench_die("out of memory");
  uint64_t sum = 0;
  bench_span s;
  bench_begin(&s);
  for (long done = 0; done < n;) {
    long k = n - done < batch ? n - done : batch;
    for (long i = 0; i < k; i++)
      if (!(t[i] = st_thread_create(spawned, (void *)(uintptr_t)(done + i), 1, (int)stack)))
        bench_die("st_thread_create (%ld of %ld): %s", done + i, n, strerror(errno));
    for (long i = 0; i < k; i++) {
      void *r = NULL;
      if (st_thread_join(t[i], &r) != 0)
        bench_die("st_thread_join: %s", strerror(errno));
      sum += (uintptr_t)r;
    }
    done += k;
  }
  bench_end(&s);
  uint64_t want = (uint64_t)n * (uint64_t)(n + 1) / 2;
  if (sum != want) {
    fprintf(stderr, "fiber-spawn: FAILED: the joins collected %llu, expected %llu\n", (unsigned long long)sum,
            (unsigned long long)want);
    return 1;
  }
  bench_result("st", "fiber-spawn", &s, "fibers=%ld batch=%ld stack=%ld fibers_per_s=%.0f cpu_ns_per_fiber=%.1f", n,
               batch, stack, (double)n / s.wall_s, (s.user_s + s.sys_s) * 1e9 / (double)n);
  free(t);
  return 0;
}

/* ---- idle: memory per blocked thread --------------------------------------- */
/*
 * F threads, each blocked for good: in st_cond_wait on one shared condition
 * variable (--park chan: ST's nearest to a channel receive), or in st_read
 * on the read end of a pipe of its own (--park read; the thread opens its
 * st_netfd_t itself, so that the library's per-fd state counts).
 * bytes_per_fiber = (VmRSS with all F blocked - VmRSS before creating
 * them) * 1024 / F.  Then all are woken at once (a broadcast, or a byte
 * written to every pipe, checked by its reader) and timed until the last
 * has run: wake_ns, per thread.
 */
static long idle_blocked, idle_woken;
static int idle_released;
static st_cond_t idle_cond;
static int (*idle_pipes)[2];
static const char *idle_failed;

static void *idle_chan(void *arg)
{
  (void)arg;
  idle_blocked++;
  while (!idle_released)
    st_cond_wait(idle_cond);
  idle_blocked--;
  idle_woken++;
  return NULL;
}

static void *idle_read(void *arg)
{
  long i = (long)(intptr_t)arg;
  st_netfd_t fd = st_netfd_open(idle_pipes[i][0]);
  if (!fd) {
    idle_failed = "st_netfd_open";
    return NULL;
  }
  idle_blocked++;
  char buf[64];
  if (st_read(fd, buf, sizeof buf, ST_UTIME_NO_TIMEOUT) != 1 || buf[0] != 'w')
    idle_failed = "a read did not get its byte";
  idle_blocked--;
  idle_woken++;
  st_netfd_free(fd); /* the pipe is closed by main */
  return NULL;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int st_idle_main(int argc, char **argv)
{
  long n = bench_opt_long(argc, argv, "fibers", 100000);
  long stack = bench_opt_long(argc, argv, "stack", 0);
  const char *park = bench_opt_str(argc, argv, "park", "chan");
  int read_mode = strcmp(park, "read") == 0;
  st_peer_init();
  if (!(idle_cond = st_cond_new()))
    bench_die("st_cond_new");
  if (read_mode) {
    idle_pipes = calloc((size_t)n, sizeof *idle_pipes);
    if (!idle_pipes)
      bench_die("out of memory");
    for (long i = 0; i < n; i++)
      if (pipe(idle_pipes[i]) != 0)
        bench_die("pipe %ld of %ld: %s", i, n, strerror(errno));
  }

  long before = bench_rss_kb();
  bench_span s;
  bench_begin(&s);
  for (long i = 0; i < n; i++)
    if (!st_thread_create(read_mode ? idle_read : idle_chan, (void *)(intptr_t)i, 0, (int)stack))
      bench_die("st_thread_create (%ld of %ld): %s", i, n, strerror(errno));
  /* The run queue is first in, first out: one sleep lets every new thread
   * run to its wait; a few more let ST's own polling settle. */
  for (int k = 0; k < 100 && idle_blocked < n && !idle_failed; k++)
    st_usleep(1000);
  st_usleep(10000);
  long after = bench_rss_kb();
  long blocked = idle_blocked;
  double bytes_per_fiber = (double)(after - before) * 1024.0 / (double)n;

  double t0 = now_s();
  if (read_mode) {
    for (long i = 0; i < n; i++)
      if (write(idle_pipes[i][1], "w", 1) != 1)
        bench_die("write: %s", strerror(errno));
  } else {
    idle_released = 1;
    st_cond_broadcast(idle_cond);
  }
  for (long k = 0; idle_woken < n && !idle_failed && k < 10000000; k++)
    st_usleep(0); /* behind every woken thread */
  double wake_ns = (now_s() - t0) * 1e9 / (double)n;
  bench_end(&s);
  if (idle_failed || blocked != n || idle_woken != n) {
    fprintf(stderr, "idle: FAILED: %s; %ld of %ld blocked, %ld woken\n", idle_failed ? idle_failed : "-", blocked,
            n, idle_woken);
    return 1;
  }
  bench_result("st", "idle", &s, "fibers=%ld park=%s stack=%ld bytes_per_fiber=%.0f wake_ns=%.0f eventsys=%s", n,
               park, stack, bytes_per_fiber, wake_ns, st_peer_eventsys);
  return 0;
}
