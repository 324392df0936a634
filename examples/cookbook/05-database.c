/* SPDX-License-Identifier: MIT */
/*
 * # A database in fibers
 *
 * libpq's blocking API (`PQconnectdb`, `PQexec`, `PQexecParams`) runs
 * unmodified in fibers when the program is linked with libtreadle-hook:
 * the host-name lookup, the connect, each send and each wait for a reply
 * park only the fiber that makes them, so one thread runs the queries of
 * many fibers at once, each on its connection.  MariaDB Connector/C's
 * blocking API (`mysql_real_connect`, `mysql_query`) works the same way.
 * Three rules:
 *
 * - One connection per fiber at a time, as per thread: a connection is a
 *   conversation, and two fibers talking on it at once would take each
 *   other's replies.  Connections that many fibers share are a pool: a
 *   channel (sync.h) of `PGconn` pointers, from which a fiber takes one for
 *   its queries and to which it gives it back.
 * - A deadline reaches the server as the server's own timeout: `SET
 *   statement_timeout` from the time left before the fiber's deadline
 *   (MariaDB: `SET STATEMENT max_statement_time = s FOR ...`), so that the
 *   server ends the query (SQLSTATE 57014, "canceling statement due to
 *   statement timeout") and the connection stays usable.  `PQcancel` from
 *   another fiber (MariaDB: `KILL QUERY`) ends one the same way.
 * - `tdl_fiber_cancel` is for what must end whatever the library is doing
 *   (a shutdown).  The fiber's call fails at once ("select() failed:
 *   Operation canceled") and the connection is cut (treadle/hook.h): the
 *   server's late reply is never read as another query's, the next query
 *   on the connection fails ("could not receive data from server: Software
 *   caused connection abort"), `PQstatus` then says CONNECTION_BAD, and the
 *   program closes it with `PQfinish` and connects again.
 *
 * Build it with the hook ahead of libtreadle and libc (as "A blocking
 * library in fibers, under a deadline" says):
 *
 *     cc app.c $(pkg-config --cflags --libs treadle-hook libpq)
 *
 * The program connects where libpq's environment says (PGHOST, PGPORT,
 * PGUSER, PGDATABASE: the test suite starts a server of its own and sets
 * them, PGHOST=localhost, which the hook resolves on the pool's name lane).
 * It makes a table of 100 jobs, and eight worker fibers, each on its own
 * connection, take jobs with `FOR UPDATE SKIP LOCKED` (the database hands
 * each job to one worker) and do them (a 10 ms query) until none is left.
 * Then a query of 10 s under a deadline of 100 ms ends with the server's
 * timeout.  It checks that every job was done once, by more than one
 * worker (their queries overlapped: each parked only its own fiber), and
 * that the connection worked on after the timeout.
 */
#define _GNU_SOURCE
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <treadle.h>
#include <treadle/hook.h>

#define WORKERS 8
#define JOBS 100 /* the rows of the table made below */

typedef struct worker {
  int id, done;
  char error[160];
} worker;

static void *work(void *arg) /* a fiber: libpq, unmodified and blocking */
{
  worker *w = arg;
  PGconn *c = PQconnectdb(""); /* from PGHOST, PGPORT, ... */
  char id[16];
  snprintf(id, sizeof id, "%d", w->id);
  const char *params[] = {id};
  while (PQstatus(c) == CONNECTION_OK) {
    PGresult *r = PQexecParams(c,
                               "UPDATE jobs SET done_by = $1 WHERE id = (SELECT id FROM jobs WHERE done_by IS NULL "
                               "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id",
                               1, NULL, params, NULL, NULL, 0);
    int taken = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : -1;
    PQclear(r);
    if (taken <= 0)
      break; /* none left, or an error (below) */
    PQclear(PQexec(c, "SELECT pg_sleep(0.01)")); /* the job: this fiber parks, the others run */
    w->done++;
  }
  snprintf(w->error, sizeof w->error, "%s", PQerrorMessage(c));
  PQfinish(c);
  return NULL;
}

/* The fiber's deadline as the server's timeout, then the query. */
static PGresult *exec_by(PGconn *c, const char *sql, tdl_time_t deadline)
{
  long ms = (long)((deadline - tdl_now()) / TDL_MSEC);
  char set[64];
  snprintf(set, sizeof set, "SET statement_timeout = %ld", ms > 0 ? ms : 1L); /* 0 would be none */
  PQclear(PQexec(c, set));
  return PQexec(c, sql);
}

static long number(PGconn *c, const char *sql)
{
  PGresult *r = PQexec(c, sql);
  long v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? atol(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  return v;
}

static void *program(void *arg)
{
  (void)arg;
  PGconn *c = PQconnectdb("");
  if (PQstatus(c) != CONNECTION_OK) {
    fprintf(stderr, "database: %s", PQerrorMessage(c));
    PQfinish(c);
    return (void *)1;
  }
  PQclear(PQexec(c, "SET client_min_messages = warning; DROP TABLE IF EXISTS jobs;"
                    "CREATE TABLE jobs (id int PRIMARY KEY, done_by int);"
                    "INSERT INTO jobs SELECT g, NULL FROM generate_series(1, 100) g"));
  worker w[WORKERS] = {0};
  tdl_fiber_t f[WORKERS];
  for (int i = 0; i < WORKERS; i++) {
    w[i].id = i + 1;
    tdl_fiber_spawn(&f[i], tdl_fiber_loop(), work, &w[i], NULL);
  }
  int done = 0;
  for (int i = 0; i < WORKERS; i++) {
    tdl_fiber_join(f[i], NULL, TDL_FOREVER);
    printf("worker %d: %d jobs%s%s", w[i].id, w[i].done, w[i].error[0] ? ", " : "\n", w[i].error);
    done += w[i].done;
  }
  long left = number(c, "SELECT count(*) FROM jobs WHERE done_by IS NULL");
  long workers = number(c, "SELECT count(DISTINCT done_by) FROM jobs");
  printf("%d jobs done, %ld left, by %ld workers\n", done, left, workers);

  PGresult *r = exec_by(c, "SELECT pg_sleep(10)", tdl_after(100 * TDL_MSEC));
  const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  printf("past its deadline: %s", PQresultErrorMessage(r));
  int timed_out = PQresultStatus(r) == PGRES_FATAL_ERROR && state && strcmp(state, "57014") == 0;
  PQclear(r);
  PQclear(PQexec(c, "SET statement_timeout = 0"));
  int works_on = number(c, "SELECT 1") == 1;
  printf("the connection works on: %s\n", works_on ? "yes" : "no");
  PQclear(PQexec(c, "DROP TABLE jobs"));
  PQfinish(c);
  return (void *)(intptr_t)!(done == JOBS && left == 0 && workers > 1 && timed_out && works_on);
}

int main(void)
{
  if (tdl_hook_active() != 1) {
    fprintf(stderr, "database: libtreadle-hook is not loaded: link it ahead of libtreadle and libc\n");
    return 1;
  }
  void *failed = (void *)1;
  int e = tdl_fiber_main(program, NULL, &failed);
  if (e < 0)
    fprintf(stderr, "database: %s\n", tdl_strerror(e));
  return e == 0 && !failed ? 0 : 1;
}
