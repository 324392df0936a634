/* SPDX-License-Identifier: MIT */
/*
 * httpd: an HTTP/1.1 server written as plain fiber code on treadle.
 *
 *   httpd_server s;
 *   httpd_config cfg = httpd_defaults();  cfg.listen = "127.0.0.1:8080";
 *   httpd_init(&s, &cfg);        // listen (may be called outside a fiber)
 *   httpd_run(&s);               // in a fiber: serve until httpd_shutdown() or SIGINT/SIGTERM
 *   httpd_destroy(&s);
 *
 * One fiber accepts; each connection gets a fiber that reads a request,
 * answers it and loops (keep-alive, pipelining).  Routes: "/" answers
 * "Hello, World!", "/static/<path>" serves files below cfg.root,
 * "/-/metrics" the metrics (cfg.metrics), anything else is 404.
 */
#ifndef HTTPD_SERVER_H
#define HTTPD_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <treadle.h>

typedef struct httpd_config {
  const char *listen;       /* "HOST:PORT" as net.h's tdl_addr_parse reads it: "127.0.0.1:8080",
                               "*:8080" (all addresses), "localhost:0" (0: any free port),
                               "[::1]:8080", "unix:/run/httpd.sock" */
  const char *root;         /* directory served under /static/, or NULL for none */
  uint32_t max_head;        /* request line + headers, bytes (431 beyond) */
  uint64_t max_body;        /* request body, bytes (413 beyond) */
  tdl_time_t idle_timeout;  /* waiting for the next request on an open connection */
  tdl_time_t read_timeout;  /* receiving one whole request, from its first byte (slowloris) */
  tdl_time_t first_byte_timeout; /* from accept until the first request begins: a client that
                               connects and says nothing is closed then, quietly (0: read_timeout) */
  unsigned max_conns;       /* connections at once; at the cap the one idle longest (silent, or
                               kept alive between requests) is closed to make room, and only when
                               every one is busy is the new one closed (net.h, tdl_conns).
                               0: as many as the fd limit leaves room for (tdl_conns_fd_room);
                               more than that is lowered to it */
  tdl_time_t write_timeout; /* sending one response */
  tdl_time_t grace;         /* on shutdown: how long in-flight requests may take */
  bool handle_signals;      /* shut down gracefully on SIGINT and SIGTERM */
  bool no_sendfile;         /* copy files through user space (pread + send) instead of sendfile(2),
                               as is done anyway where sendfile refuses a file (EINVAL, ENOSYS) */
  bool no_readahead;        /* on uring loops, read connections with a receive per read instead of
                               receiving ahead (fiber.h, tdl_fd_readahead) */
  bool no_writebehind;      /* on uring loops, a send(2) per answer instead of sending behind
                               (fiber.h, tdl_fd_writebehind) */
  struct tdl_tls_config *tls; /* HTTPS: a server configuration of libtreadle-tls (tls.h; ALPN
                               http/1.1), in a build with it (HTTPD_TLS); NULL: plain HTTP.  The
                               handshake must end within first_byte_timeout */
  tdl_time_t compact_idle;  /* compact the fibers of connections idle this long (fiber.h,
                               tdl_fiber_compact_idle, on the server's loop from httpd_run on):
                               their stacks' pages go back to the kernel.  0: off;
                               httpd_defaults: 250 ms */
  bool metrics;             /* answer GET /-/metrics with treadle's metrics of the process and of
                               every loop (a group's, when the server runs in one), in the
                               Prometheus text format (metrics.h) */
} httpd_config;

/* Defaults: 8 KiB heads, 1 MiB bodies, 60 s idle, 10 s read and write
 * timeouts (and first byte), as many connections as the fds allow, 5 s
 * grace, signals handled. */
httpd_config httpd_defaults(void);

/* The stack a connection's fiber should have (a tdl_acceptor's stack_size
 * for httpd_serve_conn).  A connection's buffers are not on it: they come
 * from the server's pool while a request is served, and go back to it while
 * the connection is idle. */
size_t httpd_conn_stack_size(const httpd_config *cfg);

typedef struct httpd_conn httpd_conn;
typedef struct httpd_buf httpd_buf;

typedef struct httpd_server {
  httpd_config cfg;
  int lfd;    /* listening socket, or -1 (httpd_serve_conn) */
  int rootfd; /* O_PATH descriptor of cfg.root, or -1 */
  int port;   /* the port actually bound */
  tdl_loop *loop;
  tdl_fiber_t main, acceptor;
  bool stopping;
  httpd_conn *conns; /* connections being served, a circular list (NULL: none) */
  unsigned nconns;   /* open connections: from their accept (before their fiber runs) to their close */
  tdl_conns track;   /* the cap, first-byte and idle deadlines, eviction (set up on the loop) */
  uint64_t served; /* responses sent */
  uint64_t sendfile_bytes; /* bytes of files sent by sendfile (the rest: pread + send) */
  tdl_signal sigint, sigterm;
  /* Buffers for requests being served: taken as one begins, given back as
   * its connection goes idle; what went unused for a second is unmapped. */
  httpd_buf *pool;
  unsigned pool_len, pool_low; /* blocks in it now, and the fewest since the last trim */
  tdl_timer pool_timer;
  /* The Date header, and the benchmark route's whole response, rebuilt at
   * most once a second. */
  tdl_time_t date_next;
  char date[32];
  /* The answers to GET / for HTTP/1.1, kept open and closing (date_refresh). */
  char hello[256], hello_close[256];
  unsigned hello_len, hello_head_len, hello_close_len, hello_close_head_len;
} httpd_server;

/* Parse cfg->listen, bind and listen, open cfg->root.  cfg->listen NULL:
 * no listener; connections come through httpd_serve_conn (several loops:
 * one httpd_server per loop, fed by a tdl_acceptor, see main.c).  Returns 0
 * or a negative errno value; nothing is left open on failure.
 * With a root, files go out with sendfile(2), which cannot be told
 * MSG_NOSIGNAL: when SIGPIPE still has its default action (end the
 * process), httpd_init makes the process ignore it. */
int httpd_init(httpd_server *s, const httpd_config *cfg);

/* Serve until shut down; call from a fiber.  Returns 0 after a graceful
 * shutdown (every connection closed), or a negative errno value. */
int httpd_run(httpd_server *s);

/* Serve connection fd in the calling fiber, on the loop that runs (or will
 * run) httpd_run(s), until it closes; the server owns fd.  Once s is
 * shutting down, fd is closed at once.  A tdl_acceptor handler. */
void httpd_serve_conn(httpd_server *s, int fd);

/* Begin a graceful shutdown: stop accepting, close idle connections, let
 * requests in flight finish within cfg.grace, then make httpd_run return.
 * A second call cuts the grace period short.  Call from the loop's thread
 * (a fiber or a callback). */
void httpd_shutdown(httpd_server *s);

/* Close what httpd_init opened.  Call after httpd_run has returned (or
 * instead of it). */
void httpd_destroy(httpd_server *s);

#endif /* HTTPD_SERVER_H */
