/* SPDX-License-Identifier: MIT */
/* Links against an installed libtreadle-tls: a client and a server stream
 * over a socketpair, the client not verifying, handshake in fibers of one
 * loop. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <treadle.h>
#include <treadle/tls.h>

/* The server's certificate and key come on the command line
 * (scripts/consumer-test.sh makes them with tests/tls/make-certs.sh). */
typedef struct end {
  tdl_tls_config *cfg;
  int fd;
  int rc;
} end;

static void *run(void *arg)
{
  end *e = arg;
  tdl_tls *s;
  e->rc = tdl_tls_new(&s, e->cfg, e->fd, NULL);
  if (e->rc == 0) {
    e->rc = tdl_tls_handshake(s, tdl_after(60 * TDL_SEC)); /* a bound, not a delay */
    tdl_tls_free(s);
  }
  tdl_close(e->fd);
  return NULL;
}

static void *both(void *arg)
{
  end *ends = arg;
  tdl_fiber_t f[2];
  for (int i = 0; i < 2; i++)
    tdl_fiber_spawn(&f[i], tdl_fiber_loop(), run, &ends[i], NULL);
  for (int i = 0; i < 2; i++)
    tdl_fiber_join(f[i], NULL, TDL_FOREVER);
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc != 3) {
    fprintf(stderr, "usage: tls-consumer CERT KEY\n");
    return 2;
  }
  char why[256];
  tdl_tls_options so = {.role = TDL_TLS_SERVER, .cert_file = argv[1], .key_file = argv[2],
                        .error = why, .error_cap = sizeof why};
  tdl_tls_options co = {.insecure = true};
  end ends[2];
  int sv[2];
  if (tdl_tls_config_new(&ends[0].cfg, &so) != 0 || tdl_tls_config_new(&ends[1].cfg, &co) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    fprintf(stderr, "tls consumer: %s\n", why);
    return 1;
  }
  ends[0].fd = sv[0];
  ends[1].fd = sv[1];
  if (tdl_fiber_main(both, ends, NULL) != 0)
    return 1;
  tdl_tls_config_free(ends[0].cfg);
  tdl_tls_config_free(ends[1].cfg);
  int ok = ends[0].rc == 0 && ends[1].rc == 0;
  printf("tls consumer: %s\n", ok ? "ok" : "the handshake failed");
  return ok ? 0 : 1;
}
