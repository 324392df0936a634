/*
 * httpd --listen ADDR:PORT [--root DIR] [--idle-timeout S] [--read-timeout S] [--grace S]
 *
 * A small HTTP/1.1 server on one treadle loop (one core).  See server.h.
 * SIGINT or SIGTERM: stop accepting, let requests in flight finish (within
 * --grace seconds), exit 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static void usage(void)
{
  fprintf(stderr, "usage: httpd --listen ADDR:PORT [--root DIR] [--idle-timeout S] [--read-timeout S]\n"
                  "             [--write-timeout S] [--grace S] [--max-body BYTES] [--max-head BYTES]\n");
  exit(2);
}

static tdl_time_t seconds(const char *s)
{
  char *end;
  double v = strtod(s, &end);
  if (*end || v < 0)
    usage();
  return (tdl_time_t)(v * 1e9);
}

static void *run(void *arg)
{
  httpd_server *s = arg;
  int e = httpd_run(s);
  if (e < 0)
    fprintf(stderr, "httpd: %s\n", tdl_strerror(e));
  return (void *)(intptr_t)(e < 0);
}

int main(int argc, char **argv)
{
  httpd_config cfg = httpd_defaults();
  cfg.listen = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc)
      usage();
    const char *v = argv[++i];
    if (strcmp(a, "--listen") == 0)
      cfg.listen = v;
    else if (strcmp(a, "--root") == 0)
      cfg.root = v;
    else if (strcmp(a, "--idle-timeout") == 0)
      cfg.idle_timeout = seconds(v);
    else if (strcmp(a, "--read-timeout") == 0)
      cfg.read_timeout = seconds(v);
    else if (strcmp(a, "--write-timeout") == 0)
      cfg.write_timeout = seconds(v);
    else if (strcmp(a, "--grace") == 0)
      cfg.grace = seconds(v);
    else if (strcmp(a, "--max-body") == 0)
      cfg.max_body = strtoull(v, NULL, 10);
    else if (strcmp(a, "--max-head") == 0)
      cfg.max_head = (uint32_t)strtoul(v, NULL, 10);
    else
      usage();
  }
  if (!cfg.listen)
    usage();
  /* Sends use MSG_NOSIGNAL; this is for anything else that writes to a socket. */
  signal(SIGPIPE, SIG_IGN);

  httpd_server s;
  int e = httpd_init(&s, &cfg);
  if (e < 0) {
    char why[TDL_ADDR_ERRLEN];
    if (tdl_addr_parse_error(cfg.listen, why, sizeof why) < 0) /* which part of it is wrong */
      fprintf(stderr, "httpd: --listen: %s\n", why);
    else
      fprintf(stderr, "httpd: cannot listen on %s%s%s: %s\n", cfg.listen, cfg.root ? " / open " : "",
              cfg.root ? cfg.root : "", tdl_strerror(e));
    return 1;
  }
  fprintf(stderr, "httpd: listening on %s (port %d)\n", cfg.listen, s.port);
  void *failed = NULL;
  e = tdl_fiber_main(run, &s, &failed);
  httpd_destroy(&s);
  if (e < 0) {
    fprintf(stderr, "httpd: %s\n", tdl_strerror(e));
    return 1;
  }
  return failed ? 1 : 0;
}
