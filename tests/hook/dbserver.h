/* SPDX-License-Identifier: MIT */
/* A database server of the test's own (PostgreSQL or MariaDB, Debian's
 * packages postgresql and mariadb-server), started in a temporary directory
 * that holds its data, its Unix socket and its log, listening there and on
 * 127.0.0.1 at a free port, and stopped again with the directory removed.
 * Run as root (CI is), the server runs as `nobody` (postgres refuses root),
 * dies with the process that started it (PR_SET_PDEATHSIG), and is stopped
 * by t_db_stop: call it from the test group's teardown, which cmocka runs
 * also after failed tests.  Called outside any fiber; no cmocka needed
 * (tests/hook/dbrun.c uses it too). */
#ifndef TDL_TEST_DBSERVER_H
#define TDL_TEST_DBSERVER_H

#include <stddef.h>
#include <sys/types.h>

typedef enum t_db_kind { T_DB_POSTGRES, T_DB_MARIADB } t_db_kind;

typedef struct t_db {
  t_db_kind kind;
  char dir[64];   /* the temporary directory ("" when there is none) */
  char sock[112]; /* MariaDB: its socket's path; PostgreSQL: dir (libpq's host=) */
  int port;       /* on 127.0.0.1 */
  pid_t pid;      /* the server, or -1 */
} t_db;

/* The user every test connects as (PostgreSQL: the superuser initdb made;
 * MariaDB runs without grant tables, so any name has every right). */
#define T_DB_USER "treadle"

/* What t_db_start returns when the server is not installed: the reason is
 * in why[], and a test should skip (ctest's skip code, 77). */
#define T_DB_MISSING 77

/* Starts a server of `kind` and waits (bounded) until ready(db) says that it
 * answers queries (ready is called outside any fiber, with the server's
 * address filled in; 1: ready).  0 when it is; T_DB_MISSING (why[] says
 * which package) where it is not installed; -1 when it did not come up (its
 * log is copied to stderr, why[] says what failed).  Either way t_db_stop
 * may be called after. */
int t_db_start(t_db *db, t_db_kind kind, int (*ready)(const t_db *db), char *why, size_t why_len);

/* Stops the server (if any), waits for it, removes its directory. */
void t_db_stop(t_db *db);

#endif
