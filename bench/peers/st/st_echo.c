/* SPDX-License-Identifier: MIT */
/*
 * bench-st echo-server: the State Threads peer of treadle-bench's
 * echo-server (docs/BENCHMARKS.md, "echo"), with the same contract: listen
 * (default 127.0.0.1:0), print "PORT n" on stdout, serve until stdin reaches
 * end of file, then print "SERVED conns=N bytes=B" and exit 0.  It is
 * written as ST servers are: the primordial thread accepts (st_accept), a
 * thread per connection echoes what arrives (st_read into a 16 KiB buffer,
 * st_write of all of it: treadle's server does the same), TCP_NODELAY on
 * every connection, all on the process's one thread.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <st.h>

#include "bench.h"
#include "st_peer.h"

#define SERVER_BUF (16 * 1024)

static long accepted;
static long long echoed;

static void *serve(void *arg)
{
  st_netfd_t c = arg;
  char *buf = malloc(SERVER_BUF);
  while (buf) {
    ssize_t n = st_read(c, buf, SERVER_BUF, ST_UTIME_NO_TIMEOUT);
    if (n <= 0) /* the client closed */
      break;
    if (st_write(c, buf, (size_t)n, ST_UTIME_NO_TIMEOUT) != n)
      break;
    echoed += n;
  }
  free(buf);
  st_netfd_close(c);
  return NULL;
}

/* Serves until stdin ends: the driver's way to stop the server. */
static void *watch_stdin(void *arg)
{
  (void)arg;
  st_netfd_t in = st_netfd_open(0);
  char b[256];
  while (in && st_read(in, b, sizeof b, ST_UTIME_NO_TIMEOUT) > 0)
    ;
  printf("SERVED conns=%ld bytes=%lld\n", accepted, echoed);
  fflush(stdout);
  _exit(0);
}

st_netfd_t st_peer_listen(const char *what, const char *listen_at, int *port_out)
{
  char host[64];
  const char *colon = strrchr(listen_at, ':');
  struct sockaddr_in sin = {.sin_family = AF_INET};
  if (!colon || (size_t)(colon - listen_at) >= sizeof host)
    bench_die("%s: --listen wants an IPv4 HOST:PORT, not '%s'", what, listen_at);
  memcpy(host, listen_at, (size_t)(colon - listen_at));
  host[colon - listen_at] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535 || inet_pton(AF_INET, host, &sin.sin_addr) != 1)
    bench_die("%s: --listen wants an IPv4 HOST:PORT, not '%s'", what, listen_at);
  sin.sin_port = htons((uint16_t)port);

  int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  socklen_t len = sizeof sin;
  if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(lfd, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(lfd, SOMAXCONN) != 0 ||
      getsockname(lfd, (struct sockaddr *)&sin, &len) != 0)
    bench_die("%s: cannot listen on '%s': %s", what, listen_at, strerror(errno));
  st_netfd_t l = st_netfd_open_socket(lfd);
  if (!l)
    bench_die("%s: setup: %s", what, strerror(errno));
  *port_out = ntohs(sin.sin_port);
  return l;
}

int st_echo_server_main(int argc, char **argv)
{
  const char *listen_at = bench_opt_str(argc, argv, "listen", "127.0.0.1:0");
  int one = 1, port;
  st_peer_init();
  st_netfd_t l = st_peer_listen("echo-server", listen_at, &port);
  if (!st_thread_create(watch_stdin, NULL, 0, 0))
    bench_die("echo-server: setup: %s", strerror(errno));
  printf("PORT %d\n", port);
  fflush(stdout);
  fprintf(stderr, "echo-server: State Threads %s, listening on port %d, event system %s\n", ST_VERSION, port,
          st_peer_eventsys);

  for (;;) {
    st_netfd_t c = st_accept(l, NULL, NULL, ST_UTIME_NO_TIMEOUT);
    if (!c) {
      if (errno != EINTR)
        fprintf(stderr, "echo-server: accept: %s\n", strerror(errno));
      if (errno == EMFILE || errno == ENFILE)
        st_usleep(10000);
      continue;
    }
    setsockopt(st_netfd_fileno(c), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!st_thread_create(serve, c, 0, 0)) {
      fprintf(stderr, "echo-server: cannot serve a connection: %s\n", strerror(errno));
      st_netfd_close(c);
      continue;
    }
    accepted++;
  }
}
