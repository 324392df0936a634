/* SPDX-License-Identifier: MIT */
/* MariaDB Connector/C, unmodified and blocking, through libtreadle-hook
 * against a real MariaDB server that the test starts (dbserver.h): many
 * fibers of one loop, each on its own connection, wait on each other inside
 * the server (which only works if each blocking call parks its fiber
 * alone); max_statement_time and KILL QUERY from another fiber end a query
 * with the connection still usable; and a fiber cancelled inside the
 * library cuts its connection, which then never returns the cancelled
 * query's reply.  Skipped (77) where MariaDB is not installed. */
#include <errno.h>
#include <mysql.h>
#include <errmsg.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dbserver.h"
#include "helpers.h"
#include <treadle/hook.h>

static t_db g_db;
static int g_state = -1; /* 0: running; T_DB_MISSING: skip; -1: did not start */
static char g_why[256];

/* A connection over the Unix socket, or over TCP to "localhost" (resolved
 * by the hook on the pool's name lane: Connector/C takes "localhost" for
 * its socket unless told TCP).  NULL with err[] on failure. */
static MYSQL *connect_db(int tcp, char *err, size_t cap)
{
  MYSQL *m = mysql_init(NULL);
  if (!m) {
    snprintf(err, cap, "mysql_init: no memory");
    return NULL;
  }
  if (tcp) {
    unsigned proto = MYSQL_PROTOCOL_TCP;
    mysql_options(m, MYSQL_OPT_PROTOCOL, &proto);
  }
  if (!mysql_real_connect(m, tcp ? "localhost" : NULL, T_DB_USER, NULL, NULL, tcp ? (unsigned)g_db.port : 0,
                          tcp ? NULL : g_db.sock, 0)) {
    snprintf(err, cap, "connect: %s", mysql_error(m));
    mysql_close(m);
    return NULL;
  }
  return m;
}

static int maria_ready(const t_db *db)
{
  (void)db;
  char err[256];
  MYSQL *m = connect_db(0, err, sizeof err);
  int ok = m && mysql_ping(m) == 0;
  mysql_close(m);
  return ok;
}

#define NEED_SERVER()                                                        \
  do {                                                                       \
    if (g_state == T_DB_MISSING)                                             \
      T_SKIP("%s", g_why);                                                   \
    if (g_state != 0)                                                        \
      fail_msg("the MariaDB server did not start: %s", g_why);               \
    assert_int_equal(tdl_hook_active(), 1);                                  \
  } while (0)

/* The first column of a query's single row, into out (NULL as "NULL"); 1
 * when the query returned it, 0 with the error in out (and *errnum). */
static int value(MYSQL *m, const char *sql, char *out, size_t cap, unsigned *errnum)
{
  if (errnum)
    *errnum = 0;
  MYSQL_RES *r = NULL;
  MYSQL_ROW row = NULL;
  if (mysql_query(m, sql) != 0 || !(r = mysql_store_result(m)) || !(row = mysql_fetch_row(r))) {
    snprintf(out, cap, "%s", r ? "no row" : mysql_error(m));
    if (errnum)
      *errnum = mysql_errno(m);
    mysql_free_result(r);
    return 0;
  }
  snprintf(out, cap, "%s", row[0] ? row[0] : "NULL");
  mysql_free_result(r);
  return 1;
}

static long count(MYSQL *m, const char *sql)
{
  char v[256];
  return value(m, sql, v, sizeof v, NULL) ? strtol(v, NULL, 10) : -1;
}

/* ---- many fibers, one thread, waiting on each other in the server ---- */

typedef struct waiters {
  int n, queries;
  int failed;     /* waiters that gave up: a serialised hook ends here (GET_LOCK's timeout) */
  int all_waited; /* the holder saw all n waiting for its lock at once */
  int *ok;        /* per waiter: queries whose answer checked out */
  char err[256];
} waiters;

typedef struct waiter_arg {
  waiters *w;
  int id;
} waiter_arg;

static void *waiter(void *arg)
{
  waiter_arg *a = arg;
  waiters *w = a->w;
  char err[200], v[64];
  MYSQL *m = connect_db(a->id % 2, err, sizeof err); /* half of them through "localhost" */
  if (!m) {
    snprintf(w->err, sizeof w->err, "waiter %d: %s", a->id, err);
    w->failed++;
    return NULL;
  }
  /* The holder releases the lock once it sees every waiter waiting: if a
   * waiter blocked the thread, the holder could never look, and GET_LOCK's
   * timeout turns the deadlock into a failure.  One at a time, each takes
   * the lock and lets the next have it. */
  if (w->failed || !value(m, "SELECT GET_LOCK('tdl_hook', 60)", v, sizeof v, NULL) || strcmp(v, "1") != 0) {
    snprintf(w->err, sizeof w->err, "waiter %d: GET_LOCK: %s", a->id, v);
    w->failed++;
    mysql_close(m);
    return NULL;
  }
  value(m, "SELECT RELEASE_LOCK('tdl_hook')", v, sizeof v, NULL);
  for (int j = 0; j < w->queries; j++) {
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT %d * 1000 + %d", a->id, j);
    if (!value(m, sql, v, sizeof v, NULL) || strtol(v, NULL, 10) != a->id * 1000 + j) {
      snprintf(w->err, sizeof w->err, "waiter %d, query %d: %s", a->id, j, v);
      break;
    }
    w->ok[a->id]++;
  }
  mysql_close(m);
  return NULL;
}

