/* SPDX-License-Identifier: MIT */
/*
 * bench-hiredis-pthreads: the hiredis workload (docs/BENCHMARKS.md) with
 * the synchronous code of the fibers (../../hiredis_sync.h) in F pthreads,
 * each with its own blocking connection.  Stacks of 64 KiB, as treadle's
 * fibers have by default, so that thousands of threads fit.  Every thread
 * connects, then all start together (a barrier) when the clock starts.
 *
 *   bench-hiredis-pthreads hiredis [--threads F] [--commands N] --port P
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "hiredis_sync.h"

#define IMPL "pthreads"
#define STACK (64 * 1024)

static struct {
  hb_opts o;
  hb_client *cls;
  atomic_long budget;
  pthread_barrier_t connected, go;
  atomic_int failed;
} g;

static void *client_thread(void *arg)
{
  hb_client *cl = arg;
  hb_sync_connect(cl, &g.o);
  if (cl->err[0])
    atomic_store(&g.failed, 1);
  pthread_barrier_wait(&g.connected);
  pthread_barrier_wait(&g.go);
  if (!atomic_load(&g.failed))
    hb_sync_client(cl, &g.budget);
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc < 2 || strcmp(argv[1], "hiredis") != 0) {
    fprintf(stderr, "usage: bench-hiredis-pthreads hiredis [--threads F] [--commands N] --port P\n");
    return 2;
  }
  hb_parse(argc - 1, argv + 1, "threads", &g.o);
  g.cls = calloc((size_t)g.o.clients, sizeof *g.cls);
  pthread_t *th = calloc((size_t)g.o.clients, sizeof *th);
  if (!g.cls || !th)
    bench_die("out of memory");
  atomic_store(&g.budget, g.o.pairs);
  if (pthread_barrier_init(&g.connected, NULL, (unsigned)g.o.clients + 1) != 0 ||
      pthread_barrier_init(&g.go, NULL, (unsigned)g.o.clients + 1) != 0)
    bench_die("pthread_barrier_init");
  pthread_attr_t at;
  pthread_attr_init(&at);
  if (pthread_attr_setstacksize(&at, STACK) != 0)
    bench_die("pthread_attr_setstacksize");
  for (long i = 0; i < g.o.clients; i++) {
    g.cls[i].id = (int)i;
    int e = pthread_create(&th[i], &at, client_thread, &g.cls[i]);
    if (e != 0)
      bench_die("pthread_create (thread %ld of %ld): %s", i + 1, g.o.clients, strerror(e));
  }
  pthread_attr_destroy(&at);
  pthread_barrier_wait(&g.connected);
  bench_span sp;
  bench_begin(&sp);
  pthread_barrier_wait(&g.go);
  for (long i = 0; i < g.o.clients; i++)
    pthread_join(th[i], NULL);
  bench_end(&sp);
  for (long i = 0; i < g.o.clients; i++)
    redisFree(g.cls[i].c);
  if (hb_check(IMPL, g.cls, &g.o))
    return 1;
  hb_report(IMPL, &sp, &g.o, "");
  free(th);
  free(g.cls);
  return 0;
}
