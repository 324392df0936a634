/* SPDX-License-Identifier: MIT */
/*
 * bench-hiredis-fibers: the hiredis workload (docs/BENCHMARKS.md) with
 * treadle's hook library: F fibers on one loop, each running hiredis's
 * synchronous API, unmodified (hiredis_sync.h), on its own connection.
 * A program of its own, not a workload of treadle-bench: it is linked with
 * libtreadle-hook, which would hook every other workload too.
 *
 *   bench-hiredis-fibers hiredis [--fibers F] [--commands N] --port P
 *
 * The loop's watchdog watches the whole run with a 5 ms threshold and counts
 * what it reports.  Keys beyond hiredis_sync.h's: stalls (reports while the
 * commands ran, i.e. noticed after the clock started), setup_stalls (while
 * the F fibers connected), stall_max_ms (the longest time away from the poll
 * seen in a report of the command phase, as noticed: up to 1.25 ms short of
 * the stall's full length; 0 with no report), parks_per_cmd (the hook's
 * parks per command while the commands ran).
 */
#include <treadle.h>
#include <treadle/hook.h>

#include "hiredis_sync.h"

#include <stdatomic.h>
#include <stdlib.h>

#define IMPL "treadle-hook"
#define STALL_MS 5

static struct {
  hb_opts o;
  hb_client *cls;
  atomic_long budget;
  tdl_waitgroup connected, go, done;
  bench_span span;
  int failed;
  /* The watchdog's thread writes these. */
  atomic_int phase; /* 0 connecting, 1 commands, 2 after */
  atomic_long stalls[3];
  _Atomic tdl_time_t stall_max; /* of phases 1 and 2 */
  tdl_hook_stats h0, h1;
} g;

static void on_stall(const tdl_watchdog_report *r, void *data)
{
  (void)data;
  int phase = atomic_load(&g.phase);
  atomic_fetch_add(&g.stalls[phase], 1);
  if (phase == 0)
    return;
  tdl_time_t m = atomic_load(&g.stall_max);
  while (r->away > m && !atomic_compare_exchange_weak(&g.stall_max, &m, r->away))
    ;
}

static void *client_fiber(void *arg)
{
  hb_client *cl = arg;
  hb_sync_connect(cl, &g.o);
  tdl_waitgroup_done(&g.connected);
  if (tdl_waitgroup_wait(&g.go, TDL_FOREVER) == 0 && !g.failed)
    hb_sync_client(cl, &g.budget);
  tdl_waitgroup_done(&g.done);
  return NULL;
}

static void *main_fiber(void *arg)
{
  (void)arg;
  tdl_loop *loop = tdl_fiber_loop();
  tdl_watchdog_options wo = {.threshold = STALL_MS * TDL_MSEC, .cb = on_stall, .name = "hiredis"};
  int e = tdl_watchdog_start(loop, &wo);
  if (e < 0)
    bench_die("tdl_watchdog_start: %s", strerror(-e));
  tdl_waitgroup_init(&g.connected);
  tdl_waitgroup_init(&g.go);
  tdl_waitgroup_init(&g.done);
  tdl_waitgroup_add(&g.connected, g.o.clients);
  tdl_waitgroup_add(&g.done, g.o.clients);
  tdl_waitgroup_add(&g.go, 1);
  tdl_fiber_options fo = {.detached = true};
  for (long i = 0; i < g.o.clients; i++) {
    if ((e = tdl_fiber_spawn(NULL, loop, client_fiber, &g.cls[i], &fo)) < 0)
      bench_die("tdl_fiber_spawn: %s", strerror(-e));
  }
  tdl_waitgroup_wait(&g.connected, TDL_FOREVER);
  for (long i = 0; i < g.o.clients; i++)
    g.failed |= g.cls[i].err[0] != 0;
  atomic_store(&g.phase, 1);
  tdl_hook_stats_get(&g.h0);
  bench_begin(&g.span);
  tdl_waitgroup_done(&g.go);
  tdl_waitgroup_wait(&g.done, TDL_FOREVER);
  bench_end(&g.span);
  tdl_hook_stats_get(&g.h1);
  atomic_store(&g.phase, 2);
  tdl_watchdog_stop(loop);
  for (long i = 0; i < g.o.clients; i++)
    redisFree(g.cls[i].c);
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc < 2 || strcmp(argv[1], "hiredis") != 0) {
    fprintf(stderr, "usage: bench-hiredis-fibers hiredis [--fibers F] [--commands N] --port P\n");
    return 2;
  }
  hb_parse(argc - 1, argv + 1, "fibers", &g.o);
  if (tdl_hook_active() != 1)
    bench_die("libtreadle-hook is not active");
  g.cls = calloc((size_t)g.o.clients, sizeof *g.cls);
  if (!g.cls)
    bench_die("out of memory");
  for (long i = 0; i < g.o.clients; i++)
    g.cls[i].id = (int)i;
  atomic_store(&g.budget, g.o.pairs);
  int e = tdl_fiber_main(main_fiber, NULL, NULL);
  if (e < 0)
    bench_die("tdl_fiber_main: %s", strerror(-e));
  if (hb_check(IMPL, g.cls, &g.o))
    return 1;
  char extra[160];
  snprintf(extra, sizeof extra, "stalls=%ld setup_stalls=%ld stall_max_ms=%.2f parks_per_cmd=%.3f",
           atomic_load(&g.stalls[1]) + atomic_load(&g.stalls[2]), atomic_load(&g.stalls[0]),
           (double)atomic_load(&g.stall_max) / (double)TDL_MSEC,
           (double)(g.h1.parked - g.h0.parked) / (double)(2 * g.o.pairs));
  hb_report(IMPL, &g.span, &g.o, extra);
  free(g.cls);
  return 0;
}
