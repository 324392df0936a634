/* SPDX-License-Identifier: MIT */
/*
 * echo (docs/BENCHMARKS.md, "Servers"): C TCP connections over
 * loopback to an echo server on one loop; each client connection sends B
 * bytes and waits for them back, M round trips in all.
 *
 *   echo-server --listen ADDR [--backend epoll|poll|uring] [--readahead yes|no] [--writebehind yes|no]
 *       One loop, a fiber per connection echoing what arrives (tdl_recv into a
 *       16 KiB buffer, tdl_send of all of it).  On uring each connection
 *       receives ahead (tdl_fd_readahead) unless --readahead no, and sends
 *       behind (tdl_fd_writebehind) unless --writebehind no.  Prints "PORT n" on stdout once
 *       it listens, serves until its stdin reaches end of file (or SIGTERM's
 *       default action ends it), then prints "SERVED conns=N bytes=B" and
 *       exits 0.  Its CPU time is measured from outside (bench/drivers/echo_driver.py
 *       reads /proc/PID/stat), so the same client measures every server.
 *
 *   echo --port P --conns C --messages M --size B [--host H] [--backend ...] [--sync 0|1]
 *       The client, on a loop of its own: C fibers each connect (TCP_NODELAY),
 *       make one round trip that is not counted (the server has then accepted
 *       and is serving the connection), and wait; the clock starts, and each
 *       fiber loops { send B bytes; receive B } taking messages from the
 *       shared budget M until it is used.  It receives into a buffer of
 *       CLIENT_BUF bytes at least (more than B coming back is a failure), as
 *       the servers do: a read that returns less than it asked for tells
 *       treadle the socket is empty, so the next waits without a read that
 *       hears EAGAIN, whatever the server.  Every byte that comes back is
 *       compared with what was sent; each message carries its sequence number
 *       so that a stale or repeated echo shows.  With --sync 1 the client
 *       prints "READY" on stdout once every connection is up and waits for a
 *       line on stdin before it starts the clock, so that a driver can read
 *       the server's CPU time just around the timed part.
 *       Keys: msgs_per_s (wall), client_cpu_us_per_msg (the client's own CPU).
 */
#include <treadle.h>

#include "backend.h"
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define SERVER_BUF (16 * 1024) /* per connection; the Go and tokio servers use the same */
#define CLIENT_BUF 4096

/* ---- the server ---------------------------------------------------------- */

typedef struct conn conn;
typedef struct server {
  tdl_loop *loop;
  int lfd;
  tdl_fiber_t acceptor;
  conn *conns; /* live connections, to cancel at the end */
  bool stopping;
  bool readahead; /* tdl_fd_readahead on each connection (uring only) */
  bool writebehind; /* tdl_fd_writebehind on each connection (uring only) */
  long accepted;
  long long bytes;
} server;

struct conn {
  server *s;
  conn *prev, *next;
  tdl_fiber_t f;
  int fd;
};

static void *serve_conn(void *arg)
{
  conn *c = arg;
  server *s = c->s;
  unsigned char *buf = malloc(SERVER_BUF);
  if (buf) {
    for (;;) {
      ssize_t n = tdl_recv(c->fd, buf, SERVER_BUF, 0, TDL_FOREVER);
      if (n <= 0) /* the client closed, or we were cancelled */
        break;
      size_t sent = 0;
      while (sent < (size_t)n) {
        ssize_t w = tdl_send(c->fd, buf + sent, (size_t)n - sent, MSG_NOSIGNAL, TDL_FOREVER);
        if (w < 0)
          goto out;
        sent += (size_t)w;
      }
      s->bytes += n;
    }
  }
out:
  free(buf);
  tdl_close(c->fd);
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  free(c);
  return NULL;
}

