/* SPDX-License-Identifier: MIT */
/*
 * kv: a Redis-protocol server on treadle (see server.c).
 *
 *   kv [--listen ADDR] [--max-request BYTES] [--idle-timeout SECONDS]
 *
 * ADDR as treadle reads addresses: "127.0.0.1:6380" (the default),
 * ":6380", "*:6380", "[::1]:6380", "localhost:6380".  SIGINT and SIGTERM
 * stop it.  TDL_BACKEND=uring in the environment runs it on io_uring, where
 * it accepts and receives ahead and sends behind (server.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static const char *listen_at = "127.0.0.1:6380";
static kv_config cfg = {.max_request = (size_t)512 << 20, .idle_timeout = 0, .io_timeout = 30 * TDL_SEC};
static tdl_fiber_t server;

static void on_signal(tdl_loop *loop, tdl_signal *s, int signum)
{
  (void)signum;
  tdl_fiber_cancel(loop, server);
  tdl_signal_stop(loop, s);
}

static void *serve(void *arg)
{
  (void)arg;
  char why[160];
  int lfd = tdl_net_listen_str(listen_at, 0, 0);
  if (lfd < 0) {
    if (tdl_addr_parse_error(listen_at, why, sizeof why) < 0)
      fprintf(stderr, "kv: %s\n", why);
    else
      fprintf(stderr, "kv: listen %s: %s\n", listen_at, tdl_strerror(lfd));
    return (void *)1;
  }
  tdl_loop *loop = tdl_fiber_loop();
  server = tdl_fiber_self();
  tdl_signal sigs[2];
  tdl_signal_init(&sigs[0], on_signal, NULL);
  tdl_signal_init(&sigs[1], on_signal, NULL);
  tdl_signal_start(loop, &sigs[0], SIGINT);
  tdl_signal_start(loop, &sigs[1], SIGTERM);
  fprintf(stderr, "kv: serving on %s\n", listen_at);
  int e = kv_serve(lfd, &cfg);
  tdl_signal_stop(loop, &sigs[0]);
  tdl_signal_stop(loop, &sigs[1]);
  tdl_close(lfd);
  if (e < 0)
    fprintf(stderr, "kv: accept: %s\n", tdl_strerror(e));
  return e < 0 ? (void *)1 : NULL;
}

static void usage(FILE *f, int code)
{
  fprintf(f, "usage: kv [--listen ADDR] [--max-request BYTES] [--idle-timeout SECONDS]\n"
             "  --listen ADDR          where to listen (default 127.0.0.1:6380)\n"
             "  --max-request BYTES    the largest argument accepted (default 536870912)\n"
             "  --idle-timeout SECONDS close a connection silent this long (default: never)\n");
  exit(code);
}

static long long number(const char *opt, const char *v)
{
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (errno || *end || n < 0) {
    fprintf(stderr, "kv: %s wants a number of 0 or more, not \"%s\"\n", opt, v);
    exit(2);
  }
  return n;
}

int main(int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0)
      usage(stdout, 0);
    if (strcmp(o, "--listen") != 0 && strcmp(o, "--max-request") != 0 && strcmp(o, "--idle-timeout") != 0) {
      fprintf(stderr, "kv: unknown option \"%s\"\n", o);
      usage(stderr, 2);
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "kv: %s needs a value\n", o);
      usage(stderr, 2);
    }
    const char *v = argv[++i];
    if (strcmp(o, "--listen") == 0) {
      char why[TDL_ADDR_ERRLEN];
      if (tdl_addr_parse_error(v, why, sizeof why) < 0) { /* which part is wrong, and where */
        fprintf(stderr, "kv: --listen: %s\n", why);
        exit(2);
      }
      listen_at = v;
    } else if (strcmp(o, "--max-request") == 0)
      cfg.max_request = (size_t)number(o, v);
    else
      cfg.idle_timeout = number(o, v) * TDL_SEC;
  }
  void *failed = NULL;
  int e = tdl_fiber_main(serve, NULL, &failed);
  if (e < 0)
    fprintf(stderr, "kv: %s\n", tdl_strerror(e));
  return e < 0 || failed ? 1 : 0;
}
