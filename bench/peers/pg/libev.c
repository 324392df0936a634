/* SPDX-License-Identifier: MIT */
/*
 * bench-pg-libev: the pg workloads (docs/BENCHMARKS.md) with libpq's
 * asynchronous API on libev, one thread: C connections on one loop, each
 * sending its next query (PQsendQueryPrepared) once the last one's answer
 * is in (PQconsumeInput, PQisBusy, PQgetResult until NULL) and checked, with
 * the same queries and checks as the blocking clients (pg_sync.h).  The
 * connections are made (and the statement prepared) with the blocking calls
 * before the clock starts, then set non-blocking (PQsetnonblocking), so that
 * a query the socket does not take at once is flushed when it is writable.
 *
 *   bench-pg-libev pg      [--conns C] [--queries N] --host DIR [--port P] [--user U]
 *   bench-pg-libev pg-idle [--conns C] [--seconds S] --host DIR [--port P] [--user U]
 *
 * pg-idle: wakeups_per_s counts the loop's polls (ev_iteration).
 */
#include <ev.h>

#include "pg_sync.h"

#define IMPL "pq-libev"

typedef struct conn {
  int id;
  PGconn *pg;
  ev_io io;
  long j;       /* queries answered */
  int answer;   /* the current query's answer came, and was right */
  char v[16];   /* the answer expected: the value sent (pg), the id (pg-idle) */
} conn;

static struct {
  pb_opts o;
  struct ev_loop *loop;
  conn *conns;
  atomic_long budget;
  long answered;
  ev_timer settle, spell;
  bench_span span;
  unsigned polls[2];
  long csw[2];
} g;

static void fail(const conn *c, const char *what, const PGresult *r)
{
  char err[200];
  pb_explain(err, sizeof err, what, c->pg, r);
  bench_die(IMPL ": conn %d: query %ld: %s", c->id, c->j, err);
}

/* Sends what libpq holds for c, and watches for writability while some is
 * left (PQflush's rule for a non-blocking connection). */
static void flush(conn *c)
{
  int left = PQflush(c->pg);
  if (left < 0)
    fail(c, "flush", NULL);
  int want = EV_READ | (left ? EV_WRITE : 0);
  if ((c->io.events & (EV_READ | EV_WRITE)) != want) {
    ev_io_stop(g.loop, &c->io);
    ev_io_set(&c->io, PQsocket(c->pg), want);
    ev_io_start(g.loop, &c->io);
  }
}

/* pg: c's next query, if any is left: 1, else 0. */
static int send_next(conn *c)
{
  if (!pb_take(&g.budget))
    return 0;
  pb_value(c->v, sizeof c->v, c->id, c->j);
  const char *params[1] = {c->v};
  if (!PQsendQueryPrepared(c->pg, PB_STMT, 1, params, NULL, NULL, 0))
    fail(c, "send", NULL);
  flush(c);
  return 1;
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
  (void)loop;
  conn *c = w->data;
  if (revents & EV_WRITE)
    flush(c);
  if (!(revents & EV_READ))
    return;
  if (!PQconsumeInput(c->pg))
    fail(c, "read", NULL);
  if (c->io.events & EV_WRITE)
    flush(c);
  while (!PQisBusy(c->pg)) {
    PGresult *r = PQgetResult(c->pg);
    if (r) {
      if (!pb_answer_ok(r, c->v))
        fail(c, "answer", r);
      c->answer = 1;
      PQclear(r);
      continue;
    }
    /* NULL: the query is over. */
    if (!c->answer)
      fail(c, "no answer", NULL);
    c->answer = 0;
    c->j++;
    g.answered++;
    if (g.o.idle || !send_next(c))
      ev_io_stop(g.loop, &c->io);
    return;
  }
}

