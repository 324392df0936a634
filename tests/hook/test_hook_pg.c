/* SPDX-License-Identifier: MIT */
/* libpq, unmodified and blocking, through libtreadle-hook against a real
 * PostgreSQL server that the test starts (dbserver.h): many fibers of one
 * loop, each on its own connection, wait on each other inside the server
 * (which only works if each blocking call parks its fiber alone);
 * statement_timeout and PQcancel from another fiber end a query with the
 * connection still usable; and a fiber cancelled inside libpq cuts its
 * connection, which then never returns the cancelled query's reply.
 * Skipped (77) where PostgreSQL is not installed. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dbserver.h"
#include "helpers.h"
#include <treadle/hook.h>

static t_db g_db;
static int g_state = -1; /* 0: running; T_DB_MISSING: skip; -1: did not start */
static char g_why[256];

/* The connection string: over the Unix socket, or over TCP to "localhost"
 * (resolved by the hook on the pool's name lane). */
static void conninfo(char *buf, size_t cap, int tcp)
{
  snprintf(buf, cap, "host=%s port=%d user=" T_DB_USER " dbname=postgres sslmode=disable gssencmode=disable",
           tcp ? "localhost" : g_db.sock, g_db.port);
}

static PGconn *connect_db(int tcp)
{
  char ci[256];
  conninfo(ci, sizeof ci, tcp);
  return PQconnectdb(ci);
}

static int pg_ready(const t_db *db)
{
  (void)db;
  char ci[256];
  conninfo(ci, sizeof ci, 0);
  return PQping(ci) == PQPING_OK;
}

#define NEED_SERVER()                                                        \
  do {                                                                       \
    if (g_state == T_DB_MISSING)                                             \
      T_SKIP("%s", g_why);                                                   \
    if (g_state != 0)                                                        \
      fail_msg("the PostgreSQL server did not start: %s", g_why);            \
    assert_int_equal(tdl_hook_active(), 1);                                  \
  } while (0)

/* The single value of a one-row query, into out; 1 when the query returned
 * tuples, 0 with the error in out otherwise. */
static int value(PGconn *c, const char *sql, char *out, size_t cap)
{
  PGresult *r = PQexec(c, sql);
  int ok = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
  snprintf(out, cap, "%s", ok ? PQgetvalue(r, 0, 0) : r ? PQresultErrorMessage(r) : PQerrorMessage(c));
  PQclear(r);
  return ok;
}

static long count(PGconn *c, const char *sql)
{
  char v[256];
  return value(c, sql, v, sizeof v) ? strtol(v, NULL, 10) : -1;
}

static int command_ok(PGconn *c, const char *sql)
{
  PGresult *r = PQexec(c, sql);
  int ok = r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);
  PQclear(r);
  return ok;
}

/* ---- many fibers, one thread, waiting on each other in the server ---- */

#define LOCK_KEY 4242

typedef struct waiters {
  int n, queries;
  int failed;        /* waiters that gave up: with a lock_timeout, a serialised hook ends here */
  int all_waited;    /* the holder saw all n waiting for its lock at once */
  int *ok;           /* per waiter: queries whose answer checked out */
  char err[160];
} waiters;

typedef struct waiter_arg {
  waiters *w;
  int id;
} waiter_arg;

static void *waiter(void *arg)
{
  waiter_arg *a = arg;
  waiters *w = a->w;
  PGconn *c = connect_db(a->id % 2); /* half of them through "localhost" */
  if (PQstatus(c) != CONNECTION_OK) {
    snprintf(w->err, sizeof w->err, "waiter %d: connect: %s", a->id, PQerrorMessage(c));
    w->failed++;
    PQfinish(c);
    return NULL;
  }
  /* The holder releases the lock once it sees every waiter waiting: if a
   * waiter blocked the thread, the holder could never look, and this bound
   * turns the deadlock into a failure. */
  char sql[96];
  snprintf(sql, sizeof sql, "SELECT pg_advisory_lock_shared(%d)", LOCK_KEY);
  if (w->failed || !command_ok(c, "SET lock_timeout = '60s'") || !command_ok(c, sql)) {
    snprintf(w->err, sizeof w->err, "waiter %d: lock: %s", a->id, PQerrorMessage(c));
    w->failed++;
    PQfinish(c);
    return NULL;
  }
  for (int j = 0; j < w->queries; j++) {
    char p0[16], p1[16];
    snprintf(p0, sizeof p0, "%d", a->id);
    snprintf(p1, sizeof p1, "%d", j);
    const char *params[2] = {p0, p1};
    PGresult *r = PQexecParams(c, "SELECT $1::int * 1000 + $2::int", 2, NULL, params, NULL, NULL, 0);
    int good = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
               strtol(PQgetvalue(r, 0, 0), NULL, 10) == a->id * 1000 + j;
    PQclear(r);
    if (!good) {
      snprintf(w->err, sizeof w->err, "waiter %d, query %d: %s", a->id, j, PQerrorMessage(c));
      break;
    }
    w->ok[a->id]++;
  }
  snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock_shared(%d)", LOCK_KEY);
  command_ok(c, sql);
  PQfinish(c);
  return NULL;
}