static void *accept_conns(void *arg)
{
  server *s = arg;
  while (!s->stopping) {
    int fd = tdl_net_accept(s->lfd, NULL, TDL_FOREVER);
    if (fd == -ECANCELED)
      break;
    if (fd < 0) { /* -EMFILE and the like are transient (tdl_net_accept backed off) */
      fprintf(stderr, "echo-server: accept: %s\n", tdl_strerror(fd));
      continue;
    }
    tdl_net_nodelay(fd, true);
    if (s->readahead)
      (void)tdl_fd_readahead(fd, true); /* -ENOTSUP on epoll: then reads as usual */
    if (s->writebehind)
      (void)tdl_fd_writebehind(fd, true); /* likewise */
    conn *c = calloc(1, sizeof *c);
    int rc = -ENOMEM;
    if (c) {
      *c = (conn){.s = s, .fd = fd};
      rc = tdl_fiber_spawn(&c->f, s->loop, serve_conn, c, &(tdl_fiber_options){.detached = true});
    }
    if (rc < 0) {
      fprintf(stderr, "echo-server: cannot serve a connection: %s\n", tdl_strerror(rc));
      free(c);
      tdl_close(fd);
      continue;
    }
    /* The fiber runs only when this one next parks: it is linked first. */
    c->next = s->conns;
    if (s->conns)
      s->conns->prev = c;
    s->conns = c;
    s->accepted++;
  }
  tdl_close(s->lfd);
  return NULL;
}

/* Serves until stdin ends: the driver's way to stop the server. */
static void *watch_stdin(void *arg)
{
  server *s = arg;
  char b[256];
  while (tdl_read(0, b, sizeof b, TDL_FOREVER) > 0)
    ;
  s->stopping = true;
  tdl_fiber_cancel(s->loop, s->acceptor);
  for (conn *c = s->conns; c; c = c->next)
    tdl_fiber_cancel(s->loop, c->f);
  return NULL;
}