/* pg-idle: the spell's end, PB_SETTLE_MS after every query was sent. */
static void on_spell(struct ev_loop *loop, ev_timer *t, int revents)
{
  (void)t;
  (void)revents;
  bench_end(&g.span);
  g.polls[1] = ev_iteration(loop);
  g.csw[1] = pb_csw();
  if (g.answered)
    bench_die(IMPL ": %ld queries ended within the spell", g.answered);
}

static void on_settle(struct ev_loop *loop, ev_timer *t, int revents)
{
  (void)t;
  (void)revents;
  g.polls[0] = ev_iteration(loop);
  g.csw[0] = pb_csw();
  ev_now_update(loop);
  bench_begin(&g.span);
  ev_timer_init(&g.spell, on_spell, (double)g.o.seconds, 0.);
  ev_timer_start(loop, &g.spell);
}

int main(int argc, char **argv)
{
  if (argc < 2 || (strcmp(argv[1], "pg") != 0 && strcmp(argv[1], "pg-idle") != 0)) {
    fprintf(stderr, "usage: bench-pg-libev pg|pg-idle [--conns C] [--queries N] [--seconds S] --host DIR "
                    "[--port P] [--user U]\n");
    return 2;
  }
  pb_parse(argc - 1, argv + 1, "conns", &g.o);
  g.loop = ev_loop_new(EVFLAG_AUTO);
  if (!g.loop)
    bench_die("ev_loop_new failed");
  g.conns = calloc((size_t)g.o.clients, sizeof *g.conns);
  if (!g.conns)
    bench_die("out of memory");
  atomic_store(&g.budget, g.o.queries);
  for (long i = 0; i < g.o.clients; i++) {
    conn *c = &g.conns[i];
    c->id = (int)i;
    char err[200] = "";
    c->pg = pb_connect(&g.o, err, sizeof err);
    if (err[0])
      bench_die(IMPL ": conn %d: %s", c->id, err);
    if (PQsetnonblocking(c->pg, 1) != 0)
      fail(c, "PQsetnonblocking", NULL);
    ev_io_init(&c->io, on_io, PQsocket(c->pg), EV_READ);
    c->io.data = c;
  }
  if (g.o.idle) {
    for (long i = 0; i < g.o.clients; i++) {
      conn *c = &g.conns[i];
      char sql[64];
      pb_idle_sql(sql, sizeof sql, c->v, sizeof c->v, c->id, &g.o);
      if (!PQsendQuery(c->pg, sql))
        fail(c, "send", NULL);
      ev_io_start(g.loop, &c->io);
      flush(c);
    }
    ev_now_update(g.loop);
    ev_timer_init(&g.settle, on_settle, PB_SETTLE_MS / 1000., 0.);
    ev_timer_start(g.loop, &g.settle);
    ev_run(g.loop, 0);
  } else {
    bench_begin(&g.span);
    for (long i = 0; i < g.o.clients; i++) {
      ev_io_start(g.loop, &g.conns[i].io);
      if (!send_next(&g.conns[i]))
        ev_io_stop(g.loop, &g.conns[i].io);
    }
    ev_run(g.loop, 0);
    bench_end(&g.span);
  }
  long done = 0;
  for (long i = 0; i < g.o.clients; i++) {
    done += g.conns[i].j;
    PQfinish(g.conns[i].pg);
  }
  long want = g.o.idle ? g.o.clients : g.o.queries;
  if (done != want || g.answered != want) {
    fprintf(stderr, IMPL ": FAILED: %ld of %ld queries answered\n", done, want);
    return 1;
  }
  char extra[64];
  snprintf(extra, sizeof extra, "backend=%s", ev_backend(g.loop) == EVBACKEND_EPOLL ? "epoll" : "other");
  if (g.o.idle)
    pb_report_idle(IMPL, &g.span, &g.o, (long)(g.polls[1] - g.polls[0]), g.csw[1] - g.csw[0], extra);
  else
    pb_report(IMPL, &g.span, &g.o, extra);
  ev_loop_destroy(g.loop);
  free(g.conns);
  return 0;
}
