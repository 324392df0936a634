/* SPDX-License-Identifier: MIT */
/*
 * idle: F fibers, each blocked for good: on a channel receive (--park chan,
 * the default), in tdl_read on a pipe of its own (--park read: F pipes, so
 * F is bounded by the fd limit), or in tdl_fiber_park (--park park).
 * bytes_per_fiber = (VmRSS with all F blocked - VmRSS before spawning) * 1024 / F.
 * --compact-ms T: the loop compacts fibers idle for T ms
 * (tdl_fiber_compact_idle); the measure is taken once every fiber is
 * compacted (or, for parks that are not compacted, a channel's, once the
 * count stops growing); copy_bytes is the mean heap copy of a compacted
 * fiber's stack.
 * A last fiber, spawned after the F (which all park before it first runs),
 * takes the measure, then wakes them all at once (closes the channel,
 * writes a byte to every pipe, or unparks each) and times until the last
 * has run: wake_ns = that time / F, the cost of a wake-up and the switch
 * into the fiber, restoring its stack when compacted (compare a run with
 * --compact-ms against one without).
 */
#include <treadle.h>

#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { PARK_CHAN, PARK_READ, PARK_PARK };

static long blocked, woken;
static int mode;
static tdl_chan *ch;
static int (*pipes)[2];
static tdl_fiber_t *handles;
static long nfibers;
static tdl_time_t compact_after;
static double bytes_per_fiber, wake_ns;
static long compacted, copied;
static long rss_before;
static const char *failed;

static void *idler(void *arg)
{
  long i = (long)(intptr_t)arg;
  blocked++;
  if (mode == PARK_CHAN) {
    int v;
    tdl_chan_recv(ch, &v, TDL_FOREVER); /* -EPIPE once the channel closes */
  } else if (mode == PARK_READ) {
    char buf[64]; /* on the stack: the read fills it once the fiber is back */
    if (tdl_read(pipes[i][0], buf, sizeof buf, TDL_FOREVER) != 1 || buf[0] != 'w')
      failed = "a read did not get its byte";
  } else {
    tdl_fiber_park(TDL_FOREVER);
  }
  blocked--;
  woken++;
  return NULL;
}

static tdl_time_t clock_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (tdl_time_t)ts.tv_sec * TDL_SEC + ts.tv_nsec;
}

static long count_compacted(tdl_loop *loop)
{
  long c = 0;
  for (long i = 0; i < nfibers; i++)
    c += tdl_fiber_compacted(loop, handles[i]) > 0;
  return c;
}

static void *controller(void *arg)
{
  tdl_loop *loop = arg;
  if (blocked != nfibers) {
    failed = "not every fiber parked before the controller ran";
    return NULL;
  }
  /* Compacted between one and two thresholds after they parked; a park
   * that is never compacted (a channel's) leaves the count where it is. */
  long prev = -1;
  for (int round = 0; compact_after && round < 100; round++) {
    compacted = count_compacted(loop);
    if (compacted == nfibers || (round >= 3 && compacted == prev))
      break;
    prev = compacted;
    tdl_sleep(tdl_after(compact_after));
  }
  for (long i = 0; compact_after && i < nfibers; i++) {
    int c = tdl_fiber_compacted(loop, handles[i]);
    copied += c > 0 ? c : 0;
  }
  long after = bench_rss_kb();
  bytes_per_fiber = (double)(after - rss_before) * 1024.0 / (double)nfibers;

  tdl_time_t t0 = clock_ns();
  if (mode == PARK_CHAN) {
    tdl_chan_close(ch);
  } else if (mode == PARK_READ) {
    for (long i = 0; i < nfibers; i++)
      if (write(pipes[i][1], "w", 1) != 1)
        failed = "write";
  } else {
    for (long i = 0; i < nfibers; i++)
      tdl_fiber_unpark(loop, handles[i]);
  }
  while (woken < nfibers && !failed)
    tdl_fiber_yield(); /* behind every woken one in the run queue */
  wake_ns = (double)(clock_ns() - t0) / (double)nfibers;
  return NULL;
}

