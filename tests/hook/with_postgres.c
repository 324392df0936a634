/* SPDX-License-Identifier: MIT */
/* with_postgres PROGRAM [ARG...]: runs PROGRAM against a PostgreSQL server
 * of its own (dbserver.h), with libpq's environment pointing at it (PGHOST
 * "localhost", so that the program's lookup goes through the hook, PGPORT,
 * PGUSER, PGDATABASE), stops the server and removes its directory, and
 * exits with PROGRAM's status; 77 (ctest's skip) where PostgreSQL is not
 * installed.  How the cookbook's database recipe is run
 * (examples/cookbook/CMakeLists.txt). */
#include <errno.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dbserver.h"

static int pg_ready(const t_db *db)
{
  char ci[256];
  snprintf(ci, sizeof ci, "host=%s port=%d user=" T_DB_USER " dbname=postgres", db->sock, db->port);
  return PQping(ci) == PQPING_OK;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: with_postgres PROGRAM [ARG...]\n");
    return 2;
  }
  t_db db;
  char why[256];
  int e = t_db_start(&db, T_DB_POSTGRES, pg_ready, why, sizeof why);
  if (e != 0) {
    fprintf(stderr, "with_postgres: %s%s\n", why, e == T_DB_MISSING ? ": skipped" : "");
    t_db_stop(&db);
    return e == T_DB_MISSING ? 77 : 1;
  }
  char port[16];
  snprintf(port, sizeof port, "%d", db.port);
  setenv("PGHOST", "localhost", 1);
  setenv("PGPORT", port, 1);
  setenv("PGUSER", T_DB_USER, 1);
  setenv("PGDATABASE", "postgres", 1);
  setenv("PGSSLMODE", "disable", 1);
  setenv("PGGSSENCMODE", "disable", 1);
  setenv("PGCONNECT_TIMEOUT", "60", 1);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execv(argv[1], argv + 1);
    perror(argv[1]);
    _exit(127);
  }
  int st = 0;
  while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  t_db_stop(&db);
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "with_postgres: %s died of signal %d\n", argv[1], WTERMSIG(st));
    return 1;
  }
  return WEXITSTATUS(st);
}