static void *holder(void *arg)
{
  waiters *w = arg;
  char err[200], v[64];
  MYSQL *h = connect_db(0, err, sizeof err);
  assert_non_null(h);
  assert_true(value(h, "SELECT GET_LOCK('tdl_hook', 60)", v, sizeof v, NULL));
  assert_string_equal(v, "1");
  tdl_fiber_t *f = test_calloc((size_t)w->n, sizeof *f);
  waiter_arg *a = test_calloc((size_t)w->n, sizeof *a);
  for (int i = 0; i < w->n; i++) {
    a[i] = (waiter_arg){w, i};
    assert_int_equal(tdl_fiber_spawn(&f[i], tdl_fiber_loop(), waiter, &a[i], NULL), 0);
  }
  /* Every waiter's GET_LOCK waits in the server for this fiber's lock, each
   * on its own connection, and this fiber still runs queries of its own. */
  for (tdl_time_t end = t_clock() + T_HANG; t_clock() < end && !w->failed;) {
    if (count(h, "SELECT COUNT(*) FROM information_schema.processlist WHERE state = 'User lock'") == w->n) {
      w->all_waited = 1;
      break;
    }
    tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  assert_true(value(h, "SELECT RELEASE_LOCK('tdl_hook')", v, sizeof v, NULL));
  for (int i = 0; i < w->n; i++)
    assert_int_equal(tdl_fiber_join(f[i], NULL, TDL_FOREVER), 0);
  test_free(f);
  test_free(a);
  mysql_close(h);
  return NULL;
}

static void test_mariadb_fibers_wait_on_each_other(void **state)
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

/* ---- max_statement_time, and KILL QUERY from another fiber ---- */

typedef struct ended {
  MYSQL *m;
  unsigned long id; /* its server thread */
  int query_failed; /* the long query came back with an error */
  unsigned errnum;  /* ... this one */
  char error[256];
  int killed;       /* KILL QUERY worked */
  int usable;       /* a query after it on the same connection worked */
} ended;

static void long_query(ended *k, const char *sql)
{
  char v[64];
  k->query_failed = !value(k->m, sql, k->error, sizeof k->error, &k->errnum);
  k->usable = value(k->m, "SELECT 'usable'", v, sizeof v, NULL) && strcmp(v, "usable") == 0;
}

static void *timed_out(void *arg)
{
  ended *k = arg;
  char err[200];
  k->m = connect_db(1, err, sizeof err);
  assert_non_null(k->m);
  long_query(k, "SET STATEMENT max_statement_time = 0.1 FOR SELECT SLEEP(60)");
  mysql_close(k->m);
  return NULL;
}

static void test_mariadb_max_statement_time(void **state)
{
  (void)state;
  NEED_SERVER();
  ended k = {0};
  assert_int_equal(tdl_fiber_main(timed_out, &k, NULL), 0);
  assert_true(k.query_failed);
  assert_int_equal(k.errnum, ER_STATEMENT_TIMEOUT);
  assert_true(k.usable);
}

static void *sleeper(void *arg)
{
  ended *k = arg;
  /* SLEEP(60): a bound, should the KILL not arrive. */
  long_query(k, "SELECT SLEEP(60)");
  return NULL;
}

static void *killer(void *arg)
{
  ended *k = arg;
  char err[200];
  k->m = connect_db(0, err, sizeof err);
  assert_non_null(k->m);
  k->id = mysql_thread_id(k->m);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), sleeper, k, NULL), 0);
  MYSQL *o = connect_db(1, err, sizeof err);
  assert_non_null(o);
  char sql[160];
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %lu AND state = 'User sleep'",
           k->id);
  int sleeping = 0;
  for (tdl_time_t end = t_clock() + T_HANG; !sleeping && t_clock() < end;) {
    sleeping = count(o, sql) == 1;
    if (!sleeping)
      tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  assert_true(sleeping);
  snprintf(sql, sizeof sql, "KILL QUERY %lu", k->id);
  k->killed = mysql_query(o, sql) == 0;
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  mysql_close(o);
  mysql_close(k->m);
  return NULL;
}

static void test_mariadb_kill_query_from_another_fiber(void **state)
{
  (void)state;
  NEED_SERVER();
  ended k = {0};
  assert_int_equal(tdl_fiber_main(killer, &k, NULL), 0);
  assert_true(k.killed);
  assert_true(k.query_failed);
  assert_int_equal(k.errnum, ER_QUERY_INTERRUPTED);
  assert_true(k.usable);
}

/* ---- tdl_fiber_cancel inside Connector/C cuts the connection ---- */

