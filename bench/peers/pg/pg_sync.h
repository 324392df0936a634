/* SPDX-License-Identifier: MIT */
/*
 * The pg workloads (docs/BENCHMARKS.md): what their three clients share.
 *
 *   bench-pg-fibers   pg|pg-idle --fibers C  ...   (workloads/pg_fibers.c)
 *   bench-pg-pthreads pg|pg-idle --threads C ...   (peers/pg/pthreads.c)
 *   bench-pg-libev    pg|pg-idle --conns C   ...   (peers/pg/libev.c)
 *
 * Every client has its own libpq connection to the PostgreSQL server whose
 * Unix socket is in --host DIR (--port P names the socket, --user U),
 * started and stopped by bench/drivers/pg_driver.py.  The connections are
 * made before the clock starts and closed after it stops.
 *
 * pg --queries N: each client, with `SELECT $1::int` prepared on its
 * connection, runs it with a value of its own and checks that the same value
 * comes back, while queries remain of the N shared by all.  pb_sync_client()
 * below is the loop of the blocking API, the very code that the fibers and
 * the pthreads run; the libev peer sends the same queries and checks the
 * same answers with libpq's asynchronous API.  Keys: conns, queries,
 * queries_per_s = queries / wall_s, cpu_us_per_query = (user+sys of this
 * process, every thread) * 1e6 / queries.
 *
 * pg-idle --seconds S: each client sends `SELECT <its id> FROM pg_sleep(S +
 * PB_IDLE_MARGIN_S)` and waits for the answer.  Once every one has sent
 * (and PB_SETTLE_MS later, so that every thread is asleep), the program
 * counts its wake-ups over S seconds of its own sleep, during which nothing
 * can arrive: a client that wakes then does so for nothing.  Keys: conns,
 * seconds, wakeups_per_s (each client's own count: loop iterations for the
 * loops, context switches for the threads), csw_per_s (the process's context
 * switches, voluntary and not, every thread: getrusage), each less the one
 * wake-up that ends the spell, over S.  An answer that comes within the
 * spell fails the run: it would not have been idle.
 */
#ifndef TDL_BENCH_PG_SYNC_H
#define TDL_BENCH_PG_SYNC_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define PB_STMT "q"
#define PB_SQL "SELECT $1::int"
#define PB_SETTLE_MS 250
#define PB_IDLE_MARGIN_S 2

typedef struct pb_opts {
  int idle;       /* pg-idle */
  long clients;   /* C */
  long queries;   /* pg: N */
  long seconds;   /* pg-idle: S */
  char conninfo[512];
} pb_opts;

/* argv[0] is the workload; count_name: "fibers", "threads" or "conns"
 * (--conns is accepted by all). */
static inline void pb_parse(int argc, char **argv, const char *count_name, pb_opts *o)
{
  o->idle = strcmp(argv[0], "pg-idle") == 0;
  o->clients = bench_opt_long(argc, argv, count_name, bench_opt_long(argc, argv, "conns", 100));
  o->queries = bench_opt_long(argc, argv, "queries", 200000);
  o->seconds = bench_opt_long(argc, argv, "seconds", 10);
  long port = bench_opt_long(argc, argv, "port", 5432);
  const char *host = bench_opt_str(argc, argv, "host", NULL);
  const char *user = bench_opt_str(argc, argv, "user", "treadle");
  if (o->clients < 1 || o->clients > 100000 || o->queries < 1 || o->seconds < 1 || port < 1 || port > 65535 ||
      !host) {
    fprintf(stderr, "%s: need --%s C >= 1, --queries N >= 1 (pg), --seconds S >= 1 (pg-idle) and --host DIR "
            "(the socket directory of a running PostgreSQL server)\n", argv[0], count_name);
    exit(2);
  }
  /* Over the Unix socket: no TLS, no GSS to try. */
  snprintf(o->conninfo, sizeof o->conninfo, "host=%s port=%ld user=%s dbname=postgres sslmode=disable "
           "gssencmode=disable", host, port, user);
  bench_raise_nofile();
}

/* Takes one query of the shared budget: 1, or 0 when none is left. */
static inline int pb_take(atomic_long *budget)
{
  if (atomic_load_explicit(budget, memory_order_relaxed) <= 0)
    return 0;
  return atomic_fetch_sub_explicit(budget, 1, memory_order_relaxed) > 0;
}

/* The value client `id` sends with its j-th query, as text. */
static inline void pb_value(char *buf, size_t cap, int id, long j)
{
  snprintf(buf, cap, "%ld", ((long)id * 1000003L + j) % 2147483647L);
}

/* Whether r is one row of one column whose text is want. */
static inline int pb_answer_ok(const PGresult *r, const char *want)
{
  return r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQnfields(r) == 1 &&
         strcmp(PQgetvalue(r, 0, 0), want) == 0;
}