static void *holder(void *arg)
{
  waiters *w = arg;
  PGconn *h = connect_db(0);
  assert_int_equal(PQstatus(h), CONNECTION_OK);
  char sql[160];
  snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%d)", LOCK_KEY);
  assert_true(command_ok(h, sql));
  tdl_fiber_t *f = test_calloc((size_t)w->n, sizeof *f);
  waiter_arg *a = test_calloc((size_t)w->n, sizeof *a);
  for (int i = 0; i < w->n; i++) {
    a[i] = (waiter_arg){w, i};
    assert_int_equal(tdl_fiber_spawn(&f[i], tdl_fiber_loop(), waiter, &a[i], NULL), 0);
  }
  /* Every waiter's query waits in the server for this fiber's lock, each on
   * its own connection, and this fiber still runs queries of its own. */
  snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %d AND NOT granted",
           LOCK_KEY);
  for (tdl_time_t end = t_clock() + T_HANG; t_clock() < end && !w->failed;) {
    if (count(h, sql) == w->n) {
      w->all_waited = 1;
      break;
    }
    tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%d)", LOCK_KEY);
  assert_true(command_ok(h, sql));
  for (int i = 0; i < w->n; i++)
    assert_int_equal(tdl_fiber_join(f[i], NULL, TDL_FOREVER), 0);
  test_free(f);
  test_free(a);
  PQfinish(h);
  return NULL;
}

static void test_pg_fibers_wait_on_each_other(void **state)
{
  (void)state;
  NEED_SERVER();
  waiters w = {.n = RUNNING_ON_VALGRIND ? 8 : 40, .queries = 20};
  w.ok = test_calloc((size_t)w.n, sizeof *w.ok);
  tdl_hook_stats before, after;
  tdl_hook_stats_get(&before);
  assert_int_equal(tdl_fiber_main(holder, &w, NULL), 0);
  tdl_hook_stats_get(&after);
  if (w.err[0])
    print_message("%s\n", w.err);
  assert_int_equal(w.failed, 0);
  assert_true(w.all_waited); /* n + 1 queries in the server at once, from one thread */
  for (int i = 0; i < w.n; i++)
    assert_int_equal(w.ok[i], w.queries);
  assert_true(after.parked > before.parked);
  test_free(w.ok);
}

/* ---- statement_timeout, and PQcancel from another fiber ---- */

typedef struct ended {
  PGconn *c;
  int backend;            /* its server process */
  int query_failed;       /* the long query came back with an error */
  char sqlstate[8];       /* ... this one */
  char message[160];      /* ... with this primary message */
  int cancel_sent;        /* PQcancel's answer */
  char cancel_err[256];
  int usable;             /* a query after it on the same connection worked */
} ended;

static void long_query(ended *k, const char *sql)
{
  PGresult *r = PQexec(k->c, sql);
  k->query_failed = r && PQresultStatus(r) == PGRES_FATAL_ERROR;
  const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  snprintf(k->sqlstate, sizeof k->sqlstate, "%s", s ? s : "");
  snprintf(k->message, sizeof k->message, "%s", m ? m : PQerrorMessage(k->c));
  PQclear(r);
  char v[64];
  k->usable = value(k->c, "SELECT 'usable'", v, sizeof v) && strcmp(v, "usable") == 0;
}

