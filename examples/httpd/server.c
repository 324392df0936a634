/* SPDX-License-Identifier: MIT */
/*
 * httpd: the server (see server.h).  Read it top to bottom: the accept loop,
 * then one connection's life (read a request head, decide the reply, skip the
 * body, write the reply, repeat), then the routes, then shutdown.
 *
 * Every blocking call is a treadle fiber call with a deadline, so a
 * connection is just a loop over requests: no callbacks, no state machine.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "http_parser.h"
#ifdef HTTPD_TLS
#include <treadle/tls.h>
#endif

#define OUT_CAP (16 * 1024)  /* responses are batched here, then sent with one call */
#define IN_SPARE (8 * 1024)  /* the input buffer holds a maximal head and this much more */
#define IN_LOCAL (16 * 1024) /* a pool buffer's input part (default heads); larger heads get their own */
#define FRAMES (48 * 1024)   /* a connection fiber's stack beyond its httpd_conn: serve()'s frames,
                                libc's, a signal frame; measured use is under 12 KiB */
#define TLS_FRAMES (32 * 1024) /* OpenSSL's handshake and record frames, on HTTPS connections */
#define LINGER_TIME (2 * TDL_SEC)
#define LINGER_BYTES (256 * 1024)
#define CHUNK_META_MAX 4096  /* chunk extensions + trailers per body */
#define SENDFILE_MAX ((size_t)1 << 30) /* per call (the kernel stops short of 2 GiB anyway) */
#define SENDFILE_BURST 64    /* sendfile calls without a wait before the fiber yields once */
#define RETRY_AFTER "1"      /* seconds, in a 503's Retry-After */
#define POOL_TRIM TDL_SEC    /* how often the buffer pool gives back what went unused meanwhile */

/* A connection's buffers while it serves a request: taken from the
 * server's pool when a request begins, given back when the connection goes
 * idle, so that an idle connection holds none (conn_wait_request). */
struct httpd_buf {
  httpd_buf *next;
  char out[OUT_CAP];
  char in[IN_LOCAL];
};

/* A connection's state.  It lives on its fiber's stack (conn_serve) and is
 * small: the buffers are the pool's (httpd_buf), and an idle connection's
 * fiber waits in a shallow frame, so that what stays on its stack while it
 * waits is a page at most, which compacting (cfg.compact_idle) gives back. */
struct httpd_conn {
  httpd_conn *next, *prev;
  httpd_server *srv;
  tdl_fiber_t fiber;
  int fd;
  bool prewait; /* wait for a request without a buffer (conn_wait_request) */
  bool ready;   /* set up (its TLS handshake done): serve it */
  struct tdl_tls *tls; /* HTTPS: every byte goes through it; NULL: plain */
  tdl_conn track; /* in srv->track: idle (evictable) while waiting for a request */
  tdl_time_t req_deadline;
  size_t in_off, in_len, in_cap; /* unconsumed input is in[in_off .. in_len) */
  size_t out_len;
  httpd_buf *buf; /* while a request is served; NULL while idle */
  char *in;       /* buf->in, or big */
  char *out;      /* buf->out */
  char *big;      /* from malloc, for the connection's life, for heads larger than buf->in holds */
};

httpd_config httpd_defaults(void)
{
  return (httpd_config){
      .listen = "127.0.0.1:8080",
      .root = NULL,
      .max_head = 8 * 1024,
      .max_body = 1024 * 1024,
      .idle_timeout = 60 * TDL_SEC,
      .read_timeout = 10 * TDL_SEC,
      .first_byte_timeout = 0, /* read_timeout */
      .max_conns = 0,          /* as the fds allow */
      .write_timeout = 10 * TDL_SEC,
      .grace = 5 * TDL_SEC,
      .handle_signals = true,
      /* An idle connection then holds no stack pages: its wake-up after
       * that long costs a page fault and a copy of a few hundred bytes
       * (README.md, memory). */
      .compact_idle = 250 * TDL_MSEC,
  };
}

/* ------------------------------------------------------------------------ */
/* The buffer pool                                                          */
/* ------------------------------------------------------------------------ */

/*
 * Buffers go to a connection when a request begins and come back when it
 * goes idle: the pool holds what the busiest moment needed, and a request
 * costs a pop and a push.  Blocks are mapped on their own, so that what the
 * pool gives back leaves the process instead of a hole in malloc's heap; a
 * block's pages are touched only as far as heads and answers reach.  Once
 * a second (pool_trim) the blocks that no request used meanwhile go back.
 */
static httpd_buf *buf_get(httpd_server *s)
{
  httpd_buf *b = s->pool;
  if (b) {
    s->pool = b->next;
    if (--s->pool_len < s->pool_low)
      s->pool_low = s->pool_len;
    return b;
  }
  void *m = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return m == MAP_FAILED ? NULL : m;
}

static void buf_put(httpd_server *s, httpd_buf *b)
{
  b->next = s->pool;
  s->pool = b;
  s->pool_len++;
}

/* Give back the blocks that stayed in the pool the whole time since the
 * last trim (all of them, with trim_all). */
static void pool_trim(httpd_server *s, bool trim_all)
{
  unsigned n = trim_all ? s->pool_len : s->pool_low;
  for (; n > 0; n--) {
    httpd_buf *b = s->pool;
    s->pool = b->next;
    s->pool_len--;
    munmap(b, sizeof *b);
  }
  s->pool_low = s->pool_len;
}

static void pool_trim_cb(tdl_loop *loop, tdl_timer *t)
{
  (void)loop;
  pool_trim(t->data, false);
}

/* Take buffers for a request; false: out of memory. */
static bool conn_take_buf(httpd_conn *c)
{
  if (!c->buf && !(c->buf = buf_get(c->srv)))
    return false;
  c->out = c->buf->out;
  c->in = c->big ? c->big : c->buf->in;
  return true;
}

/* Give them back, with nothing left in them. */
static void conn_drop_buf(httpd_conn *c)
{
  if (c->buf)
    buf_put(c->srv, c->buf);
  c->buf = NULL;
  c->out = NULL;
  c->in = c->big;
}

/* ------------------------------------------------------------------------ */
/* Listening                                                                */
/* ------------------------------------------------------------------------ */

