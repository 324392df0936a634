/* SPDX-License-Identifier: MIT */
/*
 * bench-hiredis-libev: the hiredis workload (docs/BENCHMARKS.md) with
 * hiredis's asynchronous API on libev, through hiredis's own adapter
 * (<hiredis/adapters/libev.h>): F connections on one loop, each issuing its
 * next command from the previous one's reply callback (SET, then GET once
 * SET's reply is in and checked, then the next SET once GET's is), with the
 * same commands and checks as the synchronous clients (../../hiredis_sync.h).
 * The F connections are made (every connect callback has run) before the
 * clock starts, and freed after it stops.
 *
 *   bench-hiredis-libev hiredis [--conns F] [--commands N] --port P
 */
#include <ev.h>
#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <stdlib.h>

#include "hiredis_sync.h"

#define IMPL "hiredis-libev"

typedef struct conn {
  int id;
  redisAsyncContext *ac;
  long j; /* this connection's pairs done */
  int len;
  char key[32], val[48];
} conn;

static struct {
  hb_opts o;
  struct ev_loop *loop;
  conn *conns;
  atomic_long budget;
  long connected, pairs_done;
} g;

static void on_set(redisAsyncContext *ac, void *reply, void *priv);
static void on_get(redisAsyncContext *ac, void *reply, void *priv);

static void command(conn *c, redisCallbackFn *fn, const char *fmt)
{
  if (redisAsyncCommand(c->ac, fn, c, fmt, c->key, c->val) != REDIS_OK)
    bench_die(IMPL ": conn %d: redisAsyncCommand: %s", c->id, c->ac->errstr);
}

/* The next pair on c, if any is left. */
static void next_pair(conn *c)
{
  if (!hb_take(&g.budget))
    return;
  c->len = snprintf(c->val, sizeof c->val, "v-%d-%ld", c->id, c->j);
  command(c, on_set, "SET %s %s");
}

static void on_set(redisAsyncContext *ac, void *reply, void *priv)
{
  conn *c = priv;
  if (!hb_set_ok(reply))
    bench_die(IMPL ": conn %d: pair %ld: SET: %s", c->id, c->j, reply ? "wrong reply" : ac->errstr);
  command(c, on_get, "GET %s");
}

static void on_get(redisAsyncContext *ac, void *reply, void *priv)
{
  conn *c = priv;
  if (!hb_get_ok(reply, c->val, (size_t)c->len))
    bench_die(IMPL ": conn %d: pair %ld: GET: %s", c->id, c->j, reply ? "wrong reply" : ac->errstr);
  c->j++;
  if (++g.pairs_done == g.o.pairs)
    ev_break(g.loop, EVBREAK_ALL);
  else
    next_pair(c);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
  if (status != REDIS_OK)
    bench_die(IMPL ": connect: %s", ac->errstr);
  if (++g.connected == g.o.clients)
    ev_break(g.loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
  if (argc < 2 || strcmp(argv[1], "hiredis") != 0) {
    fprintf(stderr, "usage: bench-hiredis-libev hiredis [--conns F] [--commands N] --port P\n");
    return 2;
  }
  hb_parse(argc - 1, argv + 1, "conns", &g.o);
  g.loop = ev_loop_new(EVFLAG_AUTO);
  if (!g.loop)
    bench_die("ev_loop_new failed");
  g.conns = calloc((size_t)g.o.clients, sizeof *g.conns);
  if (!g.conns)
    bench_die("out of memory");
  atomic_store(&g.budget, g.o.pairs);
  for (long i = 0; i < g.o.clients; i++) {
    conn *c = &g.conns[i];
    c->id = (int)i;
    snprintf(c->key, sizeof c->key, "key:%d", c->id);
    c->ac = redisAsyncConnect("127.0.0.1", g.o.port);
    if (!c->ac || c->ac->err)
      bench_die(IMPL ": redisAsyncConnect: %s", c->ac ? c->ac->errstr : "no memory");
    if (redisLibevAttach(g.loop, c->ac) != REDIS_OK || redisAsyncSetConnectCallback(c->ac, on_connect) != REDIS_OK)
      bench_die(IMPL ": attaching to libev failed");
  }
  ev_run(g.loop, 0);
  if (g.connected != g.o.clients)
    bench_die(IMPL ": %ld of %ld connected", g.connected, g.o.clients);
  bench_span sp;
  bench_begin(&sp);
  for (long i = 0; i < g.o.clients; i++)
    next_pair(&g.conns[i]);
  ev_run(g.loop, 0);
  bench_end(&sp);
  long done = 0;
  for (long i = 0; i < g.o.clients; i++) {
    done += g.conns[i].j;
    redisAsyncFree(g.conns[i].ac); /* the pending-callback list is empty: no callback runs */
  }
  if (done != g.o.pairs || g.pairs_done != g.o.pairs) {
    fprintf(stderr, IMPL ": FAILED: %ld of %ld pairs done\n", done, g.o.pairs);
    return 1;
  }
  char extra[64];
  snprintf(extra, sizeof extra, "backend=%s", ev_backend(g.loop) == EVBACKEND_EPOLL ? "epoll" : "other");
  hb_report(IMPL, &sp, &g.o, extra);
  ev_loop_destroy(g.loop);
  free(g.conns);
  return 0;
}