int bench_echo_server_main(int argc, char **argv)
{
  const char *listen = bench_opt_str(argc, argv, "listen", "127.0.0.1:0");
  tdl_backend backend;
  if (bench_parse_backend(bench_opt_str(argc, argv, "backend", NULL), &backend) < 0)
    bench_die("echo-server: unknown back end");
  bench_raise_nofile();
  const char *ra = bench_opt_str(argc, argv, "readahead", "yes");
  if (strcmp(ra, "yes") != 0 && strcmp(ra, "no") != 0)
    bench_die("echo-server: --readahead wants yes or no");
  const char *wb = bench_opt_str(argc, argv, "writebehind", "yes");
  if (strcmp(wb, "yes") != 0 && strcmp(wb, "no") != 0)
    bench_die("echo-server: --writebehind wants yes or no");
  server s = {.lfd = -1, .readahead = strcmp(ra, "yes") == 0, .writebehind = strcmp(wb, "yes") == 0};
  tdl_loop_options lo = {.backend = backend};
  int rc = tdl_loop_new(&s.loop, &lo);
  if (rc < 0)
    bench_die("echo-server: tdl_loop_new: %s", tdl_strerror(rc));
  s.lfd = tdl_net_listen_str(listen, 0, 0);
  if (s.lfd < 0) {
    char why[TDL_ADDR_ERRLEN];
    tdl_addr_parse_error(listen, why, sizeof why);
    bench_die("echo-server: cannot listen on '%s': %s", listen, why[0] ? why : tdl_strerror(s.lfd));
  }
  tdl_addr local;
  if ((rc = tdl_net_local_addr(s.lfd, &local)) < 0 || (rc = tdl_addr_port(&local)) < 0)
    bench_die("echo-server: the listener's port: %s", tdl_strerror(rc));
  tdl_fiber_t watcher;
  if ((rc = tdl_fiber_spawn(&s.acceptor, s.loop, accept_conns, &s, NULL)) < 0 ||
      (rc = tdl_fiber_spawn(&watcher, s.loop, watch_stdin, &s, NULL)) < 0)
    bench_die("echo-server: tdl_fiber_spawn: %s", tdl_strerror(rc));
  printf("PORT %d\n", tdl_addr_port(&local));
  fflush(stdout);
  fprintf(stderr, "echo-server: listening on port %d, back end %s\n", tdl_addr_port(&local),
          tdl_loop_backend(s.loop));

  rc = tdl_loop_run(s.loop, TDL_LOOP_DEFAULT);
  if (rc < 0)
    bench_die("echo-server: tdl_loop_run: %s", tdl_strerror(rc));
  tdl_fiber_detach(s.loop, s.acceptor); /* finished: releases them */
  tdl_fiber_detach(s.loop, watcher);
  tdl_loop_free(s.loop);
  printf("SERVED conns=%ld bytes=%lld\n", s.accepted, s.bytes);
  return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- the client ---------------------------------------------------------- */

typedef struct client {
  tdl_loop *loop;
  tdl_addr addr;
  long conns, messages, size;
  long left;  /* messages not yet claimed by a fiber */
  long done;  /* round trips completed and checked, in the timed part */
  long ready; /* fibers connected and warmed up (or failed) */
  bool go;
  bool failed;
  bool readahead; /* tdl_fd_readahead on each connection (uring only) */
  tdl_fiber_t main;
} client;

typedef struct worker {
  client *c;
  int fd;
  unsigned char *out, *in;
} worker;

static void fail(client *c, const char *what, long n)
{
  if (!c->failed)
    fprintf(stderr, "echo: FAILED: %s: %s\n", what, n < 0 ? tdl_strerror((int)n) : "the server closed");
  c->failed = true;
  c->left = 0;
}

/* One message out and back; 0, or -1 after fail(). */
static int round_trip(worker *w, uint64_t seq)
{
  client *c = w->c;
  size_t size = (size_t)c->size;
  /* The sequence number on top of the connection's random pattern. */
  memcpy(w->out, &seq, size < sizeof seq ? size : sizeof seq);
  for (size_t off = 0; off < size;) {
    ssize_t n = tdl_send(w->fd, w->out + off, size - off, MSG_NOSIGNAL, TDL_FOREVER);
    if (n < 0) {
      fail(c, "send", n);
      return -1;
    }
    off += (size_t)n;
  }
  size_t cap = size > CLIENT_BUF ? size : CLIENT_BUF;
  for (size_t got = 0; got < size;) {
    ssize_t n = tdl_recv(w->fd, w->in + got, cap - got, 0, TDL_FOREVER);
    if (n <= 0) {
      fail(c, "recv", n);
      return -1;
    }
    got += (size_t)n;
    if (got > size) {
      if (!c->failed)
        fprintf(stderr, "echo: FAILED: %zu bytes came back for %zu sent\n", got, size);
      c->failed = true;
      c->left = 0;
      return -1;
    }
  }
  if (memcmp(w->in, w->out, size) != 0) {
    size_t i = 0;
    while (w->in[i] == w->out[i])
      i++;
    if (!c->failed) {
      char what[48] = "the warm-up message";
      if (seq != UINT64_MAX)
        snprintf(what, sizeof what, "message %llu", (unsigned long long)seq);
      fprintf(stderr, "echo: FAILED: %s came back with byte %zu = %u, sent %u\n", what, i, w->in[i], w->out[i]);
    }
    c->failed = true;
    c->left = 0;
    return -1;
  }
  return 0;
}

static void *client_fiber(void *arg)
{
  worker *w = arg;
  client *c = w->c;
  int fd = tdl_net_connect(&c->addr, tdl_after(30 * TDL_SEC));
  if (fd < 0) {
    fail(c, "connect", fd);
  } else {
    w->fd = fd;
    tdl_net_nodelay(fd, true);
    if (c->readahead)
      (void)tdl_fd_readahead(fd, true); /* -ENOTSUP on epoll: then reads as usual */
    round_trip(w, UINT64_MAX); /* warm-up, not counted */
  }
  if (++c->ready == c->conns)
    tdl_fiber_unpark(c->loop, c->main);
  while (!c->go)
    if (tdl_fiber_park(TDL_FOREVER) < 0)
      return NULL;
  while (c->left > 0) {
    uint64_t seq = (uint64_t)(c->messages - c->left--);
    if (round_trip(w, seq) < 0)
      break;
    c->done++;
  }
  return NULL;
}

typedef struct client_run {
  client *c;
  worker *w;
  tdl_fiber_t *f;
  bool sync;
  bench_span span;
  int rc;
} client_run;

static void *client_main(void *arg)
{
  client_run *r = arg;
  client *c = r->c;
  long spawned = 0;
  for (; spawned < c->conns; spawned++) {
    int rc = tdl_fiber_spawn(&r->f[spawned], c->loop, client_fiber, &r->w[spawned], NULL);
    if (rc < 0) {
      fprintf(stderr, "echo: tdl_fiber_spawn: %s\n", tdl_strerror(rc));
      c->failed = true;
      break;
    }
  }
  while (spawned == c->conns && c->ready < c->conns)
    tdl_fiber_park(TDL_FOREVER);
  if (r->sync && !c->failed) {
    printf("READY\n");
    fflush(stdout);
    char b[64];
    if (tdl_read(0, b, sizeof b, TDL_FOREVER) <= 0) {
      fprintf(stderr, "echo: --sync 1: stdin ended before the go-ahead\n");
      c->failed = true;
    }
  }
  if (c->failed)
    c->left = 0;
  bench_begin(&r->span);
  c->go = true;
  for (long i = 0; i < spawned; i++)
    tdl_fiber_unpark(c->loop, r->f[i]);
  for (long i = 0; i < spawned; i++)
    tdl_fiber_join(r->f[i], NULL, TDL_FOREVER);
  bench_end(&r->span);
  r->rc = c->failed || c->done != c->messages ? 1 : 0;
  if (!c->failed && c->done != c->messages)
    fprintf(stderr, "echo: FAILED: %ld round trips of %ld\n", c->done, c->messages);
  return NULL;
}

int bench_echo_main(int argc, char **argv)
{
  client c = {
      .conns = bench_opt_long(argc, argv, "conns", 1000),
      .messages = bench_opt_long(argc, argv, "messages", 1000000),
      .size = bench_opt_long(argc, argv, "size", 64),
  };
  long port = bench_opt_long(argc, argv, "port", 0);
  const char *host = bench_opt_str(argc, argv, "host", "127.0.0.1");
  const char *be = bench_opt_str(argc, argv, "backend", NULL);
  bool sync = bench_opt_long(argc, argv, "sync", 0) != 0;
  const char *ra = bench_opt_str(argc, argv, "readahead", "yes");
  if (strcmp(ra, "yes") != 0 && strcmp(ra, "no") != 0)
    bench_die("echo: --readahead wants yes or no");
  c.readahead = strcmp(ra, "yes") == 0;
  tdl_backend backend;
  if (port < 1 || port > 65535) {
    fprintf(stderr, "echo: need --port (the echo server's, 1 to 65535)\n");
    return 2;
  }
  if (bench_parse_backend(be, &backend) < 0)
    bench_die("echo: unknown back end");
  char addr[300];
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%ld" : "%s:%ld", host, port);
  if (tdl_addr_parse(&c.addr, addr) < 0) {
    fprintf(stderr, "echo: bad --host '%s'\n", host);
    return 2;
  }
  c.left = c.messages;
  bench_raise_nofile();

  int rc = tdl_loop_new(&c.loop, &(tdl_loop_options){.backend = backend});
  if (rc < 0)
    bench_die("echo: tdl_loop_new: %s", tdl_strerror(rc));
  client_run r = {.c = &c, .sync = sync, .rc = 1};
  r.w = calloc((size_t)c.conns, sizeof *r.w);
  r.f = calloc((size_t)c.conns, sizeof *r.f);
  if (!r.w || !r.f)
    bench_die("out of memory");
  uint64_t seed = 42;
  for (long i = 0; i < c.conns; i++) {
    worker *w = &r.w[i];
    *w = (worker){.c = &c, .fd = -1, .out = malloc((size_t)c.size), .in = malloc(c.size > CLIENT_BUF ? (size_t)c.size : CLIENT_BUF)};
    if (!w->out || !w->in)
      bench_die("out of memory");
    for (long k = 0; k < c.size; k++)
      w->out[k] = (unsigned char)bench_rand(&seed);
  }
  if ((rc = tdl_fiber_spawn(&c.main, c.loop, client_main, &r, NULL)) < 0)
    bench_die("echo: tdl_fiber_spawn: %s", tdl_strerror(rc));
  if ((rc = tdl_loop_run(c.loop, TDL_LOOP_DEFAULT)) < 0)
    bench_die("echo: tdl_loop_run: %s", tdl_strerror(rc));
  tdl_fiber_detach(c.loop, c.main); /* finished: releases it */

  if (r.rc == 0) {
    char impl[32];
    snprintf(impl, sizeof impl, "treadle-%s", tdl_loop_backend(c.loop));
    const bench_span *s = &r.span;
    bench_result(impl, "echo", s, "conns=%ld messages=%ld size=%ld msgs_per_s=%.0f client_cpu_us_per_msg=%.3f",
                 c.conns, c.messages, c.size, (double)c.messages / s->wall_s,
                 (s->user_s + s->sys_s) * 1e6 / (double)c.messages);
  }
  /* Closed only now, after the RESULT line: the driver reads the server's
   * CPU time when it sees that line, before the server handles the closes. */
  for (long i = 0; i < c.conns; i++) {
    if (r.w[i].fd >= 0)
      tdl_close(r.w[i].fd);
    free(r.w[i].out);
    free(r.w[i].in);
  }
  tdl_loop_free(c.loop);
  free(r.w);
  free(r.f);
  return r.rc;
}
