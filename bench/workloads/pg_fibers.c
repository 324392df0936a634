/* SPDX-License-Identifier: MIT */
/*
 * bench-pg-fibers: the pg workloads (docs/BENCHMARKS.md) with treadle's
 * hook library: C fibers on one loop, each running libpq's blocking API,
 * unmodified (peers/pg/pg_sync.h), on its own connection.  A program of its
 * own, not a workload of treadle-bench: it is linked with libtreadle-hook,
 * which would hook every other workload too.
 *
 *   bench-pg-fibers pg      [--fibers C] [--queries N] --host DIR [--port P] [--user U]
 *   bench-pg-fibers pg-idle [--fibers C] [--seconds S] --host DIR [--port P] [--user U]
 *
 * Keys beyond pg_sync.h's: pg: parks_per_query (the hook's parks per query
 * while the queries ran).  pg-idle: wakeups_per_s counts the loop's returns
 * from its poll (an after-poll observer: what libev's ev_iteration counts),
 * whatever woke it; fiber_wakeups_per_s the fibers' wake-ups
 * (tdl_loop_metrics' wakeups), less the measuring fiber's own; both 0 when
 * libpq's waits park without sampling.
 */
#include <treadle.h>
#include <treadle/hook.h>

#include "pg_sync.h"

#define IMPL "treadle-hook"

static struct {
  pb_opts o;
  pb_client *cls;
  atomic_long budget;
  tdl_waitgroup connected, go, sent, done;
  bench_span span;
  int failed;
  long answered;          /* pg-idle: clients whose answer came */
  long polls;             /* pg-idle: the loop's returns from its poll */
  tdl_hook_stats h0, h1;  /* pg */
  long wake[2], csw[2];   /* pg-idle: at the start and the end of the spell */
  long fiber_wake[2];
  int counted;
  const char *backend;    /* the loop's back end (epoll, uring...) */
} g;

static void *client_fiber(void *arg)
{
  pb_client *cl = arg;
  cl->c = pb_connect(&g.o, cl->err, sizeof cl->err);
  tdl_waitgroup_done(&g.connected);
  if (tdl_waitgroup_wait(&g.go, TDL_FOREVER) == 0 && !g.failed) {
    if (g.o.idle) {
      /* Done before the query: the fiber runs on into it, sends, and parks
       * before the main fiber can run again. */
      tdl_waitgroup_done(&g.sent);
      pb_idle_client(cl, &g.o);
      g.answered++;
    } else {
      pb_sync_client(cl, &g.budget);
    }
  }
  tdl_waitgroup_done(&g.done);
  return NULL;
}

static void on_poll(tdl_loop *loop, tdl_observer *o)
{
  (void)loop;
  (void)o;
  g.polls++;
}

/* pg-idle: one end of the spell. */
static void snapshot(tdl_loop *loop, int i)
{
  tdl_loop_metrics m = {.size = sizeof m};
  if (tdl_metrics_loop(loop, &m) < 0)
    bench_die("tdl_metrics_loop failed");
  g.counted = m.counted != 0;
  g.fiber_wake[i] = (long)m.wakeups;
  g.wake[i] = g.polls;
  g.csw[i] = pb_csw();
}

static void idle_spell(tdl_loop *loop)
{
  tdl_observer obs;
  tdl_observer_init(&obs, on_poll, NULL);
  if (tdl_observer_start(loop, &obs, TDL_OBSERVER_AFTER_POLL) < 0)
    bench_die("tdl_observer_start failed");
  tdl_waitgroup_wait(&g.sent, TDL_FOREVER);
  tdl_sleep(tdl_after(PB_SETTLE_MS * TDL_MSEC));
  snapshot(loop, 0);
  bench_begin(&g.span);
  tdl_sleep(tdl_after(g.o.seconds * TDL_SEC));
  bench_end(&g.span);
  snapshot(loop, 1);
  tdl_observer_stop(loop, &obs);
  if (g.answered)
    bench_die(IMPL ": %ld queries ended within the spell", g.answered);
}

static void *main_fiber(void *arg)
{
  (void)arg;
  tdl_loop *loop = tdl_fiber_loop();
  g.backend = tdl_loop_backend(loop);
  tdl_waitgroup_init(&g.connected);
  tdl_waitgroup_init(&g.go);
  tdl_waitgroup_init(&g.sent);
  tdl_waitgroup_init(&g.done);
  tdl_waitgroup_add(&g.connected, g.o.clients);
  tdl_waitgroup_add(&g.sent, g.o.clients);
  tdl_waitgroup_add(&g.done, g.o.clients);
  tdl_waitgroup_add(&g.go, 1);
  tdl_fiber_options fo = {.detached = true};
  for (long i = 0; i < g.o.clients; i++) {
    int e = tdl_fiber_spawn(NULL, loop, client_fiber, &g.cls[i], &fo);
    if (e < 0)
      bench_die("tdl_fiber_spawn: %s", strerror(-e));
  }
  tdl_waitgroup_wait(&g.connected, TDL_FOREVER);
  for (long i = 0; i < g.o.clients; i++)
    g.failed |= g.cls[i].err[0] != 0;
  if (g.failed) {
    tdl_waitgroup_done(&g.go);
  } else if (g.o.idle) {
    tdl_waitgroup_done(&g.go);
    idle_spell(loop);
  } else {
    tdl_hook_stats_get(&g.h0);
    bench_begin(&g.span);
    tdl_waitgroup_done(&g.go);
    tdl_waitgroup_wait(&g.done, TDL_FOREVER);
    bench_end(&g.span);
    tdl_hook_stats_get(&g.h1);
  }
  tdl_waitgroup_wait(&g.done, TDL_FOREVER);
  for (long i = 0; i < g.o.clients; i++)
    PQfinish(g.cls[i].c);
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc < 2 || (strcmp(argv[1], "pg") != 0 && strcmp(argv[1], "pg-idle") != 0)) {
    fprintf(stderr, "usage: bench-pg-fibers pg|pg-idle [--fibers C] [--queries N] [--seconds S] --host DIR "
                    "[--port P] [--user U]\n");
    return 2;
  }
  pb_parse(argc - 1, argv + 1, "fibers", &g.o);
  if (tdl_hook_active() != 1)
    bench_die("libtreadle-hook is not active");
  g.cls = calloc((size_t)g.o.clients, sizeof *g.cls);
  if (!g.cls)
    bench_die("out of memory");
  for (long i = 0; i < g.o.clients; i++)
    g.cls[i].id = (int)i;
  atomic_store(&g.budget, g.o.queries);
  int e = tdl_fiber_main(main_fiber, NULL, NULL);
  if (e < 0)
    bench_die("tdl_fiber_main: %s", strerror(-e));
  if (pb_check(IMPL, g.cls, &g.o))
    return 1;
  char extra[128];
  if (g.o.idle) {
    int n = snprintf(extra, sizeof extra, "backend=%s", g.backend);
    if (g.counted) /* the measuring fiber's sleep is one wake-up */
      snprintf(extra + n, sizeof extra - (size_t)n, " fiber_wakeups_per_s=%.3f",
               (double)(g.fiber_wake[1] - g.fiber_wake[0] - 1) / g.span.wall_s);
    pb_report_idle(IMPL, &g.span, &g.o, g.wake[1] - g.wake[0], g.csw[1] - g.csw[0], extra);
  } else {
    snprintf(extra, sizeof extra, "backend=%s parks_per_query=%.3f", g.backend,
             (double)(g.h1.parked - g.h0.parked) / (double)g.o.queries);
    pb_report(IMPL, &g.span, &g.o, extra);
  }
  free(g.cls);
  return 0;
}
