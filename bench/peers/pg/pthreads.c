/* SPDX-License-Identifier: MIT */
/*
 * bench-pg-pthreads: the pg workloads (docs/BENCHMARKS.md) with the
 * blocking code of the fibers (pg_sync.h) in C pthreads, each with its own
 * connection.  Stacks of 64 KiB, as treadle's fibers have by default, so
 * that thousands of threads fit.  Every thread connects, then all start
 * together (a barrier) when the clock starts.
 *
 *   bench-pg-pthreads pg      [--threads C] [--queries N] --host DIR [--port P] [--user U]
 *   bench-pg-pthreads pg-idle [--threads C] [--seconds S] --host DIR [--port P] [--user U]
 *
 * pg-idle: no loop here; a thread's wake-up is a context switch, so
 * wakeups_per_s is the process's (csw_per_s).
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "pg_sync.h"

#define IMPL "pthreads"
#define STACK (64 * 1024)

static struct {
  pb_opts o;
  pb_client *cls;
  atomic_long budget;
  pthread_barrier_t connected, go, sent;
  atomic_int failed;
  atomic_long answered; /* pg-idle */
} g;

static void *client_thread(void *arg)
{
  pb_client *cl = arg;
  cl->c = pb_connect(&g.o, cl->err, sizeof cl->err);
  if (cl->err[0])
    atomic_store(&g.failed, 1);
  pthread_barrier_wait(&g.connected);
  pthread_barrier_wait(&g.go);
  if (atomic_load(&g.failed))
    return NULL;
  if (g.o.idle) {
    pthread_barrier_wait(&g.sent); /* then PB_SETTLE_MS for the query to go out */
    pb_idle_client(cl, &g.o);
    atomic_fetch_add(&g.answered, 1);
  } else {
    pb_sync_client(cl, &g.budget);
  }
  return NULL;
}

static void nap(long ms)
{
  struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

int main(int argc, char **argv)
{
  if (argc < 2 || (strcmp(argv[1], "pg") != 0 && strcmp(argv[1], "pg-idle") != 0)) {
    fprintf(stderr, "usage: bench-pg-pthreads pg|pg-idle [--threads C] [--queries N] [--seconds S] --host DIR "
                    "[--port P] [--user U]\n");
    return 2;
  }
  pb_parse(argc - 1, argv + 1, "threads", &g.o);
  g.cls = calloc((size_t)g.o.clients, sizeof *g.cls);
  pthread_t *th = calloc((size_t)g.o.clients, sizeof *th);
  if (!g.cls || !th)
    bench_die("out of memory");
  atomic_store(&g.budget, g.o.queries);
  unsigned n = (unsigned)g.o.clients + 1;
  if (pthread_barrier_init(&g.connected, NULL, n) != 0 || pthread_barrier_init(&g.go, NULL, n) != 0 ||
      pthread_barrier_init(&g.sent, NULL, n) != 0)
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
  long csw0 = 0, csw1 = 0;
  if (g.o.idle && !atomic_load(&g.failed)) {
    pthread_barrier_wait(&g.go);
    pthread_barrier_wait(&g.sent);
    nap(PB_SETTLE_MS);
    csw0 = pb_csw();
    bench_begin(&sp);
    nap(g.o.seconds * 1000);
    bench_end(&sp);
    csw1 = pb_csw();
    if (atomic_load(&g.answered))
      bench_die(IMPL ": %ld queries ended within the spell", atomic_load(&g.answered));
  } else {
    bench_begin(&sp);
    pthread_barrier_wait(&g.go);
  }
  for (long i = 0; i < g.o.clients; i++)
    pthread_join(th[i], NULL);
  if (!g.o.idle)
    bench_end(&sp);
  for (long i = 0; i < g.o.clients; i++)
    PQfinish(g.cls[i].c);
  if (pb_check(IMPL, g.cls, &g.o))
    return 1;
  if (g.o.idle)
    pb_report_idle(IMPL, &sp, &g.o, csw1 - csw0, csw1 - csw0, "");
  else
    pb_report(IMPL, &sp, &g.o, "");
  free(th);
  free(g.cls);
  return 0;
}