static void *timed_out(void *arg)
{
  ended *k = arg;
  k->c = connect_db(1);
  assert_int_equal(PQstatus(k->c), CONNECTION_OK);
  assert_true(command_ok(k->c, "SET statement_timeout = '100ms'"));
  long_query(k, "SELECT pg_sleep(60)");
  PQfinish(k->c);
  return NULL;
}

static void test_pg_statement_timeout(void **state)
{
  (void)state;
  NEED_SERVER();
  ended k = {0};
  assert_int_equal(tdl_fiber_main(timed_out, &k, NULL), 0);
  assert_true(k.query_failed);
  assert_string_equal(k.sqlstate, "57014"); /* query_canceled */
  assert_string_equal(k.message, "canceling statement due to statement timeout");
  assert_true(k.usable);
}

static void *sleeper(void *arg)
{
  ended *k = arg;
  /* A bound, should PQcancel not arrive: the test fails instead of hanging. */
  assert_true(command_ok(k->c, "SET statement_timeout = '60s'"));
  long_query(k, "SELECT pg_sleep(60)");
  return NULL;
}

static void *canceller(void *arg)
{
  ended *k = arg;
  k->c = connect_db(0);
  assert_int_equal(PQstatus(k->c), CONNECTION_OK);
  k->backend = PQbackendPID(k->c);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), sleeper, k, NULL), 0);
  PGconn *o = connect_db(1);
  assert_int_equal(PQstatus(o), CONNECTION_OK);
  char sql[160];
  snprintf(sql, sizeof sql,
           "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND state = 'active' AND wait_event = 'PgSleep'",
           k->backend);
  int sleeping = 0;
  for (tdl_time_t end = t_clock() + T_HANG; !sleeping && t_clock() < end;) {
    sleeping = count(o, sql) == 1;
    if (!sleeping)
      tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  assert_true(sleeping);
  /* PQcancel: a new connection of its own, blocking, through the hook. */
  PGcancel *cancel = PQgetCancel(k->c);
  assert_non_null(cancel);
  k->cancel_sent = PQcancel(cancel, k->cancel_err, (int)sizeof k->cancel_err);
  PQfreeCancel(cancel);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  PQfinish(o);
  PQfinish(k->c);
  return NULL;
}

static void test_pg_cancel_from_another_fiber(void **state)
{
  (void)state;
  NEED_SERVER();
  ended k = {0};
  assert_int_equal(tdl_fiber_main(canceller, &k, NULL), 0);
  if (!k.cancel_sent)
    print_message("PQcancel: %s\n", k.cancel_err);
  assert_int_equal(k.cancel_sent, 1);
  assert_true(k.query_failed);
  assert_string_equal(k.sqlstate, "57014");
  assert_string_equal(k.message, "canceling statement due to user request");
  assert_true(k.usable);
}

/* ---- tdl_fiber_cancel inside libpq cuts the connection ---- */

#define CUT_KEY 77

typedef struct cut {
  int tcp;
  PGconn *c;
  int backend;
  int first_ok;              /* the cancelled fiber's query returned tuples */
  char first_err[256];
  ConnStatusType after_cancel; /* PQstatus then */
  int replied;               /* the server sent the cancelled query's reply */
  int next_ok[2];            /* the next two queries on c returned tuples... */
  char next_val[2][256];     /* ... this value, or their error */
  ConnStatusType after_next;
  int fresh_ok;              /* a new connection works */
} cut;

static void *cut_victim(void *arg)
{
  cut *k = arg;
  /* Waits in the server for the lock the main fiber holds: cancelled. */
  char sql[96];
  snprintf(sql, sizeof sql, "SELECT 'stale', pg_advisory_lock(%d)", CUT_KEY);
  k->first_ok = value(k->c, sql, k->first_err, sizeof k->first_err);
  return NULL;
}

