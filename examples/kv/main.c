/* SPDX-License-Identifier: MIT */
/*
 * kv: a Redis-protocol server on treadle (see server.c).
 *
 *   kv [--listen ADDR] [--max-request BYTES] [--idle-timeout SECONDS]
 *      [--tls-cert FILE --tls-key FILE [--tls-handshake-timeout SECONDS]]
 *
 * ADDR as treadle reads addresses: "127.0.0.1:6380" (the default),
 * ":6380", "*:6380", "[::1]:6380", "localhost:6380".  SIGINT and SIGTERM
 * stop it.  TDL_BACKEND=uring in the environment runs it on io_uring, where
 * it accepts and receives ahead and sends behind (server.c).
 *
 * With --tls-cert and --tls-key (in a build with libtreadle-tls) it speaks
 * Redis over TLS only, as redis-server's --tls-port does:
 * `redis-cli --tls --cacert CA.pem -p 6380`.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#ifdef KV_TLS
#include <treadle/tls.h>
#endif

static const char *listen_at = "127.0.0.1:6380";
static kv_config cfg = {.max_request = (size_t)512 << 20,
                        .idle_timeout = 0,
                        .io_timeout = 30 * TDL_SEC,
                        .handshake_timeout = 10 * TDL_SEC};
static const char *tls_cert, *tls_key;
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
  fprintf(stderr, "kv: serving%s on %s\n", cfg.tls ? " TLS" : "", listen_at);
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
             "          [--tls-cert FILE --tls-key FILE [--tls-handshake-timeout SECONDS]]\n"
             "  --listen ADDR          where to listen (default 127.0.0.1:6380)\n"
             "  --max-request BYTES    the largest argument accepted (default 536870912)\n"
             "  --idle-timeout SECONDS close a connection silent this long (default: never)\n"
             "  --tls-cert FILE        speak TLS only (redis-cli --tls), with this PEM certificate chain...\n"
             "  --tls-key FILE         ...and its PEM private key (both or neither)\n"
             "  --tls-handshake-timeout SECONDS\n"
             "                         close a client whose TLS handshake has not ended by then\n"
             "                         (default 10; 1 or more)\n");
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

/* The TLS configuration; exits when the files will not do, naming the file
 * and why. */
static void tls_setup(void)
{
  if (!tls_cert)
    return;
#ifdef KV_TLS
  char why[512];
  tdl_tls_options o = {.role = TDL_TLS_SERVER, .cert_file = tls_cert, .key_file = tls_key, .error = why,
                       .error_cap = sizeof why};
  if (tdl_tls_config_new(&cfg.tls, &o) < 0) {
    fprintf(stderr, "kv: TLS: %s\n", why);
    exit(1);
  }
#else
  fprintf(stderr, "kv: --tls-cert: this kv was built without libtreadle-tls (OpenSSL 3)\n");
  exit(2);
#endif
}

int main(int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0)
      usage(stdout, 0);
    static const char *const with_value[] = {"--listen", "--max-request", "--idle-timeout", "--tls-cert", "--tls-key",
                                             "--tls-handshake-timeout"};
    bool known = false;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
      known = known || strcmp(o, with_value[k]) == 0;
    if (!known) {
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
    else if (strcmp(o, "--tls-cert") == 0)
      tls_cert = v;
    else if (strcmp(o, "--tls-key") == 0)
      tls_key = v;
    else if (strcmp(o, "--tls-handshake-timeout") == 0) {
      cfg.handshake_timeout = number(o, v) * TDL_SEC;
      if (cfg.handshake_timeout == 0) { /* a handshake is always bounded */
        fprintf(stderr, "kv: %s wants 1 or more\n", o);
        exit(2);
      }
    } else
      cfg.idle_timeout = number(o, v) * TDL_SEC;
  }
  if (!tls_cert != !tls_key) {
    fprintf(stderr, "kv: --tls-cert and --tls-key go together\n");
    usage(stderr, 2);
  }
  tls_setup();
  void *failed = NULL;
  int e = tdl_fiber_main(serve, NULL, &failed);
#ifdef KV_TLS
  tdl_tls_config_free(cfg.tls);
#endif
  if (e < 0)
    fprintf(stderr, "kv: %s\n", tdl_strerror(e));
  return e < 0 || failed ? 1 : 0;
}