int bench_idle_main(int argc, char **argv)
{
  long n = bench_opt_long(argc, argv, "fibers", 100000);
  long stack = bench_opt_long(argc, argv, "stack", 0);
  long compact_ms = bench_opt_long(argc, argv, "compact-ms", 0);
  const char *park = bench_opt_str(argc, argv, "park", "chan");
  if (n < 1 || stack < 0 || compact_ms < 0) {
    fprintf(stderr, "idle: need --fibers >= 1, --stack >= 0, --compact-ms >= 0\n");
    return 2;
  }
  if (strcmp(park, "chan") == 0)
    mode = PARK_CHAN;
  else if (strcmp(park, "read") == 0)
    mode = PARK_READ;
  else if (strcmp(park, "park") == 0)
    mode = PARK_PARK;
  else {
    fprintf(stderr, "idle: --park chan|read|park\n");
    return 2;
  }
  nfibers = n;
  compact_after = compact_ms * TDL_MSEC;
  tdl_loop *loop;
  int rc = tdl_loop_new(&loop, NULL);
  if (rc < 0 || (rc = tdl_chan_new(&ch, sizeof(int), 0)) < 0)
    bench_die("setup: %s", tdl_strerror(rc));
  if (compact_after && (rc = tdl_fiber_compact_idle(loop, compact_after)) < 0)
    bench_die("tdl_fiber_compact_idle: %s", tdl_strerror(rc));
  handles = calloc((size_t)n, sizeof *handles);
  if (!handles)
    bench_die("calloc");
  if (mode == PARK_READ) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    pipes = calloc((size_t)n, sizeof *pipes);
    if (!pipes)
      bench_die("calloc");
    for (long i = 0; i < n; i++)
      if (pipe(pipes[i]) != 0)
        bench_die("pipe %ld of %ld (the fd limit allows about %ld fibers)", i, n, (long)rl.rlim_cur / 2 - 10);
  }

  rss_before = bench_rss_kb();
  bench_span s;
  bench_begin(&s);
  tdl_fiber_options o = {.stack_size = (size_t)stack};
  for (long i = 0; i < n; i++) {
    if ((rc = tdl_fiber_spawn(&handles[i], loop, idler, (void *)(intptr_t)i, &o)) < 0)
      bench_die("tdl_fiber_spawn (%ld of %ld): %s", i, n, tdl_strerror(rc));
  }
  tdl_fiber_t c;
  if ((rc = tdl_fiber_spawn(&c, loop, controller, loop, NULL)) < 0)
    bench_die("tdl_fiber_spawn: %s", tdl_strerror(rc));
  tdl_fiber_detach(loop, c);
  rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT);
  bench_end(&s);
  if (rc != 0 || failed || woken != n) {
    fprintf(stderr, "idle: FAILED: %s; %ld of %ld woken, %ld compacted (tdl_loop_run %d)\n", failed ? failed : "-",
            woken, n, compacted, rc);
    return 1;
  }
  tdl_fiber_stats st;
  tdl_fiber_stats_get(loop, &st);
  bench_result("treadle", "idle", &s,
               "fibers=%ld bytes_per_fiber=%.0f compacted=%ld copy_bytes=%.0f wake_ns=%.0f unguarded=%zu", n,
               bytes_per_fiber, compacted, compacted ? (double)copied / (double)compacted : 0.0, wake_ns,
               st.unguarded);

  for (long i = 0; i < n; i++)
    tdl_fiber_detach(loop, handles[i]);
  if ((rc = tdl_loop_run(loop, TDL_LOOP_DEFAULT)) != 0)
    bench_die("idle: %s", tdl_strerror(rc));
  if (pipes)
    for (long i = 0; i < n; i++) {
      close(pipes[i][0]);
      close(pipes[i][1]);
    }
  free(pipes);
  free(handles);
  tdl_chan_free(ch);
  tdl_loop_free(loop);
  return 0;
}