static void *cut_main(void *arg)
{
  cut *k = arg;
  PGconn *h = connect_db(0);
  assert_int_equal(PQstatus(h), CONNECTION_OK);
  char sql[192];
  snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%d)", CUT_KEY);
  assert_true(command_ok(h, sql));
  k->c = connect_db(k->tcp);
  assert_int_equal(PQstatus(k->c), CONNECTION_OK);
  k->backend = PQbackendPID(k->c);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), cut_victim, k, NULL), 0);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_locks WHERE pid = %d AND locktype = 'advisory' AND NOT granted",
           k->backend);
  int waits = 0;
  for (tdl_time_t end = t_clock() + T_HANG; !waits && t_clock() < end;) {
    waits = count(h, sql) == 1;
    if (!waits)
      tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  assert_true(waits);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  k->after_cancel = PQstatus(k->c);
  /* The lock goes: the server answers the cancelled query now, on c. */
  snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%d)", CUT_KEY);
  assert_true(command_ok(h, sql));
  snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND state = 'active'", k->backend);
  for (tdl_time_t end = t_clock() + T_HANG; !k->replied && t_clock() < end;) {
    k->replied = count(h, sql) == 0;
    if (!k->replied)
      tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  /* Another fiber (this one) goes on with the connection, twice. */
  k->next_ok[0] = value(k->c, "SELECT 'fresh'", k->next_val[0], sizeof k->next_val[0]);
  k->next_ok[1] = value(k->c, "SELECT 'fresh'", k->next_val[1], sizeof k->next_val[1]);
  k->after_next = PQstatus(k->c);
  PQfinish(k->c);
  PGconn *n = connect_db(k->tcp);
  char v[64];
  k->fresh_ok = PQstatus(n) == CONNECTION_OK && value(n, "SELECT 'fresh'", v, sizeof v) && strcmp(v, "fresh") == 0;
  PQfinish(n);
  PQfinish(h);
  return NULL;
}

static void check_cut(int tcp)
{
  cut k = {.tcp = tcp};
  assert_int_equal(tdl_fiber_main(cut_main, &k, NULL), 0);
  for (int i = 0; i < 2; i++) /* libpq's messages end with a newline */
    k.next_val[i][strcspn(k.next_val[i], "\n")] = '\0';
  k.first_err[strcspn(k.first_err, "\n")] = '\0';
  print_message("%s: the cancelled query: %s; PQstatus %s; the next two: %s%s / %s%s; PQstatus %s\n",
                tcp ? "tcp" : "unix", k.first_ok ? "tuples" : k.first_err,
                k.after_cancel == CONNECTION_OK ? "OK" : "BAD", k.next_ok[0] ? "tuples " : "", k.next_val[0],
                k.next_ok[1] ? "tuples " : "", k.next_val[1], k.after_next == CONNECTION_OK ? "OK" : "BAD");
  assert_false(k.first_ok);
  assert_true(k.replied);
  /* Never the cancelled query's reply; and no answer at all on c, whose
   * exchange is lost: libpq reports a broken connection. */
  for (int i = 0; i < 2; i++) {
    assert_true(strstr(k.next_val[i], "stale") == NULL);
    assert_false(k.next_ok[i]);
  }
  assert_true(k.after_cancel == CONNECTION_BAD || k.after_next == CONNECTION_BAD);
  assert_true(k.fresh_ok);
}

static void test_pg_cancel_cuts_the_connection_unix(void **state)
{
  (void)state;
  NEED_SERVER();
  check_cut(0);
}

static void test_pg_cancel_cuts_the_connection_tcp(void **state)
{
  (void)state;
  NEED_SERVER();
  check_cut(1);
}

static int setup(void **state)
{
  (void)state;
  g_state = t_db_start(&g_db, T_DB_POSTGRES, pg_ready, g_why, sizeof g_why);
  return 0; /* the tests skip or fail on g_state */
}

static int teardown(void **state)
{
  (void)state;
  t_db_stop(&g_db);
  /* The name lane's threads ("localhost") exit, freeing glibc's resolver
   * state, which valgrind would call lost in a thread alive at exit (as in
   * test_hook_calls.c).  Bounded; no result checked. */
  (void)tdl_pool_shutdown(tdl_after(T_HANG));
  return 0;
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pg_fibers_wait_on_each_other),
      cmocka_unit_test(test_pg_statement_timeout),
      cmocka_unit_test(test_pg_cancel_from_another_fiber),
      cmocka_unit_test(test_pg_cancel_cuts_the_connection_unix),
      cmocka_unit_test(test_pg_cancel_cuts_the_connection_tcp),
  };
  int failed = cmocka_run_group_tests(tests, setup, teardown);
  /* ctest's skip code when the server is not installed. */
  return g_state == T_DB_MISSING && failed == 0 ? T_DB_MISSING : failed;
}