/* What went wrong with r (NULL: the connection's error), into err. */
static inline void pb_explain(char *err, size_t cap, const char *what, PGconn *c, const PGresult *r)
{
  const char *why = !r ? PQerrorMessage(c) : PQresultErrorMessage(r)[0] ? PQresultErrorMessage(r) : "wrong answer";
  snprintf(err, cap, "%s: %.*s", what, (int)strcspn(why, "\n"), why);
}

/* One client, as a fiber or a thread runs it (the libev peer keeps its own). */
typedef struct pb_client {
  int id;
  PGconn *c;
  long done;     /* queries answered, each answer checked */
  char err[200]; /* "" while all is well */
} pb_client;

/* A blocking connection, with the statement prepared on it for pg; what
 * failed in err (the connection is returned even then, for PQfinish). */
static inline PGconn *pb_connect(const pb_opts *o, char *err, size_t cap)
{
  PGconn *c = PQconnectdb(o->conninfo);
  if (!c || PQstatus(c) != CONNECTION_OK) {
    pb_explain(err, cap, "connect", c, NULL);
    return c;
  }
  if (!o->idle) {
    PGresult *r = PQprepare(c, PB_STMT, PB_SQL, 1, NULL);
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK)
      pb_explain(err, cap, "prepare", c, r);
    PQclear(r);
  }
  return c;
}

/* pg: one blocking client's loop. */
static inline void pb_sync_client(pb_client *cl, atomic_long *budget)
{
  char v[16];
  const char *params[1] = {v};
  for (long j = 0; !cl->err[0] && pb_take(budget); j++) {
    pb_value(v, sizeof v, cl->id, j);
    PGresult *r = PQexecPrepared(cl->c, PB_STMT, 1, params, NULL, NULL, 0);
    if (pb_answer_ok(r, v))
      cl->done++;
    else
      pb_explain(cl->err, sizeof cl->err, "query", cl->c, r);
    PQclear(r);
  }
}

/* pg-idle: the query client id sends, and the answer it expects. */
static inline void pb_idle_sql(char *sql, size_t cap, char *want, size_t want_cap, int id, const pb_opts *o)
{
  snprintf(sql, cap, "SELECT %d FROM pg_sleep(%ld)", id, o->seconds + PB_IDLE_MARGIN_S);
  snprintf(want, want_cap, "%d", id);
}

/* pg-idle: one blocking client's wait. */
static inline void pb_idle_client(pb_client *cl, const pb_opts *o)
{
  char sql[64], want[16];
  pb_idle_sql(sql, sizeof sql, want, sizeof want, cl->id, o);
  PGresult *r = PQexec(cl->c, sql);
  if (pb_answer_ok(r, want))
    cl->done++;
  else
    pb_explain(cl->err, sizeof cl->err, "pg_sleep", cl->c, r);
  PQclear(r);
}

/* The process's context switches so far, every thread. */
static inline long pb_csw(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* Checks every client's count (a failed one's error on stderr) against what
 * was asked; 0, or 1 when something went wrong. */
static inline int pb_check(const char *impl, const pb_client *cls, const pb_opts *o)
{
  long done = 0, bad = 0;
  for (long i = 0; i < o->clients; i++) {
    done += cls[i].done;
    if (cls[i].err[0] && bad++ < 5)
      fprintf(stderr, "%s: client %d: %s\n", impl, cls[i].id, cls[i].err);
  }
  long want = o->idle ? o->clients : o->queries;
  if (bad || done != want) {
    fprintf(stderr, "%s: FAILED: %ld clients failed, %ld of %ld queries answered\n", impl, bad, done, want);
    return 1;
  }
  return 0;
}

/* pg's keys, then `extra` (may be ""). */
static inline void pb_report(const char *impl, const bench_span *s, const pb_opts *o, const char *extra)
{
  bench_result(impl, "pg", s, "conns=%ld queries=%ld queries_per_s=%.0f cpu_us_per_query=%.3f%s%s", o->clients,
               o->queries, (double)o->queries / s->wall_s, (s->user_s + s->sys_s) * 1e6 / (double)o->queries,
               extra[0] ? " " : "", extra);
}

/* pg-idle's keys from the counts over the spell s (each including the
 * wake-up that ends it), then `extra` (may be ""). */
static inline void pb_report_idle(const char *impl, const bench_span *s, const pb_opts *o, long wakeups, long csw,
                                  const char *extra)
{
  bench_result(impl, "pg-idle", s, "conns=%ld seconds=%ld wakeups_per_s=%.3f csw_per_s=%.3f%s%s", o->clients,
               o->seconds, (double)(wakeups - 1) / s->wall_s, (double)(csw - 1) / s->wall_s, extra[0] ? " " : "",
               extra);
}

#endif