/* Bind and listen (net.h: "127.0.0.1:8080", "*:8080", "localhost:8080",
 * "[::1]:8080", "unix:/path"...; SO_REUSEADDR); *port gets the port bound
 * (the kernel's pick for port 0; 0 for a Unix socket). */
static int listen_on(const char *text, int *port)
{
  int fd = tdl_net_listen_str(text, 4096, 0);
  if (fd < 0)
    return fd;
  tdl_addr a;
  int e = tdl_net_local_addr(fd, &a);
  if (e == 0 && (e = tdl_addr_port(&a)) == -EAFNOSUPPORT)
    e = 0;
  if (e < 0) {
    tdl_close(fd);
    return e;
  }
  *port = e;
  return fd;
}

size_t httpd_conn_stack_size(const httpd_config *cfg)
{
  /* Larger heads go to the heap. */
  return sizeof(httpd_conn) + FRAMES + (cfg && cfg->tls ? TLS_FRAMES : 0);
}

int httpd_init(httpd_server *s, const httpd_config *cfg)
{
  memset(s, 0, sizeof *s);
  s->cfg = *cfg;
  s->rootfd = -1;
  if (s->cfg.max_head < 64)
    s->cfg.max_head = 64;
  /* sendfile(2) cannot be told MSG_NOSIGNAL: a client gone mid-file would
   * raise SIGPIPE, whose default action ends the process.  A handler the
   * program installed is left alone. */
  struct sigaction sa;
  if (cfg->root && sigaction(SIGPIPE, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) &&
      sa.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  if (cfg->root) {
    s->rootfd = open(cfg->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (s->rootfd < 0)
      return -errno;
  }
  s->lfd = -1;
  if (cfg->listen)
    s->lfd = listen_on(cfg->listen, &s->port);
  if (cfg->listen && s->lfd < 0) {
    int e = s->lfd;
    if (s->rootfd >= 0)
      close(s->rootfd);
    return e;
  }
  tdl_signal_init(&s->sigint, NULL, s);
  tdl_signal_init(&s->sigterm, NULL, s);
  return 0;
}

void httpd_destroy(httpd_server *s)
{
  if (s->lfd >= 0)
    tdl_close(s->lfd);
  if (s->rootfd >= 0)
    close(s->rootfd);
  s->lfd = s->rootfd = -1;
  if (s->track.loop)
    tdl_conns_destroy(&s->track); /* (-EBUSY only if httpd_run never returned) */
  pool_trim(s, true);
}

/* ------------------------------------------------------------------------ */
/* The Date header and the benchmark route's response                       */
/* ------------------------------------------------------------------------ */

static const char hello_body[] = "Hello, World!";

/* Rebuilt when the wall-clock second changes, judged by the loop's cached
 * clock: one comparison per response otherwise. */
static void date_refresh(httpd_server *s)
{
  tdl_time_t now = tdl_now();
  if (now < s->date_next)
    return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  strftime(s->date, sizeof s->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  s->date_next = now + (TDL_SEC - ts.tv_nsec);
  int n = snprintf(s->hello, sizeof s->hello,
                   "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
                   "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n",
                   s->date, sizeof hello_body - 1);
  s->hello_head_len = (unsigned)n;
  memcpy(s->hello + n, hello_body, sizeof hello_body - 1);
  s->hello_len = (unsigned)n + (unsigned)(sizeof hello_body - 1);
  n = snprintf(s->hello_close, sizeof s->hello_close,
               "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
               "Content-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
               s->date, sizeof hello_body - 1);
  s->hello_close_head_len = (unsigned)n;
  memcpy(s->hello_close + n, hello_body, sizeof hello_body - 1);
  s->hello_close_len = (unsigned)n + (unsigned)(sizeof hello_body - 1);
}

/* ------------------------------------------------------------------------ */
/* Connection I/O                                                           */
/* ------------------------------------------------------------------------ */

/* The connection's three transfers, through TLS on an HTTPS connection. */
static int conn_send_all(httpd_conn *c, const void *p, size_t n, tdl_time_t deadline)
{
#ifdef HTTPD_TLS
  if (c->tls)
    return tdl_tls_send_all(c->tls, p, n, NULL, deadline);
#endif
  return tdl_net_send_all(c->fd, p, n, NULL, deadline);
}

static ssize_t conn_send(httpd_conn *c, const void *p, size_t n, int flags, tdl_time_t deadline)
{
#ifdef HTTPD_TLS
  if (c->tls)
    return tdl_tls_write(c->tls, p, n, deadline);
#endif
  return tdl_send(c->fd, p, n, flags, deadline);
}

static ssize_t conn_recv(httpd_conn *c, void *p, size_t n, tdl_time_t deadline)
{
#ifdef HTTPD_TLS
  if (c->tls)
    return tdl_tls_read(c->tls, p, n, deadline);
#endif
  return tdl_recv(c->fd, p, n, 0, deadline);
}

/* Send everything batched in c->out.  false: the peer is gone (EPIPE,
 * ECONNRESET), too slow (write timeout) or the fiber was cancelled. */
static bool conn_flush(httpd_conn *c)
{
  if (c->out_len == 0)
    return true;
  /* One send for the whole batch (net.h: MSG_NOSIGNAL, so a vanished client
   * is -EPIPE or -ECONNRESET here, never a SIGPIPE). */
  int e = conn_send_all(c, c->out, c->out_len, tdl_after(c->srv->cfg.write_timeout));
  c->out_len = 0;
  return e == 0;
}

/* The same, for a batch that more bytes follow at once (a file's head
 * before its sendfile): MSG_MORE lets the kernel hold a short tail back so
 * that it shares a packet with what comes next instead of going out alone
 * (TCP_NODELAY is on).  sendfile's last piece, the next send without
 * MSG_MORE, or the close pushes it. */
static bool conn_flush_more(httpd_conn *c)
{
  tdl_time_t deadline = tdl_after(c->srv->cfg.write_timeout);
  size_t off = 0;
  while (off < c->out_len) {
    ssize_t n = conn_send(c, c->out + off, c->out_len - off, MSG_NOSIGNAL | MSG_MORE, deadline);
    if (n < 0) {
      c->out_len = 0;
      return false;
    }
    off += (size_t)n;
  }
  c->out_len = 0;
  return true;
}

/* Make room for n bytes of output, sending what is batched if need be. */
static bool conn_reserve(httpd_conn *c, size_t n)
{
  return c->out_len + n <= OUT_CAP || conn_flush(c);
}

/*
 * Read more input.  Whatever is batched for output goes first (a pipelining
 * client may wait for those answers before sending more).  Returns the bytes
 * read, 0 at end of input, or a negative errno value (-ETIMEDOUT, ...).
 */
static ssize_t conn_fill(httpd_conn *c, tdl_time_t deadline)
{
  if (!conn_flush(c))
    return -EPIPE;
  if (c->in_off > 0) { /* keep the unconsumed bytes at the front */
    memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
    c->in_len -= c->in_off;
    c->in_off = 0;
  }
  size_t room = c->in_cap - c->in_len;
  if (room == 0)
    return -ENOBUFS;
  /* After a short read treadle itself waits before reading again (on
   * epoll for readiness, on uring as one receive in the ring), so a
   * keep-alive connection costs one read per request, with no EAGAIN. */
  ssize_t n = conn_recv(c, c->in + c->in_len, room, deadline);
  if (n > 0)
    c->in_len += (size_t)n;
  return n;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

enum { QUIET_CLOSE = 0 };

/*
 * Wait for the next request with no buffers taken and in a shallow frame:
 * an idle connection then holds neither its buffers nor more than this
 * frame and the wait's on its fiber's stack.  Answers batched for a
 * pipelining client go out first, while the connection still counts as
 * busy; then it waits and may be closed to make room for a new connection
 * (net.h, tdl_conns: an eviction cancels this fiber).  The wait is bounded
 * by the first-byte deadline until a request has come, then by the idle
 * timeout.  Returns true when a request has begun (its first bytes are in
 * c->in, or the fd is readable), false to close quietly (peer gone, idle
 * too long, shutting down, out of memory).
 *
 * How it waits costs no system call more than reading would.  A plain
 * connection waits for readability, which treadle knows for certain after
 * the short read that ended the last request; an HTTPS one until OpenSSL
 * holds bytes or the socket is readable (tdl_tls_wait), which is what its
 * read would wait for first too.  On a uring loop with a receive request
 * per read, the read itself is the wait, in the ring, and the buffers stay
 * taken.
 */
static bool conn_wait_request(httpd_conn *c)
{
  httpd_server *s = c->srv;
  if (s->stopping)
    return false; /* draining: no new requests */
  if (!conn_flush(c))
    return false;
  c->in_off = c->in_len = 0;
  tdl_time_t deadline = tdl_conn_idle(&c->track);
  ssize_t n;
  if (c->prewait) {
    conn_drop_buf(c);
#ifdef HTTPD_TLS
    int w = c->tls ? tdl_tls_wait(c->tls, deadline) : tdl_fd_wait(c->fd, TDL_READ, deadline);
#else
    int w = tdl_fd_wait(c->fd, TDL_READ, deadline);
#endif
    if (w < 0 || !conn_take_buf(c))
      return false;
    n = conn_fill(c, deadline);
  } else {
    n = conn_fill(c, deadline);
  }
  if (n <= 0)
    return false;
  tdl_conn_busy(&c->track);
  return true;
}

/* Read until a whole head is buffered at c->in + c->in_off, of which some
 * bytes are there already.  Returns its length, a negated status to answer
 * before closing, or QUIET_CLOSE (peer gone, shutting down). */
static int read_head(httpd_conn *c, http_request *req)
{
  httpd_server *s = c->srv;
  http_parser p;
  http_parser_init(&p, s->cfg.max_head);
  c->req_deadline = tdl_after(s->cfg.read_timeout);
  for (;;) {
    int r = http_parse_head(&p, c->in + c->in_off, c->in_len - c->in_off, req);
    if (r != HTTP_PARSE_INCOMPLETE)
      return r;
    ssize_t n = conn_fill(c, c->req_deadline);
    if (n == -ETIMEDOUT)
      return -408;
    if (n <= 0)
      return QUIET_CLOSE;
  }
}

/* Read and discard the body (no route here uses one).  Returns 0, a negated
 * status (400, 408, 413), or QUIET_CLOSE... as 1, since 0 means success. */
#define BODY_GONE 1

/* More of the body, within the request deadline: 0, -408 or BODY_GONE. */
static int body_fill(httpd_conn *c)
{
  ssize_t n = conn_fill(c, c->req_deadline);
  if (n == -ETIMEDOUT)
    return -408;
  return n <= 0 ? BODY_GONE : 0;
}

static int skip_body(httpd_conn *c, const http_request *req)
{
  httpd_server *s = c->srv;
  if (req->chunked) {
    http_chunked ch;
    http_chunked_init(&ch, CHUNK_META_MAX);
    uint64_t total = 0;
    for (;;) {
      while (c->in_off < c->in_len && !ch.done) {
        http_span data;
        long r = http_chunked_decode(&ch, c->in + c->in_off, c->in_len - c->in_off, &data);
        if (r < 0)
          return -400;
        c->in_off += (size_t)r;
        total += data.len;
        /* What the current chunk's size says is still to come counts too
         * (while its digits arrive, the value so far, which only grows): a
         * chunk declared larger than the limit is refused at its size line,
         * not after waiting for its data. */
        if (total > s->cfg.max_body || ch.remaining > s->cfg.max_body - total)
          return -413;
      }
      if (ch.done)
        return 0;
      int e = body_fill(c);
      if (e)
        return e;
    }
  }
  uint64_t left = req->content_length > 0 ? (uint64_t)req->content_length : 0;
  for (;;) {
    size_t avail = c->in_len - c->in_off;
    size_t take = avail < left ? avail : (size_t)left;
    c->in_off += take;
    left -= take;
    if (left == 0)
      return 0;
    int e = body_fill(c);
    if (e)
      return e;
  }
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct reply {
  int status;
  bool hello;        /* the benchmark route */
  bool head_only;    /* HEAD: headers, no body */
  bool metrics;      /* GET /-/metrics */
  int file;          /* fd of a file to send, or -1 */
  off_t size;        /* the file's size */
  const char *ctype; /* of the file */
} reply;

/* Append the status line and headers. */
static bool put_head(httpd_conn *c, int status, const char *ctype, uint64_t length, bool keep, int minor,
                     const char *extra)
{
  httpd_server *s = c->srv;
  if (!conn_reserve(c, 512))
    return false;
  date_refresh(s);
  const char *conn_hdr = !keep ? "Connection: close\r\n" : minor == 0 ? "Connection: keep-alive\r\n" : "";
  int n = snprintf(c->out + c->out_len, OUT_CAP - c->out_len,
                   "HTTP/1.1 %d %s\r\nServer: treadle\r\nDate: %s\r\nContent-Type: %s\r\n"
                   "Content-Length: %llu\r\n%s%s\r\n",
                   status, http_reason(status), s->date, ctype, (unsigned long long)length, conn_hdr,
                   extra ? extra : "");
  c->out_len += (size_t)n;
  return true;
}

static bool put_bytes(httpd_conn *c, const void *p, size_t n)
{
  if (!conn_reserve(c, n))
    return false;
  if (n > OUT_CAP) /* larger than the batch buffer itself (never for these routes) */
    return conn_send_all(c, p, n, tdl_after(c->srv->cfg.write_timeout)) == 0;
  memcpy(c->out + c->out_len, p, n);
  c->out_len += n;
  return true;
}

/* A short text reply for an error status. */
static bool put_error(httpd_conn *c, int status, bool keep, int minor, bool head_only)
{
  char body[64];
  int n = snprintf(body, sizeof body, "%d %s\n", status, http_reason(status));
  const char *extra = status == 405   ? "Allow: GET, HEAD\r\n"
                      : status == 503 ? "Retry-After: " RETRY_AFTER "\r\n"
                                      : NULL;
  return put_head(c, status, "text/plain", (uint64_t)n, keep, minor, extra) &&
         (head_only || put_bytes(c, body, (size_t)n));
}

/* The file's bytes [pos, size) copied through c->out (pread, then send):
 * where sendfile cannot be used.  The tail stays batched. */
static bool put_file_copy(httpd_conn *c, int fd, off_t pos, off_t size)
{
  while (pos < size) {
    if (c->out_len == OUT_CAP && !conn_flush(c))
      return false;
    ssize_t n = pread(fd, c->out + c->out_len, OUT_CAP - c->out_len, pos);
    if (n <= 0)
      return false; /* the file shrank or failed: the length sent is now wrong, close */
    c->out_len += (size_t)n;
    pos += n;
  }
  return true;
}

/*
 * A file's bytes, after its head: the batch goes first, then sendfile moves
 * the file from the page cache to the socket without a copy through user
 * space.  The socket is non-blocking, so sendfile stops when its buffer is
 * full (a partial count, then EAGAIN): the fiber waits until the client has
 * taken some, each wait bounded by the write timeout, and goes on from where
 * the kernel stopped.  A file system that cannot splice (EINVAL, ENOSYS)
 * falls back to pread and send for the rest.
 */
static bool put_file(httpd_conn *c, int fd, off_t size)
{
  httpd_server *s = c->srv;
  if (size == 0)
    return true;
  if (s->cfg.no_sendfile)
    return put_file_copy(c, fd, 0, size);
#ifdef HTTPD_TLS
  /* sendfile on a TLS connection only where the kernel makes the records
   * (kernel TLS); otherwise the bytes go through OpenSSL. */
  if (c->tls && !(tdl_tls_ktls(c->tls) & TDL_TLS_KTLS_TX))
    return put_file_copy(c, fd, 0, size);
#endif
  if (!conn_flush_more(c))
    return false;
  /* sendfile is a write treadle does not make: what went behind first. */
  if (tdl_fd_flush(c->fd, tdl_after(s->cfg.write_timeout)) < 0)
    return false;
  off_t pos = 0;
  unsigned burst = 0;
  while (pos < size) {
    size_t want = (uint64_t)(size - pos) < SENDFILE_MAX ? (size_t)(size - pos) : SENDFILE_MAX;
    ssize_t n = sendfile(c->fd, fd, &pos, want); /* advances pos by what it sent */
    if (n > 0) {
      s->sendfile_bytes += (uint64_t)n;
      /* A client that keeps up never makes us wait: let the loop's other
       * fibers run now and then, as treadle's own I/O calls do. */
      if (++burst == SENDFILE_BURST && pos < size) {
        burst = 0;
        tdl_fiber_yield();
        if (tdl_fiber_cancelled())
          return false;
      }
      continue;
    }
    if (n == 0)
      return false; /* the file shrank: the length sent is now wrong, close */
    int err = errno;
    if (err == EINTR)
      continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      burst = 0;
      /* tdl_fd_wait asks the kernel first: right after an EAGAIN from a call
       * treadle did not make */
      if (tdl_fd_wait(c->fd, TDL_WRITE, tdl_after(s->cfg.write_timeout)) < 0)
        return false; /* too slow (write timeout), or cancelled */
      continue;
    }
    if (err == EINVAL || err == ENOSYS)
      return put_file_copy(c, fd, pos, size);
    return false; /* EPIPE, ECONNRESET (the client has gone), EIO... */
  }
  return true;
}

/* The Prometheus text of the process and of every loop: a group's, each
 * snapshot taken on its own loop (tdl_metrics_group), or this one. */
static int metrics_text(char **out, tdl_time_t deadline)
{
  tdl_group *g = tdl_group_self();
  unsigned n = g ? tdl_group_size(g) : 1;
  tdl_loop_metrics *m = calloc(n, sizeof *m);
  if (!m)
    return -ENOMEM;
  int e = 0;
  for (unsigned i = 0; i < n && e == 0; i++) {
    m[i].size = sizeof m[i];
    e = g ? tdl_metrics_group(g, i, &m[i], deadline) : tdl_metrics_loop(tdl_fiber_loop(), &m[i]);
  }
  tdl_process_metrics p = {.size = sizeof p};
  if (e == 0)
    e = tdl_metrics_process(&p);
  size_t cap = 4096 + 4096 * (size_t)n;
  char *buf = NULL;
  while (e == 0) {
    char *more = realloc(buf, cap);
    if (!more) {
      e = -ENOMEM;
      break;
    }
    buf = more;
    e = tdl_metrics_write_prometheus(buf, cap, &p, m, n);
    if (e != -ENOSPC)
      break;
    e = 0;
    cap *= 2;
  }
  free(m);
  if (e < 0) {
    free(buf);
    return e;
  }
  *out = buf;
  return e;
}

static bool put_metrics(httpd_conn *c, bool keep, int minor, bool head_only)
{
  char *text = NULL;
  int n = metrics_text(&text, tdl_after(c->srv->cfg.write_timeout));
  if (n < 0)
    return put_error(c, 503, keep, minor, head_only); /* a loop is stopping */
  bool ok = put_head(c, 200, "text/plain; version=0.0.4", (uint64_t)n, keep, minor, NULL) &&
            (head_only || put_bytes(c, text, (size_t)n));
  free(text);
  return ok;
}

static bool put_reply(httpd_conn *c, reply *r, bool keep, int minor)
{
  httpd_server *s = c->srv;
  s->served++;
  if (r->hello) {
    if (minor == 1) { /* the common cases: one memcpy of a prepared response */
      date_refresh(s);
      if (keep)
        return put_bytes(c, s->hello, r->head_only ? s->hello_head_len : s->hello_len);
      return put_bytes(c, s->hello_close, r->head_only ? s->hello_close_head_len : s->hello_close_len);
    }
    return put_head(c, 200, "text/plain", sizeof hello_body - 1, keep, minor, NULL) &&
           (r->head_only || put_bytes(c, hello_body, sizeof hello_body - 1));
  }
  if (r->metrics)
    return put_metrics(c, keep, minor, r->head_only);
  if (r->file >= 0) {
    bool ok = put_head(c, 200, r->ctype, (uint64_t)r->size, keep, minor, NULL) &&
              (r->head_only || put_file(c, r->file, r->size));
    close(r->file);
    r->file = -1;
    return ok;
  }
  return put_error(c, r->status, keep, minor, r->head_only);
}

/* ------------------------------------------------------------------------ */
/* Routes                                                                   */
/* ------------------------------------------------------------------------ */

static const char *content_type(const char *path)
{
  static const struct {
    const char *ext, *type;
  } types[] = {
      {".html", "text/html; charset=utf-8"}, {".htm", "text/html; charset=utf-8"},
      {".txt", "text/plain; charset=utf-8"}, {".css", "text/css"},
      {".js", "text/javascript"},            {".json", "application/json"},
      {".png", "image/png"},                 {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},               {".gif", "image/gif"},
      {".svg", "image/svg+xml"},             {".ico", "image/x-icon"},
  };
  const char *dot = strrchr(path, '.');
  if (dot && !strchr(dot, '/'))
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
      if (strcasecmp(dot, types[i].ext) == 0)
        return types[i].type;
  return "application/octet-stream";
}

/* openat2's argument and flags as in <linux/openat2.h> (a fixed kernel ABI),
 * spelled out here: neither glibc 2.36 nor musl 1.2.3 declares them, and
 * musl-gcc sees no kernel headers. */
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
struct open_how_abi {
  uint64_t flags, mode, resolve;
};
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_BENEATH 0x08

/* Open rel (already checked: no "." or ".." segments) below the root,
 * refusing to leave it even through symlinks.  Linux >= 5.6 resolves the
 * whole path in the kernel with RESOLVE_BENEATH (a symlink pointing inside
 * the root works; one pointing out fails with EXDEV); older kernels walk it
 * one component at a time with O_NOFOLLOW (no symlinks at all). */
static int open_beneath(int rootfd, const char *rel)
{
  struct open_how_abi how = {
      .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY,
      .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
  };
  long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof how);
  if (fd >= 0)
    return (int)fd;
  if (errno != ENOSYS)
    return -errno;
  int dir = rootfd;
  const char *p = rel;
  for (;;) {
    const char *slash = strchr(p, '/');
    char name[256];
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n >= sizeof name) {
      fd = -ENAMETOOLONG;
      break;
    }
    memcpy(name, p, n);
    name[n] = '\0';
    int flags = O_CLOEXEC | O_NOFOLLOW | (slash ? O_PATH | O_DIRECTORY : O_RDONLY | O_NOCTTY);
    int next = openat(dir, name, flags);
    int err = errno;
    if (dir != rootfd)
      close(dir);
    if (next < 0) {
      fd = -err;
      break;
    }
    if (!slash) {
      fd = next;
      break;
    }
    dir = next;
    p = slash + 1;
  }
  return (int)fd;
}

/*
 * The answer for a file that could not be opened or examined (err: a
 * negative errno value).  Only what the error says about the file itself may
 * become 404 or 403.  Running out of fds or memory says nothing about the
 * file (it may well be there): 503 with Retry-After, never "Not Found", or a
 * client, a cache or a crawler would take a passing shortage for the
 * truth.  What is left (EIO...) is the server's failure: 500.
 */
static int open_error_status(int err)
{
  switch (-err) {
  case ENOENT:
  case ENOTDIR:
  case ENAMETOOLONG:
  case ENXIO: /* a socket or a device without its driver: not a file to serve */
  case ENODEV:
    return 404;
  case EACCES:
  case EPERM:
  case EXDEV: /* openat2: the path leads out of the root */
  case ELOOP: /* a symlink where none may be (the fallback's O_NOFOLLOW, magic links) */
    return 403;
  case EMFILE:
  case ENFILE:
  case ENOMEM:
  case ENOBUFS:
  case EAGAIN: /* openat2 RESOLVE_BENEATH: raced with a rename, may be retried */
  case EINTR:
    return 503;
  default:
    return 500;
  }
}

/* "/static/<path>": percent-decode, refuse anything that could name a file
 * outside the root, open it below the root. */
static void route_static(httpd_server *s, const char *path, size_t len, reply *r)
{
  if (s->rootfd < 0) {
    r->status = 404;
    return;
  }
  char rel[1024];
  size_t n = 0, seg = 0; /* seg: where the current segment starts in rel */
  for (size_t i = 0; i <= len; i++) {
    char ch;
    if (i == len || path[i] == '/') {
      size_t sl = n - seg;
      /* empty, "." and ".." segments (also when written %2e) never reach the
       * file system */
      if (sl == 0 || (sl == 1 && rel[seg] == '.') || (sl == 2 && rel[seg] == '.' && rel[seg + 1] == '.')) {
        r->status = 404;
        return;
      }
      if (i == len)
        break;
      ch = '/';
      seg = n + 1;
    } else if (path[i] == '%') {
      /* the parser checked that two hex digits follow */
      unsigned v = 0;
      for (int k = 1; k <= 2; k++) {
        char h = path[i + (size_t)k];
        v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      i += 2;
      if (v == '/' || v == 0) { /* an encoded slash or NUL is never a path */
        r->status = 404;
        return;
      }
      ch = (char)v;
    } else {
      ch = path[i];
    }
    if (n + 1 >= sizeof rel) {
      r->status = 404;
      return;
    }
    rel[n++] = ch;
  }
  rel[n] = '\0';
  int fd = open_beneath(s->rootfd, rel);
  if (fd < 0) {
    r->status = open_error_status(fd);
    return;
  }
  struct stat st;
  int e = fstat(fd, &st) < 0 ? -errno : 0;
  if (e < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    r->status = e < 0 ? open_error_status(e) : 404; /* a directory...: not a file to serve */
    return;
  }
  r->status = 200;
  r->file = fd;
  r->size = st.st_size;
  r->ctype = content_type(rel);
}

/* Decide the reply from the head alone (bodies are not used by any route).
 * OPTIONS * and CONNECT never get here: serve() refuses them. */
static void route(httpd_server *s, const char *buf, const http_request *req, reply *r)
{
  *r = (reply){.status = 404, .file = -1};
  const char *m = buf + req->method.off;
  bool get = req->method.len == 3 && memcmp(m, "GET", 3) == 0;
  bool head = req->method.len == 4 && memcmp(m, "HEAD", 4) == 0;
  r->head_only = head;
  const char *path = buf + req->path.off;
  size_t plen = req->path.len;
  if (plen == 1 && path[0] == '/') {
    r->hello = true;
    r->status = 200;
    return;
  }
  if (s->cfg.metrics && plen == 10 && memcmp(path, "/-/metrics", 10) == 0) {
    r->metrics = get || head;
    r->status = get || head ? 200 : 405;
    return;
  }
  if (plen > 8 && memcmp(path, "/static/", 8) == 0) {
    if (!get && !head) {
      r->status = 405;
      return;
    }
    route_static(s, path + 8, plen - 8, r);
  }
}

/* ------------------------------------------------------------------------ */
/* One connection                                                           */
/* ------------------------------------------------------------------------ */

enum { NEXT = 2, CLOSE = 1 }; /* serve_one's answers besides false (close, no linger) */

/* One request, whose first bytes are buffered.  Returns NEXT to go on with
 * the connection, CLOSE to close it with a linger (an error answer may
 * still be unread by a client that is sending), 0 to close it. */
static __attribute__((noinline)) int serve_one(httpd_conn *c)
{
  httpd_server *s = c->srv;
  http_request req;
  int head = read_head(c, &req);
  if (head == QUIET_CLOSE)
    return 0;
  if (head < 0) { /* malformed, too large, too slow: answer and close */
    put_error(c, -head, false, 1, false);
    return CLOSE;
  }

  if (req.form == HTTP_TARGET_ASTERISK || req.form == HTTP_TARGET_AUTHORITY) {
    /* OPTIONS * and CONNECT: no route serves them.  After a CONNECT the
     * client may already be sending tunnel bytes, which are no request:
     * answer and close. */
    put_error(c, 501, false, req.minor, false);
    return CLOSE;
  }

  reply r;
  route(s, c->in + c->in_off, &req, &r);
  c->in_off += (size_t)head;

  int e = 0;
  bool has_body = req.chunked || req.content_length > 0;
  if (req.expect_other && req.minor >= 1)
    e = -417;
  else if (req.content_length > 0 && (uint64_t)req.content_length > s->cfg.max_body)
    e = -413; /* refuse before reading a byte of it */
  else if (has_body) {
    if (req.expect_continue && req.minor >= 1 && c->in_off == c->in_len)
      put_bytes(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    e = skip_body(c, &req);
  }
  if (e != 0) {
    if (r.file >= 0)
      close(r.file);
    if (e == BODY_GONE)
      return 0;
    put_error(c, -e, false, req.minor, false);
    return CLOSE;
  }

  bool keep = req.keep_alive && !s->stopping;
  if (!put_reply(c, &r, keep, req.minor))
    return 0;
  return keep ? NEXT : 0;
}

/* Serve requests until the connection should close.  Returns true when the
 * close should linger.  Between requests the fiber waits here, above
 * serve_one's frame (conn_wait_request); a pipelined request already
 * buffered is served at once. */
static bool serve(httpd_conn *c)
{
  for (;;) {
    if (c->in_off == c->in_len && !conn_wait_request(c))
      return false;
    int r = serve_one(c);
    if (r != NEXT)
      return r == CLOSE;
  }
}

/* Close after an error answer: stop sending (FIN), and read what the client
 * still sends for a while, so that our answer is not destroyed by the RST a
 * close with unread input would cause. */
static void linger_close(httpd_conn *c)
{
#ifdef HTTPD_TLS
  if (c->tls && tdl_tls_shutdown(c->tls, tdl_after(LINGER_TIME)) < 0)
    return;
#endif
  if (tdl_net_shutdown(c->fd, SHUT_WR) == 0) {
    tdl_time_t deadline = tdl_after(LINGER_TIME);
    size_t total = 0;
    char sink[4096];
    while (total < LINGER_BYTES) {
      ssize_t n = conn_recv(c, sink, sizeof sink, deadline);
      if (n <= 0)
        break;
      total += (size_t)n;
    }
  }
}

static void conn_link(httpd_server *s, httpd_conn *c)
{
  if (!s->conns) {
    c->next = c->prev = c;
    s->conns = c;
  } else {
    c->next = s->conns;
    c->prev = s->conns->prev;
    c->prev->next = c;
    c->next->prev = c;
  }
}

static void conn_unlink(httpd_server *s, httpd_conn *c)
{
  if (c->next == c)
    s->conns = NULL;
  else {
    c->prev->next = c->next;
    c->next->prev = c->prev;
    if (s->conns == c)
      s->conns = c->next;
  }
}

/* A connection counted in s->nconns (from its accept: its fiber may not
 * have run yet) has closed. */
static void conn_done(httpd_server *s)
{
  s->nconns--;
  if (s->stopping && s->nconns == 0 && s->main)
    tdl_fiber_unpark(s->loop, s->main);
}

/* The connection tracker, set up on the server's loop at its first use:
 * httpd_init may run before the loop does. */
static int track_ready(httpd_server *s)
{
  if (s->track.loop)
    return 0;
  tdl_time_t first = s->cfg.first_byte_timeout ? s->cfg.first_byte_timeout : s->cfg.read_timeout;
  tdl_conns_options o = {
      .max = s->cfg.max_conns ? s->cfg.max_conns : UINT_MAX, /* UINT_MAX: as the fds allow */
      .first_byte = first ? first : TDL_FOREVER,
      .idle = s->cfg.idle_timeout ? s->cfg.idle_timeout : TDL_FOREVER,
  };
  return tdl_conns_init(&s->track, s->loop, &o);
}

/* Take connection fd (s->nconns already counts it) and set it up, through
 * its TLS handshake: the connection, or NULL when it was not taken (fd
 * closed, counted done).  c->ready says whether it may be served.  Not
 * inlined, nor is conn_end: an idle connection's fiber then keeps neither
 * frame on its stack, only conn_serve's small one (compaction copies less). */
static __attribute__((noinline)) httpd_conn *conn_open(httpd_server *s, int fd)
{
  /* On the heap, not this fiber's stack: the server's list and the tracker
   * reach it while the fiber waits, and a compacted fiber's stack may not be
   * read or written then (fiber.h). */
  httpd_conn *c = malloc(sizeof *c);
  if (!c) {
    tdl_close(fd);
    conn_done(s);
    return NULL;
  }
  c->srv = s;
  c->fd = fd;
  c->tls = NULL;
  c->fiber = tdl_fiber_self();
  c->in_off = c->in_len = c->out_len = 0;
  c->in_cap = (size_t)s->cfg.max_head + IN_SPARE;
  c->buf = NULL;
  c->in = c->out = NULL;
  c->big = c->in_cap <= IN_LOCAL ? NULL : malloc(c->in_cap);
  /* At the cap with every connection busy: not taken (tdl_conns). */
  if (s->stopping || (c->in_cap > IN_LOCAL && !c->big) || track_ready(s) < 0 ||
      tdl_conns_admit(&s->track, &c->track, c->fiber) < 0) {
    free(c->big);
    free(c);
    tdl_close(fd);
    conn_done(s);
    return NULL;
  }
  /* Answers are sent whole, one send per batch: no need for Nagle's delay. */
  tdl_net_nodelay(fd, true);
  /* On a uring loop the kernel receives requests as they come, with no
   * receive request per read; every read of fd here is treadle's, and it is
   * closed with tdl_close, as receiving ahead asks.  HTTPS turns it on
   * after its handshake (below).  -ENOTSUP: not a uring loop (turning it
   * off, which changes nothing, says the same). */
  bool want_ahead = !s->cfg.no_readahead && !s->cfg.tls;
  int ahead = tdl_fd_readahead(fd, want_ahead);
  /* An idle connection waits with no buffers taken where that costs no
   * system call (conn_wait_request): on HTTPS, on epoll and poll loops, and
   * on uring loops receiving ahead (the wait is for what came ahead).  Not
   * on a uring loop with a receive request per read: that request is the
   * wait, and needs the buffer. */
  c->prewait = s->cfg.tls || ahead == -ENOTSUP || (ahead == 0 && want_ahead);
  if (!c->prewait && !conn_take_buf(c))
    c->prewait = true; /* out of memory now: the first request tries again */
  /* And answers are sent behind: copied, and handed to the kernel with the
   * loop's next io_uring_enter instead of a send(2) each.  HTTPS turns both
   * on after its handshake (tls.h). */
  if (!s->cfg.no_writebehind && !s->cfg.tls)
    (void)tdl_fd_writebehind(fd, true);
  conn_link(s, c);
  c->ready = true;
#ifdef HTTPD_TLS
  /* The handshake within the first-byte deadline: a client that says
   * nothing, half a hello, or plaintext is closed quietly. */
  if (s->cfg.tls) {
    tdl_time_t first = s->cfg.first_byte_timeout ? s->cfg.first_byte_timeout : s->cfg.read_timeout;
    c->ready = tdl_tls_new(&c->tls, s->cfg.tls, fd, NULL) == 0 &&
               tdl_tls_handshake(c->tls, first ? tdl_after(first) : TDL_FOREVER) == 0;
    if (c->ready && !s->cfg.no_readahead && tdl_tls_fiber_io(c->tls))
      (void)tdl_fd_readahead(fd, true);
    if (c->ready && !s->cfg.no_writebehind && tdl_tls_fiber_io(c->tls))
      (void)tdl_fd_writebehind(fd, true);
  }
#endif
  return c;
}

/* Close connection c after serve (linger: whether the close should). */
static __attribute__((noinline)) void conn_end(httpd_conn *c, bool linger)
{
  httpd_server *s = c->srv;
#ifdef HTTPD_TLS
  if (c->tls && c->ready && conn_flush(c) && !linger)
    (void)tdl_tls_shutdown(c->tls, tdl_after(s->cfg.write_timeout));
#endif
  if (conn_flush(c) && linger)
    linger_close(c);
#ifdef HTTPD_TLS
  tdl_tls_free(c->tls);
#endif
  tdl_conn_release(&c->track);
  tdl_close(c->fd);
  conn_unlink(s, c);
  conn_drop_buf(c);
  free(c->big);
  free(c);
  conn_done(s);
}

/* Serve connection fd in the calling fiber until it closes; s->nconns
 * already counts it. */
static void conn_serve(httpd_server *s, int fd)
{
  httpd_conn *c = conn_open(s, fd);
  if (c)
    conn_end(c, c->ready && serve(c));
}

/* The accept fiber's hand-over: the server and the fd, until the
 * connection's fiber has taken them. */
typedef struct conn_start_arg {
  httpd_server *srv;
  int fd;
} conn_start_arg;

static void *conn_fiber(void *arg)
{
  conn_start_arg a = *(conn_start_arg *)arg;
  free(arg);
  conn_serve(a.srv, a.fd);
  return NULL;
}

static int conn_start(httpd_server *s, int fd)
{
  conn_start_arg *a = malloc(sizeof *a);
  if (!a)
    return -ENOMEM;
  *a = (conn_start_arg){s, fd};
  tdl_fiber_options opts = {.name = "http-conn", .stack_size = httpd_conn_stack_size(&s->cfg), .detached = true};
  int e = tdl_fiber_spawn(NULL, s->loop, conn_fiber, a, &opts);
  if (e < 0)
    free(a);
  else
    s->nconns++; /* from the accept, so that shutdown waits for it too */
  return e;
}

void httpd_serve_conn(httpd_server *s, int fd)
{
  if (!s->loop)
    s->loop = tdl_fiber_loop();
  s->nconns++;
  conn_serve(s, fd);
}

/* ------------------------------------------------------------------------ */
/* Accepting, running, shutting down                                        */
/* ------------------------------------------------------------------------ */

static void *accept_fiber(void *arg)
{
  httpd_server *s = arg;
  /* On io_uring, accept ahead too: a connection that comes while the
   * previous ones are served costs no accept4 (fiber.h).  Elsewhere this
   * is -ENOTSUP, and accepting works as ever. */
  if (!s->cfg.no_readahead)
    (void)tdl_fd_readahead(s->lfd, true);
  for (;;) {
    /* net.h's accept skips connections that died in the queue, and when the
     * process is out of fds it sheds the pending ones and backs off instead
     * of spinning: -EMFILE and friends just mean "try again". */
    int fd = tdl_net_accept(s->lfd, NULL, TDL_FOREVER);
    if (fd == -ECANCELED || fd == -EBADF || fd == -EINVAL)
      break;
    if (fd < 0)
      continue;
    if (conn_start(s, fd) < 0)
      tdl_close(fd);
    /* At the cap: let the new connection's fiber take its place (evicting
     * the connection idle longest) and that one close, before accepting
     * more: a burst must not run the process out of fds. */
    else if (tdl_conns_full(&s->track))
      tdl_fiber_yield();
  }
  return NULL;
}

static void on_signal(tdl_loop *loop, tdl_signal *sig, int signum)
{
  (void)loop;
  (void)signum;
  httpd_shutdown(sig->data);
}

void httpd_shutdown(httpd_server *s)
{
  if (!s->loop)
    return;
  if (s->stopping) { /* asked twice: no more grace */
    s->cfg.grace = 0;
  }
  s->stopping = true;
  if (s->main)
    tdl_fiber_unpark(s->loop, s->main);
}

static void cancel_conns(httpd_server *s)
{
  httpd_conn *c = s->conns;
  if (!c)
    return;
  do {
    tdl_fiber_cancel(s->loop, c->fiber);
    c = c->next;
  } while (c != s->conns);
}

int httpd_run(httpd_server *s)
{
  if (!tdl_fiber_self())
    return -EPERM;
  s->loop = tdl_fiber_loop();
  s->main = tdl_fiber_self();
  date_refresh(s);
  int e = track_ready(s);
  if (e < 0)
    return e;
  if (s->cfg.handle_signals) {
    s->sigint.cb = s->sigterm.cb = on_signal;
    if ((e = tdl_signal_start(s->loop, &s->sigint, SIGINT)) < 0)
      return e;
    if ((e = tdl_signal_start(s->loop, &s->sigterm, SIGTERM)) < 0) {
      tdl_signal_stop(s->loop, &s->sigint);
      return e;
    }
  }
  /* Before any connection's fiber is spawned: only those spawned after it
   * are compacted. */
  if (s->cfg.compact_idle && (e = tdl_fiber_compact_idle(s->loop, s->cfg.compact_idle)) < 0)
    goto out;
  tdl_timer_init(&s->pool_timer, pool_trim_cb, s);
  if ((e = tdl_timer_start(s->loop, &s->pool_timer, POOL_TRIM, POOL_TRIM)) < 0)
    goto out;
  if (s->lfd >= 0) /* else connections come through httpd_serve_conn */
    e = tdl_fiber_spawn(&s->acceptor, s->loop, accept_fiber, s, &(tdl_fiber_options){.name = "http-accept"});
  if (e == 0) {
    while (!s->stopping)
      tdl_fiber_park(TDL_FOREVER);

    /* 1. Stop accepting (with httpd_serve_conn: whoever accepts stops;
     *    connections that still arrive are closed at once). */
    if (s->lfd >= 0) {
      tdl_fiber_cancel(s->loop, s->acceptor);
      tdl_fiber_join(s->acceptor, NULL, TDL_FOREVER);
      tdl_close(s->lfd);
      s->lfd = -1;
    }
    /* 2. Idle connections close now; busy ones finish their request and
     *    close (read_head refuses new requests while stopping). */
    tdl_conns_evict_idle(&s->track, SIZE_MAX);
    /* 3. After the grace period (or at a second signal), cancel what is
     *    left; each connection's blocking calls then fail and it closes. */
    tdl_time_t deadline = tdl_after(s->cfg.grace);
    bool cut = false;
    while (s->nconns > 0) {
      if (cut) {
        tdl_fiber_park(TDL_FOREVER); /* the last connection to close wakes us */
      } else if (s->cfg.grace == 0 || tdl_fiber_park(deadline) == -ETIMEDOUT) {
        cancel_conns(s);
        cut = true;
      }
    }
  }
  tdl_timer_stop(s->loop, &s->pool_timer);
  pool_trim(s, true);
out:
  if (s->cfg.compact_idle)
    (void)tdl_fiber_compact_idle(s->loop, 0);
  if (s->cfg.handle_signals) {
    tdl_signal_stop(s->loop, &s->sigint);
    tdl_signal_stop(s->loop, &s->sigterm);
  }
  return e;
}