typedef struct cut {
  int tcp;
  MYSQL *m;
  unsigned long id;
  int first_ok;          /* the cancelled fiber's query returned a row */
  char first_err[256];
  int replied;           /* the server sent the cancelled query's reply */
  int next_ok[2];        /* the next two queries on m returned a row... */
  char next_val[2][256]; /* ... this value, or their error */
  unsigned next_errnum[2];
  int fresh_ok;          /* a new connection works */
} cut;

static void *cut_victim(void *arg)
{
  cut *k = arg;
  /* Waits in the server for the lock the main fiber holds: cancelled. */
  k->first_ok = value(k->m, "SELECT CONCAT('stale', GET_LOCK('tdl_cut', 60))", k->first_err, sizeof k->first_err, NULL);
  return NULL;
}

static void *cut_main(void *arg)
{
  cut *k = arg;
  char err[200], v[64];
  MYSQL *h = connect_db(0, err, sizeof err);
  assert_non_null(h);
  assert_true(value(h, "SELECT GET_LOCK('tdl_cut', 60)", v, sizeof v, NULL));
  k->m = connect_db(k->tcp, err, sizeof err);
  assert_non_null(k->m);
  k->id = mysql_thread_id(k->m);
  tdl_fiber_t f;
  assert_int_equal(tdl_fiber_spawn(&f, tdl_fiber_loop(), cut_victim, k, NULL), 0);
  char sql[160];
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %lu AND state = 'User lock'",
           k->id);
  int waits = 0;
  for (tdl_time_t end = t_clock() + T_HANG; !waits && t_clock() < end;) {
    waits = count(h, sql) == 1;
    if (!waits)
      tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  assert_true(waits);
  assert_int_equal(tdl_fiber_cancel(tdl_fiber_loop(), f), 0);
  assert_int_equal(tdl_fiber_join(f, NULL, TDL_FOREVER), 0);
  /* The lock goes: the server answers the cancelled query now, on m (or
   * finds the connection closed, if the library closed it). */
  assert_true(value(h, "SELECT RELEASE_LOCK('tdl_cut')", v, sizeof v, NULL));
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %lu AND command = 'Query'",
           k->id);
  for (tdl_time_t end = t_clock() + T_HANG; !k->replied && t_clock() < end;) {
    k->replied = count(h, sql) == 0;
    if (!k->replied)
      tdl_sleep(tdl_after(2 * TDL_MSEC));
  }
  /* Another fiber (this one) goes on with the connection, twice. */
  for (int i = 0; i < 2; i++)
    k->next_ok[i] = value(k->m, "SELECT 'fresh'", k->next_val[i], sizeof k->next_val[i], &k->next_errnum[i]);
  mysql_close(k->m);
  MYSQL *n = connect_db(k->tcp, err, sizeof err);
  k->fresh_ok = n && value(n, "SELECT 'fresh'", v, sizeof v, NULL) && strcmp(v, "fresh") == 0;
  mysql_close(n);
  mysql_close(h);
  return NULL;
}

static void check_cut(int tcp)
{
  cut k = {.tcp = tcp};
  assert_int_equal(tdl_fiber_main(cut_main, &k, NULL), 0);
  print_message("%s: cancelled query: %s; next queries: %u %s / %u %s\n", tcp ? "tcp" : "unix",
                k.first_ok ? "a row" : k.first_err, k.next_errnum[0], k.next_val[0], k.next_errnum[1],
                k.next_val[1]);
  assert_false(k.first_ok);
  assert_true(k.replied);
  /* Never the cancelled query's reply; and no answer at all on m, whose
   * exchange is lost: the library reports a connection gone. */
  for (int i = 0; i < 2; i++) {
    assert_true(strstr(k.next_val[i], "stale") == NULL);
    assert_false(k.next_ok[i]);
    assert_true(k.next_errnum[i] == CR_SERVER_LOST || k.next_errnum[i] == CR_SERVER_GONE_ERROR);
  }
  assert_true(k.fresh_ok);
}

static void test_mariadb_cancel_cuts_the_connection_unix(void **state)
{
  (void)state;
  NEED_SERVER();
  check_cut(0);
}

static void test_mariadb_cancel_cuts_the_connection_tcp(void **state)
{
  (void)state;
  NEED_SERVER();
  check_cut(1);
}

static int setup(void **state)
{
  (void)state;
  if (mysql_library_init(0, NULL, NULL) != 0)
    return -1;
  g_state = t_db_start(&g_db, T_DB_MARIADB, maria_ready, g_why, sizeof g_why);
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
  mysql_library_end();
  return 0;
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mariadb_fibers_wait_on_each_other),
      cmocka_unit_test(test_mariadb_max_statement_time),
      cmocka_unit_test(test_mariadb_kill_query_from_another_fiber),
      cmocka_unit_test(test_mariadb_cancel_cuts_the_connection_unix),
      cmocka_unit_test(test_mariadb_cancel_cuts_the_connection_tcp),
  };
  int failed = cmocka_run_group_tests(tests, setup, teardown);
  /* ctest's skip code when the server is not installed. */
  return g_state == T_DB_MISSING && failed == 0 ? T_DB_MISSING : failed;
}
