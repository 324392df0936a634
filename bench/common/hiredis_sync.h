/* SPDX-License-Identifier: MIT */
/*
 * The hiredis workload (docs/BENCHMARKS.md): what its three drivers share.
 *
 *   bench-hiredis-fibers   hiredis --fibers F  --commands N --port P   (hiredis_fibers.c)
 *   bench-hiredis-pthreads hiredis --threads F --commands N --port P   (peers/hiredis/pthreads.c)
 *   bench-hiredis-libev    hiredis --conns F   --commands N --port P   (peers/hiredis/libev.c)
 *
 * Each of F clients has its own connection to the redis-server on
 * 127.0.0.1:P and loops { SET key:<id> v-<id>-<j>; GET key:<id> }, checking
 * every reply (SET says OK, GET returns the value just set), while pairs
 * remain of the N/2 shared by all.  hb_sync_client() below is the loop of
 * the synchronous API, the very code that the fibers and the pthreads run;
 * the libev peer does the same commands and checks from reply callbacks.
 * The server is started and stopped by bench/drivers/hiredis_driver.py.
 *
 * Keys: clients, commands (2 x pairs), cmds_per_s = commands / wall_s,
 * cpu_us_per_cmd = (user+sys of this process, every thread) * 1e6 / commands.
 * The connections are made before the clock starts and freed after it stops.
 */
#ifndef TDL_BENCH_HIREDIS_SYNC_H
#define TDL_BENCH_HIREDIS_SYNC_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

typedef struct hb_opts {
  long clients; /* F */
  long pairs;   /* N / 2 */
  int port;
} hb_opts;

/* count_name: "fibers", "threads" or "conns" (--fibers is accepted by all). */
static inline void hb_parse(int argc, char **argv, const char *count_name, hb_opts *o)
{
  o->clients = bench_opt_long(argc, argv, count_name, bench_opt_long(argc, argv, "fibers", 1000));
  long commands = bench_opt_long(argc, argv, "commands", 1000000);
  long port = bench_opt_long(argc, argv, "port", 0);
  if (o->clients < 1 || o->clients > 1000000 || commands < 2 || port < 1 || port > 65535) {
    fprintf(stderr, "hiredis: need --%s F >= 1, --commands N >= 2 and --port P (a running redis-server)\n",
            count_name);
    exit(2);
  }
  o->pairs = commands / 2;
  o->port = (int)port;
  bench_raise_nofile();
}

/* Takes one pair of the shared budget: 1, or 0 when none is left. */
static inline int hb_take(atomic_long *budget)
{
  if (atomic_load_explicit(budget, memory_order_relaxed) <= 0)
    return 0;
  return atomic_fetch_sub_explicit(budget, 1, memory_order_relaxed) > 0;
}

static inline int hb_set_ok(const redisReply *r)
{
  return r && r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0;
}

static inline int hb_get_ok(const redisReply *r, const char *val, size_t len)
{
  return r && r->type == REDIS_REPLY_STRING && (size_t)r->len == len && memcmp(r->str, val, len) == 0;
}

/* One synchronous client, as a fiber or a thread runs it. */
typedef struct hb_client {
  int id;
  redisContext *c;
  long pairs;    /* pairs done, each reply checked */
  char err[160]; /* "" while all is well */
} hb_client;

static inline void hb_sync_connect(hb_client *cl, const hb_opts *o)
{
  cl->c = redisConnect("127.0.0.1", o->port);
  if (!cl->c || cl->c->err)
    snprintf(cl->err, sizeof cl->err, "connect: %s", cl->c ? cl->c->errstr : "no memory");
}

static inline void hb_sync_client(hb_client *cl, atomic_long *budget)
{
  char key[32], val[48];
  snprintf(key, sizeof key, "key:%d", cl->id);
  for (long j = 0; !cl->err[0] && hb_take(budget); j++) {
    int len = snprintf(val, sizeof val, "v-%d-%ld", cl->id, j);
    redisReply *r = redisCommand(cl->c, "SET %s %s", key, val);
    int ok = hb_set_ok(r);
    freeReplyObject(r);
    if (ok) {
      r = redisCommand(cl->c, "GET %s", key);
      ok = hb_get_ok(r, val, (size_t)len);
      freeReplyObject(r);
    }
    if (!ok) {
      snprintf(cl->err, sizeof cl->err, "pair %ld: %s", j, cl->c->err ? cl->c->errstr : "wrong reply");
      break;
    }
    cl->pairs++;
  }
}

/* Checks every client's count (a failed one's error on stderr) against the
 * budget; 0, or 1 when something went wrong. */
static inline int hb_check(const char *impl, const hb_client *cls, const hb_opts *o)
{
  long done = 0, bad = 0;
  for (long i = 0; i < o->clients; i++) {
    done += cls[i].pairs;
    if (cls[i].err[0] && bad++ < 5)
      fprintf(stderr, "%s: client %d: %s\n", impl, cls[i].id, cls[i].err);
  }
  if (bad || done != o->pairs) {
    fprintf(stderr, "%s: FAILED: %ld clients failed, %ld of %ld pairs done\n", impl, bad, done, o->pairs);
    return 1;
  }
  return 0;
}

/* The keys every driver reports, then `extra` (may be ""). */
static inline void hb_report(const char *impl, const bench_span *s, const hb_opts *o, const char *extra)
{
  long commands = 2 * o->pairs;
  bench_result(impl, "hiredis", s, "clients=%ld commands=%ld cmds_per_s=%.0f cpu_us_per_cmd=%.3f%s%s", o->clients,
               commands, (double)commands / s->wall_s, (s->user_s + s->sys_s) * 1e6 / (double)commands,
               extra[0] ? " " : "", extra);
}

#endif
